//! `pen run` and the management commands as a person meets them (issue 29): the prompt from
//! stdin, `--continue`, errors that say what to do, the last lines, and Ctrl-C at the
//! terminal's approval prompt (over a real pseudo-terminal).

use super::fake_provider::{FakeProvider, Reply, openai_error, openai_frames, raw_error};
use pen::providers::{ToolCall, Usage};
use serde_json::json;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// A folder and a data folder `pen run` works in, with no config and no keys.
struct Run {
    root: tempfile::TempDir,
    data: tempfile::TempDir,
}

impl Run {
    fn new() -> Run {
        Run {
            root: tempfile::tempdir().unwrap(),
            data: tempfile::tempdir().unwrap(),
        }
    }

    fn pen(&self, config: Option<&Path>) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_pen"));
        command
            .current_dir(self.root.path())
            .env("PEN_DATA_DIR", self.data.path())
            .env(
                "PEN_CONFIG",
                config.unwrap_or(Path::new("/nonexistent/pen/config.toml")),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for name in [
            "OPENAI_API_KEY",
            "ANTHROPIC_API_KEY",
            "PEN_PROVIDER",
            "PEN_MODEL",
            "PEN_BASE_URL",
            "PEN_API_KEY_ENV",
            "PEN_MAX_TOOL_RESULT_BYTES",
            "PEN_AUTO_APPROVE",
            "NO_COLOR",
        ] {
            command.env_remove(name);
        }
        command
    }

    /// `pen run ARGS` against `base_url` with model `fake-model`.
    fn run(&self, base_url: &str, args: &[&str]) -> Command {
        let mut command = self.pen(None);
        command
            .arg("run")
            .args(args)
            .args([
                "--provider",
                "openai",
                "--model",
                "fake-model",
                "--base-url",
            ])
            .arg(base_url);
        command
    }
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn session_of(stderr: &str) -> String {
    stderr
        .lines()
        .find_map(|line| line.strip_prefix("pen: session "))
        .expect("the session id on stderr")
        .to_string()
}

fn text(words: &str) -> Reply {
    Reply::Stream(openai_frames(&[words], &[], Usage::new(100, 10)))
}

/// `body`'s messages as one text, to find a prompt in.
fn messages(body: &serde_json::Value) -> String {
    body["messages"].to_string()
}

#[test]
fn the_prompt_comes_from_stdin_and_continue_takes_the_folder_s_latest_session() {
    let run = Run::new();
    let fake = FakeProvider::start();
    fake.push([text("One."), text("Two."), text("Three.")]);
    let base = format!("{}/v1", fake.url());
    let piped = |args: &[&str], input: &str| {
        let mut child = run.run(&base, args).stdin(Stdio::piped()).spawn().unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), input.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    };
    // `-` reads the prompt from stdin.
    let first = piped(&["-"], "explain the piped text\n");
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    assert_eq!(String::from_utf8_lossy(&first.stdout), "One.\n");
    assert!(messages(&fake.requests()[0].body).contains("explain the piped text"));
    let session = session_of(&stderr(&first));
    // The last line says how to go on; nothing changed files, so no revert is offered.
    let last = stderr(&first)
        .lines()
        .last()
        .unwrap_or_default()
        .to_string();
    assert_eq!(last, "pen: continue: pen run --continue \"…\"");

    // No prompt argument and stdin not a terminal: stdin again; --continue: the same session.
    let second = piped(&["--continue"], "and the second question");
    assert_eq!(second.status.code(), Some(0), "{}", stderr(&second));
    assert_eq!(session_of(&stderr(&second)), session);
    let body = messages(&fake.requests()[1].body);
    assert!(
        body.contains("explain the piped text") && body.contains("and the second question"),
        "{body}"
    );

    // An empty prompt is bad usage, and nothing is sent.
    let empty = piped(&[], "  \n");
    assert_eq!(empty.status.code(), Some(2), "{}", stderr(&empty));
    assert!(stderr(&empty).contains("the prompt is empty"));
    assert_eq!(fake.requests().len(), 2);

