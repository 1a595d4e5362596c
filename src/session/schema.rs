//! The session database's connection settings and its versioned schema migrations.

use std::path::Path;

use rusqlite::{Connection, TransactionBehavior};

use super::{SessionError, StoreError};
use crate::limits::SQLITE_BUSY_TIMEOUT;

/// The schema, one migration per version: applying `MIGRATIONS[i]` moves a database from
/// `PRAGMA user_version` `i` to `i + 1`. Append new migrations; never edit a released one,
/// because databases in the field have already run it.
///
/// Version 1:
/// - `store_clock.tick` counts the write transactions that added rows, and every row carries
///   the tick of the transaction that wrote it (`sessions.created_tick`, `entries.tick`). A
///   tick therefore names a snapshot of the store that later writes cannot change, which is
///   what keeps a `list_sessions` cursor stable while sessions are created and appended to.
/// - `entries.payload` is the last column: SQLite reads a row's columns in order, so the small
///   columns before a large payload are read without walking its overflow pages.
/// - `entries.call_id` is a copy of the payload's `call_id` when that is a string, made by the
///   store on insert and indexed, so finding unanswered tool calls never reads a payload. (A
///   generated column would keep SQLite from using the index as a covering index.)
/// - Triggers refuse to update or delete an entry: the transcript is append-only.
///
/// Version 2:
/// - `message_calls` lists the calls of every assistant message, one row per element of its
///   payload's `tool_calls` array that has a string `id`, in order (`position`). A trigger fills
///   it in the transaction that inserts the message, whoever inserts it (pen, or a hand edit
///   with the sqlite3 shell), so the calls of a message are committed with it and crash
///   recovery can answer every one of them without reading a payload. The migration fills it
///   for the messages written before version 2.
/// - `session_leases` holds at most one lease per session: the process running a turn in it
///   (pid and a token unique to that process start) and its heartbeat. Leases are not part of
///   the transcript and may be deleted.
///
/// Version 3 (checkpoints, SPEC §13):
/// - `checkpoint_blobs` holds file contents, content-addressed by SHA-256, once per distinct
///   content per session. They are the pre-images a revert restores.
/// - `checkpoint_writes` is one row per pen_create/pen_edit, committed before the write: the
///   file (absolute path and how results show it), the state before (`before_state`: `stored`
///   with `before_sha256` naming a blob, `absent` for a file that did not exist, `too_large`
///   past the session's store limit, with the size and hash only), its mode, and the SHA-256
///   of the bytes the write lands (`after_sha256`). Rows are append-only (triggers).
/// - `session_forks` says which session and turn a fork was made from.
pub(super) const MIGRATIONS: &[&str] = &[
    "
    CREATE TABLE store_clock (tick INTEGER NOT NULL) STRICT;
    INSERT INTO store_clock (tick) VALUES (0);

    CREATE TABLE sessions (
        id TEXT PRIMARY KEY NOT NULL,
        title TEXT,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        created_tick INTEGER NOT NULL
    ) STRICT;

    CREATE TABLE entries (
        session_id TEXT NOT NULL REFERENCES sessions (id),
        seq INTEGER NOT NULL CHECK (seq >= 1),
        kind TEXT NOT NULL,
        turn_id TEXT,
        tick INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        call_id TEXT,
        payload TEXT NOT NULL CHECK (json_valid(payload)),
        PRIMARY KEY (session_id, seq)
    ) STRICT;

    CREATE INDEX entries_by_call_id ON entries (session_id, kind, call_id, seq)
        WHERE call_id IS NOT NULL;

    CREATE TRIGGER entries_are_never_updated BEFORE UPDATE ON entries
    BEGIN SELECT RAISE(ABORT, 'session entries are append-only'); END;

    CREATE TRIGGER entries_are_never_deleted BEFORE DELETE ON entries
    BEGIN SELECT RAISE(ABORT, 'session entries are append-only'); END;
",
    "
    CREATE TABLE message_calls (
        session_id TEXT NOT NULL,
        message_seq INTEGER NOT NULL,
        position INTEGER NOT NULL,
        call_id TEXT NOT NULL,
        PRIMARY KEY (session_id, message_seq, position),
        FOREIGN KEY (session_id, message_seq) REFERENCES entries (session_id, seq)
    ) STRICT;

    CREATE INDEX message_calls_by_call_id ON message_calls (session_id, call_id, message_seq);

    CREATE TRIGGER assistant_messages_list_their_calls AFTER INSERT ON entries
    WHEN NEW.kind = 'assistant_message' AND json_type(NEW.payload, '$.tool_calls') = 'array'
    BEGIN
        INSERT INTO message_calls (session_id, message_seq, position, call_id)
        SELECT NEW.session_id, NEW.seq, CAST(item.key AS INTEGER), item.value ->> '$.id'
        FROM json_each(NEW.payload, '$.tool_calls') AS item
        WHERE json_type(item.value, '$.id') = 'text';
    END;

    INSERT INTO message_calls (session_id, message_seq, position, call_id)
    SELECT entry.session_id, entry.seq, CAST(item.key AS INTEGER), item.value ->> '$.id'
    FROM entries AS entry, json_each(entry.payload, '$.tool_calls') AS item
    WHERE entry.kind = 'assistant_message'
      AND json_type(entry.payload, '$.tool_calls') = 'array'
      AND json_type(item.value, '$.id') = 'text';

    CREATE TABLE session_leases (
        session_id TEXT PRIMARY KEY NOT NULL REFERENCES sessions (id),
        owner_pid INTEGER NOT NULL,
        owner_token TEXT NOT NULL,
        acquired_at INTEGER NOT NULL,
        heartbeat_at INTEGER NOT NULL
    ) STRICT;
",
    "
    CREATE TABLE checkpoint_blobs (
        session_id TEXT NOT NULL REFERENCES sessions (id),
        sha256 TEXT NOT NULL,
        size INTEGER NOT NULL,
        content BLOB NOT NULL,
        PRIMARY KEY (session_id, sha256)
    ) STRICT;

    CREATE TABLE checkpoint_writes (
        id INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions (id),
        turn_id TEXT NOT NULL,
        call_id TEXT NOT NULL,
        tool TEXT NOT NULL,
        path TEXT NOT NULL,
        display TEXT NOT NULL,
        before_state TEXT NOT NULL CHECK (before_state IN ('stored', 'absent', 'too_large')),
        before_sha256 TEXT,
        before_size INTEGER,
        mode INTEGER,
        after_sha256 TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        FOREIGN KEY (session_id, before_sha256) REFERENCES checkpoint_blobs (session_id, sha256)
            DEFERRABLE INITIALLY DEFERRED
    ) STRICT;

    CREATE INDEX checkpoint_writes_by_turn ON checkpoint_writes (session_id, turn_id, id);

    CREATE TRIGGER checkpoint_writes_are_never_updated BEFORE UPDATE ON checkpoint_writes
    BEGIN SELECT RAISE(ABORT, 'checkpoint writes are append-only'); END;

    CREATE TRIGGER checkpoint_writes_are_never_deleted BEFORE DELETE ON checkpoint_writes
    BEGIN SELECT RAISE(ABORT, 'checkpoint writes are append-only'); END;

    CREATE TRIGGER checkpoint_blobs_are_never_updated BEFORE UPDATE ON checkpoint_blobs
    BEGIN SELECT RAISE(ABORT, 'checkpoint blobs are append-only'); END;

    CREATE TABLE session_forks (
        session_id TEXT PRIMARY KEY NOT NULL REFERENCES sessions (id),
        from_session_id TEXT NOT NULL REFERENCES sessions (id),
        before_turn_id TEXT NOT NULL
    ) STRICT;
",
];

