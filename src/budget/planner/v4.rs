//! Policy 4 of the prompt budget: compaction with hysteresis, so consecutive requests share
//! their prefix and a provider's prompt cache keeps hitting.
//!
//! Policy 3 compacts as little as each request needs, so once a session is at the budget every
//! request excerpts one more group and changes its prefix. Policy 4 renders every request from
//! the session's last recorded [`Compaction`] (a [`Frontier`]: how many of the oldest exchanges
//! are left out, up to which group the kept exchanges are excerpted, up to which the excerpts
//! are left out behind the note). New records are appended after it, so the requests between
//! two compactions extend each other byte for byte. Only when a request would exceed the budget
//! (the high-water mark) is a new compaction made, in one step down to the low-water mark:
//! older exchanges dropped first, then the newest exchange's oldest groups excerpted, then the
//! oldest excerpts omitted. The caller records it; from then on every plan (in this process or
//! a resumed one) renders the same prefix.
//!
//! What a frontier renders depends only on the transcript: an excerpt is made from its group's
//! recorded words, calls and results, never from the estimator's ratio, so an excerpt, once
//! made, is the same text in every later request.

use super::{Group, Outbound, Planner, Unit};
use crate::budget::{Budget, BudgetError, Part, Plan, TokenEstimator, TrimReport, excerpt};
use crate::providers::ToolDefinition;
use crate::transcript::Compaction;

/// The policy version policy 4 records in its reports and compactions.
pub const POLICY_VERSION_4: u32 = 4;

/// A group's place: its exchange and its unit within it (ordered as the transcript is).
pub(in crate::budget) type At = (usize, usize);

/// A recorded compaction resolved to positions in the planner's exchanges.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(in crate::budget) struct Frontier {
    /// How many of the oldest exchanges are left out (the newest one never is).
    pub dropped: usize,
    /// The newest group replaced by its excerpt: every group of the kept exchanges up to it is.
    pub excerpted: Option<At>,
    /// The newest group left out behind the note (never past `excerpted`).
    pub omitted: Option<At>,
}

/// How one group is rendered under a frontier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shown {
    Whole,
    Excerpt,
    Omitted,
}

impl Planner {
    /// Takes a recorded compaction: its call ids resolved to groups. An id no group of the
    /// session made (a damaged or hand-edited entry) names nothing: that bound is not applied,
    /// and the next request over the budget compacts again.
    pub(super) fn take_compaction(&mut self, compaction: &Compaction) {
        if compaction.policy_version != POLICY_VERSION_4 {
            return;
        }
        let at = |id: &Option<String>| {
            id.as_deref()
                .and_then(|id| self.calls.get(id))
                .map(|slot| (slot.exchange, slot.unit))
        };
        let excerpted = at(&compaction.excerpted_through);
        let omitted =
            at(&compaction.omitted_through).filter(|&o| excerpted.is_some_and(|e| o <= e));
        self.frontier = Frontier {
            dropped: usize::try_from(compaction.dropped_count).unwrap_or(usize::MAX),
            excerpted,
            omitted,
        };
    }

    /// Whether a group's excerpt is smaller than the group: a group already smaller than its
    /// excerpt is kept whole, as policy 3 does. Measured in unscaled sizes, so the answer
    /// depends on the transcript alone.
    fn worth_excerpting(&self, group: &Group) -> bool {
        let whole: u64 = self.sizes[group.size].raw
            + group
                .calls
                .iter()
                .filter_map(|slot| slot.size)
                .map(|index| self.sizes[index].raw)
                .sum::<u64>();
        group.calls.iter().all(|slot| slot.size.is_some()) && group.excerpt_quarters() < whole
    }

    fn shown(&self, frontier: &Frontier, at: At, group: &Group) -> Shown {
        if frontier.omitted.is_some_and(|o| at <= o) {
            Shown::Omitted
        } else if frontier.excerpted.is_some_and(|e| at <= e) && self.worth_excerpting(group) {
            Shown::Excerpt
        } else {
            Shown::Whole
        }
    }

