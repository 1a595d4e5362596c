//! The MCP client (SPEC §11): the owner's MCP servers, started when a session's first turn
//! begins, their tools offered to the model as `mcp__<server>__<tool>`.
//!
//! Architecture invariants:
//! - A server is started by [`McpManager::prepare`] (a turn beginning, or `pen mcp`), never at
//!   daemon start; a project's `.mcp.json` server only after the owner approved its exact
//!   command line ([`approvals`]).
//! - The tools of a request are a snapshot, sorted by server then tool name (so the prompt
//!   prefix is stable); `notifications/tools/list_changed` marks a server stale and its list is
//!   fetched again before the next request ([`McpTools::refresh`]).
//! - Every text a server hands pen is bounded: descriptions, schemas (a schema too large or not
//!   an object schema leaves the tool out, logged), the tool count, its stderr tail, results
//!   (the one result cap, with a note that the tool cannot page).
//! - A server that fails to start or dies is reported (a notice the turn turns into a
//!   `pen/event`, and [`McpManager::status`]); its tools answer an error naming the server as
//!   down and why; it is started again on next use, the first time at once, then after a
//!   doubling wait.
//! - A call stopped by the owner drops the request, which sends `notifications/cancelled`;
//!   the call is recorded "outcome unknown".

pub mod approvals;
mod names;
mod result;
mod stdio;
mod tool;

use crate::config::{McpServerConfig, McpTransport};
use crate::limits::{
    MAX_MCP_DESCRIPTION_BYTES, MAX_MCP_MESSAGE_BYTES, MAX_MCP_SCHEMA_BYTES,
    MAX_MCP_TOOL_LIST_PAGES, MAX_MCP_TOOL_NAME_BYTES, MAX_MCP_TOOLS_PER_SERVER,
    MCP_RESTART_BACKOFF_MAX_SECS, MCP_RESTART_BACKOFF_SECS, MCP_STDERR_TAIL_BYTES,
    MCP_STDERR_TAIL_LINES,
};
use crate::tools::{CatalogEntry, ErrorCode, ToolError};
use futures::future::BoxFuture;
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ClientRequest, CustomRequest,
    Implementation, ProtocolVersion,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, NotificationContext, RunningService};
use rmcp::{ClientHandler, Peer, RoleClient};
use serde_json::Value;
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

pub use approvals::{ProjectApprovals, StartApproval};
pub use result::observation;

/// Why an MCP operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum McpError {
    #[error("cannot start MCP server `{server}`: {why}")]
    Start { server: String, why: String },
    #[error("MCP server `{server}` did not start within {secs} s")]
    StartTimeout { server: String, secs: u64 },
    #[error("there is no MCP server named `{0}`")]
    NoServer(String),
}

/// Where a server is in its life, as the panels and `pen mcp list` show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerState {
    /// Configured, not started yet (no turn has begun).
    Idle,
    Starting,
    Running {
        protocol_version: String,
    },
    /// Failed to start or died: why, with the tail of its stderr.
    Failed {
        why: String,
    },
    /// A project server the owner has not approved (or denied).
    NotApproved {
        denied: bool,
    },
    /// A project server pen refuses to start, whatever the owner answers (it names one of the
    /// owner's variables, or is malformed).
    Refused,
    /// `enabled = false`.
    Disabled,
}

impl ServerState {
    pub fn as_str(&self) -> &'static str {
        match self {
            ServerState::Idle => "idle",
            ServerState::Starting => "starting",
            ServerState::Running { .. } => "running",
            ServerState::Failed { .. } => "failed",
            ServerState::NotApproved { denied: false } => "not_approved",
            ServerState::NotApproved { denied: true } => "denied",
            ServerState::Refused => "refused",
            ServerState::Disabled => "disabled",
        }
    }
}

/// One server's status line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerStatus {
    pub name: String,
    pub state: ServerState,
    /// Why it is not running, when it is not.
    pub reason: Option<String>,
    pub tool_count: usize,
    /// The estimated tokens its tools' names, descriptions and schemas take in every request.
    pub schema_tokens: u64,
    /// Whether it comes from a project's `.mcp.json`.
    pub project: bool,
}

/// A change of a server the turn reports (`pen/event` kind `mcp_server`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerNotice {
    pub server: String,
    /// `Running` or `Failed`.
    pub state: ServerState,
    pub reason: Option<String>,
}

/// One tool of a server, as pen offers it (its name for the model is assigned over every
/// server's tools at once: [`McpTools::named`]).
#[derive(Debug, Clone)]
struct McpTool {
    /// The server's own name for it.
    remote: String,
    description: String,
    schema: Value,
    read_only_hint: bool,
}

/// What decides whether a call of an MCP tool asks the owner ([`auto_approved`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolInfo {
    /// The configured name of the server the tool belongs to (`None` when no server offers
    /// the name now).
    pub server: Option<String>,
    /// The server says it only reads (`readOnlyHint`): `auto_approve`'s `mcp__server__*` may
    /// then cover it.
    pub read_only_hint: bool,
}

