//! An MCP `tools/call` result as the model reads it: text joined, `structuredContent` as JSON,
//! images and audio as a short note, resources as their URI and bounded text, and the one cap
//! every tool result has, whose note says this tool cannot page.

use crate::limits::MAX_MCP_RESOURCE_TEXT_BYTES;
use crate::tools::{ErrorCode, ToolError};
use serde_json::Value;

/// The text of a result (the wire shape of `CallToolResult`), and whether the server marked it
/// an error (`isError`).
pub fn render(result: &Value) -> (String, bool) {
    let mut parts: Vec<String> = Vec::new();
    let mut texts: Vec<&str> = Vec::new();
    for item in result
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let kind = item.get("type").and_then(Value::as_str).unwrap_or("");
        let field = |name: &str| item.get(name).and_then(Value::as_str);
        match kind {
            "text" => {
                let text = field("text").unwrap_or("");
                texts.push(text);
                parts.push(text.to_string());
            }
            "image" | "audio" => {
                let bytes = field("data").map_or(0, |data| data.len() / 4 * 3);
                parts.push(format!(
                    "[{kind}: {}, about {bytes} bytes; not shown]",
                    field("mimeType").unwrap_or("unknown type")
                ));
            }
            "resource_link" => parts.push(format!(
                "[resource link: {}{}]",
                field("uri").unwrap_or(""),
                field("name").map(|n| format!(" ({n})")).unwrap_or_default()
            )),
            "resource" => {
                let resource = item.get("resource").unwrap_or(&Value::Null);
                let uri = resource.get("uri").and_then(Value::as_str).unwrap_or("");
                match resource.get("text").and_then(Value::as_str) {
                    Some(text) => parts.push(format!(
                        "[resource: {uri}]\n{}",
                        crate::text::cut_with_note(
                            text,
                            MAX_MCP_RESOURCE_TEXT_BYTES,
                            format_args!("…[resource text cut; {} bytes in all]", text.len())
                        )
                    )),
                    None => {
                        let bytes = resource
                            .get("blob")
                            .and_then(Value::as_str)
                            .map_or(0, |b| b.len() / 4 * 3);
                        parts.push(format!(
                            "[resource: {uri}, binary, about {bytes} bytes; not shown]"
                        ));
                    }
                }
            }
            other => parts.push(format!("[{other} content; not shown]")),
        }
    }
    if let Some(structured) = result.get("structuredContent") {
        // Servers often send the same JSON as text too, or (the Python SDK, for a tool that
        // returns text) the text again as `{"result": text}`: then it is shown once.
        let repeated = texts.iter().any(|text| {
            serde_json::from_str::<Value>(text).ok().as_ref() == Some(structured)
                || *structured == serde_json::json!({ "result": text })
        });
        if !repeated {
            parts.push(format!("structured content: {structured}"));
        }
    }
    let is_error = result.get("isError").and_then(Value::as_bool) == Some(true);
    (parts.join("\n"), is_error)
}

/// The tool's outcome: its text, or an error result holding it.
pub fn outcome(result: &Value) -> Result<Value, ToolError> {
    match render(result) {
        (text, false) => Ok(Value::String(text)),
        (text, true) => Err(ToolError::new(ErrorCode::ToolFailed, text)),
    }
}

/// The observation the model receives for an MCP call: the text as is (an error as the error
/// object every tool gives), capped at `cap` with a note that says the tool cannot page.
pub fn observation(result: &Result<Value, ToolError>, cap: usize) -> String {
    let text = match result {
        Ok(Value::String(text)) => text.clone(),
        Ok(other) => other.to_string(),
        Err(err) => err.to_value().to_string(),
    };
    if text.len() <= cap {
        return text;
    }
    let note = format!(
        "…[truncated; full result is {} bytes. This tool cannot page: call it again asking for less]",
        text.len()
    );
    crate::text::cut_to_fit(&text, cap, &note).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_kind_of_content_is_shown_in_words() {
        let (text, is_error) = render(&json!({
            "content": [
                {"type": "text", "text": "hello"},
                {"type": "image", "data": "AAAA", "mimeType": "image/png"},
                {"type": "resource_link", "uri": "file:///a", "name": "a"},
                {"type": "resource", "resource": {"uri": "test://r", "text": "body"}},
                {"type": "text", "text": "{\"n\":1}"},
            ],
            "structuredContent": {"n": 1},
        }));
        assert!(!is_error);
        assert_eq!(
            text,
            "hello\n[image: image/png, about 3 bytes; not shown]\n[resource link: file:///a (a)]\n[resource: test://r]\nbody\n{\"n\":1}"
        );
        let (text, is_error) =
            render(&json!({"content": [], "structuredContent": {"sum": 3}, "isError": true}));
        assert!(is_error);
        assert_eq!(text, "structured content: {\"sum\":3}");
    }

    #[test]
    fn text_repeated_as_structured_content_is_shown_once() {
        let (text, _) = render(&json!({
            "content": [{"type": "text", "text": "ran"}],
            "structuredContent": {"result": "ran"},
        }));
        assert_eq!(text, "ran");
    }

    #[test]
    fn an_over_cap_result_is_cut_with_the_no_paging_note() {
        let long = "x".repeat(5_000);
        let shown = observation(&Ok(Value::String(long)), 1_024);
        assert!(shown.len() <= 1_024);
        assert!(
            shown.ends_with("This tool cannot page: call it again asking for less]"),
            "{shown}"
        );
        assert_eq!(
            observation(&Ok(Value::String("short".into())), 1_024),
            "short"
        );
    }
}
