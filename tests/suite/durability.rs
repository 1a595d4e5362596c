//! Issue 11, item 1: no kill point bricks a session. The real `pen run` runs a multi-call turn
//! (commands, reads, edits, a create) against the fake provider and dies at a seeded random
//! point: right after its N-th committed append (the `PEN_TEST_HOOKS` crash point, which
//! aborts the process as abruptly as `kill -9`), or by a real SIGKILL while a `sleep` runs.
//! After each (and, for one in four, after the recovering run is itself killed within its first
//! appends), a restarted `pen run --session` prompts again, and the test checks that the turn
//! ends `end_turn`, that every entry committed before the kill is still there, and that every
//! call of every message has exactly one result. It prints the figures.
//!
//! `PEN_DURABILITY_KILL_POINTS` (default 100) and `PEN_DURABILITY_SEED` (default 11) change
//! the count and the seed; `scripts/durability.sh` runs it at 1,000.

use super::common::env_number;
use super::fake_provider::{FakeProvider, Reply, openai_frames};
use pen::providers::{ToolCall, Usage};
use pen::session::{Entry, EntryKind, SessionStore};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

/// The committed appends of one clean run of [`turn_script`]: the session's context (its
/// instructions and environment, before the first request); the prompt; per step the
/// assistant message and a call and a result per call (3 + 2 + 2 calls); the final answer;
/// the `turn_ended` event.
const CLEAN_RUN_APPENDS: u64 = 1 + 1 + (1 + 6) + (1 + 4) + (1 + 4) + 1 + 1;

/// Real SIGKILLs while the first of two calls (a `sleep`) runs, besides the crash points.
const SIGKILL_RUNS: usize = 3;

fn call(id: &str, name: &str, args: Value) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: args.to_string(),
    }
}

fn frames(text: &str, calls: &[ToolCall]) -> Reply {
    let usage = Usage::new(100, 10);
    Reply::Stream(openai_frames(&[text], calls, usage))
}

/// A four-step turn of seven calls: a command, reads, a listing, an edit, a create.
fn turn_script() -> Vec<Reply> {
    vec![
        frames(
            "Looking.",
            &[
                call(
                    "c1",
                    "pen_command",
                    json!({"command": "echo one > out.txt"}),
                ),
                call("c2", "pen_read", json!({"path": "a.txt"})),
                call("c3", "pen_list", json!({"path": "."})),
            ],
        ),
        frames(
            "Editing.",
            &[
                call(
                    "c4",
                    "pen_edit",
                    json!({"path": "a.txt", "edits": [{"old_text": "alpha", "new_text": "beta"}]}),
                ),
                call("c5", "pen_read", json!({"path": "out.txt"})),
            ],
        ),
        frames(
            "Creating.",
            &[
                call(
                    "c6",
                    "pen_create",
                    json!({"path": "b.txt", "content": "bee\n"}),
                ),
                call("c7", "pen_command", json!({"command": "true"})),
            ],
        ),
        frames("Done.", &[]),
    ]
}

/// A workspace, a data dir and a config that approves the tools that ask, as a headless run
/// has nobody to ask.
struct Run {
    data: tempfile::TempDir,
    root: tempfile::TempDir,
    config: tempfile::NamedTempFile,
}

