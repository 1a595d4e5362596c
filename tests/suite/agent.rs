//! The agent loop end to end: `pen serve` over real stdio (and `pen run`), talking to the fake
//! provider over real HTTP in each API's wire format.

use super::fake_provider::{FakeProvider, Reply, anthropic_frames, openai_error, openai_frames};
use super::lsp_client::LspClient;
use pen::providers::{ToolCall, Usage};
use pen::session::{EntryKind, NewEntry, SessionStore};
use serde_json::{Value, json};
use std::fs;
use std::path::Path;
use std::process::Command;

fn call(id: &str, name: &str, args: Value) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: args.to_string(),
    }
}

fn usage() -> Usage {
    Usage::new(100, 10)
}

struct Daemon {
    data: tempfile::TempDir,
    root: tempfile::TempDir,
    client: LspClient,
}

/// A daemon whose provider is the fake, speaking `api` ("openai" or "anthropic").
fn daemon(fake: &FakeProvider, api: &str) -> Daemon {
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    daemon_in(fake, api, data, root)
}

fn daemon_in(
    fake: &FakeProvider,
    api: &str,
    data: tempfile::TempDir,
    root: tempfile::TempDir,
) -> Daemon {
    let base = if api == "openai" {
        format!("{}/v1", fake.url())
    } else {
        fake.url().to_string()
    };
    let mut client = LspClient::spawn(
        data.path(),
        root.path(),
        &[
            ("PEN_PROVIDER", api),
            ("PEN_BASE_URL", &base),
            ("PEN_MODEL", "fake-model"),
            ("ANTHROPIC_API_KEY", "test-key"),
        ],
    );
    // Progress tokens are created on request, as an editor does.
    client.on_request(|method, _| match method {
        "window/workDoneProgress/create" => Value::Null,
        _ => json!({"decision": "deny"}),
    });
    client.initialize(root.path(), &["utf-16"]);
    Daemon { data, root, client }
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

    fn events(&self) -> Vec<Value> {
        self.client
            .notifications
            .iter()
            .filter(|n| n["method"] == "pen/event")
            .map(|n| n["params"].clone())
            .collect()
    }
}

fn tool_round(api: &str) -> Vec<Reply> {
    let frames = |text: &[&str], calls: &[ToolCall]| match api {
        "openai" => openai_frames(text, calls, usage()),
        _ => anthropic_frames(text, calls, usage()),
    };
    vec![
        Reply::Stream(frames(
            &["Let me ", "read it."],
            &[call("call_1", "pen_read", json!({"path": "a.txt"}))],
        )),
        Reply::Stream(frames(&["It says ", "alpha."], &[])),
    ]
}

