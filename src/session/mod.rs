//! Sessions: durable, append-only transcripts in an embedded SQLite database (SPEC §4).
//!
//! A [`SessionStore`] is one connection to `<data_dir>/sessions.sqlite3`. Several stores, in
//! one process or in several daemons (VS Code's and Neovim's on one machine), may share the
//! file: writes take SQLite's write lock up front (`BEGIN IMMEDIATE`), so two appends to one
//! session never race for a sequence number, and a busy database is waited for and retried
//! inside the store instead of being reported as "database is locked".
//!
//! **Invariants.** The transcript is append-only: there is no API to change or remove an entry,
//! and triggers in the schema refuse it. [`SessionStore::append`] returns only after its
//! transaction committed, so an entry it numbered survives the process being killed. Sequence
//! numbers in a session run 1, 2, 3… without gaps, which makes `entry_count` the last seq.
//!
//! **Every call is answered exactly once.** The calls of an assistant message are committed
//! with it (a schema trigger lists them in `message_calls` in the inserting transaction), so
//! whatever moment the process dies at, [`SessionStore::recover_interrupted`] finds every call
//! of every message that has no result and appends one: "interrupted; outcome unknown" when
//! a `tool_call` entry says it may have started, "not executed" when it cannot have. It only
//! appends, so it also repairs sessions written before this list existed.
//!
//! **One running turn per session across processes.** A turn runs under the session's lease
//! (`session_leases`: owner pid, a token unique to the process start, a heartbeat), taken in one
//! IMMEDIATE transaction and refused with [`SessionError::LeaseHeld`] while another live
//! process holds it. A lease expires when its heartbeat is older than
//! [`SESSION_LEASE_EXPIRY`] or its process is gone. Recovery runs only under the lease, so it
//! never answers a call a live process is running.
//!
//! **API boundary.** Plain Rust: no JSON-RPC, provider or async types. Every call blocks on
//! SQLite, so a caller on an async runtime runs it on a blocking thread. Payloads are
//! free-form JSON owned by the caller; the store only reads a payload's `call_id` and, of an
//! assistant message, the `id` of each element of its `tool_calls` array.
//!
//! **Secrets.** Never put API keys or other credentials in a title or payload: the database is
//! a plain file under the data directory, and an entry can never be removed.

pub mod checkpoints;
pub mod latest;
mod schema;
#[cfg(test)]
mod tests;

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, ErrorCode, OptionalExtension, Row, Transaction, TransactionBehavior};
use rusqlite::{params, types::ValueRef};

use serde_json::Value;
use thiserror::Error;
use uuid::Uuid;

use crate::limits::{
    MAX_SESSION_PAGE, MAX_SESSION_PAGE_BYTES, MAX_SESSION_TITLE_BYTES, MAX_TRANSCRIPT_PAGE_BYTES,
    MAX_TRANSCRIPT_PAGE_ENTRIES, SESSION_LEASE_EXPIRY, SQLITE_BUSY_BACKOFF, SQLITE_BUSY_RETRIES,
};

/// The environment variable that overrides the data directory.
pub const DATA_DIR_ENV: &str = "PEN_DATA_DIR";

/// The database file inside the data directory.
pub const DATABASE_FILE: &str = "sessions.sqlite3";

/// Every session id starts with this, followed by the 32 hex digits of a UUIDv7.
pub const SESSION_ID_PREFIX: &str = "s_";

/// The outcome of the result recorded for a tool call that a crash interrupted.
pub const INTERRUPTED_STATUS: CallOutcome = CallOutcome::Interrupted;

/// The `content` of the result recorded for a tool call that a crash interrupted (SPEC §4).
pub const INTERRUPTED_CONTENT: &str =
    "interrupted; outcome unknown — inspect the state before retrying";

/// The `status` of the result recorded for a call of an assistant message that a crash left
/// before the call started (it has no `tool_call` entry, so it cannot have run).
pub const NOT_STARTED_STATUS: CallOutcome = CallOutcome::NotExecuted;

/// The `content` of the result recorded for a call that a crash left before it started.
pub const NOT_STARTED_CONTENT: &str = "not executed: pen stopped (a crash or a kill) before this call started, so it did not run; \
     run it again if it is still needed";

/// The environment variable of test hooks: `crash_after_appends=N` makes the process abort
/// (as abruptly as `kill -9`) right after its N-th committed write to the transcript, so the
/// durability tests can stop pen at every point of a turn. Nothing else reads it.
pub const TEST_HOOKS_ENV: &str = "PEN_TEST_HOOKS";

/// The data directory: `$PEN_DATA_DIR` when set and not empty, else `pen` in the platform's
/// data directory (`~/.local/share/pen` on Linux).
pub fn default_data_dir() -> Result<PathBuf, SessionError> {
    resolve_data_dir(std::env::var_os(DATA_DIR_ENV), dirs::data_dir())
}

fn resolve_data_dir(
    from_env: Option<OsString>,
    platform_data_dir: Option<PathBuf>,
) -> Result<PathBuf, SessionError> {
    match from_env.filter(|dir| !dir.is_empty()) {
        Some(dir) => Ok(PathBuf::from(dir)),
        None => platform_data_dir
            .map(|dir| dir.join("pen"))
            .ok_or(SessionError::NoDataDir),
    }
}