    // Another folder has nothing to continue.
    let elsewhere = Run::new();
    let output = elsewhere
        .run(&base, &["--continue", "hi"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("no earlier `pen run` in"),
        "{}",
        stderr(&output)
    );
}

/// Runs one turn against a fake that answers `reply` and returns the output; `args` come
/// before the prompt.
fn refused(base: &str, fake: &FakeProvider, reply: Reply, env: &[(&str, &str)]) -> Output {
    fake.push([reply]);
    let run = Run::new();
    let mut command = run.run(base, &["--json", "hi"]);
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().unwrap()
}

/// The outcome line `pen run --json` ends with: what every front end reports as the turn's
/// error (`pen/event`'s error data, ACP's message) carries the same text.
fn last_error(output: &Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let last: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or("{}")).unwrap();
    last["lastError"].as_str().unwrap_or_default().to_string()
}

#[test]
fn provider_refusals_say_what_to_do() {
    let fake = FakeProvider::start();
    let v1 = format!("{}/v1", fake.url());

    // A 401 with no key sent names the variable to set: the usual one, or api_key_env's.
    let unauthorized = || openai_error(401, "Unauthorized", "invalid_request_error", None);
    let output = refused(&v1, &fake, unauthorized(), &[]);
    assert_eq!(output.status.code(), Some(1));
    let error = last_error(&output);
    assert!(
        error.contains("HTTP 401") && error.contains("no API key was sent: set OPENAI_API_KEY"),
        "{error}"
    );
    // One usage line, not two "none reported".
    assert_eq!(
        stderr(&output).matches("usage").count(),
        1,
        "{}",
        stderr(&output)
    );
    let output = refused(
        &v1,
        &fake,
        unauthorized(),
        &[("PEN_API_KEY_ENV", "LOCAL_LLM_KEY")],
    );
    assert!(
        last_error(&output).contains("no API key was sent: set LOCAL_LLM_KEY"),
        "{}",
        last_error(&output)
    );

    // A base URL without /v1: the URL tried and the one to set. (The window's discovery asks
    // `{base}/models` too, which such a server does not have either.)
    fake.respond_with(|_, _| raw_error(404, "File Not Found"));
    let output = refused(fake.url(), &fake, raw_error(404, "File Not Found"), &[]);
    let error = last_error(&output);
    assert!(
        error.contains(&format!(
            "{}/chat/completions was not found: add /v1 to base_url? (base_url = \"{}/v1\")",
            fake.url(),
            fake.url()
        )),
        "{error}"
    );

    // A model the server does not have: the models it lists.
    fake.discovery(
        "/v1/models",
        json!({"object": "list", "data": [{"id": "smollm2:135m"}, {"id": "qwen2.5-coder:7b"}]}),
    );
    let missing = openai_error(
        404,
        "The model `fake-model` does not exist.",
        "invalid_request_error",
        Some("model_not_found"),
    );
    let output = refused(&v1, &fake, missing, &[]);
    let error = last_error(&output);
    assert!(
        error.contains("has no model `fake-model`; it lists `smollm2:135m`, `qwen2.5-coder:7b`"),
        "{error}"
    );
    // The same words on stderr without --json.
    fake.push([openai_error(
        404,
        "The model `fake-model` does not exist.",
        "invalid_request_error",
        Some("model_not_found"),
    )]);
    let run = Run::new();
    let output = run.run(&v1, &["hi"]).output().unwrap();
    assert!(
        stderr(&output).contains("it lists `smollm2:135m`, `qwen2.5-coder:7b`"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_misspelt_model_key_is_named_and_never_falls_back_to_a_hosted_model() {
    let fake = FakeProvider::start();
    let run = Run::new();
    let config = run.data.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "provider = \"openai\"\nbase_url = \"{}/v1\"\nmodle = \"smollm2\"\n",
            fake.url()
        ),
    )
    .unwrap();
    let output = run
        .pen(Some(&config))
        .env("OPENAI_API_KEY", "sk-local")
        .args(["run", "hi"])
        .output()
        .unwrap();
    let stderr = stderr(&output);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("unknown config key `modle` (did you mean `model`?)"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "no model is configured for the server at {}/v1",
            fake.url()
        )),
        "{stderr}"
    );
    assert!(fake.requests().is_empty(), "no model was sent anywhere");
}

/// A pseudo-terminal: the master side the test reads and types on, and the slave side the
/// child runs on as its controlling terminal (so Ctrl-C typed there is SIGINT to it).
struct Pty {
    master: std::fs::File,
    slave: std::os::fd::OwnedFd,
}

impl Pty {
    fn open() -> Pty {
        use std::os::fd::FromRawFd;
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
        unsafe {
            Pty {
                master: std::fs::File::from_raw_fd(master),
                slave: std::os::fd::OwnedFd::from_raw_fd(slave),
            }
        }
    }

