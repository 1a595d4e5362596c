//! pen_search: literal search over the workspace, bounded, deterministic and resumable.
//!
//! Architecture invariants:
//! - The walk is sorted by file name, depth first, so it visits paths in
//!   component-wise [`Path`] order (`a/b` before `a.txt`). Cursors compare paths in that order,
//!   which lets a resumed search prune every folder that lies wholly before its cursor. Pages
//!   partition the walk: a page ends exactly where the next begins (at the first match it could
//!   not show, or after the last entry it walked), so no match is lost or shown twice, and the
//!   entries before a cursor are neither walked nor counted again (a page limited by entries
//!   would otherwise never get past them).
//! - A page that hands out a cursor parks its walk under it (`kept`), and the page resuming at
//!   that cursor continues the walk, as long as the folders it listed are unchanged: paging
//!   through a tree costs what one walk of it costs, not a walk up to each cursor again.
//! - The walk runs on a thread of its own, a bounded number of entries ahead of the merge, and
//!   a pool lists its folders a bounded number ahead of it, in its order (`listing`); the
//!   entries it took past where a page stopped go back to the walk, in order, so they are not
//!   lost to the next page. Files are read and scanned by worker threads, but their outcomes are
//!   merged strictly in walk order, and every limit is decided at the point of the walk where a
//!   sequential search would decide it. The result is therefore the same as a sequential
//!   search's, whatever the timing.
//! - The result never exceeds `max_tool_result_bytes`: matches are added only while they and the
//!   cursor fit the page budget, and the finished result is measured once more before it leaves.
//!
//! Deliberately absent: regular expressions (the query is literal), following symlinks, and
//! `.gitignore` files outside the workspace or from the user's global git configuration (a
//! result must not depend on who runs it).
//!
//! The tool is split by what each part does: `walk` decides which entries a page walks and turns
//! files into jobs, `listing` is the sorted walk whose folders a pool lists ahead of it,
//! `ignores` keeps the ignore files it applies compiled per version, `kept` keeps walks between
//! pages, `pipeline` runs the walk and the reader threads, `verdicts` judges a file's bytes once
//! per version, `scan` finds the query in a file's text and cuts excerpts, and `page` merges
//! outcomes in walk order into a result within the cap. `outcome` holds the plain data they hand
//! on (jobs, outcomes, the walk's counts), so that the dependencies run one way: `pipeline` →
//! `kept` → `walk` → `listing` → `ignores`, `walk` → `outcome`, and `pipeline` → `page`,
//! `verdicts` → `outcome` → `scan`. This file holds the tool's entry, its arguments and cursors.

mod ignores;
mod kept;
mod listing;
mod outcome;
mod page;
mod pipeline;
mod scan;
mod verdicts;
mod walk;

pub(crate) use listing::{Position, position};
pub(crate) use walk::page_walk;

use super::budget;
use super::{ErrorCode, ToolContext, ToolDoc, ToolError, shown};
use crate::limits::{Limits, SearchLimits};
use crate::workspace::{SKIPPED_FOLDERS, Target};
use globset::{GlobBuilder, GlobMatcher};
use page::{Page, Skipped, Stop};
use scan::Matcher;
use serde::Deserialize;
use serde::Serialize;
use serde_json::{Value, json};
use std::fmt;
use std::path::{Path, PathBuf};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchArgs {
    pub query: String,
    pub path: Option<String>,
    pub glob: Option<String>,
    pub case_sensitive: Option<bool>,
    pub after: Option<String>,
}

fn description(limits: &SearchLimits) -> String {
    format!(
        "Search the workspace for a literal string (not a regex; `.`, `*`, `(` … match \
         themselves) and return the matching lines in sorted path order. Each match has `path` \
         (relative to the workspace root), `line` (1-based), `column` (1-based, in Unicode \
         characters, i.e. scalar values) and `excerpt` (the line cut \
         to at most {excerpt} bytes around the match, `…` marking a cut). Only the first match on \
         a line is reported. Narrow with `path` (a folder or one file) and `glob` (a file-name \
         glob such as `*.rs` or `*.{{ts,tsx}}`, or a path glob such as `src/**/*.ts` when it contains `/`; `*` does not \
         cross `/`, `**` does). \
         Honours .gitignore; never follows symlinks; skips the folders {skipped} (and .NET \
         bin/obj) unless named as `path`. Binary and non-UTF-8 files are skipped and counted in `skipped`, as are \
         entries too deep to enter and files holding a private key, which are never searched \
         (whatever the query, such a file counts once in `skipped.key_material`). Limits: {entries} entries walked, {files} files read, \
         {bytes} bytes read, {depth} folder levels below `path`, {matches} matches, and the result \
         size. When a limit stops the search, `truncated` is true, `limit_hit` names it, and \
         `next_after` is a cursor: pass it as `after` with the same other arguments to continue \
         exactly where it stopped.",
        excerpt = limits.excerpt_bytes,
        skipped = SKIPPED_FOLDERS.join(", "),
        entries = limits.max_entries,
        files = limits.max_files,
        bytes = limits.max_bytes,
        depth = limits.max_depth,
        matches = limits.max_matches,
    )
}

/// What a call looks for, and where.
pub fn subject(arguments: &Value) -> super::subject::Subject {
    super::subject::Subject::query(arguments)
}

pub fn spec(limits: &Limits) -> ToolDoc {
    ToolDoc {
        description: description(&limits.search),
        input_schema: json!({
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "minLength": 1,
                    "description": "The literal text to find."
                },
                "path": {
                    "type": "string",
                    "description": "A folder or one file, from the workspace root (default: all of it)."
                },
                "glob": {
                    "type": "string",
                    "description": "Only files matching this glob (see above)."
                },
                "case_sensitive": {
                    "type": "boolean",
                    "description": "Match case exactly (default true). False ignores case, for non-ASCII letters too."
                },
                "after": {
                    "type": "string",
                    "description": "The `next_after` of the previous page."
                }
            },
            "required": ["query"],
            "additionalProperties": false
        }),
    }
}

