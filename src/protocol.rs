//! Wire types of the `pen/…` methods and conversions between LSP types and pen's own.
//!
//! One derive stack (`Serialize, Deserialize`, camelCase) for every params and result type;
//! core modules never see these.

use crate::agent;
use crate::documents::{self, PositionEncoding};
use crate::providers;
use crate::session;
use crate::transcript::{self, CallOutcome, StopReason, TurnErrorKind};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::PathBuf;
use tower_lsp_server::ls_types::{self as lsp, PositionEncodingKind, Uri};

/// The names of pen's methods, used by the server's registration, the generated TypeScript and
/// Lua tables, and the test that keeps `docs/protocol.md` true.
pub mod methods {
    /// Client → pen requests.
    pub const CALL_TOOL: &str = "pen/callTool";
    pub const LIST_TOOLS: &str = "pen/listTools";
    pub const GET_CONFIG: &str = "pen/getConfig";
    pub const SET_CONFIG: &str = "pen/setConfig";
    pub const NEW_SESSION: &str = "pen/newSession";
    pub const LIST_SESSIONS: &str = "pen/listSessions";
    pub const GET_TRANSCRIPT: &str = "pen/getTranscript";
    pub const PROMPT: &str = "pen/prompt";
    pub const STOP: &str = "pen/stop";
    pub const MCP_STATUS: &str = "pen/mcpStatus";
    pub const REVERT_TURN: &str = "pen/revertTurn";
    pub const FORK_SESSION: &str = "pen/forkSession";
    pub const GET_SESSION_CONTEXT: &str = "pen/getSessionContext";
    /// pen → client notification.
    pub const EVENT: &str = "pen/event";
    /// pen → client request.
    pub const REQUEST_APPROVAL: &str = "pen/requestApproval";

    /// The requests the server registers, in the order `docs/protocol.md` documents them.
    pub const REQUESTS: [&str; 13] = [
        CALL_TOOL,
        LIST_TOOLS,
        GET_CONFIG,
        SET_CONFIG,
        NEW_SESSION,
        LIST_SESSIONS,
        GET_TRANSCRIPT,
        PROMPT,
        STOP,
        MCP_STATUS,
        REVERT_TURN,
        FORK_SESSION,
        GET_SESSION_CONTEXT,
    ];

    /// Every `pen/…` method of the protocol, with its constant's name (for the generated
    /// tables).
    pub const ALL: [(&str, &str); 15] = [
        ("CALL_TOOL", CALL_TOOL),
        ("LIST_TOOLS", LIST_TOOLS),
        ("GET_CONFIG", GET_CONFIG),
        ("SET_CONFIG", SET_CONFIG),
        ("NEW_SESSION", NEW_SESSION),
        ("LIST_SESSIONS", LIST_SESSIONS),
        ("GET_TRANSCRIPT", GET_TRANSCRIPT),
        ("PROMPT", PROMPT),
        ("STOP", STOP),
        ("MCP_STATUS", MCP_STATUS),
        ("REVERT_TURN", REVERT_TURN),
        ("FORK_SESSION", FORK_SESSION),
        ("GET_SESSION_CONTEXT", GET_SESSION_CONTEXT),
        ("EVENT", EVENT),
        ("REQUEST_APPROVAL", REQUEST_APPROVAL),
    ];
}

/// `pen/mcpStatus` answer: each MCP server's status, for the panels.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct McpStatusResponse {
    pub servers: Vec<McpServerStatus>,
}

/// One MCP server's status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct McpServerStatus {
    pub name: String,
    pub status: McpServerState,
    /// Why it is not running (with the tail of its stderr), when it is not.
    pub reason: Option<String>,
    pub tool_count: u64,
    /// About how many tokens its tools' schemas add to every request.
    pub schema_tokens: u64,
    /// Whether it comes from the workspace's `.mcp.json`.
    pub project: bool,
}

impl From<crate::mcp::ServerStatus> for McpServerStatus {
    fn from(status: crate::mcp::ServerStatus) -> McpServerStatus {
        McpServerStatus {
            status: McpServerState::from(&status.state),
            name: status.name,
            reason: status.reason,
            tool_count: status.tool_count as u64,
            schema_tokens: status.schema_tokens,
            project: status.project,
        }
    }
}

/// Where an MCP server is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "snake_case")]
pub enum McpServerState {
    /// Configured; no turn started it yet.
    Idle,
    Starting,
    Running,
    /// Failed to start or died (`reason` says why, with the tail of its stderr).
    Failed,
    /// A project server the owner has not approved yet.
    NotApproved,
    /// A project server the owner denied.
    Denied,
    /// A project server pen refuses to start, whatever the owner answers.
    Refused,
    /// `enabled = false`.
    Disabled,
}

impl McpServerState {
    pub const ALL: [McpServerState; 8] = [
        McpServerState::Idle,
        McpServerState::Starting,
        McpServerState::Running,
        McpServerState::Failed,
        McpServerState::NotApproved,
        McpServerState::Denied,
        McpServerState::Refused,
        McpServerState::Disabled,
    ];
}

impl From<&crate::mcp::ServerState> for McpServerState {
    fn from(state: &crate::mcp::ServerState) -> McpServerState {
        use crate::mcp::ServerState as S;
        match state {
            S::Idle => McpServerState::Idle,
            S::Starting => McpServerState::Starting,
            S::Running { .. } => McpServerState::Running,
            S::Failed { .. } => McpServerState::Failed,
            S::NotApproved { denied: false } => McpServerState::NotApproved,
            S::NotApproved { denied: true } => McpServerState::Denied,
            S::Refused => McpServerState::Refused,
            S::Disabled => McpServerState::Disabled,
        }
    }
}

/// `pen/callTool` params: one native tool, no model.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CallToolParams {
    pub name: String,
    #[serde(default = "empty_object")]
    pub arguments: Value,
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

/// The position encoding for a client that offers `offered` (LSP 3.17): UTF-8 when offered (no
/// conversion needed), else UTF-16, which every client must support.
pub fn negotiate_encoding(offered: &[PositionEncodingKind]) -> PositionEncoding {
    if offered.contains(&PositionEncodingKind::UTF8) {
        PositionEncoding::Utf8
    } else {
        PositionEncoding::Utf16
    }
}

