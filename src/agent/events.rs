//! The live events of a turn: a closed set, each with its typed data. `protocol` turns them
//! into `pen/event` notifications (and `pen run --json` lines); nothing here knows the wire.

use super::{ApprovalRequest, TurnOutcome};
use crate::transcript::{CallOutcome, TrimReport};
use serde_json::Value;

/// One progress event of a turn.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentEvent {
    pub session_id: String,
    pub turn_id: String,
    /// 1, 2, 3… within the turn.
    pub seq: u64,
    pub event: TurnEvent,
}

/// What happened.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnEvent {
    /// Answer text as it streams in.
    TextDelta { text: String },
    /// A call is about to run (or to be asked about). `arguments` is `None` when the model's
    /// arguments were not JSON.
    ToolCallStarted {
        call_id: String,
        tool: String,
        arguments: Option<Value>,
    },
    /// The owner is asked to approve a call.
    ApprovalRequested(ApprovalRequest),
    /// Stop came while the owner was being asked: the question no longer stands.
    ApprovalWithdrawn { call_id: String },
    /// A call has its one result.
    ToolCallFinished {
        call_id: String,
        tool: String,
        outcome: CallOutcome,
        is_error: bool,
        /// The head of the result, for display.
        excerpt: String,
    },
    /// What the model is sent was cut.
    ContextTrimmed(Trim),
    /// An MCP server started, failed or died (`state` is its status name, `reason` why).
    McpServer {
        server: String,
        state: String,
        reason: Option<String>,
    },
    /// The turn ended; always the last event.
    TurnEnded(TurnOutcome),
}

/// Why the context was cut.
#[derive(Debug, Clone, PartialEq)]
pub enum Trim {
    /// The prompt budget excerpted or dropped parts of the history.
    Budget(TrimReport),
    /// After a context-window rejection, the newest large results are cut to `head_bytes`.
    Shrunk {
        call_ids: Vec<String>,
        head_bytes: u64,
    },
}

/// The kind of each event, named once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    TextDelta,
    ToolCallStarted,
    ApprovalRequested,
    ApprovalWithdrawn,
    ToolCallFinished,
    ContextTrimmed,
    McpServer,
    TurnEnded,
}

impl EventKind {
    pub const ALL: [EventKind; 8] = [
        EventKind::TextDelta,
        EventKind::ToolCallStarted,
        EventKind::ApprovalRequested,
        EventKind::ApprovalWithdrawn,
        EventKind::ToolCallFinished,
        EventKind::ContextTrimmed,
        EventKind::McpServer,
        EventKind::TurnEnded,
    ];

    /// The snake_case name `pen/event` carries as `kind`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::TextDelta => "text_delta",
            EventKind::ToolCallStarted => "tool_call_started",
            EventKind::ApprovalRequested => "approval_requested",
            EventKind::ApprovalWithdrawn => "approval_withdrawn",
            EventKind::ToolCallFinished => "tool_call_finished",
            EventKind::ContextTrimmed => "context_trimmed",
            EventKind::McpServer => "mcp_server",
            EventKind::TurnEnded => "turn_ended",
        }
    }
}

impl TurnEvent {
    pub fn kind(&self) -> EventKind {
        match self {
            TurnEvent::TextDelta { .. } => EventKind::TextDelta,
            TurnEvent::ToolCallStarted { .. } => EventKind::ToolCallStarted,
            TurnEvent::ApprovalRequested(_) => EventKind::ApprovalRequested,
            TurnEvent::ApprovalWithdrawn { .. } => EventKind::ApprovalWithdrawn,
            TurnEvent::ToolCallFinished { .. } => EventKind::ToolCallFinished,
            TurnEvent::ContextTrimmed(_) => EventKind::ContextTrimmed,
            TurnEvent::McpServer { .. } => EventKind::McpServer,
            TurnEvent::TurnEnded(_) => EventKind::TurnEnded,
        }
    }
}
