//! The OpenAI-compatible Chat Completions backend: OpenAI itself and the local servers that copy
//! its API (Ollama, llama.cpp's llama-server, llama-cpp-python, vLLM) through `base_url`.
//!
//! Requests stream (`stream: true` with `stream_options.include_usage`); the answer is assembled
//! from `chat.completion.chunk` events up to `data: [DONE]`. Local servers differ from OpenAI in
//! ways this module absorbs rather than reports (each seen on a real server):
//! - llama-cpp-python answers HTTP 500 to an assistant message whose `content` is null, so an
//!   assistant message with tool calls carries `content: ""`;
//! - llama-cpp-python repeats a tool call's `id` and `name` in every chunk and adds a legacy
//!   `function_call`, so names are replaced, never concatenated, and `function_call` is ignored;
//! - llama-cpp-python answers a streamed prompt over its context window with HTTP 200 and an
//!   empty body, so a stream that closes with no chunk and no `[DONE]` is a failed request;
//! - llama-server's error envelope has a numeric `code` and its own `type`;
//! - llama-server, vLLM and DeepSeek stream a reasoning model's thinking as `reasoning_content`
//!   deltas (Ollama and OpenRouter as `reasoning`). It is kept as one unsigned
//!   [`ReasoningBlock`] of the answer but never sent back: Chat Completions has no standard
//!   request field for it (DeepSeek documents a 400 for a request that carries
//!   `reasoning_content`), and these servers continue a conversation without it.

use super::wire::{self, StreamDecoder};
use super::{
    ErrorKind, FinishReason, Message, ModelRequest, ModelResponse, Provider, ProviderError,
    ProviderSettings, ReasoningBlock, StreamEvent, ToolCall, Usage,
};
use futures::future::BoxFuture;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use tokio_util::sync::CancellationToken;

/// An OpenAI-compatible Chat Completions API.
pub struct OpenAiProvider {
    client: reqwest::Client,
    /// The base URL (no trailing slash) and the chat path under it.
    base: String,
    url: String,
    headers: HeaderMap,
    api_key: Option<String>,
    /// The variable the key is read from, for the hint of a 401 ([`super::hints`]).
    key_variable: Option<String>,
    /// How error messages name this provider: the API and its base URL.
    label: String,
    /// The request field that carries the output limit (see [`OpenAiProvider::new`]).
    output_limit_field: &'static str,
    /// Whether requests carry `prompt_cache_key` (see [`OpenAiProvider::new`]).
    prompt_cache_key: bool,
}

impl OpenAiProvider {
    /// A provider for `settings.base_url` (default: its [`ProviderFacts::default_base_url`](super::facts::ProviderFacts)). A key is sent as
    /// `Authorization: Bearer` only when one is configured: local servers need none, while
    /// OpenAI itself refuses a request without one, so that combination is a `Config` error here
    /// rather than a 401 later.
    ///
    /// OpenAI's own API takes the output limit as `max_completion_tokens` (its reasoning models
    /// refuse the deprecated `max_tokens`); the local servers read `max_tokens`, so that is what
    /// every other base URL gets.
    ///
    /// OpenAI caches prompts by prefix on its own, routing by a hash of the prefix;
    /// `prompt_cache_key` (the session id) keeps one session's requests on the same cache. It
    /// goes to OpenAI itself, or anywhere `settings.prompt_cache_key` says: other servers may
    /// refuse a field they do not know. (llama-server's `cache_prompt` is not sent: it is on by
    /// default there, and Ollama and vLLM reuse their KV cache without being asked.)
    pub fn new(
        client: reqwest::Client,
        settings: &ProviderSettings,
    ) -> Result<OpenAiProvider, ProviderError> {
        let base = wire::base_url(
            settings
                .base_url
                .as_deref()
                .unwrap_or(super::ProviderKind::OpenAi.facts().default_base_url),
        )?;
        let is_openai = reqwest::Url::parse(&base)
            .ok()
            .and_then(|url| url.host_str().map(|host| host == "api.openai.com"))
            .unwrap_or(false);
        let api_key = settings.api_key.clone().filter(|key| !key.is_empty());
        let mut headers = HeaderMap::new();
        match &api_key {
            Some(key) => {
                headers.insert(
                    AUTHORIZATION,
                    wire::secret_header(&format!("Bearer {key}"))?,
                );
            }
            None if is_openai => {
                return Err(ProviderError::new(
                    ErrorKind::Config,
                    format!(
                        "the OpenAI API at {base} needs an API key; configure one, or point \
                         base_url at a local server"
                    ),
                ));
            }
            None => {}
        }
        headers.insert("accept", HeaderValue::from_static("text/event-stream"));
        Ok(OpenAiProvider {
            client,
            url: format!("{base}/chat/completions"),
            headers,
            api_key,
            key_variable: settings.key_variable.clone(),
            label: format!("OpenAI-compatible API at {base}"),
            output_limit_field: if is_openai {
                "max_completion_tokens"
            } else {
                "max_tokens"
            },
            prompt_cache_key: settings.prompt_cache_key.unwrap_or(is_openai),
            base,
        })
    }

