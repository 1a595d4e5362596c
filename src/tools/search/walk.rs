//! Which entries a page walks: the cursor's position in walk order, the depth limit, the skipped
//! folders and the ignore files above the search root; and the walker that counts entries and
//! turns each wanted file into a job for the readers.

use super::ignores::{WalkIgnores, add_file};
use super::outcome::{Done, Job, Outcome, SkipReason, Walked};
use super::{Request, Resume};
use crate::workspace::{Workspace, is_skipped_folder};
use ignore::DirEntry;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

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

/// Decides which entries the walk yields and which folders it enters.
pub(super) struct EntryFilter {
    pub(super) root: PathBuf,
    pub(super) after: Option<PathBuf>,
    pub(super) max_depth: usize,
    /// Counts the entries left out for their depth; the walk loop takes the count after each
    /// step, which places them in walk order.
    pub(super) too_deep: Arc<AtomicU64>,
    /// Ignore files of the workspace folders above the search root, deepest first; the walk
    /// itself only reads those at and below the root.
    pub(super) enclosing_ignores: Vec<Gitignore>,
    /// The ignore files at and below the root, which the walk itself does not read: they are
    /// compiled once per version ([`super::ignores`]).
    pub(super) walk_ignores: Mutex<WalkIgnores>,
}

impl EntryFilter {
    pub(super) fn keep(&self, entry: &DirEntry) -> bool {
        if let Some(after) = &self.after {
            let relative = entry
                .path()
                .strip_prefix(&self.root)
                .unwrap_or(entry.path());
            if position(relative, after) == Position::Before {
                return false;
            }
        }
        let is_dir = entry.file_type().is_some_and(|t| t.is_dir());
        // Decided before the depth, as the walk decided it: an ignored entry is not counted as
        // too deep.
        let mut walk_ignores = self.walk_ignores.lock().unwrap_or_else(|e| e.into_inner());
        if walk_ignores.ignored(entry.path(), entry.depth(), is_dir) {
            return false;
        }
        drop(walk_ignores);
        if entry.depth() > self.max_depth {
            self.too_deep.fetch_add(1, Ordering::Relaxed);
            return false;
        }
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

/// The walk of a page below `root` from the cursor `after` (relative to `root`), as pen_search
/// and pen_find walk: [`EntryFilter`]'s entries under the ignore files of `workspace_root` down
/// to `root` and below it; with the count of the entries left out for their depth so far.
pub(crate) fn page_walk(
    root: &Path,
    after: Option<PathBuf>,
    max_depth: usize,
    workspace_root: &Path,
) -> (ignore::Walk, Arc<AtomicU64>) {
    let too_deep = Arc::new(AtomicU64::new(0));
    let filter = EntryFilter {
        root: root.to_path_buf(),
        after,
        max_depth,
        too_deep: Arc::clone(&too_deep),
        enclosing_ignores: enclosing_ignores(workspace_root, root),
        walk_ignores: Mutex::new(WalkIgnores::new(root)),
    };
    (search_walk(root, filter), too_deep)
}

/// The walk of a search below `root`, in [`crate::workspace::tree_walk`]'s order, yielding
/// what `filter` keeps. The ignore files at and below the root are `filter`'s to apply (as
/// tree_walk applies them), so that they are compiled once per version, not once per walk.
pub(super) fn search_walk(root: &Path, filter: EntryFilter) -> ignore::Walk {
    crate::workspace::tree_walk(root)
        .ignore(false)
        .git_ignore(false)
        .git_exclude(false)
        .filter_entry(move |entry| filter.keep(entry))
        .build()
}

/// The ignore files of the folders from the workspace root down to just above `root`, deepest
/// first, so that searching a sub-folder skips what searching the whole workspace skips.
pub(super) fn enclosing_ignores(workspace_root: &Path, root: &Path) -> Vec<Gitignore> {
    root.ancestors()
        .skip(1)
        .take_while(|dir| dir.starts_with(workspace_root))
        .filter_map(|dir| {
            let mut builder = GitignoreBuilder::new(dir);
            // Later files take precedence, as in the walk: .ignore over .gitignore over exclude.
            // A missing file is no error here.
            for file in [".git/info/exclude", ".gitignore", ".ignore"] {
                add_file(&mut builder, &dir.join(file));
            }
            builder
                .build()
                .ok()
                .filter(|g| g.num_ignores() + g.num_whitelists() > 0)
        })
        .collect()
}

/// What the walk makes of one entry.
pub(super) enum Step {
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
pub(super) struct Walker<'a> {
    pub(super) request: &'a Request,
    pub(super) workspace: &'a Workspace,
    pub(super) max_entries: u64,
    pub(super) walked: Walked,
    pub(super) index: usize,
    /// The last entry walked: the entry limit's cursor names it.
    pub(super) last: Option<Arc<Path>>,
}

impl Walker<'_> {
    /// Takes the next entry of the walk, the `taken`th of the page; `too_deep` entries were left
    /// out for their depth just before it. They belong to this page unless the page ends at this
    /// entry.
    pub(super) fn step(
        &mut self,
        taken: usize,
        entry: &Result<DirEntry, ignore::Error>,
        too_deep: u64,
    ) -> Step {
        let entry = match entry {
            Ok(entry) => entry,
            Err(_) => {
                self.walked.too_deep += too_deep;
                let job = self.job(taken, Arc::from(Path::new("")), self.walked, 0);
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
        let path: Arc<Path> = Arc::from(entry.path());
        if !wanted {
            self.last = Some(path);
            return Step::Pass;
        }
        let previous = self.last.replace(Arc::clone(&path));
        let mut job = self.job(taken, path, before, after_line);
        job.previous = previous;
        Step::Read(job)
    }

    /// The next item in walk order.
    fn job(&mut self, taken: usize, path: Arc<Path>, before: Walked, after_line: u64) -> Job {
        self.index += 1;
        Job {
            index: self.index - 1,
            taken,
            path,
            previous: None,
            before,
            walked: self.walked,
            after_line,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
