//! The repository stands on its own: no file points outside it, every "SPEC §N" names a section
//! of `docs/spec.md`, the README and both editors give the same install command, and
//! `ARCHITECTURE.md`'s code map names exactly the modules of `src/`.

use std::path::{Path, PathBuf};

/// Where pen's files live, relative to the repository root; build output and installed
/// dependencies are left out by the `.gitignore` files the walk honours.
const CHECKED: &[&str] = &[
    "README.md",
    "ARCHITECTURE.md",
    "Cargo.toml",
    ".ci",
    "benches",
    "docs",
    "editors",
    "examples",
    "scripts",
    "src",
    "tests",
];

/// Marks of a reference to something outside the repository: the folder of project documents
/// that once sat beside it, the documents that lived there, and this machine's paths. Spelt in
/// pieces so this file does not match itself.
fn outside_marks() -> Vec<String> {
    [
        ["../", "shared"].concat(),
        ["shared ", "folder"].concat(),
        ["/work", "/"].concat(),
        ["SPEC", ".md"].concat(),
        ["LOCAL-", "MODEL"].concat(),
        ["PEERS", ".md"].concat(),
        ["EDITOR-", "TESTING"].concat(),
        ["STYLE", ".md"].concat(),
        ["ADR-", "0069"].concat(),
        ["seeds", "/"].concat(),
    ]
    .into()
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every text file of the checked paths, with its contents.
fn text_files() -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    for top in CHECKED {
        for entry in ignore::WalkBuilder::new(root().join(top))
            .hidden(false)
            .build()
        {
            let entry = entry.expect("walk the repository");
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                continue;
            }
            let path = entry.path().to_path_buf();
            // Images and other binary files cannot hold a reference a reader would follow.
            if let Ok(text) = std::fs::read_to_string(&path) {
                files.push((path, text));
            }
        }
    }
    assert!(
        files.len() > 50,
        "the walk found only {} files",
        files.len()
    );
    files
}

