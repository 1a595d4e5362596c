//! `pen acp`: pen as an Agent Client Protocol (v1) agent on stdio, for Zed, JetBrains, the
//! Neovim and Emacs ACP clients. A thin front end like `pen serve` and `pen run`: ACP sessions
//! are pen sessions in the same database, run by the same turn engine.
//!
//! The v1 schema types are pen's own ([`wire`]) behind its own JSON-RPC layer ([`rpc`]) rather
//! than the `agent-client-protocol` crate: the crate churns (3.6 to 5.0 with some twenty
//! breaking changes in days), brings its own async stack, and pen uses a small, stable subset of
//! the schema, which the tests check against the official Python and TypeScript clients.
//!
//! Architecture invariants: stdout carries only protocol lines (logs go to the log file); every
//! line read gets an answer or is an answer or a notification, and a malformed one never ends
//! the connection; a turn's updates and permission requests go out in the order the turn made
//! them, and all of them before the `session/prompt` answer.

mod checkpoints;
pub mod client_fs;
pub mod host;
pub mod rpc;
pub mod updates;
pub mod wire;

use crate::agent::{
    self, ApprovalAnswer, ApprovalRequest, BeginError, Decision, Engine, LocalTools, StopReason,
    TurnEvent,
};
use crate::config::{Config, McpServerConfig};
use crate::limits::{MAX_ACP_PROMPT_BYTES, TRANSPORT_WRITER_DRAIN};
use crate::mcp::McpManager;
use crate::mode::Mode;
use crate::session::{SessionError, SessionStore};
use crate::tools::{self, ReadLedger};
use crate::workspace::Workspace;
use host::Changes;
use rpc::{Connection, Incoming, METHOD_NOT_FOUND, RpcError};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use wire::*;

/// The JSON-RPC error code for a prompt while the session's turn runs (as `pen/prompt`'s).
const SESSION_BUSY: i64 = -32001;

/// The id `session/set_mode` still takes for mode `edit`: what pen called it before it had the
/// four modes.
const OLD_EDIT_MODE_ID: &str = "allow_edits";

/// The mode a `session/set_mode` id names: a [`Mode`]'s name, or [`OLD_EDIT_MODE_ID`].
fn mode_of_id(id: &str) -> Option<Mode> {
    match id {
        OLD_EDIT_MODE_ID => Some(Mode::Edit),
        id => Mode::from_name(id),
    }
}

/// Why an ACP request failed.
#[derive(Debug, thiserror::Error)]
pub enum AcpError {
    #[error("send initialize first")]
    NotInitialized,
    #[error(
        "the MCP server {0:?} speaks SSE; pen's MCP client speaks stdio and Streamable HTTP (mcpCapabilities.sse is false): give its Streamable HTTP URL instead"
    )]
    McpSse(String),
    #[error("mcpServers: {0}")]
    McpServers(String),
    #[error("cwd must be an absolute path to a folder: {0:?}")]
    BadCwd(String),
    #[error(transparent)]
    Workspace(#[from] crate::workspace::WorkspaceError),
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error("sessions are unavailable: {0}")]
    NoStore(String),
    #[error("session {0:?} is not open on this connection: send session/new or session/load first")]
    NotOpen(String),
    #[error(
        "no mode has the id {0:?}; the modes are plan, ask, edit and auto ({OLD_EDIT_MODE_ID} is edit)"
    )]
    UnknownMode(String),
    #[error("the prompt has no text")]
    EmptyPrompt,
    #[error(
        "the prompt is over {MAX_ACP_PROMPT_BYTES} bytes with its embedded resources; send less, or link the files (resource_link) so pen reads them itself"
    )]
    PromptTooLarge,
    #[error("pen takes no {0} content (promptCapabilities.{0} is false)")]
    Unsupported(&'static str),
    #[error("the embedded resource {0} is binary; pen takes text resources only")]
    BinaryResource(String),
    #[error("{0}")]
    NoProvider(crate::providers::choice::ChoiceError),
}

impl From<AcpError> for RpcError {
    fn from(err: AcpError) -> RpcError {
        let code = match &err {
            AcpError::NotOpen(_) | AcpError::Session(SessionError::NotFound(_)) => {
                RESOURCE_NOT_FOUND
            }
            AcpError::NoProvider(_) => AUTH_REQUIRED,
            AcpError::NoStore(_) | AcpError::Session(_) => rpc::INTERNAL_ERROR,
            _ => rpc::INVALID_PARAMS,
        };
        RpcError::new(code, err.to_string())
    }
}

/// What `pen acp` starts with.
pub struct AcpOptions {
    pub config: Config,
    /// Where the session database lives, or why there is none.
    pub data_dir: Result<PathBuf, SessionError>,
}