    /// Runs `command` with the terminal as its stdin, stdout, stderr and controlling terminal;
    /// the screen's bytes arrive on the returned reader.
    fn spawn(self, mut command: Command) -> (std::process::Child, Screen, std::fs::File) {
        use std::os::unix::process::CommandExt;
        let slave = self.slave;
        command
            .stdin(slave.try_clone().unwrap())
            .stdout(slave.try_clone().unwrap())
            .stderr(slave);
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            command.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().unwrap();
        // The command, holding the slave's descriptors, is gone: the screen ends with the child.
        drop(command);
        let screen = Screen::read(self.master.try_clone().unwrap());
        (child, screen, self.master)
    }
}

/// What the child wrote to the terminal so far, collected by a thread.
struct Screen {
    seen: std::sync::Arc<(std::sync::Mutex<String>, std::sync::Condvar)>,
}

impl Screen {
    fn read(mut master: std::fs::File) -> Screen {
        let seen = std::sync::Arc::new((
            std::sync::Mutex::new(String::new()),
            std::sync::Condvar::new(),
        ));
        let shared = std::sync::Arc::clone(&seen);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // Reading fails (EIO) once the child's side is closed.
            while let Ok(n) = std::io::Read::read(&mut master, &mut buf) {
                if n == 0 {
                    break;
                }
                let (text, changed) = &*shared;
                text.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
                changed.notify_all();
            }
        });
        Screen { seen }
    }

    /// Waits until the screen shows `wanted`; the bound only fails a broken test.
    fn wait_for(&self, wanted: &str) -> String {
        let (text, changed) = &*self.seen;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let mut shown = text.lock().unwrap();
        while !shown.contains(wanted) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            assert!(!left.is_zero(), "never shown: {wanted:?}\n{shown}");
            shown = changed.wait_timeout(shown, left).unwrap().0;
        }
        shown.clone()
    }
}