pub fn run(args: SearchArgs, ctx: &ToolContext) -> Result<Value, ToolError> {
    let request = Request::new(args, ctx)?;
    let envelope = request.envelope(ctx.limits);
    let budget = budget::page_budget(&envelope, ctx.limits)?;
    let envelope_len = envelope.to_string().len();
    let (page, leftover) = pipeline::search(&request, ctx, budget, envelope_len)?;
    let result = page.finish(&request.query, ctx.limits)?;
    if let Some(cursor) = result.get("next_after").and_then(Value::as_str) {
        leftover.park(&request, ctx.limits.search.max_depth, cursor);
    }
    Ok(result)
}

/// Which limit stopped a search. Serialized as `limit_hit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum LimitHit {
    Entries,
    Files,
    Bytes,
    Depth,
    Matches,
    ResultBytes,
}

impl LimitHit {
    const ALL: [LimitHit; 6] = [
        LimitHit::Entries,
        LimitHit::Files,
        LimitHit::Bytes,
        LimitHit::Depth,
        LimitHit::Matches,
        LimitHit::ResultBytes,
    ];

    /// What the model should do next, naming the limit. Kept short: at the smallest cap every
    /// byte of it is a byte less for matches.
    fn guidance(self, limits: &Limits) -> String {
        let search = &limits.search;
        let what = match self {
            LimitHit::Entries => format!("the {}-entry limit", search.max_entries),
            LimitHit::Files => format!("the {}-file limit", search.max_files),
            LimitHit::Bytes => format!("the {}-byte read limit", search.max_bytes),
            LimitHit::Matches => format!("{} matches", search.max_matches),
            LimitHit::ResultBytes => {
                format!("max_tool_result_bytes ({})", limits.max_tool_result_bytes)
            }
            LimitHit::Depth => {
                return format!(
                    "Folders over {} levels deep were skipped; pass one as `path` to search it.",
                    search.max_depth
                );
            }
        };
        format!(
            "Stopped at {what}. Narrow with `path`, `glob` or a longer query, or pass `next_after` \
             as `after` to continue."
        )
    }
}

/// Where a resumed search picks up, relative to the entry its cursor names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resume {
    /// After the given line of the named file (0: before its first line): the lines after it
    /// are searched.
    AfterLine(u64),
    /// After the named entry, and for a folder before its contents.
    AfterEntry,
}

/// A resume point: `{path}#L{line}` or `{path}#end`, the path as results show it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Cursor {
    display: String,
    resume: Resume,
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.resume {
            Resume::AfterLine(line) => write!(f, "{}#L{line}", self.display),
            Resume::AfterEntry => write!(f, "{}#end", self.display),
        }
    }
}

impl Cursor {
    fn parse(text: &str) -> Result<Cursor, ToolError> {
        let bad = || {
            ToolError::new(
                ErrorCode::BadCursor,
                format!(
                    "`after` = {text:?} is not a pen_search cursor. Pass the `next_after` of the \
                     previous result exactly as it was returned, or leave `after` out to search \
                     from the start."
                ),
            )
        };
        let (display, position) = text.rsplit_once('#').ok_or_else(bad)?;
        let resume = match position {
            "end" => Resume::AfterEntry,
            _ => {
                let digits = position.strip_prefix('L').ok_or_else(bad)?;
                // `parse` alone would take `+5`; a cursor is only ever written as digits.
                match digits.parse::<u64>() {
                    Ok(line) if digits.bytes().all(|b| b.is_ascii_digit()) => {
                        Resume::AfterLine(line)
                    }
                    _ => return Err(bad()),
                }
            }
        };
        Ok(Cursor {
            display: display.to_string(),
            resume,
        })
    }
}

/// The checked arguments of one search.
struct Request {
    query: String,
    matcher: Matcher,
    glob: Option<FileGlob>,
    /// The folder or file searched, absolute and canonical.
    root: PathBuf,
    /// `root` as results show it: cursors name paths below it.
    root_display: PathBuf,
    /// The workspace root that holds `root`.
    workspace_root: PathBuf,
    /// The cursor, with its path made relative to `root`.
    after: Option<(PathBuf, Resume)>,
    /// The cursor as given.
    after_text: Option<String>,
}

impl Request {
    fn new(args: SearchArgs, ctx: &ToolContext) -> Result<Request, ToolError> {
        if args.query.is_empty() {
            return Err(ToolError::new(
                ErrorCode::InvalidArguments,
                "invalid arguments: field `query` is empty; give the literal text to search for",
            ));
        }
        let matcher = Matcher::new(&args.query, args.case_sensitive.unwrap_or(true))?;
        let glob = args.glob.as_deref().map(FileGlob::new).transpose()?;
        let opened = ctx.open(args.path.as_deref().unwrap_or(""))?;
        let resolved = opened.resolved;
        let display = shown(&resolved.display).to_string();
        match opened.target {
            Target::Dir(_) | Target::File(..) => {}
            Target::Missing(_) | Target::DanglingLink => {
                return Err(ToolError::new(
                    ErrorCode::NotFound,
                    format!("{display} does not exist; use pen_list to find the right folder"),
                ));
            }
            Target::Other => {
                return Err(ToolError::new(
                    ErrorCode::NotAFile,
                    format!("{display} is neither a folder nor a regular file"),
                ));
            }
        }
        let after = match args.after.as_deref() {
            None => None,
            Some(text) => {
                let cursor = Cursor::parse(text)?;
                let relative = Path::new(&cursor.display)
                    .strip_prefix(&resolved.display)
                    .map_err(|_| {
                        ToolError::new(
                            ErrorCode::BadCursor,
                            format!(
                                "`after` = {text:?} is a cursor for a file outside {display}. \
                                 Repeat the search with the `path` that returned it, or leave \
                                 `after` out to search {display} from the start."
                            ),
                        )
                    })?;
                Some((relative.to_path_buf(), cursor.resume))
            }
        };
        let workspace_root = workspace_root_of(ctx, &resolved.absolute);
        Ok(Request {
            query: args.query,
            matcher,
            glob,
            root: resolved.absolute,
            root_display: PathBuf::from(&resolved.display),
            workspace_root,
            after,
            after_text: args.after,
        })
    }

