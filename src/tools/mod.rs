//! The native tools the model is given: their registry (catalog, approval, dispatch), argument
//! checking and the result cap.
//!
//! API boundary: tools take plain JSON arguments and return plain JSON results; they know
//! nothing of JSON-RPC, providers or sessions. A failure is a [`ToolError`] the model reads
//! (a code plus guidance), never a panic or a transport error.

pub mod budget;
pub mod command;
pub mod find;
pub mod keys;
pub mod list;
pub mod plan;
pub mod read;
pub mod registry;
pub mod search;
pub mod source;
pub mod subject;
pub mod tail;
pub mod tool;
pub mod versions;
pub mod write;

use crate::limits::Limits;
use crate::workspace::{Opened, Resolved, Workspace, WorkspaceError};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

pub use tool::{Prepared, Recorder, Tool};

/// Why a tool failed. Serialized in snake_case as the `code` of an error result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    UnknownTool,
    InvalidArguments,
    OutsideWorkspace,
    NotFound,
    NotAFile,
    NotADirectory,
    AlreadyExists,
    Binary,
    InvalidUtf8,
    KeyMaterial,
    BudgetTooSmall,
    BadCursor,
    TooLarge,
    NoMatch,
    AmbiguousMatch,
    Stale,
    /// A running tool was stopped by the owner; its outcome is unknown.
    Stopped,
    Io,
    /// An MCP tool's server is not running (it failed to start or died).
    ServerDown,
    /// An MCP tool reported an error (`isError`), failed or timed out.
    ToolFailed,
}

/// A tool failure as the model sees it: a stable code and a message that says what to do next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ToolError {
    pub code: ErrorCode,
    pub message: String,
}

impl ToolError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ToolError {
        ToolError {
            code,
            message: message.into(),
        }
    }

    /// The error result object: `{"error":{"code":…,"message":…}}`.
    pub fn to_value(&self) -> Value {
        json!({ "error": { "code": self.code, "message": self.message } })
    }

    /// An I/O failure on a path, with the OS reason.
    pub fn io(display: &str, err: &std::io::Error) -> ToolError {
        let code = match err.kind() {
            std::io::ErrorKind::NotFound => ErrorCode::NotFound,
            _ => ErrorCode::Io,
        };
        ToolError::new(code, format!("{}: {err}", shown(display)))
    }
}

impl From<WorkspaceError> for ToolError {
    fn from(err: WorkspaceError) -> ToolError {
        let code = match err {
            WorkspaceError::Io { .. } | WorkspaceError::TooManyLinks(_) => ErrorCode::Io,
            _ => ErrorCode::OutsideWorkspace,
        };
        ToolError::new(code, err.to_string())
    }
}

/// A path as it appears in a message: the workspace root is shown as `.`.
pub fn shown(display: &str) -> &str {
    if display.is_empty() { "." } else { display }
}

/// Remembers the content hash of each file as the model last read it, so that pen_edit can
/// refuse to write over a change the model has not seen (the stale-write guard), and which of
/// those files the disk watcher saw change since.
#[derive(Debug, Default)]
pub struct ReadLedger {
    seen: Mutex<HashMap<PathBuf, String>>,
    changed_on_disk: Mutex<std::collections::HashSet<PathBuf>>,
}

impl ReadLedger {
    pub fn record(&self, path: &std::path::Path, hash: &str) {
        if let Ok(mut seen) = self.seen.lock() {
            seen.insert(path.to_path_buf(), hash.to_string());
        }
        if let Ok(mut changed) = self.changed_on_disk.lock() {
            changed.remove(path);
        }
    }

    pub fn last_seen(&self, path: &std::path::Path) -> Option<String> {
        self.seen.lock().ok()?.get(path).cloned()
    }

    /// Notes that the file at `path` changed on disk; only files the model has read count.
    pub fn note_disk_change(&self, path: &std::path::Path) {
        let read = self.seen.lock().is_ok_and(|seen| seen.contains_key(path));
        if read && let Ok(mut changed) = self.changed_on_disk.lock() {
            changed.insert(path.to_path_buf());
        }
    }

    /// Whether the disk watcher saw the file change since the model last read it.
    pub fn changed_on_disk(&self, path: &std::path::Path) -> bool {
        self.changed_on_disk
            .lock()
            .is_ok_and(|changed| changed.contains(path))
    }
}

