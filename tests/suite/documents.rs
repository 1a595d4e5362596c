//! Open documents over real stdio: the tools read the editor's unsaved text exactly, and
//! pen_edit of an open document goes through `workspace/applyEdit`.

use super::lsp_client::{LspClient, file_uri};
use serde_json::{Value, json};
use std::fs;
use std::sync::{Arc, Mutex};

struct Editor {
    _data: tempfile::TempDir,
    root: tempfile::TempDir,
    client: LspClient,
}

fn editor(encodings: &[&str]) -> Editor {
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let mut client = LspClient::spawn(data.path(), root.path(), &[]);
    client.initialize(root.path(), encodings);
    Editor {
        _data: data,
        root,
        client,
    }
}

impl Editor {
    fn open(&mut self, name: &str, version: i32, text: &str) -> String {
        let path = self.root.path().join(name);
        if !path.exists() {
            fs::write(&path, "on disk\n").unwrap();
        }
        let uri = file_uri(&path);
        self.client.notify(
            "textDocument/didOpen",
            json!({"textDocument": {"uri": uri, "languageId": "rust", "version": version, "text": text}}),
        );
        uri
    }

    fn change(&mut self, uri: &str, version: i32, changes: Value) {
        self.client.notify(
            "textDocument/didChange",
            json!({"textDocument": {"uri": uri, "version": version}, "contentChanges": changes}),
        );
    }

    fn tool(&mut self, name: &str, arguments: Value) -> Value {
        self.client.request(
            "pen/callTool",
            json!({"name": name, "arguments": arguments}),
        )
    }

    fn read(&mut self, path: &str) -> Value {
        self.tool("pen_read", json!({"path": path}))
    }
}

#[test]
fn pen_read_returns_the_unsaved_editor_text() {
    let mut ed = editor(&["utf-16"]);
    fs::write(ed.root.path().join("main.rs"), "saved\n").unwrap();
    assert_eq!(ed.read("main.rs")["source"], "disk");
    let uri = ed.open("main.rs", 1, "unsaved\r\nwork 😀\r\n");
    let page = ed.read("main.rs");
    assert_eq!(page["content"], "unsaved\r\nwork 😀\r\n");
    assert_eq!(page["source"], "editor");
    assert_eq!(page["eol"], "crlf");
    let tail = ed.tool("pen_tail", json!({"path": "main.rs", "line_count": 1}));
    assert_eq!(tail["content"], "work 😀\r\n");
    assert_eq!(tail["source"], "editor");
    // A file open in the editor but never saved is readable too.
    let new_uri = file_uri(&ed.root.path().join("draft.rs"));
    ed.client.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": new_uri, "languageId": "rust", "version": 1, "text": "draft"}}),
    );
    assert_eq!(ed.read("draft.rs")["content"], "draft");
    // After close, the disk again.
    ed.client.notify(
        "textDocument/didClose",
        json!({"textDocument": {"uri": uri}}),
    );
    assert_eq!(ed.read("main.rs")["content"], "saved\n");
}

#[test]
fn incremental_edits_land_exactly_in_utf16_positions() {
    let mut ed = editor(&["utf-16"]);
    let uri = ed.open("t.txt", 1, "a😀b\r\n中文\r\nlast");
    // After the emoji (2 UTF-16 units) on line 0; inside line 1 after one CJK char; past the
    // end of the last line (clamped); then a replacement spanning the CRLF.
    ed.change(
        &uri,
        2,
        json!([
            {"range": {"start": {"line": 0, "character": 3}, "end": {"line": 0, "character": 3}}, "text": "X"},
            {"range": {"start": {"line": 1, "character": 1}, "end": {"line": 1, "character": 2}}, "text": "字"},
            {"range": {"start": {"line": 2, "character": 99}, "end": {"line": 2, "character": 99}}, "text": "!"},
            {"range": {"start": {"line": 0, "character": 5}, "end": {"line": 1, "character": 0}}, "text": "\n"}
        ]),
    );
    assert_eq!(ed.read("t.txt")["content"], "a😀Xb\n中字\r\nlast!");
    // A stale version is ignored; the text stays.
    ed.change(&uri, 2, json!([{"text": "stale"}]));
    assert_eq!(ed.read("t.txt")["content"], "a😀Xb\n中字\r\nlast!");
    ed.change(&uri, 3, json!([{"text": "whole\rnew\r"}]));
    assert_eq!(ed.read("t.txt")["content"], "whole\rnew\r");
}

