//! The engine of a tool call: each call of an answer is recorded as started, authorized (the
//! owner asked where it needs approval), executed, and its result recorded.

use super::turn::{Turn, TurnError, blocking};
use super::{
    ApprovalKind, ApprovalRequest, DENIED_BY_OWNER, Decision, NOT_EXECUTED_STOPPED,
    OUTCOME_UNKNOWN_STOPPED, TurnEvent, checkpoint, context,
};
use crate::providers::ToolCall;
use crate::tools::{self, Prepared, Tool, ToolError};
use crate::transcript::{CallOutcome, CallStarted, Event, Item, ToolResult};
use futures::future::BoxFuture;
use serde_json::Value;
use std::sync::Arc;

impl Turn {
    /// Runs read-only calls of one answer concurrently: each is recorded as started in call
    /// order, all run at once (on blocking threads, as their tools run), and their results are
    /// recorded in call order. They need no approval and change nothing, so Stop lets them
    /// finish (as a single file tool does) and they are recorded.
    pub(super) async fn run_read_only(
        &self,
        calls: &[(&ToolCall, Arc<dyn Tool>)],
    ) -> Result<(), TurnError> {
        let mut runs = Vec::with_capacity(calls.len());
        let mut parsed = Vec::with_capacity(calls.len());
        for (call, tool) in calls {
            let arguments = self.start_call(call).await?;
            parsed.push(arguments.as_ref().ok().cloned());
            let run: BoxFuture<'static, Result<Value, ToolError>> = match arguments {
                Ok(arguments) => {
                    tool.run(Prepared::arguments(arguments), None, self.cancel.clone())
                }
                Err(message) => {
                    let error = ToolError::new(tools::ErrorCode::InvalidArguments, message);
                    Box::pin(async move { Err(error) })
                }
            };
            runs.push(run);
        }
        let results = futures::future::join_all(runs).await;
        for (((call, tool), result), arguments) in calls.iter().zip(results).zip(parsed) {
            let text = match &result {
                Err(err)
                    if err.code == tools::ErrorCode::InvalidArguments
                        && serde_json::from_str::<Value>(&call.arguments).is_err() =>
                {
                    err.to_value().to_string()
                }
                _ => tool.observe(&result),
            };
            if result.is_ok() {
                self.record_output(call, arguments.as_ref(), &text).await?;
                if let Some(arguments) = &arguments {
                    self.record_plan(call, tool.as_ref(), arguments).await?;
                }
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
        let Some(tool) = self.tools.get(&call.name) else {
            let catalog = self.tools.catalog();
            let names = catalog.iter().map(|tool| tool.name.as_str());
            let unknown = Err(tools::registry::unknown_among(&call.name, names));
            let text = tools::observation(&unknown, &self.config.limits());
            return self
                .record_result(call, &text, true, CallOutcome::Error)
                .await;
        };
        let recorder = checkpoint::TurnRecorder {
            store: Arc::clone(&self.store),
            session_id: self.session_id.clone(),
            turn_id: self.turn_id.clone(),
            call_id: call.id.clone(),
            limit: self.config.checkpoint_store_bytes,
        };
        let Some(prepared) = self
            .authorize(call, arguments.clone(), tool.as_ref(), &recorder)
            .await?
        else {
            return Ok(());
        };
        let approved_plan = prepared.plan().is_some();
        let result = tool
            .run(prepared, Some(Arc::new(recorder)), self.cancel.clone())
            .await;
        self.record(call, tool.as_ref(), &arguments, approved_plan, result)
            .await
    }

    /// Asks the owner where the call needs approval (the call prepared first, so the owner
    /// sees an edit's diff). `None` when the call is answered already (denied, stopped, stale,
    /// or an edit that cannot apply); else the call to run.
    async fn authorize(
        &self,
        call: &ToolCall,
        arguments: Value,
        tool: &dyn Tool,
        recorder: &checkpoint::TurnRecorder,
    ) -> Result<Option<Prepared>, TurnError> {
        if !self.needs_approval(&call.name, tool) {
            return Ok(Some(Prepared::arguments(arguments)));
        }
        let prepared = match tool.prepare(arguments.clone()).await {
            Ok(prepared) => prepared,
            // A call that cannot run fails as it would have; no need to ask.
            Err(err) => {
                let text = tool.observe(&Err(err));
                self.record_result(call, &text, true, CallOutcome::Error)
                    .await?;
                return Ok(None);
            }
        };
        let request = ApprovalRequest {
            session_id: self.session_id.clone(),
            turn_id: self.turn_id.clone(),
            call_id: call.id.clone(),
            kind: ApprovalKind::ToolCall,
            tool: call.name.clone(),
            summary: tool.subject(&arguments).summary,
            arguments,
            not_revertible: match prepared.plan() {
                Some(plan) => recorder.not_revertible(plan).await,
                None => None,
            },
            diff: prepared.plan().map(|plan| plan.diff().to_string()),
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
        Ok(Some(prepared))
    }

    /// Records a call's result with the outcome it came to.
    async fn record(
        &self,
        call: &ToolCall,
        tool: &dyn Tool,
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
            Err(_) => (tool.observe(&result), true, CallOutcome::Error),
            Ok(_) => {
                let text = tool.observe(&result);
                self.record_output(call, Some(arguments), &text).await?;
                return self.record_plan(call, tool, arguments).await;
            }
        };
        self.record_result(call, &text, is_error, state).await
    }

    /// After a successful call of a tool that sets the plan: the plan its arguments set,
    /// recorded (after the result, so a reloaded session shows it and the prompt budget can
    /// carry it) and then sent to the front end whole.
    async fn record_plan(
        &self,
        call: &ToolCall,
        tool: &dyn Tool,
        arguments: &Value,
    ) -> Result<(), TurnError> {
        if !tool.sets_plan() {
            return Ok(());
        }
        // The call succeeded, so its arguments are a valid plan.
        let Ok(steps) = tools::plan::steps(arguments) else {
            return Ok(());
        };
        self.append_item(Item::Event(Event::Plan {
            call_id: call.id.clone(),
            steps: steps.clone(),
        }))
        .await?;
        self.emit(TurnEvent::Plan { steps });
        Ok(())
    }

    /// Whether a call of `tool` (named `name`) asks the owner: the tool says, under
    /// `auto_approve`, unless the session allowed it.
    fn needs_approval(&self, name: &str, tool: &dyn Tool) -> bool {
        tool.needs_approval(&self.config.auto_approve) && !self.lock_history().allows(name)
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
