//! The Bedrock backend against a fake Converse server on 127.0.0.1: real HTTP, real SigV4
//! headers, real event-stream framing and Bedrock's real error envelopes; the server records
//! every request so the tests assert on what went over the wire.

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use pen::providers::bedrock::{AwsCredentials, BedrockProvider, event_stream};
use pen::providers::{
    ErrorKind, FinishReason, Message, ModelRequest, ModelResponse, Provider, ProviderError,
    ReasoningBlock, StreamEvent, ToolCall, ToolDefinition, Usage,
};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

const MODEL: &str = "anthropic.claude-3-5-sonnet-20240620-v1:0";

/// One canned answer of the fake server.
struct Reply {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
    /// Whether the connection stays open after the body (sent in one write) until the client
    /// goes away.
    hold_open: bool,
}

impl Reply {
    /// A 200 event stream of `(event type, payload)` events.
    fn events(events: &[(&str, Value)]) -> Reply {
        let body = events
            .iter()
            .flat_map(|(event_type, payload)| {
                event_stream::encode(
                    &[
                        (":message-type", "event"),
                        (":event-type", event_type),
                        (":content-type", "application/json"),
                    ],
                    payload.to_string().as_bytes(),
                )
            })
            .collect();
        Reply {
            status: 200,
            headers: vec![("content-type", "application/vnd.amazon.eventstream".into())],
            body,
            hold_open: false,
        }
    }

    /// The same answer with its connection held open after the body.
    fn held_open(self) -> Reply {
        Reply {
            hold_open: true,
            ..self
        }
    }

    /// An error answer as Bedrock sends it: the type in `x-amzn-errortype`, `{"message"}`.
    fn error(status: u16, error_type: &str, message: &str) -> Reply {
        Reply {
            status,
            headers: vec![
                ("content-type", "application/json".into()),
                (
                    "x-amzn-errortype",
                    format!("{error_type}:http://internal.amazon.com/coral/com.amazon.bedrock/"),
                ),
            ],
            body: json!({ "message": message }).to_string().into_bytes(),
            hold_open: false,
        }
    }
}

/// What the fake server saw of one request.
struct Recorded {
    path: String,
    headers: HeaderMap,
    body: Value,
}

/// A fake Bedrock Runtime: answers each request with the next reply, or never when none is
/// left (so a test can stop a request in flight).
#[derive(Clone, Default)]
struct FakeBedrock {
    replies: Arc<Mutex<VecDeque<Reply>>>,
    requests: Arc<Mutex<Vec<Recorded>>>,
    arrived: Arc<Notify>,
}

impl FakeBedrock {
    async fn start(replies: Vec<Reply>) -> (FakeBedrock, String) {
        let fake = FakeBedrock {
            replies: Arc::new(Mutex::new(replies.into())),
            ..FakeBedrock::default()
        };
        let app = axum::Router::new()
            .fallback(answer)
            .with_state(fake.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1");
        let address = listener.local_addr().expect("local address");
        tokio::spawn(async move { axum::serve(listener, app).await });
        (fake, format!("http://{address}"))
    }

    fn requests(&self) -> std::sync::MutexGuard<'_, Vec<Recorded>> {
        self.requests.lock().expect("requests lock")
    }
}

async fn answer(
    axum::extract::State(fake): axum::extract::State<FakeBedrock>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    fake.requests().push(Recorded {
        path: uri.path().to_string(),
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    });
    fake.arrived.notify_one();
    let reply = fake.replies.lock().expect("replies lock").pop_front();
    let Some(reply) = reply else {
        return std::future::pending().await;
    };
    let status = StatusCode::from_u16(reply.status).expect("status");
    let mut response = if reply.hold_open {
        let body =
            futures::stream::once(async move { Ok::<_, std::convert::Infallible>(reply.body) })
                .chain(futures::stream::pending());
        (status, axum::body::Body::from_stream(body)).into_response()
    } else {
        (status, reply.body).into_response()
    };
    for (name, value) in reply.headers {
        response
            .headers_mut()
            .insert(name, value.parse().expect("header value"));
    }
    response
}

