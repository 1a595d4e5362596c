//! The MCP client against real MCP servers nobody here wrote: the reference
//! `@modelcontextprotocol/server-everything` (npm) over stdio, and a server built with the
//! official Python SDK (`mcp` on PyPI, `tests/mcp/fastmcp_server.py`) over Streamable HTTP on
//! 127.0.0.1. `pen serve` runs over real stdio with the fake provider as its model.
//!
//! `tests/mcp/setup.sh` installs both (pinned, cached under ~/.cache/pen) and prints the
//! variables these tests read; `scripts/test` runs it first:
//!
//! ```sh
//! eval "$(tests/mcp/setup.sh)" && cargo test --test all suite::mcp
//! ```
//!
//! Without `PEN_MCP_EVERYTHING` / `PEN_MCP_PYTHON` a test fails saying how to get them, unless
//! `PEN_SKIP_REAL_PEERS=1` skips it knowingly (never under `CI`), listed in `PEN_SKIPPED_LOG`.

use super::fake_provider::{FakeProvider, Reply, openai_frames};
use super::lsp_client::LspClient;
use pen::providers::{ToolCall, Usage};
use serde_json::{Value, json};
use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The longest any condition below is waited for (a server starting on a loaded machine).
pub(super) const DEADLINE: Duration = Duration::from_secs(60);

/// The path a setup variable names, or `None` when the test is knowingly skipped.
pub(super) fn peer(var: &str, test: &str) -> Option<String> {
    let needs = super::peers::Needs {
        file: "tests/suite/mcp.rs",
        peer: "a real MCP server",
        setup: "eval \"$(tests/mcp/setup.sh)\"",
    };
    let mut values = super::peers::peer(&needs, &[var], test)?;
    values
        .pop()
        .map(|value| value.to_string_lossy().into_owned())
}

pub(super) fn call(id: &str, name: &str, args: Value) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: args.to_string(),
    }
}

pub(super) fn calls(list: &[ToolCall]) -> Reply {
    Reply::Stream(openai_frames(&[], list, usage()))
}

pub(super) fn text(words: &str) -> Reply {
    Reply::Stream(openai_frames(&[words], &[], usage()))
}

fn usage() -> Usage {
    Usage::new(100, 10)
}

pub(super) struct Daemon {
    _data: tempfile::TempDir,
    _root: tempfile::TempDir,
    pub(super) client: LspClient,
}

/// `pen serve` with the fake provider, `env` added to its environment, and these MCP servers
/// and `auto_approve` set through pen/setConfig (the editors' path).
pub(super) fn daemon(
    fake: &FakeProvider,
    env: &[(&str, &str)],
    servers: Value,
    auto: &[&str],
) -> Daemon {
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    daemon_in(fake, env, data, root, servers, auto)
}

pub(super) fn daemon_in(
    fake: &FakeProvider,
    env: &[(&str, &str)],
    data: tempfile::TempDir,
    root: tempfile::TempDir,
    servers: Value,
    auto: &[&str],
) -> Daemon {
    let base = format!("{}/v1", fake.url());
    let mut vars = vec![
        ("PEN_PROVIDER", "openai"),
        ("PEN_BASE_URL", base.as_str()),
        ("PEN_MODEL", "fake-model"),
    ];
    vars.extend_from_slice(env);
    let mut client = LspClient::spawn(data.path(), root.path(), &vars);
    client.on_request(|method, _| match method {
        "window/workDoneProgress/create" => Value::Null,
        _ => json!({"decision": "deny"}),
    });
    client.initialize(root.path(), &["utf-16"]);
    let set = client.request(
        "pen/setConfig",
        json!({"mcp_servers": servers, "auto_approve": auto}),
    );
    assert!(set.get("mcp_servers").is_some(), "{set}");
    Daemon {
        _data: data,
        _root: root,
        client,
    }
}

impl Daemon {
    /// The approvals pen asked the client for, in order (`pen/requestApproval`).
    pub(super) fn approvals_asked(&self) -> Vec<&Value> {
        self.client
            .server_requests
            .iter()
            .filter(|r| r["method"] == "pen/requestApproval")
            .collect()
    }

    /// The daemon's data folder (its logs are under `logs/`).
    pub(super) fn data_dir(&self) -> &Path {
        self._data.path()
    }

