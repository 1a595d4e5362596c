//! The tools of a turn ([`TurnTools`]): the native tools over a workspace, its limits, the
//! session's read ledger and, under the daemon, the editor's open documents ([`LocalTools`]),
//! then the turn's MCP servers' tools; each one a [`Tool`] the engine calls alike.

use super::ToolHost;
use crate::limits::Limits;
use crate::tools::registry::{self, Execution, Preview, ToolKind, ToolSpec};
use crate::tools::subject::Subject;
use crate::tools::write::{self, EditPlan};
use crate::tools::{
    self, Editor, Prepared, ReadLedger, Recorder, Tool, ToolContext, ToolError, WriteRecorder,
};
use crate::workspace::Workspace;
use futures::future::BoxFuture;
use serde_json::Value;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Runs tools for a turn.
pub struct LocalTools {
    pub workspace: Workspace,
    pub limits: Limits,
    pub ledger: Arc<ReadLedger>,
    pub editor: Option<Arc<dyn Editor + Send + Sync>>,
    /// The editor of the tools that look through the workspace ([`ToolKind::Search`]) when it
    /// is not `editor`: under ACP, the client's files already read through it, so a search
    /// never asks the client for every file of the workspace. `None`: `editor`.
    pub search_editor: Option<Arc<dyn Editor + Send + Sync>>,
    /// Sees each edit planned for approval and each file write on its way to the turn's
    /// recorder (ACP shows an edit's whole old and new text); `None` for a front end that
    /// does not.
    pub watch: Option<Arc<dyn WriteWatch>>,
    /// `limits` with pages fitted to the turn's prompt budget, once the engine knows it
    /// ([`ToolHost::fit_pages`]); `Default::default()` when building one.
    pub fitted: FittedLimits,
}

impl LocalTools {
    /// The tools of `workspace` under `limits` with nothing else: a fresh read ledger, no
    /// editor, no watch, pages not yet fitted.
    pub fn new(workspace: Workspace, limits: Limits) -> Self {
        LocalTools {
            workspace,
            limits,
            ledger: Arc::default(),
            editor: None,
            search_editor: None,
            watch: None,
            fitted: FittedLimits::default(),
        }
    }
}

/// A watcher of a turn's file writes: a wrapper of the turn's [`WriteRecorder`] (the
/// checkpoints), so a front end sees the bytes pen planned and writes, never a later read of
/// the file.
pub trait WriteWatch: Send + Sync {
    /// An edit planned for approval (its diff is what the owner is shown).
    fn planned(&self, plan: &EditPlan);
    /// Runs `write`, a call that writes the file it names `named`, with the recorder it is to
    /// hand its writes to: `recorder`, the turn's, wrapped to watch them.
    fn around(
        &self,
        named: &str,
        recorder: Option<&dyn WriteRecorder>,
        write: WriteCall<'_>,
    ) -> Result<Value, ToolError>;
}

/// A call that writes, run by [`WriteWatch::around`] with the recorder it is to use.
pub type WriteCall<'a> =
    Box<dyn FnOnce(Option<&dyn WriteRecorder>) -> Result<Value, ToolError> + 'a>;

/// The limits a turn's engine fitted to its prompt budget (SPEC §3): set once,
/// at the start of the turn, before any tool runs or the model is sent the catalog (which
/// states the fitted page).
#[derive(Debug, Default)]
pub struct FittedLimits(std::sync::OnceLock<Limits>);

#[cfg(test)]
impl FittedLimits {
    /// Limits fitted already, which the turn's fit leaves as they are: a host whose results the
    /// fit does not bound (as an MCP tool's are not).
    pub fn unfitted(limits: Limits) -> FittedLimits {
        FittedLimits(std::sync::OnceLock::from(limits))
    }
}

impl LocalTools {
    /// The limits the tools run under: fitted to the turn's budget when the engine did so.
    pub fn limits(&self) -> &Limits {
        self.fitted.0.get().unwrap_or(&self.limits)
    }

