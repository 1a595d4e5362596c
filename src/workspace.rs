//! Workspace roots and path confinement: every path a tool touches is opened here, beneath a
//! root, one component at a time.
//!
//! Architecture invariant: paths are opened beneath the root without following links. A path
//! is walked from a descriptor of its root, each component opened with `O_NOFOLLOW` relative to
//! the descriptor of the folder before it, so a folder swapped for a symlink while a tool runs
//! is seen as the symlink it has become, never followed by the kernel. A symlink met on the way
//! is read and its target walked the same way, from the root, and refused when it leaves every
//! root; what a tool then reads, lists, runs in or writes is the descriptor the walk opened (or
//! a file reopened in the folder the walk opened, and checked to be the same file). Writes
//! create their temp file and rename it inside that opened folder. Search, which never follows
//! symlinks, opens each file with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` from the
//! root's descriptor (or the same walk, refusing every link, where the kernel lacks it).
//!
//! Deliberately absent: `cap-std`. Its `Dir` refuses every absolute symlink and does not say
//! where a path led, while pen follows links that stay inside a root (absolute ones included)
//! and shows and keys files by the path they resolve to; the walk below is the few `*at` calls
//! that need, on `rustix`, which the tree already has.

use crate::limits::{MAX_SYMLINK_HOPS, TEMP_NAME_ATTEMPTS};
use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags, ResolveFlags};
use rustix::io::Errno;
use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fs::{File, Metadata};
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum WorkspaceError {
    #[error("the workspace root {0} does not exist or is not a directory")]
    BadRoot(PathBuf),
    #[error(
        "{0} is outside the workspace; use a path relative to the workspace root, without `..` leaving it"
    )]
    Outside(String),
    #[error(
        "{0} resolves through a symlink to a place outside the workspace; tools only reach files inside it"
    )]
    SymlinkOutside(String),
    #[error(
        "{0} passes through more than {MAX_SYMLINK_HOPS} symlinks (a loop of links?); use the path they lead to"
    )]
    TooManyLinks(String),
    #[error("{path}: {reason}")]
    Io { path: String, reason: String },
    #[error("the path is empty")]
    Empty,
}

/// One workspace folder: a canonical directory and the name used to address it when there are
/// several roots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Root {
    pub name: String,
    pub path: PathBuf,
}

/// The set of folders the tools are confined to. The first root is the default for relative
/// paths; with several roots, a relative path may start with another root's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    roots: Vec<Root>,
}

/// A path inside the workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The absolute path with `..` and symlinks resolved (for a path that does not exist yet,
    /// its nearest existing ancestor is resolved and the rest appended).
    pub absolute: PathBuf,
    /// The path as tools show it: relative to its root, `/`-separated, prefixed with the
    /// root's name when the workspace has several roots. Empty for a root itself.
    pub display: String,
    /// Whether the final path exists.
    pub exists: bool,
}

/// What a path named when the walk opened it.
#[derive(Debug)]
pub enum Target {
    /// A folder, opened as a path descriptor (`O_PATH`).
    Dir(OwnedFd),
    /// A regular file: its path descriptor and its metadata when opened.
    File(OwnedFd, Metadata),
    /// Something else that exists: a FIFO, a socket, a device.
    Other,
    /// A symlink inside the workspace whose target does not exist.
    DanglingLink,
    /// Nothing. These components below the parent folder do not exist (or one of them is a
    /// file where a folder was expected); the last is the final name.
    Missing(Vec<OsString>),
}

/// A path opened beneath its root: where it led and the descriptors the walk holds.
#[derive(Debug)]
pub struct Opened {
    pub resolved: Resolved,
    pub target: Target,
    /// The folder that holds the final component; for [`Target::Missing`], the deepest folder
    /// that exists. `None` only for a root itself.
    parent: Option<OwnedFd>,
    /// The final component's name in `parent`.
    name: OsString,
}

impl Opened {
    /// Opens the regular file for reading, by its name in the folder the walk opened, and
    /// checks that it is the file the walk found (same device and inode): a file swapped in
    /// meanwhile, or a symlink, is refused rather than read.
    pub fn read_file(&self) -> io::Result<(File, Metadata)> {
        let (Target::File(_, walked), Some(parent)) = (&self.target, &self.parent) else {
            return Err(io::Error::other("not a regular file"));
        };
        let flags =
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        let file = File::from(rustix::fs::openat(
            parent,
            &self.name,
            flags,
            Mode::empty(),
        )?);
        let metadata = file.metadata()?;
        if (metadata.dev(), metadata.ino()) != (walked.dev(), walked.ino()) || !metadata.is_file() {
            return Err(changed_meanwhile());
        }
        Ok((file, metadata))
    }

    /// The folder, opened for listing its entries.
    pub fn read_dir(&self) -> io::Result<rustix::fs::Dir> {
        let Target::Dir(fd) = &self.target else {
            return Err(io::Error::other("not a directory"));
        };
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        Ok(rustix::fs::Dir::new(rustix::fs::openat(
            fd,
            ".",
            flags,
            Mode::empty(),
        )?)?)
    }

    /// The folder's own descriptor, for a process to start in (see `tools::command`).
    pub fn dir_fd(&self) -> Option<BorrowedFd<'_>> {
        match &self.target {
            Target::Dir(fd) => Some(fd.as_fd()),
            _ => None,
        }
    }

    /// The folder that holds an existing file and its name there, where a rewrite of it lands.
    pub fn place(&self) -> Option<(BorrowedFd<'_>, &OsStr)> {
        self.parent
            .as_ref()
            .map(|fd| (fd.as_fd(), self.name.as_os_str()))
    }

    /// For a path that does not exist: makes its missing folders, each inside the one before
    /// it and opened without following links, and returns the folder the file goes in with
    /// the file's name.
    pub fn make_parents(&self) -> io::Result<(OwnedFd, &OsStr)> {
        let (Target::Missing(parts), Some(base)) = (&self.target, &self.parent) else {
            return Err(io::Error::from(io::ErrorKind::AlreadyExists));
        };
        let Some((name, folders)) = parts.split_last() else {
            return Err(io::Error::other("the path has no name"));
        };
        let mut dir = base.try_clone()?;
        for folder in folders {
            match rustix::fs::mkdirat(&dir, folder, Mode::from_raw_mode(0o777)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(e.into()),
            }
            dir = rustix::fs::openat(&dir, folder, dir_path_flags(), Mode::empty())?;
        }
        Ok((dir, name.as_os_str()))
    }
}