fn provider(base_url: &str) -> BedrockProvider {
    BedrockProvider::new(
        MODEL,
        "us-west-2",
        Some(base_url.to_string()),
        AwsCredentials::new("AKIDTEST", "test-secret", Some("test-token".into())),
        Duration::from_secs(10),
    )
    .expect("provider")
}

fn request(messages: Vec<Message>) -> ModelRequest {
    ModelRequest {
        model: MODEL.into(),
        system: "You are pen.".into(),
        messages,
        tools: vec![ToolDefinition {
            name: "pen_read".into(),
            description: "Read a file.".into(),
            input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        }],
        max_output_tokens: 512,
        cache: Default::default(),
    }
}

/// Runs one request to the end, collecting streamed text.
async fn complete(
    provider: &BedrockProvider,
    request: &ModelRequest,
) -> (Result<ModelResponse, ProviderError>, String) {
    let streamed = Mutex::new(String::new());
    let on_event = |event: StreamEvent| {
        let StreamEvent::TextDelta(text) = event;
        streamed.lock().expect("lock").push_str(&text);
    };
    let result = provider
        .complete(request, &on_event, &CancellationToken::new())
        .await;
    (result, streamed.into_inner().expect("lock"))
}

#[tokio::test]
async fn a_text_answer_streams_and_the_request_is_signed_converse() {
    let (fake, url) = FakeBedrock::start(vec![Reply::events(&[
        ("messageStart", json!({"role": "assistant"})),
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"text": "Hello"}, "p": "abcdef"}),
        ),
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"text": ", world."}}),
        ),
        ("contentBlockStop", json!({"contentBlockIndex": 0})),
        ("messageStop", json!({"stopReason": "end_turn"})),
        (
            "metadata",
            json!({"usage": {"inputTokens": 25, "outputTokens": 4, "totalTokens": 29}, "metrics": {"latencyMs": 310}}),
        ),
    ])])
    .await;
    let (result, streamed) = complete(
        &provider(&url),
        &request(vec![Message::User { text: "Hi".into() }]),
    )
    .await;
    assert_eq!(
        result,
        Ok(ModelResponse {
            text: "Hello, world.".into(),
            tool_calls: vec![],
            reasoning: vec![],
            finish_reason: FinishReason::EndTurn,
            usage: Some(Usage::new(25, 4)),
        })
    );
    assert_eq!(streamed, "Hello, world.");

    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    let sent = &requests[0];
    assert_eq!(
        sent.path,
        "/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse-stream"
    );
    let header = |name: &str| {
        sent.headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
    };
    let authorization = header("authorization");
    assert!(
        authorization.starts_with("AWS4-HMAC-SHA256 Credential=AKIDTEST/")
            && authorization.contains("/us-west-2/bedrock/aws4_request, ")
            && authorization
                .contains("SignedHeaders=content-type;host;x-amz-date;x-amz-security-token, "),
        "{authorization}"
    );
    assert_eq!(header("x-amz-security-token"), "test-token");
    assert_eq!(header("x-amz-date").len(), "20150830T123600Z".len());
    assert_eq!(header("content-type"), "application/json");
    assert_eq!(
        sent.body,
        json!({
            "system": [{"text": "You are pen."}],
            "messages": [{"role": "user", "content": [{"text": "Hi"}]}],
            "toolConfig": {"tools": [{"toolSpec": {
                "name": "pen_read",
                "description": "Read a file.",
                "inputSchema": {"json": {"type": "object", "properties": {"path": {"type": "string"}}}},
            }}]},
            "inferenceConfig": {"maxTokens": 512},
        })
    );
}