pub use crate::transcript::EntryKind;
use crate::transcript::{CallOutcome, Item, ToolResult};

/// An entry to append. The store assigns its `seq` and `created_at`.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEntry {
    pub kind: EntryKind,
    pub turn_id: Option<String>,
    /// Free-form JSON. Tool calls and results carry a string `call_id`. Never a secret.
    pub payload: Value,
}

impl NewEntry {
    /// The entry that records `item`.
    pub fn item(turn_id: Option<String>, item: &Item) -> NewEntry {
        NewEntry {
            kind: item.kind(),
            turn_id,
            payload: item.to_payload(),
        }
    }
}

/// A stored entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// 1, 2, 3… within the session, without gaps.
    pub seq: u64,
    pub kind: EntryKind,
    pub turn_id: Option<String>,
    pub payload: Value,
    /// Unix milliseconds; never earlier than the entry before it.
    pub created_at: i64,
}

impl Entry {
    /// The typed content of the entry.
    pub fn item(&self) -> Item {
        Item::from_stored(self.kind, &self.payload)
    }

    /// The entry as a typed record.
    pub fn record(&self) -> crate::transcript::Record {
        crate::transcript::Record {
            seq: self.seq,
            turn_id: self.turn_id.clone(),
            created_at: self.created_at,
            item: self.item(),
        }
    }
}

/// A session's summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    pub id: String,
    pub title: Option<String>,
    /// Unix milliseconds.
    pub created_at: i64,
    /// Unix milliseconds: the newest entry's `created_at`, or `created_at` while there is none.
    pub updated_at: i64,
    /// The number of entries, which is also the last entry's `seq`.
    pub entry_count: u64,
}

/// One page of [`SessionStore::list_sessions`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionPage {
    pub sessions: Vec<SessionInfo>,
    /// Pass back to get the next page; `None` on the last page.
    pub next_cursor: Option<String>,
}

/// One page of [`SessionStore::transcript`].
#[derive(Debug, Clone, PartialEq)]
pub struct TranscriptPage {
    pub entries: Vec<Entry>,
    /// Pass back as `after_seq` to get the next page; `None` once the page reached the end.
    pub next_after_seq: Option<u64>,
}

#[derive(Debug, Error)]
pub enum SessionError {
    #[error("no session has the id {0:?}")]
    NotFound(String),
    #[error("no data directory: set {DATA_DIR_ENV} or HOME")]
    NoDataDir,
    #[error("cannot create the data directory {path}: {error}")]
    CreateDir {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("cannot open the session database {path}: {error}")]
    Open {
        path: PathBuf,
        error: rusqlite::Error,
    },
    #[error(
        "the session database {path} cannot use write-ahead logging (journal mode is {mode:?}); \
         keep the data directory on a local file system, or point {DATA_DIR_ENV} at one"
    )]
    NotWal { path: PathBuf, mode: String },
    #[error(
        "the session database {path} has schema version {found}, but this pen supports versions \
         up to {supported}: it was written by a newer pen. Upgrade pen, or point {DATA_DIR_ENV} \
         at another directory"
    )]
    NewerSchema {
        path: PathBuf,
        found: i64,
        supported: i64,
    },
    #[error("session database error while {context}: {error}")]
    Database {
        context: &'static str,
        error: rusqlite::Error,
    },
    /// SQLite still reported the database busy after every retry: another process held its
    /// write lock for far longer than any pen write takes.
    #[error(
        "the session database stayed busy while {context}, through {attempts} attempts: \
         another process is holding its lock. Try again"
    )]
    Busy {
        context: &'static str,
        attempts: u32,
        #[source]
        source: rusqlite::Error,
    },
    /// The blocking thread that ran a store call failed (it panicked or was cancelled).
    #[error("the session store call failed: {0}")]
    Task(String),
    #[error(
        "invalid session cursor {0:?}: pass back the next_cursor of the previous page as it was"
    )]
    InvalidCursor(String),
    /// Another live process holds the session's lease: it is running a turn there.
    #[error("session {session_id} is running a turn in another pen (pid {pid})")]
    LeaseHeld { session_id: String, pid: u32 },
    /// An operation that needs the session's lease was called without holding it.
    #[error(
        "this pen does not hold the lease of session {0}: another pen took it over (its turn here \
         stopped renewing it for too long)"
    )]
    LeaseNotHeld(String),
    #[error("session {session_id} has no turn {turn_id:?}")]
    NoSuchTurn { session_id: String, turn_id: String },
    #[error("entry {seq} of session {session_id} is unreadable: {reason}")]
    CorruptEntry {
        session_id: String,
        seq: u64,
        reason: String,
    },
}

/// What an operation inside a transaction fails with: a SQLite error, which
/// [`SessionStore::transaction`] retries when busy and otherwise labels with the operation, or
/// a finished [`SessionError`] such as `NotFound`, passed through as it is.
enum StoreError {
    Sqlite(rusqlite::Error),
    Session(SessionError),
}

