//! pen_read: exact, paged reads of a text file.
//!
//! A page is whole lines from `start_line`, at most `max_page_lines` lines, `max_page_bytes`
//! raw bytes and the page budget escaped. The result hands back `next_start_line` and
//! `next_offset`; passing both resumes with one seek, so a page costs O(page) wherever it is in
//! the file. A line longer than a page comes back in parts, each resumed by `next_offset`, so
//! pages concatenate to the exact file.

use super::budget::{self, escaped_len, fitting_prefix, widest};
use super::keys::{self, KeyRefusal};
use super::source::{self, Eol, FileFacts};
use super::subject::Subject;
use super::{ErrorCode, ToolContext, ToolDoc, ToolError, shown, shown_size};
use crate::bytes::{ByteSource, read_range};
use crate::limits::{KEY_END_LOOKAHEAD, Limits};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Args {
    pub path: String,
    pub start_line: Option<u64>,
    pub line_count: Option<u64>,
    pub offset: Option<u64>,
}

/// What a call reads: the file, and its lines when the call names them.
pub fn subject(arguments: &Value) -> Subject {
    Subject::lines(arguments)
}

pub fn spec(limits: &Limits) -> ToolDoc {
    let lines = limits.max_page_lines;
    let bytes = shown_size(budget::page_bytes_bound(limits) as u64);
    ToolDoc {
        description: format!(
            "Read a UTF-8 text file a page at a time. Returns `content`, the exact text of whole lines \
            from `start_line` (line endings, Unicode and the final newline preserved byte for byte), and \
            metadata: `start_line`, `end_line`, `eol` (line endings in this page: lf, crlf, mixed or none), \
            `final_newline`, `bom`, `total_bytes`, `source` and `hash` (pass it to pen_edit as \
            `expected_hash`). A page holds at most {lines} lines and {bytes}. While the file continues the \
            result has `next_start_line` and `next_offset`: pass both back as `start_line` and `offset` to \
            read the next page without rescanning (a `start_line` that is not the line at `offset` is refused, \
            naming the line that is). A line longer than a page comes back in parts \
            (`partial_line: true`), each continued the same way. Private key material is never returned."
        ),
        input_schema: json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path relative to the workspace root."},
                "start_line": {"type": "integer", "minimum": 1, "description": "1-based line to start at (default 1)."},
                "line_count": {"type": "integer", "minimum": 1, "maximum": lines, "description": format!("Lines to read (default and maximum {lines}; larger values are lowered to {lines}).")},
                "offset": {"type": "integer", "minimum": 0, "description": "The previous page's `next_offset`, with its `next_start_line` as `start_line`."}
            },
            "required": ["path"],
            "additionalProperties": false
        }),
    }
}

/// One page cut from a source: the exact text and where it ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    pub content: String,
    /// File offset of the first byte after the page.
    pub end: u64,
    /// The page stops inside a line (the next page continues it).
    pub ends_mid_line: bool,
}

