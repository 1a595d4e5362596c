//! What an ACP turn watches of its tools' writes: a record of each edit's whole old and new
//! text, which ACP shows as a `diff` content block (the permission request of an edit, and its
//! `tool_call_update`). The tools themselves run unchanged: [`Changes`] is the [`WriteWatch`]
//! of the turn's [`crate::agent::LocalTools`], a wrapper of its write recorder.
//!
//! Invariant: a diff is the edit pen planned (the plan's base text and new bytes) or wrote (the
//! bytes handed to the write recorder just before the write), never a read of the file, which a
//! client that has not yet updated its buffer answers with the old text.

use crate::agent::{WriteCall, WriteWatch};
use crate::limits::MAX_ACP_DIFF_BYTES;
use crate::tools::write::EditPlan;
use crate::tools::{self, ToolError};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

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

/// The turn's writes, watched on their way to its recorder: each edit planned for approval,
/// and each write a call made (kept only when the call succeeds).
impl WriteWatch for Changes {
    fn planned(&self, plan: &EditPlan) {
        if let Some(change) = file_change(
            plan.path(),
            plan.absolute(),
            Some(plan.before_bytes()),
            plan.new_bytes(),
        ) {
            keep(&self.planned, change);
        }
    }

    fn around(
        &self,
        named: &str,
        recorder: Option<&dyn tools::WriteRecorder>,
        write: WriteCall<'_>,
    ) -> Result<Value, ToolError> {
        let capture = Capture::new(recorder, named);
        let result = write(Some(&capture));
        if result.is_ok()
            && let Some(change) = capture.written()
        {
            keep(&self.written, change);
        }
        result
    }
}
