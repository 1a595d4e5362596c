//! The ignore files of the folders a search walks (`.ignore`, `.gitignore`,
//! `.git/info/exclude`), compiled once per file version and kept between searches: `ignore`'s
//! walker compiles every one of them again on every walk, and on a whole-corpus search that was
//! an eighth of the instructions.
//!
//! Architecture invariants:
//! - A search decides exactly what [`crate::workspace::tree_walk`] decides: for each kind of
//!   ignore file, the deepest folder (from the entry's parent up to the search root) whose file
//!   has a rule matching the entry decides for that kind, and the kinds take precedence in the
//!   order `.ignore`, `.gitignore`, `.git/info/exclude`, as in `ignore`'s `Ignore::matched` with
//!   tree_walk's options (no global excludes, no parents, git repositories not required). A file
//!   is compiled as `ignore` compiles it (`GitignoreBuilder::add`, and nothing when it fails to
//!   build).
//! - A compiled file is kept under its path and version ([`VersionKey`] by `stat`, following
//!   links as reading does) only when the version had settled before it was read and is the
//!   same after: a later write gets a later change time, so a kept matcher is never used for
//!   other bytes.
//! - A folder whose listing holds none of `.ignore`, `.gitignore` and `.git` is kept as bare
//!   under its version, with the same settling rule; while it is that version (an entry added,
//!   removed or renamed changes a folder's times), its three ignore files are not looked up.
//! - Bounded: at most [`SEARCH_IGNORE_CACHE_FILES`] files and [`SEARCH_IGNORE_CACHE_FOLDERS`]
//!   bare folders; a full cache is emptied.

use crate::limits::{
    SEARCH_IGNORE_CACHE_FILES, SEARCH_IGNORE_CACHE_FOLDERS, SEARCH_IGNORE_FILE_BYTES,
};
use crate::tools::versions::VersionKey;
use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use rustc_hash::FxHashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::SystemTime;

/// The ignore files a folder may hold, in order of precedence.
const KINDS: [&str; 3] = [".ignore", ".gitignore", ".git/info/exclude"];

/// A folder's compiled ignore files, by kind; `None`: absent or without rules.
struct Level {
    files: [Option<Arc<Gitignore>>; 3],
}

impl Level {
    fn load(dir: &Path) -> Level {
        let started = SystemTime::now();
        let version = folder_version(dir);
        let bare = {
            let bare = BARE.lock().unwrap_or_else(|e| e.into_inner());
            version.is_some_and(|version| bare.get(dir) == Some(&version))
        };
        let files = if bare {
            [None, None, None]
        } else {
            KINDS.map(|name| compiled(dir, &dir.join(name)))
        };
        if !bare && let Some(version) = version {
            learn_bare(dir, version, &files, started);
        }
        Level { files }
    }
}

/// The version of the folder at `dir` itself (a link is not followed, as the walk follows none).
fn folder_version(dir: &Path) -> Option<VersionKey> {
    std::fs::symlink_metadata(dir)
        .ok()
        .map(|metadata| VersionKey::of(&metadata))
}

/// Folders whose listing holds none of `.ignore`, `.gitignore` and `.git`, by the version seen:
/// while a folder is that version (an entry added, removed or renamed in it changes its
/// modification and change times), it holds no ignore file, and its three are not looked up.
static BARE: LazyLock<Mutex<FxHashMap<PathBuf, VersionKey>>> = LazyLock::new(Mutex::default);

/// Keeps `dir` as bare at `version` when it is: none of its ignore files compiled to rules,
/// none of the three names is there, and its version had settled before `started`. (A name
/// added or removed while they are looked up gives the folder a later version, which is then
/// not found bare: the folder is not stat'ed again to check.)
fn learn_bare(
    dir: &Path,
    version: VersionKey,
    files: &[Option<Arc<Gitignore>>; 3],
    started: SystemTime,
) {
    let absent = |name: &str| {
        std::fs::symlink_metadata(dir.join(name))
            .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
    };
    if files.iter().any(Option::is_some)
        || !version.settled(settle_point(started))
        || ![".ignore", ".gitignore", ".git"].into_iter().all(absent)
    {
        return;
    }
    let mut bare = BARE.lock().unwrap_or_else(|e| e.into_inner());
    if bare.len() >= SEARCH_IGNORE_CACHE_FOLDERS {
        bare.clear();
    }
    bare.insert(dir.to_path_buf(), version);
}

