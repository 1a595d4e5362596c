//! The live events of a turn: a closed set, each with its typed data. `protocol` turns them
//! into `pen/event` notifications (and `pen run --json` lines); nothing here knows the wire.

use super::{ApprovalRequest, TurnOutcome};
use crate::providers::Usage;
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
    /// A provider request reported its usage (after its answer was recorded).
    Usage(RequestUsage),
    /// An MCP server started (`Running`), failed or died (`Failed`, `reason` why).
    McpServer {
        server: String,
        state: crate::mcp::ServerState,
        reason: Option<String>,
    },
    /// A root instruction file changed since the session recorded it: this turn's prompt
    /// carries the new text.
    InstructionsChanged { files: Vec<InstructionSummary> },
    /// The context window the session plans under, when it is new to the session.
    ContextWindow {
        model: String,
        window: crate::providers::window::ModelWindow,
    },
    /// A provider's answer looks wrong (native Ollama: a likely silent truncation).
    ProviderWarning { message: String },
    /// A call set the session's plan: the whole list, in order (empty: cleared).
    Plan {
        steps: Vec<crate::tools::plan::PlanStep>,
    },
    /// The turn ended; always the last event.
    TurnEnded(TurnOutcome),
}

/// One instruction file as the panels show it: its path, size, and whether it was cut or
/// refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstructionSummary {
    pub path: String,
    pub bytes: u64,
    pub cut: bool,
    pub refused: Option<String>,
}

impl InstructionSummary {
    pub fn of(file: &crate::transcript::InstructionFile) -> InstructionSummary {
        InstructionSummary {
            path: file.path.clone(),
            bytes: file.bytes,
            cut: file.cut,
            refused: file.refused.clone(),
        }
    }
}

/// One request's usage, with the totals of its turn and its session so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestUsage {
    /// The model that answered.
    pub model: String,
    pub request: Usage,
    pub turn: Usage,
    pub session: Usage,
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
    Usage,
    McpServer,
    InstructionsChanged,
    ContextWindow,
    ProviderWarning,
    Plan,
    TurnEnded,
}

impl EventKind {
    pub const ALL: [EventKind; 13] = [
        EventKind::TextDelta,
        EventKind::ToolCallStarted,
        EventKind::ApprovalRequested,
        EventKind::ApprovalWithdrawn,
        EventKind::ToolCallFinished,
        EventKind::ContextTrimmed,
        EventKind::Usage,
        EventKind::McpServer,
        EventKind::InstructionsChanged,
        EventKind::ContextWindow,
        EventKind::ProviderWarning,
        EventKind::Plan,
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
            EventKind::Usage => "usage",
            EventKind::McpServer => "mcp_server",
            EventKind::InstructionsChanged => "instructions_changed",
            EventKind::ContextWindow => "context_window",
            EventKind::ProviderWarning => "provider_warning",
            EventKind::Plan => "plan",
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
            TurnEvent::Usage(_) => EventKind::Usage,
            TurnEvent::McpServer { .. } => EventKind::McpServer,
            TurnEvent::InstructionsChanged { .. } => EventKind::InstructionsChanged,
            TurnEvent::ContextWindow { .. } => EventKind::ContextWindow,
            TurnEvent::ProviderWarning { .. } => EventKind::ProviderWarning,
            TurnEvent::Plan { .. } => EventKind::Plan,
            TurnEvent::TurnEnded(_) => EventKind::TurnEnded,
        }
    }
}

/// The one line that says which window a session plans under (`pen run` prints it at the
/// start; the panels show the `context_window` event).
pub fn window_line(model: &str, window: &crate::providers::window::ModelWindow) -> String {
    let source = match window.source {
        crate::providers::window::WindowSource::Config => "context_window_tokens",
        crate::providers::window::WindowSource::LlamaCppProps => "llama.cpp /props",
        crate::providers::window::WindowSource::OllamaShow => "Ollama /api/show",
        crate::providers::window::WindowSource::VllmModels => "vLLM /v1/models",
        crate::providers::window::WindowSource::LmStudioModels => "LM Studio /api/v0/models",
        crate::providers::window::WindowSource::HostedTable => "pen's table of hosted models",
        crate::providers::window::WindowSource::Default => {
            "default: nothing knew the model; set context_window_tokens"
        }
    };
    let tools = if window.tools_dropped {
        "; its chat template renders no tools, so pen sends none"
    } else {
        ""
    };
    format!(
        "model {model}, context window {} tokens ({source}){tools}",
        window.tokens
    )
}

impl Trim {
    /// One line for a `context_trimmed` event: what was cut from the request and the estimate
    /// (`pen run` prints it; `pen acp` sends it as agent text).
    pub fn notice(&self) -> String {
        let report = match self {
            Trim::Shrunk {
                call_ids,
                head_bytes,
            } => {
                return format!(
                    "context trimmed after the model rejected the request as too long: {} tool result(s) cut to {head_bytes} bytes",
                    call_ids.len()
                );
            }
            Trim::Budget(report) => report,
        };
        let mut parts = Vec::new();
        if !report.excerpted.is_empty() {
            parts.push(format!(
                "{} older tool call(s) sent as excerpts",
                report.excerpted.len()
            ));
        }
        if !report.omitted.is_empty() {
            parts.push(format!("{} of them left out", report.omitted.len()));
        }
        if report.dropped_count > 0 {
            parts.push(format!(
                "{} older exchange(s) left out",
                report.dropped_count
            ));
        }
        format!(
            "context trimmed to fit the model's window: {}; about {} → {} tokens (budget {})",
            parts.join(", "),
            report.tokens_before,
            report.tokens_after,
            report.budget
        )
    }
}

#[cfg(test)]
mod tests {
    use super::Trim;
    use crate::transcript::TrimReport;

    #[test]
    fn trim_notices_say_what_was_cut_and_the_estimate() {
        let budget = Trim::Budget(TrimReport {
            policy_version: 3,
            excerpted: vec!["a".into(), "b".into()],
            omitted: vec![],
            dropped_exchanges: vec![(1, 5)],
            dropped_count: 1,
            tokens_before: 30000,
            tokens_after: 14000,
            budget: 14500,
        });
        assert_eq!(
            budget.notice(),
            "context trimmed to fit the model's window: 2 older tool call(s) sent as excerpts, \
             1 older exchange(s) left out; about 30000 → 14000 tokens (budget 14500)"
        );
        let rejected = Trim::Shrunk {
            call_ids: vec!["r".into()],
            head_bytes: 2048,
        };
        assert_eq!(
            rejected.notice(),
            "context trimmed after the model rejected the request as too long: 1 tool result(s) cut to 2048 bytes"
        );
    }
}
