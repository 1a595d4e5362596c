//! pen_search: literal search over the workspace, bounded, deterministic and resumable.
//!
//! Architecture invariants:
//! - The walk is sequential and sorted by file name, depth first, so it visits paths in
//!   component-wise [`Path`] order (`a/b` before `a.txt`). Cursors compare paths in that order,
//!   which lets a resumed search prune every folder that lies wholly before its cursor.
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
use super::{ErrorCode, ToolContext, ToolError, ToolSpec, shown};
use crate::limits::{Limits, SearchLimits};
use globset::{GlobBuilder, GlobMatcher};
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::{DirEntry, WalkBuilder};
use memchr::memmem;
use serde::Deserialize;
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, LazyLock, Mutex};

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

/// Files handed to the readers ahead of the in-order merge. Enough to keep every reader busy
/// while the walk lists a large folder, and small enough that a search stopped early by its
/// match limit reads few files for nothing.
const READ_AHEAD_FILES: usize = 32;

/// Marks the cut end of an excerpt. Its bytes count toward `excerpt_bytes`.
const ELLIPSIS: &str = "…";

const BYTE_ORDER_MARK: &str = "\u{feff}";

static DESCRIPTION: LazyLock<String> = LazyLock::new(|| {
    let limits = SearchLimits::default();
    format!(
        "Search the workspace for a literal string (not a regex; `.`, `*`, `(` … match \
         themselves) and return the matching lines in sorted path order. Each match has `path` \
         (relative to the workspace root), `line` (1-based), `column` (1-based, counted in Unicode \
         characters, i.e. scalar values, from the start of the line) and `excerpt` (the line cut \
         to at most {excerpt} bytes around the match, `…` marking a cut). Only the first match on \
         a line is reported. Narrow with `path` (a folder or one file) and `glob` (a file-name \
         glob such as `*.rs`, or a path glob such as `src/**/*.ts` when it contains `/`). \
         Honours .gitignore; never follows symlinks; skips .git and dependency/build folders \
         (node_modules, target, dist, build, vendor, .venv, __pycache__, …) unless named as \
         `path`. Binary and non-UTF-8 files are skipped and counted in `skipped`; lines inside \
         private keys are never shown. Limits: {entries} entries walked, {files} files read, \
         {bytes} bytes read, folders {depth} levels deep, {matches} matches, and the result \
         size. When a limit stops the search, `truncated` is true, `limit_hit` names it, and \
         `next_after` is a cursor: pass it as `after` with the same other arguments to continue \
         exactly where it stopped.",
        excerpt = limits.excerpt_bytes,
        entries = limits.max_entries,
        files = limits.max_files,
        bytes = limits.max_bytes,
        depth = limits.max_depth,
        matches = limits.max_matches,
    )
});

