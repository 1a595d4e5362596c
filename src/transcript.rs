//! The typed vocabulary of a session: what a turn records ([`Item`]), how a tool call ended
//! ([`CallOutcome`]), why a turn ended ([`StopReason`], [`TurnErrorKind`]).
//!
//! Every stored payload is read through [`Item::from_stored`] and written through
//! [`Item::to_payload`]; nothing else in pen picks fields out of a payload by name.
//!
//! **Compatibility.** The stored form is the snake_case JSON today's and earlier pens wrote
//! (`tests/fixtures/sessions/` holds a database written by the pen before this module).
//! Reading never fails: a field of the wrong type reads as absent, as the planner has always
//! read it, and an event type this pen does not know is kept as [`Event::Other`], so a
//! newer pen's entries survive an older pen's reads.
//!
//! **API boundary.** Plain data and conversions to and from stored JSON; no wire casing (the
//! protocol converts), no I/O.

use crate::providers::{FinishReason, ReasoningBlock, ToolCall, Usage};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// What an entry records. Serialized in snake_case (`user_prompt`, `tool_call`…), which is
/// also how it is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    UserPrompt,
    AssistantMessage,
    /// A tool call the model made, recorded as it is about to run.
    ToolCall,
    /// The result of a tool call, with the same `call_id`.
    ToolResult,
    /// Anything else worth keeping: turn ends, rejections, trimming reports, grants.
    Event,
}

impl EntryKind {
    pub const ALL: [EntryKind; 5] = [
        EntryKind::UserPrompt,
        EntryKind::AssistantMessage,
        EntryKind::ToolCall,
        EntryKind::ToolResult,
        EntryKind::Event,
    ];

    /// The snake_case name, as serialized and stored.
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::UserPrompt => "user_prompt",
            EntryKind::AssistantMessage => "assistant_message",
            EntryKind::ToolCall => "tool_call",
            EntryKind::ToolResult => "tool_result",
            EntryKind::Event => "event",
        }
    }

    pub fn from_name(name: &str) -> Option<EntryKind> {
        EntryKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == name)
    }
}

/// How a tool call ended: the `status` of its stored result, the `state` of its
/// `tool_call_finished` event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
// The TypeScript of the VS Code extension is generated from it (`protocol`'s tests).
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "snake_case")]
pub enum CallOutcome {
    /// The tool ran and succeeded.
    Done,
    /// The tool ran (or could not start: bad arguments) and failed.
    Error,
    /// The owner denied the call.
    Denied,
    /// The approval no longer applied: the owner could not be asked, or the file changed
    /// after the owner approved its diff.
    StaleAuthority,
    /// The call never started: Stop came first, or a crash came before it could start.
    NotExecuted,
    /// A crash cut the call off after it may have started.
    Interrupted,
    /// Stop came while the call ran: it may have had effects.
    Unknown,
}

impl CallOutcome {
    pub const ALL: [CallOutcome; 7] = [
        CallOutcome::Done,
        CallOutcome::Error,
        CallOutcome::Denied,
        CallOutcome::StaleAuthority,
        CallOutcome::NotExecuted,
        CallOutcome::Interrupted,
        CallOutcome::Unknown,
    ];

    /// The snake_case name, as stored and sent.
    pub fn as_str(self) -> &'static str {
        match self {
            CallOutcome::Done => "done",
            CallOutcome::Error => "error",
            CallOutcome::Denied => "denied",
            CallOutcome::StaleAuthority => "stale_authority",
            CallOutcome::NotExecuted => "not_executed",
            CallOutcome::Interrupted => "interrupted",
            CallOutcome::Unknown => "unknown",
        }
    }

    pub fn from_name(name: &str) -> Option<CallOutcome> {
        CallOutcome::ALL.into_iter().find(|o| o.as_str() == name)
    }
}

/// Why a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
// The TypeScript of the VS Code extension is generated from it (`protocol`'s tests).
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    EndTurn,
    Cancelled,
    MaxTurnRequests,
    Error,
}

impl StopReason {
    pub const ALL: [StopReason; 4] = [
        StopReason::EndTurn,
        StopReason::Cancelled,
        StopReason::MaxTurnRequests,
        StopReason::Error,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::EndTurn => "end_turn",
            StopReason::Cancelled => "cancelled",
            StopReason::MaxTurnRequests => "max_turn_requests",
            StopReason::Error => "error",
        }
    }

    pub fn from_name(name: &str) -> Option<StopReason> {
        StopReason::ALL.into_iter().find(|r| r.as_str() == name)
    }
}

