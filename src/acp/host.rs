//! The tool host of an ACP turn: pen's [`LocalTools`] as they are, plus a record of each
//! edit's whole old and new text, which ACP shows as a `diff` content block (the permission
//! request of an edit, and its `tool_call_update`). The tools themselves run unchanged.

use crate::agent::{LocalTools, ToolHost};
use crate::bytes::{ByteSource, read_range};
use crate::limits::MAX_ACP_DIFF_BYTES;
use crate::tools::registry::ToolSpec;
use crate::tools::write::EditPlan;
use crate::tools::{self, ToolContext, ToolError, source};
use futures::future::BoxFuture;
use serde_json::Value;
use std::path::PathBuf;
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
    /// The same tools for pen_search, whose editor (when the client serves files) asks the
    /// client only for the files already read through it: a search never sends one
    /// `fs/read_text_file` per file of the workspace.
    pub search: LocalTools,
    pub changes: Arc<Changes>,
}

/// What a file holds now, for a diff: `Ok(None)` when it does not exist, `Err` when it cannot
/// be shown whole (too large, not text, unreadable).
type Text = Result<Option<(PathBuf, String)>, ()>;

impl AcpTools {
    /// The text the tools would read at `path` (the client's buffer or the disk), without
    /// touching the read ledger.
    fn text_of(&self, path: &str) -> Text {
        let ctx = ToolContext {
            workspace: &self.inner.workspace,
            limits: self.inner.limits(),
            ledger: None,
            editor: self
                .inner
                .editor
                .as_deref()
                .map(|e| e as &dyn tools::Editor),
            recorder: None,
        };
        let opened = match source::open_file(&ctx, path) {
            Ok(opened) => opened,
            Err(err) if err.code == tools::ErrorCode::NotFound => return Ok(None),
            Err(_) => return Err(()),
        };
        let len = opened.source.len();
        if len > MAX_ACP_DIFF_BYTES as u64 {
            return Err(());
        }
        let bytes = read_range(&opened.source, 0, len).map_err(|_| ())?;
        let text = String::from_utf8(bytes).map_err(|_| ())?;
        Ok(Some((opened.resolved.absolute, text)))
    }

    /// Records `named`'s change from `before` to what it holds now.
    fn record_written(&self, named: &str, before: Text) {
        if let (Ok(before), Ok(Some((absolute, new_text)))) = (before, self.text_of(named)) {
            keep(
                &self.changes.written,
                FileChange {
                    named: named.to_string(),
                    absolute,
                    old_text: before.map(|(_, text)| text),
                    new_text,
                },
            );
        }
    }
}

fn edits_a_file(name: &str) -> bool {
    matches!(name, "pen_edit" | "pen_create")
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
        if name == "pen_search" {
            return ToolHost::call(&self.search, name, arguments, None);
        }
        let Some(named) = named_path(arguments).filter(|_| edits_a_file(name)) else {
            return ToolHost::call(&self.inner, name, arguments, recorder);
        };
        let before = self.text_of(named);
        let result = ToolHost::call(&self.inner, name, arguments, recorder);
        if result.is_ok() {
            self.record_written(named, before);
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
        if let Ok(Some((absolute, old_text))) = self.text_of(plan.path())
            && let Ok(new_text) = String::from_utf8(plan.new_bytes().to_vec())
        {
            keep(
                &self.changes.planned,
                FileChange {
                    named: plan.path().to_string(),
                    absolute,
                    old_text: Some(old_text),
                    new_text,
                },
            );
        }
        Ok(plan)
    }

    fn apply_edit(
        &self,
        plan: EditPlan,
        recorder: Option<&dyn tools::WriteRecorder>,
    ) -> Result<Value, ToolError> {
        let named = plan.path().to_string();
        let before = self.text_of(&named);
        let result = self.inner.apply_edit(plan, recorder);
        if result.is_ok() {
            self.record_written(&named, before);
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
