//! Key-material refusal (SPEC §2): no tool returns the body of a private key.
//!
//! Private keys are found by their armor lines: PEM `-----BEGIN … PRIVATE KEY-----` (RSA, EC,
//! DSA, PKCS#8, encrypted, OpenSSH), PGP `-----BEGIN PGP PRIVATE KEY BLOCK-----` and SSH2
//! `---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----`, anywhere on a line (so keys embedded in YAML,
//! JSON strings or code are found too). A paged read cannot see a BEGIN line far before its
//! window, so it looks back a fixed distance and fails closed when that look-back is nothing but
//! key-body lines.

use super::source::{ByteSource, read_range};
use memchr::memmem;
use std::io;
use std::ops::Range;

/// Whether an armor line opens or closes a private-key block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArmorKind {
    Begin,
    End,
}

/// A private-key armor marker found in some bytes: where its `-----` starts, and its kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Armor {
    pub at: usize,
    pub kind: ArmorKind,
}

/// The longest label between `BEGIN ` and the closing dashes that is still taken for armor.
const MAX_LABEL: usize = 64;

/// Every private-key armor marker in `bytes`, in order.
pub fn armor_markers(bytes: &[u8]) -> Vec<Armor> {
    let mut found = Vec::new();
    for (needle, kind) in [
        (&b"-----BEGIN "[..], ArmorKind::Begin),
        (&b"-----END "[..], ArmorKind::End),
        (&b"---- BEGIN "[..], ArmorKind::Begin),
        (&b"---- END "[..], ArmorKind::End),
    ] {
        for at in memmem::find_iter(bytes, needle) {
            // "-----BEGIN " also contains "---- BEGIN "? No: the space follows the dashes
            // directly only in the SSH2 form, so the two needles never match the same place.
            let label_start = at + needle.len();
            let window = &bytes[label_start..bytes.len().min(label_start + MAX_LABEL + 5)];
            let Some(close) = memmem::find(window, b"----") else {
                continue;
            };
            let label = &window[..close];
            let plausible = label
                .iter()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || *b == b' ' || *b == b'-');
            if plausible && memmem::find(label, b"PRIVATE KEY").is_some() {
                found.push(Armor { at, kind });
            }
        }
    }
    found.sort_by_key(|a| a.at);
    found.dedup_by_key(|a| a.at);
    found
}

/// The byte ranges of `text` that lie in private-key blocks: from the start of each BEGIN line
/// to the end of its END line (or of the text, for a block that never ends). Search uses it to
/// drop matches on key lines.
pub fn private_key_spans(text: &[u8]) -> Vec<Range<usize>> {
    let mut spans = Vec::new();
    let mut open: Option<usize> = None;
    for armor in armor_markers(text) {
        match (armor.kind, open) {
            (ArmorKind::Begin, None) => open = Some(line_start(text, armor.at)),
            (ArmorKind::End, Some(start)) => {
                spans.push(start..line_end(text, armor.at));
                open = None;
            }
            // A stray END (its BEGIN is not in this text) closes a block we cannot see the
            // start of: treat everything before it as key.
            (ArmorKind::End, None) => spans.push(0..line_end(text, armor.at)),
            (ArmorKind::Begin, Some(_)) => {}
        }
    }
    if let Some(start) = open {
        spans.push(start..text.len());
    }
    merge(spans)
}

fn merge(mut spans: Vec<Range<usize>>) -> Vec<Range<usize>> {
    spans.sort_by_key(|s| s.start);
    let mut out: Vec<Range<usize>> = Vec::with_capacity(spans.len());
    for span in spans {
        match out.last_mut() {
            Some(last) if span.start <= last.end => last.end = last.end.max(span.end),
            _ => out.push(span),
        }
    }
    out
}

fn line_start(text: &[u8], at: usize) -> usize {
    memchr::memrchr(b'\n', &text[..at]).map_or(0, |i| i + 1)
}

fn line_end(text: &[u8], at: usize) -> usize {
    memchr::memchr(b'\n', &text[at..]).map_or(text.len(), |i| at + i + 1)
}