pub fn encoding_kind(encoding: PositionEncoding) -> PositionEncodingKind {
    match encoding {
        PositionEncoding::Utf8 => PositionEncodingKind::UTF8,
        PositionEncoding::Utf16 => PositionEncodingKind::UTF16,
        PositionEncoding::Utf32 => PositionEncodingKind::UTF32,
    }
}

/// The canonical path of a `file:` URI, as the tools resolve paths (symlinks followed).
pub fn uri_to_path(uri: &Uri) -> Option<PathBuf> {
    let path = uri.to_file_path()?.into_owned();
    Some(crate::workspace::canonical(&path))
}

/// The canonical path of a `file:` URI given as text (an ACP resource's `uri`), without its
/// query or fragment (`#L3`); `None` for any other URI.
pub fn file_uri_path(uri: &str) -> Option<PathBuf> {
    let bare = uri.split(['#', '?']).next().unwrap_or(uri);
    uri_to_path(&bare.parse::<Uri>().ok()?)
}

pub fn path_to_uri(path: &std::path::Path) -> Option<Uri> {
    Uri::from_file_path(path)
}

pub fn from_lsp_range(range: lsp::Range) -> documents::Range {
    documents::Range::new(
        documents::Position::new(range.start.line, range.start.character),
        documents::Position::new(range.end.line, range.end.character),
    )
}

pub fn to_lsp_range(range: documents::Range) -> lsp::Range {
    lsp::Range::new(
        lsp::Position::new(range.start.line, range.start.character),
        lsp::Position::new(range.end.line, range.end.character),
    )
}

pub fn from_lsp_change(change: lsp::TextDocumentContentChangeEvent) -> documents::Change {
    documents::Change {
        range: change.range.map(from_lsp_range),
        text: change.text,
    }
}

/// `pen/newSession` params.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[cfg_attr(test, ts(optional_fields))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NewSessionParams {
    pub title: Option<String>,
}

/// `pen/listSessions` params.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[cfg_attr(test, ts(optional_fields))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ListSessionsParams {
    pub cursor: Option<String>,
    pub limit: Option<usize>,
    /// List sessions with no work in them too (entries but no assistant message: a first
    /// prompt whose provider failed). Default false.
    pub include_empty: Option<bool>,
}

/// `pen/getTranscript` params.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[cfg_attr(test, ts(optional_fields))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GetTranscriptParams {
    pub session_id: String,
    pub after_seq: Option<u64>,
    pub limit: Option<usize>,
}

/// `pen/revertTurn` params: revert `turnId` and every later turn of the session (SPEC §13).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[cfg_attr(test, ts(optional_fields))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RevertTurnParams {
    pub session_id: String,
    pub turn_id: String,
    /// Also overwrite files that changed after pen wrote them (the conflicts).
    pub force: Option<bool>,
}

/// What a revert made of one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "snake_case")]
pub enum FileStatus {
    /// Its bytes before the turns are back.
    Reverted,
    /// The turns created it; it is gone.
    Deleted,
    /// It already held its state before the turns.
    Unchanged,
    /// It changed after pen wrote it; left as it is (see `diff`), unless forced.
    Conflict,
    /// Its state before cannot be restored (`reason` says why).
    NotRevertible,
    /// A revert a crash stopped had not reached it: it still holds what the turns wrote.
    NotReverted,
}

impl FileStatus {
    pub const ALL: [FileStatus; 6] = [
        FileStatus::Reverted,
        FileStatus::Deleted,
        FileStatus::Unchanged,
        FileStatus::Conflict,
        FileStatus::NotRevertible,
        FileStatus::NotReverted,
    ];
}

impl From<crate::checkpoint::FileStatus> for FileStatus {
    fn from(status: crate::checkpoint::FileStatus) -> FileStatus {
        use crate::checkpoint::FileStatus as S;
        match status {
            S::Reverted => FileStatus::Reverted,
            S::Deleted => FileStatus::Deleted,
            S::Unchanged => FileStatus::Unchanged,
            S::Conflict => FileStatus::Conflict,
            S::NotRevertible => FileStatus::NotRevertible,
            S::NotReverted => FileStatus::NotReverted,
        }
    }
}

/// One file of a revert.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct RevertedFileReport {
    pub path: String,
    pub status: FileStatus,
    /// The turns that wrote it, newest first.
    pub turns: Vec<String>,
    /// For a conflict: the diff from what the file holds to what `force` would make it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub diff: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub reason: Option<String>,
}

/// A call of the reverted turns whose effects were not reverted (a command, an MCP tool).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct UnrevertedCall {
    pub turn_id: String,
    pub tool: String,
    pub summary: String,
}

/// An earlier revert of the session that a crash stopped, as the next revert found it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct InterruptedRevertReport {
    /// Its turns, newest first.
    pub turns: Vec<String>,
    /// Each of its files as it stood: unchanged (reverted), not reverted (still as the turns
    /// left it) or a conflict (changed since).
    pub files: Vec<RevertedFileReport>,
    /// What the model is told with its next prompt.
    pub note: String,
}

/// `pen/revertTurn` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct RevertTurnResult {
    pub session_id: String,
    /// The reverted turns, newest first (the order they were undone in).
    pub turns: Vec<String>,
    pub files: Vec<RevertedFileReport>,
    /// Their effects were not reverted.
    pub commands: Vec<UnrevertedCall>,
    /// What the model is told with its next prompt.
    pub note: String,
    /// An earlier revert of the session that a crash stopped (`kill -9`, a power cut), which
    /// this one found open and closed first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub interrupted: Option<InterruptedRevertReport>,
    /// Turns a fork copied from its original session without their checkpoints (a fork made
    /// by an earlier pen): their files were not reverted (revert them in the original).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub without_checkpoints: Option<Vec<String>>,
}

