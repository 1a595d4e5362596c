//! `pen serve`: the daemon editors and scripts talk to, the LSP base protocol over stdio.
//!
//! API boundary: this module and `protocol` are the only ones that know the wire. The
//! `LanguageServer` methods and the `pen/…` handlers only convert and delegate: tools run
//! through `tools::call` on a blocking thread, documents live in `documents`, sessions in
//! `session`. A panic in any handler is caught in one place ([`CatchPanic`]) and answered with
//! an InternalError; the daemon keeps serving.

use crate::agent::{self, LocalTools};
use crate::config::Config;
use crate::documents::{DocumentStore, PositionEncoding, Snapshot};
use crate::limits::{DEFAULT_SESSION_PAGE, DEFAULT_TRANSCRIPT_PAGE};
use crate::protocol::{
    self, ApprovalResponse, CallToolParams, GetTranscriptParams, ListSessionsParams,
    ListSessionsResponse, NewSessionParams, PenEvent, PromptParams, PromptResponse,
    RequestApproval, SessionSummary, StopParams, StopResponse, TranscriptRecord,
    TranscriptResponse, methods,
};
use crate::session::{SessionError, SessionStore};
use crate::tools::{self, ReadLedger, Replacement, ToolContext};
use crate::transport;
use crate::watch::DiskWatcher;
use crate::workspace::Workspace;
use futures::FutureExt;
use serde_json::Value;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use tokio_util::sync::CancellationToken;
use tower::Service;
use tower_lsp_server::jsonrpc::{self, Request, Response};
use tower_lsp_server::ls_types::{
    DidChangeTextDocumentParams, DidChangeWorkspaceFoldersParams, DidCloseTextDocumentParams,
    DidOpenTextDocumentParams, DidSaveTextDocumentParams, DocumentChanges, InitializeParams,
    InitializeResult, InitializedParams, MessageType, OneOf,
    OptionalVersionedTextDocumentIdentifier, ServerCapabilities, ServerInfo, TextDocumentEdit,
    TextDocumentSyncCapability, TextDocumentSyncKind, TextDocumentSyncOptions,
    TextDocumentSyncSaveOptions, TextEdit, WorkspaceEdit, WorkspaceFoldersServerCapabilities,
    WorkspaceServerCapabilities,
};
use tower_lsp_server::{Client, LanguageServer, LspService};

mod catch_panic;
mod checkpoints;
mod editor;
#[cfg(feature = "test-hooks")]
mod test_hooks;
mod turns;

use catch_panic::CatchPanic;

/// State shared by every handler.
pub struct State {
    client: Client,
    config: RwLock<Config>,
    workspace: RwLock<Option<Workspace>>,
    /// The open documents; replaced at `initialize` with the negotiated encoding.
    documents: RwLock<DocumentStore>,
    /// Whether the client takes versioned `documentChanges` in a workspace edit.
    versioned_edits: RwLock<bool>,
    ledger: Arc<ReadLedger>,
    /// Whether the client creates `$/progress` tokens when asked (`window.workDoneProgress`).
    work_done_progress: RwLock<bool>,
    /// The disk watcher over the current roots; replaced when the roots change.
    watcher: std::sync::Mutex<Option<DiskWatcher>>,
    /// Woken whenever the watcher reports a batch of disk changes, or (re)starts.
    disk_changed: tokio::sync::Notify,
    /// The session store, or why it could not be opened (the tools still work without it).
    sessions: Result<Arc<SessionStore>, String>,
    /// The turn engine over that store.
    engine: Result<Arc<agent::Engine>, String>,
    /// Used as the workspace when the client names none.
    fallback_root: PathBuf,
    /// The MCP servers, started when a turn first needs them.
    mcp: Arc<crate::mcp::McpManager>,
    runtime: tokio::runtime::Handle,
}

/// The LanguageServer implementation: converts and delegates.
pub struct Backend {
    client: Client,
    state: Arc<State>,
}

/// Options fixed when the daemon starts.
pub struct ServeOptions {
    pub config: Config,
    /// Where the session database lives.
    pub data_dir: Result<PathBuf, SessionError>,
    /// The workspace when the client sends no workspace folders or root URI.
    pub fallback_root: PathBuf,
}

