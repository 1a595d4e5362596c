//! Model providers behind one trait: OpenAI-compatible Chat Completions, Anthropic Messages and
//! Amazon Bedrock Converse.
//!
//! API boundary: the agent loop speaks only the neutral types of this module ([`ModelRequest`],
//! [`Message`], [`ModelResponse`], [`ProviderError`]); each backend maps them to its wire format
//! and back, streams where its API streams, and classifies its own errors — in particular
//! whether a rejection means the request was over the model's context window
//! ([`ProviderError::context_window_exceeded`]). The loop never reads provider wording.

pub mod bedrock;

pub use cache::{CacheHints, PartSizes};
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

pub mod anthropic;
pub mod cache;
pub mod choice;
pub mod facts;
pub mod hints;
pub mod ollama;
pub mod openai;
pub mod retry;
pub mod window;
mod wire;

/// Installs rustls' ring crypto provider for the process, if none is yet. pen's reqwest, shared
/// with rmcp's MCP transport (one HTTP stack), is built without a provider of its own so that no
/// second crypto library is compiled in, and it panics when it builds a client while none is
/// installed: every HTTP client of pen is built after this call ([`http_client_builder`], the
/// MCP client's transport).
pub fn install_crypto_provider() {
    // An error means a provider is installed already, which is all that is needed.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A builder for an HTTP client, after [`install_crypto_provider`].
pub fn http_client_builder() -> reqwest::ClientBuilder {
    install_crypto_provider();
    reqwest::Client::builder()
}

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

/// A reasoning ("thinking") block of an answer, kept so it can be sent back: Anthropic and
/// Bedrock require the thinking blocks of the last assistant message of a tool-use loop, with
/// their signatures, on the following requests. Reasoning blocks precede the text and calls of
/// their message, in the order received.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReasoningBlock {
    pub text: String,
    /// The provider's opaque signature over the block, round-tripped unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// The opaque data of a redacted block (Anthropic `redacted_thinking`, Bedrock
    /// `redactedContent`), round-tripped unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redacted: Option<String>,
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
        /// The reasoning that came with the message, in the order received; it precedes the
        /// text and the calls on the wire.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        reasoning: Vec<ReasoningBlock>,
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
    /// What the backend may use to make the provider's prompt cache hit.
    pub cache: cache::CacheHints,
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

/// Token usage as the provider reported it, normalised: every backend fills the same fields
/// from its own (see each backend's `usage` reading and its fixtures).
///
/// `input_tokens` is the prompt in total, cached tokens included, whatever the provider counts
/// apart: calibration compares it with the estimate of the whole request. The cache and
/// reasoning counts are `None` when the provider did not report them (and in usage an older pen
/// stored), never a guessed 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens in total: uncached, read from the cache and written to it.
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Of `input_tokens`, those read from the provider's prompt cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_tokens: Option<u64>,
    /// Of `input_tokens`, those written to the prompt cache (Anthropic and Bedrock bill them
    /// apart).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_tokens: Option<u64>,
    /// Of `output_tokens`, the model's reasoning, where the provider reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
}

impl Usage {
    /// Usage with only the two counts every provider reports.
    pub const fn new(input_tokens: u64, output_tokens: u64) -> Usage {
        Usage {
            input_tokens,
            output_tokens,
            cache_read_tokens: None,
            cache_write_tokens: None,
            reasoning_tokens: None,
        }
    }

    /// Adds `other` to these totals (saturating); a count either side reported is kept.
    pub fn add(&mut self, other: &Usage) {
        fn sum(a: Option<u64>, b: Option<u64>) -> Option<u64> {
            match (a, b) {
                (None, None) => None,
                (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
            }
        }
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cache_read_tokens = sum(self.cache_read_tokens, other.cache_read_tokens);
        self.cache_write_tokens = sum(self.cache_write_tokens, other.cache_write_tokens);
        self.reasoning_tokens = sum(self.reasoning_tokens, other.reasoning_tokens);
    }
}

/// A complete assistant turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelResponse {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    /// Reasoning blocks, in the order received; they precede the text and the calls, and go
    /// back unchanged in the [`Message::Assistant`] that records this answer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasoning: Vec<ReasoningBlock>,
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

