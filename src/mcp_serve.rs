//! `pen mcp serve`: pen's native tools offered to other agents as an MCP server on stdio (a
//! module of its own: it builds on `agent`, which builds on the MCP client in `mcp`).
//!
//! Architecture invariants:
//! - A call runs through the same [`Tool`] seam as the model's own calls ([`TurnTools`] over a
//!   [`LocalTools`]): the same schemas, limits, caps, cursors, key refusal and confinement. The
//!   server adds no tool code of its own.
//! - What is offered is the owner's choice ([`Offer`]): the read-only tools always, pen_create
//!   and pen_edit only with `--allow-writes`, pen_command only with `--allow-commands`, and
//!   pen's own session state (pen_plan, [`ToolSpec::sets_plan`]) or a tool of
//!   [`ToolKind::Other`] never. A tool not offered is not
//!   listed, and a call of it is a tool error that says which flag offers it.
//! - Each write is recorded before it is made, as a turn of its own in one session of the
//!   session store, so `pen revert SESSION` puts the last write back.
//! - A result is the tool's JSON object as `structuredContent` and the observation the model
//!   would read as text; a result over `max_tool_result_bytes` is the capped text alone (JSON
//!   cannot be cut and stay JSON), whose note says how to ask for less.

use crate::agent::{LocalTools, ToolHost, TurnRecorder, TurnTools};
use crate::limits::Limits;
use crate::session::{NewEntry, SessionStore};
use crate::tools::registry::{self, ToolKind, ToolSpec, Writes};
use crate::tools::{self, ErrorCode, Recorder, Tool, ToolError};
use crate::transcript::{CallOutcome, CallStarted, Item, ToolResult};
use crate::workspace::Workspace;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde_json::Value;
use std::sync::{Arc, Mutex};

/// Which of pen's tools the owner lets the client call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Offer {
    /// `--allow-writes`: pen_create and pen_edit.
    pub writes: bool,
    /// `--allow-commands`: pen_command.
    pub commands: bool,
}

impl Offer {
    /// Whether `spec` is offered; `Err` names the flag that would offer it (or why it never is).
    pub fn check(self, spec: &ToolSpec) -> Result<(), String> {
        if spec.sets_plan() {
            return Err(format!(
                "{} is pen's own session state and not offered over MCP",
                spec.name()
            ));
        }
        match spec.kind() {
            ToolKind::Read | ToolKind::Search if spec.read_only() => Ok(()),
            ToolKind::Edit if spec.writes() == Writes::Recorded => {
                if self.writes {
                    Ok(())
                } else {
                    Err(format!(
                        "{} is not offered: the owner started `pen mcp serve` without --allow-writes",
                        spec.name()
                    ))
                }
            }
            ToolKind::Execute => {
                if self.commands {
                    Ok(())
                } else {
                    Err(format!(
                        "{} is not offered: the owner started `pen mcp serve` without --allow-commands",
                        spec.name()
                    ))
                }
            }
            _ => Err(format!(
                "{} is pen's own and not offered over MCP",
                spec.name()
            )),
        }
    }
}

/// The MCP annotations of a native tool, from its registry entry: a read-only tool says so; a
/// tool that changes the world is destructive unless it only creates (pen_create refuses a
/// file that exists).
pub fn annotations(spec: &ToolSpec) -> ToolAnnotations {
    let read_only = spec.read_only();
    let annotations = ToolAnnotations::new().read_only(read_only);
    if read_only {
        annotations
    } else {
        annotations.destructive(spec.preview() == registry::Preview::Diff || !spec.revertible())
    }
}

/// The session the writes of one `pen mcp serve` are recorded in, made at the first write.
struct Journal {
    store: Arc<SessionStore>,
    title: String,
    session_id: Mutex<Option<String>>,
    /// `checkpoint_store_bytes`.
    limit: u64,
}

