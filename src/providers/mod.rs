//! Model providers behind one trait: OpenAI-compatible Chat Completions, Anthropic Messages and
//! Amazon Bedrock Converse.
//!
//! API boundary: the agent loop speaks only the neutral types of this module ([`ModelRequest`],
//! [`Message`], [`ModelResponse`], [`ProviderError`]); each backend maps them to its wire format
//! and back, streams where its API streams, and classifies its own errors — in particular
//! whether a rejection means the request was over the model's context window
//! ([`ProviderError::context_window_exceeded`]). The loop never reads provider wording.

pub mod bedrock;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// A tool the model may call: its name, description and the JSON Schema of its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    pub name: String,
    pub description: String,
    pub input_schema: serde_json::Value,
}

/// A tool call the model made. `arguments` is the raw JSON text the model produced: it may be
/// invalid, and the loop answers that with an error result rather than the backend failing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// One message of the conversation, provider-neutral. The system prompt is not a message: it
/// travels once, in [`ModelRequest::system`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    User {
        text: String,
    },
    Assistant {
        text: String,
        tool_calls: Vec<ToolCall>,
    },
    /// The result of one tool call; results of one assistant message follow it in call order.
    ToolResult {
        call_id: String,
        content: String,
        is_error: bool,
    },
}

/// Everything one provider request carries.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelRequest {
    pub model: String,
    pub system: String,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolDefinition>,
    pub max_output_tokens: u32,
}

/// Why the model stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// A final answer.
    EndTurn,
    /// The model asked for tools.
    ToolUse,
    /// The output hit `max_output_tokens`.
    MaxTokens,
    /// Anything else the provider reported.
    Other,
}

/// Token usage as the provider reported it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// A complete assistant turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelResponse {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    pub finish_reason: FinishReason,
    pub usage: Option<Usage>,
}

/// What a backend reports while a response streams in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent {
    TextDelta(String),
}

/// How a request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The prompt is over the model's context window. Never retried; the loop shrinks the
    /// newest tool results and retries once.
    ContextWindowExceeded,
    /// HTTP 429.
    RateLimited,
    /// HTTP 5xx.
    Server,
    /// The connection failed or dropped, or the stream ended without its terminator.
    Network,
    /// HTTP 401/403.
    Auth,
    /// Any other rejection of the request (HTTP 4xx), including output-limit errors.
    BadRequest,
    /// The request timed out.
    Timeout,
    /// Stop was requested.
    Cancelled,
    /// The response could not be understood.
    Protocol,
    /// The provider is not configured (no key, no base URL).
    Config,
}

/// A failed provider request, classified by the backend that made it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ProviderError {
    pub kind: ErrorKind,
    pub status: Option<u16>,
    /// What happened, for the user and the log; never contains an API key.
    pub message: String,
    /// The provider's `Retry-After`, when it sent one.
    pub retry_after: Option<Duration>,
}

impl ProviderError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> ProviderError {
        ProviderError {
            kind,
            status: None,
            message: message.into(),
            retry_after: None,
        }
    }

    /// Whether the provider rejected the request as over the model's context window.
    pub fn context_window_exceeded(&self) -> bool {
        self.kind == ErrorKind::ContextWindowExceeded
    }

    /// Whether trying the same request again may succeed: 429, 5xx, a dropped connection or a
    /// timeout. Never a context-window rejection.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.kind,
            ErrorKind::RateLimited | ErrorKind::Server | ErrorKind::Network | ErrorKind::Timeout
        )
    }
}

/// A model API.
pub trait Provider: Send + Sync {
    /// Sends one request and returns the whole assistant turn, reporting text deltas to
    /// `on_event` as they stream in. Returns `Cancelled` promptly once `cancel` fires.
    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
        on_event: &'a (dyn Fn(StreamEvent) + Send + Sync),
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ModelResponse, ProviderError>>;
}
