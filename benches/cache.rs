//! Prompt-cache figures: how much of each request is a prefix of the one before it, under
//! budget policy 3 and policy 4 side by side. `cargo bench --bench cache`.
//!
//! The real loop (the [`Engine`], with its OpenAI backend) runs one 200-call tool-heavy turn
//! (reads, searches and edits over a generated workspace, results of about 0.3 to 11 KB under
//! policy 3, pages fitted to the window under policy 4: `Limits::fitted_to_budget`) against
//! the fake provider of the integration suite, a real HTTP server on 127.0.0.1 that rejects a
//! body over the window (4 bytes a token) as a provider does, at windows of 16k, 32k and 128k
//! tokens. For each window and policy it prints: requests; the share of each request's bytes
//! that is a prefix of the request before it (min, median, whole session; compared in the
//! order a prompt cache reads a request: tools, system, messages); the share of requests that
//! reuse at least 90% of their bytes and the share that extend the request before (append
//! only: what they add is all they do not reuse); the session's price in Anthropic's cache units against no
//! caching (see `cache_figures` for the model); the compaction steps; the largest request
//! against the budget; and the requests rejected as over the window. Figures, not timings.
//!
//! Targets for policy 4 at every window: whole session >= 85%; >= 90% of requests reuse >= 90%
//! of their bytes; price <= 0.25x uncached; every request within the budget, none rejected.

// The suite's fake provider and workload, included rather than copied; the bench uses only
// part of each.
#[allow(dead_code)]
#[path = "../tests/suite/fake_provider.rs"]
mod fake_provider;

#[allow(dead_code)]
#[path = "../tests/suite/cache_figures.rs"]
mod cache_figures;

use futures::future::BoxFuture;
use pen::agent::{
    AgentEvent, ApprovalAnswer, ApprovalRequest, Approver, Engine, LocalTools, StopReason, Trim,
    TurnEvent, TurnSpec,
};
use pen::config::Config;
use pen::session::SessionStore;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio_util::sync::CancellationToken;

const CALLS: usize = 200;
const WINDOWS: [u64; 3] = [16_000, 32_000, 128_000];
const MAX_OUTPUT_TOKENS: u64 = 1_000;
const MARGIN_TOKENS: u64 = 500;

/// Edits are approved by the config; anything else asked is refused.
struct Nobody;

impl Approver for Nobody {
    fn ask(&self, _: ApprovalRequest) -> BoxFuture<'static, ApprovalAnswer> {
        Box::pin(async { Err("nobody".into()) })
    }
}

struct Run {
    stop_reason: StopReason,
    figures: cache_figures::Figures,
    compactions: u64,
    max_tokens: usize,
    budget: u64,
    rejected: usize,
}

