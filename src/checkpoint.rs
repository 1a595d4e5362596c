//! Reverting turns and forking sessions (SPEC §13), for every front end (`pen/revertTurn`,
//! `pen revert`, ACP's `_pen/revertTurn`, and the forks).
//!
//! A revert of turn T undoes T and every later turn of the session, newest first: each file
//! those turns wrote goes back to its bytes before the first of those writes (or is deleted when
//! it did not exist), through the editor for an open buffer and atomically on disk otherwise.
//!
//! **Invariants.** A file is overwritten only while it holds a state pen recorded for it in
//! those turns (a post-image, or a pre-image: a crash between the record and the write leaves
//! the pre-image): anything else is a change pen did not make (the user's, a command's), a
//! conflict reported with its diff and left untouched unless forced. The revert runs under the
//! session's claim (the engine's registry and the lease), so never while a turn runs there, in
//! this pen or another. It is recorded in the transcript as an event (append-only), and the
//! model is told with its next prompt. Effects of commands cannot be known: the report names
//! every command and MCP call of those turns as not reverted.
//!
//! A revert acts on the path it recorded itself, following no link: a symlink, FIFO or folder
//! standing there is a conflict, and force replaces a link or FIFO itself, never what it names.
//! It is recorded before it acts (`revert_started`) and after (`files_reverted`), so one that a
//! crash stops is reported on the session's next use. A fork carries the checkpoints of the
//! turns it copies.

use std::collections::BTreeMap;
use std::sync::Arc;

use thiserror::Error;
use tokio_util::sync::CancellationToken;

use crate::agent::{BeginError, Engine};
use crate::limits::{Limits, MAX_REVERT_DIFF_BYTES};
use crate::session::checkpoints::{Before, WriteRecord, content_hash};
use crate::session::{NewEntry, SessionError, SessionStore};
use crate::tools::write::revert::{self, Current};
use crate::tools::{Editor, ToolContext};
use crate::transcript::{Event, Item, RevertedFile};
use crate::workspace::{Entry, EntryKind, Workspace};

#[derive(Debug, Error)]
pub enum CheckpointError {
    #[error(transparent)]
    Store(#[from] SessionError),
    /// A turn runs in the session (here or in another pen).
    #[error("{0}")]
    Busy(String),
    #[error("the revert failed: {0}")]
    Task(String),
}

impl From<BeginError> for CheckpointError {
    fn from(error: BeginError) -> Self {
        match error {
            BeginError::Store(SessionError::NotFound(id)) => {
                CheckpointError::Store(SessionError::NotFound(id))
            }
            other => {
                CheckpointError::Busy(format!("cannot revert or fork while a turn runs: {other}"))
            }
        }
    }
}

/// What became of one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileStatus {
    /// Its bytes before the turns are back.
    Reverted,
    /// The turns created it; it is gone.
    Deleted,
    /// It already held its state before the turns (a write a crash stopped, or undone by hand).
    Unchanged,
    /// It changed after pen wrote it; left as it is (see `diff`), unless forced.
    Conflict,
    /// Its state before cannot be restored (`reason` says why).
    NotRevertible,
    /// A revert a crash stopped had not reached it: it still holds what the turns wrote.
    NotReverted,
}

impl FileStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            FileStatus::Reverted => "reverted",
            FileStatus::Deleted => "deleted",
            FileStatus::Unchanged => "unchanged",
            FileStatus::Conflict => "conflict",
            FileStatus::NotRevertible => "not_revertible",
            FileStatus::NotReverted => "not_reverted",
        }
    }
}

/// One file of a revert.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileReport {
    /// As results show it.
    pub path: String,
    pub status: FileStatus,
    /// The turns that wrote it, newest first.
    pub turns: Vec<String>,
    /// For a conflict: the diff from what it holds to what a forced revert would make it.
    pub diff: Option<String>,
    pub reason: Option<String>,
}

/// A call whose effects a revert cannot know (a command, an MCP tool).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnrevertedCall {
    pub turn_id: String,
    pub tool: String,
    /// The command line of a pen_command; else the arguments as JSON.
    pub summary: String,
}

/// A revert a crash stopped, as the next revert found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterruptedRevert {
    /// Its turns, newest first.
    pub turns: Vec<String>,
    /// Each of its files as it stood: `unchanged` (reverted), `not_reverted` or `conflict`.
    pub files: Vec<FileReport>,
    /// What the model is told with its next prompt.
    pub note: String,
}

