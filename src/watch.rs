//! Disk changes under the workspace roots, so that pen knows which files changed on disk after
//! the model read them.
//!
//! The watch is non-recursive per directory over the same tree search walks: `.gitignore`d,
//! `.git` and dependency/build folders (node_modules, target, …) are never entered, so a large
//! project does not cost thousands of watches, and at most `MAX_WATCHED_DIRS` are taken.
//! Directories created later are added as their events arrive. Events are debounced.

use crate::limits::{MAX_WATCHED_DIRS, WATCH_DEBOUNCE};
use crate::workspace::is_skipped_folder;
use notify::RecursiveMode;
use notify_debouncer_mini::{DebounceEventResult, Debouncer, new_debouncer};
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};

/// The directories to watch under `roots`: the walk search uses (its ignore files read as search
/// reads them, so a FIFO named `.gitignore` cannot hold the watch), directories only, in sorted
/// order, at most `max`. The flag says whether some were left out.
pub fn watched_dirs(roots: &[PathBuf], max: usize) -> (Vec<PathBuf>, bool) {
    let mut dirs = Vec::new();
    for root in roots {
        let (walk, _) = crate::tools::search::page_walk(root, None, usize::MAX, root);
        let folders = walk.flatten().filter(|entry| entry.is_dir());
        for entry in folders {
            if dirs.len() == max {
                return (dirs, true);
            }
            dirs.push(entry.into_path());
        }
    }
    (dirs, false)
}

type Shared = Arc<Mutex<(Debouncer<notify::RecommendedWatcher>, HashSet<PathBuf>)>>;

/// A running watch. Dropping it stops the watch and its thread.
pub struct DiskWatcher {
    _shared: Shared,
    /// Directories watched now.
    pub watched: usize,
    /// Whether `MAX_WATCHED_DIRS` left some out.
    pub truncated: bool,
}

impl DiskWatcher {
    /// Watches the roots and calls `on_change` with the paths of each debounced batch of
    /// changes, from a thread of its own.
    pub fn start(
        roots: &[PathBuf],
        on_change: impl Fn(Vec<PathBuf>) + Send + 'static,
    ) -> Result<DiskWatcher, notify::Error> {
        let (tx, rx) = std::sync::mpsc::channel::<DebounceEventResult>();
        let mut debouncer = new_debouncer(WATCH_DEBOUNCE, tx)?;
        let (dirs, truncated) = watched_dirs(roots, MAX_WATCHED_DIRS);
        let mut watched = HashSet::new();
        for dir in dirs {
            // A directory that vanished since the walk is simply not watched.
            if debouncer
                .watcher()
                .watch(&dir, RecursiveMode::NonRecursive)
                .is_ok()
            {
                watched.insert(dir);
            }
        }
        let count = watched.len();
        if truncated {
            tracing::warn!("watching the first {MAX_WATCHED_DIRS} directories only");
        }
        let shared: Shared = Arc::new(Mutex::new((debouncer, watched)));
        let weak = Arc::downgrade(&shared);
        std::thread::Builder::new()
            .name("pen-watch".into())
            .spawn(move || {
                // The loop ends when the watcher is dropped: its sender goes with it.
                for batch in rx {
                    match batch {
                        Ok(events) => {
                            let paths: Vec<PathBuf> = events.into_iter().map(|e| e.path).collect();
                            watch_new_dirs(&weak, &paths);
                            on_change(paths);
                        }
                        Err(err) => tracing::warn!("disk watch: {err}"),
                    }
                }
            })
            .map_err(|e| notify::Error::generic(&e.to_string()))?;
        Ok(DiskWatcher {
            _shared: shared,
            watched: count,
            truncated,
        })
    }
}

