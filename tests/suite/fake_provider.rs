//! A scripted model provider: a real HTTP server on 127.0.0.1 that answers each request from a
//! queue of replies in the OpenAI Chat Completions or Anthropic Messages wire format, with the
//! providers' real error envelopes, and records every request for assertions.
//!
//! It runs on its own thread and tokio runtime and is addressed by URL, so a test can point an
//! in-process provider at it or spawn `pen serve` with `base_url` set to it. Dropping it stops
//! the server and closes every connection, hanging ones included.

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use futures::StreamExt;
use pen::providers::{ReasoningBlock, ToolCall, Usage};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::IntoFuture;
use std::sync::{Arc, Mutex};
use std::thread;
use tokio::sync::{oneshot, watch};

/// One request the server received.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    pub headers: HeaderMap,
    /// The body as JSON; `Value::Null` when it was not JSON.
    pub body: Value,
    /// The body's bytes as sent, for byte-for-byte comparisons.
    pub raw_body: Vec<u8>,
}

impl RecordedRequest {
    /// A header's value, when present and text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }
}

/// A usage figure that the server replaces, as it answers, with the request body's length ÷ 4:
/// the prompt tokens a real tokenizer would report, for tests of the budget's calibration.
pub const BODY_TOKENS: u64 = 987_654_321;

/// How the server answers one request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// HTTP 200 `text/event-stream` sending these frames, one write each, then closing. Frames
    /// without the format's terminator make a stream that closes early.
    Stream(Vec<String>),
    /// An error status with these headers and body (a provider's error envelope).
    Error {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    },
    /// HTTP 200 `text/event-stream` sending these frames and then nothing, without closing,
    /// until the client goes away.
    Hang(Vec<String>),
    /// HTTP 200 `text/event-stream` sending all these frames in one write (so the client reads
    /// them together) and then holding the connection open until the client goes away: an
    /// answer whose terminator has arrived while its connection lingers.
    HoldOpen(Vec<String>),
    /// HTTP 200 `application/x-ndjson` sending these lines (native Ollama), one write each.
    Ndjson(Vec<String>),
}

impl Reply {
    /// The same error reply with one more response header (e.g. `Retry-After`).
    pub fn with_header(mut self, name: &str, value: &str) -> Reply {
        if let Reply::Error { headers, .. } = &mut self {
            headers.push((name.to_string(), value.to_string()));
        }
        self
    }

    fn into_response(self) -> Response {
        let event_stream = |frames: Vec<String>, hang: bool| {
            let frames = futures::stream::iter(frames.into_iter().map(Ok::<_, Infallible>));
            let body = if hang {
                Body::from_stream(frames.chain(futures::stream::pending()))
            } else {
                Body::from_stream(frames)
            };
            Response::builder()
                .status(StatusCode::OK)
                .header("content-type", "text/event-stream")
                .body(body)
        };
        let response = match self {
            Reply::Stream(frames) => event_stream(frames, false),
            Reply::Hang(frames) => event_stream(frames, true),
            Reply::HoldOpen(frames) => event_stream(vec![frames.concat()], true),
            Reply::Ndjson(lines) => Response::builder()
                .status(StatusCode::OK)
                .header("content-type", "application/x-ndjson")
                .body(Body::from_stream(futures::stream::iter(
                    lines.into_iter().map(Ok::<_, Infallible>),
                ))),
            Reply::Error {
                status,
                headers,
                body,
            } => {
                let mut builder = Response::builder()
                    .status(status)
                    .header("content-type", "application/json");
                for (name, value) in headers {
                    builder = builder.header(name, value);
                }
                builder.body(Body::from(body))
            }
        };
        response.expect("a valid scripted response")
    }
}

/// The server's script and what it saw, shared with its thread.
#[derive(Default)]
struct Shared {
    replies: Mutex<VecDeque<Reply>>,
    /// A rule checked before the queue: a body longer than this many bytes gets this reply.
    oversize: Mutex<Option<(usize, Reply)>>,
    requests: Mutex<Vec<RecordedRequest>>,
    arrived: watch::Sender<usize>,
    /// The context-window discovery endpoints' answers by path (`/props`, `/v1/models`,
    /// `/api/v0/models`, `/api/show`); a path without one answers 404, like a server that
    /// has no such endpoint. They take no reply from the queue and are not in `requests`.
    discovery: Mutex<std::collections::HashMap<String, Value>>,
    /// The discovery requests received, by path.
    discovery_seen: Mutex<Vec<String>>,
    /// Answers a request when the queue has none: from the request's number (1-based) and
    /// body, as a model deciding its next step from what it was sent.
    responder: Mutex<Option<Responder>>,
    /// Native Ollama's silent truncation: `/api/chat` bodies over their `options.num_ctx`
    /// (at four bytes a token) report `num_ctx / 2 + 2` prompt tokens, as Ollama keeps only
    /// that much of the tail (ollama#17427); when off, their size ÷ 4.
    truncate_like_ollama: Mutex<bool>,
}