/// Whether `auto_approve` lets a call of the MCP tool `name` run without asking: its exact
/// name, or — for a tool whose server says it only reads — that server's `mcp__server__*`
/// pattern. The pattern is matched by the server the tool belongs to, never by the spelling of
/// the tool's name (another server's tool may begin with the same letters).
pub fn auto_approved(auto_approve: &[String], name: &str, info: &ToolInfo) -> bool {
    auto_approve
        .iter()
        .any(|entry| match crate::config::mcp::pattern_server(entry) {
            Some(server) => info.read_only_hint && info.server.as_deref() == Some(server),
            None => entry == name,
        })
}

/// The client's side of a server connection: when the server's tools change, marks it stale
/// and fetches the list again at once (the next request checks too). Any number of
/// `list_changed` in a row make one pending fetch: a server streaming them gets at most one
/// `tools/list` running and one waiting, never a task for each.
#[derive(Clone)]
struct Handler {
    server: std::sync::Weak<Server>,
}

impl Handler {
    fn tools_changed(&self) {
        if let Some(server) = self.server.upgrade()
            && !server.stale.swap(true, Ordering::SeqCst)
        {
            tokio::spawn(async move { server.refresh().await });
        }
    }
}

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools_changed();
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("pen", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }
}

/// A started connection.
struct Connection {
    peer: Peer<RoleClient>,
    /// Closes the connection (and ends a stdio server's process).
    close: CancellationToken,
    /// Wakes the calls in flight when the server sent a message too large to read (a stdio
    /// server's line over `MAX_MCP_MESSAGE_BYTES`; rmcp's HTTP transport fails such a request
    /// itself).
    too_large: Arc<tokio::sync::Notify>,
}

/// The mutable life of one server.
struct Life {
    state: ServerState,
    connection: Option<Connection>,
    tools: Arc<Vec<McpTool>>,
    /// The tools the server listed that pen left out, each with why.
    left_out: Vec<(String, String)>,
    /// Failures in a row, and when the next start may be tried.
    failures: u32,
    next_try: Option<Instant>,
    /// Counts starts: a failure seen on a connection that is no longer the current one (its
    /// watcher and a call both noticing one death) is not counted twice.
    generation: u64,
}

/// One configured server.
struct Server {
    name: String,
    config: McpServerConfig,
    project: bool,
    life: Mutex<Life>,
    /// Held while the server starts, so one start runs at a time.
    starting: tokio::sync::Mutex<()>,
    /// Held while the tool list is fetched again.
    refreshing: tokio::sync::Mutex<()>,
    stale: Arc<AtomicBool>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    notices: Arc<Mutex<Vec<ServerNotice>>>,
}

impl Server {
    fn lock(&self) -> std::sync::MutexGuard<'_, Life> {
        self.life.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn stderr_tail(&self) -> String {
        let lines = self.stderr.lock().unwrap_or_else(|p| p.into_inner());
        let joined = lines.iter().cloned().collect::<Vec<_>>().join("\n");
        let start = joined.len().saturating_sub(MCP_STDERR_TAIL_BYTES);
        joined[crate::text::ceil_char_boundary(&joined, start)..].to_string()
    }

    /// Records a failure of the connection of `generation` (and tells the turn), closing what
    /// is left of it. A failure already recorded, or of an older connection, changes nothing.
    fn fail(&self, generation: u64, why: String) {
        let tail = self.stderr_tail();
        let why = if tail.trim().is_empty() {
            why
        } else {
            format!("{why}; the last lines of its stderr:\n{tail}")
        };
        // Checked and changed under one lock: a failure seen late (the watcher and a call both
        // saw the connection end) must not close the connection a restart made meanwhile.
        let mut life = self.lock();
        if life.generation != generation || matches!(life.state, ServerState::Failed { .. }) {
            return;
        }
        if let Some(connection) = life.connection.take() {
            connection.close.cancel();
        }
        let wait = if life.failures == 0 {
            0
        } else {
            (MCP_RESTART_BACKOFF_SECS << (life.failures - 1).min(16))
                .min(MCP_RESTART_BACKOFF_MAX_SECS)
        };
        life.failures = life.failures.saturating_add(1);
        life.next_try = Some(Instant::now() + Duration::from_secs(wait));
        life.state = ServerState::Failed { why: why.clone() };
        life.tools = Arc::new(Vec::new());
        drop(life);
        tracing::warn!(server = %self.name, %why, "MCP server is down");
        self.notice(ServerState::Failed { why: why.clone() }, Some(why));
    }

    fn notice(&self, state: ServerState, reason: Option<String>) {
        self.notices
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(ServerNotice {
                server: self.name.clone(),
                state,
                reason,
            });
    }

