//! Cutting text to a byte bound on a character boundary, with or without a note saying so: the
//! one place pen decides where a bounded string ends.
//!
//! Every bounded string pen shows (a capped observation, a quoted line, a title, a refused
//! config value, an excerpt of a frame or of a provider's wording) is cut by a function here, so
//! none of them can split a UTF-8 character or overshoot its bound by a byte. This module depends
//! on nothing else in pen.

use std::borrow::Cow;
use std::fmt::{self, Write};

/// The largest index `<= index` that is a char boundary of `text` (`text.len()` for an index
/// past the end).
pub fn floor_char_boundary(text: &str, index: usize) -> usize {
    if index >= text.len() {
        return text.len();
    }
    let mut i = index;
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// The smallest index `>= index` that is a char boundary of `text` (`text.len()` for an index
/// past the end).
pub fn ceil_char_boundary(text: &str, index: usize) -> usize {
    if index >= text.len() {
        return text.len();
    }
    let mut i = index;
    while !text.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
pub fn cut(text: &str, max: usize) -> &str {
    &text[..floor_char_boundary(text, max)]
}

/// `text` whole when it is at most `max` bytes; else [`cut`] to `max` and followed by `note`, so
/// the head is bounded and the note comes on top of it. The note is written only when the text
/// is cut; `format_args!` makes one that names the full length without an allocation of its own.
pub fn cut_with_note<'a>(text: &'a str, max: usize, note: impl fmt::Display) -> Cow<'a, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let mut out = cut(text, max).to_owned();
    // Writing to a String cannot fail.
    let _ = write!(out, "{note}");
    Cow::Owned(out)
}

/// `text` whole when it is at most `max` bytes; else its head followed by `note`, the two
/// together at most `max` bytes. A bound smaller than the note itself cuts the note too, so the
/// result is never over `max`.
pub fn cut_to_fit<'a>(text: &'a str, max: usize, note: &str) -> Cow<'a, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let head = cut(text, max.saturating_sub(note.len()));
    let mut out = String::with_capacity(head.len() + note.len());
    out.push_str(head);
    out.push_str(note);
    if out.len() > max {
        let end = floor_char_boundary(&out, max);
        out.truncate(end);
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn boundaries_step_over_a_character_never_into_it() {
        let text = "a€b"; // `€` takes bytes 1..4.
        assert_eq!(
            (0..=6)
                .map(|i| floor_char_boundary(text, i))
                .collect::<Vec<_>>(),
            [0, 1, 1, 1, 4, 5, 5]
        );
        assert_eq!(
            (0..=6)
                .map(|i| ceil_char_boundary(text, i))
                .collect::<Vec<_>>(),
            [0, 1, 4, 4, 4, 5, 5]
        );
    }

    #[test]
    fn a_text_within_its_bound_is_kept_whole_without_a_note() {
        assert_eq!(cut("abc", 3), "abc");
        assert!(matches!(cut_with_note("abc", 3, "…"), Cow::Borrowed("abc")));
        assert!(matches!(cut_to_fit("abc", 3, "…"), Cow::Borrowed("abc")));
    }

    #[test]
    fn a_note_comes_on_top_of_the_head_or_within_the_bound() {
        let text = "héllo wörld";
        assert_eq!(cut(text, 2), "h");
        assert_eq!(
            cut_with_note(text, 3, format_args!("…[{} bytes]", text.len())),
            "hé…[13 bytes]"
        );
        assert_eq!(cut_to_fit(text, 9, "…[cut]"), "h…[cut]");
        // A bound below the note's own length cuts the note as well.
        assert_eq!(cut_to_fit(text, 4, "…[cut]"), "…[");
    }

    proptest! {
        #[test]
        fn cuts_never_split_a_character_and_never_pass_their_bound(
            text in "\\PC{0,40}",
            max in 0usize..64,
            note in "\\PC{0,8}",
        ) {
            let head = cut(&text, max);
            prop_assert!(head.len() <= max);
            prop_assert!(text.starts_with(head));
            // The head is the longest that fits: one more character would pass the bound.
            if head.len() < text.len() {
                let next = text[head.len()..].chars().next().map_or(0, char::len_utf8);
                prop_assert!(head.len() + next > max);
            }

            let noted = cut_with_note(&text, max, &note);
            if text.len() <= max {
                prop_assert_eq!(noted.as_ref(), text.as_str());
            } else {
                prop_assert_eq!(noted.as_ref(), format!("{head}{note}"));
            }

            let fitted = cut_to_fit(&text, max, &note);
            prop_assert!(fitted.len() <= max);
            if text.len() <= max {
                prop_assert_eq!(fitted.as_ref(), text.as_str());
            } else if note.len() <= max {
                prop_assert!(fitted.ends_with(note.as_str()));
                prop_assert!(text.starts_with(&fitted[..fitted.len() - note.len()]));
            }
        }
    }
}
