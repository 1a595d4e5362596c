//! The providers over real HTTP against the fake provider: streamed text and tool calls in both
//! wire formats, retries (Retry-After, 5xx, early-closed streams), context-window rejections
//! flagged and never retried, Stop during a hanging stream or a retry wait and after an answer's
//! terminator, and Anthropic's thinking blocks sent back byte for byte.

use super::fake_provider::{
    FakeProvider, Reply, anthropic_error, anthropic_error_frame, anthropic_frames,
    anthropic_thinking_frames, openai_error, openai_frames, raw_error,
};
use pen::providers::{
    ErrorKind, FinishReason, Message, ModelRequest, ModelResponse, Provider, ProviderError,
    ProviderKind, ProviderSettings, ReasoningBlock, StreamEvent, ToolCall, ToolDefinition, Usage,
    build,
};
use serde_json::json;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Settings pointing `kind` at the fake provider. The timeout only bounds a broken test: every
/// wait below ends on an event, never on it.
fn settings(kind: ProviderKind, fake: &FakeProvider, api_key: Option<&str>) -> ProviderSettings {
    let base_url = match kind {
        ProviderKind::OpenAi => format!("{}/v1", fake.url()),
        _ => fake.url().to_string(),
    };
    ProviderSettings {
        base_url: Some(base_url),
        api_key: api_key.map(str::to_string),
        request_timeout: Duration::from_secs(60),
        ..ProviderSettings::new(kind, "fake-model")
    }
}

fn provider(kind: ProviderKind, fake: &FakeProvider) -> Box<dyn Provider> {
    build(&settings(kind, fake, Some("sk-test-key"))).expect("provider")
}

fn request() -> ModelRequest {
    ModelRequest {
        model: "fake-model".into(),
        system: "You are pen.".into(),
        messages: vec![Message::User {
            text: "What is in a.txt?".into(),
        }],
        tools: vec![ToolDefinition {
            name: "pen_read".into(),
            description: "Read a file.".into(),
            input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        }],
        max_output_tokens: 256,
        cache: Default::default(),
    }
}

fn usage() -> Usage {
    Usage::new(42, 7)
}

/// Sends `request` and returns the result with the text deltas `on_event` received, in order.
async fn complete(
    provider: &dyn Provider,
    request: &ModelRequest,
) -> (Result<ModelResponse, ProviderError>, Vec<String>) {
    let (deltas, mut received) = mpsc::unbounded_channel();
    let on_event = move |event: StreamEvent| match event {
        StreamEvent::TextDelta(text) => deltas.send(text).expect("the test is listening"),
    };
    let result = provider
        .complete(request, &on_event, &CancellationToken::new())
        .await;
    let mut texts = Vec::new();
    while let Ok(text) = received.try_recv() {
        texts.push(text);
    }
    (result, texts)
}

fn text_answer(text: &str) -> ModelResponse {
    ModelResponse {
        text: text.into(),
        tool_calls: vec![],
        reasoning: vec![],
        finish_reason: FinishReason::EndTurn,
        usage: Some(usage()),
    }
}

#[tokio::test]
async fn openai_streams_text_deltas_in_order_to_a_local_server_without_a_key() {
    let fake = FakeProvider::start();
    fake.push([Reply::Stream(openai_frames(
        &["Hel", "lo, ", "wörld"],
        &[],
        usage(),
    ))]);
    let provider = build(&settings(ProviderKind::OpenAi, &fake, None)).expect("provider");

    let (result, deltas) = complete(&*provider, &request()).await;

    assert_eq!(result.expect("answer"), text_answer("Hello, wörld"));
    assert_eq!(deltas, ["Hel", "lo, ", "wörld"]);
    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    let sent = &requests[0];
    assert_eq!(
        (sent.method.as_str(), sent.path.as_str()),
        ("POST", "/v1/chat/completions")
    );
    assert_eq!(sent.header("authorization"), None);
    assert_eq!(
        sent.body,
        json!({
            "model": "fake-model",
            "messages": [
                {"role": "system", "content": "You are pen."},
                {"role": "user", "content": "What is in a.txt?"},
            ],
            "stream": true,
            "stream_options": {"include_usage": true},
            "max_tokens": 256,
            "tools": [{"type": "function", "function": {
                "name": "pen_read",
                "description": "Read a file.",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            }}],
        })
    );
}

