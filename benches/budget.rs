//! Prompt-budget planning time for transcripts of 100 to 100,000 entries, and how it grows:
//! the planner should be linear, and plan 10,000 entries in under 10 ms. Every run starts with
//! the CPU caches evicted, so all sizes are measured the same way (from memory).
//!
//! Half of each transcript is older exchanges (some dropped), half the newest exchange (its
//! old groups excerpted), so every step of the policy runs. `cargo bench --bench budget`.

use pen::budget::{Budget, TokenEstimator, plan};
use pen::providers::ProviderKind;
use pen::providers::ToolDefinition;
use pen::session::{Entry, EntryKind};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const SIZES: [usize; 4] = [100, 1_000, 10_000, 100_000];

/// Exchanges of a prompt and four call/result pairs in the first half, then one newest exchange
/// of pairs that fills the second half.
fn transcript(entries: usize) -> Vec<Entry> {
    let result = "fn main() { println!(\"hello\"); }\n".repeat(30);
    let mut out: Vec<Entry> = Vec::with_capacity(entries);
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
    while out.len() + 2 < entries {
        // Older exchanges: a prompt and four calls; the newest starts at the halfway mark.
        let opens_exchange = if out.len() < entries / 2 {
            out.len() % 9 == 0
        } else {
            out.last().is_some_and(|e| e.seq as usize <= entries / 2)
        };
        if opens_exchange {
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

fn main() {
    let tools = vec![ToolDefinition {
        name: "pen_read".into(),
        description: "Read a file.".into(),
        input_schema: json!({"type": "object"}),
    }];
    let estimator = TokenEstimator::new(ProviderKind::Anthropic, 1.1);
    let mut previous: Option<Duration> = None;
    println!(
        "entries     plan (median of 5)   growth   µs/entry   reference (JSON of the payloads)   plan ÷ reference"
    );
    for size in SIZES {
        let entries = transcript(size);
        let untouched = plan(
            &entries,
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
        let mut flush = vec![0u8; FLUSH_BYTES];
        for _ in 0..5 {
            evict_caches(&mut flush);
            let started = Instant::now();
            let planned = plan(&entries, "system", &tools, budget, &estimator);
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
            report.map_or((0, 0), |r| (r.excerpted.len(), r.dropped_exchanges.len()));
        println!(
            "{size:>7}     {:>10.3} ms        {growth:>6}   {:>8.3}   {:>10.3} ms                      {:>6.2}   ({total} messages untouched; {excerpted} calls excerpted, {dropped} exchanges dropped)",
            median.as_secs_f64() * 1e3,
            median.as_secs_f64() * 1e6 / size as f64,
            reference.as_secs_f64() * 1e3,
            median.as_secs_f64() / reference.as_secs_f64(),
        );
        previous = Some(median);
    }
}
