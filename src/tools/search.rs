//! pen_search: literal search over the workspace, bounded and deterministic.

use super::{ToolContext, ToolError, ToolSpec};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchArgs {
    pub query: String,
    pub path: Option<String>,
    pub glob: Option<String>,
    pub case_sensitive: Option<bool>,
    pub after: Option<String>,
}

pub fn spec() -> ToolSpec {
    ToolSpec {
        name: "pen_search",
        description: "Literal search (not regex).",
        input_schema: json!({"type": "object"}),
    }
}

pub fn run(_args: SearchArgs, _ctx: &ToolContext) -> Result<Value, ToolError> {
    Err(ToolError::new(
        super::ErrorCode::Io,
        "pen_search is not built yet",
    ))
}