    pub(super) fn events(&self) -> Vec<Value> {
        self.client
            .notifications
            .iter()
            .filter(|n| n["method"] == "pen/event")
            .map(|n| n["params"].clone())
            .collect()
    }

    pub(super) fn status(&mut self, server: &str) -> Value {
        let answer = self.client.request("pen/mcpStatus", json!({}));
        answer["servers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == server)
            .cloned()
            .unwrap_or(Value::Null)
    }
}

/// The tool names a provider request offered.
pub(super) fn offered(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| t["function"]["name"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// The content of the tool message answering `call_id` in a provider request.
pub(super) fn tool_message(request: &Value, call_id: &str) -> String {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == call_id)
        .and_then(|m| m["content"].as_str())
        .unwrap_or_else(|| panic!("no tool message for {call_id} in {request}"))
        .to_string()
}

pub(super) fn results(transcript: &[Value]) -> Vec<Value> {
    transcript
        .iter()
        .filter(|e| e["kind"] == "tool_result")
        .map(|e| e["data"].clone())
        .collect()
}

fn everything(entry: &str, env: Value) -> Value {
    json!({"command": "node", "args": [entry, "stdio"], "env": env, "tool_timeout_secs": 120})
}

/// Waits until `ready` holds, checking every 20 ms, for at most [`DEADLINE`].
pub(super) fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_stdio_server_s_tools_reach_the_model_and_an_over_cap_result_is_cut_with_the_note() {
    let Some(entry) = peer(
        "PEN_MCP_EVERYTHING",
        "a_stdio_server_s_tools_reach_the_model",
    ) else {
        return;
    };
    let fake = FakeProvider::start();
    let big = "z".repeat(200_000);
    fake.push([
        calls(&[
            call(
                "c1",
                "mcp__everything__echo",
                json!({"message": "hello from pen"}),
            ),
            call("c1x", "everything_echo", json!({"message": "x"})),
        ]),
        calls(&[call("c2", "mcp__everything__echo", json!({"message": big}))]),
        text("done"),
    ]);
    // The 200 KB call needs a large window (the unknown fake model's default is 32,768).
    let mut d = daemon(
        &fake,
        &[("PEN_CONTEXT_WINDOW_TOKENS", "128000")],
        json!({"everything": everything(&entry, json!({}))}),
        &["mcp__everything__echo"],
    );
    assert_eq!(
        d.status("everything")["status"],
        "idle",
        "not started before a turn"
    );
    let session = d.client.new_session();
    let answer = d.client.prompt(&session, "echo something");
    assert_eq!(answer["stopReason"], "end_turn", "{answer}");
    let requests = fake.requests();
    assert_eq!(requests.len(), 3);
    let names = offered(&requests[0].body);
    let mcp: Vec<&String> = names.iter().filter(|n| n.starts_with("mcp__")).collect();
    let mut sorted = mcp.clone();
    sorted.sort();
    assert_eq!(mcp, sorted, "MCP tools are offered sorted");
    assert!(
        names.contains(&"mcp__everything__echo".to_string()),
        "{names:?}"
    );
    assert!(names.contains(&"mcp__everything__get-sum".to_string()));
    assert_eq!(names[0], "pen_search", "native tools first: {names:?}");
    // The result reaches the next request.
    assert_eq!(
        tool_message(&requests[1].body, "c1"),
        "Echo: hello from pen"
    );
    // An MCP tool called without its `mcp__server__` prefix is answered with the turn's tools,
    // its servers' included, so the model finds the right name.
    let misspelt = tool_message(&requests[1].body, "c1x");
    assert!(
        misspelt.contains("no tool named `everything_echo`")
            && misspelt.contains("pen_search, ")
            && misspelt.contains("mcp__everything__echo"),
        "{misspelt}"
    );
    // Over the cap (64 KiB by default): cut, with the note that this tool cannot page.
    let cut = tool_message(&requests[2].body, "c2");
    assert!(cut.len() <= 65_536, "{}", cut.len());
    assert!(cut.starts_with("Echo: zzz"));
    assert!(
        cut.ends_with("This tool cannot page: call it again asking for less]"),
        "{}",
        &cut[cut.len() - 200..]
    );
    let status = d.status("everything");
    assert_eq!(status["status"], "running", "{status}");
    assert!(status["toolCount"].as_u64().unwrap() >= 10, "{status}");
    assert!(status["schemaTokens"].as_u64().unwrap() > 0, "{status}");
}

#[test]
fn an_mcp_tool_asks_for_approval_with_its_arguments_unless_auto_approved() {
    let Some(entry) = peer("PEN_MCP_EVERYTHING", "an_mcp_tool_asks_for_approval") else {
        return;
    };
    let fake = FakeProvider::start();
    fake.push([
        calls(&[call(
            "c1",
            "mcp__everything__get-sum",
            json!({"a": 2, "b": 3}),
        )]),
        text("denied, fine"),
    ]);
    let mut d = daemon(
        &fake,
        &[],
        json!({"everything": everything(&entry, json!({}))}),
        &[],
    );
    let session = d.client.new_session();
    assert_eq!(d.client.prompt(&session, "add")["stopReason"], "end_turn");
    let asked = d.approvals_asked();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0]["params"]["tool"], "mcp__everything__get-sum");
    assert_eq!(asked[0]["params"]["toolKind"], "other");
    assert_eq!(asked[0]["params"]["kind"], "tool_call");
    assert_eq!(asked[0]["params"]["arguments"], json!({"a": 2, "b": 3}));
    let results = results(&d.client.transcript(&session));
    assert!(
        results[0]["content"]
            .as_str()
            .unwrap()
            .starts_with("denied by the owner")
    );
}

