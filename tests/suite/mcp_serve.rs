//! `pen mcp serve` driven by MCP clients nobody here wrote: the official Python SDK (`mcp`
//! 2.3 on PyPI, in its default mode that probes `server/discover` before `initialize`, and in
//! its classic `initialize` mode) and the official TypeScript SDK (`@modelcontextprotocol/sdk`
//! on npm). Each runs the real binary over stdio through a small client script
//! (`tests/mcp/serve_client.py`, `tests/mcp/serve_client.mjs`) that answers one JSON line with
//! one JSON line, so the test drives the session step by step.
//!
//! `tests/mcp/setup.sh` installs both (pinned, cached) and prints `PEN_MCP_PYTHON` and
//! `PEN_MCP_TS_SDK`; without them a test fails, unless `PEN_SKIP_REAL_PEERS=1` (never under CI).

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// An SDK client connected to a `pen mcp serve` it started.
struct SdkClient {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    protocol_version: String,
}

/// Which official SDK runs the client.
#[derive(Clone, Copy, Debug)]
enum Sdk {
    /// The Python SDK's default mode: `server/discover` first.
    PythonAuto,
    /// The Python SDK's classic `initialize` handshake.
    PythonLegacy,
    TypeScript,
}

impl SdkClient {
    /// Starts `sdk`'s client on `pen mcp serve --root ROOT FLAGS...` with its sessions in
    /// `data`; `None` when the real peers are knowingly skipped.
    fn start(sdk: Sdk, root: &Path, data: &Path, flags: &[&str], test: &str) -> Option<SdkClient> {
        let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp");
        let mut command = match sdk {
            Sdk::PythonAuto | Sdk::PythonLegacy => {
                let python = super::mcp::peer("PEN_MCP_PYTHON", test)?;
                let mut command = Command::new(python);
                command.arg(scripts.join("serve_client.py")).arg(match sdk {
                    Sdk::PythonAuto => "auto",
                    _ => "legacy",
                });
                command
            }
            Sdk::TypeScript => {
                let sdk = super::mcp::peer("PEN_MCP_TS_SDK", test)?;
                let mut command = Command::new("node");
                command
                    .arg(scripts.join("serve_client.mjs"))
                    .env("PEN_MCP_TS_SDK", sdk);
                command
            }
        };
        let mut child = command
            .arg(env!("CARGO_BIN_EXE_pen"))
            .args(["mcp", "serve", "--root"])
            .arg(root)
            .args(flags)
            .env("PEN_DATA_DIR", data)
            .env("PEN_CONFIG", "/nonexistent/pen/config.toml")
            .env_remove("PEN_MAX_TOOL_RESULT_BYTES")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start the {sdk:?} client: {e}"));
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut client = SdkClient {
            child,
            stdin,
            stdout,
            protocol_version: String::new(),
        };
        let hello = client.answer();
        client.protocol_version = hello["protocolVersion"].as_str().unwrap().to_string();
        Some(client)
    }

    fn answer(&mut self) -> Value {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        assert!(!line.is_empty(), "the client ended (its stderr is above)");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }

    fn ask(&mut self, step: Value) -> Value {
        writeln!(self.stdin, "{step}").unwrap();
        self.stdin.flush().unwrap();
        self.answer()
    }

    fn list(&mut self) -> Vec<Value> {
        self.ask(json!({"op": "list"})).as_array().unwrap().clone()
    }

    /// A call's result: its `structuredContent`, after checking the text is the same JSON.
    fn call(&mut self, name: &str, arguments: Value) -> (bool, Value) {
        let result = self.ask(json!({"op": "call", "name": name, "arguments": arguments}));
        let text = result["content"][0]["text"].as_str().unwrap();
        let structured = result["structuredContent"].clone();
        assert_eq!(serde_json::from_str::<Value>(text).unwrap(), structured);
        (result["isError"] == json!(true), structured)
    }

    fn close(mut self) {
        drop(self.stdin);
        let status = self.child.wait().unwrap();
        assert!(status.success(), "the client exited {status}");
    }
}

