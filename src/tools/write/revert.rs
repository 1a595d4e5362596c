//! Putting a file back as a checkpoint recorded it (SPEC §13): reading what it holds now (the
//! editor's buffer when it is open, else the disk) and restoring earlier bytes exactly — through
//! the editor's own edit for an open buffer, so the user can undo the revert, else atomically on
//! disk with its permission bits — or deleting a file pen created.
//!
//! Every path is opened beneath the workspace roots as the tools open them (no symlink is
//! followed out of a root, none is written through).

use super::diff::replacements;
use crate::limits::{DIFF_CONTEXT_LINES, DIFF_TIMEOUT};
use crate::tools::source::{self, ByteSource, Source};
use crate::tools::{ErrorCode, ToolContext, ToolError};
use crate::workspace::{Landing, Target, write_in};
use similar::TextDiff;
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;

/// What a file holds now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Current {
    /// Nothing is at the path.
    Absent,
    /// A regular file on disk, with its permission bits.
    Disk { bytes: Vec<u8>, mode: u32 },
    /// The editor's open buffer at this version.
    Buffer { bytes: Vec<u8>, version: i32 },
}

impl Current {
    /// The bytes, or `None` when nothing is there.
    pub fn bytes(&self) -> Option<&[u8]> {
        match self {
            Current::Absent => None,
            Current::Disk { bytes, .. } | Current::Buffer { bytes, .. } => Some(bytes),
        }
    }
}

/// What the file at `absolute` holds now. Anything that is not a regular file or an open
/// buffer (a folder, a symlink whose target is missing) is an error.
pub fn current(ctx: &ToolContext, absolute: &str) -> Result<Current, ToolError> {
    let opened = match source::open_file(ctx, absolute) {
        Ok(opened) => opened,
        Err(err) if err.code == ErrorCode::NotFound => return Ok(Current::Absent),
        Err(err) => return Err(err),
    };
    let len = opened.source.len();
    let display = opened.resolved.display.clone();
    let bytes =
        source::read_range(&opened.source, 0, len).map_err(|e| ToolError::io(&display, &e))?;
    Ok(match (&opened.source, &opened.opened.target) {
        (Source::Editor(snapshot), _) => Current::Buffer {
            bytes,
            version: snapshot.version,
        },
        (_, Target::File(_, metadata)) => Current::Disk {
            bytes,
            mode: metadata.permissions().mode() & 0o7777,
        },
        _ => {
            return Err(ToolError::new(
                ErrorCode::NotAFile,
                format!("{display} is not a regular file"),
            ));
        }
    })
}

/// Makes the file at `absolute`, which holds `now`, hold `target` (`None`: delete it). An open
/// buffer is changed through the editor (its undo restores the text it had); anything else is
/// written atomically with `mode` (or the file's own mode when `None`).
pub fn restore(
    ctx: &ToolContext,
    absolute: &str,
    now: &Current,
    target: Option<&[u8]>,
    mode: Option<u32>,
) -> Result<(), ToolError> {
    let opened = ctx.open(absolute)?;
    let display = opened.resolved.display.clone();
    let io = |e: std::io::Error| ToolError::io(&display, &e);
    match (now, target) {
        (Current::Buffer { bytes, version }, Some(target)) => {
            let editor = ctx.editor.ok_or_else(|| {
                ToolError::new(ErrorCode::Stale, format!("{display}: the editor went away"))
            })?;
            let (Ok(before), Ok(after)) = (std::str::from_utf8(bytes), std::str::from_utf8(target))
            else {
                return Err(ToolError::new(
                    ErrorCode::InvalidUtf8,
                    format!("{display} is not UTF-8 text, so the editor cannot take it"),
                ));
            };
            editor
                .apply(
                    &opened.resolved.absolute,
                    *version,
                    &replacements(before, after, 0),
                )
                .map_err(|reason| {
                    ToolError::new(
                        ErrorCode::Stale,
                        format!("the editor did not apply the revert of {display}: {reason}"),
                    )
                })
        }
        (Current::Absent, None) => Ok(()),
        (_, None) => {
            let Some((dir, name)) = opened.place() else {
                return Err(ToolError::new(
                    ErrorCode::NotAFile,
                    format!("{display} has no folder"),
                ));
            };
            rustix::fs::unlinkat(dir, name, rustix::fs::AtFlags::empty()).map_err(|e| io(e.into()))
        }
        (Current::Disk { mode: now_mode, .. }, Some(target)) => {
            let Some((dir, name)) = opened.place() else {
                return Err(ToolError::new(
                    ErrorCode::NotAFile,
                    format!("{display} has no folder"),
                ));
            };
            write_in(
                dir,
                name,
                target,
                Landing::Replace(mode.unwrap_or(*now_mode)),
            )
            .map_err(io)
        }
        (Current::Absent, Some(target)) => {
            let (dir, name) = opened.make_parents().map_err(io)?;
            match mode {
                Some(mode) => {
                    write_in(dir.as_fd(), name, target, Landing::New).map_err(io)?;
                    // The new file gets the mode it had; written then set, as `chmod` would.
                    rustix::fs::chmodat(
                        dir.as_fd(),
                        name,
                        rustix::fs::Mode::from_raw_mode(mode),
                        rustix::fs::AtFlags::empty(),
                    )
                    .map_err(|e| io(e.into()))
                }
                None => write_in(dir.as_fd(), name, target, Landing::New).map_err(io),
            }
        }
    }
}

/// The unified diff from `from` (what the file holds) to `to` (what a forced revert would make
/// it), its private-key lines withheld, cut to `max_bytes` on a character boundary.
pub fn revert_diff(
    from: Option<&[u8]>,
    to: Option<&[u8]>,
    display: &str,
    max_bytes: usize,
) -> String {
    let text = |bytes: Option<&[u8]>| -> String {
        let Some(bytes) = bytes else {
            return String::new();
        };
        let spans = crate::tools::keys::private_key_spans(bytes);
        let text = String::from_utf8_lossy(bytes);
        if spans.is_empty() {
            return text.into_owned();
        }
        text.split_inclusive('\n')
            .scan(0usize, |at, line| {
                let start = *at;
                *at += line.len();
                let keyed = spans.iter().any(|s| s.start < *at && start < s.end);
                Some(if keyed {
                    "[private key line withheld]\n".to_string()
                } else {
                    line.to_string()
                })
            })
            .collect()
    };
    let (from, to) = (text(from), text(to));
    let diff = TextDiff::configure()
        .timeout(DIFF_TIMEOUT)
        .diff_lines(&from, &to)
        .unified_diff()
        .context_radius(DIFF_CONTEXT_LINES)
        .header(&format!("a/{display}"), &format!("b/{display}"))
        .to_string();
    crate::text::cut_with_note(&diff, max_bytes, "\n…[diff cut]\n").into_owned()
}
