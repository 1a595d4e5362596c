//! The context window (issue 18): discovered from each kind of server when the config does not
//! set it, the user's setting winning, the default said once; calibration that an
//! under-reporting server cannot push over the window; and the native Ollama backend, which
//! never sends more than the `num_ctx` it asks for and reports a likely silent truncation.
//! `pen serve` and `pen run` against the fake provider on 127.0.0.1.

use super::fake_provider::{BODY_TOKENS, FakeProvider, Reply, ollama_lines, openai_frames};
use super::lsp_client::LspClient;
use pen::providers::Usage;
use serde_json::{Value, json};
use std::process::{Command, Stdio};

struct Daemon {
    _data: tempfile::TempDir,
    _root: tempfile::TempDir,
    client: LspClient,
}

/// A daemon talking to the fake as `provider` (with `base`, the fake's URL plus a suffix),
/// with `env` on top; no `context_window_tokens` unless `env` sets it.
fn daemon(fake: &FakeProvider, provider: &str, suffix: &str, env: &[(&str, &str)]) -> Daemon {
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let base = format!("{}{suffix}", fake.url());
    let mut vars = vec![
        ("PEN_PROVIDER", provider),
        ("PEN_BASE_URL", base.as_str()),
        ("PEN_MODEL", "fake-model"),
        ("OPENAI_API_KEY", "sk-test"),
    ];
    vars.extend_from_slice(env);
    let mut client = LspClient::spawn(data.path(), root.path(), &vars);
    client.initialize(root.path(), &["utf-16"]);
    Daemon {
        _data: data,
        _root: root,
        client,
    }
}

fn effective(d: &mut Daemon) -> Value {
    d.client.request("pen/getConfig", json!(null))["effective_context_window"].clone()
}

fn answer(text: &str, prompt_tokens: u64) -> Reply {
    Reply::Stream(openai_frames(&[text], &[], Usage::new(prompt_tokens, 3)))
}

#[test]
fn each_server_kind_reports_its_window_and_get_config_says_where_it_came_from() {
    let cases = [
        (
            "/props",
            json!({"default_generation_settings": {"n_ctx": 8192}, "total_slots": 1}),
            8192,
            "llama_cpp_props",
        ),
        (
            "/v1/models",
            json!({"object": "list", "data": [{"id": "other", "max_model_len": 1}, {"id": "fake-model", "max_model_len": 16384}]}),
            16384,
            "vllm_models",
        ),
        (
            "/api/v0/models",
            json!({"object": "list", "data": [{"id": "fake-model", "state": "loaded", "max_context_length": 32768, "loaded_context_length": 8192}]}),
            8192,
            "lm_studio_models",
        ),
        // Through the OpenAI-compatible endpoint Ollama ignores num_ctx: its own default
        // (4,096) holds, whatever the model was trained on.
        (
            "/api/show",
            json!({"model_info": {"general.architecture": "qwen2", "qwen2.context_length": 32768}}),
            4096,
            "ollama_show",
        ),
    ];
    for (path, body, tokens, source) in cases {
        let fake = FakeProvider::start();
        fake.discovery(path, body);
        let mut d = daemon(&fake, "openai", "/v1", &[]);
        let shown = effective(&mut d);
        assert_eq!(shown["tokens"], tokens, "{path}: {shown}");
        assert_eq!(shown["source"], source, "{path}: {shown}");
        assert_eq!(shown["model"], "fake-model");
        assert_eq!(
            d.client.request("pen/getConfig", json!(null))["context_window_tokens"],
            Value::Null
        );
        // A turn plans under it and the session records where it came from.
        fake.push([answer("hi", BODY_TOKENS)]);
        let session = d.client.new_session();
        let outcome = d.client.prompt(&session, "hello");
        assert_eq!(outcome["stopReason"], "end_turn", "{path}: {outcome}");
        // pen_plan is offered from an 8,192-token window up: under 4,096 the other tools'
        // schemas leave it no room.
        let requests = fake.requests();
        let offered: Vec<&str> = requests[0].body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|tool| tool["function"]["name"].as_str())
            .collect();
        assert_eq!(
            offered.len(),
            if tokens >= 8192 { 9 } else { 8 },
            "{path}: {offered:?}"
        );
        assert_eq!(
            offered.contains(&"pen_plan"),
            tokens >= 8192,
            "{path}: {offered:?}"
        );
        let found: Vec<Value> = d
            .client
            .transcript(&session)
            .into_iter()
            .filter(|e| e["kind"] == "context_window")
            .collect();
        assert_eq!(found.len(), 1, "{path}: {found:?}");
        assert_eq!(found[0]["data"]["tokens"], tokens);
        assert_eq!(found[0]["data"]["source"], source);
        let window_events: Vec<&Value> = d
            .client
            .notifications
            .iter()
            .filter(|n| n["params"]["kind"] == "context_window")
            .collect();
        assert_eq!(window_events.len(), 1, "{path}");
        assert_eq!(window_events[0]["params"]["data"]["tokens"], tokens);
    }
}

