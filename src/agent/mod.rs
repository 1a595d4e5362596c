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
//!   provider's reported usage; a plan that cuts something new is an event entry and a
//!   `context_trimmed` event.
//! - A context-window rejection never re-runs a tool: it is recorded (later requests plan under
//!   its estimate), the newest group of large results is cut (in the outbound request only; the
//!   decision is an event entry) and the request retried once.
//! - The loop never reads provider wording; backends classify their errors.

mod history;
mod host;
mod lease;
mod system_prompt;

pub use crate::providers::choice::{NO_PROVIDER, provider_from_config};
pub use history::{CONTEXT_TRIMMED, CONTEXT_WINDOW_REJECTED, SHRUNK_HEAD_BYTES};
pub use host::LocalTools;
pub use lease::TurnLease;
pub use system_prompt::SYSTEM_PROMPT;

use crate::budget::{self, Budget, BudgetError};
use crate::config::Config;
use crate::providers::{
    ModelRequest, ModelResponse, Provider, ProviderError, ProviderKind, StreamEvent, ToolCall,
    ToolDefinition,
};
use crate::session::{EntryKind, LeaseOwner, NewEntry, SessionError, SessionStore};
use crate::tools::{self, ToolError};
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio_util::sync::CancellationToken;

/// Result texts the model reads for calls that did not run normally. Each is distinct, so the
/// model (and the owner reading the transcript) can tell them apart.
pub const NOT_EXECUTED_STOPPED: &str =
    "not executed (stopped): the owner stopped the turn before this call ran";
pub const DENIED_BY_OWNER: &str =
    "denied by the owner: do not retry this call without asking the owner first";
pub const OUTCOME_UNKNOWN_STOPPED: &str =
    "stopped while running: outcome unknown — inspect the state before retrying";

/// Why a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    EndTurn,
    Cancelled,
    MaxTurnRequests,
    Error,
}

/// What `pen/prompt` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnOutcome {
    pub stop_reason: StopReason,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// What kind of failure `last_error` is, when a client should act on it rather than show it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<TurnErrorKind>,
}

/// A failure a client acts on (the editors offer a new session for both).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnErrorKind {
    /// The session's history is inconsistent in a way that answering its unanswered calls
    /// cannot repair (a repeated call id, a result without its call): it can never run a turn
    /// again, and the owner should start a new session.
    HistoryUnrepairable,
    /// Another pen is running a turn in the session.
    SessionBusy,
}

/// The end of `last_error` for a history that cannot be repaired.
pub const HISTORY_UNREPAIRABLE_ADVICE: &str = "pen cannot repair this by answering the calls left without a result, so no turn can \
     run in this session again: start a new session (pen/newSession) and carry over what matters";

/// The owner's answer to an approval request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Allow,
    AllowForSession,
    Deny,
}

/// What the owner is asked to approve.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRequest {
    pub session_id: String,
    pub turn_id: String,
    pub call_id: String,
    pub tool: String,
    pub arguments: Value,
    /// For pen_edit: the unified diff the edit would make.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
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
    /// Runs a synchronous native tool (called on a blocking thread).
    fn call(&self, name: &str, arguments: &Value) -> Result<Value, ToolError>;
    /// Runs pen_command, killed when `cancel` fires.
    fn command(
        &self,
        arguments: Value,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Value, ToolError>>;
    /// The diff pen_edit would make and the file hash it was computed against, for approval.
    fn preview_edit(&self, arguments: &Value) -> Result<(String, String), ToolError>;
    /// Caps an observation as it is stored.
    fn observation(&self, result: &Result<Value, ToolError>) -> String;
}

/// A progress event of a turn, as `pen/event` sends it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentEvent {
    pub session_id: String,
    pub turn_id: String,
    pub seq: u64,
    pub kind: String,
    pub data: Value,
}

/// Everything one turn uses.
pub struct Turn {
    pub store: Arc<SessionStore>,
    pub session_id: String,
    pub turn_id: String,
    pub provider: Arc<dyn Provider>,
    pub model: String,
    pub config: Config,
    pub tools: Arc<dyn ToolHost>,
    pub approver: Arc<dyn Approver>,
    /// Tools the owner allowed for the rest of the session; shared across turns.
    pub session_allowed: Arc<std::sync::Mutex<Vec<String>>>,
    pub on_event: Arc<dyn Fn(AgentEvent) + Send + Sync>,
    pub cancel: CancellationToken,
}

