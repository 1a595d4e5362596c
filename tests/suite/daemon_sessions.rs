//! Sessions through `pen serve` and the CLI: create, list, page, export, and survive crashes
//! and a second daemon on the same data dir.

use super::fake_provider::{FakeProvider, Reply, openai_frames};
use super::lsp_client::LspClient;
use pen::providers::{ToolCall, Usage};
use pen::session::{EntryKind, NewEntry, SessionStore};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;

fn pen_cli(data: &Path, args: &[&str]) -> (i32, Vec<Value>, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_pen"))
        .args(args)
        .env("PEN_DATA_DIR", data)
        .output()
        .unwrap();
    let lines = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (
        output.status.code().unwrap_or(-1),
        lines,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn list_all(client: &mut LspClient, limit: usize) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor = Value::Null;
    loop {
        let page = client.request(
            "pen/listSessions",
            json!({"cursor": cursor, "limit": limit}),
        );
        out.extend(page["sessions"].as_array().unwrap().iter().cloned());
        match page.get("nextCursor") {
            Some(next) => cursor = next.clone(),
            None => return out,
        }
    }
}

#[test]
fn sessions_are_created_listed_and_exported() {
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let mut client = LspClient::spawn(data.path(), root.path(), &[]);
    client.initialize(root.path(), &["utf-16"]);
    let ids: Vec<String> = (0..7)
        .map(|i| {
            let created = client.request("pen/newSession", json!({"title": format!("task {i}")}));
            assert_eq!(created["entryCount"], 0);
            created["sessionId"].as_str().unwrap().to_string()
        })
        .collect();
    let untitled = client.request("pen/newSession", json!(null));
    assert_eq!(untitled["title"], Value::Null);

    // Entries written by another process (the agent loop, later) are paged back in order.
    let store = SessionStore::open(data.path()).unwrap();
    for i in 0..25 {
        let kind = if i % 2 == 0 {
            EntryKind::UserPrompt
        } else {
            EntryKind::AssistantMessage
        };
        store
            .append(
                &ids[0],
                &NewEntry {
                    kind,
                    turn_id: Some("t1".into()),
                    payload: json!({"text": format!("entry {i}")}),
                },
            )
            .unwrap();
    }
    let mut seqs = Vec::new();
    let mut after = Value::Null;
    loop {
        let page = client.request(
            "pen/getTranscript",
            json!({"sessionId": ids[0], "afterSeq": after, "limit": 10}),
        );
        for entry in page["entries"].as_array().unwrap() {
            seqs.push(entry["seq"].as_u64().unwrap());
            assert_eq!(entry["turnId"], "t1");
        }
        match page.get("nextAfterSeq") {
            Some(next) => after = next.clone(),
            None => break,
        }
    }
    assert_eq!(seqs, (1..=25).collect::<Vec<u64>>());

    // Newest activity first, every session once, at any page size.
    let listed = list_all(&mut client, 3);
    assert_eq!(listed.len(), 8);
    assert_eq!(
        listed[0]["sessionId"],
        ids[0].as_str(),
        "the session with entries is newest"
    );
    for size in [1, 2, 100] {
        assert_eq!(list_all(&mut client, size), listed);
    }

    // Bad input is InvalidParams.
    let missing = client.request_raw("pen/getTranscript", json!({"sessionId": "s_nope"}));
    assert_eq!(missing["error"]["code"], -32602, "{missing}");
    let bad_cursor = client.request_raw("pen/listSessions", json!({"cursor": "garbage"}));
    assert_eq!(bad_cursor["error"]["code"], -32602, "{bad_cursor}");
    let wrong_type = client.request_raw("pen/newSession", json!({"title": 5}));
    assert_eq!(wrong_type["error"]["code"], -32602, "{wrong_type}");

    // The CLI prints the same.
    let (code, lines, _) = pen_cli(data.path(), &["sessions"]);
    assert_eq!(code, 0);
    assert_eq!(lines, listed);
    let (code, lines, _) = pen_cli(data.path(), &["transcript", &ids[0]]);
    assert_eq!(code, 0);
    assert_eq!(lines.len(), 25);
    assert_eq!(lines[24]["payload"]["text"], "entry 24");
    let (code, _, stderr) = pen_cli(data.path(), &["transcript", "s_nope"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("s_nope"), "{stderr}");
}

#[test]
fn committed_sessions_survive_kill_9_of_the_daemon() {
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let mut client = LspClient::spawn(data.path(), root.path(), &[]);
    client.initialize(root.path(), &["utf-16"]);
    let ids: Vec<Value> = (0..20)
        .map(|_| client.request("pen/newSession", json!({}))["sessionId"].clone())
        .collect();
    client.kill();
    let mut client = LspClient::spawn(data.path(), root.path(), &[]);
    client.initialize(root.path(), &["utf-16"]);
    let listed: Vec<Value> = list_all(&mut client, 50)
        .iter()
        .map(|s| s["sessionId"].clone())
        .collect();
    for id in &ids {
        assert!(listed.contains(id), "{id} lost");
    }
}

#[test]
fn two_daemons_on_one_data_dir_work_at_once() {
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let data = data.path().to_path_buf();
            let root = root.path().to_path_buf();
            std::thread::spawn(move || {
                let mut client = LspClient::spawn(&data, &root, &[]);
                client.initialize(&root, &["utf-16"]);
                (0..100)
                    .map(|i| {
                        let response =
                            client.request_raw("pen/newSession", json!({"title": format!("{i}")}));
                        assert!(response.get("error").is_none(), "{response}");
                        response["result"]["sessionId"]
                            .as_str()
                            .unwrap()
                            .to_string()
                    })
                    .collect::<Vec<String>>()
            })
        })
        .collect();
    let mut ids: Vec<String> = workers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 200);
    let (code, lines, _) = pen_cli(data.path(), &["sessions"]);
    assert_eq!(code, 0);
    assert_eq!(lines.len(), 200);
}