/// Serves one ACP client on `input`/`output` until it closes `input`. Turns still running then
/// are stopped (pen's Stop semantics) and given a moment to record their end.
pub async fn serve<R, W>(input: R, mut output: W, options: AcpOptions)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (lines_tx, mut lines_rx) = mpsc::unbounded_channel::<String>();
    let writer = tokio::spawn(async move {
        while let Some(mut line) = lines_rx.recv().await {
            line.push('\n');
            if output.write_all(line.as_bytes()).await.is_err() || output.flush().await.is_err() {
                tracing::warn!("stdout is closed; the ACP client is gone");
                return;
            }
        }
    });
    let connection = Arc::new(Connection::new(lines_tx));
    let state = Arc::new(AgentState::new(Arc::clone(&connection), options));
    let mut reader = BufReader::new(input);
    let mut requests = tokio::task::JoinSet::new();
    loop {
        let message = match rpc::read_message(&mut reader).await {
            Ok(Some(message)) => message,
            Ok(None) => break,
            Err(e) => {
                tracing::warn!("stdin failed: {e}");
                break;
            }
        };
        match message {
            // Answered before the next line is read, so every later request sees the
            // client's capabilities.
            Incoming::Request { id, method, params } if method == "initialize" => {
                let answer = state.handle(&method, params, None).await;
                connection.respond(id, answer);
            }
            Incoming::Request { id, method, params } => {
                // A prompt's Stop switch exists from the moment its line is read, so a
                // session/cancel read after it always stops it, however soon it comes.
                let stop = (method == "session/prompt")
                    .then(|| params.get("sessionId").and_then(Value::as_str))
                    .flatten()
                    .map(|session_id| state.prompt_started(session_id));
                let state = Arc::clone(&state);
                requests.spawn(async move {
                    let span = tracing::info_span!("request", %method);
                    let handled = {
                        let state = Arc::clone(&state);
                        tokio::spawn(tracing::Instrument::instrument(
                            async move { state.handle(&method, params, stop).await },
                            span,
                        ))
                    };
                    // A panic in a handler is answered, not fatal: the connection keeps serving.
                    let answer = handled.await.unwrap_or_else(|e| {
                        Err(RpcError::internal(format!(
                            "pen failed on this request: {e}"
                        )))
                    });
                    state.connection.respond(id, answer);
                });
            }
            Incoming::Notification { method, params } => state.notified(&method, params),
            Incoming::Response { id, result } => connection.resolve(&id, result),
            Incoming::Invalid { id, error } => connection.respond(id, Err(error)),
        }
        while requests.try_join_next().is_some() {}
    }
    tracing::info!("the ACP client closed stdin; stopping");
    state.stop_all();
    connection.close();
    let drained = tokio::time::timeout(TRANSPORT_WRITER_DRAIN, async {
        while requests.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        requests.abort_all();
    }
    drop(state);
    drop(connection);
    let _ = tokio::time::timeout(TRANSPORT_WRITER_DRAIN, writer).await;
}

/// A pen session opened on this connection (by `session/new` or `session/load`).
struct OpenSession {
    id: String,
    workspace: Workspace,
    /// The workspace root, for the absolute paths of locations.
    root: PathBuf,
    ledger: Arc<ReadLedger>,
    /// The client's file system, when it offers reads and writes: kept for the session, so
    /// what it has read stays known to later turns' searches.
    files: Option<Arc<client_fs::ClientFiles>>,
    /// The tools the owner answered "reject always" for: denied without asking again while
    /// this connection has the session open.
    rejected: Mutex<HashSet<String>>,
    /// The MCP servers the client gave `session/new` or `session/load`, started through pen's
    /// MCP client with the configured ones when a turn begins (the client's win a name clash).
    mcp_servers: BTreeMap<String, McpServerConfig>,
}

impl OpenSession {
    fn rejects(&self, tool: &str) -> bool {
        self.rejected
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(tool)
    }
}

struct AgentState {
    connection: Arc<Connection>,
    config: Config,
    store: Result<Arc<SessionStore>, String>,
    engine: Result<Arc<Engine>, String>,
    client: Mutex<Option<ClientCapabilities>>,
    sessions: Mutex<HashMap<String, Arc<OpenSession>>>,
    /// The MCP servers of this process (the config's and the sessions'), as in `pen serve`.
    mcp: Arc<McpManager>,
    /// The Stop switch of each prompt read and not yet answered: its number, its session.
    prompts: Mutex<Vec<(u64, String, CancellationToken)>>,
    next_prompt: std::sync::atomic::AtomicU64,
}

/// A prompt's Stop switch, registered while the prompt is read and not yet answered.
struct PromptStop {
    state: Arc<AgentState>,
    number: u64,
    cancel: CancellationToken,
}

impl Drop for PromptStop {
    fn drop(&mut self) {
        self.state
            .lock_prompts()
            .retain(|(number, _, _)| *number != self.number);
    }
}

fn parse<T: serde::de::DeserializeOwned>(method: &str, params: Value) -> Result<T, RpcError> {
    serde_path_to_error::deserialize(params)
        .map_err(|e| RpcError::invalid_params(format!("{method}: {e}")))
}

impl AgentState {
    fn new(connection: Arc<Connection>, options: AcpOptions) -> AgentState {
        let mcp = McpManager::new(options.data_dir.as_ref().ok().cloned());
        let store = options
            .data_dir
            .and_then(|dir| SessionStore::open(&dir))
            .map(Arc::new)
            .map_err(|e| e.to_string());
        let engine = store.clone().map(Engine::new);
        AgentState {
            connection,
            config: options.config,
            store,
            engine,
            client: Mutex::default(),
            sessions: Mutex::default(),
            mcp,
            prompts: Mutex::default(),
            next_prompt: std::sync::atomic::AtomicU64::new(1),
        }
    }

    fn lock_prompts(&self) -> std::sync::MutexGuard<'_, Vec<(u64, String, CancellationToken)>> {
        self.prompts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers the Stop switch of a prompt of `session_id` just read.
    fn prompt_started(self: &Arc<Self>, session_id: &str) -> PromptStop {
        let number = self
            .next_prompt
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let cancel = CancellationToken::new();
        self.lock_prompts()
            .push((number, session_id.to_string(), cancel.clone()));
        PromptStop {
            state: Arc::clone(self),
            number,
            cancel,
        }
    }