/// What a revert did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevertReport {
    /// Newest first.
    pub turns: Vec<String>,
    pub files: Vec<FileReport>,
    pub commands: Vec<UnrevertedCall>,
    /// What the model is told with its next prompt.
    pub note: String,
    /// An earlier revert of the session that a crash stopped, closed by this one.
    pub interrupted: Option<InterruptedRevert>,
    /// Turns a fork copied from its original session without their checkpoints (a fork an
    /// earlier pen made): the original's id and those turns, which were not reverted.
    pub uncopied: Option<(String, Vec<String>)>,
}

/// Where a revert runs: the session store, the workspace and the editor's buffers.
pub struct Scope {
    pub store: Arc<SessionStore>,
    pub workspace: Workspace,
    pub limits: Limits,
    pub editor: Option<Arc<dyn Editor + Send + Sync>>,
}

/// Reverts `turn_id` and every later turn of the session under the session's claim (refused
/// while a turn runs there), and records the revert. `force` also overwrites conflicts.
pub async fn revert_turn(
    engine: &Arc<Engine>,
    scope: Scope,
    session_id: &str,
    turn_id: &str,
    force: bool,
) -> Result<RevertReport, CheckpointError> {
    let claim = engine.begin(session_id, CancellationToken::new()).await?;
    let session = session_id.to_string();
    let turn = turn_id.to_string();
    let report =
        tokio::task::spawn_blocking(move || revert_blocking(&scope, &session, &turn, force))
            .await
            .map_err(|e| CheckpointError::Task(e.to_string()))?;
    claim.release().await;
    report
}

/// Starts a new session whose history is `session_id`'s before `before_turn_id` (refused while
/// a turn runs in the original, so the copy is of finished turns). The original is unchanged.
pub async fn fork_session(
    engine: &Arc<Engine>,
    session_id: &str,
    before_turn_id: &str,
) -> Result<String, CheckpointError> {
    let claim = engine.begin(session_id, CancellationToken::new()).await?;
    let store = Arc::clone(engine.store());
    let session = session_id.to_string();
    let turn = before_turn_id.to_string();
    let forked = tokio::task::spawn_blocking(move || {
        let title = store
            .get_session(&session)?
            .title
            .map(|title| format!("fork of {title}"));
        store.fork_session(&session, &turn, title.as_deref())
    })
    .await
    .map_err(|e| CheckpointError::Task(e.to_string()))?;
    claim.release().await;
    Ok(forked?)
}

/// A file's writes in the reverted turns, oldest first.
struct FileWrites<'a> {
    writes: Vec<&'a WriteRecord>,
}

/// The files `writes` wrote with their writes, newest write first (the order a revert undoes
/// them in).
fn by_file(writes: &[WriteRecord]) -> Vec<(&str, FileWrites<'_>)> {
    let mut by_path: BTreeMap<&str, FileWrites<'_>> = BTreeMap::new();
    for write in writes {
        by_path
            .entry(write.path.as_str())
            .or_insert_with(|| FileWrites { writes: Vec::new() })
            .writes
            .push(write);
    }
    let mut files: Vec<(&str, FileWrites<'_>)> = by_path.into_iter().collect();
    files.sort_by_key(|(_, f)| std::cmp::Reverse(f.writes.last().map_or(0, |w| w.id)));
    files
}

/// What a revert does with a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Act {
    /// Puts it back (`force`: over a conflict too).
    Revert { force: bool },
    /// Only says where it stands: as before the turns (`unchanged`), as pen left it
    /// (`not_reverted`), or something else (`conflict`). For a revert a crash stopped.
    Inspect,
}