/// A failure that ends the turn with `error`.
#[derive(Debug, thiserror::Error)]
enum TurnError {
    #[error("the session store failed: {0}")]
    Store(#[from] SessionError),
    #[error("{0}")]
    Provider(ProviderError),
    #[error("{0}")]
    Message(String),
    /// The history is inconsistent beyond what recovery repairs.
    #[error("{0}; {HISTORY_UNREPAIRABLE_ADVICE}")]
    Unrepairable(BudgetError),
}

impl TurnError {
    fn kind(&self) -> Option<TurnErrorKind> {
        match self {
            TurnError::Unrepairable(_) => Some(TurnErrorKind::HistoryUnrepairable),
            _ => None,
        }
    }
}

impl Turn {
    /// Runs the turn for `prompt` to its end under the session's lease, which it takes first:
    /// while another pen runs a turn in the session, it ends at once with `error` (kind
    /// `session_busy`) and writes nothing.
    pub async fn run(self, prompt: &str) -> TurnOutcome {
        match TurnLease::acquire(Arc::clone(&self.store), &self.session_id).await {
            Ok(lease) => self.run_leased(lease, prompt).await,
            Err(err) => TurnOutcome {
                stop_reason: StopReason::Error,
                error_kind: matches!(err, SessionError::LeaseHeld { .. })
                    .then_some(TurnErrorKind::SessionBusy),
                last_error: Some(err.to_string()),
            },
        }
    }

    /// Runs the turn for `prompt` to its end under `lease` (this session's, taken by the
    /// caller), and releases the lease when the turn has ended, however it ends. A lease lost
    /// while the turn runs stops the turn.
    pub async fn run_leased(self, lease: TurnLease, prompt: &str) -> TurnOutcome {
        let lost = lease.lost();
        let cancel = self.cancel.clone();
        let stopper = tokio::spawn(async move {
            lost.cancelled().await;
            cancel.cancel();
        });
        let outcome = self.run_to_end(prompt).await;
        stopper.abort();
        lease.release().await;
        outcome
    }

    async fn run_to_end(&self, prompt: &str) -> TurnOutcome {
        let seq = AtomicU64::new(0);
        let outcome = match self.run_inner(prompt, &seq).await {
            Ok(reason) => TurnOutcome {
                stop_reason: reason,
                last_error: None,
                error_kind: None,
            },
            Err(err) => TurnOutcome {
                stop_reason: StopReason::Error,
                error_kind: err.kind(),
                last_error: Some(err.to_string()),
            },
        };
        let _ = self.append(EntryKind::Event, json!({"type": "turn_ended", "stop_reason": outcome.stop_reason, "last_error": outcome.last_error, "error_kind": outcome.error_kind}));
        self.emit(
            &seq,
            "turn_ended",
            json!({"stopReason": outcome.stop_reason, "lastError": outcome.last_error, "errorKind": outcome.error_kind}),
        );
        outcome
    }

