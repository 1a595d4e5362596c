//! Permission modes end to end (issue 28, items 2 and 3): `pen serve` over real stdio and
//! `pen run`, with the fake provider scripting the model's calls.

use super::fake_provider::{FakeProvider, Reply, openai_frames};
use super::lsp_client::LspClient;
use super::mcp::{Daemon, daemon_in};
use super::run::Pty;
use pen::providers::{ToolCall, Usage};
use serde_json::{Value, json};
use std::fs;
use std::path::PathBuf;
use std::process::Command;

fn call(id: &str, name: &str, args: Value) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: args.to_string(),
    }
}

/// One answer of the model: its text and calls.
fn answer(text: &str, calls: &[ToolCall]) -> Reply {
    let text: Vec<&str> = if text.is_empty() { vec![] } else { vec![text] };
    Reply::Stream(openai_frames(&text, calls, Usage::new(100, 10)))
}

fn edit(id: &str, old: &str, new: &str) -> ToolCall {
    call(
        id,
        "pen_edit",
        json!({"path": "a.txt", "edits": [{"old_text": old, "new_text": new}]}),
    )
}

fn read(id: &str) -> ToolCall {
    call(id, "pen_read", json!({"path": "a.txt"}))
}

fn command(id: &str) -> ToolCall {
    call(id, "pen_command", json!({"command": "echo hi > ran.txt"}))
}

/// `pen serve` in a fresh workspace holding `a.txt` = "alpha\n", its provider the fake (the MCP
/// suite's daemon, with no servers); every approval is denied with a reason. Returns the
/// daemon and its workspace.
fn daemon(fake: &FakeProvider, env: &[(&str, &str)]) -> (Daemon, PathBuf) {
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    fs::write(root.path().join("a.txt"), "alpha\n").unwrap();
    let path = root.path().to_path_buf();
    let mut daemon = daemon_in(fake, env, data, root, json!({}), &[]);
    daemon.client.on_request(|method, _| match method {
        "pen/requestApproval" => json!({"decision": "deny", "reason": "use cargo check instead"}),
        _ => Value::Null,
    });
    (daemon, path)
}

/// The params of the approvals pen asked for, in order.
fn approvals(daemon: &Daemon) -> Vec<Value> {
    daemon
        .approvals_asked()
        .into_iter()
        .map(|r| r["params"].clone())
        .collect()
}

/// The result the model read for `call_id`, from the transcript.
fn result_of(client: &mut LspClient, session: &str, call_id: &str) -> Value {
    client
        .transcript(session)
        .into_iter()
        .find(|e| e["kind"] == "tool_result" && e["data"]["callId"] == call_id)
        .unwrap_or_else(|| panic!("no result for {call_id}"))["data"]
        .clone()
}

/// The last user message of the fake's `n`th request (0-based).
fn user_text(fake: &FakeProvider, n: usize) -> String {
    let body = &fake.requests()[n].body;
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .map(|m| m["content"].to_string())
        .unwrap_or_default()
}