    /// Starts the server if it is not running and may be started now; waits at most its
    /// startup timeout.
    async fn ensure_started(self: &Arc<Self>, root: &Path) {
        let _one = self.starting.lock().await;
        {
            let mut life = self.lock();
            match &life.state {
                ServerState::Running { .. } => return,
                ServerState::Failed { .. }
                    if life.next_try.is_some_and(|at| Instant::now() < at) =>
                {
                    return;
                }
                _ => {}
            }
            life.state = ServerState::Starting;
            life.generation += 1;
        }
        let generation = self.lock().generation;
        let secs = self.config.startup_timeout_secs;
        let started = tokio::time::timeout(Duration::from_secs(secs), self.start(root)).await;
        match started {
            Ok(Ok((connection, listed, version))) => {
                tracing::info!(server = %self.name, protocol_version = %version, tools = listed.tools.len(), "MCP server started");
                let running = ServerState::Running {
                    protocol_version: version,
                };
                let mut life = self.lock();
                life.state = running.clone();
                life.connection = Some(connection);
                life.tools = Arc::new(listed.tools);
                life.left_out = listed.left_out;
                life.failures = 0;
                life.next_try = None;
                drop(life);
                self.notice(running, None);
            }
            Ok(Err(err)) => self.fail(generation, err.to_string()),
            Err(_) => self.fail(
                generation,
                McpError::StartTimeout {
                    server: self.name.clone(),
                    secs,
                }
                .to_string(),
            ),
        }
    }

    /// Connects, negotiates the protocol (the 2026-07-28 flow without `initialize`, falling
    /// back to the `initialize` handshake) and lists the tools.
    async fn start(
        self: &Arc<Self>,
        root: &Path,
    ) -> Result<(Connection, Listed, String), McpError> {
        let start_err = |why: String| McpError::Start {
            server: self.name.clone(),
            why,
        };
        let handler = Handler {
            server: Arc::downgrade(self),
        };
        let lifecycle = ClientLifecycleMode::Auto {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            legacy_version: Some(ProtocolVersion::V_2025_11_25),
        };
        self.stderr
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        let close = CancellationToken::new();
        let mut too_large = Arc::default();
        let service: RunningService<RoleClient, Handler> = match &self.config.transport {
            McpTransport::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args).envs(env);
                cmd.current_dir(
                    cwd.as_deref()
                        .map_or_else(|| root.to_path_buf(), |cwd| root.join(cwd)),
                );
                let started = stdio::spawn(cmd, &self.name)
                    .map_err(|e| start_err(format!("cannot run `{command}`: {e}")))?;
                if let Some(stderr) = started.stderr {
                    tokio::spawn(keep_stderr(
                        stderr,
                        Arc::clone(&self.stderr),
                        self.name.clone(),
                    ));
                }
                too_large = started.too_large;
                handler
                    .serve_with_lifecycle(started.transport, lifecycle)
                    .await
                    .map_err(|e| start_err(e.to_string()))?
            }
            McpTransport::Http {
                url,
                bearer_token_env,
                headers,
            } => {
                use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
                // rmcp builds its own reqwest client, which needs pen's crypto provider.
                crate::providers::install_crypto_provider();
                let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                if let Some(name) = bearer_token_env {
                    let token = std::env::var(name).map_err(|_| {
                        start_err(format!(
                            "its bearer token is read from the environment variable {name}, which is not set"
                        ))
                    })?;
                    config = config.auth_header(token);
                }
                let mut custom = std::collections::HashMap::new();
                for (name, value) in headers {
                    let name = http::HeaderName::from_bytes(name.as_bytes())
                        .map_err(|e| start_err(format!("header `{name}`: {e}")))?;
                    let value = http::HeaderValue::from_str(value)
                        .map_err(|e| start_err(format!("header `{name}`: {e}")))?;
                    custom.insert(name, value);
                }
                config = config.custom_headers(custom);
                let transport = rmcp::transport::StreamableHttpClientTransport::from_config(config);
                handler
                    .serve_with_lifecycle(transport, lifecycle)
                    .await
                    .map_err(|e| start_err(e.to_string()))?
            }
        };
        let negotiated = service
            .peer()
            .peer_info()
            .map(|info| info.protocol_version.clone());
        let version = negotiated
            .as_ref()
            .map(|v| v.to_string())
            .unwrap_or_else(|| "unknown".into());
        let peer = service.peer().clone();
        self.stale.store(false, Ordering::SeqCst);
        let tools = list_tools(&self.name, &self.config, &peer).await?;
        // Without the `initialize` handshake (2026-07-28 on), change notifications come only
        // on a `subscriptions/listen` stream, which pen opens for tool list changes.
        if negotiated.is_some_and(|v| !v.has_initialize()) {
            let filter = rmcp::model::SubscriptionFilter::builder()
                .tools_list_changed()
                .build();
            match peer.listen(filter).await {
                Ok(mut subscription) => {
                    let handler = Handler {
                        server: Arc::downgrade(self),
                    };
                    tokio::spawn(async move {
                        while let Ok(Some(notification)) = subscription.next().await {
                            if matches!(
                                notification,
                                rmcp::model::ServerNotification::ToolListChangedNotification(_)
                            ) {
                                handler.tools_changed();
                            }
                        }
                    });
                }
                Err(e) => {
                    tracing::info!(server = %self.name, "no subscription to tool list changes: {e}");
                }
            }
        }
        // The connection lives in its own task: it ends when the server goes away (then the
        // server is marked failed) or when pen closes it.
        let watcher = Arc::downgrade(self);
        let generation = self.lock().generation;
        let closing = close.clone();
        tokio::spawn(async move {
            let token = service.cancellation_token();
            tokio::select! {
                quit = service.waiting() => {
                    if let Some(server) = watcher.upgrade() {
                        server.fail(generation, format!("the connection ended ({quit:?})"));
                    }
                }
                _ = closing.cancelled() => token.cancel(),
            }
        });
        Ok((
            Connection {
                peer,
                close,
                too_large,
            },
            tools,
            version,
        ))
    }

    /// Fetches the tool list again after `notifications/tools/list_changed`. One fetch runs at
    /// a time, so a request waits for one under way.
    ///
    /// A server that does not answer within its `startup_timeout_secs` (the time it has to list
    /// its tools when it starts) is marked failed. A fetch dropped on the way (the turn was
    /// stopped) leaves the server stale, so the next request fetches again.
    async fn refresh(&self) {
        let _one = self.refreshing.lock().await;
        if !self.stale.swap(false, Ordering::SeqCst) {
            return;
        }
        let (peer, generation, too_large) = {
            let life = self.lock();
            match &life.connection {
                Some(connection) => (
                    connection.peer.clone(),
                    life.generation,
                    Arc::clone(&connection.too_large),
                ),
                None => return,
            }
        };
        let unfinished = StaleUntilDone(&self.stale);
        let secs = self.config.startup_timeout_secs;
        let listing = list_tools(&self.name, &self.config, &peer);
        let listed = tokio::time::timeout(
            Duration::from_secs(secs),
            unless_too_large(&too_large, listing),
        )
        .await;
        std::mem::forget(unfinished);
        match listed {
            Ok(None) => self.fail(
                generation,
                format!("its tools/list answer is over {MAX_MCP_MESSAGE_BYTES} bytes"),
            ),
            Ok(Some(Ok(listed))) => {
                tracing::debug!(server = %self.name, tools = listed.tools.len(), "MCP tool list refreshed");
                let mut life = self.lock();
                life.tools = Arc::new(listed.tools);
                life.left_out = listed.left_out;
            }
            Ok(Some(Err(err))) => self.fail(generation, err.to_string()),
            Err(_) => self.fail(
                generation,
                format!(
                    "it did not answer tools/list within startup_timeout_secs = {secs} s after its tools changed"
                ),
            ),
        }
    }

    fn status(&self) -> ServerStatus {
        let life = self.lock();
        let reason = match &life.state {
            ServerState::Failed { why } => Some(why.clone()),
            _ => None,
        };
        ServerStatus {
            name: self.name.clone(),
            state: life.state.clone(),
            reason,
            tool_count: life.tools.len(),
            schema_tokens: schema_tokens(&self.name, &life.tools),
            project: self.project,
        }
    }
}

