//! Policy 4 of the prompt budget end to end: a long tool turn at a small window keeps its
//! requests prefix-stable (what a provider's prompt cache needs), every request within the
//! window; and a resumed session (a new `pen serve` on the same data) plans byte for byte the
//! requests the first daemon would have sent, from the compactions recorded in the session.

use super::cache_figures::{self, cache_order};
use super::fake_provider::{FakeProvider, Reply, anthropic_frames, openai_error};
use super::lsp_client::LspClient;
use serde_json::{Value, json};
use std::path::Path;

/// 16,000 tokens, at the fake's 4 bytes a token.
const WINDOW_BYTES: usize = 64_000;

fn too_long() -> Reply {
    openai_error(
        400,
        "This model's maximum context length is 16000 tokens.",
        "invalid_request_error",
        Some("context_length_exceeded"),
    )
}

/// A daemon on `data` and `root` whose provider is the fake (OpenAI's format), configured for
/// a 16k window, edits approved, and turns long enough for the script.
fn daemon(fake: &FakeProvider, data: &Path, root: &Path) -> LspClient {
    hooked_daemon(fake, data, root, "")
}

/// [`daemon`] with the test hooks `hooks` (`PEN_TEST_HOOKS`; none when empty).
fn hooked_daemon(fake: &FakeProvider, data: &Path, root: &Path, hooks: &str) -> LspClient {
    let base = format!("{}/v1", fake.url());
    let mut env = vec![
        ("PEN_PROVIDER", "openai"),
        ("PEN_BASE_URL", base.as_str()),
        ("PEN_MODEL", "fake-model"),
    ];
    if !hooks.is_empty() {
        env.push(("PEN_TEST_HOOKS", hooks));
    }
    daemon_with(data, root, &env)
}

/// [`daemon`] with the fake speaking Anthropic's Messages API (whose bodies carry
/// `cache_control` breakpoints).
fn anthropic_daemon(fake: &FakeProvider, data: &Path, root: &Path) -> LspClient {
    daemon_with(
        data,
        root,
        &[
            ("PEN_PROVIDER", "anthropic"),
            ("PEN_BASE_URL", fake.url()),
            ("PEN_MODEL", "claude-sonnet-4-5"),
            ("ANTHROPIC_API_KEY", "test-key"),
        ],
    )
}

fn daemon_with(data: &Path, root: &Path, env: &[(&str, &str)]) -> LspClient {
    let mut client = LspClient::spawn(data, root, env);
    client.on_request(|method, _| match method {
        "window/workDoneProgress/create" => Value::Null,
        _ => json!({"decision": "deny"}),
    });
    client.initialize(root, &["utf-16"]);
    client.request(
        "pen/setConfig",
        json!({"context_window_tokens": 16_000, "max_output_tokens": 1_000,
               "budget_margin_tokens": 500, "auto_approve": ["pen_edit"],
               "max_turn_requests": 200}),
    );
    client
}

fn bodies(fake: &FakeProvider) -> Vec<Value> {
    fake.requests().into_iter().map(|r| r.body).collect()
}

/// The bodies of a run in `root` as a run in `as_root` sends them: the environment block of the
/// system part names the workspace root, the one difference between two runs in two folders.
fn in_root(bodies: Vec<Value>, root: &Path, as_root: &Path) -> Vec<Value> {
    let (from, to) = (root.to_string_lossy(), as_root.to_string_lossy());
    bodies
        .into_iter()
        .map(|body| serde_json::from_str(&body.to_string().replace(&*from, &to)).unwrap())
        .collect()
}