    async fn stream(
        &self,
        request: &ModelRequest,
        on_event: &(dyn Fn(StreamEvent) + Send + Sync),
        cancel: &CancellationToken,
    ) -> Result<ModelResponse, ProviderError> {
        let mut body = request_body(request, self.output_limit_field);
        if self.prompt_cache_key
            && let Some(key) = &request.cache.key
        {
            body["prompt_cache_key"] = json!(key);
        }
        let http = self
            .client
            .post(&self.url)
            .headers(self.headers.clone())
            .json(&body);
        wire::complete_sse(
            http,
            classify_error,
            OpenAiStream::default(),
            on_event,
            cancel,
        )
        .await
    }
}

impl Provider for OpenAiProvider {
    /// Streams one request; see [`wire::read_until_done`] for what Stop keeps.
    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
        on_event: &'a (dyn Fn(StreamEvent) + Send + Sync),
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ModelResponse, ProviderError>> {
        Box::pin(async move {
            let error = match wire::labelled(
                &self.label,
                self.api_key.as_deref(),
                self.stream(request, on_event, cancel),
            )
            .await
            {
                Err(error) => error,
                answer => return answer,
            };
            let attempt = super::hints::Attempt {
                base: &self.base,
                url: &self.url,
                model: &request.model,
                key_sent: self.api_key.is_some(),
                key_variable: self.key_variable.as_deref(),
            };
            let listed =
                || super::hints::list_models(&self.client, &self.base, self.headers.clone());
            Err(wire::redact(
                super::hints::explain(error, &attempt, listed).await,
                self.api_key.as_deref(),
            ))
        })
    }
}

/// The Chat Completions request body for `request`. Keys are written in a fixed order, so one
/// request always serializes to the same bytes.
/// Appends a message; an assistant message right after an assistant message without tool calls
/// (the prompt budget's excerpts before a kept call) joins it, so servers whose chat templates
/// insist on alternating roles accept the request.
fn push_alternating(messages: &mut Vec<Value>, next: Value) {
    if let Some(last) = messages.last_mut()
        && next["role"] == "assistant"
        && last["role"] == "assistant"
        && last.get("tool_calls").is_none()
    {
        let before = last["content"].as_str().unwrap_or_default();
        let after = next["content"].as_str().unwrap_or_default();
        let joined = match (before.is_empty(), after.is_empty()) {
            (_, true) => before.to_string(),
            (true, false) => after.to_string(),
            (false, false) => format!("{before}\n\n{after}"),
        };
        last["content"] = json!(joined);
        if let Some(calls) = next.get("tool_calls") {
            last["tool_calls"] = calls.clone();
        }
        return;
    }
    messages.push(next);
}

fn request_body(request: &ModelRequest, output_limit_field: &str) -> Value {
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if !request.system.is_empty() {
        messages.push(json!({"role": "system", "content": request.system}));
    }
    for message in &request.messages {
        let next = match message {
            Message::User { text } => json!({"role": "user", "content": text}),
            // Reasoning is never sent back (see the module docs).
            Message::Assistant {
                text, tool_calls, ..
            } if tool_calls.is_empty() => {
                json!({"role": "assistant", "content": text})
            }
            Message::Assistant {
                text, tool_calls, ..
            } => json!({
                "role": "assistant",
                "content": text,
                "tool_calls": tool_calls.iter().map(|call| json!({
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                })).collect::<Vec<_>>(),
            }),
            // Chat Completions has no error flag on a tool message; an error result says so in
            // its content, which is what the model reads either way.
            Message::ToolResult {
                call_id, content, ..
            } => json!({"role": "tool", "tool_call_id": call_id, "content": content}),
        };
        push_alternating(&mut messages, next);
    }
    let mut body = json!({
        "model": request.model,
        "messages": messages,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    body[output_limit_field] = json!(request.max_output_tokens);
    if !request.tools.is_empty() {
        body["tools"] = function_tools(&request.tools);
    }
    body
}

/// Tool definitions in the chat-completions shape (`{"type": "function", "function": {name,
/// description, parameters}}`), which Ollama's `/api/chat` takes too.
pub(super) fn function_tools(tools: &[super::ToolDefinition]) -> Value {
    tools
        .iter()
        .map(|tool| {
            json!({
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.input_schema,
                },
            })
        })
        .collect()
}

/// One `chat.completion.chunk`, as far as pen reads it. Every field may be missing or null on
/// some server.
#[derive(Debug, Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<ChunkChoice>,
    usage: Option<WireUsage>,
    /// llama-server's timings of the request, in the last chunk: `cache_n` prompt tokens came
    /// from its KV cache, `prompt_n` were processed.
    timings: Option<Timings>,
}

