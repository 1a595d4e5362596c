//! The page budget (SPEC §3): how much text a file tool may put in one result so that the
//! result cap never cuts a page and its cursor.
//!
//! A page's JSON-escaped text may take at most half of what the cap leaves after the result's
//! other fields (its "envelope"). When that is less than the minimum page, the tool fails with
//! an error naming `max_tool_result_bytes` instead of returning a result the cap would cut.

use super::{ErrorCode, ToolError};
use crate::limits::{Limits, MAX_TOOL_RESULT_BYTES};
use serde_json::Value;

/// Bytes `c` takes inside a JSON string as serde_json writes it.
pub fn escaped_char_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// Bytes `text` takes inside a JSON string, without the quotes.
pub fn escaped_len(text: &str) -> usize {
    // A byte at a time, not a char at a time: every byte of a multi-byte char is written as it
    // is (one byte each, together the char's `len_utf8`), and each char serde_json escapes is a
    // single ASCII byte. The same sum as `escaped_char_len` over the chars, without decoding
    // them (on a whole-corpus search the per-char sum was 2% of the instructions). Eight bytes
    // at a time where none of them is escaped, which is most of a line of code: a search with
    // many matches measures every excerpt.
    let bytes = text.as_bytes();
    let mut words = bytes.chunks_exact(8);
    let mut len = 0;
    for word in &mut words {
        let plain =
            <[u8; 8]>::try_from(word).is_ok_and(|word| !any_escaped(u64::from_le_bytes(word)));
        len += if plain { 8 } else { escaped_bytes_len(word) };
    }
    len + escaped_bytes_len(words.remainder())
}

fn escaped_bytes_len(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .map(|b| match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
            0..0x20 => 6,
            _ => 1,
        })
        .sum()
}

/// Whether any of the eight bytes of `word` is one serde_json escapes: below 0x20, `"` or `\`.
/// (The bit tricks of "Bit Twiddling Hacks": `has_less(x, n)` and `has_zero(x)`, exact as to
/// whether any byte qualifies.)
fn any_escaped(word: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let has_zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS != 0;
    let has_control = word.wrapping_sub(ONES * 0x20) & !word & HIGHS != 0;
    has_control
        || has_zero(word ^ (ONES * u64::from(b'"')))
        || has_zero(word ^ (ONES * u64::from(b'\\')))
}

/// The length of the longest prefix of `text` whose escaped length is at most `budget`,
/// together with that escaped length. Always a char boundary.
pub fn fitting_prefix(text: &str, budget: usize) -> (usize, usize) {
    let mut used = 0;
    for (index, c) in text.char_indices() {
        let cost = escaped_char_len(c);
        if used + cost > budget {
            return (index, used);
        }
        used += cost;
    }
    (text.len(), used)
}

/// The escaped-byte budget for the variable part of a result whose other fields serialize to
/// `envelope` (a result object with the page left empty, numbers at their widest).
/// It is also at most the page the prompt budget fits (`Limits::fitted_page_bytes`).
pub fn page_budget(envelope: &Value, limits: &Limits) -> Result<usize, ToolError> {
    Ok(result_budget(envelope, limits)?.min(limits.fitted_page_bytes))
}

/// [`page_budget`] without the prompt budget's fit: for pen_edit's diff, which is also what
/// the owner approves and so is not shortened for a small window.
pub fn result_budget(envelope: &Value, limits: &Limits) -> Result<usize, ToolError> {
    let envelope_len = envelope.to_string().len();
    let budget = limits.max_tool_result_bytes.saturating_sub(envelope_len) / 2;
    if budget < limits.min_page_bytes {
        return Err(budget_too_small(envelope_len, limits));
    }
    Ok(budget)
}

/// The most raw bytes a page can hold under `limits`, as the catalog states it: the page limit,
/// or half the result cap, or the fitted page, whichever is least (a page's escaped text, which
/// is never shorter than its raw bytes, gets less than half of the cap).
pub fn page_bytes_bound(limits: &Limits) -> usize {
    limits
        .max_page_bytes
        .min(limits.max_tool_result_bytes / 2)
        .min(limits.fitted_page_bytes)
}

/// The error for a result whose fixed fields leave less than a minimum page under the cap.
pub fn budget_too_small(envelope_len: usize, limits: &Limits) -> ToolError {
    ToolError::new(
        ErrorCode::BudgetTooSmall,
        format!(
            "max_tool_result_bytes is {} and this result's path and fields take {envelope_len} bytes, \
             which leaves less than a {}-byte page. Raise max_tool_result_bytes (at most {}) or use \
             a shorter path.",
            limits.max_tool_result_bytes, limits.min_page_bytes, MAX_TOOL_RESULT_BYTES.max
        ),
    )
}

