//! Ollama's native chat API (`POST /api/chat`, streaming NDJSON), the backend of `provider =
//! "ollama"` and of the new-user default when pen finds Ollama.
//!
//! Why not Ollama's OpenAI-compatible endpoint: it ignores `options.num_ctx`, so the model runs
//! with Ollama's default window (4,096 tokens below 24 GiB of VRAM), and Ollama keeps the
//! *tail* of a prompt over the window and answers 200 OK — pen's system prompt and tool
//! definitions are what goes (ollama/ollama#3839). Here every request asks for its window.
//!
//! Invariants:
//! - `options.num_ctx` is the planned request (pen's estimate, plus an eighth for the
//!   estimate's error) plus the output reserve, rounded up to [`OLLAMA_NUM_CTX_STEP`] so that
//!   consecutive requests ask for the same window and Ollama reuses the loaded model and its
//!   KV cache, and capped at the model's trained window (`/api/show`).
//! - A request larger than the num_ctx it would ask for is never sent: it fails as over the
//!   context window, which the loop recovers from as from any other backend's rejection.
//! - `prompt_eval_count` is not a total (after a KV-cache hit it counts only the tokens Ollama
//!   evaluated, and no cached count is reported), so it never calibrates the estimate
//!   ([`Provider::usage_is_total`]); it is checked instead: a count far below the part of the
//!   request that cannot have come from the cache is reported as a likely silent truncation
//!   ([`Provider::check_usage`]).

use super::wire;
use super::{
    ErrorKind, FinishReason, Message, ModelRequest, ModelResponse, Provider, ProviderError,
    ProviderSettings, ReasoningBlock, StreamEvent, ToolCall, Usage,
};
use crate::limits::{MAX_NDJSON_LINE_BYTES, OLLAMA_NUM_CTX_STEP};
use futures::TryStreamExt;
use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

/// The content type of Ollama's streamed answers.
const NDJSON_CONTENT_TYPE: &str = "application/x-ndjson";

/// The native Ollama API.
pub struct OllamaProvider {
    client: reqwest::Client,
    root: String,
    model: String,
    label: String,
    /// The model's trained window, asked of `/api/show` once (`None` inside: it did not say).
    trained: OnceCell<Option<u64>>,
}

impl OllamaProvider {
    /// A provider for `settings.base_url` (default: its [`ProviderFacts::default_base_url`](super::facts::ProviderFacts); a trailing `/v1` or
    /// `/api` is dropped, so the OpenAI-compatible address works too). Ollama needs no key.
    pub fn new(
        client: reqwest::Client,
        settings: &ProviderSettings,
    ) -> Result<OllamaProvider, ProviderError> {
        let base = wire::base_url(
            settings
                .base_url
                .as_deref()
                .unwrap_or(super::ProviderKind::Ollama.facts().default_base_url),
        )?;
        let root = base
            .strip_suffix("/v1")
            .or_else(|| base.strip_suffix("/api"))
            .unwrap_or(&base)
            .to_string();
        Ok(OllamaProvider {
            client,
            label: format!("Ollama at {root}"),
            root,
            model: settings.model.clone(),
            trained: OnceCell::new(),
        })
    }

    async fn trained_window(&self) -> Option<u64> {
        *self
            .trained
            .get_or_init(|| async {
                super::window::discover(super::ProviderKind::Ollama, &self.root, &self.model)
                    .await
                    .and_then(|window| window.trained_tokens)
            })
            .await
    }