    /// The first kept exchange: the newest is never left out.
    fn first_kept(&self, frontier: &Frontier) -> usize {
        frontier.dropped.min(self.exchanges.len().saturating_sub(1))
    }

    /// The messages of the kept exchanges under `frontier`, and the call ids excerpted (omitted
    /// ones included) and omitted, oldest first. Consecutive excerpts (and the note) are joined
    /// into one assistant message, as policy 3 joins them; a later excerpt appends to that
    /// message, so the text before it stays a prefix.
    fn render(
        &self,
        frontier: &Frontier,
        estimator: &TokenEstimator,
    ) -> (Outbound, Vec<String>, Vec<String>) {
        let mut out = Outbound {
            messages: Vec::new(),
            quarters: Vec::new(),
        };
        let mut excerpted = Vec::new();
        let mut omitted = Vec::new();
        let mut previous_was_quote = false;
        let mut in_omitted_run = false;
        let first = self.first_kept(frontier);
        for (i, exchange) in self.exchanges.iter().enumerate().skip(first) {
            for (j, unit) in exchange.units.iter().enumerate() {
                let quote = match unit {
                    Unit::Group(group) => match self.shown(frontier, (i, j), group) {
                        Shown::Whole => None,
                        Shown::Omitted => {
                            let ids = group.calls.iter().map(|slot| slot.call.id.clone());
                            excerpted.extend(ids.clone());
                            omitted.extend(ids);
                            if in_omitted_run {
                                continue;
                            }
                            in_omitted_run = true;
                            Some((
                                excerpt::omitted_note(POLICY_VERSION_4).to_string(),
                                excerpt::omitted_note_quarters(),
                            ))
                        }
                        Shown::Excerpt => {
                            excerpted.extend(group.calls.iter().map(|slot| slot.call.id.clone()));
                            in_omitted_run = false;
                            Some((
                                group.excerpt_text(POLICY_VERSION_4),
                                group.excerpt_quarters(),
                            ))
                        }
                    },
                    _ => None,
                };
                let Some((text, quarters)) = quote else {
                    self.unit_messages(unit, estimator, &mut out);
                    previous_was_quote = false;
                    in_omitted_run = false;
                    continue;
                };
                out.push_quote(text, quarters, previous_was_quote, estimator);
                previous_was_quote = true;
            }
        }
        (out, excerpted, omitted)
    }

    /// A unit's tokens as `frontier` renders it, each excerpt counted as its own message (what
    /// joining saves is not counted: an upper bound of the rendered request).
    fn shown_tokens(
        &self,
        frontier: &Frontier,
        at: At,
        unit: &Unit,
        estimator: &TokenEstimator,
    ) -> u64 {
        match unit {
            Unit::Group(group) => match self.shown(frontier, at, group) {
                Shown::Whole => self.unit_tokens(unit, estimator),
                Shown::Excerpt => estimator.scale(estimator.framed(group.excerpt_quarters(), 0)),
                Shown::Omitted => 0,
            },
            _ => self.unit_tokens(unit, estimator),
        }
    }

    fn shown_exchange_tokens(
        &self,
        frontier: &Frontier,
        index: usize,
        estimator: &TokenEstimator,
    ) -> u64 {
        // Each run of omitted groups is one note, as `render` writes it.
        let note = estimator.scale(estimator.framed(excerpt::omitted_note_quarters(), 0));
        let mut in_omitted_run = false;
        let mut total = 0;
        for (j, unit) in self.exchanges[index].units.iter().enumerate() {
            let omitted = matches!(unit, Unit::Group(group)
                if self.shown(frontier, (index, j), group) == Shown::Omitted);
            if omitted && !in_omitted_run {
                total += note;
            }
            in_omitted_run = omitted;
            total += self.shown_tokens(frontier, (index, j), unit, estimator);
        }
        total
    }

