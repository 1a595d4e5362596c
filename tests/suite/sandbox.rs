//! pen_command's OS sandbox (issue 28, item 1), on the real kernel: `pen run` with the fake
//! provider scripts pen_command calls, and the test looks at the disk, a listener and the
//! results the model was sent. Nothing here depends on running as root or not.

use super::fake_provider::{FakeProvider, Reply, openai_frames};
use pen::providers::{ToolCall, Usage};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;

/// What one `pen run` of scripted pen_command calls came to.
struct Run {
    /// Each call's result as the model was sent it, in call order.
    results: Vec<String>,
    /// The `--json` event lines.
    events: Vec<Value>,
}

/// Runs `pen run` in `ws` whose model calls pen_command once per entry of `calls` (their
/// arguments), then ends; `env` on top of a clean environment for pen (no config file).
fn run(ws: &Path, data: &Path, env: &[(&str, &str)], calls: &[Value]) -> Run {
    let usage = Usage::new(100, 10);
    let calls: Vec<ToolCall> = calls
        .iter()
        .enumerate()
        .map(|(i, arguments)| ToolCall {
            id: format!("c{i}"),
            name: "pen_command".into(),
            arguments: arguments.to_string(),
        })
        .collect();
    let fake = FakeProvider::start();
    fake.push([
        Reply::Stream(openai_frames(&[], &calls, usage)),
        Reply::Stream(openai_frames(&["done"], &[], usage)),
    ]);
    let mut command = Command::new(env!("CARGO_BIN_EXE_pen"));
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("PEN_") {
            command.env_remove(name);
        }
    }
    let output = command
        .env("PEN_DATA_DIR", data)
        .env("PEN_CONFIG", "/nonexistent/pen/config.toml")
        .envs(env.iter().copied())
        .args([
            "run",
            "--json",
            "go",
            "--provider",
            "openai",
            "--model",
            "fake-model",
            "--base-url",
        ])
        .arg(format!("{}/v1", fake.url()))
        .current_dir(ws)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let requests = fake.requests();
    let last = &requests.last().expect("a request").body;
    let results = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect::<Vec<_>>();
    assert_eq!(results.len(), calls.len(), "{stderr}");
    let events = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    Run { results, events }
}

/// A workspace that is a git repository (hooks folder and config), and a folder outside it.
struct Scene {
    _base: tempfile::TempDir,
    ws: std::path::PathBuf,
    outside: std::path::PathBuf,
    data: std::path::PathBuf,
}

fn scene() -> Scene {
    let base = tempfile::tempdir().unwrap();
    let ws = base.path().join("ws");
    let outside = base.path().join("outside");
    std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
    std::fs::write(ws.join(".git/config"), "[core]\n").unwrap();
    std::fs::create_dir_all(outside.join("home")).unwrap();
    std::fs::write(outside.join("home/.bashrc"), "# owner's\n").unwrap();
    std::fs::write(outside.join("target"), "owner's\n").unwrap();
    let data = base.path().join("data");
    Scene {
        _base: base,
        ws,
        outside,
        data,
    }
}

fn command(line: &str) -> Value {
    json!({ "command": line })
}

fn result_json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// Asserts a result ran sandboxed, failed, and lists a blocked line naming `named`.
fn assert_blocked(result: &str, named: &str) {
    let value = result_json(result);
    assert_eq!(value["sandbox"], "workspace-write", "{result}");
    assert_ne!(value["exit_code"], 0, "{result}");
    let lines = value["sandbox_blocked"]["lines"].to_string();
    assert!(lines.contains(named), "{named} not in {result}");
    assert!(
        value["sandbox_blocked"]["note"]
            .as_str()
            .unwrap()
            .contains("\"sandbox\": \"off\""),
        "{result}"
    );
}

