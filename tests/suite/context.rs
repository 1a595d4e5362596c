//! The session's project context end to end (SPEC §10), asserted on whole requests the fake
//! provider recorded: the root AGENTS.md in the system part of every request, byte-identical
//! after a restart; a nested AGENTS.md delivered once; the budget's cut note; a changed root
//! file announced on the next prompt; two roots; ignored and dependency folders never read; a
//! link out of the root refused; the editor's focus and `pen run --file` in the prompt.

use super::fake_provider::{FakeProvider, Reply, openai_frames};
use super::lsp_client::{LspClient, file_uri};
use pen::providers::{ToolCall, Usage};
use serde_json::{Value, json};
use std::fs;
use std::path::Path;

fn usage() -> Usage {
    Usage::new(10, 2)
}

fn answer(text: &str) -> Reply {
    Reply::Stream(openai_frames(&[text], &[], usage()))
}

fn calls(calls: &[(&str, &str, Value)]) -> Reply {
    let calls: Vec<ToolCall> = calls
        .iter()
        .map(|(id, name, arguments)| ToolCall {
            id: id.to_string(),
            name: name.to_string(),
            arguments: arguments.to_string(),
        })
        .collect();
    Reply::Stream(openai_frames(&["Looking."], &calls, usage()))
}

fn daemon(fake: &FakeProvider, data: &Path, root: &Path) -> LspClient {
    let mut client = spawn(fake, data, root);
    client.initialize(root, &["utf-16"]);
    client
}

fn spawn(fake: &FakeProvider, data: &Path, cwd: &Path) -> LspClient {
    let base = format!("{}/v1", fake.url());
    let mut client = LspClient::spawn(
        data,
        cwd,
        &[
            ("PEN_PROVIDER", "openai"),
            ("PEN_BASE_URL", &base),
            ("PEN_MODEL", "fake-model"),
        ],
    );
    client.on_request(|method, _| match method {
        "window/workDoneProgress/create" => Value::Null,
        _ => json!({"decision": "deny"}),
    });
    client
}

fn bodies(fake: &FakeProvider) -> Vec<Value> {
    fake.requests().into_iter().map(|r| r.body).collect()
}

/// The system message of an OpenAI-format body.
fn system(body: &Value) -> String {
    let first = &body["messages"][0];
    assert_eq!(first["role"], "system", "{body}");
    first["content"].as_str().expect("system text").to_string()
}

/// Every message after the system one, as text (content and tool results).
fn contents(body: &Value, role: &str) -> Vec<String> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == role)
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn the_root_agents_md_is_in_every_request_and_byte_identical_after_a_restart() {
    let fake = FakeProvider::start();
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    fs::write(root.path().join("AGENTS.md"), "Indent with tabs.\n").unwrap();
    fs::write(root.path().join("a.txt"), "alpha\n").unwrap();
    fake.push([
        calls(&[("c1", "pen_read", json!({"path": "a.txt"}))]),
        answer("Read it."),
        answer("Second."),
        answer("After the restart."),
    ]);
    let mut d = daemon(&fake, data.path(), root.path());
    let session = d.new_session();
    assert_eq!(d.prompt(&session, "read a")["stopReason"], "end_turn");
    assert_eq!(d.prompt(&session, "again")["stopReason"], "end_turn");
    d.close();
    // A new pen on the same data dir renders the same system part from the record, even
    // though the file changed meanwhile (the change is a note on the prompt, not a rewrite).
    fs::write(root.path().join("AGENTS.md"), "Indent with spaces.\n").unwrap();
    let mut d = daemon(&fake, data.path(), root.path());
    assert_eq!(d.prompt(&session, "once more")["stopReason"], "end_turn");
    let bodies = bodies(&fake);
    assert_eq!(bodies.len(), 4);
    let first = system(&bodies[0]);
    assert!(
        first.contains("## AGENTS.md\nIndent with tabs.\n"),
        "{first}"
    );
    assert!(first.contains("# Project instructions"), "{first}");
    assert!(first.contains("owner's instructions"), "{first}");
    assert!(first.contains("# Environment\n- pen "), "{first}");
    assert!(first.contains("- date: "), "{first}");
    for body in &bodies[1..] {
        assert_eq!(system(body), first, "the system part changed");
    }
    let context = d.request("pen/getSessionContext", json!({"sessionId": session}));
    assert_eq!(context["recorded"], true, "{context}");
    assert_eq!(context["instructions"][0]["path"], "AGENTS.md", "{context}");
    assert_eq!(context["instructions"][0]["bytes"], 18, "{context}");
    assert_eq!(context["instructions"][0]["cut"], false, "{context}");
    assert!(
        context["instructionsText"]
            .as_str()
            .unwrap()
            .contains("Indent with tabs."),
        "{context}"
    );
}

