//! What the loop asks of a session's history besides the plan, kept as records are committed:
//! the call ids used so far, the newest large results not yet cut (for the context-window
//! recovery), the calibration and the rejected sizes per model, and the last trimming report.
//!
//! Each answer is the one the loop got by rescanning the transcript before every request; here
//! [`History::push`] costs O(the record) and each query O(1) or O(its answer).

use super::{Budget, BudgetError, Plan, Planner, Policy, ProviderKind, SHRUNK_HEAD_BYTES};
use super::{TokenEstimator, TrimReport};
use crate::providers::{ToolCall, ToolDefinition};
use crate::transcript::{Event, Item, Record};
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::BTreeSet;

/// A session's history as the loop reads it: the [`Planner`] and the answers it asks for
/// between requests. Push every committed record of the session, in order, once.
#[derive(Debug, Clone, Default)]
pub struct History {
    planner: Planner,
    /// Every call id an answer, a call or a result used.
    used_ids: FxHashSet<String>,
    /// The results after each assistant message until the next one, for the recovery's
    /// "newest large group".
    runs: Vec<Run>,
    /// The runs with a large result not yet cut.
    runs_with_large: BTreeSet<usize>,
    /// The runs each large result's call id appears in (once per result).
    large_ids: FxHashMap<String, Vec<usize>>,
    /// Per model, the reported and estimated input tokens of its newest answer with both
    /// that passed [`plausible`].
    calibration: FxHashMap<String, (u64, u64)>,
    /// Per model, the newest report seen (plausible or not), to tell a constant report.
    last_report: FxHashMap<String, (u64, u64)>,
    /// The models whose reports stayed constant while requests grew: they never calibrate.
    untrusted: FxHashSet<String>,
    /// Per model, the smallest estimate it rejected as over its context window, and that
    /// request's uncalibrated estimate when it was recorded.
    rejected: FxHashMap<String, (u64, Option<u64>)>,
    /// Per model, the newest window the session recorded (`context_window_found`).
    windows: FxHashMap<String, crate::providers::window::ModelWindow>,
    last_trim: Option<TrimReport>,
}

/// The results that follow one assistant message.
#[derive(Debug, Clone, Default)]
struct Run {
    /// The call ids of its results over [`SHRUNK_HEAD_BYTES`], in order.
    large: Vec<String>,
    /// How many of them are not cut yet.
    uncut: usize,
}

impl History {
    pub fn new() -> History {
        History::default()
    }

