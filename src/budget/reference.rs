//! The planner of pen before the incremental one (main at a78ff67), kept as the oracle of the
//! planner's law: it reads the stored JSON payloads itself and groups the whole transcript on
//! every call, so whatever the incremental planner plans, this plans the same, byte for byte,
//! or the law's property test fails. Verbatim but for one change made to both (issue 25): the
//! oldest groups left out behind the note are the oldest groups, excerpted or too small to
//! excerpt, not only the excerpted ones.

use super::{
    Budget, BudgetError, POLICY_VERSION, Part, Plan, TokenEstimator, TrimReport, excerpt, invalid,
    shrink,
};
use crate::providers::{Message, ToolCall, ToolDefinition};
use crate::session::{Entry, EntryKind};
use rustc_hash::{FxHashMap, FxHashSet};
use serde_json::Value;
use std::borrow::Cow;
use std::collections::HashSet;

/// One assistant message with tool calls, each with its result. Borrowed from the entries:
/// most of a long transcript is dropped or excerpted, so only what is sent is copied.
#[derive(Debug, Clone)]
struct Group<'a> {
    text: &'a str,
    calls: Vec<Answered<'a>>,
}

/// A tool call as its entry holds it.
#[derive(Debug, Clone, Copy)]
struct CallRef<'a> {
    id: &'a str,
    name: &'a str,
    arguments: &'a str,
}

impl CallRef<'_> {
    fn to_call(self) -> ToolCall {
        ToolCall {
            id: self.id.to_string(),
            name: self.name.to_string(),
            arguments: self.arguments.to_string(),
        }
    }
}

/// The calls of an assistant entry; none when any is malformed (as a failed deserialization
/// of the whole list would give), so its results are refused as results without a call.
fn calls_of(tool_calls: Option<&Value>) -> Vec<CallRef<'_>> {
    let Some(Value::Array(items)) = tool_calls else {
        return Vec::new();
    };
    let calls: Option<Vec<CallRef<'_>>> = items
        .iter()
        .map(|item| {
            // One pass over the fields: a keyed lookup hashes each key (planning is hot).
            let (mut id, mut name, mut arguments) = (None, None, None);
            for (key, value) in item.as_object()? {
                match key.as_str() {
                    "id" => id = value.as_str(),
                    "name" => name = value.as_str(),
                    "arguments" => arguments = value.as_str(),
                    _ => {}
                }
            }
            Some(CallRef {
                id: id?,
                name: name?,
                arguments: arguments?,
            })
        })
        .collect();
    calls.unwrap_or_default()
}

/// An assistant entry's text and calls, read in one pass over its fields.
fn assistant_fields(payload: &Value) -> (&str, Vec<CallRef<'_>>) {
    let (mut text, mut tool_calls) = ("", None);
    if let Value::Object(fields) = payload {
        for (key, value) in fields {
            match key.as_str() {
                "text" => text = value.as_str().unwrap_or_default(),
                "tool_calls" => tool_calls = Some(value),
                _ => {}
            }
        }
    }
    (text, calls_of(tool_calls))
}

#[derive(Debug, Clone)]
struct Answered<'a> {
    call: CallRef<'a>,
    /// Borrowed from the entry until the plan keeps it: most of a long transcript is dropped.
    content: Cow<'a, str>,
    is_error: bool,
    /// The loop's outcome word (`done`, `denied`, `stale_authority`…), when recorded.
    status: Option<&'a str>,
}

#[derive(Debug, Clone)]
enum Unit<'a> {
    /// A user prompt or an assistant message without tool calls.
    Plain(Message),
    Group(Group<'a>),
    /// A group replaced by its quoted excerpt: plain assistant text.
    Excerpt(String),
}

/// A user prompt and everything after it until the next one. The first exchange of a
/// transcript that does not start with a prompt has none.
#[derive(Debug, Clone)]
struct Exchange<'a> {
    first_seq: u64,
    last_seq: u64,
    units: Vec<Unit<'a>>,
}

