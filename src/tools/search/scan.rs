//! Finding the query in a file's text, one match per line, and cutting the line around it to an
//! excerpt the result can hold.

use crate::tools::budget;
use crate::tools::{ErrorCode, ToolError};
use memchr::memmem;
use std::ops::Range;

/// Marks the cut end of an excerpt. Its bytes count toward `excerpt_bytes`.
const ELLIPSIS: &str = "…";

const BYTE_ORDER_MARK: &str = "\u{feff}";

/// Finds the query in bytes.
pub(super) enum Matcher {
    /// Case-sensitive: a plain substring search.
    Exact(Box<memmem::Finder<'static>>),
    /// Case-insensitive: the escaped query as a Unicode-aware regex, so `ÄPFEL` finds `äpfel`.
    Caseless(regex::bytes::Regex),
}

impl Matcher {
    pub(super) fn new(query: &str, case_sensitive: bool) -> Result<Matcher, ToolError> {
        if case_sensitive {
            return Ok(Matcher::Exact(Box::new(
                memmem::Finder::new(query).into_owned(),
            )));
        }
        regex::bytes::RegexBuilder::new(&regex::escape(query))
            .case_insensitive(true)
            .build()
            .map(Matcher::Caseless)
            .map_err(|e| {
                ToolError::new(
                    ErrorCode::InvalidArguments,
                    format!(
                        "invalid arguments: field `query` cannot be searched without case: {e}. \
                         Use a shorter query or case_sensitive: true."
                    ),
                )
            })
    }

    /// The first match starting at or after `at`.
    fn find_at(&self, haystack: &[u8], at: usize) -> Option<Range<usize>> {
        match self {
            Matcher::Exact(finder) => {
                let start = at + finder.find(haystack.get(at..)?)?;
                Some(start..start + finder.needle().len())
            }
            Matcher::Caseless(regex) => regex.find_at(haystack, at).map(|m| m.range()),
        }
    }
}

/// A match found in a file, before it is placed in the result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Found {
    pub(super) line: u64,
    pub(super) column: u64,
    pub(super) excerpt: Excerpt,
}

/// The matches of `bytes` on lines after `after_line`, one per line, at most `max_shown` of them;
/// `None` when a matching line is not UTF-8 (a file checked whole never has one). `bytes` hold
/// no private key: files that do are skipped whole before they are scanned.
pub(super) fn scan(
    bytes: &[u8],
    matcher: &Matcher,
    after_line: u64,
    max_shown: usize,
    excerpt_bytes: usize,
) -> Option<Vec<Found>> {
    let mut found = Vec::new();
    let (mut line, mut line_start) = match after_line.checked_sub(1) {
        None => (1, 0),
        Some(newlines_before) => {
            match memchr::memchr_iter(b'\n', bytes).nth(newlines_before as usize) {
                Some(at) => (after_line + 1, at + 1),
                None => return Some(found),
            }
        }
    };
    let mut shown = 0;
    while let Some(hit) = matcher.find_at(bytes, line_start) {
        let before = &bytes[line_start..hit.start];
        line += memchr::memchr_iter(b'\n', before).count() as u64;
        let start = memchr::memrchr(b'\n', before).map_or(line_start, |i| line_start + i + 1);
        let end = memchr::memchr(b'\n', &bytes[hit.start..]).map_or(bytes.len(), |i| hit.start + i);
        {
            // Editors do not show the byte-order mark, so columns do not count it.
            let start =
                if start == 0 && bytes.starts_with(BYTE_ORDER_MARK.as_bytes()) && hit.start > 0 {
                    BYTE_ORDER_MARK.len()
                } else {
                    start
                };
            let content_end = if end > start && bytes[end - 1] == b'\r' {
                end - 1
            } else {
                end
            };
            let content = match bytes.get(start..content_end) {
                Some(content) => std::str::from_utf8(content).ok()?,
                None => "",
            };
            let in_line = hit.start - start;
            let column = content.get(..in_line).map_or(0, |s| s.chars().count()) as u64 + 1;
            found.push(Found {
                line,
                column,
                excerpt: excerpt(content, in_line, hit.end - start, excerpt_bytes),
            });
            shown += 1;
            if shown == max_shown {
                break;
            }
        }
        if end == bytes.len() {
            break;
        }
        line_start = end + 1;
        line += 1;
    }
    Some(found)
}