    async fn stream(
        &self,
        request: &ModelRequest,
        on_event: &(dyn Fn(StreamEvent) + Send + Sync),
        cancel: &CancellationToken,
    ) -> Result<ModelResponse, ProviderError> {
        let estimate = estimated_tokens(request);
        let output = u64::from(request.max_output_tokens);
        let trained =
            wire::until_stopped(cancel, async { Ok(self.trained_window().await) }).await?;
        let num_ctx = num_ctx(estimate, output, trained);
        if estimate + output > num_ctx {
            return Err(ProviderError::new(
                ErrorKind::ContextWindowExceeded,
                format!(
                    "the request (about {estimate} tokens, and {output} for the answer) is over \
                     the model's trained window of {num_ctx} tokens; pen does not send it, since \
                     Ollama would silently drop its start"
                ),
            ));
        }
        let body = request_body(request, num_ctx);
        let http = self
            .client
            .post(format!("{}/api/chat", self.root))
            .json(&body);
        let sent = wire::send(http, NDJSON_CONTENT_TYPE, |status, _, body| {
            classify_error(Some(status), body, &self.model)
        });
        let response = wire::until_stopped(cancel, sent).await?;
        let mut decoder = OllamaStream::default();
        let mut buffer: Vec<u8> = Vec::new();
        let bytes = response.bytes_stream().map_err(wire::transport_error);
        let model = self.model.clone();
        wire::read_until_done(bytes, cancel, |chunk| {
            buffer.extend_from_slice(AsRef::<[u8]>::as_ref(&chunk));
            while let Some(end) = buffer.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = buffer.drain(..=end).collect();
                if decoder.line(&line, on_event, &model)? {
                    return Ok(wire::Progress::Done);
                }
            }
            if buffer.len() > MAX_NDJSON_LINE_BYTES {
                return Err(ProviderError::new(
                    ErrorKind::Protocol,
                    format!("a line of the answer is over {MAX_NDJSON_LINE_BYTES} bytes"),
                ));
            }
            Ok(wire::Progress::More)
        })
        .await?;
        // A last line without its newline still counts.
        if !decoder.done && !buffer.is_empty() {
            let rest = std::mem::take(&mut buffer);
            decoder.line(&rest, on_event, &model)?;
        }
        decoder.finish()
    }
}

impl Provider for OllamaProvider {
    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
        on_event: &'a (dyn Fn(StreamEvent) + Send + Sync),
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ModelResponse, ProviderError>> {
        Box::pin(wire::labelled(
            &self.label,
            None,
            self.stream(request, on_event, cancel),
        ))
    }

    fn usage_is_total(&self) -> bool {
        false
    }

    fn check_usage(&self, request: &ModelRequest, usage: &Usage) -> Option<String> {
        truncation_warning(request, usage)
    }
}

/// pen's estimate of the whole request: the planner's part sizes when the request has them,
/// else four bytes a token.
fn estimated_tokens(request: &ModelRequest) -> u64 {
    match &request.cache.sizes {
        Some(sizes) if sizes.messages.len() == request.messages.len() => {
            sizes.head + sizes.messages.iter().sum::<u64>()
        }
        _ => {
            let bytes = request.system.len()
                + request
                    .tools
                    .iter()
                    .map(|t| t.name.len() + t.description.len() + t.input_schema.to_string().len())
                    .sum::<usize>()
                + request.messages.iter().map(message_bytes).sum::<usize>();
            (bytes as u64).div_ceil(4)
        }
    }
}

fn message_bytes(message: &Message) -> usize {
    match message {
        Message::User { text } => text.len(),
        Message::Assistant {
            text, tool_calls, ..
        } => {
            text.len()
                + tool_calls
                    .iter()
                    .map(|c| c.name.len() + c.arguments.len())
                    .sum::<usize>()
        }
        Message::ToolResult { content, .. } => content.len(),
    }
}

/// The `num_ctx` for a request of `estimate` tokens (plus an eighth for the estimate's error)
/// and `output` reserved: rounded up to [`OLLAMA_NUM_CTX_STEP`], capped at `trained`.
pub fn num_ctx(estimate: u64, output: u64, trained: Option<u64>) -> u64 {
    let wanted = estimate + estimate.div_ceil(8) + output;
    let stepped = wanted.div_ceil(OLLAMA_NUM_CTX_STEP).max(1) * OLLAMA_NUM_CTX_STEP;
    match trained {
        Some(trained) => stepped.min(trained),
        None => stepped,
    }
}

/// The warning for an answer whose `prompt_eval_count` is far below what the request must have
/// cost: under half pen's estimate of the part that cannot have come from Ollama's KV cache
/// (everything after the previous request, when this one extends it; else all of it).
fn truncation_warning(request: &ModelRequest, usage: &Usage) -> Option<String> {
    let sizes = request.cache.sizes.as_ref()?;
    if sizes.messages.len() != request.messages.len() {
        return None;
    }
    let uncached = match request.cache.previous_end {
        Some(end) => sizes.messages.iter().skip(end).sum::<u64>(),
        None => sizes.head + sizes.messages.iter().sum::<u64>(),
    };
    let whole = sizes.head + sizes.messages.iter().sum::<u64>();
    (usage.input_tokens.saturating_mul(2) < uncached).then(|| {
        format!(
            "Ollama evaluated {} prompt tokens of a request pen estimated at {whole} ({uncached} \
             of them not in its cache): it likely dropped the start of the prompt (the system \
             prompt and the tool definitions) without saying so. Give the model a larger window \
             (set context_window_tokens to what the model supports, or start Ollama with \
             OLLAMA_CONTEXT_LENGTH) and check that nothing between pen and Ollama rewrites \
             options.num_ctx.",
            usage.input_tokens
        )
    })
}

