//! Policy 4 of the prompt budget: compaction with hysteresis, so consecutive requests share
//! their prefix and a provider's prompt cache keeps hitting.
//!
//! Policy 3 compacts as little as each request needs, so once a session is at the budget every
//! request excerpts one more group and changes its prefix. Policy 4 renders every request from
//! the session's last recorded [`Compaction`] (a [`Frontier`]: how many of the oldest exchanges
//! are left out, up to which group the kept exchanges are excerpted, up to which the excerpts
//! are left out behind the note). New records are appended after it, so the requests between
//! two compactions extend each other byte for byte. Only when a request would exceed the budget
//! (the high-water mark) is a new compaction made, in one step down to the low-water mark (a
//! share of the way from the smallest request the policy can make to the budget): older
//! exchanges dropped first, then the newest exchange's oldest groups excerpted, then its oldest
//! groups left out behind the note, whatever their size. The caller records it; from then on
//! every plan (in this process or a resumed one) renders the same prefix.
//!
//! Policy 4 is never weaker than policy 3: it plans whenever policy 3 does, and a refusal names
//! the smallest request it rendered, above the budget (`v4_law_tests`).
//!
//! What a frontier renders depends only on the transcript and the provider family: an excerpt
//! is made from its group's recorded words, calls and results, and whether a group is worth
//! excerpting from sizes before the ratio, so an excerpt, once made, is the same text in every
//! later request.

use super::{Group, Outbound, Planner, Unit};
use crate::budget::estimate::quarter_tokens;
use crate::budget::{Budget, BudgetError, Part, Plan, TokenEstimator, TrimReport, excerpt};
use crate::providers::Message;
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