/// The longest run of whole lines at `offset` within `max_lines`, `max_raw` bytes and `budget`
/// escaped bytes; when not even one whole line fits, the longest part of that line that does.
///
/// Stops early before a byte that is not UTF-8, so the page before it is served and the next
/// page names the byte; fails when the page would start on such a byte.
pub fn cut_page<S: ByteSource + ?Sized>(
    src: &S,
    offset: u64,
    max_lines: usize,
    max_raw: usize,
    budget: usize,
    display: &str,
) -> Result<Page, ToolError> {
    let len = src.len();
    let raw = read_range(src, offset, offset + max_raw.min(budget) as u64)
        .map_err(|e| ToolError::io(display, &e))?;
    let reaches_eof = offset + raw.len() as u64 >= len;
    // Whole lines before a byte that is not UTF-8 are served; the error comes when a page
    // would have to hold that byte's line.
    let (valid, bad_byte) = match source::check_utf8(&raw, offset, display) {
        Ok(valid) => (valid, None),
        Err(err) => {
            let up_to = std::str::from_utf8(&raw).map_or_else(|e| e.valid_up_to(), |s| s.len());
            (up_to, Some(err))
        }
    };
    let clean_end = valid == raw.len();
    // The checked prefix is UTF-8, so this cannot fail; map it to an error rather than panic.
    let text = std::str::from_utf8(&raw[..valid])
        .map_err(|e| ToolError::new(ErrorCode::InvalidUtf8, e.to_string()))?;

    let mut taken = 0usize;
    let mut used = 0usize;
    let mut lines = 0usize;
    while lines < max_lines && taken < text.len() {
        let rest = &text[taken..];
        let line_len = match rest.find('\n') {
            Some(i) => i + 1,
            // The last line of the file counts as whole only when the page reaches the end.
            None if reaches_eof && clean_end => rest.len(),
            None => break,
        };
        let cost = escaped_len(&rest[..line_len]);
        if used + cost > budget {
            break;
        }
        used += cost;
        taken += line_len;
        lines += 1;
    }
    if taken == 0
        && let Some(err) = bad_byte
    {
        return Err(err);
    }
    if taken == 0 && !text.is_empty() {
        // Not one whole line fits: serve as much of this line as the budget allows.
        let line_end = text.find('\n').map_or(text.len(), |i| i + 1);
        let (cut, _) = fitting_prefix(&text[..line_end], budget);
        taken = cut;
    }
    let content = text[..taken].to_string();
    let end = offset + taken as u64;
    let ends_mid_line = !content.is_empty() && !content.ends_with('\n') && end < len;
    Ok(Page {
        content,
        end,
        ends_mid_line,
    })
}

pub fn run(args: Args, ctx: &ToolContext) -> Result<Value, ToolError> {
    let limits = ctx.limits;
    let start_line = args.start_line.unwrap_or(1);
    if start_line == 0 {
        return Err(invalid("start_line is 1-based: the first line is 1"));
    }
    let line_count = super::bounded_count(args.line_count, limits.max_page_lines, "line_count")?;
    let file = source::open_file(ctx, &args.path)?;
    let display = file.resolved.display.clone();
    let facts = file.facts(limits)?;
    let src = &file.source;
    let io_err = |e: std::io::Error| ToolError::io(&display, &e);

    // Line numbers come from the line marks of this file version: cached, or built by this
    // call and kept for the next page.
    let mut lines = file.lines();
    let offset = match args.offset {
        Some(offset) => {
            if args.start_line.is_none() {
                return Err(cursor_error(
                    "offset is the byte cursor of next_start_line: pass both start_line and offset from the previous page",
                ));
            }
            check_offset(src, offset, &facts)?;
            // The pair must agree, or the page would be labelled with lines it does not hold.
            let line = lines.newlines_before(offset).map_err(io_err)? + 1;
            if line != start_line {
                return Err(cursor_error(&format!(
                    "offset {offset} is on line {line} of {}, not line {start_line}: pass                      next_start_line and next_offset from the same page unchanged. To read from                      offset {offset}, pass start_line {line} with it; to read line {start_line},                      pass start_line alone.",
                    shown(&display)
                )));
            }
            offset
        }
        None => match lines.line_start(start_line).map_err(io_err)? {
            Some(offset) => offset,
            None if start_line == 1 => 0,
            None => {
                let lines = lines.count_lines().map_err(io_err)?;
                return Err(cursor_error(&format!(
                    "start_line {start_line} is past the end of {}, which has {lines} lines; use pen_tail for its end",
                    shown(&display)
                )));
            }
        },
    };

    // The envelope: every field but the page, numbers and cursors at their widest.
    let wide = widest(facts.len.max(start_line) + 1);
    let envelope = ReadResult {
        path: &display,
        content: "",
        start_line,
        end_line: wide,
        partial_line: false,
        eol: Eol::Mixed,
        final_newline: facts.final_newline,
        bom: facts.bom,
        total_bytes: wide,
        source: "editor",
        hash: &facts.hash,
        next_start_line: Some(wide),
        next_offset: Some(wide),
    };
    let budget = budget::page_budget(&json!(envelope), limits)?;
    let page = cut_page(
        src,
        offset,
        line_count,
        limits.max_page_bytes,
        budget,
        &display,
    )?;

    if let Err(refusal) =
        keys::check_window(src, offset, page.end, limits.key_lookback_bytes).map_err(io_err)?
    {
        return Err(key_error(
            src, &display, offset, start_line, &page, &refusal,
        ));
    }
    file.keep_lines(lines);
    if let Some(ledger) = ctx.ledger {
        ledger.record(&file.resolved.absolute, &facts.hash);
    }

    let starts_mid_line =
        offset > 0 && read_range(src, offset - 1, offset).map_err(io_err)?.first() != Some(&b'\n');
    let newlines = memchr::memchr_iter(b'\n', page.content.as_bytes()).count() as u64;
    let end_line = if page.content.is_empty() {
        start_line - 1
    } else if page.content.ends_with('\n') {
        start_line + newlines - 1
    } else {
        start_line + newlines
    };
    let more = page.end < facts.len;
    let next_start_line = if page.ends_mid_line {
        end_line
    } else {
        end_line + 1
    };
    Ok(json!(ReadResult {
        path: &display,
        content: &page.content,
        start_line,
        end_line,
        partial_line: page.ends_mid_line || starts_mid_line,
        eol: Eol::of(page.content.as_bytes()),
        final_newline: facts.final_newline,
        bom: facts.bom,
        total_bytes: facts.len,
        source: file.source.name(),
        hash: &facts.hash,
        next_start_line: more.then_some(next_start_line),
        next_offset: more.then_some(page.end),
    }))
}