/// The `/api/chat` body for `request`. Keys are written in a fixed order.
fn request_body(request: &ModelRequest, num_ctx: u64) -> Value {
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if !request.system.is_empty() {
        messages.push(json!({"role": "system", "content": request.system}));
    }
    // A tool result names its tool (Ollama pairs results by name); the call id finds it.
    let mut names: std::collections::HashMap<&str, &str> = std::collections::HashMap::new();
    for message in &request.messages {
        match message {
            Message::User { text } => messages.push(json!({"role": "user", "content": text})),
            Message::Assistant {
                text, tool_calls, ..
            } => {
                let mut next = json!({"role": "assistant", "content": text});
                if !tool_calls.is_empty() {
                    next["tool_calls"] = tool_calls
                        .iter()
                        .map(|call| {
                            names.insert(call.id.as_str(), call.name.as_str());
                            // Ollama takes the arguments as an object; arguments that were not
                            // one were answered with an error result, and go as `{}`.
                            let arguments = serde_json::from_str::<Value>(&call.arguments)
                                .ok()
                                .filter(Value::is_object)
                                .unwrap_or_else(|| json!({}));
                            json!({"function": {"name": call.name, "arguments": arguments}})
                        })
                        .collect();
                }
                messages.push(next);
            }
            Message::ToolResult {
                call_id, content, ..
            } => {
                let mut next = json!({"role": "tool", "content": content});
                if let Some(name) = names.get(call_id.as_str()) {
                    next["tool_name"] = json!(name);
                }
                messages.push(next);
            }
        }
    }
    let mut body = json!({
        "model": request.model,
        "messages": messages,
        "stream": true,
        "options": {"num_ctx": num_ctx, "num_predict": request.max_output_tokens},
    });
    if !request.tools.is_empty() {
        body["tools"] = super::openai::function_tools(&request.tools);
    }
    body
}

/// One NDJSON line of a streamed answer, as far as pen reads it.
#[derive(Debug, Deserialize)]
struct Line {
    #[serde(default)]
    message: Option<WireMessage>,
    #[serde(default)]
    done: bool,
    #[serde(default)]
    done_reason: Option<String>,
    #[serde(default)]
    prompt_eval_count: Option<u64>,
    #[serde(default)]
    eval_count: Option<u64>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct WireMessage {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    thinking: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<WireCall>>,
}

#[derive(Debug, Deserialize)]
struct WireCall {
    #[serde(default)]
    id: Option<String>,
    function: WireFunction,
}

#[derive(Debug, Deserialize)]
struct WireFunction {
    name: String,
    #[serde(default)]
    arguments: Value,
}

/// The state of one streamed answer.
#[derive(Debug, Default)]
struct OllamaStream {
    done: bool,
    text: String,
    thinking: String,
    calls: Vec<ToolCall>,
    done_reason: Option<String>,
    usage: Option<Usage>,
}

impl OllamaStream {
    /// Takes one line; `true` once the `done` line arrived.
    fn line(
        &mut self,
        line: &[u8],
        on_event: &(dyn Fn(StreamEvent) + Send + Sync),
        model: &str,
    ) -> Result<bool, ProviderError> {
        let text = std::str::from_utf8(line).map_err(|_| {
            ProviderError::new(ErrorKind::Protocol, "a line of the answer is not UTF-8")
        })?;
        if text.trim().is_empty() {
            return Ok(false);
        }
        let line: Line = serde_json::from_str(text).map_err(|e| {
            ProviderError::new(
                ErrorKind::Protocol,
                format!(
                    "a line of the answer is not Ollama's JSON ({e}): {}",
                    wire::excerpt(text)
                ),
            )
        })?;
        if let Some(error) = line.error {
            let body = json!({ "error": error }).to_string();
            return Err(classify_error(None, &body, model));
        }
        if let Some(message) = line.message {
            if let Some(content) = message.content.filter(|c| !c.is_empty()) {
                on_event(StreamEvent::TextDelta(content.clone()));
                self.text.push_str(&content);
            }
            if let Some(thinking) = message.thinking {
                self.thinking.push_str(&thinking);
            }
            for call in message.tool_calls.into_iter().flatten() {
                let arguments = match call.function.arguments {
                    Value::String(raw) => raw,
                    Value::Null => "{}".to_string(),
                    other => other.to_string(),
                };
                self.calls.push(ToolCall {
                    // Ids are made unique by the loop; Ollama sends none (or numbers them).
                    id: call.id.unwrap_or_default(),
                    name: call.function.name,
                    arguments,
                });
            }
        }
        if line.done {
            self.done = true;
            self.done_reason = line.done_reason;
            if let Some(input) = line.prompt_eval_count {
                self.usage = Some(Usage::new(input, line.eval_count.unwrap_or(0)));
            }
        }
        Ok(self.done)
    }