/// A reply made from the request's number and body ([`FakeProvider::respond_with`]).
pub type Responder = Arc<dyn Fn(usize, &Value) -> Reply + Send + Sync>;

/// The paths pen asks for the context window.
const DISCOVERY_PATHS: [&str; 4] = ["/props", "/v1/models", "/api/v0/models", "/api/show"];

/// A running fake provider.
pub struct FakeProvider {
    url: String,
    shared: Arc<Shared>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl FakeProvider {
    /// Starts a server on 127.0.0.1 with an empty script. A request the script has no reply for
    /// gets a 400 saying so, which no provider retries.
    pub fn start() -> FakeProvider {
        let shared = Arc::new(Shared::default());
        let (address_tx, address_rx) = std::sync::mpsc::channel();
        let (shutdown_tx, shutdown_rx) = oneshot::channel::<()>();
        let app = Router::new().fallback(answer).with_state(shared.clone());
        let thread = thread::Builder::new()
            .name("fake-provider".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("fake provider runtime");
                runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                        .await
                        .expect("bind 127.0.0.1:0");
                    address_tx
                        .send(listener.local_addr().expect("local address"))
                        .expect("report the address");
                    // Not a graceful shutdown: that would wait for hanging replies forever.
                    // Dropping the runtime below closes their connections instead.
                    tokio::select! {
                        served = axum::serve(listener, app).into_future() => {
                            served.expect("fake provider server");
                        }
                        _ = shutdown_rx => {}
                    }
                });
            })
            .expect("spawn the fake provider thread");
        let address = address_rx.recv().expect("the fake provider's address");
        FakeProvider {
            url: format!("http://{address}"),
            shared,
            shutdown: Some(shutdown_tx),
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:PORT`: the Anthropic base URL. OpenAI-style clients use
    /// `{url}/v1`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Queues replies, answered in order, one per request.
    pub fn push(&self, replies: impl IntoIterator<Item = Reply>) {
        self.shared
            .replies
            .lock()
            .expect("script lock")
            .extend(replies);
    }

    /// Answers every request the queue has no reply for with what `responder` makes of the
    /// request's number (1-based, over every request received) and its body as JSON.
    pub fn respond_with(&self, responder: impl Fn(usize, &Value) -> Reply + Send + Sync + 'static) {
        *self.shared.responder.lock().expect("script lock") = Some(Arc::new(responder));
    }

    /// From now on, answers any request whose body is over `max_body_bytes` with `reply`
    /// (without taking a reply from the queue), as a provider rejects a prompt over its context
    /// window.
    pub fn reject_bodies_over(&self, max_body_bytes: usize, reply: Reply) {
        *self.shared.oversize.lock().expect("script lock") = Some((max_body_bytes, reply));
    }

    /// Answers `path` (one of the discovery endpoints) with `body` from now on.
    pub fn discovery(&self, path: &str, body: Value) {
        assert!(DISCOVERY_PATHS.contains(&path), "{path}");
        self.shared
            .discovery
            .lock()
            .expect("script lock")
            .insert(path.to_string(), body);
    }

    /// The discovery requests received so far, by path, in arrival order.
    pub fn discovery_requests(&self) -> Vec<String> {
        self.shared
            .discovery_seen
            .lock()
            .expect("script lock")
            .clone()
    }

    /// Makes `/api/chat` count prompt tokens as a truncating Ollama does (see [`Shared`]).
    pub fn truncate_like_ollama(&self, on: bool) {
        *self
            .shared
            .truncate_like_ollama
            .lock()
            .expect("script lock") = on;
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.requests.lock().expect("requests lock").clone()
    }

    /// Waits until at least `count` requests have arrived (and been recorded).
    pub async fn wait_for_requests(&self, count: usize) {
        self.shared
            .arrived
            .subscribe()
            .wait_for(|arrived| *arrived >= count)
            .await
            .expect("the fake provider is running");
    }
}

impl Drop for FakeProvider {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            // The server may already have stopped; there is nothing left to tell it then.
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            // A panic on the server thread has already failed the test that caused it.
            let _ = thread.join();
        }
    }
}

async fn answer(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap_or_default();
    let path = parts.uri.path().to_string();
    if DISCOVERY_PATHS.contains(&path.as_str()) {
        shared
            .discovery_seen
            .lock()
            .expect("script lock")
            .push(path.clone());
        let known = shared
            .discovery
            .lock()
            .expect("script lock")
            .get(&path)
            .cloned();
        return match known {
            Some(body) => Response::builder()
                .status(StatusCode::OK)
                .header("content-type", "application/json")
                .body(Body::from(body.to_string())),
            None => Response::builder()
                .status(StatusCode::NOT_FOUND)
                .body(Body::from("404 page not found")),
        }
        .expect("a valid response");
    }
    let oversize = shared
        .oversize
        .lock()
        .expect("script lock")
        .clone()
        .filter(|(max, _)| bytes.len() > *max)
        .map(|(_, reply)| reply);
    let reply = oversize.or_else(|| shared.replies.lock().expect("script lock").pop_front());
    let number = {
        let mut requests = shared.requests.lock().expect("requests lock");
        requests.push(RecordedRequest {
            method: parts.method.to_string(),
            path: parts.uri.path().to_string(),
            headers: parts.headers,
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            raw_body: bytes.to_vec(),
        });
        requests.len()
    };
    shared.arrived.send_modify(|arrived| *arrived += 1);
    let reply = reply.or_else(|| {
        let responder = shared.responder.lock().expect("script lock").clone()?;
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Some(responder(number, &body))
    });
    let reply = reply.map(|reply| match reply {
        Reply::Stream(frames) => {
            let tokens = (bytes.len() / 4).to_string();
            let sentinel = BODY_TOKENS.to_string();
            Reply::Stream(
                frames
                    .into_iter()
                    .map(|f| f.replace(&sentinel, &tokens))
                    .collect(),
            )
        }
        Reply::Ndjson(lines) => {
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let size = (bytes.len() / 4) as u64;
            let num_ctx = body["options"]["num_ctx"].as_u64().unwrap_or(2_048);
            let truncating = *shared.truncate_like_ollama.lock().expect("script lock");
            let evaluated = if truncating && size > num_ctx {
                num_ctx / 2 + 2
            } else {
                size
            };
            let sentinel = BODY_TOKENS.to_string();
            Reply::Ndjson(
                lines
                    .into_iter()
                    .map(|l| l.replace(&sentinel, &evaluated.to_string()))
                    .collect(),
            )
        }
        other => other,
    });
    match reply {
        Some(reply) => reply.into_response(),
        None => Response::builder()
            .status(StatusCode::BAD_REQUEST)
            .body(Body::from(format!(
                "fake provider: no scripted reply left for request #{number}"
            )))
            .expect("a valid response"),
    }
}

/// The lines of a native Ollama streamed answer: one per text delta, one with the tool calls,
/// and the `done` line with `prompt_eval_count` (use [`BODY_TOKENS`] for the body's size, or
/// the truncated count when [`FakeProvider::truncate_like_ollama`] is on).
pub fn ollama_lines(text: &[&str], calls: &[ToolCall], prompt_eval_count: u64) -> Vec<String> {
    let mut lines: Vec<String> = text
        .iter()
        .map(|t| {
            json!({"model": "fake", "message": {"role": "assistant", "content": t}, "done": false})
                .to_string()
                + "\n"
        })
        .collect();
    if !calls.is_empty() {
        let calls: Vec<Value> = calls
            .iter()
            .map(|c| {
                json!({"function": {"name": c.name, "arguments": serde_json::from_str::<Value>(&c.arguments).unwrap_or(json!({}))}})
            })
            .collect();
        lines.push(
            json!({"model": "fake", "message": {"role": "assistant", "content": "", "tool_calls": calls}, "done": false})
                .to_string()
                + "\n",
        );
    }
    lines.push(
        json!({"model": "fake", "message": {"role": "assistant", "content": ""}, "done": true,
               "done_reason": "stop", "prompt_eval_count": prompt_eval_count, "eval_count": 5})
        .to_string()
            + "\n",
    );
    lines
}

/// One server-sent event carrying `data` as JSON, with an `event:` name when given.
fn frame(event: Option<&str>, data: &Value) -> String {
    match event {
        Some(event) => format!("event: {event}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    }
}

/// `text` split in two on a character boundary, so a call's arguments arrive in two pieces.
fn halves(text: &str) -> (&str, &str) {
    let mut middle = text.len() / 2;
    while !text.is_char_boundary(middle) {
        middle -= 1;
    }
    text.split_at(middle)
}

/// The frames of an OpenAI streamed answer: a role chunk, one chunk per text delta, each tool
/// call as a first chunk with its id and name and two chunks of arguments, the finish reason,
/// the usage chunk and `[DONE]`.
pub fn openai_frames(text: &[&str], calls: &[ToolCall], usage: Usage) -> Vec<String> {
    let chunk = |delta: Value, finish: Option<&str>| {
        frame(
            None,
            &json!({
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": 1_700_000_000,
                "model": "fake-model",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }),
        )
    };
    let mut frames = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
    frames.extend(
        text.iter()
            .map(|piece| chunk(json!({"content": piece}), None)),
    );
    for (index, call) in calls.iter().enumerate() {
        frames.push(chunk(
            json!({"tool_calls": [{"index": index, "id": call.id, "type": "function",
                                   "function": {"name": call.name, "arguments": ""}}]}),
            None,
        ));
        let (first, second) = halves(&call.arguments);
        for piece in [first, second] {
            frames.push(chunk(
                json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}),
                None,
            ));
        }
    }
    let finish = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    frames.push(chunk(json!({}), Some(finish)));
    frames.push(frame(
        None,
        &json!({
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": "fake-model",
            "choices": [],
            "usage": openai_usage(usage),
        }),
    ));
    frames.push("data: [DONE]\n\n".to_string());
    frames
}

/// OpenAI's `usage` object for `usage`: `prompt_tokens` is the whole prompt, the cached part
/// (when there is one) is in `prompt_tokens_details.cached_tokens`, and the reasoning part of
/// the output in `completion_tokens_details.reasoning_tokens`.
fn openai_usage(usage: Usage) -> Value {
    let mut wire = json!({
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
    });
    if let Some(cached) = usage.cache_read_tokens {
        wire["prompt_tokens_details"] = json!({"cached_tokens": cached, "audio_tokens": 0});
    }
    if let Some(reasoning) = usage.reasoning_tokens {
        wire["completion_tokens_details"] = json!({"reasoning_tokens": reasoning});
    }
    wire
}

/// Anthropic's `message_start` usage for `usage`: `input_tokens` counts only the prompt after
/// the cached parts, which come apart (when there are any).
fn anthropic_usage(usage: Usage) -> Value {
    let read = usage.cache_read_tokens.unwrap_or(0);
    let written = usage.cache_write_tokens.unwrap_or(0);
    let mut wire = json!({
        "input_tokens": usage.input_tokens.saturating_sub(read + written),
        "output_tokens": 1,
    });
    if usage.cache_read_tokens.is_some() || usage.cache_write_tokens.is_some() {
        wire["cache_read_input_tokens"] = json!(read);
        wire["cache_creation_input_tokens"] = json!(written);
    }
    wire
}

/// The frames of an Anthropic streamed answer: `message_start`, a text block with one delta per
/// piece (when there is text), a `tool_use` block per call with its input in two
/// `input_json_delta`s, `message_delta` with the stop reason and usage, and `message_stop`.
pub fn anthropic_frames(text: &[&str], calls: &[ToolCall], usage: Usage) -> Vec<String> {
    let event = |data: Value| {
        let name = data["type"].as_str().unwrap_or("unknown").to_string();
        frame(Some(&name), &data)
    };
    let mut frames = vec![event(json!({"type": "message_start", "message": {
        "id": "msg_fake", "type": "message", "role": "assistant", "content": [],
        "model": "fake-model", "stop_reason": null, "stop_sequence": null,
        "usage": anthropic_usage(usage),
    }}))];
    let mut index = 0;
    if !text.is_empty() {
        frames.push(event(json!({"type": "content_block_start", "index": index,
                                 "content_block": {"type": "text", "text": ""}})));
        frames.push(event(json!({"type": "ping"})));
        for piece in text {
            frames.push(event(json!({"type": "content_block_delta", "index": index,
                                     "delta": {"type": "text_delta", "text": piece}})));
        }
        frames.push(event(json!({"type": "content_block_stop", "index": index})));
        index += 1;
    }
    for call in calls {
        frames.push(event(json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}})));
        let (first, second) = halves(&call.arguments);
        for piece in [first, second] {
            frames.push(event(json!({"type": "content_block_delta", "index": index,
                "delta": {"type": "input_json_delta", "partial_json": piece}})));
        }
        frames.push(event(json!({"type": "content_block_stop", "index": index})));
        index += 1;
    }
    let stop_reason = if calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    };
    frames.push(event(json!({"type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": null},
        "usage": {"output_tokens": usage.output_tokens}})));
    frames.push(event(json!({"type": "message_stop"})));
    frames
}

/// An Anthropic `error` event inside a stream, as sent when the API is overloaded mid-answer.
pub fn anthropic_error_frame(error_type: &str, message: &str) -> String {
    frame(
        Some("error"),
        &json!({"type": "error", "error": {"type": error_type, "message": message}}),
    )
}

/// An error in OpenAI's envelope: `{"error":{"message","type","param","code"}}`.
pub fn openai_error(status: u16, message: &str, error_type: &str, code: Option<&str>) -> Reply {
    Reply::Error {
        status,
        headers: Vec::new(),
        body:
            json!({"error": {"message": message, "type": error_type, "param": null, "code": code}})
                .to_string(),
    }
}

/// An error in Anthropic's envelope: `{"type":"error","error":{"type","message"}}`.
pub fn anthropic_error(status: u16, error_type: &str, message: &str) -> Reply {
    Reply::Error {
        status,
        headers: Vec::new(),
        body: json!({"type": "error", "error": {"type": error_type, "message": message},
                     "request_id": "req_fake"})
        .to_string(),
    }
}

/// An error with a body given verbatim, for envelopes of other servers (llama-server, Ollama).
pub fn raw_error(status: u16, body: &str) -> Reply {
    Reply::Error {
        status,
        headers: Vec::new(),
        body: body.to_string(),
    }
}

/// The frames of an Anthropic answer with extended thinking: `reasoning` first, as the API
/// streams it (a `thinking` block with its text in two `thinking_delta`s and its signature in a
/// `signature_delta`, or a `redacted_thinking` block whole), then the text and the calls of
/// [`anthropic_frames`].
pub fn anthropic_thinking_frames(
    reasoning: &[ReasoningBlock],
    text: &[&str],
    calls: &[ToolCall],
    usage: Usage,
) -> Vec<String> {
    let event = |data: Value| {
        let name = data["type"].as_str().unwrap_or("unknown").to_string();
        frame(Some(&name), &data)
    };
    let mut thinking = Vec::new();
    for (index, block) in reasoning.iter().enumerate() {
        match &block.redacted {
            Some(data) => thinking
                .push(event(json!({"type": "content_block_start", "index": index,
                "content_block": {"type": "redacted_thinking", "data": data}}))),
            None => {
                thinking.push(event(json!({"type": "content_block_start", "index": index,
                    "content_block": {"type": "thinking", "thinking": "", "signature": ""}})));
                let (first, second) = halves(&block.text);
                for piece in [first, second] {
                    thinking.push(event(json!({"type": "content_block_delta", "index": index,
                        "delta": {"type": "thinking_delta", "thinking": piece}})));
                }
                if let Some(signature) = &block.signature {
                    thinking.push(event(json!({"type": "content_block_delta", "index": index,
                        "delta": {"type": "signature_delta", "signature": signature}})));
                }
            }
        }
        thinking.push(event(json!({"type": "content_block_stop", "index": index})));
    }
    // The text and call blocks come after the thinking ones, so their indexes move up.
    let rest = anthropic_frames(text, calls, usage)
        .into_iter()
        .map(|frame| {
            let Some((head, data)) = frame.split_once("data: ") else {
                return frame;
            };
            let mut value: Value = serde_json::from_str(data.trim()).expect("a frame we wrote");
            if let Some(index) = value["index"].as_u64() {
                value["index"] = json!(index + reasoning.len() as u64);
            }
            format!("{head}data: {value}\n\n")
        });
    let mut frames: Vec<String> = rest.collect();
    frames.splice(1..1, thinking);
    frames
}