/// Serves the protocol on the given streams until the client exits or disappears.
pub async fn serve<I, O>(stdin: I, stdout: O, options: ServeOptions)
where
    I: tokio::io::AsyncRead + Unpin,
    O: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let runtime = tokio::runtime::Handle::current();
    let mcp = crate::mcp::McpManager::new(options.data_dir.as_ref().ok().cloned());
    let sessions = options
        .data_dir
        .and_then(|dir| SessionStore::open(&dir))
        .map(Arc::new)
        .map_err(|e| e.to_string());
    if let Err(err) = &sessions {
        tracing::error!("sessions are unavailable: {err}");
    }
    let builder = LspService::build(|client| {
        let state = Arc::new(State {
            client: client.clone(),
            config: RwLock::new(options.config),
            workspace: RwLock::new(None),
            documents: RwLock::new(DocumentStore::default()),
            versioned_edits: RwLock::new(false),
            ledger: Arc::default(),
            work_done_progress: RwLock::new(false),
            watcher: std::sync::Mutex::new(None),
            disk_changed: tokio::sync::Notify::new(),
            engine: sessions.clone().map(agent::Engine::new),
            sessions,
            fallback_root: options.fallback_root,
            mcp,
            runtime,
        });
        Backend { client, state }
    })
    .custom_method(methods::CALL_TOOL, Backend::call_tool)
    .custom_method(methods::LIST_TOOLS, Backend::list_tools)
    .custom_method(methods::GET_CONFIG, Backend::get_config)
    .custom_method(methods::SET_CONFIG, Backend::set_config)
    .custom_method(methods::NEW_SESSION, Backend::new_session)
    .custom_method(methods::LIST_SESSIONS, Backend::list_sessions)
    .custom_method(methods::GET_TRANSCRIPT, Backend::get_transcript)
    .custom_method(methods::PROMPT, Backend::prompt)
    .custom_method(methods::STOP, Backend::stop)
    .custom_method(methods::MCP_STATUS, Backend::mcp_status)
    .custom_method(methods::REVERT_TURN, Backend::revert_turn)
    .custom_method(methods::FORK_SESSION, Backend::fork_session)
    .custom_method(methods::GET_SESSION_CONTEXT, Backend::get_session_context)
    .custom_method(methods::SET_MODE, Backend::set_mode);
    // Compiled only into the builds of pen's own tests (the `test-hooks` feature).
    #[cfg(feature = "test-hooks")]
    let builder = if std::env::var_os(test_hooks::TEST_HOOKS_VAR).is_some() {
        builder
            .custom_method("pen/test/panic", Backend::test_panic)
            .custom_method("pen/test/awaitDiskChange", Backend::test_await_disk_change)
            .custom_method("pen/test/watchStatus", Backend::test_watch_status)
    } else {
        builder
    };
    let (service, socket) = builder.finish();
    transport::serve(stdin, stdout, CatchPanic(service), socket, OPTIONAL_PARAMS).await;
}

/// The methods whose params are all optional: absent, `null`, `{}` and `[]` mean the defaults.
const OPTIONAL_PARAMS: &[&str] = &[
    "pen/getConfig",
    "pen/listTools",
    "pen/newSession",
    "pen/listSessions",
];

impl Backend {
    async fn call_tool(&self, params: CallToolParams) -> jsonrpc::Result<Value> {
        let state = Arc::clone(&self.state);
        let outcome =
            tokio::task::spawn_blocking(move || state.run_tool(&params.name, &params.arguments))
                .await
                .map_err(|e| internal(&format!("the tool call failed: {e}")))??;
        Ok(outcome)
    }

    async fn list_tools(&self, _: Option<Value>) -> jsonrpc::Result<Value> {
        let limits = crate::agent::catalog_limits(&read(&self.state.config));
        serde_json::to_value(tools::registry::catalog(&limits))
            .map_err(|e| internal(&e.to_string()))
    }

    async fn mcp_status(&self, _: Option<Value>) -> jsonrpc::Result<protocol::McpStatusResponse> {
        let configured = read(&self.state.config).mcp_servers.clone();
        let servers = self.state.mcp.status(&configured);
        Ok(protocol::McpStatusResponse {
            servers: servers.into_iter().map(Into::into).collect(),
        })
    }

