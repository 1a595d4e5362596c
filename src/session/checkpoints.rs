//! Checkpoints in the session database (SPEC §13): the pre-image of every file pen_create and
//! pen_edit wrote, recorded before the write, and forks of a session.
//!
//! **Invariants.** A write's row (and its pre-image blob) is committed before the write is
//! made, so whatever moment the process dies at, the file holds either the recorded pre-image
//! or the recorded post-image, and a revert knows which. Contents are addressed by SHA-256 and
//! stored once per distinct content per session; a session's blobs never pass its store limit:
//! a pre-image that would is not stored, and its row says `too_large`. Rows and blobs are
//! append-only (schema triggers); a revert is recorded in the transcript as an event.

use rusqlite::{OptionalExtension, TransactionBehavior, params};
use sha2::{Digest, Sha256};

use uuid::Uuid;

use super::{
    NewEntry, SESSION_ID_PREFIX, SessionError, SessionStore, StoreError, bounded_title,
    insert_entries, next_tick, require_session,
};
use crate::transcript::EntryKind;

/// The SHA-256 of `bytes`, as checkpoints name contents: `sha256:` and 64 hex digits.
pub fn content_hash(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut text = String::with_capacity(7 + 64);
    text.push_str("sha256:");
    for byte in digest {
        text.push_str(&format!("{byte:02x}"));
    }
    text
}

/// What a file was before a recorded write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Before {
    /// The file did not exist.
    Absent,
    /// Its content is stored under this hash.
    Stored { hash: String, size: u64 },
    /// Its content was over the session's store limit: not stored, not revertible.
    TooLarge { hash: String, size: u64 },
}

/// A write about to be made, as [`SessionStore::record_write`] takes it.
#[derive(Debug, Clone)]
pub struct NewWrite<'a> {
    pub turn_id: &'a str,
    pub call_id: &'a str,
    pub tool: &'a str,
    /// Canonical and absolute.
    pub path: &'a str,
    pub display: &'a str,
    /// `None`: the file did not exist.
    pub before: Option<&'a [u8]>,
    pub mode: Option<u32>,
    pub after: &'a [u8],
}

/// A recorded write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteRecord {
    pub id: i64,
    pub turn_id: String,
    pub call_id: String,
    pub tool: String,
    pub path: String,
    pub display: String,
    pub before: Before,
    pub mode: Option<u32>,
    pub after_hash: String,
}

/// Whether a pre-image of `size` bytes and `hash` would be stored in `session_id` under
/// `limit`: already there, or room for it.
fn fits(
    tx: &rusqlite::Transaction<'_>,
    session_id: &str,
    hash: &str,
    size: u64,
    limit: u64,
) -> Result<bool, StoreError> {
    let stored = tx
        .prepare_cached("SELECT 1 FROM checkpoint_blobs WHERE session_id = ?1 AND sha256 = ?2")?
        .exists(params![session_id, hash])?;
    if stored {
        return Ok(true);
    }
    let used: i64 = tx
        .prepare_cached(
            "SELECT COALESCE(SUM(size), 0) FROM checkpoint_blobs WHERE session_id = ?1",
        )?
        .query_row(params![session_id], |row| row.get(0))?;
    Ok(u64::try_from(used).unwrap_or(u64::MAX).saturating_add(size) <= limit)
}

