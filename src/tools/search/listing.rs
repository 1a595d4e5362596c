//! The walk of pen_search, pen_find and the disk watcher: one sequential walk yields entries in
//! walk order (depth first, each folder's entries sorted by name bytes), taking each folder's
//! listing (read, typed, sorted and filtered) from a small pool of threads that list ahead of
//! it. The walk's own thread then mostly hands entries on; the reading of folders, the ignore
//! files and the matching runs on the pool, beside it.
//!
//! Architecture invariants:
//! - The walk yields exactly what one thread walking alone yields, in the same order, whatever
//!   the timing: a folder's listing is made whole (read, sorted, filtered) by whichever thread
//!   lists it, and the walk takes listings only in its own order. Which thread listed a folder
//!   changes nothing in its listing.
//! - The pool lists the folders the walk will enter soonest: of the folders known (found in a
//!   listing) but not yet entered, the first in walk order, which is always the next one the walk
//!   enters. It runs at most [`SEARCH_LIST_AHEAD_FOLDERS`] folders and
//!   [`SEARCH_LIST_AHEAD_ENTRIES`] entries ahead. When no thread has begun the folder the walk
//!   needs, the walk lists it itself: it never waits for room.
//! - Pausing (the page ended: the walk is parked or dropped) stops and joins the pool and drops
//!   what it listed ahead; resuming queues again the folders of the walk's open listings. A
//!   paused walk holds only the listings of the folders it is in.
//! - No link is followed: entries are typed as the listing gives them (`lstat` when the file
//!   system does not say); only the root itself is followed, as `ignore`'s walk follows it. A
//!   folder that cannot be listed (removed while walked, no permission) yields one error where
//!   its entries would be.

use super::ignores::Levels;
use crate::limits::{
    SEARCH_LIST_AHEAD_ENTRIES, SEARCH_LIST_AHEAD_FOLDERS, SEARCH_LIST_AHEAD_THREADS,
};
use crate::workspace::is_skipped_folder;
use ignore::gitignore::Gitignore;
use rustc_hash::FxHashMap;
use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::fmt;
use std::fs::FileType;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{self, AtomicU64};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

/// Where an entry lies relative to a cursor, both relative to the search root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Position {
    /// Walked by an earlier page, with everything below it.
    Before,
    /// A folder on the way to the cursor: entered, but not walked again.
    Enclosing,
    At,
    After,
}

pub(crate) fn position(entry: &Path, cursor: &Path) -> Position {
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

/// An entry of the walk: the root (depth 0) or an entry below it.
#[derive(Debug)]
pub(crate) struct Entry {
    path: PathBuf,
    depth: usize,
    file_type: FileType,
}

impl Entry {
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Levels below the root: 0 for the root itself.
    pub(crate) fn depth(&self) -> usize {
        self.depth
    }

    /// A folder (not a link to one).
    pub(crate) fn is_dir(&self) -> bool {
        self.file_type.is_dir()
    }

    /// A regular file (not a link to one).
    pub(crate) fn is_file(&self) -> bool {
        self.file_type.is_file()
    }

    pub(crate) fn into_path(self) -> PathBuf {
        self.path
    }
}

/// A folder the walk could not list, or the root it could not find.
#[derive(Debug)]
pub(crate) struct WalkError {
    path: PathBuf,
    error: io::Error,
}

impl fmt::Display for WalkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.error)
    }
}

impl std::error::Error for WalkError {}

/// Which entries of a listing the walk keeps: those at or after the cursor, not ignored, not
/// too deep (counted), not in a skipped folder, not ignored by the ignore files above the root.
pub(super) struct Filter {
    pub(super) root: PathBuf,
    /// The cursor, relative to the root: what lies before it was walked by an earlier page.
    pub(super) after: Option<PathBuf>,
    pub(super) max_depth: usize,
    /// Ignore files of the workspace folders above the search root, deepest first.
    pub(super) enclosing_ignores: Vec<Gitignore>,
}

