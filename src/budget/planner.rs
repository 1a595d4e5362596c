//! The incremental planner: the session's records grouped into exchanges as they are committed,
//! with the history checks, the `results_shrunk` cuts and every message's size kept, so that a
//! request is planned from what it sends and not from the whole session.
//!
//! [`Planner::push`] costs O(the record). [`Planner::plan`] costs O(what is sent + the units of
//! the newest exchange + the number of exchanges), plus one pass of integer and float work over
//! a flat array of message sizes (8 bytes a message) for the report's `tokens_before`: the
//! estimate rounds every message up at the request's calibration ratio, which changes with
//! every answer, so that sum cannot be kept as the records arrive.

use super::estimate::{SUM_TOTAL_LIMIT, quarter_tokens};
use super::{
    Budget, BudgetError, POLICY_VERSION, Part, Plan, ProviderKind, TokenEstimator, TrimReport,
    excerpt, invalid, shrink,
};
use crate::providers::{Message, ReasoningBlock, ToolCall, ToolDefinition};
use crate::transcript::{AssistantMessage, CallOutcome, Event, Item, Record, ToolResult};
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::BTreeMap;

mod v4;
pub use v4::POLICY_VERSION_4;

/// The plan of the records pushed so far, kept up to date one record at a time.
///
/// The planner reads only what it is pushed: feed it every committed record of the session,
/// in order, once. Planning does not change it, so any number of plans (at any budget or
/// ratio) can be made between two pushes.
#[derive(Debug, Clone, Default)]
pub struct Planner {
    exchanges: Vec<Exchange>,
    /// Each exchange's `(first_seq, last_seq)`, apart from the rest of it: the report lists
    /// those of every dropped exchange.
    spans: Vec<(u64, u64)>,
    /// The unframed size of every message of every exchange (in no particular order).
    sizes: Vec<Size>,
    /// The same sizes framed for each of `ProviderKind::FRAMINGS`: what `tokens_before`
    /// sums, in one vectorized pass (see `TokenEstimator::scale_sum`). A size over `u32::MAX`
    /// is 0 here and counted in `oversized`.
    framed: [Vec<u32>; 2],
    /// The total of each `framed` column, and how many sizes are over what that pass takes:
    /// while any is, the sum is taken one size at a time.
    framed_totals: [u64; 2],
    oversized: usize,
    /// The group whose results are still arriving.
    open: Option<Open>,
    /// Every call id an answer made, and where its slot is.
    calls: FxHashMap<String, SlotAt>,
    /// Calls of groups that ended without their result: a late answer fills the slot.
    late: FxHashMap<String, LateSlot>,
    /// The same calls in transcript order, for the error when one never gets its answer.
    unanswered: BTreeMap<(u64, usize), (String, u64)>,
    /// Every call id a `results_shrunk` event named.
    shrunk: FxHashSet<String>,
    /// The first inconsistency: the history is refused from then on, whatever comes after.
    error: Option<BudgetError>,
    /// The session's last recorded policy-4 compaction (policy 3 does not read it).
    frontier: v4::Frontier,
    /// Every plan a call set (a `plan` entry), in transcript order: where its call's group is,
    /// and the text that carries it past a compaction ([`excerpt::carried_plan`]).
    plans: Vec<(v4::At, String)>,
}

/// A message's size in quarter tokens before framing and ratio (see `TokenEstimator::framed`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Size {
    raw: u64,
    tool_blocks: u64,
}

/// Where a call's slot is: exchange, unit (a group), call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SlotAt {
    exchange: usize,
    unit: usize,
    call: usize,
}

#[derive(Debug, Clone, Copy)]
struct Open {
    at: SlotAt,
    /// The assistant record that made the calls.
    seq: u64,
    answered: usize,
}

#[derive(Debug, Clone, Copy)]
struct LateSlot {
    at: SlotAt,
    /// The assistant record that made the call.
    message_seq: u64,
}

/// A user prompt and everything after it until the next one. The first exchange of a
/// transcript that does not start with a prompt has none.
#[derive(Debug, Clone)]
struct Exchange {
    /// Opened by a group at the transcript's start, before any exchange: its seqs are those of
    /// the record that ends the group (as the planner has always numbered it), set then.
    /// (Its seqs are in [`Planner::spans`].)
    provisional: bool,
    units: Vec<Unit>,
    /// The sum of its messages' sizes, and how many messages: a lower bound of its tokens at
    /// any ratio, so an exchange that cannot fit is dropped without counting it message by
    /// message.
    raw: u64,
    tool_blocks: u64,
    messages: u64,
}