/// What stands at a path itself, with no link followed anywhere on it (see
/// [`Workspace::entry`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryKind {
    /// Nothing: the entry, or a folder above it, does not exist.
    Missing,
    File,
    Symlink,
    Dir,
    /// A FIFO, a socket, a device.
    Other,
    /// A folder on the way (named, as shown) is a symlink or not a folder.
    NotAFolderOnPath(String),
}

/// An entry looked at by [`Workspace::entry`]: its kind, and the folder that holds it (opened
/// without following links) while that folder exists.
#[derive(Debug)]
pub struct Entry {
    pub kind: EntryKind,
    parent: Option<OwnedFd>,
    name: OsString,
}

impl Entry {
    /// Removes the entry itself (a link, a FIFO, a socket, a file) from its folder: never what
    /// a link names. A folder is not removed.
    pub fn remove(&self) -> io::Result<()> {
        let Some(parent) = &self.parent else {
            return Err(io::Error::from(io::ErrorKind::NotFound));
        };
        rustix::fs::unlinkat(parent, &self.name, AtFlags::empty()).map_err(Into::into)
    }
}

/// The error for a file that changed between being found and being opened.
fn changed_meanwhile() -> io::Error {
    io::Error::other("the file changed while it was being opened; try again")
}

/// Flags to open a folder on a walk: a path descriptor, never through a symlink.
fn dir_path_flags() -> OFlags {
    OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

impl Workspace {
    /// A workspace of the given directories; each is canonicalized.
    pub fn new(dirs: &[PathBuf]) -> Result<Workspace, WorkspaceError> {
        let mut roots = Vec::with_capacity(dirs.len());
        for dir in dirs {
            let path = dir
                .canonicalize()
                .map_err(|_| WorkspaceError::BadRoot(dir.clone()))?;
            if !path.is_dir() {
                return Err(WorkspaceError::BadRoot(dir.clone()));
            }
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "/".to_string());
            roots.push(Root { name, path });
        }
        if roots.is_empty() {
            return Err(WorkspaceError::Empty);
        }
        Ok(Workspace { roots })
    }

    pub fn roots(&self) -> &[Root] {
        &self.roots
    }

    /// Where a path given by the model or the user leads, without keeping it open. Only for
    /// naming (results, editor documents); a tool that reads or writes uses [`Workspace::open`].
    pub fn resolve(&self, input: &str) -> Result<Resolved, WorkspaceError> {
        self.open(input).map(|opened| opened.resolved)
    }

    /// Opens a path given by the model or the user beneath its root. Relative paths are taken
    /// from the root they name (with several roots) or the first root; absolute paths must lie
    /// in a root. `..` is folded lexically first; then the walk of the module doc: one
    /// component at a time, never letting the kernel follow a link, a symlink's target walked
    /// from the root it lies in and refused outside every root.
    pub fn open(&self, input: &str) -> Result<Opened, WorkspaceError> {
        let input_path = Path::new(input);
        let (root, rest) = if input_path.is_absolute() {
            let normal =
                normalize(input_path).ok_or_else(|| WorkspaceError::Outside(input.into()))?;
            self.root_of(&normal)
                .ok_or_else(|| WorkspaceError::Outside(input.into()))?
        } else {
            let (root, relative) = self.pick_root(input_path);
            let rest = normalize(relative).ok_or_else(|| WorkspaceError::Outside(input.into()))?;
            (root, rest)
        };
        let walk = Walk {
            workspace: self,
            input,
            root,
            root_fd: open_root(&self.roots[root])?,
            dirs: Vec::new(),
            names: Vec::new(),
            queue: parts(&rest).collect(),
            links: Vec::new(),
            hops: 0,
        };
        walk.run()
    }

    /// What stands at `absolute` (a canonical path inside a root, as recorded), the path
    /// itself: each folder on it opened without following a link (a link or a file where a
    /// folder was is [`EntryKind::NotAFolderOnPath`]), the last entry looked at without
    /// following it. For a revert, which must act on the path it recorded and nothing a link
    /// there now names.
    pub fn entry(&self, absolute: &Path) -> Result<Entry, WorkspaceError> {
        let shown = || absolute.to_string_lossy().into_owned();
        let io_error = |e: Errno| WorkspaceError::Io {
            path: shown(),
            reason: io::Error::from(e).to_string(),
        };
        let normal = normalize(absolute).ok_or_else(|| WorkspaceError::Outside(shown()))?;
        let (root, rest) = self
            .root_of(&normal)
            .ok_or_else(|| WorkspaceError::Outside(shown()))?;
        let names: Vec<OsString> = parts(&rest).collect();
        let mut dir = open_root(&self.roots[root])?;
        let Some((name, folders)) = names.split_last() else {
            return Ok(Entry {
                kind: EntryKind::Dir,
                parent: None,
                name: OsString::new(),
            });
        };
        let missing = |name: &OsString| Entry {
            kind: EntryKind::Missing,
            parent: None,
            name: name.clone(),
        };
        for (depth, folder) in folders.iter().enumerate() {
            let fd = match rustix::fs::openat(&dir, folder, dir_path_flags(), Mode::empty()) {
                Ok(fd) => fd,
                Err(Errno::NOENT) => return Ok(missing(name)),
                // O_DIRECTORY with O_NOFOLLOW: a link or a file where a folder was.
                Err(Errno::NOTDIR | Errno::LOOP) => {
                    let mut shown = self.roots[root].path.clone();
                    shown.extend(&names[..=depth]);
                    return Ok(Entry {
                        kind: EntryKind::NotAFolderOnPath(self.display(&shown)),
                        parent: None,
                        name: name.clone(),
                    });
                }
                Err(e) => return Err(io_error(e)),
            };
            dir = fd;
        }
        let kind = match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => match rustix::fs::FileType::from_raw_mode(stat.st_mode) {
                rustix::fs::FileType::RegularFile => EntryKind::File,
                rustix::fs::FileType::Symlink => EntryKind::Symlink,
                rustix::fs::FileType::Directory => EntryKind::Dir,
                _ => EntryKind::Other,
            },
            Err(Errno::NOENT) => EntryKind::Missing,
            Err(e) => return Err(io_error(e)),
        };
        Ok(Entry {
            kind,
            parent: Some(dir),
            name: name.clone(),
        })
    }

    /// The root a search of `absolute` (a resolved path) opens its files beneath.
    pub fn root_dir(&self, absolute: &Path) -> Result<RootDir, WorkspaceError> {
        let (root, _) = self
            .root_of(absolute)
            .ok_or_else(|| WorkspaceError::Outside(absolute.to_string_lossy().into_owned()))?;
        Ok(RootDir {
            fd: open_root(&self.roots[root])?,
            path: self.roots[root].path.clone(),
        })
    }

    /// The deepest root holding the absolute, normalized `path`, and the rest of it.
    fn root_of(&self, path: &Path) -> Option<(usize, PathBuf)> {
        let (index, root) = self
            .roots
            .iter()
            .enumerate()
            .filter(|(_, r)| path.starts_with(&r.path))
            .max_by_key(|(_, r)| r.path.as_os_str().len())?;
        let rest = path.strip_prefix(&root.path).ok()?.to_path_buf();
        Some((index, rest))
    }

    /// The display form of an absolute path known to be inside a root (used by walks).
    pub fn display(&self, absolute: &Path) -> String {
        match self.roots.iter().find(|r| absolute.starts_with(&r.path)) {
            Some(r) => self.display_in(r, absolute),
            None => absolute.to_string_lossy().into_owned(),
        }
    }

    fn display_in(&self, root: &Root, absolute: &Path) -> String {
        // The usual path, cut by bytes: a plain UTF-8 rest below the root without an empty or
        // `.` component inside, which is what joining its components gives (on a search with
        // many matches, a String per component was 2% of the instructions).
        if let Some(rest) = absolute
            .as_os_str()
            .as_bytes()
            .strip_prefix(root.path.as_os_str().as_bytes())
            .and_then(|rest| rest.strip_prefix(b"/"))
            .and_then(|rest| std::str::from_utf8(rest).ok())
            .filter(|rest| {
                !(rest.is_empty()
                    || rest == &"."
                    || rest.starts_with('/')
                    || rest.starts_with("./")
                    || rest.ends_with('/')
                    || rest.ends_with("/.")
                    || rest.contains("//")
                    || rest.contains("/./"))
            })
        {
            return if self.roots.len() > 1 {
                format!("{}/{rest}", root.name)
            } else {
                rest.to_string()
            };
        }
        self.display_by_components(root, absolute)
    }

    fn display_by_components(&self, root: &Root, absolute: &Path) -> String {
        let relative = absolute.strip_prefix(&root.path).unwrap_or(absolute);
        let mut parts: Vec<String> = Vec::new();
        if self.roots.len() > 1 {
            parts.push(root.name.clone());
        }
        parts.extend(
            relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned()),
        );
        parts.join("/")
    }

    fn pick_root<'a>(&'a self, relative: &'a Path) -> (usize, &'a Path) {
        if self.roots.len() > 1
            && let Some(Component::Normal(first)) = relative.components().next()
            && let Some(root) = self.roots.iter().position(|r| first == r.name.as_str())
        {
            let rest = relative.strip_prefix(first).unwrap_or(relative);
            return (root, rest);
        }
        (0, relative)
    }
}