/// The pids of processes whose environment holds `marker` (the server pen started with it).
fn pids_with(marker: &str) -> Vec<i32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Ok(environ) = std::fs::read(entry.path().join("environ"))
            && environ
                .split(|b| *b == 0)
                .any(|var| var == marker.as_bytes())
        {
            pids.push(pid);
        }
    }
    pids
}

#[test]
fn a_long_running_call_stopped_is_recorded_unknown_and_cancelled_at_the_server() {
    let Some(entry) = peer("PEN_MCP_EVERYTHING", "a_long_running_call_stopped") else {
        return;
    };
    let fake = FakeProvider::start();
    fake.push([calls(&[call(
        "c1",
        "mcp__everything__trigger-long-running-operation",
        json!({"duration": 600, "steps": 600}),
    )])]);
    // The server's stdin is copied to a file, so the test sees pen's notifications/cancelled.
    let wire = tempfile::NamedTempFile::new().unwrap();
    let shim = json!({
        "command": "sh",
        "args": ["-c", "tee -a \"$PEN_TEST_WIRE\" | node \"$PEN_TEST_ENTRY\" stdio"],
        "env": {"PEN_TEST_WIRE": wire.path(), "PEN_TEST_ENTRY": entry},
    });
    let mut d = daemon(
        &fake,
        &[],
        json!({"everything": shim}),
        &["mcp__everything__trigger-long-running-operation"],
    );
    let session = d.client.new_session();
    let id = d
        .client
        .send_request("pen/prompt", json!({"sessionId": session, "text": "wait"}));
    d.client
        .wait_for(|m| m["method"] == "pen/event" && m["params"]["kind"] == "tool_call_started");
    // The call is on the wire once the server has it.
    wait_until("the tools/call on the server's stdin", || {
        std::fs::read_to_string(wire.path()).is_ok_and(|t| t.contains("tools/call"))
    });
    let stopped = d.client.request("pen/stop", json!({"sessionId": session}));
    assert_eq!(stopped["stopped"], true);
    let answer = d.client.wait_for_response(&id);
    assert_eq!(answer["result"]["stopReason"], "cancelled", "{answer}");
    wait_until("notifications/cancelled on the server's stdin", || {
        std::fs::read_to_string(wire.path()).is_ok_and(|t| t.contains("notifications/cancelled"))
    });
    let results = results(&d.client.transcript(&session));
    assert_eq!(results.len(), 1, "{results:?}");
    let content = results[0]["content"].as_str().unwrap();
    assert!(
        content.starts_with("stopped while running: outcome unknown"),
        "{content}"
    );
    let finished: Vec<Value> = d
        .events()
        .into_iter()
        .filter(|e| e["kind"] == "tool_call_finished")
        .collect();
    assert_eq!(finished[0]["data"]["state"], "unknown");
}