#[tokio::test]
async fn anthropic_streams_text_deltas_in_order_with_its_headers() {
    let fake = FakeProvider::start();
    fake.push([Reply::Stream(anthropic_frames(
        &["Hel", "lo, ", "wörld"],
        &[],
        usage(),
    ))]);

    let (result, deltas) = complete(&*provider(ProviderKind::Anthropic, &fake), &request()).await;

    assert_eq!(result.expect("answer"), text_answer("Hello, wörld"));
    assert_eq!(deltas, ["Hel", "lo, ", "wörld"]);
    let sent = &fake.requests()[0];
    assert_eq!(
        (sent.method.as_str(), sent.path.as_str()),
        ("POST", "/v1/messages")
    );
    assert_eq!(sent.header("x-api-key"), Some("sk-test-key"));
    assert_eq!(sent.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(sent.header("authorization"), None);
    assert_eq!(
        sent.body,
        json!({
            "model": "fake-model",
            "max_tokens": 256,
            "stream": true,
            "system": "You are pen.",
            "messages": [{"role": "user", "content": "What is in a.txt?"}],
            "tools": [{
                "name": "pen_read",
                "description": "Read a file.",
                "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
            }],
        })
    );
}

/// Two calls whose arguments the fake splits into pieces; the second's raw text has spacing and
/// a non-ASCII character that must survive byte for byte.
fn calls() -> Vec<ToolCall> {
    vec![
        ToolCall {
            id: "call_1".into(),
            name: "pen_read".into(),
            arguments: r#"{"path":"a.txt"}"#.into(),
        },
        ToolCall {
            id: "call_2".into(),
            name: "pen_search".into(),
            arguments: r#"{ "query": "naïve",  "glob": "*.rs" }"#.into(),
        },
    ]
}

#[tokio::test]
async fn tool_call_answers_are_parsed_with_their_exact_arguments() {
    for kind in [ProviderKind::OpenAi, ProviderKind::Anthropic] {
        let fake = FakeProvider::start();
        let frames = match kind {
            ProviderKind::OpenAi => openai_frames(&["Let me look."], &calls(), usage()),
            _ => anthropic_frames(&["Let me look."], &calls(), usage()),
        };
        fake.push([Reply::Stream(frames)]);

        let (result, deltas) = complete(&*provider(kind, &fake), &request()).await;

        assert_eq!(
            result.expect("answer"),
            ModelResponse {
                text: "Let me look.".into(),
                tool_calls: calls(),
                reasoning: vec![],
                finish_reason: FinishReason::ToolUse,
                usage: Some(usage()),
            },
            "{kind:?}"
        );
        assert_eq!(deltas, ["Let me look."]);
        if kind == ProviderKind::OpenAi {
            assert_eq!(
                fake.requests()[0].header("authorization"),
                Some("Bearer sk-test-key")
            );
        }
    }
}

#[tokio::test]
async fn rate_limited_request_is_retried_after_retry_after() {
    let fake = FakeProvider::start();
    fake.push([
        openai_error(
            429,
            "Rate limit reached for fake-model on requests per min (RPM): Limit 3, Used 3, \
             Requested 1. Please try again in 1s.",
            "requests",
            Some("rate_limit_exceeded"),
        )
        .with_header("retry-after", "1"),
        Reply::Stream(openai_frames(&["ok"], &[], usage())),
    ]);

    let (result, _) = complete(&*provider(ProviderKind::OpenAi, &fake), &request()).await;

    assert_eq!(result.expect("answer after the retry").text, "ok");
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[0].body, requests[1].body,
        "the retry resends the same request"
    );
}