/// `work`'s outcome, or `None` when the server sent a message too large to read first (the one
/// `work` waits for, most likely): then `work` is dropped rather than left to its timeout.
async fn unless_too_large<T>(
    too_large: &tokio::sync::Notify,
    work: impl std::future::Future<Output = T>,
) -> Option<T> {
    // Created before `work` sends anything, so a wake-up while it waits is not missed.
    let notified = too_large.notified();
    tokio::select! {
        done = work => Some(done),
        _ = notified => None,
    }
}

/// Marks a server stale again when dropped: a tool list fetch that did not finish.
struct StaleUntilDone<'a>(&'a AtomicBool);

impl Drop for StaleUntilDone<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A rough token count of a server's tool definitions: a quarter of their bytes, a name taken
/// as `mcp__<server>__<tool>` (the budget's own estimate counts them exactly when a request is
/// planned).
fn schema_tokens(server: &str, tools: &[McpTool]) -> u64 {
    let name_bytes = |tool: &McpTool| {
        (names::PREFIX.len() + server.len() + 2 + tool.remote.len()).min(MAX_MCP_TOOL_NAME_BYTES)
    };
    tools
        .iter()
        .map(|t| (name_bytes(t) + t.description.len() + t.schema.to_string().len()) as u64)
        .sum::<u64>()
        .div_ceil(4)
}

/// Keeps the last lines of a server's stderr, bounded, and logs them.
async fn keep_stderr(
    stderr: tokio::process::ChildStderr,
    tail: Arc<Mutex<VecDeque<String>>>,
    server: String,
) {
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::debug!(server = %server, "stderr: {}", crate::text::cut(&line, MCP_STDERR_TAIL_BYTES));
        let mut tail = tail.lock().unwrap_or_else(|p| p.into_inner());
        tail.push_back(crate::text::cut(&line, MCP_STDERR_TAIL_BYTES).to_string());
        while tail.len() > MCP_STDERR_TAIL_LINES {
            tail.pop_front();
        }
    }
}

/// A server's tools as pen takes them (sorted by the server's names), and those it left out:
/// each one's name and why.
#[derive(Debug, Default)]
struct Listed {
    tools: Vec<McpTool>,
    left_out: Vec<(String, String)>,
}