/// 120 calls at a 16k window under the default policy (4): the turn completes, every request
/// within the window and none rejected; every read of the workspace's files (1.5 to 7 KB) comes
/// back whole in one page, the information a policy-3 turn gets; and the requests are
/// append-only between compactions: each request the provider gets is the one before it with
/// new messages after it, except the one request after each compaction. Each compaction is a
/// `context_compacted` entry with its `context_trimmed` report (policy 4), far fewer than the
/// requests, and the excerpts are quoted history. (The share of bytes a request reuses is a
/// diagnostic, printed by `cargo bench --bench cache`, not a target: smaller pages raise it
/// while costing more requests for the same information.)
#[test]
fn a_long_turn_at_a_small_window_keeps_its_requests_prefix_stable() {
    const CALLS: usize = 120;
    let fake = FakeProvider::start();
    fake.push(cache_figures::turn(0..CALLS));
    fake.reject_bodies_over(WINDOW_BYTES, too_long());
    let data = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    cache_figures::workspace(root.path());
    let mut d = daemon(&fake, data.path(), root.path());
    let session = d.new_session();
    let answer = d.prompt(&session, "Read, search and edit the modules.");
    assert_eq!(answer["stopReason"], "end_turn", "{answer}");

    let bodies = bodies(&fake);
    assert_eq!(bodies.len(), CALLS + 1);
    for body in &bodies {
        let size = serde_json::to_vec(body).unwrap().len();
        assert!(size <= WINDOW_BYTES, "a {size}-byte request");
    }
    // Every read is of a whole file: one page, no cursor.
    let transcript = d.transcript(&session);
    let mut reads = 0;
    for entry in transcript.iter().filter(|e| e["kind"] == "tool_result") {
        let content = entry["data"]["content"].as_str().unwrap();
        let result: Value = serde_json::from_str(content).unwrap();
        if result.get("content").is_some() && result.get("path").is_some() {
            reads += 1;
            assert!(result.get("next_start_line").is_none(), "{result}");
            assert!(result.get("next_offset").is_none(), "{result}");
        }
    }
    assert!(reads >= CALLS / 2, "{reads} reads");
    let forms: Vec<Vec<u8>> = bodies.iter().map(cache_order).collect();
    let rewritten = forms
        .windows(2)
        .filter(|pair| !pair[1].starts_with(&pair[0]))
        .count();
    let transcript = d.transcript(&session);
    assert!(
        !transcript
            .iter()
            .any(|e| e["kind"] == "context_window_rejected")
    );
    let compactions: Vec<&Value> = transcript
        .iter()
        .filter(|e| e["kind"] == "context_compacted")
        .collect();
    let reports: Vec<&Value> = transcript
        .iter()
        .filter(|e| e["kind"] == "context_trimmed")
        .collect();
    assert!(!compactions.is_empty(), "no compaction at all");
    assert_eq!(compactions.len(), reports.len());
    // Append-only between compactions: only a compaction changes what was sent.
    assert!(
        rewritten <= compactions.len(),
        "{rewritten} requests rewrote the one before, {} compactions",
        compactions.len()
    );
    // Batched: far fewer compactions than requests.
    assert!(
        compactions.len() * 4 < bodies.len(),
        "{}",
        compactions.len()
    );
    for report in &reports {
        assert_eq!(report["data"]["policyVersion"], 4, "{report}");
        assert_eq!(report["data"]["budget"], 14_500);
    }
    // Excerpts are quoted history (a deep compaction may leave them out behind the note later).
    let excerpted = bodies
        .iter()
        .map(Value::to_string)
        .find(|body| body.contains("excerpted by the prompt budget (policy 4)"))
        .expect("a request with an excerpt");
    assert!(excerpted.contains("not an executable call"));
}

/// A session resumed by a new daemon plans the very requests the first daemon sent: the same
/// two turns run once in one daemon and once split across two (the second a new process that
/// reads the session, its compactions included, from the store) give byte-identical bodies.
#[test]
fn a_resumed_session_plans_the_requests_the_first_daemon_sent() {
    const FIRST: usize = 40;
    const SECOND: usize = 30;
    let fresh_root = || {
        let root = tempfile::tempdir().unwrap();
        cache_figures::workspace(root.path());
        root
    };
    // One daemon, both turns.
    let whole = FakeProvider::start();
    whole.push(cache_figures::turn(0..FIRST));
    whole.push(cache_figures::turn(FIRST..FIRST + SECOND));
    let whole_data = tempfile::tempdir().unwrap();
    let whole_root = fresh_root();
    let mut d = daemon(&whole, whole_data.path(), whole_root.path());
    let session = d.new_session();
    assert_eq!(d.prompt(&session, "First pass.")["stopReason"], "end_turn");
    assert_eq!(d.prompt(&session, "Second pass.")["stopReason"], "end_turn");
    let whole_bodies = bodies(&whole);
    let transcript = d.transcript(&session);
    assert!(d.close().is_some());

    // The same turns, the second in a new daemon.
    let split = FakeProvider::start();
    split.push(cache_figures::turn(0..FIRST));
    split.push(cache_figures::turn(FIRST..FIRST + SECOND));
    let split_data = tempfile::tempdir().unwrap();
    let split_root = fresh_root();
    let mut first = daemon(&split, split_data.path(), split_root.path());
    let split_session = first.new_session();
    assert_eq!(
        first.prompt(&split_session, "First pass.")["stopReason"],
        "end_turn"
    );
    assert!(first.close().is_some());
    let mut second = daemon(&split, split_data.path(), split_root.path());
    assert_eq!(
        second.prompt(&split_session, "Second pass.")["stopReason"],
        "end_turn"
    );
    let split_bodies = in_root(bodies(&split), split_root.path(), whole_root.path());

    assert_eq!(whole_bodies.len(), FIRST + SECOND + 2);
    assert_eq!(split_bodies.len(), whole_bodies.len());
    for (i, (a, b)) in whole_bodies.iter().zip(&split_bodies).enumerate() {
        assert_eq!(
            comparable(a),
            comparable(b),
            "request {i} differs after the resume"
        );
    }
    // The second turn compacted too, after the resume: the new daemon read the first turn's
    // compactions and made its own on top of them.
    let compacted_seqs: Vec<u64> = transcript
        .iter()
        .filter(|e| e["kind"] == "context_compacted")
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    let second_prompt_seq = transcript
        .iter()
        .filter(|e| e["kind"] == "user_prompt")
        .nth(1)
        .map(|e| e["seq"].as_u64().unwrap())
        .unwrap();
    assert!(compacted_seqs.iter().any(|&s| s < second_prompt_seq));
    assert!(compacted_seqs.iter().any(|&s| s > second_prompt_seq));
}

