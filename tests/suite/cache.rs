//! Policy 4 of the prompt budget end to end: a long tool turn at a small window keeps its
//! requests prefix-stable (what a provider's prompt cache needs), every request within the
//! window; and a resumed session (a new `pen serve` on the same data) plans byte for byte the
//! requests the first daemon would have sent, from the compactions recorded in the session.

use super::cache_figures::{self, figures};
use super::fake_provider::{FakeProvider, Reply, anthropic_frames, openai_error};
use super::lsp_client::LspClient;
use serde_json::{Value, json};
use std::path::Path;

/// 16,000 tokens, at the fake's 4 bytes a token.
const WINDOW_BYTES: usize = 64_000;

fn too_long() -> Reply {
    openai_error(
        400,
        "This model's maximum context length is 16000 tokens.",
        "invalid_request_error",
        Some("context_length_exceeded"),
    )
}

/// A daemon on `data` and `root` whose provider is the fake (OpenAI's format), configured for
/// a 16k window, edits approved, and turns long enough for the script.
fn daemon(fake: &FakeProvider, data: &Path, root: &Path) -> LspClient {
    let base = format!("{}/v1", fake.url());
    daemon_with(
        data,
        root,
        &[
            ("PEN_PROVIDER", "openai"),
            ("PEN_BASE_URL", &base),
            ("PEN_MODEL", "fake-model"),
        ],
    )
}

/// [`daemon`] with the fake speaking Anthropic's Messages API (whose bodies carry
/// `cache_control` breakpoints).
fn anthropic_daemon(fake: &FakeProvider, data: &Path, root: &Path) -> LspClient {
    daemon_with(
        data,
        root,
        &[
            ("PEN_PROVIDER", "anthropic"),
            ("PEN_BASE_URL", fake.url()),
            ("PEN_MODEL", "claude-sonnet-4-5"),
            ("ANTHROPIC_API_KEY", "test-key"),
        ],
    )
}

fn daemon_with(data: &Path, root: &Path, env: &[(&str, &str)]) -> LspClient {
    let mut client = LspClient::spawn(data, root, env);
    client.on_request(|method, _| match method {
        "window/workDoneProgress/create" => Value::Null,
        _ => json!({"decision": "deny"}),
    });
    client.initialize(root, &["utf-16"]);
    client.request(
        "pen/setConfig",
        json!({"context_window_tokens": 16_000, "max_output_tokens": 1_000,
               "budget_margin_tokens": 500, "auto_approve": ["pen_edit"],
               "max_turn_requests": 200}),
    );
    client
}

fn bodies(fake: &FakeProvider) -> Vec<Value> {
    fake.requests().into_iter().map(|r| r.body).collect()
}

/// The bodies of a run in `root` as a run in `as_root` sends them: the environment block of the
/// system part names the workspace root, the one difference between two runs in two folders.
fn in_root(bodies: Vec<Value>, root: &Path, as_root: &Path) -> Vec<Value> {
    let (from, to) = (root.to_string_lossy(), as_root.to_string_lossy());
    bodies
        .into_iter()
        .map(|body| serde_json::from_str(&body.to_string().replace(&*from, &to)).unwrap())
        .collect()
}

/// 64 calls at a 16k window under the default policy (4): at least 85% of all request bytes
/// are a prefix of the request before (policy 3 on the same turn: about a seventh), every
/// request within the window and none rejected; each compaction is a `context_compacted`
/// entry with its `context_trimmed` report (policy 4), and the excerpts are quoted history.
#[test]
fn a_long_turn_at_a_small_window_keeps_its_requests_prefix_stable() {
    const CALLS: usize = 64;
    let fake = FakeProvider::start();
    fake.push(cache_figures::turn(0..CALLS));
    fake.reject_bodies_over(WINDOW_BYTES, too_long());
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    cache_figures::workspace(root.path());
    let mut d = daemon(&fake, data.path(), root.path());
    let session = d.new_session();
    let answer = d.prompt(&session, "Read, search and edit the modules.");
    assert_eq!(answer["stopReason"], "end_turn", "{answer}");

    let bodies = bodies(&fake);
    assert_eq!(bodies.len(), CALLS + 1);
    for body in &bodies {
        let size = serde_json::to_vec(body).unwrap().len();
        assert!(size <= WINDOW_BYTES, "a {size}-byte request");
    }
    let figures = figures(&bodies);
    assert!(
        figures.whole_share >= 0.85,
        "whole-session prefix share {figures:?}"
    );
    let transcript = d.transcript(&session);
    assert!(
        !transcript
            .iter()
            .any(|e| e["kind"] == "context_window_rejected")
    );
    let compactions: Vec<&Value> = transcript
        .iter()
        .filter(|e| e["kind"] == "event" && e["data"]["type"] == "context_compacted")
        .collect();
    let reports: Vec<&Value> = transcript
        .iter()
        .filter(|e| e["kind"] == "context_trimmed")
        .collect();
    assert!(!compactions.is_empty(), "no compaction at all");
    assert_eq!(compactions.len(), reports.len());
    // Batched: far fewer compactions than requests.
    assert!(
        compactions.len() * 4 < bodies.len(),
        "{}",
        compactions.len()
    );
    for report in &reports {
        assert_eq!(report["data"]["policyVersion"], 4, "{report}");
        assert_eq!(report["data"]["budget"], 14_500);
    }
    let last = bodies.last().unwrap().to_string();
    assert!(last.contains("excerpted by the prompt budget (policy 4)"));
    assert!(last.contains("not an executable call"));
}