fn shrunk_ids(entries: &[Entry]) -> FxHashSet<String> {
    entries
        .iter()
        .filter(|e| e.kind == EntryKind::Event && e.payload["type"] == "results_shrunk")
        .flat_map(|e| {
            e.payload["call_ids"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|id| id.as_str().map(str::to_string))
        .collect()
}

/// A result entry's call id, content, error flag and status, read in one pass over its fields.
fn result_fields(payload: &Value) -> (&str, &str, bool, Option<&str>) {
    let (mut call_id, mut content, mut is_error, mut status) = ("", "", false, None);
    if let Value::Object(fields) = payload {
        for (name, value) in fields {
            match name.as_str() {
                "call_id" => call_id = value.as_str().unwrap_or_default(),
                "content" => content = value.as_str().unwrap_or_default(),
                "is_error" => is_error = value.as_bool().unwrap_or(false),
                "status" => status = value.as_str(),
                _ => {}
            }
        }
    }
    (call_id, content, is_error, status)
}

fn text_of(entry: &Entry) -> &str {
    entry.payload["text"].as_str().unwrap_or_default()
}

/// Checks the transcript and groups it into exchanges, with `results_shrunk` cuts applied.
// Written before let-chains (Rust 1.88); collapsing it is left to this module's owners.
#[allow(clippy::collapsible_if)]
fn exchanges(entries: &[Entry]) -> Result<Vec<Exchange<'_>>, BudgetError> {
    let shrunk = shrunk_ids(entries);
    let mut exchanges: Vec<Exchange> = Vec::new();
    let mut seen: FxHashSet<&str> = FxHashSet::default();
    seen.reserve(entries.len() / 2);
    // The group whose results are still arriving, its entry seq, and how many it has.
    let mut open: Option<(Group, u64, usize)> = None;
    // Calls of groups that ended without all their results, by call id: where their slot is
    // (exchange, unit, call) and which entries to name if no late answer ever comes.
    let mut late: FxHashMap<&str, LateSlot> = FxHashMap::default();
    for entry in entries {
        if entry.kind == EntryKind::Event || entry.kind == EntryKind::ToolCall {
            if let Some(last) = exchanges.last_mut() {
                last.last_seq = entry.seq;
            }
            continue;
        }
        if entry.kind != EntryKind::ToolResult {
            if let Some((group, seq, answered)) = open.take() {
                let missing: Vec<&str> = group.calls[answered..]
                    .iter()
                    .map(|slot| slot.call.id)
                    .collect();
                push_unit(&mut exchanges, Unit::Group(group), entry.seq);
                // The group waits for late answers (appended by crash recovery) to its calls.
                let exchange = exchanges.len() - 1;
                let unit = exchanges[exchange].units.len() - 1;
                for (offset, call_id) in missing.into_iter().enumerate() {
                    late.insert(
                        call_id,
                        LateSlot {
                            exchange,
                            unit,
                            call: answered + offset,
                            message_seq: seq,
                            followed_by: entry.seq,
                        },
                    );
                }
            }
        }
        match entry.kind {
            EntryKind::UserPrompt => exchanges.push(Exchange {
                first_seq: entry.seq,
                last_seq: entry.seq,
                units: vec![Unit::Plain(Message::User {
                    text: text_of(entry).to_string(),
                })],
            }),
            EntryKind::AssistantMessage => {
                let (text, tool_calls) = assistant_fields(&entry.payload);
                for call in &tool_calls {
                    if !seen.insert(call.id) {
                        return Err(invalid(
                            entry.seq,
                            format!("repeats tool call id {}", call.id),
                        ));
                    }
                }
                if tool_calls.is_empty() {
                    let message = Message::Assistant {
                        text: text.to_string(),
                        tool_calls: Vec::new(),
                        reasoning: Vec::new(),
                    };
                    push_unit(&mut exchanges, Unit::Plain(message), entry.seq);
                } else {
                    let calls = tool_calls
                        .into_iter()
                        .map(|call| Answered {
                            call,
                            content: Cow::Borrowed(""),
                            is_error: false,
                            status: None,
                        })
                        .collect();
                    open = Some((Group { text, calls }, entry.seq, 0));
                }
            }
            EntryKind::ToolResult => {
                let (call_id, content, is_error, status) = result_fields(&entry.payload);
                let slot = open
                    .as_mut()
                    .and_then(|(group, _, answered)| {
                        group.calls.get_mut(*answered).map(|slot| (slot, answered))
                    })
                    .filter(|(slot, _)| slot.call.id == call_id);
                let slot = match slot {
                    Some((slot, answered)) => {
                        *answered += 1;
                        slot
                    }
                    None => {
                        let found = late.remove(call_id).and_then(|at| {
                            match exchanges.get_mut(at.exchange)?.units.get_mut(at.unit)? {
                                Unit::Group(group) => group.calls.get_mut(at.call),
                                _ => None,
                            }
                        });
                        let Some(slot) = found else {
                            return Err(invalid(
                                entry.seq,
                                format!(
                                    "is a result for tool call {call_id}, which is not the next call waiting for one"
                                ),
                            ));
                        };
                        slot
                    }
                };
                slot.content = if !shrunk.is_empty() && shrunk.contains(call_id) {
                    Cow::Owned(shrink(content))
                } else {
                    Cow::Borrowed(content)
                };
                slot.is_error = is_error;
                slot.status = status;
                if let Some(last) = exchanges.last_mut() {
                    last.last_seq = entry.seq;
                }
            }
            EntryKind::ToolCall | EntryKind::Event => {}
        }
    }
    if let Some((group, seq, answered)) = open {
        if answered < group.calls.len() {
            return Err(invalid(
                seq,
                format!(
                    "makes tool call {}, which has no result",
                    group.calls[answered].call.id
                ),
            ));
        }
        push_unit(&mut exchanges, Unit::Group(group), seq);
    }
    // The first call, in transcript order, that never got its late answer.
    if let Some((call_id, at)) = late.iter().min_by_key(|(_, at)| (at.message_seq, at.call)) {
        return Err(invalid(
            at.followed_by,
            format!(
                "follows tool call {call_id} (entry {}) that has no result",
                at.message_seq
            ),
        ));
    }
    Ok(exchanges)
}

/// Where the result of a call goes that its group ended without: a late answer (appended
/// after the group by crash recovery) fills it.
struct LateSlot {
    exchange: usize,
    unit: usize,
    call: usize,
    /// The assistant entry that made the call.
    message_seq: u64,
    /// The entry that ended the group without the call's result.
    followed_by: u64,
}

/// Adds a unit to the current exchange, opening a prompt-less one at the transcript's start.
fn push_unit<'a>(exchanges: &mut Vec<Exchange<'a>>, unit: Unit<'a>, seq: u64) {
    match exchanges.last_mut() {
        Some(last) => {
            last.units.push(unit);
            last.last_seq = last.last_seq.max(seq);
        }
        None => exchanges.push(Exchange {
            first_seq: seq,
            last_seq: seq,
            units: vec![unit],
        }),
    }
}