#[derive(Debug, Deserialize)]
struct Timings {
    cache_n: Option<u64>,
    prompt_n: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct ChunkChoice {
    #[serde(default)]
    index: u32,
    delta: Option<Delta>,
    finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Delta {
    content: Option<String>,
    /// A reasoning model's thinking: llama-server, vLLM, DeepSeek.
    reasoning_content: Option<String>,
    /// The same under the name Ollama and OpenRouter use.
    reasoning: Option<String>,
    tool_calls: Option<Vec<ToolCallDelta>>,
}

#[derive(Debug, Deserialize)]
struct ToolCallDelta {
    index: Option<u64>,
    id: Option<String>,
    function: Option<FunctionDelta>,
}

#[derive(Debug, Deserialize)]
struct FunctionDelta {
    name: Option<String>,
    arguments: Option<String>,
}

#[derive(Debug, Deserialize)]
struct WireUsage {
    /// The whole prompt, cached tokens included (OpenAI's `cached_tokens` are a part of it).
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    prompt_tokens_details: Option<PromptDetails>,
    completion_tokens_details: Option<CompletionDetails>,
}

#[derive(Debug, Deserialize)]
struct PromptDetails {
    cached_tokens: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct CompletionDetails {
    reasoning_tokens: Option<u64>,
}

/// The normalised usage of a chunk's `usage` and (llama-server) `timings`.
///
/// OpenAI counts the cached part of the prompt in `prompt_tokens_details.cached_tokens`, of
/// `prompt_tokens`, and has no cache writes to bill. llama-server reports its KV-cache reuse in
/// `timings.cache_n` (and, since 2025, `prompt_tokens_details.cached_tokens` too); when it sends
/// timings without usage, the prompt is `cache_n + prompt_n`.
fn normalised_usage(usage: Option<&WireUsage>, timings: Option<&Timings>) -> Option<Usage> {
    let cache_n = timings.and_then(|t| t.cache_n);
    match usage {
        Some(usage) => Some(Usage {
            input_tokens: usage.prompt_tokens,
            output_tokens: usage.completion_tokens,
            cache_read_tokens: usage
                .prompt_tokens_details
                .as_ref()
                .and_then(|d| d.cached_tokens)
                .or(cache_n),
            cache_write_tokens: None,
            reasoning_tokens: usage
                .completion_tokens_details
                .as_ref()
                .and_then(|d| d.reasoning_tokens),
        }),
        None => {
            let timings = timings?;
            let processed = timings.prompt_n?;
            Some(Usage {
                input_tokens: processed.saturating_add(cache_n.unwrap_or(0)),
                output_tokens: 0,
                cache_read_tokens: cache_n,
                ..Usage::default()
            })
        }
    }
}

/// A tool call being assembled from its chunks.
#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// The state of one streamed answer.
#[derive(Debug, Default)]
struct OpenAiStream {
    chunks: usize,
    done: bool,
    text: String,
    /// The thinking the server streamed apart from the text, if any.
    reasoning: String,
    /// Tool calls by their `index`, the only field every chunk of a call carries.
    calls: BTreeMap<u64, PartialCall>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
}

impl StreamDecoder for OpenAiStream {
    fn event(
        &mut self,
        _name: &str,
        data: &str,
        on_event: &(dyn Fn(StreamEvent) + Send + Sync),
    ) -> Result<bool, ProviderError> {
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(true);
        }
        let value: Value = serde_json::from_str(data).map_err(|e| {
            ProviderError::new(
                ErrorKind::Protocol,
                format!("a stream chunk is not JSON ({e}): {}", wire::excerpt(data)),
            )
        })?;
        if value.get("error").is_some() {
            return Err(classify_error(None, data));
        }
        let chunk: Chunk = serde_json::from_value(value).map_err(|e| {
            ProviderError::new(
                ErrorKind::Protocol,
                format!(
                    "a stream chunk has an unexpected shape ({e}): {}",
                    wire::excerpt(data)
                ),
            )
        })?;
        self.chunks += 1;
        if let Some(usage) = normalised_usage(chunk.usage.as_ref(), chunk.timings.as_ref()) {
            // A usage chunk wins over timings alone (which carry no output count).
            if chunk.usage.is_some() || self.usage.is_none() {
                self.usage = Some(usage);
            } else if let Some(known) = self.usage.as_mut() {
                known.cache_read_tokens = known.cache_read_tokens.or(usage.cache_read_tokens);
            }
        }
        // pen asks for one choice; a server that sends more gets the others ignored.
        for choice in chunk.choices.into_iter().filter(|choice| choice.index == 0) {
            if let Some(delta) = choice.delta {
                if let Some(text) = delta.content.filter(|text| !text.is_empty()) {
                    self.text.push_str(&text);
                    on_event(StreamEvent::TextDelta(text));
                }
                if let Some(thought) = delta.reasoning_content.or(delta.reasoning) {
                    self.reasoning.push_str(&thought);
                }
                for (position, call) in delta.tool_calls.into_iter().flatten().enumerate() {
                    self.add_call_delta(position, call);
                }
            }
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason);
            }
        }
        Ok(false)
    }

    fn finish(self) -> Result<ModelResponse, ProviderError> {
        if !self.done && self.chunks == 0 {
            return Err(ProviderError::new(
                ErrorKind::Network,
                "the stream closed early, before any chunk and without [DONE] (llama-cpp-python \
                 does this when the prompt is over its context window)",
            ));
        }
        if !self.done && self.finish_reason.is_none() {
            return Err(ProviderError::new(
                ErrorKind::Network,
                "the stream closed early, before the answer finished and without [DONE]",
            ));
        }
        let tool_calls: Vec<ToolCall> = self
            .calls
            .into_values()
            .map(|call| ToolCall {
                id: if call.id.is_empty() {
                    // A server that sends no id still needs one for the result to answer; it
                    // must be unique in the session, as duplicate ids are refused there.
                    format!("call_{}", uuid::Uuid::now_v7().simple())
                } else {
                    call.id
                },
                name: call.name,
                arguments: call.arguments,
            })
            .collect();
        // Some servers report "stop" after tool calls; the calls are what the loop must act on.
        let finish_reason = match self.finish_reason.as_deref() {
            Some("length") => FinishReason::MaxTokens,
            _ if !tool_calls.is_empty() => FinishReason::ToolUse,
            Some("stop") => FinishReason::EndTurn,
            Some("tool_calls" | "function_call") => FinishReason::ToolUse,
            _ => FinishReason::Other,
        };
        let reasoning = if self.reasoning.is_empty() {
            Vec::new()
        } else {
            vec![ReasoningBlock {
                text: self.reasoning,
                signature: None,
                redacted: None,
            }]
        };
        Ok(ModelResponse {
            text: self.text,
            tool_calls,
            reasoning,
            finish_reason,
            usage: self.usage,
        })
    }
}

