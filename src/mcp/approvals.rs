//! Project MCP servers (a workspace's `.mcp.json`) and the owner's approval of them: a cloned
//! repository must not run code on its own, so such a server starts only after the owner
//! approved it once for that workspace. An approval is keyed by everything of the server that
//! reaches it ([`McpServerConfig::approval_key`]: the command, its arguments, environment and
//! folder, or the URL, headers and token variable), so any change asks again, and remembered
//! in `mcp-approvals.json` under pen's data folder when the owner says "always" (an approval
//! "this time" and a denial are remembered by this process only, so the owner is not asked
//! again every turn). An approval written before the key covered all
//! of that has no key and matches nothing: the owner is asked again.
//!
//! Two pen processes (VS Code's and Neovim's daemons) may approve at the same moment: the
//! read-modify-write of the file is serialised by an advisory lock on a sibling lock file, so
//! neither approval is lost, and the file itself is replaced atomically, so a reader never sees
//! half of it. A file that is not valid JSON is kept aside, named in the log, and counts as no
//! approvals: the owner is asked again, nothing starts unapproved.

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

/// The lock file beside it (the approvals file is replaced on each write, so it cannot carry
/// the lock itself).
const APPROVALS_LOCK_FILE: &str = "mcp-approvals.json.lock";

/// What the approvals file holds.
enum Stored {
    Approvals(BTreeSet<Approved>),
    /// Missing (no approval yet).
    Missing,
    /// Present but not a set of approvals (the reason).
    Corrupt(String),
}

fn load(file: &Path) -> Stored {
    if std::fs::symlink_metadata(file).is_err() {
        return Stored::Missing;
    }
    match read_bounded(file) {
        None => Stored::Corrupt(format!(
            "not a regular text file of at most {MAX_MCP_JSON_BYTES} bytes"
        )),
        Some(text) => match serde_json::from_str::<BTreeSet<Approved>>(&text) {
            Ok(all) => Stored::Approvals(all),
            Err(e) => Stored::Corrupt(e.to_string()),
        },
    }
}

/// The owner's answer to a project server's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartAnswer {
    /// Start it, this time: remembered by this process only.
    Once,
    /// Start it now and from now on in this folder: stored (while what reaches the server stays
    /// the same).
    Always,
    Deny,
}

/// Asks the owner whether a project server may start.
pub trait StartApproval: Send + Sync {
    /// The owner's answer; `Err` says why the owner could not be asked (then nothing is
    /// remembered and the server stays off).
    fn ask(
        &self,
        server: &str,
        command_line: &str,
        root: &Path,
    ) -> BoxFuture<'static, Result<StartAnswer, String>>;
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
    /// What the owner was shown.
    command_line: String,
    /// What the approval covers ([`McpServerConfig::approval_key`]); empty in an approval
    /// written before it existed, which therefore matches no server.
    #[serde(default)]
    reaches: String,
}

impl Approved {
    fn covers(&self, other: &Approved) -> bool {
        !self.reaches.is_empty()
            && (&self.root, &self.server, &self.reaches)
                == (&other.root, &other.server, &other.reaches)
    }
}

/// The approvals on disk and the denials of this process.
pub struct ProjectApprovals {
    file: Option<PathBuf>,
    denied: Mutex<BTreeSet<(String, String, String)>>,
    /// Approved "this time": for this process only.
    approved_here: Mutex<BTreeSet<(String, String, String)>>,
    /// Serialises asking and writing, so two turns do not ask twice.
    asking: tokio::sync::Mutex<()>,
}

impl ProjectApprovals {
    pub fn new(data_dir: Option<PathBuf>) -> ProjectApprovals {
        ProjectApprovals {
            file: data_dir.map(|dir| dir.join(APPROVALS_FILE)),
            denied: Mutex::default(),
            approved_here: Mutex::default(),
            asking: tokio::sync::Mutex::new(()),
        }
    }

    fn approved(&self) -> BTreeSet<Approved> {
        let Some(file) = &self.file else {
            return BTreeSet::new();
        };
        match load(file) {
            Stored::Approvals(all) => all,
            Stored::Missing => BTreeSet::new(),
            Stored::Corrupt(why) => {
                tracing::warn!(path = %file.display(), "MCP approvals unreadable, so none count (the owner is asked again): {why}");
                BTreeSet::new()
            }
        }
    }