impl Filter {
    fn ignored_above_root(&self, path: &Path, is_dir: bool) -> bool {
        for ignores in &self.enclosing_ignores {
            let matched = ignores.matched(path, is_dir);
            if matched.is_ignore() {
                return true;
            }
            if matched.is_whitelist() {
                break;
            }
        }
        false
    }
}

/// A folder to list.
struct Job {
    dir: PathBuf,
    depth: usize,
    /// The ignore files of the folders above it, up to the root (none for the root).
    parent: Option<Arc<Levels>>,
}

// Jobs compare by their folder's place in walk order: component-wise path order.
impl PartialEq for Job {
    fn eq(&self, other: &Job) -> bool {
        self.dir == other.dir
    }
}

impl Eq for Job {}

impl PartialOrd for Job {
    fn partial_cmp(&self, other: &Job) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Job {
    fn cmp(&self, other: &Job) -> Ordering {
        self.dir.cmp(&other.dir)
    }
}

/// A folder's listing: its entries the filter keeps, sorted (errors first), with the ignore
/// files that apply to its subfolders and the count of its entries left out for their depth.
struct Listing {
    items: Vec<Result<Entry, WalkError>>,
    levels: Arc<Levels>,
    too_deep: u64,
}

/// The subfolders the walk will enter from `items`, as jobs.
fn subfolders<'a>(
    items: &'a [Result<Entry, WalkError>],
    levels: &'a Arc<Levels>,
) -> impl Iterator<Item = Reverse<Job>> + 'a {
    items.iter().flatten().filter(|e| e.is_dir()).map(|entry| {
        Reverse(Job {
            dir: entry.path.clone(),
            depth: entry.depth,
            parent: Some(Arc::clone(levels)),
        })
    })
}

/// Lists `job`'s folder: reads it, types its entries without following links, sorts them by
/// name bytes and keeps what `filter` keeps.
fn list(job: &Job, filter: &Filter) -> Listing {
    let levels = Arc::new(Levels::load(&job.dir, job.parent.clone()));
    let mut items = Vec::new();
    let error = |error| {
        Err(WalkError {
            path: job.dir.clone(),
            error,
        })
    };
    let read = match std::fs::read_dir(&job.dir) {
        Ok(read) => read,
        Err(e) => {
            items.push(error(e));
            return Listing {
                items,
                levels,
                too_deep: 0,
            };
        }
    };
    let mut found: Vec<(PathBuf, FileType)> = Vec::new();
    for item in read {
        match item.and_then(|entry| Ok((entry.path(), entry.file_type()?))) {
            Ok(entry) => found.push(entry),
            Err(e) => items.push(error(e)),
        }
    }
    // By the paths' bytes: one folder's paths share everything but the name.
    found.sort_unstable_by(|a, b| a.0.as_os_str().cmp(b.0.as_os_str()));
    // Only in a folder on the way to the cursor can an entry lie before it.
    let cursor = filter.after.as_deref().filter(|after| {
        let dir = job.dir.strip_prefix(&filter.root).unwrap_or(&job.dir);
        position(dir, after) == Position::Enclosing
    });
    let depth = job.depth + 1;
    let mut too_deep = 0;
    items.reserve(found.len());
    for (path, file_type) in found {
        let is_dir = file_type.is_dir();
        // In the order the sequential walk's filter decided: an entry before the cursor or
        // ignored is not counted as too deep.
        if let Some(after) = cursor {
            let relative = path.strip_prefix(&filter.root).unwrap_or(&path);
            if position(relative, after) == Position::Before {
                continue;
            }
        }
        if levels.ignored(&path, is_dir) {
            continue;
        }
        if depth > filter.max_depth {
            too_deep += 1;
            continue;
        }
        if (is_dir && is_skipped_folder(&path)) || filter.ignored_above_root(&path, is_dir) {
            continue;
        }
        items.push(Ok(Entry {
            path,
            depth,
            file_type,
        }));
    }
    Listing {
        items,
        levels,
        too_deep,
    }
}

/// What the walk and its pool share.
struct Shared {
    filter: Filter,
    state: Mutex<State>,
    /// Wakes the pool: a folder queued, room made, or the pool stopped.
    to_pool: Condvar,
    /// Wakes the walk: a listing made.
    to_walk: Condvar,
}