/// The revert itself (blocking). The caller holds the session's claim.
///
/// It is recorded before it acts (`revert_started`, naming its turns and files) and after
/// (`files_reverted`), so a revert that a crash stops is known: the next revert first closes it
/// with what its files hold then (`files_reverted` with `interrupted`, its report's
/// `interrupted`), and the next turn tells the model (see `agent`).
pub fn revert_blocking(
    scope: &Scope,
    session_id: &str,
    turn_id: &str,
    force: bool,
) -> Result<RevertReport, CheckpointError> {
    let store = &scope.store;
    let all_turns = store.turns(session_id)?;
    let Some(from) = all_turns.iter().position(|t| t == turn_id) else {
        return Err(SessionError::NoSuchTurn {
            session_id: session_id.to_string(),
            turn_id: turn_id.to_string(),
        }
        .into());
    };
    let ctx = ToolContext {
        workspace: &scope.workspace,
        limits: &scope.limits,
        ledger: None,
        editor: scope.editor.as_deref().map(|e| e as &dyn Editor),
        recorder: None,
        sandbox: None,
    };
    let interrupted = close_interrupted(store, session_id, &ctx)?;
    let reverted_turns: Vec<String> = all_turns[from..].to_vec();
    let writes = store.writes_of(session_id, &reverted_turns)?;
    let files = by_file(&writes);
    let mut newest_first = reverted_turns.clone();
    newest_first.reverse();
    // Turns a fork copied without their checkpoints (a fork made by an earlier pen) are said,
    // never taken for turns that changed no file.
    let unrecorded: Vec<String> = reverted_turns
        .iter()
        .filter(|turn| !writes.iter().any(|w| &w.turn_id == *turn))
        .cloned()
        .collect();
    let uncopied = store.uncopied_checkpoints(session_id, &unrecorded)?;
    if !files.is_empty() {
        store.append(
            session_id,
            &NewEntry::item(
                None,
                &Item::Event(Event::RevertStarted {
                    turns: newest_first.clone(),
                    files: files
                        .iter()
                        .filter_map(|(_, f)| f.writes.last().map(|w| w.display.clone()))
                        .collect(),
                }),
            ),
        )?;
    }
    let mut crash_after = crate::session::test_hook("crash_after_reverted_files=");
    let mut reports = Vec::with_capacity(files.len());
    for (path, file) in &files {
        let act = Act::Revert { force };
        reports.push(revert_file(store, session_id, &ctx, path, file, act));
        if let Some(left) = &mut crash_after {
            *left -= 1;
            if *left == 0 {
                // The test hook: as abrupt as `kill -9` in the middle of a revert.
                std::process::abort();
            }
        }
    }
    let commands = unreverted_calls(store, session_id, &reverted_turns)?;
    let note = note(&newest_first, &reports, &commands, uncopied.as_ref());
    record_reverted(store, session_id, &newest_first, &reports, &note, false)?;
    Ok(RevertReport {
        turns: newest_first,
        files: reports,
        commands,
        note,
        interrupted,
        uncopied,
    })
}

/// Appends the `files_reverted` of a revert of `turns` (newest first) that ended with `files`
/// (or, `interrupted`, of one a crash stopped, as the next revert found it).
fn record_reverted(
    store: &SessionStore,
    session_id: &str,
    turns: &[String],
    files: &[FileReport],
    note: &str,
    interrupted: bool,
) -> Result<u64, SessionError> {
    store.append(
        session_id,
        &NewEntry::item(
            None,
            &Item::Event(Event::FilesReverted {
                turns: turns.to_vec(),
                files: files
                    .iter()
                    .map(|r| RevertedFile {
                        path: r.path.clone(),
                        status: r.status.as_str().to_string(),
                    })
                    .collect(),
                note: note.to_string(),
                interrupted,
            }),
        ),
    )
}

/// Closes the session's revert that started and never ended (a crash stopped it), if there is
/// one: each of its files as it stands now (see [`Act::Inspect`]), recorded as
/// `files_reverted` with `interrupted`, whose note the model reads with its next prompt.
fn close_interrupted(
    store: &SessionStore,
    session_id: &str,
    ctx: &ToolContext,
) -> Result<Option<InterruptedRevert>, CheckpointError> {
    let Some(newest_first) = store.open_revert(session_id)? else {
        return Ok(None);
    };
    let mut oldest_first = newest_first.clone();
    oldest_first.reverse();
    let writes = store.writes_of(session_id, &oldest_first)?;
    let files: Vec<FileReport> = by_file(&writes)
        .iter()
        .map(|(path, file)| revert_file(store, session_id, ctx, path, file, Act::Inspect))
        .collect();
    let note = interrupted_note(&newest_first, &files);
    record_reverted(store, session_id, &newest_first, &files, &note, true)?;
    Ok(Some(InterruptedRevert {
        turns: newest_first,
        files,
        note,
    }))
}

