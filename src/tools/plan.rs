//! pen_plan: the model's task list for the session, which the owner sees. A call sets the whole
//! list (steps in order, each pending, in progress or done); it changes no file and never asks.
//!
//! The tool only checks the list and answers with a short count: the turn records the list it
//! set (a `plan` entry, because the registry says the tool sets the plan), sends it to the front
//! ends, and the prompt budget carries the latest one past a compaction. Nothing here keeps
//! state: the session's plan is the last one recorded.

use super::subject::Subject;
use super::{ErrorCode, ToolContext, ToolDoc, ToolError, parse_arguments};
use crate::limits::{Limits, MAX_PLAN_STEP_BYTES, MAX_PLAN_STEPS};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Where a step of the plan stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    Pending,
    InProgress,
    Done,
}

impl StepStatus {
    /// The snake_case name, as the model writes it and the transcript stores it.
    pub fn as_str(self) -> &'static str {
        match self {
            StepStatus::Pending => "pending",
            StepStatus::InProgress => "in_progress",
            StepStatus::Done => "done",
        }
    }

    /// A checklist mark for a line of text (`pen run`): `[ ]`, `[>]`, `[x]`.
    pub fn mark(self) -> &'static str {
        match self {
            StepStatus::Pending => "[ ]",
            StepStatus::InProgress => "[>]",
            StepStatus::Done => "[x]",
        }
    }
}

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanStep {
    pub text: String,
    pub status: StepStatus,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    steps: Vec<PlanStep>,
}

/// What a call sets: `3 steps`.
pub fn subject(arguments: &Value) -> Subject {
    let summary = match arguments.get("steps").and_then(Value::as_array) {
        Some(steps) if steps.len() == 1 => "1 step".to_string(),
        Some(steps) => format!("{} steps", steps.len()),
        None => String::new(),
    };
    Subject {
        summary,
        ..Subject::default()
    }
}

pub fn spec(_limits: &Limits) -> ToolDoc {
    ToolDoc {
        description: format!(
            "Set your plan, shown to the user: all steps each call, in order. For multi-step work; \
             update as you go. At most {MAX_PLAN_STEPS} steps of {MAX_PLAN_STEP_BYTES} bytes, one \
             in_progress."
        ),
        input_schema: json!({
            "type": "object",
            "properties": {
                "steps": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "text": {"type": "string"},
                            "status": {"enum": ["pending", "in_progress", "done"]}
                        },
                        "required": ["text", "status"],
                        "additionalProperties": false
                    }
                }
            },
            "required": ["steps"],
            "additionalProperties": false
        }),
    }
}

/// The plan a call's arguments set, checked: at most [`MAX_PLAN_STEPS`] steps, each one line of
/// text of at most [`MAX_PLAN_STEP_BYTES`], at most one in progress. An empty list clears the
/// plan.
pub fn steps(arguments: &Value) -> Result<Vec<PlanStep>, ToolError> {
    let Args { steps } = parse_arguments(arguments)?;
    let invalid = |message: String| Err(ToolError::new(ErrorCode::InvalidArguments, message));
    if steps.len() > MAX_PLAN_STEPS {
        return invalid(format!(
            "the plan has {} steps; a plan holds at most {MAX_PLAN_STEPS}: merge small steps",
            steps.len()
        ));
    }
    for (index, step) in steps.iter().enumerate() {
        let number = index + 1;
        if step.text.trim().is_empty() {
            return invalid(format!(
                "step {number} has no text; say in a line what the step does"
            ));
        }
        if step.text.len() > MAX_PLAN_STEP_BYTES {
            return invalid(format!(
                "step {number} is {} bytes; a step is at most {MAX_PLAN_STEP_BYTES}: say it in one line",
                step.text.len()
            ));
        }
        if step.text.chars().any(char::is_control) {
            return invalid(format!(
                "step {number} holds a line break or control character; a step is one line"
            ));
        }
    }
    let in_progress: Vec<String> = steps
        .iter()
        .enumerate()
        .filter(|(_, step)| step.status == StepStatus::InProgress)
        .map(|(index, _)| (index + 1).to_string())
        .collect();
    if in_progress.len() > 1 {
        return invalid(format!(
            "steps {} are all in_progress; one step at most is in progress: mark the others pending or done",
            in_progress.join(", ")
        ));
    }
    Ok(steps)
}