    async fn run_inner(&self, prompt: &str, seq: &AtomicU64) -> Result<StopReason, TurnError> {
        // Every call a crashed pen left without a result is answered before anything else
        // (under the lease, so no live process is running any of them). This is also the repair
        // of an inconsistent history: the planner takes these late answers into their groups.
        self.store
            .recover_interrupted(&self.session_id, LeaseOwner::this_process())?;
        self.append(EntryKind::UserPrompt, json!({"text": prompt}))?;
        let definitions = tool_definitions();
        let mut requests = 0u64;
        loop {
            if self.cancel.is_cancelled() {
                return Ok(StopReason::Cancelled);
            }
            if requests >= self.config.max_turn_requests {
                return Ok(StopReason::MaxTurnRequests);
            }
            requests += 1;
            let (response, estimated) = match self.request_with_recovery(&definitions, seq).await? {
                Some(answer) => answer,
                None => return Ok(StopReason::Cancelled),
            };
            let stopped = self.cancel.is_cancelled();
            // The answer is kept even when Stop came while it was on its way. The model and the
            // uncalibrated estimate of its request calibrate later estimates against `usage`.
            let mut payload = json!({"text": response.text, "tool_calls": response.tool_calls, "finish_reason": response.finish_reason, "usage": response.usage, "model": self.model, "estimated_input_tokens": estimated});
            // Reasoning blocks go back to the provider on later requests (Anthropic and Bedrock
            // require the thinking of a tool-use loop); stored only when there are some.
            if !response.reasoning.is_empty() {
                payload["reasoning"] = json!(response.reasoning);
            }
            self.append(EntryKind::AssistantMessage, payload)?;
            if response.tool_calls.is_empty() {
                return Ok(if stopped {
                    StopReason::Cancelled
                } else {
                    StopReason::EndTurn
                });
            }
            for (index, call) in response.tool_calls.iter().enumerate() {
                if self.cancel.is_cancelled() {
                    for rest in &response.tool_calls[index..] {
                        self.record_result(rest, NOT_EXECUTED_STOPPED, true, "not_executed", seq)?;
                    }
                    return Ok(StopReason::Cancelled);
                }
                self.run_call(call, seq).await?;
            }
        }
    }

    /// One provider request, planned under the prompt budget; on a context-window rejection the
    /// newest large results are cut, the budget drops under the rejected estimate, and the
    /// request is retried once. `None` when Stop cancelled the request.
    async fn request_with_recovery(
        &self,
        definitions: &[ToolDefinition],
        seq: &AtomicU64,
    ) -> Result<Option<(ModelResponse, u64)>, TurnError> {
        let mut rejection: Option<ProviderError> = None;
        loop {
            let entries = self.all_entries()?;
            let planned = self.plan_request(&entries, definitions, seq, rejection.as_ref())?;
            let request = ModelRequest {
                model: self.model.clone(),
                system: SYSTEM_PROMPT.to_string(),
                messages: planned.messages,
                tools: definitions.to_vec(),
                max_output_tokens: u32::try_from(self.config.max_output_tokens).unwrap_or(u32::MAX),
            };
            let on_event = |event: StreamEvent| match event {
                StreamEvent::TextDelta(text) => self.emit(seq, "text_delta", json!({"text": text})),
            };
            let err = match self
                .provider
                .complete(&request, &on_event, &self.cancel)
                .await
            {
                Ok(mut response) => {
                    let replaced =
                        history::make_call_ids_unique(&entries, &mut response.tool_calls);
                    if replaced > 0 {
                        tracing::warn!(
                            replaced,
                            "the model repeated tool call ids; gave them new ones"
                        );
                    }
                    return Ok(Some((response, planned.uncalibrated_tokens)));
                }
                Err(err) if err.kind == crate::providers::ErrorKind::Cancelled => return Ok(None),
                Err(err) => err,
            };
            if !err.context_window_exceeded() {
                return Err(TurnError::Provider(err));
            }
            // Later requests of the session, in this turn or the next, plan under this estimate.
            self.append(
                EntryKind::Event,
                json!({"type": history::CONTEXT_WINDOW_REJECTED, "model": self.model, "estimated_tokens": planned.estimated_tokens, "reason": err.message}),
            )?;
            if rejection.is_some() {
                return Err(TurnError::Message(context_message(&err)));
            }
            if let Some(call_ids) = history::newest_large_group(&entries) {
                self.append(
                    EntryKind::Event,
                    json!({"type": "results_shrunk", "call_ids": call_ids, "head_bytes": SHRUNK_HEAD_BYTES, "reason": err.message}),
                )?;
                self.emit(seq, "context_trimmed", json!({"reason": "context_window_exceeded", "shrunkCallIds": call_ids, "headBytes": SHRUNK_HEAD_BYTES}));
            }
            rejection = Some(err);
        }
    }

