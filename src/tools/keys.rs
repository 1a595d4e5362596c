//! Key-material refusal (SPEC §2): no tool returns the body of a private key.
//!
//! Private keys are found by markers, anywhere on a line (so keys embedded in YAML, JSON strings
//! or code are found too):
//! - PEM armor `-----BEGIN … PRIVATE KEY-----` (RSA, EC, DSA, PKCS#8, encrypted, OpenSSH), PGP
//!   `-----BEGIN PGP PRIVATE KEY BLOCK-----` and SSH2 `---- BEGIN SSH2 ENCRYPTED PRIVATE KEY
//!   ----`, also URL-encoded (`%20`, `+`, `%2D`) and with JSON `\u002d` / `\u0020` escapes;
//! - PuTTY `.ppk` files (`PuTTY-User-Key-File-` or `Private-Lines:` to `Private-MAC:`);
//! - .NET XML `<RSAKeyValue>` and `<DSAKeyValue>` elements, public or private;
//! - base64-wrapped PEM (a kubeconfig `client-key-data`, a Secret's `tls.key`): the base64 of
//!   `PRIVATE KEY` in each of its three alignments marks its line and the base64 lines after it;
//! - JWK private members (`"d"`, `"p"`, `"q"`, `"dp"`, `"dq"`, `"qi"`, `"k"`) whose value is a
//!   key-shaped base64url string: they mark their line.
//!
//! A block runs from a BEGIN marker to its END marker; an END whose BEGIN is out of sight (or
//! missing) makes everything before it key. A paged read cannot see a BEGIN line far before its
//! window, so it looks back a fixed distance and fails closed when that look-back is nothing but
//! key-body lines; and it looks ahead when its window ends in key-body lines, so that a body
//! whose BEGIN line is missing is refused by the END line that follows it.
//!
//! Search decides per file with [`holds_key_material`]: one multi-pattern pass over bytes it has
//! read anyway, independent of the query, so no search result depends on a key's content.

use super::source::{ByteSource, read_range};
use aho_corasick::AhoCorasick;
use std::io;
use std::ops::Range;
use std::sync::LazyLock;

/// Whether a marker opens a private-key block, closes one, or marks its own span (a line of
/// base64-wrapped PEM and the base64 lines after it, a JWK private member's line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArmorKind {
    Begin,
    End,
    Line,
}

/// A private-key marker found in some bytes: where it starts, its kind, and the bytes it marks
/// by itself (its line; for [`ArmorKind::Line`], all the lines it covers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Armor {
    pub at: usize,
    pub kind: ArmorKind,
    pub span: Range<usize>,
}

/// The longest label between `BEGIN ` and the closing dashes that is still taken for armor.
const MAX_LABEL: usize = 64;

/// The bytes either side of a `PRIVATE KEY` anchor decoded to look for its armor: a label and
/// its dashes, every byte escaped at its widest (`\u002d`, six bytes).
const ARMOR_REACH: usize = 6 * (MAX_LABEL + 16);

/// The shortest JWK member value taken for key material: a 128-bit symmetric key is 22
/// base64url characters, every private EC or RSA member is longer.
const MIN_JWK_VALUE: usize = 16;

/// What an anchor found by the first pass stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Anchor {
    /// `PRIVATE KEY`, its space plain or escaped: armor may surround it.
    Armor,
    Begin,
    End,
    /// The base64 of `PRIVATE KEY`.
    Base64,
    /// `"kty`: the file holds a JWK, so search looks for its private members.
    Kty,
}

const ANCHORS: &[(&str, Anchor)] = &[
    ("PRIVATE KEY", Anchor::Armor),
    ("PRIVATE%20KEY", Anchor::Armor),
    ("PRIVATE+KEY", Anchor::Armor),
    ("PRIVATE\\u0020KEY", Anchor::Armor),
    ("PuTTY-User-Key-File-", Anchor::Begin),
    ("Private-Lines:", Anchor::Begin),
    ("Private-MAC:", Anchor::End),
    ("Private-Hash:", Anchor::End),
    ("<RSAKeyValue", Anchor::Begin),
    ("<DSAKeyValue", Anchor::Begin),
    ("</RSAKeyValue>", Anchor::End),
    ("</DSAKeyValue>", Anchor::End),
    // `PRIVATE KEY` base64-encoded at each of the three byte alignments: only the characters
    // that depend on those eleven bytes alone.
    ("UFJJVkFURSBLRV", Anchor::Base64),
    ("BSSVZBVEUgS0VZ", Anchor::Base64),
    ("QUklWQVRFIEtFW", Anchor::Base64),
    ("\"kty", Anchor::Kty),
];