impl Exchange {
    fn new(provisional: bool) -> Exchange {
        Exchange {
            provisional,
            units: Vec::new(),
            raw: 0,
            tool_blocks: 0,
            messages: 0,
        }
    }
}

#[derive(Debug, Clone)]
enum Unit {
    Prompt {
        text: String,
        size: usize,
    },
    /// An assistant message without tool calls.
    Answer {
        text: String,
        /// Kept for the provider seam (sent back on the following requests of the turn).
        reasoning: Vec<ReasoningBlock>,
        size: usize,
    },
    Group(Group),
}

/// One assistant message with tool calls, each with its result.
#[derive(Debug, Clone)]
struct Group {
    text: String,
    /// Kept for the provider seam (sent back on the following requests of the turn).
    reasoning: Vec<ReasoningBlock>,
    calls: Vec<Slot>,
    /// The assistant message's size.
    size: usize,
}

/// A call and, once it arrived, its result.
#[derive(Debug, Clone)]
struct Slot {
    call: ToolCall,
    /// As sent: cut when a `results_shrunk` event names the call.
    content: String,
    is_error: bool,
    outcome: Option<CallOutcome>,
    /// The result message's size, once answered.
    size: Option<usize>,
    /// The sizes of the call's excerpt pieces: its head (name, id, arguments) and its result.
    head_quarters: u64,
    result_quarters: u64,
}

impl Slot {
    fn push_result_excerpt(&self, out: &mut Vec<u8>) {
        excerpt::push_call_result(
            out,
            &self.content,
            self.is_error,
            self.outcome.map(CallOutcome::as_str),
        );
    }

    fn result_size(&self) -> Size {
        Size {
            raw: quarter_tokens(self.call.id.as_bytes()) + quarter_tokens(self.content.as_bytes()),
            tool_blocks: 1,
        }
    }
}

impl Group {
    fn excerpt_quarters(&self) -> u64 {
        excerpt::group_quarters(
            &self.text,
            self.calls
                .iter()
                .map(|slot| slot.head_quarters + slot.result_quarters),
        )
    }

    fn excerpt_text(&self, policy_version: u32) -> String {
        excerpt::group_text(policy_version, &self.text, &self.calls, |out, slot| {
            excerpt::push_call_head(out, &slot.call.name, &slot.call.id, &slot.call.arguments);
            slot.push_result_excerpt(out);
        })
    }
}

/// One message of the request being built, with its size.
struct Outbound {
    messages: Vec<Message>,
    /// Each message's framed size in quarter tokens, what the estimate of the request sums.
    quarters: Vec<u64>,
}

impl Outbound {
    fn push(&mut self, message: Message, quarters: u64) {
        self.messages.push(message);
        self.quarters.push(quarters);
    }

    /// Adds a quoted excerpt (or an omission note) as assistant text: joined to the quote
    /// just before it when `join`, as its own message otherwise. Both policies render runs
    /// of quotes this way, so a run is one message.
    fn push_quote(&mut self, text: String, quarters: u64, join: bool, estimator: &TokenEstimator) {
        if join
            && let (Some(Message::Assistant { text: joined, .. }), Some(joined_quarters)) =
                (self.messages.last_mut(), self.quarters.last_mut())
        {
            joined.push_str("\n\n");
            joined.push_str(&text);
            *joined_quarters += 2 + quarters;
            return;
        }
        self.push(
            Message::Assistant {
                text,
                tool_calls: Vec::new(),
                reasoning: Vec::new(),
            },
            estimator.framed(quarters, 0),
        );
    }
}

impl Planner {
    pub fn new() -> Planner {
        Planner::default()
    }

    /// Takes one newly committed record: O(the record).
    pub fn push(&mut self, record: &Record) {
        if let Item::Event(Event::ResultsShrunk { call_ids, .. }) = &record.item {
            for id in call_ids {
                if self.shrunk.insert(id.clone()) && self.error.is_none() {
                    self.shrink_answered(id);
                }
            }
        }
        if self.error.is_some() {
            return;
        }
        if let Item::Event(Event::ContextCompacted(compaction)) = &record.item {
            self.take_compaction(compaction);
        }
        if let Item::Event(Event::Plan { call_id, steps }) = &record.item
            && let Some(at) = self.calls.get(call_id)
        {
            self.plans
                .push(((at.exchange, at.unit), excerpt::carried_plan(steps)));
        }
        if let Err(err) = self.apply(record) {
            self.error = Some(err);
        }
    }

