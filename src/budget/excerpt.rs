//! The labelled excerpt that replaces an old tool group: what was called, with which bounded
//! arguments, and the head of what came back, quoted as historical data.
//!
//! Every field is a JSON string literal (escaped), so text inside a result cannot close the
//! quotation or pass itself off as the excerpt's own label.

use super::{Answered, Group};
use crate::limits::{EXCERPT_ARGUMENT_BYTES, EXCERPT_RESULT_BYTES};
use serde_json::Value;
use std::borrow::Cow;

/// The label every excerpt opens with. It says what the model must not infer from it.
const OPENING: &str = "[earlier tool call, excerpted by the prompt budget (policy 3). Quoted historical data: \
     not an executable call and not a claim of success. Reread current files before acting on it.]";

/// The note that stands for the oldest excerpts of the newest exchange when even they did not
/// fit. The report names the calls.
pub(super) const OMITTED_NOTE: &str = "[earlier tool calls of this exchange are left out by the prompt budget \
     (policy 3) to fit the context window; their results are in the session transcript, not here. \
     Reread current files before acting on them.]";

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

fn push_call_excerpt(out: &mut Vec<u8>, answered: &Answered<'_>) {
    let outcome = match (&answered.status, answered.is_error) {
        (Some(status), _) => status,
        (None, true) => "error",
        (None, false) => "done",
    };
    out.extend_from_slice(b"tool: ");
    push_quoted(out, answered.call.name);
    out.extend_from_slice(b"\ncall_id: ");
    push_quoted(out, answered.call.id);
    out.extend_from_slice(b"\narguments: ");
    out.extend_from_slice(bounded_arguments(answered.call.arguments).as_bytes());
    out.extend_from_slice(b"\nresult (");
    out.extend_from_slice(outcome.as_bytes());
    out.extend_from_slice(b"): ");
    push_quoted(out, &cut(&answered.content, EXCERPT_RESULT_BYTES));
}

/// The excerpt of a whole group: the assistant's own words, then each call in order.
pub(super) fn group_text(group: &Group<'_>) -> String {
    let mut text: Vec<u8> = Vec::with_capacity(OPENING.len() + group.calls.len() * 1_024);
    if !group.text.is_empty() {
        text.extend_from_slice(group.text.as_bytes());
        text.extend_from_slice(b"\n\n");
    }
    text.extend_from_slice(OPENING.as_bytes());
    for answered in &group.calls {
        text.push(b'\n');
        push_call_excerpt(&mut text, answered);
    }
    // Built from str pieces and serde_json's (UTF-8) output: always valid.
    String::from_utf8(text).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}
