//! A real model server as a test peer: llama.cpp's llama-server with SmolLM2-135M, on
//! 127.0.0.1, offline. `scripts/llama-server.sh` builds the server and fetches the model, and
//! prints the two variables these tests read; `scripts/test` (the whole suite) does that first:
//!
//! ```sh
//! eval "$(scripts/llama-server.sh)" && cargo test --test real_llama
//! ```
//!
//! The product test is `pen_run_against_llama_server`: the real `pen run` binary, through pen's
//! own OpenAI-compatible backend, against the real server. The one test that speaks to the
//! server directly, `the_recorded_fixtures_match_the_live_server`, does so on purpose: it checks
//! the peer itself, so the recorded bodies the classifiers' unit tests replay stay true to what
//! llama-server sends.
//!
//! Without `PEN_LLAMA_SERVER` and `PEN_LLAMA_MODEL` the tests that need the server fail, saying
//! how to provide it, unless `PEN_SKIP_REAL_PEERS=1` skips them knowingly (never under `CI`);
//! a skipped test is listed in `PEN_SKIPPED_LOG`, which `scripts/test` counts and prints.

#[path = "suite/peers.rs"]
mod peers;

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The context window the server is started with: small, so an over-context prompt is cheap.
const CONTEXT_TOKENS: u64 = 512;

/// How long the server may take to load the model. It is ready in about 0.4 s on 2 cores;
/// the margin is for a loaded CI machine.
const STARTUP_DEADLINE: Duration = Duration::from_secs(60);

/// The pause between two health checks while the server loads.
const HEALTH_POLL_INTERVAL: Duration = Duration::from_millis(50);

/// A running llama-server, killed when dropped so a failed assertion leaves no process behind.
struct LlamaServer {
    child: Child,
    base_url: String,
    log: tempfile::NamedTempFile,
}

