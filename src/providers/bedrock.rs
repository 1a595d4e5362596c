//! Amazon Bedrock backend: the Converse API over `converse-stream`, signed with SigV4.
//!
//! One request is `POST {endpoint}/model/{modelId}/converse-stream` with the system prompt as
//! top-level `system` (once), the conversation as `messages` of content blocks (`text`,
//! `toolUse`, `toolResult`; the results of one assistant turn travel together in the next user
//! message), the catalog as `toolConfig` and the output limit as `inferenceConfig.maxTokens`.
//! The answer is an AWS event stream (see [`event_stream`]) of `contentBlockStart`,
//! `contentBlockDelta`, `messageStop` and `metadata` events, or an exception in its place.
//!
//! Extended thinking (`reasoning_budget_tokens` > 0) is Claude's on Bedrock:
//! `additionalModelRequestFields.thinking = {type: "enabled", budget_tokens}`. The answer's
//! `reasoningContent` deltas (`text`, `signature`, `redactedContent`) become [`ReasoningBlock`]s
//! and go back as `reasoningContent` blocks (`reasoningText {text, signature}` or
//! `redactedContent`), unchanged and first in their assistant message, on every later request.
//!
//! The HTTP exchange is the one [`super::wire`] gives every backend (client, send, Retry-After,
//! bounded error text, and the Stop semantics of [`super::wire::read_until_done`]); the answer
//! is whole at `messageStop`, and the stream's last event is `metadata` (usage).
//!
//! Errors are classified here, from the `x-amzn-errortype` header or the body's `__type`, and
//! the provider's wording: a `ValidationException` saying the input is too long is
//! [`ErrorKind::ContextWindowExceeded`]; an output-limit one (`maxTokens` over the model's
//! limit) is an ordinary [`ErrorKind::BadRequest`], since shrinking the input cannot fix it.
//! Provider messages are scrubbed of the credentials before they reach an error.

mod credentials;
pub mod event_stream;

pub use credentials::{AwsCredentials, region_from_environment};

use super::cache::{self, Breakpoints};
use super::wire::{self, Progress};
use crate::providers::{
    ErrorKind, FinishReason, Message, ModelRequest, ModelResponse, Provider, ProviderError,
    ReasoningBlock, StreamEvent, ToolCall, Usage,
};
use futures::TryStreamExt;
use futures::future::BoxFuture;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// The SigV4 service name Bedrock Runtime signs under (the host says `bedrock-runtime`).
const SIGNING_SERVICE: &str = "bedrock";

/// The content type of an AWS event stream.
const EVENT_STREAM_CONTENT_TYPE: &str = "application/vnd.amazon.eventstream";

/// Wording of the `ValidationException`s that mean the prompt is over the context window, as
/// Bedrock and the models behind it phrase it (compared lower-cased). Output-limit rejections
/// ("The maximum tokens you requested exceeds the model limit of 4096", "max_tokens: 100000 >
/// 64000, which is the maximum allowed number of output tokens") deliberately match none.
const CONTEXT_WINDOW_WORDING: &[&str] = &[
    // Bedrock's own, and Claude's through Converse ("The model returned the following errors:
    // Input is too long for requested model.").
    "input is too long",
    "too many input tokens",
    // Claude: "prompt is too long: 200049 tokens > 200000 maximum", and "input length and
    // `max_tokens` exceed context limit: 195000 + 8192 > 200000", which shrinking the input fixes.
    "prompt is too long",
    "exceed context limit",
    // Mistral and Llama: "This model's maximum context length is 32768 tokens".
    "maximum context length",
    // Nova: "Input Tokens Exceeded: Number of input tokens exceeds maximum length".
    "input tokens exceed",
];

/// A Bedrock Converse client for one model in one region.
pub struct BedrockProvider {
    client: reqwest::Client,
    model: String,
    region: String,
    endpoint: String,
    credentials: AwsCredentials,
    /// The extended-thinking budget; 0 is off.
    reasoning_budget_tokens: u32,
    /// Set once Bedrock refused a request for its `cachePoint` blocks: later requests carry
    /// none (the model's table entry, [`cache::bedrock_caching`], was wrong for this account or
    /// region).
    cache_points_refused: AtomicBool,
}

