//! pen_list: one directory, sorted by name and paged with an exclusive name cursor.
//!
//! The entries of a page fit the page budget; its cursor, a copy of the last name, fits in the
//! half of the cap the budget leaves free, so a minimum page holds a 255-byte plain name whole.
//! A name too long for a page on its own (only escaping can do that) comes back cut and flagged
//! while the cursor still moves past it, so no entry is lost or repeated: the cursor is the
//! full name when it fits, else a short `PREFIX/HASH` cursor that does not repeat the name.
//!
//! A page costs what it shows, not where it starts. The folder's sorted listing is kept under
//! the folder's version ([`VersionKey`]: device, inode, size, modification and change times,
//! which change whenever an entry is added, removed or renamed in it), and the next page of the
//! same version is cut from it after a binary search for its cursor; a folder that changed is
//! listed again, so every page is the page a fresh listing gives. Like a file's hash, a listing
//! is kept only once the folder's timestamps are [`FILE_VERSION_SETTLE`] older than the moment
//! the listing began and the same after it: a change within the timestamp tick the listing saw
//! could otherwise leave the folder changed under the same key. Kept listings are process-wide
//! and bounded ([`LIST_SNAPSHOT_FOLDERS`], [`LIST_SNAPSHOT_BYTES`], forgotten
//! [`LIST_SNAPSHOT_IDLE`] after their last page); sizes are never kept: each page stats its own
//! entries.
//!
//! [`FILE_VERSION_SETTLE`]: crate::limits::FILE_VERSION_SETTLE

use super::budget::{self, escaped_len, fitting_prefix, widest};
use super::subject::Subject;
use super::versions::VersionKey;
use super::{ErrorCode, ToolContext, ToolDoc, ToolError, shown};
use crate::limits::{
    LIST_CURSOR_PREFIX_BYTES, LIST_SNAPSHOT_BYTES, LIST_SNAPSHOT_FOLDERS, LIST_SNAPSHOT_IDLE,
    Limits,
};
use crate::workspace::{Opened, Target};
use rustix::fs::{AtFlags, FileType};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::ffi::OsStr;
use std::io;
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Instant, SystemTime};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Args {
    pub path: Option<String>,
    pub after: Option<String>,
    pub limit: Option<u64>,
}

/// What a call lists: the folder.
pub fn subject(arguments: &Value) -> Subject {
    Subject::path(arguments)
}

pub fn spec(limits: &Limits) -> ToolDoc {
    let max = limits.max_list_entries;
    ToolDoc {
        description: format!(
            "List one directory, sorted by name (byte order). Each entry has `name`, `kind` (file, dir, \
            symlink or other) and `size` for files. Returns `total` entries in the directory and, while more \
            remain, `next_after`: pass it back as `after` for the next page. At most {max} entries a page. A name \
            too long to fit a page on its own comes back cut with `name_truncated: true`."
        ),
        input_schema: json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Directory relative to the workspace root (default: the root)."},
                "after": {"type": "string", "description": "Exclusive name cursor: the `next_after` of the previous page."},
                "limit": {"type": "integer", "minimum": 1, "maximum": max, "description": format!("Entries per page (default and maximum {max}).")}
            },
            "additionalProperties": false
        }),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Kind {
    File,
    Dir,
    Symlink,
    Other,
}

#[derive(Debug, Serialize)]
struct Entry {
    name: String,
    kind: Kind,
    #[serde(skip_serializing_if = "Option::is_none")]
    size: Option<u64>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    name_truncated: bool,
}

pub fn run(args: Args, ctx: &ToolContext) -> Result<Value, ToolError> {
    run_at(args, ctx, SystemTime::now(), |dir| {
        VersionKey::of_fd(dir).ok()
    })
}