    /// Every key, and `effective_context_window`: the window the next turn plans under and
    /// where it came from (the user's setting, the server, the hosted table or the default),
    /// `null` while no provider can be built; and `effective_sandbox`, what the command sandbox
    /// does on this kernel.
    async fn get_config(&self, _: Option<Value>) -> jsonrpc::Result<Value> {
        let config = read(&self.state.config).clone();
        let mut shown = config.to_json();
        let effective = match &self.state.engine {
            Ok(engine) => engine.window(&config).await.ok(),
            Err(_) => None,
        };
        shown["effective_context_window"] = match effective {
            Some((target, window)) => serde_json::json!({
                "model": target.model,
                "tokens": window.tokens,
                "max_output_tokens": window.output_tokens(config.max_output_tokens),
                "source": window.source.as_str(),
            }),
            None => Value::Null,
        };
        shown["effective_sandbox"] = config
            .command_sandbox_probed(crate::session::default_data_dir().ok())
            .await
            .effective();
        Ok(shown)
    }

    async fn set_config(&self, params: Value) -> jsonrpc::Result<Value> {
        let values = params.as_object().ok_or_else(|| {
            jsonrpc::Error::invalid_params("pen/setConfig takes an object of {key: value}")
        })?;
        let mut config = write(&self.state.config);
        config
            .set_all(values)
            .map_err(|e| jsonrpc::Error::invalid_params(e.to_string()))?;
        Ok(config.to_json())
    }
}

impl Backend {
    async fn new_session(&self, params: Option<Value>) -> jsonrpc::Result<SessionSummary> {
        let title = optional_params::<NewSessionParams>(params)?.title;
        self.with_sessions(move |store| {
            store
                .new_session(title.as_deref())
                .map(SessionSummary::from)
        })
        .await
    }

    async fn list_sessions(&self, params: Option<Value>) -> jsonrpc::Result<ListSessionsResponse> {
        let params = optional_params::<ListSessionsParams>(params)?;
        let limit = params.limit.unwrap_or(DEFAULT_SESSION_PAGE);
        let include_empty = params.include_empty.unwrap_or(false);
        self.with_sessions(move |store| {
            store
                .list_sessions_with(params.cursor.as_deref(), limit, include_empty)
                .map(ListSessionsResponse::from)
        })
        .await
    }

    async fn get_transcript(
        &self,
        params: GetTranscriptParams,
    ) -> jsonrpc::Result<TranscriptResponse> {
        let limit = params.limit.unwrap_or(DEFAULT_TRANSCRIPT_PAGE);
        self.with_sessions(move |store| {
            let page = store.transcript(&params.session_id, params.after_seq, limit)?;
            Ok(TranscriptResponse {
                session_id: params.session_id,
                entries: page
                    .entries
                    .into_iter()
                    .map(|entry| TranscriptRecord::from(entry.record()))
                    .collect(),
                next_after_seq: page.next_after_seq,
            })
        })
        .await
    }

    /// The turn engine, or why sessions are unavailable (InternalError).
    fn engine(&self) -> jsonrpc::Result<Arc<agent::Engine>> {
        self.state
            .engine
            .clone()
            .map_err(|e| internal(&format!("sessions are unavailable: {e}")))
    }

    /// Runs a session-store call on a blocking thread (SQLite is synchronous) and maps its
    /// errors: a bad id or cursor is the client's InvalidParams, anything else InternalError.
    async fn with_sessions<T: Send + 'static>(
        &self,
        call: impl FnOnce(&SessionStore) -> Result<T, SessionError> + Send + 'static,
    ) -> jsonrpc::Result<T> {
        let store = self
            .state
            .sessions
            .clone()
            .map_err(|e| internal(&format!("sessions are unavailable: {e}")))?;
        let result = tokio::task::spawn_blocking(move || call(&store))
            .await
            .map_err(|e| internal(&format!("the session store failed: {e}")))?;
        result.map_err(|err| match err {
            SessionError::NotFound(_) | SessionError::InvalidCursor(_) => {
                jsonrpc::Error::invalid_params(err.to_string())
            }
            other => internal(&other.to_string()),
        })
    }
}

impl State {
    /// The workspace the tools are confined to now.
    fn current_workspace(&self) -> Result<Workspace, String> {
        match read(&self.workspace).clone() {
            Some(ws) => Ok(ws),
            None => {
                Workspace::new(std::slice::from_ref(&self.fallback_root)).map_err(|e| e.to_string())
            }
        }
    }