/// A body with what names the session itself left out (a field the OpenAI backend may send
/// to route a session's requests to one cache): two sessions are compared here.
fn comparable(body: &Value) -> String {
    let mut body = body.clone();
    if let Some(fields) = body.as_object_mut() {
        fields.remove("prompt_cache_key");
    }
    body.to_string()
}

/// The Anthropic bodies of a session resumed by a new daemon are byte-identical to those one
/// daemon sends, `cache_control` breakpoints included: the previous request's end is marked
/// from the history when the new process has not sent that request itself.
#[test]
fn a_resumed_anthropic_session_sends_the_same_breakpoints() {
    const FIRST: usize = 30;
    const SECOND: usize = 20;
    let fresh_root = || {
        let root = tempfile::tempdir().unwrap();
        cache_figures::workspace(root.path());
        root
    };
    let script = |fake: &FakeProvider| {
        fake.push(cache_figures::turn_in(anthropic_frames, 0..FIRST));
        fake.push(cache_figures::turn_in(
            anthropic_frames,
            FIRST..FIRST + SECOND,
        ));
    };
    let whole = FakeProvider::start();
    script(&whole);
    let whole_data = tempfile::tempdir().unwrap();
    let whole_root = fresh_root();
    let mut d = anthropic_daemon(&whole, whole_data.path(), whole_root.path());
    let session = d.new_session();
    assert_eq!(d.prompt(&session, "First pass.")["stopReason"], "end_turn");
    assert_eq!(d.prompt(&session, "Second pass.")["stopReason"], "end_turn");
    assert!(d.close().is_some());

    let split = FakeProvider::start();
    script(&split);
    let split_data = tempfile::tempdir().unwrap();
    let split_root = fresh_root();
    let mut first = anthropic_daemon(&split, split_data.path(), split_root.path());
    let split_session = first.new_session();
    assert_eq!(
        first.prompt(&split_session, "First pass.")["stopReason"],
        "end_turn"
    );
    assert!(first.close().is_some());
    let mut second = anthropic_daemon(&split, split_data.path(), split_root.path());
    assert_eq!(
        second.prompt(&split_session, "Second pass.")["stopReason"],
        "end_turn"
    );

    let (whole_bodies, split_bodies) = (
        bodies(&whole),
        in_root(bodies(&split), split_root.path(), whole_root.path()),
    );
    assert_eq!(whole_bodies.len(), FIRST + SECOND + 2);
    assert_eq!(split_bodies.len(), whole_bodies.len());
    for (i, (a, b)) in whole_bodies.iter().zip(&split_bodies).enumerate() {
        assert_eq!(a, b, "request {i} differs after the resume");
    }
    // The first request after the resume marks the head, the previous request's end and its
    // own end.
    let resumed = &split_bodies[FIRST + 1];
    assert_eq!(
        resumed.to_string().matches("\"cache_control\"").count(),
        3,
        "{resumed}"
    );
}

/// The entries of `session` in the store at `data`, read directly (no daemon, so no crash
/// recovery runs first).
fn stored(data: &Path, session: &str) -> Vec<pen::session::Entry> {
    let store = pen::session::SessionStore::open(data).unwrap();
    store.transcript(session, None, 500).unwrap().entries
}

