//! The Anthropic Messages backend: `POST {base_url}/v1/messages` with `stream: true`.
//!
//! The answer is assembled from the Messages stream: `message_start` (input usage),
//! `content_block_start` / `content_block_delta` (`text_delta`, `input_json_delta`,
//! `thinking_delta`, `signature_delta`) / `content_block_stop` per block, `message_delta` (stop
//! reason, output usage), and `message_stop`, the terminator. `ping` and event types this module
//! does not know are skipped, as Anthropic's versioning policy asks; an `error` event is
//! classified like an HTTP error.
//!
//! Extended thinking (`reasoning_budget_tokens` > 0) sends `thinking: {type: "enabled",
//! budget_tokens}`. The answer's `thinking` and `redacted_thinking` blocks become
//! [`ReasoningBlock`]s and go back, unchanged and first in their assistant message, on every
//! later request: the API refuses a tool-use loop whose last assistant message lost them or
//! their signatures.

use super::cache::{self, Breakpoints};
use super::wire::{self, StreamDecoder};
use super::{
    ErrorKind, FinishReason, Message, ModelRequest, ModelResponse, Provider, ProviderError,
    ProviderSettings, ReasoningBlock, StreamEvent, ToolCall, Usage,
};
use futures::future::BoxFuture;
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use tokio_util::sync::CancellationToken;

/// The Messages API version pen speaks.
const API_VERSION: &str = "2023-06-01";

/// The Anthropic Messages API.
pub struct AnthropicProvider {
    client: reqwest::Client,
    url: String,
    headers: HeaderMap,
    api_key: String,
    /// How error messages name this provider.
    label: String,
    /// The extended-thinking budget; 0 is off.
    reasoning_budget_tokens: u32,
}

impl AnthropicProvider {
    /// A provider for `settings.base_url` (default: its [`ProviderFacts::default_base_url`](super::facts::ProviderFacts)); the API key is
    /// required.
    pub fn new(
        client: reqwest::Client,
        settings: &ProviderSettings,
    ) -> Result<AnthropicProvider, ProviderError> {
        let base = wire::base_url(
            settings
                .base_url
                .as_deref()
                .unwrap_or(super::ProviderKind::Anthropic.facts().default_base_url),
        )?;
        let Some(api_key) = settings.api_key.clone().filter(|key| !key.is_empty()) else {
            return Err(ProviderError::new(
                ErrorKind::Config,
                format!("the Anthropic API at {base} needs an API key; configure one"),
            ));
        };
        let mut headers = HeaderMap::new();
        headers.insert("x-api-key", wire::secret_header(&api_key)?);
        headers.insert("anthropic-version", HeaderValue::from_static(API_VERSION));
        headers.insert("accept", HeaderValue::from_static("text/event-stream"));
        Ok(AnthropicProvider {
            client,
            url: format!("{base}/v1/messages"),
            headers,
            api_key,
            label: format!("Anthropic API at {base}"),
            reasoning_budget_tokens: settings.reasoning_budget_tokens,
        })
    }

    async fn stream(
        &self,
        request: &ModelRequest,
        on_event: &(dyn Fn(StreamEvent) + Send + Sync),
        cancel: &CancellationToken,
    ) -> Result<ModelResponse, ProviderError> {
        let thinking = wire::thinking_budget(self.reasoning_budget_tokens, request)?;
        let http = self
            .client
            .post(&self.url)
            .headers(self.headers.clone())
            .json(&request_body(request, thinking));
        wire::complete_sse(
            http,
            classify_error,
            AnthropicStream::default(),
            on_event,
            cancel,
        )
        .await
    }
}

impl Provider for AnthropicProvider {
    /// Streams one request; see [`wire::read_until_done`] for what Stop keeps.
    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
        on_event: &'a (dyn Fn(StreamEvent) + Send + Sync),
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ModelResponse, ProviderError>> {
        Box::pin(wire::labelled(
            &self.label,
            Some(&self.api_key),
            self.stream(request, on_event, cancel),
        ))
    }
}