/// Adds a watch for each new directory among `paths` that search would enter.
fn watch_new_dirs(
    shared: &Weak<Mutex<(Debouncer<notify::RecommendedWatcher>, HashSet<PathBuf>)>>,
    paths: &[PathBuf],
) {
    let Some(shared) = shared.upgrade() else {
        return;
    };
    let Ok(mut guard) = shared.lock() else {
        return;
    };
    let (debouncer, watched) = &mut *guard;
    for path in paths {
        if watched.len() >= MAX_WATCHED_DIRS || watched.contains(path) {
            continue;
        }
        if path.is_dir()
            && !is_skipped_folder(path)
            && debouncer
                .watcher()
                .watch(path, RecursiveMode::NonRecursive)
                .is_ok()
        {
            watched.insert(path.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn ignored_and_dependency_folders_are_not_watched() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        for d in [
            "src/deep",
            "node_modules/a",
            "target/debug",
            ".git/objects",
            "gen/out",
            "docs",
        ] {
            fs::create_dir_all(root.join(d)).unwrap();
        }
        for i in 0..3_000 {
            fs::create_dir_all(root.join(format!("node_modules/pkg{i}/lib"))).unwrap();
        }
        fs::write(root.join(".gitignore"), "gen/\n").unwrap();
        let (dirs, truncated) = watched_dirs(std::slice::from_ref(&root), MAX_WATCHED_DIRS);
        assert!(!truncated);
        let names: Vec<String> = dirs
            .iter()
            .map(|d| {
                d.strip_prefix(&root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        assert_eq!(names, ["", "docs", "src", "src/deep"]);
    }

    /// The watcher watches exactly the folders pen_search enters: a folder in a result is watched
    /// and a watched folder shows up in a search for a word each folder's file holds. The tree
    /// has every kind of folder the two could disagree on, and an ignore file above the root,
    /// which neither may read.
    #[test]
    fn the_watcher_and_search_agree_on_the_folders_they_enter() {
        let dir = tempfile::tempdir().unwrap();
        let outer = dir.path().canonicalize().unwrap();
        fs::write(outer.join(".gitignore"), "ws/above/\n").unwrap();
        let root = outer.join("ws");
        let folders = [
            "",
            "src/deep",
            "node_modules/m",
            "target/debug",
            ".git/objects",
            ".hidden",
            "app/bin/Debug",
            "app/obj",
            "crate/src/bin",
            "gen",
            "sub/local",
            "above",
        ];
        for folder in folders {
            fs::create_dir_all(root.join(folder)).unwrap();
        }
        fs::write(root.join("app/App.csproj"), "<Project/>").unwrap();
        fs::write(root.join(".gitignore"), "gen/\n").unwrap();
        fs::write(root.join("sub/.gitignore"), "local/\n").unwrap();
        let (dirs, _) = watched_dirs(std::slice::from_ref(&root), MAX_WATCHED_DIRS);
        for dir in &dirs {
            fs::write(dir.join("n.txt"), "needle\n").unwrap();
        }
        // Folders no watch covers get the file too, so search finds them if it enters them.
        for folder in folders {
            let file = root.join(folder).join("n.txt");
            if !file.exists() {
                fs::write(file, "needle\n").unwrap();
            }
        }

        let workspace = crate::workspace::Workspace::new(std::slice::from_ref(&root)).unwrap();
        let limits = crate::limits::Limits::default();
        let ctx = crate::tools::ToolContext::plain(&workspace, &limits);
        let result =
            crate::tools::call("pen_search", &serde_json::json!({"query": "needle"}), &ctx)
                .unwrap();
        let mut searched: Vec<String> = result["matches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                let path = m["path"].as_str().unwrap();
                path.strip_suffix("n.txt")
                    .unwrap()
                    .trim_end_matches('/')
                    .to_string()
            })
            .collect();
        searched.sort();
        let mut watched: Vec<String> = dirs
            .iter()
            .map(|d| {
                d.strip_prefix(&root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        watched.sort();
        assert_eq!(watched, searched);
        assert!(watched.contains(&"above".to_string()), "{watched:?}");
        assert!(
            watched.contains(&"crate/src/bin".to_string()),
            "{watched:?}"
        );
        assert!(!watched.contains(&"app/bin".to_string()), "{watched:?}");
    }

    #[test]
    fn the_number_of_watches_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..30 {
            fs::create_dir_all(dir.path().join(format!("d{i:02}"))).unwrap();
        }
        let (dirs, truncated) = watched_dirs(&[dir.path().to_path_buf()], 10);
        assert_eq!(dirs.len(), 10);
        assert!(truncated);
    }
}
