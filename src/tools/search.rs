//! pen_search: literal search over the workspace, bounded, deterministic and resumable.
//!
//! Architecture invariants:
//! - The walk is sequential and sorted by file name, depth first, so it visits paths in
//!   component-wise [`Path`] order (`a/b` before `a.txt`). Cursors compare paths in that order,
//!   which lets a resumed search prune every folder that lies wholly before its cursor. Pages
//!   partition the walk: a page ends exactly where the next begins (at the first match it could
//!   not show, or after the last entry it walked), so no match is lost or shown twice, and the
//!   entries before a cursor are neither walked nor counted again (a page limited by entries
//!   would otherwise never get past them).
//! - Files are read and scanned by worker threads, but their outcomes are merged strictly in walk
//!   order, and every limit is decided at the point of the walk where a sequential search would
//!   decide it. The result is therefore the same as a sequential search's, whatever the timing.
//! - The result never exceeds `max_tool_result_bytes`: matches are added only while they and the
//!   cursor fit the page budget, and the finished result is measured once more before it leaves.
//!
//! Deliberately absent: regular expressions (the query is literal), following symlinks, and
//! `.gitignore` files outside the workspace or from the user's global git configuration (a
//! result must not depend on who runs it).

use super::budget;
use super::keys;
use super::{ErrorCode, ToolContext, ToolDoc, ToolError, shown};
use crate::limits::{Limits, SearchLimits};
use crate::workspace::{RootDir, Target, Workspace};
use globset::{GlobBuilder, GlobMatcher};
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::{DirEntry, WalkBuilder};
use memchr::memmem;
use serde::Deserialize;
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::fmt;
use std::io::{self, Read};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchArgs {
    pub query: String,
    pub path: Option<String>,
    pub glob: Option<String>,
    pub case_sensitive: Option<bool>,
    pub after: Option<String>,
}

/// Folders never searched below the search root: version-control metadata and the usual
/// dependency, cache and build-output folders, which are large, generated and rarely what the
/// model is looking for. Naming one of them as `path` still searches it.
pub const SKIPPED_FOLDERS: &[&str] = &[
    ".git",
    ".hg",
    ".svn",
    "node_modules",
    "target",
    "dist",
    "build",
    "vendor",
    ".venv",
    "venv",
    "__pycache__",
    ".tox",
    ".gradle",
    ".next",
    "out",
];

/// Folders that are .NET build output only when they sit beside a project or solution file;
/// elsewhere (`src/bin` in a Rust crate, say) they hold source and are searched.
const DOTNET_OUTPUT_FOLDERS: &[&str] = &["bin", "obj"];

/// The extensions of the files that mark a folder as a .NET project.
const DOTNET_PROJECT_EXTENSIONS: &[&str] = &["csproj", "fsproj", "vbproj", "sln"];

/// Files go to the readers in batches of this many: one hand-over per batch instead of per file
/// keeps thread wake-ups off the hot path, and a small batch keeps small the reading done for
/// nothing after an early stop.
const BATCH_FILES: usize = 16;

/// Batches queued for the readers ahead of the in-order merge: enough to keep every reader busy
/// while the walk lists a large folder.
const READ_AHEAD_BATCHES: usize = 4;

/// Marks the cut end of an excerpt. Its bytes count toward `excerpt_bytes`.
const ELLIPSIS: &str = "…";

const BYTE_ORDER_MARK: &str = "\u{feff}";

