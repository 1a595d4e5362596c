//! Agent-loop overhead: the time a model step costs beyond the provider's own time (planning the
//! request from the session's history, running a small tool, committing every entry), and
//! the cost of one durable commit, each against an instant in-process provider.
//!
//! Then the session-length series: the loop overhead per step of a turn in a session of 1,000,
//! 10,000 and 50,000 entries, at a window small enough that every measured request is at or near
//! the budget (the same request sizes, so only the session grows), under the default policy
//! (4, which compacts between; it failed these turns before issue 25, and the series panicked). The turn's first step, which
//! reads the session into the engine's history once, is not counted: the series measures what a
//! step costs once the turn runs. Target: 50,000 entries ≤ 2× 1,000.
//!
//! `cargo bench --bench agent` (`-- series` runs only the series).

use futures::future::BoxFuture;
use pen::agent::{
    ApprovalAnswer, ApprovalRequest, Approver, Engine, LocalTools, TurnSpec, TurnTools,
};
use pen::providers::{
    FinishReason, ModelRequest, ModelResponse, Provider, ProviderError, StreamEvent, ToolCall,
};
use pen::session::{EntryKind, NewEntry, SessionStore};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Answers instantly: a `pen_list` call for `steps - 1` requests, then a final answer. Records
/// when each request arrived and the time spent inside `complete`.
struct Instant_ {
    steps: u64,
    served: AtomicU64,
    inside_nanos: AtomicU64,
    arrivals: std::sync::Mutex<Vec<Instant>>,
}

impl Instant_ {
    fn new(steps: u64) -> Arc<Instant_> {
        Arc::new(Instant_ {
            steps,
            served: AtomicU64::new(0),
            inside_nanos: AtomicU64::new(0),
            arrivals: std::sync::Mutex::default(),
        })
    }
}

impl Provider for Instant_ {
    fn complete<'a>(
        &'a self,
        _: &'a ModelRequest,
        _: &'a (dyn Fn(StreamEvent) + Send + Sync),
        _: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ModelResponse, ProviderError>> {
        let started = Instant::now();
        if let Ok(mut arrivals) = self.arrivals.lock() {
            arrivals.push(started);
        }
        let n = self.served.fetch_add(1, Ordering::SeqCst) + 1;
        let tool_calls = if n < self.steps {
            vec![ToolCall {
                id: format!("c{n}"),
                name: "pen_list".into(),
                arguments: "{}".into(),
            }]
        } else {
            vec![]
        };
        let response = ModelResponse {
            text: "ok".into(),
            finish_reason: FinishReason::EndTurn,
            tool_calls,
            usage: None,
            reasoning: Vec::new(),
        };
        self.inside_nanos
            .fetch_add(started.elapsed().as_nanos() as u64, Ordering::SeqCst);
        Box::pin(async move { Ok(response) })
    }
}

/// A session of about `entries` entries: exchanges of a prompt, an answer with one call, the
/// call, its 400-byte result and a closing answer.
fn long_session(store: &SessionStore, entries: usize) -> String {
    let session = store.new_session(None).expect("session").id;
    let result = "r".repeat(400);
    let mut batch = Vec::new();
    for i in 0..entries.div_ceil(5) {
        let id = format!("old{i}");
        batch.extend([
            NewEntry {
                kind: EntryKind::UserPrompt,
                turn_id: None,
                payload: json!({"text": format!("question {i}")}),
            },
            NewEntry {
                kind: EntryKind::AssistantMessage,
                turn_id: None,
                payload: json!({"text": "", "tool_calls": [{"id": id, "name": "pen_list", "arguments": "{}"}]}),
            },
            NewEntry {
                kind: EntryKind::ToolCall,
                turn_id: None,
                payload: json!({"call_id": id, "name": "pen_list", "arguments": {}}),
            },
            NewEntry {
                kind: EntryKind::ToolResult,
                turn_id: None,
                payload: json!({"call_id": id, "name": "pen_list", "content": result, "is_error": false, "status": "done"}),
            },
            NewEntry {
                kind: EntryKind::AssistantMessage,
                turn_id: None,
                payload: json!({"text": format!("answer {i}"), "tool_calls": []}),
            },
        ]);
        if batch.len() >= 5_000 {
            store.append_many(&session, &batch).expect("append");
            batch.clear();
        }
    }
    if !batch.is_empty() {
        store.append_many(&session, &batch).expect("append");
    }
    session
}