/// [`run`] for a call that began at `started`, with the folder's version as `version` takes it.
fn run_at(
    args: Args,
    ctx: &ToolContext,
    started: SystemTime,
    version: impl Fn(BorrowedFd<'_>) -> Option<VersionKey>,
) -> Result<Value, ToolError> {
    let limits = ctx.limits;
    let limit = super::bounded_count(args.limit, limits.max_list_entries, "limit")?;
    let opened = ctx.open(args.path.as_deref().unwrap_or(""))?;
    let display = opened.resolved.display.clone();
    match &opened.target {
        Target::Dir(_) => {}
        Target::Missing(_) | Target::DanglingLink => {
            return Err(ToolError::new(
                ErrorCode::NotFound,
                format!(
                    "{} does not exist; list its parent to see what is there",
                    shown(&display)
                ),
            ));
        }
        Target::File(..) | Target::Other => {
            return Err(ToolError::new(
                ErrorCode::NotADirectory,
                format!(
                    "{} is not a directory; read it with pen_read",
                    shown(&display)
                ),
            ));
        }
    }
    let dir = opened.dir_fd().ok_or_else(|| {
        ToolError::new(
            ErrorCode::NotADirectory,
            format!("{} is not a directory", shown(&display)),
        )
    })?;
    let listing =
        listing(&opened, dir, limit, started, version).map_err(|e| ToolError::io(&display, &e))?;
    let total = listing.len();
    let first = args
        .after
        .as_deref()
        .map_or(0, |after| first_after(&listing, after));

    let envelope = json!({
        "path": display, "entries": [], "total": widest(total as u64), "next_after": "",
    });
    let budget = budget::page_budget(&envelope, limits)?;
    let envelope_len = envelope.to_string().len();
    let mut entries: Vec<Entry> = Vec::new();
    // Bytes of the entries array's contents so far (entries and commas).
    let mut used = 0usize;
    // The cursor of a page whose one entry is a cut name, when that name cannot be repeated.
    let mut cut_cursor: Option<String> = None;
    for index in (first..total).take(limit) {
        let name = listing.name(index);
        // The entry's own type, never its target's; the folder's descriptor answers what the
        // listing does not (a file system without entry types) and gives file sizes.
        let stat = || rustix::fs::statat(dir, listing.raw_name(index), AtFlags::SYMLINK_NOFOLLOW);
        let file_type = match listing.file_type(index) {
            FileType::Unknown => {
                stat().map_or(FileType::Unknown, |s| FileType::from_raw_mode(s.st_mode))
            }
            known => known,
        };
        let kind = match file_type {
            FileType::Symlink => Kind::Symlink,
            FileType::Directory => Kind::Dir,
            FileType::RegularFile => Kind::File,
            _ => Kind::Other,
        };
        let size = match kind {
            Kind::File => stat().ok().map(|s| s.st_size as u64),
            _ => None,
        };
        let mut entry = Entry {
            name: name.to_string(),
            kind,
            size,
            name_truncated: false,
        };
        let comma = usize::from(!entries.is_empty());
        // Only the entries count against the budget. The cursor is a copy of the last name on
        // the page, so it is never longer than the entries and fits in the half of the cap
        // the budget leaves free: a 255-byte plain name always fits a minimum page whole.
        let cost = entry_len(&entry) + comma;
        if used + cost > budget {
            if !entries.is_empty() {
                break;
            }
            // Alone on its page and still too long (only escaping can do that): cut the
            // name, flag it, move past it.
            entry.name_truncated = true;
            let fixed = entry_len(&Entry {
                name: String::new(),
                ..entry
            });
            let (cut, _) = fitting_prefix(name, budget.saturating_sub(fixed));
            entry.name.truncate(cut);
            let used = entry_len(&entry);
            // The full name is the cursor when it fits what the cap leaves (the model then
            // learns the whole name); else a short cursor that names it without repeating it.
            if envelope_len + used + escaped_len(name) > limits.max_tool_result_bytes {
                cut_cursor = Some(long_name_cursor(name));
            }
            entries.push(entry);
            break;
        }
        used += cost;
        entries.push(entry);
    }
    let shown_to = first + entries.len();
    let mut value = json!({ "path": display, "entries": entries, "total": total });
    if shown_to < total && !entries.is_empty() {
        value["next_after"] =
            json!(cut_cursor.unwrap_or_else(|| listing.name(shown_to - 1).to_string()));
    }
    Ok(value)
}

/// One folder's entries as one listing saw them, sorted by their shown names' bytes. The names
/// share one buffer, so a listing of 100,000 entries is three allocations, not 100,000.
#[derive(Debug)]
struct Listing {
    /// Every name in the order the folder gave them, a name that is not UTF-8 in its lossy
    /// form (which is how it is shown, sorted and cursored).
    text: String,
    /// The entries in sorted order.
    entries: Vec<Span>,
    /// The own bytes of each name that is not UTF-8, by where its lossy form starts in `text`
    /// (ascending), to reach that entry by name in the folder.
    raw: Vec<(usize, Box<[u8]>)>,
}

/// One entry of a [`Listing`]: its name, `text[start..start + len]`, and its type as the
/// folder gave it.
#[derive(Debug, Clone, Copy)]
struct Span {
    start: usize,
    len: u32,
    file_type: FileType,
}

impl Listing {
    /// Reads every entry of the folder (`.` and `..` left out) and sorts them.
    fn read(dir: rustix::fs::Dir) -> io::Result<Listing> {
        let mut text = String::new();
        let mut entries = Vec::new();
        let mut raw = Vec::new();
        for entry in dir {
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let start = text.len();
            match std::str::from_utf8(name) {
                Ok(name) => text.push_str(name),
                Err(_) => {
                    text.push_str(&String::from_utf8_lossy(name));
                    raw.push((start, Box::from(name)));
                }
            }
            let len = u32::try_from(text.len() - start)
                .map_err(|_| io::Error::other("a name too long to list"))?;
            entries.push(Span {
                start,
                len,
                file_type: entry.file_type(),
            });
        }
        let mut listing = Listing { text, entries, raw };
        let mut entries = std::mem::take(&mut listing.entries);
        // Names are unique, but two that are not UTF-8 can share a lossy form: their own
        // bytes then order them, so the order never depends on the folder's.
        entries.sort_unstable_by(|a, b| {
            listing
                .span_name(a)
                .as_bytes()
                .cmp(listing.span_name(b).as_bytes())
                .then_with(|| listing.span_raw(a).cmp(listing.span_raw(b)))
        });
        listing.entries = entries;
        listing.text.shrink_to_fit();
        listing.entries.shrink_to_fit();
        Ok(listing)
    }

    fn len(&self) -> usize {
        self.entries.len()
    }

    fn span_name(&self, span: &Span) -> &str {
        &self.text[span.start..span.start + span.len as usize]
    }

    /// The name's own bytes: what the folder holds.
    fn span_raw(&self, span: &Span) -> &[u8] {
        match self
            .raw
            .binary_search_by_key(&span.start, |(start, _)| *start)
        {
            Ok(at) => &self.raw[at].1,
            Err(_) => self.span_name(span).as_bytes(),
        }
    }

    /// The shown name of the entry at `index` (in sorted order).
    fn name(&self, index: usize) -> &str {
        self.span_name(&self.entries[index])
    }

    /// The name of the entry at `index` as the folder holds it, for the calls that reach it.
    fn raw_name(&self, index: usize) -> &OsStr {
        OsStr::from_bytes(self.span_raw(&self.entries[index]))
    }

    fn file_type(&self, index: usize) -> FileType {
        self.entries[index].file_type
    }

    /// The number of entries, from the first, whose names satisfy `pred` (which holds for a
    /// leading run of the sorted names).
    fn partition_point(&self, pred: impl Fn(&str) -> bool) -> usize {
        self.entries
            .partition_point(|span| pred(self.span_name(span)))
    }

    /// The memory the listing holds.
    fn memory(&self) -> usize {
        let raw_entry = std::mem::size_of::<(usize, Box<[u8]>)>();
        self.text.capacity()
            + self.entries.capacity() * std::mem::size_of::<Span>()
            + self
                .raw
                .iter()
                .map(|(_, bytes)| raw_entry + bytes.len())
                .sum::<usize>()
    }
}

/// The folder's entries: the kept listing of its version, else a new listing, kept for the
/// next pages when the folder holds more than one page of `page` entries and its version has
/// settled (see the module's documentation).
fn listing(
    opened: &Opened,
    dir: BorrowedFd<'_>,
    page: usize,
    started: SystemTime,
    version: impl Fn(BorrowedFd<'_>) -> Option<VersionKey>,
) -> io::Result<Arc<Listing>> {
    let before = version(dir);
    if let Some(kept) = before
        .as_ref()
        .and_then(|key| with_kept(|kept| kept.get(key)))
    {
        return Ok(kept);
    }
    // The entries are read from the folder the walk opened, never by its path again.
    let listing = Arc::new(Listing::read(opened.read_dir()?)?);
    if let Some(key) = before
        && listing.len() > page
        && key.settled(started)
        && version(dir) == Some(key)
    {
        with_kept(|kept| kept.keep(key, Arc::clone(&listing)));
    }
    Ok(listing)
}

/// Listings kept for the next pages of their folders' versions, least recently used first
/// out, each forgotten [`LIST_SNAPSHOT_IDLE`] after its last use.
struct KeptListings {
    kept: Vec<Kept>,
}

struct Kept {
    key: VersionKey,
    listing: Arc<Listing>,
    used: Instant,
}

impl KeptListings {
    const fn new() -> KeptListings {
        KeptListings { kept: Vec::new() }
    }

    fn get(&mut self, key: &VersionKey) -> Option<Arc<Listing>> {
        self.forget_idle();
        let found = self.kept.iter_mut().find(|kept| kept.key == *key)?;
        found.used = Instant::now();
        Some(Arc::clone(&found.listing))
    }

    fn keep(&mut self, key: VersionKey, listing: Arc<Listing>) {
        if listing.memory() > LIST_SNAPSHOT_BYTES {
            return;
        }
        self.forget_idle();
        // An older version of the folder has no next page any more.
        self.kept.retain(|kept| !kept.key.same_file(&key));
        self.kept.push(Kept {
            key,
            listing,
            used: Instant::now(),
        });
        while self.kept.len() > LIST_SNAPSHOT_FOLDERS || self.memory() > LIST_SNAPSHOT_BYTES {
            let Some(oldest) = self
                .kept
                .iter()
                .enumerate()
                .min_by_key(|(_, kept)| kept.used)
                .map(|(at, _)| at)
            else {
                break;
            };
            self.kept.remove(oldest);
        }
    }

    fn forget_idle(&mut self) {
        self.kept
            .retain(|kept| kept.used.elapsed() < LIST_SNAPSHOT_IDLE);
    }

    fn memory(&self) -> usize {
        self.kept.iter().map(|kept| kept.listing.memory()).sum()
    }
}

/// The listings this process keeps.
static KEPT: Mutex<KeptListings> = Mutex::new(KeptListings::new());

fn with_kept<T>(f: impl FnOnce(&mut KeptListings) -> T) -> T {
    // A panic elsewhere while the lock was held leaves nothing half-written worth refusing.
    f(&mut KEPT.lock().unwrap_or_else(PoisonError::into_inner))
}

/// The index of the first entry after the cursor `after`: a name (exclusive), or the cursor
/// of a cut name too long to repeat, `PREFIX/HASH`. No file name holds a `/`, so the two never
/// meet; a string with a `/` that is not such a cursor is taken as a plain name.
fn first_after(listing: &Listing, after: &str) -> usize {
    let plain = || listing.partition_point(|name| name.as_bytes() <= after.as_bytes());
    let Some((prefix, hash)) = after.rsplit_once('/') else {
        return plain();
    };
    let Ok(hash) = u64::from_str_radix(hash, 16) else {
        return plain();
    };
    // The names that start with the prefix sort together, right after those below it.
    let from = listing.partition_point(|name| name.as_bytes() < prefix.as_bytes());
    if let Some(at) = (from..listing.len())
        .take_while(|&at| listing.name(at).starts_with(prefix))
        .find(|&at| name_hash(listing.name(at)) == hash)
    {
        return at + 1;
    }
    // The named entry is gone. Everything up to its prefix was on earlier pages; what follows
    // the prefix may have been too, but repeating an entry is better than losing one.
    listing.partition_point(|name| name.as_bytes() <= prefix.as_bytes())
}

/// The cursor for a cut name that the page cannot repeat whole: a short prefix of it and a
/// hash of the full name.
fn long_name_cursor(name: &str) -> String {
    let (cut, _) = fitting_prefix(name, LIST_CURSOR_PREFIX_BYTES);
    format!("{}/{:016x}", &name[..cut], name_hash(name))
}

fn name_hash(name: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(name.as_bytes())
}

fn entry_len(entry: &Entry) -> usize {
    serde_json::to_string(entry).map_or(0, |s| s.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::Workspace;
    use std::fs;
    use std::os::fd::AsFd;
    use std::path::Path;
    use std::time::{Duration, UNIX_EPOCH};

    /// A folder of `count` files `e-0000`, `e-0001`, …, set back as [`set_back`] does.
    fn folder(count: usize, mtime_secs: u64) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..count {
            fs::write(dir.path().join(format!("e-{i:04}")), "x".repeat(i % 7)).unwrap();
        }
        set_back(dir.path(), mtime_secs);
        dir
    }

    /// Sets the folder's modification time back to `mtime_secs`, a value no other folder of
    /// these tests has, so that the next entry added or removed changes its key whatever the
    /// timestamp tick. (Its change time is now: only a clock moved forward sees it settled.)
    fn set_back(root: &Path, mtime_secs: u64) {
        fs::File::open(root)
            .unwrap()
            .set_modified(UNIX_EPOCH + Duration::from_secs(mtime_secs))
            .unwrap();
    }

    /// One pen_list page of `root`, as a call that began at `started` with the folder's version
    /// as `version` gives it.
    fn page(
        root: &Path,
        after: Option<&str>,
        started: SystemTime,
        version: impl Fn(BorrowedFd<'_>) -> Option<VersionKey>,
    ) -> Value {
        page_of(root, None, after, started, version)
    }

    /// [`page`] of the folder `path` beneath `root`.
    fn page_of(
        root: &Path,
        path: Option<&str>,
        after: Option<&str>,
        started: SystemTime,
        version: impl Fn(BorrowedFd<'_>) -> Option<VersionKey>,
    ) -> Value {
        let workspace = Workspace::new(&[root.to_path_buf()]).unwrap();
        let limits = Limits::default();
        let ctx = ToolContext::plain(&workspace, &limits);
        let args = Args {
            path: path.map(str::to_string),
            after: after.map(str::to_string),
            limit: None,
        };
        run_at(args, &ctx, started, version).unwrap()
    }

    /// The page a fresh listing gives: no version, so nothing kept is used.
    fn fresh(root: &Path, after: Option<&str>) -> Value {
        page(root, after, SystemTime::now(), |_| None)
    }

    /// A moment far enough ahead that the folder's timestamps look settled.
    fn later() -> SystemTime {
        SystemTime::now() + Duration::from_secs(60)
    }

    fn real_version(dir: BorrowedFd<'_>) -> Option<VersionKey> {
        VersionKey::of_fd(dir).ok()
    }

    fn key_of(root: &Path) -> VersionKey {
        VersionKey::of_fd(fs::File::open(root).unwrap().as_fd()).unwrap()
    }

    fn is_kept(root: &Path) -> bool {
        let key = key_of(root);
        with_kept(|kept| kept.get(&key).is_some())
    }

    fn names(page: &Value) -> Vec<&str> {
        page["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|entry| entry["name"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn pages_after_an_entry_is_added_or_removed_are_those_of_a_fresh_listing() {
        let dir = folder(500, 1_000_001);
        let root = dir.path();
        let first = page(root, None, later(), real_version);
        assert_eq!(first, fresh(root, None));
        assert!(is_kept(root), "a settled folder of several pages is kept");
        let cursor = first["next_after"].as_str().unwrap().to_string();
        assert_eq!(cursor, "e-0199");
        // Unchanged: the next page comes from the kept listing and is the fresh one.
        let second = page(root, Some(&cursor), later(), real_version);
        assert_eq!(second, fresh(root, Some(&cursor)));
        // An entry added where the next page starts, and one removed from it.
        fs::write(root.join("e-0199a"), "new").unwrap();
        fs::remove_file(root.join("e-0210")).unwrap();
        set_back(root, 1_000_011);
        let second = page(root, Some(&cursor), later(), real_version);
        assert_eq!(second, fresh(root, Some(&cursor)));
        assert_eq!(names(&second)[..2], ["e-0199a", "e-0200"]);
        assert!(!names(&second).contains(&"e-0210"));
        assert_eq!(second["total"], 500);
        // Removed from the last page after the changed folder was kept again.
        let cursor = second["next_after"].as_str().unwrap().to_string();
        fs::remove_file(root.join("e-0499")).unwrap();
        set_back(root, 1_000_012);
        let third = page(root, Some(&cursor), later(), real_version);
        assert_eq!(third, fresh(root, Some(&cursor)));
        assert_eq!(third["total"], 499);
        assert_eq!(names(&third).last(), Some(&"e-0498"));
    }

    /// The one change a version key cannot see is one within the timestamp tick the listing
    /// saw: the folder then changes under the same key. Such a key is never settled when the
    /// listing begins, so the listing is not kept and the next page lists the folder again.
    #[test]
    fn a_change_within_the_same_timestamp_tick_never_gets_a_kept_page() {
        let dir = folder(500, 1_000_002);
        let root = dir.path();
        // The key as the listing saw it, given again after the change as the same tick would.
        let same_tick = key_of(root);
        let first = page(root, None, SystemTime::now(), |_| Some(same_tick));
        assert!(!is_kept(root), "a folder changed a moment ago is not kept");
        let cursor = first["next_after"].as_str().unwrap().to_string();
        fs::write(root.join("e-0199a"), "new").unwrap();
        let second = page(root, Some(&cursor), SystemTime::now(), |_| Some(same_tick));
        assert_eq!(second, fresh(root, Some(&cursor)));
        assert_eq!(names(&second)[0], "e-0199a");

        // Where the key is settled the kept listing is what a page is cut from: were the folder
        // to change under it, the page would not show the change. (Hence the settling rule.)
        let settled = folder(500, 1_000_003);
        let root = settled.path();
        let key = key_of(root);
        let first = page(root, None, later(), |_| Some(key));
        let cursor = first["next_after"].as_str().unwrap().to_string();
        fs::write(root.join("e-0199a"), "new").unwrap();
        let second = page(root, Some(&cursor), later(), |_| Some(key));
        assert_eq!(names(&second)[0], "e-0200");
    }

    /// A second process swaps another folder into the listed folder's place between two pages,
    /// the newcomer as like the first as can be (as many entries, the same modification time):
    /// the next page is the newcomer's, as a fresh listing gives it, never the kept one's.
    #[test]
    fn a_folder_swapped_in_between_pages_gets_its_own_pages() {
        let ws = tempfile::tempdir().unwrap();
        let root = ws.path();
        let (sub, other) = (root.join("sub"), root.join("other"));
        for (dir, prefix) in [(&sub, "e"), (&other, "f")] {
            fs::create_dir(dir).unwrap();
            for i in 0..500 {
                fs::write(dir.join(format!("{prefix}-{i:04}")), "x").unwrap();
            }
            set_back(dir, 1_000_021);
        }
        let first = page_of(root, Some("sub"), None, later(), real_version);
        assert!(is_kept(&sub), "the listed folder is kept");
        let cursor = first["next_after"].as_str().unwrap().to_string();
        fs::rename(&sub, root.join("old")).unwrap();
        fs::rename(&other, &sub).unwrap();
        let second = page_of(root, Some("sub"), Some(&cursor), later(), real_version);
        let fresh = page_of(root, Some("sub"), Some(&cursor), SystemTime::now(), |_| {
            None
        });
        assert_eq!(second, fresh);
        assert!(names(&second).iter().all(|name| name.starts_with("f-")));
    }

    #[test]
    fn a_folder_of_one_page_or_that_changes_while_listed_is_not_kept() {
        let small = folder(200, 1_000_004);
        page(small.path(), None, later(), real_version);
        assert!(!is_kept(small.path()));
        let big = folder(300, 1_000_005);
        let before = key_of(big.path());
        let calls = std::cell::Cell::new(0);
        let changed = key_of(small.path());
        // The second look at the version, after the listing, finds it changed.
        page(big.path(), None, later(), |_| {
            calls.set(calls.get() + 1);
            Some(if calls.get() == 1 { before } else { changed })
        });
        assert_eq!(calls.get(), 2);
        assert!(!is_kept(big.path()));
    }

    #[test]
    fn kept_listings_are_bounded_and_one_version_a_folder() {
        let folders: Vec<tempfile::TempDir> = (0..LIST_SNAPSHOT_FOLDERS + 2)
            .map(|i| folder(3, 1_000_100 + i as u64))
            .collect();
        let mut kept = KeptListings::new();
        let listing = |root: &Path| {
            let dir = rustix::fs::Dir::read_from(fs::File::open(root).unwrap()).unwrap();
            Arc::new(Listing::read(dir).unwrap())
        };
        for folder in &folders {
            kept.keep(key_of(folder.path()), listing(folder.path()));
        }
        assert_eq!(kept.kept.len(), LIST_SNAPSHOT_FOLDERS);
        // The least recently used went first.
        assert!(kept.get(&key_of(folders[0].path())).is_none());
        assert!(kept.get(&key_of(folders[2].path())).is_some());
        // A new version of a folder replaces its old one.
        let last = folders.last().unwrap().path();
        let old = key_of(last);
        fs::write(last.join("new"), "").unwrap();
        kept.keep(key_of(last), listing(last));
        assert!(kept.get(&old).is_none());
        assert!(kept.get(&key_of(last)).is_some());
        assert_eq!(kept.kept.len(), LIST_SNAPSHOT_FOLDERS);
        // A listing larger than the whole budget is not kept.
        let huge = Arc::new(Listing {
            text: String::with_capacity(LIST_SNAPSHOT_BYTES + 1),
            entries: Vec::new(),
            raw: Vec::new(),
        });
        let key = key_of(folders[1].path());
        kept.keep(key, huge);
        assert!(kept.get(&key).is_none());
        assert!(kept.memory() <= LIST_SNAPSHOT_BYTES);
    }

    #[test]
    fn names_that_are_not_utf8_are_sorted_by_their_own_bytes_and_stat_by_them() {
        let dir = tempfile::tempdir().unwrap();
        for (name, size) in [(&b"a\xff"[..], 1), (&b"a\xfe"[..], 22), (&b"b"[..], 333)] {
            fs::write(dir.path().join(OsStr::from_bytes(name)), "x".repeat(size)).unwrap();
        }
        let listed = fresh(dir.path(), None);
        assert_eq!(
            listed["entries"],
            json!([
                {"name": "a\u{fffd}", "kind": "file", "size": 22},
                {"name": "a\u{fffd}", "kind": "file", "size": 1},
                {"name": "b", "kind": "file", "size": 333},
            ])
        );
    }
}
