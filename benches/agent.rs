//! Agent-loop overhead: the time a model step costs beyond the provider's own time (rebuilding
//! the request from the durable transcript, running a small tool, committing every entry), and
//! the cost of one durable commit, each against an instant in-process provider.
//!
//! `cargo bench --bench agent`.

use futures::future::BoxFuture;
use pen::agent::{ApprovalAnswer, ApprovalRequest, Approver, LocalTools, Turn};
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
/// the time spent inside `complete`.
struct Instant_ {
    steps: u64,
    served: AtomicU64,
    inside_nanos: AtomicU64,
}

impl Provider for Instant_ {
    fn complete<'a>(
        &'a self,
        _: &'a ModelRequest,
        _: &'a (dyn Fn(StreamEvent) + Send + Sync),
        _: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ModelResponse, ProviderError>> {
        let started = Instant::now();
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
    let provider = Arc::new(Instant_ {
        steps: STEPS,
        served: AtomicU64::new(0),
        inside_nanos: AtomicU64::new(0),
    });
    let session = store.new_session(None).expect("session").id;
    let turn = Turn {
        store: Arc::clone(&store),
        session_id: session,
        turn_id: "bench".into(),
        provider: provider.clone(),
        model: "instant".into(),
        config: pen::config::Config {
            max_turn_requests: STEPS,
            ..pen::config::Config::default()
        },
        tools: Arc::new(LocalTools {
            workspace: pen::workspace::Workspace::new(&[root.path().to_path_buf()])
                .expect("workspace"),
            limits: pen::limits::Limits::default(),
            ledger: Arc::default(),
            editor: None,
        }),
        approver: Arc::new(Nobody),
        session_allowed: Arc::default(),
        on_event: Arc::new(|_| {}),
        cancel: CancellationToken::new(),
    };
    let started = Instant::now();
    let outcome = runtime.block_on(turn.run("go"));
    let total = started.elapsed();
    let inside = Duration::from_nanos(provider.inside_nanos.load(Ordering::SeqCst));
    let per_step = (total - inside) / STEPS as u32;
    println!(
        "agent loop, {STEPS} steps (each: request rebuilt from the transcript, pen_list, 3 commits): {:?}",
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
}