static ANCHOR_FINDER: LazyLock<AhoCorasick> = LazyLock::new(|| {
    leftmost(ANCHORS.iter().map(|(needle, _)| *needle))
        .expect("the anchor patterns are few and short")
});

/// A matcher for `patterns` with leftmost-first semantics: only those get the SIMD "packed"
/// prefilter (Teddy), which is what keeps the per-file check of search near memchr speed. No
/// pattern is a prefix of another, so no match is lost to the semantics.
fn leftmost<I, P>(patterns: I) -> Result<AhoCorasick, aho_corasick::BuildError>
where
    I: IntoIterator<Item = P>,
    P: AsRef<[u8]>,
{
    AhoCorasick::builder()
        .match_kind(aho_corasick::MatchKind::LeftmostFirst)
        .build(patterns)
}

/// The JWK members that hold private key material, as JSON names, plain and inside a JSON
/// string (`\"d\"`).
static JWK_FINDER: LazyLock<AhoCorasick> = LazyLock::new(|| {
    let names = ["d", "p", "q", "dp", "dq", "qi", "k"];
    let patterns: Vec<String> = names
        .iter()
        .flat_map(|n| [format!("\"{n}\""), format!("\\\"{n}\\\"")])
        .collect();
    leftmost(patterns).expect("the JWK member patterns are few and short")
});

/// Every private-key marker in `bytes`, in order. JWK members count whatever else the bytes
/// hold: a window of a file may not reach the `"kty"` member of its key.
pub fn armor_markers(bytes: &[u8]) -> Vec<Armor> {
    markers(bytes, false)
}

/// Whether `bytes` (a whole file) hold any private-key marker. JWK members count only in a
/// file that holds a `"kty` member too, so that search does not skip every JSON file with a
/// `"d"` in it.
pub fn holds_key_material(bytes: &[u8]) -> bool {
    !markers(bytes, true).is_empty()
}

fn markers(bytes: &[u8], jwk_needs_kty: bool) -> Vec<Armor> {
    let mut found = Vec::new();
    let mut kty = false;
    // The regions around `PRIVATE KEY` anchors, decoded once each after the pass: anchors close
    // together share one, so that a line full of them costs a pass, not one per anchor.
    let mut regions: Vec<Range<usize>> = Vec::new();
    for hit in ANCHOR_FINDER.find_iter(bytes) {
        let at = hit.start();
        match ANCHORS[hit.pattern().as_usize()].1 {
            Anchor::Armor => {
                let from = at.saturating_sub(ARMOR_REACH).max(line_start(bytes, at));
                let to = (hit.end() + ARMOR_REACH).min(line_end(bytes, at));
                match regions.last_mut() {
                    Some(last) if from <= last.end => last.end = last.end.max(to),
                    _ => regions.push(from..to),
                }
            }
            Anchor::Begin => found.push(Armor {
                at,
                kind: ArmorKind::Begin,
                span: line_of(bytes, at),
            }),
            Anchor::End => found.push(Armor {
                at,
                kind: ArmorKind::End,
                span: line_of(bytes, at),
            }),
            Anchor::Base64 => {
                // Wrapped base64 continues on the lines after the anchor's.
                let mut end = line_end(bytes, at);
                while end < bytes.len() {
                    let next = line_end(bytes, end);
                    if !is_key_body(bytes[end..next].trim_ascii()) {
                        break;
                    }
                    end = next;
                }
                found.push(Armor {
                    at,
                    kind: ArmorKind::Line,
                    span: line_start(bytes, at)..end,
                });
            }
            Anchor::Kty => kty = true,
        }
    }
    for region in regions {
        armor_in(bytes, region, &mut found);
    }
    if kty || !jwk_needs_kty {
        jwk_members(bytes, &mut found);
    }
    found.sort_by_key(|a| a.at);
    found.dedup_by_key(|a| a.at);
    found
}