fn run(runtime: &tokio::runtime::Runtime, window: u64, policy: u64, low_water: Option<u64>) -> Run {
    let fake = fake_provider::FakeProvider::start();
    fake.push(cache_figures::turn(0..CALLS));
    let window_bytes = usize::try_from(window * 4).unwrap_or(usize::MAX);
    fake.reject_bodies_over(
        window_bytes,
        fake_provider::openai_error(
            400,
            "This model's maximum context length is exceeded.",
            "invalid_request_error",
            Some("context_length_exceeded"),
        ),
    );
    let data = tempfile::tempdir().expect("tempdir");
    let root = tempfile::tempdir().expect("tempdir");
    cache_figures::workspace(root.path());
    let store = Arc::new(SessionStore::open(data.path()).expect("store"));
    let session = store.new_session(None).expect("session").id;
    let engine = Engine::new(Arc::clone(&store));
    let mut config = Config::default();
    for (key, value) in [
        ("provider", serde_json::json!("openai")),
        ("base_url", serde_json::json!(format!("{}/v1", fake.url()))),
        ("model", serde_json::json!("fake-model")),
        ("context_window_tokens", serde_json::json!(window)),
        ("max_output_tokens", serde_json::json!(MAX_OUTPUT_TOKENS)),
        ("budget_margin_tokens", serde_json::json!(MARGIN_TOKENS)),
        ("max_turn_requests", serde_json::json!(CALLS + 1)),
        ("auto_approve", serde_json::json!(["pen_edit"])),
        ("budget_policy", serde_json::json!(policy)),
    ] {
        config.set(key, &value).expect("a valid setting");
    }
    if let Some(percent) = low_water {
        config
            .set("compaction_low_water_percent", &serde_json::json!(percent))
            .expect("a low-water mark within its bounds");
    }
    // The tools' limits as every front end makes them: from the config, so pages are sized to
    // this window (`Config::limits`).
    let limits = config.limits();
    let compactions = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&compactions);
    let spec = TurnSpec {
        config,
        tools: Arc::new(LocalTools {
            workspace: pen::workspace::Workspace::new(&[root.path().to_path_buf()])
                .expect("workspace"),
            limits,
            ledger: Arc::default(),
            editor: None,
            fitted: Default::default(),
        }),
        approver: Arc::new(Nobody),
        on_event: Arc::new(move |event: AgentEvent| {
            if let TurnEvent::ContextTrimmed(Trim::Budget(_)) = event.event {
                counted.fetch_add(1, Ordering::SeqCst);
            }
        }),
    };
    let outcome = runtime.block_on(engine.run_turn(
        &session,
        "Read, search and edit the modules.",
        spec,
        CancellationToken::new(),
    ));
    let requests = fake.requests();
    let sizes: Vec<usize> = requests
        .iter()
        .map(|r| serde_json::to_vec(&r.body).map_or(0, |b| b.len()))
        .collect();
    let rejected = sizes.iter().filter(|&&s| s > window_bytes).count();
    // The figures are those of the requests the provider answered.
    let bodies: Vec<serde_json::Value> = requests
        .into_iter()
        .zip(&sizes)
        .filter(|(_, size)| **size <= window_bytes)
        .map(|(r, _)| r.body)
        .collect();
    Run {
        stop_reason: outcome.stop_reason,
        figures: cache_figures::figures(&bodies),
        compactions: compactions.load(Ordering::SeqCst),
        max_tokens: sizes.iter().copied().max().unwrap_or(0) / 4,
        budget: window - MAX_OUTPUT_TOKENS - MARGIN_TOKENS,
        rejected,
    }
}

fn main() {
    // `-- low-water=N` runs policy 4 at another low-water mark than the default.
    let low_water = std::env::args()
        .find_map(|arg| arg.strip_prefix("low-water=").map(str::to_string))
        .and_then(|n| n.parse::<u64>().ok());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    println!(
        "prompt-cache figures: one {CALLS}-call turn (reads, searches, edits) through the real loop and the fake provider"
    );
    println!(
        "  prefix share: bytes of a request that are a prefix of the request before it, in cache order (tools, system, messages)"
    );
    println!(
        "  price: Anthropic units (uncached 1, cache read 0.1, cache write 1.25), a breakpoint at the end of every request \
         (the prefix shared with the previous request read, the rest written), against no caching; tokens = bytes / 4"
    );
    println!(
        "  budget = window - {MAX_OUTPUT_TOKENS} output - {MARGIN_TOKENS} margin; max request in the fake's tokens (body bytes / 4)"
    );
    println!();
    println!(
        "  window  policy  requests  prefix min  median  whole  reuse>=90%  appending  price  compactions  max tokens / budget  rejected  stop"
    );
    for window in WINDOWS {
        for policy in [3, 4] {
            let run = run(&runtime, window, policy, low_water);
            let f = run.figures;
            println!(
                "  {:>5}k  {policy:>6}  {:>8}  {:>9.1}%  {:>5.1}%  {:>4.1}%  {:>9.1}%  {:>8.1}%  {:>5.3}x  {:>11}  {:>10} / {:<8}  {:>8}  {:?}",
                window / 1_000,
                f.requests,
                f.min_share * 100.0,
                f.median_share * 100.0,
                f.whole_share * 100.0,
                f.reusing_90 * 100.0,
                f.appending * 100.0,
                f.price_ratio,
                run.compactions,
                run.max_tokens,
                run.budget,
                run.rejected,
                run.stop_reason,
            );
        }
    }
    println!();
    println!(
        "  targets, policy 4: whole >= 85%, reuse>=90% >= 90% of requests, price <= 0.25x, max tokens <= budget, 0 rejected"
    );
}