    async fn handle(
        self: &Arc<Self>,
        method: &str,
        params: Value,
        stop: Option<PromptStop>,
    ) -> Result<Value, RpcError> {
        fn value(response: impl serde::Serialize) -> Result<Value, RpcError> {
            serde_json::to_value(response).map_err(|e| RpcError::internal(e.to_string()))
        }
        match method {
            "initialize" => value(self.initialize(parse(method, params)?)),
            "authenticate" => self.authenticate().await,
            "session/new" => value(self.new_session(parse(method, params)?).await?),
            "session/load" => value(self.load_session(parse(method, params)?).await?),
            "session/prompt" => {
                let stop = stop.unwrap_or_else(|| self.prompt_started(""));
                value(self.prompt(parse(method, params)?, &stop.cancel).await?)
            }
            "session/set_mode" => {
                self.set_mode(parse(method, params)?)?;
                Ok(json!({}))
            }
            "session/cancel" => {
                self.cancel(parse(method, params)?);
                Ok(Value::Null)
            }
            checkpoints::REVERT_TURN => value(self.revert_turn(parse(method, params)?).await?),
            checkpoints::FORK_SESSION => value(self.fork_session(parse(method, params)?).await?),
            _ => Err(RpcError::new(
                METHOD_NOT_FOUND,
                format!("pen acp has no method {method:?}"),
            )),
        }
    }

    fn notified(&self, method: &str, params: Value) {
        match method {
            "session/cancel" => match parse::<CancelParams>(method, params) {
                Ok(params) => self.cancel(params),
                Err(e) => tracing::warn!("{}", e.message),
            },
            // Notifications are never answered; one pen does not know is ignored (the spec's
            // rule for extension notifications).
            other => tracing::debug!("ignored the notification {other}"),
        }
    }

    fn initialize(&self, params: InitializeParams) -> InitializeResponse {
        tracing::info!(
            "client protocol version {}, fs {:?}, terminal {}",
            params.protocol_version,
            params.client_capabilities.fs,
            params.client_capabilities.terminal
        );
        *self.client.lock().unwrap_or_else(|p| p.into_inner()) = Some(params.client_capabilities);
        InitializeResponse {
            protocol_version: PROTOCOL_VERSION,
            agent_capabilities: AgentCapabilities {
                load_session: true,
                prompt_capabilities: PromptCapabilities {
                    image: false,
                    audio: false,
                    embedded_context: true,
                },
                mcp_capabilities: McpCapabilities {
                    http: true,
                    sse: false,
                },
            },
            auth_methods: Vec::new(),
            agent_info: Implementation {
                name: "pen".into(),
                title: "pen".into(),
                version: env!("CARGO_PKG_VERSION").into(),
            },
        }
    }

    fn client(&self) -> Result<ClientCapabilities, AcpError> {
        self.client
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or(AcpError::NotInitialized)
    }

    /// pen offers no authentication methods: the provider's key comes from the environment.
    /// Answers `{}` when the provider is ready, else says which variable to set.
    async fn authenticate(&self) -> Result<Value, RpcError> {
        self.provider_ready().await?;
        Ok(json!({}))
    }

    async fn provider_ready(&self) -> Result<(), AcpError> {
        let engine = self.engine.clone().map_err(AcpError::NoStore)?;
        engine
            .provider(&self.config)
            .await
            .map(|_| ())
            .map_err(AcpError::NoProvider)
    }

    fn store(&self) -> Result<Arc<SessionStore>, AcpError> {
        self.store.clone().map_err(AcpError::NoStore)
    }