fn file_reports(files: Vec<crate::checkpoint::FileReport>) -> Vec<RevertedFileReport> {
    files
        .into_iter()
        .map(|f| RevertedFileReport {
            path: f.path,
            status: f.status.into(),
            turns: f.turns,
            diff: f.diff,
            reason: f.reason,
        })
        .collect()
}

impl RevertTurnResult {
    pub fn new(session_id: &str, report: crate::checkpoint::RevertReport) -> RevertTurnResult {
        RevertTurnResult {
            session_id: session_id.to_string(),
            turns: report.turns,
            files: file_reports(report.files),
            commands: report
                .commands
                .into_iter()
                .map(|c| UnrevertedCall {
                    turn_id: c.turn_id,
                    tool: c.tool,
                    summary: c.summary,
                })
                .collect(),
            note: report.note,
            interrupted: report.interrupted.map(|i| InterruptedRevertReport {
                turns: i.turns,
                files: file_reports(i.files),
                note: i.note,
            }),
            without_checkpoints: report.uncopied.map(|(_, turns)| turns),
        }
    }
}

/// `pen/forkSession` params: a new session whose history is the original's before
/// `beforeTurnId`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ForkSessionParams {
    pub session_id: String,
    pub before_turn_id: String,
}

/// `pen/forkSession` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct ForkSessionResult {
    /// The new session.
    pub session_id: String,
    pub forked_from: String,
    pub before_turn_id: String,
}

/// A session as the protocol shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct SessionSummary {
    pub session_id: String,
    pub title: Option<String>,
    /// Unix milliseconds.
    pub created_at: i64,
    pub updated_at: i64,
    pub entry_count: u64,
}

impl From<session::SessionInfo> for SessionSummary {
    fn from(info: session::SessionInfo) -> SessionSummary {
        SessionSummary {
            session_id: info.id,
            title: info.title,
            created_at: info.created_at,
            updated_at: info.updated_at,
            entry_count: info.entry_count,
        }
    }
}

/// `pen/listSessions` result.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct ListSessionsResponse {
    pub sessions: Vec<SessionSummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub next_cursor: Option<String>,
}

impl From<session::SessionPage> for ListSessionsResponse {
    fn from(page: session::SessionPage) -> ListSessionsResponse {
        ListSessionsResponse {
            sessions: page
                .sessions
                .into_iter()
                .map(SessionSummary::from)
                .collect(),
            next_cursor: page.next_cursor,
        }
    }
}

/// One stored entry in its stored form (snake_case payload): what `pen transcript ID` exports,
/// a backup format. `pen/getTranscript` sends [`TranscriptRecord`] instead.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TranscriptEntry {
    pub seq: u64,
    pub kind: session::EntryKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
    pub payload: Value,
    /// Unix milliseconds.
    pub created_at: i64,
}

impl From<session::Entry> for TranscriptEntry {
    fn from(entry: session::Entry) -> TranscriptEntry {
        TranscriptEntry {
            seq: entry.seq,
            kind: entry.kind,
            turn_id: entry.turn_id,
            payload: entry.payload,
            created_at: entry.created_at,
        }
    }
}

/// One entry of `pen/getTranscript`: its place in the session and its typed content, tagged
/// `kind`/`data` in camelCase like a `pen/event`. The kinds a live turn also reports
/// (`turn_ended`, `context_trimmed`) carry the very data type of that event, and a stored call
/// or result carries the fields of `tool_call_started` / `tool_call_finished`, so a client
/// renders stored and live entries with one code path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct TranscriptRecord {
    pub seq: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub turn_id: Option<String>,
    /// Unix milliseconds.
    pub created_at: i64,
    #[serde(flatten)]
    pub entry: EntryBody,
}

/// The `kind` of a [`TranscriptRecord`] and its `data`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(
    tag = "kind",
    content = "data",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum EntryBody {
    UserPrompt {
        text: String,
    },
    /// The model's answer; its calls follow as `tool_call` entries.
    AssistantMessage {
        text: String,
        tool_calls: Vec<AssistantCall>,
        finish_reason: Option<FinishReason>,
        usage: Option<Usage>,
        /// The model that answered.
        model: Option<String>,
        /// The uncalibrated token estimate of the request this answers.
        estimated_input_tokens: Option<u64>,
    },
    /// A call about to run: the data of `tool_call_started`.
    ToolCall {
        call_id: String,
        tool: String,
        /// What the call works on, in a line, as `tool_call_started` has it.
        summary: String,
        /// What the tool does, as `tool_call_started` has it.
        tool_kind: ToolKind,
        /// The parsed arguments, or the model's raw text when it was not JSON.
        arguments: Value,
    },
    /// A call's one result: the data of `tool_call_finished`, with the whole `content` the
    /// model read instead of an excerpt. `tool` is `null` in results crash recovery wrote.
    ToolResult {
        call_id: String,
        tool: Option<String>,
        /// `done` or `error` (from `isError`) for a result an older pen stored without one.
        state: CallOutcome,
        is_error: bool,
        content: String,
    },
    /// The data of the `turn_ended` event.
    TurnEnded(TurnOutcome),
    /// The data of the `context_trimmed` event: a budget report, or (stored as
    /// `results_shrunk`) the cut after a context-window rejection, with the provider's words.
    ContextTrimmed(TrimmedData),
    /// The provider rejected a request of about `estimated_tokens` as over its window.
    ContextWindowRejected {
        model: String,
        estimated_tokens: u64,
        reason: String,
    },
    /// The owner allowed `tool` for the rest of the session.
    ToolAllowedForSession {
        tool: String,
    },
    /// The data of the `plan` event: the plan a call set.
    Plan(PlanData),
    /// The data of the `context_window` event: the window found for the session's requests
    /// to `model`, recorded at its first turn and when it changes.
    ContextWindow(ContextWindowData),
    /// The data of the `provider_warning` event.
    ProviderWarning {
        message: String,
    },
    /// The data of the `instructions_changed` event: a root instruction file changed; the
    /// prompt after this entry carried the new text.
    InstructionsChanged {
        files: Vec<InstructionFileInfo>,
    },
    /// The root instruction files and the environment the session's requests carry, recorded
    /// before its first request (`pen/getSessionContext` gives their text).
    SessionContext {
        instructions: Vec<InstructionFileInfo>,
        environment: String,
    },
    /// A nested folder's instruction files, delivered with the result of `callId`.
    InstructionsDelivered {
        call_id: String,
        files: Vec<InstructionFileInfo>,
    },
    /// The prompt budget's policy 4 compacted the session this far: `droppedCount` oldest
    /// exchanges left out, the groups up to `excerptedThrough` sent as excerpts and those up to
    /// `omittedThrough` left out behind a note (call ids).
    ContextCompacted {
        policy_version: u32,
        dropped_count: u64,
        excerpted_through: Option<String>,
        omitted_through: Option<String>,
        budget: u64,
        low_water: u64,
    },
    /// A revert of `turns` (newest first) is about to change `files`: recorded before it acts.
    RevertStarted {
        turns: Vec<String>,
        files: Vec<String>,
    },
    /// A `pen/revertTurn` of `turns` (newest first); `note` is what the model is told with its
    /// next prompt. `interrupted`: it closes a revert a crash stopped, with what its files held
    /// when the next use of the session found it.
    FilesReverted {
        turns: Vec<String>,
        files: Vec<RevertedFileStatus>,
        note: String,
        interrupted: bool,
    },
    /// An event this pen does not know (a newer pen's), its stored payload as it is.
    Event(Value),
}