#[derive(Default)]
struct State {
    /// Folders known and not yet entered nor listed, first in walk order on top.
    queue: BinaryHeap<Reverse<Job>>,
    /// Folders a pool thread is listing.
    listing: Vec<PathBuf>,
    /// Listings made ahead of the walk, by folder.
    ready: FxHashMap<PathBuf, Listing>,
    /// Entries in `ready`.
    ready_entries: usize,
    stop: bool,
    /// Pool threads waiting for work or room, and whether the walk waits for a listing: a
    /// condition variable is signalled only when someone waits (each signal is a system call).
    pool_waiting: usize,
    walk_waiting: bool,
}

impl State {
    fn has_room(&self) -> bool {
        self.ready.len() + self.listing.len() < SEARCH_LIST_AHEAD_FOLDERS
            && self.ready_entries < SEARCH_LIST_AHEAD_ENTRIES
    }

    /// Whether the pool, stopped for want of room, is woken: once the walk took half of what
    /// was listed ahead, so that the pool wakes once per half a bound, not once per folder.
    fn room_to_wake(&self) -> bool {
        self.pool_waiting > 0
            && self.ready.len() + self.listing.len() <= SEARCH_LIST_AHEAD_FOLDERS / 2
            && self.ready_entries <= SEARCH_LIST_AHEAD_ENTRIES / 2
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One thread of the pool: lists the first queued folder while there is room ahead of the walk,
/// until the walk pauses.
fn lister(shared: &Shared) {
    let mut state = shared.state();
    loop {
        if state.stop {
            return;
        }
        let job = match state.has_room().then(|| state.queue.pop()).flatten() {
            Some(Reverse(job)) => job,
            None => {
                state.pool_waiting += 1;
                state = shared
                    .to_pool
                    .wait(state)
                    .unwrap_or_else(|e| e.into_inner());
                state.pool_waiting -= 1;
                continue;
            }
        };
        state.listing.push(job.dir.clone());
        drop(state);
        let listing = list(&job, &shared.filter);
        state = shared.state();
        state.listing.retain(|dir| *dir != job.dir);
        if state.stop {
            return;
        }
        let before = state.queue.len();
        state
            .queue
            .extend(subfolders(&listing.items, &listing.levels));
        state.ready_entries += listing.items.len();
        state.ready.insert(job.dir, listing);
        if state.queue.len() > before && state.pool_waiting > 0 && state.has_room() {
            shared.to_pool.notify_one();
        }
        if state.walk_waiting {
            shared.to_walk.notify_one();
        }
    }
}

/// A folder the walk is in: what is left of its listing.
struct Frame {
    items: std::vec::IntoIter<Result<Entry, WalkError>>,
    levels: Arc<Levels>,
}

/// The walk: an iterator over the entries below a root, in walk order.
pub(crate) struct SortedWalk {
    shared: Arc<Shared>,
    /// Threads the pool starts with.
    threads: usize,
    /// Whether the pool runs (its threads, which may be none).
    running: bool,
    pool: Vec<JoinHandle<()>>,
    /// The root, until it is yielded.
    root: Option<PathBuf>,
    /// The folders the walk is in, innermost last.
    frames: Vec<Frame>,
    /// The folder yielded last, entered at the next step.
    enter: Option<Job>,
    /// Counts the entries left out for their depth, as the walk comes to them.
    too_deep: Arc<AtomicU64>,
}

impl SortedWalk {
    pub(super) fn new(filter: Filter, too_deep: Arc<AtomicU64>) -> SortedWalk {
        SortedWalk {
            root: Some(filter.root.clone()),
            shared: Arc::new(Shared {
                filter,
                state: Mutex::default(),
                to_pool: Condvar::new(),
                to_walk: Condvar::new(),
            }),
            threads: std::thread::available_parallelism()
                .map_or(1, |n| n.get())
                .min(SEARCH_LIST_AHEAD_THREADS),
            running: false,
            pool: Vec::new(),
            frames: Vec::new(),
            enter: None,
            too_deep,
        }
    }

    /// Stops the pool and drops what it listed ahead; the walk lists again, from where it is,
    /// when it goes on.
    pub(super) fn pause(&mut self) {
        if !self.running {
            return;
        }
        self.running = false;
        self.shared.state().stop = true;
        self.shared.to_pool.notify_all();
        for thread in self.pool.drain(..) {
            // A pool thread does not panic; if one did, the walk goes on without it.
            let _ = thread.join();
        }
        let mut state = self.shared.state();
        state.queue.clear();
        state.ready.clear();
        state.ready_entries = 0;
    }

    /// Starts the pool, the folders of the open listings queued.
    fn start(&mut self) {
        self.running = true;
        {
            let mut state = self.shared.state();
            state.stop = false;
            for frame in &self.frames {
                let queued = subfolders(frame.items.as_slice(), &frame.levels);
                state.queue.extend(queued);
            }
        }
        for _ in 0..self.threads {
            let shared = Arc::clone(&self.shared);
            let spawned = std::thread::Builder::new()
                .name("pen-list-ahead".into())
                .spawn(move || lister(&shared));
            // Without a pool thread the walk lists every folder itself.
            if let Ok(thread) = spawned {
                self.pool.push(thread);
            }
        }
    }

    /// The listing of the folder the walk enters: made ahead by the pool, being made (waited
    /// for), or made here.
    fn take_listing(&mut self, job: Job) -> Listing {
        if !self.running {
            self.start();
        }
        let shared = &*self.shared;
        let mut state = shared.state();
        loop {
            if let Some(listing) = state.ready.remove(&job.dir) {
                state.ready_entries -= listing.items.len();
                if state.room_to_wake() {
                    shared.to_pool.notify_all();
                }
                return listing;
            }
            if !state.listing.contains(&job.dir) {
                break;
            }
            state.walk_waiting = true;
            state = shared
                .to_walk
                .wait(state)
                .unwrap_or_else(|e| e.into_inner());
            state.walk_waiting = false;
        }
        // The next folder the walk enters is the first one known: on top of the queue.
        if state
            .queue
            .peek()
            .is_some_and(|Reverse(top)| top.dir == job.dir)
        {
            state.queue.pop();
        }
        drop(state);
        let listing = list(&job, &shared.filter);
        let mut state = shared.state();
        let before = state.queue.len();
        state
            .queue
            .extend(subfolders(&listing.items, &listing.levels));
        if state.queue.len() > before && state.pool_waiting > 0 {
            shared.to_pool.notify_all();
        }
        listing
    }

    /// The root entry, as `ignore`'s walk gives it (a link followed).
    fn root_entry(root: PathBuf) -> Result<Entry, WalkError> {
        match std::fs::metadata(&root) {
            Ok(metadata) => Ok(Entry {
                path: root,
                depth: 0,
                file_type: metadata.file_type(),
            }),
            Err(error) => Err(WalkError { path: root, error }),
        }
    }
}

impl Iterator for SortedWalk {
    type Item = Result<Entry, WalkError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(root) = self.root.take() {
            let entry = SortedWalk::root_entry(root);
            if let Ok(entry) = &entry
                && entry.is_dir()
            {
                self.enter = Some(Job {
                    dir: entry.path.clone(),
                    depth: 0,
                    parent: None,
                });
            }
            return Some(entry);
        }
        if let Some(job) = self.enter.take() {
            let listing = self.take_listing(job);
            if listing.too_deep > 0 {
                self.too_deep
                    .fetch_add(listing.too_deep, atomic::Ordering::Relaxed);
            }
            self.frames.push(Frame {
                items: listing.items.into_iter(),
                levels: listing.levels,
            });
        }
        loop {
            let frame = self.frames.last_mut()?;
            match frame.items.next() {
                Some(item) => {
                    if let Ok(entry) = &item
                        && entry.is_dir()
                    {
                        self.enter = Some(Job {
                            dir: entry.path.clone(),
                            depth: entry.depth,
                            parent: Some(Arc::clone(&frame.levels)),
                        });
                    }
                    return Some(item);
                }
                None => {
                    self.frames.pop();
                }
            }
        }
    }
}

impl Drop for SortedWalk {
    fn drop(&mut self) {
        self.pause();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::search::page_walk;
    use std::fs;
    use std::time::Duration;

    /// A tree of nested folders whose names sort apart as bytes and as strings (`a/…` before
    /// `a.b`, `B` before `a`, `é` last), with ignore files of every kind at several depths, a
    /// skipped folder and a link.
    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let names = ["a", "a.b", "a-b", "B", "z", "é"];
        let mut folders = vec![PathBuf::new()];
        for depth in 0..3 {
            let mut deeper = Vec::new();
            for folder in folders.iter().filter(|f| f.components().count() == depth) {
                for (i, name) in names.iter().enumerate() {
                    // Not every folder has every subfolder: listings of different sizes.
                    if (i + depth + folder.as_os_str().len()) % 3 != 0 {
                        deeper.push(folder.join(name));
                    }
                }
            }
            folders.extend(deeper);
        }
        for folder in &folders {
            let path = root.join(folder);
            fs::create_dir_all(&path).unwrap();
            for file in ["x.log", "keep.log", "c.md", "f.rs", "g"] {
                fs::write(path.join(file), "text\n").unwrap();
            }
        }
        for (file, rules) in [
            (".gitignore", "*.log\n/z/\n"),
            ("a/.gitignore", "!keep.log\nB\n"),
            ("a/a.b/.ignore", "*.md\n!B\n"),
            ("B/.git/info/exclude", "g\n"),
            ("é/a/.gitignore", "*\n!.gitignore\n!f.rs\n"),
        ] {
            let path = root.join(file);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, rules).unwrap();
        }
        fs::create_dir_all(root.join("a/node_modules/m")).unwrap();
        fs::write(root.join("a/node_modules/m/f.rs"), "").unwrap();
        std::os::unix::fs::symlink(root.join("a"), root.join("a-b/link")).unwrap();
        dir
    }