impl OpenAiStream {
    /// Adds one chunk's piece of a tool call. The arguments arrive in pieces and are
    /// concatenated; the id and name arrive whole, once (OpenAI) or in every chunk
    /// (llama-cpp-python), so a later copy replaces the earlier one.
    fn add_call_delta(&mut self, position: usize, delta: ToolCallDelta) {
        // A server that omits `index` sends each call whole in one chunk; its place in the
        // chunk's list stands in.
        let index = delta.index.unwrap_or(position as u64);
        let call = self.calls.entry(index).or_default();
        if let Some(id) = delta.id.filter(|id| !id.is_empty()) {
            call.id = id;
        }
        if let Some(function) = delta.function {
            if let Some(name) = function.name.filter(|name| !name.is_empty()) {
                call.name = name;
            }
            if let Some(arguments) = function.arguments {
                call.arguments.push_str(&arguments);
            }
        }
    }
}

/// Classifies a rejection from an OpenAI-compatible server: an HTTP error (`status` set) or an
/// error chunk inside the stream (`status` is `None`; llama-server then puts the status in the
/// envelope's numeric `code`).
///
/// Over the context window: OpenAI's `code: "context_length_exceeded"` (also llama-cpp-python's),
/// llama-server's `type: "exceed_context_size_error"`, or an HTTP 400/413 whose wording says so
/// (vLLM, Ollama, proxies) — but not a rejected output limit.
pub fn classify_error(status: Option<u16>, body: &str) -> ProviderError {
    let envelope = ErrorEnvelope::parse(body);
    let status = status.or(envelope.numeric_code);
    let over_context = envelope.code.as_deref() == Some("context_length_exceeded")
        || envelope.kind.as_deref() == Some("exceed_context_size_error")
        || (matches!(status, Some(400 | 413) | None)
            && wire::says_context_overflow(&envelope.message));
    let kind = if over_context {
        ErrorKind::ContextWindowExceeded
    } else if let Some(status) = status {
        wire::kind_for_status(status)
    } else {
        match (envelope.kind.as_deref(), envelope.code.as_deref()) {
            (_, Some("rate_limit_exceeded")) | (Some("rate_limit_error"), _) => {
                ErrorKind::RateLimited
            }
            (_, Some("invalid_api_key")) | (Some("authentication_error"), _) => ErrorKind::Auth,
            (Some("invalid_request_error"), _) => ErrorKind::BadRequest,
            // An error in the middle of an answer is the server failing, not the request.
            _ => ErrorKind::Server,
        }
    };
    ProviderError {
        kind,
        status,
        message: wire::describe(status, &envelope.message),
        retry_after: None,
    }
}

/// The parts of an error envelope pen reads. The shapes seen: OpenAI's
/// `{"error":{"message","type","param","code"}}` (Ollama, llama-cpp-python and llama-server use
/// it too, llama-server with a numeric `code`), `{"error":"text"}` (Ollama's native API), vLLM's
/// older top-level `{"object":"error","message",…}`, and text that is not JSON at all.
struct ErrorEnvelope {
    message: String,
    kind: Option<String>,
    code: Option<String>,
    numeric_code: Option<u16>,
}