#[test]
fn no_file_refers_to_anything_outside_the_repository() {
    let marks = outside_marks();
    let mut found = Vec::new();
    for (path, text) in text_files() {
        for (number, line) in text.lines().enumerate() {
            for mark in &marks {
                if line.contains(mark.as_str()) {
                    let shown = path.strip_prefix(root()).unwrap_or(&path).display();
                    found.push(format!("{shown}:{}: {mark}: {line}", number + 1));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "references outside the repository (cite docs/spec.md or say it in place):\n{}",
        found.join("\n")
    );
}

#[test]
fn every_spec_citation_names_a_section_of_docs_spec_md() {
    let spec = std::fs::read_to_string(root().join("docs/spec.md")).expect("docs/spec.md");
    let sections: Vec<String> = spec
        .lines()
        .filter_map(|line| line.strip_prefix("## "))
        .filter_map(|title| title.split('.').next())
        .map(str::to_string)
        .collect();
    let cite = regex::Regex::new(r"SPEC §(\d+)").expect("regex");
    let mut dangling = Vec::new();
    for (path, text) in text_files() {
        for found in cite.captures_iter(&text) {
            if !sections.iter().any(|s| *s == found[1]) {
                let shown = path.strip_prefix(root()).unwrap_or(&path).display();
                dangling.push(format!("{shown}: {}", &found[0]));
            }
        }
    }
    assert!(
        dangling.is_empty(),
        "citations of sections docs/spec.md does not have ({sections:?}):\n{}",
        dangling.join("\n")
    );
}

#[test]
fn the_readme_and_both_editors_give_the_same_install_command() {
    let install = "cargo install --locked --path .";
    for file in [
        "README.md",
        "editors/neovim/lua/pen/health.lua",
        "editors/neovim/doc/pen.txt",
        "editors/vscode/src/daemon.ts",
    ] {
        let text = std::fs::read_to_string(root().join(file)).expect(file);
        assert!(text.contains(install), "{file} does not say `{install}`");
    }
}

/// The most characters `ARCHITECTURE.md` may hold: a map read whole before a change, not an
/// atlas (issue 27).
const ARCHITECTURE_MAX_CHARS: usize = 30_000;

/// The modules of `src/` the code map must name: every top-level module (`src/NAME.rs` or
/// `src/NAME/`, less the crate roots `lib` and `main`) and every folder of submodules below
/// them, as its path under `src/` (`tools/search`).
fn source_modules() -> std::collections::BTreeSet<String> {
    let src = root().join("src");
    let mut modules = std::collections::BTreeSet::new();
    for entry in ignore::WalkBuilder::new(&src).hidden(false).build() {
        let entry = entry.expect("walk src/");
        let Ok(relative) = entry.path().strip_prefix(&src) else {
            continue;
        };
        let relative = relative.to_string_lossy().into_owned();
        let is_dir = entry.file_type().is_some_and(|t| t.is_dir());
        if is_dir && !relative.is_empty() {
            modules.insert(relative);
        } else if !is_dir
            && !relative.contains('/')
            && let Some(stem) = relative.strip_suffix(".rs")
            && stem != "lib"
            && stem != "main"
        {
            modules.insert(stem.to_string());
        }
    }
    modules
}

/// The names the code map gives: the backticked text of each `###` and `####` heading between
/// `## Code map` and the next `## ` heading, with the line it is on.
fn code_map_names(architecture: &str) -> Vec<(String, usize)> {
    let mut names = Vec::new();
    let mut in_map = false;
    for (number, line) in architecture.lines().enumerate() {
        if let Some(title) = line.strip_prefix("## ") {
            in_map = title.trim() == "Code map";
            continue;
        }
        let heading = line
            .strip_prefix("#### ")
            .or_else(|| line.strip_prefix("### "));
        if let (true, Some(heading)) = (in_map, heading) {
            let name = heading.trim().trim_matches('`').to_string();
            names.push((name, number + 1));
        }
    }
    names
}

#[test]
fn the_code_map_names_exactly_the_modules_of_src() {
    let architecture =
        std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let chars = architecture.chars().count();
    assert!(
        chars <= ARCHITECTURE_MAX_CHARS,
        "ARCHITECTURE.md holds {chars} characters, over {ARCHITECTURE_MAX_CHARS}: keep what \
         changes rarely, move figures to the README and history to the commits"
    );
    let modules = source_modules();
    // The reader must see modules that are known to exist, or the check proves nothing.
    for known in ["limits", "tools", "tools/search", "agent", "cli"] {
        assert!(modules.contains(known), "{known} not found under src/");
    }
    let named = code_map_names(&architecture);
    let mut problems = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for (name, line) in &named {
        if !seen.insert(name.clone()) {
            problems.push(format!("ARCHITECTURE.md:{line}: `{name}` is named twice"));
        }
        // The editors are mapped beside the crate: their folders must exist.
        let exists = if name.starts_with("editors/") {
            root().join(name).is_dir()
        } else {
            modules.contains(name)
        };
        if !exists {
            problems.push(format!(
                "ARCHITECTURE.md:{line}: the code map names `{name}`, which is no module of \
                 src/ (nor a folder of editors/)"
            ));
        }
    }
    for module in modules.iter().filter(|m| !seen.contains(*m)) {
        problems.push(format!(
            "src/{module} is missing from the code map: add a `### `{module}`` (or `####` \
             for a folder of submodules) heading with a short paragraph"
        ));
    }
    // The map reads in `src/lib.rs`'s reading order.
    let lib = std::fs::read_to_string(root().join("src/lib.rs")).expect("src/lib.rs");
    let reading_order: Vec<&str> = lib
        .lines()
        .filter_map(|line| line.strip_prefix("pub mod "))
        .map(|name| name.trim_end_matches(';'))
        .collect();
    let map_order: Vec<&str> = named
        .iter()
        .map(|(name, _)| name.as_str())
        .filter(|name| reading_order.contains(name))
        .collect();
    if map_order != reading_order {
        problems.push(format!(
            "the code map's modules are not in src/lib.rs's order:\n  map: {}\n  lib: {}",
            map_order.join(" "),
            reading_order.join(" ")
        ));
    }
    assert!(
        problems.is_empty(),
        "ARCHITECTURE.md's code map and src/ disagree:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_code_map_reader_takes_only_the_code_map_headings() {
    let text = "# Architecture\n## Bird's-eye view\n### `nowhere`\n## Code map\n### `tools`\n\
                text\n#### `tools/search`\n## Cross-cutting concerns\n### `elsewhere`\n";
    assert_eq!(
        code_map_names(text),
        vec![("tools".to_string(), 5), ("tools/search".to_string(), 7)]
    );
}

/// The lower layers of pen: the modules below the agent, sessions and the daemon. Among them
/// references may not form a cycle, so each can be read, tested and changed without the ones
/// above it (issue 13, item 7).
const LOWER_LAYERS: &[&str] = &[
    "limits",
    "bytes",
    "text",
    "config",
    "workspace",
    "documents",
    "tools",
    "watch",
    "transport",
];

/// Cycles among the other (upper-layer) modules that are known and still to be broken, each
/// given as the set of modules it runs through. Empty: pen has none today. A cycle that appears
/// must be broken or listed here, with a comment saying why it is allowed for now; a listed
/// cycle that is gone must be removed.
const ALLOWED_CYCLES: &[&[&str]] = &[];

/// The references of each top-level module of `src/` to the others, as
/// `(from, to) -> first place it is made`. A reference is a `crate::NAME` path anywhere outside
/// a comment, or a name in a `use crate::{…}` group; a file in `src/NAME/` belongs to `NAME`.
fn module_references() -> std::collections::BTreeMap<(String, String), String> {
    let path_reference = regex::Regex::new(r"\bcrate::([a-z_][a-z0-9_]*)").expect("regex");
    let group = regex::Regex::new(r"\bcrate::\{").expect("regex");
    let mut references = std::collections::BTreeMap::new();
    for (path, text) in text_files() {
        let Ok(relative) = path.strip_prefix(root().join("src")) else {
            continue;
        };
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let first = relative
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .unwrap_or_default();
        let from = first.strip_suffix(".rs").unwrap_or(first);
        if from == "lib" || from == "main" {
            continue;
        }
        // Comments cite modules without depending on them; a line's code ends where `//` starts.
        let code: Vec<&str> = text
            .lines()
            .map(|line| line.find("//").map_or(line, |at| &line[..at]))
            .collect();
        let mut add = |to: &str, number: usize| {
            if to != from {
                let place = format!("{}:{}", relative.display(), number + 1);
                references
                    .entry((from.to_string(), to.to_string()))
                    .or_insert(place);
            }
        };
        for (number, line) in code.iter().enumerate() {
            for found in path_reference.captures_iter(line) {
                add(&found[1], number);
            }
        }
        // `use crate::{a::X, b}` may span lines: the names at the group's top level count.
        let joined = code.join("\n");
        for start in group.find_iter(&joined) {
            let number = joined[..start.start()].matches('\n').count();
            let mut depth = 0;
            let mut name = String::new();
            let mut at_item_start = true;
            for c in joined[start.end()..].chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => at_item_start = true,
                    c if depth == 0 && at_item_start && (c.is_alphanumeric() || c == '_') => {
                        name.push(c);
                        continue;
                    }
                    _ => {}
                }
                if !name.is_empty() {
                    add(&name, number);
                    name.clear();
                    at_item_start = false;
                }
            }
        }
    }
    references
}

/// A cycle in `edges` among `nodes`, as the modules it passes through with the first one
/// repeated at the end, or `None`.
fn find_cycle(nodes: &[&str], edges: &[(String, String)]) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &[(String, String)],
        nodes: &[&str],
        path: &mut Vec<String>,
        done: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.iter().any(|n| n == node) {
            return None;
        }
        path.push(node.to_string());
        for (_, to) in edges
            .iter()
            .filter(|(from, to)| from == node && nodes.contains(&to.as_str()))
        {
            if let Some(cycle) = visit(to, edges, nodes, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.push(node.to_string());
        None
    }
    let mut done = Vec::new();
    nodes
        .iter()
        .find_map(|node| visit(node, edges, nodes, &mut Vec::new(), &mut done))
}

/// The cycle with the place of each of its references, for a failure message.
fn described(
    cycle: &[String],
    references: &std::collections::BTreeMap<(String, String), String>,
) -> String {
    cycle
        .windows(2)
        .map(|pair| {
            let place = &references[&(pair[0].clone(), pair[1].clone())];
            format!("{} -> {} ({place})", pair[0], pair[1])
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[test]
fn the_cycle_finder_names_a_cycle_and_passes_a_layered_graph() {
    let edges = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    };
    let nodes = ["a", "b", "c", "d"];
    let layered = edges(&[("d", "c"), ("c", "a"), ("d", "a"), ("b", "a")]);
    assert_eq!(find_cycle(&nodes, &layered), None);
    let cyclic = edges(&[("d", "c"), ("c", "b"), ("b", "d"), ("b", "a")]);
    assert_eq!(
        find_cycle(&nodes, &cyclic),
        Some(vec!["b".into(), "d".into(), "c".into(), "b".into()])
    );
    // An edge to a module outside the checked set is not followed.
    assert_eq!(find_cycle(&["b", "c", "d"][..2], &cyclic), None);
}

#[test]
fn the_lower_layers_reference_each_other_without_a_cycle() {
    let references = module_references();
    // The reader must see the references that are known to exist, or the check proves nothing.
    for known in [
        ("tools", "workspace"),
        ("tools", "limits"),
        ("watch", "limits"),
    ] {
        assert!(
            references.contains_key(&(known.0.to_string(), known.1.to_string())),
            "no reference {known:?} found; the module reader is broken"
        );
    }
    let edges: Vec<(String, String)> = references.keys().cloned().collect();
    if let Some(cycle) = find_cycle(LOWER_LAYERS, &edges) {
        panic!(
            "the lower layers reference each other in a cycle: {}. Move what both need to a \
             module below both.",
            described(&cycle, &references)
        );
    }
}

#[test]
fn every_module_cycle_is_a_known_one() {
    let references = module_references();
    let mut edges: Vec<(String, String)> = references.keys().cloned().collect();
    let modules: std::collections::BTreeSet<String> = edges
        .iter()
        .flat_map(|(a, b)| [a.clone(), b.clone()])
        .collect();
    let modules: Vec<&str> = modules.iter().map(String::as_str).collect();
    let mut found = Vec::new();
    // Each cycle found is recorded and one of its references dropped, until none is left.
    while let Some(cycle) = find_cycle(&modules, &edges) {
        let mut members: Vec<String> = cycle[1..].to_vec();
        members.sort();
        let known = ALLOWED_CYCLES.iter().any(|allowed| {
            let mut allowed: Vec<String> = allowed.iter().map(|m| m.to_string()).collect();
            allowed.sort();
            allowed == members
        });
        if !known {
            panic!(
                "a cycle among pen's modules: {}. Break it, or list it in ALLOWED_CYCLES \
                 saying why.",
                described(&cycle, &references)
            );
        }
        found.push(members);
        let last = (
            cycle[cycle.len() - 2].clone(),
            cycle[cycle.len() - 1].clone(),
        );
        edges.retain(|edge| *edge != last);
    }
    for allowed in ALLOWED_CYCLES {
        let mut allowed: Vec<String> = allowed.iter().map(|m| m.to_string()).collect();
        allowed.sort();
        assert!(
            found.contains(&allowed),
            "{allowed:?} is in ALLOWED_CYCLES but is no longer a cycle: remove it"
        );
    }
}

/// The words of a constant's name (split at `_`) that say it bounds bytes, lines, counts or
/// time: a `MAX_…`, a `…_TIMEOUT`, a `…_BYTES`.
const LIMIT_WORDS: &[&str] = &[
    "MAX", "MIN", "LIMIT", "CAP", "TIMEOUT", "WAIT", "BYTES", "LINES", "ENTRIES", "FILES", "ROWS",
    "PAGE", "CHUNK", "CHUNKS", "ATTEMPTS", "RETRIES", "SHOWN", "KEPT", "QUEUED", "TOKENS", "SECS",
    "DEPTH",
];

/// Constants outside `src/limits.rs` whose names read like limits but that are facts the
/// outside world fixes, each `(file, name)` with why it stays beside the code it describes. A
/// listed constant that is gone must be removed.
const NOT_LIMITS: &[(&str, &str)] = &[
    // What a private key looks like: the recognizer's definition of armor, JWK members and key
    // body lines (PEM and PGP use 64 characters a line, OpenSSH 70, MIME 76), not a bound on
    // work pen does.
    ("src/tools/keys.rs", "MAX_LABEL"),
    ("src/tools/keys.rs", "MIN_JWK_VALUE"),
    ("src/tools/keys.rs", "MAX_BODY_RUN"),
    // Anthropic's documented minimum cacheable prompt, the default row of the table beside it.
    ("src/providers/cache.rs", "DEFAULT_MIN_CACHEABLE_TOKENS"),
    // Arithmetic: the sums an f64 holds exactly (below 2^53), not a bound on input.
    ("src/budget/estimate.rs", "SUM_TOTAL_LIMIT"),
];

/// The lines of a Rust file that are built outside tests: an item after `#[cfg(test)]` (a
/// `mod x;`, or everything up to its closing brace) is left out, as are whole test files
/// (`tests.rs`, `*_tests.rs`), with each kept line's number.
fn non_test_lines(path: &Path, text: &str) -> Vec<(usize, String)> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    if name == "tests.rs" || name.ends_with("_tests.rs") {
        return Vec::new();
    }
    let mut kept = Vec::new();
    // Inside a test item: its brace depth, and whether its first brace was seen.
    let mut skipping: Option<(i64, bool)> = None;
    for (number, line) in text.lines().enumerate() {
        let code = line.find("//").map_or(line, |at| &line[..at]);
        if let Some((depth, opened)) = &mut skipping {
            for c in code.chars() {
                match c {
                    '{' => {
                        *depth += 1;
                        *opened = true;
                    }
                    '}' => *depth -= 1,
                    _ => {}
                }
            }
            if (*opened && *depth <= 0) || (!*opened && code.contains(';')) {
                skipping = None;
            }
            continue;
        }
        if code.trim() == "#[cfg(test)]" {
            skipping = Some((0, false));
            continue;
        }
        kept.push((number + 1, code.to_string()));
    }
    kept
}

/// The limit-like definitions and literals of one file (`shown`, relative to the repository)
/// in built (non-test) code, as `(line number, code)`. The rule, narrow so that it names only
/// bounds:
/// - a `const` or `static` of type `Duration` (a time cap), or of an unsigned integer type
///   (`usize`, `u64`, `u32`, `u16`) whose name has one of [`LIMIT_WORDS`], unless listed in
///   [`NOT_LIMITS`];
/// - a `Duration::from_secs`/`from_millis`/`from_micros`/`from_nanos` of a number literal (a
///   time cap written in place).
///
/// Other integer constants (an error code, a format's field length, a protocol version), floats
/// (a similarity cut-off) and test code are not limits here.
fn limit_like_lines(shown: &str, text: &str) -> Vec<(usize, String)> {
    let item = regex::Regex::new(
        r"^\s*(?:pub(?:\([a-z]+\))?\s+)?(?:const|static)\s+([A-Z][A-Z0-9_]*)\s*:\s*(usize|u64|u32|u16|(?:std::time::)?Duration)\s*=",
    )
    .expect("regex");
    let literal =
        regex::Regex::new(r"Duration::from_(?:secs|millis|micros|nanos)\(\s*[0-9]").expect("regex");
    non_test_lines(Path::new(shown), text)
        .into_iter()
        .filter(|(_, code)| {
            let named = item.captures(code).is_some_and(|found| {
                let (name, ty) = (&found[1], &found[2]);
                let limit_like =
                    ty.ends_with("Duration") || name.split('_').any(|w| LIMIT_WORDS.contains(&w));
                limit_like && !NOT_LIMITS.contains(&(shown, name))
            });
            named || literal.is_match(code)
        })
        .collect()
}

#[test]
fn the_limit_rule_names_bounds_and_passes_other_constants() {
    let sample = "const MAX_THINGS: usize = 4;\n\
                  pub(crate) const READ_TIMEOUT: std::time::Duration = x;\n\
                  static KEPT_WALKS: u64 = 8;\n\
                  const PARSE_ERROR: i64 = -32700;\n\
                  const PRELUDE_LEN: usize = 12;\n\
                  const CUTOFF: f32 = 0.6;\n\
                  const MAX_LABEL: usize = 64;\n\
                  let wait = Duration::from_millis(500);\n\
                  let wait = Duration::from_secs(config.secs);\n\
                  #[cfg(test)]\n\
                  mod tests {\n    const MAX_IN_TESTS: usize = 1;\n}\n\
                  #[cfg(test)]\n\
                  mod law_tests;\n\
                  const MAX_AFTER: usize = 2;\n";
    let found: Vec<usize> = limit_like_lines("src/tools/keys.rs", sample)
        .into_iter()
        .map(|(number, _)| number)
        .collect();
    assert_eq!(found, [1, 2, 3, 8, 16]);
    // MAX_LABEL is listed in NOT_LIMITS for keys.rs only.
    assert!(
        limit_like_lines("src/x.rs", sample)
            .iter()
            .any(|(n, _)| *n == 7)
    );
    assert!(limit_like_lines("src/a/tests.rs", sample).is_empty());
}

#[test]
fn limits_are_defined_only_in_limits_rs() {
    let mut found = Vec::new();
    for (path, text) in text_files() {
        let Ok(relative) = path.strip_prefix(root()) else {
            continue;
        };
        let shown = relative.display().to_string();
        if !shown.starts_with("src/") || !shown.ends_with(".rs") || shown == "src/limits.rs" {
            continue;
        }
        for (number, code) in limit_like_lines(&shown, &text) {
            found.push(format!("{shown}:{number}: {}", code.trim()));
        }
    }
    assert!(
        found.is_empty(),
        "limit-like constants or literals outside src/limits.rs (move each to src/limits.rs \
         with its default and why, or, if it is a fact of a format rather than a bound pen \
         chooses, list it in NOT_LIMITS saying why):\n{}",
        found.join("\n")
    );
    for (file, name) in NOT_LIMITS {
        let text = std::fs::read_to_string(root().join(file)).expect(file);
        assert!(
            text.contains(&format!("const {name}:")),
            "{file} no longer defines {name}: remove it from NOT_LIMITS"
        );
    }
}
