//! Which entries a page walks (from the cursor, within the depth limit, under the ignore files
//! above the search root: the walk of `listing`); and the walker that counts entries and turns
//! each wanted file into a job for the readers.

use super::ignores::add_file;
use super::listing::{Entry, Filter, Position, SortedWalk, WalkError, position};
use super::outcome::{Done, Job, Outcome, SkipReason, Walked};
use super::{Request, Resume};
use crate::workspace::Workspace;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

/// The walk of a page below `root` from the cursor `after` (relative to `root`), as pen_search
/// and pen_find walk: [`Filter`]'s entries under the ignore files of `workspace_root` down to
/// `root` and below it, its folders listed ahead by a pool ([`super::listing`]); with the count
/// of the entries left out for their depth so far.
pub(crate) fn page_walk(
    root: &Path,
    after: Option<PathBuf>,
    max_depth: usize,
    workspace_root: &Path,
) -> (SortedWalk, Arc<AtomicU64>) {
    let too_deep = Arc::new(AtomicU64::new(0));
    let filter = Filter {
        root: root.to_path_buf(),
        after,
        max_depth,
        enclosing_ignores: enclosing_ignores(workspace_root, root),
    };
    (SortedWalk::new(filter, Arc::clone(&too_deep)), too_deep)
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
        entry: &Result<Entry, WalkError>,
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
        let is_file = entry.is_file();
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