/// Lists a server's tools, keeping those the config takes and whose name and schema pen can
/// offer. `tools/list` is read as plain JSON and each tool checked on its own, so one bad tool
/// is left out (logged, and shown by `pen mcp list`) while the rest work.
async fn list_tools(
    server: &str,
    config: &McpServerConfig,
    peer: &Peer<RoleClient>,
) -> Result<Listed, McpError> {
    let failed = |why: String| McpError::Start {
        server: server.to_string(),
        why: format!("tools/list failed: {why}"),
    };
    let mut wire_tools: Vec<Value> = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let params = cursor
            .take()
            .map(|cursor| serde_json::json!({ "cursor": cursor }));
        let request = ClientRequest::CustomRequest(CustomRequest::new("tools/list", params));
        let answer = peer
            .send_request(request)
            .await
            .map_err(|e| failed(e.to_string()))?;
        let mut answer = serde_json::to_value(&answer).unwrap_or(Value::Null);
        match answer.get_mut("tools").map(Value::take) {
            Some(Value::Array(tools)) => wire_tools.extend(tools),
            _ => return Err(failed("its answer has no list of tools".into())),
        }
        pages += 1;
        cursor = answer
            .get("nextCursor")
            .and_then(Value::as_str)
            .map(str::to_string);
        if cursor.is_none() {
            break;
        }
        if pages >= MAX_MCP_TOOL_LIST_PAGES {
            tracing::warn!(
                server,
                "tools/list has more than {MAX_MCP_TOOL_LIST_PAGES} pages; the rest are left out"
            );
            break;
        }
    }
    let mut listed = Listed::default();
    let mut leave_out = |tool: String, why: String| {
        tracing::warn!(server, tool = %tool, "left out: {why}");
        listed.left_out.push((tool, why));
    };
    for wire in &wire_tools {
        let shown = |name: &str| crate::text::cut(name, MAX_MCP_TOOL_NAME_BYTES).to_string();
        let Some(remote) = wire.get("name").and_then(Value::as_str) else {
            leave_out(String::new(), "it has no name".into());
            continue;
        };
        if let Some(why) = names::refusal(remote) {
            leave_out(shown(remote), why);
            continue;
        }
        if !config.takes_tool(remote) {
            continue;
        }
        if listed.tools.iter().any(|tool| tool.remote == remote) {
            leave_out(shown(remote), "the server lists it twice".into());
            continue;
        }
        if listed.tools.len() >= MAX_MCP_TOOLS_PER_SERVER {
            leave_out(
                shown(remote),
                format!("the server has more than {MAX_MCP_TOOLS_PER_SERVER} tools"),
            );
            continue;
        }
        let schema = match checked_schema(wire.get("inputSchema")) {
            Ok(schema) => schema,
            Err(why) => {
                leave_out(shown(remote), why);
                continue;
            }
        };
        let description = wire
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or("");
        let description = crate::text::cut_with_note(
            description,
            MAX_MCP_DESCRIPTION_BYTES,
            format_args!("…[description cut]"),
        )
        .into_owned();
        let read_only_hint = wire
            .pointer("/annotations/readOnlyHint")
            .and_then(Value::as_bool)
            == Some(true);
        listed.tools.push(McpTool {
            remote: remote.to_string(),
            description,
            schema,
            read_only_hint,
        });
    }
    listed.tools.sort_by(|a, b| a.remote.cmp(&b.remote));
    Ok(listed)
}

/// A tool's input schema as providers take it: a JSON object schema of bounded size. A
/// missing `type` is set to `object`; anything else is refused with the reason.
fn checked_schema(schema: Option<&Value>) -> Result<Value, String> {
    let Some(Value::Object(schema)) = schema else {
        return Err("its inputSchema is not a JSON object".into());
    };
    let mut schema = schema.clone();
    match schema.get("type") {
        None => {
            schema.insert("type".into(), Value::String("object".into()));
        }
        Some(Value::String(t)) if t == "object" => {}
        Some(other) => return Err(format!("its inputSchema has type {other}, not \"object\"")),
    }
    if !schema.get("properties").is_none_or(Value::is_object) {
        return Err("its inputSchema's properties is not an object".into());
    }
    let schema = Value::Object(schema);
    let size = schema.to_string().len();
    if size > MAX_MCP_SCHEMA_BYTES {
        return Err(format!(
            "its inputSchema is {size} bytes; the limit is {MAX_MCP_SCHEMA_BYTES}"
        ));
    }
    Ok(schema)
}

/// The MCP servers of this process: started on a turn's first use, kept across turns, restarted
/// when their configuration changes.
pub struct McpManager {
    servers: Mutex<BTreeMap<String, Arc<Server>>>,
    /// The project servers the last turn left off.
    blocked: Mutex<Vec<ServerStatus>>,
    notices: Arc<Mutex<Vec<ServerNotice>>>,
    approvals: ProjectApprovals,
}

impl std::fmt::Debug for McpManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpManager").finish_non_exhaustive()
    }
}

impl McpManager {
    /// A manager remembering project approvals under `data_dir` (none remembered without one).
    pub fn new(data_dir: Option<PathBuf>) -> Arc<McpManager> {
        Arc::new(McpManager {
            servers: Mutex::default(),
            blocked: Mutex::default(),
            notices: Arc::default(),
            approvals: ProjectApprovals::new(data_dir),
        })
    }