    /// A history of these records, pushed in order.
    pub fn of<'a>(records: impl IntoIterator<Item = &'a Record>) -> History {
        let mut history = History::new();
        for record in records {
            history.push(record);
        }
        history
    }

    /// Takes one newly committed record: O(the record).
    pub fn push(&mut self, record: &Record) {
        // New cuts first, so the planner's set is the one this reads.
        if let Item::Event(Event::ResultsShrunk { call_ids, .. }) = &record.item {
            let mut cut_now: FxHashSet<&str> = FxHashSet::default();
            for id in call_ids {
                if self.planner.is_shrunk(id) || !cut_now.insert(id) {
                    continue;
                }
                for &run in self.large_ids.get(id).into_iter().flatten() {
                    let run_state = &mut self.runs[run];
                    run_state.uncut -= 1;
                    if run_state.uncut == 0 {
                        self.runs_with_large.remove(&run);
                    }
                }
            }
        }
        self.planner.push(record);
        self.used_ids
            .extend(record.item.call_ids().into_iter().map(str::to_string));
        match &record.item {
            Item::AssistantMessage(message) => {
                self.runs.push(Run::default());
                if let (Some(model), Some(usage), Some(estimated)) = (
                    &message.model,
                    message.usage,
                    message.estimated_input_tokens,
                ) && usage.input_tokens > 0
                    && estimated > 0
                {
                    self.take_report(model, usage.input_tokens, estimated);
                }
            }
            Item::ToolResult(result) if result.content.len() > SHRUNK_HEAD_BYTES => {
                // Results before any assistant message belong to no group.
                let Some(run) = self.runs.len().checked_sub(1) else {
                    return;
                };
                let run_state = &mut self.runs[run];
                run_state.large.push(result.call_id.clone());
                self.large_ids
                    .entry(result.call_id.clone())
                    .or_default()
                    .push(run);
                if !self.planner.is_shrunk(&result.call_id) {
                    run_state.uncut += 1;
                    self.runs_with_large.insert(run);
                }
            }
            Item::Event(Event::ContextWindowRejected {
                model,
                estimated_tokens,
                uncalibrated_tokens,
                ..
            }) => {
                let smallest = self
                    .rejected
                    .entry(model.clone())
                    .or_insert((u64::MAX, None));
                smallest.0 = smallest.0.min(*estimated_tokens);
                if let Some(tokens) = uncalibrated_tokens {
                    smallest.1 = Some(smallest.1.map_or(*tokens, |known| known.min(*tokens)));
                }
            }
            // A window recorded outside the bounds (by a pen that did not check them) is no
            // window: the session plans as if none was recorded.
            Item::Event(Event::ContextWindowFound { model, window }) if window.within_bounds() => {
                self.windows.insert(model.clone(), *window);
            }
            Item::Event(Event::ContextTrimmed(report)) => self.last_trim = Some(report.clone()),
            _ => {}
        }
    }

    pub fn planner(&self) -> &Planner {
        &self.planner
    }

    /// [`Planner::plan`] of the records pushed so far.
    pub fn plan(
        &self,
        system: &str,
        tools: &[ToolDefinition],
        budget: Budget,
        estimator: &TokenEstimator,
    ) -> Result<Plan, BudgetError> {
        self.planner.plan(system, tools, budget, estimator)
    }

    /// The plan of the records pushed so far under `policy`.
    pub fn plan_with(
        &self,
        policy: Policy,
        system: &str,
        tools: &[ToolDefinition],
        budget: Budget,
        estimator: &TokenEstimator,
    ) -> Result<Plan, BudgetError> {
        match policy {
            Policy::V3 => self.planner.plan(system, tools, budget, estimator),
            Policy::V4 { low_water_percent } => {
                self.planner
                    .plan_v4(system, tools, budget, estimator, low_water_percent)
            }
        }
    }

    /// The call ids of the newest group of tool results (the results after one assistant
    /// message) that has a result over [`SHRUNK_HEAD_BYTES`] not already cut, for the
    /// context-window recovery step. O(the group).
    pub fn newest_large_group(&self) -> Option<Vec<String>> {
        let run = &self.runs[*self.runs_with_large.last()?];
        Some(
            run.large
                .iter()
                .filter(|id| !self.planner.is_shrunk(id))
                .cloned()
                .collect(),
        )
    }

    /// Gives every call of a new answer an id no earlier entry of the session and no earlier
    /// call of the answer uses. The planner refuses a history with a repeated call id (its
    /// results could not be told apart), so an answer that repeats one, from a hostile model or
    /// a local server that numbers its calls per answer, would otherwise make every later
    /// request of the session fail. The first use of an id keeps it: the id only pairs a call
    /// with its result in pen's own requests, so a replacement changes nothing the model
    /// relies on. Returns how many were replaced. O(the calls).
    pub fn make_call_ids_unique(&self, calls: &mut [ToolCall]) -> usize {
        let mut fresh: FxHashSet<String> = FxHashSet::default();
        let mut replaced = 0;
        for call in calls {
            if call.id.is_empty()
                || self.used_ids.contains(call.id.as_str())
                || fresh.contains(&call.id)
            {
                call.id = format!("call_{}", uuid::Uuid::now_v7().simple());
                replaced += 1;
            }
            fresh.insert(call.id.clone());
        }
        replaced
    }

    /// The estimator for the session's next request to `model`: calibrated by the latest answer
    /// from that model whose provider reported its input tokens (answers record the uncalibrated
    /// estimate of the request they answer), else uncalibrated.
    pub fn estimator(&self, model: &str, family: ProviderKind) -> TokenEstimator {
        // (Reports that failed `plausible` or came from an untrusted model never got here.)
        match self.calibration.get(model) {
            Some(&(reported, estimated)) => TokenEstimator::calibrate(family, reported, estimated),
            None => TokenEstimator::new(family, 1.0),
        }
    }

    /// Takes one answer's reported prompt tokens and the uncalibrated estimate of its request
    /// (SPEC §7: only totals calibrate — the caller records no estimate for a backend whose
    /// usage is not one — and implausible reports are ignored, with a log line).
    fn take_report(&mut self, model: &str, reported: u64, estimated: u64) {
        let previous = self
            .last_report
            .insert(model.to_string(), (reported, estimated));
        if self.untrusted.contains(model) {
            return;
        }
        // The same count for a request that grew by more than an eighth: the server reports
        // something other than the prompt, so nothing it reported calibrates.
        if let Some((last_reported, last_estimated)) = previous
            && last_reported == reported
            && estimated > last_estimated + last_estimated / 8
        {
            tracing::info!(
                model,
                reported,
                estimated,
                "the provider reports the same prompt tokens for a larger request; its usage no longer calibrates the estimate"
            );
            self.untrusted.insert(model.to_string());
            self.calibration.remove(model);
            return;
        }
        if !plausible(reported, estimated) {
            tracing::info!(
                model,
                reported,
                estimated,
                "the provider reports fewer prompt tokens than the request's bytes / 8; ignored for calibration"
            );
            return;
        }
        self.calibration
            .insert(model.to_string(), (reported, estimated));
    }

    /// The largest estimate (under `estimator`) a request to `model` may have after the
    /// session's rejections: under the smallest rejected estimate, in the units of
    /// `estimator`. A rejection recorded with its uncalibrated estimate bounds the request's
    /// size before calibration, so a later calibration that shrinks estimates cannot plan a
    /// request as large as one already rejected.
    pub fn rejected_at(&self, model: &str, estimator: &TokenEstimator) -> Option<u64> {
        let &(calibrated, uncalibrated) = self.rejected.get(model)?;
        Some(match uncalibrated {
            Some(tokens) => (tokens as f64 * estimator.ratio).floor() as u64,
            None => calibrated,
        })
    }

    /// The newest window the session recorded for `model`.
    pub fn recorded_window(&self, model: &str) -> Option<crate::providers::window::ModelWindow> {
        self.windows.get(model).copied()
    }

    /// The session's last recorded `context_trimmed` report.
    pub fn last_trim(&self) -> Option<&TrimReport> {
        self.last_trim.as_ref()
    }

    /// Whether `report` cuts something other than the session's last recorded report: a request
    /// that repeats the same cuts is not a new compaction and is not recorded again.
    pub fn is_new_trim(&self, report: &TrimReport) -> bool {
        self.last_trim.as_ref().is_none_or(|last| {
            last.excerpted != report.excerpted
                || last.omitted != report.omitted
                || last.dropped_exchanges != report.dropped_exchanges
        })
    }
}

