//! Walks kept between pages: the walk a truncated page was taking, parked under the cursor it
//! handed out, so that the page resuming at that cursor continues it. A fresh walk from a cursor
//! lists again, whole, every folder on the way to it (a paged folder of 100,000 files once per
//! page), and starts again the listing ahead of it.
//!
//! Architecture invariants:
//! - A kept walk yields exactly what a fresh walk from its cursor would: first the entries the
//!   page took past the cursor (each with the entries left out for depth just before it), then
//!   the live walk, which continues after the last of them. Entries before the cursor and the
//!   folders enclosing it are dropped, as a fresh walk prunes or passes them.
//! - A kept walk is used only while every folder whose listing it holds is the version it was
//!   (device, inode, size, modification and change times): the folders of the cursor and of the
//!   entries taken past it, the live walk's open folders, and the ignore files of those and of
//!   the folders above the search root. It is kept only when each of those versions had settled
//!   ([`FILE_VERSION_SETTLE`](crate::limits::FILE_VERSION_SETTLE)) before its page began, so
//!   that a change made within one timestamp tick of the listing cannot keep the version's
//!   timestamps. Otherwise the page walks afresh from its cursor, as before.
//! - Bounded: at most [`SEARCH_KEPT_WALKS`] walks, each for [`SEARCH_KEPT_WALK_TTL`]; resuming
//!   one removes it. A walk is parked paused (nothing listed ahead of it, no thread of its own:
//!   [`super::listing`]); it holds the listings of the folders on its path (one per level) and
//!   the entries taken past its cursor (at most what the walk thread and the readers of one
//!   page took ahead of the merge).
//!
//! The cache is process-wide: `pen serve`, `pen mcp serve` and `pen acp` keep walks between the
//! calls of a session; each `pen tool` process starts afresh.

use super::ignores::settle_point;
use super::listing::{Entry, Position, SortedWalk, WalkError, position};
use super::walk::page_walk;
use super::{Cursor, Request};
use crate::limits::{SEARCH_KEPT_WALK_TTL, SEARCH_KEPT_WALKS};
use crate::tools::versions::VersionKey;
use std::collections::{BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Instant, SystemTime};

/// An entry taken from the walk.
pub(super) struct Taken {
    pub(super) entry: Result<Entry, WalkError>,
    /// Entries left out for their depth just before this one.
    pub(super) too_deep: u64,
}

/// Where a page takes its entries from: entries an earlier page took past its cursor, then the
/// walk itself.
pub(super) struct Source {
    walk: SortedWalk,
    /// Counts the entries the walk's filter leaves out for their depth.
    too_deep: Arc<AtomicU64>,
    pending: VecDeque<Taken>,
    /// Entries left out for their depth after the walk's last entry.
    trailing_too_deep: u64,
}

impl Source {
    /// A walk of the search root from its start, or from the request's cursor (pruning what lies
    /// before it).
    pub(super) fn fresh(request: &Request, max_depth: usize) -> Source {
        let (walk, too_deep) = page_walk(
            &request.root,
            request.after.as_ref().map(|(path, _)| path.clone()),
            max_depth,
            &request.workspace_root,
        );
        Source {
            walk,
            too_deep,
            pending: VecDeque::new(),
            trailing_too_deep: 0,
        }
    }

    /// The walk kept for the request's cursor, if one is kept and still holds what the folders
    /// hold; else a fresh walk from the cursor.
    pub(super) fn resume_or_fresh(request: &Request, max_depth: usize) -> Source {
        match request.after_text.as_deref().and_then(|cursor| {
            let key = Key::new(request, max_depth, cursor);
            let kept = {
                let mut walks = WALKS.lock().unwrap_or_else(|e| e.into_inner());
                walks.retain(|kept| kept.parked.elapsed() < SEARCH_KEPT_WALK_TTL);
                let at = walks.iter().position(|kept| kept.key == key)?;
                walks.remove(at)
            };
            kept.folders
                .iter()
                .all(|(path, version)| FolderVersion::of(path) == *version)
                .then_some(kept.source)
        }) {
            Some(source) => {
                #[cfg(test)]
                tests::RESUMED.with(|resumed| resumed.set(resumed.get() + 1));
                source
            }
            None => Source::fresh(request, max_depth),
        }
    }