/// A pen_read result as the model sees it.
#[derive(Serialize)]
struct ReadResult<'a> {
    path: &'a str,
    content: &'a str,
    start_line: u64,
    end_line: u64,
    partial_line: bool,
    eol: Eol,
    final_newline: bool,
    bom: bool,
    total_bytes: u64,
    source: &'a str,
    hash: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_start_line: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_offset: Option<u64>,
}

fn check_offset<S: ByteSource + ?Sized>(
    src: &S,
    offset: u64,
    facts: &FileFacts,
) -> Result<(), ToolError> {
    if offset > facts.len {
        return Err(cursor_error(&format!(
            "offset {offset} is past the end of the file ({} bytes); pass the next_offset of the previous page",
            facts.len
        )));
    }
    let byte = read_range(src, offset, offset + 1).unwrap_or_default();
    if byte.first().is_some_and(|b| (0x80..0xC0).contains(b)) {
        return Err(cursor_error(&format!(
            "offset {offset} is inside a UTF-8 character; pass the next_offset of the previous page unchanged"
        )));
    }
    Ok(())
}

fn invalid(message: &str) -> ToolError {
    ToolError::new(ErrorCode::InvalidArguments, message)
}

fn cursor_error(message: &str) -> ToolError {
    ToolError::new(ErrorCode::BadCursor, message)
}