/// What the model is told of a revert a crash stopped, found by the next revert.
fn interrupted_note(turns: &[String], files: &[FileReport]) -> String {
    let mut note = format!(
        "[pen] A revert of the file changes of {} turn(s) ({}) was interrupted: pen stopped while \
         it ran. Its files now:",
        turns.len(),
        turns.join(", ")
    );
    for file in files {
        let what = match file.status {
            FileStatus::Unchanged => "as before those turns (reverted)",
            FileStatus::NotReverted => "still as those turns left it (not reverted)",
            FileStatus::Conflict => "changed since pen wrote it (not reverted)",
            _ => "not reverted",
        };
        note.push_str(&format!("\n- {}: {what}", file.path));
    }
    note.push_str("\nRe-read any of these files before you edit them.");
    note
}

fn revert_file(
    store: &SessionStore,
    session_id: &str,
    ctx: &ToolContext,
    path: &str,
    file: &FileWrites<'_>,
    act: Act,
) -> FileReport {
    let force = act == Act::Revert { force: true };
    let (Some(first), Some(last)) = (file.writes.first(), file.writes.last()) else {
        unreachable!("a file is listed only with its writes")
    };
    let mut turns: Vec<String> = Vec::new();
    for write in file.writes.iter().rev() {
        if !turns.contains(&write.turn_id) {
            turns.push(write.turn_id.clone());
        }
    }
    let report = |status, diff, reason: Option<String>| FileReport {
        path: last.display.clone(),
        status,
        turns: turns.clone(),
        diff,
        reason,
    };
    let target: Option<Vec<u8>> = match &first.before {
        Before::Absent => None,
        Before::TooLarge { size, .. } => {
            return report(
                FileStatus::NotRevertible,
                None,
                Some(format!(
                    "not revertible: too large (it was {size} bytes, over the session's \
                     checkpoint_store_bytes)"
                )),
            );
        }
        Before::Stored { hash, .. } => match store.checkpoint_blob(session_id, hash) {
            Ok(Some(bytes)) => Some(bytes),
            Ok(None) => {
                return report(
                    FileStatus::NotRevertible,
                    None,
                    Some("its stored content is missing".to_string()),
                );
            }
            Err(e) => return report(FileStatus::NotRevertible, None, Some(e.to_string())),
        },
    };
    // The revert acts on the recorded path itself: what stands there now, no link followed.
    let entry = match ctx.workspace.entry(std::path::Path::new(path)) {
        Ok(entry) => entry,
        Err(e) => return report(FileStatus::NotRevertible, None, Some(e.to_string())),
    };
    let what = match &entry.kind {
        EntryKind::File | EntryKind::Missing => None,
        EntryKind::Symlink => Some("a symlink"),
        EntryKind::Other => Some("a FIFO, socket or device"),
        EntryKind::Dir => Some("a folder"),
        EntryKind::NotAFolderOnPath(folder) => {
            return report(
                FileStatus::NotRevertible,
                None,
                Some(format!(
                    "{folder}, a folder on its path, is now a symlink or a file; pen neither \
                     follows nor replaces it"
                )),
            );
        }
    };
    if let Some(what) = what {
        return replace_entry(
            ctx,
            path,
            &entry,
            what,
            target.as_deref(),
            first.mode,
            force,
        )
        .map_or_else(
            |(status, reason)| report(status, None, Some(reason)),
            |status| report(status, None, None),
        );
    }
    let now = match revert::current(ctx, path) {
        Ok(now) => now,
        Err(e) => return report(FileStatus::NotRevertible, None, Some(e.message)),
    };
    let now_hash = now.bytes().map(content_hash);
    let target_hash = target.as_deref().map(content_hash);
    if now_hash == target_hash {
        return report(FileStatus::Unchanged, None, None);
    }
    // Every state pen recorded for the file in these turns: what it wrote, and what it found
    // (a crash between a record and its write leaves that).
    let known = now_hash.as_ref().is_some_and(|hash| {
        file.writes.iter().any(|w| {
            &w.after_hash == hash
                || matches!(&w.before, Before::Stored { hash: h, .. } if h == hash)
        })
    });
    if act == Act::Inspect {
        let status = if known {
            FileStatus::NotReverted
        } else {
            FileStatus::Conflict
        };
        return report(status, None, None);
    }
    if !known && !force {
        let diff = revert::revert_diff(
            now.bytes(),
            target.as_deref(),
            &last.display,
            MAX_REVERT_DIFF_BYTES,
        );
        let why = match &now {
            Current::Absent => "it was deleted after pen wrote it",
            _ => "it changed after pen wrote it (an edit, or a command)",
        };
        return report(
            FileStatus::Conflict,
            Some(diff),
            Some(format!("{why}; revert with force to overwrite it")),
        );
    }
    match revert::restore(ctx, path, &now, target.as_deref(), first.mode) {
        Ok(()) if target.is_none() => report(FileStatus::Deleted, None, None),
        Ok(()) => report(FileStatus::Reverted, None, None),
        Err(e) => report(FileStatus::NotRevertible, None, Some(e.message)),
    }
}