impl Run {
    fn new() -> Run {
        let data = tempfile::tempdir().unwrap();
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("a.txt"), "alpha\n").unwrap();
        let config = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(
            config.path(),
            "auto_approve = [\"pen_command\", \"pen_edit\", \"pen_create\"]\n",
        )
        .unwrap();
        Run { data, root, config }
    }

    fn pen_run(
        &self,
        fake: &FakeProvider,
        session: Option<&str>,
        hooks: Option<String>,
    ) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_pen"));
        command
            .args([
                "run",
                "--json",
                "--provider",
                "openai",
                "--model",
                "fake-model",
            ])
            .arg("--base-url")
            .arg(format!("{}/v1", fake.url()));
        if let Some(session) = session {
            command.args(["--session", session]);
        }
        command
            .arg(if session.is_some() { "continue" } else { "go" })
            .current_dir(self.root.path())
            .env("PEN_DATA_DIR", self.data.path())
            .env("PEN_CONFIG", self.config.path())
            .env_remove(pen::session::TEST_HOOKS_ENV)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(hooks) = hooks {
            command.env(pen::session::TEST_HOOKS_ENV, hooks);
        }
        command
    }

    fn entries(&self) -> (String, Vec<Entry>) {
        let store = SessionStore::open(self.data.path()).unwrap();
        let sessions = store.list_sessions(None, 10).unwrap().sessions;
        assert_eq!(sessions.len(), 1, "one session per run");
        let id = sessions[0].id.clone();
        let mut entries = Vec::new();
        let mut after = None;
        loop {
            let page = store.transcript(&id, after, 500).unwrap();
            entries.extend(page.entries);
            match page.next_after_seq {
                Some(next) => after = Some(next),
                None => return (id, entries),
            }
        }
    }

    /// Prompts the session again in a new `pen run`; whether the turn ended `end_turn`.
    fn restart(&self, session: &str) -> Result<(), String> {
        self.restart_with(session, None)
    }

    /// [`Run::restart`] with test hooks (a crash point in the recovering run itself).
    fn restart_with(&self, session: &str, hooks: Option<String>) -> Result<(), String> {
        let fake = FakeProvider::start();
        fake.push([frames("Recovered.", &[])]);
        let output = self.pen_run(&fake, Some(session), hooks).output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let outcome: Option<Value> = stdout
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .find(|line| line.get("stopReason").is_some());
        match outcome {
            Some(outcome) if outcome["stopReason"] == "end_turn" && output.status.success() => {
                Ok(())
            }
            other => Err(format!(
                "{other:?} / {}",
                String::from_utf8_lossy(&output.stderr)
            )),
        }
    }
}