/// Opens a root by its canonical path: the root is the owner's choice, the one path trusted.
fn open_root(root: &Root) -> Result<OwnedFd, WorkspaceError> {
    rustix::fs::open(
        &root.path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|_| WorkspaceError::BadRoot(root.path.clone()))
}

/// The components of a relative path that the walk steps through: names and `..`.
fn parts(path: &Path) -> impl Iterator<Item = OsString> + '_ {
    path.components().filter_map(|c| match c {
        Component::Normal(name) => Some(name.to_os_string()),
        Component::ParentDir => Some(OsString::from("..")),
        _ => None,
    })
}

/// One resolution in progress: the folders opened so far below the root and the components
/// still to walk.
struct Walk<'a> {
    workspace: &'a Workspace,
    input: &'a str,
    /// The index of the root being walked; a symlink may lead into another one.
    root: usize,
    root_fd: OwnedFd,
    /// The folders opened below the root, each inside the one before, and their names.
    dirs: Vec<OwnedFd>,
    names: Vec<OsString>,
    queue: VecDeque<OsString>,
    /// For each symlink whose target is being walked: how many components followed it, and
    /// its own absolute path. A component comes from a link's target while more than that
    /// many remain after it.
    links: Vec<(usize, PathBuf)>,
    hops: usize,
}