impl EntryBody {
    /// Every `kind` a transcript record can have, as sent.
    pub const KINDS: [&'static str; 18] = [
        "user_prompt",
        "assistant_message",
        "tool_call",
        "tool_result",
        "turn_ended",
        "context_trimmed",
        "context_window_rejected",
        "tool_allowed_for_session",
        "plan",
        "context_window",
        "provider_warning",
        "instructions_changed",
        "session_context",
        "instructions_delivered",
        "context_compacted",
        "revert_started",
        "files_reverted",
        "event",
    ];
}

/// A file of a stored revert and what became of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct RevertedFileStatus {
    pub path: String,
    /// `null` when it is not known: a revert a crash stopped, closed by the next turn without
    /// a look at its files (or a status a newer pen stored).
    pub status: Option<FileStatus>,
}

/// A tool call inside an answer, as it was made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct AssistantCall {
    pub id: String,
    pub name: String,
    /// The arguments as the model wrote them (JSON text, or not).
    pub arguments: String,
}

/// Why the model stopped answering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    EndTurn,
    ToolUse,
    MaxTokens,
    Other,
}

impl From<providers::FinishReason> for FinishReason {
    fn from(reason: providers::FinishReason) -> FinishReason {
        match reason {
            providers::FinishReason::EndTurn => FinishReason::EndTurn,
            providers::FinishReason::ToolUse => FinishReason::ToolUse,
            providers::FinishReason::MaxTokens => FinishReason::MaxTokens,
            providers::FinishReason::Other => FinishReason::Other,
        }
    }
}

/// Token usage as the provider reported it, normalised (see [`providers::Usage`]):
/// `inputTokens` is the whole prompt, of which `cacheReadTokens` came from the provider's cache
/// and `cacheWriteTokens` were written to it; each optional count is absent when the provider
/// did not report it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub cache_read_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub cache_write_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub reasoning_tokens: Option<u64>,
}

impl From<providers::Usage> for Usage {
    fn from(usage: providers::Usage) -> Usage {
        Usage {
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            cache_read_tokens: usage.cache_read_tokens,
            cache_write_tokens: usage.cache_write_tokens,
            reasoning_tokens: usage.reasoning_tokens,
        }
    }
}

impl From<transcript::Record> for TranscriptRecord {
    fn from(record: transcript::Record) -> TranscriptRecord {
        TranscriptRecord {
            seq: record.seq,
            turn_id: record.turn_id,
            created_at: record.created_at,
            entry: record.item.into(),
        }
    }
}