/// One replacement in an editor document: a byte range of the snapshot the tool read and the
/// text to put there. Ranges of one edit never overlap and refer to that same snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replacement {
    pub range: std::ops::Range<usize>,
    pub text: String,
}

/// The editor, as the tools see it: the unsaved text of open files, and a way to change them
/// that keeps the user's unsaved work and undo history. Implemented by the daemon.
pub trait Editor: Sync {
    /// The buffer of the file at `path` (canonical, absolute) if the editor has it open.
    fn snapshot(&self, path: &std::path::Path) -> Option<crate::documents::Snapshot>;
    /// Applies `replacements` to the open document at `path`, whose buffer had `version` when
    /// read. `Err` carries the editor's reason for refusing.
    fn apply(
        &self,
        path: &std::path::Path,
        version: i32,
        replacements: &[Replacement],
    ) -> Result<(), String>;
}

/// A write pen_create or pen_edit is about to make, as the checkpoint store records it (SPEC
/// §13): the file, its bytes before (`None`: it did not exist) and mode, and the bytes the write
/// lands.
pub struct PendingWrite<'a> {
    pub tool: &'static str,
    /// Canonical and absolute.
    pub absolute: &'a std::path::Path,
    /// As results show it.
    pub display: &'a str,
    pub before: Option<&'a [u8]>,
    /// The file's permission bits before the write; `None` for a file that did not exist (or
    /// an editor buffer with no file).
    pub mode: Option<u32>,
    pub after: &'a [u8],
}

/// Where pen_create and pen_edit record what they are about to write, before they write it, so
/// the write can be reverted (the agent loop's checkpoints). `Err` refuses the write: a write
/// that could not be recorded is not made.
pub trait WriteRecorder: Sync {
    fn before_write(&self, write: &PendingWrite<'_>) -> Result<(), String>;
}

/// Everything a tool call may use. Built by the caller (CLI, daemon, agent loop) per call.
pub struct ToolContext<'a> {
    pub workspace: &'a Workspace,
    pub limits: &'a Limits,
    /// The stale-write guard's memory; `None` for one-shot calls, which pass `expected_hash`.
    pub ledger: Option<&'a ReadLedger>,
    /// The editor's open documents; `None` without an editor (`pen tool`).
    pub editor: Option<&'a dyn Editor>,
    /// Records writes before they are made (checkpoints); `None` outside a session's turn.
    pub recorder: Option<&'a dyn WriteRecorder>,
}

impl<'a> ToolContext<'a> {
    /// A one-shot call's context: no read ledger (the call passes `expected_hash`), no editor,
    /// no write recorder.
    pub fn plain(workspace: &'a Workspace, limits: &'a Limits) -> Self {
        ToolContext {
            workspace,
            limits,
            ledger: None,
            editor: None,
            recorder: None,
        }
    }

    pub fn resolve(&self, path: &str) -> Result<Resolved, ToolError> {
        Ok(self.workspace.resolve(path)?)
    }

    /// Opens `path` beneath its workspace root (see [`Workspace::open`]).
    pub fn open(&self, path: &str) -> Result<Opened, ToolError> {
        Ok(self.workspace.open(path)?)
    }
}

/// What a tool says of itself to the model: its description and the JSON Schema of its
/// arguments, built from the limits they name.
#[derive(Debug, Clone)]
pub struct ToolDoc {
    pub description: String,
    pub input_schema: Value,
}

/// One entry of the tool catalog given to the model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CatalogEntry {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
}

/// The native catalog at the default limits.
///
/// Transitional: only the turn engine's `tool_definitions` calls it, until it passes its own
/// limits to [`registry::catalog`]; every other caller already does.
pub fn catalog() -> Vec<CatalogEntry> {
    registry::catalog(&Limits::default())
}

/// Runs one native tool by name to completion ([`registry::ToolSpec::call`]). Unknown names
/// (listing the tools there are) and bad arguments are errors the model can act on.
pub fn call(name: &str, arguments: &Value, ctx: &ToolContext) -> Result<Value, ToolError> {
    match registry::get(name) {
        Some(spec) => spec.call(arguments, ctx),
        None => Err(registry::unknown_tool(name)),
    }
}

