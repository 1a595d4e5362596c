//! The edit itself, as a pure function of a file's bytes: each `old_text` found under the key
//! rules, replaced with its `new_text` in the file's line-ending style, the BOM and the
//! final-newline state kept, and the errors that tell the model why an edit does not apply.
//!
//! Architecture invariant: bytes outside the spans an edit replaces are copied, never
//! re-encoded. Line-ending conversion touches only the new text, and the final-newline rule only
//! the end of a file an edit reached. Private-key lines are never matched, counted or offered.

use super::Edit;
use crate::limits::{EDIT_CANDIDATE_LINES, EDIT_OCCURRENCES_SHOWN, EDIT_QUOTED_LINE_BYTES};
use crate::tools::source::{self, BOM, Eol};
use crate::tools::{ErrorCode, ToolError, keys};
use std::borrow::Cow;
use std::ops::Range;

/// The similarity (0 to 1, `difflib`'s ratio) a line needs to be shown as a near miss. 0.6 is
/// `difflib`'s own default: lower, and unrelated lines crowd out the useful ones.
const CANDIDATE_CUTOFF: f32 = 0.6;

/// A file's content after a call's edits, computed before anything is written.
#[derive(Debug)]
pub(super) struct Rewrite<'a> {
    /// Whether the file starts with a UTF-8 byte-order mark; it is kept as it was.
    pub(super) bom: bool,
    /// The text before the edits, without the BOM.
    pub(super) before: &'a str,
    /// The text after the edits, without the BOM.
    pub(super) after: String,
    /// Occurrences replaced, over all edits.
    pub(super) replacements: usize,
    /// The private-key spans of `before`.
    pub(super) before_keys: Vec<Range<usize>>,
    /// Where those same bytes lie in `after`: the file's own key lines, which edits never
    /// touch. Not the spans `after` seems to have: text the model adds is never withheld, even
    /// when it imitates armor lines (issue 11 item 8).
    pub(super) after_keys: Vec<Range<usize>>,
}

impl Rewrite<'_> {
    /// The bytes to write: the BOM, if the file had one, and the edited text.
    pub(super) fn bytes(&self) -> Vec<u8> {
        let bom: &[u8] = if self.bom { BOM } else { b"" };
        [bom, self.after.as_bytes()].concat()
    }
}

/// Applies `edits` in order to a file's bytes. Fails, naming the edit, on the first edit that
/// does not apply, so that a call changes all or nothing.
pub(super) fn rewrite<'a>(
    bytes: &'a [u8],
    edits: &[Edit],
    display: &str,
) -> Result<Rewrite<'a>, ToolError> {
    let text = utf8_text(bytes, display)?;
    let (bom, before) = match text.strip_prefix('\u{FEFF}') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let file_eol = Eol::of(before.as_bytes());
    let line_break = dominant_line_break(before);
    let mut after = before.to_string();
    let before_keys = keys::private_key_spans(before.as_bytes());
    let mut after_keys = before_keys.clone();
    let mut replacements = 0;
    for (index, edit) in edits.iter().enumerate() {
        let which = EditIndex {
            index,
            count: edits.len(),
        };
        let target = EditText {
            text: &mut after,
            keys: &mut after_keys,
        };
        replacements += apply_edit(target, edit, file_eol, line_break, which, display)?;
    }
    // An empty file has no final-newline state to keep: its first content decides it.
    if !before.is_empty() {
        // A file that ended with a line break has a style, so the LF fallback is never used.
        keep_final_newline(
            &mut after,
            before.ends_with('\n'),
            line_break.unwrap_or("\n"),
        );
    }
    // The final-newline rule only ever changes line breaks at the very end.
    for span in &mut after_keys {
        span.end = span.end.min(after.len());
        span.start = span.start.min(span.end);
    }
    Ok(Rewrite {
        bom,
        before,
        after,
        replacements,
        before_keys,
        after_keys,
    })
}