impl Walk<'_> {
    fn run(mut self) -> Result<Opened, WorkspaceError> {
        loop {
            let Some(part) = self.queue.pop_front() else {
                return Ok(self.finish_dir());
            };
            while self
                .links
                .last()
                .is_some_and(|(after, _)| self.queue.len() < *after)
            {
                self.links.pop();
            }
            if part == ".." {
                self.climb()?;
                continue;
            }
            let here = self.dirs.last().unwrap_or(&self.root_fd);
            let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let file = match rustix::fs::openat(here, &part, flags, Mode::empty()) {
                Ok(fd) => File::from(fd),
                Err(Errno::NOENT) => return Ok(self.missing(part)),
                Err(e) => return Err(self.io_error(e.into())),
            };
            let metadata = file.metadata().map_err(|e| self.io_error(e))?;
            let kind = metadata.file_type();
            if kind.is_dir() {
                self.dirs.push(file.into());
                self.names.push(part);
            } else if kind.is_symlink() {
                self.follow(&file, &part)?;
            } else if !self.queue.is_empty() {
                // A file where a folder was expected: the path names nothing.
                return Ok(self.missing(part));
            } else if kind.is_file() {
                return Ok(self.finish(part, Target::File(file.into(), metadata)));
            } else {
                return Ok(self.finish(part, Target::Other));
            }
        }
    }

    /// The absolute path of the folder reached.
    fn here(&self) -> PathBuf {
        let mut path = self.workspace.roots[self.root].path.clone();
        path.extend(&self.names);
        path
    }

    fn resolved(&self, absolute: PathBuf, exists: bool) -> Resolved {
        Resolved {
            display: self
                .workspace
                .display_in(&self.workspace.roots[self.root], &absolute),
            absolute,
            exists,
        }
    }

    fn io_error(&self, err: io::Error) -> WorkspaceError {
        WorkspaceError::Io {
            path: self.input.to_string(),
            reason: err.to_string(),
        }
    }

    fn outside(&self) -> WorkspaceError {
        WorkspaceError::SymlinkOutside(self.input.to_string())
    }

    /// Steps into a symlink's target: read from the link itself (the descriptor opened
    /// without following it), walked from the folder holding it or, when absolute, from the
    /// root it lies in.
    fn follow(&mut self, link: &File, part: &OsStr) -> Result<(), WorkspaceError> {
        self.hops += 1;
        if self.hops > MAX_SYMLINK_HOPS {
            return Err(WorkspaceError::TooManyLinks(self.input.to_string()));
        }
        let target =
            rustix::fs::readlinkat(link, "", Vec::new()).map_err(|e| self.io_error(e.into()))?;
        let target = PathBuf::from(OsStr::from_bytes(target.as_bytes()));
        let link_path = self.here().join(part);
        let after = self.queue.len();
        let steps: Vec<OsString> = if target.is_absolute() {
            let normal = normalize(&target).ok_or_else(|| self.outside())?;
            let (root, rest) = self
                .workspace
                .root_of(&normal)
                .ok_or_else(|| self.outside())?;
            self.enter_root(root)?;
            parts(&rest).collect()
        } else {
            parts(&target).collect()
        };
        for step in steps.into_iter().rev() {
            self.queue.push_front(step);
        }
        self.links.push((after, link_path));
        Ok(())
    }

    /// Steps to the parent folder for a `..` of a link's target. Above the root, the target
    /// may only come back into a root by name (`../other-root/f`); else it leads outside.
    fn climb(&mut self) -> Result<(), WorkspaceError> {
        if self.dirs.pop().is_some() {
            self.names.pop();
            return Ok(());
        }
        let root_path = &self.workspace.roots[self.root].path;
        let mut path = root_path
            .parent()
            .ok_or_else(|| self.outside())?
            .to_path_buf();
        loop {
            if let Some((root, rest)) = self.workspace.root_of(&path) {
                self.enter_root(root)?;
                let back: Vec<OsString> = parts(&rest).collect();
                for step in back.into_iter().rev() {
                    self.queue.push_front(step);
                }
                return Ok(());
            }
            match self.queue.pop_front() {
                Some(part) if part == ".." => {
                    path.pop();
                }
                Some(part) => path.push(part),
                None => return Err(self.outside()),
            }
        }
    }

    fn enter_root(&mut self, root: usize) -> Result<(), WorkspaceError> {
        self.root_fd = open_root(&self.workspace.roots[root])?;
        self.root = root;
        self.dirs.clear();
        self.names.clear();
        Ok(())
    }

    /// The walk ended on a folder.
    fn finish_dir(mut self) -> Opened {
        let absolute = self.here();
        let resolved = self.resolved(absolute, true);
        match self.dirs.pop() {
            Some(dir) => {
                let name = self.names.pop().unwrap_or_default();
                let parent = self.dirs.pop().unwrap_or(self.root_fd);
                Opened {
                    resolved,
                    target: Target::Dir(dir),
                    parent: Some(parent),
                    name,
                }
            }
            None => Opened {
                resolved,
                target: Target::Dir(self.root_fd),
                parent: None,
                name: OsString::new(),
            },
        }
    }

    /// The walk ended on `part`, a file or another kind of entry, in the folder reached.
    fn finish(mut self, part: OsString, target: Target) -> Opened {
        let resolved = self.resolved(self.here().join(&part), true);
        let parent = self.dirs.pop().unwrap_or(self.root_fd);
        Opened {
            resolved,
            target,
            parent: Some(parent),
            name: part,
        }
    }

    /// `part` does not exist in the folder reached. Within a link's target that makes the link
    /// dangle, and the link itself is what the path names: writing through it is refused.
    fn missing(mut self, part: OsString) -> Opened {
        if let Some((_, link)) = self.links.first() {
            let resolved = self.resolved(link.clone(), true);
            return Opened {
                resolved,
                target: Target::DanglingLink,
                parent: None,
                name: part,
            };
        }
        let mut absolute = self.here();
        absolute.push(&part);
        absolute.extend(&self.queue);
        let resolved = self.resolved(absolute, false);
        let mut rest = vec![part];
        rest.extend(self.queue.drain(..));
        let parent = self.dirs.pop().unwrap_or(self.root_fd);
        Opened {
            resolved,
            target: Target::Missing(rest),
            parent: Some(parent),
            name: OsString::new(),
        }
    }
}