impl BedrockProvider {
    /// A provider calling `model` in `region`.
    ///
    /// `base_url` replaces `https://bedrock-runtime.{region}.amazonaws.com` (a VPC endpoint, a
    /// proxy, or a fake server in tests); requests are still signed for `region`. `timeout`
    /// bounds connecting and each wait for the next bytes of the answer, not the whole answer,
    /// so a long stream that keeps flowing is never cut.
    pub fn new(
        model: impl Into<String>,
        region: impl Into<String>,
        base_url: Option<String>,
        credentials: AwsCredentials,
        timeout: Duration,
    ) -> Result<BedrockProvider, ProviderError> {
        let region = region.into();
        if region.is_empty() {
            return Err(ProviderError::new(
                ErrorKind::Config,
                "no AWS region: set AWS_REGION",
            ));
        }
        let endpoint = wire::base_url(&base_url.unwrap_or_else(|| {
            super::ProviderKind::Bedrock
                .facts()
                .default_base_url
                .replace("{region}", &region)
        }))?;
        Ok(BedrockProvider {
            client: wire::http_client(timeout)?,
            model: model.into(),
            region,
            endpoint,
            credentials,
            reasoning_budget_tokens: 0,
            cache_points_refused: AtomicBool::new(false),
        })
    }

    /// The same provider with Claude's extended thinking at `budget_tokens` (0: off).
    pub fn with_reasoning_budget(mut self, budget_tokens: u32) -> BedrockProvider {
        self.reasoning_budget_tokens = budget_tokens;
        self
    }

    /// A provider with the credentials and region of the process environment (see
    /// [`AwsCredentials::from_environment`] and [`region_from_environment`]).
    pub fn from_env(
        model: impl Into<String>,
        base_url: Option<String>,
        timeout: Duration,
    ) -> Result<BedrockProvider, ProviderError> {
        let region = region_from_environment().ok_or_else(|| {
            ProviderError::new(
                ErrorKind::Config,
                "no AWS region: set AWS_REGION or AWS_DEFAULT_REGION, or region in ~/.aws/config",
            )
        })?;
        let credentials = AwsCredentials::from_environment()?;
        BedrockProvider::new(model, region, base_url, credentials, timeout)
    }

    /// The converse-stream URL of the request's model.
    fn url(&self, request: &ModelRequest) -> String {
        let model = self.model_of(request);
        // Model ids hold `:` and ARNs `/`; both must be escaped to stay one path segment.
        format!(
            "{}/model/{}/converse-stream",
            self.endpoint,
            encode_path_segment(model)
        )
    }

    /// One request, with `cachePoint` blocks when the model takes them. A request Bedrock
    /// refuses for its cache points is sent again once without them, and later requests carry
    /// none: caching is an optimisation, never a reason for a failed turn.
    async fn converse(
        &self,
        request: &ModelRequest,
        on_event: &(dyn Fn(StreamEvent) + Send + Sync),
        cancel: &CancellationToken,
    ) -> Result<ModelResponse, ProviderError> {
        let caching = cache::bedrock_caching(self.model_of(request))
            .filter(|_| !self.cache_points_refused.load(Ordering::Relaxed));
        let Some(caching) = caching else {
            return self.converse_once(request, None, on_event, cancel).await;
        };
        match self
            .converse_once(request, Some(caching), on_event, cancel)
            .await
        {
            Err(error) if refuses_cache_points(&error) => {
                tracing::warn!(
                    model = %self.model_of(request),
                    error = %error.message,
                    "Bedrock refused the request's cachePoint blocks; sending it again without them, and no more for this model"
                );
                self.cache_points_refused.store(true, Ordering::Relaxed);
                self.converse_once(request, None, on_event, cancel).await
            }
            other => other,
        }
    }

    /// The request's model when it names one, else the provider's.
    fn model_of<'a>(&'a self, request: &'a ModelRequest) -> &'a str {
        if request.model.is_empty() {
            &self.model
        } else {
            &request.model
        }
    }