    /// Plans the next request from the session's entries under the prompt budget (SPEC §6),
    /// recording a report that cuts something new.
    fn plan_request(
        &self,
        entries: &[crate::session::Entry],
        definitions: &[ToolDefinition],
        seq: &AtomicU64,
        rejection: Option<&ProviderError>,
    ) -> Result<budget::Plan, TurnError> {
        let family = provider_family(&self.config);
        let estimator = history::estimator(entries, &self.model, family);
        let mut limit = Budget::new(
            self.config.context_window_tokens,
            self.config.max_output_tokens,
            self.config.budget_margin_tokens,
        );
        if let Some(rejected) = history::rejected_at(entries, &self.model) {
            limit = limit.below_rejection(rejected);
        }
        let plan = budget::plan(entries, SYSTEM_PROMPT, definitions, limit, &estimator).map_err(
            |err| match (rejection, err) {
                (Some(rejected), err @ BudgetError::TooLarge { .. }) => TurnError::Message(format!(
                    "The provider rejected the request as over the model's context window ({}); planned again under that size, {err}.",
                    rejected.message
                )),
                (_, err @ BudgetError::TooLarge { .. }) => {
                    TurnError::Message(format!("The request does not fit the prompt budget: {err}."))
                }
                (_, err @ BudgetError::InvalidHistory { .. }) => TurnError::Unrepairable(err),
            },
        )?;
        if let Some(report) = &plan.report
            && history::is_new_trim(entries, report)
        {
            self.append(EntryKind::Event, history::trim_entry(report))?;
            self.emit(seq, "context_trimmed", history::trim_event(report));
        }
        Ok(plan)
    }