#[tokio::test]
async fn a_tool_use_answer_becomes_tool_calls_and_results_go_back_together() {
    let (fake, url) = FakeBedrock::start(vec![
        Reply::events(&[
            ("messageStart", json!({"role": "assistant"})),
            (
                "contentBlockStart",
                json!({"contentBlockIndex": 0, "start": {"toolUse": {"toolUseId": "tooluse_a", "name": "pen_read"}}}),
            ),
            (
                "contentBlockDelta",
                json!({"contentBlockIndex": 0, "delta": {"toolUse": {"input": "{\"path\":"}}}),
            ),
            (
                "contentBlockDelta",
                json!({"contentBlockIndex": 0, "delta": {"toolUse": {"input": "\"README.md\"}"}}}),
            ),
            ("contentBlockStop", json!({"contentBlockIndex": 0})),
            ("messageStop", json!({"stopReason": "tool_use"})),
        ]),
        Reply::events(&[
            (
                "contentBlockDelta",
                json!({"contentBlockIndex": 0, "delta": {"text": "It is a readme."}}),
            ),
            ("messageStop", json!({"stopReason": "end_turn"})),
        ]),
    ])
    .await;
    let provider = provider(&url);
    let mut messages = vec![Message::User {
        text: "What is README.md?".into(),
    }];
    let (first, _) = complete(&provider, &request(messages.clone())).await;
    let first = first.expect("tool use");
    assert_eq!(first.finish_reason, FinishReason::ToolUse);
    assert_eq!(
        first.tool_calls,
        vec![ToolCall {
            id: "tooluse_a".into(),
            name: "pen_read".into(),
            arguments: r#"{"path":"README.md"}"#.into(),
        }]
    );
    assert_eq!(first.usage, None);

    messages.push(Message::Assistant {
        text: first.text,
        tool_calls: first.tool_calls,
        reasoning: first.reasoning,
    });
    messages.push(Message::ToolResult {
        call_id: "tooluse_a".into(),
        content: "# pen".into(),
        is_error: false,
    });
    let (second, _) = complete(&provider, &request(messages)).await;
    assert_eq!(second.expect("answer").text, "It is a readme.");
    assert_eq!(
        fake.requests()[1].body["messages"],
        json!([
            {"role": "user", "content": [{"text": "What is README.md?"}]},
            {"role": "assistant", "content": [
                {"toolUse": {"toolUseId": "tooluse_a", "name": "pen_read", "input": {"path": "README.md"}}},
            ]},
            {"role": "user", "content": [
                {"toolResult": {"toolUseId": "tooluse_a", "content": [{"text": "# pen"}]}},
            ]},
        ])
    );
}

#[tokio::test]
async fn input_too_long_is_flagged_as_context_window_exceeded() {
    let (_fake, url) = FakeBedrock::start(vec![Reply::error(
        400,
        "ValidationException",
        "Input is too long for requested model.",
    )])
    .await;
    let (result, _) = complete(
        &provider(&url),
        &request(vec![Message::User { text: "x".into() }]),
    )
    .await;
    let error = result.expect_err("rejected");
    assert!(error.context_window_exceeded(), "{error:?}");
    assert!(!error.is_retryable());
    assert_eq!(error.status, Some(400));
    assert_eq!(
        error.message,
        "Bedrock ValidationException (HTTP 400): Input is too long for requested model."
    );
}

#[tokio::test]
async fn throttling_is_rate_limited_with_retry_after() {
    let mut throttled = Reply::error(
        429,
        "ThrottlingException",
        "Too many requests, please wait before trying again.",
    );
    throttled.headers.push(("retry-after", "7".into()));
    let (_fake, url) = FakeBedrock::start(vec![throttled]).await;
    let (result, _) = complete(
        &provider(&url),
        &request(vec![Message::User { text: "x".into() }]),
    )
    .await;
    let error = result.expect_err("throttled");
    assert_eq!(error.kind, ErrorKind::RateLimited);
    assert!(error.is_retryable());
    assert_eq!(error.retry_after, Some(Duration::from_secs(7)));
    assert!(!error.message.contains("test-secret") && !error.message.contains("test-token"));
}

#[tokio::test]
async fn stop_cancels_a_request_in_flight() {
    // No reply queued: the server holds the request open until the client goes away.
    let (fake, url) = FakeBedrock::start(vec![]).await;
    let provider = provider(&url);
    let cancel = CancellationToken::new();
    let request = request(vec![Message::User { text: "x".into() }]);
    let arrived = fake.arrived.notified();
    let call = provider.complete(&request, &|_| {}, &cancel);
    let (result, ()) = tokio::join!(call, async {
        arrived.await;
        cancel.cancel();
    });
    assert_eq!(result.map_err(|e| e.kind), Err(ErrorKind::Cancelled));
}

