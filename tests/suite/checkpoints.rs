//! Issue 19: checkpoints through the real binary. `pen run` (the fake provider scripting the
//! model's calls) writes files; `pen revert` and `pen fork`, separate processes on the same data
//! directory, read the checkpoints it recorded and undo its turns, byte for byte.

use super::common::env_number;
use super::fake_provider::{FakeProvider, Reply, openai_frames};
use super::lsp_client::{LspClient, file_uri};
use pen::providers::{ToolCall, Usage};
use pen::session::SessionStore;
use pen::tools::source::hash_bytes;
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};

fn call(id: &str, name: &str, args: Value) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: args.to_string(),
    }
}

fn frames(text: &str, calls: &[ToolCall]) -> Reply {
    Reply::Stream(openai_frames(&[text], calls, Usage::new(100, 10)))
}

/// A pen_edit of `path` from `old` to `new`, against the file's current `bytes`.
fn edit(id: &str, path: &str, bytes: &[u8], old: &str, new: &str) -> ToolCall {
    call(
        id,
        "pen_edit",
        json!({
            "path": path,
            "edits": [{"old_text": old, "new_text": new}],
            "expected_hash": hash_bytes(bytes),
        }),
    )
}

/// A workspace, a data dir and a config that approves the writing tools.
struct Env {
    data: tempfile::TempDir,
    root: tempfile::TempDir,
    config: tempfile::NamedTempFile,
}

impl Env {
    fn new() -> Env {
        Env::with_config("auto_approve = [\"pen_command\", \"pen_edit\", \"pen_create\"]\n")
    }

    fn with_config(config_text: &str) -> Env {
        let config = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(config.path(), config_text).unwrap();
        Env {
            data: tempfile::tempdir().unwrap(),
            root: tempfile::tempdir().unwrap(),
            config,
        }
    }

    fn path(&self, name: &str) -> std::path::PathBuf {
        self.root.path().join(name)
    }

    fn pen(&self) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_pen"));
        command
            .current_dir(self.root.path())
            .env("PEN_DATA_DIR", self.data.path())
            .env("PEN_CONFIG", self.config.path())
            .env_remove(pen::session::TEST_HOOKS_ENV)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }

    /// One `pen run` turn answering with `replies`; its output.
    fn run(&self, session: Option<&str>, replies: Vec<Reply>, hooks: Option<&str>) -> Output {
        let fake = FakeProvider::start();
        fake.push(replies);
        self.run_with(&fake, session, hooks)
    }

    fn run_with(&self, fake: &FakeProvider, session: Option<&str>, hooks: Option<&str>) -> Output {
        let mut command = self.pen();
        command
            .args(["run", "--json", "--provider", "openai", "--model", "fake"])
            .arg("--base-url")
            .arg(format!("{}/v1", fake.url()));
        if let Some(session) = session {
            command.args(["--session", session]);
        }
        command.arg("go");
        if let Some(hooks) = hooks {
            command.env(pen::session::TEST_HOOKS_ENV, hooks);
        }
        command.output().unwrap()
    }

    fn store(&self) -> SessionStore {
        SessionStore::open(self.data.path()).unwrap()
    }

    /// The only session's id.
    fn session(&self) -> String {
        let sessions = self.store().list_sessions(None, 10).unwrap().sessions;
        assert_eq!(sessions.len(), 1, "{sessions:?}");
        sessions[0].id.clone()
    }

    fn turns(&self, session: &str) -> Vec<String> {
        self.store().turns(session).unwrap()
    }

    /// `pen revert` with `args`; its exit code and result.
    fn revert(&self, args: &[&str]) -> (i32, Value) {
        let output = self.pen().arg("revert").args(args).output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let result = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
            panic!(
                "{e}: {stdout} / {}",
                String::from_utf8_lossy(&output.stderr)
            )
        });
        (output.status.code().unwrap_or(-1), result)
    }
}

fn ended(output: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|line| line.get("stopReason").is_some())
        .unwrap_or_else(|| {
            panic!(
                "no outcome: {stdout} / {}",
                String::from_utf8_lossy(&output.stderr)
            )
        })
}

fn statuses(result: &Value) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = result["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_string(),
                f["status"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    files.sort();
    files
}

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut items: Vec<(String, String)> = items
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    items.sort();
    items
}

const CRLF: &[u8] = b"one\r\ntwo\r\nthree\r\n";
const BOM: &[u8] = b"\xEF\xBB\xBFalpha\nbeta\n";
const NO_FINAL_NEWLINE: &[u8] = b"first\nlast";