/// The whole file as text, or an error naming the first byte that is not UTF-8.
fn utf8_text<'a>(bytes: &'a [u8], display: &str) -> Result<&'a str, ToolError> {
    std::str::from_utf8(bytes).map_err(|_| {
        match source::check_utf8(bytes, 0, display) {
            Err(err) => err,
            // `check_utf8` lets a sequence cut by the end of a read window pass; here the end
            // of the window is the end of the file, so the cut sequence is an error too.
            Ok(valid) => ToolError::new(
                ErrorCode::InvalidUtf8,
                format!(
                    "{display} is not valid UTF-8: it ends in the middle of a character at \
                     offset {valid}. pen_edit edits UTF-8 text only; use an approved command to \
                     convert or repair it."
                ),
            ),
        }
    })
}

/// Which edit of a call a message is about: `edit 2 of 3 (edits[1])`, so that neither a
/// 1-based nor a 0-based reader miscounts.
#[derive(Debug, Clone, Copy)]
struct EditIndex {
    index: usize,
    count: usize,
}

impl std::fmt::Display for EditIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "edit {} of {} (edits[{}])",
            self.index + 1,
            self.count,
            self.index
        )
    }
}

/// The text an edit applies to, and the spans of it that are the file's own private-key lines.
struct EditText<'a> {
    text: &'a mut String,
    keys: &'a mut Vec<Range<usize>>,
}

/// Whether `range` shares a byte with one of `spans` (sorted and disjoint).
pub(super) fn touches(spans: &[Range<usize>], range: Range<usize>) -> bool {
    spans
        .iter()
        .any(|span| span.start < range.end && range.start < span.end)
}

/// Applies one edit to `target` and returns how many occurrences it replaced. Occurrences that
/// touch a private key are not occurrences: an `old_text` guessed from a key fails exactly as
/// a wrong guess does, and the counts and candidates of the errors never depend on key lines.
fn apply_edit(
    target: EditText<'_>,
    edit: &Edit,
    file_eol: Eol,
    line_break: Option<&str>,
    which: EditIndex,
    display: &str,
) -> Result<usize, ToolError> {
    let EditText { text, keys } = target;
    let new_text = convert_line_breaks(&edit.new_text, line_break);
    if edit.old_text.is_empty() {
        // An empty old_text would match everywhere; its one use is giving an empty file text.
        if text.is_empty() {
            *text = new_text;
            return Ok(1);
        }
        return Err(ToolError::new(
            ErrorCode::InvalidArguments,
            format!(
                "{which}: old_text is empty. Copy the exact text to replace from pen_read output \
                 (an empty old_text is only for filling an empty file). Nothing was written."
            ),
        ));
    }
    let found = old_text_forms(&edit.old_text, file_eol)
        .into_iter()
        .find_map(|form| {
            let mut starts = occurrences(text, &form);
            starts.retain(|&start| !touches(keys, start..start + form.len()));
            (!starts.is_empty()).then_some((form, starts))
        });
    let Some((needle, starts)) = found else {
        return Err(no_match(text, keys, &edit.old_text, which, display));
    };
    if starts.len() > 1 && !edit.replace_all {
        return Err(ambiguous_match(text, &starts, which, display));
    }
    let mut out = String::with_capacity(text.len() + new_text.len());
    let mut copied = 0;
    let mut replaced = 0;
    // Each key span moves by what the replacements before it added or removed.
    let mut moved = keys.iter().cloned().peekable();
    let mut new_keys = Vec::with_capacity(keys.len());
    let mut shift_spans_before = |at: usize, out_len: usize, copied: usize| {
        while let Some(span) = moved.next_if(|span| span.start < at) {
            let shift = out_len as isize - copied as isize;
            new_keys
                .push((span.start as isize + shift) as usize..(span.end as isize + shift) as usize);
        }
    };
    for start in starts {
        // Overlapping occurrences cannot both be replaced; the leftmost wins, like `str::replace`.
        if start < copied {
            continue;
        }
        shift_spans_before(start, out.len(), copied);
        out.push_str(&text[copied..start]);
        out.push_str(&new_text);
        copied = start + needle.len();
        replaced += 1;
    }
    shift_spans_before(usize::MAX, out.len(), copied);
    out.push_str(&text[copied..]);
    // A key line keeps a line of its own: new text joined to it would have to be withheld with
    // it, or show it.
    if new_keys
        .iter()
        .any(|span| span.start > 0 && out.as_bytes()[span.start - 1] != b'\n')
    {
        return Err(ToolError::new(
            ErrorCode::InvalidArguments,
            format!(
                "{which}: new_text would end on the same line as a line of a private key in \
                 {display}. End new_text with a line break, or leave the line break before the \
                 key out of old_text. Nothing was written."
            ),
        ));
    }
    *text = out;
    *keys = new_keys;
    Ok(replaced)
}