#[tokio::test]
async fn retry_after_is_on_the_error_when_attempts_run_out() {
    let fake = FakeProvider::start();
    fake.push([anthropic_error(
        429,
        "rate_limit_error",
        "This request would exceed the rate limit for your organization of 50,000 input tokens \
         per minute.",
    )
    .with_header("retry-after", "7")]);
    let provider = build(&ProviderSettings {
        max_attempts: 1,
        ..settings(ProviderKind::Anthropic, &fake, Some("sk-test-key"))
    })
    .expect("provider");

    let (result, _) = complete(&*provider, &request()).await;

    let error = result.expect_err("rate limited");
    assert_eq!(error.kind, ErrorKind::RateLimited);
    assert_eq!(error.retry_after, Some(Duration::from_secs(7)));
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test]
async fn auth_errors_are_final_and_never_echo_the_key() {
    let fake = FakeProvider::start();
    fake.push([
        openai_error(
            401,
            "Incorrect API key provided: sk-test-key. You can find your API key at \
             https://platform.openai.com/account/api-keys.",
            "invalid_request_error",
            Some("invalid_api_key"),
        ),
        Reply::Stream(openai_frames(&["ok"], &[], usage())),
    ]);

    let (result, _) = complete(&*provider(ProviderKind::OpenAi, &fake), &request()).await;

    let error = result.expect_err("refused");
    assert_eq!((error.kind, error.status), (ErrorKind::Auth, Some(401)));
    assert!(
        error
            .message
            .contains("Incorrect API key provided: [redacted]."),
        "{}",
        error.message
    );
    assert!(!error.message.contains("sk-test-key"), "{}", error.message);
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test]
async fn a_silent_provider_times_out() {
    let fake = FakeProvider::start();
    // Headers, then silence: the timeout bounds the wait for the next piece of the answer.
    fake.push([Reply::Hang(vec![])]);
    let provider = build(&ProviderSettings {
        request_timeout: Duration::from_millis(200),
        max_attempts: 1,
        ..settings(ProviderKind::OpenAi, &fake, None)
    })
    .expect("provider");

    let (result, _) = complete(&*provider, &request()).await;

    assert_eq!(result.expect_err("timed out").kind, ErrorKind::Timeout);
}

#[tokio::test]
async fn an_unreachable_server_is_a_network_error() {
    // A port that was just listening and no longer is.
    let url = FakeProvider::start().url().to_string();
    let provider = build(&ProviderSettings {
        base_url: Some(format!("{url}/v1")),
        max_attempts: 1,
        ..ProviderSettings::new(ProviderKind::OpenAi, "fake-model")
    })
    .expect("provider");

    let (result, _) = complete(&*provider, &request()).await;

    let error = result.expect_err("refused");
    assert_eq!(error.kind, ErrorKind::Network);
    assert!(
        error.message.contains("could not connect"),
        "{}",
        error.message
    );
}

#[tokio::test]
async fn server_errors_then_success_are_retried() {
    let cases = [
        (
            ProviderKind::OpenAi,
            openai_error(
                500,
                "The server had an error while processing your request. Sorry about that!",
                "server_error",
                None,
            ),
            Reply::Stream(openai_frames(&["ok"], &[], usage())),
        ),
        (
            ProviderKind::Anthropic,
            anthropic_error(529, "overloaded_error", "Overloaded"),
            Reply::Stream(anthropic_frames(&["ok"], &[], usage())),
        ),
        (
            // Overloaded mid-stream, before any text: nothing reached the user, so it is retried.
            ProviderKind::Anthropic,
            Reply::Stream(vec![
                anthropic_frames(&[], &[], usage()).remove(0),
                anthropic_error_frame("overloaded_error", "Overloaded"),
            ]),
            Reply::Stream(anthropic_frames(&["ok"], &[], usage())),
        ),
    ];
    for (kind, failure, success) in cases {
        let fake = FakeProvider::start();
        fake.push([failure, success]);

        let (result, deltas) = complete(&*provider(kind, &fake), &request()).await;

        assert_eq!(
            result.expect("answer after the retry").text,
            "ok",
            "{kind:?}"
        );
        assert_eq!(deltas, ["ok"]);
        assert_eq!(fake.requests().len(), 2, "{kind:?}");
    }
}