/// The Messages request body for `request`, keys in a fixed order so one request always
/// serializes to the same bytes; `thinking` is the extended-thinking budget, when on.
///
/// The system prompt goes once, top level. Tool results become `tool_result` blocks of the next
/// user message; consecutive user-side entries (the results of one assistant message, and any
/// user text after them) share one user message, results first, as the API requires;
/// consecutive assistant messages share one assistant message, their reasoning blocks first (the
/// API wants the last assistant message of a tool-use loop to start with its thinking). An
/// assistant message with nothing to send is left out: the API refuses empty content, and the
/// user messages around it then merge as the API would merge them.
///
/// Reasoning blocks go back only while thinking is on, and only those the API can check (signed
/// or redacted): a block another server produced without a signature would be refused.
///
/// Prompt-cache breakpoints (`cache_control: {"type": "ephemeral"}`) go where
/// [`Breakpoints::plan`] puts them for the model's minimum cacheable length: on the system
/// prompt (which is then sent as one text block; on the last tool without one) and on the last
/// block of the user-side messages it names.
fn request_body(request: &ModelRequest, thinking: Option<u32>) -> Value {
    let breakpoints = Breakpoints::plan(
        request,
        cache::anthropic_min_cacheable_tokens(&request.model),
    );
    let mut messages: Vec<Value> = Vec::with_capacity(request.messages.len());
    let mut user_blocks: Vec<Value> = Vec::new();
    for (index, message) in request.messages.iter().enumerate() {
        let marked = breakpoints.messages.contains(&index);
        match message {
            Message::User { text } => {
                let mut block = json!({"type": "text", "text": text});
                if marked {
                    block["cache_control"] = ephemeral();
                }
                user_blocks.push(block);
            }
            Message::ToolResult {
                call_id,
                content,
                is_error,
            } => {
                let mut block = json!({
                    "type": "tool_result",
                    "tool_use_id": call_id,
                    "content": content,
                });
                if *is_error {
                    block["is_error"] = json!(true);
                }
                if marked {
                    block["cache_control"] = ephemeral();
                }
                user_blocks.push(block);
            }
            Message::Assistant {
                text,
                tool_calls,
                reasoning,
            } => {
                let thoughts: Vec<Value> = match thinking {
                    Some(_) => reasoning.iter().filter_map(reasoning_block).collect(),
                    None => Vec::new(),
                };
                let mut blocks = Vec::with_capacity(tool_calls.len() + 1);
                if !text.is_empty() {
                    blocks.push(json!({"type": "text", "text": text}));
                }
                for call in tool_calls {
                    blocks.push(json!({
                        "type": "tool_use",
                        "id": call.id,
                        "name": call.name,
                        "input": tool_input(&call.arguments),
                    }));
                }
                if blocks.is_empty() && thoughts.is_empty() {
                    continue;
                }
                if !user_blocks.is_empty() {
                    messages.push(user_message(std::mem::take(&mut user_blocks)));
                }
                // Consecutive assistant messages (the prompt budget's excerpts, then a kept
                // call) share one assistant turn, so roles alternate.
                match messages.last_mut() {
                    Some(last) if last["role"] == "assistant" => {
                        if let Some(content) = last["content"].as_array_mut() {
                            let first_other = content
                                .iter()
                                .position(|block| !is_reasoning(block))
                                .unwrap_or(content.len());
                            content.splice(first_other..first_other, thoughts);
                            content.extend(blocks);
                        }
                    }
                    _ => {
                        let content: Vec<Value> = thoughts.into_iter().chain(blocks).collect();
                        messages.push(json!({"role": "assistant", "content": content}));
                    }
                }
            }
        }
    }
    if !user_blocks.is_empty() {
        messages.push(user_message(user_blocks));
    }
    let mut body = json!({
        "model": request.model,
        "max_tokens": request.max_output_tokens,
        "stream": true,
    });
    if let Some(budget_tokens) = thinking {
        body["thinking"] = json!({"type": "enabled", "budget_tokens": budget_tokens});
    }
    if !request.system.is_empty() {
        body["system"] = if breakpoints.head {
            json!([{"type": "text", "text": request.system, "cache_control": ephemeral()}])
        } else {
            json!(request.system)
        };
    }
    body["messages"] = Value::Array(messages);
    if !request.tools.is_empty() {
        let last = request.tools.len() - 1;
        body["tools"] = request
            .tools
            .iter()
            .enumerate()
            .map(|(index, tool)| {
                let mut definition = json!({
                    "name": tool.name,
                    "description": tool.description,
                    "input_schema": tool.input_schema,
                });
                if breakpoints.head && request.system.is_empty() && index == last {
                    definition["cache_control"] = ephemeral();
                }
                definition
            })
            .collect();
    }
    body
}

/// A prompt-cache breakpoint with the default lifetime (five minutes, renewed by every hit).
fn ephemeral() -> Value {
    json!({"type": "ephemeral"})
}

/// A reasoning block as the API returned it: `redacted_thinking` with its `data`, or `thinking`
/// with its text and signature. `None` for a block the API cannot check (no signature).
fn reasoning_block(block: &ReasoningBlock) -> Option<Value> {
    match (&block.redacted, &block.signature) {
        (Some(data), _) => Some(json!({"type": "redacted_thinking", "data": data})),
        (None, Some(signature)) => Some(json!({
            "type": "thinking",
            "thinking": block.text,
            "signature": signature,
        })),
        (None, None) => None,
    }
}

fn is_reasoning(block: &Value) -> bool {
    matches!(
        block["type"].as_str(),
        Some("thinking" | "redacted_thinking")
    )
}