/// The read-only session every SDK runs: the tools and their annotations, a file paged to its
/// end with the cursor, a search resumed to its end, a key file and a path outside the root
/// refused, a write refused without `--allow-writes`.
fn read_only_session(sdk: Sdk, test: &str) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir(&root).unwrap();
    let data = dir.path().join("data");
    let text: String = (1..=250).map(|n| format!("needle {n}\n")).collect();
    std::fs::write(root.join("notes.txt"), &text).unwrap();
    std::fs::write(
        root.join("id_rsa"),
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("outside.txt"), "secret\n").unwrap();
    let Some(mut client) = SdkClient::start(sdk, &root, &data, &[], test) else {
        return;
    };
    match sdk {
        Sdk::PythonAuto => assert!(
            client.protocol_version.as_str() >= "2026-07-28",
            "the discover probe settles on a modern version: {}",
            client.protocol_version
        ),
        _ => assert!(client.protocol_version.as_str() < "2026-07-28"),
    }

    let tools = client.list();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["pen_search", "pen_list", "pen_find", "pen_read", "pen_tail"]
    );
    for tool in &tools {
        assert_eq!(tool["annotations"]["readOnlyHint"], json!(true), "{tool}");
        assert_eq!(tool["inputSchema"]["type"], json!("object"), "{tool}");
    }

    // A file paged to its end: the pages concatenate to the file.
    let mut pages = String::new();
    let mut start = 1;
    loop {
        let (failed, page) = client.call(
            "pen_read",
            json!({"path": "notes.txt", "start_line": start, "line_count": 100}),
        );
        assert!(!failed, "{page}");
        pages.push_str(page["content"].as_str().unwrap());
        match page["next_start_line"].as_u64() {
            Some(next) => start = next,
            None => break,
        }
    }
    assert_eq!(pages, text);

    // A search resumed to its end: every match once, in order.
    let mut lines = Vec::new();
    let mut after = Value::Null;
    loop {
        let mut arguments = json!({"query": "needle"});
        if !after.is_null() {
            arguments["after"] = after.clone();
        }
        let (failed, found) = client.call("pen_search", arguments);
        assert!(!failed, "{found}");
        lines.extend(
            found["matches"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["line"].as_u64().unwrap()),
        );
        after = found["next_after"].clone();
        if after.is_null() {
            break;
        }
    }
    assert_eq!(lines, (1..=250).collect::<Vec<u64>>());

    let (failed, refused) = client.call("pen_read", json!({"path": "id_rsa"}));
    assert!(failed);
    assert_eq!(refused["error"]["code"], "key_material", "{refused}");
    let (failed, refused) = client.call("pen_read", json!({"path": "../outside.txt"}));
    assert!(failed);
    assert_eq!(refused["error"]["code"], "outside_workspace", "{refused}");
    let (failed, refused) = client.call("pen_create", json!({"path": "new.txt", "content": "x"}));
    assert!(failed);
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--allow-writes"),
        "{refused}"
    );
    assert!(!root.join("new.txt").exists());
    client.close();
}

#[test]
fn the_python_sdk_s_default_discover_mode_reads_pages_searches_and_is_refused() {
    read_only_session(Sdk::PythonAuto, "mcp_serve::python_auto");
}

#[test]
fn the_python_sdk_s_initialize_mode_reads_pages_searches_and_is_refused() {
    read_only_session(Sdk::PythonLegacy, "mcp_serve::python_legacy");
}

#[test]
fn the_typescript_sdk_reads_pages_searches_and_is_refused() {
    read_only_session(Sdk::TypeScript, "mcp_serve::typescript");
}

/// `pen` run in `root` with sessions in `data`; its stdout.
fn pen(root: &Path, data: &Path, args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_pen"))
        .args(args)
        .current_dir(root)
        .env("PEN_DATA_DIR", data)
        .env("PEN_CONFIG", "/nonexistent/pen/config.toml")
        .output()
        .unwrap();
    String::from_utf8(output.stdout).unwrap()
}