#[test]
fn a_tool_using_turn_streams_events_and_progress_for_each_api() {
    for api in ["openai", "anthropic"] {
        let fake = FakeProvider::start();
        fake.push(tool_round(api));
        let mut d = daemon(&fake, api);
        fs::write(d.root.path().join("a.txt"), "alpha\n").unwrap();
        let session = d.new_session();
        let answer = d.prompt(&session, "What is in a.txt?");
        assert_eq!(answer["stopReason"], "end_turn", "{api}: {answer}");

        // Every event of the turn came before the pen/prompt answer.
        let events = d.events();
        assert_eq!(events.last().unwrap()["kind"], "turn_ended", "{api}");
        let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
        // The session's first turn says its window first.
        assert_eq!(
            kinds,
            [
                "context_window",
                "text_delta",
                "text_delta",
                "usage",
                "tool_call_started",
                "tool_call_finished",
                "text_delta",
                "text_delta",
                "usage",
                "turn_ended"
            ],
            "{api}"
        );
        let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
        assert_eq!(seqs, (1..=10).collect::<Vec<u64>>());
        // The call says what it works on as its tool computes it; the editors show that.
        assert_eq!(events[4]["data"]["summary"], "a.txt", "{api}");
        // And what its tool does, as the tool declares it.
        assert_eq!(events[4]["data"]["toolKind"], "read", "{api}");
        // Each request's usage, and the totals of the turn and the session at the end.
        let one =
            json!({"inputTokens": usage().input_tokens, "outputTokens": usage().output_tokens});
        let two = json!({"inputTokens": 2 * usage().input_tokens, "outputTokens": 2 * usage().output_tokens});
        assert_eq!(
            events[8]["data"],
            json!({"model": "fake-model", "request": one, "turn": two, "session": two}),
            "{api}"
        );
        assert_eq!(events[9]["data"]["usage"], two, "{api}");
        assert_eq!(events[9]["data"]["sessionUsage"], two, "{api}");
        assert_eq!(answer["usage"], two, "{api}");
        assert_eq!(answer["sessionUsage"], two, "{api}");
        assert!(
            events
                .iter()
                .all(|e| e["sessionId"] == session.as_str() && e["turnId"] == answer["turnId"])
        );
        let progress: Vec<&str> = d
            .client
            .notifications
            .iter()
            .filter(|n| n["method"] == "$/progress")
            .map(|n| n["params"]["value"]["kind"].as_str().unwrap())
            .collect();
        assert_eq!(progress.first(), Some(&"begin"), "{api}");
        assert_eq!(progress.last(), Some(&"end"), "{api}");

        // The system prompt went exactly once in every request, and the result came back.
        let requests = fake.requests();
        assert_eq!(requests.len(), 2, "{api}");
        for request in &requests {
            let messages = request.body["messages"].as_array().unwrap();
            let inline_system = messages.iter().filter(|m| m["role"] == "system").count();
            match api {
                "openai" => {
                    assert_eq!(inline_system, 1, "{api}");
                    assert_eq!(messages[0]["role"], "system");
                }
                _ => {
                    assert_eq!(inline_system, 0, "{api}");
                    // pen's tools and system prompt pass the minimum cacheable length, so the
                    // system prompt is one text block with the head's cache breakpoint.
                    assert_eq!(
                        request.body["system"][0]["cache_control"],
                        json!({"type": "ephemeral"})
                    );
                    assert!(
                        request.body["system"][0]["text"]
                            .as_str()
                            .unwrap()
                            .contains("You are pen")
                    );
                }
            }
        }
        assert!(requests[1].body.to_string().contains("alpha"), "{api}");
        let transcript = d.transcript(&session);
        let kinds: Vec<String> = transcript
            .iter()
            .map(|e| e["kind"].as_str().unwrap().to_string())
            .collect();
        // A stored call has the summary its live event had.
        assert_eq!(transcript[3]["data"]["summary"], "a.txt", "{api}");
        assert_eq!(transcript[3]["data"]["toolKind"], "read", "{api}");
        assert_eq!(
            kinds,
            [
                // The session's context, recorded before its first request.
                "session_context",
                "user_prompt",
                "assistant_message",
                "tool_call",
                "tool_result",
                "assistant_message",
                "turn_ended"
            ]
        );
    }
}