fn is_compaction(entry: &pen::session::Entry) -> bool {
    entry.kind == pen::session::EntryKind::Event && entry.payload["type"] == "context_compacted"
}

/// A daemon killed (as abruptly as `kill -9`, by the `crash_after_appends` hook) right after it
/// committed a compaction: the compaction is in the store and its request never went out; the
/// session resumed by a new daemon sends, before anything new, exactly the request the killed
/// one was about to send (the recorded decision, not a new one, renders it).
#[test]
fn a_daemon_killed_after_recording_a_compaction_resumes_with_its_prefix() {
    const CALLS: usize = 40;
    let fresh = || {
        let root = tempfile::tempdir().unwrap();
        cache_figures::workspace(root.path());
        (tempfile::tempdir().unwrap(), root)
    };
    // A clean run: the requests, and the entry of the first compaction.
    let clean = FakeProvider::start();
    clean.push(cache_figures::turn(0..CALLS));
    let (clean_data, clean_root) = fresh();
    let mut d = daemon(&clean, clean_data.path(), clean_root.path());
    let session = d.new_session();
    assert_eq!(
        d.prompt(&session, "Read, search and edit the modules.")["stopReason"],
        "end_turn"
    );
    assert!(d.close().is_some());
    let clean_bodies = bodies(&clean);
    let clean_entries = stored(clean_data.path(), &session);
    let compaction = clean_entries
        .iter()
        .position(is_compaction)
        .expect("the clean run compacts");

    // Runs the same turn until the daemon dies after `appends` commits; returns the store's
    // entries and the requests the fake received.
    let crashed = |appends: usize| {
        let fake = FakeProvider::start();
        fake.push(cache_figures::turn(0..CALLS));
        let (data, root) = fresh();
        let hook = format!("crash_after_appends={appends}");
        let mut d = hooked_daemon(&fake, data.path(), root.path(), &hook);
        let session = d.new_session();
        d.send_request(
            "pen/prompt",
            json!({"sessionId": session, "text": "Read, search and edit the modules."}),
        );
        while d.next_message().is_some() {}
        let entries = stored(data.path(), &session);
        (entries, bodies(&fake), fake, data, root, session)
    };
    // The least number of commits after which the compaction is in the store (the hook counts
    // transactions, and one may hold several entries): found by bisection, as more commits
    // never mean fewer entries.
    let (mut low, mut high) = (1, clean_entries.len());
    while low < high {
        let mid = (low + high) / 2;
        if crashed(mid).0.iter().any(is_compaction) {
            high = mid;
        } else {
            low = mid + 1;
        }
    }
    let (entries, sent, fake, data, root, session) = crashed(low);
    // Everything up to the compaction is what the clean run stored, and nothing after it
    // committed; its request was not sent: the killed daemon sent exactly the requests the
    // clean one sent before it.
    assert!(entries.iter().any(is_compaction));
    assert!(entries.len() <= compaction + 2, "{} entries", entries.len());
    // (The two runs are in two folders, which the recorded environment names.)
    let (here, there) = (
        root.path().to_string_lossy(),
        clean_root.path().to_string_lossy(),
    );
    for (a, b) in entries.iter().zip(&clean_entries) {
        let payload = a.payload.to_string().replace(&*here, &there);
        assert_eq!((a.kind, payload), (b.kind, b.payload.to_string()));
    }
    let sent = in_root(sent, root.path(), clean_root.path());
    let next = sent.len();
    let answered = entries
        .iter()
        .filter(|e| e.kind == pen::session::EntryKind::AssistantMessage)
        .count();
    assert_eq!(
        next, answered,
        "a request went out before its compaction committed"
    );
    for (i, (a, b)) in sent.iter().zip(&clean_bodies).enumerate() {
        assert_eq!(comparable(a), comparable(b), "request {i}");
    }

    // A new daemon on the same store: its first request extends the one the killed daemon
    // was about to send (the clean run's request `next`), and it records no new compaction.
    drop(fake);
    let fake = FakeProvider::start();
    fake.push(vec![Reply::Stream(super::fake_provider::openai_frames(
        &["Done."],
        &[],
        cache_figures::honest_usage(),
    ))]);
    let mut resumed = daemon(&fake, data.path(), root.path());
    assert_eq!(resumed.prompt(&session, "Go on.")["stopReason"], "end_turn");
    let after = in_root(bodies(&fake), root.path(), clean_root.path());
    assert_eq!(after.len(), 1);
    let planned = cache_order(&clean_bodies[next]);
    let first = cache_order(&after[0]);
    assert!(first.len() > planned.len());
    assert_eq!(&first[..planned.len()], &planned[..]);
    let compactions = stored(data.path(), &session)
        .iter()
        .filter(|e| is_compaction(e))
        .count();
    assert_eq!(compactions, 1);

    // Killed one commit earlier, nothing was decided: the resumed daemon decides anew from
    // the same transcript, records the compaction before its request, and every request fits.
    let (entries, _, fake, data, root, session) = crashed(low - 1);
    assert!(!entries.iter().any(is_compaction));
    drop(fake);
    let fake = FakeProvider::start();
    fake.push(vec![Reply::Stream(super::fake_provider::openai_frames(
        &["Done."],
        &[],
        cache_figures::honest_usage(),
    ))]);
    let mut resumed = daemon(&fake, data.path(), root.path());
    assert_eq!(resumed.prompt(&session, "Go on.")["stopReason"], "end_turn");
    let after = bodies(&fake);
    assert_eq!(after.len(), 1);
    assert!(serde_json::to_vec(&after[0]).unwrap().len() <= WINDOW_BYTES);
    let stored_now = stored(data.path(), &session);
    let decided = stored_now
        .iter()
        .position(is_compaction)
        .expect("a new compaction");
    assert!(decided >= entries.len());
}

