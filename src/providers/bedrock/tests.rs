//! Unit tests of the Bedrock backend's pure parts: the request body, SigV4 signing, stream
//! assembly and error classification on real Bedrock error bodies.

use super::*;
use crate::providers::ToolDefinition;
use serde_json::json;

fn request(messages: Vec<Message>) -> ModelRequest {
    ModelRequest {
        model: "anthropic.claude-3-5-sonnet-20240620-v1:0".into(),
        system: "You are pen.".into(),
        messages,
        tools: vec![ToolDefinition {
            name: "pen_read".into(),
            description: "Read a file.".into(),
            input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        }],
        max_output_tokens: 1024,
        cache: Default::default(),
    }
}

fn call(id: &str, arguments: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: "pen_read".into(),
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
fn body_has_the_system_prompt_once_tools_and_a_tool_round() {
    let request = request(vec![
        Message::User {
            text: "Read a and b".into(),
        },
        Message::Assistant {
            text: "Reading both.".into(),
            tool_calls: vec![call("t1", r#"{"path":"a"}"#), call("t2", "{not json")],
            reasoning: vec![],
        },
        result("t1", "contents of a", false),
        result("t2", "invalid arguments: expected value", true),
        Message::Assistant {
            text: "Done.".into(),
            tool_calls: vec![],
            reasoning: vec![],
        },
    ]);
    assert_eq!(
        serde_json::to_value(converse_body(&request, None, None)).expect("serializable"),
        json!({
            "system": [{"text": "You are pen."}],
            "messages": [
                {"role": "user", "content": [{"text": "Read a and b"}]},
                {"role": "assistant", "content": [
                    {"text": "Reading both."},
                    {"toolUse": {"toolUseId": "t1", "name": "pen_read", "input": {"path": "a"}}},
                    // Invalid arguments are replayed as an empty object; the result says why.
                    {"toolUse": {"toolUseId": "t2", "name": "pen_read", "input": {}}},
                ]},
                // Both results of the turn in one user message, the failed one flagged.
                {"role": "user", "content": [
                    {"toolResult": {"toolUseId": "t1", "content": [{"text": "contents of a"}]}},
                    {"toolResult": {
                        "toolUseId": "t2",
                        "content": [{"text": "invalid arguments: expected value"}],
                        "status": "error",
                    }},
                ]},
                {"role": "assistant", "content": [{"text": "Done."}]},
            ],
            "toolConfig": {"tools": [{"toolSpec": {
                "name": "pen_read",
                "description": "Read a file.",
                "inputSchema": {"json": {
                    "type": "object",
                    "properties": {"path": {"type": "string"}},
                }},
            }}]},
            "inferenceConfig": {"maxTokens": 1024},
        })
    );
}

#[test]
fn body_merges_a_prompt_after_results_and_skips_empty_parts() {
    let mut without_tools = request(vec![
        Message::User { text: "go".into() },
        Message::Assistant {
            text: String::new(),
            tool_calls: vec![call("t1", "{}")],
            reasoning: vec![],
        },
        result("t1", "not executed (stopped)", true),
        Message::User {
            text: "go on".into(),
        },
    ]);
    without_tools.system = String::new();
    without_tools.tools = Vec::new();
    let body =
        serde_json::to_value(converse_body(&without_tools, None, None)).expect("serializable");
    assert_eq!(body.get("system"), None);
    assert_eq!(body.get("toolConfig"), None);
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [{"text": "go"}]},
            {"role": "assistant", "content": [
                {"toolUse": {"toolUseId": "t1", "name": "pen_read", "input": {}}},
            ]},
            {"role": "user", "content": [
                {"toolResult": {
                    "toolUseId": "t1",
                    "content": [{"text": "not executed (stopped)"}],
                    "status": "error",
                }},
                {"text": "go on"},
            ]},
        ])
    );
}