impl Journal {
    fn session(&self) -> Result<String, String> {
        let mut session = self.session_id.lock().map_err(|e| e.to_string())?;
        if let Some(id) = session.as_ref() {
            return Ok(id.clone());
        }
        let id = self
            .store
            .new_session(Some(&self.title))
            .map_err(|e| e.to_string())?
            .id;
        eprintln!(
            "pen mcp serve: writes are recorded in session {id}; `pen revert {id}` undoes the last"
        );
        *session = Some(id.clone());
        Ok(id)
    }
}

/// The MCP server: the offered tools over one workspace.
pub struct PenServer {
    tools: TurnTools,
    offer: Offer,
    limits: Limits,
    journal: Option<Arc<Journal>>,
}

impl PenServer {
    /// A server over `workspace` under `limits`, offering what `offer` lets it; writes are
    /// recorded in `store` (no store: writes are refused), commands run in `sandbox`.
    pub fn new(
        workspace: Workspace,
        limits: Limits,
        offer: Offer,
        store: Option<(Arc<SessionStore>, u64)>,
        sandbox: crate::sandbox::CommandSandbox,
    ) -> PenServer {
        let title = format!(
            "pen mcp serve on {}",
            workspace
                .roots()
                .iter()
                .map(|root| root.path.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        let journal = store.map(|(store, limit)| {
            Arc::new(Journal {
                store,
                title,
                session_id: Mutex::new(None),
                limit,
            })
        });
        let mut local = LocalTools::new(workspace, limits.clone());
        local.sandbox = sandbox;
        PenServer {
            tools: TurnTools::native(local),
            offer,
            limits,
            journal,
        }
    }

    /// The offered tools as MCP lists them.
    pub fn listed(&self) -> Vec<rmcp::model::Tool> {
        registry::native()
            .iter()
            .filter(|spec| self.offer.check(spec).is_ok())
            .map(|spec| {
                let entry = spec.describe(&self.limits);
                let schema = match entry.input_schema {
                    Value::Object(schema) => schema,
                    _ => serde_json::Map::new(),
                };
                rmcp::model::Tool::new(entry.name, entry.description, schema)
                    .with_annotations(annotations(spec))
            })
            .collect()
    }

    /// Runs one call to its result as the client is sent it.
    async fn call(
        &self,
        name: &str,
        arguments: Value,
        cancel: tokio_util::sync::CancellationToken,
    ) -> CallToolResult {
        let offered = registry::get(name)
            .ok_or(())
            .and_then(|spec| self.offer.check(spec).map_err(|_| ()));
        let (spec, tool) = match (registry::get(name), self.tools.get(name)) {
            (Some(spec), Some(tool)) if offered.is_ok() => (spec, tool),
            (Some(spec), _) => {
                let why = self.offer.check(spec).err().unwrap_or_default();
                return self.result(&Err(ToolError::new(ErrorCode::UnknownTool, why)));
            }
            _ => {
                let listed = self.listed();
                let names = listed.iter().map(|tool| tool.name.as_ref());
                return self.result(&Err(registry::unknown_among(name, names)));
            }
        };
        if let Err(why) = confined_only(tool.as_ref(), &arguments) {
            return self.result(&Err(why));
        }
        if spec.writes() != Writes::Recorded {
            let result = run(tool.as_ref(), arguments, None, cancel).await;
            return self.result(&result);
        }
        let result = match &self.journal {
            Some(journal) => self.recorded(journal, name, tool, arguments, cancel).await,
            None => Err(ToolError::new(
                ErrorCode::Io,
                "writes cannot be recorded: pen has no session store here (PEN_DATA_DIR)",
            )),
        };
        self.result(&result)
    }

    /// Runs a call that writes as a turn of its own in the journal's session, recording its
    /// writes before they are made so `pen revert` can put them back.
    async fn recorded(
        &self,
        journal: &Arc<Journal>,
        name: &str,
        tool: Arc<dyn Tool>,
        arguments: Value,
        cancel: tokio_util::sync::CancellationToken,
    ) -> Result<Value, ToolError> {
        let store_failed =
            |e: String| ToolError::new(ErrorCode::Io, format!("the session store failed: {e}"));
        let turn_id = format!("t_{}", uuid::Uuid::now_v7().simple());
        let call_id = format!("mcp_{}", uuid::Uuid::now_v7().simple());
        let session_id = {
            let journal = Arc::clone(journal);
            let (turn_id, call_id, name, arguments) = (
                turn_id.clone(),
                call_id.clone(),
                name.to_string(),
                arguments.clone(),
            );
            tokio::task::spawn_blocking(move || {
                let session_id = journal.session()?;
                let started = Item::ToolCall(CallStarted {
                    call_id,
                    name,
                    arguments,
                });
                journal
                    .store
                    .append(&session_id, &NewEntry::item(Some(turn_id), &started))
                    .map_err(|e| e.to_string())?;
                Ok::<_, String>(session_id)
            })
            .await
            .map_err(|e| e.to_string())
            .and_then(|session| session)
            .map_err(store_failed)?
        };
        let recorder: Recorder = Arc::new(TurnRecorder {
            store: Arc::clone(&journal.store),
            session_id: session_id.clone(),
            turn_id: turn_id.clone(),
            call_id: call_id.clone(),
            limit: journal.limit,
        });
        let result = run(tool.as_ref(), arguments, Some(recorder), cancel).await;
        let finished = Item::ToolResult(ToolResult {
            call_id,
            name: Some(name.to_string()),
            content: tool.observe(&result),
            is_error: result.is_err(),
            outcome: Some(if result.is_ok() {
                CallOutcome::Done
            } else {
                CallOutcome::Error
            }),
        });
        let store = Arc::clone(&journal.store);
        let appended = tokio::task::spawn_blocking(move || {
            store.append(&session_id, &NewEntry::item(Some(turn_id), &finished))
        })
        .await;
        if let Err(e) = appended
            .map_err(|e| e.to_string())
            .and_then(|r| r.map_err(|e| e.to_string()))
        {
            tracing::warn!("pen mcp serve: recording a write's result failed: {e}");
        }
        result
    }

    /// A tool's result as MCP carries it: the object as `structuredContent` and the capped
    /// observation as text; over the cap, the capped text alone.
    fn result(&self, result: &Result<Value, ToolError>) -> CallToolResult {
        let text = tools::observation(result, &self.limits);
        let value = match result {
            Ok(value) => value.clone(),
            Err(err) => err.to_value(),
        };
        let whole = text.len() == value.to_string().len();
        let mut answer = if result.is_ok() {
            CallToolResult::success(vec![ContentBlock::text(text)])
        } else {
            CallToolResult::error(vec![ContentBlock::text(text)])
        };
        if whole {
            answer.structured_content = Some(value);
        }
        answer
    }
}

/// A command runs here only as pen would run it without asking its owner: inside the OS
/// sandbox (or with the owner's rights where the owner's config turned the sandbox off). pen
/// cannot ask its owner from `pen mcp serve`, so a call asking to leave the sandbox, or one
/// on a kernel that cannot sandbox, is refused rather than run unconfined.
fn confined_only(tool: &dyn Tool, arguments: &Value) -> Result<(), ToolError> {
    use crate::sandbox::Confinement;
    match tool.confinement(arguments) {
        Confinement::LeavesSandbox => Err(ToolError::new(
            ErrorCode::InvalidArguments,
            "pen mcp serve runs commands only inside pen's OS sandbox: \"sandbox\": \"off\" is \
             refused here (the owner may set sandbox = \"off\" in pen's config)",
        )),
        Confinement::Unsupported => Err(ToolError::new(
            ErrorCode::ToolFailed,
            "this kernel cannot sandbox commands, and pen mcp serve runs them only sandboxed \
             (the owner may set sandbox = \"off\" in pen's config to run them unconfined)",
        )),
        _ => Ok(()),
    }
}

/// Runs a call through the seam: prepared (an edit planned), then run.
async fn run(
    tool: &dyn Tool,
    arguments: Value,
    recorder: Option<Recorder>,
    cancel: tokio_util::sync::CancellationToken,
) -> Result<Value, ToolError> {
    let prepared = tool.prepare(arguments).await?;
    tool.run(prepared, recorder, cancel).await
}

impl ServerHandler for PenServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("pen", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "pen's bounded tools over the owner's workspace: reads page with a cursor, \
                 searches resume, results are capped; key files and paths outside the roots \
                 are refused.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.listed()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        Ok(self.call(&request.name, arguments, context.ct).await.into())
    }
}

/// Serves `server` on stdin/stdout until the client closes them.
pub async fn serve_stdio(server: PenServer) -> Result<(), String> {
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| format!("the MCP client did not connect: {e}"))?;
    running
        .waiting()
        .await
        .map(|_| ())
        .map_err(|e| format!("the MCP session failed: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str) -> &'static ToolSpec {
        registry::get(name).unwrap()
    }

    fn offered(offer: Offer) -> Vec<&'static str> {
        registry::native()
            .iter()
            .filter(|spec| offer.check(spec).is_ok())
            .map(|spec| spec.name())
            .collect()
    }

