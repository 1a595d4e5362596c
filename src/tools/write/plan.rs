//! An edit as a value: [`plan`] reads the file once, checks it is the text the model last saw,
//! and computes everything the edit will do — the new bytes, the bounded diff, the result — and
//! the hash of the text it was computed against. Nothing is written; [`super::apply`] writes it.
//!
//! The approval preview and the write use the same plan: the owner approves the plan's diff,
//! and applying it writes the plan's bytes, only while the file is still the planned text.

use super::diff::{bound_diff, unified_diff};
use super::rewrite::rewrite;
use super::{Edit, EditArgs};
use crate::tools::budget::{result_budget, widest};
use crate::tools::source::{self, ByteSource, Eol, OpenedFile, hash_bytes};
use crate::tools::{ErrorCode, ReadLedger, ToolContext, ToolError, shown};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// What a pen_edit call will do, computed against one version of the file.
#[derive(Debug, Clone)]
pub struct EditPlan {
    /// The path as the call named it; [`super::apply`] opens it again.
    pub(super) path: String,
    /// The path as results show it.
    pub(super) display: String,
    /// Where the path led when planned; an apply that lands elsewhere is stale.
    pub(super) absolute: PathBuf,
    /// The length and hash of the text the plan was computed against.
    pub(super) planned_len: u64,
    pub(super) planned_hash: String,
    /// The file's bytes after the edit and their hash, whether they differ from the planned
    /// text, and whether the file has a BOM (kept from the planned text).
    pub(super) new_bytes: Vec<u8>,
    pub(super) new_hash: String,
    pub(super) changes: bool,
    pub(super) bom: bool,
    /// The text the plan was computed against, which the checkpoint store records as the
    /// file's pre-image before the write.
    pub(super) before: Vec<u8>,
    /// The result pen_edit returns once the plan is applied (`source` is filled in then).
    pub(super) result: Value,
}

impl EditPlan {
    /// The bounded unified diff: what the model is told and the owner approves.
    pub fn diff(&self) -> &str {
        self.result["diff"].as_str().unwrap_or_default()
    }

    /// The hash of the text the plan was computed against; applying it requires that text.
    pub fn planned_hash(&self) -> &str {
        &self.planned_hash
    }

    /// The exact bytes applying the plan writes.
    pub fn new_bytes(&self) -> &[u8] {
        &self.new_bytes
    }

    /// The size of the text the plan was computed against (the pre-image a revert restores).
    pub fn planned_len(&self) -> u64 {
        self.planned_len
    }

    /// The text the plan was computed against.
    pub fn before_bytes(&self) -> &[u8] {
        &self.before
    }

    /// The path as the call named it.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Where the path led when planned (canonical, absolute).
    pub fn absolute(&self) -> &Path {
        &self.absolute
    }
}

/// Plans pen_edit: reads the file once, checks it is fresh (see [`check_fresh`]) and computes
/// the edit. Fails as the call would, naming the edit that does not apply.
pub fn plan(args: EditArgs, ctx: &ToolContext) -> Result<EditPlan, ToolError> {
    open_and_plan(args, ctx).map(|(_, plan)| plan)
}

/// Plans pen_edit, returning the opened file too, so that a call applied at once writes
/// through the very source it read.
pub(super) fn open_and_plan(
    args: EditArgs,
    ctx: &ToolContext,
) -> Result<(OpenedFile, EditPlan), ToolError> {
    if args.edits.is_empty() {
        return Err(ToolError::new(
            ErrorCode::InvalidArguments,
            "edits is empty; give at least one {\"old_text\": …, \"new_text\": …}",
        ));
    }
    let opened = open_for_edit(ctx, &args.path)?;
    let plan = plan_opened(&opened, args, ctx)?;
    Ok((opened, plan))
}

/// Opens the file an edit names: the editor's buffer or the disk file, at most
/// `max_edit_file_bytes` long.
pub(super) fn open_for_edit(ctx: &ToolContext, path: &str) -> Result<OpenedFile, ToolError> {
    let opened = source::open_file(ctx, path).map_err(|e| match e.code {
        ErrorCode::NotFound => ToolError::new(
            ErrorCode::NotFound,
            format!("{}. To make a new file, use pen_create.", e.message),
        ),
        _ => e,
    })?;
    let len = opened.source.len();
    if len > ctx.limits.max_edit_file_bytes {
        let display = shown(&opened.resolved.display);
        return Err(ToolError::new(
            ErrorCode::TooLarge,
            format!(
                "{display} is {len} bytes; pen_edit rewrites files of at most {} bytes. Change it \
                 with an approved command (for example sed or a script), or split it into smaller \
                 files.",
                ctx.limits.max_edit_file_bytes
            ),
        ));
    }
    Ok(opened)
}