    /// Runs one tool as the model would, returning the capped observation as JSON.
    fn run_tool(&self, name: &str, arguments: &Value) -> jsonrpc::Result<Value> {
        let workspace = read(&self.workspace).clone();
        let workspace = match workspace {
            Some(ws) => ws,
            None => Workspace::new(std::slice::from_ref(&self.fallback_root))
                .map_err(|e| internal(&e.to_string()))?,
        };
        let limits = read(&self.config).limits();
        let ctx = ToolContext {
            workspace: &workspace,
            limits: &limits,
            ledger: Some(self.ledger.as_ref()),
            editor: Some(self),
            recorder: None,
            sandbox: None,
        };
        let result = tools::call(name, arguments, &ctx);
        let observation = tools::observation(&result, &limits);
        // The observation is JSON unless the cap cut it; then the model sees text, and so do we.
        Ok(serde_json::from_str(&observation).unwrap_or(Value::String(observation)))
    }

    fn set_roots(&self, roots: Vec<PathBuf>) -> Result<(), String> {
        let workspace = if roots.is_empty() {
            None
        } else {
            Some(Workspace::new(&roots).map_err(|e| e.to_string())?)
        };
        *write(&self.workspace) = workspace;
        Ok(())
    }

    /// The roots the tools are confined to now.
    fn root_paths(&self) -> Vec<PathBuf> {
        match read(&self.workspace).as_ref() {
            Some(ws) => ws.roots().iter().map(|r| r.path.clone()).collect(),
            None => vec![crate::workspace::canonical(&self.fallback_root)],
        }
    }
}

/// (Re)starts the disk watcher over the current roots, on a blocking thread: the directory walk
/// of a large project must not hold up the protocol.
fn restart_watcher(state: &Arc<State>) {
    let weak = Arc::downgrade(state);
    let roots = state.root_paths();
    let state = Arc::clone(state);
    tokio::task::spawn_blocking(move || {
        let on_change = move |paths: Vec<PathBuf>| {
            let Some(state) = weak.upgrade() else {
                return;
            };
            for path in &paths {
                state.ledger.note_disk_change(path);
            }
            state.disk_changed.notify_waiters();
        };
        let watcher = match DiskWatcher::start(&roots, on_change) {
            Ok(watcher) => Some(watcher),
            Err(err) => {
                tracing::warn!("the disk watcher could not start: {err}");
                None
            }
        };
        *state.watcher.lock().unwrap_or_else(|p| p.into_inner()) = watcher;
        state.disk_changed.notify_waiters();
    });
}

impl LanguageServer for Backend {
    async fn initialize(&self, params: InitializeParams) -> jsonrpc::Result<InitializeResult> {
        let roots = initial_roots(&params);
        if let Err(err) = self.state.set_roots(roots) {
            return Err(jsonrpc::Error::invalid_params(err));
        }
        if let Some(Value::Object(options)) = &params.initialization_options {
            let warnings =
                write(&self.state.config).apply_leniently("initializationOptions", options);
            for warning in warnings {
                tracing::warn!("{warning}");
            }
        }
        let offered = params
            .capabilities
            .general
            .as_ref()
            .and_then(|g| g.position_encodings.as_ref());
        let encoding = protocol::negotiate_encoding(offered.map(|v| v.as_slice()).unwrap_or(&[]));
        *write(&self.state.documents) = DocumentStore::new(encoding);
        let versioned = params
            .capabilities
            .workspace
            .as_ref()
            .and_then(|w| w.workspace_edit.as_ref())
            .and_then(|e| e.document_changes)
            .unwrap_or(false);
        *write(&self.state.versioned_edits) = versioned;
        let progress = params
            .capabilities
            .window
            .as_ref()
            .and_then(|w| w.work_done_progress)
            .unwrap_or(false);
        *write(&self.state.work_done_progress) = progress;
        Ok(InitializeResult {
            capabilities: ServerCapabilities {
                position_encoding: Some(protocol::encoding_kind(encoding)),
                text_document_sync: Some(TextDocumentSyncCapability::Options(
                    TextDocumentSyncOptions {
                        open_close: Some(true),
                        change: Some(TextDocumentSyncKind::INCREMENTAL),
                        save: Some(TextDocumentSyncSaveOptions::Supported(true)),
                        ..Default::default()
                    },
                )),
                workspace: Some(WorkspaceServerCapabilities {
                    workspace_folders: Some(WorkspaceFoldersServerCapabilities {
                        supported: Some(true),
                        change_notifications: Some(tower_lsp_server::ls_types::OneOf::Left(true)),
                    }),
                    file_operations: None,
                }),
                ..Default::default()
            },
            server_info: Some(ServerInfo {
                name: "pen".to_string(),
                version: Some(env!("CARGO_PKG_VERSION").to_string()),
            }),
            offset_encoding: None,
        })
    }

