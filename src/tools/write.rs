//! pen_create and pen_edit: focused, exact writes that keep line endings, BOM and final newline.

use super::{ToolContext, ToolError, ToolSpec};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateArgs {
    pub path: String,
    pub content: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EditArgs {
    pub path: String,
    pub edits: Vec<Edit>,
    pub expected_hash: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Edit {
    pub old_text: String,
    pub new_text: String,
    #[serde(default)]
    pub replace_all: bool,
}

pub fn create_spec() -> ToolSpec {
    ToolSpec {
        name: "pen_create",
        description: "Create a file.",
        input_schema: json!({"type": "object"}),
    }
}

pub fn edit_spec() -> ToolSpec {
    ToolSpec {
        name: "pen_edit",
        description: "Edit a file.",
        input_schema: json!({"type": "object"}),
    }
}

pub fn create(_args: CreateArgs, _ctx: &ToolContext) -> Result<Value, ToolError> {
    Err(ToolError::new(
        super::ErrorCode::Io,
        "pen_create is not built yet",
    ))
}

pub fn edit(_args: EditArgs, _ctx: &ToolContext) -> Result<Value, ToolError> {
    Err(ToolError::new(
        super::ErrorCode::Io,
        "pen_edit is not built yet",
    ))
}