    /// The widest result this search can return with no matches, cursor or guidance: every
    /// number at its widest, the longest `limit_hit`. The page budget (half of what the cap
    /// leaves after it) holds the matches and the cursor; the other half has room for the
    /// guidance, which is far shorter than a minimum page.
    fn envelope(&self, limits: &Limits) -> Value {
        let search = &limits.search;
        let entries = budget::widest(search.max_entries as u64);
        let page = Page {
            skipped: Skipped {
                binary: entries,
                non_utf8: entries,
                too_large: entries,
                unreadable: entries,
                too_deep: entries,
                key_material: entries,
            },
            files_searched: budget::widest(search.max_files as u64),
            entries_walked: entries,
            bytes_read: budget::widest(search.max_bytes),
            ..Page::default()
        };
        let longest = LimitHit::ALL
            .into_iter()
            .max_by_key(|limit| json!(limit).to_string().len());
        let page = Page {
            stop: longest.map(|limit| Stop {
                limit,
                cursor: None,
            }),
            ..page
        };
        let mut value = page.to_value(&self.query, limits, Vec::new());
        if let Some(object) = value.as_object_mut() {
            object.remove("guidance");
        }
        value
    }
}

/// The entries pen_search's walk yields below `root` (all of them: no cursor, no depth limit),
/// counted: for the bench, which sets it beside `ignore`'s sorted walk on one thread.
pub fn walk_entries(root: &Path) -> usize {
    page_walk(root, None, usize::MAX, root).0.count()
}

/// The workspace root that holds `absolute` (the deepest, when roots nest).
pub(crate) fn workspace_root_of(ctx: &ToolContext, absolute: &Path) -> PathBuf {
    ctx.workspace
        .roots()
        .iter()
        .filter(|r| absolute.starts_with(&r.path))
        .max_by_key(|r| r.path.as_os_str().len())
        .map_or_else(|| absolute.to_path_buf(), |r| r.path.clone())
}

/// The `glob` argument (pen_search's and pen_find's): matched against the file name, or against
/// the path from the workspace root when it contains `/`.
pub(crate) enum FileGlob {
    Name(GlobMatcher),
    Path(GlobMatcher),
}

impl FileGlob {
    pub(crate) fn new(glob: &str) -> Result<FileGlob, ToolError> {
        let matcher = GlobBuilder::new(glob)
            .literal_separator(true)
            .build()
            .map_err(|e| {
                ToolError::new(
                    ErrorCode::InvalidArguments,
                    format!(
                        "invalid arguments: field `glob`: {e}. Use a file-name glob such as \
                         `*.rs` or a path glob such as `src/**/*.ts`."
                    ),
                )
            })?
            .compile_matcher();
        Ok(if glob.contains('/') {
            FileGlob::Path(matcher)
        } else {
            FileGlob::Name(matcher)
        })
    }

    /// Whether the file at `path` is wanted; `display` gives its path from the workspace root,
    /// computed only for a path glob.
    pub(crate) fn is_match(&self, path: &Path, display: impl FnOnce() -> String) -> bool {
        match self {
            FileGlob::Name(matcher) => path.file_name().is_some_and(|n| matcher.is_match(n)),
            FileGlob::Path(matcher) => matcher.is_match(display()),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::tools::call;
    use crate::workspace::Workspace;
    use proptest::prelude::*;
    use std::fs;

    /// A temporary workspace holding `files` (path, content); folders are created as needed.
    pub(crate) fn workspace(files: &[(&str, &[u8])]) -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        for (path, content) in files {
            let path = dir.path().join(path);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, content).unwrap();
        }
        let workspace = Workspace::new(&[dir.path().to_path_buf()]).unwrap();
        (dir, workspace)
    }

    fn run_with(workspace: &Workspace, limits: &Limits, args: Value) -> Result<Value, ToolError> {
        let ctx = ToolContext::plain(workspace, limits);
        call("pen_search", &args, &ctx)
    }

    fn run(workspace: &Workspace, args: Value) -> Value {
        run_with(workspace, &Limits::default(), args).unwrap()
    }

    /// Limits small enough that fixtures hit them with a few files.
    fn small(search: SearchLimits) -> Limits {
        Limits {
            search,
            ..Limits::default()
        }
    }