/// Whether `openat2` may be tried; cleared for good the first time the kernel (or a seccomp
/// filter) refuses the call itself.
static OPENAT2: AtomicBool = AtomicBool::new(true);

/// A root opened once for many opens beneath it that follow no symlink at all (search).
pub struct RootDir {
    fd: OwnedFd,
    path: PathBuf,
}

impl RootDir {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens the regular file at `absolute`, a path below this root, for reading, refusing a
    /// symlink anywhere on the way: `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`,
    /// or, where the kernel lacks it, a walk of `O_NOFOLLOW` opens from the root.
    /// The file comes with its metadata, taken from the open file.
    pub fn open_file_no_links(&self, absolute: &Path) -> io::Result<(File, Metadata)> {
        self.open_no_links(absolute, OPENAT2.load(Ordering::Relaxed))
    }

    fn open_no_links(&self, absolute: &Path, try_openat2: bool) -> io::Result<(File, Metadata)> {
        let relative = below(&self.path, absolute)
            .ok_or_else(|| io::Error::other("outside the search root"))?;
        let flags =
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        let fd = match try_openat2.then(|| {
            let resolve =
                ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
            rustix::fs::openat2(&self.fd, relative, flags, Mode::empty(), resolve)
        }) {
            Some(Err(Errno::NOSYS | Errno::PERM)) => {
                OPENAT2.store(false, Ordering::Relaxed);
                self.walk_no_links(relative, flags)?
            }
            Some(result) => result?,
            None => self.walk_no_links(relative, flags)?,
        };
        let file = File::from(fd);
        let metadata = file.metadata()?;
        if !metadata.is_file() {
            return Err(io::Error::other("not a regular file"));
        }
        Ok((file, metadata))
    }

    fn walk_no_links(&self, relative: &Path, flags: OFlags) -> io::Result<OwnedFd> {
        let mut names = relative.components().map(|c| c.as_os_str());
        let Some(name) = names.next_back() else {
            return Err(io::Error::other("a folder, not a file"));
        };
        let mut dir: Option<OwnedFd> = None;
        for folder in names {
            let here = dir.as_ref().unwrap_or(&self.fd);
            dir = Some(rustix::fs::openat(
                here,
                folder,
                dir_path_flags(),
                Mode::empty(),
            )?);
        }
        let here = dir.as_ref().unwrap_or(&self.fd);
        Ok(rustix::fs::openat(here, name, flags, Mode::empty())?)
    }
}

/// `path` relative to `root`, as `path.strip_prefix(root)` gives it. Most paths are `root`'s
/// bytes, a `/` and a plain relative rest: those are cut by bytes, without parsing both paths'
/// components (on a whole-corpus search, `strip_prefix` per file opened was 5% of the
/// instructions). A rest that parsing would trim (leading or trailing `/` or `.`) goes the slow
/// way, so the result is the same.
fn below<'a>(root: &Path, path: &'a Path) -> Option<&'a Path> {
    let rest = path
        .as_os_str()
        .as_bytes()
        .strip_prefix(root.as_os_str().as_bytes())
        .and_then(|rest| rest.strip_prefix(b"/"))
        .filter(|rest| {
            !(rest.is_empty()
                || rest == b"."
                || rest.starts_with(b"/")
                || rest.starts_with(b"./")
                || rest.ends_with(b"/")
                || rest.ends_with(b"/."))
        });
    match rest {
        Some(rest) => Some(Path::new(OsStr::from_bytes(rest))),
        None => path.strip_prefix(root).ok(),
    }
}

/// How an atomic write lands on its name.
#[derive(Debug, Clone, Copy)]
pub enum Landing {
    /// A new file: the rename fails if anything appeared at the name meanwhile. The file gets
    /// the usual permissions of a new file (0o666 less the umask).
    New,
    /// A rewrite: the file is replaced and gets these permission bits.
    Replace(u32),
}

/// Writes `bytes` to `name` in the opened folder `dir`, atomically: a `.pen-` temp file is
/// created in that same folder (never through a path), written, synced and renamed to `name`.
/// Whatever fails, the temp file is removed.
pub fn write_in(dir: BorrowedFd, name: &OsStr, bytes: &[u8], landing: Landing) -> io::Result<()> {
    let mode = match landing {
        Landing::New => 0o666,
        Landing::Replace(_) => 0o600,
    };
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut attempt = 0;
    let (temp_name, fd) = loop {
        let temp_name = format!(".pen-{}", fastrand_name());
        match rustix::fs::openat(dir, temp_name.as_str(), flags, Mode::from_raw_mode(mode)) {
            Ok(fd) => break (temp_name, fd),
            Err(Errno::EXIST) if attempt + 1 < TEMP_NAME_ATTEMPTS => attempt += 1,
            Err(e) => return Err(e.into()),
        }
    };
    let landed = land(dir, &temp_name, File::from(fd), name, bytes, landing);
    if landed.is_err() {
        let _ = rustix::fs::unlinkat(dir, temp_name.as_str(), AtFlags::empty());
    }
    landed?;
    // Syncing the folder makes the rename itself durable. The new file is in place either
    // way, so a filesystem that cannot sync folders does not fail the write.
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    if let Ok(folder) = rustix::fs::openat(dir, ".", flags, Mode::empty()) {
        let _ = rustix::fs::fsync(folder);
    }
    Ok(())
}