    async fn with_store<T: Send + 'static>(
        &self,
        work: impl FnOnce(&SessionStore) -> Result<T, SessionError> + Send + 'static,
    ) -> Result<T, AcpError> {
        let store = self.store()?;
        tokio::task::spawn_blocking(move || work(&store))
            .await
            .map_err(|e| AcpError::Session(SessionError::Task(e.to_string())))?
            .map_err(AcpError::from)
    }

    /// The session's workspace from the client's `cwd`.
    fn workspace(cwd: &str) -> Result<Workspace, AcpError> {
        if !Path::new(cwd).is_absolute() {
            return Err(AcpError::BadCwd(cwd.to_string()));
        }
        Ok(Workspace::new(&[PathBuf::from(cwd)])?)
    }

    fn open(
        &self,
        client: &ClientCapabilities,
        session_id: String,
        workspace: Workspace,
        mcp_servers: BTreeMap<String, McpServerConfig>,
    ) -> Arc<OpenSession> {
        let files = (client.fs.read_text_file && client.fs.write_text_file).then(|| {
            Arc::new(client_fs::ClientFiles::new(
                Arc::clone(&self.connection),
                tokio::runtime::Handle::current(),
                session_id.clone(),
            ))
        });
        let root = workspace
            .roots()
            .first()
            .map(|root| root.path.clone())
            .unwrap_or_default();
        let session = Arc::new(OpenSession {
            id: session_id.clone(),
            workspace,
            root,
            ledger: Arc::default(),
            files,
            rejected: Mutex::default(),
            mcp_servers,
        });
        self.lock_sessions()
            .insert(session_id, Arc::clone(&session));
        session
    }

    fn lock_sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<OpenSession>>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn new_session(&self, params: NewSessionParams) -> Result<NewSessionResponse, AcpError> {
        let client = self.client()?;
        // Checked before a session is written: a session nobody can prompt is not made.
        let workspace = Self::workspace(&params.cwd)?;
        let mcp_servers = mcp_servers(&params.mcp_servers)?;
        self.provider_ready().await?;
        let info = self.with_store(|store| store.new_session(None)).await?;
        let session = self.open(&client, info.id, workspace, mcp_servers);
        Ok(NewSessionResponse {
            session_id: session.id.clone(),
            modes: modes(self.mode(&session.id)),
        })
    }

    /// The session's permission mode: the one it was switched to, else the configured one.
    fn mode(&self, session_id: &str) -> Mode {
        match &self.engine {
            Ok(engine) => engine.mode(session_id, &self.config),
            Err(_) => self.config.mode,
        }
    }

    /// Replays the session's transcript as `session/update`s, then answers: the client sees
    /// the whole conversation before it can prompt again.
    async fn load_session(
        &self,
        params: LoadSessionParams,
    ) -> Result<LoadSessionResponse, AcpError> {
        let client = self.client()?;
        let id = params.session_id.clone();
        let lookup = id.clone();
        let workspace = Self::workspace(&params.cwd)?;
        let mcp_servers = mcp_servers(&params.mcp_servers)?;
        self.with_store(move |store| store.get_session(&lookup))
            .await?;
        let session = self.open(&client, id.clone(), workspace, mcp_servers);
        let mut after = None;
        loop {
            let session_id = id.clone();
            let page = self
                .with_store(move |store| {
                    store.transcript(
                        &session_id,
                        after,
                        crate::limits::MAX_TRANSCRIPT_PAGE_ENTRIES,
                    )
                })
                .await?;
            for entry in &page.entries {
                for update in updates::replayed(&entry.record(), &session.root) {
                    self.update(&id, update);
                }
            }
            match page.next_after_seq {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        Ok(LoadSessionResponse {
            modes: modes(self.mode(&session.id)),
        })
    }

    fn session(&self, session_id: &str) -> Result<Arc<OpenSession>, AcpError> {
        self.lock_sessions()
            .get(session_id)
            .cloned()
            .ok_or_else(|| AcpError::NotOpen(session_id.to_string()))
    }

    fn set_mode(&self, params: SetModeParams) -> Result<(), AcpError> {
        let session = self.session(&params.session_id)?;
        let mode = mode_of_id(&params.mode_id).ok_or(AcpError::UnknownMode(params.mode_id))?;
        let engine = self
            .engine
            .as_ref()
            .map_err(|e| AcpError::NoStore(e.clone()))?;
        engine.set_mode(&session.id, mode);
        Ok(())
    }

    /// Stops the session's running turn and any prompt of it read and not yet begun.
    fn cancel(&self, params: CancelParams) {
        for (_, session_id, cancel) in self.lock_prompts().iter() {
            if *session_id == params.session_id {
                cancel.cancel();
            }
        }
        if let Ok(engine) = &self.engine {
            engine.stop(&params.session_id);
        }
    }

    fn stop_all(&self) {
        for (_, _, cancel) in self.lock_prompts().iter() {
            cancel.cancel();
        }
        if let Ok(engine) = &self.engine {
            for id in self.lock_sessions().keys() {
                engine.stop(id);
            }
        }
    }

    fn update(&self, session_id: &str, update: SessionUpdate) {
        self.connection.notify(
            "session/update",
            &SessionNotification {
                session_id: session_id.to_string(),
                update,
            },
        );
    }

    /// Runs one turn and answers with its stop reason once every update of it is sent.
    async fn prompt(
        self: &Arc<Self>,
        params: PromptParams,
        cancel: &CancellationToken,
    ) -> Result<PromptResponse, RpcError> {
        self.client()?;
        let session = self.session(&params.session_id)?;
        let text = self.prompt_text(&session, params.prompt).await?;
        let engine = self.engine.clone().map_err(AcpError::NoStore)?;
        let pending = engine
            .begin(&session.id, cancel.clone())
            .await
            .map_err(begin_error)?;
        let config = self.config.clone();
        let changes = Arc::new(Changes::default());
        let sandbox = config
            .command_sandbox_probed(crate::session::default_data_dir().ok())
            .await;
        let tools = turn_tools(&session, &config, sandbox, Arc::clone(&changes));
        let (state, open) = (Arc::clone(self), Arc::clone(&session));
        let channel =
            agent::Channel::queued("client", move |queue| forward(state, open, queue, changes));
        // The configured MCP servers and the client's start (or are found running) as the
        // turn begins; a project server (.mcp.json) asks the owner first, as under `pen serve`.
        let setup = agent::TurnSetup {
            config,
            tools,
            mcp: &self.mcp,
            client_mcp_servers: session.mcp_servers.clone(),
            root: session.root.clone(),
        };
        prompt_answer(pending.run_set_up(&text, setup, channel).await)
    }

    /// A prompt's text. Embedded text is judged for key material where it lies in its file (a
    /// blocking read), as the editors' selections are.
    async fn prompt_text(
        &self,
        session: &OpenSession,
        blocks: Vec<ContentBlock>,
    ) -> Result<String, RpcError> {
        let workspace = session.workspace.clone();
        let limits = self.config.limits();
        tokio::task::spawn_blocking(move || {
            prompt_text(&blocks, &|uri, text| {
                let path = crate::protocol::file_uri_path(uri);
                let path = path.as_ref().map(|p| p.to_string_lossy());
                crate::agent::withheld_client_text(&workspace, path.as_deref(), text, &limits)
            })
        })
        .await
        .map_err(|e| RpcError::internal(e.to_string()))?
        .map_err(RpcError::from)
    }
}

/// The error of a `session/prompt` whose session could not be claimed.
fn begin_error(err: BeginError) -> RpcError {
    let kind = err.kind().as_str();
    let code = match &err {
        BeginError::Running(_) | BeginError::Store(SessionError::LeaseHeld { .. }) => SESSION_BUSY,
        BeginError::Store(SessionError::NotFound(_)) => RESOURCE_NOT_FOUND,
        BeginError::Store(_) => rpc::INTERNAL_ERROR,
    };
    RpcError::new(code, err.to_string()).with_data(json!({"kind": kind}))
}

/// A turn's tools under ACP: the client's files as the editor, and its file changes told.
fn turn_tools(
    session: &OpenSession,
    config: &Config,
    sandbox: crate::sandbox::CommandSandbox,
    changes: Arc<Changes>,
) -> LocalTools {
    type Editor = Option<Arc<dyn tools::Editor + Send + Sync>>;
    let editor: Editor = session.files.clone().map(|files| files as _);
    let search_editor: Editor = session
        .files
        .clone()
        .map(|files| Arc::new(client_fs::KnownFiles(files)) as _);
    LocalTools {
        workspace: session.workspace.clone(),
        limits: config.limits(),
        ledger: Arc::clone(&session.ledger),
        editor,
        search_editor,
        watch: Some(changes),
        fitted: Default::default(),
        sandbox,
    }
}

/// The `session/prompt` answer for a turn's outcome.
fn prompt_answer(outcome: agent::TurnOutcome) -> Result<PromptResponse, RpcError> {
    let stop_reason = match outcome.stop_reason {
        StopReason::EndTurn => "end_turn",
        StopReason::Cancelled => "cancelled",
        StopReason::MaxTurnRequests => "max_turn_requests",
        StopReason::Error => {
            let kind = outcome.error_kind.map(|kind| kind.as_str());
            return Err(RpcError::internal(
                outcome
                    .last_error
                    .unwrap_or_else(|| "the turn failed".to_string()),
            )
            .with_data(json!({"kind": kind})));
        }
    };
    // ACP v1 has no usage field: pen's totals go in the answer's `_meta` (docs/acp.md).
    let meta = (outcome.usage.is_some() || outcome.session_usage.is_some()).then(|| {
        json!({"pen": {
            "usage": outcome.usage.map(crate::protocol::Usage::from),
            "sessionUsage": outcome.session_usage.map(crate::protocol::Usage::from),
        }})
    });
    Ok(PromptResponse { stop_reason, meta })
}

/// The session modes pen offers (its permission modes, by their names), `current` selected.
fn modes(current: Mode) -> SessionModeState {
    SessionModeState {
        current_mode_id: current.as_str().to_string(),
        available_modes: Mode::ALL
            .into_iter()
            .map(|mode| {
                let name = mode.as_str();
                SessionMode {
                    id: name.into(),
                    name: name[..1].to_uppercase() + &name[1..],
                    description: mode.description().into(),
                }
            })
            .collect(),
    }
}

/// The user prompt of a `session/prompt`: text as it is, a resource link as a Markdown link
/// (pen reads the file itself when it needs it), an embedded text resource as its text marked
/// with its URI — or, when `withheld(uri, text)` gives a reason (key material), that reason in
/// its place. Bounded by [`MAX_ACP_PROMPT_BYTES`]; nothing is cut silently.
fn prompt_text(
    blocks: &[ContentBlock],
    withheld: &dyn Fn(&str, &str) -> Option<String>,
) -> Result<String, AcpError> {
    let mut text = String::new();
    for block in blocks {
        match block {
            ContentBlock::Text { text: part } => text.push_str(part),
            ContentBlock::ResourceLink { uri, name, .. } => {
                text.push_str(&format!("[{name}]({uri})"));
            }
            ContentBlock::Resource { resource } => match &resource.text {
                Some(contents) => {
                    let shown = match withheld(&resource.uri, contents) {
                        Some(why) => format!("({why})"),
                        None => contents.clone(),
                    };
                    text.push_str(&format!(
                        "\n<resource uri=\"{}\">\n{shown}\n</resource>\n",
                        resource.uri
                    ));
                }
                None => return Err(AcpError::BinaryResource(resource.uri.clone())),
            },
            ContentBlock::Image {} => return Err(AcpError::Unsupported("image")),
            ContentBlock::Audio {} => return Err(AcpError::Unsupported("audio")),
        }
        if text.len() > MAX_ACP_PROMPT_BYTES {
            return Err(AcpError::PromptTooLarge);
        }
    }
    if text.trim().is_empty() {
        return Err(AcpError::EmptyPrompt);
    }
    Ok(text)
}

/// The permission options, each with the pen decision it stands for.
const OPTIONS: [(&str, &str, &str); 4] = [
    ("allow_once", "Allow", "allow_once"),
    ("allow_always", "Allow for this session", "allow_always"),
    ("reject_once", "Reject", "reject_once"),
    ("reject_always", "Reject for this session", "reject_always"),
];

/// Sends a turn's events as `session/update`s, in order. Permission requests travel the same
/// queue, so one is never sent before the updates that came before it.
async fn forward(
    state: Arc<AgentState>,
    session: Arc<OpenSession>,
    mut outgoing: mpsc::UnboundedReceiver<agent::Outgoing>,
    changes: Arc<Changes>,
) {
    // The path each call named, to find its file change.
    let mut paths: HashMap<String, String> = HashMap::new();
    while let Some(next) = outgoing.recv().await {
        let event = match next {
            agent::Outgoing::Event(event) => event.event,
            // A tool the owner rejected for the session is denied without asking.
            agent::Outgoing::Approval(request, answer) if session.rejects(&request.tool) => {
                let reason = rejected_for_session(&request.tool);
                let _ = answer.send(Ok((Decision::Deny, Some(reason))));
                continue;
            }
            agent::Outgoing::Approval(request, answer) => {
                let params = permission_request(&session, &request, &changes);
                let state = Arc::clone(&state);
                let session = Arc::clone(&session);
                // Answered in its own task, so updates after it (a Stop) are not held up.
                tokio::spawn(async move {
                    let asked = state
                        .connection
                        .request("session/request_permission", &params)
                        .await;
                    let decided = decision(&session, &request.tool, asked);
                    // Said before the turn hears the answer, so it precedes the call's end; a
                    // request Stop withdrew has no listener, and its call ends as it does.
                    let allowed = matches!(
                        decided,
                        Ok((Decision::Allow | Decision::AllowForSession, _))
                    );
                    if allowed && !answer.is_closed() {
                        state.update(
                            &session.id,
                            SessionUpdate::ToolCallUpdate(ToolCallUpdate {
                                tool_call_id: request.call_id.clone(),
                                status: Some(ToolCallStatus::InProgress),
                                ..Default::default()
                            }),
                        );
                    }
                    let _ = answer.send(decided);
                });
                continue;
            }
        };
        if let Some(update) = live_update(event, &session.root, &mut paths, &changes) {
            state.update(&session.id, update);
        }
    }
}

/// The update a live turn event shows the client, if any. `paths` keeps the path each running
/// call named, to find the file change an edit made.
fn live_update(
    event: TurnEvent,
    root: &Path,
    paths: &mut HashMap<String, String>,
    changes: &Changes,
) -> Option<SessionUpdate> {
    Some(match event {
        TurnEvent::TextDelta { text } => SessionUpdate::AgentMessageChunk {
            content: ContentBlock::text(text),
        },
        TurnEvent::ToolCallStarted {
            call_id,
            tool,
            arguments,
        } => {
            if let Some(path) = arguments
                .as_ref()
                .and_then(|a| a.get("path"))
                .and_then(Value::as_str)
            {
                paths.insert(call_id.clone(), path.to_string());
            }
            SessionUpdate::ToolCall(updates::tool_call(
                &call_id,
                &tool,
                arguments.as_ref(),
                root,
            ))
        }
        TurnEvent::ToolCallFinished {
            call_id,
            tool,
            outcome,
            excerpt,
            ..
        } => {
            let change = match (updates::tool_kind(&tool), paths.remove(&call_id)) {
                (ToolKind::Edit, Some(path)) => changes.take_written(&path),
                _ => None,
            };
            SessionUpdate::ToolCallUpdate(updates::finished(&call_id, outcome, &excerpt, change))
        }
        // The budget's report is never silent: the client shows it as part of the answer.
        TurnEvent::ContextTrimmed(trim) => SessionUpdate::AgentMessageChunk {
            content: ContentBlock::text(format!("\n\n[pen: {}]\n\n", trim.notice())),
        },
        // The permission request carries the approval; a withdrawn one ends with the
        // call's result ("not executed"); the prompt's answer carries the end.
        // An MCP server that failed is said, as part of the answer (its tools now answer
        // that it is down); one that started is not news.
        TurnEvent::McpServer {
            server,
            state,
            reason,
        } if !matches!(state, crate::mcp::ServerState::Running { .. }) => {
            SessionUpdate::AgentMessageChunk {
                content: ContentBlock::text(format!(
                    "\n\n[pen: MCP server {server} {}{}]\n\n",
                    state.as_str(),
                    reason.map(|r| format!(": {r}")).unwrap_or_default()
                )),
            }
        }
        TurnEvent::McpServer { .. } => return None,
        // A changed instruction file is said, as the panels say it (the prompt carries it).
        TurnEvent::InstructionsChanged { files } => SessionUpdate::AgentMessageChunk {
            content: ContentBlock::text(format!(
                "\n\n[pen: the project's instructions changed: {}]\n\n",
                files
                    .iter()
                    .map(|f| f.path.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        },
        // A likely truncation is never silent either, nor an unavailable sandbox.
        TurnEvent::ProviderWarning { message } | TurnEvent::SandboxUnavailable { message } => {
            SessionUpdate::AgentMessageChunk {
                content: ContentBlock::text(format!("\n\n[pen: {message}]\n\n")),
            }
        }
        TurnEvent::Plan { steps } => updates::plan(&steps),
        // Each request's usage is not an ACP update; the turn's totals go with the answer.
        TurnEvent::ApprovalRequested(_)
        | TurnEvent::ApprovalWithdrawn { .. }
        | TurnEvent::Usage(_)
        | TurnEvent::ContextWindow { .. }
        | TurnEvent::TurnEnded(_) => return None,
    })
}

fn permission_request(
    session: &OpenSession,
    request: &ApprovalRequest,
    changes: &Changes,
) -> RequestPermissionParams {
    let planned = request
        .arguments
        .get("path")
        .and_then(Value::as_str)
        .and_then(|path| changes.take_planned(path));
    let mut content = match (planned, &request.diff) {
        (Some(change), _) => vec![updates::diff(change)],
        (None, Some(diff)) => vec![ToolCallContent::Content {
            content: ContentBlock::text(diff.clone()),
        }],
        (None, None) => Vec::new(),
    };
    let mut title = updates::title(&request.tool, Some(&request.arguments));
    if let Some(note) = &request.not_revertible {
        // The owner sees it before the write: in the title and as a text block.
        title = format!("{title} ({note})");
        content.push(ToolCallContent::Content {
            content: ContentBlock::text(format!("pen: {note}")),
        });
    }
    RequestPermissionParams {
        session_id: session.id.clone(),
        tool_call: ToolCallUpdate {
            tool_call_id: request.call_id.clone(),
            title: Some(title),
            kind: Some(updates::tool_kind(&request.tool)),
            status: Some(ToolCallStatus::Pending),
            content: Some(content),
            locations: Some(updates::locations(
                &request.tool,
                Some(&request.arguments),
                &session.root,
            )),
            raw_input: Some(request.arguments.clone()),
        },
        options: OPTIONS
            .iter()
            .map(|(option_id, name, kind)| PermissionOption {
                option_id,
                name,
                kind,
            })
            .collect(),
    }
}

/// The client's answer as pen's approval, as `pen serve` maps its editor's: allow, allow for the
/// session (stored), deny; "reject always" is a denial that also answers the tool's later
/// requests on this connection. An answer pen cannot use is no answer (the approval no longer
/// applies), never an allow.
fn decision(
    session: &OpenSession,
    tool: &str,
    asked: Result<Value, rpc::CallError>,
) -> ApprovalAnswer {
    let answer =
        asked.map_err(|e| format!("the client did not answer session/request_permission: {e}"))?;
    let answer: RequestPermissionResponse = serde_json::from_value(answer).map_err(|e| {
        format!("the client's answer to session/request_permission is malformed: {e}")
    })?;
    match answer.outcome {
        PermissionOutcome::Cancelled => Err("the client cancelled the permission request".into()),
        PermissionOutcome::Selected { option_id } => match option_id.as_str() {
            "allow_once" => Ok((Decision::Allow, None)),
            "allow_always" => Ok((Decision::AllowForSession, None)),
            "reject_once" => Ok((Decision::Deny, Some(NO_REASON_OVER_ACP.to_string()))),
            "reject_always" => {
                session
                    .rejected
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(tool.to_string());
                Ok((Decision::Deny, Some(rejected_for_session(tool))))
            }
            other => Err(format!(
                "the client chose {other:?}, which pen did not offer"
            )),
        },
    }
}

/// What the model reads with a rejection: ACP's permission answer carries no reason, so the
/// owner's is in their next prompt.
const NO_REASON_OVER_ACP: &str = "(pen: an ACP client's answer carries no reason; the owner may \
    say why in the next prompt)";

fn rejected_for_session(tool: &str) -> String {
    format!(
        "the owner rejected {tool} for the rest of this session; do not call it again \
         {NO_REASON_OVER_ACP}"
    )
}

/// The client's MCP servers as pen's MCP client takes them: each through the same checks and
/// bounds as a configured server (`mcp_servers`), its name made a pen server name (characters
/// other than `A-Za-z0-9_-` become `_`, cut to the name limit). An SSE server, or two whose pen
/// names clash, is refused with the reason.
fn mcp_servers(servers: &[McpServer]) -> Result<BTreeMap<String, McpServerConfig>, AcpError> {
    let pairs = |list: &[NameValue]| -> serde_json::Map<String, Value> {
        list.iter()
            .map(|p| (p.name.clone(), Value::String(p.value.clone())))
            .collect()
    };
    let mut table = serde_json::Map::new();
    for server in servers {
        let (name, value) = match server {
            McpServer::Stdio(s) => (
                &s.name,
                json!({"command": s.command, "args": s.args, "env": pairs(&s.env)}),
            ),
            McpServer::Remote(s) if s.transport == RemoteTransport::Http => {
                (&s.name, json!({"url": s.url, "headers": pairs(&s.headers)}))
            }
            McpServer::Remote(s) => return Err(AcpError::McpSse(s.name.clone())),
        };
        // A run of `_` is one: pen's server names have no `__` (it separates server and tool
        // in `mcp__<server>__<tool>`).
        let mut pen_name = String::new();
        for c in name.chars() {
            let c = if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            };
            if !(c == '_' && pen_name.ends_with('_'))
                && pen_name.len() < crate::limits::MAX_MCP_SERVER_NAME_BYTES
            {
                pen_name.push(c);
            }
        }
        let pen_name = if pen_name.is_empty() {
            "server".to_string()
        } else {
            pen_name
        };
        if table.insert(pen_name.clone(), value).is_some() {
            return Err(AcpError::McpServers(format!(
                "two servers are both named `{pen_name}` in pen (names keep A-Z a-z 0-9 _ -)"
            )));
        }
    }
    crate::config::mcp::parse_servers("mcpServers", &Value::Object(table))
        .map_err(|e| AcpError::McpServers(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_join_text_links_and_embedded_text_and_refuse_what_pen_cannot_read() {
        let blocks = vec![
            ContentBlock::text("look at "),
            ContentBlock::ResourceLink {
                uri: "file:///w/a.rs".into(),
                name: "a.rs".into(),
                title: None,
            },
            ContentBlock::Resource {
                resource: EmbeddedResource {
                    uri: "file:///w/b.rs".into(),
                    text: Some("fn b() {}".into()),
                    blob: None,
                },
            },
        ];
        assert_eq!(
            prompt_text(&blocks, &|_, _| None).unwrap(),
            "look at [a.rs](file:///w/a.rs)\n<resource uri=\"file:///w/b.rs\">\nfn b() {}\n</resource>\n"
        );
        let blob = ContentBlock::Resource {
            resource: EmbeddedResource {
                uri: "file:///w/c.png".into(),
                text: None,
                blob: Some("AAAA".into()),
            },
        };
        assert!(matches!(
            prompt_text(&[blob], &|_, _| None),
            Err(AcpError::BinaryResource(_))
        ));
        assert!(matches!(
            prompt_text(&[ContentBlock::Image {}], &|_, _| None),
            Err(AcpError::Unsupported("image"))
        ));
        assert!(matches!(
            prompt_text(&[ContentBlock::text(" ")], &|_, _| None),
            Err(AcpError::EmptyPrompt)
        ));
        let big = ContentBlock::text("x".repeat(MAX_ACP_PROMPT_BYTES + 1));
        assert!(matches!(
            prompt_text(&[big], &|_, _| None),
            Err(AcpError::PromptTooLarge)
        ));
    }

    fn open_session() -> OpenSession {
        let dir = std::env::temp_dir();
        OpenSession {
            id: "s".into(),
            workspace: Workspace::new(std::slice::from_ref(&dir)).unwrap(),
            root: dir,
            ledger: Arc::default(),
            files: None,
            rejected: Mutex::default(),
            mcp_servers: BTreeMap::new(),
        }
    }

    /// The client's MCP servers become pen's: names made server names, the config's checks
    /// applied; SSE and clashing names refused with the reason.
    #[test]
    fn a_clients_mcp_servers_are_checked_like_configured_ones() {
        let parse = |list: Value| {
            let servers: Vec<McpServer> = serde_json::from_value(list).unwrap();
            mcp_servers(&servers)
        };
        let servers = parse(json!([
            {"name": "My Files", "command": "/bin/mcp", "args": ["-v"], "env": [{"name": "A", "value": "1"}]},
            {"type": "http", "name": "web", "url": "http://127.0.0.1:1/mcp",
             "headers": [{"name": "Authorization", "value": "Bearer t"}]},
        ]))
        .unwrap();
        assert_eq!(servers.keys().collect::<Vec<_>>(), ["My_Files", "web"]);
        assert!(matches!(
            &servers["My_Files"].transport,
            crate::config::McpTransport::Stdio { command, args, env, .. }
                if command == "/bin/mcp" && args == &["-v"] && env["A"] == "1"
        ));
        assert!(matches!(
            &servers["web"].transport,
            crate::config::McpTransport::Http { headers, .. } if headers["Authorization"] == "Bearer t"
        ));
        let sse = parse(
            json!([{"type": "sse", "name": "old", "url": "http://127.0.0.1:1/sse", "headers": []}]),
        );
        assert!(matches!(sse, Err(AcpError::McpSse(name)) if name == "old"));
        let clash = parse(json!([
            {"name": "a b", "command": "/x", "args": [], "env": []},
            {"name": "a_b", "command": "/y", "args": [], "env": []},
        ]));
        assert!(matches!(clash, Err(AcpError::McpServers(why)) if why.contains("a_b")));
        // A run of characters pen does not keep is one `_`: a server name never holds `__`.
        let runs =
            parse(json!([{"name": "My  Files (v2)", "command": "/x", "args": [], "env": []}]))
                .unwrap();
        assert_eq!(runs.keys().collect::<Vec<_>>(), ["My_Files_v2_"]);
        let bad = parse(json!([{"name": "x", "command": "", "args": [], "env": []}]));
        assert!(matches!(bad, Err(AcpError::McpServers(_))), "{bad:?}");
    }

    /// The prompt budget's report reaches the client as agent text, never silently.
    #[test]
    fn a_trimmed_context_is_reported_as_agent_text() {
        let trim = agent::Trim::Budget(crate::transcript::TrimReport {
            policy_version: 3,
            excerpted: vec!["a".into()],
            omitted: vec![],
            dropped_exchanges: vec![],
            dropped_count: 0,
            tokens_before: 9000,
            tokens_after: 4000,
            budget: 4500,
        });
        let update = live_update(
            TurnEvent::ContextTrimmed(trim),
            Path::new("/w"),
            &mut HashMap::new(),
            &Changes::default(),
        );
        let Some(SessionUpdate::AgentMessageChunk {
            content: ContentBlock::Text { text },
        }) = update
        else {
            panic!("{update:?}")
        };
        assert!(
            text.contains("context trimmed") && text.contains("9000"),
            "{text}"
        );
        let ended = live_update(
            TurnEvent::TurnEnded(agent::TurnOutcome::failed(
                agent::TurnErrorKind::Network,
                "x".into(),
            )),
            Path::new("/w"),
            &mut HashMap::new(),
            &Changes::default(),
        );
        assert_eq!(ended, None, "the prompt's answer carries the end");
    }

    #[test]
    fn permission_answers_map_onto_pen_approvals_and_fail_closed() {
        let session = open_session();
        let selected = |id: &str| Ok(json!({"outcome": {"outcome": "selected", "optionId": id}}));
        assert_eq!(
            decision(&session, "pen_edit", selected("allow_once")),
            Ok((Decision::Allow, None))
        );
        assert_eq!(
            decision(&session, "pen_edit", selected("allow_always")),
            Ok((Decision::AllowForSession, None))
        );
        assert_eq!(
            decision(&session, "pen_edit", selected("reject_once")),
            Ok((Decision::Deny, Some(NO_REASON_OVER_ACP.to_string())))
        );
        assert!(!session.rejects("pen_command"));
        assert!(matches!(
            decision(&session, "pen_command", selected("reject_always")),
            Ok((Decision::Deny, Some(_)))
        ));
        assert!(session.rejects("pen_command"));
        assert!(decision(&session, "pen_edit", selected("yes_please")).is_err());
        assert!(
            decision(
                &session,
                "pen_edit",
                Ok(json!({"outcome": {"outcome": "cancelled"}}))
            )
            .is_err()
        );
        assert!(decision(&session, "pen_edit", Ok(json!({"allow": true}))).is_err());
        assert!(decision(&session, "pen_edit", Err(rpc::CallError::Gone)).is_err());
    }
}
