//! The prompt budget (SPEC §6; policy version 4 by default, 3 on request): from the durable transcript to the
//! messages of one provider request that fit the model's input budget.
//!
//! **API boundary.** Plain Rust, no I/O, no clock. A session keeps a [`Planner`] (or the
//! [`History`] that wraps it) and pushes it each record it commits; [`Planner::plan`] takes the
//! fixed parts of the request (system prompt, tool definitions), a [`Budget`] and a
//! [`TokenEstimator`], and returns a [`Plan`] or a [`BudgetError`]. [`plan`] does the same from
//! a whole transcript at once. The caller sends the plan's messages and records its
//! [`TrimReport`].
//!
//! **Invariants.**
//! - Same entries, fixed parts, budget and estimator ⇒ byte-identical plan, whether the
//!   records were pushed one by one with plans between or all at once (the planner's law).
//! - An inconsistent history (a call without a result, a result without its call, a repeated
//!   call id, results out of call order) is refused before any compaction, naming the entry.
//!   A late answer is not an inconsistency: a result for a call whose group ended without it
//!   (crash recovery appends these, since the transcript is never rewritten) completes that
//!   group, wherever it comes later in the transcript.
//! - The latest two tool groups of the newest exchange are sent whole; a retained call keeps its
//!   id and arguments byte for byte; every retained call is followed by its result.
//! - An excerpted group is plain assistant text quoted as historical data, so no provider sees
//!   a call without its result or a result without its call.
//! - The durable transcript is never rewritten; `results_shrunk` events (the 2 KiB cut after a
//!   context-window rejection) are applied every time, before the budget.

mod estimate;
mod excerpt;
mod history;
#[cfg(test)]
mod law_tests;
mod planner;
#[cfg(test)]
mod reference;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod v4_law_tests;

pub use crate::providers::ProviderKind;
pub use estimate::{Budget, TokenEstimator};
pub use history::History;
pub use planner::{POLICY_VERSION_4, Planner};

use crate::providers::{Message, ToolDefinition};
use crate::session::Entry;
use crate::transcript::Record;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use thiserror::Error;

/// The policy version recorded in every [`TrimReport`].
pub const POLICY_VERSION: u32 = 3;

pub use crate::limits::SHRUNK_HEAD_BYTES;

/// The outbound messages of one request, and what the budget changed to get them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub messages: Vec<Message>,
    /// Estimated input tokens of the planned request: system prompt, tool schemas, messages.
    pub estimated_tokens: u64,
    /// The same estimate at a ratio of 1: what the provider's reported usage calibrates.
    pub uncalibrated_tokens: u64,
    /// `None` when the transcript fit untouched (policy 4: when no new compaction was made).
    pub report: Option<TrimReport>,
    /// Policy 4's new compaction, which the caller records (before sending) so that every
    /// later plan renders the same prefix. Policy 3 never makes one.
    pub compaction: Option<Compaction>,
}

pub use crate::transcript::Compaction;

/// Which policy plans a request (the `budget_policy` config key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Compacts as little as each request needs ([`Planner::plan`]).
    V3,
    /// Compacts in one step down to the low-water mark (`low_water_percent` % of the way from
    /// the smallest request it can make to the budget) when a request would exceed the budget,
    /// and renders every later request from that recorded compaction ([`Planner::plan_v4`]).
    V4 { low_water_percent: u64 },
}

impl Policy {
    /// The policy a config names: 3, else 4.
    pub fn of(budget_policy: u64, low_water_percent: u64) -> Policy {
        if budget_policy == u64::from(POLICY_VERSION) {
            Policy::V3
        } else {
            Policy::V4 { low_water_percent }
        }
    }
}

pub use crate::transcript::TrimReport;

/// Which part of the request is too large to fit at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Part {
    SystemPrompt,
    ToolSchemas,
    /// The latest two tool groups of the newest exchange.
    NewestGroups,
    /// The newest exchange after every older group was excerpted: the user's prompt and the
    /// answers around the latest groups.
    Prompt,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BudgetError {
    #[error("entry {seq} {problem}; the session history is inconsistent")]
    InvalidHistory { seq: u64, problem: String },
    #[error("{}", too_large_message(*part, *tokens, *budget))]
    TooLarge {
        part: Part,
        tokens: u64,
        budget: u64,
    },
}

