//! The session's history as the turn engine keeps it: the planner's incremental state
//! ([`crate::budget::History`]: the grouped exchanges, the ids used, the newest large results,
//! the calibration, the rejected sizes, the last trimming report) and the tools the owner allowed
//! for the session.
//!
//! The transcript is never rewritten: decisions that change what the model is sent (results cut
//! after a context-window rejection, a lower budget) are event entries, applied every time a
//! request is planned, so later requests keep them and the same transcript always gives the same
//! messages.

use crate::budget::History;
use crate::session::Entry;
use crate::transcript::{Event, Item, Record};

pub use crate::budget::SHRUNK_HEAD_BYTES;
pub use crate::transcript::event_type::{CONTEXT_TRIMMED, CONTEXT_WINDOW_REJECTED};

/// A session's history: write-through, so the turn adds each entry once it is committed, and
/// entries another process appended are read with [`SessionHistory::sync`]. It holds what the
/// planner keeps, not the entries themselves, so a request costs O(what it sends).
#[derive(Debug, Default)]
pub struct SessionHistory {
    planned: History,
    grants: std::collections::BTreeSet<String>,
    last_seq: u64,
    /// False once an append may have committed without reaching the history.
    in_step: bool,
    /// The messages of the session's last provider request in this process: where the next
    /// request keeps a cache breakpoint while they are still its prefix. Not stored; a new pen
    /// starts without it (the next request then only loses that one breakpoint).
    last_request: Vec<crate::providers::Message>,
    /// The usage every answer of the session reported, summed.
    usage: Option<crate::providers::Usage>,
    /// The notes of the reverts since the last prompt, for the next one.
    revert_note: Option<String>,
    /// A revert that started and has not ended (its turns and files): a crash stopped it.
    open_revert: Option<(Vec<String>, Vec<String>)>,
    /// The session's recorded instructions and environment (its first `session_context`).
    context: Option<crate::transcript::SessionContext>,
    /// The root instruction files as the session last recorded them (the context's, or the
    /// latest `instructions_changed`).
    root_instructions: Vec<crate::transcript::InstructionFile>,
    /// The nested instruction files already delivered (or refused), by path.
    delivered: std::collections::BTreeSet<String>,
    /// The instruction budget the session's files used so far, in bytes.
    instruction_bytes: usize,
    /// Whether the session's last prompt was made in plan mode (it starts with
    /// [`crate::mode::PLAN_NOTE`]), so the next one outside it says plan mode ended.
    last_prompt_in_plan_mode: bool,
}

impl SessionHistory {
    /// The seq of the last entry held (0 for none).
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// The messages of the session's last provider request in this process.
    pub fn last_request(&self) -> &[crate::providers::Message] {
        &self.last_request
    }

    /// Remembers the messages of the request just sent.
    pub fn set_last_request(&mut self, messages: Vec<crate::providers::Message>) {
        self.last_request = messages;
    }

    /// The usage every answer of the session reported, summed; `None` when none reported any.
    pub fn usage(&self) -> Option<crate::providers::Usage> {
        self.usage
    }

    /// The session's recorded instructions and environment, if recorded.
    pub fn context(&self) -> Option<&crate::transcript::SessionContext> {
        self.context.as_ref()
    }

    /// The root instruction files as last recorded.
    pub fn root_instructions(&self) -> &[crate::transcript::InstructionFile] {
        &self.root_instructions
    }

    /// The nested instruction files delivered so far, by path.
    pub fn delivered(&self) -> &std::collections::BTreeSet<String> {
        &self.delivered
    }

    /// The bytes of the instruction budget the session's files used.
    pub fn instruction_bytes(&self) -> usize {
        self.instruction_bytes
    }

    /// The planner's state of the session.
    pub fn planned(&self) -> &History {
        &self.planned
    }

    /// What the model must be told with the next prompt: the reverts since the last one.
    pub fn revert_note(&self) -> Option<&str> {
        self.revert_note.as_deref()
    }

    /// Whether the session's last prompt was made in plan mode.
    pub fn last_prompt_in_plan_mode(&self) -> bool {
        self.last_prompt_in_plan_mode
    }

