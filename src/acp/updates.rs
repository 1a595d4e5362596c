//! How pen's turn events and stored transcript entries read as ACP `session/update`s: tool
//! kinds, titles, locations, statuses and content. Pure functions over the typed events; the
//! same mapping serves a live turn and the replay of `session/load`.

use super::host::FileChange;
use super::wire::{
    ContentBlock, PlanEntry, PlanEntryPriority, PlanEntryStatus, SessionUpdate, ToolCall,
    ToolCallContent, ToolCallLocation, ToolCallStatus, ToolCallUpdate, ToolKind,
};
use crate::limits::{ACP_RESULT_EXCERPT_BYTES, MAX_SESSION_TITLE_BYTES};
use crate::tools::plan::{PlanStep, StepStatus};
use crate::tools::registry;
use crate::transcript::{CallOutcome, Item, Record};
use serde_json::Value;
use std::path::Path;

/// ACP's kind of a call of `tool`: pen's [`registry::ToolKind`], mapped.
pub fn tool_kind(tool: &str) -> ToolKind {
    match registry::kind_of(tool) {
        registry::ToolKind::Read => ToolKind::Read,
        registry::ToolKind::Edit => ToolKind::Edit,
        registry::ToolKind::Search => ToolKind::Search,
        registry::ToolKind::Execute => ToolKind::Execute,
        registry::ToolKind::Other => ToolKind::Other,
    }
}

/// What the client shows for a call: the tool and what it works on (its tool's subject).
pub fn title(tool: &str, arguments: Option<&Value>) -> String {
    let title = registry::subject_of(tool, arguments).title(tool);
    crate::text::cut(&title, MAX_SESSION_TITLE_BYTES).to_string()
}

/// The files a call works on, absolute (beneath `root` when the model named them relative),
/// the first with the line the call starts at.
pub fn locations(tool: &str, arguments: Option<&Value>, root: &Path) -> Vec<ToolCallLocation> {
    let subject = registry::subject_of(tool, arguments);
    subject
        .paths
        .iter()
        .enumerate()
        .map(|(at, path)| ToolCallLocation {
            path: root.join(path).to_string_lossy().into_owned(),
            line: if at == 0 { subject.line } else { None },
        })
        .collect()
}

pub fn tool_call(call_id: &str, tool: &str, arguments: Option<&Value>, root: &Path) -> ToolCall {
    ToolCall {
        tool_call_id: call_id.to_string(),
        title: title(tool, arguments),
        kind: tool_kind(tool),
        status: ToolCallStatus::Pending,
        locations: locations(tool, arguments, root),
        raw_input: arguments.cloned(),
    }
}

pub fn status(outcome: CallOutcome) -> ToolCallStatus {
    match outcome {
        CallOutcome::Done => ToolCallStatus::Completed,
        _ => ToolCallStatus::Failed,
    }
}

pub fn diff(change: FileChange) -> ToolCallContent {
    ToolCallContent::Diff {
        path: change.absolute.to_string_lossy().into_owned(),
        old_text: change.old_text,
        new_text: change.new_text,
    }
}

fn text_content(text: &str) -> ToolCallContent {
    ToolCallContent::Content {
        content: ContentBlock::text(crate::text::cut_with_note(
            text,
            ACP_RESULT_EXCERPT_BYTES,
            "\n… (cut for display; the model read the whole result)",
        )),
    }
}

/// The update that ends a call: its status and, for an edit that was written, the diff of the
/// whole file; else the head of its result.
pub fn finished(
    call_id: &str,
    outcome: CallOutcome,
    excerpt: &str,
    change: Option<FileChange>,
) -> ToolCallUpdate {
    let content = match change {
        Some(change) if outcome == CallOutcome::Done => vec![diff(change), text_content(excerpt)],
        _ => vec![text_content(excerpt)],
    };
    ToolCallUpdate {
        tool_call_id: call_id.to_string(),
        status: Some(status(outcome)),
        content: Some(content),
        ..Default::default()
    }
}

/// The `plan` update of a plan a call set: its steps in order, each of medium priority (pen's
/// plans have none), done mapped to ACP's `completed`.
pub fn plan(steps: &[PlanStep]) -> SessionUpdate {
    SessionUpdate::Plan {
        entries: steps
            .iter()
            .map(|step| PlanEntry {
                content: step.text.clone(),
                priority: PlanEntryPriority::Medium,
                status: match step.status {
                    StepStatus::Pending => PlanEntryStatus::Pending,
                    StepStatus::InProgress => PlanEntryStatus::InProgress,
                    StepStatus::Done => PlanEntryStatus::Completed,
                },
            })
            .collect(),
    }
}