impl LlamaServer {
    fn start(server: &Path, model: &Path, context_tokens: u64) -> LlamaServer {
        // A port the OS just handed out and released: free unless another process grabs it in
        // the moment before llama-server binds it, which would fail the start loudly.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port on 127.0.0.1")
            .port();
        let log = tempfile::NamedTempFile::new().expect("log file");
        let child = Command::new(server)
            .arg("-m")
            .arg(model)
            .args(["--alias", "smollm2", "-c", &context_tokens.to_string()])
            .args(["-np", "1", "-t", "2", "--jinja", "--host", "127.0.0.1"])
            .args(["--port", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(log.reopen().expect("log file"))
            .stderr(log.reopen().expect("log file"))
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", server.display()));
        LlamaServer {
            child,
            base_url: format!("http://127.0.0.1:{port}"),
            log,
        }
    }

    /// The server's own output, for failure messages.
    fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    /// Polls `GET /health` until it answers `{"status":"ok"}` (it answers 503 while the model
    /// loads), the process exits, or the deadline passes.
    async fn wait_until_healthy(&mut self, client: &reqwest::Client) {
        let deadline = Instant::now() + STARTUP_DEADLINE;
        loop {
            if let Some(status) = self.child.try_wait().expect("poll llama-server") {
                panic!("llama-server exited with {status}:\n{}", self.log());
            }
            let health = client
                .get(format!("{}/health", self.base_url))
                .send()
                .await
                .ok();
            if let Some(response) = health
                && response.status().is_success()
            {
                let body: Value = response.json().await.expect("health JSON");
                assert_eq!(body, json!({"status": "ok"}));
                return;
            }
            assert!(
                Instant::now() < deadline,
                "llama-server not healthy after {STARTUP_DEADLINE:?}:\n{}",
                self.log()
            );
            tokio::time::sleep(HEALTH_POLL_INTERVAL).await;
        }
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        // The server may already be gone; nothing else is to be done about it in a drop.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The server and model for `test`, or `None` when this run skips the real-model tests
/// knowingly. A run that has neither fails: a test that cannot run must never pass silently.
fn configured(test: &str) -> Option<(PathBuf, PathBuf)> {
    let needs = peers::Needs {
        file: "tests/real_llama.rs",
        peer: "a real llama-server",
        setup: "eval \"$(scripts/llama-server.sh)\"",
    };
    let mut values = peers::peer(&needs, &["PEN_LLAMA_SERVER", "PEN_LLAMA_MODEL"], test)?;
    let model = values.pop()?;
    let server = values.pop()?;
    Some((server.into(), model.into()))
}

fn fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/llama")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `data:` payloads of a server-sent-events body, in order.
fn sse_data(body: &str) -> Vec<&str> {
    body.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(str::trim)
        .collect()
}

/// The text a streamed chat completion carried in its `choices[0].delta.content` fields.
fn streamed_text(body: &str) -> String {
    sse_data(body)
        .into_iter()
        .filter(|data| *data != "[DONE]")
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .filter_map(|chunk| {
            chunk["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_string)
        })
        .collect()
}

/// Checks the over-context rejection against the shape recorded in
/// `tests/fixtures/llama/exceed_context_size.json`: the same fields, type and window.
fn assert_exceeds_context(body: &Value) {
    let recorded: Value =
        serde_json::from_str(&fixture("exceed_context_size.json")).expect("fixture is JSON");
    let keys = |value: &Value| -> Vec<String> {
        value["error"]
            .as_object()
            .map(|error| error.keys().cloned().collect())
            .unwrap_or_default()
    };
    assert_eq!(keys(body), keys(&recorded), "{body}");
    let error = &body["error"];
    assert_eq!(error["code"], 400);
    assert_eq!(error["type"], "exceed_context_size_error");
    assert_eq!(error["n_ctx"], CONTEXT_TOKENS);
    let prompt_tokens = error["n_prompt_tokens"].as_u64().expect("n_prompt_tokens");
    assert!(prompt_tokens > CONTEXT_TOKENS, "{body}");
    assert_eq!(
        error["message"],
        format!(
            "request ({prompt_tokens} tokens) exceeds the available context size \
             ({CONTEXT_TOKENS} tokens), try increasing it"
        )
    );
}

#[test]
fn recorded_fixtures_have_the_shapes_the_classifiers_replay() {
    // The fixtures are real bodies from llama-server; this keeps them honest without a server.
    assert_exceeds_context(
        &serde_json::from_str(&fixture("exceed_context_size.json")).expect("fixture is JSON"),
    );
    let stream = fixture("stream_ok.sse");
    assert_eq!(sse_data(&stream).last(), Some(&"[DONE]"));
    assert!(!streamed_text(&stream).is_empty());
}

/// The live server still answers as the recorded fixtures say: a streamed completion ends with
/// `[DONE]`, and a prompt over the window gets the 400 `exceed_context_size_error` body.
#[tokio::test]
async fn the_recorded_fixtures_match_the_live_server() {
    let Some((server, model)) = configured("the_recorded_fixtures_match_the_live_server") else {
        return;
    };
    // A fresh connection per request: llama-server sometimes closes a kept-alive connection
    // just as the client reuses it, which fails that request with hyper's IncompleteMessage
    // (seen about one run in three).
    let client = pen::providers::http_client_builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("HTTP client");
    let mut server = LlamaServer::start(&server, &model, CONTEXT_TOKENS);
    server.wait_until_healthy(&client).await;
    let completions = format!("{}/v1/chat/completions", server.base_url);

    // (a) A plain streamed completion ends with text and the `[DONE]` terminator.
    let response = client
        .post(&completions)
        .json(&json!({
            "model": "smollm2",
            "stream": true,
            "max_tokens": 16,
            "messages": [{"role": "user", "content": "Say hello in one short sentence."}],
        }))
        .send()
        .await
        .expect("chat completion");
    assert_eq!(response.status(), 200, "{}", server.log());
    let body = response.text().await.expect("stream body");
    assert_eq!(sse_data(&body).last(), Some(&"[DONE]"), "{body}");
    assert!(!streamed_text(&body).trim().is_empty(), "{body}");

    // (b) A prompt over the window is refused with 400 before any stream starts.
    let long_prompt = "the quick brown fox jumps over the lazy dog ".repeat(120);
    let response = client
        .post(&completions)
        .json(&json!({
            "model": "smollm2",
            "stream": true,
            "max_tokens": 16,
            "messages": [{"role": "user", "content": long_prompt}],
        }))
        .send()
        .await
        .unwrap_or_else(|e| panic!("over-context request: {e:?}"));
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.expect("error JSON");
    assert_exceeds_context(&body);
}

/// Runs `pen run PROMPT` against a llama-server, in a scratch workspace and data dir.
fn pen_run(base_url: &str, prompt: &str) -> std::process::Output {
    let data = tempfile::tempdir().expect("data dir");
    let root = tempfile::tempdir().expect("workspace");
    Command::new(env!("CARGO_BIN_EXE_pen"))
        .args([
            "run",
            prompt,
            "--provider",
            "openai",
            "--model",
            "smollm2",
            "--base-url",
        ])
        .arg(format!("{base_url}/v1"))
        .current_dir(root.path())
        .env("PEN_DATA_DIR", data.path())
        .env("PEN_CONFIG", "/nonexistent/pen/config.toml")
        .env("PEN_MAX_OUTPUT_TOKENS", "16")
        .stdin(Stdio::null())
        .output()
        .expect("run pen")
}

/// The product against the real server: `pen run` gets a streamed answer, and a prompt over the
/// 512-token window gets the real 400, which is classified as a context-window rejection: the
/// turn ends with the actionable error (there is no tool result to cut).
#[tokio::test]
async fn pen_run_against_llama_server() {
    let Some((server_path, model)) = configured("pen_run_against_llama_server") else {
        return;
    };
    let client = pen::providers::http_client_builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("HTTP client");

    let mut roomy = LlamaServer::start(&server_path, &model, 4_096);
    roomy.wait_until_healthy(&client).await;
    let output = pen_run(&roomy.base_url, "Say hello in one short sentence.");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}\n{}", roomy.log());
    assert!(
        !String::from_utf8_lossy(&output.stdout).trim().is_empty(),
        "{stderr}"
    );
    drop(roomy);

    let mut small = LlamaServer::start(&server_path, &model, CONTEXT_TOKENS);
    small.wait_until_healthy(&client).await;
    let output = pen_run(
        &small.base_url,
        &"the quick brown fox jumps over the lazy dog ".repeat(120),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    // pen asked the server for its window (512), so it knows before sending that the prompt
    // cannot fit, and says so instead of spending a request on the rejection.
    assert!(
        stderr.contains("context window 512 tokens (llama.cpp /props)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("does not fit the prompt budget"),
        "{stderr}"
    );
}

/// The window of the chat-session test below: small, so eight turns overflow it.
const CHAT_CONTEXT_TOKENS: u64 = 2_048;

/// One paragraph of a chat turn, about 300 tokens: eight of them with pen's system prompt are
/// more than the window.
fn chat_prompt(turn: usize) -> String {
    format!(
        "Turn {turn}. Here is a note about the project for you to keep in mind. {}Reply with \
         one short sentence.",
        "The parser reads the configuration file, checks every key against its bounds, and \
         reports each value it refuses together with the default it keeps instead. "
            .repeat(7)
    )
}

/// Runs `pen run PROMPT` in `session` (a new one when `None`) against `base_url`, with no
/// `context_window_tokens` unless `window` forces one; the session id and stderr.
fn pen_chat_turn(
    data: &Path,
    root: &Path,
    base_url: &str,
    session: Option<&str>,
    prompt: &str,
    window: Option<u64>,
) -> (String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_pen"));
    command
        .args(["run", prompt, "--provider", "openai", "--model", "smollm2"])
        .arg("--base-url")
        .arg(format!("{base_url}/v1"))
        .current_dir(root)
        .env("PEN_DATA_DIR", data)
        .env("PEN_CONFIG", "/nonexistent/pen/config.toml")
        // Short answers: the history grows by the prompts, and the test stays quick on a
        // loaded machine (generation is the slow part).
        .env("PEN_MAX_OUTPUT_TOKENS", "16")
        .env_remove("PEN_CONTEXT_WINDOW_TOKENS")
        .stdin(Stdio::null());
    if let Some(session) = session {
        command.args(["--session", session]);
    }
    if let Some(window) = window {
        command.env("PEN_CONTEXT_WINDOW_TOKENS", window.to_string());
    }
    let output = command.output().expect("run pen");
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    // Under a forced window a turn may end over the window even after its recovery.
    if window.is_none() {
        assert_eq!(output.status.code(), Some(0), "{stderr}");
    }
    let id = stderr
        .lines()
        .find_map(|line| line.strip_prefix("pen: session "))
        .unwrap_or_else(|| panic!("no session line: {stderr}"))
        .trim()
        .to_string();
    (id, stderr)
}

/// The session's stored entries (`pen transcript ID`), one JSON value each.
fn transcript(data: &Path, session: &str) -> Vec<Value> {
    let output = Command::new(env!("CARGO_BIN_EXE_pen"))
        .args(["transcript", session])
        .env("PEN_DATA_DIR", data)
        .env("PEN_CONFIG", "/nonexistent/pen/config.toml")
        .output()
        .expect("pen transcript");
    assert!(output.status.success(), "{output:?}");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON entry"))
        .collect()
}

/// Eight chat turns through `pen run --session` against a server started with `-c 2048`;
/// the session's entries and each turn's stderr.
async fn eight_turn_chat(window: Option<u64>) -> (Vec<Value>, Vec<String>) {
    let (server_path, model) = configured("eight_turn_chat").expect("a real llama-server");
    let client = pen::providers::http_client_builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("HTTP client");
    let mut server = LlamaServer::start(&server_path, &model, CHAT_CONTEXT_TOKENS);
    server.wait_until_healthy(&client).await;
    let data = tempfile::tempdir().expect("data dir");
    let root = tempfile::tempdir().expect("workspace");
    let mut session: Option<String> = None;
    let mut stderrs = Vec::new();
    for turn in 1..=8 {
        let (id, stderr) = pen_chat_turn(
            data.path(),
            root.path(),
            &server.base_url,
            session.as_deref(),
            &chat_prompt(turn),
            window,
        );
        session = Some(id);
        stderrs.push(stderr);
    }
    let session = session.expect("a session");
    (transcript(data.path(), &session), stderrs)
}

fn rejections(entries: &[Value]) -> usize {
    entries
        .iter()
        .filter(|entry| entry["payload"]["type"] == "context_window_rejected")
        .count()
}

/// Issue 18's proof against the real peer: with no `context_window_tokens`, pen asks the
/// server for its window (`/props`: 2048) before the first request and plans every request of
/// an eight-turn session under it, so the server never rejects one. (With the window forced
/// to 128,000, as every unset window was before, the same session is rejected.)
#[tokio::test]
async fn an_eight_turn_chat_plans_under_the_discovered_window() {
    if configured("an_eight_turn_chat_plans_under_the_discovered_window").is_none() {
        return;
    }
    let (entries, stderrs) = eight_turn_chat(None).await;
    assert!(
        stderrs[0].contains("model smollm2, context window 2048 tokens (llama.cpp /props)"),
        "{}",
        stderrs[0]
    );
    let found: Vec<&Value> = entries
        .iter()
        .filter(|entry| entry["payload"]["type"] == "context_window_found")
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0]["payload"]["tokens"], CHAT_CONTEXT_TOKENS);
    assert_eq!(found[0]["payload"]["source"], "llama_cpp_props");
    // Recorded before the session's first prompt: the first request was planned under it.
    assert_eq!(entries[0]["payload"]["type"], "context_window_found");
    let answers = entries
        .iter()
        .filter(|entry| entry["kind"] == "assistant_message")
        .count();
    assert_eq!(answers, 8, "every turn answered");
    assert_eq!(rejections(&entries), 0, "{stderrs:#?}");
}

/// The same session with the window forced to the old default (what main planned under when
/// nothing was set): the server rejects requests. This is the figure issue 18 starts from.
#[tokio::test]
async fn an_eight_turn_chat_under_the_old_default_window_is_rejected() {
    if configured("an_eight_turn_chat_under_the_old_default_window_is_rejected").is_none() {
        return;
    }
    let (entries, _) = eight_turn_chat(Some(128_000)).await;
    let count = rejections(&entries);
    eprintln!("context_window_rejected entries under a forced 128,000-token window: {count}");
    assert!(count >= 1, "{count}");
}

/// pen's usage from the real llama-server: the same prompt sent twice through pen's own
/// OpenAI-compatible backend, and the second reports the prompt tokens llama-server took from
/// its KV cache (`timings.cache_n`) as cache reads, of the whole prompt in `inputTokens`. pen
/// sends no `cache_prompt`: llama-server reuses its cache by default, which this checks. It also
/// takes `prompt_cache_key` (the config's `prompt_cache_key = "on"`) without complaint.
#[tokio::test]
async fn llama_server_usage_reports_its_kv_cache_reuse() {
    use pen::providers::{
        CacheHints, Message, ModelRequest, ProviderKind, ProviderSettings, StreamEvent, build,
    };
    let Some((server_path, model)) = configured("llama_server_usage_reports_its_kv_cache_reuse")
    else {
        return;
    };
    let client = pen::providers::http_client_builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("HTTP client");
    let mut server = LlamaServer::start(&server_path, &model, 2_048);
    server.wait_until_healthy(&client).await;
    let mut settings = ProviderSettings::new(ProviderKind::OpenAi, "smollm2");
    settings.base_url = Some(format!("{}/v1", server.base_url));
    settings.prompt_cache_key = Some(true);
    let provider = build(&settings).expect("provider");
    let request = ModelRequest {
        model: "smollm2".into(),
        system: "You are a terse assistant. ".repeat(40),
        messages: vec![Message::User {
            text: "Say hello.".into(),
        }],
        tools: vec![],
        max_output_tokens: 8,
        cache: CacheHints {
            key: Some("s_llama".into()),
            ..CacheHints::default()
        },
    };
    let on_event = |_: StreamEvent| {};
    let cancel = tokio_util::sync::CancellationToken::new();
    let mut usages = Vec::new();
    for _ in 0..2 {
        let answer = provider
            .complete(&request, &on_event, &cancel)
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", server.log()));
        usages.push(answer.usage.expect("llama-server reports usage"));
    }
    let (first, second) = (usages[0], usages[1]);
    assert!(first.input_tokens > 200, "{first:?}");
    assert_eq!(second.input_tokens, first.input_tokens, "{usages:?}");
    let read = second
        .cache_read_tokens
        .expect("llama-server reports its cached prompt tokens");
    assert!(
        read > 0 && read < second.input_tokens,
        "the second request reuses the cached prefix: {usages:?}"
    );
}
