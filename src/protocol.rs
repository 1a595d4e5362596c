//! Wire types of the `pen/…` methods and conversions between LSP types and pen's own.
//!
//! One derive stack (`Serialize, Deserialize`, camelCase) for every params and result type;
//! core modules never see these.

use crate::documents::{self, PositionEncoding};
use crate::session;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::PathBuf;
use tower_lsp_server::ls_types::{self as lsp, PositionEncodingKind, Uri};

/// `pen/callTool` params: one native tool, no model.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NewSessionParams {
    pub title: Option<String>,
}

/// `pen/listSessions` params.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
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
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GetTranscriptParams {
    pub session_id: String,
    pub after_seq: Option<u64>,
    pub limit: Option<usize>,
}

/// A session as the protocol shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
#[serde(rename_all = "camelCase")]
pub struct ListSessionsResponse {
    pub sessions: Vec<SessionSummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
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

/// One transcript entry as the protocol shows it.
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

/// `pen/getTranscript` result.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TranscriptResponse {
    pub session_id: String,
    pub entries: Vec<TranscriptEntry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_after_seq: Option<u64>,
}

/// `pen/prompt` params: run one turn of the agent in a session.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PromptParams {
    pub session_id: String,
    pub text: String,
}

/// `pen/prompt` result, sent when the turn ends.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptResponse {
    pub session_id: String,
    pub turn_id: String,
    pub stop_reason: crate::agent::StopReason,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// `history_unrepairable` when the session can never run a turn again (offer a new one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<crate::agent::TurnErrorKind>,
}

/// `pen/stop` params.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StopParams {
    pub session_id: String,
}

/// `pen/stop` result: whether a running turn was told to stop.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StopResponse {
    pub stopped: bool,
}

/// The `pen/event` notification (pen → client).
pub enum PenEvent {}

impl tower_lsp_server::ls_types::notification::Notification for PenEvent {
    type Params = crate::agent::AgentEvent;
    const METHOD: &'static str = "pen/event";
}

/// The `pen/requestApproval` request (pen → client).
pub enum RequestApproval {}

/// The client's answer to `pen/requestApproval`: an object with a known `decision` and at most
/// a string `reason`, nothing else. Anything else fails to parse, and a failed answer is never
/// an allow (fail closed): an array (`["allow"]`, which serde would take field by field), a
/// string, `null`, an unknown decision or field, a `reason` that is not a string.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(
    rename_all = "camelCase",
    try_from = "serde_json::Map<String, serde_json::Value>"
)]
pub struct ApprovalResponse {
    pub decision: crate::agent::Decision,
    #[serde(default)]
    pub reason: Option<String>,
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
            "allow" => crate::agent::Decision::Allow,
            "allow_for_session" => crate::agent::Decision::AllowForSession,
            "deny" => crate::agent::Decision::Deny,
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
    type Params = crate::agent::ApprovalRequest;
    type Result = ApprovalResponse;
    const METHOD: &'static str = "pen/requestApproval";
}