impl From<transcript::Item> for EntryBody {
    fn from(item: transcript::Item) -> EntryBody {
        use transcript::{Event, Item};
        match item {
            Item::UserPrompt { text } => EntryBody::UserPrompt { text },
            Item::AssistantMessage(m) => EntryBody::AssistantMessage {
                text: m.text,
                tool_calls: m
                    .tool_calls
                    .into_iter()
                    .map(|c| AssistantCall {
                        id: c.id,
                        name: c.name,
                        arguments: c.arguments,
                    })
                    .collect(),
                finish_reason: m.finish_reason.map(FinishReason::from),
                usage: m.usage.map(Usage::from),
                model: m.model,
                estimated_input_tokens: m.estimated_input_tokens,
            },
            Item::ToolCall(c) => EntryBody::ToolCall {
                summary: crate::tools::registry::subject_of(&c.name, Some(&c.arguments)).summary,
                tool_kind: crate::tools::registry::kind_of(&c.name).into(),
                call_id: c.call_id,
                tool: c.name,
                arguments: c.arguments,
            },
            Item::ToolResult(r) => EntryBody::ToolResult {
                state: r.outcome.unwrap_or(if r.is_error {
                    CallOutcome::Error
                } else {
                    CallOutcome::Done
                }),
                call_id: r.call_id,
                tool: r.name,
                is_error: r.is_error,
                content: r.content,
            },
            Item::Event(Event::TurnEnded {
                stop_reason,
                last_error,
                error_kind,
                usage,
                session_usage,
            }) => EntryBody::TurnEnded(TurnOutcome {
                stop_reason,
                last_error,
                error_kind,
                usage: usage.map(Usage::from),
                session_usage: session_usage.map(Usage::from),
            }),
            Item::Event(Event::ContextTrimmed(report)) => {
                EntryBody::ContextTrimmed(agent::Trim::Budget(report).into())
            }
            Item::Event(Event::ResultsShrunk {
                call_ids,
                head_bytes,
                reason,
            }) => EntryBody::ContextTrimmed(TrimmedData::ContextWindowExceeded {
                shrunk_call_ids: call_ids,
                head_bytes,
                provider_message: Some(reason),
            }),
            Item::Event(Event::ContextWindowRejected {
                model,
                estimated_tokens,
                reason,
                ..
            }) => EntryBody::ContextWindowRejected {
                model,
                estimated_tokens,
                reason,
            },
            Item::Event(Event::ToolAllowedForSession { tool }) => {
                EntryBody::ToolAllowedForSession { tool }
            }
            Item::Event(Event::Plan { steps, .. }) => EntryBody::Plan(steps.into()),
            Item::Event(Event::ContextWindowFound { model, window }) => {
                EntryBody::ContextWindow(ContextWindowData::new(model, window))
            }
            Item::Event(Event::ProviderWarning { message, .. }) => {
                EntryBody::ProviderWarning { message }
            }
            Item::Event(Event::InstructionsChanged { instructions }) => {
                EntryBody::InstructionsChanged {
                    files: instructions.iter().map(InstructionFileInfo::from).collect(),
                }
            }
            Item::Event(Event::SessionContext(context)) => EntryBody::SessionContext {
                instructions: context
                    .instructions
                    .iter()
                    .map(InstructionFileInfo::from)
                    .collect(),
                environment: context.environment,
            },
            Item::Event(Event::InstructionsDelivered { call_id, files }) => {
                EntryBody::InstructionsDelivered {
                    call_id,
                    files: files.iter().map(InstructionFileInfo::from).collect(),
                }
            }
            Item::Event(Event::ContextCompacted(compaction)) => EntryBody::ContextCompacted {
                policy_version: compaction.policy_version,
                dropped_count: compaction.dropped_count,
                excerpted_through: compaction.excerpted_through,
                omitted_through: compaction.omitted_through,
                budget: compaction.budget,
                low_water: compaction.low_water,
            },
            Item::Event(Event::RevertStarted { turns, files }) => {
                EntryBody::RevertStarted { turns, files }
            }
            Item::Event(Event::FilesReverted {
                turns,
                files,
                note,
                interrupted,
            }) => EntryBody::FilesReverted {
                turns,
                files: files
                    .into_iter()
                    .map(|f| RevertedFileStatus {
                        path: f.path,
                        status: serde_json::from_value(Value::String(f.status)).ok(),
                    })
                    .collect(),
                note,
                interrupted,
            },
            Item::Event(Event::Other(payload)) => EntryBody::Event(payload),
        }
    }
}

/// `pen/getTranscript` result.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct TranscriptResponse {
    pub session_id: String,
    pub entries: Vec<TranscriptRecord>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub next_after_seq: Option<u64>,
}

/// `pen/prompt` params: run one turn of the agent in a session.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PromptParams {
    pub session_id: String,
    pub text: String,
    /// What the owner has in view: it goes into this prompt (append-only), read from the
    /// editor's buffer where the file is open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub context: Option<PromptContext>,
}

/// The editor's focus sent with a prompt. Lines are 1-based and inclusive.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[cfg_attr(test, ts(optional_fields))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PromptContext {
    /// The active file: an absolute path, or one relative to the workspace.
    pub active_file: Option<String>,
    /// The selection in the active file; without `text`, pen reads those lines (from the
    /// editor's buffer when the file is open).
    pub selection: Option<PromptSelection>,
    /// The active file's ranges on screen.
    #[serde(default)]
    pub visible_ranges: Option<Vec<LineRange>>,
}

/// A selection: its lines and, optionally, its text as the editor has it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PromptSelection {
    pub start_line: u64,
    pub end_line: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub text: Option<String>,
}

/// A range of lines, 1-based and inclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LineRange {
    pub start_line: u64,
    pub end_line: u64,
}

impl PromptContext {
    /// The focus the turn renders, or why the context is invalid (a line range out of order).
    pub fn to_focus(&self) -> Result<agent::Focus, String> {
        let lines = |start: u64, end: u64| {
            if start == 0 || end < start {
                Err(format!(
                    "context: lines {start}-{end} are not a range (1-based, startLine <= endLine)"
                ))
            } else {
                Ok(agent::Lines { start, end })
            }
        };
        let selection = match &self.selection {
            Some(s)
                if s.text.is_none() && self.active_file.as_deref().is_none_or(str::is_empty) =>
            {
                return Err(
                    "context: a selection without activeFile (a buffer with no file) must carry its text"
                        .to_string(),
                );
            }
            Some(s) => Some((lines(s.start_line, s.end_line)?, s.text.clone())),
            None => None,
        };
        let mut visible = Vec::new();
        for range in self.visible_ranges.iter().flatten() {
            visible.push(lines(range.start_line, range.end_line)?);
        }
        Ok(agent::Focus {
            active_file: self.active_file.clone().filter(|p| !p.is_empty()),
            selection,
            visible,
            files: Vec::new(),
        })
    }
}

/// `pen/getSessionContext` params.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GetSessionContextParams {
    pub session_id: String,
}

/// `pen/getSessionContext` result: the instructions and environment the session's requests
/// carry. `recorded` is false for a session that ran no turn yet: then they are what its first
/// turn would read now.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct SessionContextResponse {
    pub session_id: String,
    pub recorded: bool,
    /// The root instruction files in the system part (as recorded at the session's start).
    pub instructions: Vec<InstructionFileInfo>,
    /// The root instruction files as the latest `instructions_changed` note gave them, when
    /// one changed during the session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub changed: Option<Vec<InstructionFileInfo>>,
    /// The nested instruction files delivered with tool results so far.
    pub delivered: Vec<InstructionFileInfo>,
    /// The environment block as sent.
    pub environment: String,
    /// The text of the system part's instructions, as sent.
    pub instructions_text: String,
}

impl From<&crate::transcript::InstructionFile> for InstructionFileInfo {
    fn from(file: &crate::transcript::InstructionFile) -> InstructionFileInfo {
        agent::InstructionSummary::of(file).into()
    }
}

/// `pen/prompt` result, sent when the turn ends.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct PromptResponse {
    pub session_id: String,
    pub turn_id: String,
    pub stop_reason: StopReason,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub last_error: Option<String>,
    /// What kind of failure ended the turn, for a client to act on (a new session for
    /// `history_unrepairable`, the provider settings for `auth` …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<TurnErrorKind>,
    /// The turn's usage: its requests' reported usage, summed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub usage: Option<Usage>,
    /// The session's usage so far, this turn included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub session_usage: Option<Usage>,
}

