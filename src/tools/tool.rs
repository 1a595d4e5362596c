//! The seam every tool of a turn is called through, a native tool or an MCP server's: what a
//! call of it is (whether it asks the owner, whether it may run beside other reads,
//! what it works on), how a call is prepared for the owner's approval, run, and observed.
//!
//! API boundary: the turn engine asks a [`Tool`] and never branches on how a tool runs. A tool
//! that blocks (file work, hashing, diffs) runs itself on a blocking thread; one that runs long
//! stops when the call's token fires; an MCP tool calls its server.

use super::subject::Subject;
use super::write::EditPlan;
use super::{ToolError, WriteRecorder};
use futures::future::BoxFuture;
use serde_json::Value;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// A call ready to run: its arguments and, for an edit prepared for approval, the plan whose
/// diff the owner is shown (running the call writes that plan, or fails `stale`).
#[derive(Debug)]
pub struct Prepared {
    arguments: Value,
    plan: Option<EditPlan>,
}

impl Prepared {
    /// A call run as its arguments say, with nothing planned ahead.
    pub fn arguments(arguments: Value) -> Prepared {
        Prepared {
            arguments,
            plan: None,
        }
    }

    /// An edit planned for the owner: running it writes `plan`.
    pub fn planned(arguments: Value, plan: EditPlan) -> Prepared {
        Prepared {
            arguments,
            plan: Some(plan),
        }
    }

    /// The plan the owner is shown, if the call was planned.
    pub fn plan(&self) -> Option<&EditPlan> {
        self.plan.as_ref()
    }

    pub fn into_parts(self) -> (Value, Option<EditPlan>) {
        (self.arguments, self.plan)
    }
}

/// Where a call records its writes before it makes them (the turn's checkpoints, wrapped by a
/// front end's watch); a call runs on its own task, so it holds its recorder.
pub type Recorder = Arc<dyn WriteRecorder + Send>;

/// One tool of a turn, as the engine calls it.
pub trait Tool: Send + Sync {
    /// Whether a call only reads, so it may run beside the other read-only calls of an answer.
    fn read_only(&self) -> bool;
    /// Whether a call asks the owner first under `auto_approve` (the session's "allow for
    /// session" grants are the engine's to add).
    fn needs_approval(&self, auto_approve: &[String]) -> bool;
    /// What a call with `arguments` works on.
    fn subject(&self, arguments: &Value) -> Subject;
    /// Whether a successful call sets the session's plan to the steps of its arguments
    /// (`tools::plan::steps`): pen_plan's registry entry says so; no MCP tool does.
    fn sets_plan(&self) -> bool {
        false
    }
    /// Prepares a call the owner is asked about: an edit is planned (on a blocking thread), so
    /// the owner sees the diff that running it writes. A call that cannot run fails here, and
    /// the owner is not asked.
    fn prepare(&self, arguments: Value) -> BoxFuture<'static, Result<Prepared, ToolError>> {
        Box::pin(async move { Ok(Prepared::arguments(arguments)) })
    }
    /// Runs a call to its end, or until `cancel` fires for a tool that stops (then it fails
    /// `stopped`); a tool that writes files records each write with `recorder` first.
    fn run(
        &self,
        call: Prepared,
        recorder: Option<Recorder>,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Value, ToolError>>;
    /// The observation the model reads for a call's result, capped as it is stored.
    fn observe(&self, result: &Result<Value, ToolError>) -> String;
}