pub fn spec() -> ToolSpec {
    ToolSpec {
        name: "pen_search",
        description: DESCRIPTION.as_str(),
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
    let mut page = search(&request, ctx, budget, envelope.to_string().len())?;
    page.into_value(&request.query, ctx.limits)
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

    /// What the model should do next, naming the limit.
    fn guidance(self, limits: &Limits) -> String {
        let search = &limits.search;
        let what = match self {
            LimitHit::Entries => format!("walked its limit of {} entries", search.max_entries),
            LimitHit::Files => format!("read its limit of {} files", search.max_files),
            LimitHit::Bytes => format!("read its limit of {} bytes", search.max_bytes),
            LimitHit::Matches => format!("stopped at {} matches", search.max_matches),
            LimitHit::ResultBytes => format!(
                "filled this result's share of max_tool_result_bytes ({})",
                limits.max_tool_result_bytes
            ),
            LimitHit::Depth => {
                return format!(
                    "Folders more than {} levels below the search root were not searched. To \
                     search inside one, pass it (or a folder close to it) as `path`.",
                    search.max_depth
                );
            }
        };
        format!(
            "The search {what}. Narrow it with `path`, `glob` or a longer query, or pass \
             `next_after` as `after` to continue exactly where it stopped."
        )
    }
}

/// Where a resumed search picks up, relative to the entry its cursor names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resume {
    /// After the given line of the named file: the next lines of that file are searched.
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
                    Ok(line) if line >= 1 && digits.bytes().all(|b| b.is_ascii_digit()) => {
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
        let resolved = ctx.resolve(args.path.as_deref().unwrap_or(""))?;
        let display = shown(&resolved.display).to_string();
        if !resolved.exists {
            return Err(ToolError::new(
                ErrorCode::NotFound,
                format!("{display} does not exist; use pen_list to find the right folder"),
            ));
        }
        let metadata =
            std::fs::metadata(&resolved.absolute).map_err(|e| ToolError::io(&display, &e))?;
        if !metadata.is_dir() && !metadata.is_file() {
            return Err(ToolError::new(
                ErrorCode::NotAFile,
                format!("{display} is neither a folder nor a regular file"),
            ));
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

    /// The longest result this search can return with no matches: every optional field present,
    /// every number at its widest. What the cap leaves after it is the budget for matches and
    /// the cursor.
    fn envelope(&self, limits: &Limits) -> Value {
        let search = &limits.search;
        let entries = budget::widest(search.max_entries as u64);
        LimitHit::ALL
            .iter()
            .map(|&limit| {
                let page = Page {
                    matches: Vec::new(),
                    stop: Some(Stop {
                        limit,
                        cursor: Some(String::new()),
                    }),
                    skipped: Skipped {
                        binary: entries,
                        non_utf8: entries,
                        too_large: entries,
                        unreadable: entries,
                        key_material: budget::widest(search.max_bytes),
                    },
                    files_searched: budget::widest(search.max_files as u64),
                    entries_walked: entries,
                    bytes_read: budget::widest(search.max_bytes),
                };
                page.to_value(&self.query, limits)
            })
            .max_by_key(|value| value.to_string().len())
            .unwrap_or(Value::Null)
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

    fn is_match(&self, path: &Path, display: &str) -> bool {
        match self {
            FileGlob::Name(matcher) => path.file_name().is_some_and(|n| matcher.is_match(n)),
            FileGlob::Path(matcher) => matcher.is_match(display),
        }
    }
}

/// Finds the query in bytes.
enum Matcher {
    /// Case-sensitive: a plain substring search.
    Exact(memmem::Finder<'static>),
    /// Case-insensitive: the escaped query as a Unicode-aware regex, so `ÄPFEL` finds `äpfel`.
    Caseless(regex::bytes::Regex),
}

impl Matcher {
    fn new(query: &str, case_sensitive: bool) -> Result<Matcher, ToolError> {
        if case_sensitive {
            return Ok(Matcher::Exact(memmem::Finder::new(query).into_owned()));
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
enum Found {
    Shown {
        line: u64,
        column: u64,
        excerpt: String,
    },
    /// A match on a line of a private key: counted, never shown.
    InKey,
}

/// The matches of `text` on lines after `after_line`, one per line, at most `max_shown` of them
/// shown (matches in private keys are counted as they come).
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
    // Only files with a match pay for the key scan.
    let mut key_spans: Option<Vec<Range<usize>>> = None;
    let mut shown = 0;
    while let Some(hit) = matcher.find_at(bytes, line_start) {
        let before = &bytes[line_start..hit.start];
        line += memchr::memchr_iter(b'\n', before).count() as u64;
        let start = memchr::memrchr(b'\n', before).map_or(line_start, |i| line_start + i + 1);
        let end = memchr::memchr(b'\n', &bytes[hit.start..]).map_or(bytes.len(), |i| hit.start + i);
        let spans = key_spans.get_or_insert_with(|| keys::private_key_spans(bytes));
        if spans.iter().any(|span| span.contains(&start)) {
            found.push(Found::InKey);
        } else {
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
            found.push(Found::Shown {
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

/// `line` cut to at most `max` bytes around the match at `start..end` (byte offsets in `line`),
/// on char boundaries, with [`ELLIPSIS`] at each cut end. The match is centred; when it is
/// longer than the room, its start is shown.
fn excerpt(line: &str, start: usize, end: usize, max: usize) -> String {
    let len = line.len();
    if len <= max {
        return line.to_string();
    }
    let room = max.saturating_sub(2 * ELLIPSIS.len());
    let start = start.min(len);
    let end = end.clamp(start, len);
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
    let mut out = String::with_capacity(max);
    if from > 0 {
        out.push_str(ELLIPSIS);
    }
    out.push_str(&line[from..to.max(from)]);
    if to < len {
        out.push_str(ELLIPSIS);
    }
    out
}

/// Why a file was not searched, or a match not shown. Serialized as the `skipped` counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SkipReason {
    Binary,
    NonUtf8,
    TooLarge,
    Unreadable,
}

#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
struct Skipped {
    binary: u64,
    non_utf8: u64,
    too_large: u64,
    unreadable: u64,
    key_material: u64,
}

impl Skipped {
    fn count(&mut self, reason: SkipReason) {
        let counter = match reason {
            SkipReason::Binary => &mut self.binary,
            SkipReason::NonUtf8 => &mut self.non_utf8,
            SkipReason::TooLarge => &mut self.too_large,
            SkipReason::Unreadable => &mut self.unreadable,
        };
        *counter += 1;
    }
}

/// What became of one walked file.
#[derive(Debug)]
enum Outcome {
    Searched { bytes_read: u64, found: Vec<Found> },
    Skipped { reason: SkipReason, bytes_read: u64 },
}

/// A file for a reader.
struct Job {
    index: usize,
    path: PathBuf,
    display: String,
    size: u64,
    after_line: u64,
    entries_walked: u64,
}

/// A walked file with its outcome, in the order of the walk.
struct Done {
    index: usize,
    display: String,
    /// Entries walked up to and including this file: the count a search stopped here reports.
    entries_walked: u64,
    /// Whether the file was opened, and so counts in `files_searched`.
    opened: bool,
    outcome: Outcome,
}

/// What the readers share.
struct ReadPlan<'a> {
    matcher: &'a Matcher,
    binary_sniff_bytes: u64,
    max_shown: usize,
    excerpt_bytes: usize,
}

/// Reads one file (at most the size the walk charged for it) and scans it.
fn read_and_scan(job: &Job, buffer: &mut Vec<u8>, plan: &ReadPlan) -> Outcome {
    buffer.clear();
    let read = |buffer: &mut Vec<u8>| -> io::Result<bool> {
        let mut reader = File::open(&job.path)?.take(job.size);
        buffer.reserve(usize::try_from(job.size).unwrap_or(0));
        // Sniff the head first so a large binary is not read whole.
        (&mut reader)
            .take(plan.binary_sniff_bytes)
            .read_to_end(buffer)?;
        if memchr::memchr(0, buffer).is_some() {
            return Ok(false);
        }
        reader.read_to_end(buffer)?;
        Ok(true)
    };
    let text = read(buffer);
    let bytes_read = buffer.len() as u64;
    let skipped = |reason| Outcome::Skipped { reason, bytes_read };
    match text {
        Err(_) => skipped(SkipReason::Unreadable),
        Ok(false) => skipped(SkipReason::Binary),
        Ok(true) => match std::str::from_utf8(buffer) {
            Err(_) => skipped(SkipReason::NonUtf8),
            Ok(text) => Outcome::Searched {
                bytes_read,
                found: scan(
                    text,
                    plan.matcher,
                    job.after_line,
                    plan.max_shown,
                    plan.excerpt_bytes,
                ),
            },
        },
    }
}

/// One reader thread: takes jobs until the walk ends, skipping them once the search stopped.
fn reader(jobs: &Mutex<Receiver<Job>>, done: Sender<Done>, stop: &AtomicBool, plan: &ReadPlan) {
    let mut buffer = Vec::new();
    loop {
        let job = match jobs.lock() {
            Ok(receiver) => match receiver.recv() {
                Ok(job) => job,
                Err(_) => return,
            },
            Err(_) => return,
        };
        if stop.load(Ordering::Relaxed) {
            continue;
        }
        let outcome = read_and_scan(&job, &mut buffer, plan);
        let sent = done.send(Done {
            index: job.index,
            display: job.display,
            entries_walked: job.entries_walked,
            opened: true,
            outcome,
        });
        if sent.is_err() {
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
    too_deep: Arc<AtomicBool>,
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
            self.too_deep.store(true, Ordering::Relaxed);
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

fn is_skipped_folder(path: &Path) -> bool {
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

/// Why the walk stopped before its end.
struct WalkStop {
    limit: LimitHit,
    /// The last entry walked, which the cursor names.
    last: Option<PathBuf>,
}

/// A search stopped by a limit, and where to resume.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stop {
    limit: LimitHit,
    cursor: Option<String>,
}

/// A search's result before serialization.
#[derive(Debug)]
struct Page {
    matches: Vec<Value>,
    stop: Option<Stop>,
    skipped: Skipped,
    files_searched: u64,
    entries_walked: u64,
    bytes_read: u64,
}

impl Page {
    fn to_value(&self, query: &str, limits: &Limits) -> Value {
        let mut value = json!({
            "query": query,
            "matches": self.matches,
            "truncated": self.stop.is_some(),
            "skipped": self.skipped,
            "files_searched": self.files_searched,
            "entries_walked": self.entries_walked,
            "bytes_read": self.bytes_read,
        });
        if let (Some(stop), Some(object)) = (&self.stop, value.as_object_mut()) {
            object.insert("limit_hit".into(), json!(stop.limit));
            if let Some(cursor) = &stop.cursor {
                object.insert("next_after".into(), json!(cursor));
            }
            object.insert("guidance".into(), json!(stop.limit.guidance(limits)));
        }
        value
    }

    /// The result object, checked against the cap. The page budget leaves room for any cursor
    /// no longer than the budget; a longer one (a deep path at a small cap) gives back matches
    /// until the result fits.
    fn into_value(&mut self, query: &str, limits: &Limits) -> Result<Value, ToolError> {
        loop {
            let value = self.to_value(query, limits);
            let len = value.to_string().len();
            if len <= limits.max_tool_result_bytes {
                return Ok(value);
            }
            self.matches.pop();
            let Some(last) = self.matches.last() else {
                return Err(budget::budget_too_small(len, limits));
            };
            self.stop = Some(Stop {
                limit: LimitHit::ResultBytes,
                cursor: Some(match_cursor(last)),
            });
        }
    }
}

/// The cursor that resumes right after a match object's line.
fn match_cursor(value: &Value) -> String {
    Cursor {
        display: value["path"].as_str().unwrap_or_default().to_string(),
        resume: Resume::AfterLine(value["line"].as_u64().unwrap_or_default()),
    }
    .to_string()
}

/// Merges outcomes in walk order into a page, deciding the match and result-size limits.
struct Collector<'a> {
    limits: &'a Limits,
    budget: usize,
    envelope_len: usize,
    /// Escaped bytes the matches take in the result, commas included.
    used: usize,
    page: Page,
    /// Outcomes that arrived before an earlier one, by walk index.
    waiting: BTreeMap<usize, Done>,
    next: usize,
    stopped: bool,
    error: Option<ToolError>,
}

impl<'a> Collector<'a> {
    fn new(limits: &'a Limits, budget: usize, envelope_len: usize) -> Collector<'a> {
        Collector {
            limits,
            budget,
            envelope_len,
            used: 0,
            page: Page {
                matches: Vec::new(),
                stop: None,
                skipped: Skipped::default(),
                files_searched: 0,
                entries_walked: 0,
                bytes_read: 0,
            },
            waiting: BTreeMap::new(),
            next: 0,
            stopped: false,
            error: None,
        }
    }

    fn accept(&mut self, done: Done) {
        self.waiting.insert(done.index, done);
        while !self.stopped {
            let Some(done) = self.waiting.remove(&self.next) else {
                break;
            };
            self.next += 1;
            self.merge(done);
        }
    }

    fn merge(&mut self, done: Done) {
        let page = &mut self.page;
        page.entries_walked = done.entries_walked;
        page.files_searched += u64::from(done.opened);
        match done.outcome {
            Outcome::Skipped { reason, bytes_read } => {
                page.skipped.count(reason);
                page.bytes_read += bytes_read;
            }
            Outcome::Searched { bytes_read, found } => {
                page.bytes_read += bytes_read;
                for found in found {
                    match found {
                        Found::InKey => self.page.skipped.key_material += 1,
                        Found::Shown {
                            line,
                            column,
                            excerpt,
                        } => {
                            let shown = json!({
                                "path": done.display,
                                "line": line,
                                "column": column,
                                "excerpt": excerpt,
                            });
                            if !self.add(shown, line, &done.display) {
                                return;
                            }
                        }
                    }
                }
            }
        }
    }

    /// Adds a match if the limits allow; otherwise stops the search and returns false.
    fn add(&mut self, shown: Value, line: u64, display: &str) -> bool {
        if self.page.matches.len() >= self.limits.search.max_matches {
            return self.stop(LimitHit::Matches);
        }
        let cost = shown.to_string().len() + usize::from(!self.page.matches.is_empty());
        let cursor = Cursor {
            display: display.to_string(),
            resume: Resume::AfterLine(line),
        };
        let cursor_len = budget::escaped_len(&cursor.to_string());
        if self.used + cost + cursor_len > self.budget {
            if self.page.matches.is_empty() {
                self.error = Some(budget::budget_too_small(
                    self.envelope_len + cost + cursor_len,
                    self.limits,
                ));
                self.stopped = true;
                return false;
            }
            return self.stop(LimitHit::ResultBytes);
        }
        self.used += cost;
        self.page.matches.push(shown);
        true
    }

    fn stop(&mut self, limit: LimitHit) -> bool {
        self.page.stop = Some(Stop {
            limit,
            cursor: self.page.matches.last().map(match_cursor),
        });
        self.stopped = true;
        false
    }
}

/// Walks the search root in order, hands files to the readers and merges their outcomes.
fn search(
    request: &Request,
    ctx: &ToolContext,
    budget: usize,
    envelope_len: usize,
) -> Result<Page, ToolError> {
    let limits = &ctx.limits.search;
    let too_deep = Arc::new(AtomicBool::new(false));
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
        matcher: &request.matcher,
        binary_sniff_bytes: ctx.limits.binary_sniff_bytes as u64,
        max_shown: limits.max_matches.saturating_add(1),
        excerpt_bytes: limits.excerpt_bytes,
    };
    let readers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let stop = AtomicBool::new(false);
    let mut collector = Collector::new(ctx.limits, budget, envelope_len);

    let (job_sender, job_receiver) = mpsc::sync_channel::<Job>(READ_AHEAD_FILES);
    let job_receiver = Mutex::new(job_receiver);
    let (walk_stop, entries_walked) = std::thread::scope(|scope| {
        let (done_sender, done_receiver) = mpsc::channel::<Done>();
        for _ in 0..readers {
            let done_sender = done_sender.clone();
            let (job_receiver, stop, plan) = (&job_receiver, &stop, &plan);
            scope.spawn(move || reader(job_receiver, done_sender, stop, plan));
        }
        drop(done_sender);

        let mut entries = 0u64;
        let mut files = 0usize;
        let mut bytes = 0u64;
        let mut index = 0usize;
        let mut last: Option<PathBuf> = None;
        let mut walk_stop = None;
        for entry in walk {
            while let Ok(done) = done_receiver.try_recv() {
                collector.accept(done);
            }
            if collector.stopped {
                break;
            }
            let entry = match entry {
                Ok(entry) => entry,
                Err(_) => {
                    // A folder that cannot be listed: counted where a sequential search meets it.
                    collector.accept(Done {
                        index,
                        display: String::new(),
                        entries_walked: entries,
                        opened: false,
                        outcome: Outcome::Skipped {
                            reason: SkipReason::Unreadable,
                            bytes_read: 0,
                        },
                    });
                    index += 1;
                    continue;
                }
            };
            let is_file = entry.file_type().is_some_and(|t| t.is_file());
            if entry.depth() == 0 && !is_file {
                continue;
            }
            let mut after_line = 0;
            if let Some((after, resume)) = &request.after {
                let relative = entry
                    .path()
                    .strip_prefix(&request.root)
                    .unwrap_or(entry.path());
                match (position(relative, after), resume) {
                    (Position::After, _) => {}
                    (Position::At, Resume::AfterLine(line)) if is_file => after_line = *line,
                    _ => continue,
                }
            }
            if entries as usize >= limits.max_entries {
                walk_stop = Some(WalkStop {
                    limit: LimitHit::Entries,
                    last,
                });
                break;
            }
            if !is_file {
                entries += 1;
                last = Some(entry.into_path());
                continue;
            }
            let display = ctx.workspace.display(entry.path());
            if let Some(glob) = &request.glob
                && !glob.is_match(entry.path(), &display)
            {
                entries += 1;
                last = Some(entry.into_path());
                continue;
            }
            let size = match entry.metadata() {
                Ok(metadata) if metadata.len() > limits.max_bytes => Err(SkipReason::TooLarge),
                Ok(metadata) => Ok(metadata.len()),
                Err(_) => Err(SkipReason::Unreadable),
            };
            let size = match size {
                Ok(size) => size,
                Err(reason) => {
                    entries += 1;
                    collector.accept(Done {
                        index,
                        display,
                        entries_walked: entries,
                        opened: false,
                        outcome: Outcome::Skipped {
                            reason,
                            bytes_read: 0,
                        },
                    });
                    index += 1;
                    last = Some(entry.into_path());
                    continue;
                }
            };
            let limit = if files >= limits.max_files {
                Some(LimitHit::Files)
            } else if bytes + size > limits.max_bytes {
                Some(LimitHit::Bytes)
            } else {
                None
            };
            if let Some(limit) = limit {
                walk_stop = Some(WalkStop { limit, last });
                break;
            }
            entries += 1;
            files += 1;
            bytes += size;
            let job = Job {
                index,
                path: entry.path().to_path_buf(),
                display,
                size,
                after_line,
                entries_walked: entries,
            };
            index += 1;
            last = Some(entry.into_path());
            if job_sender.send(job).is_err() {
                break;
            }
        }
        drop(job_sender);
        while !collector.stopped {
            match done_receiver.recv() {
                Ok(done) => collector.accept(done),
                Err(_) => break,
            }
        }
        // Readers skip what is still queued once the page is complete.
        stop.store(true, Ordering::Relaxed);
        (walk_stop, entries)
    });

    if let Some(error) = collector.error {
        return Err(error);
    }
    let mut page = collector.page;
    if page.stop.is_none() {
        page.entries_walked = entries_walked;
        if let Some(walk_stop) = walk_stop {
            let cursor = match walk_stop.last {
                Some(path) => Some(
                    Cursor {
                        display: ctx.workspace.display(&path),
                        resume: Resume::AfterEntry,
                    }
                    .to_string(),
                ),
                // Nothing was walked before the limit: resume where this page began.
                None => request.after_text.clone(),
            };
            page.stop = Some(Stop {
                limit: walk_stop.limit,
                cursor,
            });
        } else if too_deep.load(Ordering::Relaxed) {
            page.stop = Some(Stop {
                limit: LimitHit::Depth,
                cursor: None,
            });
        }
    }
    Ok(page)
}