/// What kind of failure ended a turn with `error`: the clients choose their actions from it
/// (a new session, the provider settings, a retry), never from the wording of `last_error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
// The TypeScript of the VS Code extension is generated from it (`protocol`'s tests).
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "snake_case")]
pub enum TurnErrorKind {
    /// The request is over the model's context window even after recovery: start a new
    /// session or set `context_window_tokens` right.
    ContextWindow,
    /// The provider refused the credentials (HTTP 401/403).
    Auth,
    /// The provider kept answering 429 after the retries.
    RateLimit,
    /// The provider could not be reached, timed out, answered 5xx or broke off its stream.
    Network,
    /// The provider rejected the request itself (another 4xx), or answered what pen cannot
    /// read.
    ProviderBadRequest,
    /// No provider is configured, or its configuration is incomplete.
    NoProvider,
    /// The prompt, the system prompt or the tool schemas alone are over the prompt budget.
    BudgetTooLarge,
    /// The session's history is inconsistent in a way that answering its unanswered calls
    /// cannot repair (a repeated call id, a result without its call): it can never run a turn
    /// again, and the owner should start a new session.
    HistoryUnrepairable,
    /// Another pen is running a turn in the session.
    SessionBusy,
    /// The session store failed.
    Store,
}

impl TurnErrorKind {
    pub const ALL: [TurnErrorKind; 10] = [
        TurnErrorKind::ContextWindow,
        TurnErrorKind::Auth,
        TurnErrorKind::RateLimit,
        TurnErrorKind::Network,
        TurnErrorKind::ProviderBadRequest,
        TurnErrorKind::NoProvider,
        TurnErrorKind::BudgetTooLarge,
        TurnErrorKind::HistoryUnrepairable,
        TurnErrorKind::SessionBusy,
        TurnErrorKind::Store,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TurnErrorKind::ContextWindow => "context_window",
            TurnErrorKind::Auth => "auth",
            TurnErrorKind::RateLimit => "rate_limit",
            TurnErrorKind::Network => "network",
            TurnErrorKind::ProviderBadRequest => "provider_bad_request",
            TurnErrorKind::NoProvider => "no_provider",
            TurnErrorKind::BudgetTooLarge => "budget_too_large",
            TurnErrorKind::HistoryUnrepairable => "history_unrepairable",
            TurnErrorKind::SessionBusy => "session_busy",
            TurnErrorKind::Store => "store",
        }
    }

    pub fn from_name(name: &str) -> Option<TurnErrorKind> {
        TurnErrorKind::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

/// The model's answer as recorded.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AssistantMessage {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    /// Reasoning blocks, before the text and calls, as the provider sent them (signatures
    /// included): sent back on the following requests of the turn.
    pub reasoning: Vec<ReasoningBlock>,
    pub finish_reason: Option<FinishReason>,
    pub usage: Option<Usage>,
    /// The model that answered; calibrates later estimates for it.
    pub model: Option<String>,
    /// The uncalibrated token estimate of the request this answers.
    pub estimated_input_tokens: Option<u64>,
    /// Whether `tool_calls` was stored but could not be read (a hand edit): its results are
    /// then results without a call, which the planner refuses.
    pub malformed_calls: bool,
}

/// A tool call, recorded as it is about to run (its approval may still be pending).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CallStarted {
    pub call_id: String,
    pub name: String,
    /// The parsed arguments, or the model's raw text when it was not JSON.
    pub arguments: Value,
}

/// The one result of a tool call.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolResult {
    pub call_id: String,
    /// Absent in results written by crash recovery.
    pub name: Option<String>,
    /// What the model reads.
    pub content: String,
    pub is_error: bool,
    /// Absent (or unknown to this pen) in results an older pen wrote.
    pub outcome: Option<CallOutcome>,
}

/// What the budget replaced or dropped, for the `context_trimmed` event and session entry.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TrimReport {
    pub policy_version: u32,
    /// Call ids whose call and result were replaced by excerpts, oldest first.
    pub excerpted: Vec<String>,
    /// Call ids among `excerpted` whose excerpts were left out too, oldest first, when the
    /// excerpts and the latest two groups did not fit together. A one-line note says so.
    pub omitted: Vec<String>,
    /// The entries of the older exchanges left out, as `(first_seq, last_seq)` spans, one per
    /// run of adjacent exchanges, oldest first (the oldest exchanges go first, so one span), so
    /// a report stays small however long the session is.
    pub dropped_exchanges: Vec<(u64, u64)>,
    /// How many older exchanges were left out.
    pub dropped_count: u64,
    /// Estimated input tokens of the untouched request.
    pub tokens_before: u64,
    /// Estimated input tokens of the planned request.
    pub tokens_after: u64,
    /// The budget the request was planned under.
    pub budget: u64,
}

/// How far policy 4 of the prompt budget compacted the session: recorded when a request would
/// exceed the budget, and read by every later plan (in this daemon or a resumed one), so the
/// requests between two compactions render the same prefix byte for byte. Names positions by
/// call id and counts, never by anything that changes later.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Compaction {
    pub policy_version: u32,
    /// How many of the session's oldest exchanges are left out.
    pub dropped_count: u64,
    /// The first call id of the newest group replaced by its excerpt: every group of the kept
    /// exchanges up to and including it is excerpted.
    pub excerpted_through: Option<String>,
    /// The same for the groups left out behind the one-line note (never past
    /// `excerpted_through`).
    pub omitted_through: Option<String>,
    /// The budget the compaction was made under, and the low-water mark it aimed at (estimated
    /// input tokens), for the reader: plans do not read them.
    pub budget: u64,
    pub low_water: u64,
}