/// A workspace of `dirs` folders whose pen_list pages are 0.1 to 0.9 KB (1 to 18 entries of about
/// 45 bytes each): many small results, each smaller than its excerpt would be, the shape policy 4
/// once failed on.
fn small_listings(root: &Path, dirs: usize) {
    for k in 0..dirs {
        let dir = root.join(format!("d{k:03}"));
        std::fs::create_dir_all(&dir).unwrap();
        for j in 0..1 + (k * 7) % 16 {
            std::fs::write(dir.join(format!("file_{j:02}.rs")), "fn main() {}\n").unwrap();
        }
    }
}

/// One answer for each of `dirs` pen_list calls, then a final answer.
fn list_turn(dirs: usize) -> Vec<Reply> {
    let mut replies: Vec<Reply> = (0..dirs)
        .map(|k| {
            let call = pen::providers::ToolCall {
                id: format!("list_{k}"),
                name: "pen_list".into(),
                arguments: json!({"path": format!("d{k:03}")}).to_string(),
            };
            Reply::Stream(super::fake_provider::openai_frames(
                &["Next."],
                &[call],
                cache_figures::honest_usage(),
            ))
        })
        .collect();
    replies.push(Reply::Stream(super::fake_provider::openai_frames(
        &["Listed them all."],
        &[],
        cache_figures::honest_usage(),
    )));
    replies
}

