//! The incremental planner's law and the history's answers, checked against the batch code they
//! replace: for random transcripts (valid and not), pushing records one by one and planning
//! after each push gives exactly what today's batch planner (`reference`) gives for the same
//! prefix, and every `History` query gives what the loop's rescans of the transcript gave.

use super::reference;
use super::*;
use crate::providers::ToolCall;
use crate::session::EntryKind;
use crate::transcript::{Event, Item};
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{Value, json};
use std::collections::{HashSet, VecDeque};

pub(super) const SYSTEM: &str = "You are pen.";
const MODELS: [&str; 2] = ["m1", "m2"];

pub(super) fn tools() -> Vec<ToolDefinition> {
    vec![ToolDefinition {
        name: "pen_read".into(),
        description: "Read a file.".into(),
        input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
    }]
}

/// One step of a random transcript. Results name the next waiting call, or any call made so far
/// (which makes results out of order, late answers and results for no call waiting).
#[derive(Debug, Clone)]
enum Op {
    Prompt(usize),
    Answer,
    Calls {
        count: usize,
        /// Reuse an earlier call id: a repeated id.
        repeat: Option<Index>,
        model: usize,
        usage: Option<(u64, u64)>,
        /// The results that follow at once (size, outcome), for the first calls.
        results: Vec<(usize, u8)>,
    },
    NextResult {
        size: usize,
        outcome: u8,
    },
    AnyResult {
        pick: Index,
        size: usize,
    },
    Shrink(Vec<Index>),
    CallRecorded,
    TurnEnded,
    Rejected {
        model: usize,
        tokens: u64,
    },
    Trimmed {
        excerpted: Vec<Index>,
        dropped: Vec<(u64, u64)>,
    },
}

fn size_strategy() -> impl Strategy<Value = usize> {
    prop_oneof![4 => 0usize..1_200, 1 => 2_000usize..5_000]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    // Mostly whole groups (a call and its results at once), so most prefixes are valid and
    // exchanges hold several groups; the rest breaks the history or answers it late.
    let group = (
        prop::collection::vec((size_strategy(), 0u8..4), 1..4),
        prop::option::weighted(0.01, any::<Index>()),
        0usize..MODELS.len(),
        prop::option::of((0u64..5_000, 0u64..5_000)),
        prop::bool::weighted(0.9),
    );
    prop_oneof![
        12 => (1usize..300).prop_map(Op::Prompt),
        6 => Just(Op::Answer),
        60 => group.prop_map(|(results, repeat, model, usage, answered)| Op::Calls {
            count: results.len(),
            repeat,
            model,
            usage,
            results: if answered { results } else { results[..results.len() / 2].to_vec() },
        }),
        4 => (size_strategy(), 0u8..4).prop_map(|(size, outcome)| Op::NextResult { size, outcome }),
        1 => (any::<Index>(), size_strategy()).prop_map(|(pick, size)| Op::AnyResult { pick, size }),
        4 => prop::collection::vec(any::<Index>(), 1..3).prop_map(Op::Shrink),
        2 => Just(Op::CallRecorded),
        3 => Just(Op::TurnEnded),
        2 => (0usize..MODELS.len(), 1u64..9_000).prop_map(|(model, tokens)| Op::Rejected { model, tokens }),
        2 => (
            prop::collection::vec(any::<Index>(), 0..3),
            prop::collection::vec((1u64..9, 1u64..9), 0..2)
        )
            .prop_map(|(excerpted, dropped)| Op::Trimmed { excerpted, dropped }),
    ]
}