impl PromptResponse {
    pub fn new(session_id: String, turn_id: String, outcome: agent::TurnOutcome) -> PromptResponse {
        PromptResponse {
            session_id,
            turn_id,
            stop_reason: outcome.stop_reason,
            last_error: outcome.last_error,
            error_kind: outcome.error_kind,
            usage: outcome.usage.map(Usage::from),
            session_usage: outcome.session_usage.map(Usage::from),
        }
    }
}

/// How a turn ended, as the `turn_ended` event and `pen run --json`'s last line carry it, with
/// the turn's and the session's usage (absent when no request reported any, and in turns an
/// older pen stored).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct TurnOutcome {
    pub stop_reason: StopReason,
    pub last_error: Option<String>,
    pub error_kind: Option<TurnErrorKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub usage: Option<Usage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub session_usage: Option<Usage>,
}

impl From<agent::TurnOutcome> for TurnOutcome {
    fn from(outcome: agent::TurnOutcome) -> TurnOutcome {
        TurnOutcome {
            stop_reason: outcome.stop_reason,
            last_error: outcome.last_error,
            error_kind: outcome.error_kind,
            usage: outcome.usage.map(Usage::from),
            session_usage: outcome.session_usage.map(Usage::from),
        }
    }
}

/// `usage` data: one provider request's usage, with its turn's and its session's totals so
/// far.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct UsageData {
    /// The model that answered.
    pub model: String,
    pub request: Usage,
    pub turn: Usage,
    pub session: Usage,
}

impl From<agent::RequestUsage> for UsageData {
    fn from(usage: agent::RequestUsage) -> UsageData {
        UsageData {
            model: usage.model,
            request: usage.request.into(),
            turn: usage.turn.into(),
            session: usage.session.into(),
        }
    }
}

/// `pen/stop` params.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StopParams {
    pub session_id: String,
}

/// `pen/stop` result: whether a running turn was told to stop.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct StopResponse {
    pub stopped: bool,
}

/// The `pen/event` notification (pen → client).
pub enum PenEvent {}

/// `pen/event` params: one progress event of a turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct EventParams {
    pub session_id: String,
    pub turn_id: String,
    pub seq: u64,
    #[serde(flatten)]
    pub event: EventBody,
}

/// The `kind` of a `pen/event` and its `data`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(
    tag = "kind",
    content = "data",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum EventBody {
    TextDelta {
        text: String,
    },
    ToolCallStarted {
        call_id: String,
        tool: String,
        /// What the call works on, in a line (`a.txt lines 10–60`, `cargo test`), as its tool
        /// computes it: the editors show it as it is. Empty when the arguments name nothing.
        summary: String,
        /// What the tool does (an MCP tool's is `other`): an editor's icon or grouping.
        tool_kind: ToolKind,
        /// `null` when the model's arguments were not JSON.
        arguments: Option<Value>,
    },
    ApprovalRequested(ApprovalParams),
    ApprovalWithdrawn {
        call_id: String,
    },
    ToolCallFinished {
        call_id: String,
        tool: String,
        state: CallOutcome,
        is_error: bool,
        excerpt: String,
    },
    ContextTrimmed(TrimmedData),
    /// A provider request's usage, after its answer was recorded.
    Usage(UsageData),
    /// An MCP server started (`running`), failed or died (`failed`, with `reason`).
    McpServer {
        server: String,
        state: McpServerState,
        reason: Option<String>,
    },
    /// A root instruction file changed since the session recorded it; this turn's prompt
    /// carries the new text.
    InstructionsChanged {
        files: Vec<InstructionFileInfo>,
    },
    /// The context window the session plans under, when it is new to the session.
    ContextWindow(ContextWindowData),
    /// A provider's answer looks wrong (native Ollama: a likely silent truncation), and the
    /// fix.
    ProviderWarning {
        message: String,
    },
    /// A call (pen_plan) set the session's plan: the whole list each time.
    Plan(PlanData),
    TurnEnded(TurnOutcome),
}

/// Where a step of the session's plan stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "snake_case")]
pub enum PlanStepStatus {
    Pending,
    InProgress,
    Done,
}

impl PlanStepStatus {
    pub const ALL: [PlanStepStatus; 3] = [
        PlanStepStatus::Pending,
        PlanStepStatus::InProgress,
        PlanStepStatus::Done,
    ];
}

impl From<crate::tools::plan::StepStatus> for PlanStepStatus {
    fn from(status: crate::tools::plan::StepStatus) -> PlanStepStatus {
        use crate::tools::plan::StepStatus;
        match status {
            StepStatus::Pending => PlanStepStatus::Pending,
            StepStatus::InProgress => PlanStepStatus::InProgress,
            StepStatus::Done => PlanStepStatus::Done,
        }
    }
}

/// One step of the session's plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct PlanStepInfo {
    pub text: String,
    pub status: PlanStepStatus,
}

/// The data of a `plan` event and entry: the session's whole plan, in order, as the model last
/// set it (empty: cleared). An editor shows one checklist and replaces it with each.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct PlanData {
    pub steps: Vec<PlanStepInfo>,
}

impl From<Vec<crate::tools::plan::PlanStep>> for PlanData {
    fn from(steps: Vec<crate::tools::plan::PlanStep>) -> PlanData {
        PlanData {
            steps: steps
                .into_iter()
                .map(|step| PlanStepInfo {
                    text: step.text,
                    status: step.status.into(),
                })
                .collect(),
        }
    }
}

/// One project instruction file a session uses: its path (as tools show paths), its size, and
/// whether the budget cut it or pen refused it (`refused` says why).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct InstructionFileInfo {
    pub path: String,
    pub bytes: u64,
    pub cut: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub refused: Option<String>,
}