#[test]
fn a_nested_agents_md_is_delivered_once_with_the_first_result_under_its_folder() {
    let fake = FakeProvider::start();
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    fs::create_dir_all(root.path().join("web/src")).unwrap();
    fs::write(root.path().join("web/AGENTS.md"), "Use pnpm in web.\n").unwrap();
    fs::write(root.path().join("web/src/a.ts"), "let a = 1;\n").unwrap();
    fs::write(root.path().join("web/src/b.ts"), "let b = 2;\n").unwrap();
    fs::write(root.path().join("top.txt"), "top\n").unwrap();
    fake.push([
        calls(&[("c1", "pen_read", json!({"path": "top.txt"}))]),
        calls(&[("c2", "pen_read", json!({"path": "web/src/a.ts"}))]),
        calls(&[("c3", "pen_read", json!({"path": "web/src/b.ts"}))]),
        answer("Done."),
        calls(&[("c4", "pen_list", json!({"path": "web"}))]),
        answer("Done again."),
    ]);
    let mut d = daemon(&fake, data.path(), root.path());
    let session = d.new_session();
    assert_eq!(d.prompt(&session, "look")["stopReason"], "end_turn");
    d.close();
    let mut d = daemon(&fake, data.path(), root.path());
    assert_eq!(d.prompt(&session, "look again")["stopReason"], "end_turn");
    let bodies = bodies(&fake);
    assert_eq!(bodies.len(), 6);
    let last = bodies.last().unwrap();
    let results = contents(last, "tool");
    assert_eq!(results.len(), 4, "{results:?}");
    let delivering: Vec<usize> = results
        .iter()
        .enumerate()
        .filter(|(_, r)| r.contains("Use pnpm in web."))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(delivering, [1], "{results:?}");
    assert!(
        results[1].contains("The project's instructions for this folder")
            && results[1].contains("## web/AGENTS.md"),
        "{}",
        results[1]
    );
    // Never in the system part, and the earlier requests' bytes never change: each request's
    // messages begin with the one before's.
    assert!(!system(last).contains("Use pnpm"));
    for pair in bodies.windows(2) {
        let before = pair[0]["messages"].as_array().unwrap();
        let after = pair[1]["messages"].as_array().unwrap();
        assert_eq!(&after[..before.len()], &before[..], "a rewritten prefix");
    }
    let context = d.request("pen/getSessionContext", json!({"sessionId": session}));
    assert_eq!(
        context["delivered"][0]["path"], "web/AGENTS.md",
        "{context}"
    );
}

#[test]
fn the_instruction_budget_cuts_at_32_kib_with_a_note() {
    let fake = FakeProvider::start();
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let text = "Rule.\n".repeat(8_000);
    fs::write(root.path().join("AGENTS.md"), &text).unwrap();
    fake.push([answer("ok")]);
    let mut d = daemon(&fake, data.path(), root.path());
    let session = d.new_session();
    assert_eq!(d.prompt(&session, "hi")["stopReason"], "end_turn");
    let system = system(&bodies(&fake)[0]);
    let sent = system.matches("Rule.\n").count();
    assert!(sent < 32_768 / 6 + 1 && sent > 5_000, "{sent} rules sent");
    assert!(
        system.contains("[cut: AGENTS.md is 48000 bytes; only its first 32768 bytes fit")
            && system.contains("instruction_bytes"),
        "the cut note"
    );
    let context = d.request("pen/getSessionContext", json!({"sessionId": session}));
    assert_eq!(context["instructions"][0]["cut"], true, "{context}");
    assert_eq!(context["instructions"][0]["bytes"], 48_000, "{context}");
}