#[test]
fn a_revert_restores_every_byte_and_mode_and_deletes_what_the_turn_created() {
    let env = Env::new();
    std::fs::write(env.path("crlf.txt"), CRLF).unwrap();
    std::fs::write(env.path("bom.txt"), BOM).unwrap();
    std::fs::write(env.path("nonl.sh"), NO_FINAL_NEWLINE).unwrap();
    std::fs::set_permissions(env.path("nonl.sh"), std::fs::Permissions::from_mode(0o751)).unwrap();
    let output = env.run(
        None,
        vec![
            frames(
                "Editing.",
                &[
                    edit("c1", "crlf.txt", CRLF, "two", "TWO\nand a half"),
                    edit("c2", "bom.txt", BOM, "alpha", "ALPHA"),
                    edit("c3", "nonl.sh", NO_FINAL_NEWLINE, "last", "LAST"),
                    call(
                        "c4",
                        "pen_create",
                        json!({"path": "new/dir/made.txt", "content": "made\n"}),
                    ),
                    call(
                        "c5",
                        "pen_command",
                        json!({"command": "echo side > effect.txt"}),
                    ),
                ],
            ),
            frames("Done.", &[]),
        ],
        None,
    );
    assert_eq!(ended(&output)["stopReason"], "end_turn");
    assert_eq!(
        std::fs::read(env.path("crlf.txt")).unwrap(),
        b"one\r\nTWO\r\nand a half\r\nthree\r\n"
    );
    assert!(env.path("new/dir/made.txt").exists());
    let session = env.session();

    // No TURN: the last one.
    let (code, result) = env.revert(&[&session]);
    assert_eq!(code, 0, "{result}");
    assert_eq!(
        statuses(&result),
        pairs(&[
            ("crlf.txt", "reverted"),
            ("bom.txt", "reverted"),
            ("nonl.sh", "reverted"),
            ("new/dir/made.txt", "deleted"),
        ])
    );
    assert_eq!(std::fs::read(env.path("crlf.txt")).unwrap(), CRLF);
    assert_eq!(std::fs::read(env.path("bom.txt")).unwrap(), BOM);
    assert_eq!(
        std::fs::read(env.path("nonl.sh")).unwrap(),
        NO_FINAL_NEWLINE
    );
    let mode = std::fs::metadata(env.path("nonl.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o751);
    assert!(!env.path("new/dir/made.txt").exists());
    // The command's effect is named, not reverted.
    assert_eq!(result["commands"][0]["tool"], "pen_command");
    assert_eq!(result["commands"][0]["summary"], "echo side > effect.txt");
    assert!(env.path("effect.txt").exists());

    // The revert is in the transcript, and the model is told with its next prompt.
    let fake = FakeProvider::start();
    fake.push([frames("Noted.", &[])]);
    let output = env.run_with(&fake, Some(&session), None);
    assert_eq!(ended(&output)["stopReason"], "end_turn");
    let request = fake.requests().pop().unwrap();
    let messages = request.body["messages"].as_array().unwrap();
    let last = messages.last().unwrap()["content"].to_string();
    assert!(
        last.contains("[pen] The owner reverted the file changes of 1 turn(s)"),
        "{last}"
    );
    assert!(last.contains("crlf.txt: restored"), "{last}");
    assert!(last.contains("effects of 1 command(s)"), "{last}");
    let store = env.store();
    let entries = store.transcript(&session, None, 500).unwrap().entries;
    assert!(
        entries
            .iter()
            .any(|e| e.payload["type"] == "files_reverted"),
        "{entries:?}"
    );
}

/// One turn that edits a new `a.txt` from "alpha" to "beta" and ends.
fn edit_alpha_to_beta(env: &Env) {
    std::fs::write(env.path("a.txt"), "alpha\n").unwrap();
    let output = env.run(
        None,
        vec![
            frames(
                "Editing.",
                &[edit("c1", "a.txt", b"alpha\n", "alpha", "beta")],
            ),
            frames("Done.", &[]),
        ],
        None,
    );
    assert_eq!(ended(&output)["stopReason"], "end_turn");
}

#[test]
fn a_file_changed_after_pen_wrote_it_is_a_conflict_until_forced() {
    let env = Env::new();
    edit_alpha_to_beta(&env);
    std::fs::write(env.path("a.txt"), "beta\nthe user's line\n").unwrap();
    let session = env.session();

    let (code, result) = env.revert(&[&session]);
    assert_eq!(code, 2, "{result}");
    assert_eq!(statuses(&result), pairs(&[("a.txt", "conflict")]));
    let diff = result["files"][0]["diff"].as_str().unwrap();
    assert!(diff.contains("-the user's line"), "{diff}");
    assert!(diff.contains("+alpha"), "{diff}");
    assert_eq!(
        std::fs::read_to_string(env.path("a.txt")).unwrap(),
        "beta\nthe user's line\n"
    );

    let turn = env.turns(&session)[0].clone();
    let (code, result) = env.revert(&[&session, &turn, "--force"]);
    assert_eq!(code, 0, "{result}");
    assert_eq!(statuses(&result), pairs(&[("a.txt", "reverted")]));
    assert_eq!(
        std::fs::read_to_string(env.path("a.txt")).unwrap(),
        "alpha\n"
    );
}

#[test]
fn reverting_turn_two_of_three_undoes_three_then_two_and_a_fork_keeps_the_history_before() {
    let env = Env::new();
    std::fs::write(env.path("f.txt"), "one\n").unwrap();
    let output = env.run(
        None,
        vec![
            frames("1", &[edit("a1", "f.txt", b"one\n", "one", "two")]),
            frames("Done.", &[]),
        ],
        None,
    );
    assert_eq!(ended(&output)["stopReason"], "end_turn");
    let session = env.session();
    for (step, (old, new)) in [("two", "three"), ("three", "four")]
        .into_iter()
        .enumerate()
    {
        let mut calls = vec![edit(
            &format!("b{step}"),
            "f.txt",
            format!("{old}\n").as_bytes(),
            old,
            new,
        )];
        if step == 0 {
            calls.push(call(
                "g",
                "pen_create",
                json!({"path": "g.txt", "content": "made in turn two\n"}),
            ));
        }
        let output = env.run(
            Some(&session),
            vec![frames("n", &calls), frames("Done.", &[])],
            None,
        );
        assert_eq!(ended(&output)["stopReason"], "end_turn");
    }
    assert_eq!(
        std::fs::read_to_string(env.path("f.txt")).unwrap(),
        "four\n"
    );
    let turns = env.turns(&session);
    assert_eq!(turns.len(), 3);

    // The fork first: the history before turn two, in a new session; the original unchanged.
    let store = env.store();
    let before_fork = store.transcript(&session, None, 500).unwrap().entries;
    let output = env
        .pen()
        .args(["fork", &session, &turns[1]])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let forked: Value = serde_json::from_slice(&output.stdout).unwrap();
    let fork_id = forked["sessionId"].as_str().unwrap().to_string();
    assert_ne!(fork_id, session);
    let after_fork = store.transcript(&session, None, 500).unwrap().entries;
    assert_eq!(before_fork, after_fork);
    let fork_entries = store.transcript(&fork_id, None, 500).unwrap().entries;
    let first_of_two = before_fork
        .iter()
        .position(|e| e.turn_id.as_deref() == Some(turns[1].as_str()))
        .unwrap();
    assert_eq!(fork_entries.len(), first_of_two);
    for (fork, original) in fork_entries.iter().zip(&before_fork) {
        assert_eq!(
            (fork.seq, &fork.kind, &fork.turn_id, &fork.payload),
            (
                original.seq,
                &original.kind,
                &original.turn_id,
                &original.payload
            )
        );
    }
    let listed = env.pen().arg("sessions").output().unwrap();
    assert!(String::from_utf8_lossy(&listed.stdout).contains(&fork_id));
    // The fork is resumable.
    let output = env.run(Some(&fork_id), vec![frames("Forked.", &[])], None);
    assert_eq!(ended(&output)["stopReason"], "end_turn");

    let (code, result) = env.revert(&[&session, &turns[1]]);
    assert_eq!(code, 0, "{result}");
    assert_eq!(result["turns"], json!([turns[2], turns[1]]));
    assert_eq!(
        statuses(&result),
        pairs(&[("f.txt", "reverted"), ("g.txt", "deleted")])
    );
    let f = result["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "f.txt")
        .unwrap();
    assert_eq!(f["turns"], json!([turns[2], turns[1]]));
    assert_eq!(std::fs::read_to_string(env.path("f.txt")).unwrap(), "two\n");
    assert!(!env.path("g.txt").exists());
}

#[test]
fn a_pre_image_over_the_store_limit_is_named_in_the_approval_request_before_the_write() {
    // pen_edit is not approved ahead, so pen run asks (and, with no terminal, denies).
    let env = Env::with_config("checkpoint_store_bytes = 1048576\n");
    let big = "x".repeat(1_100_000) + "\nend\n";
    std::fs::write(env.path("big.txt"), &big).unwrap();
    std::fs::write(env.path("small.txt"), "small\n").unwrap();
    let output = env.run(
        None,
        vec![
            frames(
                "Editing.",
                &[
                    edit("c1", "big.txt", big.as_bytes(), "end", "END"),
                    edit("c2", "small.txt", b"small\n", "small", "SMALL"),
                ],
            ),
            frames("Done.", &[]),
        ],
        None,
    );
    assert_eq!(ended(&output)["stopReason"], "end_turn");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let approvals: Vec<Value> = stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line["kind"] == "approval_requested")
        .collect();
    assert_eq!(approvals.len(), 2, "{stdout}");
    let note = approvals[0]["data"]["notRevertible"]
        .as_str()
        .unwrap_or_else(|| panic!("{}", approvals[0]));
    assert!(note.starts_with("not revertible: too large"), "{note}");
    assert!(
        approvals[1]["data"].get("notRevertible").is_none(),
        "{}",
        approvals[1]
    );
    // Nothing was written: the owner (nobody, here) was asked first.
    assert_eq!(std::fs::read_to_string(env.path("big.txt")).unwrap(), big);
}

#[test]
fn a_write_over_the_store_limit_is_reported_not_revertible() {
    let env = Env::with_config("checkpoint_store_bytes = 1048576\nauto_approve = [\"pen_edit\"]\n");
    let big = "x".repeat(1_100_000) + "\nend\n";
    std::fs::write(env.path("big.txt"), &big).unwrap();
    let output = env.run(
        None,
        vec![
            frames(
                "Editing.",
                &[edit("c1", "big.txt", big.as_bytes(), "end", "END")],
            ),
            frames("Done.", &[]),
        ],
        None,
    );
    assert_eq!(ended(&output)["stopReason"], "end_turn");
    let (code, result) = env.revert(&[&env.session()]);
    assert_eq!(code, 2, "{result}");
    assert_eq!(statuses(&result), pairs(&[("big.txt", "not_revertible")]));
    let reason = result["files"][0]["reason"].as_str().unwrap();
    assert!(reason.starts_with("not revertible: too large"), "{reason}");
}

/// Kill -9 right after the n-th pre-image commit, before its write: the files hold their
/// pre-image (the last write) or post-image (the ones before), and the revert handles both.
#[test]
fn a_kill_between_the_pre_image_and_the_write_still_reverts_correctly() {
    for crash_after in [1, 2] {
        let env = Env::new();
        std::fs::write(env.path("a.txt"), "alpha\n").unwrap();
        std::fs::write(env.path("b.txt"), "bravo\n").unwrap();
        let output = env.run(
            None,
            vec![
                frames(
                    "Editing.",
                    &[
                        edit("c1", "a.txt", b"alpha\n", "alpha", "ALPHA"),
                        edit("c2", "b.txt", b"bravo\n", "bravo", "BRAVO"),
                    ],
                ),
                frames("Done.", &[]),
            ],
            Some(&format!("crash_after_checkpoints={crash_after}")),
        );
        assert!(!output.status.success(), "the hook aborts pen run");
        let a = std::fs::read_to_string(env.path("a.txt")).unwrap();
        assert_eq!(
            a,
            if crash_after == 1 {
                "alpha\n"
            } else {
                "ALPHA\n"
            }
        );
        assert_eq!(
            std::fs::read_to_string(env.path("b.txt")).unwrap(),
            "bravo\n"
        );
        let session = env.session();
        let (code, result) = env.revert(&[&session]);
        assert_eq!(code, 0, "{result}");
        let expected = if crash_after == 1 {
            vec![("a.txt", "unchanged")]
        } else {
            vec![("a.txt", "reverted"), ("b.txt", "unchanged")]
        };
        assert_eq!(statuses(&result), pairs(&expected), "{result}");
        assert_eq!(
            std::fs::read_to_string(env.path("a.txt")).unwrap(),
            "alpha\n"
        );
        assert_eq!(
            std::fs::read_to_string(env.path("b.txt")).unwrap(),
            "bravo\n"
        );
    }
}

#[test]
fn a_revert_of_an_unknown_turn_or_session_fails_and_changes_nothing() {
    let env = Env::new();
    edit_alpha_to_beta(&env);
    let session = env.session();
    for args in [vec![session.as_str(), "t_nope"], vec!["s_nope"]] {
        let output = env.pen().arg("revert").args(&args).output().unwrap();
        assert_eq!(output.status.code(), Some(1), "{output:?}");
        assert!(!String::from_utf8_lossy(&output.stderr).is_empty());
    }
    let output = env
        .pen()
        .args(["fork", &session, "t_nope"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert_eq!(
        env.store().list_sessions(None, 10).unwrap().sessions.len(),
        1
    );
    assert_eq!(
        std::fs::read_to_string(env.path("a.txt")).unwrap(),
        "beta\n"
    );
}

/// `pen serve` with the fake provider and the writing tools approved ahead.
fn daemon(data: &std::path::Path, root: &std::path::Path, fake: &FakeProvider) -> LspClient {
    let base = format!("{}/v1", fake.url());
    let mut client = LspClient::spawn(
        data,
        root,
        &[
            ("PEN_PROVIDER", "openai"),
            ("PEN_BASE_URL", &base),
            ("PEN_MODEL", "fake-model"),
            ("PEN_AUTO_APPROVE", "pen_edit,pen_create"),
        ],
    );
    client.initialize(root, &["utf-16"]);
    client
}

/// Two daemons on one data directory: the second reverts what the first wrote (it sees the
/// first's checkpoints); the first then reverts the open buffer through `workspace/applyEdit`.
#[test]
fn two_daemons_see_the_same_checkpoints_and_an_open_buffer_reverts_through_the_editor() {
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let file = root.path().join("f.txt");
    std::fs::write(&file, "alpha\n").unwrap();
    let fake = FakeProvider::start();
    fake.push([
        frames(
            "Editing.",
            &[
                edit("c1", "f.txt", b"alpha\n", "alpha", "beta"),
                call(
                    "c2",
                    "pen_create",
                    json!({"path": "g.txt", "content": "gee\n"}),
                ),
            ],
        ),
        frames("Done.", &[]),
    ]);
    let mut a = daemon(data.path(), root.path(), &fake);
    let edits: Arc<Mutex<Vec<Value>>> = Arc::default();
    let seen = Arc::clone(&edits);
    a.on_request(move |method, params| match method {
        "workspace/applyEdit" => {
            seen.lock().unwrap().push(params.clone());
            json!({"applied": true})
        }
        _ => Value::Null,
    });
    let uri = file_uri(&file);
    a.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": uri, "languageId": "text", "version": 1, "text": "alpha\n"}}),
    );
    let session = a.new_session();
    let answer = a.prompt(&session, "go");
    assert_eq!(answer["stopReason"], "end_turn", "{answer}");
    let turn = answer["turnId"].as_str().unwrap().to_string();
    // The editor applied pen's edit to its buffer (the disk still has the old text).
    assert_eq!(edits.lock().unwrap().len(), 1);
    a.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": uri, "version": 2}, "contentChanges": [{"text": "beta\n"}]}),
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "alpha\n");
    assert!(root.path().join("g.txt").exists());

    // The second daemon sees the first's checkpoints: it deletes the created file, and finds
    // f.txt on its disk already as it was.
    let mut b = daemon(data.path(), root.path(), &FakeProvider::start());
    let result = b.request(
        "pen/revertTurn",
        json!({"sessionId": session, "turnId": turn}),
    );
    assert_eq!(
        statuses(&result),
        pairs(&[("f.txt", "unchanged"), ("g.txt", "deleted")]),
        "{result}"
    );
    assert!(!root.path().join("g.txt").exists());
    let unknown = b.request_raw(
        "pen/revertTurn",
        json!({"sessionId": session, "turnId": "t_nope"}),
    );
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");

    // The first daemon has the buffer: its revert goes through the editor, as an edit of the
    // buffer back to the text before the turn (so the editor's undo takes it back).
    let result = a.request(
        "pen/revertTurn",
        json!({"sessionId": session, "turnId": turn}),
    );
    assert_eq!(
        statuses(&result),
        pairs(&[("f.txt", "reverted"), ("g.txt", "unchanged")]),
        "{result}"
    );
    let edits = edits.lock().unwrap().clone();
    assert_eq!(edits.len(), 2, "{edits:?}");
    let changes = &edits[1]["edit"]["changes"][&uri];
    assert_eq!(
        changes,
        &json!([{
            "range": {"start": {"line": 0, "character": 0}, "end": {"line": 1, "character": 0}},
            "newText": "alpha\n"
        }])
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "alpha\n");

    // A fork over the wire, listed and resumable.
    let forked = a.request(
        "pen/forkSession",
        json!({"sessionId": session, "beforeTurnId": turn}),
    );
    let fork = forked["sessionId"].as_str().unwrap();
    assert_eq!(forked["forkedFrom"], json!(session));
    assert!(a.transcript(fork).is_empty());
    a.close();
    b.close();
}

/// Issue 26, item 3, without force: pen created `config.local.json`; the owner renamed it to
/// `config.json` and linked the old name to it. The revert acts on the recorded path itself:
/// the link there is a conflict, and neither it nor `config.json` is touched.
#[test]
fn a_link_where_pen_left_a_file_is_a_conflict_and_its_target_is_kept() {
    let env = Env::new();
    let output = env.run(
        None,
        vec![
            frames(
                "Creating.",
                &[call(
                    "c1",
                    "pen_create",
                    json!({"path": "config.local.json", "content": "{\"debug\": true}\n"}),
                )],
            ),
            frames("Done.", &[]),
        ],
        None,
    );
    assert_eq!(ended(&output)["stopReason"], "end_turn");
    std::fs::rename(env.path("config.local.json"), env.path("config.json")).unwrap();
    std::os::unix::fs::symlink("config.json", env.path("config.local.json")).unwrap();

    let (code, result) = env.revert(&[&env.session()]);
    assert_eq!(code, 2, "{result}");
    assert_eq!(
        statuses(&result),
        pairs(&[("config.local.json", "conflict")])
    );
    let reason = result["files"][0]["reason"].as_str().unwrap();
    assert!(reason.contains("symlink"), "{reason}");
    assert_eq!(
        std::fs::read_to_string(env.path("config.json")).unwrap(),
        "{\"debug\": true}\n"
    );
    assert!(
        std::fs::symlink_metadata(env.path("config.local.json"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

/// Issue 26, item 3, with force: the files a turn wrote were replaced by links to files it
/// never touched, a FIFO and a folder. Force replaces each link and the FIFO themselves —
/// the created file's link is removed, the edited file's link becomes the file pen found —
/// never following them: the untouched files keep their bytes. A folder is not removed.
#[test]
fn a_forced_revert_replaces_links_themselves_and_never_follows_them() {
    let env = Env::new();
    std::fs::write(env.path("edited.txt"), "alpha\n").unwrap();
    std::fs::write(env.path("piped.txt"), "pipe\n").unwrap();
    std::fs::write(env.path("foldered.txt"), "folder\n").unwrap();
    let output = env.run(
        None,
        vec![
            frames(
                "Writing.",
                &[
                    call(
                        "c1",
                        "pen_create",
                        json!({"path": "created.txt", "content": "made\n"}),
                    ),
                    edit("c2", "edited.txt", b"alpha\n", "alpha", "beta"),
                    edit("c3", "piped.txt", b"pipe\n", "pipe", "PIPE"),
                    edit("c4", "foldered.txt", b"folder\n", "folder", "FOLDER"),
                ],
            ),
            frames("Done.", &[]),
        ],
        None,
    );
    assert_eq!(ended(&output)["stopReason"], "end_turn");
    std::fs::write(env.path("untouched-1.txt"), "keep me one\n").unwrap();
    std::fs::write(env.path("untouched-2.txt"), "keep me two\n").unwrap();
    for (name, target) in [
        ("created.txt", "untouched-1.txt"),
        ("edited.txt", "untouched-2.txt"),
    ] {
        std::fs::remove_file(env.path(name)).unwrap();
        std::os::unix::fs::symlink(env.path(target), env.path(name)).unwrap();
    }
    std::fs::remove_file(env.path("piped.txt")).unwrap();
    let fifo = std::ffi::CString::new(env.path("piped.txt").to_str().unwrap()).unwrap();
    // SAFETY: mkfifo(3) on a NUL-terminated path this test owns.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    std::fs::remove_file(env.path("foldered.txt")).unwrap();
    std::fs::create_dir(env.path("foldered.txt")).unwrap();
    std::fs::write(env.path("foldered.txt/inside"), "mine\n").unwrap();

    let session = env.session();
    let (code, result) = env.revert(&[&session]);
    assert_eq!(code, 2, "{result}");
    assert_eq!(
        statuses(&result),
        pairs(&[
            ("created.txt", "conflict"),
            ("edited.txt", "conflict"),
            ("piped.txt", "conflict"),
            ("foldered.txt", "conflict"),
        ])
    );
    let turn = env.turns(&session)[0].clone();
    let (code, result) = env.revert(&[&session, &turn, "--force"]);
    assert_eq!(code, 2, "{result}");
    assert_eq!(
        statuses(&result),
        pairs(&[
            ("created.txt", "deleted"),
            ("edited.txt", "reverted"),
            ("piped.txt", "reverted"),
            ("foldered.txt", "not_revertible"),
        ])
    );
    assert_eq!(
        std::fs::read_to_string(env.path("untouched-1.txt")).unwrap(),
        "keep me one\n"
    );
    assert_eq!(
        std::fs::read_to_string(env.path("untouched-2.txt")).unwrap(),
        "keep me two\n"
    );
    assert!(std::fs::symlink_metadata(env.path("created.txt")).is_err());
    let edited = std::fs::symlink_metadata(env.path("edited.txt")).unwrap();
    assert!(edited.file_type().is_file());
    assert_eq!(
        std::fs::read_to_string(env.path("edited.txt")).unwrap(),
        "alpha\n"
    );
    assert_eq!(
        std::fs::read_to_string(env.path("piped.txt")).unwrap(),
        "pipe\n"
    );
    assert_eq!(
        std::fs::read_to_string(env.path("foldered.txt/inside")).unwrap(),
        "mine\n"
    );
}

/// Issue 26, item 3: a folder on the recorded path that became a link (here to a folder the
/// turn never wrote in) is never written through, forced or not.
#[test]
fn a_folder_on_the_path_that_became_a_link_is_never_written_through() {
    let env = Env::new();
    std::fs::create_dir(env.path("dir")).unwrap();
    std::fs::write(env.path("dir/f.txt"), "alpha\n").unwrap();
    let output = env.run(
        None,
        vec![
            frames(
                "Editing.",
                &[edit("c1", "dir/f.txt", b"alpha\n", "alpha", "beta")],
            ),
            frames("Done.", &[]),
        ],
        None,
    );
    assert_eq!(ended(&output)["stopReason"], "end_turn");
    std::fs::rename(env.path("dir"), env.path("moved")).unwrap();
    std::fs::create_dir(env.path("other")).unwrap();
    std::fs::write(env.path("other/f.txt"), "beta\n").unwrap();
    std::os::unix::fs::symlink("other", env.path("dir")).unwrap();
    let session = env.session();
    let turn = env.turns(&session)[0].clone();
    for args in [vec![session.as_str()], vec![&session, &turn, "--force"]] {
        let (code, result) = env.revert(&args);
        assert_eq!(code, 2, "{result}");
        assert_eq!(statuses(&result), pairs(&[("dir/f.txt", "not_revertible")]));
        assert_eq!(
            std::fs::read_to_string(env.path("other/f.txt")).unwrap(),
            "beta\n"
        );
    }
}

/// The files of the kill-point test: `f000.txt`… as the turn created them.
fn kill_point_file(i: u64) -> (String, String) {
    (format!("f{i:03}.txt"), format!("file {i}\n"))
}

/// Issue 26, item 7: a revert killed (`kill -9`-abrupt, the `crash_after_reverted_files` test
/// hook) after K of its F files. It recorded its start, so the next use knows: the next
/// `pen revert` reports the interrupted one with each file as it stands (K `unchanged`, F-K
/// `not_reverted`) and then finishes the job; a turn instead tells the model which files may
/// be half reverted. `PEN_REVERT_FILES` (default 24), `PEN_REVERT_KILL_POINTS` (default 3) and
/// `PEN_REVERT_SEED` (default 26) scale it; `scripts/revert-kill.sh` runs 600 files at 10
/// points and prints one line a point.
#[test]
fn a_revert_killed_midway_is_reported_on_the_next_use() {
    let count = env_number("PEN_REVERT_FILES", 24);
    let kill_points = env_number("PEN_REVERT_KILL_POINTS", 3);
    let mut rng = fastrand::Rng::with_seed(env_number("PEN_REVERT_SEED", 26));
    // A window that holds the turn's answer to all its calls (600 by the script).
    let env =
        Env::with_config("auto_approve = [\"pen_create\"]\ncontext_window_tokens = 1000000\n");
    let creates: Vec<ToolCall> = (0..count)
        .map(|i| {
            let (path, content) = kill_point_file(i);
            call(
                &format!("c{i}"),
                "pen_create",
                json!({"path": path, "content": content}),
            )
        })
        .collect();
    let output = env.run(
        None,
        vec![frames("Creating.", &creates), frames("Done.", &[])],
        None,
    );
    assert_eq!(ended(&output)["stopReason"], "end_turn");
    let session = env.session();
    let turn = env.turns(&session)[0].clone();
    // The database after the turn, put back before each kill point.
    let pristine = tempfile::tempdir().unwrap();
    // The database's files; folders (the folder's latest-session records) play no part.
    let files = |dir: &std::path::Path| {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap())
            .filter(|entry| entry.file_type().unwrap().is_file())
            .collect::<Vec<_>>()
    };
    let copy_dir = |from: &std::path::Path, to: &std::path::Path| {
        for entry in files(to) {
            std::fs::remove_file(entry.path()).unwrap();
        }
        for entry in files(from) {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    };
    copy_dir(env.data.path(), pristine.path());
    for point in 0..kill_points {
        copy_dir(pristine.path(), env.data.path());
        for i in 0..count {
            let (path, content) = kill_point_file(i);
            std::fs::write(env.path(&path), content).unwrap();
        }
        let kill_after = rng.u64(1..=count);
        let output = env
            .pen()
            .args(["revert", &session])
            .env(
                pen::session::TEST_HOOKS_ENV,
                format!("crash_after_reverted_files={kill_after}"),
            )
            .output()
            .unwrap();
        assert!(!output.status.success(), "the hook aborts pen revert");
        let left = (0..count)
            .filter(|&i| env.path(&kill_point_file(i).0).exists())
            .count() as u64;
        assert_eq!(left, count - kill_after, "the files it had not reached");

        if point % 2 == 1 {
            // The next use is a turn: the model is told which files may be half reverted.
            let fake = FakeProvider::start();
            fake.push([frames("Noted.", &[])]);
            let output = env.run_with(&fake, Some(&session), None);
            assert_eq!(ended(&output)["stopReason"], "end_turn");
            let request = fake.requests().pop().unwrap();
            let last =
                request.body["messages"].as_array().unwrap().last().unwrap()["content"].to_string();
            assert!(last.contains("was interrupted"), "{last}");
            assert!(last.contains("f000.txt"), "{last}");
            println!(
                "kill point {point}: killed after {kill_after} of {count} files; {} deleted, \
                 {left} left; the next turn told the model: \"A revert … was interrupted …\" \
                 naming all {count} files",
                count - left
            );
            continue;
        }
        // The next use is a revert: it reports the interrupted one, then finishes the job.
        let (code, result) = env.revert(&[&session, &turn]);
        assert_eq!(code, 0, "{result}");
        let interrupted = &result["interrupted"];
        let tally = |files: &Value, status: &str| {
            files
                .as_array()
                .unwrap()
                .iter()
                .filter(|f| f["status"] == status)
                .count() as u64
        };
        assert_eq!(
            (
                tally(&interrupted["files"], "unchanged"),
                tally(&interrupted["files"], "not_reverted")
            ),
            (kill_after, left),
            "{interrupted}"
        );
        assert!(
            interrupted["note"]
                .as_str()
                .unwrap()
                .contains("was interrupted"),
            "{interrupted}"
        );
        assert_eq!(
            (
                tally(&result["files"], "unchanged"),
                tally(&result["files"], "deleted")
            ),
            (kill_after, left),
            "{result}"
        );
        assert!((0..count).all(|i| !env.path(&kill_point_file(i).0).exists()));
        println!(
            "kill point {point}: killed after {kill_after} of {count} files; {} deleted, {left} \
             left; the next revert reported it interrupted ({} unchanged, {} not_reverted, {} \
             conflict) and deleted the {left} left",
            count - left,
            tally(&interrupted["files"], "unchanged"),
            tally(&interrupted["files"], "not_reverted"),
            tally(&interrupted["files"], "conflict"),
        );
    }
}

/// Issue 26, item 8: a fork carries the checkpoints of the turns it copies, so reverting a
/// copied turn inside the fork reverts its files; a fork an earlier pen made (which copied no
/// checkpoint) says so, never "They changed no file".
#[test]
fn a_copied_turn_reverts_inside_its_fork() {
    let env = Env::new();
    edit_alpha_to_beta(&env);
    let session = env.session();
    let output = env.run(Some(&session), vec![frames("Just talk.", &[])], None);
    assert_eq!(ended(&output)["stopReason"], "end_turn");
    let turns = env.turns(&session);
    let output = env
        .pen()
        .args(["fork", &session, &turns[1]])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let fork: Value = serde_json::from_slice(&output.stdout).unwrap();
    let fork = fork["sessionId"].as_str().unwrap().to_string();

    let (code, result) = env.revert(&[&fork, &turns[0]]);
    assert_eq!(code, 0, "{result}");
    assert_eq!(statuses(&result), pairs(&[("a.txt", "reverted")]));
    assert_eq!(
        std::fs::read_to_string(env.path("a.txt")).unwrap(),
        "alpha\n"
    );
    // The original keeps its own checkpoints: its revert finds the file already as before.
    let (code, result) = env.revert(&[&session, &turns[0]]);
    assert_eq!(code, 0, "{result}");
    assert_eq!(statuses(&result), pairs(&[("a.txt", "unchanged")]));

    // A fork made the old way: the entries and the fork's row, no checkpoint.
    std::fs::write(env.path("a.txt"), "beta\n").unwrap();
    let old_fork = "s_0000000000000000000000000000f0a7";
    let db = rusqlite::Connection::open(env.data.path().join("sessions.sqlite3")).unwrap();
    db.execute_batch(&format!(
        "BEGIN IMMEDIATE;
         INSERT INTO sessions (id, title, created_at, updated_at, created_tick)
             VALUES ('{old_fork}', 'old fork', 0, 0, 0);
         INSERT INTO entries (session_id, seq, kind, turn_id, tick, created_at, call_id, payload)
             SELECT '{old_fork}', seq, kind, turn_id, tick, created_at, call_id, payload FROM entries
             WHERE session_id = '{session}' AND turn_id = '{turn}';
         INSERT INTO session_forks (session_id, from_session_id, before_turn_id)
             VALUES ('{old_fork}', '{session}', '{next}');
         COMMIT;",
        turn = turns[0],
        next = turns[1],
    ))
    .unwrap();
    drop(db);
    let (code, result) = env.revert(&[old_fork, &turns[0]]);
    assert_eq!(code, 2, "{result}");
    assert_eq!(result["withoutCheckpoints"], json!([turns[0]]), "{result}");
    let note = result["note"].as_str().unwrap();
    assert!(!note.contains("They changed no file"), "{note}");
    assert!(note.contains(&session), "{note}");
    assert_eq!(
        std::fs::read_to_string(env.path("a.txt")).unwrap(),
        "beta\n"
    );
}
