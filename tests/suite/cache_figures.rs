//! The prompt-cache workloads, shared by the cache suite (`suite::cache`) and the cache
//! benchmark (`benches/cache.rs`, which includes this file): a generated workspace and a
//! scripted tool-heavy turn over it (reads, searches and edits with results of varied size);
//! a scripted model that works through tasks and follows every result's cursor to its end, so
//! two policies get the same information whatever their pages; and the order in which a prompt
//! cache reads a request.
//!
//! **The prefix model.** A provider caches a prompt by its exact prefix in the order it reads
//! the request: the tool definitions, the system prompt, then the messages in order (Anthropic
//! and Bedrock by that documented order, OpenAI and local servers by the rendered prompt). So a
//! body is compared in that order (each part as canonical JSON), not in the order of its keys.

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

/// One task of the scripted model: a tool call, continued through its result's cursor until a
/// result has none.
#[derive(Debug, Clone)]
pub struct Task {
    pub tool: &'static str,
    pub arguments: Value,
}

impl Task {
    pub fn new(tool: &'static str, arguments: Value) -> Task {
        Task { tool, arguments }
    }
}

/// The call ids the scripted model makes: `t{task}_r{request}`.
fn task_of(call_id: &str) -> Option<usize> {
    call_id.strip_prefix('t')?.split('_').next()?.parse().ok()
}

/// The scripted model's answer to request `number` (OpenAI's format): it works through `tasks`
/// in order and follows each result's cursor to its end (a read's `next_start_line` and
/// `next_offset`, a list's or a search's `next_after`), then answers. It decides from the
/// request alone, its last call and that call's result (a plan always sends the latest groups
/// whole), so a resumed or compacted session gets the same next step.
pub fn scripted_reply(tasks: &[Task], number: usize, body: &Value) -> Reply {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let last_result = messages.iter().rev().find(|m| m["role"] == "tool");
    let mut next = Some((0, tasks.first().map(|t| t.arguments.clone())));
    if let Some(result) = last_result {
        let id = result["tool_call_id"].as_str().unwrap_or_default();
        let task = task_of(id).unwrap_or(tasks.len());
        let arguments: Value = messages
            .iter()
            .filter_map(|m| m["tool_calls"].as_array())
            .flatten()
            .find(|call| call["id"] == id)
            .and_then(|call| call["function"]["arguments"].as_str())
            .and_then(|text| serde_json::from_str(text).ok())
            .unwrap_or(Value::Null);
        let content: Value = serde_json::from_str(result["content"].as_str().unwrap_or_default())
            .unwrap_or(Value::Null);
        next = if let Some(line) = content["next_start_line"].as_u64() {
            let mut arguments = arguments;
            arguments["start_line"] = json!(line);
            if let Some(offset) = content["next_offset"].as_u64() {
                arguments["offset"] = json!(offset);
            }
            Some((task, Some(arguments)))
        } else if let Some(after) = content["next_after"].as_str() {
            let mut arguments = arguments;
            arguments["after"] = json!(after);
            Some((task, Some(arguments)))
        } else {
            Some((task + 1, tasks.get(task + 1).map(|t| t.arguments.clone())))
        };
    }
    match next {
        Some((task, Some(arguments))) if task < tasks.len() => {
            let call = ToolCall {
                id: format!("t{task}_r{number}"),
                name: tasks[task].tool.to_string(),
                arguments: arguments.to_string(),
            };
            Reply::Stream(openai_frames(&["Next."], &[call], honest_usage()))
        }
        _ => Reply::Stream(openai_frames(&["Done."], &[], honest_usage())),
    }
}