/// llama.cpp says when its chat template renders no tools (`--jinja` with a template
/// without them): the model never sees them, so pen neither sends nor counts them, and a
/// window too small for pen's tool schemas still serves a chat.
#[test]
fn a_template_without_tools_gets_none_and_a_small_window_still_chats() {
    let fake = FakeProvider::start();
    fake.discovery(
        "/props",
        json!({"default_generation_settings": {"n_ctx": 2048},
               "chat_template_caps": {"supports_tools": false, "supports_system_role": true}}),
    );
    let mut d = daemon(&fake, "openai", "/v1", &[]);
    fake.push([answer("hi", BODY_TOKENS)]);
    let session = d.client.new_session();
    let outcome = d.client.prompt(&session, "hello");
    assert_eq!(outcome["stopReason"], "end_turn", "{outcome}");
    let request = &fake.requests()[0];
    assert!(request.body.get("tools").is_none(), "{}", request.body);
    let found = d
        .client
        .transcript(&session)
        .into_iter()
        .find(|e| e["kind"] == "context_window")
        .unwrap();
    assert_eq!(found["data"]["toolsDropped"], true);
}

#[test]
fn the_users_setting_wins_and_asks_no_server() {
    let fake = FakeProvider::start();
    fake.discovery(
        "/props",
        json!({"default_generation_settings": {"n_ctx": 2048}}),
    );
    let mut d = daemon(
        &fake,
        "openai",
        "/v1",
        &[("PEN_CONTEXT_WINDOW_TOKENS", "9000")],
    );
    let shown = effective(&mut d);
    assert_eq!(shown["tokens"], 9000, "{shown}");
    assert_eq!(shown["source"], "config", "{shown}");
    assert!(fake.discovery_requests().is_empty());
    // And `null` unsets it: the server is asked again.
    d.client
        .request("pen/setConfig", json!({"context_window_tokens": null}));
    let shown = effective(&mut d);
    assert_eq!(
        (shown["tokens"].clone(), shown["source"].clone()),
        (json!(2048), json!("llama_cpp_props"))
    );
}

#[test]
fn a_model_nothing_knows_gets_the_default_and_pen_run_says_so() {
    let fake = FakeProvider::start();
    let mut d = daemon(&fake, "openai", "/v1", &[]);
    let shown = effective(&mut d);
    assert_eq!(shown["source"], "default", "{shown}");
    assert_eq!(shown["tokens"], pen::limits::CONTEXT_WINDOW_TOKENS.default);
    // The hosted table knows OpenAI's models, behind any base URL.
    let mut hosted = daemon(&fake, "openai", "/v1", &[("PEN_MODEL", "gpt-4o-mini")]);
    let shown = effective(&mut hosted);
    assert_eq!(
        (shown["tokens"].clone(), shown["source"].clone()),
        (json!(128_000), json!("hosted_table"))
    );

    // `pen run` says it in its one start line.
    fake.push([answer("hi", BODY_TOKENS)]);
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_pen"))
        .args([
            "run",
            "hello",
            "--provider",
            "openai",
            "--model",
            "fake-model",
        ])
        .arg("--base-url")
        .arg(format!("{}/v1", fake.url()))
        .current_dir(root.path())
        .env("PEN_DATA_DIR", data.path())
        .env("PEN_CONFIG", "/nonexistent/pen/config.toml")
        .env("OPENAI_API_KEY", "sk-test")
        .env_remove("PEN_CONTEXT_WINDOW_TOKENS")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("context window"))
        .collect();
    assert_eq!(
        lines,
        [format!(
            "pen: model fake-model, context window {} tokens (default: nothing knew the model; set context_window_tokens)",
            pen::limits::CONTEXT_WINDOW_TOKENS.default
        )],
        "{stderr}"
    );
}