    async fn initialized(&self, _: InitializedParams) {
        tracing::info!("client initialized");
        restart_watcher(&self.state);
    }

    async fn shutdown(&self) -> jsonrpc::Result<()> {
        Ok(())
    }

    async fn did_open(&self, params: DidOpenTextDocumentParams) {
        let document = params.text_document;
        if let Some(path) = protocol::uri_to_path(&document.uri) {
            write(&self.state.documents).open(path, document.version, document.text);
        }
    }

    async fn did_change(&self, params: DidChangeTextDocumentParams) {
        let Some(path) = protocol::uri_to_path(&params.text_document.uri) else {
            return;
        };
        let changes: Vec<_> = params
            .content_changes
            .into_iter()
            .map(protocol::from_lsp_change)
            .collect();
        let result =
            write(&self.state.documents).change(&path, params.text_document.version, &changes);
        if let Err(err) = result {
            tracing::warn!("didChange refused: {err}");
            self.client
                .log_message(MessageType::WARNING, format!("pen ignored a change: {err}"))
                .await;
        }
    }

    async fn did_save(&self, params: DidSaveTextDocumentParams) {
        if let Some(path) = protocol::uri_to_path(&params.text_document.uri) {
            let result = write(&self.state.documents).save(&path, params.text);
            if let Err(err) = result {
                tracing::warn!("didSave: {err}");
            }
        }
    }

    async fn did_close(&self, params: DidCloseTextDocumentParams) {
        if let Some(path) = protocol::uri_to_path(&params.text_document.uri) {
            let _ = write(&self.state.documents).close(&path);
        }
    }

    async fn did_change_workspace_folders(&self, params: DidChangeWorkspaceFoldersParams) {
        let mut roots: Vec<PathBuf> = read(&self.state.workspace)
            .as_ref()
            .map(|ws| ws.roots().iter().map(|r| r.path.clone()).collect())
            .unwrap_or_default();
        let removed: Vec<PathBuf> = params
            .event
            .removed
            .iter()
            .filter_map(|f| f.uri.to_file_path().and_then(|p| p.canonicalize().ok()))
            .collect();
        roots.retain(|r| !removed.contains(r));
        roots.extend(
            params
                .event
                .added
                .iter()
                .filter_map(|f| f.uri.to_file_path().map(|p| p.into_owned())),
        );
        match self.state.set_roots(roots) {
            Ok(()) => restart_watcher(&self.state),
            Err(err) => self.client.show_message(MessageType::ERROR, err).await,
        }
    }
}

/// The workspace roots an `initialize` names: its workspace folders, else its root URI.
fn initial_roots(params: &InitializeParams) -> Vec<PathBuf> {
    if let Some(folders) = &params.workspace_folders {
        return folders
            .iter()
            .filter_map(|f| f.uri.to_file_path().map(|p| p.into_owned()))
            .collect();
    }
    #[allow(deprecated)]
    let root_uri = params.root_uri.as_ref();
    root_uri
        .and_then(|uri| uri.to_file_path().map(|p| p.into_owned()))
        .into_iter()
        .collect()
}

/// Params of a method whose fields are all optional: absent, `null`, `{}` and `[]` (what some
/// clients send for an empty table) all mean the defaults; an object is checked field by field.
fn optional_params<T: serde::de::DeserializeOwned + Default>(
    params: Option<Value>,
) -> jsonrpc::Result<T> {
    match params {
        None | Some(Value::Null) => Ok(T::default()),
        Some(Value::Array(items)) if items.is_empty() => Ok(T::default()),
        Some(value) => {
            serde_json::from_value(value).map_err(|e| jsonrpc::Error::invalid_params(e.to_string()))
        }
    }
}

fn internal(message: &str) -> jsonrpc::Error {
    jsonrpc::Error {
        code: jsonrpc::ErrorCode::InternalError,
        message: message.to_string().into(),
        data: None,
    }
}

/// Reads a lock, recovering the data if a panicking handler poisoned it: every write to
/// shared state is a whole-value replacement, so the data is never half-written.
fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