    /// The next entry, or `None` at the end of the walk.
    pub(super) fn take(&mut self) -> Option<Taken> {
        if let Some(taken) = self.pending.pop_front() {
            return Some(taken);
        }
        let entry = self.walk.next();
        let too_deep = self.too_deep.swap(0, Ordering::Relaxed);
        match entry {
            Some(entry) => Some(Taken { entry, too_deep }),
            None => {
                self.trailing_too_deep += too_deep;
                None
            }
        }
    }

    /// Stops listing ahead of the walk: the page stopped taking entries.
    pub(super) fn pause(&mut self) {
        self.walk.pause();
    }

    /// Entries left out for their depth after the walk's last entry: counted by the page that
    /// reaches the end of the walk.
    pub(super) fn trailing_too_deep(&self) -> u64 {
        self.trailing_too_deep
    }

    /// Gives back entries taken but not used, in the order they were taken: they come first
    /// again.
    pub(super) fn put_back(&mut self, unused: Vec<Taken>) {
        for taken in unused.into_iter().rev() {
            self.pending.push_front(taken);
        }
    }
}

/// The entries a page took, from the first that its cursor may still name: the next page starts
/// at its cursor, among them.
#[derive(Default)]
pub(super) struct Log {
    entries: VecDeque<Taken>,
    /// The index (in the page's taking order) of `entries[0]`.
    first: usize,
}

impl Log {
    /// The index the next entry taken gets.
    pub(super) fn next_index(&self) -> usize {
        self.first + self.entries.len()
    }

    pub(super) fn push(&mut self, taken: Taken) {
        self.entries.push_back(taken);
    }

    /// Forgets the entries before the `index`th: the page has merged the file taken there, so
    /// its cursor can no longer name an entry before it (but for a match given back to fit the
    /// cap, which then is not resumed from a kept walk).
    pub(super) fn forget_before(&mut self, index: usize) {
        while self.first < index && self.entries.pop_front().is_some() {
            self.first += 1;
        }
    }
}

/// Identifies the walk a cursor resumes: the same search root of the same workspace root, the
/// same depth limit, and the cursor handed out.
#[derive(PartialEq, Eq)]
struct Key {
    root: PathBuf,
    workspace_root: PathBuf,
    max_depth: usize,
    cursor: String,
}

impl Key {
    fn new(request: &Request, max_depth: usize, cursor: &str) -> Key {
        Key {
            root: request.root.clone(),
            workspace_root: request.workspace_root.clone(),
            max_depth,
            cursor: cursor.to_string(),
        }
    }
}

/// The files a walk reads in a folder: the folder itself (its listing), then its ignore files.
const READ_IN_FOLDER: [&str; 4] = ["", ".gitignore", ".ignore", ".git/info/exclude"];

/// The versions of a folder and of its ignore files (`None`: absent).
#[derive(Debug, PartialEq, Eq)]
struct FolderVersion([Option<VersionKey>; 4]);

impl FolderVersion {
    fn of(folder: &Path) -> FolderVersion {
        FolderVersion(READ_IN_FOLDER.map(|name| {
            let path = match name {
                "" => folder.to_path_buf(),
                _ => folder.join(name),
            };
            std::fs::symlink_metadata(path)
                .ok()
                .map(|metadata| VersionKey::of(&metadata))
        }))
    }

    fn settled(&self, began: SystemTime) -> bool {
        self.0.iter().flatten().all(|key| key.settled(began))
    }
}

struct Kept {
    key: Key,
    source: Source,
    folders: Vec<(PathBuf, FolderVersion)>,
    parked: Instant,
}

static WALKS: LazyLock<Mutex<Vec<Kept>>> = LazyLock::new(Mutex::default);

/// What a page leaves of its walk: the walk itself and the entries it took but may not have
/// walked.
pub(super) struct Leftover {
    pub(super) source: Source,
    pub(super) log: Log,
    /// When the page began: the folders it listed must have settled before.
    pub(super) began: SystemTime,
}

