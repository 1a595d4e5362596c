//! The Agent Client Protocol v1 wire types pen speaks: the subset of the schema (`schema.json`
//! of agentclientprotocol/agent-client-protocol, schema v1) that `pen acp` reads and writes, with
//! one derive stack. Unknown fields are ignored on input, so a client on a later minor schema
//! (new optional fields, `_meta`) is understood; nothing here knows the turn engine.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The one ACP protocol version pen implements.
pub const PROTOCOL_VERSION: u16 = 1;

/// ACP's error code for "authentication required" (the schema's `AUTH_REQUIRED`).
pub const AUTH_REQUIRED: i64 = -32000;

/// ACP's error code for "resource not found" (an unknown session).
pub const RESOURCE_NOT_FOUND: i64 = -32002;

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeParams {
    pub protocol_version: u16,
    #[serde(default)]
    pub client_capabilities: ClientCapabilities,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientCapabilities {
    #[serde(default)]
    pub fs: FileSystemCapability,
    #[serde(default)]
    pub terminal: bool,
}

#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileSystemCapability {
    #[serde(default)]
    pub read_text_file: bool,
    #[serde(default)]
    pub write_text_file: bool,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResponse {
    pub protocol_version: u16,
    pub agent_capabilities: AgentCapabilities,
    pub auth_methods: Vec<Value>,
    pub agent_info: Implementation,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentCapabilities {
    pub load_session: bool,
    pub prompt_capabilities: PromptCapabilities,
    pub mcp_capabilities: McpCapabilities,
}

/// Text and resource links are baseline in ACP; embedded context is the one pen opts into.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptCapabilities {
    pub image: bool,
    pub audio: bool,
    pub embedded_context: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct McpCapabilities {
    pub http: bool,
    pub sse: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Implementation {
    pub name: String,
    pub title: String,
    pub version: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewSessionParams {
    pub cwd: String,
    /// Required by the schema; a client that leaves it out asks for none.
    #[serde(default)]
    pub mcp_servers: Vec<McpServer>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadSessionParams {
    pub session_id: String,
    pub cwd: String,
    /// Required by the schema; a client that leaves it out asks for none.
    #[serde(default)]
    pub mcp_servers: Vec<McpServer>,
}

/// An MCP server the client asks the agent to connect to: stdio (no `type`), or `http`/`sse`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum McpServer {
    Remote(RemoteMcpServer),
    Stdio(StdioMcpServer),
}

impl McpServer {
    pub fn name(&self) -> &str {
        match self {
            McpServer::Remote(server) => &server.name,
            McpServer::Stdio(server) => &server.name,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct StdioMcpServer {
    pub name: String,
    pub command: String,
    pub args: Vec<String>,
    #[serde(default)]
    pub env: Vec<NameValue>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct RemoteMcpServer {
    #[serde(rename = "type")]
    pub transport: RemoteTransport,
    pub name: String,
    pub url: String,
    #[serde(default)]
    pub headers: Vec<NameValue>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RemoteTransport {
    Http,
    Sse,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct NameValue {
    pub name: String,
    pub value: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NewSessionResponse {
    pub session_id: String,
    pub modes: SessionModeState,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadSessionResponse {
    pub modes: SessionModeState,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionModeState {
    pub current_mode_id: String,
    pub available_modes: Vec<SessionMode>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SessionMode {
    pub id: String,
    pub name: String,
    pub description: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SetModeParams {
    pub session_id: String,
    pub mode_id: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptParams {
    pub session_id: String,
    pub prompt: Vec<ContentBlock>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptResponse {
    pub stop_reason: &'static str,
    /// pen's extension: the turn's and the session's token usage (pen's `usage` shape, as in
    /// `pen/prompt`'s answer), under `_meta.pen`; absent when the provider reported none.
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelParams {
    pub session_id: String,
}

/// A content block of a prompt or an update.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    Text {
        text: String,
    },
    ResourceLink {
        uri: String,
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        title: Option<String>,
    },
    Resource {
        resource: EmbeddedResource,
    },
    Image {},
    Audio {},
}

/// The contents of an embedded resource: text (which pen reads) or a blob (which it refuses).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EmbeddedResource {
    pub uri: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blob: Option<String>,
}

impl ContentBlock {
    pub fn text(text: impl Into<String>) -> ContentBlock {
        ContentBlock::Text { text: text.into() }
    }
}

/// The `session/update` notification.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionNotification {
    pub session_id: String,
    pub update: SessionUpdate,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "sessionUpdate", rename_all = "snake_case")]
pub enum SessionUpdate {
    UserMessageChunk {
        content: ContentBlock,
    },
    AgentMessageChunk {
        content: ContentBlock,
    },
    ToolCall(ToolCall),
    ToolCallUpdate(ToolCallUpdate),
    CurrentModeUpdate {
        #[serde(rename = "currentModeId")]
        current_mode_id: String,
    },
    /// The agent's whole plan, in order; each one replaces the last.
    Plan {
        entries: Vec<PlanEntry>,
    },
}

/// One entry of a `plan` update.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanEntry {
    pub content: String,
    pub priority: PlanEntryPriority,
    pub status: PlanEntryStatus,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanEntryPriority {
    High,
    Medium,
    Low,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanEntryStatus {
    Pending,
    InProgress,
    Completed,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCall {
    pub tool_call_id: String,
    pub title: String,
    pub kind: ToolKind,
    pub status: ToolCallStatus,
    pub locations: Vec<ToolCallLocation>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_input: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallUpdate {
    pub tool_call_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<ToolKind>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<ToolCallStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<Vec<ToolCallContent>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub locations: Option<Vec<ToolCallLocation>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_input: Option<Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    Read,
    Edit,
    Search,
    Execute,
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolCallStatus {
    Pending,
    InProgress,
    Completed,
    Failed,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolCallLocation {
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToolCallContent {
    Content {
        content: ContentBlock,
    },
    Diff {
        path: String,
        #[serde(rename = "oldText")]
        old_text: Option<String>,
        #[serde(rename = "newText")]
        new_text: String,
    },
}

/// `session/request_permission`, sent to the client.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestPermissionParams {
    pub session_id: String,
    pub tool_call: ToolCallUpdate,
    pub options: Vec<PermissionOption>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PermissionOption {
    pub option_id: &'static str,
    pub name: &'static str,
    pub kind: &'static str,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RequestPermissionResponse {
    pub outcome: PermissionOutcome,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum PermissionOutcome {
    Cancelled,
    Selected {
        #[serde(rename = "optionId")]
        option_id: String,
    },
}

/// `fs/read_text_file`, sent to the client.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadTextFileParams {
    pub session_id: String,
    pub path: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ReadTextFileResponse {
    pub content: String,
}

/// `fs/write_text_file`, sent to the client.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WriteTextFileParams {
    pub session_id: String,
    pub path: String,
    pub content: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn mcp_servers_of_every_transport_parse() {
        let servers: Vec<McpServer> = serde_json::from_value(json!([
            {"name": "fs", "command": "/bin/mcp", "args": ["--x"], "env": [{"name": "A", "value": "1"}]},
            {"type": "http", "name": "web", "url": "http://127.0.0.1:1/mcp", "headers": []},
            {"type": "sse", "name": "old", "url": "http://127.0.0.1:1/sse", "headers": []},
        ]))
        .unwrap();
        assert_eq!(servers[0].name(), "fs");
        assert!(
            matches!(&servers[0], McpServer::Stdio(s) if s.args == ["--x"] && s.env[0].value == "1")
        );
        assert!(
            matches!(&servers[1], McpServer::Remote(s) if s.transport == RemoteTransport::Http)
        );
        assert!(matches!(&servers[2], McpServer::Remote(s) if s.transport == RemoteTransport::Sse));
        let bad = serde_json::from_value::<Vec<McpServer>>(json!([{"name": "x"}]));
        assert!(bad.is_err());
    }

    #[test]
    fn updates_serialize_as_the_schema_names_them() {
        let update = SessionNotification {
            session_id: "s".into(),
            update: SessionUpdate::ToolCallUpdate(ToolCallUpdate {
                tool_call_id: "c".into(),
                status: Some(ToolCallStatus::Completed),
                content: Some(vec![ToolCallContent::Diff {
                    path: "/w/a".into(),
                    old_text: None,
                    new_text: "x\r\n".into(),
                }]),
                ..Default::default()
            }),
        };
        assert_eq!(
            serde_json::to_value(&update).unwrap(),
            json!({"sessionId": "s", "update": {"sessionUpdate": "tool_call_update",
                "toolCallId": "c", "status": "completed",
                "content": [{"type": "diff", "path": "/w/a", "oldText": null, "newText": "x\r\n"}]}})
        );
        let chunk = SessionUpdate::AgentMessageChunk {
            content: ContentBlock::text("hi"),
        };
        assert_eq!(
            serde_json::to_value(&chunk).unwrap(),
            json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}})
        );
    }

    #[test]
    fn permission_outcomes_parse() {
        let selected: RequestPermissionResponse = serde_json::from_value(
            json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}}),
        )
        .unwrap();
        assert!(
            matches!(selected.outcome, PermissionOutcome::Selected { option_id } if option_id == "allow_once")
        );
        let cancelled: RequestPermissionResponse =
            serde_json::from_value(json!({"outcome": {"outcome": "cancelled"}})).unwrap();
        assert!(matches!(cancelled.outcome, PermissionOutcome::Cancelled));
    }
}
