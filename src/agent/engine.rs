//! The engine of a tool call: each call of an answer is recorded as started, authorized (the
//! owner asked where it needs approval), executed, and its result recorded.

use super::turn::{Turn, TurnError, blocking};
use super::{
    ApprovalKind, ApprovalRequest, DENIED_BY_OWNER, Decision, NOT_EXECUTED_STOPPED,
    OUTCOME_UNKNOWN_STOPPED, TurnEvent, checkpoint, context,
};
use crate::providers::ToolCall;
use crate::tools::registry::{Execution, Preview, ToolSpec};
use crate::tools::write::EditPlan;
use crate::tools::{self, ToolError};
use crate::transcript::{CallOutcome, CallStarted, Event, Item, ToolResult};
use serde_json::Value;
use std::sync::Arc;

impl Turn {
    /// Runs read-only calls of one answer concurrently: each is recorded as started in call
    /// order, all run at once on blocking threads, and their results are recorded in call order.
    /// They need no approval and change nothing, so Stop lets them finish (as a single file tool
    /// does) and they are recorded.
    pub(super) async fn run_read_only(&self, calls: &[ToolCall]) -> Result<(), TurnError> {
        let mut runs = Vec::with_capacity(calls.len());
        let mut parsed = Vec::with_capacity(calls.len());
        for call in calls {
            let arguments = self.start_call(call).await?;
            parsed.push(arguments.as_ref().ok().cloned());
            let host = Arc::clone(&self.tools);
            let name = call.name.clone();
            runs.push(async move {
                match arguments {
                    Ok(arguments) => tool_thread(move || host.call(&name, &arguments, None)).await,
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
                self.record_output(call, arguments.as_ref(), &text).await?;
            } else {
                self.record_result(call, &text, true, CallOutcome::Error)
                    .await?;
            }
        }
        Ok(())
    }

    /// Records a call as about to run and says so; its parsed arguments, or why they are not
    /// JSON.
    pub(super) async fn start_call(
        &self,
        call: &ToolCall,
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
        self.emit(TurnEvent::ToolCallStarted {
            call_id: call.id.clone(),
            tool: call.name.clone(),
            arguments: arguments.as_ref().ok().cloned(),
        });
        Ok(arguments)
    }

    /// Runs one tool call: records it, asks for approval where needed, runs it, records the
    /// result.
    pub(super) async fn run_call(&self, call: &ToolCall) -> Result<(), TurnError> {
        let arguments = match self.start_call(call).await? {
            Ok(arguments) => arguments,
            Err(message) => {
                let text = ToolError::new(tools::ErrorCode::InvalidArguments, message)
                    .to_value()
                    .to_string();
                return self
                    .record_result(call, &text, true, CallOutcome::Error)
                    .await;
            }
        };
        let spec = tools::registry::get(&call.name);
        let recorder = checkpoint::TurnRecorder {
            store: Arc::clone(&self.store),
            session_id: self.session_id.clone(),
            turn_id: self.turn_id.clone(),
            call_id: call.id.clone(),
            limit: self.config.checkpoint_store_bytes,
        };
        let Some(plan) = self.authorize(call, &arguments, spec, &recorder).await? else {
            return Ok(());
        };
        let approved_plan = plan.is_some();
        let arguments_seen = arguments.clone();
        let result = self.execute(call, arguments, plan, spec, recorder).await;
        self.record(call, &arguments_seen, approved_plan, result)
            .await
    }

    /// Asks the owner where the call needs approval (an edit planned first, so the owner sees
    /// its diff). `None` when the call is answered already (denied, stopped, stale, or an edit
    /// that cannot apply); else the approved plan, if any, to run.
    async fn authorize(
        &self,
        call: &ToolCall,
        arguments: &Value,
        spec: Option<&'static ToolSpec>,
        recorder: &checkpoint::TurnRecorder,
    ) -> Result<Option<Option<EditPlan>>, TurnError> {
        let mut plan = None;
        if self.needs_approval(&call.name) {
            let diff = if spec.is_some_and(|spec| spec.preview() == Preview::Diff) {
                // Planning reads the file (up to 16 MiB), hashes it and diffs it: a blocking thread.
                let host = Arc::clone(&self.tools);
                let planned = {
                    let arguments = arguments.clone();
                    tool_thread(move || host.plan_edit(&arguments)).await
                };
                match planned {
                    Ok(planned) => {
                        let diff = planned.diff().to_string();
                        plan = Some(planned);
                        Some(diff)
                    }
                    // An edit that cannot apply fails as it would have; no need to ask.
                    Err(err) => {
                        let text = self.tools.observation(&Err(err));
                        self.record_result(call, &text, true, CallOutcome::Error)
                            .await?;
                        return Ok(None);
                    }
                }
            } else {
                None
            };
            let request = ApprovalRequest {
                session_id: self.session_id.clone(),
                turn_id: self.turn_id.clone(),
                call_id: call.id.clone(),
                kind: ApprovalKind::ToolCall,
                tool: call.name.clone(),
                summary: tools::registry::subject_of(&call.name, Some(arguments)).summary,
                arguments: arguments.clone(),
                not_revertible: match &plan {
                    Some(plan) => recorder.not_revertible(plan).await,
                    None => None,
                },
                diff,
            };
            self.emit(TurnEvent::ApprovalRequested(request.clone()));
            let answer = tokio::select! {
                answer = self.approver.ask(request) => answer,
                _ = self.cancel.cancelled() => {
                    self.emit(TurnEvent::ApprovalWithdrawn { call_id: call.id.clone() });
                    self.record_result(call, NOT_EXECUTED_STOPPED, true, CallOutcome::NotExecuted)
                        .await?;
                    return Ok(None);
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
                    self.record_result(call, &text, true, CallOutcome::Denied)
                        .await?;
                    return Ok(None);
                }
                Err(why) => {
                    let text = format!(
                        "approval no longer applies: the owner could not be asked ({why}); the call did not run. \
                         Ask again when the owner is back."
                    );
                    self.record_result(call, &text, true, CallOutcome::StaleAuthority)
                        .await?;
                    return Ok(None);
                }
            }
        }
        Ok(Some(plan))
    }

    /// Runs an authorized call: an approved plan is the write it makes.
    async fn execute(
        &self,
        call: &ToolCall,
        arguments: Value,
        plan: Option<EditPlan>,
        spec: Option<&'static ToolSpec>,
        recorder: checkpoint::TurnRecorder,
    ) -> Result<Value, ToolError> {
        let added = spec.is_none() && self.tools.added(&call.name).is_some();
        match (plan, spec) {
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
                tool_thread(move || match plan {
                    // The write is the plan whose diff the owner approved.
                    Some(plan) => host.apply_edit(plan, Some(&recorder)),
                    None => host.call(&name, &arguments, Some(&recorder)),
                })
                .await
            }
        }
    }

    /// Records a call's result with the outcome it came to.
    async fn record(
        &self,
        call: &ToolCall,
        arguments: &Value,
        approved_plan: bool,
        result: Result<Value, ToolError>,
    ) -> Result<(), TurnError> {
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
                return self.record_output(call, Some(arguments), &text).await;
            }
        };
        self.record_result(call, &text, is_error, state).await
    }

    pub(super) fn needs_approval(&self, tool: &str) -> bool {
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

    pub(super) async fn record_result(
        &self,
        call: &ToolCall,
        content: &str,
        is_error: bool,
        state: CallOutcome,
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
        self.emit(TurnEvent::ToolCallFinished {
            call_id: call.id.clone(),
            tool: call.name.clone(),
            outcome: state,
            is_error,
            excerpt,
        });
        Ok(())
    }

    /// Records a call's successful result with the nested instruction files it reaches
    /// appended (then recorded as delivered, so no later call, in this pen or a resumed one,
    /// delivers them again).
    pub(super) async fn record_output(
        &self,
        call: &ToolCall,
        arguments: Option<&Value>,
        content: &str,
    ) -> Result<(), TurnError> {
        let nested = match arguments {
            Some(arguments) => self.nested_instructions(call, arguments).await,
            None => None,
        };
        let Some((appended, files)) = nested else {
            return self
                .record_result(call, content, false, CallOutcome::Done)
                .await;
        };
        let text = format!("{content}{appended}");
        self.record_result(call, &text, false, CallOutcome::Done)
            .await?;
        self.append_item(Item::Event(Event::InstructionsDelivered {
            call_id: call.id.clone(),
            files,
        }))
        .await?;
        Ok(())
    }

    /// The nested instruction files a successful call reaches that the session has not been
    /// given: the text to append to its result, and the files to record as delivered.
    pub(super) async fn nested_instructions(
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
}

/// Runs a tool's blocking work (file reads and writes, hashing, diffs) on a blocking thread.
async fn tool_thread<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    tokio::task::spawn_blocking(work).await.unwrap_or_else(|e| {
        Err(ToolError::new(
            tools::ErrorCode::Io,
            format!("the tool failed: {e}"),
        ))
    })
}
