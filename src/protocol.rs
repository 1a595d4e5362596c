//! Wire types of the `pen/…` methods and conversions between LSP types and pen's own.
//!
//! One derive stack (`Serialize, Deserialize`, camelCase) for every params and result type;
//! core modules never see these.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tower_lsp_server::ls_types::PositionEncodingKind;

/// `pen/callTool` params: one native tool, no model.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CallToolParams {
    pub name: String,
    #[serde(default = "empty_object")]
    pub arguments: Value,
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

/// The position encoding agreed with the client at `initialize` (LSP 3.17).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PositionEncodingName {
    Utf8,
    Utf16,
}

impl PositionEncodingName {
    /// UTF-8 when the client offers it (no conversion needed on our side), else UTF-16, which
    /// every client must support.
    pub fn negotiate(offered: &[PositionEncodingKind]) -> PositionEncodingName {
        if offered.contains(&PositionEncodingKind::UTF8) {
            PositionEncodingName::Utf8
        } else {
            PositionEncodingName::Utf16
        }
    }

    pub fn kind(self) -> PositionEncodingKind {
        match self {
            PositionEncodingName::Utf8 => PositionEncodingKind::UTF8,
            PositionEncodingName::Utf16 => PositionEncodingKind::UTF16,
        }
    }
}