/// A line, or the part of it around a match, as a result shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Excerpt {
    pub(super) text: String,
    /// The byte range of the match in `text` (cut short where `text` is).
    pub(super) matched: Range<usize>,
    /// The length of `text` JSON-escaped, measured by the reader so that the in-order merge,
    /// the one sequential part of a search, does not have to.
    pub(super) escaped_len: usize,
}

/// `line` cut to at most `max` bytes around the match at `start..end` (byte offsets in `line`),
/// on char boundaries, with [`ELLIPSIS`] at each cut end. The match is centred; when it is
/// longer than the room, its start is shown.
fn excerpt(line: &str, start: usize, end: usize, max: usize) -> Excerpt {
    let len = line.len();
    let start = start.min(len);
    let end = end.clamp(start, len);
    if len <= max {
        return Excerpt {
            text: line.to_string(),
            matched: start..end,
            escaped_len: budget::escaped_len(line),
        };
    }
    let room = max.saturating_sub(2 * ELLIPSIS.len());
    let lead = room.saturating_sub(end - start) / 2;
    let mut from = start.saturating_sub(lead);
    let mut to = from + room;
    if to > len {
        to = len;
        from = len - room;
    }
    // An end at the edge of the line needs no ellipsis; its bytes go to the other side.
    let one_cut = max.saturating_sub(ELLIPSIS.len());
    if from == 0 {
        to = one_cut.min(len);
    } else if to == len {
        from = len.saturating_sub(one_cut);
    }
    let from = crate::text::ceil_char_boundary(line, from);
    let to = crate::text::floor_char_boundary(line, to).max(from);
    let mut text = String::with_capacity(max);
    if from > 0 {
        text.push_str(ELLIPSIS);
    }
    let shift = text.len();
    text.push_str(&line[from..to]);
    if to < len {
        text.push_str(ELLIPSIS);
    }
    Excerpt {
        escaped_len: budget::escaped_len(&text),
        text,
        matched: shift + start.clamp(from, to) - from..shift + end.clamp(from, to) - from,
    }
}

