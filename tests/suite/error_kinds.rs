//! Every `errorKind` the editors act on reaches the wire: `pen serve` against the fake provider,
//! each failure scripted the way a real provider answers it, and the kind checked in the
//! `pen/prompt` answer, the live `turn_ended` event and the stored `turn_ended` entry of
//! `pen/getTranscript`. (`session_busy` is a JSON-RPC error: `daemon_sessions.rs` checks its
//! `data.kind`.)

use super::fake_provider::{FakeProvider, Reply, openai_error, openai_frames, raw_error};
use super::lsp_client::LspClient;
use pen::providers::Usage;
use pen::session::{EntryKind, NewEntry, SessionStore};
use serde_json::{Value, json};

struct Daemon {
    _data: tempfile::TempDir,
    _root: tempfile::TempDir,
    client: LspClient,
}

/// A daemon whose OpenAI-compatible provider is the fake, with `env` on top (the retry
/// config, a small window…).
fn daemon(fake: &FakeProvider, env: &[(&str, &str)]) -> Daemon {
    let data = tempfile::tempdir().unwrap();
    daemon_in(fake, data, env)
}

fn daemon_in(fake: &FakeProvider, data: tempfile::TempDir, env: &[(&str, &str)]) -> Daemon {
    let root = tempfile::tempdir().unwrap();
    let base = format!("{}/v1", fake.url());
    let mut vars = vec![
        ("PEN_PROVIDER", "openai"),
        ("PEN_BASE_URL", base.as_str()),
        ("PEN_MODEL", "fake-model"),
        ("OPENAI_API_KEY", "sk-test"),
    ];
    vars.extend_from_slice(env);
    let mut client = LspClient::spawn(data.path(), root.path(), &vars);
    client.initialize(root.path(), &["utf-16"]);
    Daemon {
        _data: data,
        _root: root,
        client,
    }
}

impl Daemon {
    fn new_session(&mut self) -> String {
        self.client.new_session()
    }

    fn prompt(&mut self, session: &str, text: &str) -> Value {
        self.client.prompt(session, text)
    }

    fn transcript(&mut self, session: &str) -> Vec<Value> {
        self.client.transcript(session)
    }

    fn turn_ended_events(&self) -> Vec<Value> {
        self.client
            .notifications
            .iter()
            .filter(|n| n["method"] == "pen/event" && n["params"]["kind"] == "turn_ended")
            .map(|n| n["params"]["data"].clone())
            .collect()
    }

    /// The turn of `answer` ended `error` with `kind`: in the answer, in its live `turn_ended`
    /// and in the stored `turn_ended` entry, each in the wire's one casing.
    fn assert_kind(&mut self, session: &str, answer: &Value, kind: &str) {
        assert_eq!(answer["stopReason"], "error", "{answer}");
        assert_eq!(answer["errorKind"], kind, "{answer}");
        let live = self.turn_ended_events();
        let last = live.last().expect("a turn_ended event");
        assert_eq!(last["errorKind"], kind, "{last}");
        assert_eq!(last["lastError"], answer["lastError"], "{last}");
        let entries = self.transcript(session);
        let stored = entries.last().expect("entries");
        assert_eq!(stored["kind"], "turn_ended", "{stored}");
        assert_eq!(stored["turnId"], answer["turnId"], "{stored}");
        assert_eq!(
            stored["data"],
            json!({"stopReason": "error", "lastError": answer["lastError"], "errorKind": kind}),
            "{stored}"
        );
    }
}

fn usage() -> Usage {
    Usage::new(100, 10)
}

#[test]
fn a_refused_key_is_auth() {
    let fake = FakeProvider::start();
    fake.push([openai_error(
        401,
        "Incorrect API key provided: sk-test.",
        "invalid_request_error",
        Some("invalid_api_key"),
    )]);
    let mut d = daemon(&fake, &[]);
    let session = d.new_session();
    let answer = d.prompt(&session, "hi");
    d.assert_kind(&session, &answer, "auth");
    assert_eq!(fake.requests().len(), 1, "a refused key is not retried");
}

#[test]
fn a_rate_limit_that_outlasts_the_retries_is_rate_limit() {
    let fake = FakeProvider::start();
    let limited = || {
        openai_error(
            429,
            "Rate limit reached for requests",
            "requests",
            Some("rate_limit_exceeded"),
        )
        .with_header("retry-after", "0")
    };
    fake.push([limited(), limited()]);
    let mut d = daemon(&fake, &[("PEN_MAX_ATTEMPTS", "2")]);
    let session = d.new_session();
    let answer = d.prompt(&session, "hi");
    d.assert_kind(&session, &answer, "rate_limit");
    assert_eq!(fake.requests().len(), 2, "retried up to max_attempts");
}