/// A file whose recorded path now holds `what` (a symlink, a FIFO, a folder: anything but a
/// regular file) instead of the file pen left: a conflict, whatever it leads to. With `force`
/// the entry itself is removed (a link is never followed, a folder never removed) and the
/// file's state before the turns put in its place: `target`, or nothing for a file they made.
fn replace_entry(
    ctx: &ToolContext,
    path: &str,
    entry: &Entry,
    what: &str,
    target: Option<&[u8]>,
    mode: Option<u32>,
    force: bool,
) -> Result<FileStatus, (FileStatus, String)> {
    if !force {
        return Err((
            FileStatus::Conflict,
            format!(
                "{what} now stands where pen left a regular file; pen does not follow or \
                 replace it; revert with force to replace the entry itself"
            ),
        ));
    }
    if entry.kind == EntryKind::Dir {
        return Err((
            FileStatus::NotRevertible,
            "a folder now stands where pen left a regular file; pen does not remove folders"
                .to_string(),
        ));
    }
    let failed = |e: String| (FileStatus::NotRevertible, e);
    entry
        .remove()
        .map_err(|e| failed(format!("{what} there could not be removed: {e}")))?;
    match target {
        None => Ok(FileStatus::Deleted),
        Some(_) => revert::restore(ctx, path, &Current::Absent, target, mode)
            .map(|()| FileStatus::Reverted)
            .map_err(|e| failed(e.message)),
    }
}

/// The calls of `turns` whose effects are unknown, in order: every call whose tool does not
/// record its writes ([`registry::revertible`]), so pen_command and every MCP tool. A native
/// tool's is summed up by its subject (a command by its command line), any other's by its
/// arguments.
fn unreverted_calls(
    store: &SessionStore,
    session_id: &str,
    turns: &[String],
) -> Result<Vec<UnrevertedCall>, SessionError> {
    use crate::tools::registry;
    Ok(store
        .tool_calls_of(session_id, turns)?
        .into_iter()
        .filter(|(_, tool, _)| !registry::revertible(tool))
        .map(|(turn_id, tool, arguments)| UnrevertedCall {
            summary: match registry::get(&tool).map(|spec| spec.subject(&arguments).summary) {
                Some(summary) if !summary.is_empty() => summary,
                _ => crate::text::cut(&arguments.to_string(), 300).to_string(),
            },
            turn_id,
            tool,
        })
        .collect())
}

/// What the model is told with its next prompt.
fn note(
    turns: &[String],
    files: &[FileReport],
    commands: &[UnrevertedCall],
    uncopied: Option<&(String, Vec<String>)>,
) -> String {
    let mut note = format!(
        "[pen] The owner reverted the file changes of {} turn(s) since your last answer ({}).",
        turns.len(),
        turns.join(", ")
    );
    if files.is_empty() && uncopied.is_none() {
        note.push_str(" They changed no file.");
    }
    for file in files {
        let what = match file.status {
            FileStatus::Reverted => "restored to its content before those turns",
            FileStatus::Deleted => "deleted (those turns created it)",
            FileStatus::Unchanged => "already as before those turns",
            FileStatus::Conflict => "kept as it is (it changed after pen wrote it)",
            FileStatus::NotRevertible | FileStatus::NotReverted => "not reverted",
        };
        note.push_str(&format!("\n- {}: {what}", file.path));
    }
    if !commands.is_empty() {
        note.push_str(&format!(
            "\nThe effects of {} command(s) of those turns were not reverted.",
            commands.len()
        ));
    }
    if let Some((original, turns)) = uncopied {
        note.push_str(&format!(
            "\n{} of these turns ({}) were copied from session {original} by a fork that kept \
             no record of their file changes: their files were not reverted here (revert them \
             in {original}).",
            turns.len(),
            turns.join(", ")
        ));
    }
    note.push_str("\nRe-read any of these files before you edit them.");
    note
}
