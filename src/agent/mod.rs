//! The agent loop (SPEC §5): one turn of prompt → (request → answer → tool calls → results)*
//! → final answer, durable at every step, stoppable at every point.
//!
//! Architecture invariants:
//! - Every entry is committed to the session store before the next provider request.
//! - Every tool call in the transcript gets exactly one result: its outcome, "denied by the
//!   owner", "approval no longer applies", "not executed (stopped)", or "outcome unknown".
//!   Calls a crash cut off are answered at the next turn's start by the store's recovery,
//!   driven by each assistant message's call list ("interrupted; outcome unknown" when the
//!   call may have started, "not executed" when it cannot have).
//! - A turn runs under its session's lease ([`TurnLease`]): one running turn per session across
//!   processes, and recovery only under the lease. The lease is released when the turn ends,
//!   whatever ends it.
//! - A history the planner refuses after that recovery cannot be repaired by appending: the
//!   turn ends `error` with kind `history_unrepairable`, naming the entry.
//! - Every request is planned by [`crate::budget`] under `context_window_tokens −
//!   max_output_tokens − budget_margin_tokens`, estimated with a ratio calibrated from the
//!   provider's reported usage, with the policy `budget_policy` names; a plan that cuts
//!   something new is an event entry and a `context_trimmed` event. A policy-4 compaction is
//!   recorded (`context_compacted`) before the request that needs it goes out, so every later
//!   request, in this daemon or a resumed one, renders the same prefix.
//! - A context-window rejection never re-runs a tool: it is recorded (later requests plan under
//!   its estimate), the newest group of large results is cut (in the outbound request only; the
//!   decision is an event entry) and the request retried once.
//! - The loop never reads provider wording; backends classify their errors.

mod checkpoint;
mod context;
mod engine;
mod events;
mod focus;
mod history;
mod host;
mod lease;
mod request;
mod runner;
mod setup;
mod system_prompt;
mod turn;

pub use crate::providers::choice::{NO_PROVIDER, provider_from_config};
pub use checkpoint::TurnRecorder;
pub use context::{environment, gather, render_file, root_instructions, system_text};
pub use events::{
    AgentEvent, EventKind, InstructionSummary, RequestUsage, Trim, TurnEvent, window_line,
};
pub use focus::{Focus, Lines, parse_file_arg, render_focus, withheld_client_text};
pub use history::{CONTEXT_TRIMMED, CONTEXT_WINDOW_REJECTED, SHRUNK_HEAD_BYTES};
pub use host::{LocalTools, StartThroughApprover, TurnTools, WriteCall, WriteWatch};
pub use lease::TurnLease;
pub use request::catalog_limits;
pub use runner::{BeginError, Engine, PendingTurn, TurnSpec};
pub use setup::{Channel, Outgoing, TurnSetup};
pub use system_prompt::SYSTEM_PROMPT;
pub use turn::provider_error_kind;

use crate::providers::Usage;
use crate::tools::{self, Tool};
use futures::future::BoxFuture;
use serde_json::Value;
use std::sync::Arc;

/// Result texts the model reads for calls that did not run normally. Each is distinct, so the
/// model (and the owner reading the transcript) can tell them apart.
pub const NOT_EXECUTED_STOPPED: &str =
    "not executed (stopped): the owner stopped the turn before this call ran";
pub const DENIED_BY_OWNER: &str =
    "denied by the owner: do not retry this call without asking the owner first";
pub const OUTCOME_UNKNOWN_STOPPED: &str =
    "stopped while running: outcome unknown — inspect the state before retrying";

pub use crate::transcript::{StopReason, TurnErrorKind};

/// How a turn ended: what `pen/prompt` and `pen run --json` report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnOutcome {
    pub stop_reason: StopReason,
    pub last_error: Option<String>,
    /// What kind of failure `last_error` is: clients act on it rather than on the wording.
    pub error_kind: Option<TurnErrorKind>,
    /// The usage the turn's requests reported, summed; `None` when none reported any.
    pub usage: Option<Usage>,
    /// The session's usage so far, this turn included; `None` when nothing reported any.
    pub session_usage: Option<Usage>,
}

