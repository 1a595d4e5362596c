//! `pen serve`: the daemon editors and scripts talk to, the LSP base protocol over stdio.
//!
//! API boundary: this module and `protocol` are the only ones that know the wire. The
//! `LanguageServer` methods and the `pen/…` handlers only convert and delegate: tools run
//! through `tools::call` on a blocking thread, documents live in `documents`, sessions in
//! `session`. A panic in any handler is caught in one place ([`CatchPanic`]) and answered with
//! an InternalError; the daemon keeps serving.

use crate::config::Config;
use crate::protocol::{CallToolParams, PositionEncodingName};
use crate::tools::{self, ReadLedger, ToolContext};
use crate::transport;
use crate::workspace::Workspace;
use futures::FutureExt;
use serde_json::Value;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use tower::Service;
use tower_lsp_server::jsonrpc::{self, Request, Response};
use tower_lsp_server::ls_types::{
    DidChangeWorkspaceFoldersParams, InitializeParams, InitializeResult, InitializedParams,
    MessageType, ServerCapabilities, ServerInfo, TextDocumentSyncCapability, TextDocumentSyncKind,
    TextDocumentSyncOptions, TextDocumentSyncSaveOptions, WorkspaceFoldersServerCapabilities,
    WorkspaceServerCapabilities,
};
use tower_lsp_server::{Client, LanguageServer, LspService};

/// State shared by every handler.
pub struct State {
    config: RwLock<Config>,
    workspace: RwLock<Option<Workspace>>,
    encoding: RwLock<PositionEncodingName>,
    ledger: ReadLedger,
    /// Used as the workspace when the client names none.
    fallback_root: PathBuf,
}

/// The LanguageServer implementation: converts and delegates.
pub struct Backend {
    client: Client,
    state: Arc<State>,
}

/// Options fixed when the daemon starts.
pub struct ServeOptions {
    pub config: Config,
    /// The workspace when the client sends no workspace folders or root URI.
    pub fallback_root: PathBuf,
}

/// Serves the protocol on the given streams until the client exits or disappears.
pub async fn serve<I, O>(stdin: I, stdout: O, options: ServeOptions)
where
    I: tokio::io::AsyncRead + Unpin,
    O: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let state = Arc::new(State {
        config: RwLock::new(options.config),
        workspace: RwLock::new(None),
        encoding: RwLock::new(PositionEncodingName::Utf16),
        ledger: ReadLedger::default(),
        fallback_root: options.fallback_root,
    });
    let mut builder = LspService::build(|client| Backend { client, state })
        .custom_method("pen/callTool", Backend::call_tool)
        .custom_method("pen/listTools", Backend::list_tools)
        .custom_method("pen/getConfig", Backend::get_config)
        .custom_method("pen/setConfig", Backend::set_config);
    if std::env::var_os(TEST_HOOKS_VAR).is_some() {
        builder = builder.custom_method("pen/test/panic", Backend::test_panic);
    }
    let (service, socket) = builder.finish();
    transport::serve(stdin, stdout, CatchPanic(service), socket).await;
}

/// Set to expose `pen/test/panic`, which the tests use to check that a panicking handler is
/// answered with an InternalError and the daemon keeps serving.
const TEST_HOOKS_VAR: &str = "PEN_TEST_HOOKS";

impl Backend {
    async fn test_panic(&self) -> jsonrpc::Result<Value> {
        panic!("pen/test/panic was called");
    }

    async fn call_tool(&self, params: CallToolParams) -> jsonrpc::Result<Value> {
        let state = Arc::clone(&self.state);
        let outcome =
            tokio::task::spawn_blocking(move || state.run_tool(&params.name, &params.arguments))
                .await
                .map_err(|e| internal(&format!("the tool call failed: {e}")))??;
        Ok(outcome)
    }

    async fn list_tools(&self) -> jsonrpc::Result<Value> {
        serde_json::to_value(tools::catalog()).map_err(|e| internal(&e.to_string()))
    }

    async fn get_config(&self) -> jsonrpc::Result<Value> {
        Ok(read(&self.state.config).to_json())
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

impl State {
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
            ledger: Some(&self.ledger),
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
        let encoding =
            PositionEncodingName::negotiate(offered.map(|v| v.as_slice()).unwrap_or(&[]));
        *write(&self.state.encoding) = encoding;
        Ok(InitializeResult {
            capabilities: ServerCapabilities {
                position_encoding: Some(encoding.kind()),
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
    }

    async fn shutdown(&self) -> jsonrpc::Result<()> {
        Ok(())
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
        if let Err(err) = self.state.set_roots(roots) {
            self.client.show_message(MessageType::ERROR, err).await;
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

/// Catches a panic in any handler and answers the request with an InternalError, so one bad
/// request never takes the daemon down.
struct CatchPanic<S>(S);

impl<S> Service<Request> for CatchPanic<S>
where
    S: Service<Request, Response = Option<Response>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = Option<Response>;
    type Error = S::Error;
    type Future = futures::future::BoxFuture<'static, Result<Option<Response>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let id = request.id().cloned();
        let method = request.method().to_string();
        let future = AssertUnwindSafe(self.0.call(request)).catch_unwind();
        Box::pin(async move {
            match future.await {
                Ok(result) => result,
                Err(panic) => {
                    let what = panic
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_default();
                    tracing::error!(%method, "handler panicked: {what}");
                    Ok(id.map(|id| {
                        Response::from_error(
                            id,
                            internal(&format!("pen failed while handling {method}: {what}")),
                        )
                    }))
                }
            }
        })
    }
}
