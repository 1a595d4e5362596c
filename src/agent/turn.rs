//! One turn: the loop of SPEC §5 (prompt → (request → answer → tool calls → results)* → final
//! answer), the session's context recorded as it starts, and the write-through of every entry.

use super::history::SessionHistory;
use super::{
    AgentEvent, Approver, HISTORY_UNREPAIRABLE_ADVICE, InstructionSummary, NOT_EXECUTED_STOPPED,
    RequestUsage, StopReason, ToolHost, TurnErrorKind, TurnEvent, TurnOutcome, context,
};
use crate::budget::BudgetError;
use crate::config::Config;
use crate::providers::window::ModelWindow;
use crate::providers::{Provider, ProviderError, Usage};
use crate::session::{LeaseOwner, NewEntry, SessionError, SessionStore};
use crate::transcript::{AssistantMessage, CallOutcome, Event, Item, Record};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// Everything one turn uses. Built by the [`Engine`], which holds the session (registry and
/// lease) while it runs.
pub(super) struct Turn {
    pub(super) store: Arc<SessionStore>,
    pub(super) session_id: String,
    pub(super) turn_id: String,
    pub(super) provider: Arc<dyn Provider>,
    pub(super) model: String,
    /// The window the engine found for the model (or the user's setting); see
    /// [`Turn::window`].
    pub(super) found_window: ModelWindow,
    pub(super) config: Config,
    /// The modes sessions were switched to: this turn's calls are decided under its
    /// session's, read at each call ([`Turn::mode`]).
    pub(super) modes: Arc<super::runner::SessionModes>,
    pub(super) tools: Arc<dyn ToolHost>,
    pub(super) approver: Arc<dyn Approver>,
    /// The session's entries, in step with the store (write-through).
    pub(super) history: Mutex<SessionHistory>,
    /// The usage this turn's requests reported, summed.
    pub(super) usage: Mutex<Option<Usage>>,
    pub(super) on_event: Arc<dyn Fn(AgentEvent) + Send + Sync>,
    pub(super) cancel: CancellationToken,
    /// The number of the turn's last event (the first is 1).
    pub(super) seq: AtomicU64,
}

/// A failure that ends the turn with `error`.
#[derive(Debug, thiserror::Error)]
pub(super) enum TurnError {
    #[error("the session store failed: {0}")]
    Store(#[from] SessionError),
    #[error("{0}")]
    Provider(ProviderError),
    /// Still over the context window after recovery.
    #[error("{0}")]
    ContextWindow(String),
    /// The prompt or the fixed parts alone are over the budget.
    #[error("{0}")]
    TooLarge(String),
    /// The history is inconsistent beyond what recovery repairs.
    #[error("{0}; {HISTORY_UNREPAIRABLE_ADVICE}")]
    Unrepairable(BudgetError),
}

impl TurnError {
    pub(super) fn kind(&self) -> TurnErrorKind {
        match self {
            TurnError::Store(SessionError::LeaseHeld { .. }) => TurnErrorKind::SessionBusy,
            TurnError::Store(_) => TurnErrorKind::Store,
            TurnError::Provider(err) => provider_error_kind(err),
            TurnError::ContextWindow(_) => TurnErrorKind::ContextWindow,
            TurnError::TooLarge(_) => TurnErrorKind::BudgetTooLarge,
            TurnError::Unrepairable(_) => TurnErrorKind::HistoryUnrepairable,
        }
    }
}

/// The kind a client acts on for a provider failure that ended a turn.
pub fn provider_error_kind(err: &ProviderError) -> TurnErrorKind {
    use crate::providers::ErrorKind as P;
    match err.kind {
        P::ContextWindowExceeded => TurnErrorKind::ContextWindow,
        P::Auth => TurnErrorKind::Auth,
        P::RateLimited => TurnErrorKind::RateLimit,
        P::Server | P::Network | P::Timeout | P::Cancelled => TurnErrorKind::Network,
        P::BadRequest | P::Protocol => TurnErrorKind::ProviderBadRequest,
        P::Config => TurnErrorKind::NoProvider,
    }
}

impl Turn {
    pub(super) async fn run_to_end(&self, prompt: &str) -> TurnOutcome {
        let ended = self.run_inner(prompt).await;
        let usage = *self.usage.lock().unwrap_or_else(|p| p.into_inner());
        let session_usage = self.lock_history().usage();
        let outcome = match ended {
            Ok(reason) => TurnOutcome {
                stop_reason: reason,
                last_error: None,
                error_kind: None,
                usage,
                session_usage,
            },
            Err(err) => TurnOutcome {
                stop_reason: StopReason::Error,
                error_kind: Some(err.kind()),
                last_error: Some(err.to_string()),
                usage,
                session_usage,
            },
        };
        let _ = self
            .append_item(Item::Event(Event::TurnEnded {
                stop_reason: outcome.stop_reason,
                last_error: outcome.last_error.clone(),
                error_kind: outcome.error_kind,
                usage: outcome.usage,
                session_usage: outcome.session_usage,
            }))
            .await;
        self.emit(TurnEvent::TurnEnded(outcome.clone()));
        outcome
    }

