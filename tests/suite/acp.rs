//! `pen acp` end to end: the real binary over stdio, driven by ACP clients nobody here wrote
//! (the official Python SDK, tests/acp/client.py; the official TypeScript SDK,
//! tests/acp/client.mjs), against the fake model provider on 127.0.0.1; and raw malformed
//! input, which gets JSON-RPC errors while pen keeps serving.
//!
//! The SDKs come from `tests/acp/setup.sh`, which prints the variables these tests read
//! (`scripts/test` runs it first). Without them the tests fail saying how to provide them,
//! unless `PEN_SKIP_REAL_PEERS=1` skips them knowingly (never under `CI`); a skip is listed in
//! `PEN_SKIPPED_LOG`.

use super::fake_provider::{FakeProvider, Reply, openai_frames};
use pen::providers::{ToolCall, Usage};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// How long one client run may take; the clients bound each of their own waits too.
const CLIENT_DEADLINE: Duration = Duration::from_secs(120);

fn usage() -> Usage {
    Usage::new(100, 10)
}

fn call(id: &str, name: &str, arguments: Value) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: arguments.to_string(),
    }
}

fn text(parts: &[&str]) -> Reply {
    Reply::Stream(openai_frames(parts, &[], usage()))
}

fn calls(calls: &[ToolCall]) -> Reply {
    Reply::Stream(openai_frames(&[], calls, usage()))
}

fn edit(id: &str, path: &str, old: &str, new: &str) -> ToolCall {
    call(
        id,
        "pen_edit",
        json!({"path": path, "edits": [{"old_text": old, "new_text": new}]}),
    )
}

/// The program a peer test runs, from `variable`; `None` when this run skips the real-peer
/// tests knowingly. A run that has neither fails: a test must never pass without its peer.
fn peer(variable: &str, test: &str) -> Option<PathBuf> {
    let needs = super::peers::Needs {
        file: "tests/suite/acp.rs",
        peer: "a real peer (an ACP client SDK, or an MCP server)",
        setup: "eval \"$(tests/acp/setup.sh)\" and eval \"$(tests/mcp/setup.sh)\"",
    };
    let mut values = super::peers::peer(&needs, &[variable], test)?;
    values.pop().map(PathBuf::from)
}

/// A data folder, a workspace and a fake provider for one test.
struct Setup {
    data: tempfile::TempDir,
    workspace: tempfile::TempDir,
    fake: FakeProvider,
    /// pen_command's OS sandbox level (`PEN_SANDBOX`), when a test sets one.
    sandbox: Option<&'static str>,
}

impl Setup {
    fn new() -> Setup {
        Setup {
            data: tempfile::tempdir().unwrap(),
            workspace: tempfile::tempdir().unwrap(),
            fake: FakeProvider::start(),
            sandbox: None,
        }
    }

    fn workspace(&self) -> PathBuf {
        self.workspace.path().canonicalize().unwrap()
    }

    /// The environment `pen` runs in: this test's database and the fake provider.
    fn env(&self, command: &mut Command) {
        command
            .env("PEN_ACP_PEN", env!("CARGO_BIN_EXE_pen"))
            .env("PEN_DATA_DIR", self.data.path())
            .env("PEN_CONFIG", "/nonexistent/pen/config.toml")
            .env("PEN_PROVIDER", "openai")
            .env("PEN_BASE_URL", format!("{}/v1", self.fake.url()))
            .env("PEN_MODEL", "fake-model")
            .env("OPENAI_API_KEY", "test-key")
            .env_remove("PEN_MAX_TOOL_RESULT_BYTES")
            .env_remove("PEN_AUTO_APPROVE");
        if let Some(level) = self.sandbox {
            command.env("PEN_SANDBOX", level);
        }
    }

    fn pen(&self) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_pen"));
        self.env(&mut command);
        command.current_dir(self.workspace());
        command
    }

    /// Runs a client program to its end; its last stdout line is what it saw, as JSON.
    fn run_client(&self, mut command: Command) -> Value {
        self.env(&mut command);
        command
            .current_dir(self.workspace())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child = command.spawn().expect("start the ACP client");
        let pid = child.id();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = done_tx.send(child.wait_with_output());
        });
        let output = match done_rx.recv_timeout(CLIENT_DEADLINE) {
            Ok(output) => output.expect("the ACP client's output"),
            Err(_) => {
                // SAFETY: kill(2) on the pid of the child this test started and still owns.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
                panic!("the ACP client did not finish within {CLIENT_DEADLINE:?}");
            }
        };
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "the ACP client failed ({}):\n{stderr}\n{stdout}",
            output.status
        );
        let last = stdout.lines().last().unwrap_or_default();
        serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"))
    }

    fn python(&self, python: &Path, scenario: &str, extra: &[&str]) -> Value {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/acp/client.py");
        let mut command = Command::new(python);
        command
            .arg(script)
            .arg(scenario)
            .arg(self.workspace())
            .args(extra);
        self.run_client(command)
    }

    /// The session's stored entries, as `pen transcript` prints them.
    fn transcript(&self, session_id: &str) -> Vec<Value> {
        let output = self
            .pen()
            .args(["transcript", session_id])
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    fn sessions(&self) -> Vec<Value> {
        let output = self.pen().args(["sessions", "--all"]).output().unwrap();
        assert!(output.status.success(), "{output:?}");
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }
}