/// The ignore files of a folder and of the folders above it, up to the search root: those
/// that decide for the folder's entries. Shared by the listings of its subfolders.
pub(super) struct Levels {
    level: Level,
    parent: Option<Arc<Levels>>,
}

impl Levels {
    /// The ignore files of `dir`, below `parent`'s (`None`: `dir` is the search root).
    pub(super) fn load(dir: &Path, parent: Option<Arc<Levels>>) -> Levels {
        Levels {
            level: Level::load(dir),
            parent,
        }
    }

    /// Whether these ignore files (of the entry's folder and the folders above it) ignore the
    /// entry at `path`.
    pub(super) fn ignored(&self, path: &Path, is_dir: bool) -> bool {
        // Per kind: `Some(true)` ignored, `Some(false)` whitelisted, by the deepest folder
        // whose file of that kind has a matching rule.
        let mut decided: [Option<bool>; 3] = [None; 3];
        let mut levels = Some(self);
        while let Some(Levels { level, parent }) = levels {
            for (kind, file) in level.files.iter().enumerate() {
                if let (None, Some(file)) = (decided[kind], file) {
                    decided[kind] = match file.matched(path, is_dir) {
                        Match::None => None,
                        Match::Ignore(_) => Some(true),
                        Match::Whitelist(_) => Some(false),
                    };
                }
            }
            if decided[0].is_some() {
                break;
            }
            levels = parent.as_deref();
        }
        decided[0].or(decided[1]).or(decided[2]) == Some(true)
    }
}

/// Compiled ignore files by path, with the version compiled.
type Compiled = FxHashMap<PathBuf, (VersionKey, Arc<Gitignore>)>;

static COMPILED: LazyLock<Mutex<Compiled>> = LazyLock::new(Mutex::default);

/// The ignore file at `file`, its rules relative to `dir`, compiled; `None` when it is absent or
/// has no rules.
fn compiled(dir: &Path, file: &Path) -> Option<Arc<Gitignore>> {
    let started = SystemTime::now();
    let key = VersionKey::of(&std::fs::metadata(file).ok()?);
    let known = {
        let compiled = COMPILED.lock().unwrap_or_else(|e| e.into_inner());
        compiled
            .get(file)
            .filter(|(version, _)| *version == key)
            .map(|(_, gitignore)| Arc::clone(gitignore))
    };
    let gitignore = match known {
        Some(gitignore) => gitignore,
        None => {
            let mut builder = GitignoreBuilder::new(dir);
            // As `ignore` builds them: a line it cannot parse is left out, a file it cannot
            // build has no rules.
            let read = add_file(&mut builder, file);
            let gitignore = Arc::new(builder.build().unwrap_or_else(|_| Gitignore::empty()));
            let unchanged = read == Some(key)
                && std::fs::metadata(file).is_ok_and(|m| VersionKey::of(&m) == key);
            if unchanged && key.settled(settle_point(started)) {
                let mut compiled = COMPILED.lock().unwrap_or_else(|e| e.into_inner());
                if compiled.len() >= SEARCH_IGNORE_CACHE_FILES {
                    compiled.clear();
                }
                compiled.insert(file.to_path_buf(), (key, Arc::clone(&gitignore)));
            }
            gitignore
        }
    };
    (gitignore.num_ignores() + gitignore.num_whitelists() > 0).then_some(gitignore)
}

/// Reads the ignore file at `file` into `builder` as `GitignoreBuilder::add` does (lines, a
/// leading BOM dropped, reading stops at a line that is not UTF-8), but never blocks: the file is
/// opened non-blocking and read only when it is a regular file, so a FIFO named `.gitignore` in
/// a hostile repository cannot hold a search (or pen_find) forever. At most
/// [`SEARCH_IGNORE_FILE_BYTES`] are read. Returns the version read, if a file was.
pub(super) fn add_file(builder: &mut GitignoreBuilder, file: &Path) -> Option<VersionKey> {
    use std::os::unix::fs::OpenOptionsExt;
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(file)
        .ok()?;
    let metadata = opened.metadata().ok()?;
    if !metadata.is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    opened
        .take(SEARCH_IGNORE_FILE_BYTES)
        .read_to_end(&mut bytes)
        .ok()?;
    let mut lines: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
    if metadata.len() > SEARCH_IGNORE_FILE_BYTES {
        // The last line read may be cut: leave it out.
        lines.pop();
    }
    for (index, line) in lines.into_iter().enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Ok(line) = std::str::from_utf8(line) else {
            break;
        };
        let line = if index == 0 {
            line.trim_start_matches('\u{feff}')
        } else {
            line
        };
        let _ = builder.add_line(Some(file.to_path_buf()), line);
    }
    Some(VersionKey::of(&metadata))
}

