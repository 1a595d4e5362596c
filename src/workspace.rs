//! Workspace roots and path confinement: every path a tool touches is resolved here.
//!
//! Architecture invariant: a `Resolved` path is inside one of the roots after `..` and every
//! symlink on it are resolved. Tools never open a path that did not come through
//! [`Workspace::resolve`].

use std::path::{Component, Path, PathBuf};
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

    /// Resolves a path given by the model or the user. Relative paths are taken from the root
    /// they name (with several roots) or the first root; absolute paths must lie in a root.
    pub fn resolve(&self, input: &str) -> Result<Resolved, WorkspaceError> {
        let input_path = Path::new(input);
        let (root, rest) = if input_path.is_absolute() {
            let normal =
                normalize(input_path).ok_or_else(|| WorkspaceError::Outside(input.into()))?;
            let root = self
                .roots
                .iter()
                .filter(|r| normal.starts_with(&r.path))
                .max_by_key(|r| r.path.as_os_str().len())
                .ok_or_else(|| WorkspaceError::Outside(input.into()))?;
            let rest = normal
                .strip_prefix(&root.path)
                .map_err(|_| WorkspaceError::Outside(input.into()))?
                .to_path_buf();
            (root, rest)
        } else {
            let (root, relative) = self.pick_root(input_path);
            let rest = normalize(relative).ok_or_else(|| WorkspaceError::Outside(input.into()))?;
            (root, rest)
        };
        let lexical = root.path.join(&rest);
        let (absolute, exists) = resolve_symlinks(&lexical);
        let inside = self.roots.iter().find(|r| absolute.starts_with(&r.path));
        match inside {
            Some(r) => Ok(Resolved {
                display: self.display_in(r, &absolute),
                absolute,
                exists,
            }),
            None => Err(WorkspaceError::SymlinkOutside(input.into())),
        }
    }

    /// The display form of an absolute path known to be inside a root (used by walks).
    pub fn display(&self, absolute: &Path) -> String {
        match self.roots.iter().find(|r| absolute.starts_with(&r.path)) {
            Some(r) => self.display_in(r, absolute),
            None => absolute.to_string_lossy().into_owned(),
        }
    }

    fn display_in(&self, root: &Root, absolute: &Path) -> String {
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

    fn pick_root<'a>(&'a self, relative: &'a Path) -> (&'a Root, &'a Path) {
        if self.roots.len() > 1
            && let Some(Component::Normal(first)) = relative.components().next()
            && let Some(root) = self.roots.iter().find(|r| first == r.name.as_str())
        {
            let rest = relative.strip_prefix(first).unwrap_or(relative);
            return (root, rest);
        }
        (&self.roots[0], relative)
    }
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
/// resolved along its longest existing prefix. The daemon keys open documents by it.
pub fn canonical(path: &Path) -> PathBuf {
    resolve_symlinks(path).0
}

/// Canonicalizes the longest existing prefix of `path` and appends the rest, so that a path to
/// a file about to be created is still checked through the symlinks of its parents.
fn resolve_symlinks(path: &Path) -> (PathBuf, bool) {
    if let Ok(canonical) = path.canonicalize() {
        return (canonical, true);
    }
    let mut missing = Vec::new();
    let mut current = path.to_path_buf();
    loop {
        // A dangling symlink cannot be canonicalized but must not be written through either:
        // treat it as existing so callers refuse to create over it.
        if current.symlink_metadata().is_ok() && current.canonicalize().is_err() {
            return (current, true);
        }
        match current.file_name() {
            Some(name) => {
                missing.push(name.to_os_string());
                current.pop();
            }
            None => return (path.to_path_buf(), false),
        }
        if let Ok(mut canonical) = current.canonicalize() {
            for part in missing.iter().rev() {
                canonical.push(part);
            }
            return (canonical, false);
        }
    }
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
}
