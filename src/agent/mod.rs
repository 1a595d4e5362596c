//! The agent loop (SPEC §5): one turn of prompt → (request → answer → tool calls → results)*
//! → final answer, durable at every step, stoppable at every point.
//!
//! Architecture invariants:
//! - Every entry is committed to the session store before the next provider request.
//! - Every tool call in the transcript gets exactly one result: its outcome, "denied by the
//!   owner", "approval no longer applies", "not executed (stopped)", or "outcome unknown".
//!   Calls a crash cut off are answered at the next turn's start by the store's recovery,
//!   driven by each assistant message's call list ("interrupted; outcome unknown" when the
//!   call may have started, "not executed" when it cannot have).
//! - A turn runs under its session's lease ([`TurnLease`]): one running turn per session across
//!   processes, and recovery only under the lease. The lease is released when the turn ends,
//!   whatever ends it.
//! - A history the planner refuses after that recovery cannot be repaired by appending: the
//!   turn ends `error` with kind `history_unrepairable`, naming the entry.
//! - Every request is planned by [`crate::budget`] under `context_window_tokens −
//!   max_output_tokens − budget_margin_tokens`, estimated with a ratio calibrated from the
//!   provider's reported usage, with the policy `budget_policy` names; a plan that cuts
//!   something new is an event entry and a `context_trimmed` event. A policy-4 compaction is
//!   recorded (`context_compacted`) before the request that needs it goes out, so every later
//!   request, in this daemon or a resumed one, renders the same prefix.
//! - A context-window rejection never re-runs a tool: it is recorded (later requests plan under
//!   its estimate), the newest group of large results is cut (in the outbound request only; the
//!   decision is an event entry) and the request retried once.
//! - The loop never reads provider wording; backends classify their errors.

mod checkpoint;
mod context;
mod engine;
mod events;
mod focus;
mod history;
mod host;
mod lease;
mod system_prompt;

pub use crate::providers::choice::{NO_PROVIDER, provider_from_config};
pub use context::{environment, gather, render_file, root_instructions, system_text};
pub use engine::{BeginError, Engine, PendingTurn, TurnSpec};
pub use events::{
    AgentEvent, EventKind, InstructionSummary, RequestUsage, Trim, TurnEvent, window_line,
};
pub use focus::{Focus, Lines, parse_file_arg, render_focus, withheld_client_text};
pub use history::{CONTEXT_TRIMMED, CONTEXT_WINDOW_REJECTED, SHRUNK_HEAD_BYTES};
pub use host::{LocalTools, StartThroughApprover, WithMcp};
pub use lease::TurnLease;
pub use system_prompt::SYSTEM_PROMPT;

use crate::budget::{self, Budget, BudgetError};
use crate::config::Config;
use crate::providers::window::{ModelWindow, WindowSource};
use crate::providers::{
    CacheHints, ModelRequest, ModelResponse, PartSizes, Provider, ProviderError, ProviderKind,
    StreamEvent, ToolCall, ToolDefinition, Usage,
};
use crate::session::{LeaseOwner, NewEntry, SessionError, SessionStore};
use crate::tools::registry::{Execution, Preview, ToolSpec};
use crate::tools::write::EditPlan;
use crate::tools::{self, ToolError};
use crate::transcript::{
    AssistantMessage, CallOutcome, CallStarted, Event, Item, Record, ToolResult,
};
use futures::future::BoxFuture;
use history::SessionHistory;
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// Result texts the model reads for calls that did not run normally. Each is distinct, so the
/// model (and the owner reading the transcript) can tell them apart.
pub const NOT_EXECUTED_STOPPED: &str =
    "not executed (stopped): the owner stopped the turn before this call ran";
pub const DENIED_BY_OWNER: &str =
    "denied by the owner: do not retry this call without asking the owner first";
pub const OUTCOME_UNKNOWN_STOPPED: &str =
    "stopped while running: outcome unknown — inspect the state before retrying";

pub use crate::transcript::{StopReason, TurnErrorKind};

/// How a turn ended: what `pen/prompt` and `pen run --json` report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnOutcome {
    pub stop_reason: StopReason,
    pub last_error: Option<String>,
    /// What kind of failure `last_error` is: clients act on it rather than on the wording.
    pub error_kind: Option<TurnErrorKind>,
    /// The usage the turn's requests reported, summed; `None` when none reported any.
    pub usage: Option<Usage>,
    /// The session's usage so far, this turn included; `None` when nothing reported any.
    pub session_usage: Option<Usage>,
}

/// The end of `last_error` for a history that cannot be repaired.
pub const HISTORY_UNREPAIRABLE_ADVICE: &str = "pen cannot repair this by answering the calls left without a result, so no turn can \
     run in this session again: start a new session (pen/newSession) and carry over what matters";