/// The error for a page that would show key material, with where reading may go on.
fn key_error<S: ByteSource + ?Sized>(
    src: &S,
    display: &str,
    offset: u64,
    start_line: u64,
    page: &Page,
    refusal: &KeyRefusal,
) -> ToolError {
    let mut message = format!(
        "pen_read refused the page of {} from line {start_line}: {}.",
        shown(display),
        refusal.describe()
    );
    let ahead = read_range(src, offset, offset + KEY_END_LOOKAHEAD).unwrap_or_default();
    let line_at = |at: usize| start_line + memchr::memchr_iter(b'\n', &ahead[..at]).count() as u64;
    // Where to look for the END line: from the armor in the window, or from the window start.
    let mut from = 0;
    if let KeyRefusal::ArmorInWindow { at, kind } = refusal {
        from = (at - offset) as usize;
        let key_line = line_at(from);
        // Lines before a BEGIN are ordinary text; lines before an END are key body.
        if *kind == keys::ArmorKind::Begin && key_line > start_line {
            message.push_str(&format!(
                " The lines before it are readable: use line_count {}.",
                key_line - start_line
            ));
        }
    }
    let end = keys::armor_markers(&ahead[from..])
        .into_iter()
        .find(|a| a.kind == keys::ArmorKind::End)
        .map(|a| from + a.at);
    let resume = end.and_then(|at| memchr::memchr(b'\n', &ahead[at..]).map(|nl| at + nl + 1));
    match resume {
        Some(after) if offset + (after as u64) < src.len() => message.push_str(&format!(
            " The key ends on line {}; continue after it with start_line {} and offset {}.",
            line_at(after) - 1,
            line_at(after),
            offset + after as u64
        )),
        _ if page.end < src.len() => message.push_str(
            " Skip past the key: read a later part of the file with a larger start_line, or use pen_tail for its end.",
        ),
        _ => {}
    }
    ToolError::new(ErrorCode::KeyMaterial, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::versions::Lines;

    fn page(text: &str, offset: u64, lines: usize, raw: usize, budget: usize) -> Page {
        cut_page(text.as_bytes(), offset, lines, raw, budget, "f").unwrap()
    }

    #[test]
    fn whole_lines_within_every_bound() {
        let text = "one\ntwo\r\nthree\nfour";
        assert_eq!(page(text, 0, 2, 1000, 1000).content, "one\ntwo\r\n");
        assert_eq!(page(text, 0, 10, 1000, 1000).content, text);
        // "one\n" escapes to 5 bytes, "two\r\n" to 7.
        assert_eq!(page(text, 0, 10, 1000, 11).content, "one\n");
        assert_eq!(page(text, 0, 10, 1000, 12).content, "one\ntwo\r\n");
        assert_eq!(page(text, 0, 10, 9, 1000).content, "one\ntwo\r\n");
        assert_eq!(page(text, 0, 10, 8, 1000).content, "one\n");
    }

    #[test]
    fn a_long_line_comes_back_in_parts() {
        let text = format!("{}\nend\n", "é".repeat(100));
        let first = page(&text, 0, 10, 1000, 51);
        assert_eq!(first.content, "é".repeat(25));
        assert!(first.ends_mid_line);
        let mut rebuilt = first.content.clone();
        let mut at = first.end;
        while at < text.len() as u64 {
            let next = page(&text, at, 10, 1000, 51);
            rebuilt.push_str(&next.content);
            at = next.end;
        }
        assert_eq!(rebuilt, text);
    }

    #[test]
    fn last_line_without_newline_is_whole_at_eof() {
        let p = page("a\nlast", 2, 10, 1000, 1000);
        assert_eq!(p.content, "last");
        assert!(!p.ends_mid_line);
    }

    #[test]
    fn stops_before_invalid_utf8_and_fails_on_it() {
        let bytes = b"good\nbad \xFF here\n";
        let first = cut_page(&bytes[..], 0, 10, 1000, 1000, "f").unwrap();
        assert_eq!(first.content, "good\n");
        let err = cut_page(&bytes[..], first.end, 10, 1000, 1000, "f").unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidUtf8);
        assert!(err.message.contains("offset 9"), "{}", err.message);
    }

    #[test]
    fn line_starts_are_found_by_scanning() {
        let text: &[u8] = b"a\nb\n\nc";
        let mut lines = Lines::uncached(text);
        assert_eq!(lines.line_start(1).unwrap(), Some(0));
        assert_eq!(lines.line_start(2).unwrap(), Some(2));
        assert_eq!(lines.line_start(4).unwrap(), Some(5));
        assert_eq!(lines.line_start(5).unwrap(), None);
        assert_eq!(lines.count_lines().unwrap(), 4);
        assert_eq!(Lines::uncached(&b"a\n"[..]).count_lines().unwrap(), 1);
        assert_eq!(Lines::uncached(&b""[..]).count_lines().unwrap(), 0);
    }
}