fn description(limits: &SearchLimits) -> String {
    format!(
        "Search the workspace for a literal string (not a regex; `.`, `*`, `(` … match \
         themselves) and return the matching lines in sorted path order. Each match has `path` \
         (relative to the workspace root), `line` (1-based), `column` (1-based, counted in Unicode \
         characters, i.e. scalar values, from the start of the line) and `excerpt` (the line cut \
         to at most {excerpt} bytes around the match, `…` marking a cut). Only the first match on \
         a line is reported. Narrow with `path` (a folder or one file) and `glob` (a file-name \
         glob such as `*.rs`, or a path glob such as `src/**/*.ts` when it contains `/`). \
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

pub fn spec(limits: &Limits) -> ToolDoc {
    ToolDoc {
        description: description(&limits.search),
        input_schema: json!({
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "minLength": 1,
                    "description": "The literal text to find (not a regex). It may contain any character."
                },
                "path": {
                    "type": "string",
                    "description": "A folder or a single file to search, relative to the workspace root. Default: the whole workspace."
                },
                "glob": {
                    "type": "string",
                    "description": "Only search files matching this glob: a file-name glob such as `*.rs` or `*.{ts,tsx}`, or, when it contains `/`, a glob over the path from the workspace root such as `src/**/*.ts` (`*` does not cross `/`, `**` does)."
                },
                "case_sensitive": {
                    "type": "boolean",
                    "description": "Match case exactly (default true). False ignores case, for non-ASCII letters too."
                },
                "after": {
                    "type": "string",
                    "description": "The `next_after` cursor of a previous truncated search with the same query, path, glob and case_sensitive; the search continues right after it."
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
    let page = search(&request, ctx, budget, envelope_len)?;
    page.finish(&request.query, ctx.limits)
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
        let workspace_root = ctx
            .workspace
            .roots()
            .iter()
            .filter(|r| resolved.absolute.starts_with(&r.path))
            .max_by_key(|r| r.path.as_os_str().len())
            .map_or_else(|| resolved.absolute.clone(), |r| r.path.clone());
        Ok(Request {
            query: args.query,
            matcher,
            glob,
            root: resolved.absolute,
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

/// The `glob` argument: matched against the file name, or against the path from the workspace
/// root when it contains `/`.
enum FileGlob {
    Name(GlobMatcher),
    Path(GlobMatcher),
}

impl FileGlob {
    fn new(glob: &str) -> Result<FileGlob, ToolError> {
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
    fn is_match(&self, path: &Path, display: impl FnOnce() -> String) -> bool {
        match self {
            FileGlob::Name(matcher) => path.file_name().is_some_and(|n| matcher.is_match(n)),
            FileGlob::Path(matcher) => matcher.is_match(display()),
        }
    }
}

/// Finds the query in bytes.
enum Matcher {
    /// Case-sensitive: a plain substring search.
    Exact(Box<memmem::Finder<'static>>),
    /// Case-insensitive: the escaped query as a Unicode-aware regex, so `ÄPFEL` finds `äpfel`.
    Caseless(regex::bytes::Regex),
}

impl Matcher {
    fn new(query: &str, case_sensitive: bool) -> Result<Matcher, ToolError> {
        if case_sensitive {
            return Ok(Matcher::Exact(Box::new(
                memmem::Finder::new(query).into_owned(),
            )));
        }
        regex::bytes::RegexBuilder::new(&regex::escape(query))
            .case_insensitive(true)
            .build()
            .map(Matcher::Caseless)
            .map_err(|e| {
                ToolError::new(
                    ErrorCode::InvalidArguments,
                    format!(
                        "invalid arguments: field `query` cannot be searched without case: {e}. \
                         Use a shorter query or case_sensitive: true."
                    ),
                )
            })
    }

    /// The first match starting at or after `at`.
    fn find_at(&self, haystack: &[u8], at: usize) -> Option<Range<usize>> {
        match self {
            Matcher::Exact(finder) => {
                let start = at + finder.find(haystack.get(at..)?)?;
                Some(start..start + finder.needle().len())
            }
            Matcher::Caseless(regex) => regex.find_at(haystack, at).map(|m| m.range()),
        }
    }
}

/// A match found in a file, before it is placed in the result.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Found {
    line: u64,
    column: u64,
    excerpt: Excerpt,
}

/// The matches of `text` on lines after `after_line`, one per line, at most `max_shown` of them.
/// `text` holds no private key: files that do are skipped whole before they are scanned.
fn scan(
    text: &str,
    matcher: &Matcher,
    after_line: u64,
    max_shown: usize,
    excerpt_bytes: usize,
) -> Vec<Found> {
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    let (mut line, mut line_start) = match after_line.checked_sub(1) {
        None => (1, 0),
        Some(newlines_before) => {
            match memchr::memchr_iter(b'\n', bytes).nth(newlines_before as usize) {
                Some(at) => (after_line + 1, at + 1),
                None => return found,
            }
        }
    };
    let mut shown = 0;
    while let Some(hit) = matcher.find_at(bytes, line_start) {
        let before = &bytes[line_start..hit.start];
        line += memchr::memchr_iter(b'\n', before).count() as u64;
        let start = memchr::memrchr(b'\n', before).map_or(line_start, |i| line_start + i + 1);
        let end = memchr::memchr(b'\n', &bytes[hit.start..]).map_or(bytes.len(), |i| hit.start + i);
        {
            // Editors do not show the byte-order mark, so columns do not count it.
            let start = if start == 0 && text.starts_with(BYTE_ORDER_MARK) && hit.start > 0 {
                BYTE_ORDER_MARK.len()
            } else {
                start
            };
            let content_end = if end > start && bytes[end - 1] == b'\r' {
                end - 1
            } else {
                end
            };
            let content = text.get(start..content_end).unwrap_or_default();
            let in_line = hit.start - start;
            let column = content.get(..in_line).map_or(0, |s| s.chars().count()) as u64 + 1;
            found.push(Found {
                line,
                column,
                excerpt: excerpt(content, in_line, hit.end - start, excerpt_bytes),
            });
            shown += 1;
            if shown == max_shown {
                break;
            }
        }
        if end == bytes.len() {
            break;
        }
        line_start = end + 1;
        line += 1;
    }
    found
}

/// A line, or the part of it around a match, as a result shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Excerpt {
    text: String,
    /// The byte range of the match in `text` (cut short where `text` is).
    matched: Range<usize>,
    /// The length of `text` JSON-escaped, measured by the reader so that the in-order merge,
    /// the one sequential part of a search, does not have to.
    escaped_len: usize,
}

/// `line` cut to at most `max` bytes around the match at `start..end` (byte offsets in `line`),
/// on char boundaries, with [`ELLIPSIS`] at each cut end. The match is centred; when it is
/// longer than the room, its start is shown.
fn excerpt(line: &str, start: usize, end: usize, max: usize) -> Excerpt {
    let len = line.len();
    let start = start.min(len);
    let end = end.clamp(start, len);
    if len <= max {
        return Excerpt {
            text: line.to_string(),
            matched: start..end,
            escaped_len: budget::escaped_len(line),
        };
    }
    let room = max.saturating_sub(2 * ELLIPSIS.len());
    let lead = room.saturating_sub(end - start) / 2;
    let mut from = start.saturating_sub(lead);
    let mut to = from + room;
    if to > len {
        to = len;
        from = len - room;
    }
    // An end at the edge of the line needs no ellipsis; its bytes go to the other side.
    let one_cut = max.saturating_sub(ELLIPSIS.len());
    if from == 0 {
        to = one_cut.min(len);
    } else if to == len {
        from = len.saturating_sub(one_cut);
    }
    while !line.is_char_boundary(from) {
        from += 1;
    }
    while !line.is_char_boundary(to) {
        to -= 1;
    }
    let to = to.max(from);
    let mut text = String::with_capacity(max);
    if from > 0 {
        text.push_str(ELLIPSIS);
    }
    let shift = text.len();
    text.push_str(&line[from..to]);
    if to < len {
        text.push_str(ELLIPSIS);
    }
    Excerpt {
        escaped_len: budget::escaped_len(&text),
        text,
        matched: shift + start.clamp(from, to) - from..shift + end.clamp(from, to) - from,
    }
}

impl Excerpt {
    /// A shorter excerpt of the same match whose JSON-escaped text takes at most `room` bytes,
    /// if one can still show the match's start. Lets the first match of a page fit a small cap
    /// even when its line is full of characters JSON escapes at six bytes each.
    fn shrunk_to(&self, room: usize) -> Option<Excerpt> {
        let smallest = 2 * ELLIPSIS.len() + 1;
        let mut max = self.text.len();
        loop {
            let cut = excerpt(&self.text, self.matched.start, self.matched.end, max);
            let escaped = cut.escaped_len;
            if escaped <= room {
                return Some(cut);
            }
            // Each byte cut saves at most six escaped bytes.
            max = max.checked_sub((escaped - room).div_ceil(6))?;
            if max < smallest {
                return None;
            }
        }
    }
}

/// Why a file was not searched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SkipReason {
    Binary,
    NonUtf8,
    TooLarge,
    Unreadable,
    /// The file holds a private key ([`keys::holds_key_material`]): nothing of it is searched,
    /// so that no result depends on the key, whatever the query.
    KeyMaterial,
}

/// The `skipped` counts of a result: files not searched by reason (key material included, one
/// per file), and entries too deep to enter.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
struct Skipped {
    binary: u64,
    non_utf8: u64,
    too_large: u64,
    unreadable: u64,
    /// Entries not entered because they lie more than `max_depth` levels below the root.
    too_deep: u64,
    key_material: u64,
}

impl Skipped {
    fn count(&mut self, reason: SkipReason) {
        let counter = match reason {
            SkipReason::Binary => &mut self.binary,
            SkipReason::NonUtf8 => &mut self.non_utf8,
            SkipReason::TooLarge => &mut self.too_large,
            SkipReason::Unreadable => &mut self.unreadable,
            SkipReason::KeyMaterial => &mut self.key_material,
        };
        *counter += 1;
    }
}

/// What became of one walked file.
#[derive(Debug)]
enum Outcome {
    /// The file was opened. Its size when opened is charged to the byte limit; a binary file is
    /// charged in full though only its head is read.
    Read {
        size: u64,
        bytes_read: u64,
        content: Content,
    },
    /// The file was not read: too large, or unreadable (or a folder the walk could not list).
    NotRead(SkipReason),
}

#[derive(Debug)]
enum Content {
    Text(Vec<Shown>),
    Skipped(SkipReason),
}

/// A match to show, its result object already built by the reader, so that the merge, the
/// sequential part of a search, only places it.
#[derive(Debug)]
struct Shown {
    line: u64,
    value: Value,
    /// The serialized length of `value`, and of the escaped excerpt in it.
    json_len: usize,
    excerpt_len: usize,
    /// Where the match lies in the excerpt, to cut a shorter one.
    matched: Range<usize>,
}

/// Builds the result objects of the matches of the file shown as `display`.
fn prepare(found: Vec<Found>, display: &str) -> Vec<Shown> {
    let path_len = budget::escaped_len(display);
    found
        .into_iter()
        .map(
            |Found {
                 line,
                 column,
                 excerpt,
             }| Shown {
                line,
                json_len: match_json_len(path_len, line, column, excerpt.escaped_len),
                excerpt_len: excerpt.escaped_len,
                matched: excerpt.matched,
                value: match_value(display, line, column, excerpt.text),
            },
        )
        .collect()
}

/// A file for a reader, in walk order.
struct Job {
    index: usize,
    path: PathBuf,
    /// The entry walked before this file: a limit that stops the search at this file resumes
    /// after it.
    previous: Option<PathBuf>,
    /// The walk up to the entry before this file, and up to and including this file.
    before: Walked,
    walked: Walked,
    after_line: u64,
}

/// How much of the walk lies behind a point in it. A page reports the counts at the point where
/// it stopped, which is where the next page starts counting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Walked {
    entries: u64,
    /// Entries not entered because they lie deeper than `max_depth`; not counted as entries.
    too_deep: u64,
}

/// A walked file with its outcome.
struct Done {
    job: Job,
    /// The file's path as results show it; empty unless it has matches to show.
    display: String,
    outcome: Outcome,
}

/// What the readers share.
struct ReadPlan<'a> {
    /// The workspace root every file is opened beneath, following no link: the walk goes by
    /// path, so a folder swapped for a symlink mid-walk can show it names from elsewhere, but
    /// never a byte from outside the root.
    root_dir: RootDir,
    workspace: &'a Workspace,
    matcher: &'a Matcher,
    max_bytes: u64,
    binary_sniff_bytes: u64,
    max_shown: usize,
    excerpt_bytes: usize,
    /// Open documents are searched in their unsaved editor text.
    editor: Option<&'a dyn super::Editor>,
}

/// Reads one file (at most the size it had when opened), scans it and prepares its matches.
fn read_and_scan(job: Job, buffer: &mut Vec<u8>, plan: &ReadPlan) -> Done {
    buffer.clear();
    let mut display = String::new();
    let mut read = || -> io::Result<Outcome> {
        let snapshot = plan.editor.and_then(|editor| editor.snapshot(&job.path));
        let (size, binary) = match snapshot {
            // An open document is searched as the editor has it, unsaved changes and all.
            Some(snapshot) => {
                let size = super::source::ByteSource::len(&snapshot);
                if size > plan.max_bytes {
                    return Ok(Outcome::NotRead(SkipReason::TooLarge));
                }
                buffer.extend_from_slice(&super::source::read_range(&snapshot, 0, size)?);
                let head = &buffer[..buffer.len().min(plan.binary_sniff_bytes as usize)];
                (size, memchr::memchr(0, head).is_some())
            }
            None => {
                // The size comes from the open file, not the walk: a stat by path would cost
                // the walk, which is the one sequential part of a search, a second path lookup
                // per file.
                let (file, metadata) = plan.root_dir.open_file_no_links(&job.path)?;
                let size = metadata.len();
                if size > plan.max_bytes {
                    return Ok(Outcome::NotRead(SkipReason::TooLarge));
                }
                let mut reader = file.take(size);
                buffer.reserve(usize::try_from(size).unwrap_or(0));
                // Sniff the head first so that a large binary is not read whole.
                (&mut reader)
                    .take(plan.binary_sniff_bytes)
                    .read_to_end(buffer)?;
                let binary = memchr::memchr(0, buffer).is_some();
                if !binary {
                    reader.read_to_end(buffer)?;
                }
                (size, binary)
            }
        };
        let content = if binary {
            Content::Skipped(SkipReason::Binary)
        } else {
            match std::str::from_utf8(buffer) {
                Err(_) => Content::Skipped(SkipReason::NonUtf8),
                // Decided per file, before the query is looked for, so that the count is the
                // same whatever the query.
                Ok(text) if keys::holds_key_material(text.as_bytes()) => {
                    Content::Skipped(SkipReason::KeyMaterial)
                }
                Ok(text) => {
                    let found = scan(
                        text,
                        plan.matcher,
                        job.after_line,
                        plan.max_shown,
                        plan.excerpt_bytes,
                    );
                    if !found.is_empty() {
                        display = plan.workspace.display(&job.path);
                    }
                    Content::Text(prepare(found, &display))
                }
            }
        };
        Ok(Outcome::Read {
            size,
            bytes_read: buffer.len() as u64,
            content,
        })
    };
    let outcome = read().unwrap_or(Outcome::NotRead(SkipReason::Unreadable));
    Done {
        job,
        display,
        outcome,
    }
}

/// One reader thread: takes batches until the walk ends, skipping files once the search stopped.
fn reader(
    batches: &Mutex<Receiver<Vec<Job>>>,
    done: Sender<Vec<Done>>,
    stop: &AtomicBool,
    plan: &ReadPlan,
) {
    let mut buffer = Vec::new();
    loop {
        let batch = match batches.lock().map(|receiver| receiver.recv()) {
            Ok(Ok(batch)) => batch,
            _ => return,
        };
        let outcomes = batch
            .into_iter()
            .take_while(|_| !stop.load(Ordering::Relaxed))
            .map(|job| read_and_scan(job, &mut buffer, plan))
            .collect();
        if done.send(outcomes).is_err() {
            return;
        }
    }
}

/// Where an entry lies relative to a cursor, both relative to the search root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Position {
    /// Walked by an earlier page, with everything below it.
    Before,
    /// A folder on the way to the cursor: entered, but not walked again.
    Enclosing,
    At,
    After,
}

fn position(entry: &Path, cursor: &Path) -> Position {
    if entry == cursor {
        Position::At
    } else if cursor.starts_with(entry) {
        Position::Enclosing
    } else if entry < cursor {
        Position::Before
    } else {
        Position::After
    }
}

/// Decides which entries the walk yields and which folders it enters.
struct EntryFilter {
    root: PathBuf,
    after: Option<PathBuf>,
    max_depth: usize,
    /// Counts the entries left out for their depth; the walk loop takes the count after each
    /// step, which places them in walk order.
    too_deep: Arc<AtomicU64>,
    /// Ignore files of the workspace folders above the search root, deepest first; the walk
    /// itself only reads those at and below the root.
    enclosing_ignores: Vec<Gitignore>,
}

impl EntryFilter {
    fn keep(&self, entry: &DirEntry) -> bool {
        if let Some(after) = &self.after {
            let relative = entry
                .path()
                .strip_prefix(&self.root)
                .unwrap_or(entry.path());
            if position(relative, after) == Position::Before {
                return false;
            }
        }
        if entry.depth() > self.max_depth {
            self.too_deep.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let is_dir = entry.file_type().is_some_and(|t| t.is_dir());
        if is_dir && is_skipped_folder(entry.path()) {
            return false;
        }
        for ignores in &self.enclosing_ignores {
            let matched = ignores.matched(entry.path(), is_dir);
            if matched.is_ignore() {
                return false;
            }
            if matched.is_whitelist() {
                break;
            }
        }
        true
    }
}

/// Whether search (and the disk watcher) skips this folder: a VCS or dependency/build folder by
/// name, or .NET build output beside a project file.
pub fn is_skipped_folder(path: &Path) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    if SKIPPED_FOLDERS.contains(&name) {
        return true;
    }
    DOTNET_OUTPUT_FOLDERS.contains(&name)
        && path.parent().is_some_and(|parent| {
            std::fs::read_dir(parent).is_ok_and(|entries| {
                entries.flatten().any(|e| {
                    Path::new(&e.file_name())
                        .extension()
                        .and_then(|x| x.to_str())
                        .is_some_and(|x| DOTNET_PROJECT_EXTENSIONS.contains(&x))
                })
            })
        })
}

/// The ignore files of the folders from the workspace root down to just above `root`, deepest
/// first, so that searching a sub-folder skips what searching the whole workspace skips.
fn enclosing_ignores(workspace_root: &Path, root: &Path) -> Vec<Gitignore> {
    root.ancestors()
        .skip(1)
        .take_while(|dir| dir.starts_with(workspace_root))
        .filter_map(|dir| {
            let mut builder = GitignoreBuilder::new(dir);
            // Later files take precedence, as in the walk: .ignore over .gitignore over exclude.
            // A missing file is no error here.
            for file in [".git/info/exclude", ".gitignore", ".ignore"] {
                let _ = builder.add(dir.join(file));
            }
            builder
                .build()
                .ok()
                .filter(|g| g.num_ignores() + g.num_whitelists() > 0)
        })
        .collect()
}

/// A search stopped by a limit, and where to resume.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stop {
    limit: LimitHit,
    cursor: Option<String>,
}

/// The bytes of a serialized match besides its path, numbers and excerpt.
const MATCH_FIXED_LEN: usize = r#"{"path":"","line":,"column":,"excerpt":""}"#.len();

/// The bytes a match object takes serialized, from the escaped lengths of its strings.
fn match_json_len(path_len: usize, line: u64, column: u64, excerpt_len: usize) -> usize {
    MATCH_FIXED_LEN + path_len + decimal_len(line) + decimal_len(column) + excerpt_len
}

/// A match as the result shows it: `{path, line, column, excerpt}`.
fn match_value(display: &str, line: u64, column: u64, excerpt: String) -> Value {
    let mut object = serde_json::Map::new();
    object.insert("path".into(), display.into());
    object.insert("line".into(), line.into());
    object.insert("column".into(), column.into());
    object.insert("excerpt".into(), Value::String(excerpt));
    Value::Object(object)
}

/// The cursor that resumes at a match object's line: a page that stops because that match did
/// not fit hands it on, so that the next page starts exactly where this one ended.
fn cursor_before(shown: &Value) -> String {
    resume_before(
        shown["path"].as_str().unwrap_or_default(),
        shown["line"].as_u64().unwrap_or_default(),
    )
}

/// The cursor that resumes after the walked entry `last`, or, when the page walked nothing,
/// where it began (`page_start`).
fn resume_after(
    workspace: &Workspace,
    last: Option<&Path>,
    page_start: Option<&str>,
) -> Option<String> {
    match last {
        Some(path) => Some(
            Cursor {
                display: workspace.display(path),
                resume: Resume::AfterEntry,
            }
            .to_string(),
        ),
        None => page_start.map(str::to_string),
    }
}

/// The cursor that resumes at `line` of the file shown as `display`: after the line before it.
fn resume_before(display: &str, line: u64) -> String {
    Cursor {
        display: display.to_string(),
        resume: Resume::AfterLine(line.saturating_sub(1)),
    }
    .to_string()
}

fn decimal_len(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |digits| digits as usize + 1)
}

/// A search's result before serialization.
#[derive(Debug, Default)]
struct Page {
    matches: Vec<Value>,
    /// Escaped bytes the matches take in the result, commas included.
    matches_len: usize,
    stop: Option<Stop>,
    skipped: Skipped,
    files_searched: u64,
    entries_walked: u64,
    bytes_read: u64,
}

impl Page {
    /// The result object, with `matches` in place of the page's own. Built field by field so
    /// that the matches are moved in, not copied.
    fn to_value(&self, query: &str, limits: &Limits, matches: Vec<Value>) -> Value {
        let mut object = serde_json::Map::new();
        object.insert("query".into(), query.into());
        object.insert("matches".into(), Value::Array(matches));
        object.insert("truncated".into(), self.stop.is_some().into());
        if let Some(stop) = &self.stop {
            object.insert("limit_hit".into(), json!(stop.limit));
            if let Some(cursor) = &stop.cursor {
                object.insert("next_after".into(), cursor.as_str().into());
            }
            object.insert("guidance".into(), stop.limit.guidance(limits).into());
        }
        object.insert("skipped".into(), json!(self.skipped));
        object.insert("files_searched".into(), self.files_searched.into());
        object.insert("entries_walked".into(), self.entries_walked.into());
        object.insert("bytes_read".into(), self.bytes_read.into());
        Value::Object(object)
    }

    /// Takes the walk's counts at the point where the page ends (so far).
    fn walked_to(&mut self, walked: Walked) {
        self.entries_walked = walked.entries;
        self.skipped.too_deep = walked.too_deep;
    }

    /// Adds a match whose serialized length is `json_len`.
    fn push(&mut self, shown: Value, json_len: usize) {
        self.matches_len += json_len + usize::from(!self.matches.is_empty());
        self.matches.push(shown);
    }

    fn pop(&mut self) -> Option<Value> {
        let last = self.matches.pop()?;
        self.matches_len -= last.to_string().len() + usize::from(!self.matches.is_empty());
        Some(last)
    }

    /// The result object, within the cap. The matches and their cursor always fit the page
    /// budget, and the guidance the other half of what the envelope leaves; only a longer cursor
    /// (the path of a deep entry at a small cap) can overflow. Then matches are given back until
    /// the result fits.
    fn finish(mut self, query: &str, limits: &Limits) -> Result<Value, ToolError> {
        loop {
            // Measure everything but the matches, whose length is already known, so that a
            // result with thousands of matches is not serialized just to be measured.
            let len = self.to_value(query, limits, Vec::new()).to_string().len() + self.matches_len;
            if len <= limits.max_tool_result_bytes {
                let matches = std::mem::take(&mut self.matches);
                return Ok(self.to_value(query, limits, matches));
            }
            let Some(last) = self.pop().filter(|_| !self.matches.is_empty()) else {
                return Err(budget::budget_too_small(len, limits));
            };
            self.stop = Some(Stop {
                limit: LimitHit::ResultBytes,
                cursor: Some(cursor_before(&last)),
            });
        }
    }
}

/// Merges outcomes in walk order into a page, deciding the file, byte, match and result-size
/// limits at the file where a sequential search would decide them.
struct Collector<'a> {
    limits: &'a Limits,
    workspace: &'a Workspace,
    /// The cursor this page began at: where to resume when it stops before walking anything.
    after_text: Option<&'a str>,
    budget: usize,
    envelope_len: usize,
    page: Page,
    /// Bytes charged to the byte limit so far.
    charged: u64,
    /// Outcomes that arrived before an earlier one, by walk index.
    waiting: BTreeMap<usize, Done>,
    next: usize,
    /// Tells the readers to skip the files still queued.
    stop_readers: &'a AtomicBool,
    stopped: bool,
    error: Option<ToolError>,
}

impl Collector<'_> {
    fn accept(&mut self, done: Done) {
        self.waiting.insert(done.job.index, done);
        while !self.stopped {
            let Some(done) = self.waiting.remove(&self.next) else {
                break;
            };
            self.next += 1;
            self.merge(done);
        }
    }

    fn merge(&mut self, done: Done) {
        let Done {
            job,
            display,
            outcome,
        } = done;
        let (size, bytes_read, content) = match outcome {
            Outcome::NotRead(reason) => {
                self.page.walked_to(job.walked);
                self.page.skipped.count(reason);
                return;
            }
            Outcome::Read {
                size,
                bytes_read,
                content,
            } => (size, bytes_read, content),
        };
        let search = &self.limits.search;
        let limit = if self.page.files_searched >= search.max_files as u64 {
            Some(LimitHit::Files)
        } else if self.charged + size > search.max_bytes {
            Some(LimitHit::Bytes)
        } else {
            None
        };
        if let Some(limit) = limit {
            // This file is not part of the page: the next one starts with it.
            self.page.walked_to(job.before);
            let cursor = resume_after(self.workspace, job.previous.as_deref(), self.after_text);
            self.stop(limit, cursor);
            return;
        }
        self.page.walked_to(job.walked);
        self.page.files_searched += 1;
        self.page.bytes_read += bytes_read;
        self.charged += size;
        let found = match content {
            Content::Skipped(reason) => {
                self.page.skipped.count(reason);
                return;
            }
            Content::Text(found) => found,
        };
        let path_len = budget::escaped_len(&display);
        for shown in found {
            if !self.add(&display, path_len, shown) {
                return;
            }
        }
    }

    /// Adds a match of the file shown as `display` (`path_len` bytes escaped) if the limits
    /// allow; otherwise ends the page before it and returns false.
    fn add(&mut self, display: &str, path_len: usize, shown: Shown) -> bool {
        // The next page starts at the match this one could not show.
        let next_page = || Some(resume_before(display, shown.line));
        if self.page.matches.len() >= self.limits.search.max_matches {
            self.stop(LimitHit::Matches, next_page());
            return false;
        }
        // Room for the excerpt once the rest of this match and a cursor as long as its own are
        // counted: a page's cursor names the first match it could not show, usually alike.
        let cursor = path_len + "#L".len() + decimal_len(shown.line);
        let fields = shown.json_len - shown.excerpt_len;
        let comma = usize::from(!self.page.matches.is_empty());
        let room = self
            .budget
            .saturating_sub(self.page.matches_len + comma + fields + cursor);
        if shown.excerpt_len <= room {
            self.page.push(shown.value, shown.json_len);
            return true;
        }
        if !self.page.matches.is_empty() {
            self.stop(LimitHit::ResultBytes, next_page());
            return false;
        }
        // The first match of a page is shown with a shorter excerpt rather than not at all.
        let excerpt = Excerpt {
            text: shown.value["excerpt"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            matched: shown.matched,
            escaped_len: shown.excerpt_len,
        };
        let mut value = shown.value;
        match (excerpt.shrunk_to(room), value.as_object_mut()) {
            (Some(shorter), Some(object)) => {
                object.insert("excerpt".into(), Value::String(shorter.text));
                self.page.push(value, fields + shorter.escaped_len);
                true
            }
            _ => {
                self.error = Some(budget::budget_too_small(
                    self.envelope_len + fields + cursor,
                    self.limits,
                ));
                self.stopped = true;
                self.stop_readers.store(true, Ordering::Relaxed);
                false
            }
        }
    }

    /// Ends the page with `limit`; the next page starts at `cursor`.
    fn stop(&mut self, limit: LimitHit, cursor: Option<String>) {
        self.page.stop = Some(Stop { limit, cursor });
        self.stopped = true;
        self.stop_readers.store(true, Ordering::Relaxed);
    }
}

/// What the walk makes of one entry.
enum Step {
    /// Nothing to read: a folder, a symlink, a file the glob leaves out, or an entry an earlier
    /// page walked.
    Pass,
    /// A file to read.
    Read(Job),
    /// A folder the walk could not list.
    Unlisted(Done),
    /// The entry limit: this entry is not walked.
    EntryLimit,
}

/// The sequential half of a search: walks entries in order, counts them against the entry
/// limit, and turns each wanted file into a job.
struct Walker<'a> {
    request: &'a Request,
    workspace: &'a Workspace,
    max_entries: u64,
    walked: Walked,
    index: usize,
    /// The last entry walked: the entry limit's cursor names it.
    last: Option<PathBuf>,
}

