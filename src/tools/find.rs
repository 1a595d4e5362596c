//! pen_find: the files of the workspace whose name or path matches a glob, in pen_search's walk
//! order, paged with an exclusive path cursor.
//!
//! It walks exactly what pen_search walks (the same ignore files, skipped folders, depth and
//! entry limits, no symlink followed: `search::page_walk`) and
//! matches the same `glob`, so a file pen_find names is a file pen_search looks through. Each
//! file it names is opened once beneath the workspace root with no symlink on the way (as
//! pen_search opens the files it reads, read-only and non-blocking), so a folder swapped for a
//! symlink during the walk shows nothing from outside the workspace; the open also gives the
//! size shown.
//!
//! A page ends at the result limit, at the entry limit or when the next path would not fit the
//! page budget; `next_after` then names the last file shown (or, at the entry limit, the last
//! entry walked) and the next page starts just after it. Pages partition the walk: the
//! `too_deep` and `unreadable` counts of a page are those of the entries before its cursor, so
//! nothing is counted twice. A resumed page prunes every folder wholly before its cursor; it
//! lists again only the folders that enclose the cursor.

use super::budget;
use super::search::{self, FileGlob, Position, position};
use super::subject::{self, Subject};
use super::{ErrorCode, ToolContext, ToolDoc, ToolError, shown};
use crate::limits::Limits;
use crate::workspace::Target;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Args {
    pub glob: String,
    pub path: Option<String>,
    pub after: Option<String>,
}

/// What a call looks for, and where: `*.rs in src`.
pub fn subject(arguments: &Value) -> Subject {
    let glob = subject::text(arguments, "glob").unwrap_or_default();
    let mut summary = glob.to_string();
    if let Some(path) = subject::text(arguments, "path").filter(|p| !p.is_empty()) {
        summary.push_str(" in ");
        summary.push_str(path);
    }
    Subject {
        summary,
        ..Subject::path(arguments)
    }
}

pub fn spec(limits: &Limits) -> ToolDoc {
    let results = limits.max_find_results;
    let entries = limits.search.max_entries;
    let depth = limits.search.max_depth;
    ToolDoc {
        description: format!(
            "Find files by name: those below `path` whose name matches `glob`, or whose path from the \
             workspace root does when it contains `/`. Walks as pen_search does, in its order. At most \
             {results} files, {entries} entries walked, {depth} levels a page; `next_after` continues."
        ),
        input_schema: json!({
            "type": "object",
            "properties": {
                "glob": {"type": "string", "minLength": 1, "description": "`*.rs`, `Cargo.toml`, `src/**/*.ts`"},
                "path": {"type": "string", "description": "Folder (default: the root)."},
                "after": {"type": "string", "description": "The previous page's `next_after`."}
            },
            "required": ["glob"],
            "additionalProperties": false
        }),
    }
}

/// What ended a page early.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum LimitHit {
    Results,
    Entries,
    ResultSize,
}

/// Entries a page left out, counted up to its cursor.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
struct Skipped {
    too_deep: u64,
    unreadable: u64,
}

/// One page of files, with where it stopped.
#[derive(Debug, Default)]
struct Page {
    files: Vec<Value>,
    /// Escaped bytes the files take in the result.
    used: usize,
    entries_walked: u64,
    skipped: Skipped,
    stop: Option<(LimitHit, String)>,
}

impl Page {
    fn to_value(&self, glob: &str) -> Value {
        let mut object = serde_json::Map::new();
        object.insert("glob".into(), glob.into());
        object.insert("files".into(), Value::Array(self.files.clone()));
        object.insert("truncated".into(), self.stop.is_some().into());
        if let Some((limit, cursor)) = &self.stop {
            object.insert("limit_hit".into(), json!(limit));
            object.insert("next_after".into(), cursor.as_str().into());
        }
        object.insert("skipped".into(), json!(self.skipped));
        object.insert("entries_walked".into(), self.entries_walked.into());
        Value::Object(object)
    }
}