    /// Whether the usage this backend reports counts the whole prompt (cached tokens
    /// included), so that it may calibrate pen's token estimate. Native Ollama's
    /// `prompt_eval_count` counts only what it evaluated after a cache hit.
    fn usage_is_total(&self) -> bool {
        true
    }

    /// A warning about an answer's usage that the owner should see (native Ollama: a prompt
    /// count that says the server likely truncated the request).
    fn check_usage(&self, _request: &ModelRequest, _usage: &Usage) -> Option<String> {
        None
    }
}

/// A boxed provider is a provider, so wrappers such as [`retry::Retrying`] take the result of
/// [`build`].
impl<P: Provider + ?Sized> Provider for Box<P> {
    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
        on_event: &'a (dyn Fn(StreamEvent) + Send + Sync),
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ModelResponse, ProviderError>> {
        (**self).complete(request, on_event, cancel)
    }

    fn usage_is_total(&self) -> bool {
        (**self).usage_is_total()
    }

    fn check_usage(&self, request: &ModelRequest, usage: &Usage) -> Option<String> {
        (**self).check_usage(request, usage)
    }
}

/// Which API a provider speaks (defined in [`crate::config`], below this module, whose
/// `provider` key it is).
pub use crate::config::ProviderKind;

/// What [`build`] needs to make a provider.
#[derive(Clone, PartialEq, Eq)]
pub struct ProviderSettings {
    pub kind: ProviderKind,
    /// The model the loop names in every [`ModelRequest`]; required.
    pub model: String,
    /// The API's base URL; `None` for the provider's public endpoint.
    pub base_url: Option<String>,
    /// Never logged: `Debug` prints `[redacted]`, and errors have it removed.
    pub api_key: Option<String>,
    /// The environment variable the key is read from (the provider's usual one or the one
    /// `api_key_env` names), which a refusal for want of a key names ([`hints`]).
    pub key_variable: Option<String>,
    /// How long the provider may stay silent (connecting, before the answer starts, between
    /// two pieces of it) before the request fails with `Timeout`.
    pub request_timeout: Duration,
    /// Attempts per request, the first included, for retryable failures.
    pub max_attempts: u32,
    /// Anthropic's and Bedrock's extended-thinking budget (`budget_tokens`); 0 turns thinking
    /// off. Thinking tokens count against the request's `max_output_tokens`, which must exceed
    /// it. OpenAI-compatible servers ignore it.
    pub reasoning_budget_tokens: u32,
    /// Whether an OpenAI-compatible request carries `prompt_cache_key`: `None` for
    /// api.openai.com only (the config's `prompt_cache_key = "auto"`).
    pub prompt_cache_key: Option<bool>,
}

impl ProviderSettings {
    /// Settings for `kind` and `model` with the default endpoint, no key, and the timeout and
    /// attempts of [`crate::limits`].
    pub fn new(kind: ProviderKind, model: impl Into<String>) -> ProviderSettings {
        ProviderSettings {
            kind,
            model: model.into(),
            base_url: None,
            api_key: None,
            key_variable: None,
            request_timeout: crate::limits::PROVIDER_REQUEST_TIMEOUT,
            max_attempts: crate::limits::PROVIDER_MAX_ATTEMPTS,
            reasoning_budget_tokens: 0,
            prompt_cache_key: None,
        }
    }
}

impl fmt::Debug for ProviderSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderSettings")
            .field("kind", &self.kind)
            .field("model", &self.model)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "[redacted]"))
            .field("key_variable", &self.key_variable)
            .field("request_timeout", &self.request_timeout)
            .field("max_attempts", &self.max_attempts)
            .field("reasoning_budget_tokens", &self.reasoning_budget_tokens)
            .field("prompt_cache_key", &self.prompt_cache_key)
            .finish()
    }
}