fn group_messages(group: Group<'_>, out: &mut Vec<Message>) {
    let mut results = Vec::with_capacity(group.calls.len());
    let mut tool_calls = Vec::with_capacity(group.calls.len());
    for answered in group.calls {
        results.push(Message::ToolResult {
            call_id: answered.call.id.to_string(),
            content: answered.content.into_owned(),
            is_error: answered.is_error,
        });
        tool_calls.push(answered.call.to_call());
    }
    out.push(Message::Assistant {
        text: group.text.to_string(),
        tool_calls,
        reasoning: Vec::new(),
    });
    out.extend(results);
}

fn unit_messages(unit: Unit<'_>, out: &mut Vec<Message>) {
    match unit {
        Unit::Plain(message) => out.push(message),
        Unit::Group(group) => group_messages(group, out),
        Unit::Excerpt(text) => out.push(Message::Assistant {
            text,
            tool_calls: Vec::new(),
            reasoning: Vec::new(),
        }),
    }
}

/// The provider messages of a transcript, untouched by the budget (only `results_shrunk` cuts
/// applied). Fails, naming the entry, on a history no provider accepts.
pub(super) fn transcript_messages(entries: &[Entry]) -> Result<Vec<Message>, BudgetError> {
    let mut messages = Vec::new();
    for exchange in exchanges(entries)? {
        for unit in exchange.units {
            unit_messages(unit, &mut messages);
        }
    }
    Ok(messages)
}

