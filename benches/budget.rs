//! Prompt-budget planning time. Every run starts with the CPU caches evicted, so all sizes are
//! measured the same way (from memory). `cargo bench --bench budget`.
//!
//! 1. The batch planner (`budget::plan`: every record pushed, then one plan) over transcripts
//!    of 100 to 100,000 entries, and how it grows: it should be linear, and plan 10,000
//!    entries in under 10 ms. Half of each transcript is older exchanges (some dropped), half
//!    the newest exchange (its old groups excerpted), so every step of the policy runs.
//! 2. The incremental planner (`budget::Planner`, as a session keeps it) at 1,000, 10,000 and
//!    50,000 entries under a budget every size is over: the same request (the newest exchange
//!    and the older exchanges that fit), only the session grows. Each plan uses a new
//!    calibration ratio, as each request of a turn does. Target: 50k ÷ 1k ≤ 2×.

use pen::budget::{Budget, Planner, ProviderKind, TokenEstimator, plan};
use pen::providers::ToolDefinition;
use pen::session::{Entry, EntryKind};
use pen::transcript::Record;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const SIZES: [usize; 4] = [100, 1_000, 10_000, 100_000];

/// Exchanges of prompts and call/result pairs, made while fewer than `stop_at` entries exist:
/// a prompt wherever `opens_exchange` says one begins, else a call and its result.
fn session(stop_at: usize, opens_exchange: impl Fn(&[Entry]) -> bool) -> Vec<Entry> {
    let result = "fn main() { println!(\"hello\"); }\n".repeat(30);
    let mut out: Vec<Entry> = Vec::with_capacity(stop_at + 2);
    let push = |out: &mut Vec<Entry>, kind: EntryKind, payload: Value| {
        let seq = out.len() as u64 + 1;
        out.push(Entry {
            seq,
            kind,
            turn_id: None,
            payload,
            created_at: 0,
        });
    };
    let mut call = 0;
    while out.len() < stop_at {
        if opens_exchange(&out) {
            push(
                &mut out,
                EntryKind::UserPrompt,
                json!({"text": "next task"}),
            );
            continue;
        }
        call += 1;
        let id = format!("call_{call}");
        push(
            &mut out,
            EntryKind::AssistantMessage,
            json!({"text": "", "tool_calls": [{"id": id, "name": "pen_read", "arguments": "{\"path\":\"src/main.rs\"}"}]}),
        );
        push(
            &mut out,
            EntryKind::ToolResult,
            json!({"call_id": id, "content": result, "is_error": false}),
        );
    }
    out
}

/// Exchanges of a prompt and four call/result pairs in the first half, then one newest exchange
/// of pairs that fills the second half.
fn transcript(entries: usize) -> Vec<Entry> {
    // Older exchanges: a prompt and four calls; the newest starts at the halfway mark.
    session(entries.saturating_sub(2), |out| {
        if out.len() < entries / 2 {
            out.len() % 9 == 0
        } else {
            out.last().is_some_and(|e| e.seq as usize <= entries / 2)
        }
    })
}

/// Bytes written between timed runs: several times any CPU cache, so every size is measured
/// from memory. Otherwise a 10,000-entry transcript (10 MB) partly stays cached between the
/// five repetitions and a 100,000-entry one (100 MB) never does, which reads as non-linear
/// growth of the planner.
const FLUSH_BYTES: usize = 256 * 1024 * 1024;

fn evict_caches(buffer: &mut [u8]) {
    for (i, byte) in buffer.iter_mut().enumerate().step_by(64) {
        *byte = byte.wrapping_add(i as u8);
    }
    std::hint::black_box(&buffer);
}