    /// Runs one tool call: records it, asks for approval where needed, runs it, records the
    /// result.
    async fn run_call(&self, call: &ToolCall, seq: &AtomicU64) -> Result<(), TurnError> {
        let arguments: Result<Value, String> = serde_json::from_str(&call.arguments)
            .map_err(|e| format!("the arguments are not valid JSON ({e}); send a JSON object"));
        self.append(
            EntryKind::ToolCall,
            json!({"call_id": call.id, "name": call.name, "arguments": arguments.as_ref().ok().cloned().unwrap_or(Value::String(call.arguments.clone()))}),
        )?;
        self.emit(
            seq,
            "tool_call_started",
            json!({"callId": call.id, "tool": call.name, "arguments": arguments.as_ref().ok()}),
        );
        let arguments = match arguments {
            Ok(arguments) => arguments,
            Err(message) => {
                let text = ToolError::new(tools::ErrorCode::InvalidArguments, message)
                    .to_value()
                    .to_string();
                return self.record_result(call, &text, true, "error", seq);
            }
        };
        let mut expected_hash = None;
        if self.needs_approval(&call.name) {
            let diff = if call.name == "pen_edit" {
                match self.tools.preview_edit(&arguments) {
                    Ok((diff, hash)) => {
                        expected_hash = Some(hash);
                        Some(diff)
                    }
                    // An edit that cannot apply fails as it would have; no need to ask.
                    Err(err) => {
                        let text = self.tools.observation(&Err(err));
                        return self.record_result(call, &text, true, "error", seq);
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
                diff,
            };
            self.emit(
                seq,
                "approval_requested",
                serde_json::to_value(&request).unwrap_or(Value::Null),
            );
            let answer = tokio::select! {
                answer = self.approver.ask(request) => answer,
                _ = self.cancel.cancelled() => {
                    self.emit(seq, "approval_withdrawn", json!({"callId": call.id}));
                    return self.record_result(call, NOT_EXECUTED_STOPPED, true, "not_executed", seq);
                }
            };
            match answer {
                Ok((Decision::Allow, _)) => {}
                Ok((Decision::AllowForSession, _)) => {
                    if let Ok(mut allowed) = self.session_allowed.lock() {
                        allowed.push(call.name.clone());
                    }
                }
                Ok((Decision::Deny, reason)) => {
                    let text = match reason {
                        Some(reason) if !reason.trim().is_empty() => {
                            format!("{DENIED_BY_OWNER}. The owner said: {reason}")
                        }
                        _ => DENIED_BY_OWNER.to_string(),
                    };
                    return self.record_result(call, &text, true, "denied", seq);
                }
                Err(why) => {
                    let text = format!(
                        "approval no longer applies: the owner could not be asked ({why}); the call did not run. \
                         Ask again when the owner is back."
                    );
                    return self.record_result(call, &text, true, "stale_authority", seq);
                }
            }
        }
        let result = if call.name == "pen_command" {
            self.tools.command(arguments, self.cancel.clone()).await
        } else {
            let mut arguments = arguments;
            if let (Some(hash), Some(object)) = (&expected_hash, arguments.as_object_mut()) {
                // The edit must still apply to the text whose diff the owner approved.
                object.insert("expected_hash".into(), json!(hash));
            }
            let host = Arc::clone(&self.tools);
            let name = call.name.clone();
            tokio::task::spawn_blocking(move || host.call(&name, &arguments))
                .await
                .unwrap_or_else(|e| {
                    Err(ToolError::new(
                        tools::ErrorCode::Io,
                        format!("the tool failed: {e}"),
                    ))
                })
        };
        let (text, is_error, state) = match &result {
            Err(err) if err.code == tools::ErrorCode::Stopped => (
                OUTCOME_UNKNOWN_STOPPED.to_string() + "\n" + &err.message,
                true,
                "unknown",
            ),
            Err(err) if expected_hash.is_some() && err.code == tools::ErrorCode::Stale => (
                format!(
                    "approval no longer applies: the file changed after the owner approved the diff, so the edit did not run. \
                     Re-read the file and propose the edit again. ({})",
                    err.message
                ),
                true,
                "stale_authority",
            ),
            Err(_) => (self.tools.observation(&result), true, "error"),
            Ok(_) => (self.tools.observation(&result), false, "done"),
        };
        self.record_result(call, &text, is_error, state, seq)
    }

    fn needs_approval(&self, tool: &str) -> bool {
        let asks = matches!(tool, "pen_create" | "pen_edit" | "pen_command");
        let allowed = self.config.auto_approve.iter().any(|t| t == tool)
            || self
                .session_allowed
                .lock()
                .is_ok_and(|allowed| allowed.iter().any(|t| t == tool));
        asks && !allowed
    }

    fn record_result(
        &self,
        call: &ToolCall,
        content: &str,
        is_error: bool,
        state: &str,
        seq: &AtomicU64,
    ) -> Result<(), TurnError> {
        self.append(
            EntryKind::ToolResult,
            json!({"call_id": call.id, "name": call.name, "content": content, "is_error": is_error, "status": state}),
        )?;
        let excerpt: String = content.chars().take(2_000).collect();
        self.emit(seq, "tool_call_finished", json!({"callId": call.id, "tool": call.name, "state": state, "isError": is_error, "excerpt": excerpt}));
        Ok(())
    }

    fn append(&self, kind: EntryKind, payload: Value) -> Result<u64, SessionError> {
        self.store.append(
            &self.session_id,
            &NewEntry {
                kind,
                turn_id: Some(self.turn_id.clone()),
                payload,
            },
        )
    }

    fn all_entries(&self) -> Result<Vec<crate::session::Entry>, SessionError> {
        let mut entries = Vec::new();
        let mut after = None;
        loop {
            let page = self.store.transcript(
                &self.session_id,
                after,
                crate::limits::MAX_TRANSCRIPT_PAGE_ENTRIES,
            )?;
            entries.extend(page.entries);
            match page.next_after_seq {
                Some(next) => after = Some(next),
                None => return Ok(entries),
            }
        }
    }

    fn emit(&self, seq: &AtomicU64, kind: &str, data: Value) {
        (self.on_event)(AgentEvent {
            session_id: self.session_id.clone(),
            turn_id: self.turn_id.clone(),
            seq: seq.fetch_add(1, Ordering::SeqCst) + 1,
            kind: kind.to_string(),
            data,
        });
    }
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
fn tool_definitions() -> Vec<ToolDefinition> {
    tools::catalog()
        .into_iter()
        .map(|spec| ToolDefinition {
            name: spec.name.to_string(),
            description: spec.description.to_string(),
            input_schema: spec.input_schema,
        })
        .collect()
}

/// The token-estimate family of the configured provider (an unset provider is OpenAI-style:
/// OpenAI itself or a local OpenAI-compatible server).
fn provider_family(config: &Config) -> ProviderKind {
    config.provider.unwrap_or(ProviderKind::OpenAi)
}

#[cfg(test)]
mod tests;