impl From<rusqlite::Error> for StoreError {
    fn from(error: rusqlite::Error) -> Self {
        StoreError::Sqlite(error)
    }
}

impl From<SessionError> for StoreError {
    fn from(error: SessionError) -> Self {
        StoreError::Session(error)
    }
}

/// `NotFound` unless the session exists.
fn require_session(tx: &Transaction<'_>, session_id: &str) -> Result<(), StoreError> {
    let exists = tx
        .prepare_cached("SELECT 1 FROM sessions WHERE id = ?1")?
        .exists(params![session_id])?;
    if exists {
        Ok(())
    } else {
        Err(SessionError::NotFound(session_id.to_owned()).into())
    }
}

/// Runs `op` until it succeeds, fails with something other than a busy or locked database, or
/// has been retried [`SQLITE_BUSY_RETRIES`] times. SQLite's busy timeout already waits for
/// most locks; this covers the cases where SQLite answers busy at once (a WAL being recovered
/// after a crash, a schema change by another connection) and the rare wait that times out.
/// `op` must leave nothing behind when it fails, as a rolled-back transaction does.
fn retry_busy<T>(
    context: &'static str,
    mut op: impl FnMut() -> Result<T, StoreError>,
) -> Result<T, SessionError> {
    let mut retries = 0;
    loop {
        match op() {
            Ok(value) => return Ok(value),
            Err(StoreError::Session(error)) => return Err(error),
            Err(StoreError::Sqlite(error)) if is_busy(&error) => {
                if retries == SQLITE_BUSY_RETRIES {
                    return Err(SessionError::Busy {
                        context,
                        attempts: retries + 1,
                        source: error,
                    });
                }
                retries += 1;
                std::thread::sleep(SQLITE_BUSY_BACKOFF * retries);
            }
            Err(StoreError::Sqlite(error)) => {
                return Err(SessionError::Database { context, error });
            }
        }
    }
}