    /// Every server's status: those a turn prepared, the configured ones no turn started yet
    /// (`idle`), and the project servers the last turn left off.
    pub fn status(&self, configured: &BTreeMap<String, McpServerConfig>) -> Vec<ServerStatus> {
        let mut all: Vec<ServerStatus> = self.servers().values().map(|s| s.status()).collect();
        for (name, config) in configured {
            if !all.iter().any(|s| &s.name == name) {
                all.push(ServerStatus {
                    name: name.clone(),
                    state: if config.enabled {
                        ServerState::Idle
                    } else {
                        ServerState::Disabled
                    },
                    reason: None,
                    tool_count: 0,
                    schema_tokens: 0,
                    project: false,
                });
            }
        }
        all.extend(
            self.blocked
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .cloned(),
        );
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    fn servers(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<Server>>> {
        self.servers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The servers for a turn in `root`: the configured ones and the project's approved ones
    /// (asking `approver` about a project server not decided yet), each started if it is not
    /// running, waiting at most each one's startup timeout. A server whose configuration
    /// changed is closed and started anew; one no longer configured is closed. When `cancel`
    /// fires (the turn was stopped) nothing more is waited for: a question not answered is
    /// taken as not asked, and a server still starting is left to start on the next turn.
    pub async fn prepare(
        &self,
        configured: &BTreeMap<String, McpServerConfig>,
        root: &Path,
        approver: Option<&dyn StartApproval>,
        cancel: &CancellationToken,
    ) -> Arc<McpTools> {
        let mut wanted: Vec<(String, McpServerConfig, bool)> = configured
            .iter()
            .map(|(name, config)| (name.clone(), config.clone(), false))
            .collect();
        let mut blocked: Vec<ServerStatus> = Vec::new();
        for (name, config) in approvals::project_servers(root) {
            if configured.contains_key(&name) || wanted.len() >= crate::limits::MAX_MCP_SERVERS {
                continue;
            }
            let config = match config {
                Ok(config) => config,
                Err(why) => {
                    tracing::warn!(server = %name, "project MCP server refused: {why}");
                    blocked.push(ServerStatus {
                        name,
                        state: ServerState::Refused,
                        reason: Some(why.to_string()),
                        tool_count: 0,
                        schema_tokens: 0,
                        project: true,
                    });
                    continue;
                }
            };
            let line = config.command_line();
            let verdict = tokio::select! {
                verdict = self.approvals.decide(root, &name, &config, approver) => verdict,
                _ = cancel.cancelled() => approvals::Verdict::Unasked,
            };
            match verdict {
                approvals::Verdict::Approved => wanted.push((name, config, true)),
                verdict => blocked.push(ServerStatus {
                    name,
                    state: ServerState::NotApproved {
                        denied: verdict == approvals::Verdict::Denied,
                    },
                    reason: Some(format!(
                        "a project server (.mcp.json) starts only once the owner approves `{line}`"
                    )),
                    tool_count: 0,
                    schema_tokens: 0,
                    project: true,
                }),
            }
        }
        let servers: Vec<Arc<Server>> = {
            let mut servers = self.servers();
            let names: Vec<&String> = wanted.iter().map(|(name, ..)| name).collect();
            servers.retain(|name, server| {
                let keep = names.contains(&name);
                if !keep && let Some(c) = server.lock().connection.take() {
                    c.close.cancel();
                }
                keep
            });
            wanted
                .into_iter()
                .map(|(name, config, project)| {
                    let same = servers
                        .get(&name)
                        .is_some_and(|s| s.config == config && s.project == project);
                    if !same {
                        if let Some(old) = servers.get(&name)
                            && let Some(c) = old.lock().connection.take()
                        {
                            c.close.cancel();
                        }
                        let state = if config.enabled {
                            ServerState::Idle
                        } else {
                            ServerState::Disabled
                        };
                        servers.insert(
                            name.clone(),
                            Arc::new(Server {
                                name: name.clone(),
                                config,
                                project,
                                life: Mutex::new(Life {
                                    state,
                                    connection: None,
                                    tools: Arc::default(),
                                    left_out: Vec::new(),
                                    failures: 0,
                                    next_try: None,
                                    generation: 0,
                                }),
                                starting: tokio::sync::Mutex::new(()),
                                refreshing: tokio::sync::Mutex::new(()),
                                stale: Arc::default(),
                                stderr: Arc::default(),
                                notices: Arc::clone(&self.notices),
                            }),
                        );
                    }
                    Arc::clone(&servers[&name])
                })
                .collect()
        };
        let starts = servers
            .iter()
            .filter(|server| server.config.enabled)
            .map(|server| server.ensure_started(root));
        tokio::select! {
            _ = futures::future::join_all(starts) => {}
            _ = cancel.cancelled() => {}
        }
        *self.blocked.lock().unwrap_or_else(|p| p.into_inner()) = blocked.clone();
        Arc::new(McpTools {
            servers,
            offered: Mutex::default(),
            blocked,
            root: root.to_path_buf(),
            notices: Arc::clone(&self.notices),
        })
    }
}

/// The MCP servers of one turn and their tools.
pub struct McpTools {
    servers: Vec<Arc<Server>>,
    /// Every name a request offered, with its server: a name no server lists now (its server
    /// died) still says which server is down.
    offered: Mutex<BTreeMap<String, Arc<Server>>>,
    /// Project servers left off (not approved, or denied), for the status.
    blocked: Vec<ServerStatus>,
    root: PathBuf,
    notices: Arc<Mutex<Vec<ServerNotice>>>,
}

impl std::fmt::Debug for McpTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpTools").finish_non_exhaustive()
    }
}

/// A tool as a request offers it: the name the model calls, its server and the tool.
struct Named {
    name: String,
    server: Arc<Server>,
    tool: McpTool,
}

impl McpTools {
    /// Every running server's tools, named over all servers at once (so no two share a name),
    /// sorted by server name then tool name. The names are remembered with their servers, so a
    /// call of a tool whose server went down since is told which server is down.
    fn named(&self) -> Vec<Named> {
        let mut servers: Vec<(&Arc<Server>, Arc<Vec<McpTool>>)> = self
            .servers
            .iter()
            .map(|server| (server, Arc::clone(&server.lock().tools)))
            .collect();
        servers.sort_by(|a, b| a.0.name.cmp(&b.0.name));
        let pairs: Vec<(&str, &str)> = servers
            .iter()
            .flat_map(|(server, tools)| {
                tools
                    .iter()
                    .map(|tool| (server.name.as_str(), tool.remote.as_str()))
            })
            .collect();
        let names = names::assign(&pairs);
        let named: Vec<Named> = servers
            .iter()
            .flat_map(|(server, tools)| tools.iter().map(move |tool| (*server, tool)))
            .zip(names)
            .map(|((server, tool), name)| Named {
                name,
                server: Arc::clone(server),
                tool: tool.clone(),
            })
            .collect();
        let mut offered = self.offered.lock().unwrap_or_else(|p| p.into_inner());
        for tool in &named {
            offered.insert(tool.name.clone(), Arc::clone(&tool.server));
        }
        named
    }