    /// The matches of a result as (path, line, column, excerpt).
    fn found(result: &Value) -> Vec<(String, u64, u64, String)> {
        result["matches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["path"].as_str().unwrap().to_string(),
                    m["line"].as_u64().unwrap(),
                    m["column"].as_u64().unwrap(),
                    m["excerpt"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    fn places(result: &Value) -> Vec<(String, u64)> {
        found(result)
            .into_iter()
            .map(|(p, l, _, _)| (p, l))
            .collect()
    }

    #[test]
    fn the_first_match_of_a_page_gets_a_shorter_excerpt_rather_than_an_error() {
        let line = format!("{}x{}\n", "\u{1}".repeat(100), "\\".repeat(100));
        let (_dir, ws) = workspace(&[("a", line.repeat(3).as_bytes())]);
        let limits = Limits::with_max_tool_result_bytes(1_024).unwrap();
        let mut after: Option<String> = None;
        let mut lines = Vec::new();
        loop {
            let mut args = json!({"query": "x"});
            if let Some(after) = &after {
                args["after"] = json!(after);
            }
            let page = run_with(&ws, &limits, args).unwrap();
            assert!(page.to_string().len() <= 1_024);
            let shown = found(&page);
            assert!(shown.iter().all(|m| m.3.contains('x')));
            lines.extend(shown.into_iter().map(|m| m.1));
            if page["truncated"] == false {
                break;
            }
            after = page["next_after"].as_str().map(str::to_string);
        }
        assert_eq!(lines, vec![1, 2, 3]);
    }

    #[test]
    fn cursors_round_trip_and_malformed_ones_are_refused() {
        for text in ["src/a.rs#L12", "a#b.txt#end", "x#L1", "x#L0"] {
            assert_eq!(Cursor::parse(text).unwrap().to_string(), text);
        }
        assert_eq!(
            Cursor::parse("a#b#L3").unwrap(),
            Cursor {
                display: "a#b".into(),
                resume: Resume::AfterLine(3)
            }
        );
        for text in [
            "", "src/a.rs", "a#L", "a#L+3", "a#Lx", "a#L-1", "a#END", "a#12",
        ] {
            let err = Cursor::parse(text).unwrap_err();
            assert_eq!(err.code, ErrorCode::BadCursor, "{text}");
            assert!(err.message.contains("next_after"), "{}", err.message);
        }
    }

    #[test]
    fn query_is_literal() {
        let (_dir, ws) = workspace(&[
            ("a.txt", b"a.b(c)*[d]\naxb(c)[d]\nabccc[d]\n"),
            ("b.txt", b"^$ \\d+ a.b(c)*[d]?\n"),
        ]);
        let result = run(&ws, json!({"query": "a.b(c)*[d]"}));
        assert_eq!(
            places(&result),
            vec![("a.txt".into(), 1), ("b.txt".into(), 1)]
        );
        assert_eq!(found(&result)[1].2, 8);
        let result = run(&ws, json!({"query": "A.B(C)*[D]", "case_sensitive": false}));
        assert_eq!(places(&result).len(), 2);
    }

    #[test]
    fn case_sensitivity_both_ways_including_non_ascii() {
        let (_dir, ws) = workspace(&[("f.txt", "Äpfel\näpfel\nÄPFEL\nstraße\n".as_bytes())]);
        let exact = run(&ws, json!({"query": "äpfel"}));
        assert_eq!(places(&exact), vec![("f.txt".into(), 2)]);
        let caseless = run(&ws, json!({"query": "ÄPFEL", "case_sensitive": false}));
        assert_eq!(
            places(&caseless),
            vec![
                ("f.txt".into(), 1),
                ("f.txt".into(), 2),
                ("f.txt".into(), 3)
            ]
        );
        let exact_upper = run(&ws, json!({"query": "ÄPFEL", "case_sensitive": true}));
        assert_eq!(places(&exact_upper), vec![("f.txt".into(), 3)]);
    }

    #[test]
    fn globs_filter_by_name_or_by_path_from_the_root() {
        let (_dir, ws) = workspace(&[
            ("src/a.rs", b"hit"),
            ("src/a.ts", b"hit"),
            ("src/deep/b.ts", b"hit"),
            ("lib/c.ts", b"hit"),
        ]);
        let paths = |glob: &str| -> Vec<String> {
            found(&run(&ws, json!({"query": "hit", "glob": glob})))
                .into_iter()
                .map(|m| m.0)
                .collect()
        };
        assert_eq!(paths("*.rs"), vec!["src/a.rs"]);
        assert_eq!(paths("*.ts"), vec!["lib/c.ts", "src/a.ts", "src/deep/b.ts"]);
        assert_eq!(paths("src/**/*.ts"), vec!["src/a.ts", "src/deep/b.ts"]);
        assert_eq!(paths("src/*.ts"), vec!["src/a.ts"]);
        assert_eq!(paths("*.{rs,ts}").len(), 4);
        // A path glob is relative to the workspace root even when `path` narrows the search.
        let narrowed = run(
            &ws,
            json!({"query": "hit", "path": "src", "glob": "src/*.ts"}),
        );
        assert_eq!(places(&narrowed), vec![("src/a.ts".into(), 1)]);
    }

    #[test]
    fn path_narrows_to_a_folder_or_one_file() {
        let (_dir, ws) = workspace(&[
            ("a/x.txt", b"hit"),
            ("a/y.txt", b"hit"),
            ("b/x.txt", b"hit"),
        ]);
        let folder = run(&ws, json!({"query": "hit", "path": "a"}));
        assert_eq!(
            places(&folder),
            vec![("a/x.txt".into(), 1), ("a/y.txt".into(), 1)]
        );
        let file = run(&ws, json!({"query": "hit", "path": "b/x.txt"}));
        assert_eq!(places(&file), vec![("b/x.txt".into(), 1)]);
        assert_eq!(file["entries_walked"], 1);
    }

    #[test]
    fn argument_errors_say_what_to_do() {
        let (_dir, ws) = workspace(&[("a.txt", b"x")]);
        let limits = Limits::default();
        let error = |args: Value| run_with(&ws, &limits, args).unwrap_err();
        let empty = error(json!({"query": ""}));
        assert_eq!(empty.code, ErrorCode::InvalidArguments);
        assert!(empty.message.contains("`query`"), "{}", empty.message);
        let glob = error(json!({"query": "x", "glob": "a[b"}));
        assert_eq!(glob.code, ErrorCode::InvalidArguments);
        assert!(glob.message.contains("`glob`"), "{}", glob.message);
        assert_eq!(
            error(json!({"query": "x", "path": "nope"})).code,
            ErrorCode::NotFound
        );
        assert_eq!(
            error(json!({"query": "x", "path": "../.."})).code,
            ErrorCode::OutsideWorkspace
        );
        assert_eq!(
            error(json!({"query": "x", "after": "a.txt"})).code,
            ErrorCode::BadCursor
        );
        let elsewhere = error(json!({"query": "x", "path": "a.txt", "after": "b/c#end"}));
        assert_eq!(elsewhere.code, ErrorCode::BadCursor);
        assert_eq!(
            error(json!({"query": "x", "regex": true})).code,
            ErrorCode::InvalidArguments
        );
    }

    #[test]
    fn entry_limit_stops_after_exactly_max_entries() {
        let limits = small(SearchLimits {
            max_entries: 4,
            ..SearchLimits::default()
        });
        let four: Vec<(String, &[u8])> = (0..4).map(|i| (format!("f{i}"), &b"x"[..])).collect();
        let four: Vec<(&str, &[u8])> = four.iter().map(|(p, c)| (p.as_str(), *c)).collect();
        let (_dir, ws) = workspace(&four);
        let result = run_with(&ws, &limits, json!({"query": "x"})).unwrap();
        assert_eq!(result["truncated"], false);
        assert_eq!(result["entries_walked"], 4);
        fs::write(ws.roots()[0].path.join("f4"), "x").unwrap();
        let result = run_with(&ws, &limits, json!({"query": "x"})).unwrap();
        assert_eq!(result["truncated"], true);
        assert_eq!(result["limit_hit"], "entries");
        assert_eq!(result["next_after"], "f3#end");
        assert_eq!(places(&result).len(), 4);
        let rest = run_with(&ws, &limits, json!({"query": "x", "after": "f3#end"})).unwrap();
        assert_eq!(places(&rest), vec![("f4".into(), 1)]);
        assert_eq!(rest["truncated"], false);
    }

    #[test]
    fn file_limit_and_byte_limit_stop_before_the_file_that_would_pass_them() {
        let (_dir, ws) = workspace(&[("a", b"x\n"), ("b", b"x\n"), ("c/d", b"x\n"), ("e", b"x\n")]);
        let files = small(SearchLimits {
            max_files: 2,
            ..SearchLimits::default()
        });
        let result = run_with(&ws, &files, json!({"query": "x"})).unwrap();
        assert_eq!(result["limit_hit"], "files");
        assert_eq!(result["files_searched"], 2);
        assert_eq!(result["next_after"], "c#end");
        assert_eq!(result["entries_walked"], 3);
        let bytes = small(SearchLimits {
            max_bytes: 7,
            ..SearchLimits::default()
        });
        let result = run_with(&ws, &bytes, json!({"query": "x"})).unwrap();
        assert_eq!(result["limit_hit"], "bytes");
        assert_eq!(result["bytes_read"], 6);
        assert_eq!(result["next_after"], "c/d#end");
        let exact = small(SearchLimits {
            max_bytes: 8,
            ..SearchLimits::default()
        });
        let result = run_with(&ws, &exact, json!({"query": "x"})).unwrap();
        assert_eq!(result["truncated"], false);
        assert_eq!(result["bytes_read"], 8);
    }

    #[test]
    fn a_file_over_the_byte_limit_is_skipped_and_counted() {
        let (_dir, ws) = workspace(&[("big", &[b'x'; 10]), ("small", b"x")]);
        let limits = small(SearchLimits {
            max_bytes: 9,
            ..SearchLimits::default()
        });
        let result = run_with(&ws, &limits, json!({"query": "x"})).unwrap();
        assert_eq!(places(&result), vec![("small".into(), 1)]);
        assert_eq!(result["skipped"]["too_large"], 1);
        assert_eq!(result["truncated"], false);
    }

    #[test]
    fn depth_limit_reports_what_was_not_entered() {
        let (_dir, ws) = workspace(&[("1/2/3/deep.txt", b"x"), ("1/2/ok.txt", b"x")]);
        let limits = small(SearchLimits {
            max_depth: 3,
            ..SearchLimits::default()
        });
        let result = run_with(&ws, &limits, json!({"query": "x"})).unwrap();
        assert_eq!(places(&result), vec![("1/2/ok.txt".into(), 1)]);
        assert_eq!(result["truncated"], true);
        assert_eq!(result["limit_hit"], "depth");
        assert_eq!(result["skipped"]["too_deep"], 1);
        assert_eq!(result["entries_walked"], 4);
        assert!(result.get("next_after").is_none());
        assert!(result["guidance"].as_str().unwrap().contains("`path`"));
        let deeper = run_with(&ws, &limits, json!({"query": "x", "path": "1/2"})).unwrap();
        assert_eq!(deeper["truncated"], false);
        assert_eq!(places(&deeper).len(), 2);
    }

    #[test]
    fn match_limit_stops_at_the_next_match_and_resumes_after_the_last_line_shown() {
        let (_dir, ws) = workspace(&[("a", b"x\nx\nx\n"), ("b", b"x\n")]);
        let limits = small(SearchLimits {
            max_matches: 2,
            ..SearchLimits::default()
        });
        let first = run_with(&ws, &limits, json!({"query": "x"})).unwrap();
        assert_eq!(first["limit_hit"], "matches");
        assert_eq!(first["next_after"], "a#L2");
        let second = run_with(&ws, &limits, json!({"query": "x", "after": "a#L2"})).unwrap();
        assert_eq!(places(&second), vec![("a".into(), 3), ("b".into(), 1)]);
        assert_eq!(second["truncated"], false);
        // Exactly max_matches matches is a complete result.
        let (_dir, ws) = workspace(&[("a", b"x\nx\n")]);
        let exact = run_with(&ws, &limits, json!({"query": "x"})).unwrap();
        assert_eq!(exact["truncated"], false);
    }

    #[test]
    fn result_bytes_limit_keeps_the_result_under_the_cap() {
        let line = format!("{}x\n", "\"".repeat(150));
        let (_dir, ws) = workspace(&[("a", line.repeat(20).as_bytes())]);
        let limits = Limits::with_max_tool_result_bytes(2_048).unwrap();
        let result = run_with(&ws, &limits, json!({"query": "x"})).unwrap();
        assert_eq!(result["limit_hit"], "result_bytes");
        assert!(result.to_string().len() <= 2_048);
        let shown = places(&result).len();
        assert!(shown >= 1);
        assert_eq!(result["next_after"], format!("a#L{shown}"));
    }

    #[test]
    fn the_budget_error_names_the_cap_when_not_one_match_fits() {
        let deep = format!("{}/f.txt", vec!["d".repeat(60); 13].join("/"));
        let (_dir, ws) = workspace(&[(deep.as_str(), b"x")]);
        let limits = Limits::with_max_tool_result_bytes(1_024).unwrap();
        let err = run_with(&ws, &limits, json!({"query": "x"})).unwrap_err();
        assert_eq!(err.code, ErrorCode::BudgetTooSmall);
        assert!(
            err.message.contains("max_tool_result_bytes"),
            "{}",
            err.message
        );
    }

    #[test]
    fn binary_and_non_utf8_files_are_skipped_and_counted() {
        let (_dir, ws) = workspace(&[
            ("bin", b"x\0x"),
            ("latin1", b"x caf\xe9\n"),
            ("text", b"x\n"),
        ]);
        let result = run(&ws, json!({"query": "x"}));
        assert_eq!(places(&result), vec![("text".into(), 1)]);
        assert_eq!(result["skipped"]["binary"], 1);
        assert_eq!(result["skipped"]["non_utf8"], 1);
        assert_eq!(result["files_searched"], 3);
    }

    #[test]
    fn ignored_vcs_dependency_and_build_folders_are_not_searched() {
        let (_dir, ws) = workspace(&[
            (".gitignore", b"*.log\ngen/\n"),
            ("a.log", b"x"),
            ("gen/a.rs", b"x"),
            (".git/config", b"x"),
            ("node_modules/m/i.js", b"x"),
            ("target/debug/o", b"x"),
            ("sub/.venv/s.py", b"x"),
            ("sub/.gitignore", b"keep.*\n"),
            ("sub/keep.txt", b"x"),
            ("sub/a.log", b"x"),
            ("app/App.csproj", b"<Project/>"),
            ("app/bin/Debug/app.dll.config", b"x"),
            ("app/obj/o.cs", b"x"),
            ("crate/src/bin/main.rs", b"x"),
            (".hidden/h.txt", b"x"),
        ]);
        let result = run(&ws, json!({"query": "x"}));
        assert_eq!(
            places(&result),
            vec![
                (".hidden/h.txt".into(), 1),
                ("crate/src/bin/main.rs".into(), 1)
            ]
        );
        // A sub-folder search still applies the ignore files above it.
        let sub = run(&ws, json!({"query": "x", "path": "sub"}));
        assert!(places(&sub).is_empty(), "{sub}");
        // Naming a skipped folder searches it.
        let named = run(&ws, json!({"query": "x", "path": "node_modules"}));
        assert_eq!(places(&named), vec![("node_modules/m/i.js".into(), 1)]);
    }

    #[test]
    fn an_edited_ignore_file_is_seen_by_the_next_search() {
        let (dir, ws) = workspace(&[
            (".gitignore", b"a.txt\n"),
            ("sub/.gitignore", b"!a.txt\n"),
            ("a.txt", b"hit"),
            ("b.txt", b"hit"),
            ("sub/a.txt", b"hit"),
            ("sub/b.txt", b"hit"),
        ]);
        let found = |ws: &Workspace| places(&run(ws, json!({"query": "hit"})));
        let names = |names: &[&str]| -> Vec<(String, u64)> {
            names.iter().map(|n| (n.to_string(), 1)).collect()
        };
        assert_eq!(found(&ws), names(&["b.txt", "sub/a.txt", "sub/b.txt"]));
        fs::write(dir.path().join(".gitignore"), "b.txt\n").unwrap();
        assert_eq!(found(&ws), names(&["a.txt", "sub/a.txt"]));
        fs::write(dir.path().join("sub/.gitignore"), "!b.txt\na.txt\n").unwrap();
        assert_eq!(found(&ws), names(&["a.txt", "sub/b.txt"]));
        fs::remove_file(dir.path().join(".gitignore")).unwrap();
        assert_eq!(found(&ws), names(&["a.txt", "b.txt", "sub/b.txt"]));
    }

    #[test]
    fn symlinks_are_not_followed() {
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("secret.txt"), "x").unwrap();
        let (dir, ws) = workspace(&[("real/f.txt", b"x")]);
        let link = |target: &Path, name: &str| {
            std::os::unix::fs::symlink(target, dir.path().join(name)).unwrap();
        };
        link(outside.path(), "out_dir");
        link(&outside.path().join("secret.txt"), "out_file");
        link(&dir.path().join("real"), "in_dir");
        link(&dir.path().join("real/f.txt"), "in_file");
        let result = run(&ws, json!({"query": "x"}));
        assert_eq!(places(&result), vec![("real/f.txt".into(), 1)]);
        assert_eq!(result["entries_walked"], 6);
    }

    #[test]
    fn a_file_with_a_private_key_is_skipped_whole_whatever_the_query() {
        let pem = "config: x\n-----BEGIN RSA PRIVATE KEY-----\nMIIxBAAKx\nqx83vEjKz==\n\
                   -----END RSA PRIVATE KEY-----\nafter x\n";
        let (_dir, ws) = workspace(&[("id", pem.as_bytes()), ("other", b"x\n")]);
        let result = run(&ws, json!({"query": "x"}));
        assert_eq!(places(&result), vec![("other".into(), 1)]);
        assert_eq!(result["skipped"]["key_material"], 1);
        // Whether the query is in the key or not, the answer is the same but for the query.
        for query in ["MIIxBAAK", "MIIxBAAZ", "PRIVATE", "nowhere"] {
            let result = run(&ws, json!({"query": query}));
            assert!(places(&result).is_empty(), "{query}");
            assert_eq!(result["skipped"]["key_material"], 1, "{query}");
        }
    }

    #[test]
    fn results_are_the_same_every_time() {
        let files: Vec<(String, Vec<u8>)> = (0..300)
            .map(|i| {
                (
                    format!("d{}/f{i:03}", i % 7),
                    format!("x {i}\n").repeat(i % 3).into_bytes(),
                )
            })
            .collect();
        let files: Vec<(&str, &[u8])> = files
            .iter()
            .map(|(p, c)| (p.as_str(), c.as_slice()))
            .collect();
        let (_dir, ws) = workspace(&files);
        let limits = small(SearchLimits {
            max_matches: 150,
            ..SearchLimits::default()
        });
        let first = run_with(&ws, &limits, json!({"query": "x"})).unwrap();
        assert_eq!(first["limit_hit"], "matches");
        for _ in 0..5 {
            assert_eq!(
                run_with(&ws, &limits, json!({"query": "x"})).unwrap(),
                first
            );
        }
    }

    #[test]
    fn a_search_over_known_verdicts_gives_what_judging_the_bytes_gives() {
        let pem = "-----BEGIN PRIVATE KEY-----\nMIIxBAAKx\n-----END PRIVATE KEY-----\nx\n";
        let files: [(&str, &[u8], verdicts::Verdict); 4] = [
            ("bin", b"x\0x", verdicts::Verdict::Binary),
            ("key", pem.as_bytes(), verdicts::Verdict::KeyMaterial),
            ("latin1", b"x caf\xe9\n", verdicts::Verdict::NonUtf8),
            ("text", b"x\n", verdicts::Verdict::Text),
        ];
        let (dir, ws) = workspace(&files.map(|(path, bytes, _)| (path, bytes)));
        // Written just now, nothing is kept: every file is judged from its bytes.
        let judged = run(&ws, json!({"query": "x"}));
        let sniff = Limits::default().binary_sniff_bytes;
        let day_on = std::time::SystemTime::now() + std::time::Duration::from_secs(86_400);
        for (path, _, verdict) in files {
            let file = fs::File::open(dir.path().join(path)).unwrap();
            let key = crate::tools::versions::VersionKey::of(&file.metadata().unwrap());
            assert_eq!(verdicts::known(&key, sniff), None);
            verdicts::learn((key, sniff), verdict, &file, day_on);
            assert_eq!(verdicts::known(&key, sniff), Some(verdict));
        }
        assert_eq!(run(&ws, json!({"query": "x"})), judged);
        // A changed file is judged again: its key is new.
        fs::write(dir.path().join("text"), pem).unwrap();
        let changed = run(&ws, json!({"query": "x"}));
        assert_eq!(changed["skipped"]["key_material"], 2);
        assert!(places(&changed).is_empty(), "{changed}");
    }

    /// Follows `next_after` from `after` to the end; the matches of every page, and how many
    /// pages resumed a kept walk.
    fn pages_from(
        ws: &Workspace,
        limits: &Limits,
        after: Option<String>,
    ) -> (Vec<(String, u64)>, usize) {
        let resumed_before = kept::tests::RESUMED.with(std::cell::Cell::get);
        let mut shown = Vec::new();
        let mut after = after;
        loop {
            let mut args = json!({"query": "x", "glob": "[0-9]"});
            if let Some(after) = &after {
                args["after"] = json!(after);
            }
            let page = run_with(ws, limits, args).unwrap();
            shown.extend(places(&page));
            match page["next_after"].as_str() {
                Some(next) => after = Some(next.to_string()),
                None => break,
            }
        }
        let resumed = kept::tests::RESUMED.with(std::cell::Cell::get) - resumed_before;
        (shown, resumed)
    }

    /// Moves a file's or folder's modification time an hour back, as a change a timestamp tick
    /// after the listing shows once its tick has passed.
    fn touch_back(path: &Path) {
        let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3_600);
        fs::File::open(path)
            .unwrap()
            .set_modified(hour_ago)
            .unwrap();
    }

    /// Two folders of four files each, one match per file, paged two files at a time (searched
    /// with the glob `[0-9]`, which leaves the ignore file unread).
    fn paged_tree() -> (tempfile::TempDir, Workspace, Limits) {
        let (dir, ws) = workspace(&[
            (".gitignore", b"*.log\n"),
            ("a/1", b"x\n"),
            ("a/2", b"x\n"),
            ("a/3", b"x\n"),
            ("a/4", b"x\n"),
            ("b/1", b"x\n"),
            ("b/2", b"x\n"),
            ("b/3", b"x\n"),
            ("b/4", b"x\n"),
        ]);
        let limits = small(SearchLimits {
            max_files: 2,
            ..SearchLimits::default()
        });
        (dir, ws, limits)
    }

    #[test]
    fn pages_of_a_settled_tree_continue_the_kept_walk() {
        ignores::tests::TREES_SETTLED.with(|s| s.set(true));
        let (_dir, ws, limits) = paged_tree();
        let (shown, resumed) = pages_from(&ws, &limits, None);
        assert_eq!(shown.len(), 8);
        assert_eq!(resumed, 3, "every page after the first resumes the walk");
        // A page asked twice: the first resumes the kept walk, the second walks afresh, to the
        // same result.
        let args = json!({"query": "x", "glob": "[0-9]", "after": "a/2#end"});
        run_with(&ws, &limits, json!({"query": "x", "glob": "[0-9]"})).unwrap();
        let resumed_before = kept::tests::RESUMED.with(std::cell::Cell::get);
        let kept = run_with(&ws, &limits, args.clone()).unwrap();
        let fresh = run_with(&ws, &limits, args).unwrap();
        assert_eq!(kept, fresh);
        assert_eq!(
            kept::tests::RESUMED.with(std::cell::Cell::get),
            resumed_before + 1
        );
    }

    #[test]
    fn a_tree_changed_between_pages_gives_what_a_fresh_search_gives() {
        ignores::tests::TREES_SETTLED.with(|s| s.set(true));
        let (dir, ws, limits) = paged_tree();
        let root = dir.path();
        let page = |after: &str| {
            run_with(
                &ws,
                &limits,
                json!({"query": "x", "glob": "[0-9]", "after": after}),
            )
            .unwrap()
        };
        let first = run_with(&ws, &limits, json!({"query": "x", "glob": "[0-9]"})).unwrap();
        assert_eq!(first["next_after"], "a/2#end");
        // Added after the cursor, in the cursor's folder and in the next: both are found.
        fs::write(root.join("a/5"), "x\n").unwrap();
        touch_back(&root.join("a"));
        let (shown, resumed) = pages_from(&ws, &limits, Some("a/2#end".into()));
        assert_eq!(
            resumed, 3,
            "the changed walk is not resumed; the fresh one is kept"
        );
        let expected: Vec<(String, u64)> = ["a/3", "a/4", "a/5", "b/1", "b/2", "b/3", "b/4"]
            .iter()
            .map(|p| (p.to_string(), 1))
            .collect();
        assert_eq!(shown, expected);
        // Added before the cursor: not found, as a fresh search from the cursor does not.
        assert_eq!(page("a/4#end")["next_after"], "b/1#end");
        fs::write(root.join("a/0"), "x\n").unwrap();
        fs::write(root.join("b/0"), "x\n").unwrap();
        touch_back(&root.join("a"));
        touch_back(&root.join("b"));
        let (shown, resumed) = pages_from(&ws, &limits, Some("b/1#end".into()));
        assert_eq!(resumed, 1);
        let expected: Vec<(String, u64)> = ["b/2", "b/3", "b/4"]
            .iter()
            .map(|p| (p.to_string(), 1))
            .collect();
        assert_eq!(shown, expected);
        // An ignore file changed in place (its folder unchanged) is seen too.
        assert_eq!(page("a/4#end")["next_after"], "b/0#end");
        fs::write(root.join(".gitignore"), "b/3\n").unwrap();
        touch_back(&root.join(".gitignore"));
        let (shown, resumed) = pages_from(&ws, &limits, Some("b/0#end".into()));
        assert_eq!(resumed, 1, "only the page after the fresh one resumes");
        assert_eq!(
            shown,
            vec![("b/1".into(), 1), ("b/2".into(), 1), ("b/4".into(), 1)]
        );
    }

    #[test]
    fn a_tree_written_within_the_settle_time_is_walked_afresh() {
        let (_dir, ws, limits) = paged_tree();
        let (shown, resumed) = pages_from(&ws, &limits, None);
        assert_eq!(shown.len(), 8);
        assert_eq!(resumed, 0);
    }

    /// A random small tree: paths from a few names (so that `a/…` and `a.txt` interleave) and
    /// text whose lines sometimes hold the query.
    fn tree() -> impl Strategy<Value = Vec<(String, String)>> {
        let name = prop_oneof!["a", "a.txt", "b", "B", "é", "a-b"];
        let path = proptest::collection::vec(name, 1..4).prop_map(|parts| parts.join("/"));
        let line = prop_oneof![
            Just("x".to_string()),
            Just("no".to_string()),
            Just("ax x".to_string()),
            Just(String::new()),
            Just(format!("{}x{}", "y".repeat(150), "\"".repeat(40))),
            Just("-----BEGIN PRIVATE KEY-----".to_string()),
            Just("-----END PRIVATE KEY-----".to_string()),
        ];
        let text = (proptest::collection::vec(line, 0..8), any::<bool>())
            .prop_map(|(lines, crlf)| lines.join(if crlf { "\r\n" } else { "\n" }));
        proptest::collection::vec((path, text), 1..10)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Following `next_after` until a page is complete yields every match of an unlimited
        /// search exactly once, in order, and every page fits the cap.
        #[test]
        fn cursors_lose_and_repeat_nothing(
            files in tree(),
            max_entries in 1usize..8,
            max_files in 1usize..5,
            extra_bytes in 0u64..400,
            max_matches in 1usize..6,
            max_depth in 1usize..4,
            cap in 1_800usize..6_000,
            settled in any::<bool>(),
        ) {
            // A settled tree lets each page keep its walk for the next: then every page is also
            // asked again, from a fresh walk, and must be the same.
            ignores::tests::TREES_SETTLED.with(|s| s.set(settled));
            let dir = tempfile::tempdir().unwrap();
            let mut largest = 0;
            for (path, text) in &files {
                let path = dir.path().join(path);
                // Paths that clash (a file where a folder is wanted) are left out.
                if path.parent().is_some_and(|p| fs::create_dir_all(p).is_ok())
                    && fs::write(&path, text).is_ok()
                {
                    largest = largest.max(text.len() as u64);
                }
            }
            let ws = Workspace::new(&[dir.path().to_path_buf()]).unwrap();
            let unlimited = Limits {
                max_tool_result_bytes: 1 << 30,
                search: SearchLimits {
                    max_entries: usize::MAX,
                    max_files: usize::MAX,
                    max_matches: usize::MAX - 1,
                    max_depth,
                    ..SearchLimits::default()
                },
                ..Limits::default()
            };
            let reference = run_with(&ws, &unlimited, json!({"query": "x"})).unwrap();
            let all = found(&reference);
            let limits = Limits {
                max_tool_result_bytes: cap,
                search: SearchLimits {
                    max_entries,
                    max_files,
                    max_bytes: largest.max(1) + extra_bytes,
                    max_matches,
                    max_depth,
                    ..SearchLimits::default()
                },
                ..Limits::default()
            };
            let mut paged = Vec::new();
            let mut too_deep = 0;
            let mut after: Option<String> = None;
            for _ in 0..200 {
                let mut args = json!({"query": "x"});
                if let Some(after) = &after {
                    args["after"] = json!(after);
                }
                let page = run_with(&ws, &limits, args.clone()).unwrap();
                if settled {
                    prop_assert_eq!(&run_with(&ws, &limits, args).unwrap(), &page);
                }
                prop_assert!(page.to_string().len() <= cap);
                paged.extend(found(&page));
                too_deep += page["skipped"]["too_deep"].as_u64().unwrap();
                // Only the depth limit ends a search that is still truncated: it has no cursor.
                let Some(next) = page["next_after"].as_str().map(str::to_string) else {
                    prop_assert!(page["truncated"] == false || page["limit_hit"] == "depth");
                    break;
                };
                prop_assert_ne!(Some(&next), after.as_ref(), "no progress");
                after = Some(next);
            }
            prop_assert_eq!(paged, all);
            // Pages partition the walk: what one left out for depth, no other counts again.
            prop_assert_eq!(Some(too_deep), reference["skipped"]["too_deep"].as_u64());
        }
    }
}