/// The small-results workload: a turn of 160 pen_list results of 0.1 to 0.9 KB, under the default
/// policy and default settings (the window found from the server, as a local model's is: output
/// and margin capped at ¼ and 1/32 of it), at 8k, 12k, 16k and 32k windows, and at a 12k window
/// set by the user with margins of 0 and 500. Every turn completes (`end_turn`, one request a
/// call), every request within the window. Policy 4 once failed these turns the first time the
/// newest exchange reached the budget: it could leave out only the groups it had excerpted,
/// and a group smaller than its excerpt is never excerpted.
#[test]
fn a_turn_of_many_small_results_completes_at_every_window() {
    const DIRS: usize = 160;
    let root = tempfile::tempdir().unwrap();
    small_listings(root.path(), DIRS);
    let found = [8_000u64, 12_000, 16_000, 32_000].map(|w| (w, None));
    let set = [(12_000u64, Some(0u64)), (12_000, Some(500))];
    let mut failures = Vec::new();
    for (window, margin) in found.into_iter().chain(set) {
        let fake = FakeProvider::start();
        fake.push(list_turn(DIRS));
        let window_bytes = usize::try_from(window * 4).unwrap();
        fake.reject_bodies_over(window_bytes, too_long());
        let data = tempfile::tempdir().unwrap();
        let base = format!("{}/v1", fake.url());
        let mut env = vec![
            ("PEN_PROVIDER", "openai"),
            ("PEN_BASE_URL", base.as_str()),
            ("PEN_MODEL", "fake-model"),
        ];
        let (window_text, margin_text) = (window.to_string(), margin.unwrap_or(0).to_string());
        match margin {
            // The user's window, with its margin; the output reserve stays the default.
            Some(_) => {
                env.push(("PEN_CONTEXT_WINDOW_TOKENS", window_text.as_str()));
                env.push(("PEN_BUDGET_MARGIN_TOKENS", margin_text.as_str()));
            }
            None => fake.discovery(
                "/props",
                json!({"default_generation_settings": {"n_ctx": window}}),
            ),
        }
        let mut d = LspClient::spawn(data.path(), root.path(), &env);
        d.initialize(root.path(), &["utf-16"]);
        d.request("pen/setConfig", json!({"max_turn_requests": 200}));
        let session = d.new_session();
        let answer = d.prompt(&session, "List every folder.");
        let case = format!("window {window}, margin {margin:?}");
        let bodies = bodies(&fake);
        let largest = bodies
            .iter()
            .map(|body| serde_json::to_vec(body).unwrap().len())
            .max()
            .unwrap_or(0);
        // The budget was met, so the turn was compacted (under policy 4) on the way.
        let compacted = d
            .transcript(&session)
            .iter()
            .any(|e| e["kind"] == "context_trimmed" && e["data"]["policyVersion"] == 4);
        if answer["stopReason"] != "end_turn"
            || bodies.len() != DIRS + 1
            || largest > window_bytes
            || !compacted
        {
            failures.push(format!(
                "{case}: {} requests, the largest {largest} bytes, compacted {compacted}: {answer}",
                bodies.len()
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Files read to their end through the cursor give both policies the same information: at a
/// found 16,000-token window (pages of 200 lines under policy 3, about 11.5 KB under policy 4)
/// files of 2, 6, 9 and 30 KB come back, page after page, as exactly their text; both turns
/// complete within the window, and the 2 to 9 KB files are one page under either policy.
#[test]
fn files_read_to_their_end_give_both_policies_the_same_information() {
    let root = tempfile::tempdir().unwrap();
    let files: Vec<(String, String)> = [2_000usize, 6_000, 9_000, 30_000]
        .iter()
        .map(|&size| {
            let line = |j: usize| format!("    let line_{j} = \"{}\";\n", "x".repeat(j % 40));
            let mut text = String::new();
            let mut j = 0;
            while text.len() < size {
                text.push_str(&line(j));
                j += 1;
            }
            let path = format!("f{size}.rs");
            std::fs::write(root.path().join(&path), &text).unwrap();
            (path, text)
        })
        .collect();
    let tasks: Vec<cache_figures::Task> = files
        .iter()
        .map(|(path, _)| cache_figures::Task::new("pen_read", json!({ "path": path })))
        .collect();
    for policy in ["3", "4"] {
        let fake = FakeProvider::start();
        fake.discovery(
            "/props",
            json!({"default_generation_settings": {"n_ctx": 16_000}}),
        );
        fake.reject_bodies_over(WINDOW_BYTES, too_long());
        let script = tasks.clone();
        fake.respond_with(move |number, body| cache_figures::scripted_reply(&script, number, body));
        let data = tempfile::tempdir().unwrap();
        let base = format!("{}/v1", fake.url());
        let env = [
            ("PEN_PROVIDER", "openai"),
            ("PEN_BASE_URL", base.as_str()),
            ("PEN_MODEL", "fake-model"),
            ("PEN_BUDGET_POLICY", policy),
        ];
        let mut d = LspClient::spawn(data.path(), root.path(), &env);
        d.initialize(root.path(), &["utf-16"]);
        let session = d.new_session();
        let answer = d.prompt(&session, "Read every file to its end.");
        assert_eq!(
            answer["stopReason"], "end_turn",
            "policy {policy}: {answer}"
        );
        let mut read: std::collections::BTreeMap<String, (String, usize)> = Default::default();
        for entry in d.transcript(&session) {
            if entry["kind"] != "tool_result" {
                continue;
            }
            let result: Value =
                serde_json::from_str(entry["data"]["content"].as_str().unwrap()).unwrap();
            let path = result["path"].as_str().unwrap().to_string();
            let page = read.entry(path).or_default();
            page.0.push_str(result["content"].as_str().unwrap());
            page.1 += 1;
        }
        for (path, text) in &files {
            let (got, pages) = &read[path];
            assert_eq!(got, text, "policy {policy}: {path}");
            if text.len() <= 9_000 {
                assert_eq!(*pages, 1, "policy {policy}: {path}");
            }
        }
        for body in bodies(&fake) {
            assert!(serde_json::to_vec(&body).unwrap().len() <= WINDOW_BYTES);
        }
    }
}
