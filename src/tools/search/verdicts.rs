//! What search learnt of a file version's bytes as a whole — binary, not UTF-8, holding a
//! private key, or text — kept so that a later search of the same version does not check them
//! again: the UTF-8 and key checks are two of the three passes over a file's bytes.
//!
//! Architecture invariants:
//! - A verdict is kept under the version's [`VersionKey`] (device, inode, size, modification
//!   and change times from `fstat` on the open file) only when those timestamps had settled
//!   before the read began and `fstat` after the read gives the same key, as
//!   [`crate::tools::versions`] keeps hashes: a later write gets a later change time.
//! - A file judged text is read again for every search, and its content is trusted to be the
//!   judged version only when `fstat` after that read gives the key judged; otherwise its bytes
//!   are judged again. No search ever shows a line of a file judged for other bytes.
//! - A file judged binary, not UTF-8 or holding a key is skipped unread, with the same counts a
//!   read would give (`bytes_read`: the sniffed head of a binary file, all of the others), so a
//!   result is the same whether its verdicts were known or not.
//! - Bounded: at most [`SEARCH_VERDICT_CACHE_ENTRIES`]; a full cache is emptied.

use super::outcome::SkipReason;
use crate::limits::SEARCH_VERDICT_CACHE_ENTRIES;
use crate::tools::keys;
use crate::tools::versions::VersionKey;
use rustc_hash::FxHashMap;
use std::fs::File;
use std::sync::{LazyLock, Mutex};
use std::time::SystemTime;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// A NUL byte in the sniffed head.
    Binary,
    NonUtf8,
    /// The file holds a private key ([`keys::holds_key_material`]).
    KeyMaterial,
    /// UTF-8 text without a private key: searched.
    Text,
}

impl Verdict {
    /// Judges a whole file's bytes, sniffing its first `sniff` bytes for a NUL byte.
    pub(super) fn of(bytes: &[u8], sniff: usize) -> Verdict {
        if memchr::memchr(0, &bytes[..bytes.len().min(sniff)]).is_some() {
            Verdict::Binary
        } else if std::str::from_utf8(bytes).is_err() {
            Verdict::NonUtf8
        } else if keys::holds_key_material(bytes) {
            // Decided per file, before the query is looked for, so that the count is the same
            // whatever the query.
            Verdict::KeyMaterial
        } else {
            Verdict::Text
        }
    }

    /// Why a file so judged is not searched; `None` for text.
    pub(super) fn skip_reason(self) -> Option<SkipReason> {
        match self {
            Verdict::Binary => Some(SkipReason::Binary),
            Verdict::NonUtf8 => Some(SkipReason::NonUtf8),
            Verdict::KeyMaterial => Some(SkipReason::KeyMaterial),
            Verdict::Text => None,
        }
    }
}

/// Verdicts by version and by the bytes sniffed for a NUL (a NUL further in is text). Hashed
/// with Fx, not SipHash: one look-up per file searched, and SipHash over the key's eight words
/// cost ~600 instructions of it; the keys are file metadata, and the map is bounded.
static VERDICTS: LazyLock<Mutex<FxHashMap<(VersionKey, usize), Verdict>>> =
    LazyLock::new(Mutex::default);

/// The verdict kept for a version judged sniffing `sniff` bytes, if any.
pub(super) fn known(key: &VersionKey, sniff: usize) -> Option<Verdict> {
    let verdicts = VERDICTS.lock().unwrap_or_else(|e| e.into_inner());
    verdicts.get(&(*key, sniff)).copied()
}

/// Whether `file` is still the version `key` names.
pub(super) fn unchanged(file: &File, key: &VersionKey) -> bool {
    file.metadata()
        .is_ok_and(|metadata| VersionKey::of(&metadata) == *key)
}

/// Keeps the verdict on the version `key` names, judged sniffing `sniff` bytes, read from `file`
/// since `read_started`, when the version had settled before the read and is still the file's.
pub(super) fn learn(
    (key, sniff): (VersionKey, usize),
    verdict: Verdict,
    file: &File,
    read_started: SystemTime,
) {
    if !key.settled(read_started) || !unchanged(file, &key) {
        return;
    }
    let mut verdicts = VERDICTS.lock().unwrap_or_else(|e| e.into_inner());
    if verdicts.len() >= SEARCH_VERDICT_CACHE_ENTRIES {
        verdicts.clear();
    }
    verdicts.insert((key, sniff), verdict);
}