    #[test]
    fn the_read_only_tools_are_offered_and_writes_and_commands_only_when_allowed() {
        let reads = ["pen_search", "pen_list", "pen_find", "pen_read", "pen_tail"];
        assert_eq!(offered(Offer::default()), reads);
        let writes = Offer {
            writes: true,
            commands: false,
        };
        assert_eq!(
            offered(writes),
            [&reads[..], &["pen_create", "pen_edit"]].concat()
        );
        let commands = Offer {
            writes: false,
            commands: true,
        };
        assert_eq!(offered(commands), [&reads[..], &["pen_command"]].concat());
        let refused = Offer::default().check(spec("pen_edit")).unwrap_err();
        assert!(refused.contains("--allow-writes"), "{refused}");
        let refused = writes.check(spec("pen_command")).unwrap_err();
        assert!(refused.contains("--allow-commands"), "{refused}");
        // pen_plan is the session's own state: never offered.
        let all = Offer {
            writes: true,
            commands: true,
        };
        assert!(all.check(spec("pen_plan")).is_err());
        for spec in registry::native() {
            if all.check(spec).is_err() {
                assert_eq!(spec.kind(), ToolKind::Other, "{}", spec.name());
            }
        }
    }

    #[test]
    fn annotations_come_from_the_registry() {
        let hints = |name: &str| {
            let a = annotations(spec(name));
            (a.read_only_hint, a.destructive_hint)
        };
        assert_eq!(hints("pen_read"), (Some(true), None));
        assert_eq!(hints("pen_search"), (Some(true), None));
        // pen_create refuses a file that exists: additive, not destructive.
        assert_eq!(hints("pen_create"), (Some(false), Some(false)));
        assert_eq!(hints("pen_edit"), (Some(false), Some(true)));
        assert_eq!(hints("pen_command"), (Some(false), Some(true)));
    }

    #[test]
    fn a_result_over_the_cap_is_the_capped_text_alone() {
        let dir = tempfile::tempdir().unwrap();
        let workspace = Workspace::new(&[dir.path().to_path_buf()]).unwrap();
        let limits = Limits {
            max_tool_result_bytes: 64,
            ..Limits::default()
        };
        let server = PenServer::new(
            workspace,
            limits,
            Offer::default(),
            None,
            crate::sandbox::CommandSandbox::off(),
        );
        let small = server.result(&Ok(serde_json::json!({"ok": true})));
        assert_eq!(
            small.structured_content,
            Some(serde_json::json!({"ok": true}))
        );
        assert_eq!(small.is_error, Some(false));
        let big = server.result(&Ok(serde_json::json!({"text": "x".repeat(500)})));
        assert_eq!(big.structured_content, None);
        let text = serde_json::to_value(&big.content[0]).unwrap();
        assert!(text["text"].as_str().unwrap().len() <= 64, "{text}");
    }
}