pub fn run(args: Args, ctx: &ToolContext) -> Result<Value, ToolError> {
    if args.glob.is_empty() {
        return Err(ToolError::new(
            ErrorCode::InvalidArguments,
            "invalid arguments: field `glob` is empty; give a glob such as `*.rs` or `src/**/*.ts`",
        ));
    }
    let glob = FileGlob::new(&args.glob)?;
    let opened = ctx.open(args.path.as_deref().unwrap_or(""))?;
    let resolved = opened.resolved;
    let display = shown(&resolved.display).to_string();
    match opened.target {
        Target::Dir(_) => {}
        Target::File(..) => {
            return Err(ToolError::new(
                ErrorCode::NotADirectory,
                format!(
                    "{display} is a file; pen_find looks through a folder (pass its folder as `path`)"
                ),
            ));
        }
        Target::Missing(_) | Target::DanglingLink => {
            return Err(ToolError::new(
                ErrorCode::NotFound,
                format!("{display} does not exist; use pen_list to find the right folder"),
            ));
        }
        Target::Other => {
            return Err(ToolError::new(
                ErrorCode::NotADirectory,
                format!("{display} is not a folder"),
            ));
        }
    }
    let root = resolved.absolute;
    let after = match args.after.as_deref() {
        None => None,
        Some(text) => Some(
            Path::new(text)
                .strip_prefix(&resolved.display)
                .ok()
                .filter(|relative| !relative.as_os_str().is_empty())
                .map(Path::to_path_buf)
                .ok_or_else(|| {
                    ToolError::new(
                        ErrorCode::BadCursor,
                        format!(
                            "`after` = {text:?} is not a pen_find cursor for {display}. Pass the \
                             `next_after` of the previous page exactly as it was returned, with the \
                             same `path`, or leave `after` out to start from the beginning."
                        ),
                    )
                })?,
        ),
    };
    let limits = ctx.limits;
    let envelope = Page {
        skipped: Skipped {
            too_deep: budget::widest(limits.search.max_entries as u64),
            unreadable: budget::widest(limits.search.max_entries as u64),
        },
        entries_walked: budget::widest(limits.search.max_entries as u64),
        stop: Some((LimitHit::ResultSize, String::new())),
        ..Page::default()
    }
    .to_value(&args.glob);
    // Half of what the envelope leaves holds the files, the other half the cursor.
    let budget = budget::page_budget(&envelope, limits)?;
    let result = walk(ctx, &root, after, &glob, budget)?.to_value(&args.glob);
    // Only a cursor longer than half the page (a path of thousands of escaped bytes) can pass
    // the cap; say so rather than return a result the cap would cut.
    let len = result.to_string().len();
    if len > limits.max_tool_result_bytes {
        return Err(budget::budget_too_small(len, limits));
    }
    Ok(result)
}

/// Walks from `after` (relative to `root`) and gathers the page.
fn walk(
    ctx: &ToolContext,
    root: &Path,
    after: Option<PathBuf>,
    glob: &FileGlob,
    budget: usize,
) -> Result<Page, ToolError> {
    let limits = ctx.limits;
    let workspace_root = search::workspace_root_of(ctx, root);
    let root_dir = ctx.workspace.root_dir(&workspace_root)?;
    let (entries, too_deep) = search::page_walk(
        root,
        after.clone(),
        limits.search.max_depth,
        &workspace_root,
    );
    let mut page = Page::default();
    let mut unreadable = 0;
    // The last entry walked, and the page as it stood after its last file: where a page that
    // stops at a limit ends.
    let mut last_walked: Option<PathBuf> = None;
    let mut at_last_file = (0, Skipped::default());
    for entry in entries {
        let entry = match entry {
            Ok(entry) => entry,
            Err(_) => {
                // A folder the walk could not list, in walk order.
                unreadable += 1;
                continue;
            }
        };
        if entry.depth() == 0 {
            continue;
        }
        let path = entry.path();
        let relative = path.strip_prefix(root).unwrap_or(path);
        if let Some(after) = &after
            && position(relative, after) != Position::After
        {
            // The cursor and the folders on the way to it: walked by an earlier page.
            continue;
        }
        if page.entries_walked >= limits.search.max_entries as u64
            && let Some(last) = &last_walked
        {
            // Ends after the last entry walked (for a folder, before its contents): the counts
            // stay those taken when it was walked.
            page.stop = Some((LimitHit::Entries, ctx.workspace.display(last)));
            return Ok(page);
        }
        // Counted before this entry: the entries the walk left out on its way here.
        page.skipped = Skipped {
            too_deep: too_deep.load(Ordering::Relaxed),
            unreadable,
        };
        page.entries_walked += 1;
        last_walked = Some(path.to_path_buf());
        let is_file = entry.is_file();
        if !is_file {
            continue;
        }
        let shown_path = ctx.workspace.display(path);
        if !glob.is_match(path, || shown_path.clone()) {
            continue;
        }
        if page.files.len() >= limits.max_find_results {
            return Ok(stopped(page, at_last_file, LimitHit::Results));
        }
        // Opened beneath the root with no symlink on the way: a name from outside the workspace
        // (a folder swapped for a link mid-walk) is never shown.
        let size = match root_dir.open_file_no_links(path) {
            Ok((_, metadata)) => metadata.len(),
            Err(_) => {
                unreadable += 1;
                continue;
            }
        };
        let file = json!({"path": shown_path, "size": size});
        let cost = file.to_string().len() + 1;
        if page.used + cost > budget && !page.files.is_empty() {
            return Ok(stopped(page, at_last_file, LimitHit::ResultSize));
        }
        page.used += cost;
        page.files.push(file);
        at_last_file = (page.entries_walked, page.skipped);
    }
    page.skipped = Skipped {
        too_deep: too_deep.load(Ordering::Relaxed),
        unreadable,
    };
    Ok(page)
}

