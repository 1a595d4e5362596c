//! Prompt-budget planning time for transcripts of 100 to 100,000 entries, and how it grows:
//! the planner should be linear, and plan 10,000 entries in under 10 ms.
//!
//! Half of each transcript is older exchanges (some dropped), half the newest exchange (its
//! old groups excerpted), so every step of the policy runs. `cargo bench --bench budget`.

use pen::budget::{Budget, ProviderFamily, TokenEstimator, plan};
use pen::providers::ToolDefinition;
use pen::session::{Entry, EntryKind};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const SIZES: [usize; 4] = [100, 1_000, 10_000, 100_000];

/// Entries in groups of prompt or assistant message + result: exchanges of 10 entries in the
/// first half, then one newest exchange that fills the second half.
fn transcript(entries: usize) -> Vec<Entry> {
    let result = "fn main() { println!(\"hello\"); }\n".repeat(30);
    let mut out: Vec<Entry> = Vec::with_capacity(entries);
    let mut push = |out: &mut Vec<Entry>, kind: EntryKind, payload: Value| {
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
        let newest = out.len() >= entries / 2;
        if out.len() % 10 == 0 && (!newest || out.len() < entries / 2 + 2) {
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

fn main() {
    let tools = vec![ToolDefinition {
        name: "pen_read".into(),
        description: "Read a file.".into(),
        input_schema: json!({"type": "object"}),
    }];
    let estimator = TokenEstimator::new(ProviderFamily::Anthropic, 1.1);
    let mut previous: Option<Duration> = None;
    println!("entries     plan (median of 5)   growth");
    for size in SIZES {
        let entries = transcript(size);
        // Enough for a third of the transcript: older exchanges are dropped, and at the larger
        // sizes the newest exchange's old groups are excerpted too.
        let total = plan(
            &entries,
            "system",
            &tools,
            Budget {
                max_input_tokens: u64::MAX,
            },
            &estimator,
        )
        .map(|p| p.messages.len())
        .unwrap_or(0);
        let budget = Budget {
            max_input_tokens: (size as u64 * 300 / 3).max(2_000),
        };
        let mut times = Vec::new();
        let mut report = None;
        for _ in 0..5 {
            let started = Instant::now();
            let planned = plan(&entries, "system", &tools, budget, &estimator);
            times.push(started.elapsed());
            report = planned.ok().and_then(|p| p.report);
        }
        times.sort();
        let median = times[times.len() / 2];
        let growth = previous.map_or(String::from("-"), |p| {
            format!("×{:.1}", median.as_secs_f64() / p.as_secs_f64())
        });
        let (excerpted, dropped) =
            report.map_or((0, 0), |r| (r.excerpted.len(), r.dropped_exchanges.len()));
        println!(
            "{size:>7}     {:>10.3} ms        {growth:>6}   ({total} messages untouched; {excerpted} calls excerpted, {dropped} exchanges dropped)",
            median.as_secs_f64() * 1e3
        );
        previous = Some(median);
    }
}