/// With `--allow-writes`, writes are offered and made (a CRLF file keeps CRLF), each recorded so
/// `pen revert` puts the file back.
fn writes_session(sdk: Sdk, test: &str) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir(&root).unwrap();
    let data = dir.path().join("data");
    let before = b"fn a() {}\r\nfn b() {}\r\n";
    std::fs::write(root.join("crlf.rs"), before).unwrap();
    let Some(mut client) = SdkClient::start(sdk, &root, &data, &["--allow-writes"], test) else {
        return;
    };
    let tools = client.list();
    let annotations = |name: &str| {
        tools
            .iter()
            .find(|t| t["name"] == name)
            .map(|t| t["annotations"].clone())
            .unwrap_or_else(|| panic!("{name} is not listed"))
    };
    assert_eq!(
        annotations("pen_edit"),
        json!({"readOnlyHint": false, "destructiveHint": true})
    );
    assert_eq!(
        annotations("pen_create"),
        json!({"readOnlyHint": false, "destructiveHint": false})
    );
    assert!(tools.iter().all(|t| t["name"] != "pen_command"));

    let (failed, read) = client.call("pen_read", json!({"path": "crlf.rs"}));
    assert!(!failed, "{read}");
    let (failed, edited) = client.call(
        "pen_edit",
        json!({"path": "crlf.rs", "edits": [{"old_text": "fn b() {}", "new_text": "fn c() {}\nfn d() {}"}]}),
    );
    assert!(!failed, "{edited}");
    assert_eq!(
        std::fs::read(root.join("crlf.rs")).unwrap(),
        b"fn a() {}\r\nfn c() {}\r\nfn d() {}\r\n"
    );
    let (failed, command) = client.call("pen_command", json!({"command": "true"}));
    assert!(failed);
    assert!(
        command["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--allow-commands")
    );
    client.close();

    let sessions = pen(&root, &data, &["sessions", "--all"]);
    let session: Value = serde_json::from_str(sessions.lines().next().unwrap()).unwrap();
    let id = session["sessionId"].as_str().unwrap();
    let reverted = pen(&root, &data, &["revert", id]);
    assert!(reverted.contains("reverted"), "{reverted}");
    assert_eq!(std::fs::read(root.join("crlf.rs")).unwrap(), before);
}

#[test]
fn the_python_sdk_writes_with_allow_writes_and_pen_revert_puts_it_back() {
    writes_session(Sdk::PythonAuto, "mcp_serve::python_writes");
}

#[test]
fn the_typescript_sdk_writes_with_allow_writes_and_pen_revert_puts_it_back() {
    writes_session(Sdk::TypeScript, "mcp_serve::typescript_writes");
}

/// A client of each protocol generation that opens with `initialize` gets its own version back
/// and the tools: the handshake as the SDKs of 2024 and 2025 speak it, over raw stdio.
#[test]
fn every_initialize_generation_connects_and_lists_the_tools() {
    let dir = tempfile::tempdir().unwrap();
    for version in ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_pen"))
            .args(["mcp", "serve", "--root"])
            .arg(dir.path())
            .env("PEN_CONFIG", "/nonexistent/pen/config.toml")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut answer = |stdin: &mut ChildStdin, message: Value| -> Option<Value> {
            writeln!(stdin, "{message}").unwrap();
            stdin.flush().unwrap();
            message.get("id")?;
            let mut line = String::new();
            stdout.read_line(&mut line).unwrap();
            Some(serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}")))
        };
        let initialized = answer(
            &mut stdin,
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": version, "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"}}}),
        )
        .unwrap();
        assert_eq!(
            initialized["result"]["protocolVersion"], version,
            "{initialized}"
        );
        assert_eq!(initialized["result"]["serverInfo"]["name"], "pen");
        answer(
            &mut stdin,
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        );
        let listed = answer(
            &mut stdin,
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        )
        .unwrap();
        let tools = listed["result"]["tools"].as_array().unwrap();
        assert_eq!(tools.len(), 5, "{listed}");
        drop(stdin);
        assert!(child.wait().unwrap().success(), "{version}");
    }
}

/// With `--allow-commands`, a command runs inside pen's OS sandbox: it writes in the root, a
/// write outside it is blocked and said so, and a call asking to leave the sandbox is refused
/// (pen cannot ask its owner from here), so nothing runs unconfined.
#[test]
fn commands_run_only_inside_the_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir(&root).unwrap();
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let data = dir.path().join("data");
    let test = "mcp_serve::sandboxed_commands";
    let Some(mut client) =
        SdkClient::start(Sdk::PythonAuto, &root, &data, &["--allow-commands"], test)
    else {
        return;
    };
    let (failed, inside) = client.call("pen_command", json!({"command": "echo in > made.txt"}));
    assert!(!failed, "{inside}");
    assert_eq!(std::fs::read(root.join("made.txt")).unwrap(), b"in\n");

    let escape = format!("echo out > {}/x.txt", outside.display());
    let (_, blocked) = client.call("pen_command", json!({"command": escape}));
    assert!(!outside.join("x.txt").exists(), "{blocked}");
    assert!(blocked.to_string().contains("sandbox_blocked"), "{blocked}");

    let (failed, refused) = client.call(
        "pen_command",
        json!({"command": escape, "sandbox": "off", "reason": "needs it"}),
    );
    assert!(failed, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("only inside pen's OS sandbox"),
        "{refused}"
    );
    assert!(!outside.join("x.txt").exists());
    client.close();
}