/// Issue 18's calibration case: a server that reports `prompt_tokens: 100` whatever it is
/// sent. Before, the ratio (clamped at 0.5) halved every estimate and requests grew to twice
/// the window; now such reports are ignored, and every request stays within the window.
#[test]
fn a_server_reporting_a_constant_prompt_count_cannot_push_requests_over_the_window() {
    const WINDOW: usize = 9_000;
    let fake = FakeProvider::start();
    let mut d = daemon(
        &fake,
        "openai",
        "/v1",
        &[
            ("PEN_CONTEXT_WINDOW_TOKENS", "9000"),
            ("PEN_MAX_OUTPUT_TOKENS", "500"),
        ],
    );
    let session = d.client.new_session();
    let note = "The parser checks every key against its bounds and reports what it refuses. ";
    for turn in 0..12 {
        fake.push([answer("Noted.", 100)]);
        let outcome = d
            .client
            .prompt(&session, &format!("Turn {turn}. {}", note.repeat(60)));
        assert_eq!(outcome["stopReason"], "end_turn", "{outcome}");
    }
    for (n, request) in fake.requests().iter().enumerate() {
        // Four bytes a token is what an English text costs in every family's tokenizer.
        assert!(
            request.raw_body.len() / 4 <= WINDOW,
            "request {n} is {} bytes, over the {WINDOW}-token window",
            request.raw_body.len()
        );
    }
}

/// A daemon on the native Ollama backend, against the fake speaking `/api/chat`, whose model
/// was trained on `trained` tokens.
fn ollama_daemon(fake: &FakeProvider, trained: u64, env: &[(&str, &str)]) -> Daemon {
    fake.discovery(
        "/api/show",
        json!({"model_info": {"general.architecture": "llama", "llama.context_length": trained}}),
    );
    daemon(fake, "ollama", "", env)
}

#[test]
fn native_ollama_never_sends_more_than_the_num_ctx_it_asks_for() {
    let fake = FakeProvider::start();
    // The fake keeps only the tail of a body over num_ctx and says so in prompt_eval_count.
    fake.truncate_like_ollama(true);
    let mut d = ollama_daemon(&fake, 8_192, &[("PEN_MAX_OUTPUT_TOKENS", "1024")]);
    let shown = effective(&mut d);
    assert_eq!(
        (shown["tokens"].clone(), shown["source"].clone()),
        (json!(8192), json!("ollama_show"))
    );
    let session = d.client.new_session();
    let note = "The parser checks every key against its bounds and reports what it refuses. ";
    for turn in 0..10 {
        fake.push([Reply::Ndjson(ollama_lines(&["Noted."], &[], BODY_TOKENS))]);
        let outcome = d
            .client
            .prompt(&session, &format!("Turn {turn}. {}", note.repeat(40)));
        assert_eq!(outcome["stopReason"], "end_turn", "{outcome}");
    }
    let requests = fake.requests();
    assert_eq!(requests.len(), 10);
    let mut asked = Vec::new();
    for request in &requests {
        assert_eq!(request.path, "/api/chat");
        let num_ctx = request.body["options"]["num_ctx"].as_u64().unwrap();
        assert!(num_ctx.is_multiple_of(2_048), "a stable step");
        assert!(num_ctx <= 8_192, "capped at the trained window");
        // Over num_ctx (at four bytes a token) is what the fake, like Ollama, truncates.
        assert!(
            (request.raw_body.len() / 4) as u64 <= num_ctx,
            "a {}-byte request with num_ctx {num_ctx}",
            request.raw_body.len()
        );
        asked.push(num_ctx);
    }
    // The window follows the session in steps (down again after a compaction), up to the
    // trained one.
    assert!(asked.contains(&8_192), "{asked:?}");
    assert!(asked.iter().all(|&n| n >= 2_048), "{asked:?}");
    // Nothing was truncated, so nothing was reported.
    assert!(
        !d.client
            .notifications
            .iter()
            .any(|n| n["params"]["kind"] == "provider_warning")
    );
}