#[tokio::test]
async fn context_window_rejections_are_flagged_and_not_retried() {
    let llama_server = r#"{"error":{"code":400,"message":"request (4031 tokens) exceeds the available context size (512 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":4031,"n_ctx":512}}"#;
    let llama_cpp_python = r#"{"error":{"message":"This model's maximum context length is 512 tokens. However, you requested 4047 tokens (4031 in the messages, 16 in the completion). Please reduce the length of the messages or completion.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#;
    let cases = [
        (
            "OpenAI",
            ProviderKind::OpenAi,
            openai_error(
                400,
                "This model's maximum context length is 128000 tokens. However, your messages \
                 resulted in 130314 tokens. Please reduce the length of the messages.",
                "invalid_request_error",
                Some("context_length_exceeded"),
            ),
        ),
        (
            "llama-server",
            ProviderKind::OpenAi,
            raw_error(400, llama_server),
        ),
        (
            "llama-cpp-python",
            ProviderKind::OpenAi,
            raw_error(400, llama_cpp_python),
        ),
        (
            "Ollama",
            ProviderKind::OpenAi,
            openai_error(
                400,
                "the input length exceeds the context length",
                "invalid_request_error",
                None,
            ),
        ),
        (
            "Anthropic",
            ProviderKind::Anthropic,
            anthropic_error(
                400,
                "invalid_request_error",
                "prompt is too long: 208310 tokens > 200000 maximum",
            ),
        ),
    ];
    for (case, kind, rejection) in cases {
        let fake = FakeProvider::start();
        // A retry would get an answer, so only the flag keeps the request from being resent.
        let answer = match kind {
            ProviderKind::OpenAi => openai_frames(&["ok"], &[], usage()),
            _ => anthropic_frames(&["ok"], &[], usage()),
        };
        fake.push([rejection, Reply::Stream(answer)]);

        let (result, _) = complete(&*provider(kind, &fake), &request()).await;

        let error = result.expect_err("a rejection");
        assert!(error.context_window_exceeded(), "{case}: {error:?}");
        assert_eq!(error.status, Some(400), "{case}");
        assert_eq!(fake.requests().len(), 1, "{case}: not retried");
        assert!(!error.message.contains("sk-test-key"), "{case}");
    }
}

#[tokio::test]
async fn the_size_rule_rejects_only_requests_over_it() {
    let fake = FakeProvider::start();
    fake.reject_bodies_over(
        2_000,
        openai_error(
            400,
            "This model's maximum context length is 1000 tokens. However, your messages \
             resulted in 1500 tokens. Please reduce the length of the messages.",
            "invalid_request_error",
            Some("context_length_exceeded"),
        ),
    );
    fake.push([Reply::Stream(openai_frames(&["small"], &[], usage()))]);
    let provider = provider(ProviderKind::OpenAi, &fake);
    let mut large = request();
    large.messages.push(Message::ToolResult {
        call_id: "call_1".into(),
        content: "log line\n".repeat(500),
        is_error: false,
    });

    let (small_result, _) = complete(&*provider, &request()).await;
    let (large_result, _) = complete(&*provider, &large).await;

    assert_eq!(
        small_result.expect("the small request passes").text,
        "small"
    );
    assert_eq!(
        large_result
            .expect_err("the large request is rejected")
            .kind,
        ErrorKind::ContextWindowExceeded
    );
    assert_eq!(fake.requests().len(), 2);
}

#[tokio::test]
async fn a_stream_closed_before_any_chunk_fails_and_is_retried() {
    let fake = FakeProvider::start();
    // llama-cpp-python's answer to a streamed prompt over its context: 200 and an empty body.
    fake.push([Reply::Stream(vec![]), Reply::Stream(vec![])]);
    let provider = build(&ProviderSettings {
        max_attempts: 2,
        ..settings(ProviderKind::OpenAi, &fake, None)
    })
    .expect("provider");

    let (result, deltas) = complete(&*provider, &request()).await;

    let error = result.expect_err("an empty stream is a failure, not an empty answer");
    assert_eq!(error.kind, ErrorKind::Network);
    assert!(error.message.contains("closed early"), "{}", error.message);
    assert!(
        error.message.contains("after 2 attempts"),
        "{}",
        error.message
    );
    assert!(deltas.is_empty());
    assert_eq!(fake.requests().len(), 2);
}

#[tokio::test]
async fn a_stream_that_fails_after_text_is_not_retried() {
    let fake = FakeProvider::start();
    let mut frames = openai_frames(&["Hel", "lo"], &[], usage());
    frames.truncate(2);
    fake.push([
        Reply::Stream(frames),
        Reply::Stream(openai_frames(&["Hello"], &[], usage())),
    ]);

    let (result, deltas) = complete(&*provider(ProviderKind::OpenAi, &fake), &request()).await;

    let error = result.expect_err("a cut stream");
    assert_eq!(error.kind, ErrorKind::Network);
    assert_eq!(deltas, ["Hel"], "the partial text was delivered once");
    assert_eq!(
        fake.requests().len(),
        1,
        "a partial answer cannot be un-sent"
    );
}