impl Excerpt {
    /// A shorter excerpt of the same match whose JSON-escaped text takes at most `room` bytes,
    /// if one can still show the match's start. Lets the first match of a page fit a small cap
    /// even when its line is full of characters JSON escapes at six bytes each.
    pub(super) fn shrunk_to(&self, room: usize) -> Option<Excerpt> {
        let smallest = 2 * ELLIPSIS.len() + 1;
        let mut max = self.text.len();
        loop {
            let cut = excerpt(&self.text, self.matched.start, self.matched.end, max);
            let escaped = cut.escaped_len;
            if escaped <= room {
                return Some(cut);
            }
            // Each byte cut saves at most six escaped bytes.
            max = max.checked_sub((escaped - room).div_ceil(6))?;
            if max < smallest {
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn excerpt_keeps_short_lines_whole() {
        assert_eq!(excerpt("let x = 1;", 4, 5, 200).text, "let x = 1;");
        assert_eq!(excerpt(&"a".repeat(200), 0, 1, 200).text, "a".repeat(200));
    }

    #[test]
    fn excerpt_centres_the_match_and_marks_cut_ends() {
        let line = format!("{}NEEDLE{}", "a".repeat(300), "b".repeat(300));
        let cut = excerpt(&line, 300, 306, 200);
        assert_eq!(&cut.text[cut.matched.clone()], "NEEDLE");
        let cut = cut.text;
        assert_eq!(cut.len(), 200);
        assert!(cut.starts_with('…') && cut.ends_with('…'), "{cut}");
        let at = cut.find("NEEDLE").unwrap();
        let after = cut.len() - at - "NEEDLE".len();
        assert!(at.abs_diff(after) <= 1, "{at} {after}");
        // At either end of the line only one side is cut, and gets the room of both.
        let start = excerpt(&line, 0, 1, 200).text;
        assert_eq!(start, format!("{}…", "a".repeat(197)));
        let end = excerpt(&line, line.len() - 1, line.len(), 200).text;
        assert_eq!(end, format!("…{}", "b".repeat(197)));
    }

    #[test]
    fn excerpt_of_a_match_longer_than_the_room_shows_its_start() {
        let line = format!("xx{}yy", "m".repeat(500));
        let cut = excerpt(&line, 2, 502, 200).text;
        assert!(cut.starts_with("…mmm"), "{cut}");
        assert!(cut.len() <= 200);
    }

    #[test]
    fn a_shrunk_excerpt_fits_its_escaped_room_and_keeps_the_match() {
        let line = format!("{}NEEDLE{}", "\u{1}".repeat(100), "\"".repeat(100));
        let full = excerpt(&line, 100, 106, 200);
        for room in [40, 80, 150, 300] {
            let shrunk = full.shrunk_to(room).unwrap();
            assert!(budget::escaped_len(&shrunk.text) <= room, "{room}");
            assert_eq!(&shrunk.text[shrunk.matched.clone()], "NEEDLE", "{room}");
        }
        assert_eq!(full.shrunk_to(6), None);
    }

    proptest! {
        #[test]
        fn excerpt_is_bounded_cut_on_chars_and_shows_the_match(
            parts in proptest::collection::vec(prop_oneof!["a", "é", "€", "😀", "\"", "\t"], 0..400),
            at in 0usize..400,
            max in 7usize..300,
        ) {
            let line: String = parts.concat();
            let starts: Vec<usize> = line.char_indices().map(|(i, _)| i).collect();
            prop_assume!(!starts.is_empty());
            let start = starts[at % starts.len()];
            let end = start + line[start..].chars().next().unwrap().len_utf8();
            let Excerpt { text: cut, matched, escaped_len } = excerpt(&line, start, end, max);
            prop_assert_eq!(escaped_len, budget::escaped_len(&cut));
            prop_assert!(cut.len() <= max, "{} > {max}", cut.len());
            prop_assert!(cut.get(matched.clone()).is_some_and(|m| line[start..end].starts_with(m)));
            let body = cut.trim_start_matches('…').trim_end_matches('…');
            prop_assert!(line.contains(body));
            // The matched char is visible, unless the line is too short to need a cut.
            let matched = &line[start..end];
            prop_assert!(cut.contains(matched) || max < 6 + matched.len());
        }
    }

    #[test]
    fn scan_reports_lines_and_columns_in_chars_once_per_line() {
        let text = "\u{feff}x here\r\nno\r\näöü x x\nlast x".as_bytes();
        let matcher = Matcher::new("x", true).unwrap();
        let found = scan(text, &matcher, 0, 100, 200).unwrap();
        let shown: Vec<(u64, u64, String)> = found
            .into_iter()
            .map(|f| (f.line, f.column, f.excerpt.text))
            .collect();
        assert_eq!(
            shown,
            vec![
                (1, 1, "x here".to_string()),
                (3, 5, "äöü x x".to_string()),
                (4, 6, "last x".to_string()),
            ]
        );
        let resumed = scan(text, &matcher, 3, 100, 200).unwrap();
        assert_eq!(resumed.len(), 1);
        assert!(scan(text, &matcher, 4, 100, 200).unwrap().is_empty());
        assert!(scan(text, &matcher, 99, 100, 200).unwrap().is_empty());
        assert_eq!(scan(text, &matcher, 0, 2, 200).unwrap().len(), 2);
        // A matching line that is not UTF-8 (a file that changed under its checked version).
        assert_eq!(scan(b"ok x\nbad x \xff\n", &matcher, 0, 100, 200), None);
    }
}