/// The owner's answer to an approval request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allow,
    AllowForSession,
    Deny,
}

/// What the owner is asked to approve.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalRequest {
    pub session_id: String,
    pub turn_id: String,
    pub call_id: String,
    pub tool: String,
    pub arguments: Value,
    /// For pen_edit: the unified diff the edit would make.
    pub diff: Option<String>,
    /// Set when the write could not be reverted: its file's pre-image is over the session's
    /// checkpoint store limit (`checkpoint_store_bytes`), so the owner knows before the write.
    pub not_revertible: Option<String>,
}

/// The owner's answer and an optional reason, or why the owner could not be asked (the client
/// went away): then the authority to run the call is revoked.
pub type ApprovalAnswer = Result<(Decision, Option<String>), String>;

/// The owner's side of approvals (the editor, or a headless policy).
pub trait Approver: Send + Sync {
    fn ask(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalAnswer>;
}

/// Where the loop's tools run: the daemon's workspace, editor documents, read ledger and limits.
pub trait ToolHost: Send + Sync {
    /// The catalog the model is given.
    fn catalog(&self) -> Vec<tools::CatalogEntry>;
    /// Runs a blocking tool (called on a blocking thread); pen_create and pen_edit record
    /// their writes with `recorder` before making them (checkpoints).
    fn call(
        &self,
        name: &str,
        arguments: &Value,
        recorder: Option<&dyn crate::tools::WriteRecorder>,
    ) -> Result<Value, ToolError>;
    /// Runs a cancellable tool (pen_command), killed when `cancel` fires.
    fn run_cancellable(
        &self,
        spec: &'static ToolSpec,
        arguments: Value,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Value, ToolError>>;
    /// Plans pen_edit for approval: the plan's diff is what the owner is shown.
    fn plan_edit(&self, arguments: &Value) -> Result<EditPlan, ToolError>;
    /// Writes an approved plan, or fails `stale` when the file is no longer the planned text.
    fn apply_edit(
        &self,
        plan: EditPlan,
        recorder: Option<&dyn crate::tools::WriteRecorder>,
    ) -> Result<Value, ToolError>;
    /// Caps an observation as it is stored.
    fn observation(&self, result: &Result<Value, ToolError>) -> String;
    /// A tool this host adds beyond the native ones (an MCP server's), and how it is approved.
    fn added(&self, _name: &str) -> Option<crate::mcp::ToolInfo> {
        None
    }
    /// Runs an added tool until it ends or `cancel` fires (then it fails `stopped`).
    fn run_added(
        &self,
        name: &str,
        _arguments: Value,
        _cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Value, ToolError>> {
        let error = tools::registry::unknown_tool(name, std::iter::empty());
        Box::pin(async move { Err(error) })
    }
    /// The observation of a call of `tool`: an added tool's is capped with its own note.
    fn observe(&self, _tool: &str, result: &Result<Value, ToolError>) -> String {
        self.observation(result)
    }
    /// Brings the added tools up to date before a request; the server changes to report.
    fn before_request(&self) -> BoxFuture<'_, Vec<crate::mcp::ServerNotice>> {
        Box::pin(async { Vec::new() })
    }
    /// What to add to a "does not fit the prompt budget" failure (the MCP server whose tool
    /// schemas are largest, and how to leave tools out).
    fn budget_hint(&self) -> Option<String> {
        None
    }
    /// The workspace the tools run in: where the session's instruction files are read. `None`
    /// for a host without one (then requests carry pen's prompt alone).
    fn workspace(&self) -> Option<&crate::workspace::Workspace> {
        None
    }
    /// Fits the pages of the host's tools to `room_tokens`, what the turn's prompt budget
    /// leaves after its system prompt and tool schemas (SPEC §3: `Limits::fitted_to_room`); the
    /// engine calls it once, as the turn starts. A host without pages ignores it.
    fn fit_pages(&self, _room_tokens: u64) {}
}

/// The `tool` of an [`ApprovalRequest`] that asks to start a project's MCP server (never a
/// tool's name: it has spaces).
pub const START_MCP_SERVER: &str = "start MCP server";

/// Everything one turn uses. Built by the [`Engine`], which holds the session (registry and
/// lease) while it runs.
struct Turn {
    store: Arc<SessionStore>,
    session_id: String,
    turn_id: String,
    provider: Arc<dyn Provider>,
    model: String,
    /// The window the engine found for the model (or the user's setting); see
    /// [`Turn::window`].
    found_window: ModelWindow,
    config: Config,
    tools: Arc<dyn ToolHost>,
    approver: Arc<dyn Approver>,
    /// The session's entries, in step with the store (write-through).
    history: Mutex<SessionHistory>,
    /// The usage this turn's requests reported, summed.
    usage: Mutex<Option<Usage>>,
    on_event: Arc<dyn Fn(AgentEvent) + Send + Sync>,
    cancel: CancellationToken,
}

/// A failure that ends the turn with `error`.
#[derive(Debug, thiserror::Error)]
enum TurnError {
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
    fn kind(&self) -> TurnErrorKind {
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
    async fn run_to_end(&self, prompt: &str) -> TurnOutcome {
        let seq = AtomicU64::new(0);
        let ended = self.run_inner(prompt, &seq).await;
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
        self.emit(&seq, TurnEvent::TurnEnded(outcome.clone()));
        outcome
    }

    async fn run_inner(&self, prompt: &str, seq: &AtomicU64) -> Result<StopReason, TurnError> {
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
        self.record_window(seq).await?;
        // The session's context is recorded before its first prompt; a changed root instruction
        // file is announced after this one's text (appended too).
        let mut text = text;
        if let Some(note) = self.record_context(seq).await? {
            text.push_str(&note);
        }
        // Pages fitted to what the budget of the window this turn plans under leaves after the
        // system prompt (with the instructions just recorded) and the tool schemas (SPEC §3),
        // before a tool runs or the model is sent the catalog, under either policy. The
        // estimate is taken at a ratio of 1, so the page, which the catalog states, changes
        // only with the window and those parts, not with every calibration (the catalog heads
        // every request's cached prefix).
        let budget = self.budget_of(self.window());
        let estimator = budget::TokenEstimator::new(provider_family(&self.config), 1.0);
        self.tools
            .fit_pages(budget.room(&self.system_text(), &self.definitions(), &estimator));
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
                self.emit(
                    seq,
                    TurnEvent::McpServer {
                        server: notice.server,
                        state: notice.state.to_string(),
                        reason: notice.reason,
                    },
                );
            }
            let definitions = self.definitions();
            let span = tracing::debug_span!("request", n = requests);
            let answer = self
                .request_with_recovery(&definitions, seq)
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
                self.emit(seq, TurnEvent::ProviderWarning { message });
            }
            if let Some(usage) = usage {
                self.report_usage(usage, seq);
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
                            seq,
                        )
                        .await?;
                    }
                    return Ok(StopReason::Cancelled);
                }
                // Consecutive read-only calls run side by side; any other call runs alone.
                let batch = calls[index..]
                    .iter()
                    .take_while(|call| {
                        tools::registry::get(&call.name).is_some_and(|s| s.read_only())
                    })
                    .count();
                if batch > 1 {
                    self.run_read_only(&calls[index..index + batch], seq)
                        .await?;
                    index += batch;
                } else {
                    self.run_call(&calls[index], seq).await?;
                    index += 1;
                }
            }
        }
    }

    /// Records the session's instructions and environment before its first request; at a later
    /// turn, records a root instruction file that changed since, and returns the note the prompt
    /// carries for it.
    async fn record_context(&self, seq: &AtomicU64) -> Result<Option<String>, TurnError> {
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
        self.emit(
            seq,
            TurnEvent::InstructionsChanged {
                files: now.iter().map(InstructionSummary::of).collect(),
            },
        );
        Ok(Some(note))
    }

    /// The tool schemas a request sends. A server whose template renders no tools never shows
    /// them to the model: pen sends (and counts) none rather than plan for schemas the prompt
    /// will not hold.
    fn definitions(&self) -> Vec<ToolDefinition> {
        if self.window().tools_dropped {
            Vec::new()
        } else {
            tool_definitions(&self.tools.catalog())
        }
    }

    /// The system part of the session's requests: pen's prompt and the recorded context.
    fn system_text(&self) -> String {
        context::system_text(SYSTEM_PROMPT, self.lock_history().context())
    }

    /// The nested instruction files a successful call reaches that the session has not been
    /// given: the text to append to its result, and the files to record as delivered.
    async fn nested_instructions(
        &self,
        call: &ToolCall,
        arguments: &Value,
    ) -> Option<(String, Vec<crate::transcript::InstructionFile>)> {
        let workspace = self.tools.workspace()?.clone();
        let (delivered, used) = {
            let history = self.lock_history();
            history.context()?;
            (history.delivered().clone(), history.instruction_bytes())
        };
        let config = self.config.clone();
        let tool = call.name.clone();
        let arguments = arguments.clone();
        let files = blocking(move || {
            // The delivery counts toward the session's instruction budget, and is never more
            // than one tool result may be.
            let mut left = (config.instruction_bytes as usize)
                .saturating_sub(used)
                .min(config.max_tool_result_bytes as usize);
            Ok(context::nested_for_call(
                &workspace, &config, &tool, &arguments, &delivered, &mut left,
            ))
        })
        .await
        .ok()?;
        if files.is_empty() {
            return None;
        }
        Some((context::delivery_text(&files), files))
    }

    /// Records a call's successful result with the nested instruction files it reaches
    /// appended (then recorded as delivered, so no later call, in this pen or a resumed one,
    /// delivers them again).
    async fn record_output(
        &self,
        call: &ToolCall,
        arguments: Option<&Value>,
        content: &str,
        seq: &AtomicU64,
    ) -> Result<(), TurnError> {
        let nested = match arguments {
            Some(arguments) => self.nested_instructions(call, arguments).await,
            None => None,
        };
        let Some((appended, files)) = nested else {
            return self
                .record_result(call, content, false, CallOutcome::Done, seq)
                .await;
        };
        let text = format!("{content}{appended}");
        self.record_result(call, &text, false, CallOutcome::Done, seq)
            .await?;
        self.append_item(Item::Event(Event::InstructionsDelivered {
            call_id: call.id.clone(),
            files,
        }))
        .await?;
        Ok(())
    }

    /// One provider request, planned under the prompt budget; on a context-window rejection the
    /// newest large results are cut, the budget drops under the rejected estimate, and the
    /// request is retried once. `None` when Stop cancelled the request.
    async fn request_with_recovery(
        &self,
        definitions: &[ToolDefinition],
        seq: &AtomicU64,
    ) -> Result<Option<(ModelResponse, u64, Option<String>)>, TurnError> {
        let mut rejection: Option<ProviderError> = None;
        loop {
            let system = self.system_text();
            let (planned, report, estimator) =
                self.plan_request(&system, definitions, rejection.as_ref())?;
            // Policy 4's compaction is recorded before the request goes out, so every later
            // request (and a resumed session) renders the same prefix.
            if let Some(compaction) = &planned.compaction {
                self.append_item(Item::Event(Event::ContextCompacted(compaction.clone())))
                    .await?;
            }
            // Whether this request was planned differently from the one before it (a
            // compaction, a trim, a retry after a rejection): then no earlier end is a prefix.
            let replanned = planned.compaction.is_some() || report.is_some() || rejection.is_some();
            if let Some(report) = report {
                self.append_item(Item::Event(Event::ContextTrimmed(report.clone())))
                    .await?;
                self.emit(seq, TurnEvent::ContextTrimmed(Trim::Budget(report)));
            }
            // The cache hints: the session's id, where the previous request ended while it is
            // still a prefix of this one, and the estimate the planner used.
            let cache = {
                let mut guard = self.lock_history();
                let previous_end = if guard.last_request().is_empty() {
                    // No request of this session was planned in this process (a resumed
                    // session): the previous request ended where the answer to it begins, and
                    // it is a prefix of this one unless this one was planned anew. So a resumed
                    // daemon marks the same previous end the first daemon would have.
                    CacheHints::previous_end_from_history(&planned.messages, replanned)
                } else {
                    CacheHints::previous_end(guard.last_request(), &planned.messages)
                };
                guard.set_last_request(planned.messages.clone());
                CacheHints {
                    key: Some(self.session_id.clone()),
                    previous_end,
                    sizes: Some(PartSizes {
                        head: estimator.text(&system) + estimator.tools(definitions),
                        messages: planned
                            .messages
                            .iter()
                            .map(|m| estimator.message(m))
                            .collect(),
                    }),
                }
            };
            let request = ModelRequest {
                model: self.model.clone(),
                system,
                messages: planned.messages,
                tools: definitions.to_vec(),
                max_output_tokens: u32::try_from(
                    self.window().output_tokens(self.config.max_output_tokens),
                )
                .unwrap_or(u32::MAX),
                cache,
            };
            let on_event = |event: StreamEvent| match event {
                StreamEvent::TextDelta(text) => self.emit(seq, TurnEvent::TextDelta { text }),
            };
            let err = match self
                .provider
                .complete(&request, &on_event, &self.cancel)
                .await
            {
                Ok(mut response) => {
                    let replaced = self
                        .lock_history()
                        .planned()
                        .make_call_ids_unique(&mut response.tool_calls);
                    if replaced > 0 {
                        tracing::warn!(
                            replaced,
                            "the model repeated tool call ids; gave them new ones"
                        );
                    }
                    let warning = response
                        .usage
                        .and_then(|usage| self.provider.check_usage(&request, &usage));
                    return Ok(Some((response, planned.uncalibrated_tokens, warning)));
                }
                Err(err) if err.kind == crate::providers::ErrorKind::Cancelled => return Ok(None),
                Err(err) => err,
            };
            if !err.context_window_exceeded() {
                return Err(TurnError::Provider(err));
            }
            // Later requests of the session, in this turn or the next, plan under this estimate.
            self.append_item(Item::Event(Event::ContextWindowRejected {
                model: self.model.clone(),
                estimated_tokens: planned.estimated_tokens,
                reason: err.message.clone(),
                uncalibrated_tokens: Some(planned.uncalibrated_tokens),
            }))
            .await?;
            if rejection.is_some() {
                return Err(TurnError::ContextWindow(context_message(&err)));
            }
            let large = self.lock_history().planned().newest_large_group();
            if let Some(call_ids) = large {
                self.append_item(Item::Event(Event::ResultsShrunk {
                    call_ids: call_ids.clone(),
                    head_bytes: SHRUNK_HEAD_BYTES as u64,
                    reason: err.message.clone(),
                }))
                .await?;
                self.emit(
                    seq,
                    TurnEvent::ContextTrimmed(Trim::Shrunk {
                        call_ids,
                        head_bytes: SHRUNK_HEAD_BYTES as u64,
                    }),
                );
            }
            rejection = Some(err);
        }
    }

    /// Plans the next request from the session's history under the prompt budget (SPEC §6),
    /// with the report to record when it cuts something new and the estimator it planned with.
    fn plan_request(
        &self,
        system: &str,
        definitions: &[ToolDefinition],
        rejection: Option<&ProviderError>,
    ) -> Result<
        (
            budget::Plan,
            Option<budget::TrimReport>,
            budget::TokenEstimator,
        ),
        TurnError,
    > {
        let guard = self.lock_history();
        let history = guard.planned();
        let history_context = guard.context();
        let family = provider_family(&self.config);
        let estimator = history.estimator(&self.model, family);
        let window = self.window_with(history);
        let mut limit = self.budget_of(window);
        if let Some(rejected) = history.rejected_at(&self.model, &estimator) {
            limit = limit.below_rejection(rejected);
        }
        let policy = budget::Policy::of(
            self.config.budget_policy,
            self.config.compaction_low_water_percent,
        );
        let plan = history
            .plan_with(policy, system, definitions, limit, &estimator)
            .map_err(
            |err| match (rejection, err) {
                (Some(rejected), err @ BudgetError::TooLarge { .. }) => TurnError::ContextWindow(format!(
                    "The provider rejected the request as over the model's context window ({}); planned again under that size, {err}.",
                    rejected.message
                )),
                // The tool schemas alone do not fit: name the MCP server whose take most.
                (_, err @ BudgetError::TooLarge { part: budget::Part::ToolSchemas, .. }) => {
                    let hints: Vec<String> = instructions_hint(history_context)
                        .into_iter()
                        .chain(self.tools.budget_hint())
                        .collect();
                    TurnError::TooLarge(if hints.is_empty() {
                        format!("The request does not fit the prompt budget: {err}.")
                    } else {
                        format!("The request does not fit the prompt budget: {err}. {}.", hints.join(". "))
                    })
                }
                (_, err @ BudgetError::TooLarge { part: budget::Part::SystemPrompt, .. }) => {
                    TurnError::TooLarge(match instructions_hint(history_context) {
                        Some(hint) => format!("The request does not fit the prompt budget: {err}. {hint}."),
                        None => format!("The request does not fit the prompt budget: {err}."),
                    })
                }
                (_, err @ BudgetError::TooLarge { .. }) => {
                    TurnError::TooLarge(format!("The request does not fit the prompt budget: {err}."))
                }
                (_, err @ BudgetError::InvalidHistory { .. }) => TurnError::Unrepairable(err),
            },
        )?;
        let report = plan
            .report
            .as_ref()
            .filter(|report| history.is_new_trim(report))
            .cloned();
        Ok((plan, report, estimator))
    }

    /// The window this turn plans under: the user's setting, else what the engine found, else
    /// (when nothing answered) the window the session recorded for the model before, so a
    /// resumed session plans as it did while its server cannot be asked.
    /// The prompt budget of `window`: less the output it reserves and the margin.
    fn budget_of(&self, window: ModelWindow) -> Budget {
        Budget::new(
            window.tokens,
            window.output_tokens(self.config.max_output_tokens),
            window.margin_tokens(self.config.budget_margin_tokens),
        )
    }

    fn window(&self) -> ModelWindow {
        self.window_with(self.lock_history().planned())
    }

    fn window_with(&self, history: &budget::History) -> ModelWindow {
        let found = self.found_window;
        match (found.source, history.recorded_window(&self.model)) {
            (WindowSource::Default, Some(recorded)) if recorded.source != WindowSource::Config => {
                recorded
            }
            _ => found,
        }
    }

    /// Says which window the session plans under (one `context_window` event) at its first
    /// turn and whenever the window changes. A window pen found (from the server or the
    /// table) is recorded, so a resumed session plans under it while the server cannot be
    /// asked; the user's setting and the default are not (the config says them again).
    async fn record_window(&self, seq: &AtomicU64) -> Result<(), TurnError> {
        let window = self.window();
        let (recorded, first_turn) = {
            let history = self.lock_history();
            (
                history.planned().recorded_window(&self.model),
                history.last_seq() == 0,
            )
        };
        let found = !matches!(window.source, WindowSource::Config | WindowSource::Default);
        if recorded == Some(window) || (!found && !first_turn) {
            return Ok(());
        }
        if found {
            self.append_item(Item::Event(Event::ContextWindowFound {
                model: self.model.clone(),
                window,
            }))
            .await?;
        }
        self.emit(
            seq,
            TurnEvent::ContextWindow {
                model: self.model.clone(),
                window,
            },
        );
        Ok(())
    }

    /// Runs read-only calls of one answer concurrently: each is recorded as started in call
    /// order, all run at once on blocking threads, and their results are recorded in call order.
    /// They need no approval and change nothing, so Stop lets them finish (as a single file tool
    /// does) and they are recorded.
    async fn run_read_only(&self, calls: &[ToolCall], seq: &AtomicU64) -> Result<(), TurnError> {
        let mut runs = Vec::with_capacity(calls.len());
        let mut parsed = Vec::with_capacity(calls.len());
        for call in calls {
            let arguments = self.start_call(call, seq).await?;
            parsed.push(arguments.as_ref().ok().cloned());
            let host = Arc::clone(&self.tools);
            let name = call.name.clone();
            runs.push(async move {
                match arguments {
                    Ok(arguments) => {
                        tokio::task::spawn_blocking(move || host.call(&name, &arguments, None))
                            .await
                            .unwrap_or_else(|e| {
                                Err(ToolError::new(
                                    tools::ErrorCode::Io,
                                    format!("the tool failed: {e}"),
                                ))
                            })
                    }
                    Err(message) => {
                        Err(ToolError::new(tools::ErrorCode::InvalidArguments, message))
                    }
                }
            });
        }
        let results = futures::future::join_all(runs).await;
        for ((call, result), arguments) in calls.iter().zip(results).zip(parsed) {
            let text = match &result {
                Err(err)
                    if err.code == tools::ErrorCode::InvalidArguments
                        && serde_json::from_str::<Value>(&call.arguments).is_err() =>
                {
                    err.to_value().to_string()
                }
                _ => self.tools.observation(&result),
            };
            if result.is_ok() {
                self.record_output(call, arguments.as_ref(), &text, seq)
                    .await?;
            } else {
                self.record_result(call, &text, true, CallOutcome::Error, seq)
                    .await?;
            }
        }
        Ok(())
    }

    /// Records a call as about to run and says so; its parsed arguments, or why they are not
    /// JSON.
    async fn start_call(
        &self,
        call: &ToolCall,
        seq: &AtomicU64,
    ) -> Result<Result<Value, String>, TurnError> {
        let arguments: Result<Value, String> = serde_json::from_str(&call.arguments)
            .map_err(|e| format!("the arguments are not valid JSON ({e}); send a JSON object"));
        self.append_item(Item::ToolCall(CallStarted {
            call_id: call.id.clone(),
            name: call.name.clone(),
            arguments: arguments
                .as_ref()
                .ok()
                .cloned()
                .unwrap_or(Value::String(call.arguments.clone())),
        }))
        .await?;
        self.emit(
            seq,
            TurnEvent::ToolCallStarted {
                call_id: call.id.clone(),
                tool: call.name.clone(),
                arguments: arguments.as_ref().ok().cloned(),
            },
        );
        Ok(arguments)
    }

    /// Runs one tool call: records it, asks for approval where needed, runs it, records the
    /// result.
    async fn run_call(&self, call: &ToolCall, seq: &AtomicU64) -> Result<(), TurnError> {
        let arguments = match self.start_call(call, seq).await? {
            Ok(arguments) => arguments,
            Err(message) => {
                let text = ToolError::new(tools::ErrorCode::InvalidArguments, message)
                    .to_value()
                    .to_string();
                return self
                    .record_result(call, &text, true, CallOutcome::Error, seq)
                    .await;
            }
        };
        let spec = tools::registry::get(&call.name);
        let mut plan = None;
        let recorder = checkpoint::TurnRecorder {
            store: Arc::clone(&self.store),
            session_id: self.session_id.clone(),
            turn_id: self.turn_id.clone(),
            call_id: call.id.clone(),
            limit: self.config.checkpoint_store_bytes,
        };
        if self.needs_approval(&call.name) {
            let diff = if spec.is_some_and(|spec| spec.preview() == Preview::Diff) {
                match self.tools.plan_edit(&arguments) {
                    Ok(planned) => {
                        let diff = planned.diff().to_string();
                        plan = Some(planned);
                        Some(diff)
                    }
                    // An edit that cannot apply fails as it would have; no need to ask.
                    Err(err) => {
                        let text = self.tools.observation(&Err(err));
                        return self
                            .record_result(call, &text, true, CallOutcome::Error, seq)
                            .await;
                    }
                }
            } else {
                None
            };
            let request = ApprovalRequest {
                session_id: self.session_id.clone(),
                turn_id: self.turn_id.clone(),
                call_id: call.id.clone(),
                tool: call.name.clone(),
                arguments: arguments.clone(),
                not_revertible: match &plan {
                    Some(plan) => recorder.not_revertible(plan).await,
                    None => None,
                },
                diff,
            };
            self.emit(seq, TurnEvent::ApprovalRequested(request.clone()));
            let answer = tokio::select! {
                answer = self.approver.ask(request) => answer,
                _ = self.cancel.cancelled() => {
                    self.emit(seq, TurnEvent::ApprovalWithdrawn { call_id: call.id.clone() });
                    return self
                        .record_result(call, NOT_EXECUTED_STOPPED, true, CallOutcome::NotExecuted, seq)
                        .await;
                }
            };
            match answer {
                Ok((Decision::Allow, _)) => {}
                Ok((Decision::AllowForSession, _)) => {
                    // Stored, so the grant holds for the session's later turns, in this pen
                    // after a restart and in any other pen that runs the session.
                    if !self.lock_history().allows(&call.name) {
                        self.append_item(Item::Event(Event::ToolAllowedForSession {
                            tool: call.name.clone(),
                        }))
                        .await?;
                    }
                }
                Ok((Decision::Deny, reason)) => {
                    let text = match reason {
                        Some(reason) if !reason.trim().is_empty() => {
                            format!("{DENIED_BY_OWNER}. The owner said: {reason}")
                        }
                        _ => DENIED_BY_OWNER.to_string(),
                    };
                    return self
                        .record_result(call, &text, true, CallOutcome::Denied, seq)
                        .await;
                }
                Err(why) => {
                    let text = format!(
                        "approval no longer applies: the owner could not be asked ({why}); the call did not run. \
                         Ask again when the owner is back."
                    );
                    return self
                        .record_result(call, &text, true, CallOutcome::StaleAuthority, seq)
                        .await;
                }
            }
        }
        let approved_plan = plan.is_some();
        let arguments_seen = arguments.clone();
        let added = spec.is_none() && self.tools.added(&call.name).is_some();
        let result = match (plan, spec) {
            (None, None) if added => {
                self.tools
                    .run_added(&call.name, arguments, self.cancel.clone())
                    .await
            }
            (None, Some(spec)) if spec.execution() == Execution::Cancellable => {
                self.tools
                    .run_cancellable(spec, arguments, self.cancel.clone())
                    .await
            }
            (plan, _) => {
                let host = Arc::clone(&self.tools);
                let name = call.name.clone();
                tokio::task::spawn_blocking(move || match plan {
                    // The write is the plan whose diff the owner approved.
                    Some(plan) => host.apply_edit(plan, Some(&recorder)),
                    None => host.call(&name, &arguments, Some(&recorder)),
                })
                .await
                .unwrap_or_else(|e| {
                    Err(ToolError::new(
                        tools::ErrorCode::Io,
                        format!("the tool failed: {e}"),
                    ))
                })
            }
        };
        let (text, is_error, state) = match &result {
            Err(err) if err.code == tools::ErrorCode::Stopped => (
                OUTCOME_UNKNOWN_STOPPED.to_string() + "\n" + &err.message,
                true,
                CallOutcome::Unknown,
            ),
            Err(err) if approved_plan && err.code == tools::ErrorCode::Stale => (
                format!(
                    "approval no longer applies: the file changed after the owner approved the diff, so the edit did not run. \
                     Re-read the file and propose the edit again. ({})",
                    err.message
                ),
                true,
                CallOutcome::StaleAuthority,
            ),
            Err(_) => (
                self.tools.observe(&call.name, &result),
                true,
                CallOutcome::Error,
            ),
            Ok(_) => {
                let text = self.tools.observe(&call.name, &result);
                return self
                    .record_output(call, Some(&arguments_seen), &text, seq)
                    .await;
            }
        };
        self.record_result(call, &text, is_error, state, seq).await
    }

    fn needs_approval(&self, tool: &str) -> bool {
        // An MCP tool asks like pen_command unless `auto_approve` covers it (a server's
        // `mcp__server__*` only for tools it says only read) or the session allowed it.
        if tools::registry::get(tool).is_none()
            && let Some(info) = self.tools.added(tool)
        {
            let allowed = crate::mcp::auto_approved(&self.config.auto_approve, tool, &info)
                || self.lock_history().allows(tool);
            return !allowed;
        }
        let asks = tools::registry::get(tool).is_some_and(ToolSpec::needs_approval);
        let allowed =
            self.config.auto_approve.iter().any(|t| t == tool) || self.lock_history().allows(tool);
        asks && !allowed
    }

    async fn record_result(
        &self,
        call: &ToolCall,
        content: &str,
        is_error: bool,
        state: CallOutcome,
        seq: &AtomicU64,
    ) -> Result<(), TurnError> {
        self.append_item(Item::ToolResult(ToolResult {
            call_id: call.id.clone(),
            name: Some(call.name.clone()),
            content: content.to_string(),
            is_error,
            outcome: Some(state),
        }))
        .await?;
        let excerpt: String = content.chars().take(2_000).collect();
        self.emit(
            seq,
            TurnEvent::ToolCallFinished {
                call_id: call.id.clone(),
                tool: call.name.clone(),
                outcome: state,
                is_error,
                excerpt,
            },
        );
        Ok(())
    }

    fn lock_history(&self) -> std::sync::MutexGuard<'_, SessionHistory> {
        self.history.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Commits `item` (on a blocking thread) and adds it to the history.
    async fn append_item(&self, item: Item) -> Result<u64, SessionError> {
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
    fn report_usage(&self, usage: Usage, seq: &AtomicU64) {
        let turn = {
            let mut total = self.usage.lock().unwrap_or_else(|p| p.into_inner());
            total.get_or_insert_with(Usage::default).add(&usage);
            total.unwrap_or_default()
        };
        let session = self.lock_history().usage().unwrap_or_default();
        self.emit(
            seq,
            TurnEvent::Usage(RequestUsage {
                model: self.model.clone(),
                request: usage,
                turn,
                session,
            }),
        );
    }

    fn emit(&self, seq: &AtomicU64, event: TurnEvent) {
        (self.on_event)(AgentEvent {
            session_id: self.session_id.clone(),
            turn_id: self.turn_id.clone(),
            seq: seq.fetch_add(1, Ordering::SeqCst) + 1,
            event,
        });
    }
}