#[tokio::test]
async fn cancel_during_a_hanging_stream_returns_cancelled() {
    for kind in [ProviderKind::OpenAi, ProviderKind::Anthropic] {
        let fake = FakeProvider::start();
        let frames = match kind {
            ProviderKind::OpenAi => openai_frames(&["Hel", "lo"], &[], usage())[..2].to_vec(),
            _ => anthropic_frames(&["Hel", "lo"], &[], usage())[..4].to_vec(),
        };
        fake.push([Reply::Hang(frames)]);
        let provider = provider(kind, &fake);
        let request = request();
        let cancel = CancellationToken::new();
        let (deltas, mut received) = mpsc::unbounded_channel();
        let on_event = move |event: StreamEvent| match event {
            StreamEvent::TextDelta(text) => deltas.send(text).expect("the test is listening"),
        };

        let (result, first_delta) =
            tokio::join!(provider.complete(&request, &on_event, &cancel), async {
                fake.wait_for_requests(1).await;
                let first = received.recv().await;
                cancel.cancel();
                first
            });

        assert_eq!(first_delta.as_deref(), Some("Hel"), "{kind:?}");
        let error = result.expect_err("cancelled");
        assert_eq!(error.kind, ErrorKind::Cancelled, "{kind:?}: {error:?}");
        assert_eq!(fake.requests().len(), 1, "{kind:?}");
    }
}

#[tokio::test]
async fn cancel_during_a_retry_wait_returns_cancelled() {
    let fake = FakeProvider::start();
    fake.push([
        anthropic_error(429, "rate_limit_error", "Rate limited").with_header("retry-after", "60")
    ]);
    let provider = provider(ProviderKind::Anthropic, &fake);
    let request = request();
    let cancel = CancellationToken::new();

    let (result, ()) = tokio::join!(provider.complete(&request, &|_| {}, &cancel), async {
        fake.wait_for_requests(1).await;
        cancel.cancel();
    });

    assert_eq!(result.expect_err("cancelled").kind, ErrorKind::Cancelled);
    assert_eq!(fake.requests().len(), 1);
}

/// A signature as Anthropic sends one: long base64 with `+`, `/` and `=`, which must come back
/// byte for byte.
const SIGNATURE: &str = "EqQBCkgIARABGAIiQHuzP+8m/3f0Zt7Xq1WvJc8=+/ErRjYWxsIG1lIGFnYWlu/x==";

#[tokio::test]
async fn anthropic_thinking_blocks_go_back_byte_for_byte_first_on_the_next_request() {
    let fake = FakeProvider::start();
    let reasoning = vec![
        ReasoningBlock {
            text: "The user wants a.txt; read it — then answer.".into(),
            signature: Some(SIGNATURE.into()),
            redacted: None,
        },
        ReasoningBlock {
            text: String::new(),
            signature: None,
            redacted: Some("EmwKAhgBEgy3va3pzix/LafPsn4aDGRhdGEgb2YgdGhlIG1vZGVs".into()),
        },
    ];
    let call = ToolCall {
        id: "toolu_01".into(),
        name: "pen_read".into(),
        arguments: r#"{"path":"a.txt"}"#.into(),
    };
    fake.push([
        Reply::Stream(anthropic_thinking_frames(
            &reasoning,
            &["Reading."],
            std::slice::from_ref(&call),
            usage(),
        )),
        Reply::Stream(anthropic_frames(&["It says hello."], &[], usage())),
    ]);
    let provider = build(&ProviderSettings {
        reasoning_budget_tokens: 1024,
        ..settings(ProviderKind::Anthropic, &fake, Some("sk-test-key"))
    })
    .expect("provider");
    let mut request = ModelRequest {
        max_output_tokens: 4096,
        cache: Default::default(),
        ..request()
    };

    let (first, deltas) = complete(&*provider, &request).await;
    let first = first.expect("tool use");
    assert_eq!(deltas, ["Reading."], "thinking is not streamed as text");
    assert_eq!(first.reasoning, reasoning);
    assert_eq!(first.tool_calls, std::slice::from_ref(&call));

    request.messages.push(Message::Assistant {
        text: first.text,
        tool_calls: first.tool_calls,
        reasoning: first.reasoning,
    });
    request.messages.push(Message::ToolResult {
        call_id: call.id.clone(),
        content: "hello".into(),
        is_error: false,
    });
    let (second, _) = complete(&*provider, &request).await;
    assert_eq!(second.expect("answer").text, "It says hello.");

    let requests = fake.requests();
    for sent in &requests {
        assert_eq!(
            sent.body["thinking"],
            json!({"type": "enabled", "budget_tokens": 1024})
        );
        assert_eq!(sent.body["max_tokens"], 4096);
    }
    assert_eq!(
        requests[1].body["messages"][1],
        json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": "The user wants a.txt; read it — then answer.",
             "signature": SIGNATURE},
            {"type": "redacted_thinking",
             "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDGRhdGEgb2YgdGhlIG1vZGVs"},
            {"type": "text", "text": "Reading."},
            {"type": "tool_use", "id": "toolu_01", "name": "pen_read", "input": {"path": "a.txt"}},
        ]})
    );
}