fn land(
    dir: BorrowedFd,
    temp_name: &str,
    mut temp: File,
    name: &OsStr,
    bytes: &[u8],
    landing: Landing,
) -> io::Result<()> {
    temp.write_all(bytes)?;
    match landing {
        Landing::New => {
            temp.sync_all()?;
            match rustix::fs::renameat_with(dir, temp_name, dir, name, RenameFlags::NOREPLACE) {
                Ok(()) => Ok(()),
                // A filesystem without RENAME_NOREPLACE: a hard link fails the same way when the
                // name is taken; the temp name is then removed by the caller or below.
                Err(Errno::INVAL | Errno::NOSYS) => {
                    rustix::fs::linkat(dir, temp_name, dir, name, AtFlags::empty())?;
                    let _ = rustix::fs::unlinkat(dir, temp_name, AtFlags::empty());
                    Ok(())
                }
                Err(e) => Err(e.into()),
            }
        }
        Landing::Replace(permissions) => {
            // Set explicitly rather than at creation, where the umask would mask them.
            rustix::fs::fchmod(&temp, Mode::from_raw_mode(permissions))?;
            temp.sync_all()?;
            Ok(rustix::fs::renameat(dir, temp_name, dir, name)?)
        }
    }
}

/// Six random characters for a temp file name, as `tempfile` makes them.
fn fastrand_name() -> String {
    std::iter::repeat_with(fastrand::alphanumeric)
        .take(6)
        .collect()
}

/// Removes `.` and folds `..` lexically. Returns `None` when `..` would climb above the start.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    let mut depth = 0usize;
    for component in path.components() {
        match component {
            Component::Prefix(_) | Component::RootDir => out.push(component.as_os_str()),
            Component::CurDir => {}
            Component::ParentDir => {
                if depth == 0 {
                    return None;
                }
                out.pop();
                depth -= 1;
            }
            Component::Normal(part) => {
                out.push(part);
                depth += 1;
            }
        }
    }
    Some(out)
}

/// The canonical form of an absolute path, as [`Workspace::resolve`] produces it: symlinks
/// resolved along its longest existing prefix. The daemon keys open documents by it; it only
/// names a file and is never opened.
pub fn canonical(path: &Path) -> PathBuf {
    if let Ok(canonical) = path.canonicalize() {
        return canonical;
    }
    let mut missing = Vec::new();
    let mut current = path.to_path_buf();
    loop {
        // A dangling symlink cannot be canonicalized; it names itself.
        if current.symlink_metadata().is_ok() && current.canonicalize().is_err() {
            return current;
        }
        match current.file_name() {
            Some(name) => {
                missing.push(name.to_os_string());
                current.pop();
            }
            None => return path.to_path_buf(),
        }
        if let Ok(mut canonical) = current.canonicalize() {
            for part in missing.iter().rev() {
                canonical.push(part);
            }
            return canonical;
        }
    }
}

/// Folders pen_search never enters below its root and the disk watcher never watches:
/// version-control metadata and the usual dependency, cache and build-output folders, which are
/// large, generated and rarely what the model is looking for. Naming one of them as pen_search's
/// `path` still searches it.
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

/// Whether pen_search and the disk watcher skip this folder: a VCS or dependency/build folder by
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