#[test]
fn approvals_go_to_the_editor_and_a_denial_is_recorded() {
    let fake = FakeProvider::start();
    let edit = json!({"path": "a.txt", "edits": [{"old_text": "alpha", "new_text": "beta"}]});
    fake.push([
        Reply::Stream(openai_frames(
            &[],
            &[call("r", "pen_read", json!({"path": "a.txt"}))],
            usage(),
        )),
        Reply::Stream(openai_frames(
            &[],
            &[call("e1", "pen_edit", edit.clone())],
            usage(),
        )),
        Reply::Stream(openai_frames(&["Denied; stopping."], &[], usage())),
        Reply::Stream(openai_frames(
            &[],
            &[call("r2", "pen_read", json!({"path": "a.txt"}))],
            usage(),
        )),
        Reply::Stream(openai_frames(&[], &[call("e2", "pen_edit", edit)], usage())),
        Reply::Stream(openai_frames(&["Done."], &[], usage())),
    ]);
    let mut d = daemon(&fake, "openai");
    fs::write(d.root.path().join("a.txt"), "alpha\n").unwrap();
    let session = d.new_session();
    assert_eq!(d.prompt(&session, "edit it")["stopReason"], "end_turn");
    assert_eq!(
        fs::read_to_string(d.root.path().join("a.txt")).unwrap(),
        "alpha\n"
    );
    let approval = d
        .client
        .server_requests
        .iter()
        .find(|r| r["method"] == "pen/requestApproval")
        .unwrap()
        .clone();
    assert_eq!(approval["params"]["tool"], "pen_edit");
    assert_eq!(approval["params"]["toolKind"], "edit");
    assert!(
        approval["params"]["diff"]
            .as_str()
            .unwrap()
            .contains("-alpha\n+beta")
    );
    let finished: Vec<String> = d
        .events()
        .iter()
        .filter(|e| e["kind"] == "tool_call_finished")
        .map(|e| e["data"]["state"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(finished, ["done", "denied"]);

    d.client.on_request(|method, _| match method {
        "pen/requestApproval" => json!({"decision": "allow"}),
        _ => Value::Null,
    });
    assert_eq!(d.prompt(&session, "now you may")["stopReason"], "end_turn");
    assert_eq!(
        fs::read_to_string(d.root.path().join("a.txt")).unwrap(),
        "beta\n"
    );
}

/// An editor renders the events in order: the approval request must not overtake the text and
/// the `tool_call_started` the turn produced before it (found by the VS Code panel's tests,
/// where the request came first in 3 runs of 4).
#[test]
fn an_approval_request_follows_the_events_before_it() {
    let fake = FakeProvider::start();
    let words: Vec<String> = (0..12).map(|i| format!("word{i} ")).collect();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    let mut d = daemon(&fake, "openai");
    let session = d.new_session();
    for round in 0..5 {
        let id = format!("create_{round}");
        fake.push([
            Reply::Stream(openai_frames(
                &words,
                &[call(
                    &id,
                    "pen_create",
                    json!({"path": format!("f{round}.txt"), "content": "x"}),
                )],
                usage(),
            )),
            Reply::Stream(openai_frames(&["Ok."], &[], usage())),
        ]);
        let prompt = d.client.send_request(
            "pen/prompt",
            json!({"sessionId": session, "text": "create it"}),
        );
        let request = d
            .client
            .wait_for(|m| m["method"] == "pen/requestApproval" && m.get("id").is_some());
        let turn = request["params"]["turnId"].clone();
        let before: Vec<Value> = d
            .events()
            .into_iter()
            .filter(|e| e["turnId"] == turn)
            .collect();
        let text: String = before
            .iter()
            .filter(|e| e["kind"] == "text_delta")
            .map(|e| e["data"]["text"].as_str().unwrap())
            .collect();
        assert_eq!(text, words.concat(), "round {round}");
        assert!(
            before
                .iter()
                .any(|e| e["kind"] == "tool_call_started" && e["data"]["callId"] == id.as_str()),
            "round {round}: tool_call_started came after the request"
        );
        let body = json!({"jsonrpc": "2.0", "id": request["id"], "result": {"decision": "deny"}});
        d.client
            .send_raw(&super::lsp_client::frame(body.to_string().as_bytes()));
        let answer = d.client.wait_for_response(&prompt);
        assert_eq!(answer["result"]["stopReason"], "end_turn");
    }
}

/// Issue 26, item 12: an answer to `pen/requestApproval` that repeats a key is refused, whatever
/// its last value says (serde_json keeps the last one: `deny` then `allow` ran the tool), so
/// the file is not created and the model is told the approval no longer applies.
#[test]
fn an_approval_answer_with_a_repeated_key_is_refused() {
    let fake = FakeProvider::start();
    let mut d = daemon(&fake, "openai");
    let session = d.new_session();
    fake.push([
        Reply::Stream(openai_frames(
            &[],
            &[call(
                "c1",
                "pen_create",
                json!({"path": "made.txt", "content": "x"}),
            )],
            usage(),
        )),
        Reply::Stream(openai_frames(&["Ok."], &[], usage())),
    ]);
    let prompt = d.client.send_request(
        "pen/prompt",
        json!({"sessionId": session, "text": "create it"}),
    );
    let request = d
        .client
        .wait_for(|m| m["method"] == "pen/requestApproval" && m.get("id").is_some());
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":{},"result":{{"decision":"deny","decision":"allow"}}}}"#,
        request["id"]
    );
    d.client
        .send_raw(&super::lsp_client::frame(body.as_bytes()));
    let answer = d.client.wait_for_response(&prompt);
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert!(
        !d.root.path().join("made.txt").exists(),
        "the tool ran on an answer that repeated its key"
    );
    let results = fake.requests()[1].body["messages"].to_string();
    assert!(results.contains("approval no longer applies"), "{results}");
}

#[test]
fn stop_ends_a_streaming_turn_and_the_next_prompt_works() {
    let fake = FakeProvider::start();
    fake.push([
        Reply::Hang(text_frames("Thinking about")),
        Reply::Stream(openai_frames(&["Fine."], &[], usage())),
    ]);
    let mut d = daemon(&fake, "openai");
    let session = d.new_session();
    let prompt = d
        .client
        .send_request("pen/prompt", json!({"sessionId": session, "text": "think"}));
    d.client
        .wait_for(|m| m["method"] == "pen/event" && m["params"]["kind"] == "text_delta");
    // A second prompt while the turn runs is refused.
    let busy = d
        .client
        .request_raw("pen/prompt", json!({"sessionId": session, "text": "again"}));
    assert_eq!(busy["error"]["code"], -32001, "{busy}");
    assert_eq!(
        d.client.request("pen/stop", json!({"sessionId": session}))["stopped"],
        true
    );
    let answer = d.client.wait_for_response(&prompt);
    assert_eq!(answer["result"]["stopReason"], "cancelled", "{answer}");
    assert_eq!(d.prompt(&session, "continue")["stopReason"], "end_turn");
    assert_eq!(
        d.client.request("pen/stop", json!({"sessionId": session}))["stopped"],
        false
    );
}

/// The frames of a stream up to its first text, for a stream that then hangs.
fn text_frames(text: &str) -> Vec<String> {
    let frames = openai_frames(&[text], &[], usage());
    let end = frames
        .iter()
        .position(|f| f.contains(text))
        .expect("a frame with the text");
    frames[..=end].to_vec()
}

/// OpenAI's real envelope for a prompt over the context window.
fn too_long() -> Reply {
    openai_error(
        400,
        "This model's maximum context length is 8192 tokens. However, your messages resulted in 12000 tokens. Please reduce the length of the messages.",
        "invalid_request_error",
        Some("context_length_exceeded"),
    )
}

fn big_log(root: &Path) {
    let mut log = String::new();
    let mut i = 0;
    while log.len() < 1_000_000 {
        log.push_str(&format!(
            "2026-09-08T12:00:00Z INFO request {i} served from cache shard {} in {} ms\n",
            i % 16,
            i % 97
        ));
        i += 1;
    }
    fs::write(root.join("big.log"), log).unwrap();
}

fn read_log_then_answer() -> Vec<Reply> {
    vec![
        Reply::Stream(openai_frames(
            &[],
            &[call("read_log", "pen_read", json!({"path": "big.log"}))],
            usage(),
        )),
        Reply::Stream(openai_frames(&["The log is healthy."], &[], usage())),
    ]
}

#[test]
fn the_seed_scenario_a_1_mb_log_read_completes_and_recovers_from_a_rejection() {
    // With the cap, the page is ~32 KB (under policy 4 fitted to the window: ~15 KB at 128,000
    // tokens, set here as the fake model is in no table) and the turn completes at a generous
    // limit.
    let fake = FakeProvider::start();
    fake.push(read_log_then_answer());
    fake.reject_bodies_over(300_000, too_long());
    let mut d = daemon(&fake, "openai");
    d.client
        .request("pen/setConfig", json!({"context_window_tokens": 128_000}));
    big_log(d.root.path());
    let session = d.new_session();
    assert_eq!(
        d.prompt(&session, "Why is the service slow?")["stopReason"],
        "end_turn"
    );
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    let base = serde_json::to_vec(&requests[0].body).unwrap().len();
    let with_page = serde_json::to_vec(&requests[1].body).unwrap().len();
    assert!(
        with_page - base > 10_000,
        "the page is in the second request"
    );

    // At a limit the page does not fit under, the request is rejected once, the page is cut to
    // 2 KiB in the outbound request only, and the retry completes. No tool runs again.
    let fake = FakeProvider::start();
    fake.push(read_log_then_answer());
    fake.reject_bodies_over(base + 8_000, too_long());
    let mut d = daemon(&fake, "openai");
    d.client
        .request("pen/setConfig", json!({"context_window_tokens": 128_000}));
    big_log(d.root.path());
    let session = d.new_session();
    assert_eq!(
        d.prompt(&session, "Why is the service slow?")["stopReason"],
        "end_turn"
    );
    assert_eq!(fake.requests().len(), 3);
    let transcript = d.transcript(&session);
    let stored = transcript
        .iter()
        .find(|e| e["kind"] == "tool_result")
        .unwrap();
    assert!(
        stored["data"]["content"].as_str().unwrap().len() > 10_000,
        "the transcript keeps the whole result"
    );
    assert!(transcript.iter().any(
        |e| e["kind"] == "context_trimmed" && e["data"]["reason"] == "context_window_exceeded"
    ));
    assert_eq!(
        transcript
            .iter()
            .filter(|e| e["kind"] == "tool_call")
            .count(),
        1
    );
    assert!(d.events().iter().any(|e| e["kind"] == "context_trimmed"));
    // A follow-up prompt on the same session works: the decision is kept.
    fake.push([Reply::Stream(openai_frames(
        &["Still healthy."],
        &[],
        usage(),
    ))]);
    assert_eq!(d.prompt(&session, "And now?")["stopReason"], "end_turn");

    // When even the cut request is too long, the turn ends with an actionable error.
    let fake = FakeProvider::start();
    fake.push(read_log_then_answer());
    fake.reject_bodies_over(base + 600, too_long());
    let mut d = daemon(&fake, "openai");
    d.client
        .request("pen/setConfig", json!({"context_window_tokens": 128_000}));
    big_log(d.root.path());
    let session = d.new_session();
    let answer = d.prompt(&session, "Why is the service slow?");
    assert_eq!(answer["stopReason"], "error");
    let error = answer["lastError"].as_str().unwrap();
    assert!(error.contains("start a new session"), "{error}");
    assert_eq!(fake.requests().len(), 3, "one retry only");
}

#[test]
fn a_session_an_oversized_result_made_unusable_is_recovered() {
    let fake = FakeProvider::start();
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    // A session from before the cap: a 1 MB result stored whole.
    let store = SessionStore::open(data.path()).unwrap();
    let session = store.new_session(None).unwrap().id;
    let append = |kind, payload| {
        store
            .append(
                &session,
                &NewEntry {
                    kind,
                    turn_id: None,
                    payload,
                },
            )
            .unwrap()
    };
    append(EntryKind::UserPrompt, json!({"text": "read the log"}));
    append(
        EntryKind::AssistantMessage,
        json!({"text": "", "tool_calls": [{"id": "old", "name": "pen_read", "arguments": "{}"}]}),
    );
    append(
        EntryKind::ToolResult,
        json!({"call_id": "old", "content": "x".repeat(1_057_864), "is_error": false}),
    );
    append(
        EntryKind::AssistantMessage,
        json!({"text": "read it", "tool_calls": []}),
    );
    fake.reject_bodies_over(100_000, too_long());
    let reply = || Reply::Stream(openai_frames(&["Back in business."], &[], usage()));
    fake.push([reply()]);
    let mut d = daemon_in(&fake, "openai", data, root);
    // Policy 3, whose compaction follows the budget request by request (policy 4 would keep
    // the exchange out under the larger window below, and nothing would be rejected).
    d.client
        .request("pen/setConfig", json!({"budget_policy": 3}));
    // The default window (128,000 tokens) cannot hold the result: the prompt budget leaves the
    // old exchange out before anything is sent, and says so.
    let answer = d.prompt(&session, "what now?");
    assert_eq!(answer["stopReason"], "end_turn", "{answer}");
    assert_eq!(fake.requests().len(), 1);
    let trimmed: Vec<Value> = d
        .transcript(&session)
        .into_iter()
        .filter(|e| e["kind"] == "context_trimmed")
        .collect();
    assert_eq!(trimmed.len(), 1);
    // Entry 1 is the session's context, so the first exchange's span reaches entry 5.
    assert_eq!(trimmed[0]["data"]["droppedExchanges"], json!([[1, 5]]));
    // Configured with a window far larger than the model's, the request goes out, is rejected,
    // and the same step as before recovers it: the result is cut to 2 KiB and retried once.
    d.client.request(
        "pen/setConfig",
        json!({"context_window_tokens": 10_000_000}),
    );
    fake.push([reply()]);
    let answer = d.prompt(&session, "and now?");
    assert_eq!(answer["stopReason"], "end_turn", "{answer}");
    assert_eq!(fake.requests().len(), 3);
    let transcript = d.transcript(&session);
    assert!(transcript.iter().any(
        |e| e["kind"] == "context_trimmed" && e["data"]["reason"] == "context_window_exceeded"
    ));
    assert!(
        transcript
            .iter()
            .any(|e| e["kind"] == "context_window_rejected" && e["data"]["model"] == "fake-model")
    );
}

#[test]
fn a_daemon_killed_mid_turn_leaves_every_committed_entry_and_an_interrupted_call() {
    let fake = FakeProvider::start();
    fake.push([Reply::Stream(openai_frames(
        &[],
        &[call(
            "c1",
            "pen_create",
            json!({"path": "x.txt", "content": "x"}),
        )],
        usage(),
    ))]);
    let mut d = daemon(&fake, "openai");
    let session = d.new_session();
    d.client.send_request(
        "pen/prompt",
        json!({"sessionId": session, "text": "create x"}),
    );
    // The approval request means the call is recorded and waiting: kill the daemon now.
    d.client.wait_for(|m| m["method"] == "pen/requestApproval");
    let Daemon { data, root, client } = d;
    client.kill();

    fake.push([Reply::Stream(openai_frames(&["Checked."], &[], usage()))]);
    let mut d = daemon_in(&fake, "openai", data, root);
    let before: Vec<String> = d
        .transcript(&session)
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_string())
        .collect();
    // The session's context was recorded before the first prompt.
    assert_eq!(
        before,
        [
            "session_context",
            "user_prompt",
            "assistant_message",
            "tool_call"
        ]
    );
    assert_eq!(
        d.prompt(&session, "what happened?")["stopReason"],
        "end_turn"
    );
    let transcript = d.transcript(&session);
    let result = transcript
        .iter()
        .find(|e| e["kind"] == "tool_result")
        .unwrap();
    assert!(
        result["data"]["content"]
            .as_str()
            .unwrap()
            .contains("outcome unknown"),
        "{result}"
    );
    assert!(!d.root.path().join("x.txt").exists());
}

