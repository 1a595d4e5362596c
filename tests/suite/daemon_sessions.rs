//! Sessions through `pen serve` and the CLI: create, list, page, export, and survive crashes
//! and a second daemon on the same data dir.

use super::lsp_client::LspClient;
use pen::session::{EntryKind, NewEntry, SessionStore};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;

fn pen_cli(data: &Path, args: &[&str]) -> (i32, Vec<Value>, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_pen"))
        .args(args)
        .env("PEN_DATA_DIR", data)
        .output()
        .unwrap();
    let lines = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (
        output.status.code().unwrap_or(-1),
        lines,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn list_all(client: &mut LspClient, limit: usize) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor = Value::Null;
    loop {
        let page = client.request(
            "pen/listSessions",
            json!({"cursor": cursor, "limit": limit}),
        );
        out.extend(page["sessions"].as_array().unwrap().iter().cloned());
        match page.get("nextCursor") {
            Some(next) => cursor = next.clone(),
            None => return out,
        }
    }
}

#[test]
fn sessions_are_created_listed_and_exported() {
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let mut client = LspClient::spawn(data.path(), root.path(), &[]);
    client.initialize(root.path(), &["utf-16"]);
    let ids: Vec<String> = (0..7)
        .map(|i| {
            let created = client.request("pen/newSession", json!({"title": format!("task {i}")}));
            assert_eq!(created["entryCount"], 0);
            created["sessionId"].as_str().unwrap().to_string()
        })
        .collect();
    let untitled = client.request("pen/newSession", json!(null));
    assert_eq!(untitled["title"], Value::Null);

    // Entries written by another process (the agent loop, later) are paged back in order.
    let store = SessionStore::open(data.path()).unwrap();
    for i in 0..25 {
        let kind = if i % 2 == 0 {
            EntryKind::UserPrompt
        } else {
            EntryKind::AssistantMessage
        };
        store
            .append(
                &ids[0],
                &NewEntry {
                    kind,
                    turn_id: Some("t1".into()),
                    payload: json!({"text": format!("entry {i}")}),
                },
            )
            .unwrap();
    }
    let mut seqs = Vec::new();
    let mut after = Value::Null;
    loop {
        let page = client.request(
            "pen/getTranscript",
            json!({"sessionId": ids[0], "afterSeq": after, "limit": 10}),
        );
        for entry in page["entries"].as_array().unwrap() {
            seqs.push(entry["seq"].as_u64().unwrap());
            assert_eq!(entry["turnId"], "t1");
        }
        match page.get("nextAfterSeq") {
            Some(next) => after = next.clone(),
            None => break,
        }
    }
    assert_eq!(seqs, (1..=25).collect::<Vec<u64>>());

    // Newest activity first, every session once, at any page size.
    let listed = list_all(&mut client, 3);
    assert_eq!(listed.len(), 8);
    assert_eq!(
        listed[0]["sessionId"],
        ids[0].as_str(),
        "the session with entries is newest"
    );
    for size in [1, 2, 100] {
        assert_eq!(list_all(&mut client, size), listed);
    }

    // Bad input is InvalidParams.
    let missing = client.request_raw("pen/getTranscript", json!({"sessionId": "s_nope"}));
    assert_eq!(missing["error"]["code"], -32602, "{missing}");
    let bad_cursor = client.request_raw("pen/listSessions", json!({"cursor": "garbage"}));
    assert_eq!(bad_cursor["error"]["code"], -32602, "{bad_cursor}");
    let wrong_type = client.request_raw("pen/newSession", json!({"title": 5}));
    assert_eq!(wrong_type["error"]["code"], -32602, "{wrong_type}");

    // The CLI prints the same.
    let (code, lines, _) = pen_cli(data.path(), &["sessions"]);
    assert_eq!(code, 0);
    assert_eq!(lines, listed);
    let (code, lines, _) = pen_cli(data.path(), &["transcript", &ids[0]]);
    assert_eq!(code, 0);
    assert_eq!(lines.len(), 25);
    assert_eq!(lines[24]["payload"]["text"], "entry 24");
    let (code, _, stderr) = pen_cli(data.path(), &["transcript", "s_nope"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("s_nope"), "{stderr}");
}

#[test]
fn committed_sessions_survive_kill_9_of_the_daemon() {
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let mut client = LspClient::spawn(data.path(), root.path(), &[]);
    client.initialize(root.path(), &["utf-16"]);
    let ids: Vec<Value> = (0..20)
        .map(|_| client.request("pen/newSession", json!({}))["sessionId"].clone())
        .collect();
    client.kill();
    let mut client = LspClient::spawn(data.path(), root.path(), &[]);
    client.initialize(root.path(), &["utf-16"]);
    let listed: Vec<Value> = list_all(&mut client, 50)
        .iter()
        .map(|s| s["sessionId"].clone())
        .collect();
    for id in &ids {
        assert!(listed.contains(id), "{id} lost");
    }
}

#[test]
fn two_daemons_on_one_data_dir_work_at_once() {
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let data = data.path().to_path_buf();
            let root = root.path().to_path_buf();
            std::thread::spawn(move || {
                let mut client = LspClient::spawn(&data, &root, &[]);
                client.initialize(&root, &["utf-16"]);
                (0..100)
                    .map(|i| {
                        let response =
                            client.request_raw("pen/newSession", json!({"title": format!("{i}")}));
                        assert!(response.get("error").is_none(), "{response}");
                        response["result"]["sessionId"]
                            .as_str()
                            .unwrap()
                            .to_string()
                    })
                    .collect::<Vec<String>>()
            })
        })
        .collect();
    let mut ids: Vec<String> = workers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 200);
    let (code, lines, _) = pen_cli(data.path(), &["sessions"]);
    assert_eq!(code, 0);
    assert_eq!(lines.len(), 200);
}