    /// Whether a `results_shrunk` event named the call.
    pub fn is_shrunk(&self, call_id: &str) -> bool {
        self.shrunk.contains(call_id)
    }

    fn apply(&mut self, record: &Record) -> Result<(), BudgetError> {
        let seq = record.seq;
        match &record.item {
            Item::Event(_) | Item::ToolCall(_) => self.extend_last(seq),
            Item::ToolResult(result) => self.answer(seq, result)?,
            Item::UserPrompt { text } => {
                self.close_open(seq);
                let exchange = self.new_exchange(seq, false);
                let size = self.add_size(
                    exchange,
                    Size {
                        raw: quarter_tokens(text.as_bytes()),
                        tool_blocks: 0,
                    },
                );
                self.exchanges[exchange].units.push(Unit::Prompt {
                    text: text.clone(),
                    size,
                });
            }
            Item::AssistantMessage(message) => {
                self.close_open(seq);
                self.answered_by(seq, message)?;
            }
        }
        Ok(())
    }

    fn new_exchange(&mut self, seq: u64, provisional: bool) -> usize {
        self.exchanges.push(Exchange::new(provisional));
        self.spans.push((seq, seq));
        self.exchanges.len() - 1
    }

    /// Any record extends the current exchange to itself.
    fn extend_last(&mut self, seq: u64) {
        // (A provisional exchange's seqs are set anew when its group ends.)
        if let Some(last) = self.spans.last_mut() {
            last.1 = seq;
        }
    }

    /// The framed sizes of `size`, one per framing, and whether the vectorized sum takes it.
    fn framings(size: Size) -> ([u64; 2], bool) {
        let framed = ProviderKind::FRAMINGS
            .map(|family| TokenEstimator::new(family, 1.0).framed(size.raw, size.tool_blocks));
        (framed, framed.iter().all(|&f| u32::try_from(f).is_ok()))
    }

    fn add_size(&mut self, exchange: usize, size: Size) -> usize {
        let totals = &mut self.exchanges[exchange];
        totals.raw += size.raw;
        totals.tool_blocks += size.tool_blocks;
        totals.messages += 1;
        let (framed, summable) = Self::framings(size);
        for (column, value) in framed.into_iter().enumerate() {
            self.framed[column].push(u32::try_from(value).unwrap_or(0));
            self.framed_totals[column] = self.framed_totals[column].saturating_add(value);
        }
        self.oversized += usize::from(!summable);
        self.sizes.push(size);
        self.sizes.len() - 1
    }

    /// Replaces a message's size, keeping its exchange's totals.
    fn resize(&mut self, exchange: usize, index: usize, size: Size) {
        let old = std::mem::replace(&mut self.sizes[index], size);
        let totals = &mut self.exchanges[exchange];
        totals.raw = totals.raw - old.raw + size.raw;
        let (old_framed, old_summable) = Self::framings(old);
        let (framed, summable) = Self::framings(size);
        for column in 0..framed.len() {
            self.framed[column][index] = u32::try_from(framed[column]).unwrap_or(0);
            self.framed_totals[column] = self.framed_totals[column]
                .saturating_sub(old_framed[column])
                .saturating_add(framed[column]);
        }
        self.oversized = self.oversized - usize::from(!old_summable) + usize::from(!summable);
    }

    /// The sum of every message's tokens at the estimator's ratio.
    fn all_tokens(&self, estimator: &TokenEstimator) -> u64 {
        let column = estimator.family.framing();
        let summable = self.oversized == 0 && self.framed_totals[column] < SUM_TOTAL_LIMIT;
        summable
            .then(|| estimator.scale_sum(&self.framed[column]))
            .flatten()
            .unwrap_or_else(|| {
                (0..self.sizes.len())
                    .map(|index| self.tokens(index, estimator))
                    .sum()
            })
    }