/// The schema version this build writes and understands.
pub(super) fn supported_version() -> i64 {
    // The migration list is a short literal, so its length always fits.
    MIGRATIONS.len() as i64
}

/// Applies the per-connection settings, then brings the schema up to date.
pub(super) fn prepare(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    conn.busy_timeout(SQLITE_BUSY_TIMEOUT)?;
    // WAL lets readers and one writer proceed together, so a second daemon reading a transcript
    // never waits for an append. The mode is stored in the file; switching is a no-op once set.
    let mode: String =
        conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(SessionError::NotWal {
            path: path.to_path_buf(),
            mode,
        }
        .into());
    }
    // NORMAL, not FULL: in WAL mode a commit is durable across a crash or `kill -9` of the
    // process whatever this setting is, because the WAL write is in the operating system's
    // hands before COMMIT returns; only a power loss or kernel crash can lose the last few
    // transactions, and even then the database stays consistent. FULL would add an fsync to
    // every append to cover that case, which SPEC §4 (a daemon killed at any moment) does not ask.
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", true)?;
    migrate(conn, path)
}

/// Runs the migrations this database has not run yet, each in its own IMMEDIATE transaction
/// that re-reads the version under the write lock, so two processes opening a new database at
/// once apply each migration exactly once.
fn migrate(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    let supported = supported_version();
    let newer = |found| SessionError::NewerSchema {
        path: path.to_path_buf(),
        found,
        supported,
    };
    let version: i64 = conn.pragma_query_value(None, "user_version", |row| row.get(0))?;
    if version == supported {
        return Ok(());
    }
    loop {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let version: i64 = tx.pragma_query_value(None, "user_version", |row| row.get(0))?;
        // A negative version is no version pen ever wrote; it is refused like a newer one.
        let index = usize::try_from(version).map_err(|_| newer(version))?;
        if version > supported {
            return Err(newer(version).into());
        }
        let Some(migration) = MIGRATIONS.get(index) else {
            // Up to date (another process may just have finished): nothing to commit.
            return Ok(());
        };
        tx.execute_batch(migration)?;
        tx.pragma_update(None, "user_version", version + 1)?;
        tx.commit()?;
    }
}