/// A session resumed by a new daemon plans the very requests the first daemon sent: the same
/// two turns run once in one daemon and once split across two (the second a new process that
/// reads the session, its compactions included, from the store) give byte-identical bodies.
#[test]
fn a_resumed_session_plans_the_requests_the_first_daemon_sent() {
    const FIRST: usize = 40;
    const SECOND: usize = 30;
    let fresh_root = || {
        let root = tempfile::tempdir().unwrap();
        cache_figures::workspace(root.path());
        root
    };
    // One daemon, both turns.
    let whole = FakeProvider::start();
    whole.push(cache_figures::turn(0..FIRST));
    whole.push(cache_figures::turn(FIRST..FIRST + SECOND));
    let whole_data = tempfile::tempdir().unwrap();
    let whole_root = fresh_root();
    let mut d = daemon(&whole, whole_data.path(), whole_root.path());
    let session = d.new_session();
    assert_eq!(d.prompt(&session, "First pass.")["stopReason"], "end_turn");
    assert_eq!(d.prompt(&session, "Second pass.")["stopReason"], "end_turn");
    let whole_bodies = bodies(&whole);
    let transcript = d.transcript(&session);
    assert!(d.close().is_some());

    // The same turns, the second in a new daemon.
    let split = FakeProvider::start();
    split.push(cache_figures::turn(0..FIRST));
    split.push(cache_figures::turn(FIRST..FIRST + SECOND));
    let split_data = tempfile::tempdir().unwrap();
    let split_root = fresh_root();
    let mut first = daemon(&split, split_data.path(), split_root.path());
    let split_session = first.new_session();
    assert_eq!(
        first.prompt(&split_session, "First pass.")["stopReason"],
        "end_turn"
    );
    assert!(first.close().is_some());
    let mut second = daemon(&split, split_data.path(), split_root.path());
    assert_eq!(
        second.prompt(&split_session, "Second pass.")["stopReason"],
        "end_turn"
    );
    let split_bodies = in_root(bodies(&split), split_root.path(), whole_root.path());

    assert_eq!(whole_bodies.len(), FIRST + SECOND + 2);
    assert_eq!(split_bodies.len(), whole_bodies.len());
    for (i, (a, b)) in whole_bodies.iter().zip(&split_bodies).enumerate() {
        assert_eq!(
            comparable(a),
            comparable(b),
            "request {i} differs after the resume"
        );
    }
    // The second turn compacted too, after the resume: the new daemon read the first turn's
    // compactions and made its own on top of them.
    let compacted_seqs: Vec<u64> = transcript
        .iter()
        .filter(|e| e["kind"] == "event" && e["data"]["type"] == "context_compacted")
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    let second_prompt_seq = transcript
        .iter()
        .filter(|e| e["kind"] == "user_prompt")
        .nth(1)
        .map(|e| e["seq"].as_u64().unwrap())
        .unwrap();
    assert!(compacted_seqs.iter().any(|&s| s < second_prompt_seq));
    assert!(compacted_seqs.iter().any(|&s| s > second_prompt_seq));
}

/// A body with what names the session itself left out (a field the OpenAI backend may send
/// to route a session's requests to one cache): two sessions are compared here.
fn comparable(body: &Value) -> String {
    let mut body = body.clone();
    if let Some(fields) = body.as_object_mut() {
        fields.remove("prompt_cache_key");
    }
    body.to_string()
}

/// The Anthropic bodies of a session resumed by a new daemon are byte-identical to those one
/// daemon sends, `cache_control` breakpoints included: the previous request's end is marked
/// from the history when the new process has not sent that request itself.
#[test]
fn a_resumed_anthropic_session_sends_the_same_breakpoints() {
    const FIRST: usize = 30;
    const SECOND: usize = 20;
    let fresh_root = || {
        let root = tempfile::tempdir().unwrap();
        cache_figures::workspace(root.path());
        root
    };
    let script = |fake: &FakeProvider| {
        fake.push(cache_figures::turn_in(anthropic_frames, 0..FIRST));
        fake.push(cache_figures::turn_in(
            anthropic_frames,
            FIRST..FIRST + SECOND,
        ));
    };
    let whole = FakeProvider::start();
    script(&whole);
    let whole_data = tempfile::tempdir().unwrap();
    let whole_root = fresh_root();
    let mut d = anthropic_daemon(&whole, whole_data.path(), whole_root.path());
    let session = d.new_session();
    assert_eq!(d.prompt(&session, "First pass.")["stopReason"], "end_turn");
    assert_eq!(d.prompt(&session, "Second pass.")["stopReason"], "end_turn");
    assert!(d.close().is_some());

    let split = FakeProvider::start();
    script(&split);
    let split_data = tempfile::tempdir().unwrap();
    let split_root = fresh_root();
    let mut first = anthropic_daemon(&split, split_data.path(), split_root.path());
    let split_session = first.new_session();
    assert_eq!(
        first.prompt(&split_session, "First pass.")["stopReason"],
        "end_turn"
    );
    assert!(first.close().is_some());
    let mut second = anthropic_daemon(&split, split_data.path(), split_root.path());
    assert_eq!(
        second.prompt(&split_session, "Second pass.")["stopReason"],
        "end_turn"
    );

    let (whole_bodies, split_bodies) = (
        bodies(&whole),
        in_root(bodies(&split), split_root.path(), whole_root.path()),
    );
    assert_eq!(whole_bodies.len(), FIRST + SECOND + 2);
    assert_eq!(split_bodies.len(), whole_bodies.len());
    for (i, (a, b)) in whole_bodies.iter().zip(&split_bodies).enumerate() {
        assert_eq!(a, b, "request {i} differs after the resume");
    }
    // The first request after the resume marks the head, the previous request's end and its
    // own end.
    let resumed = &split_bodies[FIRST + 1];
    assert_eq!(
        resumed.to_string().matches("\"cache_control\"").count(),
        3,
        "{resumed}"
    );
}