/// Runs blocking store work on a blocking thread.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, SessionError> + Send + 'static,
) -> Result<T, SessionError> {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|e| Err(SessionError::Task(e.to_string())))
}

/// What to add to a "does not fit" failure when the system part holds the project's
/// instruction files: which, how large, and the setting that bounds them.
fn instructions_hint(context: Option<&crate::transcript::SessionContext>) -> Option<String> {
    let files: Vec<String> = context?
        .instructions
        .iter()
        .filter(|f| f.refused.is_none())
        .map(|f| format!("{} ({} bytes sent)", f.path, f.text.len()))
        .collect();
    if files.is_empty() {
        return None;
    }
    Some(format!(
        "The system part holds the project's instruction files {}: shorten them, or lower instruction_bytes          (pen/setConfig) and start a new session (pen/newSession), since a session keeps the instructions it started with",
        files.join(", ")
    ))
}

/// The turn's last error after a second context-window rejection.
fn context_message(err: &ProviderError) -> String {
    format!(
        "The conversation is still over the model's context window after it was planned under the \
         rejected size and the newest large tool results were cut to 2 KiB ({}). Set \
         context_window_tokens to the model's real window, shorten the prompt, or start a new \
         session (pen/newSession) and carry over only what matters.",
        err.message
    )
}