    async fn converse_once(
        &self,
        request: &ModelRequest,
        caching: Option<cache::BedrockCaching>,
        on_event: &(dyn Fn(StreamEvent) + Send + Sync),
        cancel: &CancellationToken,
    ) -> Result<ModelResponse, ProviderError> {
        let thinking = wire::thinking_budget(self.reasoning_budget_tokens, request)?;
        let url = self.url(request);
        let body = serde_json::to_vec(&converse_body(request, thinking, caching))
            .map_err(|e| ProviderError::new(ErrorKind::Protocol, format!("request body: {e}")))?;
        let signed = sign(
            &self.credentials,
            &self.region,
            &url,
            &body,
            SystemTime::now(),
        )?;
        let mut builder = self
            .client
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", EVENT_STREAM_CONTENT_TYPE)
            .body(body);
        for (name, value) in signed {
            builder = builder.header(name, value);
        }
        let sent = wire::send(
            builder,
            EVENT_STREAM_CONTENT_TYPE,
            |status, headers, body| {
                let error_type = headers
                    .get("x-amzn-errortype")
                    .and_then(|value| value.to_str().ok());
                classify_error(Some(status), error_type, body.as_bytes())
            },
        );
        let response = wire::until_stopped(cancel, sent).await?;
        let mut frames = event_stream::Decoder::default();
        let mut answer = StreamedAnswer::default();
        let chunks = response.bytes_stream().map_err(wire::transport_error);
        let ending = wire::read_until_done(chunks, cancel, |chunk| {
            frames.push(&chunk);
            while let Some(message) = frames.next_message().map_err(|e| {
                ProviderError::new(ErrorKind::Protocol, format!("Bedrock stream: {e}"))
            })? {
                answer.apply(&message, on_event)?;
            }
            Ok(answer.progress())
        })
        .await?;
        // Half a frame left by Stop after messageStop is the unread metadata, not a cut answer.
        answer.finish(ending != wire::Ending::StoppedWhole && frames.has_partial())
    }

    /// Removes the credentials from a message built from provider text, in case a proxy or a
    /// signature-mismatch answer echoes our request back.
    fn scrub(&self, mut error: ProviderError) -> ProviderError {
        for secret in self.credentials.secrets() {
            error.message = error.message.replace(secret, "[redacted]");
        }
        error
    }
}