/// A `pen serve` whose provider is `fake` and which allows every approval.
fn agent_daemon(data: &Path, root: &Path, fake: &FakeProvider) -> LspClient {
    let base = format!("{}/v1", fake.url());
    let mut client = LspClient::spawn(
        data,
        root,
        &[
            ("PEN_PROVIDER", "openai"),
            ("PEN_BASE_URL", &base),
            ("PEN_MODEL", "fake-model"),
        ],
    );
    client.on_request(|method, _| match method {
        "pen/requestApproval" => json!({"decision": "allow"}),
        _ => Value::Null,
    });
    client.initialize(root, &["utf-16"]);
    client
}

fn reply(text: &str, calls: &[ToolCall]) -> Reply {
    let usage = Usage::new(100, 10);
    Reply::Stream(openai_frames(&[text], calls, usage))
}

/// A command that runs until `file` exists in the workspace, then a read.
fn waiting_calls(prefix: &str, file: &str) -> Vec<ToolCall> {
    vec![
        ToolCall {
            id: format!("{prefix}-wait"),
            name: "pen_command".into(),
            arguments: json!({"command": format!("while [ ! -e {file} ]; do sleep 0.02; done")})
                .to_string(),
        },
        ToolCall {
            id: format!("{prefix}-read"),
            name: "pen_read".into(),
            arguments: json!({"path": "a.txt"}).to_string(),
        },
    ]
}

/// Sends `pen/prompt` and handles messages until the given call has started.
fn prompt_until_started(client: &mut LspClient, session: &str, call_id: &str) -> Value {
    let id = client.send_request(
        "pen/prompt",
        json!({"sessionId": session, "text": "wait for it"}),
    );
    client.wait_for(|message| {
        message["method"] == "pen/event"
            && message["params"]["kind"] == "tool_call_started"
            && message["params"]["data"]["callId"] == call_id
    });
    id
}