fn is_busy(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

/// The durable session store: one SQLite connection, safe to share between threads (calls
/// take turns on the connection) and between processes (SQLite's locks).
pub struct SessionStore {
    path: PathBuf,
    conn: Mutex<Connection>,
    /// The clock that stamps sessions and entries, in Unix milliseconds. Tests replace it to
    /// make every write land in a new millisecond.
    now_ms: Box<dyn Fn() -> i64 + Send + Sync>,
    /// The test hook `crash_after_appends`: the committed writes left before the process
    /// aborts; `None` (always, outside the durability tests) disables it.
    crash_after: Option<AtomicU64>,
    /// The test hook `crash_after_checkpoints`: the checkpoint records left before the process
    /// aborts (between a pre-image's commit and its write); `None` outside those tests.
    crash_after_checkpoints: Option<AtomicU64>,
}

impl fmt::Debug for SessionStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SessionStore {
    /// Opens (creating when missing) the data directory and `sessions.sqlite3` in it, and
    /// brings the schema up to date. A database written by a newer pen is refused with
    /// [`SessionError::NewerSchema`] rather than misread.
    pub fn open(data_dir: &Path) -> Result<SessionStore, SessionError> {
        SessionStore::open_with_clock(data_dir, Box::new(unix_now_ms))
    }

    fn open_with_clock(
        data_dir: &Path,
        now_ms: Box<dyn Fn() -> i64 + Send + Sync>,
    ) -> Result<SessionStore, SessionError> {
        create_private_dir(data_dir).map_err(|error| SessionError::CreateDir {
            path: data_dir.to_path_buf(),
            error,
        })?;
        let path = data_dir.join(DATABASE_FILE);
        let mut conn = Connection::open(&path).map_err(|error| SessionError::Open {
            path: path.clone(),
            error,
        })?;
        retry_busy("opening the database", || schema::prepare(&mut conn, &path))?;
        Ok(SessionStore {
            path,
            conn: Mutex::new(conn),
            now_ms,
            crash_after: crash_after_appends_hook().map(AtomicU64::new),
            crash_after_checkpoints: test_hook("crash_after_checkpoints=").map(AtomicU64::new),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Creates an empty session with a new id: `s_` and a UUIDv7 in hex, so ids are URL-safe
    /// and sort by creation time.
    /// A title longer than [`MAX_SESSION_TITLE_BYTES`] is cut to it on a character boundary.
    pub fn new_session(&self, title: Option<&str>) -> Result<SessionInfo, SessionError> {
        let id = format!("{SESSION_ID_PREFIX}{}", Uuid::now_v7().simple());
        let title = title.map(bounded_title);
        self.transaction(TransactionBehavior::Immediate, "creating a session", |tx| {
            let now = (self.now_ms)();
            let tick = next_tick(tx)?;
            tx.prepare_cached(
                "INSERT INTO sessions (id, title, created_at, updated_at, created_tick)
                 VALUES (?1, ?2, ?3, ?3, ?4)",
            )?
            .execute(params![id, title, now, tick])?;
            Ok(SessionInfo {
                id: id.clone(),
                title: title.map(str::to_owned),
                created_at: now,
                updated_at: now,
                entry_count: 0,
            })
        })
    }

    /// The session's summary, or [`SessionError::NotFound`].
    pub fn get_session(&self, session_id: &str) -> Result<SessionInfo, SessionError> {
        self.transaction(TransactionBehavior::Deferred, "reading a session", |tx| {
            tx.prepare_cached(
                "SELECT s.id, s.title, s.created_at, s.updated_at,
                        COALESCE((SELECT MAX(e.seq) FROM entries AS e WHERE e.session_id = s.id), 0)
                 FROM sessions AS s WHERE s.id = ?1",
            )?
            .query_row(params![session_id], session_info)
            .optional()?
            .ok_or_else(|| SessionError::NotFound(session_id.to_owned()).into())
        })
    }

    /// Sessions, most recently updated first (ties by id, descending), at most `limit` of them
    /// (lowered to [`MAX_SESSION_PAGE`]; 0 counts as 1) and, beyond the first, at most
    /// [`MAX_SESSION_PAGE_BYTES`] of ids and titles. Every session is listed, empty ones too;
    /// see [`SessionStore::list_sessions_with`].
    ///
    /// A listing is a snapshot taken by its first page: the cursor carries it, so later pages
    /// show sessions as they were then. Sessions created meanwhile are left out, and one
    /// appended to meanwhile keeps its old place, so paging to the end returns every session
    /// that existed at the first page exactly once. Each page reads every session's summary
    /// (an index seek apiece), which is cheap at the thousands of sessions one person makes.
    pub fn list_sessions(
        &self,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<SessionPage, SessionError> {
        self.list_sessions_with(cursor, limit, true)
    }

    /// [`SessionStore::list_sessions`], leaving out the sessions with no work in them unless
    /// `include_empty`: those with entries but no assistant message, which is what a turn whose
    /// provider failed at once (connection refused, no key) leaves behind. They stay in the
    /// store and can be resumed by id. A session with no entry at all (just created) is listed.
    pub fn list_sessions_with(
        &self,
        cursor: Option<&str>,
        limit: usize,
        include_empty: bool,
    ) -> Result<SessionPage, SessionError> {
        let after = cursor.map(SessionCursor::parse).transpose()?;
        let limit = limit.clamp(1, MAX_SESSION_PAGE);
        self.transaction(TransactionBehavior::Deferred, "listing sessions", |tx| {
            let tick = match &after {
                Some(cursor) => cursor.tick,
                None => tx.query_row("SELECT tick FROM store_clock", [], |row| row.get(0))?,
            };
            let mut sessions = tx
                .prepare_cached(
                    "WITH snapshot AS (
                         SELECT s.id, substr(s.title, 1, ?6) AS title, s.created_at,
                                COALESCE(newest.created_at, s.created_at) AS updated_at,
                                COALESCE(newest.seq, 0) AS entry_count
                         FROM sessions AS s
                         LEFT JOIN entries AS newest
                           ON newest.session_id = s.id
                          AND newest.seq = (SELECT e.seq FROM entries AS e
                                            WHERE e.session_id = s.id AND e.tick <= ?1
                                            ORDER BY e.seq DESC LIMIT 1)
                         WHERE s.created_tick <= ?1
                           AND (?5 OR newest.seq IS NULL
                                OR EXISTS (SELECT 1 FROM entries AS a
                                           WHERE a.session_id = s.id AND a.tick <= ?1
                                             AND a.kind = 'assistant_message'))
                     )
                     SELECT id, title, created_at, updated_at, entry_count FROM snapshot
                     WHERE ?2 IS NULL OR (updated_at, id) < (?2, ?3)
                     ORDER BY updated_at DESC, id DESC
                     LIMIT ?4",
                )?
                .query_map(
                    params![
                        tick,
                        after.as_ref().map(|cursor| cursor.updated_at),
                        after.as_ref().map(|cursor| cursor.id.as_str()),
                        limit + 1,
                        include_empty,
                        // Characters, at most four bytes each: `session_info` cuts to bytes.
                        MAX_SESSION_TITLE_BYTES,
                    ],
                    session_info,
                )?
                .collect::<Result<Vec<_>, _>>()?;
            let mut page_bytes = 0;
            let fits = sessions
                .iter()
                .position(|info| {
                    page_bytes += summary_bytes(info);
                    page_bytes > MAX_SESSION_PAGE_BYTES
                })
                .unwrap_or(sessions.len())
                .max(1);
            let mut next_cursor = None;
            if sessions.len() > limit.min(fits) {
                sessions.truncate(limit.min(fits));
                next_cursor = sessions.last().map(|last| {
                    SessionCursor {
                        tick,
                        updated_at: last.updated_at,
                        id: last.id.clone(),
                    }
                    .encode()
                });
            }
            Ok(SessionPage {
                sessions,
                next_cursor,
            })
        })
    }

    /// Appends one entry and returns its seq once the transaction committed.
    pub fn append(&self, session_id: &str, entry: &NewEntry) -> Result<u64, SessionError> {
        let seq = self.transaction(TransactionBehavior::Immediate, "appending an entry", |tx| {
            insert_entries(tx, session_id, std::slice::from_ref(entry), (self.now_ms)())
        })?;
        self.committed_append();
        Ok(seq)
    }

    /// Appends entries in one transaction, all or none, and returns their seqs (consecutive).
    pub fn append_many(
        &self,
        session_id: &str,
        entries: &[NewEntry],
    ) -> Result<Vec<u64>, SessionError> {
        let first =
            self.transaction(TransactionBehavior::Immediate, "appending entries", |tx| {
                insert_entries(tx, session_id, entries, (self.now_ms)())
            })?;
        if !entries.is_empty() {
            self.committed_append();
        }
        Ok((first..).take(entries.len()).collect())
    }

    /// Entries with a seq above `after_seq` (all when `None`), in order: at most `limit`
    /// (lowered to [`MAX_TRANSCRIPT_PAGE_ENTRIES`]; 0 counts as 1) and, beyond the first entry,
    /// at most [`MAX_TRANSCRIPT_PAGE_BYTES`] of payload.
    pub fn transcript(
        &self,
        session_id: &str,
        after_seq: Option<u64>,
        limit: usize,
    ) -> Result<TranscriptPage, SessionError> {
        let limit = limit.clamp(1, MAX_TRANSCRIPT_PAGE_ENTRIES);
        // SQLite integers are signed; no seq is above i64::MAX, so the page is then empty.
        let after_seq = after_seq.unwrap_or(0).min(i64::MAX as u64);
        self.transaction(
            TransactionBehavior::Deferred,
            "reading a transcript",
            |tx| {
                require_session(tx, session_id)?;
                let mut statement = tx.prepare_cached(
                    "SELECT seq, kind, turn_id, created_at, payload FROM entries
                     WHERE session_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
                )?;
                let mut rows = statement.query(params![session_id, after_seq, limit + 1])?;
                let mut entries: Vec<Entry> = Vec::new();
                let mut payload_bytes = 0;
                let mut next_after_seq = None;
                while let Some(row) = rows.next()? {
                    let payload = row.get_ref(4)?.as_str().map_err(rusqlite::Error::from)?;
                    let full = entries.len() == limit
                        || (!entries.is_empty()
                            && payload_bytes + payload.len() > MAX_TRANSCRIPT_PAGE_BYTES);
                    if full {
                        next_after_seq = entries.last().map(|entry| entry.seq);
                        break;
                    }
                    payload_bytes += payload.len();
                    entries.push(read_entry(session_id, row, payload)?);
                }
                Ok(TranscriptPage {
                    entries,
                    next_after_seq,
                })
            },
        )
    }

    /// Answers every call of the session that has no result, so that every call ends with
    /// exactly one: each call of an assistant message (listed in `message_calls`, committed
    /// with the message) with no later `tool_result` of its `call_id`. In call order, it
    /// appends a `tool_result` with the
    /// call's turn id and payload `{call_id, status, content, is_error: true}`:
    /// [`INTERRUPTED_STATUS`] / [`INTERRUPTED_CONTENT`] when the call has a `tool_call` entry
    /// (it may have started), else [`NOT_STARTED_STATUS`] / [`NOT_STARTED_CONTENT`]. Returns the
    /// new seqs; running it again appends nothing.
    ///
    /// `owner` must hold the session's lease ([`SessionStore::acquire_lease`]), checked in the
    /// same transaction, else [`SessionError::LeaseNotHeld`]: a call another process is running
    /// right now has no result yet either, and only the lease says nobody is running one.
    pub fn recover_interrupted(
        &self,
        session_id: &str,
        owner: &LeaseOwner,
    ) -> Result<Vec<u64>, SessionError> {
        let seqs = self.transaction(
            TransactionBehavior::Immediate,
            "recording interrupted tool calls",
            |tx| {
                // An unknown session is NotFound, whoever asks.
                insert_entries(tx, session_id, &[], (self.now_ms)())?;
                let holder: Option<String> = tx
                    .prepare_cached("SELECT owner_token FROM session_leases WHERE session_id = ?1")?
                    .query_row(params![session_id], |row| row.get(0))
                    .optional()?;
                if holder.as_deref() != Some(owner.token.as_str()) {
                    return Err(SessionError::LeaseNotHeld(session_id.to_owned()).into());
                }
                let results: Vec<NewEntry> = unanswered_calls(tx, session_id)?
                    .into_iter()
                    .map(|call| {
                        let (status, content) = if call.started {
                            (INTERRUPTED_STATUS, INTERRUPTED_CONTENT)
                        } else {
                            (NOT_STARTED_STATUS, NOT_STARTED_CONTENT)
                        };
                        NewEntry::item(
                            call.turn_id,
                            &Item::ToolResult(ToolResult {
                                call_id: call.call_id,
                                name: None,
                                content: content.to_string(),
                                is_error: true,
                                outcome: Some(status),
                            }),
                        )
                    })
                    .collect();
                let first = insert_entries(tx, session_id, &results, (self.now_ms)())?;
                Ok((first..).take(results.len()).collect::<Vec<u64>>())
            },
        )?;
        if !seqs.is_empty() {
            self.committed_append();
        }
        Ok(seqs)
    }

    /// Takes the session's lease for `owner`, in one IMMEDIATE transaction: one turn at a time
    /// per session across every process sharing the database. Fails with
    /// [`SessionError::LeaseHeld`] while another owner's lease is live: its heartbeat is newer
    /// than [`SESSION_LEASE_EXPIRY`] and its process is alive. A lease `owner` already holds is
    /// taken again (its heartbeat renewed).
    pub fn acquire_lease(&self, session_id: &str, owner: &LeaseOwner) -> Result<(), SessionError> {
        self.transaction(
            TransactionBehavior::Immediate,
            "taking a session lease",
            |tx| {
                require_session(tx, session_id)?;
                let now = (self.now_ms)();
                let holder: Option<(i64, String, i64)> = tx
                    .prepare_cached(
                        "SELECT owner_pid, owner_token, heartbeat_at FROM session_leases
                         WHERE session_id = ?1",
                    )?
                    .query_row(params![session_id], |row| {
                        Ok((row.get(0)?, row.get(1)?, row.get(2)?))
                    })
                    .optional()?;
                if let Some((pid, token, heartbeat_at)) = holder
                    && token != owner.token
                    && lease_is_live(pid, &token, heartbeat_at, now)
                {
                    return Err(SessionError::LeaseHeld {
                        session_id: session_id.to_owned(),
                        pid: u32::try_from(pid).unwrap_or_default(),
                    }
                    .into());
                }
                tx.prepare_cached(
                    "INSERT OR REPLACE INTO session_leases
                         (session_id, owner_pid, owner_token, acquired_at, heartbeat_at)
                     VALUES (?1, ?2, ?3, ?4, ?4)",
                )?
                .execute(params![session_id, owner.pid, owner.token, now])?;
                Ok(())
            },
        )
    }

    /// Renews the heartbeat of `owner`'s lease on the session. `false` when `owner` no longer
    /// holds it (it expired and another process took it).
    pub fn renew_lease(&self, session_id: &str, owner: &LeaseOwner) -> Result<bool, SessionError> {
        self.transaction(
            TransactionBehavior::Immediate,
            "renewing a session lease",
            |tx| {
                let renewed = tx
                    .prepare_cached(
                        "UPDATE session_leases SET heartbeat_at = ?3
                         WHERE session_id = ?1 AND owner_token = ?2",
                    )?
                    .execute(params![session_id, owner.token, (self.now_ms)()])?;
                Ok(renewed == 1)
            },
        )
    }

    /// Gives up `owner`'s lease on the session; a lease held by another owner is left alone.
    pub fn release_lease(&self, session_id: &str, owner: &LeaseOwner) -> Result<(), SessionError> {
        self.transaction(
            TransactionBehavior::Immediate,
            "releasing a session lease",
            |tx| {
                tx.prepare_cached(
                    "DELETE FROM session_leases WHERE session_id = ?1 AND owner_token = ?2",
                )?
                .execute(params![session_id, owner.token])?;
                Ok(())
            },
        )
    }

    /// The test hook: aborts the process once the configured number of checkpoints committed.
    fn committed_checkpoint(&self) {
        if let Some(left) = &self.crash_after_checkpoints
            && left.fetch_sub(1, AtomicOrdering::SeqCst) == 1
        {
            std::process::abort();
        }
    }

    /// The test hook: aborts the process once the configured number of writes committed.
    fn committed_append(&self) {
        if let Some(left) = &self.crash_after
            && left.fetch_sub(1, AtomicOrdering::SeqCst) == 1
        {
            // As abrupt as `kill -9`: no destructor runs and SQLite is not closed.
            std::process::abort();
        }
    }

    /// Runs `op` in a transaction and commits it, retrying from the start while the database
    /// is busy. Writes use `Immediate`, which takes the write lock before reading anything, so
    /// a write never has to upgrade a read lock, the one wait SQLite cannot resolve by waiting.
    fn transaction<T>(
        &self,
        behavior: TransactionBehavior,
        context: &'static str,
        mut op: impl FnMut(&Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, SessionError> {
        let mut conn = self.lock();
        retry_busy(context, || {
            let tx = conn.transaction_with_behavior(behavior)?;
            let value = op(&tx)?;
            tx.commit()?;
            Ok(value)
        })
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic while the lock was held unwound through the open Transaction, whose drop
        // rolled it back, so the connection is clean and the poison flag can be ignored.
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The position after the last session of a page, and the snapshot the listing reads.
/// Encoded as `tick.updated_at.id`: the id is last because it is the only free-form part.
struct SessionCursor {
    tick: i64,
    updated_at: i64,
    id: String,
}

impl SessionCursor {
    fn encode(&self) -> String {
        format!("{}.{}.{}", self.tick, self.updated_at, self.id)
    }

    fn parse(text: &str) -> Result<SessionCursor, SessionError> {
        let invalid = || SessionError::InvalidCursor(text.to_owned());
        let mut parts = text.splitn(3, '.');
        let mut number = || -> Result<i64, SessionError> {
            parts
                .next()
                .and_then(|part| part.parse().ok())
                .ok_or_else(invalid)
        };
        let tick = number()?;
        let updated_at = number()?;
        let id = parts
            .next()
            .filter(|id| !id.is_empty())
            .ok_or_else(invalid)?;
        Ok(SessionCursor {
            tick,
            updated_at,
            id: id.to_owned(),
        })
    }
}

/// Maps `id, title, created_at, updated_at, entry_count` to a summary.
/// A title cut to [`MAX_SESSION_TITLE_BYTES`] on a character boundary.
fn bounded_title(title: &str) -> &str {
    crate::text::cut(title, MAX_SESSION_TITLE_BYTES)
}

/// What a session's summary adds to a listing page, counted as JSON would write its id and
/// title (a control character, quote or backslash takes up to six bytes), plus its numbers.
fn summary_bytes(info: &SessionInfo) -> usize {
    /// The field names, timestamps and count around the id and title.
    const FIXED: usize = 128;
    let title = info.title.as_deref().unwrap_or_default();
    let escaped: usize = title
        .chars()
        .map(|c| match c {
            '"' | '\\' => 2,
            c if c < ' ' => 6,
            c => c.len_utf8(),
        })
        .sum();
    FIXED + info.id.len() + escaped
}

/// Maps `id, title, created_at, updated_at, entry_count`; titles written before they were
/// bounded are cut as new ones are.
fn session_info(row: &Row<'_>) -> rusqlite::Result<SessionInfo> {
    let title: Option<String> = row.get(1)?;
    Ok(SessionInfo {
        id: row.get(0)?,
        title: title.map(|title| bounded_title(&title).to_owned()),
        created_at: row.get(2)?,
        updated_at: row.get(3)?,
        entry_count: row.get(4)?,
    })
}

/// Maps `seq, kind, turn_id, created_at` and the payload text to an entry.
fn read_entry(session_id: &str, row: &Row<'_>, payload: &str) -> Result<Entry, StoreError> {
    let seq: u64 = row.get(0)?;
    let corrupt = |reason: String| SessionError::CorruptEntry {
        session_id: session_id.to_owned(),
        seq,
        reason,
    };
    let kind = match row.get_ref(1)? {
        ValueRef::Text(name) => std::str::from_utf8(name)
            .ok()
            .and_then(EntryKind::from_name)
            .ok_or_else(|| corrupt(format!("unknown kind {:?}", String::from_utf8_lossy(name))))?,
        _ => return Err(corrupt("its kind is not text".to_owned()).into()),
    };
    let payload = serde_json::from_str(payload)
        .map_err(|error| corrupt(format!("its payload is not JSON: {error}")))?;
    Ok(Entry {
        seq,
        kind,
        turn_id: row.get(2)?,
        created_at: row.get(3)?,
        payload,
    })
}

/// Bumps the store clock for a transaction that adds rows and returns the new tick.
fn next_tick(tx: &Transaction<'_>) -> rusqlite::Result<i64> {
    tx.prepare_cached("UPDATE store_clock SET tick = tick + 1 RETURNING tick")?
        .query_row([], |row| row.get(0))
}

/// Inserts `entries` after the session's last one, inside the caller's write transaction, and
/// returns the first new seq. Reading the last seq and inserting under one write lock is what
/// makes seqs gapless and unique across processes. With no entries it only checks that the
/// session exists.
fn insert_entries(
    tx: &Transaction<'_>,
    session_id: &str,
    entries: &[NewEntry],
    now_ms: i64,
) -> Result<u64, StoreError> {
    let (updated_at, last_seq): (i64, u64) = tx
        .prepare_cached(
            "SELECT s.updated_at,
                    COALESCE((SELECT MAX(e.seq) FROM entries AS e WHERE e.session_id = s.id), 0)
             FROM sessions AS s WHERE s.id = ?1",
        )?
        .query_row(params![session_id], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?
        .ok_or_else(|| SessionError::NotFound(session_id.to_owned()))?;
    let first = last_seq + 1;
    if entries.is_empty() {
        return Ok(first);
    }
    // Entry times never run backwards within a session, even when the wall clock does, so the
    // newest entry's time is the session's `updated_at` and the listing order follows activity.
    let created_at = now_ms.max(updated_at);
    let tick = next_tick(tx)?;
    let mut insert = tx.prepare_cached(
        "INSERT INTO entries (session_id, seq, kind, turn_id, tick, created_at, call_id, payload)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?;
    for (seq, entry) in (first..).zip(entries) {
        insert.execute(params![
            session_id,
            seq,
            entry.kind.as_str(),
            entry.turn_id,
            tick,
            created_at,
            entry.payload.get("call_id").and_then(Value::as_str),
            entry.payload.to_string(),
        ])?;
    }
    tx.prepare_cached("UPDATE sessions SET updated_at = ?2 WHERE id = ?1")?
        .execute(params![session_id, created_at])?;
    Ok(first)
}

/// The calls of session `?1` without a result, in call order: each call of an assistant
/// message with no `tool_result` of its `call_id` after the message. A call "started" when a
/// `tool_call` entry of its id follows its message. A `tool_call` entry that no message lists
/// is not a call the model made (the planner ignores it), so it is not answered: a result for
/// it would be a result without its call. It reads `message_calls` and the
/// `entries_by_call_id` index, never a payload (a unit test checks the query plan). `INDEXED
/// BY` because without statistics SQLite might rather walk every entry of the session.
const UNANSWERED_CALLS_SQL: &str = "
    SELECT listed.call_id, message.turn_id,
           EXISTS (
               SELECT 1 FROM entries AS started INDEXED BY entries_by_call_id
               WHERE started.session_id = listed.session_id AND started.kind = 'tool_call'
                 AND started.call_id = listed.call_id AND started.seq > listed.message_seq)
    FROM message_calls AS listed
    JOIN entries AS message
      ON message.session_id = listed.session_id AND message.seq = listed.message_seq
    WHERE listed.session_id = ?1
      AND NOT EXISTS (
          SELECT 1 FROM entries AS result INDEXED BY entries_by_call_id
          WHERE result.session_id = listed.session_id AND result.kind = 'tool_result'
            AND result.call_id = listed.call_id AND result.seq > listed.message_seq)
    ORDER BY listed.message_seq, listed.position";

/// A call without a result, as [`UNANSWERED_CALLS_SQL`] finds it.
struct UnansweredCall {
    call_id: String,
    turn_id: Option<String>,
    /// Whether a `tool_call` entry says it may have started.
    started: bool,
}

fn unanswered_calls(
    tx: &Transaction<'_>,
    session_id: &str,
) -> rusqlite::Result<Vec<UnansweredCall>> {
    let mut statement = tx.prepare_cached(UNANSWERED_CALLS_SQL)?;
    statement
        .query_map(params![session_id], |row| {
            Ok(UnansweredCall {
                call_id: row.get(0)?,
                turn_id: row.get(1)?,
                started: row.get(2)?,
            })
        })?
        .collect()
}

/// Who may hold a session lease: a process, by its pid and a token unique to its start (a
/// later process that reuses the pid has another token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseOwner {
    pub pid: u32,
    pub token: String,
}

impl LeaseOwner {
    /// This process: its pid and a token made once, at the first call.
    pub fn this_process() -> &'static LeaseOwner {
        static OWNER: OnceLock<LeaseOwner> = OnceLock::new();
        OWNER.get_or_init(|| LeaseOwner {
            pid: std::process::id(),
            token: Uuid::now_v7().simple().to_string(),
        })
    }
}

/// Whether a lease held by (`pid`, `token`) with the given heartbeat still stands at `now`:
/// the heartbeat is recent and the process is alive. A lease with this process's pid and
/// another token was left by an earlier process with the same pid, which is gone.
fn lease_is_live(pid: i64, token: &str, heartbeat_at: i64, now: i64) -> bool {
    let expiry = i64::try_from(SESSION_LEASE_EXPIRY.as_millis()).unwrap_or(i64::MAX);
    if now.saturating_sub(heartbeat_at) > expiry {
        return false;
    }
    let this = LeaseOwner::this_process();
    if pid == i64::from(this.pid) {
        return token == this.token;
    }
    process_is_alive(pid)
}

/// Whether a process with this pid exists on this host (`kill(pid, 0)`; a process of another
/// user answers EPERM and is alive). Pids that name no single process (0, negative, too large)
/// are not alive.
fn process_is_alive(pid: i64) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists and may be signalled; nothing is
    // sent.
    let answer = unsafe { libc::kill(pid, 0) };
    answer == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// The `crash_after_appends=N` test hook from [`TEST_HOOKS_ENV`], when set, in the builds of
/// pen's own tests (the `test-hooks` feature); never in an installed pen.
fn crash_after_appends_hook() -> Option<u64> {
    test_hook("crash_after_appends=")
}

/// The count of the test hook `name` (`crash_after_appends=`, `crash_after_checkpoints=`,
/// `crash_after_reverted_files=`) in the test-hooks builds; never in an installed pen.
pub(crate) fn test_hook(name: &str) -> Option<u64> {
    if cfg!(feature = "test-hooks") {
        parse_hook(&std::env::var(TEST_HOOKS_ENV).ok()?, name)
    } else {
        None
    }
}

#[cfg(test)]
fn parse_crash_hook(hooks: &str) -> Option<u64> {
    parse_hook(hooks, "crash_after_appends=")
}

fn parse_hook(hooks: &str, name: &str) -> Option<u64> {
    hooks
        .split(',')
        .find_map(|hook| hook.trim().strip_prefix(name))
        .and_then(|count| count.parse().ok())
        .filter(|count| *count > 0)
}

/// Creates the data directory and its missing parents, readable only by the owner on Unix:
/// transcripts hold the code and commands of every session.
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// The wall clock in Unix milliseconds. A clock set before 1970 reads as 0 rather than
/// failing a write; entry times are kept non-decreasing in any case.
/// Unix milliseconds now, as the store stamps entries.
pub fn now_ms() -> i64 {
    unix_now_ms()
}

fn unix_now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| {
            i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX)
        })
}