#[test]
fn a_truncated_ollama_answer_is_reported_with_the_fix() {
    let fake = FakeProvider::start();
    let mut d = ollama_daemon(&fake, 32_768, &[]);
    let session = d.client.new_session();
    // An Ollama that truncated anyway (a proxy that rewrote num_ctx, an old server): it
    // evaluated 40 tokens of a request of about 2,000.
    fake.push([Reply::Ndjson(ollama_lines(&["Hm."], &[], 40))]);
    let outcome = d
        .client
        .prompt(&session, &"Explain the parser. ".repeat(300));
    assert_eq!(outcome["stopReason"], "end_turn", "{outcome}");
    let warning = d
        .client
        .notifications
        .iter()
        .find(|n| n["params"]["kind"] == "provider_warning")
        .cloned()
        .expect("a provider_warning event");
    let message = warning["params"]["data"]["message"].as_str().unwrap();
    assert!(
        message.contains("evaluated 40 prompt tokens")
            && message.contains("likely dropped the start")
            && message.contains("context_window_tokens"),
        "{message}"
    );
    let stored = d
        .client
        .transcript(&session)
        .into_iter()
        .find(|e| e["kind"] == "provider_warning")
        .expect("the warning is recorded");
    assert_eq!(stored["data"]["message"], message);
    // Ollama's count is not a total: it calibrates nothing.
    let answer = d
        .client
        .transcript(&session)
        .into_iter()
        .find(|e| e["kind"] == "assistant_message")
        .unwrap();
    assert_eq!(answer["data"]["estimatedInputTokens"], Value::Null);
}

#[test]
fn native_ollama_errors_are_classified() {
    let fake = FakeProvider::start();
    let mut d = ollama_daemon(&fake, 8_192, &[("PEN_MAX_ATTEMPTS", "1")]);
    let session = d.client.new_session();
    fake.push([Reply::Error {
        status: 404,
        headers: vec![],
        body: json!({"error": "model 'fake-model' not found"}).to_string(),
    }]);
    let outcome = d.client.prompt(&session, "hi");
    assert_eq!(outcome["errorKind"], "provider_bad_request", "{outcome}");
    assert!(
        outcome["lastError"]
            .as_str()
            .unwrap()
            .contains("ollama pull fake-model"),
        "{outcome}"
    );
}