#[test]
fn a_server_killed_mid_turn_is_reported_down_and_restarted_on_next_use() {
    let Some(entry) = peer("PEN_MCP_EVERYTHING", "a_server_killed_mid_turn") else {
        return;
    };
    let marker = format!("PEN_TEST_MARK={}", std::process::id());
    let fake = FakeProvider::start();
    fake.push([
        calls(&[call(
            "c1",
            "mcp__everything__trigger-long-running-operation",
            json!({"duration": 600, "steps": 600}),
        )]),
        calls(&[call(
            "c2",
            "mcp__everything__echo",
            json!({"message": "again"}),
        )]),
        text("done"),
    ]);
    let mut d = daemon(
        &fake,
        &[],
        json!({"everything": everything(&entry, json!({"PEN_TEST_MARK": std::process::id().to_string()}))}),
        &[
            "mcp__everything__*",
            "mcp__everything__echo",
            "mcp__everything__trigger-long-running-operation",
        ],
    );
    let session = d.client.new_session();
    let id = d
        .client
        .send_request("pen/prompt", json!({"sessionId": session, "text": "go"}));
    d.client
        .wait_for(|m| m["method"] == "pen/event" && m["params"]["kind"] == "tool_call_started");
    let pids = pids_with(&marker);
    assert!(!pids.is_empty(), "the server runs with {marker}");
    for pid in &pids {
        // SAFETY: a plain kill(2) of a process this test's daemon started.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    let answer = d.client.wait_for_response(&id);
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let results = results(&d.client.transcript(&session));
    assert_eq!(results.len(), 2, "{results:?}");
    let down = results[0]["content"].as_str().unwrap();
    assert!(down.contains("MCP server `everything` is down"), "{down}");
    assert!(down.contains("server_down"), "{down}");
    assert_eq!(
        results[1]["content"], "Echo: again",
        "restarted for the next call"
    );
    let states: Vec<String> = d
        .events()
        .iter()
        .filter(|e| e["kind"] == "mcp_server")
        .map(|e| e["data"]["state"].as_str().unwrap().to_string())
        .collect();
    assert!(states.starts_with(&["running".to_string()]), "{states:?}");
    assert!(states.contains(&"failed".to_string()), "{states:?}");
    assert_eq!(
        states.last().map(String::as_str),
        Some("running"),
        "{states:?}"
    );
    assert!(!pids_with(&marker).iter().any(|p| pids.contains(p)));
}

/// The Python SDK's server on a free port of 127.0.0.1, killed when dropped.
struct PythonServer {
    child: Child,
    url: String,
}

impl PythonServer {
    fn start(python: &str, token: &str) -> PythonServer {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/fastmcp_server.py");
        let mut child = Command::new(python)
            .arg(script)
            .env("PEN_TEST_MCP_TOKEN", token)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("start {python}: {e}"));
        let stdout = child.stdout.take().unwrap();
        let mut port = None;
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line.unwrap();
            if let Some(p) = line.strip_prefix("PORT ") {
                port = Some(p.trim().to_string());
                break;
            }
        }
        let port = port.expect("the Python server printed its port");
        PythonServer {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }
}