/// The mean time between the requests of one turn after its first, in a session of
/// `entries` entries.
fn per_step_at(
    runtime: &tokio::runtime::Runtime,
    store: &Arc<SessionStore>,
    root: &std::path::Path,
    entries: usize,
) -> Duration {
    const STEPS: u64 = 40;
    let session = long_session(store, entries);
    let provider = Instant_::new(STEPS);
    let engine = Engine::with_provider(Arc::clone(store), provider.clone(), "instant");
    let spec = TurnSpec {
        config: pen::config::Config {
            max_turn_requests: STEPS,
            context_window_tokens: Some(12_000),
            max_output_tokens: 1_000,
            budget_margin_tokens: 0,
            ..pen::config::Config::default()
        },
        tools: Arc::new(TurnTools::native(LocalTools::new(
            pen::workspace::Workspace::new(&[root.to_path_buf()]).expect("workspace"),
            pen::limits::Limits::default(),
        ))),
        approver: Arc::new(Nobody),
        on_event: Arc::new(|_| {}),
    };
    let outcome =
        runtime.block_on(engine.run_turn(&session, "go on", spec, CancellationToken::new()));
    assert_eq!(
        outcome.stop_reason,
        pen::agent::StopReason::EndTurn,
        "{outcome:?}"
    );
    let arrivals = provider.arrivals.lock().expect("arrivals").clone();
    let (first, last) = (arrivals[1], arrivals[arrivals.len() - 1]);
    (last - first) / (arrivals.len() as u32 - 2)
}

fn series(runtime: &tokio::runtime::Runtime, root: &std::path::Path) {
    let data = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(SessionStore::open(data.path()).expect("store"));
    println!(
        "session-length series (each request at the budget of a 12,000-token window; first step excluded):"
    );
    let mut base = None;
    for entries in [1_000, 10_000, 50_000] {
        // Best of three turns: the machine is shared and noisy.
        let best = (0..3)
            .map(|_| per_step_at(runtime, &store, root, entries))
            .min()
            .expect("three runs");
        let base = *base.get_or_insert(best);
        println!(
            "  {entries:>6} entries   {:>8.3} ms per step   {:>5.2}x the 1,000-entry step  (target <= 2x at 50,000)",
            best.as_secs_f64() * 1e3,
            best.as_secs_f64() / base.as_secs_f64()
        );
    }
}

struct Nobody;

impl Approver for Nobody {
    fn ask(&self, _: ApprovalRequest) -> BoxFuture<'static, ApprovalAnswer> {
        Box::pin(async { Err("nobody".into()) })
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let data = tempfile::tempdir().expect("tempdir");
    let root = tempfile::tempdir().expect("tempdir");
    for i in 0..20 {
        std::fs::write(root.path().join(format!("f{i}.rs")), "fn main() {}\n").expect("write");
    }
    if std::env::args().any(|a| a == "series") {
        series(&runtime, root.path());
        return;
    }
    let store = Arc::new(SessionStore::open(data.path()).expect("store"));

    // Durable commit of one entry.
    let session = store.new_session(None).expect("session").id;
    const ENTRIES: u32 = 2_000;
    let started = Instant::now();
    for i in 0..ENTRIES {
        let entry = NewEntry {
            kind: EntryKind::Event,
            turn_id: None,
            payload: json!({"type": "bench", "i": i}),
        };
        store.append(&session, &entry).expect("append");
    }
    let per_entry = started.elapsed() / ENTRIES;

    // A turn of many steps.
    const STEPS: u64 = 100;
    let provider = Instant_::new(STEPS);
    let session = store.new_session(None).expect("session").id;
    let engine = Engine::with_provider(Arc::clone(&store), provider.clone(), "instant");
    let spec = TurnSpec {
        config: pen::config::Config {
            max_turn_requests: STEPS,
            ..pen::config::Config::default()
        },
        tools: Arc::new(TurnTools::native(LocalTools {
            workspace: pen::workspace::Workspace::new(&[root.path().to_path_buf()])
                .expect("workspace"),
            limits: pen::limits::Limits::default(),
            ledger: Arc::default(),
            editor: None,
            search_editor: None,
            watch: None,
            fitted: Default::default(),
            sandbox: pen::sandbox::CommandSandbox::off(),
        })),
        approver: Arc::new(Nobody),
        on_event: Arc::new(|_| {}),
    };
    let started = Instant::now();
    let outcome = runtime.block_on(engine.run_turn(&session, "go", spec, CancellationToken::new()));
    let total = started.elapsed();
    let inside = Duration::from_nanos(provider.inside_nanos.load(Ordering::SeqCst));
    let per_step = (total - inside) / STEPS as u32;
    println!(
        "agent loop, {STEPS} steps (each: request planned from the history, pen_list, 3 commits): {:?}",
        outcome.stop_reason
    );
    println!(
        "  provider time (instant, in-process)   {:>8.3} ms per step",
        inside.as_secs_f64() * 1e3 / STEPS as f64
    );
    println!(
        "  loop overhead incl. commits           {:>8.3} ms per step  (target < 2 ms)",
        per_step.as_secs_f64() * 1e3
    );
    println!(
        "  one durable commit (SQLite, WAL)      {:>8.3} ms per entry (mean of {ENTRIES})",
        per_entry.as_secs_f64() * 1e3
    );
    series(&runtime, root.path());
}