/// The walk of a tree as pen_search, pen_find and the disk watcher see it: sorted by file name,
/// hidden files included, symlinks not followed, `.gitignore`, `.ignore` and `.git/info/exclude`
/// honoured without a `.git`, and neither the user's global git configuration nor ignore files
/// above `root` read (a result must not depend on who runs it or where the workspace sits).
/// Callers add their own `filter_entry`, each calling [`is_skipped_folder`]. The tools and the
/// watcher do not run it: they walk through `tools::search::page_walk`, which yields its entries
/// in its order (tests compare them) with its folders listed ahead by a pool, its ignore files
/// compiled once per version and read without blocking (a FIFO named `.gitignore` would hold
/// this walk's own reading forever). This walk is the reference those tests and the bench use.
pub fn tree_walk(root: &Path) -> ignore::WalkBuilder {
    let mut walk = ignore::WalkBuilder::new(root);
    walk.hidden(false)
        .parents(false)
        .ignore(true)
        .git_ignore(true)
        .git_exclude(true)
        .git_global(false)
        .require_git(false)
        .follow_links(false)
        // By file name, compared as the whole paths: the entries sorted are the listing of one
        // folder, each path that folder's path joined with the name, so the paths compare as
        // their names do. `sort_by_file_name` would take each name out of its path by parsing
        // the path's components from the back, twice per comparison: on a whole-corpus search
        // that was 7% of the instructions (callgrind).
        .sort_by_file_path(|a, b| a.as_os_str().cmp(b.as_os_str()));
    walk
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn workspace() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("src/deep")).unwrap();
        fs::write(dir.path().join("src/lib.rs"), "x").unwrap();
        let ws = Workspace::new(&[dir.path().to_path_buf()]).unwrap();
        (dir, ws)
    }

    /// What stands at a path itself: a link is a link (not its target), a link on the way is
    /// no folder, and removing an entry removes the link, never what it names.
    #[test]
    fn an_entry_is_the_path_itself() {
        let (dir, ws) = workspace();
        let root = dir.path().canonicalize().unwrap();
        std::os::unix::fs::symlink("src/lib.rs", root.join("link.rs")).unwrap();
        std::os::unix::fs::symlink("src", root.join("src-link")).unwrap();
        let kind = |path: &str| ws.entry(&root.join(path)).unwrap().kind;
        assert_eq!(kind("src/lib.rs"), EntryKind::File);
        assert_eq!(kind("link.rs"), EntryKind::Symlink);
        assert_eq!(kind("src"), EntryKind::Dir);
        assert_eq!(kind("nope/lib.rs"), EntryKind::Missing);
        assert_eq!(kind("src/nope.rs"), EntryKind::Missing);
        assert_eq!(
            kind("src-link/lib.rs"),
            EntryKind::NotAFolderOnPath("src-link".into())
        );
        assert_eq!(
            kind("src/lib.rs/x"),
            EntryKind::NotAFolderOnPath("src/lib.rs".into())
        );
        assert!(ws.entry(Path::new("/etc/passwd")).is_err());
        ws.entry(&root.join("link.rs")).unwrap().remove().unwrap();
        assert!(root.join("src/lib.rs").exists());
        assert!(fs::symlink_metadata(root.join("link.rs")).is_err());
    }

    #[test]
    fn relative_paths_resolve_inside() {
        let (_dir, ws) = workspace();
        let r = ws.resolve("src/lib.rs").unwrap();
        assert_eq!(r.display, "src/lib.rs");
        assert!(r.exists);
        assert_eq!(
            ws.resolve("src/deep/../lib.rs").unwrap().display,
            "src/lib.rs"
        );
        assert_eq!(ws.resolve("./src").unwrap().display, "src");
        assert_eq!(ws.resolve("").unwrap().display, "");
        let new = ws.resolve("src/new/file.rs").unwrap();
        assert!(!new.exists);
        assert_eq!(new.display, "src/new/file.rs");
    }

    #[test]
    fn escapes_are_refused() {
        let (dir, ws) = workspace();
        assert!(matches!(
            ws.resolve("../x"),
            Err(WorkspaceError::Outside(_))
        ));
        assert!(matches!(
            ws.resolve("src/../../x"),
            Err(WorkspaceError::Outside(_))
        ));
        assert!(matches!(
            ws.resolve("/etc/passwd"),
            Err(WorkspaceError::Outside(_))
        ));
        let inside = dir.path().join("src/lib.rs");
        assert_eq!(
            ws.resolve(inside.to_str().unwrap()).unwrap().display,
            "src/lib.rs"
        );
    }

    #[test]
    fn symlinks_out_of_the_workspace_are_refused() {
        let (dir, ws) = workspace();
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("link")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("src/lib.rs"), dir.path().join("ok")).unwrap();
        assert!(matches!(
            ws.resolve("link/secret"),
            Err(WorkspaceError::SymlinkOutside(_))
        ));
        assert!(matches!(
            ws.resolve("link/new"),
            Err(WorkspaceError::SymlinkOutside(_))
        ));
        assert_eq!(ws.resolve("ok").unwrap().display, "src/lib.rs");
    }

    #[test]
    fn several_roots_are_addressed_by_name() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        fs::write(b.path().join("f"), "x").unwrap();
        let ws = Workspace::new(&[a.path().to_path_buf(), b.path().to_path_buf()]).unwrap();
        let b_name = ws.roots()[1].name.clone();
        let r = ws.resolve(&format!("{b_name}/f")).unwrap();
        assert!(r.exists);
        assert_eq!(r.display, format!("{b_name}/f"));
    }

    #[test]
    fn links_inside_are_followed_and_name_their_target() {
        let (dir, ws) = workspace();
        let root = dir.path().canonicalize().unwrap();
        std::os::unix::fs::symlink("src", dir.path().join("rel_dir")).unwrap();
        std::os::unix::fs::symlink(root.join("src/lib.rs"), dir.path().join("abs_file")).unwrap();
        std::os::unix::fs::symlink("../lib.rs", dir.path().join("src/deep/up")).unwrap();
        for (input, display) in [
            ("rel_dir/lib.rs", "src/lib.rs"),
            ("abs_file", "src/lib.rs"),
            ("src/deep/up", "src/lib.rs"),
            ("rel_dir/deep", "src/deep"),
        ] {
            let opened = ws.open(input).unwrap();
            assert_eq!(opened.resolved.display, display, "{input}");
            assert_eq!(opened.resolved.absolute, root.join(display), "{input}");
        }
        let (mut file, _) = ws.open("abs_file").unwrap().read_file().unwrap();
        let mut text = String::new();
        std::io::Read::read_to_string(&mut file, &mut text).unwrap();
        assert_eq!(text, "x");
        // A link that climbs out of the root and comes back in by the root's name stays inside.
        let name = root.file_name().unwrap().to_str().unwrap().to_string();
        std::os::unix::fs::symlink(format!("../{name}/src"), dir.path().join("round")).unwrap();
        assert_eq!(
            ws.open("round/lib.rs").unwrap().resolved.display,
            "src/lib.rs"
        );
    }

    #[test]
    fn loops_dangling_links_and_files_on_the_way() {
        let (dir, ws) = workspace();
        std::os::unix::fs::symlink("b", dir.path().join("a")).unwrap();
        std::os::unix::fs::symlink("a", dir.path().join("b")).unwrap();
        assert!(matches!(
            ws.open("a/x"),
            Err(WorkspaceError::TooManyLinks(_))
        ));
        std::os::unix::fs::symlink("nowhere", dir.path().join("dangling")).unwrap();
        for input in ["dangling", "dangling/new.txt"] {
            let opened = ws.open(input).unwrap();
            assert!(matches!(opened.target, Target::DanglingLink), "{input}");
            assert!(opened.resolved.exists);
            assert_eq!(opened.resolved.display, "dangling");
        }
        let opened = ws.open("src/lib.rs/x").unwrap();
        assert!(matches!(opened.target, Target::Missing(_)));
        assert!(!opened.resolved.exists);
        let err = opened.make_parents().unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOTDIR));
    }

    #[test]
    fn a_file_swapped_after_the_walk_is_not_read() {
        let (dir, ws) = workspace();
        let opened = ws.open("src/lib.rs").unwrap();
        fs::write(dir.path().join("other"), "other").unwrap();
        fs::rename(dir.path().join("other"), dir.path().join("src/lib.rs")).unwrap();
        let err = opened.read_file().unwrap_err();
        assert!(err.to_string().contains("changed while"), "{err}");
        fs::write(dir.path().join("src/deep/inner"), "").unwrap();
        let opened = ws.open("src/deep").unwrap();
        fs::rename(dir.path().join("src/deep"), dir.path().join("src/moved")).unwrap();
        std::os::unix::fs::symlink("/etc", dir.path().join("src/deep")).unwrap();
        // The folder listed is the one the walk opened, wherever it went, never the link's
        // target.
        let names: Vec<Vec<u8>> = opened
            .read_dir()
            .unwrap()
            .map(|e| e.unwrap().file_name().to_bytes().to_vec())
            .filter(|n| n != b"." && n != b"..")
            .collect();
        assert_eq!(names, vec![b"inner".to_vec()]);
    }

    #[test]
    fn search_opens_refuse_every_link_with_and_without_openat2() {
        let (dir, ws) = workspace();
        let root = dir.path().canonicalize().unwrap();
        std::os::unix::fs::symlink("src", dir.path().join("via")).unwrap();
        std::os::unix::fs::symlink("lib.rs", dir.path().join("src/alias")).unwrap();
        let root_dir = ws.root_dir(&root).unwrap();
        for try_openat2 in [true, false] {
            let open = |rel: &str| root_dir.open_no_links(&root.join(rel), try_openat2);
            assert!(open("src/lib.rs").unwrap().1.is_file());
            assert!(open("via/lib.rs").is_err(), "openat2: {try_openat2}");
            assert!(open("src/alias").is_err(), "openat2: {try_openat2}");
            assert!(open("src/deep").is_err(), "openat2: {try_openat2}");
            assert!(open("src/missing").is_err(), "openat2: {try_openat2}");
        }
    }

    #[test]
    fn writes_land_in_the_opened_folder_and_leave_no_temp_file() {
        use std::os::unix::fs::PermissionsExt;
        let (dir, ws) = workspace();
        let opened = ws.open("src/new/deeper/f.txt").unwrap();
        let (parent, name) = opened.make_parents().unwrap();
        write_in(parent.as_fd(), name, b"one", Landing::New).unwrap();
        let err = write_in(parent.as_fd(), name, b"two", Landing::New).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        let path = dir.path().join("src/new/deeper/f.txt");
        assert_eq!(fs::read(&path).unwrap(), b"one");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o751)).unwrap();
        let opened = ws.open("src/new/deeper/f.txt").unwrap();
        let (parent, name) = opened.place().unwrap();
        write_in(parent, name, b"three", Landing::Replace(0o751)).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"three");
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o7777,
            0o751
        );
        let names: Vec<_> = fs::read_dir(dir.path().join("src/new/deeper"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("f.txt")]);
    }

    /// Each folder's entries come in byte order of their names, a folder's contents right after
    /// it: `a/…` before `a-b` and `a.txt`, upper case before lower, a name before its extensions.
    #[test]
    fn tree_walk_yields_each_folders_entries_by_name() {
        let dir = tempfile::tempdir().unwrap();
        for file in ["a.txt", "a-b", "B", "a/z", "a/y.rs", "a/y", "ab", "é", "e"] {
            let path = dir.path().join(file);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, "x").unwrap();
        }
        let walked: Vec<String> = tree_walk(dir.path())
            .build()
            .map(|e| {
                e.unwrap()
                    .path()
                    .strip_prefix(dir.path())
                    .unwrap()
                    .display()
                    .to_string()
            })
            .collect();
        let expected = [
            "", "B", "a", "a/y", "a/y.rs", "a/z", "a-b", "a.txt", "ab", "e", "é",
        ];
        assert_eq!(walked, expected);
    }

    /// A path is shown as its components joined, whether cut by bytes or not.
    #[test]
    fn display_by_bytes_is_display_by_components() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        fs::create_dir_all(&a).unwrap();
        fs::create_dir_all(&b).unwrap();
        let rests = [
            "",
            "x",
            "x/y.rs",
            "/x",
            "//x",
            "./x",
            "x/",
            "x/.",
            ".",
            "..",
            "../x",
            "x/./y",
            "x//y",
            "x/../y",
            "é/ü",
            ".hidden/x",
        ];
        for roots in [vec![a.clone()], vec![a.clone(), b]] {
            let ws = Workspace::new(&roots).unwrap();
            for root in &ws.roots {
                for rest in rests {
                    let path = PathBuf::from(format!("{}/{rest}", root.path.display()));
                    assert_eq!(
                        ws.display_in(root, &path),
                        ws.display_by_components(root, &path),
                        "{path:?}"
                    );
                }
                let latin1 = root.path.join(OsStr::from_bytes(b"caf\xe9"));
                assert_eq!(
                    ws.display_in(root, &latin1),
                    ws.display_by_components(root, &latin1)
                );
            }
        }
    }

    /// The byte cut gives the bytes `strip_prefix` gives, in the cases it takes and those it
    /// leaves.
    #[test]
    fn below_is_strip_prefix() {
        let roots = ["/w", "/w/", "/w/.", "/", "/w//x", "w"];
        let rests = [
            "", "a", "a/b.rs", "/a", "//a", "./a", "a/", "a/.", ".", "..", "../a", "a/./b", "a//b",
        ];
        for root in roots {
            for rest in rests {
                for path in [format!("{root}/{rest}"), format!("{root}{rest}")] {
                    let (root, path) = (Path::new(root), Path::new(&path));
                    // Compared as bytes: `Path`'s own equality ignores a trailing `/`.
                    assert_eq!(
                        below(root, path).map(Path::as_os_str),
                        path.strip_prefix(root).ok().map(Path::as_os_str),
                        "{root:?} {path:?}"
                    );
                }
            }
        }
        assert_eq!(below(Path::new("/w"), Path::new("/wx/a")), None);
    }
}