fn pen_run(fake: &FakeProvider, root: &Path, data: &Path, prompt: &str) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_pen"))
        .args([
            "run",
            prompt,
            "--provider",
            "openai",
            "--model",
            "fake-model",
            "--base-url",
        ])
        .arg(format!("{}/v1", fake.url()))
        .current_dir(root)
        .env("PEN_DATA_DIR", data)
        .env("PEN_CONFIG", "/nonexistent/pen/config.toml")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn pen_run_prints_the_answer_and_exits_by_stop_reason() {
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let fake = FakeProvider::start();
    fake.push([Reply::Stream(openai_frames(
        &["Hello ", "there."],
        &[],
        usage(),
    ))]);
    let output = pen_run(&fake, root.path(), data.path(), "hi")
        .wait_with_output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&output.stdout), "Hello there.\n");

    fake.push([openai_error(
        400,
        "max_tokens is too large: 64000 > 8192",
        "invalid_request_error",
        None,
    )]);
    let output = pen_run(&fake, root.path(), data.path(), "hi")
        .wait_with_output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("max_tokens is too large"));

    // Ctrl-C is Stop: exit 130.
    fake.push([Reply::Hang(text_frames("Thinking"))]);
    let child = pen_run(&fake, root.path(), data.path(), "think long");
    futures::executor::block_on(fake.wait_for_requests(fake.requests().len() + 1));
    // SAFETY: signalling our own child process.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let output = child.wait_with_output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// SPEC §6 end to end: at a small `context_window_tokens`, a turn of 32 file reads whose