/// The text of the tool results the model was sent in request `index`.
fn tool_results(setup: &Setup, index: usize) -> Vec<String> {
    let requests = setup.fake.requests();
    requests[index].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn turn_ends(transcript: &[Value]) -> Vec<String> {
    transcript
        .iter()
        .filter(|entry| entry["payload"]["type"] == "turn_ended")
        .map(|entry| {
            entry["payload"]["stop_reason"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

/// initialize → session/new → a prompt whose answer streams as agent_message_chunks and ends
/// end_turn; the ACP session is a pen session, listed by `pen sessions`.
#[test]
fn python_sdk_streams_a_prompt_in_a_pen_session() {
    let Some(python) = peer(
        "PEN_ACP_PYTHON",
        "python_sdk_streams_a_prompt_in_a_pen_session",
    ) else {
        return;
    };
    let setup = Setup::new();
    setup.fake.push([text(&["Hello", ", world"])]);
    let seen = setup.python(&python, "stream", &[]);
    let id = seen["session_id"].as_str().unwrap();
    // The turn's and the session's usage reach the client under `_meta.pen`.
    let pen = &seen["meta"]["pen"];
    assert!(pen["usage"]["inputTokens"].is_u64(), "{seen}");
    assert!(pen["sessionUsage"]["outputTokens"].is_u64(), "{seen}");
    let listed = setup.sessions();
    assert!(listed.iter().any(|s| s["sessionId"] == id), "{listed:?}");
    assert_eq!(turn_ends(&setup.transcript(id)), ["end_turn"]);
    let request = &setup.fake.requests()[0].body;
    let last = request["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(last["content"], "say hello", "{request}");
}

/// A tool turn: tool_call and tool_call_update with the edit's diff; permissions allowed once,
/// rejected once, rejected always (the tool's next call is denied unasked) and allowed always
/// (the tool's next call runs unasked), with the disk as each answer leaves it.
#[test]
fn python_sdk_tool_calls_diffs_and_permissions() {
    let Some(python) = peer(
        "PEN_ACP_PYTHON",
        "python_sdk_tool_calls_diffs_and_permissions",
    ) else {
        return;
    };
    let setup = Setup::new();
    let file = setup.workspace().join("a.txt");
    std::fs::write(&file, "one\ntwo\n").unwrap();
    let command = |id: &str| call(id, "pen_command", json!({"command": "echo ran > ran.txt"}));
    setup.fake.push([
        calls(&[call("c1", "pen_read", json!({"path": "a.txt"}))]),
        calls(&[edit("c2", "a.txt", "two", "TWO")]),
        text(&["Done."]),
        calls(&[edit("c3", "a.txt", "one", "ONE")]),
        text(&["Rejected."]),
        calls(&[command("c4")]),
        calls(&[command("c5")]),
        text(&["Denied twice."]),
        calls(&[edit("c6", "a.txt", "one", "uno")]),
        calls(&[edit("c7", "a.txt", "TWO", "dos")]),
        text(&["Both."]),
    ]);
    let seen = setup.python(&python, "tools", &[]);
    assert_eq!(seen["permissions"], 4);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "uno\ndos\n");
    assert!(
        !setup.workspace().join("ran.txt").exists(),
        "a rejected command ran"
    );
    // The second command was denied without asking, with the reason the model reads.
    let results = tool_results(&setup, 7);
    assert!(
        results
            .last()
            .unwrap()
            .contains("rejected pen_command for the rest of this session"),
        "{results:?}"
    );
    let transcript = setup.transcript(seen["session_id"].as_str().unwrap());
    assert!(
        transcript
            .iter()
            .any(|e| e["payload"]["type"] == "tool_allowed_for_session"
                && e["payload"]["tool"] == "pen_edit"),
        "allow always is stored as pen's grant"
    );
}

/// session/cancel while the model streams, and while a permission is pending: both prompts
/// answer `cancelled`, and the session records the turns as pen's Stop does.
#[test]
fn python_sdk_cancel_is_pens_stop() {
    let Some(python) = peer("PEN_ACP_PYTHON", "python_sdk_cancel_is_pens_stop") else {
        return;
    };
    let setup = Setup::new();
    let thinking = openai_frames(&["Thinking"], &[], usage());
    let until_text = thinking
        .iter()
        .position(|f| f.contains("Thinking"))
        .unwrap();
    setup.fake.push([
        Reply::Hang(thinking[..=until_text].to_vec()),
        calls(&[call(
            "c1",
            "pen_command",
            json!({"command": "echo ran > ran.txt"}),
        )]),
    ]);
    let seen = setup.python(&python, "cancel", &[]);
    assert!(
        !setup.workspace().join("ran.txt").exists(),
        "the command ran"
    );
    let transcript = setup.transcript(seen["session_id"].as_str().unwrap());
    assert_eq!(turn_ends(&transcript), ["cancelled", "cancelled"]);
    let result = transcript
        .iter()
        .find(|e| e["kind"] == "tool_result")
        .unwrap();
    assert_eq!(result["payload"]["call_id"], "c1");
    assert!(
        ["not_executed", "stale_authority"]
            .contains(&result["payload"]["status"].as_str().unwrap()),
        "{result}"
    );
    assert_eq!(setup.fake.requests().len(), 2, "nothing ran after Stop");
}

/// A session made by `pen run` is loaded by an ACP client in a new pen: its transcript replays
/// as session/update notifications, and the next prompt continues it with the whole history.
#[test]
fn python_sdk_loads_a_session_and_continues_it() {
    let Some(python) = peer(
        "PEN_ACP_PYTHON",
        "python_sdk_loads_a_session_and_continues_it",
    ) else {
        return;
    };
    let setup = Setup::new();
    std::fs::write(setup.workspace().join("a.txt"), "one\ntwo\n").unwrap();
    setup.fake.push([
        calls(&[call("c1", "pen_read", json!({"path": "a.txt"}))]),
        text(&["It says one, two."]),
        text(&["Still one, two."]),
    ]);
    let output = setup
        .pen()
        .args(["run", "read a.txt"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let session_id = setup.sessions()[0]["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    setup.python(&python, "load", &[&session_id]);
    let requests = setup.fake.requests();
    let messages = requests[2].body["messages"].as_array().unwrap();
    let said: Vec<&str> = messages
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert!(
        said.contains(&"read a.txt") && said.contains(&"and now?"),
        "{said:?}"
    );
    assert_eq!(
        turn_ends(&setup.transcript(&session_id)),
        ["end_turn", "end_turn"]
    );
}

/// pen_plan's updates reach the SDK client as ACP `plan` updates, each with every entry in the
/// plan's order (done is `completed`, priority `medium`), without a permission request; a
/// session loaded in a new pen replays them.
#[test]
fn python_sdk_receives_plan_updates_in_order() {
    let Some(python) = peer(
        "PEN_ACP_PYTHON",
        "python_sdk_receives_plan_updates_in_order",
    ) else {
        return;
    };
    let setup = Setup::new();
    let plan = |id: &str, steps: &[(&str, &str)]| {
        let steps: Vec<Value> = steps
            .iter()
            .map(|(text, status)| json!({"text": text, "status": status}))
            .collect();
        call(id, "pen_plan", json!({ "steps": steps }))
    };
    setup.fake.push([
        calls(&[plan("p1", &[("read", "in_progress"), ("fix", "pending")])]),
        calls(&[plan(
            "p2",
            &[
                ("read", "done"),
                ("fix", "in_progress"),
                ("test", "pending"),
            ],
        )]),
        text(&["Fixing."]),
    ]);
    let seen = setup.python(&python, "plan", &[]);
    let entry = |content: &str, status: &str| json!({"content": content, "priority": "medium", "status": status});
    let expected = json!([
        [entry("read", "in_progress"), entry("fix", "pending")],
        [
            entry("read", "completed"),
            entry("fix", "in_progress"),
            entry("test", "pending")
        ],
    ]);
    assert_eq!(seen["plans"], expected);
    assert_eq!(seen["replayed"], expected);
    assert_eq!(seen["asked"], 0);
}

/// The client holds a CRLF file with a BOM unsaved: pen reads that buffer through
/// fs/read_text_file, exactly (the model sees the buffer, not the disk), searches it as the
/// client holds it without asking the client for any other file, and writes its edit through
/// fs/write_text_file with the CRLF and the BOM kept; the disk is not touched.
#[test]
fn python_sdk_client_buffers_are_read_and_written_exactly() {
    let Some(python) = peer(
        "PEN_ACP_PYTHON",
        "python_sdk_client_buffers_are_read_and_written_exactly",
    ) else {
        return;
    };
    let setup = Setup::new();
    let file = setup.workspace().join("crlf.txt");
    std::fs::write(&file, "on disk\n").unwrap();
    std::fs::write(setup.workspace().join("other.txt"), "line two, on disk\n").unwrap();
    setup.fake.push([
        calls(&[call("c1", "pen_read", json!({"path": "crlf.txt"}))]),
        calls(&[call("c2", "pen_search", json!({"query": "line two"}))]),
        calls(&[edit("c3", "crlf.txt", "line two", "line 2")]),
        text(&["Fixed."]),
    ]);
    let seen = setup.python(&python, "client_fs", &[]);
    let written = seen["writes"][0]["content"].as_str().unwrap();
    assert_eq!(
        written.as_bytes(),
        "\u{feff}line one\r\nline 2\r\n".as_bytes()
    );
    assert_eq!(std::fs::read(&file).unwrap(), b"on disk\n");
    let read = &tool_results(&setup, 1)[0];
    assert!(
        read.contains("line one") && !read.contains("on disk"),
        "{read}"
    );
    assert!(read.contains("\"source\":\"editor\""), "{read}");
    // The search found the buffer's line (not on disk) and the other file's, from the disk.
    let search = tool_results(&setup, 2).pop().unwrap();
    assert!(
        search.contains("crlf.txt") && search.contains("other.txt"),
        "{search}"
    );
}

/// The owner changes the client's buffer while the permission dialog is open: the approved
/// edit is stale against the new text, so nothing is written through the client or to disk.
#[test]
fn python_sdk_an_edit_of_a_buffer_changed_during_approval_is_stale() {
    let Some(python) = peer(
        "PEN_ACP_PYTHON",
        "python_sdk_an_edit_of_a_buffer_changed_during_approval_is_stale",
    ) else {
        return;
    };
    let setup = Setup::new();
    let file = setup.workspace().join("crlf.txt");
    std::fs::write(&file, "on disk\n").unwrap();
    setup.fake.push([
        calls(&[call("c1", "pen_read", json!({"path": "crlf.txt"}))]),
        calls(&[edit("c2", "crlf.txt", "line two", "line 2")]),
        text(&["It changed."]),
    ]);
    setup.python(&python, "client_fs_stale", &[]);
    assert_eq!(std::fs::read(&file).unwrap(), b"on disk\n");
    let results = tool_results(&setup, 2);
    let edit = results.last().unwrap();
    assert!(edit.contains("approval no longer applies"), "{edit}");
}

/// Issue 26, item 14: a client whose buffer still holds the old text when pen reads it right
/// after writing through it (it saves and refreshes later) is shown, in the edit's
/// `tool_call_update`, the edit pen planned and wrote — not `oldText` twice. A created file's
/// diff is its content.
#[test]
fn python_sdk_the_diff_of_an_edit_is_what_pen_wrote() {
    let Some(python) = peer(
        "PEN_ACP_PYTHON",
        "python_sdk_the_diff_of_an_edit_is_what_pen_wrote",
    ) else {
        return;
    };
    let setup = Setup::new();
    std::fs::write(setup.workspace().join("a.txt"), "one\ntwo\n").unwrap();
    setup.fake.push([
        calls(&[call("c1", "pen_read", json!({"path": "a.txt"}))]),
        calls(&[edit("c2", "a.txt", "two", "TWO")]),
        calls(&[call(
            "c3",
            "pen_create",
            json!({"path": "made.txt", "content": "made\n"}),
        )]),
        text(&["Done."]),
    ]);
    let seen = setup.python(&python, "client_fs_lagging", &[]);
    assert_eq!(seen["writes"][0]["content"], "one\nTWO\n", "{seen}");
}

/// session/set_mode with each of pen's four modes: `plan` refuses an edit without a permission
/// request, `edit` runs one without, `auto` asks for a command that runs unconfined (the sandbox
/// is off here; a sandboxed one runs without asking, `suite::modes`), `ask` asks for an edit; an
/// unknown id is refused.
#[test]
fn python_sdk_switches_between_the_four_modes() {
    let Some(python) = peer(
        "PEN_ACP_PYTHON",
        "python_sdk_switches_between_the_four_modes",
    ) else {
        return;
    };
    let mut setup = Setup::new();
    setup.sandbox = Some("off");
    let file = setup.workspace().join("a.txt");
    std::fs::write(&file, "one\ntwo\n").unwrap();
    let command = call("c4", "pen_command", json!({"command": "echo hi > ran.txt"}));
    setup.fake.push([
        // plan
        calls(&[call("c1", "pen_read", json!({"path": "a.txt"}))]),
        calls(&[edit("c2", "a.txt", "two", "TWO")]),
        text(&["Plan: make it TWO."]),
        // edit
        calls(&[edit("c3", "a.txt", "two", "TWO")]),
        text(&["Done."]),
        // auto
        calls(&[command]),
        text(&["Not run."]),
        // ask
        calls(&[call("c5", "pen_read", json!({"path": "a.txt"}))]),
        calls(&[edit("c6", "a.txt", "TWO", "2")]),
        text(&["Done."]),
    ]);
    let seen = setup.python(&python, "modes", &[]);
    let seen = &seen["seen"];
    assert_eq!(seen["plan"]["permissions"], json!([]), "{seen}");
    assert_eq!(seen["plan"]["statuses"], json!(["completed", "failed"]));
    assert_eq!(seen["edit"]["permissions"], json!([]), "{seen}");
    assert_eq!(seen["auto"]["permissions"], json!(["c4"]), "{seen}");
    assert_eq!(seen["ask"]["permissions"], json!(["c4", "c6"]), "{seen}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "one\n2\n");
    assert!(!setup.workspace().join("ran.txt").exists());
    // The model read the plan-mode refusal, and the rejection's note on the next prompt.
    let bodies: Vec<String> = setup
        .fake
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect();
    assert!(bodies[2].contains("refused in plan mode"), "{}", bodies[2]);
    assert!(bodies[0].contains("Plan mode (for this message)"));
    assert!(bodies[3].contains("Plan mode is over (mode: edit)"));
    assert!(
        bodies[6].contains("the owner may say why in the next prompt"),
        "{}",
        bodies[6]
    );
}

/// A second, independent client: the official TypeScript SDK drives one prompt end to end.
#[test]
fn typescript_sdk_drives_a_prompt() {
    let Some(modules) = peer("PEN_ACP_TS_MODULES", "typescript_sdk_drives_a_prompt") else {
        return;
    };
    let setup = Setup::new();
    setup.fake.push([text(&["Hello ", "from pen"])]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/acp/client.mjs");
    let mut command = Command::new("node");
    command
        .arg(script)
        .arg(setup.workspace())
        .env("NODE_PATH", &modules)
        .env("PEN_ACP_TS_MODULES", &modules);
    let seen = setup.run_client(command);
    assert_eq!(seen["stopReason"], "end_turn");
    assert_eq!(seen["text"], "Hello from pen");
}

/// Malformed input: bad JSON, a frame split by an embedded newline, an unknown method, wrong
/// params, a non-object, a request before initialize; each gets its JSON-RPC error, and pen
/// keeps serving (the last request is answered).
#[test]
fn malformed_input_gets_errors_and_pen_keeps_serving() {
    let setup = Setup::new();
    let mut child = setup
        .pen()
        .arg("acp")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let workspace = setup.workspace();
    let mut reader = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut answers: Vec<Value> = Vec::new();
    // Answered before anything else is sent: a session before initialize is refused.
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","id":1,"method":"session/new","params":{{"cwd":"/","mcpServers":[]}}}}"#
    )
    .unwrap();
    stdin.flush().unwrap();
    answers.push(serde_json::from_str(&reader.next().unwrap().unwrap()).unwrap());
    let lines = [
        "this is not json".to_string(),
        "{\"jsonrpc\":\"2.0\",\"id\":2,\n\"method\":\"initialize\"}".to_string(),
        r#"[{"jsonrpc":"2.0","id":3,"method":"initialize"}]"#.to_string(),
        r#"{"jsonrpc":"2.0","id":4,"method":"pen/unknown","params":{}}"#.to_string(),
        r#"{"jsonrpc":"2.0","id":5,"method":"initialize","params":{"protocolVersion":"one"}}"#
            .to_string(),
        r#"{"jsonrpc":"2.0","id":6,"method":"initialize","params":{"protocolVersion":1}}"#
            .to_string(),
        json!({"jsonrpc": "2.0", "id": 7, "method": "session/new",
            "params": {"cwd": workspace, "mcpServers": [{"type": "sse", "name": "files", "url": "http://127.0.0.1:1/sse", "headers": []}]}})
        .to_string(),
        r#"{"jsonrpc":"2.0","id":8,"method":"session/prompt","params":{"sessionId":"nope","prompt":[]}}"#
            .to_string(),
        r#"{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":7}}"#.to_string(),
        json!({"jsonrpc": "2.0", "id": 9, "method": "session/new",
            "params": {"cwd": workspace, "mcpServers": []}})
        .to_string(),
    ];
    for line in &lines {
        writeln!(stdin, "{line}").unwrap();
    }
    stdin.flush().unwrap();
    for line in reader {
        let answer: Value = serde_json::from_str(&line.unwrap()).expect("every line is JSON");
        let last = answer["id"] == 9;
        answers.push(answer);
        if last {
            break;
        }
    }
    drop(stdin);
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    let code = |id: Value| -> Vec<i64> {
        answers
            .iter()
            .filter(|a| a["id"] == id)
            .map(|a| a["error"]["code"].as_i64().unwrap_or(0))
            .collect()
    };
    assert_eq!(code(json!(1)), [-32602], "before initialize: {answers:?}");
    // The bad line, the two halves of the split frame, the batch: four errors without an id.
    assert_eq!(
        code(Value::Null),
        [-32700, -32700, -32700, -32600],
        "{answers:?}"
    );
    assert_eq!(code(json!(4)), [-32601]);
    assert_eq!(code(json!(5)), [-32602]);
    assert_eq!(code(json!(6)), [0], "initialize answered");
    let mcp = answers.iter().find(|a| a["id"] == 7).unwrap();
    assert_eq!(mcp["error"]["code"], -32602);
    let message = mcp["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("files") && message.contains("Streamable HTTP"),
        "{message}"
    );
    assert_eq!(code(json!(8)), [-32002]);
    let created = answers.iter().find(|a| a["id"] == 9).unwrap();
    assert!(created["result"]["sessionId"].is_string(), "{created}");
    assert!(setup.fake.requests().is_empty());
}

/// Without a provider, `authenticate` and `session/new` answer ACP's "authentication required"
/// with the message that names the variable to set, and no session is written.
#[test]
fn without_a_provider_pen_says_which_variable_to_set() {
    let setup = Setup::new();
    let mut command = setup.pen();
    for variable in [
        "PEN_PROVIDER",
        "PEN_BASE_URL",
        "PEN_MODEL",
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "PEN_API_KEY_ENV",
    ] {
        command.env_remove(variable);
    }
    let mut child = command
        .arg("acp")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let workspace = setup.workspace();
    for line in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "authenticate", "params": {"methodId": "env"}}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "session/new", "params": {"cwd": workspace, "mcpServers": []}}),
    ] {
        writeln!(stdin, "{line}").unwrap();
    }
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{output:?}");
    let answers: Vec<Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    for id in [2, 3] {
        let answer = answers.iter().find(|a| a["id"] == id).unwrap();
        assert_eq!(answer["error"]["code"], -32000, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains("OPENAI_API_KEY"), "{message}");
    }
    assert!(setup.sessions().is_empty(), "no session was written");
}

/// `pen acp` spoken to line by line, its output read on a thread so every wait is bounded.
struct RawAcp {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    lines: std::sync::mpsc::Receiver<Value>,
}

impl RawAcp {
    fn start(setup: &Setup) -> RawAcp {
        let mut child = setup
            .pen()
            .arg("acp")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (lines_tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                let value = serde_json::from_str(&line).expect("every line pen writes is JSON");
                if lines_tx.send(value).is_err() {
                    return;
                }
            }
        });
        RawAcp {
            stdin: child.stdin.take(),
            child,
            lines,
        }
    }

    fn send(&mut self, message: Value) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    }

    /// The next line from pen that `wanted` accepts; earlier ones are dropped.
    fn until(&self, wanted: impl Fn(&Value) -> bool) -> Value {
        loop {
            match self.lines.recv_timeout(CLIENT_DEADLINE) {
                Ok(line) if wanted(&line) => return line,
                Ok(_) => {}
                Err(e) => panic!("pen acp said nothing more ({e})"),
            }
        }
    }

    /// Closes pen's stdin, as a client that goes away does, and waits (bounded) for pen to exit.
    fn close(&mut self) -> std::process::ExitStatus {
        drop(self.stdin.take());
        let deadline = std::time::Instant::now() + CLIENT_DEADLINE;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "pen acp did not exit within {CLIENT_DEADLINE:?} of its client going away"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn answer(&self, id: u64) -> Value {
        self.until(|line| line["id"] == id && line.get("method").is_none())
    }
}

impl Drop for RawAcp {
    fn drop(&mut self) {
        // Gone already when the test passed; a failed test leaves no process behind.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A second prompt while the session's turn runs is refused as busy; then the client goes away
/// mid-turn (stdin closes): pen stops the turn with Stop semantics, records it, and exits.
#[test]
fn a_busy_session_is_refused_and_a_client_gone_mid_turn_stops_the_turn() {
    let setup = Setup::new();
    let thinking = openai_frames(&["Thinking"], &[], usage());
    let until_text = thinking
        .iter()
        .position(|f| f.contains("Thinking"))
        .unwrap();
    setup
        .fake
        .push([Reply::Hang(thinking[..=until_text].to_vec())]);
    let mut pen = RawAcp::start(&setup);
    pen.send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}));
    pen.send(json!({"jsonrpc": "2.0", "id": 2, "method": "session/new",
        "params": {"cwd": setup.workspace(), "mcpServers": []}}));
    let session_id = pen.answer(2)["result"]["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    let prompt = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "session/prompt",
            "params": {"sessionId": session_id, "prompt": [{"type": "text", "text": "think"}]}})
    };
    pen.send(prompt(3));
    let chunk = pen.until(|line| line["method"] == "session/update");
    assert_eq!(chunk["params"]["update"]["content"]["text"], "Thinking");
    pen.send(prompt(4));
    let busy = pen.answer(4);
    assert_eq!(busy["error"]["code"], -32001, "{busy}");
    assert_eq!(busy["error"]["data"]["kind"], "session_busy", "{busy}");
    let status = pen.close();
    assert!(status.success(), "{status}");
    assert_eq!(turn_ends(&setup.transcript(&session_id)), ["cancelled"]);
}