impl Leftover {
    /// Keeps the walk for the page that resumes at `cursor`, when it can yield exactly what a
    /// fresh walk from `cursor` would.
    pub(super) fn park(self, request: &Request, max_depth: usize, cursor: &str) {
        let Some(kept) = self.into_kept(request, max_depth, cursor) else {
            return;
        };
        let mut walks = WALKS.lock().unwrap_or_else(|e| e.into_inner());
        walks.retain(|old| old.parked.elapsed() < SEARCH_KEPT_WALK_TTL && old.key != kept.key);
        if walks.len() >= SEARCH_KEPT_WALKS {
            walks.remove(0);
        }
        walks.push(kept);
    }

    fn into_kept(self, request: &Request, max_depth: usize, cursor: &str) -> Option<Kept> {
        let Leftover {
            mut source,
            log,
            began,
        } = self;
        let parsed = Cursor::parse(cursor).ok()?;
        let relative = Path::new(&parsed.display)
            .strip_prefix(&request.root_display)
            .ok()?;
        // What the page took, then what it left of the entries an earlier page took: the live
        // walk continues after the last of them.
        let mut taken = log.entries;
        taken.append(&mut source.pending);
        let where_is = |taken: &Taken| -> Option<Position> {
            let entry = taken.entry.as_ref().ok()?;
            let path = entry.path().strip_prefix(&request.root).ok()?;
            Some(position(path, relative))
        };
        // A walk error has no place in the order to check; such a page is not kept.
        let places: Vec<Position> = taken.iter().map(where_is).collect::<Option<_>>()?;
        // The last entry taken must not lie before the cursor: the live walk would then yield
        // entries a fresh walk prunes.
        if !matches!(places.last(), Some(Position::At | Position::After)) {
            return None;
        }
        let skip = places
            .iter()
            .take_while(|p| matches!(p, Position::Before | Position::Enclosing))
            .count();
        // Entries between the cursor and the first one kept must not have been forgotten.
        if places[skip] == Position::After && log.first > 0 {
            return None;
        }
        let mut pending: VecDeque<Taken> = taken.into_iter().skip(skip).collect();
        if places[skip] == Position::At
            && let Some(at) = pending.front_mut()
        {
            // Those lie before the cursor: a fresh walk prunes them uncounted.
            at.too_deep = 0;
        }
        let folders = held_folders(request, relative, &pending)?
            .into_iter()
            .map(|folder| {
                let version = FolderVersion::of(&folder);
                version
                    .settled(settle_point(began))
                    .then_some((folder, version))
            })
            .collect::<Option<Vec<_>>>()?;
        source.pending = pending;
        Some(Kept {
            key: Key::new(request, max_depth, cursor),
            source,
            folders,
            parked: Instant::now(),
        })
    }
}

/// The folders whose listings or ignore files a kept walk rests on: those above the search root
/// up to the workspace root (their ignore files), and within the root every folder enclosing
/// the cursor or an entry taken past it, and the last entry taken when it is a folder (the live
/// walk has listed it).
fn held_folders(
    request: &Request,
    cursor: &Path,
    pending: &VecDeque<Taken>,
) -> Option<BTreeSet<PathBuf>> {
    let mut folders: BTreeSet<PathBuf> = request
        .root
        .ancestors()
        .skip(1)
        .take_while(|dir| dir.starts_with(&request.workspace_root))
        .map(Path::to_path_buf)
        .collect();
    let cursor = request.root.join(cursor);
    let entries = pending.iter().map(|taken| taken.entry.as_ref().ok());
    for path in std::iter::once(Some(cursor.as_path())).chain(entries.map(|e| e.map(Entry::path))) {
        for folder in path?
            .ancestors()
            .skip(1)
            .take_while(|dir| dir.starts_with(&request.root))
        {
            // A folder already held brings its own enclosing folders.
            if !folders.insert(folder.to_path_buf()) {
                break;
            }
        }
    }
    if let Some(Ok(last)) = pending.back().map(|taken| &taken.entry)
        && last.is_dir()
    {
        folders.insert(last.path().to_path_buf());
    }
    Some(folders)
}

#[cfg(test)]
pub(super) mod tests {
    use std::cell::Cell;

    thread_local! {
        /// Pages of this thread that resumed a kept walk.
        pub(in crate::tools::search) static RESUMED: Cell<usize> = const { Cell::new(0) };
    }
}