impl ErrorEnvelope {
    fn parse(body: &str) -> ErrorEnvelope {
        let value: Value = serde_json::from_str(body).unwrap_or(Value::Null);
        let wrapped;
        let error = match value.get("error") {
            Some(Value::String(text)) => {
                wrapped = json!({ "message": text });
                &wrapped
            }
            Some(error @ Value::Object(_)) => error,
            _ => &value,
        };
        let text = |key: &str| error.get(key).and_then(Value::as_str).map(str::to_string);
        ErrorEnvelope {
            message: text("message").unwrap_or_else(|| body.to_string()),
            kind: text("type"),
            code: text("code"),
            numeric_code: error
                .get("code")
                .and_then(Value::as_u64)
                .and_then(|code| u16::try_from(code).ok()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::ToolDefinition;

    fn request() -> ModelRequest {
        ModelRequest {
            model: "gpt-test".into(),
            system: "You are pen.".into(),
            messages: vec![
                Message::User {
                    text: "Read a.txt".into(),
                },
                Message::Assistant {
                    text: String::new(),
                    tool_calls: vec![
                        ToolCall {
                            id: "call_1".into(),
                            name: "pen_read".into(),
                            arguments: r#"{"path":"a.txt"}"#.into(),
                        },
                        ToolCall {
                            id: "call_2".into(),
                            name: "pen_list".into(),
                            arguments: "{}".into(),
                        },
                    ],
                    reasoning: vec![],
                },
                Message::ToolResult {
                    call_id: "call_1".into(),
                    content: "hello".into(),
                    is_error: false,
                },
                Message::ToolResult {
                    call_id: "call_2".into(),
                    content: "denied".into(),
                    is_error: true,
                },
                Message::Assistant {
                    text: "It says hello.".into(),
                    tool_calls: vec![],
                    reasoning: vec![],
                },
            ],
            tools: vec![ToolDefinition {
                name: "pen_read".into(),
                description: "Read a file.".into(),
                input_schema: json!({"type": "object"}),
            }],
            max_output_tokens: 1024,
            cache: Default::default(),
        }
    }

    #[test]
    fn an_excerpt_before_a_kept_call_joins_its_assistant_message() {
        let mut request = request();
        request.messages = vec![
            Message::User { text: "go".into() },
            Message::Assistant {
                text: "[excerpt]".into(),
                tool_calls: vec![],
                reasoning: vec![],
            },
            Message::Assistant {
                text: String::new(),
                tool_calls: vec![ToolCall {
                    id: "call_9".into(),
                    name: "pen_read".into(),
                    arguments: "{}".into(),
                }],
                reasoning: vec![],
            },
            Message::ToolResult {
                call_id: "call_9".into(),
                content: "x".into(),
                is_error: false,
            },
        ];
        let body = request_body(&request, "max_tokens");
        assert_eq!(
            body["messages"],
            json!([
                {"role": "system", "content": "You are pen."},
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": "[excerpt]", "tool_calls": [
                    {"id": "call_9", "type": "function", "function": {"name": "pen_read", "arguments": "{}"}},
                ]},
                {"role": "tool", "tool_call_id": "call_9", "content": "x"},
            ])
        );
    }

    #[test]
    fn request_body_has_one_system_message_tools_and_the_tool_round() {
        let body = request_body(&request(), "max_tokens");
        assert_eq!(
            body,
            json!({
                "model": "gpt-test",
                "messages": [
                    {"role": "system", "content": "You are pen."},
                    {"role": "user", "content": "Read a.txt"},
                    {"role": "assistant", "content": "", "tool_calls": [
                        {"id": "call_1", "type": "function",
                         "function": {"name": "pen_read", "arguments": "{\"path\":\"a.txt\"}"}},
                        {"id": "call_2", "type": "function",
                         "function": {"name": "pen_list", "arguments": "{}"}},
                    ]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "hello"},
                    {"role": "tool", "tool_call_id": "call_2", "content": "denied"},
                    {"role": "assistant", "content": "It says hello."},
                ],
                "stream": true,
                "stream_options": {"include_usage": true},
                "max_tokens": 1024,
                "tools": [{"type": "function", "function": {
                    "name": "pen_read",
                    "description": "Read a file.",
                    "parameters": {"type": "object"},
                }}],
            })
        );
    }

    #[test]
    fn request_body_without_system_or_tools_has_neither() {
        let mut request = request();
        request.system.clear();
        request.tools.clear();
        let body = request_body(&request, "max_completion_tokens");
        assert_eq!(body["messages"][0]["role"], "user");
        assert!(body.get("tools").is_none());
        assert_eq!(body["max_completion_tokens"], 1024);
        assert!(body.get("max_tokens").is_none());
    }

    #[test]
    fn only_openai_itself_gets_max_completion_tokens_and_needs_a_key() {
        let client = crate::providers::http_client_builder().build().unwrap();
        let mut settings = ProviderSettings::new(crate::providers::ProviderKind::OpenAi, "m");
        let error = OpenAiProvider::new(client.clone(), &settings)
            .err()
            .unwrap();
        assert_eq!(error.kind, ErrorKind::Config);
        settings.api_key = Some("sk-test".into());
        let openai = OpenAiProvider::new(client.clone(), &settings).unwrap();
        assert_eq!(openai.output_limit_field, "max_completion_tokens");
        assert_eq!(openai.url, "https://api.openai.com/v1/chat/completions");
        settings.api_key = None;
        settings.base_url = Some("http://127.0.0.1:11434/v1/".into());
        let ollama = OpenAiProvider::new(client, &settings).unwrap();
        assert_eq!(ollama.output_limit_field, "max_tokens");
        assert_eq!(ollama.url, "http://127.0.0.1:11434/v1/chat/completions");
        assert!(ollama.headers.get(AUTHORIZATION).is_none());
    }

    fn decode(body: &str, piece: usize) -> (Result<ModelResponse, ProviderError>, Vec<String>) {
        wire::decode_in_pieces(body, piece, OpenAiStream::default())
    }

    fn sse(chunks: &[Value]) -> String {
        chunks
            .iter()
            .map(|chunk| format!("data: {chunk}\n\n"))
            .collect::<String>()
            + "data: [DONE]\n\n"
    }

    #[test]
    fn text_deltas_arrive_in_order_with_usage_from_the_final_chunk() {
        let body = sse(&[
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}], "usage": null}),
            json!({"choices": [{"index": 0, "delta": {"content": "Hel"}, "finish_reason": null}], "usage": null}),
            json!({"choices": [{"index": 0, "delta": {"content": "lo, wörld"}, "finish_reason": null}], "usage": null}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": null}),
            json!({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}}),
        ]);
        // Pieces of 7 bytes split lines, JSON and the two-byte ö across network reads.
        for piece in [body.len(), 7, 1] {
            let (result, deltas) = decode(&body, piece);
            assert_eq!(deltas, ["Hel", "lo, wörld"]);
            assert_eq!(
                result.unwrap(),
                ModelResponse {
                    text: "Hello, wörld".into(),
                    tool_calls: vec![],
                    finish_reason: FinishReason::EndTurn,
                    usage: Some(Usage::new(12, 3)),
                    reasoning: vec![],
                }
            );
        }
    }

    /// The last chunks of real streams: OpenAI's with `include_usage` (a cached prompt and a
    /// reasoning model), and llama-server's, whose final chunk carries `timings`.
    #[test]
    fn usage_reads_cached_and_reasoning_tokens_and_llama_server_timings() {
        let usage_of = |last: Value| {
            let body = sse(&[
                json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "ok"}, "finish_reason": null}], "usage": null}),
                json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": null}),
                last,
            ]);
            decode(&body, 64).0.unwrap().usage
        };
        assert_eq!(
            usage_of(
                json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "gpt-4o-2024-08-06", "choices": [],
                "usage": {"prompt_tokens": 2006, "completion_tokens": 300, "total_tokens": 2306,
                          "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
                          "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                              "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}})
            ),
            Some(Usage {
                input_tokens: 2006,
                output_tokens: 300,
                cache_read_tokens: Some(1920),
                cache_write_tokens: None,
                reasoning_tokens: Some(0),
            })
        );
        assert_eq!(
            usage_of(
                json!({"id": "chatcmpl-2", "object": "chat.completion.chunk", "model": "o4-mini", "choices": [],
                "usage": {"prompt_tokens": 1117, "completion_tokens": 1426, "total_tokens": 2543,
                          "prompt_tokens_details": {"cached_tokens": 0},
                          "completion_tokens_details": {"reasoning_tokens": 1344}}})
            ),
            Some(Usage {
                input_tokens: 1117,
                output_tokens: 1426,
                cache_read_tokens: Some(0),
                cache_write_tokens: None,
                reasoning_tokens: Some(1344),
            })
        );
        // llama-server: `prompt_tokens` is the whole prompt; `timings.cache_n` of it came from
        // the KV cache and `prompt_n` was processed.
        assert_eq!(
            usage_of(
                json!({"choices": [], "created": 1733000000, "id": "chatcmpl-x", "model": "smollm2",
                "system_fingerprint": "b6490-abc", "object": "chat.completion.chunk",
                "usage": {"completion_tokens": 12, "prompt_tokens": 845, "total_tokens": 857},
                "timings": {"cache_n": 832, "prompt_n": 13, "prompt_ms": 95.1, "prompt_per_token_ms": 7.3,
                            "prompt_per_second": 136.7, "predicted_n": 12, "predicted_ms": 140.2,
                            "predicted_per_token_ms": 11.7, "predicted_per_second": 85.6}})
            ),
            Some(Usage {
                input_tokens: 845,
                output_tokens: 12,
                cache_read_tokens: Some(832),
                cache_write_tokens: None,
                reasoning_tokens: None,
            })
        );
        // Timings without usage (a server that ignores include_usage): the prompt is both.
        assert_eq!(
            usage_of(json!({"choices": [], "object": "chat.completion.chunk",
                "timings": {"cache_n": 100, "prompt_n": 20, "predicted_n": 4}})),
            Some(Usage {
                input_tokens: 120,
                output_tokens: 0,
                cache_read_tokens: Some(100),
                ..Usage::default()
            })
        );
        // Ollama and older servers: plain usage, no cache counts.
        assert_eq!(
            usage_of(
                json!({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}})
            ),
            Some(Usage::new(12, 3))
        );
    }

    #[test]
    fn tool_calls_split_across_chunks_are_assembled_by_index() {
        // OpenAI's shape: id and name once, arguments in pieces, two calls interleaved.
        let body = sse(&[
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": null, "tool_calls": [
                {"index": 0, "id": "call_a", "type": "function", "function": {"name": "pen_read", "arguments": ""}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"pa"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 1, "id": "call_b", "type": "function", "function": {"name": "pen_list", "arguments": "{}"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "th\": \"a.txt\"}"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        ]);
        let (result, deltas) = decode(&body, 5);
        assert!(deltas.is_empty());
        let response = result.unwrap();
        assert_eq!(response.finish_reason, FinishReason::ToolUse);
        assert_eq!(
            response.tool_calls,
            vec![
                ToolCall {
                    id: "call_a".into(),
                    name: "pen_read".into(),
                    arguments: r#"{"path": "a.txt"}"#.into(),
                },
                ToolCall {
                    id: "call_b".into(),
                    name: "pen_list".into(),
                    arguments: "{}".into(),
                },
            ]
        );
        assert_eq!(response.usage, None);
    }

    #[test]
    fn repeated_ids_and_names_are_not_concatenated_and_function_call_is_ignored() {
        // llama-cpp-python's shape: id and name in every chunk, plus a legacy function_call.
        let piece = |arguments: &str| {
            json!({"choices": [{"index": 0, "delta": {
                "role": "assistant", "content": null,
                "function_call": {"name": "pen_read", "arguments": arguments},
                "tool_calls": [{"index": 0, "id": "call_x", "type": "function",
                                "function": {"name": "pen_read", "arguments": arguments}}],
            }, "finish_reason": null}]})
        };
        let body = sse(&[
            piece("{\"path\""),
            piece(": \"a.txt\"}"),
            // And a server that reports "stop" after tool calls.
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        ]);
        let response = decode(&body, 64).0.unwrap();
        assert_eq!(
            response.tool_calls,
            vec![ToolCall {
                id: "call_x".into(),
                name: "pen_read".into(),
                arguments: r#"{"path": "a.txt"}"#.into(),
            }]
        );
        assert_eq!(response.finish_reason, FinishReason::ToolUse);
    }

    #[test]
    fn reasoning_content_is_kept_apart_from_the_text_and_never_sent_back() {
        // llama-server and vLLM say `reasoning_content`; Ollama says `reasoning`.
        for field in ["reasoning_content", "reasoning"] {
            let body = sse(&[
                json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": null, field: "The user "}}]}),
                json!({"choices": [{"index": 0, "delta": {field: "wants a greeting."}}]}),
                json!({"choices": [{"index": 0, "delta": {"content": "Hello!"}, "finish_reason": "stop"}]}),
            ]);
            let (result, deltas) = decode(&body, 11);
            assert_eq!(deltas, ["Hello!"], "{field}");
            let response = result.unwrap();
            assert_eq!(response.text, "Hello!");
            assert_eq!(
                response.reasoning,
                [ReasoningBlock {
                    text: "The user wants a greeting.".into(),
                    signature: None,
                    redacted: None,
                }]
            );
            let mut next = request();
            next.messages.push(Message::Assistant {
                text: response.text,
                tool_calls: vec![],
                reasoning: response.reasoning,
            });
            let sent = request_body(&next, "max_tokens").to_string();
            assert!(
                !sent.contains("reasoning") && !sent.contains("greeting."),
                "{sent}"
            );
        }
    }

    #[test]
    fn a_call_without_an_id_gets_a_unique_one() {
        let body = sse(&[json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"function": {"name": "pen_list", "arguments": "{}"}},
                {"function": {"name": "pen_list", "arguments": "{\"path\":\"src\"}"}}]}, "finish_reason": "tool_calls"}]})]);
        let calls = decode(&body, 64).0.unwrap().tool_calls;
        assert_eq!(calls.len(), 2);
        assert!(calls[0].id.starts_with("call_"));
        assert_ne!(calls[0].id, calls[1].id);
        assert_eq!(calls[1].arguments, r#"{"path":"src"}"#);
    }

    #[test]
    fn finish_reasons_map_to_neutral_ones() {
        for (reason, expected) in [
            ("stop", FinishReason::EndTurn),
            ("length", FinishReason::MaxTokens),
            ("tool_calls", FinishReason::ToolUse),
            ("content_filter", FinishReason::Other),
        ] {
            let body = sse(&[
                json!({"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": reason}]}),
            ]);
            assert_eq!(
                decode(&body, 64).0.unwrap().finish_reason,
                expected,
                "{reason}"
            );
        }
    }

    #[test]
    fn a_stream_that_closes_early_is_a_network_error_not_an_answer() {
        let partial = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n";
        let cases = [
            // llama-cpp-python over its context window: HTTP 200 and an empty body.
            ("", "before any chunk"),
            // A comment line or a keep-alive is not a chunk.
            (": keep-alive\n\n", "before any chunk"),
            // Text, then the connection dropped.
            (partial, "before the answer finished"),
        ];
        for (body, wording) in cases {
            let (result, _) = decode(body, 64);
            let error = result.unwrap_err();
            assert_eq!(error.kind, ErrorKind::Network, "{body:?}");
            assert!(error.message.contains(wording), "{}", error.message);
            assert!(error.message.contains("closed early"), "{}", error.message);
        }
    }

    #[test]
    fn an_answer_with_a_finish_reason_but_no_done_is_complete() {
        let body = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\n";
        assert_eq!(decode(body, 64).0.unwrap().text, "ok");
    }

    #[test]
    fn an_error_chunk_in_the_stream_is_classified() {
        let body = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n\
                    data: {\"error\":{\"message\":\"The server had an error while processing your request.\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n";
        let (result, deltas) = decode(body, 64);
        assert_eq!(deltas, ["Hel"]);
        let error = result.unwrap_err();
        assert_eq!(error.kind, ErrorKind::Server);
        assert!(
            error.message.contains("error in the stream"),
            "{}",
            error.message
        );
    }

    #[test]
    fn a_chunk_that_is_not_json_is_a_protocol_error() {
        let error = decode("data: {not json\n\n", 64).0.unwrap_err();
        assert_eq!(error.kind, ErrorKind::Protocol);
    }

    /// Real bodies, each with the status it came with (`None`: an error chunk in a stream).
    const CLASSIFIED: &[wire::ClassifiedCase] = &[
        (
            "OpenAI context_length_exceeded",
            Some(400),
            r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130314 tokens (129785 in the messages, 529 in the functions). Please reduce the length of the messages or functions.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
            ErrorKind::ContextWindowExceeded,
        ),
        (
            "OpenAI context window wording",
            Some(400),
            r#"{"error":{"message":"Your input exceeds the context window of this model. Please adjust your input and try again.","type":"invalid_request_error","param":"input","code":"context_length_exceeded"}}"#,
            ErrorKind::ContextWindowExceeded,
        ),
        (
            "llama-server exceed_context_size_error",
            Some(400),
            r#"{"error":{"code":400,"message":"request (4031 tokens) exceeds the available context size (512 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":4031,"n_ctx":512}}"#,
            ErrorKind::ContextWindowExceeded,
        ),
        (
            "llama-cpp-python stream:false",
            Some(400),
            r#"{"error":{"message":"This model's maximum context length is 512 tokens. However, you requested 4047 tokens (4031 in the messages, 16 in the completion). Please reduce the length of the messages or completion.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
            ErrorKind::ContextWindowExceeded,
        ),
        (
            "Ollama through /v1",
            Some(400),
            r#"{"error":{"message":"the input length exceeds the context length","type":"invalid_request_error","param":null,"code":null}}"#,
            ErrorKind::ContextWindowExceeded,
        ),
        (
            "Ollama native envelope",
            Some(400),
            r#"{"StatusCode":400,"Status":"400 Bad Request","error":"prompt too long; exceeded max context length by 4 tokens"}"#,
            ErrorKind::ContextWindowExceeded,
        ),
        (
            "Ollama prompt too long",
            Some(400),
            r#"{"error":{"message":"prompt too long; exceeded max context length by 1024 tokens","type":"invalid_request_error","param":null,"code":null}}"#,
            ErrorKind::ContextWindowExceeded,
        ),
        (
            "vLLM top-level envelope",
            Some(400),
            r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4900 in the messages, 100 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}"#,
            ErrorKind::ContextWindowExceeded,
        ),
        (
            "a proxy's 413 with context wording",
            Some(413),
            r#"{"error":{"message":"too many tokens: the prompt has 140000 tokens","type":"invalid_request_error"}}"#,
            ErrorKind::ContextWindowExceeded,
        ),
        (
            "OpenAI output limit is not context overflow",
            Some(400),
            r#"{"error":{"message":"max_tokens is too large: 100000. This model supports at most 16384 completion tokens, whereas you provided 100000.","type":"invalid_request_error","param":"max_tokens","code":"invalid_value"}}"#,
            ErrorKind::BadRequest,
        ),
        (
            "vLLM output limit is not context overflow",
            Some(400),
            r#"{"error":{"message":"'max_tokens' or 'max_completion_tokens' is too large: 16384. This model's maximum context length is 65536 tokens and your request has 52189 input tokens (16384 > 65536 - 52189). (parameter=max_tokens, value=16384)","type":"BadRequestError","param":"max_tokens","code":400}}"#,
            ErrorKind::BadRequest,
        ),
        (
            "context wording on a 500 is a server error",
            Some(500),
            r#"{"error":{"message":"context length of the loaded model is unknown","type":"server_error"}}"#,
            ErrorKind::Server,
        ),
        (
            "OpenAI rate limit",
            Some(429),
            r#"{"error":{"message":"Rate limit reached for gpt-4o in organization org-abc on tokens per min (TPM): Limit 30000, Used 29000, Requested 2000. Please try again in 2s.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}"#,
            ErrorKind::RateLimited,
        ),
        (
            "OpenAI bad key",
            Some(401),
            r#"{"error":{"message":"Incorrect API key provided: sk-test. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#,
            ErrorKind::Auth,
        ),
        (
            "OpenAI server error",
            Some(500),
            r#"{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}"#,
            ErrorKind::Server,
        ),
        (
            "a proxy's HTML page",
            Some(502),
            "<html><body><h1>502 Bad Gateway</h1></body></html>",
            ErrorKind::Server,
        ),
        (
            "llama-cpp-python malformed request",
            Some(500),
            r#"{"error":{"message":"'NoneType' object has no attribute 'strip'","type":"internal_server_error","param":null,"code":null}}"#,
            ErrorKind::Server,
        ),
        (
            "OpenAI error chunk in a stream",
            None,
            r#"{"error":{"message":"The server had an error while processing your request.","type":"server_error","param":null,"code":null}}"#,
            ErrorKind::Server,
        ),
        (
            "llama-server error chunk with a numeric code",
            None,
            r#"{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}"#,
            ErrorKind::Server,
        ),
        (
            "rate limit chunk in a stream",
            None,
            r#"{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}"#,
            ErrorKind::RateLimited,
        ),
    ];

    #[test]
    fn errors_are_classified_from_real_bodies() {
        wire::check_classified(CLASSIFIED, classify_error);
    }

    #[test]
    fn the_message_carries_the_status_and_the_provider_wording() {
        let error = classify_error(
            Some(400),
            r#"{"error":{"code":400,"message":"request (4031 tokens) exceeds the available context size (512 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":4031,"n_ctx":512}}"#,
        );
        assert_eq!(error.status, Some(400));
        assert_eq!(
            error.message,
            "HTTP 400: request (4031 tokens) exceeds the available context size (512 tokens), \
             try increasing it"
        );
        let in_stream = classify_error(
            None,
            r#"{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}"#,
        );
        assert_eq!(in_stream.status, Some(503));
        assert_eq!(in_stream.message, "HTTP 503: Loading model");
    }
}
