//! The files open in the editor: an exact, byte-faithful rope per document, kept in step with
//! the editor's `didOpen`/`didChange`/`didSave`/`didClose`, and the conversions between LSP
//! positions (in the negotiated encoding) and byte offsets.
//!
//! This module is plain Rust: the server converts LSP types and file URIs to the types here.
//! A document holds exactly the text the editor sent (CRLF, lone CR, a BOM, no final newline,
//! astral-plane characters), so the tools read an unsaved buffer byte for byte as they would
//! read the file.
//!
//! Lines end at `\n`, `\r\n` or `\r`, as LSP defines them; ropey is built with `cr_lines`
//! and without `unicode_lines` so that it agrees (U+2028, NEL and form feed are ordinary
//! characters to an LSP client).

use crate::bytes::ByteSource;
use ropey::Rope;
use std::collections::HashMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// The unit of `Position::character`, as negotiated by LSP 3.17's `positionEncoding`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PositionEncoding {
    /// `utf-8`: bytes from the start of the line.
    Utf8,
    /// `utf-16`: UTF-16 code units from the start of the line. The LSP default, and the only
    /// encoding every client supports.
    #[default]
    Utf16,
    /// `utf-32`: Unicode scalar values (Rust `char`s) from the start of the line.
    Utf32,
}

/// A position between two characters: a 0-based line and a 0-based offset within it, counted
/// in some [`PositionEncoding`].
///
/// Positions order by line, then character, which is also document order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Position {
    pub line: u32,
    pub character: u32,
}

impl Position {
    pub fn new(line: u32, character: u32) -> Position {
        Position { line, character }
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.character)
    }
}

/// A span between two positions; `end` is exclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Range {
    pub start: Position,
    pub end: Position,
}

impl Range {
    pub fn new(start: Position, end: Position) -> Range {
        Range { start, end }
    }
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.start, self.end)
    }
}

/// One content change of a `didChange` notification (LSP `TextDocumentContentChangeEvent`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The span to replace, in the text as left by the previous change of the same batch;
    /// `None` replaces the whole document.
    pub range: Option<Range>,
    pub text: String,
}

/// What is wrong with a notification about an open document.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DocumentError {
    #[error("{} is not open in the editor", path.display())]
    NotOpen { path: PathBuf },
    #[error(
        "change to {} has version {got}, but the document is already at version {current}; \
         versions must increase",
        path.display()
    )]
    OutOfOrder {
        path: PathBuf,
        current: i32,
        got: i32,
    },
    #[error(
        "change {index} to {}: range {range} ends before it starts",
        path.display()
    )]
    ReversedRange {
        path: PathBuf,
        /// The index of the change within its batch.
        index: usize,
        range: Range,
    },
}

/// How a `didSave` carrying the saved text compared with the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaveCheck {
    /// The client sent no text (`includeText` is off), so there was nothing to compare.
    Unchecked,
    /// The saved text is the buffer, byte for byte.
    Matched,
    /// The saved text differed, so a change was missed or misapplied; the buffer now holds the
    /// saved text. The server should log this: it means the two sides had drifted apart.
    Replaced,
}

/// An immutable view of one open document at one version. Cloning is O(1) (ropey shares its
/// nodes), so readers take a snapshot and never hold the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The version the editor gave the document in its last `didOpen` or `didChange`.
    pub version: i32,
    /// The exact text of the document.
    pub rope: Rope,
}

impl Snapshot {
    /// A snapshot of `text` at `version`.
    pub fn new(version: i32, text: &str) -> Snapshot {
        Snapshot {
            version,
            rope: Rope::from_str(text),
        }
    }

    /// The whole text. O(n): for small documents and tests; paging code reads through
    /// [`ByteSource`] instead.
    pub fn text(&self) -> String {
        self.rope.to_string()
    }

    pub fn len_bytes(&self) -> usize {
        self.rope.len_bytes()
    }