/// The forms of `old_text` to look for, in order: as given, then with its line breaks in the
/// file's styles. Models often drop the `\r` of CRLF files, and sometimes add one.
fn old_text_forms(old_text: &str, file_eol: Eol) -> Vec<Cow<'_, str>> {
    let mut forms = vec![Cow::Borrowed(old_text)];
    if !old_text.contains('\n') {
        return forms;
    }
    let lf = old_text.replace("\r\n", "\n");
    if matches!(file_eol, Eol::Crlf | Eol::Mixed) {
        let crlf = lf.replace('\n', "\r\n");
        if crlf != old_text {
            forms.push(Cow::Owned(crlf));
        }
    }
    if matches!(file_eol, Eol::Lf | Eol::Mixed) && lf != old_text {
        forms.push(Cow::Owned(lf));
    }
    forms
}

/// Start offsets of every occurrence of `needle` in `haystack`, overlapping ones included, so
/// that `aa` in `aaa` counts as ambiguous.
fn occurrences(haystack: &str, needle: &str) -> Vec<usize> {
    let finder = memchr::memmem::Finder::new(needle.as_bytes());
    let bytes = haystack.as_bytes();
    let mut starts = Vec::new();
    let mut from = 0;
    // A UTF-8 needle only matches at char boundaries, so stepping one byte past a match is safe.
    while let Some(at) = finder.find(&bytes[from..]) {
        starts.push(from + at);
        from += at + 1;
    }
    starts
}

/// The line break new text is written with: the file's, or for a mixed file the one most of
/// its lines end with (LF on a tie). `None` for a file without a line break, which has no style
/// to impose: new text keeps its own.
fn dominant_line_break(text: &str) -> Option<&'static str> {
    match Eol::of(text.as_bytes()) {
        Eol::Crlf => Some("\r\n"),
        Eol::Lf => Some("\n"),
        Eol::None => None,
        Eol::Mixed => {
            let breaks = memchr::memchr_iter(b'\n', text.as_bytes()).count();
            let crlf = memchr::memmem::find_iter(text.as_bytes(), b"\r\n").count();
            Some(if crlf * 2 > breaks { "\r\n" } else { "\n" })
        }
    }
}

/// `text` with every line break (`\r\n` or `\n`) written as `line_break`, or as given when
/// there is no style to follow. A lone `\r` is not a line break and is kept.
fn convert_line_breaks(text: &str, line_break: Option<&str>) -> String {
    match line_break {
        None => text.to_string(),
        Some("\n") => text.replace("\r\n", "\n"),
        Some(line_break) => text.replace("\r\n", "\n").replace('\n', line_break),
    }
}

/// Restores the final-newline state an edit at the end of the file changed: a file that ended
/// with a line break ends with one again, a file that did not ends without one.
fn keep_final_newline(text: &mut String, had_final_newline: bool, line_break: &str) {
    if text.is_empty() {
        return;
    }
    if had_final_newline {
        if !text.ends_with('\n') {
            text.push_str(line_break);
        }
        return;
    }
    while text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
}