impl Provider for BedrockProvider {
    /// Streams one request; see [`wire::read_until_done`] for what Stop keeps.
    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
        on_event: &'a (dyn Fn(StreamEvent) + Send + Sync),
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ModelResponse, ProviderError>> {
        let span = tracing::debug_span!("bedrock", model = %request.model);
        Box::pin(
            async move {
                self.converse(request, on_event, cancel)
                    .await
                    .map_err(|mut error| {
                        // Bedrock's own errors name it already; the shared transport and
                        // Stop errors get the same prefix.
                        if !error.message.starts_with("Bedrock") {
                            error.message = format!("Bedrock: {}", error.message);
                        }
                        self.scrub(error)
                    })
            }
            .instrument(span),
        )
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn encode_path_segment(segment: &str) -> String {
    let mut encoded = String::with_capacity(segment.len());
    for byte in segment.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

/// The SigV4 headers (`authorization`, `x-amz-date`, and `x-amz-security-token` with temporary
/// credentials) for a JSON `POST` of `body` to `url` at `time`. The signature covers the host,
/// the content type and the body's hash.
fn sign(
    credentials: &AwsCredentials,
    region: &str,
    url: &str,
    body: &[u8],
    time: SystemTime,
) -> Result<Vec<(String, String)>, ProviderError> {
    use aws_sigv4::http_request::{
        SignableBody, SignableRequest, SigningSettings, sign as sigv4_sign,
    };
    let signing_error = |e: &dyn std::fmt::Display| {
        ProviderError::new(ErrorKind::Config, format!("signing the request: {e}"))
    };
    let identity = aws_credential_types::Credentials::new(
        &credentials.access_key_id,
        &credentials.secret_access_key,
        credentials.session_token.clone(),
        None,
        "pen",
    )
    .into();
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(SIGNING_SERVICE)
        .time(time)
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| signing_error(&e))?
        .into();
    let headers = [("content-type", "application/json")];
    let request = SignableRequest::new("POST", url, headers.into_iter(), SignableBody::Bytes(body))
        .map_err(|e| signing_error(&e))?;
    let (instructions, _signature) = sigv4_sign(request, &params)
        .map_err(|e| signing_error(&e))?
        .into_parts();
    Ok(instructions
        .headers()
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect())
}

/// Whether Bedrock refused a request for its `cachePoint` blocks: a validation error naming
/// them ("extraneous key [cachePoint] is not permitted"), or the refusal of a model without
/// prompt caching ("You invoked an unsupported model or your request did not allow prompt
/// caching").
fn refuses_cache_points(error: &ProviderError) -> bool {
    let message = error.message.to_ascii_lowercase();
    matches!(error.kind, ErrorKind::BadRequest | ErrorKind::Auth)
        && (message.contains("cachepoint") || message.contains("prompt caching"))
}

/// The Converse request body for `request`; `thinking` is Claude's extended-thinking budget,
/// when on. An assistant message's reasoning blocks come first in it, and go back only while
/// thinking is on and only when Bedrock can check them (signed or redacted).
///
/// With `caching` (the model takes `cachePoint` blocks), checkpoints go where
/// [`Breakpoints::plan`] puts them for its minimum: after the system prompt (after the tools
/// when there is none and the model caches tools), and after the last block of each user-side
/// message it names.
fn converse_body(
    request: &ModelRequest,
    thinking: Option<u32>,
    caching: Option<cache::BedrockCaching>,
) -> converse::ConverseRequest<'_> {
    let breakpoints = caching
        .map(|caching| Breakpoints::plan(request, caching.min_tokens))
        .unwrap_or_default();
    let mut messages: Vec<converse::Message<'_>> = Vec::new();
    for (index, message) in request.messages.iter().enumerate() {
        let (role, mut content) = match message {
            Message::User { text } => (
                converse::Role::User,
                vec![converse::ContentBlock::Text(text)],
            ),
            Message::Assistant {
                text,
                tool_calls,
                reasoning,
            } => {
                let thoughts = reasoning
                    .iter()
                    .filter(|_| thinking.is_some())
                    .filter_map(reasoning_block);
                // Bedrock refuses blank text blocks, and an assistant turn of only tool calls
                // has none.
                let text = (!text.is_empty()).then_some(converse::ContentBlock::Text(text));
                let calls = tool_calls.iter().map(|call| {
                    converse::ContentBlock::ToolUse(converse::ToolUse {
                        tool_use_id: &call.id,
                        name: &call.name,
                        input: tool_input(&call.arguments),
                    })
                });
                (
                    converse::Role::Assistant,
                    thoughts.chain(text).chain(calls).collect(),
                )
            }
            Message::ToolResult {
                call_id,
                content,
                is_error,
            } => (
                converse::Role::User,
                vec![converse::ContentBlock::ToolResult(converse::ToolResult {
                    tool_use_id: call_id,
                    content: vec![converse::ToolResultContent { text: content }],
                    status: is_error.then_some("error"),
                })],
            ),
        };
        if content.is_empty() {
            continue;
        }
        if breakpoints.messages.contains(&index) {
            content.push(converse::ContentBlock::CachePoint(
                converse::CachePoint::DEFAULT,
            ));
        }
        // Converse wants roles to alternate: the results of one assistant turn, and a prompt
        // sent after them (as after a Stop), go together in one user message; consecutive
        // assistant messages share one, their reasoning first.
        match messages.last_mut() {
            Some(last) if last.role == role => {
                let first_other = last
                    .content
                    .iter()
                    .position(|block| !matches!(block, converse::ContentBlock::ReasoningContent(_)))
                    .unwrap_or(last.content.len());
                let (thoughts, rest): (Vec<_>, Vec<_>) = content.into_iter().partition(|block| {
                    matches!(block, converse::ContentBlock::ReasoningContent(_))
                });
                last.content.splice(first_other..first_other, thoughts);
                last.content.extend(rest);
            }
            _ => messages.push(converse::Message { role, content }),
        }
    }
    let head_after_tools = breakpoints.head
        && request.system.is_empty()
        && caching.is_some_and(|caching| caching.tools);
    let tool_config = (!request.tools.is_empty()).then(|| converse::ToolConfig {
        tools: request
            .tools
            .iter()
            .map(|tool| {
                converse::Tool::ToolSpec(converse::ToolSpec {
                    name: &tool.name,
                    description: &tool.description,
                    input_schema: converse::InputSchema {
                        json: &tool.input_schema,
                    },
                })
            })
            .chain(
                head_after_tools
                    .then_some(converse::Tool::CachePoint(converse::CachePoint::DEFAULT)),
            )
            .collect(),
    });
    let mut system = Vec::with_capacity(2);
    if !request.system.is_empty() {
        system.push(converse::SystemBlock::Text(&request.system));
        if breakpoints.head {
            system.push(converse::SystemBlock::CachePoint(
                converse::CachePoint::DEFAULT,
            ));
        }
    }
    converse::ConverseRequest {
        system,
        messages,
        tool_config,
        inference_config: converse::InferenceConfig {
            max_tokens: request.max_output_tokens,
        },
        additional_model_request_fields: thinking.map(|budget_tokens| {
            serde_json::json!({"thinking": {"type": "enabled", "budget_tokens": budget_tokens}})
        }),
    }
}

/// A reasoning block as Bedrock returned it; `None` for one it cannot check (no signature).
fn reasoning_block(block: &ReasoningBlock) -> Option<converse::ContentBlock<'_>> {
    let reasoning = match (&block.redacted, &block.signature) {
        (Some(data), _) => converse::ReasoningContent::RedactedContent(data),
        (None, Some(signature)) => {
            converse::ReasoningContent::ReasoningText(converse::ReasoningText {
                text: &block.text,
                signature,
            })
        }
        (None, None) => return None,
    };
    Some(converse::ContentBlock::ReasoningContent(reasoning))
}