    /// Every running server's tools, sorted by server name then tool name.
    pub fn catalog(&self) -> Vec<CatalogEntry> {
        self.named()
            .into_iter()
            .map(|named| CatalogEntry {
                name: named.name,
                description: named.tool.description,
                input_schema: named.tool.schema,
            })
            .collect()
    }

    /// The MCP tool named `name`: its server, and whether it only reads. A name no server has
    /// now (its server went down) has no server and does not only read.
    fn tool(&self, name: &str) -> Option<ToolInfo> {
        if let Some(found) = self.find(name) {
            return Some(ToolInfo {
                server: Some(found.server.name.clone()),
                read_only_hint: found.tool.read_only_hint,
            });
        }
        Self::is_mcp_name(name).then_some(ToolInfo {
            server: None,
            read_only_hint: false,
        })
    }

    /// The model's names for `server`'s tools.
    pub fn tool_names(&self, server: &str) -> Vec<String> {
        self.named()
            .into_iter()
            .filter(|named| named.server.name == server)
            .map(|named| named.name)
            .collect()
    }

    /// The model's name for `server`'s tool `tool` (the server's name for it).
    pub fn model_name(&self, server: &str, tool: &str) -> Option<String> {
        self.named()
            .into_iter()
            .find(|named| named.server.name == server && named.tool.remote == tool)
            .map(|named| named.name)
    }

    /// The tools `server` listed that pen left out, each with why.
    pub fn left_out(&self, server: &str) -> Vec<(String, String)> {
        self.servers
            .iter()
            .find(|s| s.name == server)
            .map(|s| s.lock().left_out.clone())
            .unwrap_or_default()
    }

    /// Whether `name` is an MCP tool name (one this turn's servers have, or had).
    pub fn is_mcp_name(name: &str) -> bool {
        name.starts_with(names::PREFIX)
    }

    fn find(&self, name: &str) -> Option<Named> {
        self.named().into_iter().find(|named| named.name == name)
    }

    /// Fetches again the tool lists of servers that said theirs changed, and starts again a
    /// failed server whose wait is over.
    pub async fn refresh(&self) {
        for server in &self.servers {
            let due = {
                let life = server.lock();
                matches!(life.state, ServerState::Failed { .. })
                    && life.next_try.is_none_or(|at| Instant::now() >= at)
            };
            if due && server.config.enabled {
                server.ensure_started(&self.root).await;
            }
            server.refresh().await;
        }
    }