/// A turn fits its tools' pages to the window it found (SPEC §3), under either policy: a server
/// reporting 16,000 tokens leaves a budget of 11,500, of which about 8,600 are left after pen's
/// prompt and schemas: pages of a third of that, about 11.5 KB. A typical source file (200
/// lines, 5.7 KB) comes back whole in one page; a 20 KB one as a first page of about 11.5 KB
/// with a cursor; the catalog states the page.
#[test]
fn a_found_window_fits_the_pages_of_the_turn() {
    for policy in [4, 3] {
        let fake = FakeProvider::start();
        fake.discovery(
            "/props",
            json!({"default_generation_settings": {"n_ctx": 16000},
                   "chat_template_caps": {"supports_tools": true, "supports_system_role": true}}),
        );
        let policy_var = policy.to_string();
        let mut d = daemon(
            &fake,
            "openai",
            "/v1",
            &[("PEN_BUDGET_POLICY", policy_var.as_str())],
        );
        let small: String = (0..200)
            .map(|j| format!("fn line_{j}() -> u32 {{ {j} }}\n"))
            .collect();
        let big: String = (0..200)
            .map(|j| format!("fn line_{j}() -> u32 {{ {j} }} // {}\n", "x".repeat(70)))
            .collect();
        std::fs::write(d._root.path().join("small.rs"), &small).unwrap();
        std::fs::write(d._root.path().join("big.rs"), &big).unwrap();
        let read = |id: &str, path: &str| pen::providers::ToolCall {
            id: id.into(),
            name: "pen_read".into(),
            arguments: json!({"path": path}).to_string(),
        };
        fake.push([
            Reply::Stream(openai_frames(
                &["Reading."],
                &[read("c1", "small.rs"), read("c2", "big.rs")],
                Usage::new(BODY_TOKENS, 3),
            )),
            answer("Read.", BODY_TOKENS),
        ]);
        let session = d.client.new_session();
        let outcome = d.client.prompt(&session, "read the files");
        assert_eq!(outcome["stopReason"], "end_turn", "{outcome}");
        let results: Vec<Value> = d
            .client
            .transcript(&session)
            .into_iter()
            .filter(|e| e["kind"] == "tool_result")
            .map(|e| serde_json::from_str(e["data"]["content"].as_str().unwrap()).unwrap())
            .collect();
        assert_eq!(results.len(), 2);
        let catalog = fake.requests()[0].body["tools"].to_string();
        // The small file is one page under either policy.
        assert_eq!(results[0]["content"], small.as_str(), "{}", results[0]);
        let page = results[1]["content"].as_str().unwrap();
        assert!(
            (10_000..12_500).contains(&page.len()),
            "policy {policy}: a {}-byte page",
            page.len()
        );
        assert!(big.starts_with(page));
        assert!(results[1]["next_start_line"].is_u64(), "{}", results[1]);
        assert!(!catalog.contains("200 lines and 32 KiB"), "{catalog}");
    }
}

/// Issue 26, item 9: a server that reports an absurd window (llama.cpp `n_ctx` 2^64−1, an
/// Ollama model "trained" on as much) is no answer: the configured bounds of
/// `context_window_tokens` apply to a discovered window as to a set one, so pen falls back to
/// the default, records nothing, and a turn with a paged read plans and runs (no page
/// arithmetic wraps).
#[test]
fn a_discovered_window_outside_the_bounds_is_not_adopted() {
    for (path, body) in [
        (
            "/props",
            json!({"default_generation_settings": {"n_ctx": u64::MAX}}),
        ),
        (
            "/v1/models",
            json!({"data": [{"id": "fake-model", "max_model_len": 10_000_001u64}]}),
        ),
    ] {
        let fake = FakeProvider::start();
        fake.discovery(path, body);
        let mut d = daemon(&fake, "openai", "/v1", &[("PEN_BUDGET_POLICY", "4")]);
        let shown = effective(&mut d);
        assert_eq!(shown["source"], "default", "{path}: {shown}");
        assert_eq!(shown["tokens"], 32_768, "{path}: {shown}");
        std::fs::write(d._root.path().join("a.txt"), "alpha\n".repeat(50)).unwrap();
        let read = pen::providers::ToolCall {
            id: "c1".into(),
            name: "pen_read".into(),
            arguments: json!({"path": "a.txt"}).to_string(),
        };
        fake.push([
            Reply::Stream(openai_frames(
                &["Reading."],
                &[read],
                Usage::new(BODY_TOKENS, 3),
            )),
            answer("Read.", BODY_TOKENS),
        ]);
        let session = d.client.new_session();
        let outcome = d.client.prompt(&session, "read a.txt");
        assert_eq!(outcome["stopReason"], "end_turn", "{path}: {outcome}");
        let transcript = d.client.transcript(&session);
        assert!(
            !transcript.iter().any(|e| e["kind"] == "context_window"),
            "{path}: {transcript:?}"
        );
    }
    // Native Ollama: a trained window over the bounds is no answer either.
    let fake = FakeProvider::start();
    let mut d = ollama_daemon(&fake, u64::MAX, &[]);
    let shown = effective(&mut d);
    assert_eq!(shown["source"], "default", "{shown}");
}