#[tokio::test]
async fn a_thinking_budget_not_below_the_output_limit_is_refused_before_any_request() {
    let fake = FakeProvider::start();
    let provider = build(&ProviderSettings {
        reasoning_budget_tokens: 1024,
        ..settings(ProviderKind::Anthropic, &fake, Some("sk-test-key"))
    })
    .expect("provider");
    let (result, _) = complete(&*provider, &request()).await;
    let error = result.expect_err("refused");
    assert_eq!(error.kind, ErrorKind::Config);
    assert!(
        error.message.contains("raise max_output_tokens"),
        "{}",
        error.message
    );
    assert!(fake.requests().is_empty());
}

/// Sends `request`, firing Stop from `on_event` as the first text delta arrives.
async fn complete_stopping_at_the_first_delta(
    provider: &dyn Provider,
    request: &ModelRequest,
) -> Result<ModelResponse, ProviderError> {
    let cancel = CancellationToken::new();
    let on_event = |_: StreamEvent| cancel.cancel();
    provider.complete(request, &on_event, &cancel).await
}

#[tokio::test]
async fn stop_after_the_terminator_keeps_the_answer_and_stop_before_it_cancels() {
    for kind in [ProviderKind::OpenAi, ProviderKind::Anthropic] {
        let frames = match kind {
            ProviderKind::OpenAi => openai_frames(&["Hel", "lo"], &[], usage()),
            _ => anthropic_frames(&["Hel", "lo"], &[], usage()),
        };
        // The whole answer, terminator included, arrives in one read while the connection
        // stays open: Stop during that read keeps it.
        let fake = FakeProvider::start();
        fake.push([Reply::HoldOpen(frames.clone())]);
        let kept = complete_stopping_at_the_first_delta(&*provider(kind, &fake), &request()).await;
        assert_eq!(kept, Ok(text_answer("Hello")), "{kind:?}");

        // Everything but the terminator: the answer is still streaming, so Stop cancels it.
        let fake = FakeProvider::start();
        fake.push([Reply::Hang(frames[..frames.len() - 1].to_vec())]);
        let stopped =
            complete_stopping_at_the_first_delta(&*provider(kind, &fake), &request()).await;
        assert_eq!(
            stopped.map_err(|error| error.kind),
            Err(ErrorKind::Cancelled),
            "{kind:?}"
        );
    }
}

/// Through `pen run`: the loop records an answer's thinking blocks and the next request of the
/// turn carries them back, signature byte for byte, first in their assistant message.
#[test]
fn pen_run_sends_anthropic_thinking_back_on_the_next_request_of_the_turn() {
    let root = tempfile::tempdir().expect("root");
    std::fs::write(root.path().join("a.txt"), "hello\n").expect("a.txt");
    let data = tempfile::tempdir().expect("data dir");
    let thinking = ReasoningBlock {
        text: "Read a.txt, then answer.".into(),
        signature: Some(SIGNATURE.into()),
        redacted: None,
    };
    let call = ToolCall {
        id: "toolu_run".into(),
        name: "pen_read".into(),
        arguments: r#"{"path":"a.txt"}"#.into(),
    };
    let fake = FakeProvider::start();
    fake.push([
        Reply::Stream(anthropic_thinking_frames(
            std::slice::from_ref(&thinking),
            &[],
            std::slice::from_ref(&call),
            usage(),
        )),
        Reply::Stream(anthropic_frames(&["It says hello."], &[], usage())),
    ]);
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_pen"))
        .args(["run", "What is in a.txt?", "--provider", "anthropic"])
        .args(["--model", "fake-model", "--base-url", fake.url()])
        .env("PEN_DATA_DIR", data.path())
        .env("PEN_CONFIG", "/nonexistent/pen/config.toml")
        .env("ANTHROPIC_API_KEY", "sk-test-key")
        .env("PEN_REASONING_BUDGET_TOKENS", "1024")
        .env("PEN_MAX_OUTPUT_TOKENS", "4096")
        .current_dir(root.path())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("pen run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("It says hello."),
        "{stderr}"
    );
    let requests = fake.requests();
    assert_eq!(requests.len(), 2, "{stderr}");
    assert_eq!(
        requests[1].body["messages"][1]["content"][0],
        json!({"type": "thinking", "thinking": "Read a.txt, then answer.", "signature": SIGNATURE})
    );
    assert_eq!(
        requests[1].body["messages"][1]["content"][1]["type"],
        "tool_use"
    );
}