#[test]
fn ctrl_c_at_the_approval_prompt_stops_the_turn_and_the_session_goes_on() {
    let run = Run::new();
    let fake = FakeProvider::start();
    let create = ToolCall {
        id: "c1".into(),
        name: "pen_create".into(),
        arguments: json!({"path": "new.txt", "content": "x\n"}).to_string(),
    };
    fake.push([Reply::Stream(openai_frames(
        &["Creating it."],
        &[create],
        Usage::new(100, 10),
    ))]);
    let base = format!("{}/v1", fake.url());
    let (mut child, screen, mut keyboard) = Pty::open().spawn(run.run(&base, &["make new.txt"]));
    let asked = screen.wait_for("[n]o: ");
    // The call is shown once: on its own line, not again in the question.
    assert_eq!(asked.matches("new.txt").count(), 1, "{asked}");
    std::io::Write::write_all(&mut keyboard, b"\x03").unwrap();
    let code = super::common::wait_bounded(&mut child, std::time::Duration::from_secs(60));
    let shown = screen.wait_for("pen: continue:");
    assert_eq!(code, 130, "{shown}");
    assert!(shown.contains("not run (stopped)"), "{shown}");
    assert!(!shown.contains("not_executed"), "{shown}");
    assert!(!run.root.path().join("new.txt").exists());

    // The session continues where it stopped.
    fake.push([text("Fine.")]);
    let output = run
        .run(&base, &["--continue", "never mind"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let body = messages(&fake.requests()[1].body);
    assert!(
        body.contains("make new.txt") && body.contains("not executed (stopped)"),
        "{body}"
    );
}

#[test]
fn claude_md_is_the_project_s_instructions_where_no_agents_md_is() {
    let run = Run::new();
    std::fs::write(run.root.path().join("CLAUDE.md"), "Answer in haiku.\n").unwrap();
    let fake = FakeProvider::start();
    fake.push([text("Ok.")]);
    let output = run
        .run(&format!("{}/v1", fake.url()), &["hi"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let system = messages(&fake.requests()[0].body);
    assert!(system.contains("Answer in haiku."), "{system}");
}

/// `command` run on a terminal: its exit code and what it showed (CR LF made LF).
fn on_terminal(mut command: Command, args: &[&str], wanted: &str) -> (i32, String) {
    command.args(args);
    let (mut child, screen, _keyboard) = Pty::open().spawn(command);
    let code = super::common::wait_bounded(&mut child, std::time::Duration::from_secs(60));
    (code, screen.wait_for(wanted).replace("\r\n", "\n"))
}

#[test]
fn management_commands_print_for_a_person_on_a_terminal_and_json_otherwise() {
    let run = Run::new();
    let fake = FakeProvider::start();
    let create = ToolCall {
        id: "c1".into(),
        name: "pen_create".into(),
        arguments: json!({"path": "new.txt", "content": "x\n"}).to_string(),
    };
    fake.push([
        Reply::Stream(openai_frames(
            &["Creating."],
            &[create],
            Usage::new(100, 10),
        )),
        text("Done."),
    ]);
    let output = run
        .run(&format!("{}/v1", fake.url()), &["make new.txt"])
        .env("PEN_AUTO_APPROVE", "pen_create")
        .output()
        .unwrap();
    let shown = stderr(&output);
    assert_eq!(output.status.code(), Some(0), "{shown}");
    let session = session_of(&shown);
    // A turn that changed files says how to undo it.
    assert!(
        shown.contains(&format!("undo this turn's changes: pen revert {session}")),
        "{shown}"
    );

    // Piped: JSON lines, as scripts read them.
    let piped = run.pen(None).arg("sessions").output().unwrap();
    let line: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&piped.stdout).trim()).unwrap();
    assert_eq!(line["sessionId"], session.as_str());
    // On a terminal: a line for a person; --json keeps JSON there too.
    let (code, screen) = on_terminal(run.pen(None), &["sessions"], "make new.txt");
    assert_eq!(code, 0, "{screen}");
    assert!(
        screen.contains(&session) && screen.contains("entries") && !screen.contains('{'),
        "{screen}"
    );
    let (_, screen) = on_terminal(run.pen(None), &["sessions", "--json"], "}");
    assert!(screen.starts_with('{'), "{screen}");

    // NO_COLOR: the same words without colour.
    let mut plain = run.pen(None);
    plain.env("NO_COLOR", "1");
    let (code, screen) = on_terminal(plain, &["revert", &session], "deleted");
    assert!(!screen.contains('\x1b'), "{screen}");
    assert_eq!(code, 0, "{screen}");
    assert!(
        screen.contains(&format!("reverted 1 turn of {session}"))
            && screen.contains("new.txt  deleted"),
        "{screen}"
    );
    assert!(!run.root.path().join("new.txt").exists());
}

#[test]
fn codex_mcp_keys_and_mcp_json_variables_work_and_a_bad_server_is_left_out_alone() {
    let run = Run::new();
    let config = run.data.path().join("config.toml");
    std::fs::write(
        &config,
        "[mcp_servers.docs]\ncommand = \"/nonexistent/docs-mcp\"\nstartup_timeout_sec = 5\n\
         enabled_tools = [\"search\"]\n\n[mcp_servers.typo]\ncommand = \"/nonexistent/x\"\n\
         startup_timeout = 5\n",
    )
    .unwrap();
    let project = json!({"mcpServers": {
        "proj": {"command": "node", "args": ["s.js", "--dir=${PROJ_DIR:-.}"], "env": {"TOKEN": "${OWNER_TOKEN}"}},
        "bad": {"command": "node", "env": {"K": "${PEN_TEST_UNSET_VARIABLE}"}},
        "sneaky": {"command": "node", "args": ["${$(touch pwned)}", "${OWNER_TOKEN"]},
    }});
    std::fs::write(run.root.path().join(".mcp.json"), project.to_string()).unwrap();
    let list = |command: &mut Command| {
        command
            .args(["mcp", "list"])
            .env("OWNER_TOKEN", "sk-owner-secret")
            .env_remove("PEN_TEST_UNSET_VARIABLE")
            .env_remove("PROJ_DIR");
    };
    let mut command = run.pen(Some(&config));
    list(&mut command);
    let output = command.output().unwrap();
    let (stdout, warnings) = (String::from_utf8_lossy(&output.stdout), stderr(&output));
    assert_eq!(output.status.code(), Some(0), "{warnings}");
    let servers: std::collections::BTreeMap<String, serde_json::Value> = stdout
        .lines()
        .map(|line| {
            let server: serde_json::Value = serde_json::from_str(line).unwrap();
            (server["server"].as_str().unwrap().to_string(), server)
        })
        .collect();
    // The codex-style server is read; the one with an unknown key is left out alone, named.
    assert_eq!(
        servers.keys().collect::<Vec<_>>(),
        ["bad", "docs", "proj", "sneaky"],
        "{stdout}"
    );
    assert!(
        warnings.contains("`mcp_servers.typo` has the unknown key `startup_timeout` (did you mean `startup_timeout_secs`?)")
            && warnings.contains("that server is left out"),
        "{warnings}"
    );
    // The project server waits for the owner, who is shown the variable's name.
    assert_eq!(servers["proj"]["status"], "not_approved");
    let reason = servers["proj"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("TOKEN='$OWNER_TOKEN' node s.js --dir=."),
        "{reason}"
    );
    for (name, wording) in [
        ("bad", "PEN_TEST_UNSET_VARIABLE, which is not set"),
        ("sneaky", "names no environment variable"),
    ] {
        assert_eq!(servers[name]["status"], "refused", "{name}");
        let reason = servers[name]["reason"].as_str().unwrap();
        assert!(reason.contains(wording), "{name}: {reason}");
    }
    assert!(!stdout.contains("sk-owner-secret") && !warnings.contains("sk-owner-secret"));
    assert!(!run.root.path().join("pwned").exists());

    // On a terminal, a line each.
    let mut command = run.pen(Some(&config));
    list(&mut command);
    command.env("NO_COLOR", "1");
    let (code, screen) = on_terminal(command, &[], "sneaky");
    assert_eq!(code, 0, "{screen}");
    assert!(
        screen.contains("proj (.mcp.json)  not approved"),
        "{screen}"
    );
    assert!(!screen.contains("sk-owner-secret"), "{screen}");
}

#[test]
fn the_project_server_question_offers_this_time_or_always_and_says_which() {
    let run = Run::new();
    let project = json!({"mcpServers": {"proj": {
        "command": "/nonexistent/proj-mcp",
        "env": {"TOKEN": "${OWNER_TOKEN}"},
    }}});
    std::fs::write(run.root.path().join(".mcp.json"), project.to_string()).unwrap();
    let approvals = run.data.path().join("mcp-approvals.json");
    let fake = FakeProvider::start();
    let base = format!("{}/v1", fake.url());
    for (answer, said, stored) in [
        ("y\n", "proj starts this time only", false),
        (
            "a\n",
            "stored: proj starts without asking in this folder",
            true,
        ),
    ] {
        fake.push([text("Ok.")]);
        let mut command = run.run(&base, &["hi"]);
        command
            .env("OWNER_TOKEN", "sk-owner-secret")
            .env("NO_COLOR", "1");
        let (mut child, screen, mut keyboard) = Pty::open().spawn(command);
        let asked = screen.wait_for("[n]o: ");
        assert!(
            asked.contains(
                "start the project's MCP server proj (TOKEN='$OWNER_TOKEN' /nonexistent/proj-mcp)? \
                 [y] this time / [a] always in this folder / [n]o: "
            ),
            "{asked}"
        );
        assert!(!asked.contains("sk-owner-secret"), "{asked}");
        std::io::Write::write_all(&mut keyboard, answer.as_bytes()).unwrap();
        let shown = screen.wait_for(said);
        let code = super::common::wait_bounded(&mut child, std::time::Duration::from_secs(60));
        assert_eq!(code, 0, "{shown}");
        assert_eq!(approvals.exists(), stored, "{answer:?}");
    }
    let kept = std::fs::read_to_string(&approvals).unwrap();
    assert!(
        kept.contains("$OWNER_TOKEN") && !kept.contains("sk-owner-secret"),
        "{kept}"
    );
}

#[test]
fn a_silent_model_shows_a_live_line_and_ctrl_c_ends_the_wait() {
    let run = Run::new();
    let fake = FakeProvider::start();
    // The answer starts and never ends: only Stop ends the turn.
    fake.push([Reply::Hang(Vec::new())]);
    let base = format!("{}/v1", fake.url());
    let mut command = run.run(&base, &["think"]);
    command.env("NO_COLOR", "1");
    let (mut child, screen, mut keyboard) = Pty::open().spawn(command);
    screen.wait_for("… waiting for the model (");
    std::io::Write::write_all(&mut keyboard, b"\x03").unwrap();
    let code = super::common::wait_bounded(&mut child, std::time::Duration::from_secs(60));
    let shown = screen.wait_for("pen: continue:");
    assert_eq!(code, 130, "{shown}");
}