    fn context<'a>(&'a self, recorder: Option<&'a dyn WriteRecorder>) -> ToolContext<'a> {
        self.context_with(self.editor.as_ref(), recorder)
    }

    fn context_with<'a>(
        &'a self,
        editor: Option<&'a Arc<dyn Editor + Send + Sync>>,
        recorder: Option<&'a dyn WriteRecorder>,
    ) -> ToolContext<'a> {
        ToolContext {
            workspace: &self.workspace,
            limits: self.limits(),
            ledger: Some(&self.ledger),
            editor: editor.map(|e| e.as_ref() as &dyn Editor),
            recorder,
        }
    }

    /// Runs a blocking tool (called on a blocking thread); pen_create and pen_edit record
    /// their writes with `recorder` (and the watch, if any) before making them.
    fn call(
        &self,
        spec: &ToolSpec,
        arguments: &Value,
        recorder: Option<&dyn WriteRecorder>,
    ) -> Result<Value, ToolError> {
        if spec.kind() == ToolKind::Search
            && let Some(editor) = &self.search_editor
        {
            return spec.call(arguments, &self.context_with(Some(editor), None));
        }
        let named = arguments.get("path").and_then(Value::as_str);
        match (&self.watch, named) {
            (Some(watch), Some(named)) if spec.kind() == ToolKind::Edit => watch.around(
                named,
                recorder,
                Box::new(|recorder| spec.call(arguments, &self.context(recorder))),
            ),
            _ => spec.call(arguments, &self.context(recorder)),
        }
    }

    /// The catalog the model is given: every tool, described for this host's limits.
    fn catalog(&self) -> Vec<tools::CatalogEntry> {
        registry::catalog(self.limits())
    }

    /// Plans a pen_edit call for approval, computing it as the call would: the plan's diff is
    /// what the owner is shown, and [`LocalTools::apply_edit`] writes that same plan.
    fn plan_edit(&self, arguments: &Value) -> Result<EditPlan, ToolError> {
        write::check_write_size(arguments, self.limits())?;
        let plan = write::plan(tools::parse_arguments(arguments)?, &self.context(None))?;
        if let Some(watch) = &self.watch {
            watch.planned(&plan);
        }
        Ok(plan)
    }

    /// Writes an approved plan, if the file is still the text it was planned against; else
    /// fails `stale` and writes nothing.
    fn apply_edit(
        &self,
        plan: EditPlan,
        recorder: Option<&dyn WriteRecorder>,
    ) -> Result<Value, ToolError> {
        let Some(watch) = &self.watch else {
            return write::apply(plan, &self.context(recorder));
        };
        let named = plan.path().to_string();
        watch.around(
            &named,
            recorder,
            Box::new(|recorder| write::apply(plan, &self.context(recorder))),
        )
    }

    /// Runs a cancellable tool ([`registry::Execution::Cancellable`]) until it ends or
    /// `cancel` fires. It gets no read ledger and no editor: a command sees the disk.
    fn run_cancellable(
        &self,
        spec: &'static ToolSpec,
        arguments: Value,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Value, ToolError>> {
        let workspace = self.workspace.clone();
        let limits = self.limits().clone();
        Box::pin(async move {
            let ctx = ToolContext::plain(&workspace, &limits);
            spec.run(&arguments, &ctx, &cancel).await
        })
    }
}

/// A native tool of a turn: its registry entry, run over the turn's [`LocalTools`].
struct NativeTool {
    spec: &'static ToolSpec,
    local: Arc<LocalTools>,
}

impl Tool for NativeTool {
    fn read_only(&self) -> bool {
        self.spec.read_only()
    }

    fn needs_approval(&self, auto_approve: &[String]) -> bool {
        self.spec.needs_approval() && !auto_approve.iter().any(|t| t == self.spec.name())
    }