#[test]
fn plan_mode_refuses_edits_and_commands_without_asking_then_edit_mode_lets_an_edit_through() {
    let fake = FakeProvider::start();
    fake.push([
        answer("", &[read("r1")]),
        answer("", &[edit("e1", "alpha", "beta"), command("c1")]),
        answer("Plan: change alpha to beta.", &[]),
        // After the switch to edit: the edit runs; the command still asks (the sandbox is off).
        answer("", &[edit("e2", "alpha", "beta")]),
        answer("", &[command("c2")]),
        answer("Done.", &[]),
    ]);
    let (mut d, root) = daemon(&fake, &[("PEN_SANDBOX", "off")]);

    let session = d.client.new_session();
    let set = d
        .client
        .request("pen/setMode", json!({"sessionId": session, "mode": "plan"}));
    assert_eq!(set, json!({"sessionId": session, "mode": "plan"}));
    assert_eq!(
        d.client.prompt(&session, "make it beta")["stopReason"],
        "end_turn"
    );

    assert_eq!(approvals(&d), Vec::<Value>::new(), "plan mode asks nobody");
    assert_eq!(fs::read_to_string(root.join("a.txt")).unwrap(), "alpha\n");
    assert!(!root.join("ran.txt").exists());
    for id in ["e1", "c1"] {
        let result = result_of(&mut d.client, &session, id);
        assert_eq!(result["state"], "denied", "{result}");
        assert!(
            result["content"]
                .as_str()
                .unwrap()
                .starts_with("refused in plan mode"),
            "{result}"
        );
    }
    // The model is told with the prompt (never in the system prompt or catalog), and reads
    // the refusals.
    assert!(user_text(&fake, 0).contains("Plan mode (for this message)"));
    let third = fake.requests()[2].body.to_string();
    assert!(third.contains("refused in plan mode"), "{third}");
    assert_eq!(
        fake.requests()[0].body["tools"],
        fake.requests()[2].body["tools"]
    );

    // Mid-session switch: the next edit runs without asking.
    d.client
        .request("pen/setMode", json!({"sessionId": session, "mode": "edit"}));
    assert_eq!(
        d.client.prompt(&session, "go ahead")["stopReason"],
        "end_turn"
    );
    assert!(user_text(&fake, 3).contains("Plan mode is over (mode: edit)"));
    assert_eq!(fs::read_to_string(root.join("a.txt")).unwrap(), "beta\n");
    assert_eq!(result_of(&mut d.client, &session, "e2")["state"], "done");
    // The command asked, naming the mode, and the owner's reason reached the model.
    let asked = approvals(&d);
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0]["tool"], "pen_command");
    assert_eq!(asked[0]["mode"], "edit");
    let denied = result_of(&mut d.client, &session, "c2");
    assert_eq!(denied["state"], "denied");
    assert!(
        denied["content"]
            .as_str()
            .unwrap()
            .ends_with("The owner said: use cargo check instead"),
        "{denied}"
    );
    assert!(!root.join("ran.txt").exists());

    // An unknown mode or session is the client's error.
    let bad = d
        .client
        .request_raw("pen/setMode", json!({"sessionId": session, "mode": "yolo"}));
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    let bad = d
        .client
        .request_raw("pen/setMode", json!({"sessionId": "s_nope", "mode": "ask"}));
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
}

#[test]
fn auto_mode_from_the_config_runs_edits_without_asking_and_an_unconfined_command_asks() {
    let fake = FakeProvider::start();
    fake.push([
        answer("", &[read("r1")]),
        answer("", &[edit("e1", "alpha", "beta"), command("c1")]),
        answer("Done.", &[]),
    ]);
    let (mut d, root) = daemon(&fake, &[("PEN_MODE", "auto"), ("PEN_SANDBOX", "off")]);
    let session = d.client.new_session();
    assert_eq!(
        d.client.prompt(&session, "make it beta")["stopReason"],
        "end_turn"
    );
    assert_eq!(fs::read_to_string(root.join("a.txt")).unwrap(), "beta\n");
    let asked = approvals(&d);
    assert_eq!(asked.len(), 1, "only the command asks: {asked:?}");
    assert_eq!(asked[0]["tool"], "pen_command");
    assert_eq!(asked[0]["mode"], "auto");
    // Nothing is said to the model outside plan mode.
    assert!(!user_text(&fake, 0).contains("[pen]"));
}