/// Why a window of a file may not be served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyRefusal {
    /// An armor line starts inside the window at this file offset.
    ArmorInWindow { at: u64, kind: ArmorKind },
    /// The last armor line before the window opens a private key that has not ended.
    InsideBlock { begin_at: u64 },
    /// No armor line within the look-back, which does not reach the file start and holds
    /// nothing but key-body lines: the window may be deep inside a long key.
    MayBeInside,
}

impl KeyRefusal {
    /// The reason in words, for the tool's error message.
    pub fn describe(&self) -> String {
        match self {
            KeyRefusal::ArmorInWindow { at, .. } => format!(
                "it contains a private-key armor line (at byte offset {at}); no tool returns private key material"
            ),
            KeyRefusal::InsideBlock { begin_at } => format!(
                "it lies inside a private key that begins at byte offset {begin_at}; no tool returns private key material"
            ),
            KeyRefusal::MayBeInside => {
                "it may be inside a private key: the text before it is nothing but key-body \
                 lines with no armor line in reach, so pen fails closed"
                    .to_string()
            }
        }
    }
}

/// Checks the window `[start, end)` of `src`, looking back `lookback` bytes before `start`.
pub fn check_window<S: ByteSource + ?Sized>(
    src: &S,
    start: u64,
    end: u64,
    lookback: usize,
) -> io::Result<Result<(), KeyRefusal>> {
    let lookback_start = start.saturating_sub(lookback as u64);
    let bytes = read_range(src, lookback_start, end)?;
    let split = (start - lookback_start) as usize;
    Ok(check_bytes(&bytes, split, lookback_start))
}

/// The decision of [`check_window`] over bytes already read: `bytes[..split]` is the look-back
/// and `bytes[split..]` the window; `base` is the file offset of `bytes[0]`.
pub fn check_bytes(bytes: &[u8], split: usize, base: u64) -> Result<(), KeyRefusal> {
    let markers = armor_markers(bytes);
    if let Some(armor) = markers.iter().find(|a| a.at >= split) {
        return Err(KeyRefusal::ArmorInWindow {
            at: base + armor.at as u64,
            kind: armor.kind,
        });
    }
    // Only armor lines that begin before the window count for the look-back.
    match markers.iter().rev().find(|a| a.at < split) {
        Some(Armor {
            kind: ArmorKind::Begin,
            at,
        }) => Err(KeyRefusal::InsideBlock {
            begin_at: base + *at as u64,
        }),
        Some(_) => Ok(()),
        None if base == 0 => Ok(()),
        None if only_key_body(&bytes[..split]) => Err(KeyRefusal::MayBeInside),
        None => Ok(()),
    }
}

/// The longest run of base64 on one line still taken for key body. PEM and PGP bodies use 64
/// characters a line, OpenSSH 70, MIME-style encoders 76; a longer run (a data URI, a minified
/// line) is not a key body.
const MAX_BODY_RUN: usize = 100;

/// Whether `bytes` holds at least one line and every non-empty line looks like key body:
/// base64 runs of key-line length, optionally indented, quoted, comma-terminated or separated by
/// escaped `\n` (a key inside a JSON string).
fn only_key_body(bytes: &[u8]) -> bool {
    let mut body_lines = 0usize;
    for line in bytes.split(|&b| b == b'\n') {
        let line = line.trim_ascii();
        if line.is_empty() {
            continue;
        }
        if !is_key_body(line) {
            return false;
        }
        body_lines += 1;
    }
    body_lines > 0
}