#[test]
fn workspace_write_lets_the_workspace_be_written_and_blocks_every_way_out() {
    let s = scene();
    let out = s.outside.display().to_string();
    let home = s.outside.join("home");
    std::os::unix::fs::symlink(s.outside.join("target"), s.ws.join("link")).unwrap();
    let stray_tmp = tempfile::Builder::new()
        .prefix("pen-sandbox-test-")
        .tempfile_in("/tmp")
        .unwrap()
        .into_temp_path();
    let stray = stray_tmp.display().to_string();
    std::fs::remove_file(&stray_tmp).unwrap();
    let calls = [
        // Allowed: the workspace (new top-level folders too) and the private TMPDIR.
        command(
            "echo inside > inside.txt && mkdir -p target/debug && echo o > target/debug/o \
             && t=$(mktemp) && echo x > \"$t\" && echo \"tmp=$t\"",
        ),
        command(&format!("echo x > {out}/new.txt")),
        command("echo evil >> \"$HOME/.bashrc\""),
        command(&format!("echo x > {stray}")),
        command("echo x > link"),
        // A background grandchild, waited for: it is confined too.
        command(&format!("(sh -c 'echo late > {out}/late.txt') & wait $!")),
        command("echo hook > .git/hooks/pre-commit"),
        command("echo '[core] hooksPath = /x' >> .git/config"),
        command("echo x > .pen-data/owned"),
    ];
    std::fs::create_dir_all(s.ws.join(".pen-data")).unwrap();
    let data = s.ws.join(".pen-data");
    let home_env = home.display().to_string();
    let data_env = data.display().to_string();
    let run = run(
        &s.ws,
        &data,
        &[
            ("PEN_AUTO_APPROVE", "pen_command"),
            ("HOME", &home_env),
            ("PEN_DATA_DIR", &data_env),
        ],
        &calls,
    );
    let r = &run.results;
    let first = result_json(&r[0]);
    assert_eq!(first["exit_code"], 0, "{}", r[0]);
    assert_eq!(first["sandbox"], "workspace-write");
    assert!(first.get("sandbox_blocked").is_none(), "{}", r[0]);
    assert_eq!(
        std::fs::read_to_string(s.ws.join("inside.txt")).unwrap(),
        "inside\n"
    );
    assert!(s.ws.join("target/debug/o").exists());
    // mktemp landed in the private folder, which is gone after the command.
    let tmp = first["stdout"].as_str().unwrap().trim();
    let tmp = tmp.strip_prefix("tmp=").unwrap();
    assert!(tmp.contains("pen-command-"), "{tmp}");
    assert!(!Path::new(tmp).exists(), "{tmp}");

    assert_blocked(&r[1], "new.txt");
    assert!(!s.outside.join("new.txt").exists());
    assert_blocked(&r[2], ".bashrc");
    assert_eq!(
        std::fs::read_to_string(home.join(".bashrc")).unwrap(),
        "# owner's\n"
    );
    assert_blocked(&r[3], &stray);
    assert!(!Path::new(&stray).exists());
    assert_blocked(&r[4], "link");
    assert_eq!(
        std::fs::read_to_string(s.outside.join("target")).unwrap(),
        "owner's\n"
    );
    assert_blocked(&r[5], "late.txt");
    assert!(!s.outside.join("late.txt").exists());
    assert_blocked(&r[6], "pre-commit");
    assert!(!s.ws.join(".git/hooks/pre-commit").exists());
    assert_blocked(&r[7], ".git/config");
    assert_eq!(
        std::fs::read_to_string(s.ws.join(".git/config")).unwrap(),
        "[core]\n"
    );
    assert_blocked(&r[8], "owned");
    assert!(!data.join("owned").exists());
    // Nothing was asked: the sandboxed commands ran under auto_approve.
    assert!(
        !run.events.iter().any(|e| e["kind"] == "approval_requested"),
        "{:?}",
        run.events
    );
}

#[test]
fn a_host_listener_on_loopback_is_unreachable_unless_sandbox_network_is_on() {
    let s = scene();
    std::fs::create_dir_all(&s.ws).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let connect = format!("curl -sS --max-time 20 http://127.0.0.1:{port}/");
    let run = run(
        &s.ws,
        &s.data,
        &[("PEN_AUTO_APPROVE", "pen_command")],
        &[command(&connect)],
    );
    assert_blocked(&run.results[0], "127.0.0.1");
    listener.set_nonblocking(true).unwrap();
    assert_eq!(
        listener.accept().map(|_| ()).unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock,
        "the listener saw a connection"
    );

    // With the network on, the same command reaches it.
    listener.set_nonblocking(false).unwrap();
    let server = std::thread::spawn(move || {
        use std::io::{Read, Write};
        let (mut stream, _) = listener.accept().unwrap();
        let mut buf = [0u8; 1024];
        let _ = stream.read(&mut buf);
        stream
            .write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 7\r\n\r\nreached")
            .unwrap();
    });
    let run2 = run_with_network(&s, &connect);
    server.join().unwrap();
    let value = result_json(&run2);
    assert_eq!(value["stdout"], "reached", "{run2}");
}