impl Walker<'_> {
    /// Takes the next entry of the walk; `too_deep` entries were left out for their depth just
    /// before it. They belong to this page unless the page ends at this entry.
    fn step(&mut self, entry: Result<DirEntry, ignore::Error>, too_deep: u64) -> Step {
        let entry = match entry {
            Ok(entry) => entry,
            Err(_) => {
                self.walked.too_deep += too_deep;
                let job = self.job(PathBuf::new(), self.walked, 0);
                return Step::Unlisted(Done {
                    job,
                    display: String::new(),
                    outcome: Outcome::NotRead(SkipReason::Unreadable),
                });
            }
        };
        let is_file = entry.file_type().is_some_and(|t| t.is_file());
        let mut after_line = 0;
        let passed = if entry.depth() == 0 && !is_file {
            true
        } else if let Some((after, resume)) = &self.request.after {
            let relative = entry
                .path()
                .strip_prefix(&self.request.root)
                .unwrap_or(entry.path());
            match (position(relative, after), resume) {
                (Position::After, _) => false,
                (Position::At, Resume::AfterLine(line)) if is_file => {
                    after_line = *line;
                    false
                }
                _ => true,
            }
        } else {
            false
        };
        if passed {
            self.walked.too_deep += too_deep;
            return Step::Pass;
        }
        if self.walked.entries >= self.max_entries {
            return Step::EntryLimit;
        }
        let before = self.walked;
        self.walked.too_deep += too_deep;
        self.walked.entries += 1;
        let wanted = is_file
            && self.request.glob.as_ref().is_none_or(|glob| {
                glob.is_match(entry.path(), || self.workspace.display(entry.path()))
            });
        let path = entry.into_path();
        if !wanted {
            self.last = Some(path);
            return Step::Pass;
        }
        let previous = self.last.replace(path.clone());
        let mut job = self.job(path, before, after_line);
        job.previous = previous;
        Step::Read(job)
    }

    /// The next item in walk order.
    fn job(&mut self, path: PathBuf, before: Walked, after_line: u64) -> Job {
        self.index += 1;
        Job {
            index: self.index - 1,
            path,
            previous: None,
            before,
            walked: self.walked,
            after_line,
        }
    }
}