/// A session/cancel sent right behind its prompt (the user stops at once) stops that prompt,
/// even before its turn has begun: it answers `cancelled` and the model is never asked.
#[test]
fn a_cancel_right_behind_its_prompt_stops_it() {
    let setup = Setup::new();
    setup.fake.push([text(&["Too late to stop me."])]);
    let mut pen = RawAcp::start(&setup);
    pen.send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}));
    pen.send(json!({"jsonrpc": "2.0", "id": 2, "method": "session/new",
        "params": {"cwd": setup.workspace(), "mcpServers": []}}));
    let session_id = pen.answer(2)["result"]["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    let prompt = json!({"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
        "params": {"sessionId": session_id, "prompt": [{"type": "text", "text": "go"}]}});
    let cancel = json!({"jsonrpc": "2.0", "method": "session/cancel",
        "params": {"sessionId": session_id}});
    // One write: pen reads both lines before the prompt's turn can begin.
    let stdin = pen.stdin.as_mut().unwrap();
    stdin
        .write_all(format!("{prompt}\n{cancel}\n").as_bytes())
        .unwrap();
    stdin.flush().unwrap();
    let answer = pen.answer(3);
    assert_eq!(answer["result"]["stopReason"], "cancelled", "{answer}");
    assert!(setup.fake.requests().is_empty(), "the model was asked");
    assert!(pen.close().success());
    assert_eq!(turn_ends(&setup.transcript(&session_id)), ["cancelled"]);
}