    /// The turns and files of a revert that started and never ended (a crash stopped it).
    pub fn open_revert(&self) -> Option<&(Vec<String>, Vec<String>)> {
        self.open_revert.as_ref()
    }

    /// Whether the owner allowed `tool` for the rest of the session.
    pub fn allows(&self, tool: &str) -> bool {
        self.grants.contains(tool)
    }

    /// Whether the history holds every entry the store had when it was last synced and
    /// every entry appended since through it.
    pub fn in_step(&self) -> bool {
        self.in_step
    }

    /// Marks the history as possibly behind the store.
    pub fn lost_step(&mut self) {
        self.in_step = false;
    }

    /// Adds a committed entry; entries must come in seq order without gaps.
    pub fn push(&mut self, record: &Record) {
        if record.seq != self.last_seq + 1 {
            self.in_step = false;
            return;
        }
        match &record.item {
            Item::Event(Event::ToolAllowedForSession { tool }) => {
                self.grants.insert(tool.clone());
            }
            Item::Event(Event::RevertStarted { turns, files }) => {
                self.open_revert = Some((turns.clone(), files.clone()));
            }
            Item::Event(Event::FilesReverted { note, .. }) => {
                self.open_revert = None;
                // Several reverts before the next prompt are all told.
                match &mut self.revert_note {
                    Some(told) => {
                        told.push('\n');
                        told.push_str(note);
                    }
                    None => self.revert_note = Some(note.clone()),
                }
            }
            Item::UserPrompt { text } => {
                self.revert_note = None;
                self.last_prompt_in_plan_mode = text.starts_with(crate::mode::PLAN_NOTE);
            }
            Item::Event(Event::SessionContext(context)) if self.context.is_none() => {
                self.root_instructions = context.instructions.clone();
                self.instruction_bytes += context
                    .instructions
                    .iter()
                    .map(|f| f.text.len())
                    .sum::<usize>();
                self.context = Some(context.clone());
            }
            Item::Event(Event::InstructionsChanged { instructions }) => {
                self.root_instructions = instructions.clone();
            }
            Item::Event(Event::InstructionsDelivered { files, .. }) => {
                for file in files {
                    self.delivered.insert(file.path.clone());
                    self.instruction_bytes += file.text.len();
                }
            }
            Item::AssistantMessage(message) => {
                if let Some(usage) = &message.usage {
                    self.usage
                        .get_or_insert_with(crate::providers::Usage::default)
                        .add(usage);
                }
            }
            _ => {}
        }
        self.planned.push(record);
        self.last_seq = record.seq;
    }

    fn push_entry(&mut self, entry: &Entry) {
        self.push(&entry.record());
    }