    /// An assistant record: a plain answer, or a group whose results follow.
    fn answered_by(&mut self, seq: u64, message: &AssistantMessage) -> Result<(), BudgetError> {
        if message.tool_calls.is_empty() {
            let exchange = match self.spans.last_mut() {
                Some(last) => {
                    last.1 = last.1.max(seq);
                    self.exchanges.len() - 1
                }
                None => self.new_exchange(seq, false),
            };
            let size = self.add_size(
                exchange,
                Size {
                    raw: quarter_tokens(message.text.as_bytes()),
                    tool_blocks: 0,
                },
            );
            self.exchanges[exchange].units.push(Unit::Answer {
                text: message.text.clone(),
                reasoning: message.reasoning.clone(),
                size,
            });
            return Ok(());
        }
        if self.exchanges.is_empty() {
            self.new_exchange(seq, true);
        }
        let exchange = self.exchanges.len() - 1;
        let unit = self.exchanges[exchange].units.len();
        for (call, tool_call) in message.tool_calls.iter().enumerate() {
            let at = SlotAt {
                exchange,
                unit,
                call,
            };
            if self.calls.insert(tool_call.id.clone(), at).is_some() {
                return Err(invalid(
                    seq,
                    format!("repeats tool call id {}", tool_call.id),
                ));
            }
        }
        let mut raw = quarter_tokens(message.text.as_bytes());
        let calls = message
            .tool_calls
            .iter()
            .map(|call| {
                raw += quarter_tokens(call.id.as_bytes())
                    + quarter_tokens(call.name.as_bytes())
                    + quarter_tokens(call.arguments.as_bytes());
                Slot {
                    call: call.clone(),
                    content: String::new(),
                    is_error: false,
                    outcome: None,
                    size: None,
                    head_quarters: excerpt::piece_quarters(|out| {
                        excerpt::push_call_head(out, &call.name, &call.id, &call.arguments)
                    }),
                    result_quarters: 0,
                }
            })
            .collect();
        let size = self.add_size(
            exchange,
            Size {
                raw,
                tool_blocks: message.tool_calls.len() as u64,
            },
        );
        self.exchanges[exchange].units.push(Unit::Group(Group {
            text: message.text.clone(),
            reasoning: message.reasoning.clone(),
            calls,
            size,
        }));
        self.open = Some(Open {
            at: SlotAt {
                exchange,
                unit,
                call: 0,
            },
            seq,
            answered: 0,
        });
        Ok(())
    }

    fn group_mut(&mut self, at: SlotAt) -> Option<&mut Group> {
        match self
            .exchanges
            .get_mut(at.exchange)?
            .units
            .get_mut(at.unit)?
        {
            Unit::Group(group) => Some(group),
            _ => None,
        }
    }

    fn slot(&self, at: SlotAt) -> Option<&Slot> {
        match self.exchanges.get(at.exchange)?.units.get(at.unit)? {
            Unit::Group(group) => group.calls.get(at.call),
            _ => None,
        }
    }

    /// A record other than a result, a call or an event ends the open group; its unanswered
    /// calls wait for late answers (appended by crash recovery).
    fn close_open(&mut self, seq: u64) {
        let Some(open) = self.open.take() else {
            return;
        };
        let exchange = &mut self.exchanges[open.at.exchange];
        let span = &mut self.spans[open.at.exchange];
        if exchange.provisional {
            *span = (seq, seq);
            exchange.provisional = false;
        } else {
            span.1 = span.1.max(seq);
        }
        let Some(group) = self.group_mut(open.at) else {
            return;
        };
        let missing: Vec<String> = group.calls[open.answered..]
            .iter()
            .map(|slot| slot.call.id.clone())
            .collect();
        for (offset, call_id) in missing.into_iter().enumerate() {
            let at = SlotAt {
                call: open.answered + offset,
                ..open.at
            };
            self.unanswered
                .insert((open.seq, at.call), (call_id.clone(), seq));
            self.late.insert(
                call_id,
                LateSlot {
                    at,
                    message_seq: open.seq,
                },
            );
        }
    }

