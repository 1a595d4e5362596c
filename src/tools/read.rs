//! pen_read.

use super::{ToolContext, ToolError, ToolSpec};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Args {
    pub path: String,
    pub start_line: Option<u64>,
    pub line_count: Option<u64>,
    pub offset: Option<u64>,
}

pub fn spec() -> ToolSpec {
    ToolSpec {
        name: "pen_read",
        description: "",
        input_schema: json!({"type": "object"}),
    }
}

pub fn run(_args: Args, _ctx: &ToolContext) -> Result<Value, ToolError> {
    Err(ToolError::new(super::ErrorCode::Io, "not built yet"))
}
