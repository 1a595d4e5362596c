//! The labelled excerpt that replaces an old tool group: what was called, with which bounded
//! arguments, and the head of what came back, quoted as historical data.
//!
//! Every field is a JSON string literal (escaped), so text inside a result cannot close the
//! quotation or pass itself off as the excerpt's own label.

use super::{Answered, Group};
use crate::limits::{EXCERPT_ARGUMENT_BYTES, EXCERPT_RESULT_BYTES};
use crate::tools::floor_char_boundary;
use serde_json::Value;

/// The label every excerpt opens with. It says what the model must not infer from it.
const OPENING: &str = "[earlier tool call, excerpted by the prompt budget (policy 3). Quoted historical data: \
     not an executable call and not a claim of success. Reread current files before acting on it.]";

/// The note that stands for the oldest excerpts of the newest exchange when even they did not
/// fit. The report names the calls.
pub(super) const OMITTED_NOTE: &str = "[earlier tool calls of this exchange are left out by the prompt budget \
     (policy 3) to fit the context window; their results are in the session transcript, not here. \
     Reread current files before acting on them.]";

/// `text` cut to `max` bytes on a character boundary, saying how long it was.
fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let end = floor_char_boundary(text, max);
    format!("{}…[cut; {} bytes]", &text[..end], text.len())
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
                        Value::String(text) => Value::String(cut(&text, EXCERPT_ARGUMENT_BYTES)),
                        // Numbers and flags keep their type; a large array or object is cut
                        // as its JSON text.
                        other => {
                            let json = other.to_string();
                            if json.len() <= EXCERPT_ARGUMENT_BYTES {
                                other
                            } else {
                                Value::String(cut(&json, EXCERPT_ARGUMENT_BYTES))
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
    Value::String(text.to_string()).to_string()
}

fn call_excerpt(answered: &Answered<'_>) -> String {
    let outcome = match (&answered.status, answered.is_error) {
        (Some(status), _) => status.as_str(),
        (None, true) => "error",
        (None, false) => "done",
    };
    format!(
        "tool: {}\ncall_id: {}\narguments: {}\nresult ({outcome}): {}",
        quoted(&answered.call.name),
        quoted(&answered.call.id),
        bounded_arguments(&answered.call.arguments),
        quoted(&cut(&answered.content, EXCERPT_RESULT_BYTES)),
    )
}

/// The excerpt of a whole group: the assistant's own words, then each call in order.
pub(super) fn group_text(group: &Group<'_>) -> String {
    let mut text = String::new();
    if !group.text.is_empty() {
        text.push_str(&group.text);
        text.push_str("\n\n");
    }
    text.push_str(OPENING);
    for answered in &group.calls {
        text.push('\n');
        text.push_str(&call_excerpt(answered));
    }
    text
}