/// A user message; a lone text block is sent as plain content, the common short form, unless
/// it carries a cache breakpoint.
fn user_message(mut blocks: Vec<Value>) -> Value {
    if let [block] = blocks.as_mut_slice()
        && block["type"] == "text"
        && block.get("cache_control").is_none()
    {
        return json!({"role": "user", "content": block["text"].take()});
    }
    json!({"role": "user", "content": blocks})
}

/// A `tool_use` block's `input`, which must be a JSON object. Arguments the model produced as
/// something else (invalid JSON, an array) are kept verbatim under `_raw_arguments`, so the
/// replayed history still shows the model what it sent and the loop's error result about it
/// still makes sense.
fn tool_input(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(object @ Value::Object(_)) => object,
        _ if arguments.trim().is_empty() => Value::Object(Map::new()),
        _ => json!({"_raw_arguments": arguments}),
    }
}

/// One content block of the streamed message.
#[derive(Debug)]
enum Block {
    Text,
    ToolUse {
        id: String,
        name: String,
        /// `input_json_delta` pieces; `None` until the first arrives, since a call without
        /// arguments may send none and then its input is the `{}` of `content_block_start`.
        json: Option<String>,
        initial_input: String,
    },
    /// A `thinking` block (text from `thinking_delta`s, signature from `signature_delta`s) or
    /// a `redacted_thinking` one (its `data`, whole in `content_block_start`).
    Reasoning(ReasoningBlock),
    /// Blocks pen does not use.
    Other,
}

/// The state of one streamed answer.
#[derive(Debug, Default)]
struct AnthropicStream {
    stopped: bool,
    text: String,
    blocks: BTreeMap<u64, Block>,
    stop_reason: Option<String>,
    usage: Option<UsageParts>,
}

/// The usage counts as the Messages API splits them.
#[derive(Debug, Default)]
struct UsageParts {
    /// `input_tokens`: the prompt tokens after the last cache breakpoint hit or written.
    uncached: u64,
    read: Option<u64>,
    written: Option<u64>,
    output: u64,
}

impl UsageParts {
    fn usage(&self) -> Usage {
        Usage {
            input_tokens: self
                .uncached
                .saturating_add(self.read.unwrap_or(0))
                .saturating_add(self.written.unwrap_or(0)),
            output_tokens: self.output,
            cache_read_tokens: self.read,
            cache_write_tokens: self.written,
            reasoning_tokens: None,
        }
    }
}