/// A tool call's arguments as the JSON object Converse requires for `toolUse.input`. Arguments
/// the model produced that are not an object (invalid JSON, say) are replayed as `{}`: Bedrock
/// would reject the whole request otherwise, and the tool result that follows already tells the
/// model what was wrong with them.
fn tool_input(arguments: &str) -> serde_json::Value {
    match serde_json::from_str::<serde_json::Value>(arguments) {
        Ok(value @ serde_json::Value::Object(_)) => value,
        _ => serde_json::Value::Object(serde_json::Map::new()),
    }
}

/// The assistant turn as it streams in.
#[derive(Debug, Default)]
struct StreamedAnswer {
    text: String,
    /// Reasoning blocks by content block index.
    reasoning: BTreeMap<u64, ReasoningBlock>,
    /// Whether `metadata`, the stream's last event, arrived.
    metadata: bool,
    /// Tool calls by content block index, so they come out in the model's order.
    tool_calls: BTreeMap<u64, ToolCall>,
    finish_reason: Option<FinishReason>,
    usage: Option<Usage>,
}

impl StreamedAnswer {
    fn apply(
        &mut self,
        message: &event_stream::Message,
        on_event: &(dyn Fn(StreamEvent) + Send + Sync),
    ) -> Result<(), ProviderError> {
        match message.header(":message-type") {
            Some("event") => {}
            Some("exception") => {
                let error_type = message.header(":exception-type");
                return Err(classify_error(None, error_type, &message.payload));
            }
            Some("error") => {
                let code = message.header(":error-code").unwrap_or("error");
                let text = message.header(":error-message").unwrap_or_default();
                return Err(ProviderError::new(
                    ErrorKind::Server,
                    format!("Bedrock stream error {code}: {}", wire::excerpt(text)),
                ));
            }
            other => {
                return Err(ProviderError::new(
                    ErrorKind::Protocol,
                    format!("Bedrock stream: unexpected message type {other:?}"),
                ));
            }
        }
        let event_type = message.header(":event-type").unwrap_or_default();
        let parse_error = |e: serde_json::Error| {
            ProviderError::new(
                ErrorKind::Protocol,
                format!("Bedrock stream: bad {event_type} event: {e}"),
            )
        };
        match event_type {
            "contentBlockStart" => {
                let start: converse::ContentBlockStart =
                    serde_json::from_slice(&message.payload).map_err(parse_error)?;
                if let Some(tool_use) = start.start.tool_use {
                    self.tool_calls.insert(
                        start.content_block_index,
                        ToolCall {
                            id: tool_use.tool_use_id,
                            name: tool_use.name,
                            arguments: String::new(),
                        },
                    );
                }
            }
            "contentBlockDelta" => {
                let delta: converse::ContentBlockDelta =
                    serde_json::from_slice(&message.payload).map_err(parse_error)?;
                if let Some(text) = delta.delta.text {
                    self.text.push_str(&text);
                    on_event(StreamEvent::TextDelta(text));
                }
                if let Some(piece) = delta.delta.reasoning_content {
                    let block = self
                        .reasoning
                        .entry(delta.content_block_index)
                        .or_insert_with(|| ReasoningBlock {
                            text: String::new(),
                            signature: None,
                            redacted: None,
                        });
                    if let Some(text) = piece.text {
                        block.text.push_str(&text);
                    }
                    if let Some(signature) = piece.signature {
                        block
                            .signature
                            .get_or_insert_with(String::new)
                            .push_str(&signature);
                    }
                    if let Some(redacted) = piece.redacted_content {
                        block
                            .redacted
                            .get_or_insert_with(String::new)
                            .push_str(&redacted);
                    }
                }
                if let Some(tool_use) = delta.delta.tool_use {
                    let call = self
                        .tool_calls
                        .get_mut(&delta.content_block_index)
                        .ok_or_else(|| {
                            ProviderError::new(
                                ErrorKind::Protocol,
                                "Bedrock stream: tool input for a block that did not start",
                            )
                        })?;
                    call.arguments.push_str(&tool_use.input);
                }
            }
            "messageStop" => {
                let stop: converse::MessageStop =
                    serde_json::from_slice(&message.payload).map_err(parse_error)?;
                self.finish_reason = Some(finish_reason(&stop.stop_reason));
            }
            "metadata" => {
                let metadata: converse::Metadata =
                    serde_json::from_slice(&message.payload).map_err(parse_error)?;
                self.usage = metadata.usage.map(|usage| usage.normalised());
                self.metadata = true;
            }
            // messageStart, contentBlockStop, and events of later API versions carry nothing
            // the neutral response holds.
            _ => {}
        }
        Ok(())
    }