/// The client's MCP servers (session/new `mcpServers`) start through pen's MCP client: the
/// official Python SDK gives server-everything (npm) over stdio, under a name pen must make a
/// server name of; the model's call of its echo tool asks for permission like every MCP tool,
/// and the result reaches the client and the next request.
#[test]
fn python_sdk_mcp_servers_of_the_client_become_pen_tools() {
    let test = "python_sdk_mcp_servers_of_the_client_become_pen_tools";
    let Some(python) = peer("PEN_ACP_PYTHON", test) else {
        return;
    };
    let Some(entry) = peer("PEN_MCP_EVERYTHING", test) else {
        return;
    };
    let setup = Setup::new();
    setup.fake.push([
        calls(&[call(
            "m1",
            "mcp__every_thing__echo",
            json!({"message": "hello over acp"}),
        )]),
        text(&["Echoed."]),
    ]);
    let entry = entry.to_string_lossy().to_string();
    let seen = setup.python(&python, "mcp", &[&entry]);
    assert!(seen["session_id"].is_string(), "{seen}");
    let requests = setup.fake.requests();
    assert_eq!(requests.len(), 2, "{requests:?}");
    let tools: Vec<&str> = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert!(tools.contains(&"mcp__every_thing__echo"), "{tools:?}");
    assert!(
        requests[1].body.to_string().contains("hello over acp"),
        "the result reaches the next request"
    );
}