    /// Whether the owner approved this server, as configured now, for `root` (asking when it
    /// was not decided yet).
    pub async fn decide(
        &self,
        root: &Path,
        server: &str,
        config: &McpServerConfig,
        approver: Option<&dyn StartApproval>,
    ) -> Verdict {
        let _one = self.asking.lock().await;
        let command_line = config.command_line();
        let key = Approved {
            root: root.display().to_string(),
            server: server.to_string(),
            command_line: command_line.clone(),
            reaches: config.approval_key(),
        };
        if self.approved().iter().any(|approved| approved.covers(&key)) {
            return Verdict::Approved;
        }
        let denial = (key.root.clone(), key.server.clone(), key.reaches.clone());
        if self
            .approved_here
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&denial)
        {
            return Verdict::Approved;
        }
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
        match approver.ask(server, &command_line, root).await {
            Ok(StartAnswer::Always) => {
                if let Err(e) = self.remember(key) {
                    tracing::warn!(server, "the approval could not be remembered: {e}");
                }
                Verdict::Approved
            }
            Ok(StartAnswer::Once) => {
                self.approved_here
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(denial);
                Verdict::Approved
            }
            Ok(StartAnswer::Deny) => {
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
        let dir = file.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        // Held until `lock` is closed at the end of this function (also on an error), by this
        // process's open file description alone, so another process's writer waits here.
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(APPROVALS_LOCK_FILE))?;
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)?;
        let mut all = match load(file) {
            Stored::Approvals(all) => all,
            Stored::Missing => BTreeSet::new(),
            Stored::Corrupt(why) => {
                // Kept for the owner to inspect, never overwritten by the approvals written now.
                let aside = corrupt_copy_path(file);
                std::fs::rename(file, &aside)?;
                tracing::warn!(path = %file.display(), kept = %aside.display(), "MCP approvals unreadable, kept aside: {why}");
                BTreeSet::new()
            }
        };
        all.insert(key);
        let text = serde_json::to_string_pretty(&all).map_err(std::io::Error::other)?;
        let mut temp = tempfile::NamedTempFile::new_in(dir)?;
        std::io::Write::write_all(&mut temp, text.as_bytes())?;
        temp.as_file().sync_all()?;
        temp.persist(file).map_err(|e| e.error)?;
        Ok(())
    }
}