    /// Every step of a walk: the entry (or the folder it could not list) and the entries left
    /// out for their depth so far.
    fn steps(walk: SortedWalk, too_deep: &AtomicU64) -> Vec<(String, usize, u64)> {
        let mut steps = Vec::new();
        for item in walk {
            let (path, depth) = match item {
                Ok(entry) => (entry.path().display().to_string(), entry.depth()),
                Err(error) => (format!("error: {error}"), usize::MAX),
            };
            steps.push((path, depth, too_deep.load(atomic::Ordering::Relaxed)));
        }
        steps
    }

    fn walk_with(
        root: &Path,
        after: Option<&str>,
        max_depth: usize,
        threads: usize,
    ) -> Vec<(String, usize, u64)> {
        let (mut walk, too_deep) = page_walk(root, after.map(PathBuf::from), max_depth, root);
        walk.threads = threads;
        steps(walk, &too_deep)
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
    fn the_pool_walks_in_the_order_one_thread_walks() {
        let dir = tree();
        let root = dir.path();
        let alone = walk_with(root, None, usize::MAX, 0);
        // The walk alone keeps what `ignore`'s sorted walk keeps, in its order.
        let not_skipped = |entry: &ignore::DirEntry| {
            !(entry.file_type().is_some_and(|t| t.is_dir()) && is_skipped_folder(entry.path()))
        };
        let theirs: Vec<String> = crate::workspace::tree_walk(root)
            .filter_entry(not_skipped)
            .build()
            .map(|e| e.unwrap().path().display().to_string())
            .collect();
        let ours: Vec<String> = alone.iter().map(|(path, ..)| path.clone()).collect();
        assert_eq!(ours, theirs);
        assert!(ours.len() > 200, "a tree of {} entries", ours.len());
        // From the start and from cursors on the way, at every depth limit, with any number of
        // threads listing ahead: the same steps.
        let cursors = [
            None,
            Some("a"),
            Some("a/a.b/B/f.rs"),
            Some("B/a-b"),
            Some("é/z"),
        ];
        for after in cursors {
            for max_depth in [usize::MAX, 2, 1, 0] {
                let alone = walk_with(root, after, max_depth, 0);
                for threads in [1, 2, 8] {
                    assert_eq!(
                        walk_with(root, after, max_depth, threads),
                        alone,
                        "after {after:?}, max_depth {max_depth}, {threads} threads"
                    );
                }
            }
        }
    }

    #[test]
    fn a_paused_walk_goes_on_as_if_it_had_not_stopped_and_lists_nothing_while_paused() {
        let dir = tree();
        let root = dir.path();
        let whole = walk_with(root, None, usize::MAX, 2);
        let (mut walk, too_deep) = page_walk(root, None, usize::MAX, root);
        walk.threads = 2;
        let mut paused = Vec::new();
        let mut taken = 0;
        while let Some(item) = walk.next() {
            let entry = item.unwrap();
            paused.push((
                entry.path().display().to_string(),
                entry.depth(),
                too_deep.load(atomic::Ordering::Relaxed),
            ));
            taken += 1;
            if taken % 7 == 0 {
                walk.pause();
                // The pool's threads are gone and nothing listed ahead is held.
                assert!(walk.pool.is_empty());
                assert_eq!(Arc::strong_count(&walk.shared), 1);
                let state = walk.shared.state();
                assert!(state.queue.is_empty() && state.ready.is_empty());
                assert_eq!(state.ready_entries, 0);
            }
        }
        assert_eq!(paused, whole);
    }

    #[test]
    fn the_pool_stays_within_its_bounds_ahead_of_the_walk() {
        let dir = tempfile::tempdir().unwrap();
        for folder in 0..SEARCH_LIST_AHEAD_FOLDERS * 3 {
            let path = dir.path().join(format!("d{folder:03}"));
            fs::create_dir(&path).unwrap();
            fs::write(path.join("f"), "").unwrap();
        }
        let (mut walk, _) = page_walk(dir.path(), None, usize::MAX, dir.path());
        walk.threads = 2;
        // The root and its first folder: the pool then lists ahead until it has no room, and
        // stops there.
        walk.next().unwrap().unwrap();
        walk.next().unwrap().unwrap();
        {
            let mut state = walk.shared.state();
            while state.has_room() {
                state.walk_waiting = true;
                let waited = walk
                    .shared
                    .to_walk
                    .wait_timeout(state, Duration::from_secs(60));
                let (guard, timeout) = waited.unwrap();
                assert!(!timeout.timed_out(), "the pool lists ahead");
                state = guard;
                state.walk_waiting = false;
            }
            assert_eq!(
                state.ready.len() + state.listing.len(),
                SEARCH_LIST_AHEAD_FOLDERS
            );
            assert!(
                !state.queue.is_empty(),
                "stopped by its bound, not by the tree's end"
            );
        }
        // The walk goes on through what was listed ahead and after it.
        let rest = walk.flatten().count();
        assert_eq!(rest, SEARCH_LIST_AHEAD_FOLDERS * 3 * 2 - 1);
    }

    #[test]
    fn a_folder_removed_before_it_is_listed_is_one_error_in_its_place() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for file in ["a/f", "a/g/h", "b/f"] {
            let path = root.join(file);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, "").unwrap();
        }
        let (mut walk, _) = page_walk(root, None, usize::MAX, root);
        // No pool: the folder is listed when the walk enters it, after it was removed.
        walk.threads = 0;
        assert_eq!(walk.next().unwrap().unwrap().path(), root);
        assert_eq!(walk.next().unwrap().unwrap().path(), root.join("a"));
        fs::remove_dir_all(root.join("a")).unwrap();
        let error = walk.next().unwrap().unwrap_err();
        assert_eq!(error.error.kind(), io::ErrorKind::NotFound);
        assert!(
            error
                .to_string()
                .contains(&root.join("a").display().to_string())
        );
        let rest: Vec<PathBuf> = walk.map(|e| e.unwrap().into_path()).collect();
        assert_eq!(rest, [root.join("b"), root.join("b/f")]);
        // A root that is gone is one error.
        let (mut walk, _) = page_walk(&root.join("gone"), None, usize::MAX, root);
        assert!(walk.next().unwrap().is_err());
        assert!(walk.next().is_none());
    }
}