    /// Reads what the store holds after the last entry held (blocking: call it on a blocking
    /// thread). Afterwards the history is in step with the store.
    pub fn sync(
        &mut self,
        store: &crate::session::SessionStore,
        session_id: &str,
    ) -> Result<(), crate::session::SessionError> {
        if !self.in_step {
            *self = SessionHistory::default();
        }
        self.in_step = true;
        // An append-only store read in seq order has no gap; if one is seen anyway, the whole
        // session is read again, once.
        for _ in 0..2 {
            loop {
                let page = store.transcript(
                    session_id,
                    Some(self.last_seq()),
                    crate::limits::MAX_TRANSCRIPT_PAGE_ENTRIES,
                )?;
                let more = page.next_after_seq.is_some();
                for entry in &page.entries {
                    self.push_entry(entry);
                }
                if !self.in_step || !more {
                    break;
                }
            }
            if self.in_step {
                return Ok(());
            }
            *self = SessionHistory {
                in_step: true,
                ..SessionHistory::default()
            };
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::transcript_messages;
    use crate::providers::Message;
    use crate::session::EntryKind;

    /// The newest large group not yet cut, as the history answers it.
    fn newest_large_group(entries: &[Entry]) -> Option<Vec<String>> {
        let records: Vec<Record> = entries.iter().map(Entry::record).collect();
        History::of(&records).newest_large_group()
    }

    /// The untouched messages, or the history error as text.
    fn build_messages(entries: &[Entry]) -> Result<Vec<Message>, String> {
        transcript_messages(entries).map_err(|e| e.to_string())
    }
    use serde_json::{Value, json};

    fn entry(seq: u64, kind: EntryKind, payload: Value) -> Entry {
        Entry {
            seq,
            kind,
            turn_id: None,
            payload,
            created_at: 0,
        }
    }

    fn call(id: &str) -> Value {
        json!({"id": id, "name": "pen_read", "arguments": "{}"})
    }

    #[test]
    fn a_tool_round_becomes_messages_in_order() {
        let entries = vec![
            entry(1, EntryKind::UserPrompt, json!({"text": "hi"})),
            entry(
                2,
                EntryKind::AssistantMessage,
                json!({"text": "", "tool_calls": [call("a"), call("b")]}),
            ),
            entry(3, EntryKind::ToolCall, json!({"call_id": "a"})),
            entry(
                4,
                EntryKind::ToolResult,
                json!({"call_id": "a", "content": "A", "is_error": false}),
            ),
            entry(
                5,
                EntryKind::ToolResult,
                json!({"call_id": "b", "content": "B", "is_error": true}),
            ),
            entry(
                6,
                EntryKind::AssistantMessage,
                json!({"text": "done", "tool_calls": []}),
            ),
        ];
        let messages = build_messages(&entries).unwrap();
        assert_eq!(messages.len(), 5);
        assert_eq!(
            messages[3],
            Message::ToolResult {
                call_id: "b".into(),
                content: "B".into(),
                is_error: true
            }
        );
    }

    #[test]
    fn inconsistent_histories_are_refused_naming_the_entry() {
        let unanswered = vec![
            entry(
                1,
                EntryKind::AssistantMessage,
                json!({"text": "", "tool_calls": [call("a")]}),
            ),
            entry(2, EntryKind::UserPrompt, json!({"text": "next"})),
        ];
        assert!(build_messages(&unanswered).unwrap_err().contains("entry 2"));
        let orphan = vec![entry(
            1,
            EntryKind::ToolResult,
            json!({"call_id": "x", "content": ""}),
        )];
        assert!(build_messages(&orphan).unwrap_err().contains("entry 1"));
        let duplicate = vec![
            entry(
                1,
                EntryKind::AssistantMessage,
                json!({"text": "", "tool_calls": [call("a")]}),
            ),
            entry(
                2,
                EntryKind::ToolResult,
                json!({"call_id": "a", "content": ""}),
            ),
            entry(
                3,
                EntryKind::AssistantMessage,
                json!({"text": "", "tool_calls": [call("a")]}),
            ),
        ];
        assert!(build_messages(&duplicate).unwrap_err().contains("repeats"));
    }

    #[test]
    fn the_newest_large_group_is_cut_in_the_request_only() {
        let big = "x".repeat(10_000);
        let mut entries = vec![
            entry(
                1,
                EntryKind::AssistantMessage,
                json!({"text": "", "tool_calls": [call("old")]}),
            ),
            entry(
                2,
                EntryKind::ToolResult,
                json!({"call_id": "old", "content": big}),
            ),
            entry(
                3,
                EntryKind::AssistantMessage,
                json!({"text": "", "tool_calls": [call("small"), call("new")]}),
            ),
            entry(
                4,
                EntryKind::ToolResult,
                json!({"call_id": "small", "content": "s"}),
            ),
            entry(
                5,
                EntryKind::ToolResult,
                json!({"call_id": "new", "content": big}),
            ),
        ];
        assert_eq!(newest_large_group(&entries), Some(vec!["new".to_string()]));
        entries.push(entry(
            6,
            EntryKind::Event,
            json!({"type": "results_shrunk", "call_ids": ["new"]}),
        ));
        let messages = build_messages(&entries).unwrap();
        let Message::ToolResult { content, .. } = &messages[4] else {
            panic!()
        };
        assert!(content.starts_with(&"x".repeat(2048)));
        assert!(content.contains("the full result was 10000 bytes"));
        assert!(content.len() < 2_300);
        // The next rejection reaches back to the older group.
        assert_eq!(newest_large_group(&entries), Some(vec!["old".to_string()]));
        entries.push(entry(
            7,
            EntryKind::Event,
            json!({"type": "results_shrunk", "call_ids": ["old"]}),
        ));
        assert_eq!(newest_large_group(&entries), None);
    }
}