/// The short answer the model reads: `plan: 2 of 5 done`.
pub fn summary(steps: &[PlanStep]) -> String {
    if steps.is_empty() {
        return "plan cleared".to_string();
    }
    let done = steps
        .iter()
        .filter(|step| step.status == StepStatus::Done)
        .count();
    format!("plan: {done} of {} done", steps.len())
}

pub fn run(arguments: &Value, _ctx: &ToolContext) -> Result<Value, ToolError> {
    let steps = steps(arguments)?;
    Ok(json!({ "plan": summary(&steps) }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(text: &str, status: &str) -> Value {
        json!({"text": text, "status": status})
    }

    fn error(arguments: Value) -> String {
        let err = steps(&arguments).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidArguments);
        err.message
    }

    #[test]
    fn a_plan_is_its_steps_in_order_and_the_answer_counts_them() {
        let arguments = json!({"steps": [
            step("read the code", "done"),
            step("fix the bug", "in_progress"),
            step("run the tests", "pending"),
        ]});
        let plan = steps(&arguments).unwrap();
        let statuses: Vec<StepStatus> = plan.iter().map(|s| s.status).collect();
        assert_eq!(
            statuses,
            [
                StepStatus::Done,
                StepStatus::InProgress,
                StepStatus::Pending
            ]
        );
        assert_eq!(plan[1].text, "fix the bug");
        assert_eq!(summary(&plan), "plan: 1 of 3 done");
        assert_eq!(summary(&[]), "plan cleared");
        assert_eq!(subject(&arguments).summary, "3 steps");
        assert_eq!(subject(&json!({"steps": 5})).summary, "");
    }

    #[test]
    fn bad_steps_are_refused_with_what_to_do() {
        let wrong = error(json!({"steps": [step("a", "doing")]}));
        assert!(wrong.contains("`steps[0].status`"), "{wrong}");
        assert!(wrong.contains("in_progress"), "{wrong}");
        assert!(error(json!({"steps": [step("  ", "pending")]})).contains("step 1 has no text"));
        let long = "x".repeat(MAX_PLAN_STEP_BYTES + 1);
        assert!(
            error(json!({"steps": [step("a", "done"), step(&long, "pending")]}))
                .contains("step 2 is 301 bytes")
        );
        assert!(steps(&json!({"steps": [step(&"é".repeat(150), "pending")]})).is_ok());
        assert!(
            error(json!({"steps": [step("a\nb", "pending")]})).contains("one line"),
            "a step is one line of a checklist"
        );
        let many: Vec<Value> = (0..=MAX_PLAN_STEPS).map(|_| step("s", "pending")).collect();
        assert!(error(json!({ "steps": many })).contains("51 steps"));
        let exactly: Vec<Value> = (0..MAX_PLAN_STEPS).map(|_| step("s", "pending")).collect();
        assert!(steps(&json!({ "steps": exactly })).is_ok());
        let two = error(json!({"steps": [
            step("a", "in_progress"), step("b", "done"), step("c", "in_progress")
        ]}));
        assert!(two.contains("steps 1, 3 are all in_progress"), "{two}");
        assert!(error(json!({"steps": [{"text": "a"}]})).contains("missing field `status`"));
        assert!(error(json!({})).contains("missing field `steps`"));
        assert!(error(json!({"steps": [], "extra": 1})).contains("unknown field"));
        assert_eq!(steps(&json!({"steps": []})).unwrap(), []);
    }
}