/// The moment what search keeps of a version (an ignore file, a bare folder, a kept walk's
/// listings) must have settled before: when it began to be read. Tests that write a tree and
/// mean it to be kept at once move it a day on, as if the tree had been written long before.
pub(super) fn settle_point(started: SystemTime) -> SystemTime {
    #[cfg(test)]
    if tests::TREES_SETTLED.with(std::cell::Cell::get) {
        return started + std::time::Duration::from_secs(86_400);
    }
    started
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::workspace::{is_skipped_folder, tree_walk};
    use proptest::prelude::*;
    use std::cell::Cell;
    use std::fs;

    thread_local! {
        /// Set by a test whose tree nobody writes while it searches: what is read of it is
        /// kept at once (on this thread: the walk's own thread is not set).
        pub(in crate::tools::search) static TREES_SETTLED: Cell<bool> = const { Cell::new(false) };
    }

    fn write(root: &Path, files: &[(String, String)]) {
        for (path, content) in files {
            let path = root.join(path);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, content).unwrap();
        }
    }

    /// The entries below `root` search's walk keeps (its listings made by the pool, its ignore
    /// files compiled per version), and those [`tree_walk`] keeps, both without the folders
    /// search skips: the same entries in the same order.
    fn both_walks(root: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
        let not_skipped = |entry: &ignore::DirEntry| {
            !(entry.file_type().is_some_and(|t| t.is_dir()) && is_skipped_folder(entry.path()))
        };
        let (walk, _) = super::super::page_walk(root, None, usize::MAX, root);
        let ours = walk.map(|e| e.unwrap().into_path()).collect();
        let theirs = tree_walk(root)
            .filter_entry(not_skipped)
            .build()
            .map(|e| e.unwrap().into_path())
            .collect();
        (ours, theirs)
    }

    #[test]
    fn ignore_files_take_precedence_as_the_walk_gives_it() {
        let dir = tempfile::tempdir().unwrap();
        let files: Vec<(String, String)> = [
            // A deeper file decides before a shallower one of its kind...
            (".gitignore", "*.log\nbuild/\n/rootonly\n*.bak\n"),
            ("a/.gitignore", "!keep.log\n!*.md\n"),
            ("a/keep.log", ""),
            ("a/other.log", ""),
            // ...but `.ignore` decides before `.gitignore`, however deep, and `.gitignore`
            // before `.git/info/exclude`.
            (".ignore", "*.md\n!b/x.log\n"),
            ("a/c.md", ""),
            ("b/x.log", ""),
            ("b/y.log", ""),
            (".git/info/exclude", "*.tmp\n!*.bak\n"),
            ("a/.git/info/exclude", "!t.tmp\n"),
            ("a/t.tmp", ""),
            ("u.tmp", ""),
            ("v.bak", ""),
            // A folder pattern leaves a file of that name; an anchored one its folder's entry.
            ("c/build", ""),
            ("d/build/f", ""),
            ("rootonly", ""),
            ("a/rootonly", ""),
            ("a/b/deep/.gitignore", "*\n!.gitignore\n!keep\n"),
            ("a/b/deep/keep", ""),
            ("a/b/deep/gone", ""),
            ("a/b/deep/keep.log", ""),
        ]
        .iter()
        .map(|(p, c)| (p.to_string(), c.to_string()))
        .collect();
        write(dir.path(), &files);
        let (ours, theirs) = both_walks(dir.path());
        assert_eq!(ours, theirs);
        let kept = |p: &str| ours.contains(&dir.path().join(p));
        assert!(kept("a/keep.log") && !kept("a/other.log"));
        assert!(!kept("a/c.md") && kept("b/x.log") && !kept("b/y.log"));
        assert!(kept("a/t.tmp") && !kept("u.tmp") && !kept("v.bak"));
        assert!(kept("c/build") && !kept("d/build") && !kept("rootonly") && kept("a/rootonly"));
        assert!(kept("a/b/deep/keep") && !kept("a/b/deep/gone"));
    }

    /// A random tree with ignore files of every kind at a few depths.
    fn tree() -> impl Strategy<Value = Vec<(String, String)>> {
        let folder = prop_oneof![Just(""), Just("a/"), Just("a/b/"), Just("b/")];
        let name = prop_oneof!["a", "b", "x.log", "keep.log", "c.md", "a.b"];
        let file = (folder.clone(), proptest::collection::vec(name, 1..3))
            .prop_map(|(folder, parts)| (format!("{folder}{}", parts.join("/")), String::new()));
        let rule = prop_oneof![
            Just("*.log"),
            Just("!keep.log"),
            Just("b/"),
            Just("/a"),
            Just("!*.md"),
            Just("*.md"),
            Just("x.log"),
            Just("!x.log"),
            Just("a"),
            Just("!b"),
            Just("**/b/a"),
            Just("!a.b"),
        ];
        let kind = prop_oneof![Just(KINDS[0]), Just(KINDS[1]), Just(KINDS[2])];
        let ignore_file = (folder, kind, proptest::collection::vec(rule, 1..4))
            .prop_map(|(folder, kind, rules)| (format!("{folder}{kind}"), rules.join("\n")));
        (
            proptest::collection::vec(file, 1..12),
            proptest::collection::vec(ignore_file, 1..6),
        )
            .prop_map(|(mut files, ignores)| {
                files.extend(ignores);
                files
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn the_walk_keeps_what_tree_walk_keeps(files in tree()) {
            let dir = tempfile::tempdir().unwrap();
            // A path that is a file in one entry and a folder in another: the first one wins.
            for (path, content) in &files {
                let path = dir.path().join(path);
                let _ = fs::create_dir_all(path.parent().unwrap());
                let _ = fs::write(path, content);
            }
            let (ours, theirs) = both_walks(dir.path());
            prop_assert_eq!(ours, theirs);
        }
    }

    #[test]
    fn a_kept_ignore_file_is_compiled_once_and_again_when_it_changes() {
        TREES_SETTLED.with(|s| s.set(true));
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::write(root.join(".gitignore"), "a\n").unwrap();
        let first = compiled(root, &root.join(".gitignore")).unwrap();
        let again = compiled(root, &root.join(".gitignore")).unwrap();
        assert!(
            Arc::ptr_eq(&first, &again),
            "an unchanged file is not compiled again"
        );
        assert!(Levels::load(root, None).ignored(&root.join("a"), false));
        // Another version (here another size: a write within the same timestamp tick keeps
        // the times, which is why only settled versions are kept outside tests).
        fs::write(root.join(".gitignore"), "bb\n").unwrap();
        let ignores = Levels::load(root, None);
        assert!(!ignores.ignored(&root.join("a"), false));
        assert!(ignores.ignored(&root.join("bb"), false));
        // Removed: nothing is ignored.
        fs::remove_file(root.join(".gitignore")).unwrap();
        assert!(!Levels::load(root, None).ignored(&root.join("bb"), false));
    }

    #[test]
    fn a_bare_folder_is_looked_up_again_when_its_listing_changes() {
        TREES_SETTLED.with(|s| s.set(true));
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::create_dir(root.join("sub")).unwrap();
        // As if listed long ago: an entry added now gives the folder later times.
        let hour_ago = SystemTime::now() - std::time::Duration::from_secs(3_600);
        fs::File::open(root)
            .unwrap()
            .set_modified(hour_ago)
            .unwrap();
        let bare = |root: &Path| {
            let bare = BARE.lock().unwrap();
            bare.get(root)
                .is_some_and(|v| Some(*v) == folder_version(root))
        };
        let ignores = Levels::load(root, None);
        assert!(bare(root));
        assert!(!ignores.ignored(&root.join("a"), false));
        fs::write(root.join(".gitignore"), "a\n").unwrap();
        assert!(!bare(root));
        assert!(Levels::load(root, None).ignored(&root.join("a"), false));
        // A folder holding `.git` (an exclude file may appear in it) is never bare.
        let repo = root.join("sub");
        fs::create_dir(repo.join(".git")).unwrap();
        fs::File::open(&repo)
            .unwrap()
            .set_modified(hour_ago)
            .unwrap();
        let ignores = Levels::load(&repo, None);
        assert!(!bare(&repo));
        fs::create_dir_all(repo.join(".git/info")).unwrap();
        fs::write(repo.join(".git/info/exclude"), "b\n").unwrap();
        assert!(
            !ignores.ignored(&repo.join("b"), false),
            "levels are loaded once a walk"
        );
        assert!(Levels::load(&repo, None).ignored(&repo.join("b"), false));
    }

    #[test]
    fn a_version_written_within_the_settle_time_is_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::write(root.join(".gitignore"), "a\n").unwrap();
        let first = compiled(root, &root.join(".gitignore")).unwrap();
        let again = compiled(root, &root.join(".gitignore")).unwrap();
        assert!(!Arc::ptr_eq(&first, &again));
    }
}