/// A text answer of `Hello`, through `messageStop`, and its `metadata` when `with_metadata`.
fn hello_events(with_metadata: bool) -> Vec<(&'static str, Value)> {
    let mut events = vec![
        ("messageStart", json!({"role": "assistant"})),
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"text": "Hel"}}),
        ),
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"text": "lo"}}),
        ),
        ("contentBlockStop", json!({"contentBlockIndex": 0})),
        ("messageStop", json!({"stopReason": "end_turn"})),
    ];
    if with_metadata {
        events.push((
            "metadata",
            json!({"usage": {"inputTokens": 9, "outputTokens": 2, "totalTokens": 11}}),
        ));
    }
    events
}

/// Sends `request`, firing Stop from `on_event` as the first text delta arrives.
async fn complete_stopping_at_the_first_delta(
    provider: &BedrockProvider,
    request: &ModelRequest,
) -> Result<ModelResponse, ProviderError> {
    let cancel = CancellationToken::new();
    let on_event = |_: StreamEvent| cancel.cancel();
    provider.complete(request, &on_event, &cancel).await
}

#[tokio::test]
async fn an_answer_ends_at_its_last_event_even_if_the_connection_stays_open() {
    let (_fake, url) =
        FakeBedrock::start(vec![Reply::events(&hello_events(true)).held_open()]).await;
    let (result, streamed) = complete(
        &provider(&url),
        &request(vec![Message::User { text: "Hi".into() }]),
    )
    .await;
    let response = result.expect("the answer, without waiting for the connection to close");
    assert_eq!(
        (response.text.as_str(), streamed.as_str()),
        ("Hello", "Hello")
    );
    assert_eq!(response.usage, Some(Usage::new(9, 2)));
}

#[tokio::test]
async fn stop_after_message_stop_keeps_the_answer_and_stop_before_it_cancels() {
    // The answer is whole at messageStop; Stop while its metadata is awaited keeps it.
    let (_fake, url) =
        FakeBedrock::start(vec![Reply::events(&hello_events(false)).held_open()]).await;
    let request = request(vec![Message::User { text: "Hi".into() }]);
    let kept = complete_stopping_at_the_first_delta(&provider(&url), &request).await;
    let kept = kept.expect("the whole answer is kept");
    assert_eq!(
        (kept.text.as_str(), kept.finish_reason, kept.usage),
        ("Hello", FinishReason::EndTurn, None)
    );

    // Half of the metadata frame has arrived too: what is left unread is not the answer.
    let mut with_half_metadata = Reply::events(&hello_events(false));
    let metadata = Reply::events(&hello_events(true)[5..]).body;
    with_half_metadata
        .body
        .extend_from_slice(&metadata[..metadata.len() / 2]);
    let (_fake, url) = FakeBedrock::start(vec![with_half_metadata.held_open()]).await;
    let kept = complete_stopping_at_the_first_delta(&provider(&url), &request).await;
    assert_eq!(kept.expect("the whole answer is kept").text, "Hello");

    // Before messageStop the answer is still streaming: Stop cancels it.
    let mut streaming = hello_events(false);
    streaming.pop();
    let (_fake, url) = FakeBedrock::start(vec![Reply::events(&streaming).held_open()]).await;
    let stopped = complete_stopping_at_the_first_delta(&provider(&url), &request).await;
    assert_eq!(
        stopped.map_err(|error| error.kind),
        Err(ErrorKind::Cancelled)
    );
}

/// A signature as Claude on Bedrock sends one, which must come back byte for byte.
const SIGNATURE: &str = "ErcBCkgIBxABGAIiQOn0/+vVr4Ss2y1nq8Yf3gc=+/QmVkcm9jaw==";