/// The tool catalog as the provider is told it.
fn tool_definitions(catalog: &[tools::CatalogEntry]) -> Vec<ToolDefinition> {
    catalog
        .iter()
        .map(|entry| ToolDefinition {
            name: entry.name.clone(),
            description: entry.description.clone(),
            input_schema: entry.input_schema.clone(),
        })
        .collect()
}

/// The tool limits `config` implies with the pages a turn fits them to as it starts (SPEC §3),
/// for the catalog shown outside a turn (`pen tool --list`, `pen/listTools`): with the window
/// set, to the room its budget leaves after pen's system prompt and these tools' schemas. A
/// turn also counts the session's environment, its project instructions and its MCP tools, so
/// its pages may be a little smaller; with the window unset the turn fits them to the window it
/// finds, and these are the cap's pages.
pub fn catalog_limits(config: &Config) -> crate::limits::Limits {
    let limits = config.limits();
    let Some(window) = config.context_window_tokens else {
        return limits;
    };
    let budget = Budget::new(
        window,
        config.max_output_tokens,
        config.budget_margin_tokens,
    );
    let estimator = budget::TokenEstimator::new(provider_family(config), 1.0);
    let definitions = tool_definitions(&tools::registry::catalog(&limits));
    let room = budget.room(SYSTEM_PROMPT, &definitions, &estimator);
    limits.fitted_to_room(room)
}

/// The token-estimate family of the configured provider (an unset provider is OpenAI-style:
/// OpenAI itself or a local OpenAI-compatible server).
fn provider_family(config: &Config) -> ProviderKind {
    config.provider.unwrap_or(ProviderKind::OpenAi)
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

#[cfg(test)]
mod tests;