/// A system prompt of about 1,300 tokens by pen's estimate: over the 1,024-token minimum of
/// most Claude models, under Haiku 4.5's 4,096.
fn long_system() -> String {
    format!("You are pen. {}", "Keep the prefix stable. ".repeat(220))
}

fn pen_read(id: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: "pen_read".into(),
        arguments: r#"{"path":"a.txt"}"#.into(),
    }
}

fn breakpoints_in(body: &serde_json::Value) -> usize {
    body.to_string().matches("\"cache_control\"").count()
}

/// Whole request bodies of one session as the fake server received them: the head breakpoint
/// on the system prompt, the previous request's end kept while it is still a prefix, the end
/// of the request; none of the earlier end once a compaction rewrote the prefix; none at all
/// where the model's minimum is not reached.
#[tokio::test]
async fn anthropic_requests_carry_cache_breakpoints_on_the_head_the_previous_end_and_the_end() {
    let fake = FakeProvider::start();
    let answers = (0..4).map(|_| Reply::Stream(anthropic_frames(&["ok"], &[], usage())));
    fake.push(answers);
    let provider = provider(ProviderKind::Anthropic, &fake);
    let ephemeral = json!({"type": "ephemeral"});
    let system = long_system();
    let prompt = Message::User {
        text: "Read a.txt".into(),
    };
    let call = Message::Assistant {
        text: String::new(),
        tool_calls: vec![pen_read("toolu_1")],
        reasoning: vec![],
    };
    let result = Message::ToolResult {
        call_id: "toolu_1".into(),
        content: "alpha".into(),
        is_error: false,
    };
    let tools = json!([{
        "name": "pen_read",
        "description": "Read a file.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    }]);
    let ask = |model: &str, messages: Vec<Message>, previous: &[Message]| ModelRequest {
        model: model.into(),
        system: system.clone(),
        cache: pen::providers::CacheHints {
            key: Some("s_1".into()),
            previous_end: pen::providers::CacheHints::previous_end(previous, &messages),
            sizes: None,
        },
        messages,
        ..request()
    };

    // The first request: the head and the end.
    let first = vec![prompt.clone()];
    complete(&*provider, &ask("claude-sonnet-4-5", first.clone(), &[]))
        .await
        .0
        .expect("answer");
    // The next step of the turn: the previous request (the prompt) is a prefix.
    let second = vec![prompt.clone(), call.clone(), result.clone()];
    complete(
        &*provider,
        &ask("claude-sonnet-4-5", second.clone(), &first),
    )
    .await
    .0
    .expect("answer");
    // A compaction rewrote the prompt's turn: the previous request (three messages) is no
    // longer a prefix, so its end (the first result) gets no breakpoint.
    let compacted = vec![
        Message::User {
            text: "Read a.txt (earlier steps excerpted)".into(),
        },
        call.clone(),
        result.clone(),
        Message::Assistant {
            text: String::new(),
            tool_calls: vec![pen_read("toolu_2")],
            reasoning: vec![],
        },
        Message::ToolResult {
            call_id: "toolu_2".into(),
            content: "beta".into(),
            is_error: false,
        },
    ];
    complete(&*provider, &ask("claude-sonnet-4-5", compacted, &second))
        .await
        .0
        .expect("answer");
    // Haiku 4.5 caches nothing under 4,096 tokens: no breakpoint at all.
    complete(&*provider, &ask("claude-haiku-4-5", first.clone(), &[]))
        .await
        .0
        .expect("answer");

    let requests = fake.requests();
    assert_eq!(requests.len(), 4);
    let system_block = json!([{"type": "text", "text": system, "cache_control": ephemeral}]);
    assert_eq!(
        requests[0].body,
        json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 256,
            "stream": true,
            "system": system_block,
            "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "Read a.txt", "cache_control": ephemeral},
                ]},
            ],
            "tools": tools,
        })
    );
    assert_eq!(
        requests[1].body,
        json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 256,
            "stream": true,
            "system": system_block,
            "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "Read a.txt", "cache_control": ephemeral},
                ]},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "pen_read", "input": {"path": "a.txt"}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "alpha",
                     "cache_control": ephemeral},
                ]},
            ],
            "tools": tools,
        })
    );
    assert_eq!(
        requests[2].body["messages"],
        json!([
            {"role": "user", "content": "Read a.txt (earlier steps excerpted)"},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "pen_read", "input": {"path": "a.txt"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "alpha"},
            ]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_2", "name": "pen_read", "input": {"path": "a.txt"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "beta",
                 "cache_control": ephemeral},
            ]},
        ])
    );
    assert_eq!(requests[2].body["system"], system_block);
    assert_eq!(
        requests[3].body,
        json!({
            "model": "claude-haiku-4-5",
            "max_tokens": 256,
            "stream": true,
            "system": system,
            "messages": [{"role": "user", "content": "Read a.txt"}],
            "tools": tools,
        })
    );
    let counts: Vec<usize> = requests.iter().map(|r| breakpoints_in(&r.body)).collect();
    assert_eq!(counts, [2, 3, 2, 0]);
    assert!(counts.iter().all(|&count| count <= 4));
}

