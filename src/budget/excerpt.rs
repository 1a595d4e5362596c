//! The labelled excerpt that replaces an old tool group: what was called, with which bounded
//! arguments, and the head of what came back, quoted as historical data.
//!
//! Every field is a JSON string literal (escaped), so text inside a result cannot close the
//! quotation or pass itself off as the excerpt's own label.
//!
//! An excerpt is built from pieces (the group's words, the opening label, each call's head and
//! result) whose sizes the planner keeps as records arrive, so it knows what an excerpt costs
//! without building the excerpts it will not send.

use super::estimate::quarter_tokens;
use crate::limits::{EXCERPT_ARGUMENT_BYTES, EXCERPT_RESULT_BYTES};
use serde_json::Value;
use std::borrow::Cow;

/// The label every excerpt opens with. It says what the model must not infer from it.
const OPENING: &str = "[earlier tool call, excerpted by the prompt budget (policy 3). Quoted historical data: \
     not an executable call and not a claim of success. Reread current files before acting on it.]";

/// Policy 4's label: policy 3's with its version, the same length (the sizes the planner keeps
/// are those of either).
const OPENING_4: &str = "[earlier tool call, excerpted by the prompt budget (policy 4). Quoted historical data: \
     not an executable call and not a claim of success. Reread current files before acting on it.]";

/// The note that stands for the oldest excerpts of the newest exchange when even they did not
/// fit. The report names the calls.
const OMITTED_NOTE: &str = "[earlier tool calls of this exchange are left out by the prompt budget \
     (policy 3) to fit the context window; their results are in the session transcript, not here. \
     Reread current files before acting on them.]";

/// Policy 4's note, the same length as policy 3's.
const OMITTED_NOTE_4: &str = "[earlier tool calls of this exchange are left out by the prompt budget \
     (policy 4) to fit the context window; their results are in the session transcript, not here. \
     Reread current files before acting on them.]";

/// The plan the model last set before a compaction, carried after the compacted part so it
/// stays in view (its pen_plan call may be excerpted, left out or dropped): the opening label,
/// then one line per step. Each step is a JSON string literal, like an excerpt's fields.
pub(super) fn carried_plan(steps: &[crate::tools::plan::PlanStep]) -> String {
    let mut out = String::from(
        "[your plan as you last set it before the prompt budget compacted the conversation above \
         (a later pen_plan call replaces it):",
    );
    if steps.is_empty() {
        out.push_str(" cleared");
    }
    for step in steps {
        out.push('\n');
        out.push_str(step.status.mark());
        out.push(' ');
        out.push_str(&quoted(&step.text));
    }
    out.push(']');
    out
}

fn opening(policy_version: u32) -> &'static str {
    if policy_version == 4 {
        OPENING_4
    } else {
        OPENING
    }
}

/// The omitted note of a policy version.
pub(super) fn omitted_note(policy_version: u32) -> &'static str {
    if policy_version == 4 {
        OMITTED_NOTE_4
    } else {
        OMITTED_NOTE
    }
}

/// `text` cut to `max` bytes on a character boundary, saying how long it was.
fn cut(text: &str, max: usize) -> Cow<'_, str> {
    crate::text::cut_with_note(text, max, format_args!("…[cut; {} bytes]", text.len()))
}

/// The arguments with each string, and the JSON of each larger value, cut to the argument bound.
/// Arguments that are not a JSON object are cut as raw text.
fn bounded_arguments(arguments: &str) -> String {
    match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(fields)) => {
            let fields: serde_json::Map<String, Value> = fields
                .into_iter()
                .map(|(name, value)| {
                    let value = match value {
                        Value::String(text) => {
                            Value::String(cut(&text, EXCERPT_ARGUMENT_BYTES).into_owned())
                        }
                        // Numbers and flags keep their type; a large array or object is cut
                        // as its JSON text.
                        other => {
                            let json = other.to_string();
                            if json.len() <= EXCERPT_ARGUMENT_BYTES {
                                other
                            } else {
                                Value::String(cut(&json, EXCERPT_ARGUMENT_BYTES).into_owned())
                            }
                        }
                    };
                    (name, value)
                })
                .collect();
            Value::Object(fields).to_string()
        }
        _ => quoted(&cut(arguments, EXCERPT_ARGUMENT_BYTES)),
    }
}