impl StreamDecoder for AnthropicStream {
    fn event(
        &mut self,
        _name: &str,
        data: &str,
        on_event: &(dyn Fn(StreamEvent) + Send + Sync),
    ) -> Result<bool, ProviderError> {
        let event: Value = serde_json::from_str(data).map_err(|e| {
            ProviderError::new(
                ErrorKind::Protocol,
                format!("a stream event is not JSON ({e}): {}", wire::excerpt(data)),
            )
        })?;
        let index = event["index"].as_u64().unwrap_or(0);
        match event["type"].as_str().unwrap_or("") {
            "message_start" => self.read_usage(&event["message"]["usage"]),
            "content_block_start" => {
                let block = &event["content_block"];
                let text_of = |key: &str| block[key].as_str().unwrap_or("").to_string();
                let block = match block["type"].as_str() {
                    Some("text") => {
                        self.push_text(block["text"].as_str().unwrap_or(""), on_event);
                        Block::Text
                    }
                    Some("tool_use") => Block::ToolUse {
                        id: text_of("id"),
                        name: text_of("name"),
                        json: None,
                        initial_input: block.get("input").unwrap_or(&json!({})).to_string(),
                    },
                    Some("thinking") => Block::Reasoning(ReasoningBlock {
                        text: text_of("thinking"),
                        signature: block["signature"]
                            .as_str()
                            .filter(|signature| !signature.is_empty())
                            .map(str::to_string),
                        redacted: None,
                    }),
                    Some("redacted_thinking") => Block::Reasoning(ReasoningBlock {
                        text: String::new(),
                        signature: None,
                        redacted: Some(text_of("data")),
                    }),
                    _ => Block::Other,
                };
                self.blocks.insert(index, block);
            }
            "content_block_delta" => {
                let delta = &event["delta"];
                let piece = |key: &str| delta[key].as_str().unwrap_or("");
                match (delta["type"].as_str(), self.blocks.get_mut(&index)) {
                    (Some("text_delta"), _) => self.push_text(piece("text"), on_event),
                    (Some("input_json_delta"), Some(Block::ToolUse { json, .. })) => json
                        .get_or_insert_with(String::new)
                        .push_str(piece("partial_json")),
                    (Some("thinking_delta"), Some(Block::Reasoning(block))) => {
                        block.text.push_str(piece("thinking"));
                    }
                    (Some("signature_delta"), Some(Block::Reasoning(block))) => block
                        .signature
                        .get_or_insert_with(String::new)
                        .push_str(piece("signature")),
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(reason) = event["delta"]["stop_reason"].as_str() {
                    self.stop_reason = Some(reason.to_string());
                }
                self.read_usage(&event["usage"]);
            }
            "message_stop" => {
                self.stopped = true;
                return Ok(true);
            }
            "error" => return Err(classify_error(None, data)),
            _ => {}
        }
        Ok(false)
    }

    fn finish(self) -> Result<ModelResponse, ProviderError> {
        if !self.stopped {
            return Err(ProviderError::new(
                ErrorKind::Network,
                "the stream closed early, before message_stop",
            ));
        }
        let mut tool_calls = Vec::new();
        let mut reasoning = Vec::new();
        for block in self.blocks.into_values() {
            match block {
                Block::ToolUse {
                    id,
                    name,
                    json,
                    initial_input,
                } => tool_calls.push(ToolCall {
                    id,
                    name,
                    arguments: json.unwrap_or(initial_input),
                }),
                Block::Reasoning(block) => reasoning.push(block),
                Block::Text | Block::Other => {}
            }
        }
        let finish_reason = match self.stop_reason.as_deref() {
            Some("end_turn" | "stop_sequence") => FinishReason::EndTurn,
            Some("tool_use") => FinishReason::ToolUse,
            // Both mean the answer was cut for lack of room.
            Some("max_tokens" | "model_context_window_exceeded") => FinishReason::MaxTokens,
            _ => FinishReason::Other,
        };
        Ok(ModelResponse {
            text: self.text,
            tool_calls,
            reasoning,
            finish_reason,
            usage: self.usage.as_ref().map(UsageParts::usage),
        })
    }
}

impl AnthropicStream {
    /// Reads the usage of `message_start` or `message_delta`. `message_delta`'s counts are
    /// cumulative (the last counts the whole answer, and a newer API repeats the input counts
    /// there), so a count present replaces the one before.
    ///
    /// The Messages API counts cached prompt tokens apart from `input_tokens`: the prompt's
    /// size, what the prompt budget calibrates against, is the sum of `input_tokens`,
    /// `cache_read_input_tokens` and `cache_creation_input_tokens`.
    fn read_usage(&mut self, usage: &Value) {
        if !usage.is_object() {
            return;
        }
        let parts = self.usage.get_or_insert_with(UsageParts::default);
        let count = |key: &str| usage[key].as_u64();
        if let Some(tokens) = count("input_tokens") {
            parts.uncached = tokens;
        }
        if let Some(tokens) = count("cache_read_input_tokens") {
            parts.read = Some(tokens);
        }
        if let Some(tokens) = count("cache_creation_input_tokens") {
            parts.written = Some(tokens);
        }
        if let Some(tokens) = count("output_tokens") {
            parts.output = tokens;
        }
    }