    /// The server changes since the last call, for the turn to report.
    pub fn take_notices(&self) -> Vec<ServerNotice> {
        std::mem::take(&mut *self.notices.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Every server's status, the project servers left off included.
    pub fn status(&self) -> Vec<ServerStatus> {
        let mut all: Vec<ServerStatus> = self.servers.iter().map(|s| s.status()).collect();
        all.extend(self.blocked.iter().cloned());
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// The name of the server whose tools' schemas are largest, if any has tools.
    pub fn largest_server(&self) -> Option<(String, u64)> {
        self.status()
            .into_iter()
            .filter(|s| s.schema_tokens > 0)
            .max_by_key(|s| s.schema_tokens)
            .map(|s| (s.name, s.schema_tokens))
    }

    /// Calls an MCP tool until it answers, its timeout passes or `cancel` fires (then the
    /// request is dropped, which sends `notifications/cancelled`, and the call is `stopped`).
    pub fn call(
        &self,
        name: &str,
        arguments: Value,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Value, ToolError>> {
        let found = self.find(name).map(|named| (named.server, named.tool));
        let server_of_name = self
            .offered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned();
        let root = self.root.clone();
        let name = name.to_string();
        Box::pin(async move {
            let (server, tool) = match found {
                Some(found) => found,
                None => {
                    // A tool of a server that is down: say so, and start it again for next
                    // time when its wait is over.
                    if let Some(server) = server_of_name {
                        let down = down_error(&server);
                        tokio::select! {
                            _ = server.ensure_started(&root) => {}
                            _ = cancel.cancelled() => {}
                        }
                        return Err(down);
                    }
                    return Err(ToolError::new(
                        ErrorCode::UnknownTool,
                        format!(
                            "there is no MCP tool named `{name}` now; its server no longer lists it"
                        ),
                    ));
                }
            };
            let (peer, generation, too_large) = {
                let life = server.lock();
                match &life.connection {
                    Some(connection) => (
                        connection.peer.clone(),
                        life.generation,
                        Arc::clone(&connection.too_large),
                    ),
                    None => {
                        drop(life);
                        return Err(down_error(&server));
                    }
                }
            };
            let arguments = match arguments {
                Value::Object(map) => map,
                other => {
                    return Err(ToolError::new(
                        ErrorCode::InvalidArguments,
                        format!("arguments must be a JSON object, got {other}"),
                    ));
                }
            };
            let params = CallToolRequestParams::new(tool.remote.clone()).with_arguments(arguments);
            let timeout = Duration::from_secs(server.config.tool_timeout_secs);
            let call = tokio::time::timeout(timeout, peer.call_tool(params));
            let answer = tokio::select! {
                answer = unless_too_large(&too_large, call) => match answer {
                    Some(answer) => answer,
                    None => return Err(ToolError::new(
                        ErrorCode::ToolFailed,
                        format!(
                            "too large: MCP server `{}` answered with a message over {MAX_MCP_MESSAGE_BYTES} bytes, which pen does not read; the call's outcome is unknown. Call it again asking for less",
                            server.name
                        ),
                    )),
                },
                _ = cancel.cancelled() => {
                    return Err(ToolError::new(
                        ErrorCode::Stopped,
                        format!("notifications/cancelled was sent to MCP server `{}`", server.name),
                    ));
                }
            };
            match answer {
                Ok(Ok(result)) => {
                    let wire = serde_json::to_value(&result).unwrap_or(Value::Null);
                    result::outcome(&wire)
                }
                Ok(Err(err)) => {
                    // The connection may have ended under the call: let the watcher mark it.
                    tokio::task::yield_now().await;
                    if peer.is_transport_closed() {
                        server.fail(
                            generation,
                            format!("the connection ended during a call ({err})"),
                        );
                        Err(down_error(&server))
                    } else {
                        Err(ToolError::new(
                            ErrorCode::ToolFailed,
                            format!("MCP server `{}` answered with an error: {err}", server.name),
                        ))
                    }
                }
                Err(_) => Err(ToolError::new(
                    ErrorCode::ToolFailed,
                    format!(
                        "MCP server `{}` did not answer within tool_timeout_secs = {} s; the request was cancelled, its outcome is unknown",
                        server.name, server.config.tool_timeout_secs
                    ),
                )),
            }
        })
    }
}

/// The error a tool of a server that is down answers.
fn down_error(server: &Server) -> ToolError {
    let why = match &server.lock().state {
        ServerState::Failed { why } => why.clone(),
        other => format!("it is {}", other.as_str()),
    };
    ToolError::new(
        ErrorCode::ServerDown,
        format!(
            "MCP server `{}` is down: {why}. pen starts it again on the next call of its tools",
            server.name
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_pattern_approves_only_its_own_server_s_read_only_tools() {
        let allow = vec!["mcp__docs__*".to_string(), "mcp__git__push".to_string()];
        let info = |server: &str, read_only_hint| ToolInfo {
            server: Some(server.to_string()),
            read_only_hint,
        };
        assert!(auto_approved(
            &allow,
            "mcp__docs__search",
            &info("docs", true)
        ));
        assert!(!auto_approved(
            &allow,
            "mcp__docs__delete",
            &info("docs", false)
        ));
        assert!(auto_approved(&allow, "mcp__git__push", &info("git", false)));
        assert!(!auto_approved(&allow, "mcp__git__pull", &info("git", true)));
        // Server `docs_`'s tool `x` is spelt mcp__docs___x, which begins like the pattern: it
        // is not `docs`'s, so the pattern does not cover it.
        assert!(!auto_approved(
            &allow,
            "mcp__docs___x",
            &info("docs_", true)
        ));
        let gone = ToolInfo {
            server: None,
            read_only_hint: false,
        };
        assert!(!auto_approved(&allow, "mcp__docs__search", &gone));
    }

    #[test]
    fn schemas_are_fixed_or_refused() {
        assert_eq!(
            checked_schema(Some(&json!({"properties": {}}))).unwrap(),
            json!({"properties": {}, "type": "object"})
        );
        assert!(checked_schema(Some(&json!({"type": "string"}))).is_err());
        assert!(checked_schema(None).is_err());
        let big = json!({"type": "object", "description": "x".repeat(MAX_MCP_SCHEMA_BYTES)});
        assert!(checked_schema(Some(&big)).unwrap_err().contains("limit"));
    }
}
