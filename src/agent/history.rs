//! What the loop reads back from the durable transcript besides the messages (which
//! [`crate::budget::plan`] builds): the newest large results to cut after a rejection, the
//! calibration of the estimate, the rejected sizes, and the last trimming report.
//!
//! The transcript is never rewritten: decisions that change what the model is sent (results cut
//! after a context-window rejection, a lower budget) are event entries, applied every time a
//! request is planned, so later requests keep them and the same transcript always gives the same
//! messages.

use crate::budget::{TokenEstimator, TrimReport, shrunk_ids};
use crate::providers::{ProviderKind, ToolCall};
use crate::session::{Entry, EntryKind};
use serde_json::{Value, json};
use std::collections::HashSet;

pub use crate::budget::SHRUNK_HEAD_BYTES;

/// The call ids of the newest group of tool results that has a result over
/// [`SHRUNK_HEAD_BYTES`] not already cut, for the context-window recovery step.
pub fn newest_large_group(entries: &[Entry]) -> Option<Vec<String>> {
    let shrunk = shrunk_ids(entries);
    let mut group: Vec<String> = Vec::new();
    for entry in entries.iter().rev() {
        match entry.kind {
            EntryKind::ToolResult => {
                let id = entry.payload["call_id"].as_str().unwrap_or_default();
                let len = entry.payload["content"].as_str().map_or(0, str::len);
                if len > SHRUNK_HEAD_BYTES && !shrunk.contains(id) {
                    group.push(id.to_string());
                }
            }
            // The assistant message opens the group of results that follow it.
            EntryKind::AssistantMessage if !group.is_empty() => {
                group.reverse();
                return Some(group);
            }
            _ => {}
        }
    }
    None
}

/// Gives every call of a new answer an id no earlier entry of the session and no earlier call of
/// the answer uses. The planner refuses a history with a repeated call id (its results could not
/// be told apart), so an answer that repeats one, from a hostile model or a local server that
/// numbers its calls per answer, would otherwise make every later request of the session fail.
/// The first use of an id keeps it: the id only pairs a call with its result in pen's own
/// requests, so a replacement changes nothing the model relies on. Returns how many were replaced.
pub fn make_call_ids_unique(entries: &[Entry], calls: &mut [ToolCall]) -> usize {
    let mut used: HashSet<&str> = HashSet::new();
    for entry in entries {
        match entry.kind {
            EntryKind::AssistantMessage => {
                let listed = entry.payload["tool_calls"].as_array().into_iter().flatten();
                used.extend(listed.filter_map(|call| call["id"].as_str()));
            }
            EntryKind::ToolCall | EntryKind::ToolResult => {
                used.extend(entry.payload["call_id"].as_str());
            }
            _ => {}
        }
    }
    let mut fresh: HashSet<String> = HashSet::new();
    let mut replaced = 0;
    for call in calls {
        if call.id.is_empty() || used.contains(call.id.as_str()) || fresh.contains(&call.id) {
            call.id = format!("call_{}", uuid::Uuid::now_v7().simple());
            replaced += 1;
        }
        fresh.insert(call.id.clone());
    }
    replaced
}

/// The estimator for the session's next request to `model`: calibrated by the latest answer
/// from that model whose provider reported its input tokens (assistant entries record the
/// uncalibrated estimate of the request they answer), else uncalibrated.
pub fn estimator(entries: &[Entry], model: &str, family: ProviderKind) -> TokenEstimator {
    entries
        .iter()
        .rev()
        .filter(|e| e.kind == EntryKind::AssistantMessage && e.payload["model"] == model)
        .find_map(|e| {
            let reported = e.payload["usage"]["input_tokens"].as_u64()?;
            let estimated = e.payload["estimated_input_tokens"].as_u64()?;
            (reported > 0 && estimated > 0)
                .then(|| TokenEstimator::calibrate(family, reported, estimated))
        })
        .unwrap_or_else(|| TokenEstimator::new(family, 1.0))
}

/// The smallest estimate at which `model` rejected a request of this session as over its
/// context window: later requests are planned under it.
pub fn rejected_at(entries: &[Entry], model: &str) -> Option<u64> {
    entries
        .iter()
        .filter(|e| {
            e.kind == EntryKind::Event
                && e.payload["type"] == CONTEXT_WINDOW_REJECTED
                && e.payload["model"] == model
        })
        .filter_map(|e| e.payload["estimated_tokens"].as_u64())
        .min()
}

/// The event entry type that records a context-window rejection.
pub const CONTEXT_WINDOW_REJECTED: &str = "context_window_rejected";

/// The event entry type that records a budget report.
pub const CONTEXT_TRIMMED: &str = "context_trimmed";

/// The stored form of a budget report (snake_case, like every stored payload).
pub fn trim_entry(report: &TrimReport) -> Value {
    json!({
        "type": CONTEXT_TRIMMED,
        "policy_version": report.policy_version,
        "excerpted_call_ids": report.excerpted,
        "omitted_call_ids": report.omitted,
        "dropped_exchanges": report.dropped_exchanges,
        "tokens_before": report.tokens_before,
        "tokens_after": report.tokens_after,
        "budget": report.budget,
    })
}

/// The `context_trimmed` event data of a budget report, as `pen/event` sends it.
pub fn trim_event(report: &TrimReport) -> Value {
    json!({
        "reason": "budget",
        "policyVersion": report.policy_version,
        "excerptedCallIds": report.excerpted,
        "omittedCallIds": report.omitted,
        "droppedExchanges": report.dropped_exchanges,
        "tokensBefore": report.tokens_before,
        "tokensAfter": report.tokens_after,
        "budget": report.budget,
    })
}