    fn push_text(&mut self, text: &str, on_event: &(dyn Fn(StreamEvent) + Send + Sync)) {
        if !text.is_empty() {
            self.text.push_str(text);
            on_event(StreamEvent::TextDelta(text.to_string()));
        }
    }
}

/// Classifies a rejection from the Messages API: an HTTP error (`status` set) or an `error`
/// event inside the stream (`status` is `None`), both with the envelope
/// `{"type":"error","error":{"type","message"}}`.
///
/// Over the context window: an HTTP 400 `invalid_request_error` whose message says the prompt
/// is too long ("prompt is too long: 208310 tokens > 200000 maximum", or "input length and
/// `max_tokens` exceed context limit", which a shorter prompt also fixes) — never a rejected
/// output limit ("max_tokens: 64000 > 8192, which is the maximum allowed number of output
/// tokens").
pub fn classify_error(status: Option<u16>, body: &str) -> ProviderError {
    let value: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let error_type = value["error"]["type"].as_str();
    let message = value["error"]["message"].as_str().unwrap_or(body);
    let over_context = matches!(status, Some(400 | 413) | None)
        && matches!(error_type, Some("invalid_request_error") | None)
        && wire::says_context_overflow(message);
    let kind = if over_context {
        ErrorKind::ContextWindowExceeded
    } else if let Some(status) = status {
        wire::kind_for_status(status)
    } else {
        match error_type {
            Some("invalid_request_error" | "not_found_error" | "request_too_large") => {
                ErrorKind::BadRequest
            }
            Some("authentication_error" | "permission_error") => ErrorKind::Auth,
            Some("rate_limit_error") => ErrorKind::RateLimited,
            // `overloaded_error`, `api_error` and anything new: the server failed mid-answer.
            _ => ErrorKind::Server,
        }
    };
    ProviderError {
        kind,
        status,
        message: wire::describe(status, message),
        retry_after: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::{ProviderKind, ToolDefinition};

    fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    fn result(call_id: &str, content: &str, is_error: bool) -> Message {
        Message::ToolResult {
            call_id: call_id.into(),
            content: content.into(),
            is_error,
        }
    }

    #[test]
    fn request_body_has_top_level_system_tools_and_results_in_one_user_message() {
        let request = ModelRequest {
            model: "claude-test".into(),
            system: "You are pen.".into(),
            messages: vec![
                Message::User {
                    text: "Read a.txt and list src".into(),
                },
                Message::Assistant {
                    text: "Reading.".into(),
                    tool_calls: vec![
                        call("toolu_1", "pen_read", r#"{"path":"a.txt"}"#),
                        call("toolu_2", "pen_list", r#"{"path":"src"}"#),
                    ],
                    reasoning: vec![],
                },
                result("toolu_1", "hello", false),
                result("toolu_2", "denied by the owner", true),
                Message::Assistant {
                    text: "Done.".into(),
                    tool_calls: vec![],
                    reasoning: vec![],
                },
                Message::User {
                    text: "Thanks".into(),
                },
            ],
            tools: vec![ToolDefinition {
                name: "pen_read".into(),
                description: "Read a file.".into(),
                input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
            }],
            max_output_tokens: 4096,
            cache: Default::default(),
        };
        assert_eq!(
            request_body(&request, None),
            json!({
                "model": "claude-test",
                "max_tokens": 4096,
                "stream": true,
                "system": "You are pen.",
                "messages": [
                    {"role": "user", "content": "Read a.txt and list src"},
                    {"role": "assistant", "content": [
                        {"type": "text", "text": "Reading."},
                        {"type": "tool_use", "id": "toolu_1", "name": "pen_read", "input": {"path": "a.txt"}},
                        {"type": "tool_use", "id": "toolu_2", "name": "pen_list", "input": {"path": "src"}},
                    ]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "hello"},
                        {"type": "tool_result", "tool_use_id": "toolu_2", "content": "denied by the owner", "is_error": true},
                    ]},
                    {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
                    {"role": "user", "content": "Thanks"},
                ],
                "tools": [{
                    "name": "pen_read",
                    "description": "Read a file.",
                    "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
                }],
            })
        );
    }

    #[test]
    fn an_excerpt_before_a_kept_call_shares_its_assistant_turn() {
        // What the prompt budget sends after compacting: the prompt, the excerpts of old
        // groups as assistant text, then the latest group whole. Roles must alternate.
        let request = ModelRequest {
            model: "claude-test".into(),
            system: String::new(),
            messages: vec![
                Message::User {
                    text: "read both".into(),
                },
                Message::Assistant {
                    text: "[earlier tool call, excerpted…]".into(),
                    tool_calls: vec![],
                    reasoning: vec![],
                },
                Message::Assistant {
                    text: String::new(),
                    tool_calls: vec![call("toolu_9", "pen_read", r#"{"path":"b"}"#)],
                    reasoning: vec![],
                },
                result("toolu_9", "b", false),
            ],
            tools: vec![],
            max_output_tokens: 16,
            cache: Default::default(),
        };
        assert_eq!(
            request_body(&request, None)["messages"],
            json!([
                {"role": "user", "content": "read both"},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "[earlier tool call, excerpted…]"},
                    {"type": "tool_use", "id": "toolu_9", "name": "pen_read", "input": {"path": "b"}},
                ]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "b"}]},
            ])
        );
    }