/// Calls of assistant messages whose number of results is not one, and results of no call.
fn miscounted_calls(entries: &[Entry]) -> Vec<String> {
    let calls: Vec<String> = entries
        .iter()
        .filter(|e| e.kind == EntryKind::AssistantMessage)
        .flat_map(|e| {
            e.payload["tool_calls"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|call| call["id"].as_str().map(str::to_string))
        .collect();
    let mut wrong = Vec::new();
    for id in &calls {
        let results = entries
            .iter()
            .filter(|e| e.kind == EntryKind::ToolResult && e.payload["call_id"] == id.as_str())
            .count();
        if results != 1 {
            wrong.push(format!("{id}: {results} results"));
        }
    }
    for entry in entries.iter().filter(|e| e.kind == EntryKind::ToolResult) {
        let id = entry.payload["call_id"].as_str().unwrap_or_default();
        if !calls.iter().any(|call| call == id) {
            wrong.push(format!("entry {}: a result of no call", entry.seq));
        }
    }
    wrong
}

#[derive(Default)]
struct Figures {
    kill_points: usize,
    bricked: usize,
    lost_entries: usize,
    miscounted_calls: usize,
    failures: Vec<String>,
}

impl Figures {
    /// Restarts after a kill and checks the session.
    fn check(&mut self, what: &str, run: &Run, before: &[Entry], session: &str) {
        self.kill_points += 1;
        if let Err(why) = run.restart(session) {
            self.bricked += 1;
            self.failures.push(format!("{what}: bricked: {why}"));
        }
        let (_, after) = run.entries();
        let lost = before
            .iter()
            .filter(|entry| after.get((entry.seq - 1) as usize) != Some(entry))
            .count();
        if lost > 0 {
            self.lost_entries += lost;
            self.failures.push(format!("{what}: {lost} entries lost"));
        }
        let wrong = miscounted_calls(&after);
        if !wrong.is_empty() {
            self.miscounted_calls += wrong.len();
            self.failures.push(format!("{what}: {wrong:?}"));
        }
    }
}

/// One crash at the `append`-th committed append of the turn; with `again`, the first
/// recovering run crashes too, at its `again`-th append (the recovery's own batch, its prompt,
/// its answer), before the restart that must end `end_turn`.
fn crash_point(figures: &mut Figures, append: u64, again: Option<u64>) {
    let run = Run::new();
    let fake = FakeProvider::start();
    fake.push(turn_script());
    let output = run
        .pen_run(&fake, None, Some(format!("crash_after_appends={append}")))
        .output()
        .unwrap();
    let what = match again {
        Some(again) => format!("crash after append {append}, then after {again} while recovering"),
        None => format!("crash after append {append}"),
    };
    use std::os::unix::process::ExitStatusExt;
    if output.status.signal() != Some(libc::SIGABRT) {
        figures.failures.push(format!(
            "{what}: pen did not abort at the crash point ({:?}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let (session, before) = run.entries();
    // Every append committed before the abort is there, and nothing after it.
    if before.len() as u64 != append {
        figures.lost_entries += (append as usize).saturating_sub(before.len());
        figures
            .failures
            .push(format!("{what}: {} entries after the crash", before.len()));
    }
    if let Some(again) = again {
        // Whether it got as far as ending its turn or not, it leaves nothing to repair by hand.
        let _ = run.restart_with(&session, Some(format!("crash_after_appends={again}")));
    }
    figures.check(&what, &run, &before, &session);
}

/// One real SIGKILL while the first call of `[pen_command "sleep 5", pen_read]` runs: the
/// reproduction in the issue.
fn sigkill_during_a_command(figures: &mut Figures) {
    let run = Run::new();
    let fake = FakeProvider::start();
    fake.push([
        frames(
            "Waiting.",
            &[
                call("sleep", "pen_command", json!({"command": "sleep 5"})),
                call("read", "pen_read", json!({"path": "a.txt"})),
            ],
        ),
        frames("Done.", &[]),
    ]);
    let mut child = run.pen_run(&fake, None, None).spawn().unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    // The event that says the command started: the kill lands while it runs.
    let started = stdout.lines().map_while(Result::ok).any(|line| {
        serde_json::from_str::<Value>(&line).is_ok_and(|event| {
            event["kind"] == "tool_call_started" && event["data"]["callId"] == "sleep"
        })
    });
    child.kill().unwrap();
    child.wait().unwrap();
    if !started {
        figures
            .failures
            .push("sigkill: the command never started".into());
    }
    let (session, before) = run.entries();
    figures.check("sigkill during sleep", &run, &before, &session);
    let (_, after) = run.entries();
    let status = |id: &str| {
        after
            .iter()
            .find(|e| e.kind == EntryKind::ToolResult && e.payload["call_id"] == id)
            .map(|e| e.payload["status"].clone())
    };
    if status("sleep") != Some(json!("interrupted"))
        || status("read") != Some(json!("not_executed"))
    {
        figures.failures.push(format!(
            "sigkill: sleep answered {:?}, read answered {:?}",
            status("sleep"),
            status("read")
        ));
    }
}

#[test]
fn no_kill_point_bricks_a_session_or_loses_an_entry() {
    let kill_points = env_number("PEN_DURABILITY_KILL_POINTS", 100);
    let seed = env_number("PEN_DURABILITY_SEED", 11);
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut figures = Figures::default();
    for _ in 0..SIGKILL_RUNS {
        sigkill_during_a_command(&mut figures);
    }
    let crash_points = kill_points.saturating_sub(SIGKILL_RUNS as u64);
    for _ in 0..crash_points {
        let append = rng.u64(1..=CLEAN_RUN_APPENDS);
        // One in four recoveries is itself killed, within its first few appends.
        let again = (rng.u8(0..4) == 0).then(|| rng.u64(1..=3));
        crash_point(&mut figures, append, again);
    }
    println!(
        "kill points: {}, bricked: {}, lost entries: {}, calls with != 1 result: {} (seed {seed})",
        figures.kill_points, figures.bricked, figures.lost_entries, figures.miscounted_calls
    );
    assert!(
        figures.failures.is_empty(),
        "{} failures, the first ones:\n{}",
        figures.failures.len(),
        figures.failures[..figures.failures.len().min(10)].join("\n")
    );
}

/// The clean run appends exactly [`CLEAN_RUN_APPENDS`] entries, so the crash points cover
/// the whole turn.
#[test]
fn the_clean_turn_has_the_appends_the_kill_points_cover() {
    let run = Run::new();
    let fake = FakeProvider::start();
    fake.push(turn_script());
    let output = run.pen_run(&fake, None, None).output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let (_, entries) = run.entries();
    assert_eq!(entries.len() as u64, CLEAN_RUN_APPENDS);
    assert!(miscounted_calls(&entries).is_empty());
    let statuses: Vec<&str> = entries
        .iter()
        .filter(|e| e.kind == EntryKind::ToolResult)
        .map(|e| e.payload["status"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(statuses, ["done"; 7], "every call ran: {entries:?}");
    assert_eq!(
        std::fs::read_to_string(run.root.path().join("a.txt")).unwrap(),
        "beta\n"
    );
}