/// Whether `report` cuts something other than the session's last recorded report: a request
/// that repeats the same cuts is not a new compaction and is not recorded again.
pub fn is_new_trim(entries: &[Entry], report: &TrimReport) -> bool {
    let last = entries
        .iter()
        .rev()
        .find(|e| e.kind == EntryKind::Event && e.payload["type"] == CONTEXT_TRIMMED);
    let stored = trim_entry(report);
    last.is_none_or(|e| {
        e.payload["excerpted_call_ids"] != stored["excerpted_call_ids"]
            || e.payload["omitted_call_ids"] != stored["omitted_call_ids"]
            || e.payload["dropped_exchanges"] != stored["dropped_exchanges"]
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::transcript_messages;
    use crate::providers::Message;

    /// The untouched messages, or the history error as text.
    fn build_messages(entries: &[Entry]) -> Result<Vec<Message>, String> {
        transcript_messages(entries).map_err(|e| e.to_string())
    }
    use serde_json::{Value, json};

    fn entry(seq: u64, kind: EntryKind, payload: Value) -> Entry {
        Entry {
            seq,
            kind,
            turn_id: None,
            payload,
            created_at: 0,
        }
    }

    fn call(id: &str) -> Value {
        json!({"id": id, "name": "pen_read", "arguments": "{}"})
    }

    #[test]
    fn a_tool_round_becomes_messages_in_order() {
        let entries = vec![
            entry(1, EntryKind::UserPrompt, json!({"text": "hi"})),
            entry(
                2,
                EntryKind::AssistantMessage,
                json!({"text": "", "tool_calls": [call("a"), call("b")]}),
            ),
            entry(3, EntryKind::ToolCall, json!({"call_id": "a"})),
            entry(
                4,
                EntryKind::ToolResult,
                json!({"call_id": "a", "content": "A", "is_error": false}),
            ),
            entry(
                5,
                EntryKind::ToolResult,
                json!({"call_id": "b", "content": "B", "is_error": true}),
            ),
            entry(
                6,
                EntryKind::AssistantMessage,
                json!({"text": "done", "tool_calls": []}),
            ),
        ];
        let messages = build_messages(&entries).unwrap();
        assert_eq!(messages.len(), 5);
        assert_eq!(
            messages[3],
            Message::ToolResult {
                call_id: "b".into(),
                content: "B".into(),
                is_error: true
            }
        );
    }

    #[test]
    fn inconsistent_histories_are_refused_naming_the_entry() {
        let unanswered = vec![
            entry(
                1,
                EntryKind::AssistantMessage,
                json!({"text": "", "tool_calls": [call("a")]}),
            ),
            entry(2, EntryKind::UserPrompt, json!({"text": "next"})),
        ];
        assert!(build_messages(&unanswered).unwrap_err().contains("entry 2"));
        let orphan = vec![entry(
            1,
            EntryKind::ToolResult,
            json!({"call_id": "x", "content": ""}),
        )];
        assert!(build_messages(&orphan).unwrap_err().contains("entry 1"));
        let duplicate = vec![
            entry(
                1,
                EntryKind::AssistantMessage,
                json!({"text": "", "tool_calls": [call("a")]}),
            ),
            entry(
                2,
                EntryKind::ToolResult,
                json!({"call_id": "a", "content": ""}),
            ),
            entry(
                3,
                EntryKind::AssistantMessage,
                json!({"text": "", "tool_calls": [call("a")]}),
            ),
        ];
        assert!(build_messages(&duplicate).unwrap_err().contains("repeats"));
    }

    #[test]
    fn the_newest_large_group_is_cut_in_the_request_only() {
        let big = "x".repeat(10_000);
        let mut entries = vec![
            entry(
                1,
                EntryKind::AssistantMessage,
                json!({"text": "", "tool_calls": [call("old")]}),
            ),
            entry(
                2,
                EntryKind::ToolResult,
                json!({"call_id": "old", "content": big}),
            ),
            entry(
                3,
                EntryKind::AssistantMessage,
                json!({"text": "", "tool_calls": [call("small"), call("new")]}),
            ),
            entry(
                4,
                EntryKind::ToolResult,
                json!({"call_id": "small", "content": "s"}),
            ),
            entry(
                5,
                EntryKind::ToolResult,
                json!({"call_id": "new", "content": big}),
            ),
        ];
        assert_eq!(newest_large_group(&entries), Some(vec!["new".to_string()]));
        entries.push(entry(
            6,
            EntryKind::Event,
            json!({"type": "results_shrunk", "call_ids": ["new"]}),
        ));
        let messages = build_messages(&entries).unwrap();
        let Message::ToolResult { content, .. } = &messages[4] else {
            panic!()
        };
        assert!(content.starts_with(&"x".repeat(2048)));
        assert!(content.contains("the full result was 10000 bytes"));
        assert!(content.len() < 2_300);
        // The next rejection reaches back to the older group.
        assert_eq!(newest_large_group(&entries), Some(vec!["old".to_string()]));
        entries.push(entry(
            7,
            EntryKind::Event,
            json!({"type": "results_shrunk", "call_ids": ["old"]}),
        ));
        assert_eq!(newest_large_group(&entries), None);
    }
}