    /// A new frontier from `from` that brings the request (estimated at `total`, fixed parts
    /// included) down to `target`, or as far as the policy can when it cannot: older exchanges
    /// first, oldest first; then the newest exchange's groups excerpted, oldest first, never
    /// its latest two; then its excerpts omitted, oldest first. Returns the frontier and its
    /// estimate (an upper bound of the rendered request).
    fn compact(
        &self,
        from: Frontier,
        mut total: u64,
        target: u64,
        estimator: &TokenEstimator,
    ) -> (Frontier, u64) {
        let mut frontier = from;
        frontier.dropped = self.first_kept(&frontier);
        let newest = self.exchanges.len() - 1;
        while total > target && frontier.dropped < newest {
            total = total.saturating_sub(self.shown_exchange_tokens(
                &frontier,
                frontier.dropped,
                estimator,
            ));
            frontier.dropped += 1;
        }
        let units = &self.exchanges[newest].units;
        let groups: Vec<usize> = units
            .iter()
            .enumerate()
            .filter(|(_, unit)| matches!(unit, Unit::Group(_)))
            .map(|(j, _)| j)
            .collect();
        let compactable = &groups[..groups.len().saturating_sub(2)];
        for &j in compactable {
            if total <= target {
                break;
            }
            let Unit::Group(group) = &units[j] else {
                continue;
            };
            let at = (newest, j);
            if frontier.excerpted.is_some_and(|e| at <= e) || !self.worth_excerpting(group) {
                continue;
            }
            let before = self.shown_tokens(&frontier, at, &units[j], estimator);
            frontier.excerpted = Some(at);
            let after = self.shown_tokens(&frontier, at, &units[j], estimator);
            total = total.saturating_sub(before) + after;
        }
        // A run of omitted groups in the newest exchange already has its note.
        let mut noted = frontier.omitted.is_some_and(|o| o.0 == newest);
        let note_tokens = estimator.scale(estimator.framed(excerpt::omitted_note_quarters(), 0));
        for &j in compactable {
            if total <= target {
                break;
            }
            let at = (newest, j);
            if frontier.excerpted.is_none_or(|e| at > e) {
                break;
            }
            if frontier.omitted.is_some_and(|o| at <= o) {
                continue;
            }
            let before = self.shown_tokens(&frontier, at, &units[j], estimator);
            if !noted {
                total += note_tokens;
                noted = true;
            }
            frontier.omitted = Some(at);
            total = total.saturating_sub(before);
        }
        (frontier, total)
    }

    /// The first call id of the group at `at`, as a compaction names it.
    fn group_id(&self, at: Option<At>) -> Option<String> {
        let (i, j) = at?;
        match self.exchanges.get(i)?.units.get(j)? {
            Unit::Group(group) => group.calls.first().map(|slot| slot.call.id.clone()),
            _ => None,
        }
    }