#[test]
fn model_ids_are_one_escaped_path_segment() {
    let provider = BedrockProvider::new(
        "configured-model",
        "us-east-1",
        Some("http://127.0.0.1:9/".into()),
        AwsCredentials::new("AKID", "secret", None),
        Duration::from_secs(5),
    )
    .expect("provider");
    assert_eq!(
        provider.url(&request(vec![])),
        "http://127.0.0.1:9/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse-stream"
    );
    let mut unnamed = request(vec![]);
    unnamed.model = String::new();
    assert_eq!(
        provider.url(&unnamed),
        "http://127.0.0.1:9/model/configured-model/converse-stream"
    );
    assert_eq!(
        encode_path_segment("arn:aws:bedrock:us-east-1:1:inference-profile/us.x"),
        "arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-profile%2Fus.x"
    );
}

/// 2015-08-30T12:36:00Z, the date of AWS's own SigV4 test suite.
fn fixed_clock() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_440_938_160)
}

#[test]
fn signing_adds_an_aws4_hmac_sha256_authorization_for_the_bedrock_scope() {
    let credentials = AwsCredentials::new(
        "AKIDEXAMPLE",
        "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        None,
    );
    let body = br#"{"messages":[{"role":"user","content":[{"text":"hi"}]}],"inferenceConfig":{"maxTokens":16}}"#;
    let url = "https://bedrock-runtime.us-east-1.amazonaws.com/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse-stream";
    let headers = sign(&credentials, "us-east-1", url, body, fixed_clock()).expect("signed");
    let header = |name: &str| {
        headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    };
    assert_eq!(header("x-amz-date"), Some("20150830T123600Z"));
    // The signature was computed independently (Python, hmac + hashlib, following AWS's
    // SigV4 steps) over the double-encoded path that AWS services other than S3 expect.
    assert_eq!(
        header("authorization"),
        Some(
            "AWS4-HMAC-SHA256 \
             Credential=AKIDEXAMPLE/20150830/us-east-1/bedrock/aws4_request, \
             SignedHeaders=content-type;host;x-amz-date, \
             Signature=c7198bd5e19648f254b656daef220f7b31a7b15ec9cafd457c963230944048e5"
        )
    );
    assert_eq!(header("x-amz-security-token"), None);

    let temporary = AwsCredentials::new("ASIAEXAMPLE", "secret", Some("session-token".into()));
    let headers = sign(&temporary, "eu-west-3", url, body, fixed_clock()).expect("signed");
    let authorization = &headers
        .iter()
        .find(|(key, _)| key == "authorization")
        .expect("authorization")
        .1;
    assert!(
        authorization.contains("Credential=ASIAEXAMPLE/20150830/eu-west-3/bedrock/aws4_request")
            && authorization
                .contains("SignedHeaders=content-type;host;x-amz-date;x-amz-security-token"),
        "{authorization}"
    );
    assert!(headers.contains(&("x-amz-security-token".into(), "session-token".into())));
}

fn event(event_type: &str, payload: serde_json::Value) -> event_stream::Message {
    event_stream::Message {
        headers: vec![
            (":message-type".into(), "event".into()),
            (":event-type".into(), event_type.into()),
            (":content-type".into(), "application/json".into()),
        ],
        payload: payload.to_string().into_bytes(),
    }
}

fn assemble(events: &[event_stream::Message]) -> (Result<ModelResponse, ProviderError>, String) {
    let streamed = std::sync::Mutex::new(String::new());
    let on_event = |event: StreamEvent| {
        let StreamEvent::TextDelta(text) = event;
        streamed.lock().expect("lock").push_str(&text);
    };
    let mut answer = StreamedAnswer::default();
    for message in events {
        if let Err(error) = answer.apply(message, &on_event) {
            return (Err(error), streamed.into_inner().expect("lock"));
        }
    }
    (answer.finish(false), streamed.into_inner().expect("lock"))
}