    #[test]
    fn a_call_only_assistant_message_has_no_empty_text_block_and_odd_arguments_survive() {
        let request = ModelRequest {
            model: "m".into(),
            system: String::new(),
            messages: vec![
                Message::User { text: "go".into() },
                Message::Assistant {
                    text: String::new(),
                    tool_calls: vec![
                        call("toolu_1", "pen_list", ""),
                        call("toolu_2", "pen_read", "{\"path\": "),
                    ],
                    reasoning: vec![],
                },
                result("toolu_1", "[]", false),
                result("toolu_2", "arguments are not valid JSON", true),
                // A turn the model ended with nothing to say is left out.
                Message::Assistant {
                    text: String::new(),
                    tool_calls: vec![],
                    reasoning: vec![],
                },
                Message::User {
                    text: "again".into(),
                },
            ],
            tools: vec![],
            max_output_tokens: 100,
            cache: Default::default(),
        };
        let body = request_body(&request, None);
        assert!(body.get("system").is_none());
        assert!(body.get("tools").is_none());
        assert_eq!(
            body["messages"],
            json!([
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "pen_list", "input": {}},
                    {"type": "tool_use", "id": "toolu_2", "name": "pen_read",
                     "input": {"_raw_arguments": "{\"path\": "}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "[]"},
                    {"type": "tool_result", "tool_use_id": "toolu_2",
                     "content": "arguments are not valid JSON", "is_error": true},
                    {"type": "text", "text": "again"},
                ]},
            ])
        );
    }

    #[test]
    fn the_key_is_required_and_sent_as_x_api_key() {
        let client = crate::providers::http_client_builder().build().unwrap();
        let mut settings = ProviderSettings::new(ProviderKind::Anthropic, "claude-test");
        assert_eq!(
            AnthropicProvider::new(client.clone(), &settings)
                .err()
                .unwrap()
                .kind,
            ErrorKind::Config
        );
        settings.api_key = Some("sk-ant-test".into());
        let provider = AnthropicProvider::new(client, &settings).unwrap();
        assert_eq!(provider.url, "https://api.anthropic.com/v1/messages");
        assert_eq!(provider.headers["x-api-key"], "sk-ant-test");
        assert_eq!(provider.headers["anthropic-version"], "2023-06-01");
    }

    fn decode(body: &str, piece: usize) -> (Result<ModelResponse, ProviderError>, Vec<String>) {
        wire::decode_in_pieces(body, piece, AnthropicStream::default())
    }

    fn sse(events: &[Value]) -> String {
        events
            .iter()
            .map(|event| {
                format!(
                    "event: {}\ndata: {event}\n\n",
                    event["type"].as_str().unwrap()
                )
            })
            .collect()
    }

    fn message_start() -> Value {
        json!({"type": "message_start", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "content": [],
            "model": "claude-test", "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 25, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 100, "output_tokens": 1}}})
    }

    #[test]
    fn text_deltas_arrive_in_order_with_usage() {
        let body = sse(&[
            message_start(),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "ping"}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": ", wörld"}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 15}}),
            json!({"type": "message_stop"}),
        ]);
        for piece in [body.len(), 9, 1] {
            let (result, deltas) = decode(&body, piece);
            assert_eq!(deltas, ["Hello", ", wörld"]);
            assert_eq!(
                result.unwrap(),
                ModelResponse {
                    text: "Hello, wörld".into(),
                    tool_calls: vec![],
                    finish_reason: FinishReason::EndTurn,
                    usage: Some(Usage {
                        input_tokens: 125,
                        output_tokens: 15,
                        cache_read_tokens: Some(100),
                        cache_write_tokens: Some(0),
                        reasoning_tokens: None,
                    }),
                    reasoning: vec![],
                }
            );
        }
    }

    /// The usage of a streamed answer that wrote the cache, then of one that read it, as the
    /// Messages API streams them: `message_start` has the input counts, `message_delta` the
    /// cumulative output count (and, on the current API, the input counts again).
    #[test]
    fn usage_adds_cache_reads_and_writes_to_the_prompt_total() {
        let answer = |start: Value, delta: Value| {
            let body = sse(&[
                json!({"type": "message_start", "message": {
                    "id": "msg_01", "type": "message", "role": "assistant", "content": [],
                    "model": "claude-sonnet-4-5", "stop_reason": null, "stop_sequence": null,
                    "usage": start}}),
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ok"}}),
                json!({"type": "content_block_stop", "index": 0}),
                json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": delta}),
                json!({"type": "message_stop"}),
            ]);
            decode(&body, 64).0.unwrap().usage.unwrap()
        };
        let written = answer(
            json!({"input_tokens": 21, "cache_creation_input_tokens": 188086,
                   "cache_read_input_tokens": 0, "output_tokens": 1,
                   "service_tier": "standard"}),
            json!({"output_tokens": 393}),
        );
        assert_eq!(
            written,
            Usage {
                input_tokens: 188107,
                output_tokens: 393,
                cache_read_tokens: Some(0),
                cache_write_tokens: Some(188086),
                reasoning_tokens: None,
            }
        );
        let read = answer(
            json!({"input_tokens": 3, "cache_creation_input_tokens": 0,
                   "cache_read_input_tokens": 5242, "output_tokens": 1}),
            json!({"input_tokens": 3, "cache_creation_input_tokens": 0,
                   "cache_read_input_tokens": 5242, "output_tokens": 503}),
        );
        assert_eq!(
            read,
            Usage {
                input_tokens: 5245,
                output_tokens: 503,
                cache_read_tokens: Some(5242),
                cache_write_tokens: Some(0),
                reasoning_tokens: None,
            }
        );
        // An older API version (or a proxy) without cache fields: the counts stay unknown.
        assert_eq!(
            answer(
                json!({"input_tokens": 40, "output_tokens": 1}),
                json!({"output_tokens": 7})
            ),
            Usage::new(40, 7)
        );
    }

    #[test]
    fn tool_use_blocks_are_assembled_from_input_json_deltas() {
        let body = sse(&[
            message_start(),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me look."}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_a", "name": "pen_read", "input": {}}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": ""}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"path\": \"a."}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "txt\"}"}}),
            json!({"type": "content_block_stop", "index": 1}),
            // A call whose tool takes no arguments sends no delta at all.
            json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_b", "name": "pen_list", "input": {}}}),
            json!({"type": "content_block_stop", "index": 2}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 40}}),
            json!({"type": "message_stop"}),
        ]);
        let (result, deltas) = decode(&body, 13);
        assert_eq!(deltas, ["Let me look."]);
        let response = result.unwrap();
        assert_eq!(response.finish_reason, FinishReason::ToolUse);
        assert_eq!(
            response.tool_calls,
            vec![
                call("toolu_a", "pen_read", r#"{"path": "a.txt"}"#),
                call("toolu_b", "pen_list", "{}"),
            ]
        );
    }

    #[test]
    fn stop_reasons_map_to_neutral_ones() {
        for (reason, expected) in [
            ("end_turn", FinishReason::EndTurn),
            ("stop_sequence", FinishReason::EndTurn),
            ("tool_use", FinishReason::ToolUse),
            ("max_tokens", FinishReason::MaxTokens),
            ("refusal", FinishReason::Other),
        ] {
            let body = sse(&[
                message_start(),
                json!({"type": "message_delta", "delta": {"stop_reason": reason}, "usage": {"output_tokens": 1}}),
                json!({"type": "message_stop"}),
            ]);
            assert_eq!(
                decode(&body, 64).0.unwrap().finish_reason,
                expected,
                "{reason}"
            );
        }
    }

    #[test]
    fn a_stream_without_message_stop_is_a_network_error() {
        let partial = sse(&[
            message_start(),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hel"}}),
        ]);
        for body in ["", partial.as_str()] {
            let error = decode(body, 64).0.unwrap_err();
            assert_eq!(error.kind, ErrorKind::Network);
            assert!(error.message.contains("closed early"), "{}", error.message);
        }
    }

    fn thought(text: &str, signature: Option<&str>, redacted: Option<&str>) -> ReasoningBlock {
        ReasoningBlock {
            text: text.into(),
            signature: signature.map(str::to_string),
            redacted: redacted.map(str::to_string),
        }
    }

    #[test]
    fn thinking_and_redacted_thinking_blocks_become_reasoning_in_order_apart_from_the_text() {
        let signature = "EqQBCkgIARABGAIiQL+/sig==";
        let body = sse(&[
            message_start(),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Let me read "}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "a.txt first."}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": signature}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}}),
            json!({"type": "content_block_stop", "index": 1}),
            json!({"type": "content_block_start", "index": 2, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "text_delta", "text": "Reading."}}),
            json!({"type": "content_block_stop", "index": 2}),
            json!({"type": "content_block_start", "index": 3, "content_block": {"type": "tool_use", "id": "toolu_a", "name": "pen_read", "input": {}}}),
            json!({"type": "content_block_delta", "index": 3, "delta": {"type": "input_json_delta", "partial_json": "{\"path\":\"a.txt\"}"}}),
            json!({"type": "content_block_stop", "index": 3}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 90}}),
            json!({"type": "message_stop"}),
        ]);
        for piece in [body.len(), 7] {
            let (result, deltas) = decode(&body, piece);
            assert_eq!(deltas, ["Reading."], "thinking is not streamed as text");
            let response = result.unwrap();
            assert_eq!(response.text, "Reading.");
            assert_eq!(
                response.reasoning,
                [
                    thought("Let me read a.txt first.", Some(signature), None),
                    thought("", None, Some("EmwKAhgBEgy3va3pzix/LafPsn4a")),
                ]
            );
            assert_eq!(
                response.tool_calls,
                [call("toolu_a", "pen_read", r#"{"path":"a.txt"}"#)]
            );
        }
    }

    #[test]
    fn reasoning_goes_back_first_and_unchanged_only_while_thinking_is_on() {
        let signed = thought("Read a.txt.", Some("sig+/=="), None);
        let redacted = thought("", None, Some("opaque=="));
        // A local server's thinking has no signature: the API could not check it.
        let unsigned = thought("local thoughts", None, None);
        let request = ModelRequest {
            model: "claude-test".into(),
            system: String::new(),
            messages: vec![
                Message::User { text: "go".into() },
                // The prompt budget's excerpt, then the kept call with its reasoning: one turn,
                // the thinking first.
                Message::Assistant {
                    text: "[excerpt]".into(),
                    tool_calls: vec![],
                    reasoning: vec![],
                },
                Message::Assistant {
                    text: "Reading.".into(),
                    tool_calls: vec![call("toolu_1", "pen_read", r#"{"path":"a.txt"}"#)],
                    reasoning: vec![signed, unsigned, redacted],
                },
                result("toolu_1", "hello", false),
            ],
            tools: vec![],
            max_output_tokens: 4096,
            cache: Default::default(),
        };
        let body = request_body(&request, Some(2048));
        assert_eq!(
            body["thinking"],
            json!({"type": "enabled", "budget_tokens": 2048})
        );
        assert_eq!(
            body["messages"][1],
            json!({"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Read a.txt.", "signature": "sig+/=="},
                {"type": "redacted_thinking", "data": "opaque=="},
                {"type": "text", "text": "[excerpt]"},
                {"type": "text", "text": "Reading."},
                {"type": "tool_use", "id": "toolu_1", "name": "pen_read", "input": {"path": "a.txt"}},
            ]})
        );
        let off = request_body(&request, None);
        assert!(off.get("thinking").is_none());
        assert!(!off.to_string().contains("thinking"), "{off}");
    }

    #[test]
    fn a_thinking_budget_must_be_below_the_output_limit() {
        let mut request = ModelRequest {
            model: "claude-test".into(),
            system: String::new(),
            messages: vec![Message::User { text: "go".into() }],
            tools: vec![],
            max_output_tokens: 2048,
            cache: Default::default(),
        };
        assert_eq!(wire::thinking_budget(0, &request), Ok(None));
        let error = wire::thinking_budget(2048, &request).unwrap_err();
        assert_eq!(error.kind, ErrorKind::Config);
        assert!(
            error.message.contains(
                "reasoning_budget_tokens (2048) must be less than max_output_tokens (2048)"
            ),
            "{}",
            error.message
        );
        request.max_output_tokens = 2049;
        assert_eq!(wire::thinking_budget(2048, &request), Ok(Some(2048)));
    }

    #[test]
    fn an_error_event_in_the_stream_is_classified() {
        let body = format!(
            "{}event: error\ndata: {}\n\n",
            sse(&[message_start()]),
            r#"{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}"#
        );
        let error = decode(&body, 64).0.unwrap_err();
        assert_eq!(error.kind, ErrorKind::Server);
        assert!(error.is_retryable());
        assert_eq!(error.message, "error in the stream: Overloaded");
    }

    /// Real bodies, each with the status it came with (`None`: an `error` event in a stream).
    const CLASSIFIED: &[wire::ClassifiedCase] = &[
        (
            "prompt is too long",
            Some(400),
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}"#,
            ErrorKind::ContextWindowExceeded,
        ),
        (
            "input and max_tokens over the context limit",
            Some(400),
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"input length and `max_tokens` exceed context limit: 199759 + 8192 > 200000, decrease input length or `max_tokens` and try again"}}"#,
            ErrorKind::ContextWindowExceeded,
        ),
        (
            "output limit is not context overflow",
            Some(400),
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: 64000 > 8192, which is the maximum allowed number of output tokens for claude-3-5-sonnet-20241022"}}"#,
            ErrorKind::BadRequest,
        ),
        (
            "another invalid request",
            Some(400),
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"messages.0: all messages must have non-empty content except for the optional final assistant message"}}"#,
            ErrorKind::BadRequest,
        ),
        (
            "request too large",
            Some(413),
            r#"{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}}"#,
            ErrorKind::BadRequest,
        ),
        (
            "bad key",
            Some(401),
            r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#,
            ErrorKind::Auth,
        ),
        (
            "no permission",
            Some(403),
            r#"{"type":"error","error":{"type":"permission_error","message":"Your API key does not have permission to use the specified resource."}}"#,
            ErrorKind::Auth,
        ),
        (
            "unknown model",
            Some(404),
            r#"{"type":"error","error":{"type":"not_found_error","message":"model: claude-nonexistent"}}"#,
            ErrorKind::BadRequest,
        ),
        (
            "rate limited",
            Some(429),
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization of 50,000 input tokens per minute."}}"#,
            ErrorKind::RateLimited,
        ),
        (
            "internal error",
            Some(500),
            r#"{"type":"error","error":{"type":"api_error","message":"Internal server error"}}"#,
            ErrorKind::Server,
        ),
        (
            "overloaded",
            Some(529),
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            ErrorKind::Server,
        ),
        (
            "overloaded in the stream",
            None,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            ErrorKind::Server,
        ),
        (
            "rate limited in the stream",
            None,
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"Rate limited"}}"#,
            ErrorKind::RateLimited,
        ),
        (
            "a proxy's text",
            Some(502),
            "upstream connect error or disconnect/reset before headers",
            ErrorKind::Server,
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
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}"#,
        );
        assert_eq!(
            error.message,
            "HTTP 400: prompt is too long: 208310 tokens > 200000 maximum"
        );
        assert_eq!(error.status, Some(400));
    }
}