    fn subject(&self, arguments: &Value) -> Subject {
        self.spec.subject(arguments)
    }

    fn sets_plan(&self) -> bool {
        self.spec.sets_plan()
    }

    fn prepare(&self, arguments: Value) -> BoxFuture<'static, Result<Prepared, ToolError>> {
        if self.spec.preview() != Preview::Diff {
            return Box::pin(async move { Ok(Prepared::arguments(arguments)) });
        }
        // Planning reads the file (up to 16 MiB), hashes it and diffs it: a blocking thread.
        let local = Arc::clone(&self.local);
        Box::pin(tool_thread(move || {
            let plan = local.plan_edit(&arguments)?;
            Ok(Prepared::planned(arguments, plan))
        }))
    }

    fn run(
        &self,
        call: Prepared,
        recorder: Option<Recorder>,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Value, ToolError>> {
        let (arguments, plan) = call.into_parts();
        if plan.is_none() && self.spec.execution() == Execution::Cancellable {
            return self.local.run_cancellable(self.spec, arguments, cancel);
        }
        let (spec, local) = (self.spec, Arc::clone(&self.local));
        Box::pin(tool_thread(move || {
            let recorder = recorder.as_deref().map(|r| r as &dyn WriteRecorder);
            match plan {
                // The write is the plan whose diff the owner approved.
                Some(plan) => local.apply_edit(plan, recorder),
                None => local.call(spec, &arguments, recorder),
            }
        }))
    }

    fn observe(&self, result: &Result<Value, ToolError>) -> String {
        tools::observation(result, self.local.limits())
    }
}

/// Runs a tool's blocking work (file reads and writes, hashing, diffs) on a blocking thread.
async fn tool_thread<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    tokio::task::spawn_blocking(work).await.unwrap_or_else(|e| {
        Err(ToolError::new(
            tools::ErrorCode::Io,
            format!("the tool failed: {e}"),
        ))
    })
}

/// The tools of a turn: the native tools over `local`, then its MCP servers' tools, if any.
pub struct TurnTools {
    local: Arc<LocalTools>,
    mcp: Option<TurnMcp>,
}

/// A turn's MCP servers, and the result cap their results are cut to (`max_tool_result_bytes`),
/// as pen's own are.
struct TurnMcp {
    tools: Arc<crate::mcp::McpTools>,
    max_result_bytes: usize,
}

impl TurnTools {
    /// The native tools over `local` alone.
    pub fn native(local: LocalTools) -> TurnTools {
        TurnTools {
            local: Arc::new(local),
            mcp: None,
        }
    }

    /// The native tools over `local`, then the tools of `mcp`, whose results are cut to
    /// `max_result_bytes`.
    pub fn with_mcp(
        local: LocalTools,
        mcp: Arc<crate::mcp::McpTools>,
        max_result_bytes: usize,
    ) -> TurnTools {
        TurnTools {
            local: Arc::new(local),
            mcp: Some(TurnMcp {
                tools: mcp,
                max_result_bytes,
            }),
        }
    }
}

impl ToolHost for TurnTools {
    fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        if let Some(spec) = registry::get(name) {
            return Some(Arc::new(NativeTool {
                spec,
                local: Arc::clone(&self.local),
            }));
        }
        let mcp = self.mcp.as_ref()?;
        mcp.tools.get(name, mcp.max_result_bytes)
    }

    fn catalog(&self) -> Vec<tools::CatalogEntry> {
        let mut catalog = self.local.catalog();
        if let Some(mcp) = &self.mcp {
            catalog.extend(mcp.tools.catalog());
        }
        catalog
    }

    fn before_request(&self) -> BoxFuture<'_, Vec<crate::mcp::ServerNotice>> {
        Box::pin(async move {
            let Some(mcp) = &self.mcp else {
                return Vec::new();
            };
            mcp.tools.refresh().await;
            mcp.tools.take_notices()
        })
    }

    fn budget_hint(&self) -> Option<String> {
        let mcp = self.mcp.as_ref()?;
        mcp.tools.largest_server().map(|(server, tokens)| {
            format!(
                "MCP tool schemas count toward it; the largest are server `{server}`'s (about {tokens} tokens): leave tools out with mcp_servers.{server}.exclude_tools (or include_tools)"
            )
        })
    }

    fn workspace(&self) -> Option<&Workspace> {
        Some(&self.local.workspace)
    }

    fn fit_pages(&self, room_tokens: u64) {
        // Set once: the first fit of the turn stands (the engine fits at the turn's start).
        let _ = self
            .local
            .fitted
            .0
            .set(self.local.limits.clone().fitted_to_room(room_tokens));
    }
}