    /// The byte offset of `position`, read in `encoding`, with LSP's clamping:
    ///
    /// - a `line` past the last line means the end of the document;
    /// - a `character` past the end of the line means the end of the line's content, before
    ///   its terminator (`\r\n` is one terminator and is never split);
    /// - a `character` inside a character (the second unit of a surrogate pair in UTF-16, a
    ///   continuation byte in UTF-8) means the start of that character. LSP leaves this case
    ///   undefined; snapping back keeps an insertion from splitting a character (the text must
    ///   stay valid UTF-8) and never reaches past the unit the client named.
    ///
    /// O(log n) in the document's size, whatever the line's length.
    pub fn byte_offset(&self, position: Position, encoding: PositionEncoding) -> usize {
        let rope = &self.rope;
        let line = position.line as usize;
        if line >= rope.len_lines() {
            return rope.len_bytes();
        }
        let start = rope.line_to_byte(line);
        let content_end = line_content_end(rope, line);
        let character = position.character as usize;
        match encoding {
            PositionEncoding::Utf8 => {
                let byte = start + character.min(content_end - start);
                rope.char_to_byte(rope.byte_to_char(byte))
            }
            PositionEncoding::Utf16 => {
                let first_unit = rope.char_to_utf16_cu(rope.byte_to_char(start));
                let end_unit = rope.char_to_utf16_cu(rope.byte_to_char(content_end));
                let unit = first_unit + character.min(end_unit - first_unit);
                rope.char_to_byte(rope.utf16_cu_to_char(unit))
            }
            PositionEncoding::Utf32 => {
                let first_char = rope.byte_to_char(start);
                let end_char = rope.byte_to_char(content_end);
                rope.char_to_byte(first_char + character.min(end_char - first_char))
            }
        }
    }

    /// The position of `byte_offset` in `encoding`: the inverse of [`Snapshot::byte_offset`]
    /// for every offset on a character boundary outside a `\r\n`.
    ///
    /// An LSP position cannot point between the `\r` and the `\n` of a line break, so an offset
    /// there maps to the position of the `\r` (the end of the line's content), as a client
    /// would clamp it. An offset inside a character snaps back to that character's start, and
    /// one past the end means the end of the document. O(log n).
    ///
    /// A count beyond `u32::MAX` (a line of more than 4 GiB) saturates, since LSP positions
    /// are 32-bit.
    pub fn position_of(&self, byte_offset: usize, encoding: PositionEncoding) -> Position {
        let rope = &self.rope;
        let mut byte = rope.char_to_byte(rope.byte_to_char(byte_offset.min(rope.len_bytes())));
        if byte > 0
            && byte < rope.len_bytes()
            && rope.byte(byte) == b'\n'
            && rope.byte(byte - 1) == b'\r'
        {
            byte -= 1;
        }
        let line = rope.byte_to_line(byte);
        let start = rope.line_to_byte(line);
        let character = match encoding {
            PositionEncoding::Utf8 => byte - start,
            PositionEncoding::Utf16 => {
                rope.char_to_utf16_cu(rope.byte_to_char(byte))
                    - rope.char_to_utf16_cu(rope.byte_to_char(start))
            }
            PositionEncoding::Utf32 => rope.byte_to_char(byte) - rope.byte_to_char(start),
        };
        Position {
            line: saturating_u32(line),
            character: saturating_u32(character),
        }
    }

    /// The range of `bytes` in `encoding`, for `workspace/applyEdit`: both ends converted by
    /// [`Snapshot::position_of`], so the result is exact for ends on character boundaries
    /// outside a `\r\n`.
    pub fn range_of(&self, bytes: std::ops::Range<usize>, encoding: PositionEncoding) -> Range {
        Range {
            start: self.position_of(bytes.start, encoding),
            end: self.position_of(bytes.end, encoding),
        }
    }
}

/// The byte offset where the content of `line` ends: before its `\n`, `\r\n` or `\r`, or at the
/// end of the document on the last line. `line` must be a line of `rope`.
fn line_content_end(rope: &Rope, line: usize) -> usize {
    let start = rope.line_to_byte(line);
    // `line_to_byte` accepts one past the last line and answers the document's length.
    let mut end = rope.line_to_byte(line + 1);
    if end > start && rope.byte(end - 1) == b'\n' {
        end -= 1;
    }
    if end > start && rope.byte(end - 1) == b'\r' {
        end -= 1;
    }
    end
}