    pub(super) async fn run_inner(&self, prompt: &str) -> Result<StopReason, TurnError> {
        // Every call a crashed pen left without a result is answered before anything else
        // (under the lease, so no live process is running any of them). This is also the repair
        // of an inconsistent history: the planner takes these late answers into their groups.
        // Then the history catches up with the store: the recovered results and whatever
        // another pen appended since this engine last ran a turn here.
        let store = Arc::clone(&self.store);
        let session_id = self.session_id.clone();
        let mut history = std::mem::take(&mut *self.lock_history());
        let history = blocking(move || {
            store.recover_interrupted(&session_id, LeaseOwner::this_process())?;
            history.sync(&store, &session_id)?;
            Ok::<_, SessionError>(history)
        })
        .await?;
        let open_revert = history.open_revert().cloned();
        *self.lock_history() = history;
        // A revert a crash stopped is closed and said, before this prompt (see
        // `crate::checkpoint`): which files it may have left half done.
        if let Some((turns, files)) = open_revert {
            self.append_item(Item::Event(interrupted_revert(turns, files)))
                .await?;
        }
        // Files reverted since the last prompt are told with this one, as a note before it:
        // appended, so every earlier request stays a prefix of this one (and cached).
        let text = match self.lock_history().revert_note() {
            Some(note) => format!("{note}\n\n{prompt}"),
            None => prompt.to_string(),
        };
        // The mode is told with the prompt, never in the system prompt or the catalog, which
        // stay the cached prefix whatever the mode: plan mode with each prompt in it, and its
        // end with the first prompt after it.
        let previous_was_plan = self.lock_history().last_prompt_in_plan_mode();
        let text = match crate::mode::prompt_note(self.mode(), previous_was_plan) {
            Some(note) => format!("{note}\n\n{text}"),
            None => text,
        };
        self.record_window().await?;
        // The session's context is recorded before its first prompt; a changed root instruction
        // file is announced after this one's text (appended too).
        let mut text = text;
        if let Some(note) = self.record_context().await? {
            text.push_str(&note);
        }
        // Before a tool runs or the model is sent the catalog, under either policy.
        self.fit_pages();
        if let Some(message) = self.tools.sandbox_notice() {
            tracing::warn!("{message}");
            self.emit(TurnEvent::SandboxUnavailable { message });
        }
        self.append_item(Item::UserPrompt { text }).await?;
        let mut requests = 0u64;
        loop {
            if self.cancel.is_cancelled() {
                return Ok(StopReason::Cancelled);
            }
            if requests >= self.config.max_turn_requests {
                return Ok(StopReason::MaxTurnRequests);
            }
            requests += 1;
            // MCP tools may have changed since the last request (list_changed, a server that
            // died or came back): the tool list is taken anew, and stays fixed for this one.
            // Under the turn's Stop: a server that floods or never answers cannot hold it.
            let notices = tokio::select! {
                notices = self.tools.before_request() => notices,
                _ = self.cancel.cancelled() => return Ok(StopReason::Cancelled),
            };
            for notice in notices {
                self.emit(TurnEvent::McpServer {
                    server: notice.server,
                    state: notice.state,
                    reason: notice.reason,
                });
            }
            let definitions = self.definitions();
            let span = tracing::debug_span!("request", n = requests);
            let answer = self
                .request_with_recovery(&definitions)
                .instrument(span)
                .await?;
            let (response, estimated, warning) = match answer {
                Some(answer) => answer,
                None => return Ok(StopReason::Cancelled),
            };
            let stopped = self.cancel.is_cancelled();
            // The answer is kept even when Stop came while it was on its way. The model and the
            // uncalibrated estimate of its request calibrate later estimates against `usage`.
            let calls = response.tool_calls.clone();
            let usage = response.usage;
            // Only a total calibrates (SPEC §7): an answer from a backend whose count is not
            // one is recorded without the estimate calibration pairs it with.
            let total = self.provider.usage_is_total();
            self.append_item(Item::AssistantMessage(AssistantMessage {
                text: response.text,
                tool_calls: response.tool_calls,
                reasoning: response.reasoning,
                finish_reason: Some(response.finish_reason),
                usage,
                model: Some(self.model.clone()),
                estimated_input_tokens: total.then_some(estimated),
                malformed_calls: false,
            }))
            .await?;
            if let Some(message) = warning {
                tracing::warn!(model = %self.model, "{message}");
                self.append_item(Item::Event(Event::ProviderWarning {
                    model: self.model.clone(),
                    message: message.clone(),
                }))
                .await?;
                self.emit(TurnEvent::ProviderWarning { message });
            }
            if let Some(usage) = usage {
                self.report_usage(usage);
            }
            if calls.is_empty() {
                return Ok(if stopped {
                    StopReason::Cancelled
                } else {
                    StopReason::EndTurn
                });
            }
            let mut index = 0;
            while index < calls.len() {
                if self.cancel.is_cancelled() {
                    for rest in &calls[index..] {
                        self.record_result(
                            rest,
                            NOT_EXECUTED_STOPPED,
                            true,
                            CallOutcome::NotExecuted,
                        )
                        .await?;
                    }
                    return Ok(StopReason::Cancelled);
                }
                // Consecutive read-only calls run side by side; any other call runs alone.
                let batch: Vec<_> = calls[index..]
                    .iter()
                    .map_while(|call| {
                        let tool = self.tools.get(&call.name).filter(|t| t.read_only())?;
                        Some((call, tool))
                    })
                    .collect();
                if batch.len() > 1 {
                    self.run_read_only(&batch).await?;
                    index += batch.len();
                } else {
                    self.run_call(&calls[index]).await?;
                    index += 1;
                }
            }
        }
    }