    /// How far the answer has come: whole at `messageStop`, and done once `metadata` follows.
    fn progress(&self) -> Progress {
        match (self.finish_reason.is_some(), self.metadata) {
            (true, true) => Progress::Done,
            (true, false) => Progress::Complete,
            (false, _) => Progress::More,
        }
    }

    /// The whole turn once the stream has ended; a stream that ends before `messageStop`, or
    /// mid-message, was cut off and is a failed request, not a short answer.
    fn finish(self, cut_mid_message: bool) -> Result<ModelResponse, ProviderError> {
        let finish_reason = match self.finish_reason {
            Some(reason) if !cut_mid_message => reason,
            _ => {
                return Err(ProviderError::new(
                    ErrorKind::Network,
                    "Bedrock stream ended before messageStop",
                ));
            }
        };
        let tool_calls = self
            .tool_calls
            .into_values()
            .map(|mut call| {
                // A tool without parameters streams no input at all.
                if call.arguments.is_empty() {
                    call.arguments.push_str("{}");
                }
                call
            })
            .collect();
        Ok(ModelResponse {
            text: self.text,
            tool_calls,
            reasoning: self.reasoning.into_values().collect(),
            finish_reason,
            usage: self.usage,
        })
    }
}

fn finish_reason(stop_reason: &str) -> FinishReason {
    match stop_reason {
        "end_turn" => FinishReason::EndTurn,
        "tool_use" => FinishReason::ToolUse,
        // The output filled the context window: cut short like a max_tokens stop.
        "max_tokens" | "model_context_window_exceeded" => FinishReason::MaxTokens,
        _ => FinishReason::Other,
    }
}