    /// Plans one request under policy 4 (see the module doc): the session's recorded frontier
    /// rendered, or, when that is over the budget, a new compaction down to
    /// `low_water_percent` % of the budget, returned in [`Plan::compaction`] for the caller to
    /// record before sending. Same transcript, recorded compactions, budget and estimator ⇒
    /// byte-identical plan.
    pub fn plan_v4(
        &self,
        system: &str,
        tools: &[ToolDefinition],
        budget: Budget,
        estimator: &TokenEstimator,
        low_water_percent: u64,
    ) -> Result<Plan, BudgetError> {
        self.check()?;
        let limit = budget.max_input_tokens;
        let (fixed, uncalibrated_fixed) = Self::fixed_parts(system, tools, limit, estimator)?;
        let uncalibrated = TokenEstimator::new(estimator.family, 1.0);
        if self.exchanges.is_empty() {
            return Ok(Plan {
                messages: Vec::new(),
                estimated_tokens: fixed,
                uncalibrated_tokens: uncalibrated_fixed,
                report: None,
                compaction: None,
            });
        }
        let tally = |out: &Outbound| {
            out.quarters.iter().fold(
                (fixed, uncalibrated_fixed),
                |(tokens, uncalibrated_tokens), &quarters| {
                    (
                        tokens + estimator.scale(quarters),
                        uncalibrated_tokens + uncalibrated.scale(quarters),
                    )
                },
            )
        };
        let mut frontier = self.frontier;
        frontier.dropped = self.first_kept(&frontier);
        let (mut out, _, _) = self.render(&frontier, estimator);
        let (mut tokens, mut uncalibrated_tokens) = tally(&out);
        let mut compaction = None;
        let mut report = None;
        if tokens > limit {
            let target = u64::try_from(u128::from(limit) * u128::from(low_water_percent) / 100)
                .unwrap_or(limit);
            let newest = self.exchanges.len() - 1;
            let estimate = fixed
                + (frontier.dropped..=newest)
                    .map(|i| self.shown_exchange_tokens(&frontier, i, estimator))
                    .sum::<u64>();
            let (compacted, estimate) = self.compact(frontier, estimate, target, estimator);
            if estimate > limit {
                return Err(self.too_large(fixed, limit, estimator));
            }
            frontier = compacted;
            let (compacted_out, excerpted, omitted) = self.render(&frontier, estimator);
            out = compacted_out;
            (tokens, uncalibrated_tokens) = tally(&out);
            if tokens > limit {
                return Err(self.too_large(fixed, limit, estimator));
            }
            compaction = Some(Compaction {
                policy_version: POLICY_VERSION_4,
                dropped_count: frontier.dropped as u64,
                excerpted_through: self.group_id(frontier.excerpted),
                omitted_through: self.group_id(frontier.omitted),
                budget: limit,
                low_water: target,
            });
            report = Some(TrimReport {
                policy_version: POLICY_VERSION_4,
                excerpted,
                omitted,
                dropped_exchanges: crate::budget::coalesce(&self.spans[..frontier.dropped]),
                dropped_count: frontier.dropped as u64,
                tokens_before: fixed + self.all_tokens(estimator),
                tokens_after: tokens,
                budget: limit,
            });
        }
        Ok(Plan {
            messages: out.messages,
            estimated_tokens: tokens,
            uncalibrated_tokens,
            report,
            compaction,
        })
    }

    /// The refusal when even the most compacted request is over the budget: the latest two
    /// groups alone, or the newest exchange around them.
    fn too_large(&self, fixed: u64, limit: u64, estimator: &TokenEstimator) -> BudgetError {
        let newest = self.exchanges.len() - 1;
        let units = &self.exchanges[newest].units;
        let groups: Vec<&Unit> = units
            .iter()
            .filter(|unit| matches!(unit, Unit::Group(_)))
            .collect();
        let latest = &groups[groups.len().saturating_sub(2)..];
        let groups_tokens: u64 = latest
            .iter()
            .map(|unit| self.unit_tokens(unit, estimator))
            .sum();
        if fixed + groups_tokens > limit {
            return BudgetError::TooLarge {
                part: Part::NewestGroups,
                tokens: fixed + groups_tokens,
                budget: limit,
            };
        }
        // Everything the policy may take out taken out: what is left of the newest exchange.
        let everything: Vec<usize> = units
            .iter()
            .enumerate()
            .filter(|(_, unit)| matches!(unit, Unit::Group(_)))
            .map(|(j, _)| j)
            .collect();
        let last_compactable = everything
            .len()
            .checked_sub(3)
            .map(|k| (newest, everything[k]));
        let most = Frontier {
            dropped: newest,
            excerpted: last_compactable,
            omitted: last_compactable,
        };
        BudgetError::TooLarge {
            part: Part::Prompt,
            tokens: fixed + self.shown_exchange_tokens(&most, newest, estimator),
            budget: limit,
        }
    }
}