fn quoted(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_default()
}

/// Appends `text` as a JSON string literal. (Writing to a Vec cannot fail.)
fn push_quoted(out: &mut Vec<u8>, text: &str) {
    let _ = serde_json::to_writer(&mut *out, text);
}

/// The call half of a call's excerpt: its name, id and bounded arguments.
pub(super) fn push_call_head(out: &mut Vec<u8>, name: &str, id: &str, arguments: &str) {
    out.extend_from_slice(b"tool: ");
    push_quoted(out, name);
    out.extend_from_slice(b"\ncall_id: ");
    push_quoted(out, id);
    out.extend_from_slice(b"\narguments: ");
    out.extend_from_slice(bounded_arguments(arguments).as_bytes());
}

/// The result half of a call's excerpt: the outcome word (`done`, `denied`…; from the error
/// flag when none was recorded) and the head of the content.
pub(super) fn push_call_result(
    out: &mut Vec<u8>,
    content: &str,
    is_error: bool,
    status: Option<&str>,
) {
    let outcome = match (status, is_error) {
        (Some(status), _) => status,
        (None, true) => "error",
        (None, false) => "done",
    };
    out.extend_from_slice(b"\nresult (");
    out.extend_from_slice(outcome.as_bytes());
    out.extend_from_slice(b"): ");
    push_quoted(out, &cut(content, EXCERPT_RESULT_BYTES));
}

/// The size in quarter tokens of what `push` appends.
pub(super) fn piece_quarters(push: impl FnOnce(&mut Vec<u8>)) -> u64 {
    let mut out = Vec::new();
    push(&mut out);
    quarter_tokens(&out)
}

/// The size in quarter tokens of a group's excerpt, from its words and the sizes of its calls'
/// pieces (head and result, each as [`piece_quarters`] gives): the same as
/// `quarter_tokens(group_text(..))`, since the estimate counts bytes.
pub(super) fn group_quarters(text: &str, pieces: impl Iterator<Item = u64>) -> u64 {
    let words = if text.is_empty() {
        0
    } else {
        quarter_tokens(text.as_bytes()) + 2
    };
    // Each call opens with a newline.
    words + quarter_tokens(OPENING.as_bytes()) + pieces.map(|piece| 1 + piece).sum::<u64>()
}

/// The excerpt of a whole group: the assistant's own words, then each call in order, each
/// written by `push_call` (its head, then its result).
pub(super) fn group_text<C>(
    policy_version: u32,
    text: &str,
    calls: &[C],
    mut push_call: impl FnMut(&mut Vec<u8>, &C),
) -> String {
    let mut out: Vec<u8> = Vec::with_capacity(OPENING.len() + calls.len() * 1_024);
    if !text.is_empty() {
        out.extend_from_slice(text.as_bytes());
        out.extend_from_slice(b"\n\n");
    }
    out.extend_from_slice(opening(policy_version).as_bytes());
    for call in calls {
        out.push(b'\n');
        push_call(&mut out, call);
    }
    // Built from str pieces and serde_json's (UTF-8) output: always valid.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// The note's size in quarter tokens.
pub(super) fn omitted_note_quarters() -> u64 {
    quarter_tokens(OMITTED_NOTE.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The planner keeps one size per excerpt and note, whichever policy renders it.
    #[test]
    fn each_policys_labels_are_the_same_size() {
        assert_eq!(OPENING.len(), OPENING_4.len());
        assert_eq!(OMITTED_NOTE.len(), OMITTED_NOTE_4.len());
        assert!(OPENING_4.contains("(policy 4)") && OMITTED_NOTE_4.contains("(policy 4)"));
    }
}