    /// A result: the next call of the open group, or a late answer.
    fn answer(&mut self, seq: u64, result: &ToolResult) -> Result<(), BudgetError> {
        let id = result.call_id.as_str();
        let next = self.open.and_then(|open| {
            let at = SlotAt {
                call: open.answered,
                ..open.at
            };
            self.slot(at).filter(|slot| slot.call.id == id).map(|_| at)
        });
        let at = match next {
            Some(at) => {
                if let Some(open) = &mut self.open {
                    open.answered += 1;
                }
                at
            }
            None => match self.late.remove(id) {
                Some(late) => {
                    self.unanswered.remove(&(late.message_seq, late.at.call));
                    late.at
                }
                None => {
                    return Err(invalid(
                        seq,
                        format!(
                            "is a result for tool call {id}, which is not the next call waiting for one"
                        ),
                    ));
                }
            },
        };
        let content = if self.shrunk.contains(id) {
            shrink(&result.content)
        } else {
            result.content.clone()
        };
        let Some(slot) = self.group_mut(at).and_then(|g| g.calls.get_mut(at.call)) else {
            return Ok(());
        };
        slot.content = content;
        slot.is_error = result.is_error;
        slot.outcome = result.outcome;
        slot.result_quarters = excerpt::piece_quarters(|out| slot.push_result_excerpt(out));
        let size = slot.result_size();
        let index = self.add_size(at.exchange, size);
        if let Some(slot) = self.group_mut(at).and_then(|g| g.calls.get_mut(at.call)) {
            slot.size = Some(index);
        }
        self.extend_last(seq);
        Ok(())
    }

    /// A `results_shrunk` event cuts a result already answered (later ones are cut as they
    /// arrive).
    fn shrink_answered(&mut self, call_id: &str) {
        let Some(&at) = self.calls.get(call_id) else {
            return;
        };
        let Some(slot) = self.group_mut(at).and_then(|g| g.calls.get_mut(at.call)) else {
            return;
        };
        let Some(index) = slot.size else {
            return;
        };
        slot.content = shrink(&slot.content);
        slot.result_quarters = excerpt::piece_quarters(|out| slot.push_result_excerpt(out));
        let size = slot.result_size();
        self.resize(at.exchange, index, size);
    }

    /// The refusal of an inconsistent history: the first inconsistency met, else a call still
    /// without its result.
    fn check(&self) -> Result<(), BudgetError> {
        if let Some(err) = &self.error {
            return Err(err.clone());
        }
        if let Some(open) = &self.open {
            let unanswered = SlotAt {
                call: open.answered,
                ..open.at
            };
            if let Some(slot) = self.slot(unanswered) {
                return Err(invalid(
                    open.seq,
                    format!("makes tool call {}, which has no result", slot.call.id),
                ));
            }
        }
        // The first call, in transcript order, that never got its late answer.
        if let Some((&(message_seq, _), (call_id, followed_by))) = self.unanswered.first_key_value()
        {
            return Err(invalid(
                *followed_by,
                format!("follows tool call {call_id} (entry {message_seq}) that has no result"),
            ));
        }
        Ok(())
    }

    fn tokens(&self, index: usize, estimator: &TokenEstimator) -> u64 {
        let size = self.sizes[index];
        estimator.scale(estimator.framed(size.raw, size.tool_blocks))
    }

    fn quarters(&self, index: usize, estimator: &TokenEstimator) -> u64 {
        let size = self.sizes[index];
        estimator.framed(size.raw, size.tool_blocks)
    }

    fn unit_tokens(&self, unit: &Unit, estimator: &TokenEstimator) -> u64 {
        match unit {
            Unit::Prompt { size, .. } | Unit::Answer { size, .. } => self.tokens(*size, estimator),
            Unit::Group(group) => {
                self.tokens(group.size, estimator)
                    + group
                        .calls
                        .iter()
                        .filter_map(|slot| slot.size)
                        .map(|size| self.tokens(size, estimator))
                        .sum::<u64>()
            }
        }
    }

    fn exchange_tokens(&self, exchange: &Exchange, estimator: &TokenEstimator) -> u64 {
        exchange
            .units
            .iter()
            .map(|unit| self.unit_tokens(unit, estimator))
            .sum()
    }

    /// Whether the exchange's tokens may be within `room`: false when even the lower bound of
    /// its tokens (its framed size at the ratio, before each message is rounded up) is over.
    fn may_fit(exchange: &Exchange, room: u64, estimator: &TokenEstimator) -> bool {
        let framed = estimator.framed(exchange.raw, exchange.tool_blocks)
            + estimator.framed(0, 0) * exchange.messages.saturating_sub(1);
        // Each message's estimate is at least its size times the ratio (rounding loses at most
        // a few units in the last place of each product): the margin covers the bound's own
        // rounding.
        let lower = framed as f64 * estimator.ratio / 4.0 * (1.0 - 1e-9);
        lower <= room as f64
    }

