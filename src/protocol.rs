//! Wire types of the `pen/…` methods and conversions between LSP types and pen's own.
//!
//! One derive stack (`Serialize, Deserialize`, camelCase) for every params and result type;
//! core modules never see these.

use crate::documents::{self, PositionEncoding};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::PathBuf;
use tower_lsp_server::ls_types::{self as lsp, PositionEncodingKind, Uri};

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

/// The position encoding for a client that offers `offered` (LSP 3.17): UTF-8 when offered (no
/// conversion needed), else UTF-16, which every client must support.
pub fn negotiate_encoding(offered: &[PositionEncodingKind]) -> PositionEncoding {
    if offered.contains(&PositionEncodingKind::UTF8) {
        PositionEncoding::Utf8
    } else {
        PositionEncoding::Utf16
    }
}

pub fn encoding_kind(encoding: PositionEncoding) -> PositionEncodingKind {
    match encoding {
        PositionEncoding::Utf8 => PositionEncodingKind::UTF8,
        PositionEncoding::Utf16 => PositionEncodingKind::UTF16,
        PositionEncoding::Utf32 => PositionEncodingKind::UTF32,
    }
}

/// The canonical path of a `file:` URI, as the tools resolve paths (symlinks followed).
pub fn uri_to_path(uri: &Uri) -> Option<PathBuf> {
    let path = uri.to_file_path()?.into_owned();
    Some(crate::workspace::canonical(&path))
}

pub fn path_to_uri(path: &std::path::Path) -> Option<Uri> {
    Uri::from_file_path(path)
}

pub fn from_lsp_range(range: lsp::Range) -> documents::Range {
    documents::Range::new(
        documents::Position::new(range.start.line, range.start.character),
        documents::Position::new(range.end.line, range.end.character),
    )
}

pub fn to_lsp_range(range: documents::Range) -> lsp::Range {
    lsp::Range::new(
        lsp::Position::new(range.start.line, range.start.character),
        lsp::Position::new(range.end.line, range.end.character),
    )
}

pub fn from_lsp_change(change: lsp::TextDocumentContentChangeEvent) -> documents::Change {
    documents::Change {
        range: change.range.map(from_lsp_range),
        text: change.text,
    }
}
