//! The page: outcomes merged in walk order, every limit decided where a sequential search would
//! decide it, cursors that resume exactly where a page ended, and the result kept within the cap.

use super::outcome::{Content, Done, Outcome, Shown, SkipReason, Walked, decimal_len};
use super::scan::Excerpt;
use super::{Cursor, LimitHit, Resume};
use crate::limits::Limits;
use crate::tools::ToolError;
use crate::tools::budget;
use crate::workspace::Workspace;
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

/// The `skipped` counts of a result: files not searched by reason (key material included, one
/// per file), and entries too deep to enter.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub(super) struct Skipped {
    pub(super) binary: u64,
    pub(super) non_utf8: u64,
    pub(super) too_large: u64,
    pub(super) unreadable: u64,
    /// Entries not entered because they lie more than `max_depth` levels below the root.
    pub(super) too_deep: u64,
    pub(super) key_material: u64,
}

impl Skipped {
    fn count(&mut self, reason: SkipReason) {
        let counter = match reason {
            SkipReason::Binary => &mut self.binary,
            SkipReason::NonUtf8 => &mut self.non_utf8,
            SkipReason::TooLarge => &mut self.too_large,
            SkipReason::Unreadable => &mut self.unreadable,
            SkipReason::KeyMaterial => &mut self.key_material,
        };
        *counter += 1;
    }
}

/// A search stopped by a limit, and where to resume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Stop {
    pub(super) limit: LimitHit,
    pub(super) cursor: Option<String>,
}

/// The cursor that resumes at a match object's line: a page that stops because that match did
/// not fit hands it on, so that the next page starts exactly where this one ended.
fn cursor_before(shown: &Value) -> String {
    resume_before(
        shown["path"].as_str().unwrap_or_default(),
        shown["line"].as_u64().unwrap_or_default(),
    )
}

/// The cursor that resumes after the walked entry `last`, or, when the page walked nothing,
/// where it began (`page_start`).
pub(super) fn resume_after(
    workspace: &Workspace,
    last: Option<&Path>,
    page_start: Option<&str>,
) -> Option<String> {
    match last {
        Some(path) => Some(
            Cursor {
                display: workspace.display(path),
                resume: Resume::AfterEntry,
            }
            .to_string(),
        ),
        None => page_start.map(str::to_string),
    }
}

/// The cursor that resumes at `line` of the file shown as `display`: after the line before it.
fn resume_before(display: &str, line: u64) -> String {
    Cursor {
        display: display.to_string(),
        resume: Resume::AfterLine(line.saturating_sub(1)),
    }
    .to_string()
}

/// A search's result before serialization.
#[derive(Debug, Default)]
pub(super) struct Page {
    pub(super) matches: Vec<Value>,
    /// Escaped bytes the matches take in the result, commas included.
    pub(super) matches_len: usize,
    pub(super) stop: Option<Stop>,
    pub(super) skipped: Skipped,
    pub(super) files_searched: u64,
    pub(super) entries_walked: u64,
    pub(super) bytes_read: u64,
}

impl Page {
    /// The result object, with `matches` in place of the page's own. Built field by field so
    /// that the matches are moved in, not copied.
    pub(super) fn to_value(&self, query: &str, limits: &Limits, matches: Vec<Value>) -> Value {
        let mut object = serde_json::Map::new();
        object.insert("query".into(), query.into());
        object.insert("matches".into(), Value::Array(matches));
        object.insert("truncated".into(), self.stop.is_some().into());
        if let Some(stop) = &self.stop {
            object.insert("limit_hit".into(), json!(stop.limit));
            if let Some(cursor) = &stop.cursor {
                object.insert("next_after".into(), cursor.as_str().into());
            }
            object.insert("guidance".into(), stop.limit.guidance(limits).into());
        }
        object.insert("skipped".into(), json!(self.skipped));
        object.insert("files_searched".into(), self.files_searched.into());
        object.insert("entries_walked".into(), self.entries_walked.into());
        object.insert("bytes_read".into(), self.bytes_read.into());
        Value::Object(object)
    }

    /// Takes the walk's counts at the point where the page ends (so far).
    pub(super) fn walked_to(&mut self, walked: Walked) {
        self.entries_walked = walked.entries;
        self.skipped.too_deep = walked.too_deep;
    }

    /// Adds a match whose serialized length is `json_len`.
    fn push(&mut self, shown: Value, json_len: usize) {
        self.matches_len += json_len + usize::from(!self.matches.is_empty());
        self.matches.push(shown);
    }

    fn pop(&mut self) -> Option<Value> {
        let last = self.matches.pop()?;
        self.matches_len -= last.to_string().len() + usize::from(!self.matches.is_empty());
        Some(last)
    }

    /// The result object, within the cap. The matches and their cursor always fit the page
    /// budget, and the guidance the other half of what the envelope leaves; only a longer cursor
    /// (the path of a deep entry at a small cap) can overflow. Then matches are given back until
    /// the result fits.
    pub(super) fn finish(mut self, query: &str, limits: &Limits) -> Result<Value, ToolError> {
        loop {
            // Measure everything but the matches, whose length is already known, so that a
            // result with thousands of matches is not serialized just to be measured.
            let len = self.to_value(query, limits, Vec::new()).to_string().len() + self.matches_len;
            if len <= limits.max_tool_result_bytes {
                let matches = std::mem::take(&mut self.matches);
                return Ok(self.to_value(query, limits, matches));
            }
            let Some(last) = self.pop().filter(|_| !self.matches.is_empty()) else {
                return Err(budget::budget_too_small(len, limits));
            };
            self.stop = Some(Stop {
                limit: LimitHit::ResultBytes,
                cursor: Some(cursor_before(&last)),
            });
        }
    }
}