/// The `no_match` error, with the lines nearest to the first non-blank line of `old_text`.
fn no_match(
    text: &str,
    keys: &[Range<usize>],
    old_text: &str,
    which: EditIndex,
    display: &str,
) -> ToolError {
    let mut message = format!("{which}: old_text was not found in {display}.");
    let first_line = old_text.lines().map(str::trim).find(|l| !l.is_empty());
    let candidates = first_line.map_or_else(Vec::new, |line| nearest_lines(text, keys, line));
    match first_line {
        Some(line) if !candidates.is_empty() => {
            message.push_str(&format!(
                " The lines nearest to its first line `{}` are:",
                quoted(line)
            ));
            for (number, line) in &candidates {
                message.push_str(&format!("\n  {number}: {}", quoted(line)));
            }
        }
        _ => message.push_str(" No line of the file resembles it."),
    }
    if !keys.is_empty() {
        // Said of every file with a key, whatever old_text is, so it tells nothing of the key.
        message.push_str(" Text inside a private key is never matched or shown.");
    }
    if which.index > 0 {
        message.push_str(
            "\nLine numbers count in the text as the earlier edits of this call left it.",
        );
    }
    message.push_str(
        "\nRe-read the file with pen_read and copy the exact text, with its whitespace and \
         indentation, into old_text. Nothing was written.",
    );
    ToolError::new(ErrorCode::NoMatch, message)
}

/// Up to [`EDIT_CANDIDATE_LINES`] lines of `text` most like `needle`, best first, as 1-based line
/// numbers and lines. Lines are compared trimmed, so a difference in indentation still finds
/// the line; lines of private keys (`keys`) are never offered, nor compared.
fn nearest_lines<'a>(text: &'a str, keys: &[Range<usize>], needle: &str) -> Vec<(usize, &'a str)> {
    let mut lines = Vec::new();
    let mut offset = 0;
    for (index, raw) in text.split_inclusive('\n').enumerate() {
        let in_key = touches(keys, offset..offset + raw.len());
        offset += raw.len();
        let line = raw.trim_end_matches(['\n', '\r']);
        if !in_key && !line.trim().is_empty() {
            lines.push((index + 1, line));
        }
    }
    let trimmed: Vec<&str> = lines.iter().map(|(_, line)| line.trim()).collect();
    similar::get_close_matches(needle, &trimmed, EDIT_CANDIDATE_LINES, CANDIDATE_CUTOFF)
        .into_iter()
        .filter_map(|close| {
            // `get_close_matches` returns the slices it was given; find each one's line by
            // identity, since equal lines are different candidates.
            trimmed
                .iter()
                .position(|t| std::ptr::eq(t.as_ptr(), close.as_ptr()) && t.len() == close.len())
                .map(|i| lines[i])
        })
        .collect()
}

/// The `ambiguous_match` error, listing the lines where the first occurrences start.
fn ambiguous_match(text: &str, starts: &[usize], which: EditIndex, display: &str) -> ToolError {
    let mut lines: Vec<usize> = Vec::new();
    let mut line = 1;
    let mut counted = 0;
    let mut more = false;
    for &start in starts {
        line += memchr::memchr_iter(b'\n', &text.as_bytes()[counted..start]).count();
        counted = start;
        if lines.last() == Some(&line) {
            continue;
        }
        if lines.len() == EDIT_OCCURRENCES_SHOWN {
            more = true;
            break;
        }
        lines.push(line);
    }
    let numbers: Vec<String> = lines.iter().map(usize::to_string).collect();
    let more = if more { " and more" } else { "" };
    let mut message = format!(
        "{which}: old_text occurs {} times in {display}, starting on line(s) {}{more}.",
        starts.len(),
        numbers.join(", ")
    );
    if which.index > 0 {
        message
            .push_str(" Line numbers count in the text as the earlier edits of this call left it.");
    }
    message.push_str(
        " Add surrounding lines to old_text so that it matches exactly once, or set replace_all \
         to true to change every occurrence. Nothing was written.",
    );
    ToolError::new(ErrorCode::AmbiguousMatch, message)
}

