//! `pen serve` over real stdio: lifecycle, encodings, tools, config and robustness.

use super::lsp_client::{LspClient, frame};
use serde_json::json;
use std::fs;

fn daemon(extra_env: &[(&str, &str)]) -> (tempfile::TempDir, tempfile::TempDir, LspClient) {
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let client = LspClient::spawn(data.path(), root.path(), extra_env);
    (data, root, client)
}

#[test]
fn initialize_negotiates_the_position_encoding() {
    let (_data, root, mut client) = daemon(&[]);
    let result = client.initialize(root.path(), &["utf-8", "utf-16"]);
    assert_eq!(result["capabilities"]["positionEncoding"], "utf-8");
    assert_eq!(result["capabilities"]["textDocumentSync"]["change"], 2);
    assert_eq!(result["serverInfo"]["name"], "pen");
    assert_eq!(client.request("shutdown", json!(null)), json!(null));
    client.notify("exit", json!(null));
    assert_eq!(client.close(), Some(0));
    // The daemon logged to a rolling file in the data dir, not to stdout.
    let logs: Vec<String> = fs::read_dir(_data.path().join("logs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        logs.iter().any(|name| name.starts_with("pen.log")),
        "{logs:?}"
    );

    let (_data, root, mut client) = daemon(&[]);
    let result = client.initialize(root.path(), &["utf-32", "utf-16"]);
    assert_eq!(result["capabilities"]["positionEncoding"], "utf-16");
    let (_data, root, mut client) = daemon(&[]);
    let result = client.initialize(root.path(), &[]);
    assert_eq!(result["capabilities"]["positionEncoding"], "utf-16");
}

#[test]
fn call_tool_returns_the_capped_observation_and_list_tools_the_catalog() {
    let (_data, root, mut client) = daemon(&[]);
    fs::write(root.path().join("a.txt"), "one\r\ntwo\r\n").unwrap();
    client.initialize(root.path(), &["utf-16"]);
    let page = client.request(
        "pen/callTool",
        json!({"name": "pen_read", "arguments": {"path": "a.txt"}}),
    );
    assert_eq!(page["content"], "one\r\ntwo\r\n");
    assert_eq!(page["source"], "disk");
    let error = client.request(
        "pen/callTool",
        json!({"name": "pen_read", "arguments": {"path": "../x"}}),
    );
    assert_eq!(error["error"]["code"], "outside_workspace");
    let unknown = client.request("pen/callTool", json!({"name": "pen_fly", "arguments": {}}));
    assert_eq!(unknown["error"]["code"], "unknown_tool");
    let tools = client.request("pen/listTools", json!(null));
    assert_eq!(tools.as_array().unwrap().len(), 9);
    assert_eq!(tools[0]["name"], "pen_search");
}

#[test]
fn set_config_takes_effect_at_once_and_refuses_bad_values() {
    let (_data, root, mut client) = daemon(&[]);
    fs::write(root.path().join("big.txt"), "word ".repeat(50_000)).unwrap();
    client.initialize(root.path(), &["utf-16"]);
    assert_eq!(
        client.request("pen/getConfig", json!(null))["max_tool_result_bytes"],
        65_536
    );
    let set = client.request("pen/setConfig", json!({"max_tool_result_bytes": 2048}));
    assert_eq!(set["max_tool_result_bytes"], 2048);
    let page = client.request(
        "pen/callTool",
        json!({"name": "pen_read", "arguments": {"path": "big.txt"}}),
    );
    assert!(page.to_string().len() <= 2048);
    for (params, text) in [
        (
            json!({"max_tool_result_bytes": 10}),
            "between 1024 and 1048576",
        ),
        (json!({"max_tool_result_bytes": "big"}), "whole number"),
        (
            json!({"no_such_key": 1}),
            "unknown config key `no_such_key`",
        ),
        (json!([1, 2]), "object"),
    ] {
        let response = client.request_raw("pen/setConfig", params.clone());
        assert_eq!(response["error"]["code"], -32602, "{params}");
        assert!(
            response["error"]["message"]
                .as_str()
                .unwrap()
                .contains(text),
            "{response}"
        );
    }
    assert_eq!(
        client.request("pen/getConfig", json!(null))["max_tool_result_bytes"],
        2048
    );
}

#[test]
fn initialization_options_feed_the_config_and_bad_ones_keep_the_default() {
    let (_data, root, mut client) = daemon(&[]);
    let uri = super::lsp_client::file_uri(root.path());
    client.request(
        "initialize",
        json!({"rootUri": uri, "capabilities": {}, "initializationOptions": {"max_tool_result_bytes": 4096}}),
    );
    assert_eq!(
        client.request("pen/getConfig", json!(null))["max_tool_result_bytes"],
        4096
    );
    let (_data, root, mut client) = daemon(&[]);
    let uri = super::lsp_client::file_uri(root.path());
    client.request(
        "initialize",
        json!({"rootUri": uri, "capabilities": {}, "initializationOptions": {"max_tool_result_bytes": 1}}),
    );
    assert_eq!(
        client.request("pen/getConfig", json!(null))["max_tool_result_bytes"],
        65_536
    );
}

#[test]
fn workspace_folder_changes_move_the_confinement() {
    let (_data, root, mut client) = daemon(&[]);
    let other = tempfile::tempdir().unwrap();
    fs::write(other.path().join("o.txt"), "other\n").unwrap();
    client.initialize(root.path(), &["utf-16"]);
    let outside = other.path().join("o.txt").to_string_lossy().into_owned();
    let refused = client.request(
        "pen/callTool",
        json!({"name": "pen_read", "arguments": {"path": outside}}),
    );
    assert_eq!(refused["error"]["code"], "outside_workspace");
    let uri = super::lsp_client::file_uri(other.path());
    client.notify(
        "workspace/didChangeWorkspaceFolders",
        json!({"event": {"added": [{"uri": uri, "name": "other"}], "removed": []}}),
    );
    let page = client.request(
        "pen/callTool",
        json!({"name": "pen_read", "arguments": {"path": outside}}),
    );
    assert_eq!(page["content"], "other\n");
}

#[test]
fn malformed_input_gets_json_rpc_errors_and_the_daemon_keeps_serving() {
    let (_data, root, mut client) = daemon(&[("PEN_TEST_HOOKS", "1")]);
    // Before initialize: ServerNotInitialized.
    let early = client.request_raw("pen/getConfig", json!(null));
    assert_eq!(early["error"]["code"], -32002, "{early}");
    client.initialize(root.path(), &["utf-16"]);

    // Invalid JSON in a well-framed message: a parse error with a null id.
    client.send_raw(&frame(b"{not json"));
    let parse_error = client.next_message().unwrap();
    assert_eq!(parse_error["error"]["code"], -32700, "{parse_error}");
    assert_eq!(parse_error["id"], json!(null));

    // A bad Content-Length header, a header block without one, and a non-request body.
    client.send_raw(b"Content-Length: nope\r\n\r\n");
    let header_error = client.next_message().unwrap();
    assert_eq!(header_error["error"]["code"], -32700, "{header_error}");
    client.send_raw(b"Content-Type: x\r\n\r\n");
    assert_eq!(client.next_message().unwrap()["error"]["code"], -32700);
    client.send_raw(&frame(b"[1, 2]"));
    assert_eq!(client.next_message().unwrap()["error"]["code"], -32600);
    client.send_raw(&frame(br#"{"jsonrpc": "2.0", "id": 77, "method": 5}"#));
    let invalid = client.next_message().unwrap();
    assert_eq!(
        (invalid["error"]["code"].clone(), invalid["id"].clone()),
        (json!(-32600), json!(77))
    );

    // Unknown method, wrong param types.
    let unknown = client.request_raw("pen/noSuchMethod", json!({}));
    assert_eq!(unknown["error"]["code"], -32601);
    let wrong = client.request_raw("pen/callTool", json!({"name": 5}));
    assert_eq!(wrong["error"]["code"], -32602, "{wrong}");

    // A panic inside a handler is an InternalError; the next request is served.
    let panic = client.request_raw("pen/test/panic", json!(null));
    assert_eq!(panic["error"]["code"], -32603, "{panic}");
    assert!(
        panic["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("pen/test/panic"),
        "{panic}"
    );

    // A 100 MB message is read and answered, not fatal.
    let huge = json!({"jsonrpc": "2.0", "id": 999, "method": "pen/callTool",
        "params": {"name": "pen_search", "arguments": {"query": "x".repeat(100 * 1024 * 1024)}}});
    client.send_raw(&frame(huge.to_string().as_bytes()));
    let answer = client.wait_for_response(&json!(999));
    assert!(
        answer.get("result").is_some() || answer.get("error").is_some(),
        "{answer}"
    );

    assert_eq!(
        client.request("pen/getConfig", json!(null))["max_tool_result_bytes"],
        65_536
    );
    // The client disappears: the daemon exits cleanly.
    assert_eq!(client.close(), Some(0));
}

#[test]
fn a_file_changed_on_disk_after_a_read_is_seen_and_its_edit_refused() {
    let (_data, root, mut client) = daemon(&[("PEN_TEST_HOOKS", "1")]);
    fs::create_dir_all(root.path().join("src")).unwrap();
    fs::create_dir_all(root.path().join("node_modules/dep")).unwrap();
    fs::write(root.path().join("src/lib.rs"), "let x = 1;\n").unwrap();
    // root and src; node_modules is not entered.
    read_then_see_a_disk_change(&mut client, root.path());
    let edit = client.request(
        "pen/callTool",
        json!({"name": "pen_edit", "arguments": {"path": "src/lib.rs", "edits": [{"old_text": "2", "new_text": "3"}]}}),
    );
    assert_eq!(edit["error"]["code"], "stale", "{edit}");
    assert!(
        edit["error"]["message"]
            .as_str()
            .unwrap()
            .contains("changed on disk since you last read it"),
        "{edit}"
    );
    assert_eq!(
        fs::read_to_string(root.path().join("src/lib.rs")).unwrap(),
        "let x = 2;\n"
    );
}

#[test]
fn methods_without_required_params_take_empty_objects_and_arrays() {
    let (_data, root, mut client) = daemon(&[]);
    client.initialize(root.path(), &["utf-16"]);
    // Absent params too.
    let absent = frame(br#"{"jsonrpc": "2.0", "id": 4242, "method": "pen/getConfig"}"#);
    client.send_raw(&absent);
    assert!(
        client
            .wait_for_response(&json!(4242))
            .get("result")
            .is_some()
    );
    for params in [json!(null), json!({}), json!([])] {
        assert!(
            client
                .request_raw("pen/getConfig", params.clone())
                .get("result")
                .is_some(),
            "{params}"
        );
        assert!(
            client
                .request_raw("pen/listTools", params.clone())
                .get("result")
                .is_some(),
            "{params}"
        );
        assert!(
            client
                .request_raw("pen/listSessions", params.clone())
                .get("result")
                .is_some(),
            "{params}"
        );
        let created = client.request_raw("pen/newSession", params.clone());
        assert!(
            created["result"]["sessionId"].is_string(),
            "{params}: {created}"
        );
    }
    let wrong = client.request_raw("pen/newSession", json!({"title": 5}));
    assert_eq!(wrong["error"]["code"], -32602);
}

/// A Content-Length counted in characters instead of bytes (a title "café") cuts the body
/// short; the daemon answers a parse error and finds the next frame, so the ten requests after
/// it are answered.
#[test]
fn a_wrong_content_length_costs_only_its_own_frame() {
    let (_data, root, mut client) = daemon(&[]);
    client.initialize(root.path(), &["utf-16"]);
    let body = json!({"jsonrpc": "2.0", "id": 500, "method": "pen/newSession", "params": {"title": "café"}})
        .to_string();
    for length in [body.chars().count(), body.len() + 7] {
        let mut bytes = format!("Content-Length: {length}\r\n\r\n{body}").into_bytes();
        let ids: Vec<i64> = (0..10).map(|i| 1000 + i).collect();
        for id in &ids {
            let request = json!({"jsonrpc": "2.0", "id": id, "method": "pen/getConfig"});
            bytes.extend_from_slice(&frame(request.to_string().as_bytes()));
        }
        client.send_raw(&bytes);
        // Answers come in any order (requests run concurrently): gather them by id.
        let mut answered = std::collections::BTreeSet::new();
        while answered.len() < ids.len() {
            let message = client.next_message().expect("pen serve closed stdout");
            if let Some(id) = message["id"].as_i64()
                && ids.contains(&id)
                && message.get("result").is_some()
            {
                answered.insert(id);
            }
        }
        let answered = answered.len();
        assert!(answered >= 9, "length {length}: {answered} of 10 answered");
    }
    // And the daemon keeps serving.
    assert!(client.request("pen/getConfig", json!(null)).is_object());
}

/// A daemon whose provider is the fake (OpenAI wire format), as an editor starts it.
fn agent_daemon(
    fake: &super::fake_provider::FakeProvider,
) -> (tempfile::TempDir, tempfile::TempDir, LspClient) {
    let base = format!("{}/v1", fake.url());
    let (data, root, mut client) = daemon(&[
        ("PEN_PROVIDER", "openai"),
        ("PEN_BASE_URL", &base),
        ("PEN_MODEL", "fake-model"),
    ]);
    client.initialize(root.path(), &["utf-16"]);
    (data, root, client)
}

fn tool_call(id: &str, name: &str, args: serde_json::Value) -> pen::providers::ToolCall {
    pen::providers::ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: args.to_string(),
    }
}

fn usage() -> pen::providers::Usage {
    pen::providers::Usage::new(10, 5)
}

fn finished_states(client: &LspClient) -> Vec<(String, String)> {
    client
        .notifications
        .iter()
        .filter(|n| n["method"] == "pen/event" && n["params"]["kind"] == "tool_call_finished")
        .map(|n| {
            (
                n["params"]["data"]["callId"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                n["params"]["data"]["state"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            )
        })
        .collect()
}

/// Every malformed answer to `pen/requestApproval` fails closed: the call does not run and is
/// recorded as "approval no longer applies", not as a denial and not as an allow.
#[test]
fn a_malformed_approval_answer_is_never_an_allow() {
    use super::fake_provider::{FakeProvider, Reply, openai_frames};
    let fake = FakeProvider::start();
    let (_data, root, mut client) = agent_daemon(&fake);
    let session = client.request("pen/newSession", json!({}))["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    // Each shape is the raw JSON-RPC response pen receives (its id is filled in).
    let shapes = [
        json!({"result": ["allow"]}),
        json!({"result": "allow"}),
        json!({"result": null}),
        json!({"result": {"decision": "allow"}, "error": {"code": -32603, "message": "no"}}),
        json!({"result": {"decision": "allow"}, "error": "no"}),
        json!({"result": {"decision": "yes"}}),
        json!({"result": {"decision": ["allow"]}}),
        json!({"result": {"decision": {"allow": null}}}),
        json!({"result": {"decision": "allow", "reason": 5}}),
        json!({"result": {"decision": "allow", "scope": "everything"}}),
        json!({"result": {"decision": "Allow"}}),
        json!({"result": {}}),
    ];
    for (round, shape) in shapes.iter().enumerate() {
        let path = format!("f{round}.txt");
        let id = format!("c{round}");
        fake.push([
            Reply::Stream(openai_frames(
                &[],
                &[tool_call(
                    &id,
                    "pen_create",
                    json!({"path": path, "content": "x"}),
                )],
                usage(),
            )),
            Reply::Stream(openai_frames(&["Ok."], &[], usage())),
        ]);
        let prompt = client.send_request(
            "pen/prompt",
            json!({"sessionId": session, "text": "create it"}),
        );
        let request =
            client.wait_for(|m| m["method"] == "pen/requestApproval" && m.get("id").is_some());
        let mut answer = shape.clone();
        answer["jsonrpc"] = json!("2.0");
        answer["id"] = request["id"].clone();
        client.send_raw(&frame(answer.to_string().as_bytes()));
        let outcome = client.wait_for_response(&prompt);
        assert_eq!(
            outcome["result"]["stopReason"], "end_turn",
            "{shape}: {outcome}"
        );
        assert!(!root.path().join(&path).exists(), "{shape}: the call ran");
        let state = finished_states(&client)
            .into_iter()
            .find(|(call, _)| *call == id)
            .map(|(_, state)| state);
        assert_eq!(state.as_deref(), Some("stale_authority"), "{shape}");
    }
    // A well-formed allow still runs the call.
    fake.push([
        Reply::Stream(openai_frames(
            &[],
            &[tool_call(
                "ok",
                "pen_create",
                json!({"path": "ok.txt", "content": "x"}),
            )],
            usage(),
        )),
        Reply::Stream(openai_frames(&["Ok."], &[], usage())),
    ]);
    client.on_request(|method, _| match method {
        "pen/requestApproval" => json!({"decision": "allow", "reason": null}),
        _ => serde_json::Value::Null,
    });
    let outcome = client.request("pen/prompt", json!({"sessionId": session, "text": "go"}));
    assert_eq!(outcome["stopReason"], "end_turn");
    assert!(root.path().join("ok.txt").exists());
}

/// Stop while a command's background child holds its output pipe ends the turn at once; the
/// call is recorded as stopped with an unknown outcome, keeping the output read so far.
#[test]
fn stop_ends_a_command_whose_background_child_holds_the_pipe() {
    use super::fake_provider::{FakeProvider, Reply, openai_frames};
    let fake = FakeProvider::start();
    let (_data, root, mut client) = agent_daemon(&fake);
    client.request("pen/setConfig", json!({"auto_approve": ["pen_command"]}));
    let session = client.request("pen/newSession", json!({}))["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    let marker = root.path().join("printed");
    // The marker is made after the echo: once it exists, "started" is in the pipe.
    let command = format!("sleep 30 & echo started; touch {}", marker.display());
    fake.push([
        Reply::Stream(openai_frames(
            &[],
            &[tool_call("cmd", "pen_command", json!({"command": command}))],
            usage(),
        )),
        Reply::Stream(openai_frames(&["Stopped."], &[], usage())),
    ]);
    let prompt = client.send_request(
        "pen/prompt",
        json!({"sessionId": session, "text": "start it"}),
    );
    client.wait_for(|m| m["method"] == "pen/event" && m["params"]["kind"] == "tool_call_started");
    // A bounded wait for the command's own progress, far below its 30 s sleep.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !marker.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the command never ran"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(
        client.request("pen/stop", json!({"sessionId": session}))["stopped"],
        true
    );
    let answer = client.wait_for_response(&prompt);
    assert_eq!(answer["result"]["stopReason"], "cancelled", "{answer}");
    assert_eq!(
        finished_states(&client),
        [("cmd".to_string(), "unknown".to_string())]
    );
    let transcript = client.request(
        "pen/getTranscript",
        json!({"sessionId": session, "limit": 500}),
    );
    let result = transcript["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "tool_result")
        .cloned()
        .unwrap();
    let content = result["data"]["content"].as_str().unwrap();
    assert!(content.contains("outcome unknown"), "{content}");
    assert!(content.contains("started"), "{content}");
}

/// Gathers every session through `pen/listSessions` pages of `limit`, checking each page's
/// size against the page bound.
fn list_every_session(
    client: &mut LspClient,
    limit: usize,
    include_empty: bool,
) -> Vec<serde_json::Value> {
    let mut sessions = Vec::new();
    let mut cursor = serde_json::Value::Null;
    loop {
        let response = client.request_raw(
            "pen/listSessions",
            json!({"cursor": cursor, "limit": limit, "includeEmpty": include_empty}),
        );
        let bytes = response.to_string().len();
        assert!(
            bytes <= pen::limits::MAX_SESSION_PAGE_BYTES + 4096,
            "a {bytes}-byte page"
        );
        let page = &response["result"];
        sessions.extend(page["sessions"].as_array().unwrap().iter().cloned());
        match page.get("nextCursor") {
            Some(next) => cursor = next.clone(),
            None => return sessions,
        }
    }
}

/// 12 sessions with 5 MB titles (as a database written before titles were bounded holds them)
/// and 1 MB titles sent to `pen/newSession`: every title is listed cut on a character boundary,
/// and no page passes its byte bound.
#[test]
fn session_titles_and_listing_pages_are_bounded() {
    let (data, root, mut client) = daemon(&[]);
    client.initialize(root.path(), &["utf-16"]);
    let long = "é".repeat(512 * 1024);
    let mut ids = Vec::new();
    for _ in 0..12 {
        let created = client.request("pen/newSession", json!({"title": long}));
        let title = created["title"].as_str().unwrap();
        assert!(title.len() <= pen::limits::MAX_SESSION_TITLE_BYTES);
        assert!(title.len() >= pen::limits::MAX_SESSION_TITLE_BYTES - 1);
        assert!(title.chars().all(|c| c == 'é'));
        ids.push(created["sessionId"].as_str().unwrap().to_string());
    }
    let db = rusqlite::Connection::open(data.path().join("sessions.sqlite3")).unwrap();
    let old = format!("x{}", "é".repeat(5 * 512 * 1024));
    for id in &ids {
        db.execute(
            "UPDATE sessions SET title = ?1 WHERE id = ?2",
            rusqlite::params![old, id],
        )
        .unwrap();
    }
    let listed = list_every_session(&mut client, 200, false);
    assert_eq!(listed.len(), 12);
    for session in &listed {
        let title = session["title"].as_str().unwrap();
        assert!(
            title.len() <= pen::limits::MAX_SESSION_TITLE_BYTES,
            "{}",
            title.len()
        );
        assert!(title.starts_with("xé"), "{title}");
    }

    // Titles of control characters escape to six bytes each: the page ends early instead of
    // passing its bound, and paging still lists every session exactly once.
    let wide = "\u{1}".repeat(pen::limits::MAX_SESSION_TITLE_BYTES);
    for _ in 0..188 {
        client.request("pen/newSession", json!({"title": wide}));
    }
    let first = client.request("pen/listSessions", json!({"limit": 200}));
    let shown = first["sessions"].as_array().unwrap().len();
    assert!(shown < 200 && first.get("nextCursor").is_some(), "{shown}");
    let mut listed: Vec<String> = list_every_session(&mut client, 200, false)
        .iter()
        .map(|s| s["sessionId"].as_str().unwrap().to_string())
        .collect();
    listed.sort();
    listed.dedup();
    assert_eq!(listed.len(), 200);
}

/// A first prompt whose provider refuses the connection leaves a session with only the
/// prompt and an error: it is not listed as work (`pen/listSessions`, `pen sessions`) unless
/// asked for, and resuming it by id still works — after which it is listed.
#[test]
fn a_session_whose_first_request_failed_is_not_listed_as_work() {
    use super::fake_provider::{FakeProvider, Reply, openai_frames};
    // A port nothing listens on: bound, then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let refused = format!("http://127.0.0.1:{port}/v1");
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let mut client = LspClient::spawn(
        data.path(),
        root.path(),
        &[
            ("PEN_PROVIDER", "openai"),
            ("PEN_BASE_URL", &refused),
            ("PEN_MODEL", "fake-model"),
            ("PEN_MAX_ATTEMPTS", "1"),
        ],
    );
    client.initialize(root.path(), &["utf-16"]);
    let fresh = client.request("pen/newSession", json!({"title": "fresh"}))["sessionId"].clone();
    let failed = client.request("pen/newSession", json!({"title": "failed"}))["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    let outcome = client.request("pen/prompt", json!({"sessionId": failed, "text": "hello"}));
    assert_eq!(outcome["stopReason"], "error", "{outcome}");
    let ids = |sessions: Vec<serde_json::Value>| -> Vec<serde_json::Value> {
        sessions.iter().map(|s| s["sessionId"].clone()).collect()
    };
    assert_eq!(
        ids(list_every_session(&mut client, 50, false)),
        std::slice::from_ref(&fresh)
    );
    assert_eq!(
        ids(list_every_session(&mut client, 50, true)),
        [json!(failed), fresh.clone()]
    );
    // `pen run` against the refused provider leaves one more such session.
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_pen"))
        .args([
            "run",
            "hi",
            "--provider",
            "openai",
            "--model",
            "m",
            "--base-url",
            &refused,
        ])
        .current_dir(root.path())
        .env("PEN_DATA_DIR", data.path())
        .env("PEN_CONFIG", "/nonexistent/pen/config.toml")
        .env("PEN_MAX_ATTEMPTS", "1")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(1));
    let cli_sessions = |args: &[&str]| -> usize {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_pen"))
            .args(args)
            .env("PEN_DATA_DIR", data.path())
            .output()
            .unwrap();
        assert!(output.status.success());
        String::from_utf8_lossy(&output.stdout).lines().count()
    };
    assert_eq!(cli_sessions(&["sessions"]), 1);
    assert_eq!(cli_sessions(&["sessions", "--all"]), 3);
    drop(client);

    // Resumed by id with a working provider, the session has work in it and is listed.
    let fake = FakeProvider::start();
    fake.push([Reply::Stream(openai_frames(&["Hello."], &[], usage()))]);
    let base = format!("{}/v1", fake.url());
    let mut client = LspClient::spawn(
        data.path(),
        root.path(),
        &[
            ("PEN_PROVIDER", "openai"),
            ("PEN_BASE_URL", &base),
            ("PEN_MODEL", "fake-model"),
        ],
    );
    client.initialize(root.path(), &["utf-16"]);
    let outcome = client.request("pen/prompt", json!({"sessionId": failed, "text": "again"}));
    assert_eq!(outcome["stopReason"], "end_turn", "{outcome}");
    assert_eq!(
        ids(list_every_session(&mut client, 50, false)),
        [json!(failed), fresh]
    );
}

/// The server answers every request `protocol::methods` names (whose list the unit test
/// `protocol::codegen::docs_protocol_md_documents_exactly_the_methods` compares with
/// `docs/protocol.md`): none is "method not found", whatever its params.
#[test]
fn the_server_answers_every_request_protocol_names() {
    let (_data, root, mut client) = daemon(&[]);
    client.initialize(root.path(), &["utf-16"]);
    for method in pen::protocol::methods::REQUESTS {
        // `{}` is valid or InvalidParams for every method; neither is -32601.
        let answer = client.request_raw(method, json!({}));
        assert_ne!(answer["error"]["code"], -32601, "{method}: {answer}");
    }
    let unknown = client.request_raw("pen/notAMethod", json!({}));
    assert_eq!(unknown["error"]["code"], -32601, "{unknown}");
}

/// A client that stops reading stdout and then closes stdin cannot hold `pen serve` open:
/// the answers fill the pipe (far more than its 64 KiB), pen's stdout thread blocks on it,
/// and at end of input pen waits at most its bounded drain for that thread, then exits 0.
#[test]
fn a_client_that_stops_reading_cannot_hold_pen_open_at_exit() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    fs::write(root.path().join("big.txt"), "x".repeat(60) + "\n").unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_pen"))
        .arg("serve")
        .current_dir(root.path())
        .env("PEN_DATA_DIR", data.path())
        .env("PEN_CONFIG", "/nonexistent/pen/config.toml")
        .stdin(Stdio::piped())
        // Piped and never read: the client has stopped reading.
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"rootUri": null, "capabilities": {}}});
    stdin
        .write_all(&frame(init.to_string().as_bytes()))
        .unwrap();
    // Each answer is a few hundred bytes: 1,000 of them are several pipes' worth, while the
    // requests (~150 KB) fit in what pen reads ahead, so this loop never waits on pen.
    for id in 1..=1_000 {
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "pen/callTool",
            "params": {"name": "pen_read", "arguments": {"path": "big.txt"}}});
        if stdin
            .write_all(&frame(call.to_string().as_bytes()))
            .is_err()
        {
            break;
        }
    }
    drop(stdin);
    let code = super::common::wait_bounded(&mut child, std::time::Duration::from_secs(60));
    assert_eq!(code, 0);
    // The case was the stalled one: the pipe was full (to within one answer) when pen exited.
    let mut out = Vec::new();
    std::io::Read::read_to_end(child.stdout.as_mut().unwrap(), &mut out).unwrap();
    assert!(
        out.len() > 60 * 1024,
        "the pipe was filled: {} bytes",
        out.len()
    );
}

/// A hostile repository's `.gitignore` that is a FIFO does not hold the disk watcher: it starts,
/// watches the folders and sees a change (before, its walk waited forever for a writer).
#[test]
fn a_fifo_named_gitignore_does_not_hold_the_disk_watcher() {
    let (_data, root, mut client) = daemon(&[("PEN_TEST_HOOKS", "1")]);
    fs::create_dir_all(root.path().join("src")).unwrap();
    fs::write(root.path().join("src/lib.rs"), "let x = 1;\n").unwrap();
    super::common::make_fifo(&root.path().join("src/.gitignore"));
    read_then_see_a_disk_change(&mut client, root.path());
    assert_eq!(client.close(), Some(0));
}

/// Initializes the daemon over `root`, reads `src/lib.rs` ("let x = 1;"), checks that the
/// watcher watches two folders (the root and `src`), changes the file on disk and waits until
/// the watcher has reported it.
fn read_then_see_a_disk_change(client: &mut LspClient, root: &std::path::Path) {
    client.initialize(root, &["utf-16"]);
    client.request(
        "pen/callTool",
        json!({"name": "pen_read", "arguments": {"path": "src/lib.rs"}}),
    );
    // The watcher starts after `initialized`; the hook answers once it runs.
    let status = client.request("pen/test/watchStatus", json!(null));
    assert_eq!(status["watching"], true, "{status}");
    assert_eq!(status["watched"], 2, "{status}");
    fs::write(root.join("src/lib.rs"), "let x = 2;\n").unwrap();
    let path = root.join("src/lib.rs").to_string_lossy().into_owned();
    let seen = client.request("pen/test/awaitDiskChange", json!({"path": path}));
    assert_eq!(seen["changed"], true);
}