fn is_key_body(line: &[u8]) -> bool {
    let mut i = 0;
    let mut run = 0usize;
    let mut base64 = 0usize;
    while i < line.len() {
        match line[i] {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'+' | b'/' | b'=' => {
                run += 1;
                base64 += 1;
                if run > MAX_BODY_RUN {
                    return false;
                }
            }
            b'"' | b'\'' | b',' => {}
            b'\\' if matches!(line.get(i + 1), Some(b'n' | b'r')) => {
                run = 0;
                i += 1;
            }
            _ => return false,
        }
        i += 1;
    }
    base64 > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\nq83vEjKz==\n-----END RSA PRIVATE KEY-----\n";

    #[test]
    fn finds_private_key_armor_only() {
        let text =
            format!("cert:\n-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n{KEY}");
        let markers = armor_markers(text.as_bytes());
        assert_eq!(markers.len(), 2);
        assert_eq!(markers[0].kind, ArmorKind::Begin);
        assert_eq!(markers[1].kind, ArmorKind::End);
        for label in [
            "OPENSSH PRIVATE KEY",
            "PRIVATE KEY",
            "ENCRYPTED PRIVATE KEY",
            "EC PRIVATE KEY",
            "PGP PRIVATE KEY BLOCK",
        ] {
            let t = format!("x -----BEGIN {label}----- y");
            assert_eq!(armor_markers(t.as_bytes()).len(), 1, "{label}");
        }
        assert_eq!(
            armor_markers(b"---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----").len(),
            1
        );
        assert!(armor_markers(b"-----BEGIN PUBLIC KEY-----").is_empty());
    }

    #[test]
    fn spans_cover_whole_key_lines() {
        let text = format!("before\n  {KEY}after\n");
        let spans = private_key_spans(text.as_bytes());
        assert_eq!(spans.len(), 1);
        let span = &text[spans[0].clone()];
        assert!(span.starts_with("  -----BEGIN"));
        assert!(span.ends_with("-----END RSA PRIVATE KEY-----\n"));
        let unterminated = "a\n-----BEGIN PRIVATE KEY-----\nMIIE\n";
        assert_eq!(
            private_key_spans(unterminated.as_bytes()),
            vec![2..unterminated.len()]
        );
    }

    #[test]
    fn window_decisions() {
        let text = format!("head\n{KEY}tail line\n");
        let bytes = text.as_bytes();
        let begin = text.find("-----BEGIN").unwrap();
        let body = text.find("MIIE").unwrap();
        let after = text.find("tail").unwrap();
        // A window holding the BEGIN line.
        assert_eq!(
            check_bytes(bytes, 0, 0),
            Err(KeyRefusal::ArmorInWindow {
                at: begin as u64,
                kind: ArmorKind::Begin
            })
        );
        // A window of body lines only, BEGIN in the look-back.
        let window = &bytes[..text.find("-----END").unwrap()];
        assert_eq!(
            check_bytes(window, body, 0),
            Err(KeyRefusal::InsideBlock {
                begin_at: begin as u64
            })
        );
        // After the END line: clear.
        assert_eq!(check_bytes(bytes, after, 0), Ok(()));
        // Before the key: clear.
        assert_eq!(check_bytes(&bytes[..begin], 0, 0), Ok(()));
    }

    #[test]
    fn look_back_fails_closed_on_key_body_only() {
        let body = "MIIEowIBAAKCAQEAq83vEjKz4LxQ+7/abc=\n".repeat(10);
        let indented = "    MIIEowIBAAKCAQEAq83vEjKz\n".repeat(10);
        let json_escaped = "\"MIIEowIBAAKCAQEA\\nq83vEjKz\",\n".repeat(10);
        for lookback in [&body, &indented, &json_escaped] {
            let mut bytes = lookback.as_bytes().to_vec();
            let split = bytes.len();
            bytes.extend_from_slice(b"MIIEowIBAAKC\n");
            // Not at the start of the file: fail closed.
            assert_eq!(
                check_bytes(&bytes, split, 500),
                Err(KeyRefusal::MayBeInside)
            );
            // The look-back reaches the file start: nothing hides behind it.
            assert_eq!(check_bytes(&bytes, split, 0), Ok(()));
        }
        // One long run of base64 (a data URI, a minified line) is not a key body.
        let mut long = "x".repeat(5_000).into_bytes();
        let split = long.len();
        long.extend_from_slice(b"xxxx");
        assert_eq!(check_bytes(&long, split, 500), Ok(()));
        let log = "2026-01-01 INFO request served in 3 ms\n".repeat(10);
        let mut bytes = log.into_bytes();
        let split = bytes.len();
        bytes.extend_from_slice(b"more log\n");
        assert_eq!(check_bytes(&bytes, split, 500), Ok(()));
    }
}