/// Plans the edit against the file `opened` holds.
fn plan_opened(
    opened: &OpenedFile,
    args: EditArgs,
    ctx: &ToolContext,
) -> Result<EditPlan, ToolError> {
    let display = shown(&opened.resolved.display).to_string();
    let absolute = opened.resolved.absolute.clone();
    // The hash is taken below from the bytes edited, so only the binary sniff is needed here.
    opened.sniff_binary(ctx.limits)?;
    let len = opened.source.len();
    let bytes =
        source::read_range(&opened.source, 0, len).map_err(|e| ToolError::io(&display, &e))?;
    let planned_hash = hash_bytes(&bytes);
    check_fresh(
        &planned_hash,
        args.expected_hash.as_deref(),
        ctx.ledger,
        &absolute,
        &display,
    )?;
    let edits: &[Edit] = &args.edits;
    let rewritten = rewrite(&bytes, edits, &display)?;
    let new_bytes = rewritten.bytes();
    let hash = hash_bytes(&new_bytes);
    // The budget is settled before anything is written: an edit must not land and then report
    // an error.
    let envelope = json!({
        "path": display,
        "edits_applied": widest(edits.len() as u64),
        "replacements": widest(rewritten.replacements as u64),
        "diff": "",
        "hash": hash,
        "eol": Eol::Mixed,
        "bom": false,
        "final_newline": false,
    });
    let diff_budget = result_budget(&envelope, ctx.limits)?;
    let diff = unified_diff(&rewritten, &display);
    let diff = bound_diff(&diff, ctx.limits.max_diff_bytes, diff_budget);
    let result = json!({
        "path": display,
        "edits_applied": edits.len(),
        "replacements": rewritten.replacements,
        "diff": diff,
        "hash": hash,
        "eol": Eol::of(&new_bytes),
        "bom": rewritten.bom,
        "final_newline": rewritten.after.ends_with('\n'),
    });
    Ok(EditPlan {
        path: args.path,
        display,
        absolute,
        planned_len: len,
        planned_hash,
        bom: rewritten.bom,
        changes: new_bytes != bytes,
        before: bytes,
        new_bytes,
        new_hash: hash,
        result,
    })
}

/// The stale-write guard. A given `expected_hash` decides alone, so that a model holding the
/// hash of the current version may edit even when the ledger does not know the file (after a
/// daemon restart, say). Without one, the ledger must have seen exactly the current version.
/// One-shot calls have neither and are not guarded.
fn check_fresh(
    current: &str,
    expected: Option<&str>,
    ledger: Option<&ReadLedger>,
    absolute: &Path,
    display: &str,
) -> Result<(), ToolError> {
    let seen = match (expected, ledger) {
        (Some(expected), _) => expected.to_string(),
        (None, Some(ledger)) => match ledger.last_seen(absolute) {
            Some(seen) => seen,
            None => {
                return Err(ToolError::new(
                    ErrorCode::Stale,
                    format!(
                        "read the file with pen_read before editing it: {display} has not been \
                         read in this session, so the edit could not be checked against its \
                         current text. Nothing was written."
                    ),
                ));
            }
        },
        (None, None) => return Ok(()),
    };
    if seen == current {
        return Ok(());
    }
    let how = if ledger.is_some_and(|l| l.changed_on_disk(absolute)) {
        "changed on disk"
    } else {
        "changed"
    };
    Err(stale(display, how, &seen, current))
}

/// The `stale` error for a file that is no longer the text an edit was made against.
pub(super) fn stale(display: &str, how: &str, expected: &str, current: &str) -> ToolError {
    ToolError::new(
        ErrorCode::Stale,
        format!(
            "{display} {how} since you last read it (expected hash {expected}, it is now \
             {current}). Re-read it with pen_read and redo the edit against its current text. \
             Nothing was written."
        ),
    )
}