/// A name beside `file` for a copy of it that could not be read: `mcp-approvals.json.corrupt-N`
/// with the first N not taken.
fn corrupt_copy_path(file: &Path) -> PathBuf {
    let name = file.file_name().map_or_else(
        || APPROVALS_FILE.into(),
        |name| name.to_string_lossy().into_owned(),
    );
    (1u32..)
        .map(|n| file.with_file_name(format!("{name}.corrupt-{n}")))
        .find(|candidate| std::fs::symlink_metadata(candidate).is_err())
        .unwrap_or_else(|| file.with_file_name(format!("{name}.corrupt")))
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

/// The servers a workspace's `.mcp.json` defines, each parsed or refused with why (none when
/// the file is missing or malformed; a malformed one is logged).
pub fn project_servers(root: &Path) -> crate::config::mcp::ProjectServers {
    let path = root.join(PROJECT_FILE);
    if std::fs::symlink_metadata(&path).is_err() {
        return BTreeMap::new();
    }
    let Some(text) = read_bounded(&path) else {
        tracing::warn!(path = %path.display(), "left out: not a regular text file of at most {MAX_MCP_JSON_BYTES} bytes");
        return BTreeMap::new();
    };
    let env = |name: &str| std::env::var(name).ok();
    match crate::config::mcp::parse_project_file(&text, &env) {
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

    struct Answer(StartAnswer, Arc<AtomicUsize>);

    /// A stdio server running `line` (words split at spaces).
    fn stdio(line: &str) -> McpServerConfig {
        let mut words = line.split(' ');
        let command = words.next().unwrap_or_default();
        let args: Vec<&str> = words.collect();
        let server = serde_json::json!({"s": {"command": command, "args": args}});
        crate::config::mcp::parse_servers("mcp_servers", &server).unwrap()["s"].clone()
    }

    impl StartApproval for Answer {
        fn ask(
            &self,
            _: &str,
            _: &str,
            _: &Path,
        ) -> BoxFuture<'static, Result<StartAnswer, String>> {
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
        let yes = Answer(StartAnswer::Always, Arc::clone(&asked));
        let approvals = ProjectApprovals::new(Some(data.path().to_path_buf()));
        assert_eq!(
            approvals.decide(root, "s", &stdio("node a.js"), None).await,
            Verdict::Unasked
        );
        assert_eq!(
            approvals
                .decide(root, "s", &stdio("node a.js"), Some(&yes))
                .await,
            Verdict::Approved
        );
        // Remembered on disk: a new process does not ask again.
        let again = ProjectApprovals::new(Some(data.path().to_path_buf()));
        assert_eq!(
            again.decide(root, "s", &stdio("node a.js"), None).await,
            Verdict::Approved
        );
        assert_eq!(asked.load(Ordering::SeqCst), 1);
        // A changed command line asks again; a denial stands for the process.
        let no = Answer(StartAnswer::Deny, Arc::clone(&asked));
        assert_eq!(
            again
                .decide(root, "s", &stdio("node b.js"), Some(&no))
                .await,
            Verdict::Denied
        );
        assert_eq!(
            again
                .decide(root, "s", &stdio("node b.js"), Some(&yes))
                .await,
            Verdict::Denied
        );
        assert_eq!(asked.load(Ordering::SeqCst), 2);
        // "This time" starts it for this process and is not stored.
        let once = Answer(StartAnswer::Once, Arc::clone(&asked));
        assert_eq!(
            again
                .decide(root, "s", &stdio("node c.js"), Some(&once))
                .await,
            Verdict::Approved
        );
        assert_eq!(
            again.decide(root, "s", &stdio("node c.js"), None).await,
            Verdict::Approved
        );
        let fresh = ProjectApprovals::new(Some(data.path().to_path_buf()));
        assert_eq!(
            fresh.decide(root, "s", &stdio("node c.js"), None).await,
            Verdict::Unasked
        );
    }

    #[test]
    fn two_processes_approving_at_once_lose_neither_approval() {
        // Two stores on one data folder stand for two pen processes: each opens the lock file
        // itself, so the lock excludes the other exactly as it would across processes.
        let data = tempfile::tempdir().unwrap();
        let writers: Vec<_> = (0..2)
            .map(|w| {
                let dir = data.path().to_path_buf();
                std::thread::spawn(move || {
                    let approvals = ProjectApprovals::new(Some(dir));
                    for i in 0..40 {
                        approvals
                            .remember(Approved {
                                root: "/srv/p".into(),
                                server: format!("s{w}-{i}"),
                                command_line: "node a.js".into(),
                                reaches: stdio("node a.js").approval_key(),
                            })
                            .unwrap();
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.join().unwrap();
        }
        let approvals = ProjectApprovals::new(Some(data.path().to_path_buf()));
        assert_eq!(approvals.approved().len(), 80);
    }

    #[tokio::test]
    async fn a_corrupt_approvals_file_approves_nothing_and_is_kept_aside() {
        let data = tempfile::tempdir().unwrap();
        let file = data.path().join(APPROVALS_FILE);
        let garbage = b"[{\"root\": \"/srv/project\", \"server\": \"s\", trunc";
        std::fs::write(&file, garbage).unwrap();
        let root = Path::new("/srv/project");
        let asked = Arc::new(AtomicUsize::new(0));
        let approvals = ProjectApprovals::new(Some(data.path().to_path_buf()));
        // Unreadable: nothing counts as approved, so nothing starts without asking.
        assert_eq!(
            approvals.decide(root, "s", &stdio("node a.js"), None).await,
            Verdict::Unasked
        );
        let yes = Answer(StartAnswer::Always, Arc::clone(&asked));
        assert_eq!(
            approvals
                .decide(root, "s", &stdio("node a.js"), Some(&yes))
                .await,
            Verdict::Approved
        );
        // The unreadable bytes are kept, byte for byte, and the new file holds the approval.
        let aside = data.path().join(format!("{APPROVALS_FILE}.corrupt-1"));
        assert_eq!(std::fs::read(&aside).unwrap(), garbage);
        let again = ProjectApprovals::new(Some(data.path().to_path_buf()));
        assert_eq!(
            again.decide(root, "s", &stdio("node a.js"), None).await,
            Verdict::Approved
        );
        // A second corrupt file does not overwrite the first copy.
        std::fs::write(&file, b"not json").unwrap();
        let no_file = Answer(StartAnswer::Always, Arc::clone(&asked));
        assert_eq!(
            again
                .decide(root, "t", &stdio("node b.js"), Some(&no_file))
                .await,
            Verdict::Approved
        );
        assert_eq!(std::fs::read(&aside).unwrap(), garbage);
        let second = data.path().join(format!("{APPROVALS_FILE}.corrupt-2"));
        assert_eq!(std::fs::read(&second).unwrap(), b"not json");
    }

    #[tokio::test]
    async fn an_approval_written_before_the_full_key_keeps_reading_and_asks_again() {
        let data = tempfile::tempdir().unwrap();
        let file = data.path().join(APPROVALS_FILE);
        // The shape pen wrote before approvals were keyed by all that reaches the server.
        let old = r#"[{"root": "/srv/project", "server": "web", "command_line": "https://h/mcp"}]"#;
        std::fs::write(&file, old).unwrap();
        let root = Path::new("/srv/project");
        let web = crate::config::mcp::parse_servers(
            "mcp_servers",
            &serde_json::json!({"web": {"url": "https://h/mcp"}}),
        )
        .unwrap()["web"]
            .clone();
        let approvals = ProjectApprovals::new(Some(data.path().to_path_buf()));
        assert_eq!(
            approvals.decide(root, "web", &web, None).await,
            Verdict::Unasked,
            "an old approval matches nothing"
        );
        let asked = Arc::new(AtomicUsize::new(0));
        let yes = Answer(StartAnswer::Always, Arc::clone(&asked));
        assert_eq!(
            approvals.decide(root, "web", &web, Some(&yes)).await,
            Verdict::Approved
        );
        assert_eq!(asked.load(Ordering::SeqCst), 1);
        // Read, not set aside as unreadable: the old entry is kept beside the new one.
        assert!(
            !data
                .path()
                .join(format!("{APPROVALS_FILE}.corrupt-1"))
                .exists()
        );
        assert_eq!(approvals.approved().len(), 2);
        // A header added later is a change: asked again.
        let mut changed = web.clone();
        if let crate::config::McpTransport::Http { headers, .. } = &mut changed.transport {
            headers.insert("X-Team".into(), "core".into());
        }
        assert_eq!(
            approvals.decide(root, "web", &changed, None).await,
            Verdict::Unasked
        );
    }
}
