//! pen_tail: the last lines of a text file, read from the end without scanning the file.
//!
//! The window is the last `max_page_bytes` (or page budget) bytes; whole lines are taken from
//! its end. A last line longer than the window comes back as its final part. Line numbers are
//! reported only for files small enough to count cheaply (`max_edit_file_bytes`); for larger
//! files the byte offset of the window is the cursor.

use super::budget::{self, escaped_len, widest};
use super::keys;
use super::source::{self, Eol};
use super::subject::Subject;
use super::{ErrorCode, ToolContext, ToolDoc, ToolError, shown, shown_size};
use crate::bytes::{ByteSource, read_range};
use crate::limits::Limits;
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Args {
    pub path: String,
    pub line_count: Option<u64>,
}

/// What a call reads the end of: the file.
pub fn subject(arguments: &Value) -> Subject {
    Subject::path(arguments)
}

pub fn spec(limits: &Limits) -> ToolDoc {
    let lines = limits.max_page_lines;
    let bytes = shown_size(budget::page_bytes_bound(limits) as u64);
    let counted = shown_size(limits.max_edit_file_bytes);
    ToolDoc {
        description: format!(
            "Read the end of a UTF-8 text file (a log, say) without reading the rest. Returns `content`, the \
            exact text of the last whole lines (at most `line_count`, {lines} and {bytes}), `start_offset` (the byte \
            offset where the content starts), `line_count` returned, and for files up to {counted} `start_line` and \
            `end_line`, plus the same metadata as pen_read. A last line longer than a page comes back as its \
            final part (`partial_line: true`). To read what comes before, use pen_read. Private key material is \
            never returned."
        ),
        input_schema: json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path relative to the workspace root."},
                "line_count": {"type": "integer", "minimum": 1, "maximum": lines, "description": format!("Lines to read from the end (default and maximum {lines}).")}
            },
            "required": ["path"],
            "additionalProperties": false
        }),
    }
}

/// The tail of a source: its text and the offset it starts at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tail {
    pub content: String,
    pub start: u64,
    /// Lines in `content` (a partial line counts as one).
    pub lines: usize,
    /// The content begins inside a line.
    pub starts_mid_line: bool,
}

/// The last whole lines of `src` within `max_lines`, `max_raw` raw bytes and `budget` escaped
/// bytes; when the last line alone does not fit, the longest final part of it that does.
pub fn cut_tail<S: ByteSource + ?Sized>(
    src: &S,
    max_lines: usize,
    max_raw: usize,
    budget: usize,
    display: &str,
) -> Result<Tail, ToolError> {
    let len = src.len();
    let window_start = len.saturating_sub(max_raw.min(budget) as u64);
    let raw = read_range(src, window_start, len).map_err(|e| ToolError::io(display, &e))?;
    // Step past a character cut by the window start, then keep only the text after the last
    // byte that is not UTF-8 (the end of the file is what a tail is for).
    let mut skip = raw
        .iter()
        .take(3)
        .take_while(|b| (0x80..0xC0).contains(*b))
        .count();
    let mut bad_byte = None;
    let text = loop {
        match std::str::from_utf8(&raw[skip..]) {
            Ok(text) => break text,
            Err(e) => {
                let bad = skip + e.valid_up_to();
                bad_byte = Some(source::invalid_utf8(
                    raw[bad],
                    window_start + bad as u64,
                    display,
                ));
                skip = bad + e.error_len().unwrap_or(raw.len() - bad);
                if skip >= raw.len() {
                    break "";
                }
            }
        }
    };
    let text_start = window_start + skip as u64;
    let whole_from_start = text_start == 0
        || read_range(src, text_start - 1, text_start)
            .map_err(|e| ToolError::io(display, &e))?
            .first()
            == Some(&b'\n');

    // Walk line starts backwards from the end.
    let mut start = text.len();
    let mut used = 0usize;
    let mut lines = 0usize;
    while lines < max_lines && start > 0 {
        // The line ending at `start` includes its own newline; find the newline before it.
        let bytes = text.as_bytes();
        let search_end = if bytes[start - 1] == b'\n' {
            start - 1
        } else {
            start
        };
        let line_start = match memchr::memrchr(b'\n', &bytes[..search_end]) {
            Some(i) => i + 1,
            // The first line of the window is whole only if the window starts a line.
            None if whole_from_start => 0,
            None => break,
        };
        let cost = escaped_len(&text[line_start..start]);
        if used + cost > budget {
            break;
        }
        used += cost;
        start = line_start;
        lines += 1;
    }
    let mut starts_mid_line = false;
    if lines == 0
        && let Some(err) = bad_byte
    {
        // Not one whole line after the last bad byte: its line cannot be served.
        return Err(err);
    }
    if lines == 0 && !text.is_empty() {
        // The last line does not fit: serve its longest final part that does.
        let mut cut = text.len();
        let mut cost = 0;
        for (i, c) in text.char_indices().rev() {
            let c_cost = budget::escaped_char_len(c);
            if cost + c_cost > budget {
                break;
            }
            cost += c_cost;
            cut = i;
        }
        start = cut;
        lines = 1;
        starts_mid_line = true;
    }
    Ok(Tail {
        content: text[start..].to_string(),
        start: text_start + start as u64,
        lines,
        starts_mid_line,
    })
}