/// The PEM, PGP and SSH2 armor lines in `bytes[region]`, found in its decoded form: `%2D`,
/// `%2d`, `\u002d` and `\u002D` read as `-`; `%20`, `+` and `\u0020` as a space.
fn armor_in(bytes: &[u8], region: Range<usize>, found: &mut Vec<Armor>) {
    let (decoded, origin) = decode_escapes(&bytes[region.clone()]);
    for (needle, kind) in [
        (&b"-----BEGIN "[..], ArmorKind::Begin),
        (&b"-----END "[..], ArmorKind::End),
        (&b"---- BEGIN "[..], ArmorKind::Begin),
        (&b"---- END "[..], ArmorKind::End),
    ] {
        for at in memchr::memmem::find_iter(&decoded, needle) {
            // The two dash forms never match at the same place: the space follows the dashes
            // directly only in the SSH2 form.
            let label_start = at + needle.len();
            let window = &decoded[label_start..decoded.len().min(label_start + MAX_LABEL + 5)];
            let Some(close) = memchr::memmem::find(window, b"----") else {
                continue;
            };
            let label = &window[..close];
            let plausible = label
                .iter()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || *b == b' ' || *b == b'-');
            if plausible && memchr::memmem::find(label, b"PRIVATE KEY").is_some() {
                let at = region.start + origin[at];
                found.push(Armor {
                    at,
                    kind,
                    span: line_of(bytes, at),
                });
            }
        }
    }
}

/// `bytes` with the escapes armor is written with decoded, and the offset in `bytes` of each
/// decoded byte.
fn decode_escapes(bytes: &[u8]) -> (Vec<u8>, Vec<usize>) {
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut origin = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let rest = &bytes[i..];
        let (byte, len) = if rest.starts_with(b"%2D") || rest.starts_with(b"%2d") {
            (b'-', 3)
        } else if rest.starts_with(b"%20") {
            (b' ', 3)
        } else if rest.starts_with(b"\\u002d") || rest.starts_with(b"\\u002D") {
            (b'-', 6)
        } else if rest.starts_with(b"\\u0020") {
            (b' ', 6)
        } else if rest[0] == b'+' {
            (b' ', 1)
        } else {
            (rest[0], 1)
        };
        decoded.push(byte);
        origin.push(i);
        i += len;
    }
    (decoded, origin)
}

/// The JWK private members in `bytes` whose value is a key-shaped base64url string (or runs
/// into the end of `bytes`, which may cut a longer one): each marks its line, through the line
/// its value ends on.
fn jwk_members(bytes: &[u8], found: &mut Vec<Armor>) {
    for hit in JWK_FINDER.find_iter(bytes) {
        let mut i = hit.end();
        let skip_space = |i: &mut usize| {
            while bytes.get(*i).is_some_and(|b| b.is_ascii_whitespace()) {
                *i += 1;
            }
        };
        skip_space(&mut i);
        match bytes.get(i) {
            Some(b':') => i += 1,
            Some(_) => continue,
            None => {}
        }
        skip_space(&mut i);
        if bytes.get(i) == Some(&b'\\') {
            i += 1;
        }
        match bytes.get(i) {
            Some(b'"') => i += 1,
            Some(_) => continue,
            None => {}
        }
        let value = bytes[i.min(bytes.len())..]
            .iter()
            .take_while(|b| {
                b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'+' | b'/' | b'=')
            })
            .count();
        let end = i + value;
        if value >= MIN_JWK_VALUE || end >= bytes.len() {
            found.push(Armor {
                at: hit.start(),
                kind: ArmorKind::Line,
                span: line_start(bytes, hit.start())..line_end(bytes, end.min(bytes.len())),
            });
        }
    }
}

/// The byte ranges of `text` that lie in private-key blocks, whole lines each: from the start of
/// each BEGIN line to the end of its END line (or of the text, for a block that never ends), and
/// the span of each line marker.
pub fn private_key_spans(text: &[u8]) -> Vec<Range<usize>> {
    spans_of(text, &armor_markers(text))
}