#[test]
fn a_streamed_tool_round_assembles_text_calls_stop_reason_and_usage() {
    let (response, streamed) = assemble(&[
        event("messageStart", json!({"role": "assistant"})),
        event(
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"text": "Let me "}}),
        ),
        event(
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"text": "look."}}),
        ),
        event("contentBlockStop", json!({"contentBlockIndex": 0})),
        event(
            "contentBlockStart",
            json!({"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": "tooluse_1", "name": "pen_read"}}}),
        ),
        event(
            "contentBlockDelta",
            json!({"contentBlockIndex": 1, "delta": {"toolUse": {"input": "{\"pa"}}}),
        ),
        event(
            "contentBlockDelta",
            json!({"contentBlockIndex": 1, "delta": {"toolUse": {"input": "th\":\"a\"}"}}}),
        ),
        event(
            "contentBlockStart",
            json!({"contentBlockIndex": 2, "start": {"toolUse": {"toolUseId": "tooluse_2", "name": "pen_list"}}}),
        ),
        event("messageStop", json!({"stopReason": "tool_use"})),
        event(
            "metadata",
            json!({"usage": {"inputTokens": 120, "outputTokens": 30, "totalTokens": 150}, "metrics": {"latencyMs": 900}}),
        ),
    ]);
    assert_eq!(streamed, "Let me look.");
    assert_eq!(
        response,
        Ok(ModelResponse {
            text: "Let me look.".into(),
            tool_calls: vec![
                ToolCall {
                    id: "tooluse_1".into(),
                    name: "pen_read".into(),
                    arguments: r#"{"path":"a"}"#.into(),
                },
                ToolCall {
                    id: "tooluse_2".into(),
                    name: "pen_list".into(),
                    arguments: "{}".into(),
                },
            ],
            finish_reason: FinishReason::ToolUse,
            usage: Some(Usage::new(120, 30)),
            reasoning: vec![],
        })
    );
}

#[test]
fn stop_reasons_map_to_finish_reasons() {
    for (stop_reason, expected) in [
        ("end_turn", FinishReason::EndTurn),
        ("tool_use", FinishReason::ToolUse),
        ("max_tokens", FinishReason::MaxTokens),
        ("model_context_window_exceeded", FinishReason::MaxTokens),
        ("guardrail_intervened", FinishReason::Other),
    ] {
        let (response, _) = assemble(&[event("messageStop", json!({"stopReason": stop_reason}))]);
        assert_eq!(
            response.map(|r| r.finish_reason),
            Ok(expected),
            "{stop_reason}"
        );
    }
}

#[test]
fn a_stream_cut_before_message_stop_is_a_network_error() {
    let (response, streamed) = assemble(&[event(
        "contentBlockDelta",
        json!({"contentBlockIndex": 0, "delta": {"text": "Half"}}),
    )]);
    assert_eq!(streamed, "Half");
    assert_eq!(response.map_err(|e| e.kind), Err(ErrorKind::Network));

    let mut answer = StreamedAnswer::default();
    answer
        .apply(
            &event("messageStop", json!({"stopReason": "end_turn"})),
            &|_| {},
        )
        .expect("applies");
    assert_eq!(
        answer.finish(true).map_err(|e| e.kind),
        Err(ErrorKind::Network)
    );
}

#[test]
fn exceptions_inside_the_stream_are_classified() {
    let exception = event_stream::Message {
        headers: vec![
            (":message-type".into(), "exception".into()),
            (":exception-type".into(), "validationException".into()),
            (":content-type".into(), "application/json".into()),
        ],
        payload: br#"{"message":"The model returned the following errors: Input is too long for requested model."}"#.to_vec(),
    };
    let (response, _) = assemble(&[
        event("messageStart", json!({"role": "assistant"})),
        exception,
    ]);
    let error = response.expect_err("exception");
    assert_eq!(error.kind, ErrorKind::ContextWindowExceeded);
    assert_eq!(error.status, None);
    assert_eq!(
        error.message,
        "Bedrock ValidationException: The model returned the following errors: Input is too long \
         for requested model."
    );
}