/// The page ends after its last file, with the counts taken there: the cursor names that file.
fn stopped(mut page: Page, (walked, skipped): (u64, Skipped), limit: LimitHit) -> Page {
    page.entries_walked = walked;
    page.skipped = skipped;
    let cursor = page
        .files
        .last()
        .and_then(|file| file["path"].as_str())
        .unwrap_or_default()
        .to_string();
    page.stop = Some((limit, cursor));
    page
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::SearchLimits;
    use crate::tools::call;
    use crate::tools::search::tests::workspace;
    use crate::workspace::Workspace;
    use proptest::prelude::*;
    use std::fs;

    fn find(workspace: &Workspace, limits: &Limits, args: Value) -> Result<Value, ToolError> {
        call("pen_find", &args, &ToolContext::plain(workspace, limits))
    }

    fn paths(result: &Value) -> Vec<String> {
        result["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["path"].as_str().unwrap().to_string())
            .collect()
    }

    const TREE: &[(&str, &[u8])] = &[
        ("Cargo.toml", b"[package]"),
        ("src/main.rs", b"fn main() {}"),
        ("src/a/b.rs", b"b"),
        ("src/a.rs", b"a"),
        ("src/notes.txt", b"n"),
        ("tests/it.rs", b"t"),
        ("target/debug/x.rs", b"built"),
        ("node_modules/m/index.rs", b"dep"),
        (".gitignore", b"target/\n*.log\n"),
        ("debug.log", b"log"),
    ];

    #[test]
    fn finds_by_name_or_path_in_walk_order_as_pen_search_walks() {
        let (_dir, ws) = workspace(TREE);
        let limits = Limits::default();
        let result = find(&ws, &limits, json!({"glob": "*.rs"})).unwrap();
        // Folders depth first (`src/a/b.rs` before `src/a.rs`), ignored and skipped folders out.
        assert_eq!(
            paths(&result),
            ["src/a/b.rs", "src/a.rs", "src/main.rs", "tests/it.rs"]
        );
        assert_eq!(
            result["files"][2],
            json!({"path": "src/main.rs", "size": 12})
        );
        assert_eq!(result["truncated"], false);
        assert!(result.get("next_after").is_none());
        let by_path = find(&ws, &limits, json!({"glob": "src/*.rs"})).unwrap();
        assert_eq!(paths(&by_path), ["src/a.rs", "src/main.rs"]);
        let under = find(&ws, &limits, json!({"glob": "*.rs", "path": "src/a"})).unwrap();
        assert_eq!(paths(&under), ["src/a/b.rs"]);
        let ignored = find(&ws, &limits, json!({"glob": "*.log"})).unwrap();
        assert_eq!(paths(&ignored), Vec::<String>::new());
        // Named as `path`, a skipped folder is looked through, as pen_search does.
        let named = find(
            &ws,
            &limits,
            json!({"glob": "*.rs", "path": "node_modules"}),
        )
        .unwrap();
        assert_eq!(paths(&named), ["node_modules/m/index.rs"]);
        // The same files pen_search looks through.
        let searched = call(
            "pen_search",
            &json!({"query": "b", "glob": "*.rs"}),
            &ToolContext::plain(&ws, &limits),
        )
        .unwrap();
        assert_eq!(searched["matches"][0]["path"], "src/a/b.rs");
    }

    #[test]
    fn bad_arguments_say_what_to_do() {
        let (_dir, ws) = workspace(TREE);
        let limits = Limits::default();
        let code = |args: Value| find(&ws, &limits, args).unwrap_err().code;
        assert_eq!(code(json!({"glob": ""})), ErrorCode::InvalidArguments);
        assert_eq!(code(json!({"glob": "a[b"})), ErrorCode::InvalidArguments);
        assert_eq!(
            code(json!({"pattern": "*.rs"})),
            ErrorCode::InvalidArguments
        );
        assert_eq!(
            code(json!({"glob": "*", "path": "nope"})),
            ErrorCode::NotFound
        );
        assert_eq!(
            code(json!({"glob": "*", "path": "Cargo.toml"})),
            ErrorCode::NotADirectory
        );
        assert_eq!(
            code(json!({"glob": "*", "path": "../.."})),
            ErrorCode::OutsideWorkspace
        );
        let outside = find(
            &ws,
            &limits,
            json!({"glob": "*", "path": "src", "after": "tests/it.rs"}),
        )
        .unwrap_err();
        assert_eq!(outside.code, ErrorCode::BadCursor);
        assert!(
            outside.message.contains("same `path`"),
            "{}",
            outside.message
        );
    }

    #[test]
    fn symlinks_are_not_followed_and_a_linked_folder_shows_nothing_from_outside() {
        let (dir, ws) = workspace(&[("in/a.rs", b"a")]);
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("secret.rs"), "s").unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("linked")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret.rs"), dir.path().join("l.rs"))
            .unwrap();
        let result = find(&ws, &Limits::default(), json!({"glob": "*.rs"})).unwrap();
        assert_eq!(paths(&result), ["in/a.rs"]);
    }

    /// Follows `next_after` to the end; the pages, and their counts summed.
    fn all_pages(ws: &Workspace, limits: &Limits, glob: &str) -> (Vec<String>, u64, u64, usize) {
        let (mut files, mut walked, mut too_deep, mut pages) = (Vec::new(), 0, 0, 0);
        let mut after: Option<String> = None;
        loop {
            let mut args = json!({"glob": glob});
            if let Some(after) = &after {
                args["after"] = json!(after);
            }
            let page = find(ws, limits, args).unwrap();
            assert!(page.to_string().len() <= limits.max_tool_result_bytes);
            pages += 1;
            files.extend(paths(&page));
            walked += page["entries_walked"].as_u64().unwrap();
            too_deep += page["skipped"]["too_deep"].as_u64().unwrap();
            match page.get("next_after").and_then(Value::as_str) {
                Some(next) => {
                    assert_eq!(page["truncated"], true);
                    after = Some(next.to_string());
                }
                None => return (files, walked, too_deep, pages),
            }
            assert!(pages < 1_000, "paging does not end");
        }
    }

    #[test]
    fn the_result_cap_ends_a_page_and_the_next_starts_after_it() {
        let names: Vec<String> = (0..40)
            .map(|i| format!("d/file-with-a-longish-name-{i:03}.rs"))
            .collect();
        let files: Vec<(&str, &[u8])> = names.iter().map(|p| (p.as_str(), &b""[..])).collect();
        let (_dir, ws) = workspace(&files);
        let small = Limits {
            max_tool_result_bytes: 1_024,
            ..Limits::default()
        };
        let first = find(&ws, &small, json!({"glob": "*.rs"})).unwrap();
        assert_eq!(first["limit_hit"], "result_size");
        let (found, _, _, pages) = all_pages(&ws, &small, "*.rs");
        assert!(pages > 2, "{pages}");
        let whole = find(&ws, &Limits::default(), json!({"glob": "*.rs"})).unwrap();
        assert_eq!(found, paths(&whole));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Pages partition the walk: followed to the end, they name the files one unlimited
        /// call names, in order, once each, and their counts add up to its counts.
        #[test]
        fn pages_partition_the_walk(
            tree in proptest::collection::btree_set("[ab]{1,2}(/[ab]{1,2}){0,3}\\.(rs|txt)", 1..24),
            results in 1usize..5,
            entries in 1usize..8,
            depth in 1usize..4,
            cap in prop_oneof![Just(1_024usize), Just(64 * 1024)],
        ) {
            let dir = tempfile::tempdir().unwrap();
            for path in &tree {
                let path = dir.path().join(path);
                // A file where a folder is wanted (`a.rs` then `a.rs/b.rs`) is left out.
                if fs::create_dir_all(path.parent().unwrap()).is_ok() {
                    let _ = fs::write(&path, "x");
                }
            }
            let ws = Workspace::new(&[dir.path().to_path_buf()]).unwrap();
            let search = SearchLimits { max_depth: depth, ..SearchLimits::default() };
            let unlimited = Limits { search: search.clone(), ..Limits::default() };
            let limited = Limits {
                max_find_results: results,
                max_tool_result_bytes: cap,
                search: SearchLimits { max_entries: entries, ..search },
                ..Limits::default()
            };
            for glob in ["*.rs", "a/**/*.txt", "*"] {
                let whole = find(&ws, &unlimited, json!({"glob": glob})).unwrap();
                prop_assert_eq!(&whole["truncated"], &json!(false));
                let (files, walked, too_deep, _) = all_pages(&ws, &limited, glob);
                prop_assert_eq!(files, paths(&whole));
                prop_assert_eq!(walked, whole["entries_walked"].as_u64().unwrap());
                prop_assert_eq!(too_deep, whole["skipped"]["too_deep"].as_u64().unwrap());
            }
        }
    }
}
