//! Tools declare themselves (issue 27): outside `src/tools/`, pen's code asks a tool's spec
//! instead of matching its name, and the editors render what pen sends of a call instead of
//! matching tool names. Test code may name tools as data.

use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The files under `dir` (relative to the repository root) whose names end in `extension`.
fn files(dir: &str, extension: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in ignore::WalkBuilder::new(root().join(dir)).build() {
        let entry = entry.expect("walk the repository");
        let path = entry.path();
        if entry.file_type().is_some_and(|t| t.is_file())
            && path.to_string_lossy().ends_with(extension)
        {
            found.push(path.to_path_buf());
        }
    }
    assert!(!found.is_empty(), "no {extension} file under {dir}");
    found
}

/// The length of the string or character literal that starts `text`, if one does (`"…"`,
/// `r#"…"#`, `'x'`, `'\n'`); a lifetime (`'a`) is none.
fn literal_len(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    if let Some(rest) = text.strip_prefix('r') {
        let hashes = rest.len() - rest.trim_start_matches('#').len();
        if rest[hashes..].starts_with('"') {
            let close = format!("\"{}", "#".repeat(hashes));
            let body = 1 + hashes + 1;
            return text[body..].find(&close).map(|at| body + at + close.len());
        }
        return None;
    }
    match bytes.first()? {
        b'"' => {
            let mut at = 1;
            while at < bytes.len() {
                match bytes[at] {
                    b'\\' => at += 2,
                    b'"' => return Some(at + 1),
                    _ => at += 1,
                }
            }
            None
        }
        b'\'' => {
            let after = &text[1..];
            let mut chars = after.char_indices();
            match chars.next()? {
                // An escape ('\n', '\'', '\u{…}'): the quote after the escaped character.
                (_, '\\') => after.get(2..)?.find('\'').map(|at| 1 + 2 + at + 1),
                // One character and its closing quote; else a lifetime.
                _ => match chars.next()? {
                    (at, '\'') => Some(1 + at + 1),
                    _ => None,
                },
            }
        }
        _ => None,
    }
}

/// `source` without its test code: every item under `#[cfg(test)]` (a test module, a test
/// helper), found by matching its braces outside literals and comments.
fn without_tests(source: &str) -> String {
    const MARK: &str = "#[cfg(test)]";
    let mut kept = String::new();
    let mut rest = source;
    while let Some(at) = rest.find(MARK) {
        kept.push_str(&rest[..at]);
        let item = &rest[at + MARK.len()..];
        let mut depth = 0usize;
        let mut index = 0;
        let mut end = item.len();
        while index < item.len() {
            let tail = &item[index..];
            if tail.starts_with("//") {
                index += tail.find('\n').unwrap_or(tail.len());
                continue;
            }
            if let Some(len) = literal_len(tail) {
                index += len;
                continue;
            }
            let c = tail.chars().next().unwrap();
            match c {
                '{' => depth += 1,
                // A brace that closes what holds the item ends it too.
                '}' if depth == 0 => {
                    end = index;
                    break;
                }
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = index + 1;
                        break;
                    }
                }
                ';' if depth == 0 => {
                    end = index + 1;
                    break;
                }
                _ => {}
            }
            index += c.len_utf8();
        }
        rest = &item[end..];
    }
    kept.push_str(rest);
    kept
}

#[test]
fn test_code_is_told_apart_from_the_rest() {
    let source = r#####"
fn kept() -> &'static str { "{ kept" }
#[cfg(test)]
mod helpers;
#[cfg(test)]
impl Thing {
    fn gone() { let _ = ('}', r#"}}"#, "\"}"); } // }
}
fn also_kept<'a>(x: &'a str) -> [char; 3] { ['{', '…', '\''] }
#[cfg(test)]
mod tests {
    fn named() -> &'static str { "pen_read" }
}
"#####;
    let kept = without_tests(source);
    assert!(kept.contains("fn kept()"), "{kept}");
    assert!(kept.contains("fn also_kept<'a>"), "{kept}");
    for gone in ["helpers", "gone", "pen_read", "named"] {
        assert!(!kept.contains(gone), "{gone}: {kept}");
    }
}

/// The folder where the submodules `mod NAME;` of the module in `file` live.
fn submodule_dir(file: &Path) -> PathBuf {
    let dir = file.parent().expect("a file has a folder");
    match file.file_stem().and_then(|s| s.to_str()) {
        Some("mod" | "lib" | "main") => dir.to_path_buf(),
        Some(stem) => dir.join(stem),
        None => dir.to_path_buf(),
    }
}

/// The files and folders of the modules declared under `#[cfg(test)]` (`mod tests;`,
/// `mod law_tests;`): test code, whatever their names.
fn test_modules(sources: &[(PathBuf, String)]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for (path, source) in sources {
        let mut lines = source.lines().map(str::trim);
        while let Some(line) = lines.next() {
            if line != "#[cfg(test)]" {
                continue;
            }
            let Some(next) = lines.next() else { break };
            let name = next.strip_prefix("pub ").unwrap_or(next);
            if let Some(name) = name.strip_prefix("mod ").and_then(|n| n.strip_suffix(';')) {
                let dir = submodule_dir(path);
                found.push(dir.join(format!("{name}.rs")));
                found.push(dir.join(name));
            }
        }
    }
    found
}

#[test]
fn test_modules_are_found_by_their_declaration() {
    let sources = vec![(
        root().join("src/budget/mod.rs"),
        "mod planner;\n#[cfg(test)]\nmod law_tests;\n".to_string(),
    )];
    let found = test_modules(&sources);
    assert!(
        found.contains(&root().join("src/budget/law_tests.rs")),
        "{found:?}"
    );
    assert!(
        !found.iter().any(|p| p.ends_with("planner.rs")),
        "{found:?}"
    );
    let sources = vec![(
        root().join("src/protocol.rs"),
        "#[cfg(test)]\nmod codegen;\n".to_string(),
    )];
    assert!(test_modules(&sources).contains(&root().join("src/protocol/codegen.rs")));
}

#[test]
fn no_code_outside_the_tools_names_a_tool() {
    let tools = root().join("src").join("tools");
    let sources: Vec<(PathBuf, String)> = files("src", ".rs")
        .into_iter()
        .map(|path| {
            let source = std::fs::read_to_string(&path).unwrap();
            (path, source)
        })
        .collect();
    let tests = test_modules(&sources);
    assert!(
        tests.iter().any(|t| t.ends_with("agent/tests.rs")),
        "{tests:?}"
    );
    let mut found = Vec::new();
    for (path, source) in &sources {
        if path.starts_with(&tools) || tests.iter().any(|t| path.starts_with(t)) {
            continue;
        }
        for line in without_tests(source).lines() {
            if line.contains("\"pen_") {
                found.push(format!("{}: {}", path.display(), line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "ask the tool's spec (src/tools/registry.rs) instead of naming it:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_editors_match_no_tool_name() {
    let names: Vec<&str> = pen::tools::registry::native()
        .iter()
        .map(|spec| spec.name())
        .collect();
    assert!(names.len() >= 7, "{names:?}");
    let mut sources = files("editors/vscode/src", ".ts");
    sources.extend(files("editors/neovim/lua", ".lua"));
    let mut found = Vec::new();
    for path in sources {
        let source = std::fs::read_to_string(&path).unwrap();
        for name in &names {
            for quote in ['\'', '"', '`'] {
                if source.contains(&format!("{quote}{name}")) {
                    found.push(format!("{}: {quote}{name}", path.display()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "render what pen sends of a call (its title, its kind) instead of matching its tool:\n{}",
        found.join("\n")
    );
}