/// A byte size as the catalog states it: in MiB or KiB when it is a whole number of them,
/// else in bytes.
pub fn shown_size(bytes: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * KIB;
    match bytes {
        0 => "0 bytes".to_string(),
        b if b % MIB == 0 => format!("{} MiB", b / MIB),
        b if b % KIB == 0 => format!("{} KiB", b / KIB),
        b => format!("{b} bytes"),
    }
}

/// The observation the model receives for a call: the result or error object, serialized and
/// capped at `max_tool_result_bytes`.
pub fn observation(result: &Result<Value, ToolError>, limits: &Limits) -> String {
    let value = match result {
        Ok(value) => value.clone(),
        Err(err) => err.to_value(),
    };
    cap_observation(value.to_string(), limits.max_tool_result_bytes)
}

/// Cuts `text` to at most `cap` bytes on a UTF-8 boundary, ending it with a note that names the
/// full size and how to ask for less. Text within the cap is returned unchanged.
pub fn cap_observation(text: String, cap: usize) -> String {
    if text.len() <= cap {
        return text;
    }
    let note = format!(
        "…[truncated; full result is {} bytes. Ask for less: page with start_line/offset or after, \
         narrow with path or glob, or lower line_count/limit]",
        text.len()
    );
    crate::text::cut_to_fit(&text, cap, &note).into_owned()
}

/// A count argument (`line_count`, `limit`): its default and maximum is `max`; larger values
/// are lowered to it, since asking for more is no error, and 0 is refused.
pub fn bounded_count(value: Option<u64>, max: usize, name: &str) -> Result<usize, ToolError> {
    match value {
        Some(0) => Err(ToolError::new(
            ErrorCode::InvalidArguments,
            format!("{name} must be at least 1"),
        )),
        Some(n) => Ok(usize::try_from(n).unwrap_or(usize::MAX).min(max)),
        None => Ok(max),
    }
}

/// Parses tool arguments into their typed form; the error names the offending field.
pub fn parse_arguments<T: DeserializeOwned>(arguments: &Value) -> Result<T, ToolError> {
    if !arguments.is_object() {
        return Err(ToolError::new(
            ErrorCode::InvalidArguments,
            format!("arguments must be a JSON object, got {arguments}"),
        ));
    }
    serde_path_to_error::deserialize(arguments).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        let message = if path == "." {
            format!("invalid arguments: {inner}")
        } else {
            format!("invalid arguments: field `{path}`: {inner}")
        };
        ToolError::new(ErrorCode::InvalidArguments, message)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_leaves_small_results_alone() {
        assert_eq!(cap_observation("abc".into(), 1024), "abc");
    }

    #[test]
    fn cap_cuts_on_a_char_boundary_and_never_overshoots() {
        for cap in 1024..1100 {
            let text = "é€😀".repeat(400);
            let out = cap_observation(text.clone(), cap);
            assert!(out.len() <= cap, "cap {cap}: {}", out.len());
            assert!(out.contains(&format!("full result is {} bytes", text.len())));
            assert!(out.starts_with("é€"));
        }
    }

    #[test]
    fn sizes_are_shown_in_the_largest_whole_unit() {
        assert_eq!(shown_size(64 * 1024), "64 KiB");
        assert_eq!(shown_size(16 * 1024 * 1024), "16 MiB");
        assert_eq!(shown_size(1_536), "1536 bytes");
        assert_eq!(shown_size(512), "512 bytes");
        assert_eq!(shown_size(0), "0 bytes");
    }

    #[test]
    fn argument_errors_name_the_field() {
        #[derive(serde::Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Args {
            path: String,
            start_line: Option<u64>,
        }
        let err = parse_arguments::<Args>(&json!({"path": "a", "start_line": "x"})).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidArguments);
        assert!(err.message.contains("`start_line`"), "{}", err.message);
        let err = parse_arguments::<Args>(&json!({"start_line": 1})).unwrap_err();
        assert!(
            err.message.contains("missing field `path`"),
            "{}",
            err.message
        );
        let err = parse_arguments::<Args>(&json!({"path": "a", "bogus": 1})).unwrap_err();
        assert!(
            err.message.contains("unknown field `bogus`"),
            "{}",
            err.message
        );
        let err = parse_arguments::<Args>(&json!([1])).unwrap_err();
        assert!(err.message.contains("JSON object"), "{}", err.message);
    }
}