fn run_with_network(s: &Scene, connect: &str) -> String {
    run(
        &s.ws,
        &s.data,
        &[
            ("PEN_AUTO_APPROVE", "pen_command"),
            ("PEN_SANDBOX_NETWORK", "true"),
        ],
        &[command(connect)],
    )
    .results
    .remove(0)
}

#[test]
fn build_style_work_in_the_workspace_succeeds() {
    let s = scene();
    std::fs::write(
        s.ws.join("hello.c"),
        "#include <stdio.h>\nint main(void) { puts(\"hello\"); return 0; }\n",
    )
    .unwrap();
    std::fs::write(
        s.ws.join("Makefile"),
        "hello: hello.c\n\tcc -o hello hello.c\n",
    )
    .unwrap();
    // A dependency-free crate, built with the cargo that runs these tests (its home is
    // read-only in the sandbox; the build needs none of it).
    std::fs::create_dir_all(s.ws.join("crate/src")).unwrap();
    std::fs::write(
        s.ws.join("crate/Cargo.toml"),
        "[package]\nname = \"hi\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    )
    .unwrap();
    std::fs::write(
        s.ws.join("crate/src/main.rs"),
        "fn main() { println!(\"built\"); }\n",
    )
    .unwrap();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let run = run(
        &s.ws,
        &s.data,
        &[("PEN_AUTO_APPROVE", "pen_command")],
        &[
            command(&format!(
                "cd crate && '{cargo}' build --offline -q && ./target/debug/hi"
            )),
            command("make && ./hello"),
            command("mkdir -p out && node -e \"require('fs').writeFileSync('out/n.txt', 'node')\""),
        ],
    );
    let built = result_json(&run.results[0]);
    assert_eq!(built["stdout"], "built\n", "{}", run.results[0]);
    let make = result_json(&run.results[1]);
    assert_eq!(make["exit_code"], 0, "{}", run.results[1]);
    assert!(make["stdout"].as_str().unwrap().ends_with("hello\n"));
    let node = result_json(&run.results[2]);
    assert_eq!(node["exit_code"], 0, "{}", run.results[2]);
    assert_eq!(
        std::fs::read_to_string(s.ws.join("out/n.txt")).unwrap(),
        "node"
    );
}

#[test]
fn no_new_privileges_not_even_through_a_setuid_copy() {
    let s = scene();
    let run = run(
        &s.ws,
        &s.data,
        &[("PEN_AUTO_APPROVE", "pen_command")],
        &[command(
            "grep -E '^(NoNewPrivs|CapEff)' /proc/self/status; \
             cp \"$(command -v grep)\" ./g && chmod u+s ./g && ls -l ./g && ./g '^CapEff' /proc/self/status; \
             kill -0 $PPID 2>/dev/null || echo 'pen: not signalled'",
        )],
    );
    let value = result_json(&run.results[0]);
    let stdout = value["stdout"].as_str().unwrap();
    assert_eq!(value["exit_code"], 0, "{}", run.results[0]);
    assert!(stdout.contains("NoNewPrivs:\t1"), "{stdout}");
    // The setuid bit is set, and the copy runs without a single capability.
    assert!(stdout.contains("-rws"), "{stdout}");
    assert_eq!(
        stdout.matches("CapEff:\t0000000000000000").count(),
        2,
        "{stdout}"
    );
    // pen, the command's parent, is outside the sandbox: it cannot be signalled.
    assert!(stdout.contains("pen: not signalled"), "{stdout}");
}

#[test]
fn read_only_writes_only_in_the_private_folder_and_off_is_today_s_sh() {
    let s = scene();
    let out = s.outside.display().to_string();
    let run1 = run(
        &s.ws,
        &s.data,
        &[
            ("PEN_AUTO_APPROVE", "pen_command"),
            ("PEN_SANDBOX", "read-only"),
        ],
        &[
            command("echo x > inside.txt"),
            command("t=$(mktemp) && echo x > \"$t\" && cat \"$t\""),
        ],
    );
    let refused = result_json(&run1.results[0]);
    assert_eq!(refused["sandbox"], "read-only");
    assert!(
        refused["sandbox_blocked"]["lines"]
            .to_string()
            .contains("inside.txt"),
        "{refused}"
    );
    assert!(!s.ws.join("inside.txt").exists());
    let tmp = result_json(&run1.results[1]);
    assert_eq!(tmp["stdout"], "x\n", "{tmp}");

    let run2 = run(
        &s.ws,
        &s.data,
        &[("PEN_AUTO_APPROVE", "pen_command"), ("PEN_SANDBOX", "off")],
        &[command(&format!("echo x > {out}/off.txt"))],
    );
    let off = result_json(&run2.results[0]);
    assert_eq!(off["exit_code"], 0, "{off}");
    assert!(off.get("sandbox").is_none(), "{off}");
    assert!(s.outside.join("off.txt").exists());
}

/// The owner was asked about call `call_id` (and, under `pen run` without a terminal, the
/// call was denied): the approval event's summary.
fn asked(run: &Run, call_id: &str) -> String {
    let event = run
        .events
        .iter()
        .find(|e| e["kind"] == "approval_requested" && e["data"]["callId"] == call_id)
        .unwrap_or_else(|| panic!("no approval for {call_id}: {:?}", run.events));
    event["data"]["summary"].as_str().unwrap().to_string()
}

#[test]
fn leaving_the_sandbox_asks_even_under_auto_approve_with_the_reason() {
    let s = scene();
    let out = s.outside.display().to_string();
    let run = run(
        &s.ws,
        &s.data,
        &[("PEN_AUTO_APPROVE", "pen_command")],
        &[
            json!({"command": format!("echo x > {out}/escaped.txt"), "sandbox": "off",
                   "reason": "writes the release notes next door"}),
            command("echo fine > fine.txt"),
        ],
    );
    let summary = asked(&run, "c0");
    assert!(summary.contains("OUTSIDE the OS sandbox"), "{summary}");
    assert!(
        summary.contains("writes the release notes next door"),
        "{summary}"
    );
    assert!(run.results[0].contains("did not run"), "{}", run.results[0]);
    assert!(!s.outside.join("escaped.txt").exists());
    // The sandboxed call beside it ran without asking.
    assert!(
        !run.events
            .iter()
            .any(|e| e["kind"] == "approval_requested" && e["data"]["callId"] == "c1")
    );
    assert!(s.ws.join("fine.txt").exists());
}

#[test]
fn where_the_kernel_cannot_sandbox_pen_says_so_once_and_every_command_asks() {
    let s = scene();
    let run = run(
        &s.ws,
        &s.data,
        &[
            ("PEN_AUTO_APPROVE", "pen_command"),
            (pen::sandbox::UNSUPPORTED_ENV, "1"),
        ],
        &[command("echo x > a.txt"), command("echo y > b.txt")],
    );
    // Said once (the `pen run` line is this event, printed), though two commands ran.
    let told: Vec<&Value> = run
        .events
        .iter()
        .filter(|e| e["kind"] == "sandbox_unavailable")
        .collect();
    assert_eq!(told.len(), 1, "{:?}", run.events);
    let message = told[0]["data"]["message"].as_str().unwrap();
    assert!(
        message.contains("OS sandbox for commands is unavailable")
            && message.contains(pen::sandbox::UNSUPPORTED_ENV),
        "{message}"
    );
    for call in ["c0", "c1"] {
        let summary = asked(&run, call);
        assert!(summary.contains("runs unconfined"), "{summary}");
    }
    assert!(!s.ws.join("a.txt").exists());
    assert!(!s.ws.join("b.txt").exists());
}

/// `pen/getConfig` says what the sandbox does on this kernel: confined by default, off when
/// set so, and unavailable (with why) where the probe fails.
#[test]
fn get_config_says_whether_commands_are_confined_here() {
    use super::lsp_client::LspClient;
    let shown = |env: &[(&str, &str)]| {
        let data = tempfile::tempdir().unwrap();
        let root = tempfile::tempdir().unwrap();
        let mut client = LspClient::spawn(data.path(), root.path(), env);
        client.initialize(root.path(), &["utf-16"]);
        client.request("pen/getConfig", json!(null))["effective_sandbox"].clone()
    };
    assert_eq!(
        shown(&[]),
        json!({"level": "workspace-write", "confined": true})
    );
    assert_eq!(
        shown(&[("PEN_SANDBOX", "off")]),
        json!({"level": "off", "confined": false})
    );
    let unavailable = shown(&[
        ("PEN_SANDBOX", "read-only"),
        (pen::sandbox::UNSUPPORTED_ENV, "1"),
    ]);
    assert_eq!(unavailable["level"], "read-only");
    assert_eq!(unavailable["confined"], false);
    assert!(
        unavailable["unavailable"]
            .as_str()
            .unwrap()
            .contains(pen::sandbox::UNSUPPORTED_ENV),
        "{unavailable}"
    );
}