/// One project instruction file as a session was given it: where it lies (as tools show
/// paths), its size on disk, whether the instruction budget cut it, and the text sent (or the
/// note saying why it was not read).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstructionFile {
    pub path: String,
    /// The file's size in bytes when it was read (0 when it could not be read).
    pub bytes: u64,
    /// Whether the text was cut to fit `instruction_bytes`.
    pub cut: bool,
    /// The text as sent, the cut note included.
    pub text: String,
    /// Why the file was not read (a link out of the workspace, not UTF-8 text, key material);
    /// then `text` is empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// The project's instructions and the environment a session started with: recorded once,
/// before the session's first request, and the system part of every request of the session is
/// rendered from it (never from a fresh read), so the prefix stays byte-identical, also after a
/// restart.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SessionContext {
    /// The instruction files at the workspace roots, in the order they are sent.
    pub instructions: Vec<InstructionFile>,
    /// The environment block as sent (pen, OS, shell, roots, day, git).
    pub environment: String,
}

/// An event entry.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The session's instructions and environment (see [`SessionContext`]).
    SessionContext(SessionContext),
    /// A nested folder's instruction files were delivered with the result of `call_id`, once
    /// per session; `files` also names files that were refused, so none is tried again.
    InstructionsDelivered {
        call_id: String,
        files: Vec<InstructionFile>,
    },
    /// A root instruction file changed during the session; the prompt after this entry carries
    /// the new text, and later turns compare against `instructions`.
    InstructionsChanged { instructions: Vec<InstructionFile> },
    TurnEnded {
        stop_reason: StopReason,
        last_error: Option<String>,
        error_kind: Option<TurnErrorKind>,
        /// The usage the turn's requests reported, summed; `None` when none reported any (and
        /// in turns an older pen stored).
        usage: Option<Usage>,
        /// The session's usage so far, this turn included.
        session_usage: Option<Usage>,
    },
    /// The provider rejected a request as over the context window; later requests of the
    /// session to `model` are planned under `estimated_tokens`.
    ContextWindowRejected {
        model: String,
        estimated_tokens: u64,
        reason: String,
        /// The same request's estimate before calibration (`None` in entries an older pen
        /// stored): the bound later calibration can never lift.
        uncalibrated_tokens: Option<u64>,
    },
    /// The context window the session's requests to `model` are planned under from here on,
    /// when it is not the user's setting: what discovery, the hosted table or the default
    /// gave. A resumed session plans under it when the server cannot be asked.
    ContextWindowFound {
        model: String,
        window: crate::providers::window::ModelWindow,
    },
    /// A provider's usage said something is wrong with a request (native Ollama: a likely
    /// silent truncation), with the fix.
    ProviderWarning { model: String, message: String },
    /// After a rejection, these calls' results are cut to `head_bytes` in every later request.
    ResultsShrunk {
        call_ids: Vec<String>,
        head_bytes: u64,
        reason: String,
    },
    /// A budget plan cut something the session's previous report did not.
    ContextTrimmed(TrimReport),
    /// Policy 4 compacted the session this far (see [`Compaction`]).
    ContextCompacted(Compaction),
    /// The owner allowed `tool` for the rest of the session ("Allow for session").
    ToolAllowedForSession { tool: String },
    /// The call `call_id` (pen_plan) set the session's plan to `steps`, in order: the session's
    /// plan is the last one recorded (an empty list clears it).
    Plan {
        call_id: String,
        steps: Vec<crate::tools::plan::PlanStep>,
    },
    /// A revert of `turns` (newest first) is about to change `files` (as results show them):
    /// recorded before it acts, so a revert a crash stops is known (SPEC §13).
    RevertStarted {
        turns: Vec<String>,
        files: Vec<String>,
    },
    /// The owner reverted the files of `turns` (newest first, SPEC §13); `note` is what the
    /// model is told with the next prompt, so it re-reads them. `interrupted`: this closes a
    /// [`Event::RevertStarted`] that a crash stopped, with what its files held when the next
    /// use of the session found it.
    FilesReverted {
        turns: Vec<String>,
        files: Vec<RevertedFile>,
        note: String,
        interrupted: bool,
    },
    /// An event this pen does not know (a newer pen's), kept as stored.
    Other(Value),
}

/// One stored entry's content.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    UserPrompt { text: String },
    AssistantMessage(AssistantMessage),
    ToolCall(CallStarted),
    ToolResult(ToolResult),
    Event(Event),
}

/// A stored entry: its place in the session and its content.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// 1, 2, 3… within the session, without gaps.
    pub seq: u64,
    pub turn_id: Option<String>,
    /// Unix milliseconds.
    pub created_at: i64,
    pub item: Item,
}