/// Where the plan carried past a compaction goes ([`Planner::carried_plan`]).
#[derive(Debug, Clone, Copy)]
enum Carried<'a> {
    /// As quoted text after the group at `At`.
    AfterGroup(At, &'a str),
    /// Before the text of the prompt at `At`.
    InPrompt(At, &'a str),
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

    /// Whether a group's excerpt is smaller than the group, both framed as the provider
    /// family frames them: a group no larger than its excerpt is kept whole, as policy 3 keeps
    /// it. Measured in sizes before the calibration ratio, so the answer depends on the
    /// transcript and the family alone, never on the request.
    fn worth_excerpting(&self, group: &Group, estimator: &TokenEstimator) -> bool {
        let whole: u64 = self.quarters(group.size, estimator)
            + group
                .calls
                .iter()
                .filter_map(|slot| slot.size)
                .map(|index| self.quarters(index, estimator))
                .sum::<u64>();
        group.calls.iter().all(|slot| slot.size.is_some())
            && estimator.framed(group.excerpt_quarters(), 0) < whole
    }

    fn shown(
        &self,
        frontier: &Frontier,
        at: At,
        group: &Group,
        estimator: &TokenEstimator,
    ) -> Shown {
        if frontier.omitted.is_some_and(|o| at <= o) {
            Shown::Omitted
        } else if frontier.excerpted.is_some_and(|e| at <= e)
            && self.worth_excerpting(group, estimator)
        {
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
    /// message, so the text before it stays a prefix. The groups an exchange leaves out are its
    /// oldest, and one note stands for all of them where the first was, whatever answers lie
    /// between them, as policy 3 writes it.
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
        let first = self.first_kept(frontier);
        let carried = self.carried_plan(frontier, estimator);
        for (i, exchange) in self.exchanges.iter().enumerate().skip(first) {
            let mut noted = false;
            for (j, unit) in exchange.units.iter().enumerate() {
                if let Some(Carried::InPrompt(at, plan)) = carried
                    && at == (i, j)
                    && let Unit::Prompt { text, .. } = unit
                {
                    let text = format!("{plan}\n\n{text}");
                    let quarters = estimator.framed(quarter_tokens(text.as_bytes()), 0);
                    out.push(Message::User { text }, quarters);
                    previous_was_quote = false;
                    continue;
                }
                // `Some(None)`: a group left out behind the note already written.
                let quote = match unit {
                    Unit::Group(group) => match self.shown(frontier, (i, j), group, estimator) {
                        Shown::Whole => None,
                        Shown::Omitted => {
                            let ids = group.calls.iter().map(|slot| slot.call.id.clone());
                            excerpted.extend(ids.clone());
                            omitted.extend(ids);
                            if noted {
                                Some(None)
                            } else {
                                noted = true;
                                Some(Some((
                                    excerpt::omitted_note(POLICY_VERSION_4).to_string(),
                                    excerpt::omitted_note_quarters(),
                                )))
                            }
                        }
                        Shown::Excerpt => {
                            excerpted.extend(group.calls.iter().map(|slot| slot.call.id.clone()));
                            Some(Some((
                                group.excerpt_text(POLICY_VERSION_4),
                                group.excerpt_quarters(),
                            )))
                        }
                    },
                    _ => None,
                };
                match quote {
                    Some(Some((text, quarters))) => {
                        out.push_quote(text, quarters, previous_was_quote, estimator);
                        previous_was_quote = true;
                    }
                    Some(None) => {}
                    None => {
                        self.unit_messages(unit, estimator, &mut out);
                        previous_was_quote = false;
                    }
                }
                if let Some(Carried::AfterGroup(at, plan)) = carried
                    && at == (i, j)
                {
                    let quarters = quarter_tokens(plan.as_bytes());
                    out.push_quote(plan.to_string(), quarters, previous_was_quote, estimator);
                    previous_was_quote = true;
                }
            }
        }
        (out, excerpted, omitted)
    }

    /// The plan carried past `frontier`'s compaction, and where: the latest plan a call set
    /// whose group the frontier does not send whole (its exchange dropped, or the group
    /// excerpted or left out). It goes after the newest compacted group of the kept exchanges
    /// (a group the latest two follow, so the request never ends with it), else, when whole
    /// exchanges alone were dropped, before the prompt of the first one kept. It depends on the
    /// frontier and the records before it alone, so the prefix stays the same until the next
    /// compaction; a plan set after it is sent whole, where it was made.
    fn carried_plan(&self, frontier: &Frontier, estimator: &TokenEstimator) -> Option<Carried<'_>> {
        let first = self.first_kept(frontier);
        let compacted = |at: At| at.0 < first || frontier.excerpted.is_some_and(|e| at <= e);
        let (at, plan) = self.plans.iter().rev().find(|(at, _)| compacted(*at))?;
        if at.0 >= first
            && let Some(Unit::Group(group)) = self.exchanges[at.0].units.get(at.1)
            && self.shown(frontier, *at, group, estimator) == Shown::Whole
        {
            return None;
        }
        Some(match frontier.excerpted {
            Some(e) if e.0 >= first => Carried::AfterGroup(e, plan),
            _ => Carried::InPrompt((first, 0), plan),
        })
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
            Unit::Group(group) => match self.shown(frontier, at, group, estimator) {
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
        // The groups an exchange leaves out have one note, as `render` writes it.
        let note = estimator.scale(estimator.framed(excerpt::omitted_note_quarters(), 0));
        let mut noted = false;
        let mut total = 0;
        for (j, unit) in self.exchanges[index].units.iter().enumerate() {
            let omitted = matches!(unit, Unit::Group(group)
                if self.shown(frontier, (index, j), group, estimator) == Shown::Omitted);
            if omitted && !noted {
                total += note;
                noted = true;
            }
            total += self.shown_tokens(frontier, (index, j), unit, estimator);
        }
        total
    }

    /// The positions of the newest exchange's groups that policy 4 may compact: all but its
    /// latest two, which are always sent whole.
    fn compactable(&self) -> Vec<usize> {
        let Some(newest) = self.exchanges.last() else {
            return Vec::new();
        };
        let mut groups: Vec<usize> = newest
            .units
            .iter()
            .enumerate()
            .filter(|(_, unit)| matches!(unit, Unit::Group(_)))
            .map(|(j, _)| j)
            .collect();
        groups.truncate(groups.len().saturating_sub(2));
        groups
    }

    /// The recorded frontier as it applies to the session now: the newest exchange is never
    /// left out, and no bound reaches its latest two groups. A compaction is only ever recorded
    /// naming groups the policy may compact, and groups are only ever added after them, so
    /// only a damaged entry names one of the latest two: it is applied up to the groups that
    /// may be compacted.
    fn applicable(&self, mut frontier: Frontier, compactable: &[usize]) -> Frontier {
        frontier.dropped = self.first_kept(&frontier);
        let newest = self.exchanges.len().saturating_sub(1);
        let last = compactable.last().map(|&j| (newest, j));
        let bound = |at: Option<At>| match at {
            Some(at) if at.0 >= newest && last.is_none_or(|last| at > last) => last,
            at => at,
        };
        frontier.excerpted = bound(frontier.excerpted);
        frontier.omitted = bound(frontier.omitted);
        frontier
    }

    /// A new frontier from `from` that brings the request (estimated at `total`, fixed parts
    /// included) down to `target`, or as far as the policy can when it cannot: older exchanges
    /// first, oldest first; then the newest exchange's `compactable` groups excerpted, oldest
    /// first; then those groups left out behind the note, oldest first, whatever their size (a
    /// group too small to excerpt included, as policy 3 leaves out its oldest groups rather
    /// than fail a turn whose latest groups fit). `total` is kept as an upper bound of the
    /// rendered request, which the caller counts exactly.
    fn compact(
        &self,
        from: Frontier,
        mut total: u64,
        target: u64,
        compactable: &[usize],
        estimator: &TokenEstimator,
    ) -> Frontier {
        let mut frontier = from;
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
        for &j in compactable {
            if total <= target {
                break;
            }
            let Unit::Group(group) = &units[j] else {
                continue;
            };
            let at = (newest, j);
            if frontier.excerpted.is_some_and(|e| at <= e)
                || !self.worth_excerpting(group, estimator)
            {
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
            if frontier.omitted.is_some_and(|o| at <= o) {
                continue;
            }
            let before = self.shown_tokens(&frontier, at, &units[j], estimator);
            if !noted {
                total += note_tokens;
                noted = true;
            }
            // A group left out counts as excerpted too: the excerpt bound never lags the
            // omission bound (a compaction records both).
            frontier.omitted = Some(at);
            frontier.excerpted = frontier.excerpted.max(Some(at));
            total = total.saturating_sub(before);
        }
        frontier
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
    /// rendered, or, when that is over the budget, a new compaction, returned in
    /// [`Plan::compaction`] for the caller to record before sending: the step down to the
    /// low-water mark, `low_water_percent` % of the way from the smallest request the policy
    /// can make to the budget; when even that is over the budget, every group the policy may
    /// take excerpted with none newly left out (the note may outweigh the few small groups it
    /// would stand for), then every one left out.
    /// Only when none of these fits is the request refused, naming the smallest of them, which
    /// is over the budget. Same transcript, recorded compactions, budget and estimator ⇒
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
        let compactable = self.compactable();
        let frontier = self.applicable(self.frontier, &compactable);
        let (out, _, _) = self.render(&frontier, estimator);
        let (tokens, uncalibrated_tokens) = tally(&out);
        if tokens <= limit {
            return Ok(Plan {
                messages: out.messages,
                estimated_tokens: tokens,
                uncalibrated_tokens,
                report: None,
                compaction: None,
            });
        }
        let newest = self.exchanges.len() - 1;
        let last = compactable.last().map(|&j| (newest, j));
        let excerpted_all = Frontier {
            dropped: newest,
            excerpted: frontier.excerpted.max(last),
            omitted: frontier.omitted,
        };
        let omitted_all = Frontier {
            omitted: frontier.omitted.max(last),
            ..excerpted_all
        };
        // The low-water mark is a share of what a compaction can free: of the room between the
        // smallest request the policy can make (the fixed parts, the prompt, the latest two
        // groups, the note) and the budget. A share of the whole budget would be out of reach
        // at a small window, where the fixed parts and the latest groups take most of it, and
        // every compaction would then leave out every older group.
        let (least, _) = tally(&self.render(&omitted_all, estimator).0);
        let floor = least.min(limit);
        let target = floor
            + u64::try_from(u128::from(limit - floor) * u128::from(low_water_percent) / 100)
                .unwrap_or(0);
        let estimate = fixed
            + (frontier.dropped..=newest)
                .map(|i| self.shown_exchange_tokens(&frontier, i, estimator))
                .sum::<u64>();
        let stepped = self.compact(frontier, estimate, target, &compactable, estimator);
        let mut smallest = u64::MAX;
        let mut tried: Vec<Frontier> = Vec::new();
        for candidate in [stepped, excerpted_all, omitted_all] {
            if tried.contains(&candidate) {
                continue;
            }
            tried.push(candidate);
            let (out, excerpted, omitted) = self.render(&candidate, estimator);
            let (tokens, uncalibrated_tokens) = tally(&out);
            if tokens > limit {
                smallest = smallest.min(tokens);
                continue;
            }
            return Ok(Plan {
                messages: out.messages,
                estimated_tokens: tokens,
                uncalibrated_tokens,
                report: Some(TrimReport {
                    policy_version: POLICY_VERSION_4,
                    excerpted,
                    omitted,
                    dropped_exchanges: crate::budget::coalesce(&self.spans[..candidate.dropped]),
                    dropped_count: candidate.dropped as u64,
                    tokens_before: fixed + self.all_tokens(estimator),
                    tokens_after: tokens,
                    budget: limit,
                }),
                compaction: Some(Compaction {
                    policy_version: POLICY_VERSION_4,
                    dropped_count: candidate.dropped as u64,
                    excerpted_through: self.group_id(candidate.excerpted),
                    omitted_through: self.group_id(candidate.omitted),
                    budget: limit,
                    low_water: target,
                }),
            });
        }
        Err(self.too_large(fixed, limit, smallest, estimator))
    }

    /// The refusal when even the most compacted request is over the budget: the latest two
    /// groups alone when they are, else the smallest request the policy rendered (`smallest`,
    /// over the budget, or it would have been sent).
    fn too_large(
        &self,
        fixed: u64,
        limit: u64,
        smallest: u64,
        estimator: &TokenEstimator,
    ) -> BudgetError {
        let units = &self.exchanges[self.exchanges.len() - 1].units;
        let groups: Vec<&Unit> = units
            .iter()
            .filter(|unit| matches!(unit, Unit::Group(_)))
            .collect();
        let groups_tokens: u64 = groups[groups.len().saturating_sub(2)..]
            .iter()
            .map(|unit| self.unit_tokens(unit, estimator))
            .sum();
        let (part, tokens) = if fixed + groups_tokens > limit {
            (Part::NewestGroups, fixed + groups_tokens)
        } else {
            (Part::Prompt, smallest)
        };
        BudgetError::TooLarge {
            part,
            tokens,
            budget: limit,
        }
    }
}