impl Drop for PythonServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_python_sdk_server_over_http_gives_structured_content_errors_and_list_changed() {
    let Some(python) = peer("PEN_MCP_PYTHON", "a_python_sdk_server_over_http") else {
        return;
    };
    let token = format!("token-{}", std::process::id());
    let server = PythonServer::start(&python, &token);
    let fake = FakeProvider::start();
    fake.push([
        calls(&[call("c1", "mcp__py__stats", json!({"values": [1, 2, 3]}))]),
        calls(&[call("c2", "mcp__py__fail", json!({"why": "testing"}))]),
        calls(&[call("c3", "mcp__py__add_tool", json!({}))]),
        text("first turn done"),
        calls(&[call("c4", "mcp__py__late_tool", json!({}))]),
        text("second turn done"),
    ]);
    let servers = json!({
        "py": {"url": server.url, "bearer_token_env": "PEN_TEST_MCP_TOKEN"},
        "py_wrong_token": {"url": server.url, "bearer_token_env": "PEN_TEST_WRONG_TOKEN"},
    });
    let mut d = daemon(
        &fake,
        &[
            ("PEN_TEST_MCP_TOKEN", &token),
            ("PEN_TEST_WRONG_TOKEN", "wrong"),
        ],
        servers,
        &[
            "mcp__py__stats",
            "mcp__py__fail",
            "mcp__py__add_tool",
            "mcp__py__late_tool",
        ],
    );
    let session = d.client.new_session();
    let answer = d.client.prompt(&session, "stats");
    assert_eq!(answer["stopReason"], "end_turn", "{answer}");
    let requests = fake.requests();
    assert_eq!(requests.len(), 4);
    assert!(!offered(&requests[0].body).contains(&"mcp__py__late_tool".to_string()));
    let stats: Value = serde_json::from_str(&tool_message(&requests[1].body, "c1")).unwrap();
    assert_eq!(stats, json!({"count": 3, "mean": 2.0}));
    let failed = tool_message(&requests[2].body, "c2");
    assert!(
        failed.contains("tool_failed") && failed.contains("failed on purpose: testing"),
        "{failed}"
    );
    // The bearer token came from the environment: the right one is let in, a wrong one not.
    let wrong = d.status("py_wrong_token");
    assert_eq!(wrong["status"], "failed", "{wrong}");
    assert!(wrong["reason"].as_str().unwrap().contains("401"), "{wrong}");
    // notifications/tools/list_changed: the list is fetched again before the next request.
    wait_until("late_tool in the server's tools", || {
        d.status("py")["toolCount"] == 4
    });
    assert_eq!(d.client.prompt(&session, "late")["stopReason"], "end_turn");
    let requests = fake.requests();
    assert!(offered(&requests[4].body).contains(&"mcp__py__late_tool".to_string()));
    assert_eq!(tool_message(&requests[5].body, "c4"), "late tool ran");
}

#[test]
fn a_project_server_starts_only_once_approved_and_a_denial_keeps_it_off() {
    let Some(entry) = peer(
        "PEN_MCP_EVERYTHING",
        "a_project_server_starts_only_once_approved",
    ) else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let marks = tempfile::tempdir().unwrap();
    let ran = marks.path().join("server-ran");
    // The command would leave a file behind if it ever ran.
    let project = json!({"mcpServers": {"proj": {
        "command": "sh",
        "args": ["-c", format!("touch '{}' && exec node '{entry}' stdio", ran.display())],
    }}});
    std::fs::write(root.path().join(".mcp.json"), project.to_string()).unwrap();
    let fake = FakeProvider::start();
    fake.push([text("one"), text("two")]);
    let data = tempfile::tempdir().unwrap();
    let mut d = daemon_in(&fake, &[], data, root, json!({}), &[]);
    let session = d.client.new_session();
    assert_eq!(d.client.prompt(&session, "hi")["stopReason"], "end_turn");
    let asked: Vec<Value> = d.approvals_asked().into_iter().cloned().collect();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0]["params"]["kind"], "start_mcp_server");
    assert!(
        asked[0]["params"]["commandLine"]
            .as_str()
            .unwrap()
            .contains("server-ran"),
        "{asked:?}"
    );
    assert!(!ran.exists(), "a denied project server never ran");
    assert_eq!(d.status("proj")["status"], "denied");
    assert!(
        !offered(&fake.requests()[0].body)
            .iter()
            .any(|n| n.starts_with("mcp__proj"))
    );
    // The denial stands for the session: the next turn does not ask again.
    assert_eq!(d.client.prompt(&session, "again")["stopReason"], "end_turn");
    assert_eq!(d.approvals_asked().len(), 1);
    assert!(!ran.exists());
    drop(d);

    // Approved once: it starts, its tools join, and the approval is remembered.
    let fake = FakeProvider::start();
    fake.push([text("three"), text("four")]);
    let again_root = tempfile::tempdir().unwrap();
    std::fs::write(again_root.path().join(".mcp.json"), project.to_string()).unwrap();
    let data = tempfile::tempdir().unwrap();
    let mut d = daemon_in(&fake, &[], data, again_root, json!({}), &[]);
    d.client.on_request(|method, params| match method {
        "pen/requestApproval" if params["kind"] == "start_mcp_server" => {
            json!({"decision": "allow"})
        }
        "window/workDoneProgress/create" => Value::Null,
        _ => json!({"decision": "deny"}),
    });
    let session = d.client.new_session();
    assert_eq!(d.client.prompt(&session, "hi")["stopReason"], "end_turn");
    assert!(ran.exists(), "the approved server ran");
    assert_eq!(d.status("proj")["status"], "running");
    assert!(offered(&fake.requests()[0].body).contains(&"mcp__proj__echo".to_string()));
    assert_eq!(d.client.prompt(&session, "again")["stopReason"], "end_turn");
    assert_eq!(d.approvals_asked().len(), 1, "approved once");
}