/// The strings of the array at `key` (others left out); empty when it is no array.
fn str_list(fields: &Map<String, Value>, key: &str) -> Vec<String> {
    fields
        .get(key)
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn str_field(fields: &Map<String, Value>, key: &str) -> String {
    fields
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn opt_str_field(fields: &Map<String, Value>, key: &str) -> Option<String> {
    fields.get(key).and_then(Value::as_str).map(str::to_string)
}

fn u64_field(fields: &Map<String, Value>, key: &str) -> Option<u64> {
    fields.get(key).and_then(Value::as_u64)
}

fn strings(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect()
}

/// The calls of an assistant payload; `None` when the list is there but any call in it is
/// malformed (as a failed deserialization of the whole list would give).
fn calls_of(value: Option<&Value>) -> Option<Vec<ToolCall>> {
    let Some(value) = value else {
        return Some(Vec::new());
    };
    match value {
        Value::Null => Some(Vec::new()),
        Value::Array(items) => items
            .iter()
            .map(|item| {
                let fields = item.as_object()?;
                Some(ToolCall {
                    id: fields.get("id")?.as_str()?.to_string(),
                    name: fields.get("name")?.as_str()?.to_string(),
                    arguments: fields.get("arguments")?.as_str()?.to_string(),
                })
            })
            .collect(),
        _ => None,
    }
}

impl Item {
    pub fn kind(&self) -> EntryKind {
        match self {
            Item::UserPrompt { .. } => EntryKind::UserPrompt,
            Item::AssistantMessage(_) => EntryKind::AssistantMessage,
            Item::ToolCall(_) => EntryKind::ToolCall,
            Item::ToolResult(_) => EntryKind::ToolResult,
            Item::Event(_) => EntryKind::Event,
        }
    }

    /// Reads a stored payload. Never fails (see the module doc).
    pub fn from_stored(kind: EntryKind, payload: &Value) -> Item {
        let empty = Map::new();
        let fields = payload.as_object().unwrap_or(&empty);
        match kind {
            EntryKind::UserPrompt => Item::UserPrompt {
                text: str_field(fields, "text"),
            },
            EntryKind::AssistantMessage => {
                let calls = calls_of(fields.get("tool_calls"));
                Item::AssistantMessage(AssistantMessage {
                    text: str_field(fields, "text"),
                    malformed_calls: calls.is_none(),
                    tool_calls: calls.unwrap_or_default(),
                    reasoning: fields
                        .get("reasoning")
                        .and_then(|v| Vec::<ReasoningBlock>::deserialize(v).ok())
                        .unwrap_or_default(),
                    finish_reason: fields
                        .get("finish_reason")
                        .and_then(|v| FinishReason::deserialize(v).ok()),
                    usage: fields.get("usage").and_then(|v| Usage::deserialize(v).ok()),
                    model: opt_str_field(fields, "model"),
                    estimated_input_tokens: u64_field(fields, "estimated_input_tokens"),
                })
            }
            EntryKind::ToolCall => Item::ToolCall(CallStarted {
                call_id: str_field(fields, "call_id"),
                name: str_field(fields, "name"),
                arguments: fields.get("arguments").cloned().unwrap_or(Value::Null),
            }),
            EntryKind::ToolResult => Item::ToolResult(ToolResult {
                call_id: str_field(fields, "call_id"),
                name: opt_str_field(fields, "name"),
                content: str_field(fields, "content"),
                is_error: fields
                    .get("is_error")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
                outcome: fields
                    .get("status")
                    .and_then(Value::as_str)
                    .and_then(CallOutcome::from_name),
            }),
            EntryKind::Event => Item::Event(Event::from_stored(fields, payload)),
        }
    }

    /// The stored payload (snake_case).
    pub fn to_payload(&self) -> Value {
        match self {
            Item::UserPrompt { text } => json!({"text": text}),
            Item::AssistantMessage(m) => {
                let mut payload = json!({
                    "text": m.text,
                    "tool_calls": m.tool_calls,
                    "finish_reason": m.finish_reason,
                    "usage": m.usage,
                    "model": m.model,
                    "estimated_input_tokens": m.estimated_input_tokens,
                });
                if !m.reasoning.is_empty()
                    && let Some(object) = payload.as_object_mut()
                {
                    object.insert("reasoning".into(), json!(m.reasoning));
                }
                payload
            }
            Item::ToolCall(c) => {
                json!({"call_id": c.call_id, "name": c.name, "arguments": c.arguments})
            }
            Item::ToolResult(r) => {
                let mut payload = json!({
                    "call_id": r.call_id,
                    "content": r.content,
                    "is_error": r.is_error,
                });
                if let Some(object) = payload.as_object_mut() {
                    if let Some(name) = &r.name {
                        object.insert("name".into(), json!(name));
                    }
                    if let Some(outcome) = r.outcome {
                        object.insert("status".into(), json!(outcome.as_str()));
                    }
                }
                payload
            }
            Item::Event(event) => event.to_payload(),
        }
    }

    /// The call ids this entry names: an answer's calls, or a call's or result's own id.
    pub fn call_ids(&self) -> Vec<&str> {
        match self {
            Item::AssistantMessage(m) => m.tool_calls.iter().map(|c| c.id.as_str()).collect(),
            Item::ToolCall(c) => vec![c.call_id.as_str()],
            Item::ToolResult(r) => vec![r.call_id.as_str()],
            _ => Vec::new(),
        }
    }
}

/// The stored `type` of each known event.
pub mod event_type {
    pub const TURN_ENDED: &str = "turn_ended";
    pub const CONTEXT_WINDOW_REJECTED: &str = "context_window_rejected";
    pub const RESULTS_SHRUNK: &str = "results_shrunk";
    pub const CONTEXT_TRIMMED: &str = "context_trimmed";
    pub const CONTEXT_COMPACTED: &str = "context_compacted";
    pub const TOOL_ALLOWED_FOR_SESSION: &str = "tool_allowed_for_session";
    pub const FILES_REVERTED: &str = "files_reverted";
    pub const REVERT_STARTED: &str = "revert_started";
    pub const SESSION_CONTEXT: &str = "session_context";
    pub const INSTRUCTIONS_DELIVERED: &str = "instructions_delivered";
    pub const INSTRUCTIONS_CHANGED: &str = "instructions_changed";
    pub const CONTEXT_WINDOW_FOUND: &str = "context_window_found";
    pub const PROVIDER_WARNING: &str = "provider_warning";
    pub const PLAN: &str = "plan";
}

/// A file a revert handled, as [`Event::FilesReverted`] stores it: its path as results show it
/// and what became of it (`reverted`, `deleted`, `unchanged`, `conflict`, `not_revertible`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevertedFile {
    pub path: String,
    pub status: String,
}

impl Event {
    fn from_stored(fields: &Map<String, Value>, payload: &Value) -> Event {
        let other = || Event::Other(payload.clone());
        match fields.get("type").and_then(Value::as_str) {
            Some(event_type::TURN_ENDED) => {
                let Some(stop_reason) = fields
                    .get("stop_reason")
                    .and_then(Value::as_str)
                    .and_then(StopReason::from_name)
                else {
                    return other();
                };
                let usage_field =
                    |key: &str| fields.get(key).and_then(|v| Usage::deserialize(v).ok());
                Event::TurnEnded {
                    stop_reason,
                    last_error: opt_str_field(fields, "last_error"),
                    error_kind: fields
                        .get("error_kind")
                        .and_then(Value::as_str)
                        .and_then(TurnErrorKind::from_name),
                    usage: usage_field("usage"),
                    session_usage: usage_field("session_usage"),
                }
            }
            Some(event_type::CONTEXT_WINDOW_REJECTED) => {
                let Some(estimated_tokens) = u64_field(fields, "estimated_tokens") else {
                    return other();
                };
                Event::ContextWindowRejected {
                    model: str_field(fields, "model"),
                    estimated_tokens,
                    reason: str_field(fields, "reason"),
                    uncalibrated_tokens: u64_field(fields, "uncalibrated_tokens"),
                }
            }
            Some(event_type::CONTEXT_WINDOW_FOUND) => {
                match crate::providers::window::ModelWindow::deserialize(payload) {
                    Ok(window) => Event::ContextWindowFound {
                        model: str_field(fields, "model"),
                        window,
                    },
                    Err(_) => other(),
                }
            }
            Some(event_type::PROVIDER_WARNING) => Event::ProviderWarning {
                model: str_field(fields, "model"),
                message: str_field(fields, "message"),
            },
            Some(event_type::RESULTS_SHRUNK) => Event::ResultsShrunk {
                call_ids: strings(fields.get("call_ids")),
                head_bytes: u64_field(fields, "head_bytes").unwrap_or_default(),
                reason: str_field(fields, "reason"),
            },
            Some(event_type::CONTEXT_TRIMMED) => {
                let dropped: Vec<(u64, u64)> = fields
                    .get("dropped_exchanges")
                    .and_then(|v| Vec::<(u64, u64)>::deserialize(v).ok())
                    .unwrap_or_default();
                Event::ContextTrimmed(TrimReport {
                    policy_version: u64_field(fields, "policy_version")
                        .and_then(|v| u32::try_from(v).ok())
                        .unwrap_or_default(),
                    excerpted: strings(fields.get("excerpted_call_ids")),
                    omitted: strings(fields.get("omitted_call_ids")),
                    dropped_exchanges: dropped.clone(),
                    // Reports before the count listed one span per exchange.
                    dropped_count: u64_field(fields, "dropped_count")
                        .unwrap_or(dropped.len() as u64),
                    tokens_before: u64_field(fields, "tokens_before").unwrap_or_default(),
                    tokens_after: u64_field(fields, "tokens_after").unwrap_or_default(),
                    budget: u64_field(fields, "budget").unwrap_or_default(),
                })
            }
            Some(event_type::CONTEXT_COMPACTED) => {
                // Without its count the entry cannot be reproduced: kept as stored, unread.
                let Some(dropped_count) = u64_field(fields, "dropped_count") else {
                    return other();
                };
                Event::ContextCompacted(Compaction {
                    policy_version: u64_field(fields, "policy_version")
                        .and_then(|v| u32::try_from(v).ok())
                        .unwrap_or_default(),
                    dropped_count,
                    excerpted_through: opt_str_field(fields, "excerpted_through"),
                    omitted_through: opt_str_field(fields, "omitted_through"),
                    budget: u64_field(fields, "budget").unwrap_or_default(),
                    low_water: u64_field(fields, "low_water").unwrap_or_default(),
                })
            }
            Some(event_type::TOOL_ALLOWED_FOR_SESSION) => match opt_str_field(fields, "tool") {
                Some(tool) => Event::ToolAllowedForSession { tool },
                None => other(),
            },
            Some(event_type::PLAN) => {
                match Vec::<crate::tools::plan::PlanStep>::deserialize(
                    fields.get("steps").unwrap_or(&Value::Null),
                ) {
                    Ok(steps) => Event::Plan {
                        call_id: str_field(fields, "call_id"),
                        steps,
                    },
                    Err(_) => other(),
                }
            }
            Some(event_type::REVERT_STARTED) => Event::RevertStarted {
                turns: str_list(fields, "turns"),
                files: str_list(fields, "files"),
            },
            Some(event_type::FILES_REVERTED) => {
                let files = fields
                    .get("files")
                    .and_then(Value::as_array)
                    .map(|items| {
                        items
                            .iter()
                            .filter_map(Value::as_object)
                            .map(|file| RevertedFile {
                                path: str_field(file, "path"),
                                status: str_field(file, "status"),
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                Event::FilesReverted {
                    turns: str_list(fields, "turns"),
                    files,
                    note: str_field(fields, "note"),
                    interrupted: fields.get("interrupted").and_then(Value::as_bool) == Some(true),
                }
            }
            Some(event_type::SESSION_CONTEXT) => {
                match serde_json::from_value::<SessionContext>(payload.clone()) {
                    Ok(context) => Event::SessionContext(context),
                    Err(_) => other(),
                }
            }
            Some(event_type::INSTRUCTIONS_DELIVERED) => {
                match Vec::<InstructionFile>::deserialize(
                    fields.get("files").unwrap_or(&Value::Null),
                ) {
                    Ok(files) => Event::InstructionsDelivered {
                        call_id: str_field(fields, "call_id"),
                        files,
                    },
                    Err(_) => other(),
                }
            }
            Some(event_type::INSTRUCTIONS_CHANGED) => {
                match Vec::<InstructionFile>::deserialize(
                    fields.get("instructions").unwrap_or(&Value::Null),
                ) {
                    Ok(instructions) => Event::InstructionsChanged { instructions },
                    Err(_) => other(),
                }
            }
            _ => other(),
        }
    }

    fn to_payload(&self) -> Value {
        match self {
            Event::SessionContext(context) => json!({
                "type": event_type::SESSION_CONTEXT,
                "instructions": context.instructions,
                "environment": context.environment,
            }),
            Event::InstructionsDelivered { call_id, files } => json!({
                "type": event_type::INSTRUCTIONS_DELIVERED,
                "call_id": call_id,
                "files": files,
            }),
            Event::InstructionsChanged { instructions } => json!({
                "type": event_type::INSTRUCTIONS_CHANGED,
                "instructions": instructions,
            }),
            Event::TurnEnded {
                stop_reason,
                last_error,
                error_kind,
                usage,
                session_usage,
            } => {
                let mut payload = json!({
                    "type": event_type::TURN_ENDED,
                    "stop_reason": stop_reason.as_str(),
                    "last_error": last_error,
                    "error_kind": error_kind.map(TurnErrorKind::as_str),
                });
                // Absent rather than null, so a turn without usage is stored as before.
                if let Some(usage) = usage {
                    payload["usage"] = json!(usage);
                }
                if let Some(usage) = session_usage {
                    payload["session_usage"] = json!(usage);
                }
                payload
            }
            Event::ContextWindowRejected {
                model,
                estimated_tokens,
                reason,
                uncalibrated_tokens,
            } => {
                let mut payload = json!({
                    "type": event_type::CONTEXT_WINDOW_REJECTED,
                    "model": model,
                    "estimated_tokens": estimated_tokens,
                    "reason": reason,
                });
                if let Some(tokens) = uncalibrated_tokens {
                    payload["uncalibrated_tokens"] = json!(tokens);
                }
                payload
            }
            Event::ContextWindowFound { model, window } => {
                let mut payload = json!({
                    "type": event_type::CONTEXT_WINDOW_FOUND,
                    "model": model,
                });
                if let (Some(fields), Value::Object(window)) =
                    (payload.as_object_mut(), json!(window))
                {
                    fields.extend(window);
                }
                payload
            }
            Event::ProviderWarning { model, message } => json!({
                "type": event_type::PROVIDER_WARNING,
                "model": model,
                "message": message,
            }),
            Event::ResultsShrunk {
                call_ids,
                head_bytes,
                reason,
            } => json!({
                "type": event_type::RESULTS_SHRUNK,
                "call_ids": call_ids,
                "head_bytes": head_bytes,
                "reason": reason,
            }),
            Event::ContextTrimmed(report) => json!({
                "type": event_type::CONTEXT_TRIMMED,
                "policy_version": report.policy_version,
                "excerpted_call_ids": report.excerpted,
                "omitted_call_ids": report.omitted,
                "dropped_exchanges": report.dropped_exchanges,
                "dropped_count": report.dropped_count,
                "tokens_before": report.tokens_before,
                "tokens_after": report.tokens_after,
                "budget": report.budget,
            }),
            Event::ContextCompacted(compaction) => json!({
                "type": event_type::CONTEXT_COMPACTED,
                "policy_version": compaction.policy_version,
                "dropped_count": compaction.dropped_count,
                "excerpted_through": compaction.excerpted_through,
                "omitted_through": compaction.omitted_through,
                "budget": compaction.budget,
                "low_water": compaction.low_water,
            }),
            Event::ToolAllowedForSession { tool } => json!({
                "type": event_type::TOOL_ALLOWED_FOR_SESSION,
                "tool": tool,
            }),
            Event::Plan { call_id, steps } => json!({
                "type": event_type::PLAN,
                "call_id": call_id,
                "steps": steps,
            }),
            Event::RevertStarted { turns, files } => json!({
                "type": event_type::REVERT_STARTED,
                "turns": turns,
                "files": files,
            }),
            Event::FilesReverted {
                turns,
                files,
                note,
                interrupted,
            } => {
                let mut payload = json!({
                    "type": event_type::FILES_REVERTED,
                    "turns": turns,
                    "files": files
                        .iter()
                        .map(|f| json!({"path": f.path, "status": f.status}))
                        .collect::<Vec<_>>(),
                    "note": note,
                });
                // Written only when set: a revert that ended is stored as pen always stored it.
                if *interrupted {
                    payload["interrupted"] = json!(true);
                }
                payload
            }
            Event::Other(value) => value.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(item: Item) {
        let payload = item.to_payload();
        assert_eq!(Item::from_stored(item.kind(), &payload), item, "{payload}");
    }

    #[test]
    fn every_item_round_trips_through_its_stored_form() {
        round_trip(Item::UserPrompt { text: "hi".into() });
        round_trip(Item::AssistantMessage(AssistantMessage {
            text: "ok".into(),
            tool_calls: vec![ToolCall {
                id: "c1".into(),
                name: "pen_read".into(),
                arguments: "{\"path\":\"a\"}".into(),
            }],
            reasoning: vec![ReasoningBlock {
                text: "think".into(),
                signature: Some("sig==".into()),
                redacted: None,
            }],
            finish_reason: Some(FinishReason::ToolUse),
            usage: Some(Usage {
                input_tokens: 30,
                output_tokens: 4,
                cache_read_tokens: Some(20),
                cache_write_tokens: Some(7),
                reasoning_tokens: Some(2),
            }),
            model: Some("m".into()),
            estimated_input_tokens: Some(9),
            malformed_calls: false,
        }));
        round_trip(Item::ToolCall(CallStarted {
            call_id: "c1".into(),
            name: "pen_read".into(),
            arguments: json!({"path": "a"}),
        }));
        for outcome in CallOutcome::ALL {
            round_trip(Item::ToolResult(ToolResult {
                call_id: "c1".into(),
                name: Some("pen_read".into()),
                content: "x".into(),
                is_error: outcome != CallOutcome::Done,
                outcome: Some(outcome),
            }));
        }
        for stop_reason in StopReason::ALL {
            for error_kind in TurnErrorKind::ALL.map(Some).into_iter().chain([None]) {
                round_trip(Item::Event(Event::TurnEnded {
                    stop_reason,
                    last_error: Some("e".into()),
                    error_kind,
                    usage: None,
                    session_usage: None,
                }));
                round_trip(Item::Event(Event::TurnEnded {
                    stop_reason,
                    last_error: None,
                    error_kind,
                    usage: Some(Usage::new(5, 6)),
                    session_usage: Some(Usage {
                        cache_read_tokens: Some(3),
                        ..Usage::new(50, 60)
                    }),
                }));
            }
        }
        round_trip(Item::Event(Event::ContextWindowRejected {
            model: "m".into(),
            estimated_tokens: 5,
            reason: "r".into(),
            uncalibrated_tokens: Some(4),
        }));
        round_trip(Item::Event(Event::ContextWindowFound {
            model: "m".into(),
            window: crate::providers::window::ModelWindow {
                trained_tokens: Some(8192),
                ..crate::providers::window::ModelWindow::new(
                    2048,
                    crate::providers::window::WindowSource::LlamaCppProps,
                )
            },
        }));
        round_trip(Item::Event(Event::ProviderWarning {
            model: "m".into(),
            message: "w".into(),
        }));
        round_trip(Item::Event(Event::ResultsShrunk {
            call_ids: vec!["a".into()],
            head_bytes: 2048,
            reason: "r".into(),
        }));
        round_trip(Item::Event(Event::ContextTrimmed(TrimReport {
            policy_version: 3,
            excerpted: vec!["a".into()],
            omitted: vec![],
            dropped_exchanges: vec![(1, 4)],
            dropped_count: 2,
            tokens_before: 10,
            tokens_after: 5,
            budget: 6,
        })));
        round_trip(Item::Event(Event::ContextCompacted(Compaction {
            policy_version: 4,
            dropped_count: 1,
            excerpted_through: Some("c9".into()),
            omitted_through: None,
            budget: 100,
            low_water: 55,
        })));
        let file = InstructionFile {
            path: "AGENTS.md".into(),
            bytes: 5,
            cut: false,
            text: "hello".into(),
            refused: None,
        };
        round_trip(Item::Event(Event::SessionContext(SessionContext {
            instructions: vec![file.clone()],
            environment: "- pen 1".into(),
        })));
        round_trip(Item::Event(Event::InstructionsDelivered {
            call_id: "c".into(),
            files: vec![InstructionFile {
                refused: Some("not UTF-8".into()),
                ..file.clone()
            }],
        }));
        round_trip(Item::Event(Event::InstructionsChanged {
            instructions: vec![file],
        }));
        round_trip(Item::Event(Event::ToolAllowedForSession {
            tool: "pen_edit".into(),
        }));
        round_trip(Item::Event(Event::FilesReverted {
            turns: vec!["t_2".into(), "t_1".into()],
            files: vec![RevertedFile {
                path: "a.txt".into(),
                status: "reverted".into(),
            }],
            note: "[pen] reverted".into(),
            interrupted: false,
        }));
        round_trip(Item::Event(Event::FilesReverted {
            turns: vec!["t_1".into()],
            files: vec![RevertedFile {
                path: "a.txt".into(),
                status: "not_reverted".into(),
            }],
            note: "[pen] interrupted".into(),
            interrupted: true,
        }));
        round_trip(Item::Event(Event::RevertStarted {
            turns: vec!["t_1".into()],
            files: vec!["a.txt".into(), "b.txt".into()],
        }));
        round_trip(Item::Event(Event::Plan {
            call_id: "p1".into(),
            steps: vec![crate::tools::plan::PlanStep {
                text: "fix it".into(),
                status: crate::tools::plan::StepStatus::InProgress,
            }],
        }));
        round_trip(Item::Event(Event::Other(
            json!({"type": "from_the_future"}),
        )));
    }

    #[test]
    fn names_match_serde() {
        for outcome in CallOutcome::ALL {
            assert_eq!(json!(outcome), json!(outcome.as_str()));
        }
        for reason in StopReason::ALL {
            assert_eq!(json!(reason), json!(reason.as_str()));
        }
        for kind in TurnErrorKind::ALL {
            assert_eq!(json!(kind), json!(kind.as_str()));
        }
        for kind in EntryKind::ALL {
            assert_eq!(json!(kind), json!(kind.as_str()));
        }
    }

    /// The payloads the pen before this module wrote, field for field.
    #[test]
    fn reads_what_the_earlier_pen_wrote() {
        let answer = Item::from_stored(
            EntryKind::AssistantMessage,
            &json!({"text": "t", "tool_calls": [{"id": "c", "name": "pen_list", "arguments": "{}"}],
                    "finish_reason": "tool_use", "usage": {"input_tokens": 1, "output_tokens": 2},
                    "model": "m", "estimated_input_tokens": 7}),
        );
        let Item::AssistantMessage(m) = answer else {
            panic!("not an answer")
        };
        assert_eq!(m.tool_calls[0].id, "c");
        // Usage before the cache counts: they read as unknown, not as 0.
        assert_eq!(m.usage, Some(Usage::new(1, 2)));
        assert_eq!(m.estimated_input_tokens, Some(7));
        // Recovery's results have no name.
        let recovered = Item::from_stored(
            EntryKind::ToolResult,
            &json!({"call_id": "c", "status": "interrupted", "content": "x", "is_error": true}),
        );
        assert!(matches!(
            recovered,
            Item::ToolResult(ToolResult {
                outcome: Some(CallOutcome::Interrupted),
                name: None,
                ..
            })
        ));
        // A null usage and a missing estimate (answers before calibration).
        let Item::AssistantMessage(m) = Item::from_stored(
            EntryKind::AssistantMessage,
            &json!({"text": "t", "tool_calls": [], "finish_reason": "end_turn", "usage": null}),
        ) else {
            panic!("not an answer")
        };
        assert_eq!((m.usage, m.estimated_input_tokens), (None, None));
    }

    #[test]
    fn malformed_payloads_read_as_absent_fields() {
        let Item::AssistantMessage(m) = Item::from_stored(
            EntryKind::AssistantMessage,
            &json!({"text": 5, "tool_calls": [{"id": 1}]}),
        ) else {
            panic!("not an answer")
        };
        assert_eq!(m.text, "");
        assert!(m.tool_calls.is_empty() && m.malformed_calls);
        assert_eq!(
            Item::from_stored(EntryKind::UserPrompt, &json!("not an object")),
            Item::UserPrompt {
                text: String::new()
            }
        );
        assert_eq!(
            Item::from_stored(EntryKind::Event, &json!({"type": "turn_ended"})),
            Item::Event(Event::Other(json!({"type": "turn_ended"})))
        );
        // A plan whose steps do not read (a status a newer pen added) is kept as stored.
        let plan =
            json!({"type": "plan", "call_id": "p", "steps": [{"text": "a", "status": "blocked"}]});
        assert_eq!(
            Item::from_stored(EntryKind::Event, &plan),
            Item::Event(Event::Other(plan))
        );
        // A compaction without its count cannot be reproduced: kept as stored, not applied.
        assert_eq!(
            Item::from_stored(
                EntryKind::Event,
                &json!({"type": "context_compacted", "excerpted_through": "c1"})
            ),
            Item::Event(Event::Other(
                json!({"type": "context_compacted", "excerpted_through": "c1"})
            ))
        );
    }
}