pub fn run(args: Args, ctx: &ToolContext) -> Result<Value, ToolError> {
    let limits = ctx.limits;
    let line_count = super::bounded_count(args.line_count, limits.max_page_lines, "line_count")?;
    let file = source::open_file(ctx, &args.path)?;
    let display = file.resolved.display.clone();
    let facts = file.facts(limits)?;
    let src = &file.source;
    let io_err = |e: std::io::Error| ToolError::io(&display, &e);

    let wide = widest(facts.len + 1);
    let envelope = json!({
        "path": display, "content": "", "start_offset": wide, "line_count": wide,
        "start_line": wide, "end_line": wide, "partial_line": false, "eol": Eol::Mixed,
        "final_newline": false, "bom": false, "total_bytes": wide, "source": "editor", "hash": facts.hash,
    });
    let budget = budget::page_budget(&envelope, limits)?;
    let tail = cut_tail(src, line_count, limits.max_page_bytes, budget, &display)?;

    if let Err(refusal) =
        keys::check_window(src, tail.start, facts.len, limits.key_lookback_bytes).map_err(io_err)?
    {
        return Err(ToolError::new(
            ErrorCode::KeyMaterial,
            format!(
                "pen_tail refused the end of {}: {}. Read the parts before the key with pen_read.",
                shown(&display),
                refusal.describe()
            ),
        ));
    }
    if let Some(ledger) = ctx.ledger {
        ledger.record(&file.resolved.absolute, &facts.hash);
    }
    let mut value = json!({
        "path": display,
        "content": tail.content,
        "start_offset": tail.start,
        "line_count": tail.lines,
        "partial_line": tail.starts_mid_line,
        "eol": Eol::of(tail.content.as_bytes()),
        "final_newline": facts.final_newline,
        "bom": facts.bom,
        "total_bytes": facts.len,
        "source": file.source.name(),
        "hash": facts.hash,
    });
    if facts.len <= limits.max_edit_file_bytes {
        // From the line marks of this version (built with its hash), not a scan of the head.
        let mut lines = file.lines();
        let start_line = lines.newlines_before(tail.start).map_err(io_err)? + 1;
        file.keep_lines(lines);
        let newlines = memchr::memchr_iter(b'\n', tail.content.as_bytes()).count() as u64;
        let end_line = start_line + newlines - u64::from(tail.content.ends_with('\n'));
        value["start_line"] = json!(start_line);
        value["end_line"] = json!(end_line);
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tail(text: &str, lines: usize, raw: usize, budget: usize) -> Tail {
        cut_tail(text.as_bytes(), lines, raw, budget, "f").unwrap()
    }

    #[test]
    fn last_whole_lines() {
        let text = "one\ntwo\r\nthree\n";
        assert_eq!(tail(text, 1, 1000, 1000).content, "three\n");
        assert_eq!(tail(text, 2, 1000, 1000).content, "two\r\nthree\n");
        let all = tail(text, 10, 1000, 1000);
        assert_eq!((all.content.as_str(), all.start, all.lines), (text, 0, 3));
        assert_eq!(tail("a\nb", 1, 1000, 1000).content, "b");
        assert_eq!(tail("a\nb", 5, 1000, 1000).content, "a\nb");
        assert_eq!(tail("", 5, 1000, 1000).content, "");
        assert_eq!(tail("\n\n", 1, 1000, 1000).content, "\n");
    }

    #[test]
    fn a_window_cut_mid_line_drops_the_partial_first_line() {
        let text = "first line\nsecond\n";
        // The window holds "line\nsecond\n": "line\n" is part of a line and is left out.
        let t = tail(text, 10, 12, 1000);
        assert_eq!(t.content, "second\n");
        assert_eq!(t.start, 11);
    }

    #[test]
    fn a_long_last_line_comes_back_as_its_end() {
        let text = format!("x\n{}", "é".repeat(100));
        let t = tail(&text, 10, 1000, 51);
        assert_eq!(t.content, "é".repeat(25));
        assert!(t.starts_mid_line);
        assert_eq!(t.start as usize, text.len() - 50);
    }

    #[test]
    fn invalid_bytes_before_the_end_are_stepped_over() {
        let bytes = b"bad \xFF\nok\n";
        let t = cut_tail(&bytes[..], 10, 1000, 1000, "f").unwrap();
        assert_eq!(t.content, "ok\n");
        let err = cut_tail(&b"ok\n\xFF"[..], 10, 1000, 1000, "f").unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidUtf8);
    }
}