fn unit_tokens(unit: &Unit<'_>, estimator: &TokenEstimator) -> u64 {
    match unit {
        Unit::Plain(message) => estimator.message(message),
        Unit::Group(group) => {
            estimator.assistant(
                group.text,
                group
                    .calls
                    .iter()
                    .map(|a| (a.call.id, a.call.name, a.call.arguments)),
            ) + group
                .calls
                .iter()
                .map(|a| estimator.tool_result(a.call.id, &a.content))
                .sum::<u64>()
        }
        Unit::Excerpt(text) => estimator.assistant(text, std::iter::empty()),
    }
}

/// Plans the messages of one request under `budget` (see the module doc for the policy).
pub(super) fn plan(
    entries: &[Entry],
    system: &str,
    tools: &[ToolDefinition],
    budget: Budget,
    estimator: &TokenEstimator,
) -> Result<Plan, BudgetError> {
    let mut older = exchanges(entries)?;
    let limit = budget.max_input_tokens;
    let system_tokens = estimator.text(system);
    if system_tokens > limit {
        return Err(BudgetError::TooLarge {
            part: Part::SystemPrompt,
            tokens: system_tokens,
            budget: limit,
        });
    }
    let fixed = system_tokens + estimator.tools(tools);
    if fixed > limit {
        return Err(BudgetError::TooLarge {
            part: Part::ToolSchemas,
            tokens: fixed,
            budget: limit,
        });
    }
    let available = limit - fixed;
    let costs: Vec<Vec<u64>> = older
        .iter()
        .map(|x| x.units.iter().map(|u| unit_tokens(u, estimator)).collect())
        .collect();
    let totals: Vec<u64> = costs.iter().map(|c| c.iter().sum()).collect();
    let tokens_before = fixed + totals.iter().sum::<u64>();

    let Some(newest) = older.pop() else {
        return Ok(Plan {
            messages: Vec::new(),
            estimated_tokens: fixed,
            uncalibrated_tokens: uncalibrated_fixed(estimator, system, tools),
            report: None,
            compaction: None,
        });
    };
    // (a) Excerpt the oldest groups of the newest exchange, never its latest two, until it fits.
    let newest_costs = &costs[costs.len() - 1];
    let mut newest_units: Vec<Unit<'_>> = newest.units;
    let mut newest_total = totals[totals.len() - 1];
    let group_positions: Vec<usize> = newest_units
        .iter()
        .enumerate()
        .filter(|(_, u)| matches!(u, Unit::Group(_)))
        .map(|(i, _)| i)
        .collect();
    let protected = &group_positions[group_positions.len().saturating_sub(2)..];
    let excerptable = &group_positions[..group_positions.len() - protected.len()];
    // Each excerptable group's call ids, and its excerpt's tokens when it is replaced by one.
    let mut groups: Vec<(Vec<String>, Option<u64>)> = Vec::new();
    for &position in excerptable {
        let Unit::Group(group) = &newest_units[position] else {
            continue;
        };
        let ids: Vec<String> = group.calls.iter().map(|a| a.call.id.to_string()).collect();
        if newest_total <= available {
            groups.push((ids, None));
            continue;
        }
        let replacement = Unit::Excerpt(excerpt::group_text(
            super::POLICY_VERSION,
            group.text,
            &group.calls,
            |out, a| {
                excerpt::push_call_head(out, a.call.name, a.call.id, a.call.arguments);
                excerpt::push_call_result(out, &a.content, a.is_error, a.status);
            },
        ));
        let replacement_tokens = unit_tokens(&replacement, estimator);
        // A group already smaller than its excerpt is kept whole: replacing it saves nothing.
        if replacement_tokens >= newest_costs[position] {
            groups.push((ids, None));
            continue;
        }
        newest_total = newest_total - newest_costs[position] + replacement_tokens;
        groups.push((ids, Some(replacement_tokens)));
        newest_units[position] = replacement;
    }
    // Still over: the oldest groups are left out too, excerpted or (too small to excerpt)
    // whole, behind a one-line note, rather than failing a turn whose latest groups and prompt
    // fit.
    let mut omitted_count = 0;
    if newest_total > available && !excerptable.is_empty() {
        let note = Unit::Excerpt(excerpt::omitted_note(super::POLICY_VERSION).to_string());
        let note_tokens = unit_tokens(&note, estimator);
        let mut total = newest_total + note_tokens;
        let mut count = 0;
        for (k, (_, replacement)) in groups.iter().enumerate() {
            if total <= available {
                break;
            }
            total -= replacement.unwrap_or(newest_costs[excerptable[k]]);
            count += 1;
        }
        if total <= available {
            newest_total = total;
            omitted_count = count;
            let positions: HashSet<usize> = excerptable[..count].iter().copied().collect();
            let first = excerptable[0];
            newest_units = newest_units
                .into_iter()
                .enumerate()
                .filter_map(|(i, unit)| match i {
                    _ if i == first => Some(note.clone()),
                    _ if positions.contains(&i) => None,
                    _ => Some(unit),
                })
                .collect();
        }
    }
    let mut excerpted: Vec<String> = Vec::new();
    let mut omitted: Vec<String> = Vec::new();
    for (k, (ids, replacement)) in groups.iter().enumerate() {
        if k < omitted_count {
            omitted.extend(ids.iter().cloned());
        }
        if k < omitted_count || replacement.is_some() {
            excerpted.extend(ids.iter().cloned());
        }
    }
    if newest_total > available {
        let groups_tokens: u64 = protected.iter().map(|&p| newest_costs[p]).sum();
        let part = if groups_tokens > available {
            Part::NewestGroups
        } else {
            Part::Prompt
        };
        let tokens = if part == Part::NewestGroups {
            fixed + groups_tokens
        } else {
            fixed + newest_total
        };
        return Err(BudgetError::TooLarge {
            part,
            tokens,
            budget: limit,
        });
    }
    // (b) Keep the newest older exchanges that fit; the rest, oldest first, are left out whole.
    let mut room = available - newest_total;
    let mut keep_from = older.len();
    while keep_from > 0 && totals[keep_from - 1] <= room {
        room -= totals[keep_from - 1];
        keep_from -= 1;
    }
    let dropped_spans: Vec<(u64, u64)> = older[..keep_from]
        .iter()
        .map(|x| (x.first_seq, x.last_seq))
        .collect();
    let dropped_exchanges = super::coalesce(&dropped_spans);

    let mut messages = Vec::new();
    for exchange in older.drain(keep_from..) {
        for unit in exchange.units {
            unit_messages(unit, &mut messages);
        }
    }
    merge_excerpts(newest_units, &mut messages);
    // Counted again on the final messages: joining excerpts saves a little per-message overhead.
    // One scan of each message gives both the calibrated and the uncalibrated estimate.
    let uncalibrated = TokenEstimator::new(estimator.family, 1.0);
    let mut tokens_after = fixed;
    let mut uncalibrated_tokens = uncalibrated_fixed(estimator, system, tools);
    for message in &messages {
        let quarters = estimator.quarters(message);
        tokens_after += estimator.scale(quarters);
        uncalibrated_tokens += uncalibrated.scale(quarters);
    }
    let report = (!excerpted.is_empty() || !dropped_exchanges.is_empty()).then_some(TrimReport {
        policy_version: POLICY_VERSION,
        excerpted,
        omitted,
        dropped_exchanges,
        dropped_count: keep_from as u64,
        tokens_before,
        tokens_after,
        budget: limit,
    });
    Ok(Plan {
        messages,
        estimated_tokens: tokens_after,
        uncalibrated_tokens,
        report,
        compaction: None,
    })
}

/// The system prompt and tool schemas at a ratio of 1.
fn uncalibrated_fixed(estimator: &TokenEstimator, system: &str, tools: &[ToolDefinition]) -> u64 {
    let uncalibrated = TokenEstimator::new(estimator.family, 1.0);
    uncalibrated.text(system) + uncalibrated.tools(tools)
}

/// Appends the newest exchange's messages. Consecutive excerpts are joined into one assistant
/// message, so a run of compacted groups reads as one quoted block rather than a string of
/// assistant turns.
fn merge_excerpts(units: Vec<Unit<'_>>, out: &mut Vec<Message>) {
    let mut previous_was_excerpt = false;
    for unit in units {
        let is_excerpt = matches!(unit, Unit::Excerpt(_));
        if let (Unit::Excerpt(more), true, Some(Message::Assistant { text, .. })) =
            (&unit, previous_was_excerpt, out.last_mut())
        {
            text.push_str("\n\n");
            text.push_str(more);
            continue;
        }
        unit_messages(unit, out);
        previous_was_excerpt = is_excerpt;
    }
}
