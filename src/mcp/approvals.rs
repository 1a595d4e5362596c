//! Project MCP servers (a workspace's `.mcp.json`) and the owner's approval of them: a cloned
//! repository must not run code on its own, so such a server starts only after the owner
//! approved its exact command line once for that workspace. An approval is remembered in
//! `mcp-approvals.json` under pen's data folder (a changed command line asks again); a denial
//! is remembered by this process only, so the owner is not asked again every turn.

use crate::config::McpServerConfig;
use crate::limits::MAX_MCP_JSON_BYTES;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The file name of a project's MCP servers at a workspace root.
pub const PROJECT_FILE: &str = ".mcp.json";

/// The file under the data folder that remembers approvals.
const APPROVALS_FILE: &str = "mcp-approvals.json";

/// Asks the owner whether a project server may start.
pub trait StartApproval: Send + Sync {
    /// `Ok(true)` approves, `Ok(false)` denies; `Err` says why the owner could not be asked
    /// (then nothing is remembered and the server stays off).
    fn ask(
        &self,
        server: &str,
        command_line: &str,
        root: &Path,
    ) -> BoxFuture<'static, Result<bool, String>>;
}

/// What the owner decided about a project server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Approved,
    Denied,
    /// Nobody could be asked.
    Unasked,
}

/// One remembered approval.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
struct Approved {
    root: String,
    server: String,
    command_line: String,
}

/// The approvals on disk and the denials of this process.
pub struct ProjectApprovals {
    file: Option<PathBuf>,
    denied: Mutex<BTreeSet<(String, String, String)>>,
    /// Serialises asking and writing, so two turns do not ask twice.
    asking: tokio::sync::Mutex<()>,
}

impl ProjectApprovals {
    pub fn new(data_dir: Option<PathBuf>) -> ProjectApprovals {
        ProjectApprovals {
            file: data_dir.map(|dir| dir.join(APPROVALS_FILE)),
            denied: Mutex::default(),
            asking: tokio::sync::Mutex::new(()),
        }
    }

    fn approved(&self) -> BTreeSet<Approved> {
        let Some(file) = &self.file else {
            return BTreeSet::new();
        };
        read_bounded(file)
            .and_then(|text| serde_json::from_str::<BTreeSet<Approved>>(&text).ok())
            .unwrap_or_default()
    }

    /// Whether the owner approved this server's command line for `root` (asking when it was
    /// not decided yet).
    pub async fn decide(
        &self,
        root: &Path,
        server: &str,
        command_line: &str,
        approver: Option<&dyn StartApproval>,
    ) -> Verdict {
        let _one = self.asking.lock().await;
        let key = Approved {
            root: root.display().to_string(),
            server: server.to_string(),
            command_line: command_line.to_string(),
        };
        if self.approved().contains(&key) {
            return Verdict::Approved;
        }
        let denial = (
            key.root.clone(),
            key.server.clone(),
            key.command_line.clone(),
        );
        if self
            .denied
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&denial)
        {
            return Verdict::Denied;
        }
        let Some(approver) = approver else {
            return Verdict::Unasked;
        };
        match approver.ask(server, command_line, root).await {
            Ok(true) => {
                if let Err(e) = self.remember(key) {
                    tracing::warn!(server, "the approval could not be remembered: {e}");
                }
                Verdict::Approved
            }
            Ok(false) => {
                self.denied
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(denial);
                Verdict::Denied
            }
            Err(why) => {
                tracing::warn!(
                    server,
                    "could not ask the owner to start a project MCP server: {why}"
                );
                Verdict::Unasked
            }
        }
    }

    fn remember(&self, key: Approved) -> std::io::Result<()> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        let mut all = self.approved();
        all.insert(key);
        let text = serde_json::to_string_pretty(&all).map_err(std::io::Error::other)?;
        let dir = file.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let mut temp = tempfile::NamedTempFile::new_in(dir)?;
        std::io::Write::write_all(&mut temp, text.as_bytes())?;
        temp.as_file().sync_all()?;
        temp.persist(file).map_err(|e| e.error)?;
        Ok(())
    }
}

/// Reads a small regular file (at most [`MAX_MCP_JSON_BYTES`]); `None` when it is missing, too
/// large or not text.
fn read_bounded(path: &Path) -> Option<String> {
    use std::io::Read;
    let file = std::fs::File::open(path).ok()?;
    let metadata = file.metadata().ok()?;
    if !metadata.is_file() || metadata.len() > MAX_MCP_JSON_BYTES {
        return None;
    }
    let mut text = String::new();
    file.take(MAX_MCP_JSON_BYTES)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// The servers a workspace's `.mcp.json` defines (none when it is missing or malformed; a
/// malformed one is logged).
pub fn project_servers(root: &Path) -> BTreeMap<String, McpServerConfig> {
    let path = root.join(PROJECT_FILE);
    if std::fs::symlink_metadata(&path).is_err() {
        return BTreeMap::new();
    }
    let Some(text) = read_bounded(&path) else {
        tracing::warn!(path = %path.display(), "left out: not a regular text file of at most {MAX_MCP_JSON_BYTES} bytes");
        return BTreeMap::new();
    };
    match crate::config::mcp::parse_project_file(&text) {
        Ok(servers) => servers,
        Err(e) => {
            tracing::warn!(path = %path.display(), "left out: {e}");
            BTreeMap::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Answer(bool, Arc<AtomicUsize>);

    impl StartApproval for Answer {
        fn ask(&self, _: &str, _: &str, _: &Path) -> BoxFuture<'static, Result<bool, String>> {
            self.1.fetch_add(1, Ordering::SeqCst);
            let yes = self.0;
            Box::pin(async move { Ok(yes) })
        }
    }

    #[tokio::test]
    async fn an_approval_is_remembered_per_command_line_and_a_denial_per_process() {
        let data = tempfile::tempdir().unwrap();
        let root = Path::new("/srv/project");
        let asked = Arc::new(AtomicUsize::new(0));
        let yes = Answer(true, Arc::clone(&asked));
        let approvals = ProjectApprovals::new(Some(data.path().to_path_buf()));
        assert_eq!(
            approvals.decide(root, "s", "node a.js", None).await,
            Verdict::Unasked
        );
        assert_eq!(
            approvals.decide(root, "s", "node a.js", Some(&yes)).await,
            Verdict::Approved
        );
        // Remembered on disk: a new process does not ask again.
        let again = ProjectApprovals::new(Some(data.path().to_path_buf()));
        assert_eq!(
            again.decide(root, "s", "node a.js", None).await,
            Verdict::Approved
        );
        assert_eq!(asked.load(Ordering::SeqCst), 1);
        // A changed command line asks again; a denial stands for the process.
        let no = Answer(false, Arc::clone(&asked));
        assert_eq!(
            again.decide(root, "s", "node b.js", Some(&no)).await,
            Verdict::Denied
        );
        assert_eq!(
            again.decide(root, "s", "node b.js", Some(&yes)).await,
            Verdict::Denied
        );
        assert_eq!(asked.load(Ordering::SeqCst), 2);
    }
}