/// The end of `last_error` for a history that cannot be repaired.
pub const HISTORY_UNREPAIRABLE_ADVICE: &str = "pen cannot repair this by answering the calls left without a result, so no turn can \
     run in this session again: start a new session (pen/newSession) and carry over what matters";

/// The owner's answer to an approval request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allow,
    AllowForSession,
    Deny,
}

/// What the owner is asked to approve.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalRequest {
    pub session_id: String,
    pub turn_id: String,
    pub call_id: String,
    /// What it is for: the wire sends a tagged union from it.
    pub kind: ApprovalKind,
    /// The call's tool, or [`START_MCP_SERVER`] (a label for front ends that show one).
    pub tool: String,
    /// What the call works on, in a line, as its tool computes it (for a server's start: the
    /// server and its command line).
    pub summary: String,
    pub arguments: Value,
    /// For pen_edit: the unified diff the edit would make.
    pub diff: Option<String>,
    /// Set when the write could not be reverted: its file's pre-image is over the session's
    /// checkpoint store limit (`checkpoint_store_bytes`), so the owner knows before the write.
    pub not_revertible: Option<String>,
    /// The session's permission mode when it asked.
    pub mode: crate::mode::Mode,
    /// For a tool call: what would have let it run without asking (a mode, `auto_approve`), for
    /// a front end that cannot ask ([`crate::mode::unlock_hint`]).
    pub would_allow: Option<String>,
}

/// What an approval is for.
#[derive(Debug, Clone, PartialEq)]
pub enum ApprovalKind {
    /// A tool call the model made (`tool`, `arguments`, and for an edit `diff`).
    ToolCall,
    /// A project's MCP server (`.mcp.json`) asks once before it first runs: the exact command
    /// line is what the owner approves. `arguments` names them too, for front ends that show
    /// arguments.
    StartMcpServer {
        server: String,
        command_line: String,
        root: String,
    },
}

/// The owner's answer and an optional reason, or why the owner could not be asked (the client
/// went away): then the authority to run the call is revoked.
pub type ApprovalAnswer = Result<(Decision, Option<String>), String>;

/// The owner's side of approvals (the editor, or a headless policy).
pub trait Approver: Send + Sync {
    fn ask(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalAnswer>;
}

/// The tools of a turn and what the loop needs of their context: the workspace they run in,
/// their pages fitted to the turn's budget, and their MCP servers brought up to date.
pub trait ToolHost: Send + Sync {
    /// The tool the model calls `name`: a native one, else an MCP server's as the latest
    /// [`ToolHost::before_request`] left them. `None`: no tool has the name.
    fn get(&self, name: &str) -> Option<Arc<dyn Tool>>;
    /// The catalog the model is given: the native tools, then the MCP tools.
    fn catalog(&self) -> Vec<tools::CatalogEntry>;
    /// Brings the MCP tools up to date before a request; the server changes to report.
    fn before_request(&self) -> BoxFuture<'_, Vec<crate::mcp::ServerNotice>> {
        Box::pin(async { Vec::new() })
    }
    /// What to add to a "does not fit the prompt budget" failure (the MCP server whose tool
    /// schemas are largest, and how to leave tools out).
    fn budget_hint(&self) -> Option<String> {
        None
    }
    /// The workspace the tools run in: where the session's instruction files are read. `None`
    /// for a host without one (then requests carry pen's prompt alone).
    fn workspace(&self) -> Option<&crate::workspace::Workspace> {
        None
    }
    /// Fits the pages of the host's tools to `room_tokens`, what the turn's prompt budget
    /// leaves after its system prompt and tool schemas (SPEC §3: `Limits::fitted_to_room`); the
    /// engine calls it once, as the turn starts. A host without pages ignores it.
    fn fit_pages(&self, _room_tokens: u64) {}
    /// What to tell the owner, once per process, when the OS sandbox for commands is on but
    /// the kernel cannot do it; `None` otherwise or once told.
    fn sandbox_notice(&self) -> Option<String> {
        None
    }
}

/// The `tool` label of an [`ApprovalRequest`] that asks to start a project's MCP server (never
/// a tool's name: it has spaces); its `kind` says what it is.
pub const START_MCP_SERVER: &str = "start MCP server";

#[cfg(test)]
mod tests;
