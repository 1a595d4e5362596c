//! The `pen tool` command line: exit codes, usage errors and the catalog.

use super::common::pen_tool;
use serde_json::json;
use std::process::Command;

#[test]
fn tool_errors_exit_1_with_a_json_error() {
    let dir = tempfile::tempdir().unwrap();
    let run = pen_tool(
        dir.path(),
        "pen_read",
        &json!({"path": "x", "bogus": 1}),
        &[],
    );
    assert_eq!(run.code, 1);
    let error = &run.json()["error"];
    assert_eq!(error["code"], "invalid_arguments");
    assert!(error["message"].as_str().unwrap().contains("`bogus`"));
}

#[test]
fn bad_usage_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let run = pen_tool(dir.path(), "pen_nope", &json!({}), &[]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("no tool named `pen_nope`"),
        "{}",
        run.stderr
    );
    let run = pen_tool(
        dir.path(),
        "pen_read",
        &json!({}),
        &["--max-result-bytes", "1023"],
    );
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains("between 1024 and 1048576"),
        "{}",
        run.stderr
    );
    let output = Command::new(env!("CARGO_BIN_EXE_pen"))
        .args(["tool", "pen_read", "{not json"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn list_prints_the_catalog() {
    let output = Command::new(env!("CARGO_BIN_EXE_pen"))
        .args(["tool", "--list"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    let catalog: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let names: Vec<&str> = catalog
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "pen_search",
            "pen_list",
            "pen_find",
            "pen_read",
            "pen_tail",
            "pen_create",
            "pen_edit",
            "pen_command",
            "pen_plan"
        ]
    );
    for tool in catalog.as_array().unwrap() {
        assert_eq!(tool["input_schema"]["type"], "object", "{tool}");
        assert!(!tool["description"].as_str().unwrap().is_empty(), "{tool}");
    }
}

#[test]
fn the_cap_comes_from_the_config_file_then_the_environment_then_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("big.txt"), "word ".repeat(20_000)).unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "max_tool_result_bytes = 2048\n").unwrap();
    let run = |env: &[(&str, &str)], extra: &[&str]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_pen"));
        command
            .args(["tool", "pen_read", r#"{"path":"big.txt"}"#, "--root"])
            .arg(dir.path())
            .args(extra)
            .env("PEN_CONFIG", &config)
            .env_remove("PEN_MAX_TOOL_RESULT_BYTES");
        for (k, v) in env {
            command.env(k, v);
        }
        let output = command.output().unwrap();
        (
            output.stdout.len() - 1,
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (from_file, _) = run(&[], &[]);
    assert!(from_file <= 2048 && from_file > 1024, "{from_file}");
    let (from_env, _) = run(&[("PEN_MAX_TOOL_RESULT_BYTES", "4096")], &[]);
    assert!(from_env <= 4096 && from_env > 2048, "{from_env}");
    let (from_flag, _) = run(
        &[("PEN_MAX_TOOL_RESULT_BYTES", "4096")],
        &["--max-result-bytes", "1024"],
    );
    assert!(from_flag <= 1024, "{from_flag}");
    // A bad value at boot is reported and the earlier value kept.
    let (kept, stderr) = run(&[("PEN_MAX_TOOL_RESULT_BYTES", "99")], &[]);
    assert_eq!(kept, from_file);
    assert!(stderr.contains("between 1024 and 1048576"), "{stderr}");
}

/// `pen run` for a new user, with no key and no model anywhere: the messages say which variable,
/// flag or key to set, not just "configure one".
fn pen_run_unconfigured(flags: &[&str]) -> (Option<i32>, String) {
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_pen"));
    command
        .args(["run", "hi"])
        .args(flags)
        .current_dir(root.path())
        .env("PEN_DATA_DIR", data.path())
        .env("PEN_CONFIG", "/nonexistent/pen/config.toml")
        .stdin(std::process::Stdio::null());
    for name in [
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "PEN_PROVIDER",
        "PEN_MODEL",
        "PEN_BASE_URL",
        "PEN_API_KEY_ENV",
    ] {
        command.env_remove(name);
    }
    let output = command.output().unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn pen_run_with_openai_and_no_key_names_the_variable() {
    let (code, stderr) = pen_run_unconfigured(&["--provider", "openai"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("set OPENAI_API_KEY") && stderr.contains("api_key_env"),
        "{stderr}"
    );
}

/// A `Stdio` for stdout whose reader is already gone, as after `| head -1` has exited.
fn closed_stdout() -> std::process::Stdio {
    use std::os::fd::{FromRawFd, OwnedFd};
    let mut fds = [0; 2];
    // SAFETY: pipe writes two new descriptors into the array it is given.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: both descriptors were just opened and are owned here alone.
    let (reader, writer) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(reader);
    writer.into()
}

fn pen_command(data: &std::path::Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_pen"));
    command
        .env("PEN_DATA_DIR", data)
        .env("PEN_CONFIG", "/nonexistent/pen/config.toml")
        .env_remove("PEN_MAX_TOOL_RESULT_BYTES")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    command
}

/// Issue 12 item 6: a closed stdout ends `pen tool` quietly with 141, not a panic (exit 101).
#[test]
fn pen_tool_with_a_closed_stdout_exits_quietly() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        vec!["tool", "pen_list", "{}"],
        vec!["tool", "--list"],
        vec!["tool", "pen_read", r#"{"path":"missing"}"#],
    ] {
        let output = pen_command(dir.path())
            .args(&args)
            .args(if args[1] == "--list" {
                vec![]
            } else {
                vec!["--root", dir.path().to_str().unwrap()]
            })
            .stdout(closed_stdout())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(141), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

/// Issue 12 item 6: `pen run --json … | head -1`. The reader takes the first line and goes
/// away while the turn waits on the model; pen stops the turn (Stop semantics), records it
/// whole and exits 141 without a panic. `pen sessions` and `pen transcript` end the same way.
#[test]
fn pen_run_whose_reader_goes_away_stops_the_turn_cleanly() {
    use super::fake_provider::{FakeProvider, Reply, openai_frames};
    use pen::providers::{ToolCall, Usage};
    use std::io::BufRead;
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("a.txt"), "alpha\n").unwrap();
    std::fs::write(root.path().join("b.txt"), "beta\n").unwrap();
    let usage = Usage::new(100, 10);
    let call = |id: &str, path: &str| ToolCall {
        id: id.into(),
        name: "pen_read".into(),
        arguments: json!({ "path": path }).to_string(),
    };
    let thinking = openai_frames(&["Thinking"], &[], usage);
    let until_text = thinking
        .iter()
        .position(|f| f.contains("Thinking"))
        .unwrap();
    let fake = FakeProvider::start();
    fake.push([
        Reply::Stream(openai_frames(
            &["Reading both."],
            &[call("c1", "a.txt"), call("c2", "b.txt")],
            usage,
        )),
        // The next answer starts and then never ends: only a Stop ends the turn.
        Reply::Hang(thinking[..=until_text].to_vec()),
    ]);
    let mut child = pen_command(data.path())
        .args([
            "run",
            "--json",
            "read both",
            "--provider",
            "openai",
            "--model",
            "fake-model",
            "--base-url",
        ])
        .arg(format!("{}/v1", fake.url()))
        .current_dir(root.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut reader = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    reader.read_line(&mut first).unwrap();
    assert!(first.starts_with('{'), "{first}");
    // Wait until the turn is waiting on the hanging answer, then go away like `head -1`.
    futures::executor::block_on(fake.wait_for_requests(2));
    drop(reader);
    let code = super::common::wait_bounded(&mut child, std::time::Duration::from_secs(60));
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(code, 141, "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let session = stderr
        .lines()
        .find_map(|line| line.strip_prefix("pen: session "))
        .expect("the session id on stderr")
        .to_string();

    let output = pen_command(data.path())
        .args(["transcript", &session])
        .stdout(std::process::Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    let entries: Vec<serde_json::Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let kinds: Vec<&str> = entries
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    // The session's context (an event) comes before the first prompt.
    assert_eq!(
        kinds[..3],
        ["event", "user_prompt", "assistant_message"],
        "{kinds:?}"
    );
    // Every call of every assistant message has exactly one result.
    for message in entries.iter().filter(|e| e["kind"] == "assistant_message") {
        for call in message["payload"]["tool_calls"].as_array().unwrap() {
            let answers = entries
                .iter()
                .filter(|e| e["kind"] == "tool_result" && e["payload"]["call_id"] == call["id"])
                .count();
            assert_eq!(answers, 1, "{call}: {kinds:?}");
        }
    }
    let last = entries.last().unwrap();
    assert_eq!(last["kind"], "event", "{last}");
    assert_eq!(last["payload"]["type"], "turn_ended", "{last}");
    assert_eq!(last["payload"]["stop_reason"], "cancelled", "{last}");

    for args in [vec!["sessions"], vec!["transcript", session.as_str()]] {
        let output = pen_command(data.path())
            .args(&args)
            .stdout(closed_stdout())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(141), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

/// Issue 12 item 7: `--pretty` prints the observation indented, `--compact` (the default when
/// stdout is not a terminal) the exact bytes the model sees; both are the same JSON.
#[test]
fn pen_tool_prints_pretty_or_the_exact_bytes() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f.txt"), "one\n\"two\"\n").unwrap();
    let args = json!({"path": "f.txt"});
    let exact = pen_tool(dir.path(), "pen_read", &args, &[]);
    let compact = pen_tool(dir.path(), "pen_read", &args, &["--compact"]);
    let pretty = pen_tool(dir.path(), "pen_read", &args, &["--pretty"]);
    assert_eq!(exact.code, 0);
    assert_eq!(compact.stdout, exact.stdout);
    assert!(!exact.stdout.contains('\n'));
    assert!(pretty.stdout.lines().count() > 5, "{}", pretty.stdout);
    assert!(
        pretty
            .stdout
            .contains("\n  \"content\": \"one\\n\\\"two\\\"\\n\"")
    );
    assert_eq!(pretty.json(), exact.json());
    // The exact bytes are the observation the model receives.
    let (_, observation) = super::common::call_tool(dir.path(), 65_536, "pen_read", &args);
    assert_eq!(exact.stdout, observation);
    let both = pen_tool(dir.path(), "pen_read", &args, &["--pretty", "--compact"]);
    assert_eq!(both.code, 2);
}

/// Issue 12 item 7: on a terminal `pen tool` pretty-prints by default.
#[test]
fn pen_tool_is_pretty_on_a_terminal() {
    use std::io::Read;
    use std::os::fd::FromRawFd;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f.txt"), "one\n").unwrap();
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty writes two descriptors into the integers it is given.
    let opened = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(opened, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just opened and are owned here alone.
    let (mut master, slave) = unsafe {
        (
            std::fs::File::from_raw_fd(master),
            std::os::fd::OwnedFd::from_raw_fd(slave),
        )
    };
    let mut child = pen_command(dir.path())
        .args(["tool", "pen_read", r#"{"path":"f.txt"}"#, "--root"])
        .arg(dir.path())
        .stdout(slave)
        .spawn()
        .unwrap();
    let code = super::common::wait_bounded(&mut child, std::time::Duration::from_secs(30));
    assert_eq!(code, 0);
    // The child has exited, so what it wrote is in the terminal's buffer; the terminal turns
    // each newline into CR LF. Reading past it fails (EIO) once the child's side is closed.
    let mut shown = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = master.read(&mut buf) {
        if n == 0 {
            break;
        }
        shown.extend_from_slice(&buf[..n]);
    }
    let shown = String::from_utf8_lossy(&shown).replace("\r\n", "\n");
    assert!(shown.starts_with("{\n  \"path\": \"f.txt\",\n"), "{shown}");
}

/// A config path that is not a regular file (`/dev/zero`, a FIFO with no writer, a directory)
/// is refused with a warning naming it, and the command runs with the defaults instead of
/// hanging. The wait is bounded so that a hang fails the test.
#[test]
fn a_config_path_that_is_not_a_regular_file_is_refused_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("config.fifo");
    let status = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(status.success());
    let root = dir.path().to_string_lossy().into_owned();
    for config in [
        "/dev/zero".to_string(),
        fifo.to_string_lossy().into_owned(),
        root.clone(),
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_pen"))
            .args(["tool", "pen_list", "{}", "--root", &root])
            .env("PEN_CONFIG", &config)
            .env_remove("PEN_MAX_TOOL_RESULT_BYTES")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while child.try_wait().unwrap().is_none() {
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("pen tool hung reading PEN_CONFIG={config}");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "{config}: {stderr}");
        assert!(
            stderr.contains(&config) && stderr.contains("not a regular file"),
            "{config}: {stderr}"
        );
    }
}

/// A huge `model` (from the config file and from the environment) is refused, naming the key,
/// and not kept; the warnings do not repeat the value.
#[test]
fn a_huge_config_string_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    std::fs::write(&file, format!("model = \"{}\"\n", "m".repeat(600 * 1024))).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_pen"))
        .args(["tool", "pen_list", "{}", "--root"])
        .arg(dir.path())
        .env("PEN_CONFIG", &file)
        .env("PEN_MODEL", "x".repeat(100 * 1024))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert_eq!(
        stderr.matches("config key `model` is").count(),
        2,
        "{stderr}"
    );
    assert!(stderr.len() < 2_000, "{} bytes of warnings", stderr.len());
}

/// `pen run` prints the turn's and the session's usage on stderr at the end; with `--json`
/// every request's usage is a `usage` event line and the last line carries the totals.
#[test]
fn pen_run_prints_the_usage_totals_and_emits_them_as_events_with_json() {
    use super::fake_provider::{FakeProvider, Reply, openai_frames};
    use pen::providers::Usage;
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let cached = Usage {
        cache_read_tokens: Some(1920),
        reasoning_tokens: Some(12),
        ..Usage::new(2006, 300)
    };
    let fake = FakeProvider::start();
    fake.push([
        Reply::Stream(openai_frames(&["Hello."], &[], cached)),
        Reply::Stream(openai_frames(&["Again."], &[], cached)),
    ]);
    let run = |json: bool, session: Option<&str>| {
        let mut command = pen_command(data.path());
        command.arg("run");
        if json {
            command.arg("--json");
        }
        if let Some(session) = session {
            command.args(["--session", session]);
        }
        command
            .args([
                "hi",
                "--provider",
                "openai",
                "--model",
                "fake-model",
                "--base-url",
            ])
            .arg(format!("{}/v1", fake.url()))
            .current_dir(root.path())
            .output()
            .unwrap()
    };
    let output = run(false, None);
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let line = "2006 input tokens (95% cached), 300 output tokens (12 reasoning)";
    assert!(
        stderr.contains(&format!("pen: usage this turn: {line}\n")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("pen: usage this session: {line}\n")),
        "{stderr}"
    );
    let session = stderr
        .lines()
        .find_map(|line| line.strip_prefix("pen: session "))
        .expect("the session id on stderr")
        .to_string();

    // The same session again, as JSON lines: the usage event, then the session's totals.
    let output = run(true, Some(&session));
    assert_eq!(output.status.code(), Some(0));
    let lines: Vec<serde_json::Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let one = json!({"inputTokens": 2006, "outputTokens": 300, "cacheReadTokens": 1920, "reasoningTokens": 12});
    let two = json!({"inputTokens": 4012, "outputTokens": 600, "cacheReadTokens": 3840, "reasoningTokens": 24});
    let usage = lines
        .iter()
        .find(|line| line["kind"] == "usage")
        .expect("a usage event");
    assert_eq!(
        usage["data"],
        json!({"model": "fake-model", "request": one, "turn": one, "session": two})
    );
    let ended = lines
        .iter()
        .find(|line| line["kind"] == "turn_ended")
        .expect("turn_ended");
    assert_eq!(ended["data"]["usage"], one);
    assert_eq!(ended["data"]["sessionUsage"], two);
    let last = lines.last().unwrap();
    assert_eq!(last["usage"], one, "{last}");
    assert_eq!(last["sessionUsage"], two, "{last}");
}

/// `pen run` shows each plan pen_plan sets as lines on stderr: the count, then every step with
/// its mark, in order.
#[test]
fn pen_run_prints_each_plan_as_checklist_lines() {
    use super::fake_provider::{FakeProvider, Reply, openai_frames};
    use pen::providers::{ToolCall, Usage};
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let plan = serde_json::json!({"steps": [
        {"text": "read the parser", "status": "done"},
        {"text": "fix the off-by-one", "status": "in_progress"},
        {"text": "run the tests", "status": "pending"},
    ]});
    let fake = FakeProvider::start();
    fake.push([
        Reply::Stream(openai_frames(
            &[],
            &[ToolCall {
                id: "p1".into(),
                name: "pen_plan".into(),
                arguments: plan.to_string(),
            }],
            Usage::new(10, 1),
        )),
        Reply::Stream(openai_frames(&["Planned."], &[], Usage::new(10, 1))),
    ]);
    let output = pen_command(data.path())
        .args([
            "run",
            "plan it",
            "--provider",
            "openai",
            "--model",
            "fake-model",
            "--base-url",
        ])
        .arg(format!("{}/v1", fake.url()))
        .current_dir(root.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(
            "pen: plan: 1 of 3 done\npen:   [x] read the parser\n\
             pen:   [>] fix the off-by-one\npen:   [ ] run the tests\n"
        ),
        "{stderr}"
    );
}