/// Two requests planned from the same history (and the same previous request) are the same
/// bytes on the wire, for every backend: nothing in a body varies per request.
#[tokio::test]
async fn two_requests_planned_from_the_same_history_are_byte_identical() {
    for kind in [ProviderKind::OpenAi, ProviderKind::Anthropic] {
        let fake = FakeProvider::start();
        let frames = || match kind {
            ProviderKind::OpenAi => openai_frames(&["ok"], &[], usage()),
            _ => anthropic_frames(&["ok"], &[], usage()),
        };
        fake.push([Reply::Stream(frames()), Reply::Stream(frames())]);
        let mut settings = settings(kind, &fake, Some("sk-test-key"));
        settings.prompt_cache_key = Some(true);
        let provider = build(&settings).expect("provider");
        let previous = vec![Message::User {
            text: "Read a.txt".into(),
        }];
        let messages = vec![
            previous[0].clone(),
            Message::Assistant {
                text: "Reading.".into(),
                tool_calls: vec![pen_read("call_1")],
                reasoning: vec![],
            },
            Message::ToolResult {
                call_id: "call_1".into(),
                content: "alpha".into(),
                is_error: false,
            },
        ];
        let planned = || ModelRequest {
            system: long_system(),
            cache: pen::providers::CacheHints {
                key: Some("s_1".into()),
                previous_end: pen::providers::CacheHints::previous_end(&previous, &messages),
                sizes: None,
            },
            messages: messages.clone(),
            ..request()
        };
        complete(&*provider, &planned()).await.0.expect("answer");
        complete(&*provider, &planned()).await.0.expect("answer");
        let requests = fake.requests();
        assert_eq!(requests.len(), 2);
        assert_eq!(requests[0].raw_body, requests[1].raw_body, "{kind}");
        if kind == ProviderKind::OpenAi {
            assert_eq!(requests[0].body["prompt_cache_key"], "s_1");
        } else {
            assert_eq!(breakpoints_in(&requests[0].body), 3);
        }
    }
}

/// OpenAI's own endpoint gets `prompt_cache_key` (the session id) by default; a local server
/// gets it only when the config says `prompt_cache_key = "on"`.
#[tokio::test]
async fn prompt_cache_key_goes_only_where_it_is_accepted() {
    for (setting, expected) in [(None, None), (Some(true), Some("s_9")), (Some(false), None)] {
        let fake = FakeProvider::start();
        fake.push([Reply::Stream(openai_frames(&["ok"], &[], usage()))]);
        let mut settings = settings(ProviderKind::OpenAi, &fake, None);
        settings.prompt_cache_key = setting;
        let provider = build(&settings).expect("provider");
        let mut asked = request();
        asked.cache.key = Some("s_9".into());
        complete(&*provider, &asked).await.0.expect("answer");
        let requests = fake.requests();
        assert_eq!(
            requests[0]
                .body
                .get("prompt_cache_key")
                .and_then(|v| v.as_str()),
            expected,
            "{setting:?}"
        );
    }
}