/// Real Bedrock error answers: status, `x-amzn-errortype` header, body, and the expected kind.
const ERROR_CASES: &[(Option<u16>, Option<&str>, &str, ErrorKind)] = &[
    (
        Some(400),
        Some("ValidationException:http://internal.amazon.com/coral/com.amazon.bedrock/"),
        r#"{"message":"Input is too long for requested model."}"#,
        ErrorKind::ContextWindowExceeded,
    ),
    (
        Some(400),
        Some("ValidationException"),
        r#"{"message":"The model returned the following errors: Input is too long for requested model."}"#,
        ErrorKind::ContextWindowExceeded,
    ),
    (
        Some(400),
        Some("ValidationException"),
        r#"{"message":"Too many input tokens. Max input tokens: 8192, request input token count: 9120 "}"#,
        ErrorKind::ContextWindowExceeded,
    ),
    (
        Some(400),
        Some("ValidationException"),
        r#"{"message":"The model returned the following errors: prompt is too long: 200049 tokens > 200000 maximum"}"#,
        ErrorKind::ContextWindowExceeded,
    ),
    (
        Some(400),
        Some("ValidationException"),
        r#"{"message":"The model returned the following errors: input length and `max_tokens` exceed context limit: 195000 + 8192 > 200000, decrease input length or `max_tokens` and try again"}"#,
        ErrorKind::ContextWindowExceeded,
    ),
    // Only the body names the type.
    (
        Some(400),
        None,
        r#"{"__type":"com.amazon.coral.validate#ValidationException","message":"Input is too long for requested model."}"#,
        ErrorKind::ContextWindowExceeded,
    ),
    // Output-limit errors: shrinking the input would not help, so never the context window.
    (
        Some(400),
        Some("ValidationException:http://internal.amazon.com/coral/com.amazon.bedrock/"),
        r#"{"message":"The maximum tokens you requested exceeds the model limit of 4096. Try again with a maximum tokens value that is lower than 4096."}"#,
        ErrorKind::BadRequest,
    ),
    (
        Some(400),
        Some("ValidationException"),
        r#"{"message":"The model returned the following errors: max_tokens: 100000 > 64000, which is the maximum allowed number of output tokens for claude-sonnet-4-20250514"}"#,
        ErrorKind::BadRequest,
    ),
    (
        Some(400),
        Some("ValidationException"),
        r#"{"message":"A conversation must start with a user message. Try again with a conversation that starts with a user message."}"#,
        ErrorKind::BadRequest,
    ),
    (
        Some(429),
        Some("ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/"),
        r#"{"message":"Too many requests, please wait before trying again."}"#,
        ErrorKind::RateLimited,
    ),
    (
        Some(429),
        Some("ModelNotReadyException"),
        r#"{"message":"Model is not ready for inference. Wait and try your request again."}"#,
        ErrorKind::Server,
    ),
    (
        Some(503),
        Some("ServiceUnavailableException"),
        r#"{"message":"Bedrock is unable to process your request."}"#,
        ErrorKind::Server,
    ),
    (
        Some(500),
        Some("InternalServerException"),
        r#"{"message":"The system encountered an unexpected error during processing. Try your request again."}"#,
        ErrorKind::Server,
    ),
    (
        Some(502),
        None,
        "<html><body><h1>502 Bad Gateway</h1></body></html>",
        ErrorKind::Server,
    ),
    (
        Some(408),
        Some("ModelTimeoutException"),
        r#"{"message":"Model has timed out in processing the request. Try your request again."}"#,
        ErrorKind::Timeout,
    ),
    (
        Some(403),
        Some("AccessDeniedException:http://internal.amazon.com/coral/com.amazon.bedrock/"),
        r#"{"message":"You don't have access to the model with the specified model ID."}"#,
        ErrorKind::Auth,
    ),
    (
        Some(403),
        None,
        r#"{"__type":"com.amazon.coral.service#UnrecognizedClientException","message":"The security token included in the request is invalid."}"#,
        ErrorKind::Auth,
    ),
    (
        Some(404),
        Some("ResourceNotFoundException"),
        r#"{"message":"Could not resolve the foundation model from the provided model identifier."}"#,
        ErrorKind::BadRequest,
    ),
    // Exceptions inside the stream have no status and camel-cased types.
    (
        None,
        Some("throttlingException"),
        r#"{"message":"Too many tokens, please wait before trying again."}"#,
        ErrorKind::RateLimited,
    ),
    (
        None,
        Some("modelStreamErrorException"),
        r#"{"message":"Model stream error.","originalStatusCode":500}"#,
        ErrorKind::Server,
    ),
];

#[test]
fn errors_are_classified_from_type_status_and_wording() {
    for (status, error_type, body, expected) in ERROR_CASES {
        let error = classify_error(*status, *error_type, body.as_bytes());
        assert_eq!(error.kind, *expected, "{status:?} {error_type:?} {body}");
        assert_eq!(error.status, *status);
        assert_eq!(
            error.context_window_exceeded(),
            *expected == ErrorKind::ContextWindowExceeded
        );
    }
    let error = classify_error(
        Some(429),
        Some("ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/"),
        br#"{"message":"Too many requests, please wait before trying again."}"#,
    );
    assert_eq!(
        error.message,
        "Bedrock ThrottlingException (HTTP 429): Too many requests, please wait before trying again."
    );
}