/// Walks the search root in order, hands files in batches to the readers and merges their
/// outcomes in walk order.
fn search(
    request: &Request,
    ctx: &ToolContext,
    budget: usize,
    envelope_len: usize,
) -> Result<Page, ToolError> {
    let limits = &ctx.limits.search;
    let too_deep = Arc::new(AtomicU64::new(0));
    let filter = EntryFilter {
        root: request.root.clone(),
        after: request.after.as_ref().map(|(path, _)| path.clone()),
        max_depth: limits.max_depth,
        too_deep: Arc::clone(&too_deep),
        enclosing_ignores: enclosing_ignores(&request.workspace_root, &request.root),
    };
    let walk = WalkBuilder::new(&request.root)
        .hidden(false)
        .parents(false)
        .ignore(true)
        .git_ignore(true)
        .git_exclude(true)
        .git_global(false)
        .require_git(false)
        .follow_links(false)
        .sort_by_file_name(|a, b| a.cmp(b))
        .filter_entry(move |entry| filter.keep(entry))
        .build();
    let plan = ReadPlan {
        root_dir: ctx.workspace.root_dir(&request.workspace_root)?,
        workspace: ctx.workspace,
        matcher: &request.matcher,
        max_bytes: limits.max_bytes,
        binary_sniff_bytes: ctx.limits.binary_sniff_bytes as u64,
        max_shown: limits.max_matches.saturating_add(1),
        excerpt_bytes: limits.excerpt_bytes,
        editor: ctx.editor,
    };
    let mut walker = Walker {
        request,
        workspace: ctx.workspace,
        max_entries: limits.max_entries as u64,
        walked: Walked::default(),
        index: 0,
        last: None,
    };
    let stop_readers = AtomicBool::new(false);
    let mut collector = Collector {
        limits: ctx.limits,
        workspace: ctx.workspace,
        after_text: request.after_text.as_deref(),
        budget,
        envelope_len,
        page: Page::default(),
        charged: 0,
        waiting: BTreeMap::new(),
        next: 0,
        stop_readers: &stop_readers,
        stopped: false,
        error: None,
    };
    let mut entry_limit = false;
    let readers = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|scope| {
        let (batch_sender, batch_receiver) = mpsc::sync_channel::<Vec<Job>>(READ_AHEAD_BATCHES);
        // Only the readers hold the receiver, so that if they all ended, a send fails instead
        // of waiting forever.
        let batch_receiver = Arc::new(Mutex::new(batch_receiver));
        let (done_sender, done_receiver) = mpsc::channel::<Vec<Done>>();
        for _ in 0..readers {
            let (batches, done) = (Arc::clone(&batch_receiver), done_sender.clone());
            let (stop_readers, plan) = (&stop_readers, &plan);
            scope.spawn(move || reader(&batches, done, stop_readers, plan));
        }
        drop((batch_receiver, done_sender));
        let mut batch = Vec::with_capacity(BATCH_FILES);
        for entry in walk {
            for done in done_receiver.try_iter().flatten() {
                collector.accept(done);
            }
            if collector.stopped {
                break;
            }
            match walker.step(entry, too_deep.swap(0, Ordering::Relaxed)) {
                Step::Pass => {}
                Step::Unlisted(done) => collector.accept(done),
                Step::EntryLimit => {
                    entry_limit = true;
                    break;
                }
                Step::Read(job) => {
                    batch.push(job);
                    if batch.len() >= BATCH_FILES {
                        let full = std::mem::replace(&mut batch, Vec::with_capacity(BATCH_FILES));
                        if batch_sender.send(full).is_err() {
                            break;
                        }
                    }
                }
            }
        }
        if !entry_limit {
            // The walk's last step may have left out deep entries after the last one yielded.
            walker.walked.too_deep += too_deep.swap(0, Ordering::Relaxed);
        }
        if !batch.is_empty() && !collector.stopped {
            // A failed send means every reader is gone; the merge below then ends early.
            let _ = batch_sender.send(batch);
        }
        drop(batch_sender);
        while !collector.stopped {
            match done_receiver.recv() {
                Ok(outcomes) => outcomes.into_iter().for_each(|done| collector.accept(done)),
                Err(_) => break,
            }
        }
        stop_readers.store(true, Ordering::Relaxed);
    });

    if let Some(error) = collector.error {
        return Err(error);
    }
    let mut page = collector.page;
    if page.stop.is_none() {
        page.walked_to(walker.walked);
        if entry_limit {
            let cursor = resume_after(
                ctx.workspace,
                walker.last.as_deref(),
                request.after_text.as_deref(),
            );
            page.stop = Some(Stop {
                limit: LimitHit::Entries,
                cursor,
            });
        } else if page.skipped.too_deep > 0 {
            page.stop = Some(Stop {
                limit: LimitHit::Depth,
                cursor: None,
            });
        }
    }
    Ok(page)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::call;
    use proptest::prelude::*;
    use std::fs;

    /// A temporary workspace holding `files` (path, content); folders are created as needed.
    fn workspace(files: &[(&str, &[u8])]) -> (tempfile::TempDir, Workspace) {
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
        let ctx = ToolContext {
            workspace,
            limits,
            ledger: None,
            editor: None,
        };
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
    fn excerpt_keeps_short_lines_whole() {
        assert_eq!(excerpt("let x = 1;", 4, 5, 200).text, "let x = 1;");
        assert_eq!(excerpt(&"a".repeat(200), 0, 1, 200).text, "a".repeat(200));
    }

    #[test]
    fn excerpt_centres_the_match_and_marks_cut_ends() {
        let line = format!("{}NEEDLE{}", "a".repeat(300), "b".repeat(300));
        let cut = excerpt(&line, 300, 306, 200);
        assert_eq!(&cut.text[cut.matched.clone()], "NEEDLE");
        let cut = cut.text;
        assert_eq!(cut.len(), 200);
        assert!(cut.starts_with('…') && cut.ends_with('…'), "{cut}");
        let at = cut.find("NEEDLE").unwrap();
        let after = cut.len() - at - "NEEDLE".len();
        assert!(at.abs_diff(after) <= 1, "{at} {after}");
        // At either end of the line only one side is cut, and gets the room of both.
        let start = excerpt(&line, 0, 1, 200).text;
        assert_eq!(start, format!("{}…", "a".repeat(197)));
        let end = excerpt(&line, line.len() - 1, line.len(), 200).text;
        assert_eq!(end, format!("…{}", "b".repeat(197)));
    }

    #[test]
    fn excerpt_of_a_match_longer_than_the_room_shows_its_start() {
        let line = format!("xx{}yy", "m".repeat(500));
        let cut = excerpt(&line, 2, 502, 200).text;
        assert!(cut.starts_with("…mmm"), "{cut}");
        assert!(cut.len() <= 200);
    }

    #[test]
    fn a_shrunk_excerpt_fits_its_escaped_room_and_keeps_the_match() {
        let line = format!("{}NEEDLE{}", "\u{1}".repeat(100), "\"".repeat(100));
        let full = excerpt(&line, 100, 106, 200);
        for room in [40, 80, 150, 300] {
            let shrunk = full.shrunk_to(room).unwrap();
            assert!(budget::escaped_len(&shrunk.text) <= room, "{room}");
            assert_eq!(&shrunk.text[shrunk.matched.clone()], "NEEDLE", "{room}");
        }
        assert_eq!(full.shrunk_to(6), None);
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

    proptest! {
        #[test]
        fn excerpt_is_bounded_cut_on_chars_and_shows_the_match(
            parts in proptest::collection::vec(prop_oneof!["a", "é", "€", "😀", "\"", "\t"], 0..400),
            at in 0usize..400,
            max in 7usize..300,
        ) {
            let line: String = parts.concat();
            let starts: Vec<usize> = line.char_indices().map(|(i, _)| i).collect();
            prop_assume!(!starts.is_empty());
            let start = starts[at % starts.len()];
            let end = start + line[start..].chars().next().unwrap().len_utf8();
            let Excerpt { text: cut, matched, escaped_len } = excerpt(&line, start, end, max);
            prop_assert_eq!(escaped_len, budget::escaped_len(&cut));
            prop_assert!(cut.len() <= max, "{} > {max}", cut.len());
            prop_assert!(cut.get(matched.clone()).is_some_and(|m| line[start..end].starts_with(m)));
            let body = cut.trim_start_matches('…').trim_end_matches('…');
            prop_assert!(line.contains(body));
            // The matched char is visible, unless the line is too short to need a cut.
            let matched = &line[start..end];
            prop_assert!(cut.contains(matched) || max < 6 + matched.len());
        }
    }

    #[test]
    fn scan_reports_lines_and_columns_in_chars_once_per_line() {
        let text = "\u{feff}x here\r\nno\r\näöü x x\nlast x";
        let matcher = Matcher::new("x", true).unwrap();
        let found = scan(text, &matcher, 0, 100, 200);
        let shown: Vec<(u64, u64, String)> = found
            .into_iter()
            .map(|f| (f.line, f.column, f.excerpt.text))
            .collect();
        assert_eq!(
            shown,
            vec![
                (1, 1, "x here".to_string()),
                (3, 5, "äöü x x".to_string()),
                (4, 6, "last x".to_string()),
            ]
        );
        let resumed = scan(text, &matcher, 3, 100, 200);
        assert_eq!(resumed.len(), 1);
        assert!(scan(text, &matcher, 4, 100, 200).is_empty());
        assert!(scan(text, &matcher, 99, 100, 200).is_empty());
        assert_eq!(scan(text, &matcher, 0, 2, 200).len(), 2);
    }

    #[test]
    fn match_length_is_computed_as_serde_json_writes_it() {
        let samples = [
            ("src/a.rs", 1, 9, "plain"),
            ("dir/\"quoted\"\\é", 1_234_567, 10, "tab\tnul\u{0}😀…"),
        ];
        for (path, line, column, excerpt) in samples {
            let value = match_value(path, line, column, excerpt.to_string());
            assert_eq!(
                value,
                json!({"path": path, "line": line, "column": column, "excerpt": excerpt})
            );
            let len = match_json_len(
                budget::escaped_len(path),
                line,
                column,
                budget::escaped_len(excerpt),
            );
            assert_eq!(len, value.to_string().len(), "{value}");
        }
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
    fn walk_order_is_component_wise_path_order() {
        let cursor = Path::new("a/b/c.txt");
        assert_eq!(position(Path::new("a"), cursor), Position::Enclosing);
        assert_eq!(position(Path::new("a/b"), cursor), Position::Enclosing);
        assert_eq!(position(Path::new("a/b/c.txt"), cursor), Position::At);
        assert_eq!(position(Path::new("a/a.txt"), cursor), Position::Before);
        assert_eq!(position(Path::new("a/b/d"), cursor), Position::After);
        // `a/b` is walked before `a.txt`, although "a/b" > "a.txt" as strings.
        assert_eq!(position(Path::new("a.txt"), cursor), Position::After);
        assert_eq!(
            position(Path::new("a"), Path::new("a.txt")),
            Position::Before
        );
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
        ) {
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
                let page = run_with(&ws, &limits, args).unwrap();
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