    /// Records the session's instructions and environment before its first request; at a later
    /// turn, records a root instruction file that changed since, and returns the note the prompt
    /// carries for it.
    pub(super) async fn record_context(&self) -> Result<Option<String>, TurnError> {
        let Some(workspace) = self.tools.workspace().cloned() else {
            return Ok(None);
        };
        let config = self.config.clone();
        let (recorded, before) = {
            let history = self.lock_history();
            (
                history.context().is_some(),
                history.root_instructions().to_vec(),
            )
        };
        if !recorded {
            let gathered = blocking(move || Ok(context::gather(&workspace, &config))).await?;
            self.append_item(Item::Event(Event::SessionContext(gathered)))
                .await?;
            return Ok(None);
        }
        let now = blocking(move || Ok(context::root_instructions(&workspace, &config))).await?;
        if now == before {
            return Ok(None);
        }
        let note = context::changed_note(&now, &before);
        self.append_item(Item::Event(Event::InstructionsChanged {
            instructions: now.clone(),
        }))
        .await?;
        self.emit(TurnEvent::InstructionsChanged {
            files: now.iter().map(InstructionSummary::of).collect(),
        });
        Ok(Some(note))
    }

    /// The session's permission mode now: the one it was switched to, else the configured one.
    pub(super) fn mode(&self) -> crate::mode::Mode {
        self.modes.of(&self.session_id, &self.config)
    }

    pub(super) fn lock_history(&self) -> std::sync::MutexGuard<'_, SessionHistory> {
        self.history.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Commits `item` (on a blocking thread) and adds it to the history.
    pub(super) async fn append_item(&self, item: Item) -> Result<u64, SessionError> {
        let entry = NewEntry::item(Some(self.turn_id.clone()), &item);
        let store = Arc::clone(&self.store);
        let session_id = self.session_id.clone();
        let stored = entry.clone();
        let appended = blocking(move || store.append(&session_id, &stored)).await;
        let mut history = self.lock_history();
        match appended {
            Ok(seq) => {
                history.push(&Record {
                    seq,
                    turn_id: entry.turn_id,
                    created_at: crate::session::now_ms(),
                    item,
                });
                Ok(seq)
            }
            Err(err) => {
                // It may have committed before failing: the next turn reads the session again.
                history.lost_step();
                Err(err)
            }
        }
    }

    /// Adds one request's usage to the turn's and says so (after its answer is recorded, so the
    /// session's total includes it).
    pub(super) fn report_usage(&self, usage: Usage) {
        let turn = {
            let mut total = self.usage.lock().unwrap_or_else(|p| p.into_inner());
            total.get_or_insert_with(Usage::default).add(&usage);
            total.unwrap_or_default()
        };
        let session = self.lock_history().usage().unwrap_or_default();
        self.emit(TurnEvent::Usage(RequestUsage {
            model: self.model.clone(),
            request: usage,
            turn,
            session,
        }));
    }

    pub(super) fn emit(&self, event: TurnEvent) {
        (self.on_event)(AgentEvent {
            session_id: self.session_id.clone(),
            turn_id: self.turn_id.clone(),
            seq: self.seq.fetch_add(1, Ordering::SeqCst) + 1,
            event,
        });
    }
}

/// Runs blocking store work on a blocking thread.
pub(super) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, SessionError> + Send + 'static,
) -> Result<T, SessionError> {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|e| Err(SessionError::Task(e.to_string())))
}

/// The `files_reverted` that closes a revert a crash stopped, found when a turn begins: its
/// files may be half reverted, which only a look at each could tell (the next revert does), so
/// the model is told to re-read them.
fn interrupted_revert(turns: Vec<String>, files: Vec<String>) -> Event {
    let mut note = format!(
        "[pen] A revert of the file changes of {} turn(s) ({}) was interrupted: pen stopped \
         while it ran, so some of its files may be reverted and others not:",
        turns.len(),
        turns.join(", ")
    );
    for file in &files {
        note.push_str(&format!("\n- {file}"));
    }
    note.push_str("\nRe-read any of these files before you edit them.");
    Event::FilesReverted {
        turns,
        files: files
            .into_iter()
            .map(|path| crate::transcript::RevertedFile {
                path,
                status: "unknown".to_string(),
            })
            .collect(),
        note,
        interrupted: true,
    }
}