    fn unit_messages(&self, unit: &Unit, estimator: &TokenEstimator, out: &mut Outbound) {
        match unit {
            Unit::Prompt { text, size } => out.push(
                Message::User { text: text.clone() },
                self.quarters(*size, estimator),
            ),
            // Reasoning blocks go back with their message, signatures unchanged (Anthropic and
            // Bedrock require the thinking of a tool-use loop on its later requests).
            Unit::Answer {
                text,
                size,
                reasoning,
            } => out.push(
                Message::Assistant {
                    text: text.clone(),
                    tool_calls: Vec::new(),
                    reasoning: reasoning.clone(),
                },
                self.quarters(*size, estimator),
            ),
            Unit::Group(group) => {
                out.push(
                    Message::Assistant {
                        text: group.text.clone(),
                        tool_calls: group.calls.iter().map(|slot| slot.call.clone()).collect(),
                        reasoning: group.reasoning.clone(),
                    },
                    self.quarters(group.size, estimator),
                );
                for slot in &group.calls {
                    out.push(
                        Message::ToolResult {
                            call_id: slot.call.id.clone(),
                            content: slot.content.clone(),
                            is_error: slot.is_error,
                        },
                        slot.size.map_or(0, |size| self.quarters(size, estimator)),
                    );
                }
            }
        }
    }

    /// The provider messages of the transcript, untouched by the budget (only `results_shrunk`
    /// cuts applied). Fails, naming the entry, on a history no provider accepts.
    pub fn transcript_messages(&self) -> Result<Vec<Message>, BudgetError> {
        self.check()?;
        let estimator = TokenEstimator::new(ProviderKind::OpenAi, 1.0);
        let mut out = Outbound {
            messages: Vec::new(),
            quarters: Vec::new(),
        };
        for exchange in &self.exchanges {
            for unit in &exchange.units {
                self.unit_messages(unit, &estimator, &mut out);
            }
        }
        Ok(out.messages)
    }

    /// The estimated tokens of the fixed parts (system prompt and tool schemas), at the
    /// estimator's ratio and at 1; refused when they alone are over the budget.
    fn fixed_parts(
        system: &str,
        tools: &[ToolDefinition],
        limit: u64,
        estimator: &TokenEstimator,
    ) -> Result<(u64, u64), BudgetError> {
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
        let uncalibrated = TokenEstimator::new(estimator.family, 1.0);
        Ok((fixed, uncalibrated.text(system) + uncalibrated.tools(tools)))
    }