#[test]
fn error_messages_are_bounded_and_scrubbed_of_credentials() {
    let long = format!(r#"{{"message":"{}"}}"#, "x".repeat(5_000));
    let error = classify_error(Some(400), Some("ValidationException"), long.as_bytes());
    assert!(error.message.chars().count() < crate::limits::PROVIDER_ERROR_MESSAGE_BYTES + 100);

    let provider = BedrockProvider::new(
        "m",
        "us-east-1",
        None,
        AwsCredentials::new("AKIDLEAK", "secret/LEAK", Some("TOKENLEAK".into())),
        Duration::from_secs(5),
    )
    .expect("provider");
    let echo = br#"{"message":"The request signature we calculated does not match. Canonical: x-amz-security-token:TOKENLEAK Credential=AKIDLEAK key secret/LEAK"}"#;
    let error = provider.scrub(classify_error(
        Some(403),
        Some("InvalidSignatureException"),
        echo,
    ));
    assert_eq!(error.kind, ErrorKind::Auth);
    assert!(
        !error.message.contains("LEAK") && error.message.contains("[redacted]"),
        "{}",
        error.message
    );
}

fn thought(text: &str, signature: Option<&str>, redacted: Option<&str>) -> ReasoningBlock {
    ReasoningBlock {
        text: text.into(),
        signature: signature.map(str::to_string),
        redacted: redacted.map(str::to_string),
    }
}

#[test]
fn reasoning_content_deltas_become_reasoning_blocks_apart_from_the_text() {
    let (response, streamed) = assemble(&[
        event("messageStart", json!({"role": "assistant"})),
        event(
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "Read "}}}),
        ),
        event(
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "a first."}}}),
        ),
        event(
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"reasoningContent": {"signature": "sig+/=="}}}),
        ),
        event("contentBlockStop", json!({"contentBlockIndex": 0})),
        event(
            "contentBlockDelta",
            json!({"contentBlockIndex": 1, "delta": {"reasoningContent": {"redactedContent": "b3BhcXVl"}}}),
        ),
        event("contentBlockStop", json!({"contentBlockIndex": 1})),
        event(
            "contentBlockDelta",
            json!({"contentBlockIndex": 2, "delta": {"text": "Reading."}}),
        ),
        event("messageStop", json!({"stopReason": "end_turn"})),
    ]);
    assert_eq!(streamed, "Reading.");
    let response = response.expect("answer");
    assert_eq!(response.text, "Reading.");
    assert_eq!(
        response.reasoning,
        [
            thought("Read a first.", Some("sig+/=="), None),
            thought("", None, Some("b3BhcXVl")),
        ]
    );
}

#[test]
fn reasoning_goes_back_first_as_reasoning_content_only_while_thinking_is_on() {
    let mut with_thinking = request(vec![
        Message::User { text: "go".into() },
        Message::Assistant {
            text: "Reading.".into(),
            tool_calls: vec![call("t1", r#"{"path":"a"}"#)],
            reasoning: vec![
                thought("Read a first.", Some("sig+/=="), None),
                // Unsigned reasoning (another server's) cannot be checked, so it stays home.
                thought("local", None, None),
                thought("", None, Some("b3BhcXVl")),
            ],
        },
        result("t1", "a", false),
    ]);
    with_thinking.max_output_tokens = 4096;
    let body = serde_json::to_value(converse_body(&with_thinking, Some(2048), None)).expect("json");
    assert_eq!(
        body["additionalModelRequestFields"],
        json!({"thinking": {"type": "enabled", "budget_tokens": 2048}})
    );
    assert_eq!(
        body["messages"][1]["content"],
        json!([
            {"reasoningContent": {"reasoningText": {"text": "Read a first.", "signature": "sig+/=="}}},
            {"reasoningContent": {"redactedContent": "b3BhcXVl"}},
            {"text": "Reading."},
            {"toolUse": {"toolUseId": "t1", "name": "pen_read", "input": {"path": "a"}}},
        ])
    );
    let off = serde_json::to_value(converse_body(&with_thinking, None, None)).expect("json");
    assert_eq!(off.get("additionalModelRequestFields"), None);
    assert!(!off.to_string().contains("reasoning"), "{off}");
}

#[test]
fn an_answer_is_whole_at_message_stop_and_done_at_metadata() {
    let mut answer = StreamedAnswer::default();
    let apply = |answer: &mut StreamedAnswer, event_type: &str, payload| {
        answer
            .apply(&event(event_type, payload), &|_| {})
            .expect("applies");
        answer.progress()
    };
    assert_eq!(
        apply(
            &mut answer,
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"text": "Hi"}})
        ),
        Progress::More
    );
    assert_eq!(
        apply(
            &mut answer,
            "messageStop",
            json!({"stopReason": "end_turn"})
        ),
        Progress::Complete
    );
    assert_eq!(
        apply(
            &mut answer,
            "metadata",
            json!({"usage": {"inputTokens": 3, "outputTokens": 1}})
        ),
        Progress::Done
    );
}

