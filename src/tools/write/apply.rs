//! Carrying out an [`EditPlan`]: the write lands atomically (temp file in the same folder,
//! fsync, rename) or, for a file open in the editor, as the editor's own edit, so unsaved work
//! and undo survive. A failed call never leaves a half-edited file.
//!
//! Architecture invariant: a plan is written only over the text it was computed against. An
//! approved plan is applied after the owner's answer, so the file is opened and hashed again
//! first; any change since the plan (by the owner, a second process, the editor) is `stale`
//! and nothing is written.

use super::diff::replacements;
use super::plan::{EditPlan, open_for_edit, stale};
use crate::tools::source::{self, BOM, ByteSource, OpenedFile, hash_bytes};
use crate::tools::{ErrorCode, PendingWrite, ToolContext, ToolError};
use crate::workspace::{Landing, Target, write_in};
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt;

/// Applies `plan` if the file is still the text it was planned against, else fails `stale`
/// and writes nothing. Returns pen_edit's result.
pub fn apply(plan: EditPlan, ctx: &ToolContext) -> Result<Value, ToolError> {
    let opened = open_for_edit(ctx, &plan.path)?;
    let display = &plan.display;
    let len = opened.source.len();
    let bytes =
        source::read_range(&opened.source, 0, len).map_err(|e| ToolError::io(display, &e))?;
    let current = hash_bytes(&bytes);
    let moved = opened.resolved.absolute != plan.absolute;
    if moved || len != plan.planned_len || current != plan.planned_hash {
        let how = if ctx
            .ledger
            .is_some_and(|l| l.changed_on_disk(&plan.absolute))
        {
            "changed on disk"
        } else {
            "changed"
        };
        return Err(stale(display, how, &plan.planned_hash, &current));
    }
    land(plan, &opened, ctx)
}

/// Writes the plan to the file `opened` holds, which is the planned text, and records the new
/// version in the ledger. An edit that changes nothing leaves the file, and its modification
/// time, alone.
pub(super) fn land(
    mut plan: EditPlan,
    opened: &OpenedFile,
    ctx: &ToolContext,
) -> Result<Value, ToolError> {
    let display = plan.display.as_str();
    if plan.changes {
        if let Some(recorder) = ctx.recorder {
            let mode = match &opened.opened.target {
                Target::File(_, metadata) => Some(metadata.permissions().mode() & 0o7777),
                _ => None,
            };
            recorder
                .before_write(&PendingWrite {
                    tool: "pen_edit",
                    absolute: &plan.absolute,
                    display,
                    before: Some(&plan.before),
                    mode,
                    after: &plan.new_bytes,
                })
                .map_err(|reason| not_recorded(display, &reason))?;
        }
        match (opened.source.editor_version(), ctx.editor) {
            (Some(version), Some(editor)) => {
                let edits = editor_replacements(&plan, opened)?;
                editor.apply(&plan.absolute, version, &edits).map_err(|reason| {
                    ToolError::new(
                        ErrorCode::Stale,
                        format!(
                            "the editor did not apply the edit to {display}: {reason}. Nothing was \
                             changed; re-read the file with pen_read and redo the edit."
                        ),
                    )
                })?;
            }
            _ => {
                // The rewrite lands in the folder the file was opened in, by the name it has
                // there: a symlink on the way is never written through, or replaced.
                let (Target::File(_, metadata), Some((dir, name))) =
                    (&opened.opened.target, opened.opened.place())
                else {
                    return Err(ToolError::new(
                        ErrorCode::NotAFile,
                        format!("{display} is not a regular file"),
                    ));
                };
                let permissions = metadata.permissions().mode() & 0o7777;
                write_in(dir, name, &plan.new_bytes, Landing::Replace(permissions))
                    .map_err(|e| ToolError::io(display, &e))?;
            }
        }
    }
    if let Some(ledger) = ctx.ledger {
        ledger.record(&plan.absolute, &plan.new_hash);
    }
    if let Some(result) = plan.result.as_object_mut() {
        result.insert("source".into(), json!(opened.source.name()));
    }
    Ok(plan.result)
}

/// The error of a write the checkpoint store could not record: it is not made, so nothing is
/// ever written that a revert could not know of.
pub(super) fn not_recorded(display: &str, reason: &str) -> ToolError {
    ToolError::new(
        ErrorCode::Io,
        format!(
            "pen could not record the checkpoint of {display} ({reason}), so nothing was \
             written. Try again; if it keeps failing, tell the owner."
        ),
    )
}

/// The plan as replacements of the open document's text, which is the planned text: one per
/// changed region, so the editor applies one text edit per region.
fn editor_replacements(
    plan: &EditPlan,
    opened: &OpenedFile,
) -> Result<Vec<crate::tools::Replacement>, ToolError> {
    let display = plan.display.as_str();
    let before = source::read_range(&opened.source, 0, opened.source.len())
        .map_err(|e| ToolError::io(display, &e))?;
    let bom_len = if plan.bom { BOM.len() } else { 0 };
    let not_text = || {
        ToolError::new(
            ErrorCode::InvalidUtf8,
            format!(
                "{display} is no longer UTF-8 text; re-read it with pen_read. Nothing was written."
            ),
        )
    };
    let before = before
        .get(bom_len..)
        .and_then(|text| std::str::from_utf8(text).ok())
        .ok_or_else(not_text)?;
    let after = plan
        .new_bytes
        .get(bom_len..)
        .and_then(|text| std::str::from_utf8(text).ok())
        .ok_or_else(not_text)?;
    Ok(replacements(before, after, bom_len))
}