impl From<agent::InstructionSummary> for InstructionFileInfo {
    fn from(s: agent::InstructionSummary) -> InstructionFileInfo {
        InstructionFileInfo {
            path: s.path,
            bytes: s.bytes,
            cut: s.cut,
            refused: s.refused,
        }
    }
}

/// `context_window` data: the window the session's requests to `model` are planned under from
/// here on, where it came from, and `line`, the one line to show.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct ContextWindowData {
    pub model: String,
    pub tokens: u64,
    pub source: WindowSource,
    pub line: String,
    /// The most output tokens the model may produce, when the source says (the hosted table).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub max_output_tokens: Option<u64>,
    /// The window the model was trained on, when the server says (Ollama).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, ts(optional))]
    pub trained_tokens: Option<u64>,
    /// The server's chat template renders no tool definitions, so pen sends none.
    pub tools_dropped: bool,
}

impl ContextWindowData {
    fn new(model: String, window: providers::window::ModelWindow) -> ContextWindowData {
        ContextWindowData {
            line: agent::window_line(&model, &window),
            model,
            tokens: window.tokens,
            source: window.source.into(),
            max_output_tokens: window.max_output_tokens,
            trained_tokens: window.trained_tokens,
            tools_dropped: window.tools_dropped,
        }
    }
}

/// What a tool does, as people are shown it (`tools::registry::ToolKind` on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    /// Reads a file.
    Read,
    /// Writes a file.
    Edit,
    /// Looks through the workspace (a search, a listing).
    Search,
    /// Runs a program.
    Execute,
    /// Anything else (an MCP tool).
    #[default]
    Other,
}

impl ToolKind {
    pub const ALL: [ToolKind; 5] = [
        ToolKind::Read,
        ToolKind::Edit,
        ToolKind::Search,
        ToolKind::Execute,
        ToolKind::Other,
    ];
}

impl From<crate::tools::registry::ToolKind> for ToolKind {
    fn from(kind: crate::tools::registry::ToolKind) -> ToolKind {
        use crate::tools::registry::ToolKind as K;
        match kind {
            K::Read => ToolKind::Read,
            K::Edit => ToolKind::Edit,
            K::Search => ToolKind::Search,
            K::Execute => ToolKind::Execute,
            K::Other => ToolKind::Other,
        }
    }
}

/// Where a context window came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "snake_case")]
pub enum WindowSource {
    /// The user's `context_window_tokens`.
    Config,
    LlamaCppProps,
    OllamaShow,
    VllmModels,
    LmStudioModels,
    /// pen's table of hosted models.
    HostedTable,
    /// Nothing knew the model: pen's default.
    Default,
}

impl WindowSource {
    pub const ALL: [WindowSource; 7] = [
        WindowSource::Config,
        WindowSource::LlamaCppProps,
        WindowSource::OllamaShow,
        WindowSource::VllmModels,
        WindowSource::LmStudioModels,
        WindowSource::HostedTable,
        WindowSource::Default,
    ];
}

impl From<providers::window::WindowSource> for WindowSource {
    fn from(source: providers::window::WindowSource) -> WindowSource {
        use providers::window::WindowSource as S;
        match source {
            S::Config => WindowSource::Config,
            S::LlamaCppProps => WindowSource::LlamaCppProps,
            S::OllamaShow => WindowSource::OllamaShow,
            S::VllmModels => WindowSource::VllmModels,
            S::LmStudioModels => WindowSource::LmStudioModels,
            S::HostedTable => WindowSource::HostedTable,
            S::Default => WindowSource::Default,
        }
    }
}

/// `context_trimmed` data: a budget report, or the cut after a context-window rejection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(
    tag = "reason",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum TrimmedData {
    Budget {
        policy_version: u32,
        excerpted_call_ids: Vec<String>,
        omitted_call_ids: Vec<String>,
        dropped_exchanges: Vec<(u64, u64)>,
        /// How many older exchanges were left out (`droppedExchanges` joins adjacent ones).
        dropped_count: u64,
        tokens_before: u64,
        tokens_after: u64,
        budget: u64,
    },
    ContextWindowExceeded {
        shrunk_call_ids: Vec<String>,
        head_bytes: u64,
        /// The provider's words, in a stored entry (`pen/getTranscript`); live events have
        /// none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(test, ts(optional))]
        provider_message: Option<String>,
    },
}