/// The provider `settings` describe, retrying as [`retry::Retrying`] does up to
/// `settings.max_attempts`. Its one HTTP client (with `settings.request_timeout`) serves every
/// request and retry, so connections are reused. A missing key or a bad base URL is a `Config`
/// error here, before any request.
pub fn build(settings: &ProviderSettings) -> Result<Box<dyn Provider>, ProviderError> {
    if settings.model.trim().is_empty() {
        return Err(ProviderError::new(
            ErrorKind::Config,
            "no model is configured",
        ));
    }
    let client = wire::http_client(settings.request_timeout)?;
    let backend: Box<dyn Provider> = match settings.kind {
        ProviderKind::OpenAi => Box::new(openai::OpenAiProvider::new(client, settings)?),
        ProviderKind::Anthropic => Box::new(anthropic::AnthropicProvider::new(client, settings)?),
        ProviderKind::Ollama => Box::new(ollama::OllamaProvider::new(client, settings)?),
        ProviderKind::Bedrock => Box::new(
            bedrock::BedrockProvider::from_env(
                settings.model.clone(),
                settings.base_url.clone(),
                settings.request_timeout,
            )?
            .with_reasoning_budget(settings.reasoning_budget_tokens),
        ),
    };
    Ok(Box::new(retry::Retrying::new(
        backend,
        retry::RetryPolicy::new(settings.max_attempts),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_kinds_have_one_name_in_the_config_and_in_serde() {
        for kind in ProviderKind::ALL {
            assert_eq!(ProviderKind::from_name(kind.as_str()), Some(kind));
            assert_eq!(
                serde_json::to_value(kind).unwrap(),
                serde_json::json!(kind.as_str())
            );
            assert_eq!(kind.to_string(), kind.as_str());
        }
        assert_eq!(ProviderKind::OpenAi.as_str(), "openai");
        assert_eq!(ProviderKind::from_name("gemini"), None);
    }

    #[test]
    fn reasoning_is_optional_on_the_wire_of_messages_and_answers() {
        use serde_json::json;
        // What older sessions and callers wrote reads back with no reasoning.
        let old: Message =
            serde_json::from_value(json!({"role": "assistant", "text": "hi", "tool_calls": []}))
                .unwrap();
        assert_eq!(
            old,
            Message::Assistant {
                text: "hi".into(),
                tool_calls: vec![],
                reasoning: vec![],
            }
        );
        assert_eq!(
            serde_json::to_value(&old).unwrap(),
            json!({"role": "assistant", "text": "hi", "tool_calls": []})
        );
        let block = ReasoningBlock {
            text: "why".into(),
            signature: Some("sig".into()),
            redacted: None,
        };
        assert_eq!(
            serde_json::to_value(&block).unwrap(),
            json!({"text": "why", "signature": "sig"})
        );
        let stored = json!([{"text": "why", "signature": "sig"}, {"text": "", "redacted": "x=="}]);
        let blocks: Vec<ReasoningBlock> = serde_json::from_value(stored).unwrap();
        assert_eq!(blocks[0], block);
        assert_eq!(blocks[1].redacted.as_deref(), Some("x=="));
    }

    #[test]
    fn settings_debug_never_shows_the_key() {
        let mut settings = ProviderSettings::new(ProviderKind::Anthropic, "claude-test");
        settings.api_key = Some("sk-ant-secret".into());
        let shown = format!("{settings:?}");
        assert!(!shown.contains("sk-ant-secret"), "{shown}");
        assert!(shown.contains("[redacted]"), "{shown}");
    }

    #[test]
    fn build_refuses_what_cannot_work_before_any_request() {
        use ProviderKind::{Anthropic, OpenAi};
        let ollama = Some("http://127.0.0.1:11434/v1");
        let cases = [
            (OpenAi, " ", ollama, None, "no model is configured"),
            (Anthropic, "m", None, None, "needs an API key"),
            (OpenAi, "m", None, None, "needs an API key"),
            (OpenAi, "m", Some("localhost:11434"), None, "is not an http"),
            (OpenAi, "m", None, Some("bad\nkey"), "cannot carry"),
        ];
        for (kind, model, base_url, api_key, wording) in cases {
            let mut settings = ProviderSettings::new(kind, model);
            settings.base_url = base_url.map(str::to_string);
            settings.api_key = api_key.map(str::to_string);
            let error = build(&settings).err().expect("a Config error");
            assert_eq!(error.kind, ErrorKind::Config, "{kind:?}");
            assert!(error.message.contains(wording), "{}", error.message);
        }
        let mut local = ProviderSettings::new(ProviderKind::OpenAi, "smollm2");
        local.base_url = Some("http://127.0.0.1:11434/v1".into());
        assert!(build(&local).is_ok());
    }
}