impl SessionStore {
    /// Records `write` in `session_id`, storing its pre-image unless it passes `limit` (bytes of
    /// blobs per session), and returns what it recorded the file as. Committed before it returns:
    /// call it before the write.
    pub fn record_write(
        &self,
        session_id: &str,
        write: &NewWrite<'_>,
        limit: u64,
    ) -> Result<Before, SessionError> {
        let after_hash = content_hash(write.after);
        let before_hash = write.before.map(content_hash);
        let before = self.transaction(
            TransactionBehavior::Immediate,
            "recording a checkpoint",
            |tx| {
                require_session(tx, session_id)?;
                let before = match (write.before, &before_hash) {
                    (Some(bytes), Some(hash)) => {
                        let size = bytes.len() as u64;
                        if fits(tx, session_id, hash, size, limit)? {
                            tx.prepare_cached(
                                "INSERT OR IGNORE INTO checkpoint_blobs
                                     (session_id, sha256, size, content) VALUES (?1, ?2, ?3, ?4)",
                            )?
                            .execute(params![
                                session_id,
                                hash,
                                size as i64,
                                bytes
                            ])?;
                            Before::Stored {
                                hash: hash.clone(),
                                size,
                            }
                        } else {
                            Before::TooLarge {
                                hash: hash.clone(),
                                size,
                            }
                        }
                    }
                    _ => Before::Absent,
                };
                let (state, hash, size) = match &before {
                    Before::Absent => ("absent", None, None),
                    Before::Stored { hash, size } => ("stored", Some(hash.as_str()), Some(*size)),
                    // A too-large pre-image names no blob; its hash is kept in the diff-free
                    // sense only by the size.
                    Before::TooLarge { size, .. } => ("too_large", None, Some(*size)),
                };
                tx.prepare_cached(
                    "INSERT INTO checkpoint_writes (session_id, turn_id, call_id, tool, path,
                         display, before_state, before_sha256, before_size, mode, after_sha256,
                         created_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                )?
                .execute(params![
                    session_id,
                    write.turn_id,
                    write.call_id,
                    write.tool,
                    write.path,
                    write.display,
                    state,
                    hash,
                    size.map(|s| s as i64),
                    write.mode,
                    after_hash,
                    (self.now_ms)(),
                ])?;
                Ok(before)
            },
        )?;
        self.committed_checkpoint();
        Ok(before)
    }

    /// Whether a pre-image of `bytes` would be stored in the session under `limit` (for the
    /// approval request, before the write).
    pub fn checkpoint_fits(
        &self,
        session_id: &str,
        bytes: &[u8],
        limit: u64,
    ) -> Result<bool, SessionError> {
        let hash = content_hash(bytes);
        self.transaction(
            TransactionBehavior::Deferred,
            "reading the checkpoint store",
            |tx| fits(tx, session_id, &hash, bytes.len() as u64, limit),
        )
    }

    /// The session's turns in the order they began (each by the seq of its first entry).
    pub fn turns(&self, session_id: &str) -> Result<Vec<String>, SessionError> {
        self.transaction(TransactionBehavior::Deferred, "listing turns", |tx| {
            require_session(tx, session_id)?;
            let turns = tx
                .prepare_cached(
                    "SELECT turn_id FROM entries WHERE session_id = ?1 AND turn_id IS NOT NULL
                     GROUP BY turn_id ORDER BY MIN(seq)",
                )?
                .query_map(params![session_id], |row| row.get(0))?
                .collect::<Result<Vec<String>, _>>()?;
            Ok(turns)
        })
    }

    /// The writes recorded in `turn_ids` of the session, oldest first.
    pub fn writes_of(
        &self,
        session_id: &str,
        turn_ids: &[String],
    ) -> Result<Vec<WriteRecord>, SessionError> {
        self.transaction(TransactionBehavior::Deferred, "reading checkpoints", |tx| {
            let mut statement = tx.prepare_cached(
                "SELECT id, turn_id, call_id, tool, path, display, before_state, before_sha256,
                        before_size, mode, after_sha256
                 FROM checkpoint_writes WHERE session_id = ?1 AND turn_id = ?2 ORDER BY id",
            )?;
            let mut writes = Vec::new();
            for turn in turn_ids {
                let rows = statement.query_map(params![session_id, turn], |row| {
                    let state: String = row.get(6)?;
                    let hash: Option<String> = row.get(7)?;
                    let size: Option<i64> = row.get(8)?;
                    let size = size.and_then(|s| u64::try_from(s).ok()).unwrap_or(0);
                    let before = match (state.as_str(), hash) {
                        ("stored", Some(hash)) => Before::Stored { hash, size },
                        ("absent", _) => Before::Absent,
                        _ => Before::TooLarge {
                            hash: String::new(),
                            size,
                        },
                    };
                    Ok(WriteRecord {
                        id: row.get(0)?,
                        turn_id: row.get(1)?,
                        call_id: row.get(2)?,
                        tool: row.get(3)?,
                        path: row.get(4)?,
                        display: row.get(5)?,
                        before,
                        mode: row.get(9)?,
                        after_hash: row.get(10)?,
                    })
                })?;
                for row in rows {
                    writes.push(row?);
                }
            }
            writes.sort_by_key(|w| w.id);
            Ok(writes)
        })
    }