/// `pen run` with no terminal cannot ask: the call does not run and both the owner (stderr)
/// and the model are told which mode would have run it; `--mode edit` does.
#[test]
fn a_headless_run_names_the_mode_that_would_have_allowed_the_call() {
    let fake = FakeProvider::start();
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    fs::write(root.path().join("a.txt"), "alpha\n").unwrap();
    let run = |mode: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_pen"));
        command
            .args([
                "run",
                "make it beta",
                "--provider",
                "openai",
                "--model",
                "m",
            ])
            .arg("--base-url")
            .arg(format!("{}/v1", fake.url()));
        if let Some(mode) = mode {
            command.args(["--mode", mode]);
        }
        command
            .current_dir(root.path())
            .env("PEN_DATA_DIR", data.path())
            .env("PEN_CONFIG", "/nonexistent/pen/config.toml")
            .env_remove("PEN_MODE")
            .env_remove("PEN_AUTO_APPROVE")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    let script = || {
        fake.push([
            answer("", &[read("r1")]),
            answer("", &[edit("e1", "alpha", "beta")]),
            answer("Done.", &[]),
        ])
    };
    script();
    let output = run(None);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("pen: mode ask"), "{stderr}");
    assert!(
        stderr.contains("pen_edit was not asked: pen run has no terminal to ask on; mode `edit` would have run it without asking: `pen run --mode edit`, PEN_MODE=edit"),
        "{stderr}"
    );
    let told = fake.requests().last().unwrap().body.to_string();
    assert!(
        told.contains("approval no longer applies") && told.contains("--mode edit"),
        "{told}"
    );
    assert_eq!(
        fs::read_to_string(root.path().join("a.txt")).unwrap(),
        "alpha\n"
    );

    script();
    let output = run(Some("edit"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("pen: mode edit"), "{stderr}");
    assert_eq!(
        fs::read_to_string(root.path().join("a.txt")).unwrap(),
        "beta\n"
    );

    let output = run(Some("yolo"));
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("plan, ask, edit, auto"), "{stderr}");
}

/// `pen run` at a terminal (a real pseudo-terminal): `r` at the approval prompt denies and asks
/// why; the model reads the reason.
#[test]
fn pen_run_at_a_terminal_denies_with_the_reason_the_model_reads() {
    use std::io::Write;
    let fake = FakeProvider::start();
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    fake.push([answer("", &[command("c1")]), answer("Not run.", &[])]);
    let mut pen = Command::new(env!("CARGO_BIN_EXE_pen"));
    pen.args(["run", "run it", "--provider", "openai", "--model", "m"])
        .arg("--base-url")
        .arg(format!("{}/v1", fake.url()))
        .current_dir(root.path())
        .env("PEN_DATA_DIR", data.path())
        .env("PEN_CONFIG", "/nonexistent/pen/config.toml")
        .env("NO_COLOR", "1")
        .env_remove("PEN_MODE")
        .env_remove("PEN_AUTO_APPROVE");
    let (mut child, screen, mut keyboard) = Pty::open().spawn(pen);
    let asked = screen.wait_for("[n]o: ");
    assert!(
        asked.contains("pen [mode ask]: allow pen_command")
            && asked.contains("[r] no, and tell pen why"),
        "{asked}"
    );
    keyboard.write_all(b"r\n").unwrap();
    screen.wait_for("why (pen reads it): ");
    keyboard.write_all(b"use the tests instead\n").unwrap();
    let code = super::common::wait_bounded(&mut child, std::time::Duration::from_secs(60));
    assert_eq!(code, 0, "{}", screen.wait_for("pen:"));
    let told = fake.requests().last().unwrap().body.to_string();
    assert!(
        told.contains("The owner said: use the tests instead"),
        "{told}"
    );
    assert!(!root.path().join("ran.txt").exists());
}

/// A switch while a turn runs decides the turn's next call: the owner, asked about one edit,
/// switches to `auto` and allows it; the next edit of the same turn runs without asking.
#[test]
fn a_switch_during_a_turn_decides_its_next_call() {
    use super::lsp_client::frame;
    let fake = FakeProvider::start();
    fake.push([
        answer("", &[read("r1")]),
        answer("", &[edit("e1", "alpha", "beta")]),
        answer("", &[edit("e2", "beta", "gamma")]),
        answer("Done.", &[]),
    ]);
    let (mut d, root) = daemon(&fake, &[]);
    let session = d.client.new_session();
    let prompt = d.client.send_request(
        "pen/prompt",
        json!({"sessionId": session, "text": "two edits"}),
    );
    let asked = d
        .client
        .wait_for(|m| m["method"] == "pen/requestApproval" && m.get("id").is_some());
    assert_eq!(asked["params"]["callId"], "e1");
    assert_eq!(asked["params"]["mode"], "ask");
    d.client
        .request("pen/setMode", json!({"sessionId": session, "mode": "auto"}));
    let allow = json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"decision": "allow"}});
    d.client.send_raw(&frame(allow.to_string().as_bytes()));
    let answer = d.client.wait_for_response(&prompt);
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert_eq!(fs::read_to_string(root.join("a.txt")).unwrap(), "gamma\n");
    assert_eq!(approvals(&d), Vec::<Value>::new(), "e2 was not asked");
}