/// Issue 19: `_pen/revertTurn` and `_pen/forkSession`, ACP's extension methods. A revert while
/// the session's turn runs is refused; after it, the turn's edit is reverted on disk, and a fork
/// before the turn is a new session.
#[test]
fn the_checkpoint_extension_methods_revert_and_fork_and_wait_for_a_running_turn() {
    let setup = Setup::new();
    std::fs::write(setup.workspace().join("a.txt"), "alpha\n").unwrap();
    let thinking = openai_frames(&["Thinking"], &[], usage());
    let until_text = thinking
        .iter()
        .position(|f| f.contains("Thinking"))
        .unwrap();
    setup.fake.push([
        calls(&[call("r1", "pen_read", json!({"path": "a.txt"}))]),
        calls(&[edit("e1", "a.txt", "alpha", "beta")]),
        text(&["Edited."]),
        Reply::Hang(thinking[..=until_text].to_vec()),
    ]);
    let mut pen = RawAcp::start(&setup);
    pen.send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}));
    pen.send(json!({"jsonrpc": "2.0", "id": 2, "method": "session/new",
        "params": {"cwd": setup.workspace(), "mcpServers": []}}));
    let session_id = pen.answer(2)["result"]["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    // The older id of `edit`, still taken.
    pen.send(
        json!({"jsonrpc": "2.0", "id": 3, "method": "session/set_mode",
        "params": {"sessionId": session_id, "modeId": "allow_edits"}}),
    );
    pen.answer(3);
    let prompt = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "session/prompt",
            "params": {"sessionId": session_id, "prompt": [{"type": "text", "text": "go"}]}})
    };
    pen.send(prompt(4));
    assert_eq!(pen.answer(4)["result"]["stopReason"], "end_turn");
    let workspace = setup.workspace();
    assert_eq!(
        std::fs::read_to_string(workspace.join("a.txt")).unwrap(),
        "beta\n"
    );
    let turn = setup.transcript(&session_id)[0]["turnId"]
        .as_str()
        .unwrap()
        .to_string();
    let revert = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "_pen/revertTurn",
            "params": {"sessionId": session_id, "turnId": turn}})
    };

    // A turn runs: the revert is refused and changes nothing.
    pen.send(prompt(5));
    pen.until(|line| {
        line["method"] == "session/update"
            && line["params"]["update"]["content"]["text"] == "Thinking"
    });
    pen.send(revert(6));
    let busy = pen.answer(6);
    assert_eq!(busy["error"]["code"], -32600, "{busy}");
    assert_eq!(
        std::fs::read_to_string(workspace.join("a.txt")).unwrap(),
        "beta\n"
    );
    pen.send(
        json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session_id}}),
    );
    assert_eq!(pen.answer(5)["result"]["stopReason"], "cancelled");

    pen.send(revert(7));
    let reverted = pen.answer(7);
    assert_eq!(
        reverted["result"]["files"][0]["path"], "a.txt",
        "{reverted}"
    );
    assert_eq!(
        reverted["result"]["files"][0]["status"], "reverted",
        "{reverted}"
    );
    assert_eq!(
        std::fs::read_to_string(workspace.join("a.txt")).unwrap(),
        "alpha\n"
    );
    pen.send(
        json!({"jsonrpc": "2.0", "id": 8, "method": "_pen/forkSession",
        "params": {"sessionId": session_id, "beforeTurnId": turn}}),
    );
    let forked = pen.answer(8);
    let fork = forked["result"]["sessionId"].as_str().unwrap();
    assert_ne!(fork, session_id);
    assert!(setup.transcript(fork).is_empty());
    assert!(pen.close().success());
}