/// Every call id of the session's messages with its number of results.
fn result_counts(entries: &[Value]) -> Vec<(String, usize)> {
    entries
        .iter()
        .filter(|e| e["kind"] == "assistant_message")
        .flat_map(|e| {
            e["data"]["toolCalls"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .map(|call| {
            let id = call["id"].as_str().unwrap_or_default().to_string();
            let count = entries
                .iter()
                .filter(|e| e["kind"] == "tool_result" && e["data"]["callId"] == id.as_str())
                .count();
            (id, count)
        })
        .collect()
}

fn transcript(client: &mut LspClient, session: &str) -> Vec<Value> {
    client.transcript(session)
}

/// Issue 11, item 2: two real daemons on one database prompting one session. While the first
/// runs a turn, the second answers -32001 naming the first's pid and touches nothing (today
/// it answered the running call "interrupted", which then got a second result). Once the
/// first ends, or dies, the second runs its turn.
#[test]
fn a_second_daemon_never_runs_a_turn_in_a_session_the_first_is_running() {
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("a.txt"), "alpha\n").unwrap();
    let (fake_a, fake_b) = (FakeProvider::start(), FakeProvider::start());
    let mut a = agent_daemon(data.path(), root.path(), &fake_a);
    let mut b = agent_daemon(data.path(), root.path(), &fake_b);
    let session = a.request("pen/newSession", json!({}))["sessionId"]
        .as_str()
        .unwrap()
        .to_string();

    fake_a.push([
        reply("Waiting.", &waiting_calls("one", "go1")),
        reply("Done.", &[]),
    ]);
    let running = prompt_until_started(&mut a, &session, "one-wait");
    let busy = b.request_raw(
        "pen/prompt",
        json!({"sessionId": session, "text": "me too"}),
    );
    let pid_a = a.pid().unwrap();
    assert_eq!(busy["error"]["code"], -32001, "{busy}");
    assert_eq!(
        busy["error"]["message"],
        format!("session is running a turn in another pen (pid {pid_a})")
    );
    assert_eq!(busy["error"]["data"]["kind"], "session_busy");
    assert_eq!(busy["error"]["data"]["pid"], pid_a);
    assert!(
        fake_b.requests().is_empty(),
        "the second daemon asked no model"
    );
    let entries = transcript(&mut b, &session);
    assert!(
        !entries.iter().any(|e| e["kind"] == "tool_result"),
        "the running call was not answered by the second daemon: {entries:?}"
    );

    std::fs::write(root.path().join("go1"), "").unwrap();
    let answer = a.wait_for_response(&running);
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");

    // The first turn ended and released its lease: the second daemon runs one now.
    fake_b.push([reply("Mine now.", &[])]);
    let mine = b.request("pen/prompt", json!({"sessionId": session, "text": "now?"}));
    assert_eq!(mine["stopReason"], "end_turn", "{mine}");

    // The first dies (SIGKILL) in the middle of a call: its lease dies with it, and the
    // second daemon answers the cut-off calls once and runs its turn.
    fake_a.push([reply("Waiting.", &waiting_calls("two", "go2"))]);
    prompt_until_started(&mut a, &session, "two-wait");
    a.kill();
    fake_b.push([reply("Recovered.", &[])]);
    let recovered = b.request(
        "pen/prompt",
        json!({"sessionId": session, "text": "still there?"}),
    );
    // The orphaned command of the killed daemon may stop now.
    std::fs::write(root.path().join("go2"), "").unwrap();
    assert_eq!(recovered["stopReason"], "end_turn", "{recovered}");
    let entries = transcript(&mut b, &session);
    let counts = result_counts(&entries);
    assert_eq!(counts.len(), 4);
    assert!(counts.iter().all(|(_, n)| *n == 1), "{counts:?}");
    let status = |id: &str| {
        entries
            .iter()
            .find(|e| e["kind"] == "tool_result" && e["data"]["callId"] == id)
            .map(|e| e["data"]["state"].clone())
    };
    assert_eq!(status("two-wait"), Some(json!("interrupted")));
    assert_eq!(status("two-read"), Some(json!("not_executed")));
}

/// `pen run --session` respects the lease too: a clear message and exit 1, nothing written.
#[test]
fn pen_run_refuses_a_session_a_daemon_is_running() {
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("a.txt"), "alpha\n").unwrap();
    let fake = FakeProvider::start();
    let mut daemon = agent_daemon(data.path(), root.path(), &fake);
    let session = daemon.request("pen/newSession", json!({}))["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    fake.push([
        reply("Waiting.", &waiting_calls("one", "go")),
        reply("Done.", &[]),
    ]);
    let running = prompt_until_started(&mut daemon, &session, "one-wait");
    let before = transcript(&mut daemon, &session).len();
    let output = Command::new(env!("CARGO_BIN_EXE_pen"))
        .args(["run", "--session", &session, "hi", "--provider", "openai"])
        .args(["--model", "fake-model", "--base-url"])
        .arg(format!("{}/v1", fake.url()))
        .current_dir(root.path())
        .env("PEN_DATA_DIR", data.path())
        .env("PEN_CONFIG", "/nonexistent/pen/config.toml")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    std::fs::write(root.path().join("go"), "").unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "is running a turn in another pen (pid {})",
            daemon.pid().unwrap()
        )),
        "{stderr}"
    );
    let answer = daemon.wait_for_response(&running);
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    // Nothing of pen run's reached the transcript: the daemon's turn added its own entries
    // only (its results, its final answer, turn_ended), no prompt "hi".
    let entries = transcript(&mut daemon, &session);
    assert!(entries.len() > before);
    assert!(
        !entries
            .iter()
            .any(|e| e["kind"] == "user_prompt" && e["data"]["text"] == "hi")
    );
}