#[tokio::test]
async fn reasoning_goes_back_byte_for_byte_first_as_reasoning_content_on_the_next_request() {
    let (fake, url) = FakeBedrock::start(vec![
        Reply::events(&[
            ("messageStart", json!({"role": "assistant"})),
            (
                "contentBlockDelta",
                json!({"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "Read the "}}}),
            ),
            (
                "contentBlockDelta",
                json!({"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "readme — first."}}}),
            ),
            (
                "contentBlockDelta",
                json!({"contentBlockIndex": 0, "delta": {"reasoningContent": {"signature": SIGNATURE}}}),
            ),
            ("contentBlockStop", json!({"contentBlockIndex": 0})),
            (
                "contentBlockDelta",
                json!({"contentBlockIndex": 1, "delta": {"reasoningContent": {"redactedContent": "cmVkYWN0ZWQ="}}}),
            ),
            ("contentBlockStop", json!({"contentBlockIndex": 1})),
            (
                "contentBlockStart",
                json!({"contentBlockIndex": 2, "start": {"toolUse": {"toolUseId": "tooluse_r", "name": "pen_read"}}}),
            ),
            (
                "contentBlockDelta",
                json!({"contentBlockIndex": 2, "delta": {"toolUse": {"input": "{\"path\":\"README.md\"}"}}}),
            ),
            ("contentBlockStop", json!({"contentBlockIndex": 2})),
            ("messageStop", json!({"stopReason": "tool_use"})),
        ]),
        Reply::events(&[
            (
                "contentBlockDelta",
                json!({"contentBlockIndex": 0, "delta": {"text": "A readme."}}),
            ),
            ("messageStop", json!({"stopReason": "end_turn"})),
        ]),
    ])
    .await;
    let provider = provider(&url).with_reasoning_budget(1024);
    let mut messages = vec![Message::User {
        text: "What is README.md?".into(),
    }];
    let ask = |messages: Vec<Message>| ModelRequest {
        max_output_tokens: 4096,
        ..request(messages)
    };
    let (first, streamed) = complete(&provider, &ask(messages.clone())).await;
    let first = first.expect("tool use");
    assert_eq!(streamed, "", "reasoning is not streamed as text");
    assert_eq!(
        first.reasoning,
        [
            ReasoningBlock {
                text: "Read the readme — first.".into(),
                signature: Some(SIGNATURE.into()),
                redacted: None,
            },
            ReasoningBlock {
                text: String::new(),
                signature: None,
                redacted: Some("cmVkYWN0ZWQ=".into()),
            },
        ]
    );
    messages.push(Message::Assistant {
        text: first.text,
        tool_calls: first.tool_calls,
        reasoning: first.reasoning,
    });
    messages.push(Message::ToolResult {
        call_id: "tooluse_r".into(),
        content: "# pen".into(),
        is_error: false,
    });
    let (second, _) = complete(&provider, &ask(messages)).await;
    assert_eq!(second.expect("answer").text, "A readme.");

    let requests = fake.requests();
    for sent in requests.iter() {
        assert_eq!(
            sent.body["additionalModelRequestFields"],
            json!({"thinking": {"type": "enabled", "budget_tokens": 1024}})
        );
        assert_eq!(sent.body["inferenceConfig"], json!({"maxTokens": 4096}));
    }
    assert_eq!(
        requests[1].body["messages"][1],
        json!({"role": "assistant", "content": [
            {"reasoningContent": {"reasoningText": {"text": "Read the readme — first.", "signature": SIGNATURE}}},
            {"reasoningContent": {"redactedContent": "cmVkYWN0ZWQ="}},
            {"toolUse": {"toolUseId": "tooluse_r", "name": "pen_read", "input": {"path": "README.md"}}},
        ]})
    );
}

/// An owner who is never asked in these turns (they use read-only tools only).
struct NoOwner;

impl pen::agent::Approver for NoOwner {
    fn ask(
        &self,
        _: pen::agent::ApprovalRequest,
    ) -> futures::future::BoxFuture<'static, pen::agent::ApprovalAnswer> {
        Box::pin(async { Err("no owner in this test".to_string()) })
    }
}

#[tokio::test]
async fn a_multi_step_tool_turn_through_the_agent_loop() {
    let (fake, url) = FakeBedrock::start(vec![
        Reply::events(&[
            ("messageStart", json!({"role": "assistant"})),
            ("contentBlockStart", json!({"contentBlockIndex": 0, "start": {"toolUse": {"toolUseId": "tooluse_1", "name": "pen_read"}}})),
            ("contentBlockDelta", json!({"contentBlockIndex": 0, "delta": {"toolUse": {"input": "{\"path\":\"README.md\"}"}}})),
            ("contentBlockStop", json!({"contentBlockIndex": 0})),
            ("messageStop", json!({"stopReason": "tool_use"})),
        ]),
        Reply::events(&[
            ("contentBlockDelta", json!({"contentBlockIndex": 0, "delta": {"text": "It greets you."}})),
            ("messageStop", json!({"stopReason": "end_turn"})),
        ]),
    ])
    .await;
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("README.md"), "hello readme\n").unwrap();
    let data = tempfile::tempdir().unwrap();
    let store = std::sync::Arc::new(pen::session::SessionStore::open(data.path()).unwrap());
    let session_id = store.new_session(None).unwrap().id;
    let engine = pen::agent::Engine::with_provider(
        std::sync::Arc::clone(&store),
        std::sync::Arc::new(provider(&url)),
        MODEL,
    );
    let spec = pen::agent::TurnSpec {
        config: pen::config::Config::default(),
        tools: std::sync::Arc::new(pen::agent::TurnTools::native(pen::agent::LocalTools {
            workspace: pen::workspace::Workspace::new(&[root.path().to_path_buf()]).unwrap(),
            limits: pen::limits::Limits::default(),
            ledger: std::sync::Arc::default(),
            editor: None,
            search_editor: None,
            watch: None,
            fitted: Default::default(),
            sandbox: pen::sandbox::CommandSandbox::off(),
        })),
        approver: std::sync::Arc::new(NoOwner),
        on_event: std::sync::Arc::new(|_| {}),
    };
    let outcome = engine
        .run_turn(
            &session_id,
            "What is README.md?",
            spec,
            tokio_util::sync::CancellationToken::new(),
        )
        .await;
    assert_eq!(
        outcome.stop_reason,
        pen::agent::StopReason::EndTurn,
        "{outcome:?}"
    );
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    for request in requests.iter() {
        // The system prompt is top-level, once; no message carries it.
        assert!(
            request.body["system"][0]["text"]
                .as_str()
                .unwrap()
                .starts_with("You are pen")
        );
        assert!(
            request.body["messages"]
                .as_array()
                .unwrap()
                .iter()
                .all(|m| m["role"] != "system")
        );
    }
    assert!(requests[1].body.to_string().contains("hello readme"));
    let entries = store.transcript(&session_id, None, 100).unwrap().entries;
    assert_eq!(
        entries
            .iter()
            .filter(|e| e.kind == pen::session::EntryKind::ToolResult)
            .count(),
        1
    );
}

/// A Claude model Bedrock caches prompts for (1,024 tokens a checkpoint).
const CACHING_MODEL: &str = "anthropic.claude-3-7-sonnet-20250219-v1:0";

fn cache_points_in(body: &Value) -> usize {
    body.to_string().matches("\"cachePoint\"").count()
}

/// A request with a system prompt of about 1,300 tokens, over the model's minimum.
fn long_request(model: &str, messages: Vec<Message>, previous: &[Message]) -> ModelRequest {
    ModelRequest {
        model: model.into(),
        system: format!("You are pen. {}", "Keep the prefix stable. ".repeat(220)),
        cache: pen::providers::CacheHints {
            key: Some("s_1".into()),
            previous_end: pen::providers::CacheHints::previous_end(previous, &messages),
            sizes: None,
        },
        ..request(messages)
    }
}

/// Whole Converse bodies: `cachePoint` blocks after the system prompt, after the previous
/// request's end while it is a prefix, and at the end; none for a model without prompt
/// caching.
#[tokio::test]
async fn converse_bodies_carry_cache_points_for_models_that_cache() {
    let (fake, url) = FakeBedrock::start(vec![
        Reply::events(&hello_events(true)),
        Reply::events(&hello_events(true)),
        Reply::events(&hello_events(true)),
    ])
    .await;
    let provider = provider(&url);
    let prompt = Message::User {
        text: "Read a".into(),
    };
    let first = vec![prompt.clone()];
    let second = vec![
        prompt.clone(),
        Message::Assistant {
            text: String::new(),
            tool_calls: vec![ToolCall {
                id: "tooluse_1".into(),
                name: "pen_read".into(),
                arguments: r#"{"path":"a"}"#.into(),
            }],
            reasoning: vec![],
        },
        Message::ToolResult {
            call_id: "tooluse_1".into(),
            content: "alpha".into(),
            is_error: false,
        },
    ];
    for request in [
        long_request(CACHING_MODEL, first.clone(), &[]),
        long_request(CACHING_MODEL, second.clone(), &first),
        long_request("meta.llama3-70b-instruct-v1:0", second.clone(), &first),
    ] {
        complete(&provider, &request).await.0.expect("answer");
    }
    let requests = fake.requests();
    let point = json!({"cachePoint": {"type": "default"}});
    let system = long_request(CACHING_MODEL, vec![], &[]).system;
    let tools = json!({"tools": [{"toolSpec": {
        "name": "pen_read",
        "description": "Read a file.",
        "inputSchema": {"json": {"type": "object", "properties": {"path": {"type": "string"}}}},
    }}]});
    assert_eq!(
        requests[0].body,
        json!({
            "system": [{"text": system}, point],
            "messages": [{"role": "user", "content": [{"text": "Read a"}, point]}],
            "toolConfig": tools,
            "inferenceConfig": {"maxTokens": 512},
        })
    );
    assert_eq!(
        requests[1].body,
        json!({
            "system": [{"text": system}, point],
            "messages": [
                {"role": "user", "content": [{"text": "Read a"}, point]},
                {"role": "assistant", "content": [
                    {"toolUse": {"toolUseId": "tooluse_1", "name": "pen_read", "input": {"path": "a"}}},
                ]},
                {"role": "user", "content": [
                    {"toolResult": {"toolUseId": "tooluse_1", "content": [{"text": "alpha"}]}},
                    point,
                ]},
            ],
            "toolConfig": tools,
            "inferenceConfig": {"maxTokens": 512},
        })
    );
    assert_eq!(
        cache_points_in(&requests[2].body),
        0,
        "{}",
        requests[2].body
    );
    assert!(requests.iter().all(|r| cache_points_in(&r.body) <= 4));
}

/// A model Bedrock refuses `cachePoint` for (an account or region where the table is wrong):
/// the request goes again once without them, the turn gets its answer, and later requests
/// carry none.
#[tokio::test]
async fn a_request_refused_for_its_cache_points_is_sent_again_without_them() {
    let (fake, url) = FakeBedrock::start(vec![
        Reply::error(
            400,
            "ValidationException",
            "Malformed input request: #/system/1: extraneous key [cachePoint] is not permitted, please reformat your input and try again.",
        ),
        Reply::events(&hello_events(true)),
        Reply::events(&hello_events(true)),
    ])
    .await;
    let provider = provider(&url);
    let messages = vec![Message::User {
        text: "Read a".into(),
    }];
    let request = long_request(CACHING_MODEL, messages, &[]);
    let (first, _) = complete(&provider, &request).await;
    assert_eq!(first.expect("an answer, not a failed turn").text, "Hello");
    let (second, _) = complete(&provider, &request).await;
    assert_eq!(second.expect("answer").text, "Hello");
    let requests = fake.requests();
    let points: Vec<usize> = requests.iter().map(|r| cache_points_in(&r.body)).collect();
    assert_eq!(points, [2, 0, 0]);
}

/// Converse's `metadata` usage of a cached request, normalised: the total counts the cached
/// tokens Converse leaves out of `inputTokens`.
#[tokio::test]
async fn cached_usage_from_the_stream_metadata_is_normalised() {
    let mut events = hello_events(false);
    events.push((
        "metadata",
        json!({"usage": {"inputTokens": 9, "outputTokens": 2, "totalTokens": 4151,
                         "cacheReadInputTokens": 4140, "cacheWriteInputTokens": 0},
               "metrics": {"latencyMs": 310}}),
    ));
    let (_fake, url) = FakeBedrock::start(vec![Reply::events(&events)]).await;
    let (answer, _) = complete(
        &provider(&url),
        &request(vec![Message::User { text: "hi".into() }]),
    )
    .await;
    assert_eq!(
        answer.expect("answer").usage,
        Some(Usage {
            input_tokens: 4149,
            output_tokens: 2,
            cache_read_tokens: Some(4140),
            cache_write_tokens: Some(0),
            reasoning_tokens: None,
        })
    );
}