    /// The `tool_call` entries of `turn_ids`, in order: turn id, tool name, arguments.
    pub fn tool_calls_of(
        &self,
        session_id: &str,
        turn_ids: &[String],
    ) -> Result<Vec<(String, String, serde_json::Value)>, SessionError> {
        self.transaction(TransactionBehavior::Deferred, "reading tool calls", |tx| {
            let mut statement = tx.prepare_cached(
                "SELECT seq, payload FROM entries
                 WHERE session_id = ?1 AND turn_id = ?2 AND kind = 'tool_call' ORDER BY seq",
            )?;
            let mut calls = Vec::new();
            for turn in turn_ids {
                let rows = statement.query_map(params![session_id, turn], |row| {
                    Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?))
                })?;
                for row in rows {
                    let (seq, payload) = row?;
                    let payload: serde_json::Value =
                        serde_json::from_str(&payload).unwrap_or_default();
                    let name = payload
                        .get("name")
                        .and_then(serde_json::Value::as_str)
                        .unwrap_or_default()
                        .to_string();
                    let arguments = payload.get("arguments").cloned().unwrap_or_default();
                    calls.push((seq, turn.clone(), name, arguments));
                }
            }
            calls.sort_by_key(|c| c.0);
            Ok(calls.into_iter().map(|(_, t, n, a)| (t, n, a)).collect())
        })
    }

    /// Of `turn_ids` (turns of `session_id` with no checkpoint there), those a fork copied from
    /// its original session by a pen that did not copy checkpoints: the original recorded
    /// writes for them. Returns the original's id with them; `None` when there are none.
    pub fn uncopied_checkpoints(
        &self,
        session_id: &str,
        turn_ids: &[String],
    ) -> Result<Option<(String, Vec<String>)>, SessionError> {
        self.transaction(TransactionBehavior::Deferred, "reading a fork", |tx| {
            let from: Option<String> = tx
                .prepare_cached("SELECT from_session_id FROM session_forks WHERE session_id = ?1")?
                .query_row(params![session_id], |row| row.get(0))
                .optional()?;
            let Some(from) = from else {
                return Ok(None);
            };
            let mut has_writes = tx.prepare_cached(
                "SELECT 1 FROM checkpoint_writes WHERE session_id = ?1 AND turn_id = ?2",
            )?;
            let mut turns = Vec::new();
            for turn in turn_ids {
                if !has_writes.exists(params![session_id, turn])?
                    && has_writes.exists(params![from, turn])?
                {
                    turns.push(turn.clone());
                }
            }
            Ok((!turns.is_empty()).then_some((from, turns)))
        })
    }

    /// The turns (newest first) of the session's last revert when it started and never ended:
    /// a `revert_started` event with no `files_reverted` after it (a crash stopped it).
    pub fn open_revert(&self, session_id: &str) -> Result<Option<Vec<String>>, SessionError> {
        use crate::transcript::{Event, Item, event_type};
        self.transaction(TransactionBehavior::Deferred, "reading reverts", |tx| {
            let last: Option<String> = tx
                .prepare_cached(
                    "SELECT payload FROM entries
                     WHERE session_id = ?1 AND kind = 'event'
                       AND json_extract(payload, '$.type') IN (?2, ?3)
                     ORDER BY seq DESC LIMIT 1",
                )?
                .query_row(
                    params![
                        session_id,
                        event_type::REVERT_STARTED,
                        event_type::FILES_REVERTED
                    ],
                    |row| row.get(0),
                )
                .optional()?;
            let payload = last.and_then(|text| serde_json::from_str(&text).ok());
            Ok(
                match payload.map(|payload| Item::from_stored(EntryKind::Event, &payload)) {
                    Some(Item::Event(Event::RevertStarted { turns, .. })) => Some(turns),
                    _ => None,
                },
            )
        })
    }

    /// A stored pre-image.
    pub fn checkpoint_blob(
        &self,
        session_id: &str,
        hash: &str,
    ) -> Result<Option<Vec<u8>>, SessionError> {
        self.transaction(
            TransactionBehavior::Deferred,
            "reading a checkpoint",
            |tx| {
                Ok(tx
                .prepare_cached(
                    "SELECT content FROM checkpoint_blobs WHERE session_id = ?1 AND sha256 = ?2",
                )?
                .query_row(params![session_id, hash], |row| row.get(0))
                .optional()?)
            },
        )
    }

    /// Starts a new session whose entries are `session_id`'s before the first entry of
    /// `before_turn_id`, copied in one transaction with the checkpoints of the turns they hold
    /// (so those turns revert in the fork); the original is not changed. Returns the new
    /// session's id.
    pub fn fork_session(
        &self,
        session_id: &str,
        before_turn_id: &str,
        title: Option<&str>,
    ) -> Result<String, SessionError> {
        let id = format!("{SESSION_ID_PREFIX}{}", Uuid::now_v7().simple());
        let title = title.map(bounded_title);
        let forked =
            self.transaction(TransactionBehavior::Immediate, "forking a session", |tx| {
                require_session(tx, session_id)?;
                let first: Option<i64> = tx
                    .prepare_cached(
                        "SELECT MIN(seq) FROM entries WHERE session_id = ?1 AND turn_id = ?2",
                    )?
                    .query_row(params![session_id, before_turn_id], |row| row.get(0))?;
                let Some(first) = first else {
                    return Err(SessionError::NoSuchTurn {
                        session_id: session_id.to_owned(),
                        turn_id: before_turn_id.to_owned(),
                    }
                    .into());
                };
                let mut statement = tx.prepare_cached(
                    "SELECT kind, turn_id, payload FROM entries
                 WHERE session_id = ?1 AND seq < ?2 ORDER BY seq",
                )?;
                let entries = statement
                    .query_map(params![session_id, first], |row| {
                        let kind: String = row.get(0)?;
                        let turn_id: Option<String> = row.get(1)?;
                        let payload: String = row.get(2)?;
                        Ok((kind, turn_id, payload))
                    })?
                    .collect::<Result<Vec<_>, _>>()?;
                let entries = entries
                    .into_iter()
                    .map(|(kind, turn_id, payload)| {
                        let kind = EntryKind::from_name(&kind).ok_or_else(|| {
                            SessionError::CorruptEntry {
                                session_id: session_id.to_owned(),
                                seq: 0,
                                reason: format!("unknown kind {kind:?}"),
                            }
                        })?;
                        let payload = serde_json::from_str(&payload).map_err(|e| {
                            SessionError::CorruptEntry {
                                session_id: session_id.to_owned(),
                                seq: 0,
                                reason: e.to_string(),
                            }
                        })?;
                        Ok(NewEntry {
                            kind,
                            turn_id,
                            payload,
                        })
                    })
                    .collect::<Result<Vec<NewEntry>, SessionError>>()?;
                let now = (self.now_ms)();
                let tick = next_tick(tx)?;
                tx.prepare_cached(
                    "INSERT INTO sessions (id, title, created_at, updated_at, created_tick)
                 VALUES (?1, ?2, ?3, ?3, ?4)",
                )?
                .execute(params![id, title, now, tick])?;
                insert_entries(tx, &id, &entries, now)?;
                tx.prepare_cached(
                    "INSERT INTO session_forks (session_id, from_session_id, before_turn_id)
                 VALUES (?1, ?2, ?3)",
                )?
                .execute(params![id, session_id, before_turn_id])?;
                // The fork carries the checkpoints of the turns it copies (their rows in order,
                // and the pre-images they name), so a copied turn reverts in the fork too.
                tx.prepare_cached(
                    "INSERT INTO checkpoint_blobs (session_id, sha256, size, content)
                     SELECT ?1, sha256, size, content FROM checkpoint_blobs
                     WHERE session_id = ?2 AND sha256 IN (
                         SELECT before_sha256 FROM checkpoint_writes
                         WHERE session_id = ?2 AND before_sha256 IS NOT NULL AND turn_id IN (
                             SELECT turn_id FROM entries
                             WHERE session_id = ?2 AND seq < ?3 AND turn_id IS NOT NULL))",
                )?
                .execute(params![id, session_id, first])?;
                tx.prepare_cached(
                    "INSERT INTO checkpoint_writes (session_id, turn_id, call_id, tool, path,
                         display, before_state, before_sha256, before_size, mode, after_sha256,
                         created_at)
                     SELECT ?1, turn_id, call_id, tool, path, display, before_state,
                         before_sha256, before_size, mode, after_sha256, created_at
                     FROM checkpoint_writes
                     WHERE session_id = ?2 AND turn_id IN (
                         SELECT turn_id FROM entries
                         WHERE session_id = ?2 AND seq < ?3 AND turn_id IS NOT NULL)
                     ORDER BY id",
                )?
                .execute(params![id, session_id, first])?;
                Ok(id.clone())
            })?;
        self.committed_append();
        Ok(forked)
    }
}