/// Older exchanges of a prompt and four call/result pairs, then a newest exchange of 40 pairs:
/// the session grows in older exchanges only.
fn growing_session(entries: usize) -> Vec<Record> {
    const NEWEST: usize = 1 + 40 * 2;
    session(entries, |out| {
        if out.len() >= entries - NEWEST {
            out.len() == entries - NEWEST
        } else {
            out.len() % 9 == 0
        }
    })
    .iter()
    .map(Entry::record)
    .collect()
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// Plans per size in the incremental series.
const PLAN_RUNS: usize = 31;

/// The incremental series: per-plan cost as the session grows, beside the batch plan. Each
/// plan is timed from cold caches (as after a provider round trip) and again at once (warm).
fn incremental(tools: &[ToolDefinition], flush: &mut [u8]) {
    // About 30 older exchanges and the newest fit: every size is over it.
    let budget = Budget {
        max_input_tokens: 32_000,
    };
    println!(
        "\nincremental planner, {PLAN_RUNS} plans a size (median; best)\n\
         entries   cold plan            warm plan            batch plan (median of 5)   push µs/record   request"
    );
    let mut rows: Vec<[Duration; 4]> = Vec::new();
    for size in [1_000, 10_000, 50_000] {
        let records = growing_session(size);
        let started = Instant::now();
        let mut planner = Planner::new();
        for record in &records {
            planner.push(record);
        }
        let push = started.elapsed();
        let (mut cold, mut warm) = (Vec::new(), Vec::new());
        let mut shape = String::new();
        for run in 0..PLAN_RUNS {
            // Each request of a turn is calibrated by the answer before it.
            let estimator =
                TokenEstimator::new(ProviderKind::Anthropic, 1.1 + run as f64 / 1_000.0);
            evict_caches(flush);
            let started = Instant::now();
            let planned = planner.plan("system", tools, budget, &estimator);
            cold.push(started.elapsed());
            let started = Instant::now();
            let again = planner.plan("system", tools, budget, &estimator);
            warm.push(started.elapsed());
            assert_eq!(planned, again);
            match planned {
                Ok(plan) => {
                    let report = plan
                        .report
                        .unwrap_or_else(|| panic!("{size}: not at the budget"));
                    shape = format!(
                        "{} messages, {} tokens; {} exchanges dropped",
                        plan.messages.len(),
                        plan.estimated_tokens,
                        report.dropped_count
                    );
                }
                Err(err) => panic!("{size} entries: {err}"),
            }
        }
        let best = |times: &[Duration]| times.iter().min().copied().unwrap_or_default();
        let figures = [
            median(cold.clone()),
            best(&cold),
            median(warm.clone()),
            best(&warm),
        ];
        let mut batch_times = Vec::new();
        for run in 0..5 {
            let estimator =
                TokenEstimator::new(ProviderKind::Anthropic, 1.1 + run as f64 / 1_000.0);
            evict_caches(flush);
            let started = Instant::now();
            let planned = plan(&records, "system", tools, budget, &estimator);
            batch_times.push(started.elapsed());
            std::hint::black_box(planned.ok());
        }
        let batch = median(batch_times);
        let micros = |d: Duration| d.as_secs_f64() * 1e6;
        println!(
            "{size:>7}   {:>6.1} µs; {:>6.1} µs   {:>6.1} µs; {:>6.1} µs   {:>10.3} ms ({:>4.0}× cold)    {:>8.2}      {shape}",
            micros(figures[0]),
            micros(figures[1]),
            micros(figures[2]),
            micros(figures[3]),
            batch.as_secs_f64() * 1e3,
            batch.as_secs_f64() / figures[0].as_secs_f64(),
            push.as_secs_f64() * 1e6 / size as f64,
        );
        rows.push(figures);
    }
    if let (Some(first), Some(last)) = (rows.first(), rows.last()) {
        let ratio = |i: usize| last[i].as_secs_f64() / first[i].as_secs_f64();
        println!(
            "50,000 ÷ 1,000 entries (target ≤ 2×): cold {:.2}× (best {:.2}×), warm {:.2}× (best {:.2}×)",
            ratio(0),
            ratio(1),
            ratio(2),
            ratio(3)
        );
    }
}

fn main() {
    let tools = vec![ToolDefinition {
        name: "pen_read".into(),
        description: "Read a file.".into(),
        input_schema: json!({"type": "object"}),
    }];
    let mut flush = vec![0u8; FLUSH_BYTES];
    if std::env::args().any(|arg| arg == "incremental") {
        incremental(&tools, &mut flush);
        return;
    }
    let estimator = TokenEstimator::new(ProviderKind::Anthropic, 1.1);
    let mut previous: Option<Duration> = None;
    println!(
        "entries     plan (median of 5)   growth   µs/entry   reference (JSON of the payloads)   plan ÷ reference"
    );
    for size in SIZES {
        let entries = transcript(size);
        // Typed once, as the session store reads them (not timed): the planner reads records.
        let records: Vec<Record> = entries.iter().map(Entry::record).collect();
        let untouched = plan(
            &records,
            "system",
            &tools,
            Budget {
                max_input_tokens: u64::MAX,
            },
            &estimator,
        )
        .map(|p| p.messages)
        .unwrap_or_default();
        let total = untouched.len();
        let tokens: u64 = untouched.iter().map(|m| estimator.message(m)).sum();
        // The newest exchange is about half the tokens: at 45% its old groups are excerpted
        // and most older exchanges are dropped.
        let budget = Budget {
            max_input_tokens: tokens * 45 / 100,
        };
        let mut times = Vec::new();
        let mut report = None;
        for _ in 0..5 {
            evict_caches(&mut flush);
            let started = Instant::now();
            let planned = plan(&records, "system", &tools, budget, &estimator);
            times.push(started.elapsed());
            report = match planned {
                Ok(plan) => plan.report,
                Err(err) => panic!("{size} entries: {err}"),
            };
        }
        times.sort();
        let median = times[times.len() / 2];
        // The reference touches the same data the same way a request must: every payload
        // serialized once. Memory effects (the transcript outgrows the caches) hit both, so
        // a steady ratio means the planner itself grows linearly.
        let mut reference_times = Vec::new();
        for _ in 0..5 {
            evict_caches(&mut flush);
            let started = Instant::now();
            let bytes: usize = entries
                .iter()
                .map(|e| serde_json::to_vec(&e.payload).map_or(0, |v| v.len()))
                .sum();
            reference_times.push(started.elapsed());
            std::hint::black_box(bytes);
        }
        reference_times.sort();
        let reference = reference_times[reference_times.len() / 2];
        let growth = previous.map_or(String::from("-"), |p| {
            format!("×{:.1}", median.as_secs_f64() / p.as_secs_f64())
        });
        let (excerpted, dropped) =
            report.map_or((0, 0), |r| (r.excerpted.len(), r.dropped_count as usize));
        println!(
            "{size:>7}     {:>10.3} ms        {growth:>6}   {:>8.3}   {:>10.3} ms                      {:>6.2}   ({total} messages untouched; {excerpted} calls excerpted, {dropped} exchanges dropped)",
            median.as_secs_f64() * 1e3,
            median.as_secs_f64() * 1e6 / size as f64,
            reference.as_secs_f64() * 1e3,
            median.as_secs_f64() / reference.as_secs_f64(),
        );
        previous = Some(median);
    }
    incremental(&tools, &mut flush);
}