#[test]
fn a_system_part_too_large_for_the_window_names_the_files_and_the_setting() {
    let fake = FakeProvider::start();
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    fs::write(root.path().join("AGENTS.md"), "Rule.\n".repeat(8_000)).unwrap();
    let mut d = daemon(&fake, data.path(), root.path());
    d.request(
        "pen/setConfig",
        json!({"context_window_tokens": 4_000, "max_output_tokens": 1_000,
               "budget_margin_tokens": 500}),
    );
    let session = d.new_session();
    let answer = d.prompt(&session, "hi");
    assert_eq!(answer["errorKind"], "budget_too_large", "{answer}");
    let error = answer["lastError"].as_str().unwrap();
    assert!(
        error.contains("AGENTS.md") && error.contains("instruction_bytes"),
        "{error}"
    );
    assert!(fake.requests().is_empty());
}

#[test]
fn a_changed_root_file_is_announced_on_the_next_prompt() {
    let fake = FakeProvider::start();
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    fs::write(root.path().join("AGENTS.md"), "Version one.\n").unwrap();
    fake.push([answer("one"), answer("two"), answer("three")]);
    let mut d = daemon(&fake, data.path(), root.path());
    let session = d.new_session();
    assert_eq!(d.prompt(&session, "first")["stopReason"], "end_turn");
    fs::write(root.path().join("AGENTS.md"), "Version two.\n").unwrap();
    assert_eq!(d.prompt(&session, "second")["stopReason"], "end_turn");
    // The editor is told (every event of a turn arrives before its answer).
    let changed: Vec<&Value> = d
        .notifications
        .iter()
        .filter(|m| m["method"] == "pen/event" && m["params"]["kind"] == "instructions_changed")
        .collect();
    assert_eq!(changed.len(), 1, "{changed:?}");
    assert_eq!(
        changed[0]["params"]["data"]["files"][0]["path"], "AGENTS.md",
        "{}",
        changed[0]
    );
    assert_eq!(d.prompt(&session, "third")["stopReason"], "end_turn");
    let bodies = bodies(&fake);
    let users = contents(&bodies[2], "user");
    assert_eq!(users.len(), 3, "{users:?}");
    assert!(!users[0].contains("changed"), "{}", users[0]);
    assert!(
        users[1].starts_with("second\n\n[The project's instructions changed")
            && users[1].contains("Version two."),
        "{}",
        users[1]
    );
    // Announced once: the third prompt has no note, and the system part kept the first text.
    assert_eq!(users[2], "third");
    for body in &bodies {
        assert!(system(body).contains("Version one."));
        assert!(!system(body).contains("Version two."));
    }
}

#[test]
fn two_roots_each_with_their_agents_md() {
    let fake = FakeProvider::start();
    let data = tempfile::tempdir().unwrap();
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    fs::write(a.path().join("AGENTS.md"), "Root A rules.\n").unwrap();
    fs::write(b.path().join("AGENTS.md"), "Root B rules.\n").unwrap();
    fake.push([answer("ok")]);
    let mut d = spawn(&fake, data.path(), a.path());
    let (ua, ub) = (file_uri(a.path()), file_uri(b.path()));
    d.request(
        "initialize",
        json!({
            "processId": null,
            "rootUri": ua,
            "workspaceFolders": [{"uri": ua, "name": "a"}, {"uri": ub, "name": "b"}],
            "capabilities": {"workspace": {"workspaceFolders": true}}
        }),
    );
    d.notify("initialized", json!({}));
    let session = d.new_session();
    assert_eq!(d.prompt(&session, "hi")["stopReason"], "end_turn");
    let system = system(&bodies(&fake)[0]);
    let name_a = a.path().file_name().unwrap().to_string_lossy().into_owned();
    let name_b = b.path().file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        system.contains(&format!("## {name_a}/AGENTS.md\nRoot A rules.")),
        "{system}"
    );
    assert!(
        system.contains(&format!("## {name_b}/AGENTS.md\nRoot B rules.")),
        "{system}"
    );
    assert!(
        system.contains(&format!("- workspace root `{name_b}`")),
        "{system}"
    );
}