/// A stand-in for a number in an envelope: the widest value it may take in this result.
pub fn widest(upper_bound: u64) -> u64 {
    // Every number with as many digits as the bound serializes to the same width.
    let digits = upper_bound.max(1).ilog10() + 1;
    10u64.checked_pow(digits).map_or(u64::MAX, |p| p - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn escaped_len_matches_serde_json() {
        let samples = [
            "plain",
            "quote \" and \\ slash",
            "tab\tnew\nline\r\n",
            "\u{1}\u{1f}\u{7f}",
            "é😀中\u{2028}",
            "\u{8}\u{c}",
        ];
        for s in samples {
            let serialized = serde_json::to_string(s).unwrap();
            assert_eq!(escaped_len(s), serialized.len() - 2, "{s:?}");
        }
    }

    proptest::proptest! {
        /// Counting bytes gives what summing each char's escaped length gives.
        #[test]
        fn escaped_len_is_the_sum_over_the_chars(text in "(?s).{0,40}") {
            let per_char: usize = text.chars().map(escaped_char_len).sum();
            proptest::prop_assert_eq!(escaped_len(&text), per_char);
        }

        /// Also over text of mostly ASCII with escaped bytes anywhere in or across its words of
        /// eight, and what serde_json writes.
        #[test]
        fn escaped_len_is_exact_in_every_word(
            parts in proptest::collection::vec(
                proptest::sample::select(vec![
                    "a", " ", "~", "\"", "\\", "\t", "\n", "\u{1}", "\u{1f}", "\u{7f}", "é",
                    "😀", "!", "#", "[", "]", "\u{8}", "\u{c}", "\r",
                ]),
                0..80,
            ),
        ) {
            let text = parts.concat();
            let per_char: usize = text.chars().map(escaped_char_len).sum();
            proptest::prop_assert_eq!(escaped_len(&text), per_char);
            proptest::prop_assert_eq!(escaped_len(&text), serde_json::to_string(&text).unwrap().len() - 2);
        }
    }

    #[test]
    fn fitting_prefix_stops_before_overflow() {
        assert_eq!(fitting_prefix("ab\"c", 3), (2, 2));
        assert_eq!(fitting_prefix("ab\"c", 4), (3, 4));
        assert_eq!(fitting_prefix("😀x", 3), (0, 0));
        assert_eq!(fitting_prefix("xy", 10), (2, 2));
    }

    #[test]
    fn budget_is_half_of_what_the_envelope_leaves() {
        let limits = Limits::default();
        let envelope = json!({"path": "a"});
        let len = envelope.to_string().len();
        assert_eq!(page_budget(&envelope, &limits).unwrap(), (65_536 - len) / 2);
        let long = json!({"path": "p".repeat(800)});
        let small = Limits::with_max_tool_result_bytes(1_024).unwrap();
        let err = page_budget(&long, &small).unwrap_err();
        assert_eq!(err.code, ErrorCode::BudgetTooSmall);
        assert!(err.message.contains("max_tool_result_bytes"));
    }

    #[test]
    fn a_fitted_page_bounds_every_page_but_not_the_diff_the_owner_approves() {
        // 6,500 tokens of room (a 16k window's budget after pen's prompt and schemas): a third
        // of 6,500 × 4 bytes = 8,666 bytes a page, so a 2-6 KB source file is one page.
        let fitted = Limits::default().fitted_to_room(6_500);
        assert_eq!(fitted.fitted_page_bytes, 8_666);
        let envelope = json!({"path": "a"});
        assert_eq!(page_budget(&envelope, &fitted).unwrap(), 8_666);
        assert_eq!(page_bytes_bound(&fitted), 8_666);
        let len = envelope.to_string().len();
        assert_eq!(
            result_budget(&envelope, &fitted).unwrap(),
            (65_536 - len) / 2
        );
        // The floor, and a window so large that the fit does not bind.
        let tiny = Limits::default().fitted_to_room(100);
        assert_eq!(tiny.fitted_page_bytes, crate::limits::MIN_FITTED_PAGE_BYTES);
        let huge = Limits::default().fitted_to_room(2_000_000);
        assert_eq!(page_bytes_bound(&huge), 32 * 1024);
        assert_eq!(page_budget(&envelope, &huge).unwrap(), (65_536 - len) / 2);
        let overflow = Limits::default().fitted_to_room(u64::MAX);
        assert_eq!(page_bytes_bound(&overflow), 32 * 1024);
        // A cap smaller than the fit still decides, with its own error.
        let long = json!({"path": "p".repeat(800)});
        let small = Limits::with_max_tool_result_bytes(1_024)
            .unwrap()
            .fitted_to_room(6_500);
        let err = page_budget(&long, &small).unwrap_err();
        assert_eq!(err.code, ErrorCode::BudgetTooSmall);
    }

    #[test]
    fn a_page_is_bounded_by_the_page_limit_and_half_the_cap() {
        assert_eq!(page_bytes_bound(&Limits::default()), 32 * 1024);
        let small = Limits::with_max_tool_result_bytes(4_096).unwrap();
        assert_eq!(page_bytes_bound(&small), 2_048);
        let large = Limits::with_max_tool_result_bytes(1_048_576).unwrap();
        assert_eq!(page_bytes_bound(&large), 32 * 1024);
    }

    #[test]
    fn widest_keeps_the_digit_count() {
        assert_eq!(widest(0), 9);
        assert_eq!(widest(7), 9);
        assert_eq!(widest(10), 99);
        assert_eq!(widest(12_345), 99_999);
        assert_eq!(widest(u64::MAX), u64::MAX);
    }
}