/// Issue 26, item 12: a permission answer that repeats a key is refused, whatever the last one
/// says. serde_json keeps the last of a repeated key, so `reject_once` then `allow_once` ran
/// the command; now the answer is no answer, the command does not run, and the model is told.
#[test]
fn a_permission_answer_with_a_repeated_key_is_refused() {
    let setup = Setup::new();
    setup.fake.push([
        calls(&[call(
            "c1",
            "pen_command",
            json!({"command": "touch ran.txt"}),
        )]),
        text(&["Done."]),
    ]);
    let mut pen = RawAcp::start(&setup);
    pen.send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}));
    pen.send(json!({"jsonrpc": "2.0", "id": 2, "method": "session/new",
        "params": {"cwd": setup.workspace(), "mcpServers": []}}));
    let session_id = pen.answer(2)["result"]["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    pen.send(
        json!({"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
        "params": {"sessionId": session_id, "prompt": [{"type": "text", "text": "go"}]}}),
    );
    let asked = pen.until(|line| line["method"] == "session/request_permission");
    let id = asked["id"].to_string();
    let stdin = pen.stdin.as_mut().unwrap();
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","id":{id},"result":{{"outcome":{{"outcome":"selected","optionId":"reject_once","optionId":"allow_once"}}}}}}"#
    )
    .unwrap();
    stdin.flush().unwrap();
    let answer = pen.answer(3);
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert!(
        !setup.workspace().join("ran.txt").exists(),
        "the command ran on an answer that repeated its key"
    );
    let result = &tool_results(&setup, 1)[0];
    assert!(result.contains("approval no longer applies"), "{result}");
    assert!(pen.close().success());
}