/// A line of the file as an error message quotes it: cut to [`EDIT_QUOTED_LINE_BYTES`].
fn quoted(line: &str) -> Cow<'_, str> {
    crate::text::cut_with_note(line, EDIT_QUOTED_LINE_BYTES, "…")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::write::test_support::{KEY, edit};
    use proptest::prelude::*;

    /// The file's bytes after `edits`, or the error.
    fn rewritten(bytes: &[u8], edits: &[Edit]) -> Result<Vec<u8>, ToolError> {
        rewrite(bytes, edits, "f").map(|r| r.bytes())
    }

    #[test]
    fn line_breaks_convert_to_the_file_style() {
        let mixed = "a\nb\r\nc\rd";
        assert_eq!(convert_line_breaks(mixed, Some("\n")), "a\nb\nc\rd");
        assert_eq!(convert_line_breaks(mixed, Some("\r\n")), "a\r\nb\r\nc\rd");
        assert_eq!(convert_line_breaks(mixed, None), mixed);
        assert_eq!(dominant_line_break("a\r\nb\r\n"), Some("\r\n"));
        assert_eq!(dominant_line_break("a\nb"), Some("\n"));
        assert_eq!(dominant_line_break("ab"), None);
        assert_eq!(dominant_line_break("a\r\nb\r\nc\n"), Some("\r\n"));
        assert_eq!(dominant_line_break("a\r\nb\nc\n"), Some("\n"));
        // A tie goes to LF.
        assert_eq!(dominant_line_break("a\r\nb\n"), Some("\n"));
    }

    #[test]
    fn old_text_is_tried_in_the_file_line_break_styles() {
        let forms = |old, eol| -> Vec<String> {
            old_text_forms(old, eol)
                .into_iter()
                .map(Cow::into_owned)
                .collect()
        };
        assert_eq!(forms("a\nb", Eol::Lf), ["a\nb"]);
        assert_eq!(forms("a\nb", Eol::Crlf), ["a\nb", "a\r\nb"]);
        assert_eq!(forms("a\r\nb", Eol::Lf), ["a\r\nb", "a\nb"]);
        assert_eq!(
            forms("a\r\nb\nc", Eol::Mixed),
            ["a\r\nb\nc", "a\r\nb\r\nc", "a\nb\nc"]
        );
        assert_eq!(forms("ab", Eol::Crlf), ["ab"]);
    }

    #[test]
    fn occurrences_include_overlaps() {
        assert_eq!(occurrences("aaa", "aa"), [0, 1]);
        assert_eq!(occurrences("xé xé", "é"), [1, 5]);
        assert!(occurrences("abc", "d").is_empty());
    }

    #[test]
    fn lf_old_text_matches_a_crlf_file_and_new_text_lands_as_crlf() {
        let out = rewritten(b"one\r\ntwo\r\nthree\r\n", &[edit("one\ntwo\n", "1\n2\n")]).unwrap();
        assert_eq!(out, b"1\r\n2\r\nthree\r\n");
    }

    #[test]
    fn a_mixed_file_gets_its_majority_style() {
        let out = rewritten(b"a\r\nb\r\nc\nd\r\n", &[edit("c", "x\ny")]).unwrap();
        assert_eq!(out, b"a\r\nb\r\nx\r\ny\nd\r\n");
    }

    #[test]
    fn bom_and_missing_final_newline_are_kept() {
        let out = rewritten(b"\xEF\xBB\xBFa\nlast", &[edit("last", "last\nmore\n")]).unwrap();
        assert_eq!(out, b"\xEF\xBB\xBFa\nlast\nmore");
        let out = rewritten(b"a\r\nend\r\n", &[edit("end\r\n", "END")]).unwrap();
        assert_eq!(out, b"a\r\nEND\r\n");
        // Deleting everything leaves an empty file, not a lone line break.
        let out = rewritten(b"a\n", &[edit("a\n", "")]).unwrap();
        assert_eq!(out, b"");
    }

    #[test]
    fn an_empty_file_is_filled_by_an_empty_old_text() {
        let out = rewritten(b"", &[edit("", "fn main() {}\n")]).unwrap();
        assert_eq!(out, b"fn main() {}\n");
        // An empty file has no line-ending style, so the new text keeps its own.
        let out = rewritten(b"", &[edit("", "a\r\nb\r\n")]).unwrap();
        assert_eq!(out, b"a\r\nb\r\n");
        let err = rewritten(b"x", &[edit("", "y")]).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidArguments);
        assert!(
            err.message
                .contains("edit 1 of 1 (edits[0]): old_text is empty"),
            "{}",
            err.message
        );
    }

    #[test]
    fn no_match_shows_the_nearest_lines() {
        let text = b"fn alpha() {\n    let x = 1;\n}\nfn beta() {\n    let y = 2;\n}\n";
        let err = rewritten(text, &[edit("let  x = 1;\n}", "")]).unwrap_err();
        assert_eq!(err.code, ErrorCode::NoMatch);
        assert!(
            err.message
                .starts_with("edit 1 of 1 (edits[0]): old_text was not found in f."),
            "{}",
            err.message
        );
        assert!(
            err.message.contains("\n  2:     let x = 1;"),
            "{}",
            err.message
        );
        assert!(err.message.contains("pen_read"), "{}", err.message);
        let err = rewritten(text, &[edit("zzzzzzzzzzzz", "")]).unwrap_err();
        assert!(
            err.message.contains("No line of the file resembles it"),
            "{}",
            err.message
        );
    }

    #[test]
    fn ambiguous_match_lists_lines_and_replace_all_replaces_each() {
        let text = b"x = 1\ny = 2\nx = 1\nz\nx = 1\n";
        let err = rewritten(text, &[edit("x = 1", "x = 3")]).unwrap_err();
        assert_eq!(err.code, ErrorCode::AmbiguousMatch);
        assert!(
            err.message
                .contains("occurs 3 times in f, starting on line(s) 1, 3, 5."),
            "{}",
            err.message
        );
        assert!(err.message.contains("replace_all"), "{}", err.message);
        let err = rewritten(b"t t t\nt\nt\nt\nt\nt\n", &[edit("t", "x")]).unwrap_err();
        assert!(
            err.message
                .contains("occurs 8 times in f, starting on line(s) 1, 2, 3, 4, 5 and more."),
            "{}",
            err.message
        );
        let all = Edit {
            replace_all: true,
            ..edit("x = 1", "x = 3")
        };
        let result = rewrite(text, &[all], "f").unwrap();
        assert_eq!(result.after, "x = 3\ny = 2\nx = 3\nz\nx = 3\n");
        assert_eq!(result.replacements, 3);
    }

    #[test]
    fn a_failing_later_edit_names_itself_and_line_numbers_follow_earlier_edits() {
        let text = b"a\nb\nc\n";
        let err = rewritten(text, &[edit("a\n", "a\nb\n"), edit("b", "B")]).unwrap_err();
        assert_eq!(err.code, ErrorCode::AmbiguousMatch);
        assert!(
            err.message.starts_with("edit 2 of 2 (edits[1])"),
            "{}",
            err.message
        );
        assert!(err.message.contains("line(s) 2, 3."), "{}", err.message);
        assert!(err.message.contains("earlier edits"), "{}", err.message);
    }

    #[test]
    fn invalid_utf8_names_the_offset() {
        let err = rewritten(b"ab\xFFc", &[edit("a", "b")]).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidUtf8);
        assert!(err.message.contains("offset 2"), "{}", err.message);
        let err = rewritten(b"ab\xC3", &[edit("a", "b")]).unwrap_err();
        assert!(
            err.message.contains("middle of a character at offset 2"),
            "{}",
            err.message
        );
    }

    #[test]
    fn key_lines_are_never_matched_counted_or_offered() {
        let before = format!("a\n{KEY}MIIEs\n");
        // A right guess at the key fails exactly as a wrong one does.
        let right = rewritten(before.as_bytes(), &[edit("MIIEsecretbody", "")]).unwrap_err();
        let wrong = rewritten(before.as_bytes(), &[edit("MIIEsecretbodz", "")]).unwrap_err();
        assert_eq!(right.code, ErrorCode::NoMatch);
        assert_eq!(
            right.message.replace("MIIEsecretbody", "MIIEsecretbodz"),
            wrong.message
        );
        assert!(!wrong.message.contains("secret"), "{}", wrong.message);
        for guess in [
            "MIIEsecretbody",
            "-----BEGIN PRIVATE KEY-----",
            "y\n-----END",
        ] {
            let err = rewritten(before.as_bytes(), &[edit(guess, "")]).unwrap_err();
            assert_eq!(err.code, ErrorCode::NoMatch, "{guess}: {}", err.message);
        }
        // `MIIEs` occurs on a key line and on the last line: only the last counts.
        let out = rewritten(before.as_bytes(), &[edit("MIIEs", "z")]).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), format!("a\n{KEY}z\n"));
        let all = Edit {
            replace_all: true,
            ..edit("MIIEs", "z")
        };
        let result = rewrite(before.as_bytes(), &[all], "k").unwrap();
        assert_eq!(result.replacements, 1);
        assert_eq!(result.after, format!("a\n{KEY}z\n"));
        // An ambiguous count does not count the key's lines.
        let twice = format!("ab\n{KEY}ab\n");
        let err = rewritten(twice.as_bytes(), &[edit("b", "c")]).unwrap_err();
        assert!(err.message.contains("occurs 2 times"), "{}", err.message);
    }

    #[test]
    fn new_text_may_not_share_a_line_with_a_key_line() {
        let before = format!("a\n{KEY}");
        let err = rewritten(before.as_bytes(), &[edit("a\n", "b")]).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidArguments);
        assert!(err.message.contains("line break"), "{}", err.message);
        let out = rewritten(before.as_bytes(), &[edit("a\n", "b\n")]).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), format!("b\n{KEY}"));
    }

    /// Pieces random files are made of: ASCII, CJK, emoji (with a skin-tone modifier), a
    /// combining mark on its own and on a letter, tabs, and every kind of line break.
    const PIECES: &[&str] = &[
        "a", "b", "fn", " ", "\t", "{", "}", "中", "文", "😀", "👍🏽", "e\u{301}", "\u{301}", "é",
        "\n", "\n", "\r\n", "\r\n", "\r",
    ];

    fn text_of(pieces: &[usize]) -> String {
        pieces.iter().map(|&i| PIECES[i]).collect()
    }

    /// What the law expects new text to become: line breaks in the style of the majority of the
    /// file's line breaks, LF on a tie, unchanged when the file has none. Written independently
    /// of `dominant_line_break`.
    fn expected_conversion(file: &str, new_text: &str) -> String {
        let crlf = file.matches("\r\n").count();
        let lf = file.matches('\n').count() - crlf;
        let lf_only = new_text.replace("\r\n", "\n");
        if crlf + lf == 0 {
            new_text.to_string()
        } else if crlf > lf {
            lf_only.replace('\n', "\r\n")
        } else {
            lf_only
        }
    }

    proptest! {
        #[test]
        fn an_edit_changes_only_its_span(
            pieces in prop::collection::vec(0..PIECES.len(), 1..60),
            span in (0usize..60, 1usize..20),
            new_pieces in prop::collection::vec(0..PIECES.len(), 0..12),
            bom in any::<bool>(),
        ) {
            let text = text_of(&pieces);
            // Widen the span piece by piece until its text occurs once; the whole file always does.
            let mut start = span.0 % pieces.len();
            let mut end = (start + span.1).min(pieces.len());
            while occurrences(&text, &text_of(&pieces[start..end])).len() != 1 {
                if end < pieces.len() { end += 1 } else { start -= 1 }
            }
            let prefix = text_of(&pieces[..start]);
            let old_text = text_of(&pieces[start..end]);
            let suffix = text_of(&pieces[end..]);
            let new_text = text_of(&new_pieces);
            let bom_bytes: &[u8] = if bom { BOM } else { b"" };
            let file = [bom_bytes, text.as_bytes()].concat();

            let result = rewrite(&file, &[edit(&old_text, &new_text)], "f").unwrap();
            let bytes = result.bytes();
            prop_assert_eq!(bytes.starts_with(BOM), bom);
            prop_assert_eq!(result.bom, bom);
            let expected = format!("{prefix}{}{suffix}", expected_conversion(&text, &new_text));
            if !suffix.is_empty() {
                prop_assert_eq!(&result.after, &expected);
            } else {
                // The edit reached the end of the file, where the final-newline state is restored.
                prop_assert_eq!(
                    result.after.trim_end_matches(['\r', '\n']),
                    expected.trim_end_matches(['\r', '\n'])
                );
            }
            if !result.after.is_empty() {
                prop_assert_eq!(result.after.ends_with('\n'), text.ends_with('\n'));
            }
        }
    }
}