fn too_large_message(part: Part, tokens: u64, budget: u64) -> String {
    let (what, advice) = match part {
        Part::SystemPrompt => (
            "the system prompt alone",
            "set context_window_tokens to the model's real window, lower max_output_tokens or budget_margin_tokens, or use a model with a larger window",
        ),
        Part::ToolSchemas => (
            "the system prompt and the tool schemas",
            "set context_window_tokens to the model's real window, lower max_output_tokens or budget_margin_tokens, or use a model with a larger window",
        ),
        Part::NewestGroups => (
            "the latest two tool calls and their results",
            "start a new session (pen/newSession) and ask for smaller pieces: a smaller line_count, a narrower path or glob",
        ),
        Part::Prompt => (
            "the current prompt with its latest tool calls",
            "shorten the prompt, or start a new session (pen/newSession) and carry over only what matters",
        ),
    };
    format!("{what}: about {tokens} tokens, more than the {budget} the request may use; {advice}")
}

fn invalid(seq: u64, problem: impl Into<String>) -> BudgetError {
    BudgetError::InvalidHistory {
        seq,
        problem: problem.into(),
    }
}

/// The head of a cut result, with a note of its full size.
fn shrink(content: &str) -> String {
    crate::text::cut_with_note(content, SHRUNK_HEAD_BYTES, format_args!(
        "…[cut to its first 2 KiB after the provider rejected the request as too long; the full result \
         was {} bytes. Ask for less: a smaller line_count, a narrower path or glob]",
        content.len()
    ))
    .into_owned()
}

/// What the batch functions read: typed records, or stored entries (read through
/// [`Entry::record`], the one payload reader).
pub trait AsRecord {
    fn as_record(&self) -> Cow<'_, Record>;
}

impl AsRecord for Record {
    fn as_record(&self) -> Cow<'_, Record> {
        Cow::Borrowed(self)
    }
}

impl AsRecord for Entry {
    fn as_record(&self) -> Cow<'_, Record> {
        Cow::Owned(self.record())
    }
}

fn planner_of<R: AsRecord>(transcript: &[R]) -> Planner {
    let mut planner = Planner::new();
    for record in transcript {
        planner.push(&record.as_record());
    }
    planner
}

/// The call ids every `results_shrunk` event of the transcript names (the law tests' copy of the
/// loop's old rescan).
#[cfg(test)]
pub(crate) fn shrunk_ids(entries: &[Entry]) -> rustc_hash::FxHashSet<String> {
    use crate::transcript::{Event, Item};
    entries
        .iter()
        .filter_map(|entry| match entry.item() {
            Item::Event(Event::ResultsShrunk { call_ids, .. }) => Some(call_ids),
            _ => None,
        })
        .flatten()
        .collect()
}

/// The `(first_seq, last_seq)` spans of dropped exchanges, adjacent or overlapping ones joined:
/// the exchanges left out are the oldest, so this is one span, and a report stays small however
/// long the session is. O(spans), integer work only.
pub(crate) fn coalesce(spans: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut joined: Vec<(u64, u64)> = Vec::new();
    for &(first, last) in spans {
        match joined.last_mut() {
            Some(open) if first <= open.1.saturating_add(1) => open.1 = open.1.max(last),
            _ => joined.push((first, last)),
        }
    }
    joined
}

/// The provider messages of a transcript, untouched by the budget (only `results_shrunk` cuts
/// applied). Fails, naming the entry, on a history no provider accepts.
pub fn transcript_messages<R: AsRecord>(transcript: &[R]) -> Result<Vec<Message>, BudgetError> {
    planner_of(transcript).transcript_messages()
}

/// Plans the messages of one request under `budget` (see the module doc for the policy): a
/// [`Planner`] pushed every record, then planned once. A session that plans request after
/// request keeps its planner (or [`History`]) instead.
pub fn plan<R: AsRecord>(
    transcript: &[R],
    system: &str,
    tools: &[ToolDefinition],
    budget: Budget,
    estimator: &TokenEstimator,
) -> Result<Plan, BudgetError> {
    planner_of(transcript).plan(system, tools, budget, estimator)
}