/// Issue 26, item 2 on ACP: an embedded resource (text the client sends, as Zed sends a
/// selection) holding the body lines of a key in the workspace, or key-body lines pen cannot
/// place in any file, is withheld with a note; ordinary embedded text is sent.
#[test]
fn an_embedded_resource_with_a_key_body_is_withheld() {
    let setup = Setup::new();
    let body =
        "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n".repeat(20);
    let key =
        format!("-----BEGIN OPENSSH PRIVATE KEY-----\n{body}-----END OPENSSH PRIVATE KEY-----\n");
    let path = setup.workspace().join("id_ed25519");
    std::fs::write(&path, &key).unwrap();
    setup.fake.push([text(&["Seen."])]);
    let mut pen = RawAcp::start(&setup);
    pen.send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}));
    pen.send(json!({"jsonrpc": "2.0", "id": 2, "method": "session/new",
        "params": {"cwd": setup.workspace(), "mcpServers": []}}));
    let session_id = pen.answer(2)["result"]["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    let resource = |uri: String, text: &str| json!({"type": "resource", "resource": {"uri": uri, "text": text}});
    pen.send(
        json!({"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
        "params": {"sessionId": session_id, "prompt": [
            {"type": "text", "text": "what are these?"},
            resource(format!("file://{}#L2:21", path.display()), &body),
            resource("file:///elsewhere/notes.txt".into(), &body),
            resource("file:///elsewhere/main.rs".into(), "fn main() {}\n"),
        ]}}),
    );
    let answer = pen.answer(3);
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let sent = setup.fake.requests()[0].body["messages"].to_string();
    assert!(!sent.contains("b3BlbnNzaC1rZXkt"), "{sent}");
    assert_eq!(sent.matches("private key material").count(), 2, "{sent}");
    assert!(sent.contains("fn main() {}"), "{sent}");
    assert!(pen.close().success());
}