fn saturating_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Reads walk the rope's chunks from the one holding `offset`, so a read costs
/// O(log n + buf.len()) and paging an open buffer never copies the whole document.
impl ByteSource for Snapshot {
    fn len(&self) -> u64 {
        self.rope.len_bytes() as u64
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let len = self.rope.len_bytes();
        let start = usize::try_from(offset).map_or(len, |offset| offset.min(len));
        if start == len || buf.is_empty() {
            return Ok(0);
        }
        let (chunks, chunk_start, _, _) = self.rope.chunks_at_byte(start);
        let mut skip = start - chunk_start;
        let mut filled = 0;
        for chunk in chunks {
            let bytes = &chunk.as_bytes()[skip..];
            skip = 0;
            let n = bytes.len().min(buf.len() - filled);
            buf[filled..filled + n].copy_from_slice(&bytes[..n]);
            filled += n;
            if filled == buf.len() {
                break;
            }
        }
        Ok(filled)
    }
}

/// The documents open in the editor, keyed by absolute path.
///
/// **Invariants:** each document holds exactly the text the editor has (every change applied
/// in order, or none of a batch); its version only increases; positions are read in the one
/// encoding negotiated at `initialize`.
#[derive(Debug, Clone, Default)]
pub struct DocumentStore {
    encoding: PositionEncoding,
    documents: HashMap<PathBuf, Snapshot>,
}

impl DocumentStore {
    /// An empty store whose changes carry positions in `encoding`.
    pub fn new(encoding: PositionEncoding) -> DocumentStore {
        DocumentStore {
            encoding,
            documents: HashMap::new(),
        }
    }

    pub fn encoding(&self) -> PositionEncoding {
        self.encoding
    }

    /// `didOpen`. Opening a document that is already open replaces it: LSP forbids a second
    /// open, but if a client sends one its text is the newest word on the buffer, and keeping
    /// the old text would leave the tools reading a stale view.
    pub fn open(&mut self, path: PathBuf, version: i32, text: String) {
        let snapshot = Snapshot::new(version, &text);
        self.documents.insert(path, snapshot);
    }

    /// `didChange`: applies `changes` in order, each range read against the text the previous
    /// change left. The whole batch applies or none of it does, and `version` must be greater
    /// than the document's.
    ///
    /// Each ranged change costs O(log n + its text), so a keystroke in a large file stays cheap.
    pub fn change(
        &mut self,
        path: &Path,
        version: i32,
        changes: &[Change],
    ) -> Result<(), DocumentError> {
        let encoding = self.encoding;
        let document = self
            .documents
            .get_mut(path)
            .ok_or_else(|| DocumentError::NotOpen {
                path: path.to_path_buf(),
            })?;
        if version <= document.version {
            return Err(DocumentError::OutOfOrder {
                path: path.to_path_buf(),
                current: document.version,
                got: version,
            });
        }
        // Edits go to a copy (O(1) to make; ropey copies only the nodes an edit touches) so a
        // bad change later in the batch leaves the document as it was.
        let mut next = Snapshot {
            version,
            rope: document.rope.clone(),
        };
        for (index, change) in changes.iter().enumerate() {
            let Some(range) = change.range else {
                next.rope = Rope::from_str(&change.text);
                continue;
            };
            // Conversion is monotone in the position, so ordered positions give ordered
            // offsets even after clamping.
            if range.end < range.start {
                return Err(DocumentError::ReversedRange {
                    path: path.to_path_buf(),
                    index,
                    range,
                });
            }
            let start = next.byte_offset(range.start, encoding);
            let end = next.byte_offset(range.end, encoding);
            let start_char = next.rope.byte_to_char(start);
            let end_char = next.rope.byte_to_char(end);
            next.rope.remove(start_char..end_char);
            next.rope.insert(start_char, &change.text);
        }
        *document = next;
        Ok(())
    }

    /// `didSave`. The buffer stays open. When the client includes the saved text, it is
    /// compared with the buffer and, if they differ, replaces it: the saved text is what the
    /// editor holds.
    pub fn save(&mut self, path: &Path, text: Option<String>) -> Result<SaveCheck, DocumentError> {
        let document = self
            .documents
            .get_mut(path)
            .ok_or_else(|| DocumentError::NotOpen {
                path: path.to_path_buf(),
            })?;
        let Some(text) = text else {
            return Ok(SaveCheck::Unchecked);
        };
        if document.rope == text.as_str() {
            return Ok(SaveCheck::Matched);
        }
        document.rope = Rope::from_str(&text);
        Ok(SaveCheck::Replaced)
    }