impl TrimmedData {
    /// Every `reason` a `context_trimmed` report can have, as sent.
    pub const REASONS: [&'static str; 2] = ["budget", "context_window_exceeded"];
}

impl From<agent::Trim> for TrimmedData {
    fn from(trim: agent::Trim) -> TrimmedData {
        match trim {
            agent::Trim::Budget(report) => TrimmedData::Budget {
                policy_version: report.policy_version,
                excerpted_call_ids: report.excerpted,
                omitted_call_ids: report.omitted,
                dropped_exchanges: report.dropped_exchanges,
                dropped_count: report.dropped_count,
                tokens_before: report.tokens_before,
                tokens_after: report.tokens_after,
                budget: report.budget,
            },
            agent::Trim::Shrunk {
                call_ids,
                head_bytes,
            } => TrimmedData::ContextWindowExceeded {
                shrunk_call_ids: call_ids,
                head_bytes,
                provider_message: None,
            },
        }
    }
}

impl From<agent::TurnEvent> for EventBody {
    fn from(event: agent::TurnEvent) -> EventBody {
        use agent::TurnEvent as E;
        match event {
            E::TextDelta { text } => EventBody::TextDelta { text },
            E::ToolCallStarted {
                call_id,
                tool,
                arguments,
            } => EventBody::ToolCallStarted {
                summary: crate::tools::registry::subject_of(&tool, arguments.as_ref()).summary,
                tool_kind: crate::tools::registry::kind_of(&tool).into(),
                call_id,
                tool,
                arguments,
            },
            E::ApprovalRequested(request) => EventBody::ApprovalRequested(request.into()),
            E::ApprovalWithdrawn { call_id } => EventBody::ApprovalWithdrawn { call_id },
            E::ToolCallFinished {
                call_id,
                tool,
                outcome,
                is_error,
                excerpt,
            } => EventBody::ToolCallFinished {
                call_id,
                tool,
                state: outcome,
                is_error,
                excerpt,
            },
            E::ContextTrimmed(trim) => EventBody::ContextTrimmed(trim.into()),
            E::Usage(usage) => EventBody::Usage(usage.into()),
            E::McpServer {
                server,
                state,
                reason,
            } => EventBody::McpServer {
                server,
                state: McpServerState::from(&state),
                reason,
            },
            E::InstructionsChanged { files } => EventBody::InstructionsChanged {
                files: files.into_iter().map(InstructionFileInfo::from).collect(),
            },
            E::ContextWindow { model, window } => {
                EventBody::ContextWindow(ContextWindowData::new(model, window))
            }
            E::ProviderWarning { message } => EventBody::ProviderWarning { message },
            E::Plan { steps } => EventBody::Plan(steps.into()),
            E::TurnEnded(outcome) => EventBody::TurnEnded(outcome.into()),
        }
    }
}

impl From<agent::AgentEvent> for EventParams {
    fn from(event: agent::AgentEvent) -> EventParams {
        EventParams {
            session_id: event.session_id,
            turn_id: event.turn_id,
            seq: event.seq,
            event: event.event.into(),
        }
    }
}

/// `pen/requestApproval` params: what the owner is asked to approve, tagged `kind`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(
    tag = "kind",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum ApprovalParams {
    /// A tool call the model made.
    ToolCall {
        session_id: String,
        turn_id: String,
        call_id: String,
        tool: String,
        /// What the call works on, in a line, as its tool computes it: the editors show it
        /// as it is.
        #[serde(default)]
        summary: String,
        /// What the tool does, as `tool_call_started` has it.
        #[serde(default)]
        tool_kind: ToolKind,
        arguments: Value,
        /// For pen_edit: the unified diff the edit would make.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(test, ts(optional))]
        diff: Option<String>,
        /// Set when the write will not be revertible (its file is over the session's
        /// checkpoint store limit): `"not revertible: too large (…)"`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[cfg_attr(test, ts(optional))]
        not_revertible: Option<String>,
    },
    /// A server of the workspace's `.mcp.json` asks once before it first runs: its exact
    /// `commandLine` is what the owner approves.
    StartMcpServer {
        session_id: String,
        turn_id: String,
        call_id: String,
        server: String,
        command_line: String,
        root: String,
    },
}

impl ApprovalParams {
    /// Every `kind` of an approval request, as sent.
    pub const KINDS: [&'static str; 2] = ["tool_call", "start_mcp_server"];
}

impl From<agent::ApprovalRequest> for ApprovalParams {
    fn from(request: agent::ApprovalRequest) -> ApprovalParams {
        match request.kind {
            agent::ApprovalKind::ToolCall => ApprovalParams::ToolCall {
                session_id: request.session_id,
                turn_id: request.turn_id,
                call_id: request.call_id,
                tool_kind: crate::tools::registry::kind_of(&request.tool).into(),
                tool: request.tool,
                summary: request.summary,
                arguments: request.arguments,
                diff: request.diff,
                not_revertible: request.not_revertible,
            },
            agent::ApprovalKind::StartMcpServer {
                server,
                command_line,
                root,
            } => ApprovalParams::StartMcpServer {
                session_id: request.session_id,
                turn_id: request.turn_id,
                call_id: request.call_id,
                server,
                command_line,
                root,
            },
        }
    }
}

impl tower_lsp_server::ls_types::notification::Notification for PenEvent {
    type Params = EventParams;
    const METHOD: &'static str = methods::EVENT;
}

/// The `pen/requestApproval` request (pen → client).
pub enum RequestApproval {}

/// The client's answer to `pen/requestApproval`: an object with a known `decision` and at most
/// a string `reason`, nothing else. Anything else fails to parse, and a failed answer is never
/// an allow (fail closed): an array (`["allow"]`, which serde would take field by field), a
/// string, `null`, an unknown decision or field, a `reason` that is not a string.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(
    rename_all = "camelCase",
    try_from = "serde_json::Map<String, serde_json::Value>"
)]
pub struct ApprovalResponse {
    pub decision: Decision,
    #[serde(default)]
    #[cfg_attr(test, ts(optional))]
    pub reason: Option<String>,
}

/// The owner's decision, as the client sends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Allow,
    AllowForSession,
    Deny,
}

impl Decision {
    pub const ALL: [Decision; 3] = [Decision::Allow, Decision::AllowForSession, Decision::Deny];
}

impl From<Decision> for agent::Decision {
    fn from(decision: Decision) -> agent::Decision {
        match decision {
            Decision::Allow => agent::Decision::Allow,
            Decision::AllowForSession => agent::Decision::AllowForSession,
            Decision::Deny => agent::Decision::Deny,
        }
    }
}

/// The fields of an approval answer, checked once its JSON is known to be an object.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ApprovalFields {
    /// A string: serde would also read an enum from `{"allow": null}`.
    decision: String,
    #[serde(default)]
    reason: Option<String>,
}

impl TryFrom<serde_json::Map<String, serde_json::Value>> for ApprovalResponse {
    type Error = serde_json::Error;

    fn try_from(
        object: serde_json::Map<String, serde_json::Value>,
    ) -> Result<ApprovalResponse, serde_json::Error> {
        use serde::de::Error as _;
        let fields: ApprovalFields = serde_json::from_value(serde_json::Value::Object(object))?;
        let decision = match fields.decision.as_str() {
            "allow" => Decision::Allow,
            "allow_for_session" => Decision::AllowForSession,
            "deny" => Decision::Deny,
            other => {
                return Err(serde_json::Error::custom(format!(
                    "unknown decision `{other}`; expected allow, allow_for_session or deny"
                )));
            }
        };
        Ok(ApprovalResponse {
            decision,
            reason: fields.reason,
        })
    }
}

impl tower_lsp_server::ls_types::request::Request for RequestApproval {
    type Params = ApprovalParams;
    type Result = ApprovalResponse;
    const METHOD: &'static str = methods::REQUEST_APPROVAL;
}

#[cfg(test)]
mod codegen;
