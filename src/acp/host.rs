//! The tool host of an ACP turn: pen's [`LocalTools`] as they are, plus a record of each
//! edit's whole old and new text, which ACP shows as a `diff` content block (the permission
//! request of an edit, and its `tool_call_update`). The tools themselves run unchanged.
//!
//! Invariant: a diff is the edit pen planned (the plan's base text and new bytes) or wrote (the
//! bytes handed to the write recorder just before the write), never a read of the file, which a
//! client that has not yet updated its buffer answers with the old text.

use crate::agent::{LocalTools, ToolHost};
use crate::limits::MAX_ACP_DIFF_BYTES;
use crate::tools::registry::{self, ToolKind, ToolSpec};
use crate::tools::write::EditPlan;
use crate::tools::{self, ToolError};
use futures::future::BoxFuture;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// A file's text before and after an edit, for a `diff` block.
#[derive(Debug, Clone, PartialEq)]
pub struct FileChange {
    /// The path as the call named it (how the update finds its call).
    pub named: String,
    pub absolute: PathBuf,
    /// `None` for a file the call created.
    pub old_text: Option<String>,
    pub new_text: String,
}

/// The changes of a turn, taken by the update stream when it reports the call.
#[derive(Debug, Default)]
pub struct Changes {
    /// Planned for approval, not yet asked about.
    planned: Mutex<Vec<FileChange>>,
    /// Written, not yet reported.
    written: Mutex<Vec<FileChange>>,
}

impl Changes {
    pub fn take_planned(&self, named: &str) -> Option<FileChange> {
        take(&self.planned, named)
    }

    pub fn take_written(&self, named: &str) -> Option<FileChange> {
        take(&self.written, named)
    }
}

fn take(changes: &Mutex<Vec<FileChange>>, named: &str) -> Option<FileChange> {
    let mut changes = changes.lock().unwrap_or_else(|p| p.into_inner());
    let at = changes.iter().position(|change| change.named == named)?;
    Some(changes.remove(at))
}

fn keep(changes: &Mutex<Vec<FileChange>>, change: FileChange) {
    changes
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(change);
}

pub struct AcpTools {
    pub inner: LocalTools,
    /// The same tools for the tools that look through the workspace ([`ToolKind::Search`]),
    /// whose editor (when the client serves files) asks the client only for the files already
    /// read through it: a search never sends one `fs/read_text_file` per file of the workspace.
    pub search: LocalTools,
    pub changes: Arc<Changes>,
}

/// The write a call is about to make, seen on its way to the turn's recorder: the diff of an
/// edit is what pen planned and writes, never a read of the file after it (a client may not
/// have updated its buffer yet, and would show the old text as the new).
struct Capture<'a> {
    recorder: Option<&'a dyn tools::WriteRecorder>,
    named: &'a str,
    seen: Mutex<Option<FileChange>>,
}

impl<'a> Capture<'a> {
    fn new(recorder: Option<&'a dyn tools::WriteRecorder>, named: &'a str) -> Capture<'a> {
        Capture {
            recorder,
            named,
            seen: Mutex::default(),
        }
    }

    /// The change the call wrote, when it wrote one ACP can show whole as text.
    fn written(self) -> Option<FileChange> {
        self.seen.into_inner().unwrap_or_else(|p| p.into_inner())
    }
}

impl tools::WriteRecorder for Capture<'_> {
    fn before_write(&self, write: &tools::PendingWrite<'_>) -> Result<(), String> {
        if let Some(recorder) = self.recorder {
            recorder.before_write(write)?;
        }
        let change = file_change(self.named, write.absolute, write.before, write.after);
        *self.seen.lock().unwrap_or_else(|p| p.into_inner()) = change;
        Ok(())
    }
}

/// A change from `before` (`None`: a new file) to `after`, when both are text ACP can show
/// whole (UTF-8, at most [`MAX_ACP_DIFF_BYTES`] each).
fn file_change(
    named: &str,
    absolute: &Path,
    before: Option<&[u8]>,
    after: &[u8],
) -> Option<FileChange> {
    let text = |bytes: &[u8]| {
        (bytes.len() <= MAX_ACP_DIFF_BYTES)
            .then(|| std::str::from_utf8(bytes).ok().map(str::to_string))
            .flatten()
    };
    Some(FileChange {
        named: named.to_string(),
        absolute: absolute.to_path_buf(),
        old_text: match before {
            Some(bytes) => Some(text(bytes)?),
            None => None,
        },
        new_text: text(after)?,
    })
}

fn edits_a_file(name: &str) -> bool {
    registry::kind_of(name) == ToolKind::Edit
}

fn named_path(arguments: &Value) -> Option<&str> {
    arguments.get("path").and_then(Value::as_str)
}

impl ToolHost for AcpTools {
    fn catalog(&self) -> Vec<tools::CatalogEntry> {
        self.inner.catalog()
    }

    fn call(
        &self,
        name: &str,
        arguments: &Value,
        recorder: Option<&dyn tools::WriteRecorder>,
    ) -> Result<Value, ToolError> {
        if registry::kind_of(name) == ToolKind::Search {
            return ToolHost::call(&self.search, name, arguments, None);
        }
        let Some(named) = named_path(arguments).filter(|_| edits_a_file(name)) else {
            return ToolHost::call(&self.inner, name, arguments, recorder);
        };
        let capture = Capture::new(recorder, named);
        let result = ToolHost::call(&self.inner, name, arguments, Some(&capture));
        if result.is_ok()
            && let Some(change) = capture.written()
        {
            keep(&self.changes.written, change);
        }
        result
    }

    fn run_cancellable(
        &self,
        spec: &'static ToolSpec,
        arguments: Value,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<Value, ToolError>> {
        self.inner.run_cancellable(spec, arguments, cancel)
    }

    fn plan_edit(&self, arguments: &Value) -> Result<EditPlan, ToolError> {
        let plan = self.inner.plan_edit(arguments)?;
        if let Some(change) = file_change(
            plan.path(),
            plan.absolute(),
            Some(plan.before_bytes()),
            plan.new_bytes(),
        ) {
            keep(&self.changes.planned, change);
        }
        Ok(plan)
    }

    fn apply_edit(
        &self,
        plan: EditPlan,
        recorder: Option<&dyn tools::WriteRecorder>,
    ) -> Result<Value, ToolError> {
        let named = plan.path().to_string();
        let capture = Capture::new(recorder, &named);
        let result = self.inner.apply_edit(plan, Some(&capture));
        if result.is_ok()
            && let Some(change) = capture.written()
        {
            keep(&self.changes.written, change);
        }
        result
    }

    fn observation(&self, result: &Result<Value, ToolError>) -> String {
        self.inner.observation(result)
    }

    /// The session's instructions and environment come from the same workspace as under
    /// `pen serve` (the engine reads and records them).
    fn workspace(&self) -> Option<&crate::workspace::Workspace> {
        ToolHost::workspace(&self.inner)
    }

    fn fit_pages(&self, room_tokens: u64) {
        ToolHost::fit_pages(&self.inner, room_tokens);
    }
}