    /// `didClose`: from now on reads of `path` go to disk.
    pub fn close(&mut self, path: &Path) -> Result<(), DocumentError> {
        match self.documents.remove(path) {
            Some(_) => Ok(()),
            None => Err(DocumentError::NotOpen {
                path: path.to_path_buf(),
            }),
        }
    }

    /// The current snapshot of `path`, if it is open. O(1).
    pub fn get(&self, path: &Path) -> Option<Snapshot> {
        self.documents.get(path).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use PositionEncoding::{Utf8, Utf16, Utf32};
    use proptest::prelude::*;
    use proptest::sample::Index;

    fn path() -> PathBuf {
        PathBuf::from("/workspace/doc.txt")
    }

    fn edit(start: (u32, u32), end: (u32, u32), text: &str) -> Change {
        Change {
            range: Some(Range::new(
                Position::new(start.0, start.1),
                Position::new(end.0, end.1),
            )),
            text: text.to_string(),
        }
    }

    fn insert(at: (u32, u32), text: &str) -> Change {
        edit(at, at, text)
    }

    fn replace_all(text: &str) -> Change {
        Change {
            range: None,
            text: text.to_string(),
        }
    }

    fn store_with(encoding: PositionEncoding, text: &str) -> DocumentStore {
        let mut store = DocumentStore::new(encoding);
        store.open(path(), 1, text.to_string());
        store
    }

    fn text_of(store: &DocumentStore) -> String {
        store.get(&path()).expect("the document is open").text()
    }

    #[test]
    fn changes_apply_exactly() {
        // (what the case shows, initial text, encoding, one batch of changes, expected text)
        let cases: Vec<(&str, &str, PositionEncoding, Vec<Change>, &str)> = vec![
            (
                "crlf: insert at the end of a line",
                "ab\r\ncd\r\n",
                Utf16,
                vec![insert((0, 2), "X")],
                "abX\r\ncd\r\n",
            ),
            (
                "crlf: a character past the line end clamps before the \\r\\n",
                "ab\r\ncd\r\n",
                Utf16,
                vec![insert((0, 9), "X")],
                "abX\r\ncd\r\n",
            ),
            (
                "crlf: a range to past the line end keeps the \\r\\n",
                "ab\r\ncd",
                Utf8,
                vec![edit((0, 1), (0, 99), "Z")],
                "aZ\r\ncd",
            ),
            (
                "crlf: deleting a line break",
                "ab\r\ncd",
                Utf16,
                vec![edit((0, 2), (1, 0), "")],
                "abcd",
            ),
            (
                "lone cr: lines end at \\r",
                "a\rb\rc",
                Utf16,
                vec![edit((1, 0), (1, 1), "B")],
                "a\rB\rc",
            ),
            (
                "lone cr: past the end of a line clamps before its \\r",
                "a\rb\rc",
                Utf32,
                vec![insert((1, 5), "!")],
                "a\rb!\rc",
            ),
            (
                "mixed line ends count as one line each",
                "a\nb\r\nc\rd",
                Utf16,
                vec![insert((3, 0), ">")],
                "a\nb\r\nc\r>d",
            ),
            (
                "unicode line separators are ordinary characters",
                "a\u{2028}b\u{85}c\u{c}d\ne",
                Utf32,
                vec![insert((1, 0), ">")],
                "a\u{2028}b\u{85}c\u{c}d\n>e",
            ),
            (
                "bom: utf-16 character 0 is before the bom",
                "\u{FEFF}abc",
                Utf16,
                vec![insert((0, 0), "X")],
                "X\u{FEFF}abc",
            ),
            (
                "bom: utf-16 character 1 is after the bom",
                "\u{FEFF}abc",
                Utf16,
                vec![insert((0, 1), "X")],
                "\u{FEFF}Xabc",
            ),
            (
                "bom: three bytes in utf-8",
                "\u{FEFF}abc",
                Utf8,
                vec![insert((0, 3), "X")],
                "\u{FEFF}Xabc",
            ),
            (
                "no final newline: insert after the last char",
                "one\ntwo",
                Utf16,
                vec![insert((1, 3), "!")],
                "one\ntwo!",
            ),
            (
                "no final newline: add one",
                "one\ntwo",
                Utf8,
                vec![insert((1, 3), "\n")],
                "one\ntwo\n",
            ),
            (
                "final newline: the empty last line is a line",
                "one\n",
                Utf16,
                vec![insert((1, 0), "two")],
                "one\ntwo",
            ),
            (
                "empty document",
                "",
                Utf16,
                vec![insert((0, 0), "hi"), insert((3, 4), "!")],
                "hi!",
            ),
            (
                "a line past the end clamps to the document end",
                "ab\ncd",
                Utf16,
                vec![insert((7, 3), "X")],
                "ab\ncdX",
            ),
            (
                "a line past the end after a final newline",
                "ab\r\n",
                Utf32,
                vec![insert((9, 0), "X")],
                "ab\r\nX",
            ),
            (
                "a range from inside the text to past the last line",
                "ab\ncd\nef",
                Utf16,
                vec![edit((1, 1), (40, 0), "")],
                "ab\nc",
            ),
            (
                "emoji: after it in utf-16 (two units)",
                "a😀b",
                Utf16,
                vec![insert((0, 3), "X")],
                "a😀Xb",
            ),
            (
                "emoji: after it in utf-8 (four bytes)",
                "a😀b",
                Utf8,
                vec![insert((0, 5), "X")],
                "a😀Xb",
            ),
            (
                "emoji: after it in utf-32 (one char)",
                "a😀b",
                Utf32,
                vec![insert((0, 2), "X")],
                "a😀Xb",
            ),
            (
                "emoji: delete it in utf-16",
                "a😀b",
                Utf16,
                vec![edit((0, 1), (0, 3), "")],
                "ab",
            ),
            (
                "emoji: delete it in utf-8",
                "a😀b",
                Utf8,
                vec![edit((0, 1), (0, 5), "")],
                "ab",
            ),
            (
                "emoji: delete it in utf-32",
                "a😀b",
                Utf32,
                vec![edit((0, 1), (0, 2), "")],
                "ab",
            ),
            (
                "cjk in utf-16 (one unit each)",
                "中文x\n中",
                Utf16,
                vec![insert((0, 2), "Y")],
                "中文Yx\n中",
            ),
            (
                "cjk in utf-8 (three bytes each)",
                "中文x\n中",
                Utf8,
                vec![insert((0, 6), "Y"), insert((1, 3), "Z")],
                "中文Yx\n中Z",
            ),
            (
                "cjk in utf-32 (one char each)",
                "中文x\n中",
                Utf32,
                vec![insert((0, 2), "Y"), insert((1, 1), "Z")],
                "中文Yx\n中Z",
            ),
            (
                "utf-16: a position inside a surrogate pair snaps to its start",
                "a😀b",
                Utf16,
                vec![insert((0, 2), "X")],
                "aX😀b",
            ),
            (
                "utf-16: a range ending inside a surrogate pair keeps the pair",
                "a😀b",
                Utf16,
                vec![edit((0, 0), (0, 2), "")],
                "😀b",
            ),
            (
                "utf-8: a position inside a char snaps to its start",
                "a中b",
                Utf8,
                vec![insert((0, 2), "X")],
                "aX中b",
            ),
            (
                "a combining mark is a character of its own",
                "e\u{301}x",
                Utf32,
                vec![insert((0, 1), "X")],
                "eX\u{301}x",
            ),
            (
                "full-text replacement",
                "old\r\ntext",
                Utf16,
                vec![replace_all("new")],
                "new",
            ),
            (
                "batch: later ranges read the text the earlier changes left",
                "abc\ndef",
                Utf16,
                vec![
                    insert((0, 0), "1\n"),
                    edit((1, 0), (1, 3), "ABC"),
                    insert((2, 3), "!"),
                ],
                "1\nABC\ndef!",
            ),
            (
                "batch: a full replacement, then ranges into the new text",
                "x",
                Utf16,
                vec![replace_all("hello\nworld"), edit((1, 0), (1, 5), "there")],
                "hello\nthere",
            ),
            (
                "batch: a deletion joining \\r and \\n makes one line break",
                "a\rb\nc",
                Utf16,
                vec![edit((1, 0), (1, 1), ""), insert((1, 0), "Z")],
                "a\r\nZc",
            ),
        ];
        let mut failures = Vec::new();
        for (name, text, encoding, changes, expected) in cases {
            let mut store = store_with(encoding, text);
            match store.change(&path(), 2, &changes) {
                Ok(()) if text_of(&store) == expected => {}
                Ok(()) => failures.push(format!(
                    "{name}: got {:?}, expected {expected:?}",
                    text_of(&store)
                )),
                Err(e) => failures.push(format!("{name}: {e}")),
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn stale_and_repeated_versions_are_rejected_and_change_nothing() {
        let mut store = store_with(Utf16, "abc");
        store.change(&path(), 5, &[insert((0, 0), "1")]).unwrap();
        for stale in [5, 4, -1] {
            let err = store
                .change(&path(), stale, &[insert((0, 0), "2")])
                .unwrap_err();
            assert_eq!(
                err,
                DocumentError::OutOfOrder {
                    path: path(),
                    current: 5,
                    got: stale
                }
            );
        }
        let snapshot = store.get(&path()).unwrap();
        assert_eq!((snapshot.version, snapshot.text().as_str()), (5, "1abc"));
        store.change(&path(), 6, &[insert((0, 0), "2")]).unwrap();
        assert_eq!(text_of(&store), "21abc");
    }

    #[test]
    fn a_bad_change_in_a_batch_leaves_the_document_unchanged() {
        let mut store = store_with(Utf16, "abc\ndef");
        let err = store
            .change(
                &path(),
                2,
                &[
                    insert((0, 0), "first"),
                    replace_all("second"),
                    edit((1, 2), (0, 1), "reversed"),
                ],
            )
            .unwrap_err();
        assert_eq!(
            err,
            DocumentError::ReversedRange {
                path: path(),
                index: 2,
                range: Range::new(Position::new(1, 2), Position::new(0, 1)),
            }
        );
        let snapshot = store.get(&path()).unwrap();
        assert_eq!(
            (snapshot.version, snapshot.text().as_str()),
            (1, "abc\ndef")
        );
        // The version was not consumed either: the editor's next change applies.
        store.change(&path(), 2, &[insert((0, 0), ">")]).unwrap();
        assert_eq!(text_of(&store), ">abc\ndef");
    }

    #[test]
    fn documents_that_are_not_open_are_refused() {
        let mut store = store_with(Utf16, "abc");
        let other = PathBuf::from("/workspace/other.txt");
        let not_open = DocumentError::NotOpen {
            path: other.clone(),
        };
        assert_eq!(store.change(&other, 2, &[]), Err(not_open.clone()));
        assert_eq!(store.save(&other, None), Err(not_open.clone()));
        assert_eq!(store.close(&other), Err(not_open));
        assert_eq!(store.get(&other), None);
        store.close(&path()).unwrap();
        assert_eq!(store.get(&path()), None);
        assert_eq!(
            store.change(&path(), 2, &[]),
            Err(DocumentError::NotOpen { path: path() })
        );
    }

    #[test]
    fn errors_name_the_path_and_the_fault() {
        let err = DocumentError::OutOfOrder {
            path: path(),
            current: 3,
            got: 2,
        };
        assert_eq!(
            err.to_string(),
            "change to /workspace/doc.txt has version 2, but the document is already at \
             version 3; versions must increase"
        );
        let err = DocumentError::ReversedRange {
            path: path(),
            index: 1,
            range: Range::new(Position::new(1, 2), Position::new(0, 1)),
        };
        assert_eq!(
            err.to_string(),
            "change 1 to /workspace/doc.txt: range 1:2-0:1 ends before it starts"
        );
    }

    #[test]
    fn save_keeps_the_buffer_and_adopts_differing_saved_text() {
        let mut store = store_with(Utf16, "a\r\nb");
        assert_eq!(store.save(&path(), None), Ok(SaveCheck::Unchecked));
        assert_eq!(
            store.save(&path(), Some("a\r\nb".to_string())),
            Ok(SaveCheck::Matched)
        );
        assert_eq!(
            store.save(&path(), Some("a\nb".to_string())),
            Ok(SaveCheck::Replaced)
        );
        let snapshot = store.get(&path()).unwrap();
        assert_eq!((snapshot.version, snapshot.text().as_str()), (1, "a\nb"));
    }

    #[test]
    fn reopening_replaces_the_document() {
        let mut store = store_with(Utf16, "old");
        store.change(&path(), 7, &[insert((0, 0), "x")]).unwrap();
        store.open(path(), 1, "new".to_string());
        let snapshot = store.get(&path()).unwrap();
        assert_eq!((snapshot.version, snapshot.text().as_str()), (1, "new"));
    }

    #[test]
    fn snapshots_do_not_see_later_changes() {
        let mut store = store_with(Utf16, "abc");
        let before = store.get(&path()).unwrap();
        store.change(&path(), 2, &[insert((0, 3), "d")]).unwrap();
        assert_eq!(before.text(), "abc");
        assert_eq!(text_of(&store), "abcd");
    }

    #[test]
    fn a_byte_offset_between_cr_and_lf_maps_to_the_end_of_the_line_content() {
        let snapshot = Snapshot::new(1, "a😀\r\nb");
        for encoding in [Utf8, Utf16, Utf32] {
            let at_cr = snapshot.position_of(5, encoding);
            assert_eq!(snapshot.position_of(6, encoding), at_cr, "{encoding:?}");
            assert_eq!(snapshot.byte_offset(at_cr, encoding), 5, "{encoding:?}");
        }
        assert_eq!(snapshot.position_of(5, Utf8), Position::new(0, 5));
        assert_eq!(snapshot.position_of(5, Utf16), Position::new(0, 3));
        assert_eq!(snapshot.position_of(5, Utf32), Position::new(0, 2));
        assert_eq!(snapshot.position_of(7, Utf16), Position::new(1, 0));
    }

    #[test]
    fn position_of_snaps_inside_a_char_and_clamps_past_the_end() {
        let snapshot = Snapshot::new(1, "a😀\nb");
        // Bytes 2..=4 are inside the emoji, which starts at byte 1.
        for inside in 2..=4 {
            assert_eq!(snapshot.position_of(inside, Utf16), Position::new(0, 1));
        }
        assert_eq!(snapshot.position_of(99, Utf16), Position::new(1, 1));
        assert_eq!(
            snapshot.range_of(1..5, Utf16),
            Range::new(Position::new(0, 1), Position::new(0, 3))
        );
    }

    #[test]
    fn many_edits_of_a_10_mb_document_apply_exactly() {
        let line = "fn main() { println!(\"héllo 😀 中文\"); }\r\n";
        let lines = 10 * 1024 * 1024 / line.len();
        let mut store = store_with(Utf16, &line.repeat(lines));
        let len = store.get(&path()).unwrap().len_bytes();
        for version in 2..1002 {
            let at = (version as u32 * 7919) % lines as u32;
            store
                .change(&path(), version, &[edit((at, 12), (at, 14), "ab")])
                .unwrap();
        }
        // The cost of an edit is measured in the benchmark, not asserted here.
        let snapshot = store.get(&path()).unwrap();
        assert_eq!(snapshot.len_bytes(), len);
        let mut start = [0u8; 16];
        snapshot.read_at(0, &mut start).unwrap();
        assert_eq!(&start, b"fn main() { prin");
    }

    /// Fragments the random texts are made of: every LSP line break, text in all UTF-8 widths,
    /// astral-plane emoji, a combining mark, the BOM and a Unicode line separator (which LSP
    /// does not count as a line break).
    const PIECES: &[&str] = &[
        "a", "Z", " ", "\t", "\n", "\r\n", "\r", "é", "中", "文", "😀", "🎉", "e\u{301}",
        "\u{301}", "\u{FEFF}", "\u{2028}",
    ];

    fn text(max_pieces: usize) -> impl Strategy<Value = String> {
        prop::collection::vec(prop::sample::select(PIECES), 0..max_pieces)
            .prop_map(|pieces| pieces.concat())
    }

    /// The byte offsets an LSP position can name: character boundaries not inside a `\r\n`.
    fn positionable_offsets(text: &str) -> Vec<usize> {
        let bytes = text.as_bytes();
        (0..=text.len())
            .filter(|&i| text.is_char_boundary(i))
            .filter(|&i| !(i > 0 && bytes[i - 1] == b'\r' && bytes.get(i) == Some(&b'\n')))
            .collect()
    }

    /// The position of `offset` in `text`, counted directly from the LSP definition.
    fn reference_position(text: &str, offset: usize, encoding: PositionEncoding) -> Position {
        let bytes = text.as_bytes();
        let mut line = 0;
        let mut line_start = 0;
        for (i, &byte) in bytes[..offset].iter().enumerate() {
            if byte == b'\n' || (byte == b'\r' && bytes.get(i + 1) != Some(&b'\n')) {
                line += 1;
                line_start = i + 1;
            }
        }
        let in_line = &text[line_start..offset];
        let character = match encoding {
            Utf8 => in_line.len(),
            Utf16 => in_line.encode_utf16().count(),
            Utf32 => in_line.chars().count(),
        };
        Position::new(line, character as u32)
    }

    fn lsp_line_count(text: &str) -> usize {
        1 + text.matches('\n').count() + text.matches('\r').count() - text.matches("\r\n").count()
    }

    proptest! {
        /// Round trip law: a byte-range edit expressed as a position range (in any encoding)
        /// and applied as a change gives the text that editing the string by bytes gives.
        #[test]
        fn byte_range_edits_round_trip_through_positions(
            initial in text(40),
            edits in prop::collection::vec((any::<Index>(), any::<Index>(), text(6)), 1..5),
        ) {
            for encoding in [Utf8, Utf16, Utf32] {
                let mut store = store_with(encoding, &initial);
                let mut expected = initial.clone();
                let mut changes = Vec::new();
                for (a, b, new_text) in &edits {
                    let offsets = positionable_offsets(&expected);
                    let (a, b) = (*a.get(&offsets), *b.get(&offsets));
                    let bytes = a.min(b)..a.max(b);
                    let snapshot = Snapshot::new(0, &expected);
                    let range = snapshot.range_of(bytes.clone(), encoding);
                    prop_assert_eq!(snapshot.byte_offset(range.start, encoding), bytes.start);
                    prop_assert_eq!(snapshot.byte_offset(range.end, encoding), bytes.end);
                    prop_assert_eq!(range.start, reference_position(&expected, bytes.start, encoding));
                    prop_assert_eq!(range.end, reference_position(&expected, bytes.end, encoding));
                    changes.push(Change { range: Some(range), text: new_text.clone() });
                    expected.replace_range(bytes, new_text);
                }
                prop_assert_eq!(store.change(&path(), 2, &changes), Ok(()));
                let snapshot = store.get(&path()).unwrap();
                prop_assert_eq!(snapshot.text(), expected.clone(), "{:?}", encoding);
                prop_assert_eq!(snapshot.rope.len_lines(), lsp_line_count(&expected));
            }
        }

        /// `read_at` is slicing: any offset and length read exactly the bytes the string holds
        /// there, across chunk boundaries and past the end.
        #[test]
        fn read_at_equals_slicing_the_string(
            text in text(3000),
            built_by_edits in any::<bool>(),
            reads in prop::collection::vec((any::<Index>(), 0..4096usize), 1..20),
        ) {
            let snapshot = if built_by_edits {
                // Inserting the halves out of order gives the rope an irregular chunking.
                let mut middle = text.len() / 2;
                while !text.is_char_boundary(middle) {
                    middle += 1;
                }
                let mut rope = Rope::from_str(&text[middle..]);
                rope.insert(0, &text[..middle]);
                Snapshot { version: 0, rope }
            } else {
                Snapshot::new(0, &text)
            };
            prop_assert_eq!(ByteSource::len(&snapshot), text.len() as u64);
            for (offset, len) in reads {
                let offset = offset.index(text.len() + 64);
                let mut buf = vec![0xAA; len];
                let n = snapshot.read_at(offset as u64, &mut buf).unwrap();
                let start = offset.min(text.len());
                let end = (offset + len).min(text.len());
                prop_assert_eq!(&buf[..n], &text.as_bytes()[start..end]);
            }
        }
    }
}