/// The stored entries of a random transcript, as the session store holds them.
fn transcript(ops: &[Op]) -> Vec<Entry> {
    let mut entries: Vec<Entry> = Vec::new();
    let push = |entries: &mut Vec<Entry>, kind: EntryKind, payload: Value| {
        let seq = entries.len() as u64 + 1;
        entries.push(Entry {
            seq,
            kind,
            turn_id: None,
            payload,
            created_at: 0,
        });
    };
    let mut made: Vec<String> = Vec::new();
    let mut waiting: VecDeque<String> = VecDeque::new();
    let mut unanswered: VecDeque<String> = VecDeque::new();
    let result = |id: &str, size: usize, outcome: u8| {
        let (is_error, status) = match outcome {
            0 => (false, Some("done")),
            1 => (true, Some("error")),
            2 => (true, Some("denied")),
            _ => (true, None),
        };
        // Some results hold non-ASCII text, which the estimate counts double.
        let content = if size.is_multiple_of(7) {
            "é".repeat(size / 2)
        } else {
            "r".repeat(size)
        };
        let mut payload = json!({"call_id": id, "content": content, "is_error": is_error});
        if let Some(status) = status {
            payload["status"] = json!(status);
        }
        payload
    };
    for op in ops {
        match op {
            Op::Prompt(len) => {
                unanswered.extend(waiting.drain(..));
                push(
                    &mut entries,
                    EntryKind::UserPrompt,
                    json!({"text": "p".repeat(*len)}),
                );
            }
            Op::Answer => {
                unanswered.extend(waiting.drain(..));
                push(
                    &mut entries,
                    EntryKind::AssistantMessage,
                    json!({"text": "done", "tool_calls": []}),
                );
            }
            Op::Calls {
                count,
                repeat,
                model,
                usage,
                results,
            } => {
                unanswered.extend(waiting.drain(..));
                let mut ids = Vec::new();
                for i in 0..*count {
                    let id = match repeat {
                        Some(pick) if i == 0 && !made.is_empty() => {
                            made[pick.index(made.len())].clone()
                        }
                        _ => format!("call_{}", made.len() + i),
                    };
                    ids.push(id);
                }
                let calls: Vec<Value> = ids
                    .iter()
                    .map(|id| {
                        json!({"id": id, "name": "pen_read", "arguments": format!(r#"{{"path":"{}"}}"#, "a".repeat(id.len() * 7 % 300))})
                    })
                    .collect();
                let usage = usage.map(|(input, estimated)| {
                    (
                        json!({"input_tokens": input, "output_tokens": 1}),
                        estimated,
                    )
                });
                push(
                    &mut entries,
                    EntryKind::AssistantMessage,
                    json!({"text": "working", "tool_calls": calls, "finish_reason": "tool_use",
                           "usage": usage.as_ref().map(|u| u.0.clone()), "model": MODELS[*model],
                           "estimated_input_tokens": usage.map(|u| u.1)}),
                );
                made.extend(ids.iter().cloned());
                waiting.extend(ids);
                for (size, outcome) in results {
                    if let Some(id) = waiting.pop_front() {
                        push(
                            &mut entries,
                            EntryKind::ToolResult,
                            result(&id, *size, *outcome),
                        );
                    }
                }
            }
            Op::NextResult { size, outcome } => {
                let next = waiting.pop_front().or_else(|| unanswered.pop_front());
                if let Some(id) = next {
                    push(
                        &mut entries,
                        EntryKind::ToolResult,
                        result(&id, *size, *outcome),
                    );
                }
            }
            Op::AnyResult { pick, size } => {
                let id = if made.is_empty() {
                    "nobody".to_string()
                } else {
                    made[pick.index(made.len())].clone()
                };
                waiting.retain(|w| *w != id);
                unanswered.retain(|w| *w != id);
                push(&mut entries, EntryKind::ToolResult, result(&id, *size, 0));
            }
            Op::Shrink(picks) => {
                let ids: Vec<&String> = picks
                    .iter()
                    .filter(|_| !made.is_empty())
                    .map(|pick| &made[pick.index(made.len())])
                    .collect();
                push(
                    &mut entries,
                    EntryKind::Event,
                    json!({"type": "results_shrunk", "call_ids": ids, "head_bytes": 2048, "reason": "r"}),
                );
            }
            Op::CallRecorded => {
                if let Some(id) = waiting.front() {
                    push(
                        &mut entries,
                        EntryKind::ToolCall,
                        json!({"call_id": id, "name": "pen_read", "arguments": {}}),
                    );
                }
            }
            Op::TurnEnded => push(
                &mut entries,
                EntryKind::Event,
                json!({"type": "turn_ended", "stop_reason": "end_turn"}),
            ),
            Op::Rejected { model, tokens } => push(
                &mut entries,
                EntryKind::Event,
                json!({"type": "context_window_rejected", "model": MODELS[*model], "estimated_tokens": tokens, "reason": "r"}),
            ),
            Op::Trimmed { excerpted, dropped } => {
                let report = TrimReport {
                    policy_version: POLICY_VERSION,
                    excerpted: excerpted
                        .iter()
                        .filter(|_| !made.is_empty())
                        .map(|pick| made[pick.index(made.len())].clone())
                        .collect(),
                    omitted: Vec::new(),
                    dropped_exchanges: dropped.clone(),
                    dropped_count: dropped.len() as u64,
                    tokens_before: 9,
                    tokens_after: 3,
                    budget: 5,
                };
                push(
                    &mut entries,
                    EntryKind::Event,
                    Item::Event(Event::ContextTrimmed(report)).to_payload(),
                );
            }
        }
    }
    entries
}

fn transcript_strategy() -> impl Strategy<Value = Vec<Entry>> {
    prop::collection::vec(op_strategy(), 1..45).prop_map(|ops| transcript(&ops))
}

pub(super) fn family_strategy() -> impl Strategy<Value = ProviderKind> {
    prop_oneof![
        Just(ProviderKind::OpenAi),
        Just(ProviderKind::Anthropic),
        Just(ProviderKind::Bedrock)
    ]
}

// The loop's rescans of the transcript (src/agent/history.rs at a78ff67), verbatim but for
// the names: the answers `History` must give.

fn batch_newest_large_group(entries: &[Entry]) -> Option<Vec<String>> {
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
            EntryKind::AssistantMessage if !group.is_empty() => {
                group.reverse();
                return Some(group);
            }
            _ => {}
        }
    }
    None
}

fn batch_used_ids(entries: &[Entry]) -> HashSet<&str> {
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
    used
}

/// The calibration rules over the whole prefix: the newest plausible report, unless the
/// reports stayed constant while a request grew (then none).
fn batch_estimator(entries: &[Entry], model: &str, family: ProviderKind) -> TokenEstimator {
    let reports: Vec<(u64, u64)> = entries
        .iter()
        .filter(|e| e.kind == EntryKind::AssistantMessage && e.payload["model"] == model)
        .filter_map(|e| {
            let reported = e.payload["usage"]["input_tokens"].as_u64()?;
            let estimated = e.payload["estimated_input_tokens"].as_u64()?;
            (reported > 0 && estimated > 0).then_some((reported, estimated))
        })
        .collect();
    let constant = reports
        .windows(2)
        .any(|pair| pair[0].0 == pair[1].0 && pair[1].1 > pair[0].1 + pair[0].1 / 8);
    if constant {
        return TokenEstimator::new(family, 1.0);
    }
    reports
        .iter()
        .rev()
        .find(|(reported, estimated)| super::history::plausible(*reported, *estimated))
        .map(|&(reported, estimated)| TokenEstimator::calibrate(family, reported, estimated))
        .unwrap_or_else(|| TokenEstimator::new(family, 1.0))
}

fn batch_rejected_at(entries: &[Entry], model: &str, estimator: &TokenEstimator) -> Option<u64> {
    let rejections: Vec<&Entry> = entries
        .iter()
        .filter(|e| {
            e.kind == EntryKind::Event
                && e.payload["type"] == "context_window_rejected"
                && e.payload["model"] == model
        })
        .collect();
    let calibrated = rejections
        .iter()
        .filter_map(|e| e.payload["estimated_tokens"].as_u64())
        .min()?;
    match rejections
        .iter()
        .filter_map(|e| e.payload["uncalibrated_tokens"].as_u64())
        .min()
    {
        Some(tokens) => Some((tokens as f64 * estimator.ratio).floor() as u64),
        None => Some(calibrated),
    }
}

fn batch_is_new_trim(entries: &[Entry], report: &TrimReport) -> bool {
    let last = entries
        .iter()
        .rev()
        .find(|e| e.kind == EntryKind::Event && e.payload["type"] == "context_trimmed");
    let stored = Item::Event(Event::ContextTrimmed(report.clone())).to_payload();
    last.is_none_or(|e| {
        e.payload["excerpted_call_ids"] != stored["excerpted_call_ids"]
            || e.payload["omitted_call_ids"] != stored["omitted_call_ids"]
            || e.payload["dropped_exchanges"] != stored["dropped_exchanges"]
    })
}

/// The ceiling the estimate has always taken (`f64::ceil`), which `scale` computes faster.
fn scaled_as_before(quarters: u64, ratio: f64) -> u64 {
    (quarters as f64 * ratio / 4.0).ceil() as u64
}

/// Ratios `TokenEstimator::new` gives, and ratios only a hand-built estimator has.
fn ratio_strategy() -> impl Strategy<Value = f64> {
    prop_oneof![
        4 => 0.5f64..=4.0,
        1 => prop::sample::select(vec![0.0, -1.0, 1e-310, 1e-300, 4.000_000_1, 1e20, f64::NAN, f64::INFINITY]),
        1 => any::<f64>(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(160))]

    /// `scale` and `scale_sum` round exactly as `f64::ceil` did, whatever the sizes and ratio.
    #[test]
    fn the_fast_ceilings_are_the_ceiling(
        sizes in prop::collection::vec(prop_oneof![
            8 => 0u64..100_000,
            1 => prop::sample::select(vec![0, 1, 3, 4, 5, u32::MAX as u64, (1 << 32) + 1, (1 << 53) - 1, 1 << 53, (1 << 53) + 1, 1 << 62, u64::MAX]),
            1 => any::<u64>(),
        ], 0..40),
        ratio in ratio_strategy(),
    ) {
        let estimator = TokenEstimator { family: ProviderKind::OpenAi, ratio };
        for &size in &sizes {
            prop_assert_eq!(estimator.scale(size), scaled_as_before(size, ratio), "{} at {}", size, ratio);
        }
        let summable: Vec<u32> = sizes.iter().filter_map(|&s| u32::try_from(s).ok()).collect();
        if let Some(sum) = estimator.scale_sum(&summable) {
            prop_assert_eq!(sum, summable.iter().map(|&s| scaled_as_before(s.into(), ratio)).sum::<u64>());
        }
    }

    /// The law: plan after every push = the batch plan of the prefix, for every budget and
    /// ratio; the untouched messages too.
    #[test]
    fn planning_after_each_push_is_the_batch_plan_of_the_prefix(
        entries in transcript_strategy(),
        budgets in prop::collection::vec((0u64..7_000, 0.3f64..5.0, family_strategy()), 1..4),
    ) {
        let tools = tools();
        let mut planner = Planner::new();
        for (i, entry) in entries.iter().enumerate() {
            planner.push(&entry.record());
            let prefix = &entries[..=i];
            for &(max_input_tokens, ratio, family) in budgets.iter().chain([&(1_000_000, 1.0, ProviderKind::OpenAi)]) {
                let estimator = TokenEstimator::new(family, ratio);
                let budget = Budget { max_input_tokens };
                prop_assert_eq!(
                    planner.plan(SYSTEM, &tools, budget, &estimator),
                    reference::plan(prefix, SYSTEM, &tools, budget, &estimator),
                    "after entry {}", entry.seq
                );
            }
            prop_assert_eq!(planner.transcript_messages(), reference::transcript_messages(prefix));
        }
    }

    /// Every query of `History` answers what the loop's rescan of the transcript answered.
    #[test]
    fn history_answers_what_the_rescans_answered(
        entries in transcript_strategy(),
        family in family_strategy(),
        asked in prop::collection::vec(any::<Index>(), 0..4),
    ) {
        let mut history = History::new();
        for (i, entry) in entries.iter().enumerate() {
            history.push(&entry.record());
            let prefix = &entries[..=i];
            prop_assert_eq!(history.newest_large_group(), batch_newest_large_group(prefix));
            for model in MODELS {
                let estimator = batch_estimator(prefix, model, family);
                prop_assert_eq!(history.estimator(model, family), estimator);
                prop_assert_eq!(history.rejected_at(model, &estimator), batch_rejected_at(prefix, model, &estimator));
            }
            // Ids of earlier calls, an empty one, a fresh one twice.
            let used = batch_used_ids(prefix);
            let mut known: Vec<&str> = used.iter().copied().collect();
            known.sort_unstable();
            let mut calls: Vec<ToolCall> = asked
                .iter()
                .filter(|_| !known.is_empty())
                .map(|pick| known[pick.index(known.len())].to_string())
                .chain(["".to_string(), "fresh".to_string(), "fresh".to_string()])
                .map(|id| ToolCall { id, name: "pen_read".into(), arguments: "{}".into() })
                .collect();
            let before: Vec<String> = calls.iter().map(|c| c.id.clone()).collect();
            let replaced = history.make_call_ids_unique(&mut calls);
            let mut seen = HashSet::new();
            let expected: Vec<bool> = before
                .iter()
                .map(|id| id.is_empty() || used.contains(id.as_str()) || !seen.insert(id.clone()))
                .collect();
            let changed: Vec<bool> = before.iter().zip(&calls).map(|(b, c)| *b != c.id).collect();
            prop_assert_eq!(&changed, &expected);
            prop_assert_eq!(replaced, expected.iter().filter(|c| **c).count());
            // The last report is not new; any other cut is.
            if let Some(last) = history.last_trim() {
                prop_assert!(!history.is_new_trim(last));
                prop_assert!(!batch_is_new_trim(prefix, last));
            }
            let other = TrimReport {
                excerpted: vec!["call_0".into()],
                dropped_exchanges: vec![(1, 2)],
                ..TrimReport::default()
            };
            prop_assert_eq!(history.is_new_trim(&other), batch_is_new_trim(prefix, &other));
        }
    }
}

/// A late answer, a shrink after the result and an exchange dropped whole, pushed one by one:
/// the planner's answer equals the batch's at every step (a fixed case of the law).
#[test]
fn a_shrink_after_its_result_changes_the_earlier_group() {
    let mut entries = transcript(&[
        Op::Prompt(10),
        Op::Calls {
            count: 2,
            repeat: None,
            model: 0,
            usage: None,
            results: vec![(5_000, 0)],
        },
        Op::Prompt(20),
        Op::Calls {
            count: 1,
            repeat: None,
            model: 0,
            usage: None,
            results: vec![(4_000, 0)],
        },
        // The late answer to call_1.
        Op::NextResult {
            size: 3_000,
            outcome: 3,
        },
    ]);
    entries.push(Entry {
        seq: entries.len() as u64 + 1,
        kind: EntryKind::Event,
        turn_id: None,
        payload: json!({"type": "results_shrunk", "call_ids": ["call_0", "call_2"]}),
        created_at: 0,
    });
    let mut planner = Planner::new();
    for entry in &entries {
        planner.push(&entry.record());
    }
    let estimator = TokenEstimator::new(ProviderKind::Anthropic, 1.3);
    for max_input_tokens in [200, 900, 1_500, 2_500, 100_000] {
        let budget = Budget { max_input_tokens };
        assert_eq!(
            planner.plan(SYSTEM, &tools(), budget, &estimator),
            reference::plan(&entries, SYSTEM, &tools(), budget, &estimator),
            "{max_input_tokens}"
        );
    }
    let messages = planner.transcript_messages().expect("consistent");
    let Message::ToolResult { content, .. } = &messages[2] else {
        panic!("{:?}", messages[2]);
    };
    assert!(
        content.contains("the full result was 5000 bytes"),
        "{content}"
    );
}

/// A ratio outside what `TokenEstimator::new` allows (built by hand) takes the one-by-one sum of
/// `tokens_before`: the same plan as the batch's.
#[test]
fn a_hand_built_ratio_sums_message_by_message() {
    let entries = transcript(&[
        Op::Prompt(40),
        Op::Calls {
            count: 2,
            repeat: None,
            model: 0,
            usage: None,
            results: vec![(3_000, 0), (900, 1)],
        },
        Op::Answer,
        Op::Prompt(10),
        Op::Calls {
            count: 1,
            repeat: None,
            model: 0,
            usage: None,
            results: vec![(200, 0)],
        },
    ]);
    let mut planner = Planner::new();
    for entry in &entries {
        planner.push(&entry.record());
    }
    for ratio in [4.5, 1e-310] {
        let estimator = TokenEstimator {
            family: ProviderKind::Bedrock,
            ratio,
        };
        for max_input_tokens in [300, 3_000] {
            let budget = Budget { max_input_tokens };
            assert_eq!(
                planner.plan(SYSTEM, &tools(), budget, &estimator),
                reference::plan(&entries, SYSTEM, &tools(), budget, &estimator),
                "{ratio} {max_input_tokens}"
            );
        }
    }
}