/// Whether `reported` prompt tokens can be the whole of a request whose uncalibrated estimate
/// is `estimated`: at least its bytes ÷ [`MIN_BYTES_PER_REPORTED_TOKEN_DIVISOR`]. Four times
/// the uncalibrated estimate is the request's size in quarter tokens — its bytes, for ASCII
/// text, a little more with the framing — so this is a report of at least half the estimate.
///
/// [`MIN_BYTES_PER_REPORTED_TOKEN_DIVISOR`]: crate::limits::MIN_BYTES_PER_REPORTED_TOKEN_DIVISOR
pub fn plausible(reported: u64, estimated: u64) -> bool {
    reported.saturating_mul(crate::limits::MIN_BYTES_PER_REPORTED_TOKEN_DIVISOR)
        >= estimated.saturating_mul(4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::Usage;
    use crate::transcript::AssistantMessage;

    fn answer(seq: u64, reported: u64, estimated: u64) -> Record {
        Record {
            seq,
            turn_id: None,
            created_at: 0,
            item: Item::AssistantMessage(AssistantMessage {
                text: "ok".into(),
                tool_calls: vec![],
                reasoning: vec![],
                finish_reason: None,
                usage: Some(Usage::new(reported, 1)),
                model: Some("m".into()),
                estimated_input_tokens: Some(estimated),
                malformed_calls: false,
            }),
        }
    }

    fn ratio(records: &[Record]) -> f64 {
        History::of(records)
            .estimator("m", ProviderKind::OpenAi)
            .ratio
    }

    #[test]
    fn a_report_under_the_bytes_over_eight_does_not_calibrate() {
        // 4 × the uncalibrated estimate is the request's bytes: 1,000 tokens ≈ 4,000 bytes.
        assert!(plausible(500, 1_000));
        assert!(!plausible(499, 1_000));
        assert_eq!(ratio(&[answer(1, 1_200, 1_000)]), 1.2);
        // Under half the estimate: ignored, where the old clamp made it 0.5.
        assert_eq!(ratio(&[answer(1, 300, 1_000)]), 1.0);
        // An earlier plausible report stays the calibration.
        assert_eq!(ratio(&[answer(1, 900, 1_000), answer(2, 100, 2_000)]), 0.9);
    }

    #[test]
    fn a_constant_report_across_growing_requests_calibrates_nothing_after() {
        // 100 tokens for a 150-token request is plausible alone…
        assert!((ratio(&[answer(1, 100, 150)]) - 100.0 / 150.0).abs() < 1e-9);
        // …but the same 100 for a request that grew (within the plausible range) is not a
        // count of the prompt: nothing of this model calibrates any more, the first included.
        let constant = [
            answer(1, 100, 150),
            answer(2, 100, 190),
            answer(3, 400, 380),
        ];
        assert_eq!(ratio(&constant), 1.0);
        // A repeated count for a request of the same size is a cache-stable server, not this.
        assert!((ratio(&[answer(1, 100, 150), answer(2, 100, 155)]) - 100.0 / 155.0).abs() < 1e-9);
    }

    /// Issue 26, item 9: a window an earlier pen recorded outside the bounds (a server's
    /// `n_ctx` of 2^64−1) is not planned under; one within them is.
    #[test]
    fn a_recorded_window_outside_the_bounds_is_no_window() {
        use crate::providers::window::{ModelWindow, WindowSource};
        let found = |seq, tokens| Record {
            seq,
            turn_id: None,
            created_at: 0,
            item: Item::Event(Event::ContextWindowFound {
                model: "m".into(),
                window: ModelWindow::new(tokens, WindowSource::LlamaCppProps),
            }),
        };
        assert_eq!(
            History::of([&found(1, u64::MAX)]).recorded_window("m"),
            None
        );
        assert_eq!(History::of([&found(1, 0)]).recorded_window("m"), None);
        assert_eq!(
            History::of([&found(1, 8_192)])
                .recorded_window("m")
                .map(|w| w.tokens),
            Some(8_192)
        );
    }

    #[test]
    fn a_rejection_bounds_later_requests_before_calibration() {
        let rejected = Record {
            seq: 2,
            turn_id: None,
            created_at: 0,
            item: Item::Event(Event::ContextWindowRejected {
                model: "m".into(),
                estimated_tokens: 2_000,
                reason: "too long".into(),
                uncalibrated_tokens: Some(2_000),
            }),
        };
        let history = History::of([&rejected]);
        // At a ratio of 0.6 (a later calibration that shrinks estimates), a request of the
        // rejected size estimates 1,200: the bound follows, so it cannot go again.
        let shrunk = TokenEstimator::new(ProviderKind::OpenAi, 0.6);
        assert_eq!(history.rejected_at("m", &shrunk), Some(1_200));
        let plain = TokenEstimator::new(ProviderKind::OpenAi, 1.0);
        assert_eq!(history.rejected_at("m", &plain), Some(2_000));
        // An older pen's entry, without the uncalibrated size, bounds as before.
        let old = Record {
            item: Item::Event(Event::ContextWindowRejected {
                model: "m".into(),
                estimated_tokens: 2_000,
                reason: "too long".into(),
                uncalibrated_tokens: None,
            }),
            ..rejected
        };
        assert_eq!(History::of([&old]).rejected_at("m", &shrunk), Some(2_000));
    }
}