#[test]
fn an_excerpt_before_a_kept_call_shares_its_turn_with_the_reasoning_first() {
    let request = request(vec![
        Message::User { text: "go".into() },
        Message::Assistant {
            text: "[excerpt]".into(),
            tool_calls: vec![],
            reasoning: vec![],
        },
        Message::Assistant {
            text: String::new(),
            tool_calls: vec![call("t1", "{}")],
            reasoning: vec![thought("why", Some("sig"), None)],
        },
        result("t1", "ok", false),
    ]);
    let body = serde_json::to_value(converse_body(&request, Some(1024), None)).expect("json");
    assert_eq!(
        body["messages"][1],
        json!({"role": "assistant", "content": [
            {"reasoningContent": {"reasoningText": {"text": "why", "signature": "sig"}}},
            {"text": "[excerpt]"},
            {"toolUse": {"toolUseId": "t1", "name": "pen_read", "input": {}}},
        ]})
    );
}

#[test]
fn a_base_url_that_is_not_http_is_refused_before_any_request() {
    let refused = BedrockProvider::new(
        "m",
        "us-east-1",
        Some("bedrock.internal:443".into()),
        AwsCredentials::new("AKID", "secret", None),
        Duration::from_secs(5),
    );
    assert_eq!(refused.err().map(|e| e.kind), Some(ErrorKind::Config));
}

/// The `metadata` event of a Converse stream that read a cached prefix (the shape of the
/// Bedrock prompt-caching guide's example: `totalTokens` is input + output + cache read +
/// cache write, so `inputTokens` leaves the cached tokens out).
#[test]
fn usage_from_metadata_counts_the_cached_prompt_in_the_total() {
    let stream = |usage: serde_json::Value| {
        assemble(&[
            event("messageStart", json!({"role": "assistant"})),
            event(
                "contentBlockDelta",
                json!({"contentBlockIndex": 0, "delta": {"text": "ok"}}),
            ),
            event("messageStop", json!({"stopReason": "end_turn"})),
            event(
                "metadata",
                json!({"usage": usage, "metrics": {"latencyMs": 1234}}),
            ),
        ])
        .0
        .unwrap()
        .usage
    };
    assert_eq!(
        stream(
            json!({"inputTokens": 9, "outputTokens": 187, "totalTokens": 4336,
                      "cacheReadInputTokens": 4140, "cacheWriteInputTokens": 0})
        ),
        Some(Usage {
            input_tokens: 4149,
            output_tokens: 187,
            cache_read_tokens: Some(4140),
            cache_write_tokens: Some(0),
            reasoning_tokens: None,
        })
    );
    assert_eq!(
        stream(
            json!({"inputTokens": 12, "outputTokens": 5, "totalTokens": 2065,
                      "cacheReadInputTokens": 0, "cacheWriteInputTokens": 2048})
        ),
        Some(Usage {
            input_tokens: 2060,
            output_tokens: 5,
            cache_read_tokens: Some(0),
            cache_write_tokens: Some(2048),
            reasoning_tokens: None,
        })
    );
    // A model without prompt caching reports no cache fields: they stay unknown.
    assert_eq!(
        stream(json!({"inputTokens": 120, "outputTokens": 30, "totalTokens": 150})),
        Some(Usage::new(120, 30))
    );
}