#[test]
fn incremental_edits_land_exactly_in_utf8_positions() {
    let mut ed = editor(&["utf-8", "utf-16"]);
    let uri = ed.open("t.txt", 1, "\u{feff}a😀b\n中文");
    ed.change(
        &uri,
        2,
        json!([
            // Byte 8 of line 0 is after the BOM (3), "a" (1) and the emoji (4).
            {"range": {"start": {"line": 0, "character": 8}, "end": {"line": 0, "character": 9}}, "text": "B"},
            // Byte 3 of line 1 is after one CJK char.
            {"range": {"start": {"line": 1, "character": 3}, "end": {"line": 1, "character": 3}}, "text": "-"}
        ]),
    );
    let page = ed.read("t.txt");
    assert_eq!(page["content"], "\u{feff}a😀B\n中-文");
    assert_eq!(page["bom"], true);
}

#[test]
fn pen_edit_of_an_open_document_sends_the_exact_apply_edit() {
    let mut ed = editor(&["utf-16"]);
    let uri = ed.open("lib.rs", 4, "fn a() {}\r\n// 😀 keep\r\nfn b() {}\r\n");
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let log = Arc::clone(&seen);
    ed.client.on_request(move |method, params| {
        log.lock()
            .unwrap()
            .push(json!({"method": method, "params": params}));
        json!({"applied": true})
    });
    let hash = ed.read("lib.rs")["hash"].clone();
    let result = ed.tool(
        "pen_edit",
        json!({"path": "lib.rs", "expected_hash": hash, "edits": [{"old_text": "fn b() {}", "new_text": "fn b() {\n    a();\n}"}]}),
    );
    assert_eq!(result["source"], "editor", "{result}");
    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        requests[0],
        json!({
            "method": "workspace/applyEdit",
            "params": {"edit": {"changes": {uri.clone(): [{
                "range": {"start": {"line": 2, "character": 0}, "end": {"line": 3, "character": 0}},
                "newText": "fn b() {\r\n    a();\r\n}\r\n"
            }]}}}
        })
    );
    // The file on disk is untouched: the editor owns the change.
    assert_eq!(
        fs::read_to_string(ed.root.path().join("lib.rs")).unwrap(),
        "on disk\n"
    );
}

#[test]
fn a_refused_apply_edit_is_a_clear_error() {
    let mut ed = editor(&["utf-16"]);
    ed.open("lib.rs", 1, "x = 1\n");
    ed.client
        .on_request(|_, _| json!({"applied": false, "failureReason": "the buffer is read-only"}));
    let hash = ed.read("lib.rs")["hash"].clone();
    let result = ed.tool(
        "pen_edit",
        json!({"path": "lib.rs", "expected_hash": hash, "edits": [{"old_text": "1", "new_text": "2"}]}),
    );
    let message = result["error"]["message"].as_str().unwrap();
    assert!(message.contains("the buffer is read-only"), "{message}");
    assert!(message.contains("did not apply"), "{message}");
}

#[test]
fn an_edit_after_the_buffer_changed_is_stale() {
    let mut ed = editor(&["utf-16"]);
    let uri = ed.open("lib.rs", 1, "x = 1\n");
    ed.client.on_request(|_, _| json!({"applied": true}));
    ed.read("lib.rs");
    ed.change(&uri, 2, json!([{"text": "x = 1\ny = 2\n"}]));
    let result = ed.tool(
        "pen_edit",
        json!({"path": "lib.rs", "edits": [{"old_text": "1", "new_text": "3"}]}),
    );
    assert_eq!(result["error"]["code"], "stale", "{result}");
    // Read again, and the edit goes through.
    ed.read("lib.rs");
    let result = ed.tool(
        "pen_edit",
        json!({"path": "lib.rs", "edits": [{"old_text": "1", "new_text": "3"}]}),
    );
    assert_eq!(result["source"], "editor", "{result}");
}

#[test]
fn search_finds_unsaved_editor_text() {
    let mut ed = editor(&["utf-16"]);
    fs::write(ed.root.path().join("a.rs"), "let saved = 1;\n").unwrap();
    ed.open("a.rs", 1, "let unsaved_name = 1;\n");
    let found = ed.tool("pen_search", json!({"query": "unsaved_name"}));
    assert_eq!(found["matches"][0]["path"], "a.rs", "{found}");
    let stale = ed.tool("pen_search", json!({"query": "saved = 1"}));
    assert_eq!(stale["matches"].as_array().unwrap().len(), 0, "{stale}");
}