/// The 50 commands of issue 28's measured session: builds, tests, greps and file writes in the
/// workspace, and two that leave the sandbox (`"sandbox": "off"`).
fn fifty_commands() -> Vec<Value> {
    let mut commands = vec![json!({"command": "mkdir -p build out"})];
    for i in 0..10 {
        commands.push(json!({"command": format!("cc -c src/m{i}.c -o build/m{i}.o")}));
        commands.push(json!({"command": format!("sh tests/run.sh {i}")}));
    }
    for i in 0..14 {
        commands.push(json!({"command": format!("grep -rn 'int m{}' src", i % 10)}));
    }
    for i in 0..13 {
        commands.push(json!({"command": format!("echo {i} > out/{i}.txt")}));
    }
    for reason in ["publish the build", "fetch a dependency"] {
        commands.push(
            json!({"command": "touch \"$HOME/escaped\"", "sandbox": "off", "reason": reason}),
        );
    }
    commands
}

/// How many times the owner is asked in `mode` for [`fifty_commands`], each allowed.
fn approvals_for_fifty_commands(mode: &str) -> usize {
    let fake = FakeProvider::start();
    let home = tempfile::tempdir().unwrap();
    let commands = fifty_commands();
    assert_eq!(commands.len(), 50);
    let mut replies: Vec<Reply> = commands
        .iter()
        .enumerate()
        .map(|(n, arguments)| {
            answer(
                "",
                &[call(&format!("c{n}"), "pen_command", arguments.clone())],
            )
        })
        .collect();
    replies.push(answer("Built and tested.", &[]));
    fake.push(replies);
    let home_path = home.path().to_string_lossy().to_string();
    let (mut d, root) = daemon(
        &fake,
        &[
            ("PEN_MODE", mode),
            ("HOME", &home_path),
            ("PEN_MAX_TURN_REQUESTS", "60"),
        ],
    );
    fs::create_dir_all(root.join("src")).unwrap();
    fs::create_dir_all(root.join("tests")).unwrap();
    for i in 0..10 {
        fs::write(
            root.join(format!("src/m{i}.c")),
            format!("int m{i}(void) {{ return {i}; }}\n"),
        )
        .unwrap();
    }
    fs::write(root.join("tests/run.sh"), "test -f \"build/m$1.o\"\n").unwrap();
    d.client.on_request(|method, _| match method {
        "pen/requestApproval" => json!({"decision": "allow"}),
        _ => Value::Null,
    });
    let session = d.client.new_session();
    assert_eq!(
        d.client.prompt(&session, "build and test")["stopReason"],
        "end_turn"
    );
    assert!(root.join("out/12.txt").exists() && root.join("build/m9.o").exists());
    assert!(home.path().join("escaped").exists());
    approvals(&d).len()
}

/// Issue 28's measure: the scripted session of 50 commands asks the owner for each in `ask`, and
/// only for the two that leave the sandbox in `auto`.
#[test]
fn fifty_commands_ask_fifty_times_in_ask_and_twice_in_auto() {
    let ask = approvals_for_fifty_commands("ask");
    let auto = approvals_for_fifty_commands("auto");
    println!("approvals of the 50 scripted commands: ask {ask}, auto {auto}");
    assert_eq!((ask, auto), (50, 2));
}