#[test]
fn server_errors_and_a_broken_stream_are_network() {
    let fake = FakeProvider::start();
    fake.push([
        raw_error(500, r#"{"error":{"message":"internal error"}}"#),
        raw_error(503, r#"{"error":{"message":"overloaded"}}"#),
    ]);
    let mut d = daemon(&fake, &[("PEN_MAX_ATTEMPTS", "2")]);
    let session = d.new_session();
    let answer = d.prompt(&session, "hi");
    d.assert_kind(&session, &answer, "network");
    assert_eq!(fake.requests().len(), 2);

    // A stream that closes before its terminator, after the user saw text: not retried.
    let frames = openai_frames(&["Half an ans", "wer"], &[], usage());
    let cut = frames
        .iter()
        .position(|f| f.contains("Half an ans"))
        .expect("a frame with the text");
    fake.push([Reply::Stream(frames[..=cut].to_vec())]);
    let answer = d.prompt(&session, "again");
    d.assert_kind(&session, &answer, "network");
    assert_eq!(fake.requests().len(), 3, "no retry after text was shown");
}

#[test]
fn a_rejected_request_is_provider_bad_request() {
    let fake = FakeProvider::start();
    fake.push([openai_error(
        400,
        "Invalid value for 'temperature': expected a number.",
        "invalid_request_error",
        None,
    )]);
    let mut d = daemon(&fake, &[]);
    let session = d.new_session();
    let answer = d.prompt(&session, "hi");
    d.assert_kind(&session, &answer, "provider_bad_request");
}

#[test]
fn two_context_window_rejections_are_context_window() {
    let fake = FakeProvider::start();
    let too_long = || {
        openai_error(
            400,
            "This model's maximum context length is 8192 tokens. However, your messages resulted in 12000 tokens. Please reduce the length of the messages.",
            "invalid_request_error",
            Some("context_length_exceeded"),
        )
    };
    fake.push([too_long(), too_long()]);
    let mut d = daemon(&fake, &[]);
    let session = d.new_session();
    let answer = d.prompt(&session, "hi");
    d.assert_kind(&session, &answer, "context_window");
    // The rejection is stored and sent typed.
    let entries = d.transcript(&session);
    let rejected = entries
        .iter()
        .find(|e| e["kind"] == "context_window_rejected")
        .expect("the rejection is recorded");
    assert_eq!(rejected["data"]["model"], "fake-model", "{rejected}");
    assert!(rejected["data"]["estimatedTokens"].as_u64().is_some());
}

#[test]
fn a_prompt_over_the_budget_is_budget_too_large_and_asks_no_model() {
    let fake = FakeProvider::start();
    let mut d = daemon(&fake, &[("PEN_CONTEXT_WINDOW_TOKENS", "4096")]);
    let session = d.new_session();
    let prompt = "Explain this log line by line. ".repeat(2_000);
    let answer = d.prompt(&session, &prompt);
    d.assert_kind(&session, &answer, "budget_too_large");
    assert!(fake.requests().is_empty(), "no provider request");
}

#[test]
fn no_provider_configured_is_no_provider() {
    let fake = FakeProvider::start();
    // Anthropic chosen, and its key nowhere (an empty variable is no key): no provider can be
    // built, whatever runs on this machine (no Ollama probe: a provider is named).
    let mut d = daemon(
        &fake,
        &[("PEN_PROVIDER", "anthropic"), ("ANTHROPIC_API_KEY", "")],
    );
    let session = d.new_session();
    let answer = d.prompt(&session, "hi");
    assert_eq!(answer["stopReason"], "error", "{answer}");
    assert_eq!(answer["errorKind"], "no_provider", "{answer}");
    assert!(
        answer["lastError"]
            .as_str()
            .unwrap()
            .contains("ANTHROPIC_API_KEY"),
        "{answer}"
    );
    assert!(fake.requests().is_empty());
}

#[test]
fn an_unrepairable_history_is_history_unrepairable() {
    let fake = FakeProvider::start();
    let data = tempfile::tempdir().unwrap();
    // A result whose call is nowhere in the session, as a hand edit of the database leaves it.
    let store = SessionStore::open(data.path()).unwrap();
    let session = store.new_session(None).unwrap().id;
    for (kind, payload) in [
        (EntryKind::UserPrompt, json!({"text": "hi"})),
        (
            EntryKind::AssistantMessage,
            json!({"text": "Hello.", "tool_calls": [], "finish_reason": "end_turn", "usage": null}),
        ),
        (
            EntryKind::ToolResult,
            json!({"call_id": "ghost", "content": "ok", "is_error": false, "status": "done"}),
        ),
    ] {
        store
            .append(
                &session,
                &NewEntry {
                    kind,
                    turn_id: None,
                    payload,
                },
            )
            .unwrap();
    }
    drop(store);
    let mut d = daemon_in(&fake, data, &[]);
    let answer = d.prompt(&session, "continue");
    d.assert_kind(&session, &answer, "history_unrepairable");
    assert!(fake.requests().is_empty(), "no provider request");
    // The stored result of an older shape reads typed: its tool is unknown (null).
    let entries = d.transcript(&session);
    let ghost = entries.iter().find(|e| e["kind"] == "tool_result").unwrap();
    assert_eq!(
        ghost["data"],
        json!({"callId": "ghost", "tool": null, "state": "done", "isError": false, "content": "ok"})
    );
}
