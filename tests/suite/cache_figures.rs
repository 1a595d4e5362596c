//! The prompt-cache workload and its figures, shared by the cache suite (`suite::cache`) and the
//! cache benchmark (`benches/cache.rs`, which includes this file): a generated workspace, a
//! scripted tool-heavy turn over it (reads, searches and edits with results of varied size),
//! and what the request bodies a fake provider received share with each other.
//!
//! **The prefix model.** A provider caches a prompt by its exact prefix in the order it reads
//! the request: the tool definitions, the system prompt, then the messages in order (Anthropic
//! and Bedrock by that documented order, OpenAI and local servers by the rendered prompt). So a
//! body is compared in that order (each part as canonical JSON), not in the order of its keys.
//!
//! **The price model.** Anthropic's prompt-cache prices in units of the uncached input price:
//! uncached 1, cache read 0.1, cache write 1.25, with a breakpoint at the end of every request:
//! the prefix a request shares with the one before it is read from the cache, the rest is
//! written. Sizes are bytes (÷ 4 for tokens, which the ratio cancels); the minimum cacheable
//! length and the cache's lifetime are not modelled.

use super::fake_provider::{BODY_TOKENS, Reply, openai_frames};
use pen::providers::{ToolCall, Usage};
use serde_json::{Value, json};
use std::path::Path;

/// Files of the generated workspace.
pub const FILES: usize = 40;

/// The lines of file `k`: 45 to 194, so results vary from about 1.5 to 7 KB.
fn lines_of(k: usize) -> usize {
    45 + (k * 37) % 150
}

/// Writes `src/mod_KK.rs` files whose lines are all distinct (`pub fn item_K_J() -> u32 { J }`).
pub fn workspace(root: &Path) {
    std::fs::create_dir_all(root.join("src")).expect("create src");
    for k in 0..FILES {
        let text: String = (0..lines_of(k))
            .map(|j| format!("pub fn item_{k}_{j}() -> u32 {{ {j} }}\n"))
            .collect();
        std::fs::write(root.join(format!("src/mod_{k:02}.rs")), text).expect("write a file");
    }
}

/// The `i`-th call of the turn: three reads, a search and an edit in every five. An edit
/// renames one function of a file read before it (each edit a different line, so each applies).
pub fn call(i: usize) -> ToolCall {
    let (name, arguments) = match i % 5 {
        3 => (
            "pen_search",
            json!({"query": format!("item_{}_1", (i * 13) % FILES), "path": "src"}),
        ),
        4 => {
            let k = (i * 7) % FILES;
            let j = i / 5;
            (
                "pen_edit",
                json!({"path": format!("src/mod_{k:02}.rs"), "edits": [{
                    "old_text": format!("pub fn item_{k}_{j}() "),
                    "new_text": format!("pub fn item_{k}_{j}_renamed() "),
                }]}),
            )
        }
        _ => (
            "pen_read",
            json!({"path": format!("src/mod_{:02}.rs", (i * 7) % FILES)}),
        ),
    };
    ToolCall {
        id: format!("call_{i}"),
        name: name.to_string(),
        arguments: arguments.to_string(),
    }
}

/// Usage as a real tokenizer would report it: the fake replaces it with the body's length ÷ 4.
#[allow(clippy::needless_update)] // Other fields, when a newer Usage has them, stay unreported.
pub fn honest_usage() -> Usage {
    Usage {
        input_tokens: BODY_TOKENS,
        output_tokens: 10,
        ..Usage::default()
    }
}

/// A scripted turn in OpenAI's format: one answer with one call for each of `calls` (see
/// [`call`]), then a final answer.
pub fn turn(calls: std::ops::Range<usize>) -> Vec<Reply> {
    turn_in(openai_frames, calls)
}

/// [`turn`] in the wire format `frames` writes (`openai_frames`, `anthropic_frames`).
pub fn turn_in(
    frames: fn(&[&str], &[ToolCall], Usage) -> Vec<String>,
    calls: std::ops::Range<usize>,
) -> Vec<Reply> {
    let mut replies: Vec<Reply> = calls
        .map(|i| Reply::Stream(frames(&["Next."], &[call(i)], honest_usage())))
        .collect();
    replies.push(Reply::Stream(frames(&["Done."], &[], honest_usage())));
    replies
}

/// A body as a prompt cache reads it: tools, system, then each message, as canonical JSON.
pub fn cache_order(body: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    for key in ["tools", "system"] {
        if let Some(part) = body.get(key) {
            out.extend_from_slice(part.to_string().as_bytes());
            out.push(b'\n');
        }
    }
    for message in body["messages"].as_array().into_iter().flatten() {
        out.extend_from_slice(message.to_string().as_bytes());
        out.push(b'\n');
    }
    out
}

fn shared_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// What a run's requests share with each other.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Figures {
    pub requests: usize,
    /// Over the requests after the first: the least and the median share of a request's bytes
    /// that is a prefix of the request before it.
    pub min_share: f64,
    pub median_share: f64,
    /// Over the whole session (the first request shares nothing): shared bytes ÷ all bytes.
    pub whole_share: f64,
    /// The share of requests after the first that reuse at least 90% of their bytes.
    pub reusing_90: f64,
    /// The share of requests after the first that extend the one before: all of it is their
    /// prefix (what they add is all they do not reuse).
    pub appending: f64,
    /// The session's price under the model above ÷ its price without caching.
    pub price_ratio: f64,
    /// The largest request, in bytes of its cache-order form.
    pub max_bytes: usize,
}

/// The figures of the bodies of one session's requests, in the order they were sent.
pub fn figures(bodies: &[Value]) -> Figures {
    let forms: Vec<Vec<u8>> = bodies.iter().map(cache_order).collect();
    let mut shares: Vec<f64> = Vec::new();
    let mut appending = 0usize;
    let (mut shared_total, mut all_total, mut price) = (0usize, 0usize, 0.0f64);
    for (i, form) in forms.iter().enumerate() {
        let shared = match i {
            0 => 0,
            _ => shared_prefix(&forms[i - 1], form),
        };
        if i > 0 && shared == forms[i - 1].len() {
            appending += 1;
        }
        if i > 0 {
            shares.push(shared as f64 / form.len().max(1) as f64);
        }
        shared_total += shared;
        all_total += form.len();
        price += 0.1 * shared as f64 + 1.25 * (form.len() - shared) as f64;
    }
    let mut sorted = shares.clone();
    sorted.sort_by(f64::total_cmp);
    let at = |q: usize| sorted.get(q).copied().unwrap_or(0.0);
    Figures {
        requests: bodies.len(),
        min_share: at(0),
        median_share: at(sorted.len() / 2),
        whole_share: shared_total as f64 / all_total.max(1) as f64,
        reusing_90: shares.iter().filter(|&&s| s >= 0.9).count() as f64
            / shares.len().max(1) as f64,
        appending: appending as f64 / shares.len().max(1) as f64,
        price_ratio: price / all_total.max(1) as f64,
        max_bytes: forms.iter().map(Vec::len).max().unwrap_or(0),
    }
}