fn spans_of(text: &[u8], markers: &[Armor]) -> Vec<Range<usize>> {
    let mut spans = Vec::new();
    let mut open: Option<usize> = None;
    for armor in markers {
        match (armor.kind, open) {
            (ArmorKind::Begin, None) => open = Some(armor.span.start),
            (ArmorKind::End, Some(start)) => {
                spans.push(start..armor.span.end);
                open = None;
            }
            // A stray END (its BEGIN is not in this text, or missing) closes a block we cannot
            // see the start of: treat everything before it as key.
            (ArmorKind::End, None) => spans.push(0..armor.span.end),
            (ArmorKind::Begin, Some(_)) => {}
            (ArmorKind::Line, _) => spans.push(armor.span.clone()),
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

fn line_of(text: &[u8], at: usize) -> Range<usize> {
    line_start(text, at)..line_end(text, at)
}

/// Why a window of a file may not be served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyRefusal {
    /// A key marker starts inside the window at this file offset.
    ArmorInWindow { at: u64, kind: ArmorKind },
    /// The window lies (partly) inside private-key material that begins at this file offset,
    /// before the window.
    InsideBlock { begin_at: u64 },
    /// No marker within the look-back, which does not reach the file start and holds nothing
    /// but key-body lines: the window may be deep inside a long key.
    MayBeInside,
    /// The window ends in key-body lines that run on to a private-key END line at this file
    /// offset: a key whose BEGIN line is missing.
    BodyBeforeEnd { end_at: u64 },
    /// A head cut from a text sent whole or not at all ([`check_head`]) ends in key-body lines
    /// that run on past the look-ahead: pen cannot see whether an END line closes them, so it
    /// fails closed.
    BodyPastCut,
}

impl KeyRefusal {
    /// The reason in words, for the tool's error message.
    pub fn describe(&self) -> String {
        match self {
            KeyRefusal::ArmorInWindow { at, .. } => format!(
                "it contains a private-key marker (at byte offset {at}); no tool returns private key material"
            ),
            KeyRefusal::InsideBlock { begin_at } => format!(
                "it lies inside a private key that begins at byte offset {begin_at}; no tool returns private key material"
            ),
            KeyRefusal::MayBeInside => {
                "it may be inside a private key: the text before it is nothing but key-body \
                 lines with no armor line in reach, so pen fails closed"
                    .to_string()
            }
            KeyRefusal::BodyBeforeEnd { end_at } => format!(
                "it ends in key-body lines that run on to a private-key END line at byte offset \
                 {end_at}; no tool returns private key material"
            ),
            KeyRefusal::BodyPastCut => "it is cut inside key-body lines that run on past what \
                 pen looks ahead, so it may be inside a private key; pen fails closed"
                .to_string(),
        }
    }
}

/// Checks the window `[start, end)` of `src`, looking back `reach` bytes before `start` and,
/// when the window ends in key-body lines, up to `reach` bytes after `end`.
pub fn check_window<S: ByteSource + ?Sized>(
    src: &S,
    start: u64,
    end: u64,
    reach: usize,
) -> io::Result<Result<(), KeyRefusal>> {
    let lookback_start = start.saturating_sub(reach as u64);
    let bytes = read_range(src, lookback_start, end)?;
    let split = (start - lookback_start) as usize;
    let verdict = check_bytes(&bytes, split, lookback_start);
    if verdict.is_err() || end >= src.len() || !ends_in_key_body(&bytes[split..]) {
        return Ok(verdict);
    }
    let ahead = read_range(src, end, end.saturating_add(reach as u64).min(src.len()))?;
    Ok(match end_after_body(&ahead) {
        Some(at) => Err(KeyRefusal::BodyBeforeEnd {
            end_at: end + at as u64,
        }),
        None => Ok(()),
    })
}

/// Judges the window `[start, end)` of `src` that is sent whole or not at all, never paged on
/// (an instruction file cut at its budget, the lines of the editor's focus): [`check_window`],
/// and, when the window is cut inside key-body lines, refused also when those lines run on
/// past the `reach` of the look-ahead, since nothing after the cut is ever shown to prove
/// they were no key.
pub fn check_head<S: ByteSource + ?Sized>(
    src: &S,
    start: u64,
    end: u64,
    reach: usize,
) -> io::Result<Result<(), KeyRefusal>> {
    let verdict = check_window(src, start, end, reach)?;
    if verdict.is_err() || end >= src.len() {
        return Ok(verdict);
    }
    let window = read_range(src, end.saturating_sub(reach as u64).max(start), end)?;
    if !ends_in_key_body(&window) {
        return Ok(verdict);
    }
    let until = end.saturating_add(reach as u64);
    let ahead = read_range(src, end, until)?;
    Ok(if until < src.len() && only_key_body(&ahead) {
        Err(KeyRefusal::BodyPastCut)
    } else {
        verdict
    })
}

/// Judges text whose place in its file is unknown (a client's text pen cannot find in the
/// file it names): refused when it holds a marker, and, failing closed at each edge beyond
/// which nothing can be seen, when it begins in key-body lines (unless it starts its file) or
/// ends in them.
pub fn check_detached(text: &[u8], starts_its_file: bool) -> Result<(), KeyRefusal> {
    check_bytes(text, 0, 0)?;
    let begins_in_body = text
        .split(|&b| b == b'\n')
        .map(<[u8]>::trim_ascii)
        .find(|line| !line.is_empty())
        .is_some_and(is_key_body);
    if (begins_in_body && !starts_its_file) || ends_in_key_body(text) {
        return Err(KeyRefusal::MayBeInside);
    }
    Ok(())
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
    // Markers before the window: a block still open, or a marked line that reaches into it.
    if let Some(span) = spans_of(bytes, &markers)
        .into_iter()
        .find(|span| span.end > split)
    {
        return Err(KeyRefusal::InsideBlock {
            begin_at: base + span.start as u64,
        });
    }
    if markers.is_empty() && base != 0 && only_key_body(&bytes[..split]) {
        return Err(KeyRefusal::MayBeInside);
    }
    Ok(())
}

/// Whether the last non-empty line of `window` looks like key body.
fn ends_in_key_body(window: &[u8]) -> bool {
    window
        .split(|&b| b == b'\n')
        .map(<[u8]>::trim_ascii)
        .rfind(|line| !line.is_empty())
        .is_some_and(is_key_body)
}

/// Where in `ahead` (the bytes after a window that ended in key body) an END marker ends the
/// run of key-body lines that continues the window, if one does.
fn end_after_body(ahead: &[u8]) -> Option<usize> {
    let mut start = 0;
    while start < ahead.len() {
        let end = line_end(ahead, start);
        let line = &ahead[start..end];
        let trimmed = line.trim_ascii();
        if !trimmed.is_empty() && !is_key_body(trimmed) {
            return armor_markers(line)
                .into_iter()
                .find(|a| a.kind == ArmorKind::End)
                .map(|a| start + a.at);
        }
        start = end;
    }
    None
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

    /// One example of each form without plain armor, and where its secret lies.
    const FORMS: &[(&str, &str, &str)] = &[
        (
            "ppk",
            "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: k\nPublic-Lines: 2\n\
             AAAAC3NzaC1lZDI1NTE5AAAAIOmT\nZ3Vlc3M=\nPrivate-Lines: 1\nAAAAIFsecretSECRETsecret0123\n\
             Private-MAC: 6f2c\n",
            "AAAAIFsecretSECRETsecret0123",
        ),
        (
            "kubeconfig",
            "users:\n- name: u\n  user:\n    client-key-data: LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQpNSUlFsecretSECRET\n",
            "LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQpNSUlFsecretSECRET",
        ),
        (
            "jwk",
            "{\n  \"crv\": \"P-256\",\n  \"d\": \"secretSECRETsecret_-0123456789\",\n  \"kty\": \"EC\"\n}\n",
            "secretSECRETsecret_-0123456789",
        ),
        (
            "jwk in a JSON string",
            "{\"jwk\": \"{\\\"kty\\\":\\\"oct\\\",\\\"k\\\":\\\"secretSECRETsecret_-01\\\"}\"}\n",
            "secretSECRETsecret_-01",
        ),
        (
            "xml",
            "<RSAKeyValue><Modulus>AQAB</Modulus><D>secretSECRETsecret0123==</D></RSAKeyValue>\n",
            "secretSECRETsecret0123==",
        ),
        (
            "url-encoded",
            "key=-----BEGIN%20RSA%20PRIVATE%20KEY-----%0AsecretSECRETsecret%2B0123%0A-----END%20RSA%20PRIVATE%20KEY-----\n",
            "secretSECRETsecret%2B0123",
        ),
        (
            "url-encoded dashes",
            "key=%2D%2D%2D%2D%2DBEGIN+PRIVATE+KEY%2d%2d%2d%2d%2d%0AsecretSECRETsecret0123\n",
            "secretSECRETsecret0123",
        ),
        (
            "json escapes",
            "{\"k\": \"\\u002d\\u002d\\u002d\\u002d\\u002dBEGIN PRIVATE KEY\\u002d\\u002d\\u002d\\u002d\\u002d\\nsecretSECRETsecret0123\"}\n",
            "secretSECRETsecret0123",
        ),
        (
            "missing BEGIN",
            "secretSECRETsecret0123\nmoreSECRETsecret0123==\n-----END PRIVATE KEY-----\n",
            "secretSECRETsecret0123",
        ),
    ];

    #[test]
    fn every_form_marks_its_secret() {
        for (name, text, secret) in FORMS {
            let bytes = text.as_bytes();
            assert!(holds_key_material(bytes), "{name}");
            let at = text.find(secret).unwrap();
            let spans = private_key_spans(bytes);
            assert!(
                spans
                    .iter()
                    .any(|s| s.start <= at && at + secret.len() <= s.end),
                "{name}: {spans:?}"
            );
            // A window on the secret's line is refused, with the look-back or without.
            let line = text[..at].rfind('\n').map_or(0, |i| i + 1);
            assert!(check_bytes(bytes, line, 0).is_err(), "{name}");
        }
    }

    #[test]
    fn base64_wrapped_keys_are_found_in_every_alignment() {
        // The base64 of `PRIVATE KEY` after 0, 1 and 2 bytes of a three-byte group.
        for encoded in [
            "LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0t", // -----BEGIN PRIVATE KEY-----
            "LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQ==", // -----BEGIN RSA PRIVATE KEY-----
            "LS0tLS1CRUdJTiBFQyBQUklWQVRFIEtFWS0tLS0t", // -----BEGIN EC PRIVATE KEY-----
        ] {
            assert!(holds_key_material(encoded.as_bytes()), "{encoded}");
        }
        // Wrapped at 76: the anchor's line and the base64 lines after it.
        let wrapped = "tls.key: |\n  LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0tCk1JSUV2Z0lCQURBTkJna3Foa2lHOXcwQkFR\n  RUZBQVNDQktnd2dnU2tBZ0VBQW9JQkFRQzdzecret\nnext: 1\n";
        let spans = private_key_spans(wrapped.as_bytes());
        let secret = wrapped.find("RUZBQVND").unwrap();
        assert_eq!(spans.len(), 1);
        assert!(spans[0].contains(&secret), "{spans:?}");
        assert!(!spans[0].contains(&wrapped.find("next").unwrap()));
    }

    #[test]
    fn what_is_not_a_private_key_is_not_refused() {
        for text in [
            // A kubeconfig with certificates only.
            "certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUM=\n",
            "-----BEGIN PUBLIC KEY-----\nMIIBIjAN\n-----END PUBLIC KEY-----\n",
            // JSON with short or non-key members, and a JWK without private members.
            "{\"d\": 5, \"p\": \"a paragraph\", \"kty\": \"EC\", \"x\": \"AAAAAAAAAAAAAAAAAAAA\"}\n",
            "the words private key in prose\n",
        ] {
            assert!(!holds_key_material(text.as_bytes()), "{text}");
            assert!(private_key_spans(text.as_bytes()).is_empty(), "{text}");
        }
        // Search needs a `"kty` before it takes a key-shaped `"d"` for a JWK; a read window,
        // which may not reach the `"kty"`, does not.
        let d = "{\"d\": \"AAAAAAAAAAAAAAAAAAAAAAAA\"}\n";
        assert!(!holds_key_material(d.as_bytes()));
        assert!(check_bytes(d.as_bytes(), 0, 0).is_err());
    }

    /// Issue 26, item 13: a head cut inside a key body is refused when an END line follows
    /// within the look-ahead, and also (failing closed) when the body runs on past it; a head
    /// cut inside base64 that ends within reach, or in ordinary text, is served.
    #[test]
    fn a_head_cut_inside_a_key_body_fails_closed() {
        let line = "MIIEowIBAAKCAQEAq83vEjKz4LxQ+7/abcdefghijklmnopqrstuvwxyz0123456\n";
        let reach = 4 * 1024;
        let cut = 1_000;
        let with_end = format!("notes\n{}-----END RSA PRIVATE KEY-----\n", line.repeat(40));
        let src: &[u8] = with_end.as_bytes();
        assert!(matches!(
            check_head(src, 0, cut, reach).unwrap(),
            Err(KeyRefusal::BodyBeforeEnd { .. })
        ));
        let endless = format!("notes\n{}", line.repeat(200));
        let src: &[u8] = endless.as_bytes();
        assert_eq!(check_window(src, 0, cut, reach).unwrap(), Ok(()), "a page");
        assert_eq!(
            check_head(src, 0, cut, reach).unwrap(),
            Err(KeyRefusal::BodyPastCut),
            "a head"
        );
        let ends_in_text = format!("notes\n{}the end of the data\n", line.repeat(40));
        let src: &[u8] = ends_in_text.as_bytes();
        assert_eq!(check_head(src, 0, cut, reach).unwrap(), Ok(()));
        let prose = "An ordinary line of instructions for the project.\n".repeat(200);
        let src: &[u8] = prose.as_bytes();
        assert_eq!(check_head(src, 0, cut, reach).unwrap(), Ok(()));
        // Not cut: nothing lies past the head.
        let src: &[u8] = endless.as_bytes();
        assert_eq!(
            check_head(src, 0, endless.len() as u64, reach).unwrap(),
            Ok(())
        );
    }

    #[test]
    fn detached_text_fails_closed_at_its_edges() {
        let body = "MIIEowIBAAKCAQEAq83vEjKz4LxQ+7/abcdefghijklmnopqrstuvwxyz0123456\n";
        let inside = body.repeat(3);
        assert_eq!(
            check_detached(inside.as_bytes(), false),
            Err(KeyRefusal::MayBeInside)
        );
        assert_eq!(
            check_detached(inside.as_bytes(), true),
            Err(KeyRefusal::MayBeInside),
            "it ends in key body"
        );
        let code = "fn main() {\n    let x = 1;\n}\n";
        assert_eq!(check_detached(code.as_bytes(), false), Ok(()));
        assert!(check_detached(KEY.as_bytes(), true).is_err());
        let begins = format!("{body}the end of it.\n");
        assert_eq!(check_detached(begins.as_bytes(), true), Ok(()));
        assert!(check_detached(begins.as_bytes(), false).is_err());
    }

    #[test]
    fn a_body_without_its_begin_line_is_refused_by_the_end_line_after_it() {
        let body = "MIIEowIBAAKCAQEAq83vEjKz4LxQ+7/abcdefghijklmnopqrstuvwxyz0123456\n".repeat(40);
        let text = format!("{body}-----END RSA PRIVATE KEY-----\nafter\n");
        let src: &[u8] = text.as_bytes();
        // A first page of body lines only: the END line is past it.
        let verdict = check_window(src, 0, 200, 128 * 1024).unwrap();
        assert!(
            matches!(verdict, Err(KeyRefusal::BodyBeforeEnd { .. })),
            "{verdict:?}"
        );
        // The same lines followed by ordinary text are served.
        let plain = format!("{body}after\n");
        let src: &[u8] = plain.as_bytes();
        assert_eq!(check_window(src, 0, 200, 128 * 1024).unwrap(), Ok(()));
        // The page after the END line is served.
        let after = text.find("after").unwrap() as u64;
        let src: &[u8] = text.as_bytes();
        assert_eq!(
            check_window(src, after, text.len() as u64, 128 * 1024).unwrap(),
            Ok(())
        );
    }
}