    fn finish(self) -> Result<ModelResponse, ProviderError> {
        if !self.done {
            return Err(ProviderError::new(
                ErrorKind::Network,
                "the answer ended before Ollama's `done` line",
            ));
        }
        let finish_reason = if !self.calls.is_empty() {
            FinishReason::ToolUse
        } else {
            match self.done_reason.as_deref() {
                Some("stop") | None => FinishReason::EndTurn,
                Some("length") => FinishReason::MaxTokens,
                Some(_) => FinishReason::Other,
            }
        };
        let reasoning = if self.thinking.is_empty() {
            Vec::new()
        } else {
            vec![ReasoningBlock {
                text: self.thinking,
                signature: None,
                redacted: None,
            }]
        };
        Ok(ModelResponse {
            text: self.text,
            tool_calls: self.calls,
            reasoning,
            finish_reason,
            usage: self.usage,
        })
    }
}

/// Classifies an Ollama rejection: `{"error": "text"}` with an HTTP status (`status` set) or a
/// line of the stream (`None`). 404 is a model Ollama does not have; 400 or 500 whose wording
/// says the prompt is over the context is a context-window rejection; the rest by status.
pub fn classify_error(status: Option<u16>, body: &str, model: &str) -> ProviderError {
    let value: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let wording = match &value["error"] {
        Value::String(text) => text.clone(),
        Value::Null => body.to_string(),
        other => other
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| other.to_string()),
    };
    let kind = if wire::says_context_overflow(&wording) {
        ErrorKind::ContextWindowExceeded
    } else if status == Some(404) {
        ErrorKind::BadRequest
    } else {
        match status {
            Some(status) => wire::kind_for_status(status),
            // An error in the middle of an answer is the server failing, not the request.
            None => ErrorKind::Server,
        }
    };
    let mut message = wire::describe(status, &wording);
    if status == Some(404) {
        message.push_str(&format!(
            " (Ollama does not have the model `{model}`: run `ollama pull {model}`, or set model \
             to one `ollama list` shows)"
        ));
    }
    ProviderError {
        kind,
        status,
        message,
        retry_after: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::{CacheHints, PartSizes, ToolDefinition};

    fn request() -> ModelRequest {
        ModelRequest {
            model: "qwen".into(),
            system: "sys".into(),
            messages: vec![
                Message::User { text: "hi".into() },
                Message::Assistant {
                    text: String::new(),
                    tool_calls: vec![ToolCall {
                        id: "c1".into(),
                        name: "pen_read".into(),
                        arguments: r#"{"path":"a"}"#.into(),
                    }],
                    reasoning: vec![],
                },
                Message::ToolResult {
                    call_id: "c1".into(),
                    content: "text".into(),
                    is_error: false,
                },
            ],
            tools: vec![ToolDefinition {
                name: "pen_read".into(),
                description: "read".into(),
                input_schema: json!({"type": "object"}),
            }],
            max_output_tokens: 512,
            cache: CacheHints::default(),
        }
    }

    #[test]
    fn num_ctx_rounds_up_to_a_stable_step_and_is_capped_at_the_trained_window() {
        assert_eq!(num_ctx(0, 1, None), 2_048);
        assert_eq!(num_ctx(1_000, 512, None), 2_048);
        // 1,700 + 213 + 512 = 2,425: the next step.
        assert_eq!(num_ctx(1_700, 512, None), 4_096);
        // Growth inside a step asks for the same window, so the KV cache is kept.
        assert_eq!(num_ctx(1_800, 512, None), num_ctx(1_900, 512, None));
        assert_eq!(num_ctx(30_000, 4_096, Some(8_192)), 8_192);
        for estimate in [0u64, 1, 999, 5_000, 100_000] {
            let n = num_ctx(estimate, 700, None);
            assert!(n >= estimate + 700 && n.is_multiple_of(OLLAMA_NUM_CTX_STEP));
        }
    }

    #[test]
    fn the_body_has_ollamas_shapes_for_tools_calls_results_and_num_ctx() {
        let body = request_body(&request(), 4_096);
        assert_eq!(
            body["options"],
            json!({"num_ctx": 4096, "num_predict": 512})
        );
        assert_eq!(body["stream"], json!(true));
        assert_eq!(
            body["messages"][0],
            json!({"role": "system", "content": "sys"})
        );
        assert_eq!(
            body["messages"][2]["tool_calls"][0],
            json!({"function": {"name": "pen_read", "arguments": {"path": "a"}}})
        );
        assert_eq!(
            body["messages"][3],
            json!({"role": "tool", "content": "text", "tool_name": "pen_read"})
        );
        assert_eq!(body["tools"][0]["function"]["name"], json!("pen_read"));
    }

    fn decode(body: &str) -> Result<ModelResponse, ProviderError> {
        let mut stream = OllamaStream::default();
        for line in body.split_inclusive('\n') {
            if stream.line(line.as_bytes(), &|_| {}, "qwen")? {
                break;
            }
        }
        stream.finish()
    }

    #[test]
    fn a_streamed_answer_with_text_tool_calls_and_counts_is_assembled() {
        let body = [
            json!({"message": {"role": "assistant", "content": "Hel"}, "done": false}),
            json!({"message": {"role": "assistant", "content": "lo"}, "done": false}),
            json!({"message": {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "pen_read", "arguments": {"path": "x"}}}]}, "done": false}),
            json!({"message": {"role": "assistant", "content": ""}, "done": true, "done_reason": "stop", "prompt_eval_count": 26, "eval_count": 9}),
        ]
        .map(|line| line.to_string() + "\n")
        .concat();
        let answer = decode(&body).unwrap();
        assert_eq!(answer.text, "Hello");
        assert_eq!(answer.tool_calls[0].name, "pen_read");
        assert_eq!(answer.tool_calls[0].arguments, r#"{"path":"x"}"#);
        assert_eq!(answer.finish_reason, FinishReason::ToolUse);
        assert_eq!(answer.usage, Some(Usage::new(26, 9)));
        let short = json!({"message": {"content": "x"}, "done": false}).to_string() + "\n";
        assert_eq!(decode(&short).unwrap_err().kind, ErrorKind::Network);
    }

    #[test]
    fn errors_are_classified() {
        let missing = classify_error(Some(404), r#"{"error":"model 'qwen' not found"}"#, "qwen");
        assert_eq!(missing.kind, ErrorKind::BadRequest);
        assert!(
            missing.message.contains("ollama pull qwen"),
            "{}",
            missing.message
        );
        let over = classify_error(
            Some(400),
            r#"{"error":"the input length exceeds the context length"}"#,
            "m",
        );
        assert_eq!(over.kind, ErrorKind::ContextWindowExceeded);
        assert_eq!(
            classify_error(
                Some(500),
                r#"{"error":"llama runner process has terminated"}"#,
                "m"
            )
            .kind,
            ErrorKind::Server
        );
        assert!(classify_error(Some(503), "busy", "m").is_retryable());
        let in_stream = r#"{"error":"an error was encountered while running the model"}"#;
        assert_eq!(
            decode(&(in_stream.to_string() + "\n")).unwrap_err().kind,
            ErrorKind::Server
        );
    }

    #[test]
    fn a_count_far_below_the_uncached_part_is_a_likely_truncation() {
        let mut request = request();
        request.cache.sizes = Some(PartSizes {
            head: 1_000,
            messages: vec![10, 10, 2_000],
        });
        let warned = |input, previous_end| {
            let mut request = request.clone();
            request.cache.previous_end = previous_end;
            truncation_warning(&request, &Usage::new(input, 1)).is_some()
        };
        assert!(warned(600, None));
        assert!(!warned(1_600, None));
        // A cache hit explains a small count, down to half the part after the cached prefix.
        assert!(!warned(1_001, Some(2)));
        assert!(warned(900, Some(2)));
    }
}