    /// Plans the messages of one request under `budget` with policy 3 (see the module doc of
    /// `budget`): the same plan, byte for byte, as planning the same records in one batch.
    pub fn plan(
        &self,
        system: &str,
        tools: &[ToolDefinition],
        budget: Budget,
        estimator: &TokenEstimator,
    ) -> Result<Plan, BudgetError> {
        self.check()?;
        let limit = budget.max_input_tokens;
        let (fixed, uncalibrated_fixed) = Self::fixed_parts(system, tools, limit, estimator)?;
        let uncalibrated = TokenEstimator::new(estimator.family, 1.0);
        let available = limit - fixed;
        let Some((newest, older)) = self.exchanges.split_last() else {
            return Ok(Plan {
                messages: Vec::new(),
                estimated_tokens: fixed,
                uncalibrated_tokens: uncalibrated_fixed,
                report: None,
                compaction: None,
            });
        };
        // Every message rounded up at this ratio: the one pass over the whole session.
        let tokens_before = fixed + self.all_tokens(estimator);

        // (a) Excerpt the oldest groups of the newest exchange, never its latest two, until it fits.
        let newest_costs: Vec<u64> = newest
            .units
            .iter()
            .map(|unit| self.unit_tokens(unit, estimator))
            .collect();
        let mut newest_total: u64 = newest_costs.iter().sum();
        let group_positions: Vec<usize> = newest
            .units
            .iter()
            .enumerate()
            .filter(|(_, unit)| matches!(unit, Unit::Group(_)))
            .map(|(i, _)| i)
            .collect();
        let protected = &group_positions[group_positions.len().saturating_sub(2)..];
        let excerptable = &group_positions[..group_positions.len() - protected.len()];
        // Each excerptable group's excerpt (its size and tokens) when it is replaced by one.
        let mut replaced: Vec<Option<(u64, u64)>> = vec![None; excerptable.len()];
        for (k, &position) in excerptable.iter().enumerate() {
            if newest_total <= available {
                break;
            }
            let Unit::Group(group) = &newest.units[position] else {
                continue;
            };
            let excerpt_quarters = group.excerpt_quarters();
            let replacement_tokens = estimator.scale(estimator.framed(excerpt_quarters, 0));
            // A group already smaller than its excerpt is kept whole: replacing it saves nothing.
            if replacement_tokens >= newest_costs[position] {
                continue;
            }
            newest_total = newest_total - newest_costs[position] + replacement_tokens;
            replaced[k] = Some((excerpt_quarters, replacement_tokens));
        }
        // Still over: the oldest groups are left out too, excerpted or (too small to excerpt)
        // whole, behind a one-line note, rather than failing a turn whose latest groups and
        // prompt fit. `omitted_count` of the excerptable groups, the oldest.
        let mut omitted_count = 0;
        let note_quarters = excerpt::omitted_note_quarters();
        if newest_total > available && !excerptable.is_empty() {
            let note_tokens = estimator.scale(estimator.framed(note_quarters, 0));
            let mut total = newest_total + note_tokens;
            let mut count = 0;
            for (k, &position) in excerptable.iter().enumerate() {
                if total <= available {
                    break;
                }
                total -= replaced[k].map_or(newest_costs[position], |(_, tokens)| tokens);
                count += 1;
            }
            if total <= available {
                newest_total = total;
                omitted_count = count;
            }
        }
        // The groups replaced by an excerpt or the note, and those left out, oldest first.
        let mut excerpted: Vec<String> = Vec::new();
        let mut omitted: Vec<String> = Vec::new();
        for (k, &position) in excerptable.iter().enumerate() {
            let Unit::Group(group) = &newest.units[position] else {
                continue;
            };
            let ids = group.calls.iter().map(|slot| slot.call.id.clone());
            if k < omitted_count {
                omitted.extend(ids.clone());
            }
            if k < omitted_count || replaced[k].is_some() {
                excerpted.extend(ids);
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
        while keep_from > 0 {
            let exchange = &older[keep_from - 1];
            if !Self::may_fit(exchange, room, estimator) {
                break;
            }
            let total = self.exchange_tokens(exchange, estimator);
            if total > room {
                break;
            }
            room -= total;
            keep_from -= 1;
        }
        let dropped_exchanges = super::coalesce(&self.spans[..keep_from]);

        let mut out = Outbound {
            messages: Vec::new(),
            quarters: Vec::new(),
        };
        for exchange in &older[keep_from..] {
            for unit in &exchange.units {
                self.unit_messages(unit, estimator, &mut out);
            }
        }
        // The newest exchange: consecutive excerpts (and the note) are joined into one
        // assistant message, so a run of compacted groups reads as one quoted block rather
        // than a string of assistant turns.
        let mut next_excerptable = 0;
        let mut previous_was_excerpt = false;
        for (position, unit) in newest.units.iter().enumerate() {
            let excerpt = match excerptable.get(next_excerptable) {
                Some(&at) if at == position => {
                    let k = next_excerptable;
                    next_excerptable += 1;
                    if k == 0 && omitted_count > 0 {
                        Some((
                            excerpt::omitted_note(POLICY_VERSION).to_string(),
                            note_quarters,
                        ))
                    } else if k < omitted_count {
                        continue;
                    } else if let (Unit::Group(group), Some((quarters, _))) = (unit, replaced[k]) {
                        Some((group.excerpt_text(POLICY_VERSION), quarters))
                    } else {
                        None
                    }
                }
                _ => None,
            };
            let Some((text, quarters)) = excerpt else {
                self.unit_messages(unit, estimator, &mut out);
                previous_was_excerpt = false;
                continue;
            };
            out.push_quote(text, quarters, previous_was_excerpt, estimator);
            previous_was_excerpt = true;
        }
        // Counted on the final messages: joining excerpts saves a little per-message overhead.
        let mut tokens_after = fixed;
        let mut uncalibrated_tokens = uncalibrated_fixed;
        for &quarters in &out.quarters {
            tokens_after += estimator.scale(quarters);
            uncalibrated_tokens += uncalibrated.scale(quarters);
        }
        let report =
            (!excerpted.is_empty() || !dropped_exchanges.is_empty()).then_some(TrimReport {
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
            messages: out.messages,
            estimated_tokens: tokens_after,
            uncalibrated_tokens,
            report,
            compaction: None,
        })
    }
}