/// results together are several times the window completes. The fake provider plays a model
/// with that window (it rejects any body over it) and reports honest usage, so the estimate is
/// calibrated as with a real provider. Every request fits; the transcript keeps every result
/// whole; each new compaction is a `context_trimmed` event and a session entry.
#[test]
fn a_long_tool_turn_fits_a_small_window_by_compaction_for_each_api() {
    use super::fake_provider::BODY_TOKENS;
    const READS: usize = 32;
    const WINDOW_BYTES: usize = 64_000;
    let honest = Usage::new(BODY_TOKENS, 10);
    for api in ["openai", "anthropic"] {
        let fake = FakeProvider::start();
        let frames = |text: &[&str], calls: &[ToolCall]| match api {
            "openai" => openai_frames(text, calls, honest),
            _ => anthropic_frames(text, calls, honest),
        };
        let mut replies: Vec<Reply> = (0..READS)
            .map(|i| {
                Reply::Stream(frames(
                    &["Next file."],
                    &[call(
                        &format!("read_{i}"),
                        "pen_read",
                        json!({"path": format!("src/part_{i:02}.rs")}),
                    )],
                ))
            })
            .collect();
        replies.push(Reply::Stream(frames(&["Read them all."], &[])));
        fake.push(replies);
        fake.reject_bodies_over(WINDOW_BYTES, too_long());
        let mut d = daemon(&fake, api);
        fs::create_dir(d.root.path().join("src")).unwrap();
        for i in 0..READS {
            let text: String = (0..200)
                .map(|j| format!("fn part_{i}_{j}() -> u32 {{ {j} }}\n"))
                .collect();
            fs::write(d.root.path().join(format!("src/part_{i:02}.rs")), text).unwrap();
        }
        d.client.request(
            "pen/setConfig",
            json!({"context_window_tokens": 16_000, "max_output_tokens": 1_000, "budget_margin_tokens": 500, "budget_policy": 3}),
        );
        let session = d.new_session();
        let answer = d.prompt(&session, "Read every file under src, one at a time.");
        assert_eq!(answer["stopReason"], "end_turn", "{api}: {answer}");

        // Every request fit the window: none was rejected.
        let requests = fake.requests();
        assert_eq!(requests.len(), READS + 1, "{api}");
        for request in &requests {
            let size = serde_json::to_vec(&request.body).unwrap().len();
            assert!(size <= WINDOW_BYTES, "{api}: a {size}-byte request");
        }
        // The transcript is untouched: every result whole, and together far over the window.
        let transcript = d.transcript(&session);
        let results: Vec<&str> = transcript
            .iter()
            .filter(|e| e["kind"] == "tool_result")
            .map(|e| e["data"]["content"].as_str().unwrap())
            .collect();
        assert_eq!(results.len(), READS);
        for (i, content) in results.iter().enumerate() {
            assert!(
                content.contains(&format!("fn part_{i}_199() -> u32 {{ 199 }}")),
                "{api}: result {i} is whole"
            );
        }
        let total: usize = results.iter().map(|c| c.len()).sum();
        assert!(total > 3 * WINDOW_BYTES, "{api}: {total} bytes of results");
        assert!(
            !transcript
                .iter()
                .any(|e| e["kind"] == "context_window_rejected")
        );
        // Each new compaction is recorded, with policy 3 and the budget it met.
        let reports: Vec<&Value> = transcript
            .iter()
            .filter(|e| e["kind"] == "context_trimmed")
            .map(|e| &e["data"])
            .collect();
        assert!(reports.len() >= 2, "{api}: {} reports", reports.len());
        for report in &reports {
            assert_eq!(report["reason"], "budget");
            assert_eq!(report["policyVersion"], 3);
            assert_eq!(report["budget"], 14_500);
            let after = report["tokensAfter"].as_u64().unwrap();
            assert!(after <= 14_500 && after < report["tokensBefore"].as_u64().unwrap());
        }
        let last = reports.last().unwrap();
        let expected: Vec<String> = (0..READS - 2).map(|i| format!("read_{i}")).collect();
        assert_eq!(last["excerptedCallIds"], json!(expected), "{api}");
        let events: Vec<Value> = d
            .events()
            .into_iter()
            .filter(|e| e["kind"] == "context_trimmed")
            .collect();
        assert_eq!(events.len(), reports.len(), "{api}");
        assert_eq!(events[0]["data"]["reason"], "budget");
        assert_eq!(events[0]["data"]["policyVersion"], 3);
        // The last request: the excerpts are quoted history; the latest two reads are whole.
        let last_body = requests[READS].body.to_string();
        assert!(last_body.contains("not an executable call"), "{api}");
        assert!(last_body.contains("fn part_31_199()") && last_body.contains("fn part_30_199()"));
        assert!(!last_body.contains("fn part_29_199()"));
        for request in &requests {
            let roles: Vec<&str> = request.body["messages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["role"].as_str().unwrap())
                .collect();
            if api == "anthropic" {
                // The Messages API needs alternating roles, starting with the user.
                assert!(roles.iter().step_by(2).all(|r| *r == "user"), "{roles:?}");
                assert!(roles.iter().skip(1).step_by(2).all(|r| *r == "assistant"));
            } else {
                // Strict chat templates (llama.cpp's among them) refuse two assistant turns.
                assert!(
                    !roles.windows(2).any(|w| w == ["assistant", "assistant"]),
                    "{roles:?}"
                );
            }
        }
        // Calibration: every answer records the uncalibrated estimate of its request, and the
        // provider's report is close to it (the fake counts body bytes ÷ 4).
        for entry in transcript
            .iter()
            .filter(|e| e["kind"] == "assistant_message")
        {
            let estimated = entry["data"]["estimatedInputTokens"].as_f64().unwrap();
            let reported = entry["data"]["usage"]["inputTokens"].as_f64().unwrap();
            let ratio = reported / estimated;
            assert!((0.8..1.6).contains(&ratio), "{api}: ratio {ratio}");
        }
    }
}