#[test]
fn instruction_files_in_dependency_build_and_ignored_folders_are_never_read() {
    let fake = FakeProvider::start();
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    for folder in ["node_modules/pkg", "target/debug", "generated", "src"] {
        fs::create_dir_all(root.path().join(folder)).unwrap();
        fs::write(
            root.path().join(folder).join("AGENTS.md"),
            format!("Obey {folder}.\n"),
        )
        .unwrap();
        fs::write(root.path().join(folder).join("f.txt"), "f\n").unwrap();
    }
    fs::write(root.path().join(".gitignore"), "generated/\n").unwrap();
    fake.push([
        // The delivery comes first, so its record lies between the batch's results.
        calls(&[
            ("c4", "pen_read", json!({"path": "src/f.txt"})),
            ("c1", "pen_read", json!({"path": "node_modules/pkg/f.txt"})),
            ("c2", "pen_read", json!({"path": "target/debug/f.txt"})),
            ("c3", "pen_list", json!({"path": "generated"})),
        ]),
        answer("ok"),
    ]);
    let mut d = daemon(&fake, data.path(), root.path());
    let session = d.new_session();
    assert_eq!(d.prompt(&session, "look")["stopReason"], "end_turn");
    let last = bodies(&fake).pop().unwrap();
    let results = contents(&last, "tool");
    assert_eq!(results.len(), 4);
    // The same batch delivers an ordinary folder's file, so the others were looked for.
    assert!(results[0].contains("Obey src."), "{}", results[0]);
    let text = last.to_string();
    for skipped in ["node_modules/pkg", "target/debug", "generated"] {
        assert!(
            !text.contains(&format!("Obey {skipped}.")),
            "{skipped}: {text}"
        );
    }
}

#[test]
fn a_symlinked_agents_md_pointing_outside_the_root_is_refused() {
    let fake = FakeProvider::start();
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("notes.md"), "OUTSIDE SECRET\n").unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("notes.md"),
        root.path().join("AGENTS.md"),
    )
    .unwrap();
    fake.push([answer("ok")]);
    let mut d = daemon(&fake, data.path(), root.path());
    let session = d.new_session();
    assert_eq!(d.prompt(&session, "hi")["stopReason"], "end_turn");
    let system = system(&bodies(&fake)[0]);
    assert!(!system.contains("OUTSIDE SECRET"), "{system}");
    assert!(
        system.contains("## AGENTS.md (not read: ") && system.contains("outside the workspace"),
        "{system}"
    );
}

#[test]
fn the_editor_focus_reaches_the_prompt_from_the_unsaved_buffer() {
    let fake = FakeProvider::start();
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let path = root.path().join("a.rs");
    fs::write(&path, "disk one\ndisk two\ndisk three\n").unwrap();
    fake.push([answer("ok"), answer("ok")]);
    let mut d = daemon(&fake, data.path(), root.path());
    d.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": file_uri(&path), "languageId": "rust", "version": 1,
               "text": "buffer one\nbuffer two\nbuffer three\n"}}),
    );
    let session = d.new_session();
    let answer = d.request(
        "pen/prompt",
        json!({"sessionId": session, "text": "explain",
               "context": {"activeFile": path.to_string_lossy(),
                           "selection": {"startLine": 2, "endLine": 3},
                           "visibleRanges": [{"startLine": 1, "endLine": 3}]}}),
    );
    assert_eq!(answer["stopReason"], "end_turn", "{answer}");
    let user = contents(&bodies(&fake)[0], "user").pop().unwrap();
    assert!(
        user.starts_with("explain\n\n[What the owner has in view")
            && user.contains(
                "Active file: a.rs\nSelection: lines 2-3\n```\nbuffer two\nbuffer three\n```"
            )
            && user.contains("Visible lines: 1-3"),
        "{user}"
    );
    assert!(!user.contains("disk"), "{user}");
    // A bad range is the client's error, and no turn runs.
    let refused = d.request_raw(
        "pen/prompt",
        json!({"sessionId": session, "text": "x",
               "context": {"activeFile": "a.rs", "selection": {"startLine": 3, "endLine": 1}}}),
    );
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert_eq!(fake.requests().len(), 1);
}

