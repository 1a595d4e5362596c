//! A session written by the pen before the typed transcript (commit a15151a, the database in
//! `tests/fixtures/sessions/`, made by `make.sh` there) is read, resumed and continued: its
//! entries read as they were written, the call its crash left unanswered is answered, and the
//! next request carries its whole history.

use super::fake_provider::{FakeProvider, Reply, openai_frames};
use pen::providers::Usage;
use pen::transcript::{CallOutcome, Item};
use serde_json::Value;
use std::process::Command;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/sessions/pen-a15151a.sqlite3"
);
const SESSION: &str = include_str!("../fixtures/sessions/pen-a15151a.session");

fn data_dir() -> tempfile::TempDir {
    let data = tempfile::tempdir().unwrap();
    std::fs::copy(FIXTURE, data.path().join("sessions.sqlite3")).unwrap();
    data
}

#[test]
fn the_old_sessions_entries_read_as_they_were_written() {
    let data = data_dir();
    let store = pen::session::SessionStore::open(data.path()).unwrap();
    let session = SESSION.trim();
    let page = store.transcript(session, None, 500).unwrap();
    let items: Vec<Item> = page.entries.iter().map(|e| e.item()).collect();
    assert_eq!(items.len(), 15);
    let outcomes: Vec<Option<CallOutcome>> = items
        .iter()
        .filter_map(|item| match item {
            Item::ToolResult(result) => Some(result.outcome),
            _ => None,
        })
        .collect();
    assert_eq!(
        outcomes,
        [
            Some(CallOutcome::Done),
            Some(CallOutcome::Done),
            Some(CallOutcome::Denied),
            Some(CallOutcome::Error)
        ]
    );
    let Item::AssistantMessage(first) = &items[1] else {
        panic!("{:?}", items[1]);
    };
    assert_eq!(first.tool_calls.len(), 4);
    assert!(!first.malformed_calls);
    assert!(matches!(
        &items[11],
        Item::Event(pen::transcript::Event::TurnEnded {
            stop_reason: pen::transcript::StopReason::EndTurn,
            ..
        })
    ));
    // Written through the typed items again, every entry is the same JSON value.
    for entry in &page.entries {
        let again = Item::from_stored(entry.kind, &entry.item().to_payload());
        assert_eq!(again, entry.item(), "entry {}", entry.seq);
    }
}

#[test]
fn the_old_session_is_resumed_and_continued() {
    let data = data_dir();
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("a.txt"), "alpha\n").unwrap();
    let fake = FakeProvider::start();
    fake.push([Reply::Stream(openai_frames(
        &["Still alpha."],
        &[],
        Usage::new(50, 3),
    ))]);
    let session = SESSION.trim();
    let output = Command::new(env!("CARGO_BIN_EXE_pen"))
        .env("PEN_DATA_DIR", data.path())
        .env("PEN_CONFIG", "/nonexistent/pen/config.toml")
        .args(["run", "And now?", "--session", session])
        .args(["--provider", "openai", "--model", "fake", "--base-url"])
        .arg(format!("{}/v1", fake.url()))
        .current_dir(root.path())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        "Still alpha."
    );
    // The request carries the old history: the four calls and their results, the crashed
    // call with its recovered answer, then the new prompt.
    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    let messages = requests[0].body["messages"].as_array().unwrap().clone();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        [
            "system",
            "user",
            "assistant",
            "tool",
            "tool",
            "tool",
            "tool",
            "assistant",
            "user",
            "assistant",
            "tool",
            "user"
        ]
    );
    let recovered = &messages[10];
    assert_eq!(recovered["tool_call_id"], "call_5");
    assert!(
        recovered["content"]
            .as_str()
            .unwrap()
            .starts_with("interrupted; outcome unknown"),
        "{recovered}"
    );
    assert_eq!(messages[11]["content"], "And now?");
    // The store holds the recovered answer, the new turn, and nothing rewritten.
    let store = pen::session::SessionStore::open(data.path()).unwrap();
    let entries = store.transcript(session, None, 500).unwrap().entries;
    let kinds: Vec<&str> = entries[15..].iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(
        kinds,
        // An old session gets its context (an event) recorded before its next prompt.
        [
            "tool_result",
            "event",
            "user_prompt",
            "assistant_message",
            "event"
        ]
    );
    assert_eq!(entries[15].payload["status"], Value::from("interrupted"));
}