/// Merges outcomes in walk order into a page, deciding the file, byte, match and result-size
/// limits at the file where a sequential search would decide them.
pub(super) struct Collector<'a> {
    pub(super) limits: &'a Limits,
    pub(super) workspace: &'a Workspace,
    /// The cursor this page began at: where to resume when it stops before walking anything.
    pub(super) after_text: Option<&'a str>,
    pub(super) budget: usize,
    pub(super) envelope_len: usize,
    pub(super) page: Page,
    /// Bytes charged to the byte limit so far.
    pub(super) charged: u64,
    /// Outcomes that arrived before an earlier one: `waiting[i]` is the outcome of walk index
    /// `next + i`, once it came. A ring, not a sorted map: the merge is the sequential part of
    /// a search, and a map's insert and remove per file were a quarter of its instructions.
    pub(super) waiting: VecDeque<Option<Done>>,
    pub(super) next: usize,
    /// Tells the readers to skip the files still queued.
    pub(super) stop_readers: &'a AtomicBool,
    pub(super) stopped: bool,
    pub(super) error: Option<ToolError>,
    /// The index among the entries the page took of the last file merged: the page's cursor
    /// names no entry before it (but for a match given back to fit the cap).
    pub(super) merged_taken: usize,
}

impl Collector<'_> {
    pub(super) fn accept(&mut self, done: Done) {
        // Every walk index comes once, at or after `next`.
        let Some(offset) = done.job.index.checked_sub(self.next) else {
            return;
        };
        if offset >= self.waiting.len() {
            self.waiting.resize_with(offset + 1, || None);
        }
        self.waiting[offset] = Some(done);
        while !self.stopped && self.waiting.front().is_some_and(Option::is_some) {
            let Some(Some(done)) = self.waiting.pop_front() else {
                break;
            };
            self.next += 1;
            self.merge(done);
        }
    }

    fn merge(&mut self, done: Done) {
        let Done {
            job,
            display,
            outcome,
        } = done;
        self.merged_taken = job.taken;
        let (size, bytes_read, content) = match outcome {
            Outcome::NotRead(reason) => {
                self.page.walked_to(job.walked);
                self.page.skipped.count(reason);
                return;
            }
            Outcome::Read {
                size,
                bytes_read,
                content,
            } => (size, bytes_read, content),
        };
        let search = &self.limits.search;
        let limit = if self.page.files_searched >= search.max_files as u64 {
            Some(LimitHit::Files)
        } else if self.charged + size > search.max_bytes {
            Some(LimitHit::Bytes)
        } else {
            None
        };
        if let Some(limit) = limit {
            // This file is not part of the page: the next one starts with it.
            self.page.walked_to(job.before);
            let cursor = resume_after(self.workspace, job.previous.as_deref(), self.after_text);
            self.stop(limit, cursor);
            return;
        }
        self.page.walked_to(job.walked);
        self.page.files_searched += 1;
        self.page.bytes_read += bytes_read;
        self.charged += size;
        let found = match content {
            Content::Skipped(reason) => {
                self.page.skipped.count(reason);
                return;
            }
            Content::Text(found) => found,
        };
        let path_len = budget::escaped_len(&display);
        for shown in found {
            if !self.add(&display, path_len, shown) {
                return;
            }
        }
    }

    /// Adds a match of the file shown as `display` (`path_len` bytes escaped) if the limits
    /// allow; otherwise ends the page before it and returns false.
    fn add(&mut self, display: &str, path_len: usize, shown: Shown) -> bool {
        // The next page starts at the match this one could not show.
        let next_page = || Some(resume_before(display, shown.line));
        if self.page.matches.len() >= self.limits.search.max_matches {
            self.stop(LimitHit::Matches, next_page());
            return false;
        }
        // Room for the excerpt once the rest of this match and a cursor as long as its own are
        // counted: a page's cursor names the first match it could not show, usually alike.
        let cursor = path_len + "#L".len() + decimal_len(shown.line);
        let fields = shown.json_len - shown.excerpt_len;
        let comma = usize::from(!self.page.matches.is_empty());
        let room = self
            .budget
            .saturating_sub(self.page.matches_len + comma + fields + cursor);
        if shown.excerpt_len <= room {
            self.page.push(shown.value, shown.json_len);
            return true;
        }
        if !self.page.matches.is_empty() {
            self.stop(LimitHit::ResultBytes, next_page());
            return false;
        }
        // The first match of a page is shown with a shorter excerpt rather than not at all.
        let excerpt = Excerpt {
            text: shown.value["excerpt"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            matched: shown.matched,
            escaped_len: shown.excerpt_len,
        };
        let mut value = shown.value;
        match (excerpt.shrunk_to(room), value.as_object_mut()) {
            (Some(shorter), Some(object)) => {
                object.insert("excerpt".into(), Value::String(shorter.text));
                self.page.push(value, fields + shorter.escaped_len);
                true
            }
            _ => {
                self.error = Some(budget::budget_too_small(
                    self.envelope_len + fields + cursor,
                    self.limits,
                ));
                self.stopped = true;
                self.stop_readers.store(true, Ordering::Relaxed);
                false
            }
        }
    }

    /// Ends the page with `limit`; the next page starts at `cursor`.
    fn stop(&mut self, limit: LimitHit, cursor: Option<String>) {
        self.page.stop = Some(Stop { limit, cursor });
        self.stopped = true;
        self.stop_readers.store(true, Ordering::Relaxed);
    }
}