/// The updates that replay one stored entry in `session/load`: the prompt, the answer text,
/// each call the answer made, each result, each plan. Other events (turn ends, trims, grants)
/// replay as nothing.
pub fn replayed(record: &Record, root: &Path) -> Vec<SessionUpdate> {
    match &record.item {
        Item::UserPrompt { text } => vec![SessionUpdate::UserMessageChunk {
            content: ContentBlock::text(text.clone()),
        }],
        Item::AssistantMessage(message) => {
            let mut updates = Vec::new();
            if !message.text.is_empty() {
                updates.push(SessionUpdate::AgentMessageChunk {
                    content: ContentBlock::text(message.text.clone()),
                });
            }
            for call in &message.tool_calls {
                let arguments = serde_json::from_str::<Value>(&call.arguments).ok();
                updates.push(SessionUpdate::ToolCall(tool_call(
                    &call.id,
                    &call.name,
                    arguments.as_ref(),
                    root,
                )));
            }
            updates
        }
        Item::ToolResult(result) => {
            let outcome = result.outcome.unwrap_or(if result.is_error {
                CallOutcome::Error
            } else {
                CallOutcome::Done
            });
            vec![SessionUpdate::ToolCallUpdate(finished(
                &result.call_id,
                outcome,
                &result.content,
                None,
            ))]
        }
        Item::Event(crate::transcript::Event::Plan { steps, .. }) => vec![plan(steps)],
        Item::ToolCall(_) | Item::Event(_) => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::ToolCall as ModelCall;
    use crate::transcript::{AssistantMessage, ToolResult};
    use serde_json::json;

    #[test]
    fn calls_have_a_kind_a_title_and_a_location() {
        let arguments = json!({"path": "src/a.rs", "start_line": 40});
        let call = tool_call("c1", "pen_read", Some(&arguments), Path::new("/w"));
        assert_eq!(call.kind, ToolKind::Read);
        assert_eq!(call.title, "pen_read src/a.rs from line 40");
        assert_eq!(
            call.locations,
            [ToolCallLocation {
                path: "/w/src/a.rs".into(),
                line: Some(40)
            }]
        );
        let command = json!({"command": "cargo test"});
        let call = tool_call("c2", "pen_command", Some(&command), Path::new("/w"));
        assert_eq!(
            (call.kind, call.title.as_str()),
            (ToolKind::Execute, "pen_command cargo test")
        );
        assert!(call.locations.is_empty());
        assert_eq!(tool_kind("pen_search"), ToolKind::Search);
        assert_eq!(tool_kind("pen_create"), ToolKind::Edit);
        assert_eq!(tool_kind("mcp_thing"), ToolKind::Other);
    }

    #[test]
    fn a_replay_reads_prompts_answers_calls_and_results() {
        let root = Path::new("/w");
        let record = |item| Record {
            seq: 1,
            turn_id: None,
            created_at: 0,
            item,
        };
        let prompt = replayed(&record(Item::UserPrompt { text: "hi".into() }), root);
        assert_eq!(
            prompt,
            [SessionUpdate::UserMessageChunk {
                content: ContentBlock::text("hi")
            }]
        );
        let answer = replayed(
            &record(Item::AssistantMessage(AssistantMessage {
                text: "reading".into(),
                tool_calls: vec![ModelCall {
                    id: "c1".into(),
                    name: "pen_read".into(),
                    arguments: r#"{"path":"a"}"#.into(),
                }],
                ..Default::default()
            })),
            root,
        );
        assert_eq!(answer.len(), 2);
        assert!(matches!(&answer[1], SessionUpdate::ToolCall(call) if call.tool_call_id == "c1"));
        let long = "x".repeat(ACP_RESULT_EXCERPT_BYTES * 2);
        let result = replayed(
            &record(Item::ToolResult(ToolResult {
                call_id: "c1".into(),
                name: Some("pen_read".into()),
                content: long,
                is_error: false,
                outcome: Some(CallOutcome::Done),
            })),
            root,
        );
        let [SessionUpdate::ToolCallUpdate(update)] = &result[..] else {
            panic!("{result:?}")
        };
        assert_eq!(update.status, Some(ToolCallStatus::Completed));
        let Some(
            [
                ToolCallContent::Content {
                    content: ContentBlock::Text { text },
                },
            ],
        ) = update.content.as_deref()
        else {
            panic!("{update:?}")
        };
        assert!(text.len() < ACP_RESULT_EXCERPT_BYTES + 100, "bounded");
    }

    #[test]
    fn a_plan_is_one_update_with_its_entries_in_order() {
        let steps = [
            ("read", StepStatus::Done),
            ("fix", StepStatus::InProgress),
            ("test", StepStatus::Pending),
        ]
        .map(|(text, status)| PlanStep {
            text: text.into(),
            status,
        });
        let record = Record {
            seq: 4,
            turn_id: None,
            created_at: 0,
            item: Item::Event(crate::transcript::Event::Plan {
                call_id: "c".into(),
                steps: steps.to_vec(),
            }),
        };
        let replay = replayed(&record, Path::new("/w"));
        assert_eq!(replay, [plan(&steps)]);
        assert_eq!(
            serde_json::to_value(&replay[0]).unwrap(),
            json!({"sessionUpdate": "plan", "entries": [
                {"content": "read", "priority": "medium", "status": "completed"},
                {"content": "fix", "priority": "medium", "status": "in_progress"},
                {"content": "test", "priority": "medium", "status": "pending"},
            ]})
        );
    }
}
