//! What the walk and the readers hand to the in-order merge: a file to read (a job), what became
//! of it (its outcome, with its matches already built as result objects), and how much of the
//! walk lies behind it. Plain data, so that the walk, the readers and the merge depend on it and
//! not on each other.

use super::scan::Found;
use crate::tools::budget;
use serde_json::Value;
use std::ops::Range;
use std::path::Path;
use std::sync::{Arc, LazyLock};

/// Why a file was not searched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SkipReason {
    Binary,
    NonUtf8,
    TooLarge,
    Unreadable,
    /// The file holds a private key ([`crate::tools::keys::holds_key_material`]): nothing of it is searched,
    /// so that no result depends on the key, whatever the query.
    KeyMaterial,
}

/// What became of one walked file.
#[derive(Debug)]
pub(super) enum Outcome {
    /// The file was opened. Its size when opened is charged to the byte limit; a binary file is
    /// charged in full though only its head is read.
    Read {
        size: u64,
        bytes_read: u64,
        content: Content,
    },
    /// The file was not read: too large, or unreadable (or a folder the walk could not list).
    NotRead(SkipReason),
}

#[derive(Debug)]
pub(super) enum Content {
    Text(Vec<Shown>),
    Skipped(SkipReason),
}

/// A file for a reader, in walk order.
pub(super) struct Job {
    pub(super) index: usize,
    /// The index of the file's entry among those the page took from the walk.
    pub(super) taken: usize,
    /// Shared with the walker's last entry and the next job's `previous`: one copy per file.
    pub(super) path: Arc<Path>,
    /// The entry walked before this file: a limit that stops the search at this file resumes
    /// after it.
    pub(super) previous: Option<Arc<Path>>,
    /// The walk up to the entry before this file, and up to and including this file.
    pub(super) before: Walked,
    pub(super) walked: Walked,
    pub(super) after_line: u64,
}

/// How much of the walk lies behind a point in it. A page reports the counts at the point where
/// it stopped, which is where the next page starts counting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Walked {
    pub(super) entries: u64,
    /// Entries not entered because they lie deeper than `max_depth`; not counted as entries.
    pub(super) too_deep: u64,
}

/// A walked file with its outcome.
pub(super) struct Done {
    pub(super) job: Job,
    /// The file's path as results show it; empty unless it has matches to show.
    pub(super) display: String,
    pub(super) outcome: Outcome,
}

/// A match to show, its result object already built by the reader, so that the merge, the
/// sequential part of a search, only places it.
#[derive(Debug)]
pub(super) struct Shown {
    pub(super) line: u64,
    pub(super) value: Value,
    /// The serialized length of `value`, and of the escaped excerpt in it.
    pub(super) json_len: usize,
    pub(super) excerpt_len: usize,
    /// Where the match lies in the excerpt, to cut a shorter one.
    pub(super) matched: Range<usize>,
}

/// Builds the result objects of the matches of the file shown as `display`.
pub(super) fn prepare(found: Vec<Found>, display: &str) -> Vec<Shown> {
    let path_len = budget::escaped_len(display);
    found
        .into_iter()
        .map(
            |Found {
                 line,
                 column,
                 excerpt,
             }| Shown {
                line,
                json_len: match_json_len(path_len, line, column, excerpt.escaped_len),
                excerpt_len: excerpt.escaped_len,
                matched: excerpt.matched,
                value: match_value(display, line, column, excerpt.text),
            },
        )
        .collect()
}

/// The bytes of a serialized match besides its path, numbers and excerpt.
const MATCH_FIXED_LEN: usize = r#"{"path":"","line":,"column":,"excerpt":""}"#.len();

/// The bytes a match object takes serialized, from the escaped lengths of its strings.
fn match_json_len(path_len: usize, line: u64, column: u64, excerpt_len: usize) -> usize {
    MATCH_FIXED_LEN + path_len + decimal_len(line) + decimal_len(column) + excerpt_len
}

/// A match as the result shows it: `{path, line, column, excerpt}`.
fn match_value(display: &str, line: u64, column: u64, excerpt: String) -> Value {
    // A copy of one object with the four keys, its values then set in order: built key by key,
    // each of a search's matches hashed its four keys with SipHash (serde_json's map is an
    // `IndexMap` with the std hasher) and placed them in its table, ~5% of the instructions of
    // a search with many matches. A copy takes the keys' hashes and the table as they are.
    static FIELDS: LazyLock<serde_json::Map<String, Value>> = LazyLock::new(|| {
        ["path", "line", "column", "excerpt"]
            .into_iter()
            .map(|key| (key.to_string(), Value::Null))
            .collect()
    });
    let mut object = FIELDS.clone();
    let values = [
        Value::from(display),
        Value::from(line),
        Value::from(column),
        Value::String(excerpt),
    ];
    for (slot, value) in object.values_mut().zip(values) {
        *slot = value;
    }
    Value::Object(object)
}

/// The digits of `n` written in decimal.
pub(super) fn decimal_len(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |digits| digits as usize + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn match_length_is_computed_as_serde_json_writes_it() {
        let samples = [
            ("src/a.rs", 1, 9, "plain"),
            ("dir/\"quoted\"\\é", 1_234_567, 10, "tab\tnul\u{0}😀…"),
        ];
        for (path, line, column, excerpt) in samples {
            let value = match_value(path, line, column, excerpt.to_string());
            let expected =
                json!({"path": path, "line": line, "column": column, "excerpt": excerpt});
            assert_eq!(value, expected);
            // The same bytes, keys in the same order.
            assert_eq!(value.to_string(), expected.to_string());
            // Each match is an object of its own.
            assert_eq!(match_value("b", 2, 3, "e".into())["path"], "b");
            let len = match_json_len(
                budget::escaped_len(path),
                line,
                column,
                budget::escaped_len(excerpt),
            );
            assert_eq!(len, value.to_string().len(), "{value}");
        }
    }
}