/// Classifies a Bedrock error from its HTTP status (`None` for an exception inside the stream),
/// its exception type (the `x-amzn-errortype` header or `:exception-type`; the body's `__type`
/// or `code` when absent) and its body.
fn classify_error(status: Option<u16>, error_type: Option<&str>, body: &[u8]) -> ProviderError {
    // Bodies are `{"message": …}`, sometimes `Message`, `__type` or `code`; anything else (a
    // proxy's HTML page) is kept as text.
    let parsed: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let field = |names: &[&str]| {
        names
            .iter()
            .find_map(|name| parsed.get(name).and_then(|value| value.as_str()))
            .map(str::to_string)
    };
    // Header values look like `ValidationException:http://internal.amazon.com/coral/…`, body
    // types like `com.amazon.coral.validate#ValidationException`; stream exceptions are
    // camel-cased (`throttlingException`).
    let error_type = error_type
        .map(str::to_string)
        .or_else(|| field(&["__type", "code"]))
        .map(|raw| {
            let name = raw.split(':').next().unwrap_or_default();
            let name = name.rsplit('#').next().unwrap_or_default().trim();
            let mut chars = name.chars();
            chars
                .next()
                .map(|first| first.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default()
        })
        .filter(|name| !name.is_empty());
    let text = field(&["message", "Message"])
        .unwrap_or_else(|| String::from_utf8_lossy(body).trim().to_string());
    let lowered = text.to_lowercase();
    let says_context_window = CONTEXT_WINDOW_WORDING
        .iter()
        .any(|wording| lowered.contains(wording));
    let kind = match error_type.as_deref() {
        Some("ValidationException") if says_context_window => ErrorKind::ContextWindowExceeded,
        Some("ValidationException") => ErrorKind::BadRequest,
        Some("ThrottlingException" | "ServiceQuotaExceededException") => ErrorKind::RateLimited,
        Some(
            "ServiceUnavailableException"
            | "ModelNotReadyException"
            | "InternalServerException"
            | "ModelStreamErrorException"
            | "ModelErrorException",
        ) => ErrorKind::Server,
        Some("ModelTimeoutException") => ErrorKind::Timeout,
        Some(
            "AccessDeniedException"
            | "UnrecognizedClientException"
            | "InvalidSignatureException"
            | "IncompleteSignatureException"
            | "MissingAuthenticationTokenException"
            | "ExpiredTokenException",
        ) => ErrorKind::Auth,
        _ => match status {
            Some(400 | 413) if says_context_window => ErrorKind::ContextWindowExceeded,
            Some(status) => wire::kind_for_status(status),
            // An exception event of a type this code does not know.
            None => ErrorKind::Server,
        },
    };
    let mut message = String::from("Bedrock");
    if let Some(error_type) = &error_type {
        message.push(' ');
        message.push_str(error_type);
    }
    if let Some(status) = status {
        message.push_str(&format!(" (HTTP {status})"));
    }
    if !text.is_empty() {
        message.push_str(": ");
        message.push_str(&wire::excerpt(&text));
    }
    ProviderError {
        kind,
        status,
        message,
        retry_after: None,
    }
}

/// The Converse wire format: what pen sends and the stream events it reads.
mod converse {
    use serde::{Deserialize, Serialize};

    #[derive(Debug, Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct ConverseRequest<'a> {
        #[serde(skip_serializing_if = "Vec::is_empty")]
        pub system: Vec<SystemBlock<'a>>,
        pub messages: Vec<Message<'a>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub tool_config: Option<ToolConfig<'a>>,
        pub inference_config: InferenceConfig,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub additional_model_request_fields: Option<serde_json::Value>,
    }

    #[derive(Debug, Serialize)]
    #[serde(rename_all = "camelCase")]
    pub enum SystemBlock<'a> {
        Text(&'a str),
        CachePoint(CachePoint),
    }

    /// A prompt-cache checkpoint: `{"cachePoint": {"type": "default"}}` where it stands.
    #[derive(Debug, Serialize)]
    pub struct CachePoint {
        #[serde(rename = "type")]
        pub kind: &'static str,
    }

    impl CachePoint {
        pub const DEFAULT: CachePoint = CachePoint { kind: "default" };
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
    #[serde(rename_all = "camelCase")]
    pub enum Role {
        User,
        Assistant,
    }

    #[derive(Debug, Serialize)]
    pub struct Message<'a> {
        pub role: Role,
        pub content: Vec<ContentBlock<'a>>,
    }

    #[derive(Debug, Serialize)]
    #[serde(rename_all = "camelCase")]
    pub enum ContentBlock<'a> {
        Text(&'a str),
        ToolUse(ToolUse<'a>),
        ToolResult(ToolResult<'a>),
        ReasoningContent(ReasoningContent<'a>),
        CachePoint(CachePoint),
    }

    /// A reasoning block sent back: its text and signature, or the redacted payload (base64, as
    /// received).
    #[derive(Debug, Serialize)]
    #[serde(rename_all = "camelCase")]
    pub enum ReasoningContent<'a> {
        ReasoningText(ReasoningText<'a>),
        RedactedContent(&'a str),
    }

    #[derive(Debug, Serialize)]
    pub struct ReasoningText<'a> {
        pub text: &'a str,
        pub signature: &'a str,
    }

    #[derive(Debug, Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct ToolUse<'a> {
        pub tool_use_id: &'a str,
        pub name: &'a str,
        pub input: serde_json::Value,
    }

    #[derive(Debug, Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct ToolResult<'a> {
        pub tool_use_id: &'a str,
        pub content: Vec<ToolResultContent<'a>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub status: Option<&'static str>,
    }

    #[derive(Debug, Serialize)]
    pub struct ToolResultContent<'a> {
        pub text: &'a str,
    }

    #[derive(Debug, Serialize)]
    pub struct ToolConfig<'a> {
        pub tools: Vec<Tool<'a>>,
    }

    #[derive(Debug, Serialize)]
    #[serde(rename_all = "camelCase")]
    pub enum Tool<'a> {
        ToolSpec(ToolSpec<'a>),
        CachePoint(CachePoint),
    }

    #[derive(Debug, Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct ToolSpec<'a> {
        pub name: &'a str,
        pub description: &'a str,
        pub input_schema: InputSchema<'a>,
    }

    #[derive(Debug, Serialize)]
    pub struct InputSchema<'a> {
        pub json: &'a serde_json::Value,
    }

    #[derive(Debug, Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct InferenceConfig {
        pub max_tokens: u32,
    }

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct ContentBlockStart {
        pub content_block_index: u64,
        pub start: BlockStart,
    }

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct BlockStart {
        pub tool_use: Option<ToolUseStart>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct ToolUseStart {
        pub tool_use_id: String,
        pub name: String,
    }

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct ContentBlockDelta {
        pub content_block_index: u64,
        pub delta: Delta,
    }

    /// One of `text`, `toolUse`, `reasoningContent` or a kind pen does not keep.
    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Delta {
        pub text: Option<String>,
        pub tool_use: Option<ToolUseDelta>,
        pub reasoning_content: Option<ReasoningDelta>,
    }

    /// A piece of a reasoning block: one of its text, its signature or its redacted payload.
    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct ReasoningDelta {
        pub text: Option<String>,
        pub signature: Option<String>,
        pub redacted_content: Option<String>,
    }

    /// A fragment of the tool input's JSON text.
    #[derive(Debug, Deserialize)]
    pub struct ToolUseDelta {
        pub input: String,
    }

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct MessageStop {
        pub stop_reason: String,
    }

    #[derive(Debug, Deserialize)]
    pub struct Metadata {
        pub usage: Option<TokenUsage>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct TokenUsage {
        /// The prompt tokens neither read from nor written to the cache.
        pub input_tokens: u64,
        pub output_tokens: u64,
        pub cache_read_input_tokens: Option<u64>,
        pub cache_write_input_tokens: Option<u64>,
    }

    impl TokenUsage {
        /// The neutral usage: Converse's `inputTokens` leaves out the cached prompt tokens
        /// (its `totalTokens` is input + output + cache read + cache write), so the prompt in
        /// total is their sum.
        pub fn normalised(&self) -> crate::providers::Usage {
            crate::providers::Usage {
                input_tokens: self
                    .input_tokens
                    .saturating_add(self.cache_read_input_tokens.unwrap_or(0))
                    .saturating_add(self.cache_write_input_tokens.unwrap_or(0)),
                output_tokens: self.output_tokens,
                cache_read_tokens: self.cache_read_input_tokens,
                cache_write_tokens: self.cache_write_input_tokens,
                reasoning_tokens: None,
            }
        }
    }
}

#[cfg(test)]
mod tests;