/// Asks to start a project's MCP server through a turn's [`Approver`]: an approval request of
/// kind [`super::ApprovalKind::StartMcpServer`], naming the server, its command line and the
/// workspace.
pub struct StartThroughApprover {
    pub approver: Arc<dyn super::Approver>,
    pub session_id: String,
    pub turn_id: String,
}

impl crate::mcp::StartApproval for StartThroughApprover {
    fn ask(
        &self,
        server: &str,
        command_line: &str,
        root: &std::path::Path,
    ) -> BoxFuture<'static, Result<crate::mcp::approvals::StartAnswer, String>> {
        let request = super::ApprovalRequest {
            session_id: self.session_id.clone(),
            turn_id: self.turn_id.clone(),
            call_id: format!("mcp_start_{server}"),
            kind: super::ApprovalKind::StartMcpServer {
                server: server.to_string(),
                command_line: command_line.to_string(),
                root: root.display().to_string(),
            },
            tool: super::START_MCP_SERVER.to_string(),
            summary: format!("{server}: {command_line}"),
            arguments: serde_json::json!({
                "server": server,
                "commandLine": command_line,
                "root": root.display().to_string(),
            }),
            diff: None,
            not_revertible: None,
        };
        let answer = self.approver.ask(request);
        Box::pin(async move {
            use crate::mcp::approvals::StartAnswer;
            // "Allow" is this time; "allow always" (the session grant's answer) is stored.
            Ok(match answer.await? {
                (super::Decision::Allow, _) => StartAnswer::Once,
                (super::Decision::AllowForSession, _) => StartAnswer::Always,
                (super::Decision::Deny, _) => StartAnswer::Deny,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::ErrorCode;
    use crate::tools::source::hash_bytes;
    use serde_json::json;

    fn host(root: &std::path::Path) -> LocalTools {
        LocalTools::new(
            Workspace::new(&[root.to_path_buf()]).unwrap(),
            Limits::default(),
        )
    }

    fn spec(name: &str) -> &'static ToolSpec {
        registry::get(name).unwrap()
    }

    /// Reads `f.txt` as the model would, so the ledger knows its text.
    fn read_file(host: &LocalTools) {
        host.call(spec("pen_read"), &json!({"path": "f.txt"}), None)
            .unwrap();
    }

    #[test]
    fn the_approved_diff_and_the_written_bytes_come_from_one_plan() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f.txt");
        std::fs::write(&file, "fn a() {}\n").unwrap();
        let host = host(dir.path());
        assert_eq!(host.catalog(), registry::catalog(&Limits::default()));
        read_file(&host);
        let arguments = json!({"path": "f.txt", "edits": [{"old_text": "a()", "new_text": "b()"}]});
        let plan = host.plan_edit(&arguments).unwrap();
        let shown = plan.diff().to_string();
        assert!(shown.contains("-fn a() {}\n+fn b() {}\n"), "{shown}");
        assert_eq!(plan.planned_hash(), hash_bytes(b"fn a() {}\n"));
        let planned = plan.new_bytes().to_vec();
        let result = host.apply_edit(plan, None).unwrap();
        assert_eq!(std::fs::read(&file).unwrap(), planned);
        assert_eq!(result["diff"], shown);

        // Changed while the owner looked at the diff: stale, and the change is kept.
        let plan = host
            .plan_edit(&json!({"path": "f.txt", "edits": [{"old_text": "b()", "new_text": "c()"}]}))
            .unwrap();
        std::fs::write(&file, "fn b() { owner }\n").unwrap();
        let err = host.apply_edit(plan, None).unwrap_err();
        assert_eq!(err.code, ErrorCode::Stale, "{}", err.message);
        assert_eq!(std::fs::read(&file).unwrap(), b"fn b() { owner }\n");
    }

    #[test]
    fn an_edit_too_large_to_write_is_refused_before_the_owner_is_asked() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f.txt"), "x\n").unwrap();
        let host = host(dir.path());
        read_file(&host);
        let big = "y".repeat(host.limits.max_write_argument_bytes);
        let arguments = json!({"path": "f.txt", "edits": [{"old_text": "x", "new_text": big}]});
        let err = host.plan_edit(&arguments).unwrap_err();
        assert_eq!(err.code, ErrorCode::TooLarge, "{}", err.message);
        assert_eq!(
            host.call(spec("pen_edit"), &arguments, None)
                .unwrap_err()
                .code,
            ErrorCode::TooLarge
        );
    }

    #[tokio::test]
    async fn the_turn_s_tools_are_the_native_ones_then_its_mcp_servers() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f.txt"), "fn a() {}\n").unwrap();
        let cancel = CancellationToken::new();
        let servers = crate::mcp::McpManager::new(None)
            .prepare(&Default::default(), dir.path(), None, &cancel)
            .await;
        let tools = TurnTools::with_mcp(host(dir.path()), servers, 1_024);
        assert_eq!(tools.catalog(), registry::catalog(&Limits::default()));
        let tool = |name: &str| tools.get(name).unwrap();
        for name in ["pen_read", "pen_find"] {
            assert!(tool(name).read_only(), "{name}");
            assert!(!tool(name).needs_approval(&[]), "{name}");
        }
        assert!(tool("pen_edit").needs_approval(&[]));
        assert!(!tool("pen_edit").needs_approval(&["pen_edit".into()]));
        assert!(tools.get("nope").is_none());
        // A name of an MCP server's tool is an MCP tool even when no server has it now: it runs
        // alone, asks unless its exact name is allowed, and its call says what became of it.
        let mcp = tool("mcp__gone__t");
        assert!(!mcp.read_only());
        assert!(mcp.needs_approval(&["mcp__gone__*".into()]));
        assert!(!mcp.needs_approval(&["mcp__gone__t".into()]));
        let result = mcp.run(Prepared::arguments(json!({})), None, cancel).await;
        assert_eq!(result.as_ref().unwrap_err().code, ErrorCode::UnknownTool);
        assert!(
            mcp.observe(&result)
                .contains("its server no longer lists it")
        );
        let native = TurnTools::native(host(dir.path()));
        assert!(native.get("mcp__gone__t").is_none());

        // An edit prepared for the owner is the plan its run writes.
        read_file(&native.local);
        let edit = native.get("pen_edit").unwrap();
        let arguments = json!({"path": "f.txt", "edits": [{"old_text": "a()", "new_text": "b()"}]});
        let prepared = edit.prepare(arguments.clone()).await.unwrap();
        let shown = prepared.plan().unwrap().diff().to_string();
        let result = edit
            .run(prepared, None, CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(result["diff"], shown);
        assert_eq!(
            std::fs::read(dir.path().join("f.txt")).unwrap(),
            b"fn b() {}\n"
        );
        let create = native.get("pen_create").unwrap();
        let prepared = create.prepare(json!({"path": "g.txt"})).await.unwrap();
        assert!(prepared.plan().is_none(), "only an edit shows a diff");
    }
}