/// `pen run look --file F…` in `root` against the fake (one answer); the prompt it sent.
fn run_look(fake: &FakeProvider, data: &Path, root: &Path, files: &[&str]) -> String {
    fake.push([answer("ok")]);
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_pen"));
    command.args(["run", "look"]);
    for file in files {
        command.args(["--file", file]);
    }
    let output = command
        .args([
            "--provider",
            "openai",
            "--model",
            "fake-model",
            "--base-url",
        ])
        .arg(format!("{}/v1", fake.url()))
        .current_dir(root)
        .env("PEN_DATA_DIR", data)
        .env("PEN_CONFIG", "/nonexistent/pen/config.toml")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    contents(&bodies(fake)[0], "user").pop().unwrap()
}

#[test]
fn pen_run_attaches_files_and_line_ranges() {
    let fake = FakeProvider::start();
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    fs::write(root.path().join("a.txt"), "one\ntwo\nthree\nfour\n").unwrap();
    fs::write(root.path().join("b.txt"), "whole b\n").unwrap();
    let user = run_look(&fake, data.path(), root.path(), &["a.txt:2-3", "b.txt"]);
    assert!(
        user.contains("Attached: a.txt, lines 2-3\n```\ntwo\nthree\n```")
            && user.contains("Attached: b.txt\n```\nwhole b\n```"),
        "{user}"
    );
    assert!(!user.contains("four"), "{user}");
}

/// A private key: BEGIN on line 1, body lines 2..=21, END on line 22.
fn key_text() -> String {
    format!(
        "-----BEGIN OPENSSH PRIVATE KEY-----\n{}-----END OPENSSH PRIVATE KEY-----\n",
        "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n".repeat(20)
    )
}

/// Issue 26, item 2: the body lines of a key (2..=N-1) never reach the model through the
/// editor's focus: Neovim's range (pen reads the buffer), VS Code's selection `text` (the
/// client sends it), each from the unsaved buffer; the prompt says why they are left out.
#[test]
fn the_editor_focus_never_sends_the_body_of_a_key() {
    let fake = FakeProvider::start();
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let path = root.path().join("id_ed25519");
    fs::write(&path, "not yet saved\n").unwrap();
    let key = key_text();
    let body: String = key
        .lines()
        .skip(1)
        .take(20)
        .map(|l| format!("{l}\n"))
        .collect();
    fake.push([answer("ok"), answer("ok")]);
    let mut d = daemon(&fake, data.path(), root.path());
    d.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": file_uri(&path), "languageId": "text", "version": 1,
               "text": key}}),
    );
    let session = d.new_session();
    for selection in [
        json!({"startLine": 2, "endLine": 21}),
        json!({"startLine": 2, "endLine": 21, "text": body}),
    ] {
        let answer = d.request(
            "pen/prompt",
            json!({"sessionId": session, "text": "explain",
                   "context": {"activeFile": path.to_string_lossy(), "selection": selection}}),
        );
        assert_eq!(answer["stopReason"], "end_turn", "{answer}");
    }
    for body in bodies(&fake) {
        let user = contents(&body, "user").pop().unwrap();
        assert!(!user.contains("b3BlbnNzaC1rZXkt"), "{user}");
        assert!(user.contains("private key material"), "{user}");
    }
    // A selection of a buffer with no file must carry its text: pen has nothing else to judge.
    let refused = d.request_raw(
        "pen/prompt",
        json!({"sessionId": session, "text": "x",
               "context": {"selection": {"startLine": 1, "endLine": 2}}}),
    );
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
}

/// Issue 26, item 2: `pen run --file KEY:2-N` sends none of the key's body lines.
#[test]
fn pen_run_never_attaches_the_body_of_a_key() {
    let fake = FakeProvider::start();
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    fs::write(root.path().join("id_ed25519"), key_text()).unwrap();
    let user = run_look(&fake, data.path(), root.path(), &["id_ed25519:2-21"]);
    assert!(!user.contains("b3BlbnNzaC1rZXkt"), "{user}");
    assert!(
        user.contains("Attached: id_ed25519, lines 2-21\n(not included:"),
        "{user}"
    );
}