#[test]
fn tool_schemas_that_do_not_fit_name_the_largest_server_and_exclude_tools() {
    let Some(entry) = peer("PEN_MCP_EVERYTHING", "tool_schemas_that_do_not_fit") else {
        return;
    };
    let fake = FakeProvider::start();
    let mut d = daemon(
        &fake,
        &[],
        json!({"everything": everything(&entry, json!({}))}),
        &[],
    );
    let set = d.client.request(
        "pen/setConfig",
        json!({"context_window_tokens": WINDOW, "max_output_tokens": 16, "budget_margin_tokens": 0}),
    );
    assert_eq!(set["context_window_tokens"], WINDOW, "{set}");
    let session = d.client.new_session();
    let answer = d.client.prompt(&session, "hi");
    assert_eq!(answer["stopReason"], "error", "{answer}");
    let error = answer["lastError"].as_str().unwrap();
    assert!(error.contains("server `everything`"), "{error}");
    assert!(
        error.contains("mcp_servers.everything.exclude_tools"),
        "{error}"
    );
    assert!(fake.requests().is_empty(), "nothing is sent");
    // Following the advice, the request fits.
    let mut fewer = everything(&entry, json!({}));
    fewer["include_tools"] = json!(["echo"]);
    d.client.request(
        "pen/setConfig",
        json!({"mcp_servers": {"everything": fewer}}),
    );
    fake.push([text("fits")]);
    let answer = d.client.prompt(&session, "hi again");
    assert_eq!(answer["stopReason"], "end_turn", "{answer}");
    let offered = offered(&fake.requests()[0].body);
    let mcp: Vec<&String> = offered.iter().filter(|n| n.starts_with("mcp__")).collect();
    assert_eq!(mcp, ["mcp__everything__echo"]);
}

/// A context window the native tools fit in and the everything server's tools do not.
const WINDOW: u64 = 3_600;

#[test]
fn pen_mcp_list_and_call_read_config_toml_and_cap_as_the_model_sees_it() {
    let Some(entry) = peer("PEN_MCP_EVERYTHING", "pen_mcp_list_and_call") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[mcp_servers.everything]\ncommand = \"node\"\nargs = [{entry:?}, \"stdio\"]\n\n\
             [mcp_servers.off]\ncommand = \"false\"\nenabled = false\n"
        ),
    )
    .unwrap();
    let pen = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_pen"))
            .args(args)
            .current_dir(dir.path())
            .env("PEN_CONFIG", &config)
            .env("PEN_DATA_DIR", dir.path().join("data"))
            .env("PEN_MAX_TOOL_RESULT_BYTES", "2048")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, listed, stderr) = pen(&["mcp", "list"]);
    assert_eq!(code, Some(0), "{stderr}");
    let lines: Vec<Value> = listed
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{listed}");
    assert_eq!(lines[0]["server"], "everything");
    assert_eq!(lines[0]["status"], "running");
    // server-everything speaks the initialize handshake: the negotiated version says so.
    assert_eq!(lines[0]["protocolVersion"], "2025-11-25");
    assert!(
        lines[0]["tools"]
            .as_array()
            .unwrap()
            .contains(&json!("mcp__everything__echo"))
    );
    assert_eq!(lines[1]["server"], "off");
    assert_eq!(lines[1]["status"], "disabled");

    let (code, shown, _) = pen(&["mcp", "call", "everything", "echo", r#"{"message": "hi"}"#]);
    assert_eq!((code, shown.as_str()), (Some(0), "Echo: hi\n"));
    let big = json!({"message": "y".repeat(10_000)}).to_string();
    let (code, shown, _) = pen(&["mcp", "call", "everything", "echo", &big]);
    assert_eq!(code, Some(0));
    let shown = shown.strip_suffix('\n').unwrap();
    assert!(shown.len() <= 2048, "{}", shown.len());
    assert!(
        shown.ends_with("This tool cannot page: call it again asking for less]"),
        "{shown}"
    );
    let (code, _, stderr) = pen(&["mcp", "call", "nowhere", "echo", "{}"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("no MCP server named `nowhere`"), "{stderr}");
}
