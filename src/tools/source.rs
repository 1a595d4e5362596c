//! Opening files for the text tools and the facts every page reports: size, BOM, final newline,
//! line-ending style and a version hash for the stale-write guard.
//!
//! Reads go through [`ByteSource`] (defined in [`crate::bytes`], below both this module and
//! `documents`, and re-exported here) so that the paging code is a pure function over bytes at
//! offsets, testable on an in-memory slice and O(page) on a file of any size.

use super::versions::{self, Lines, VersionKey, Versioned};
use super::{ErrorCode, ToolContext, ToolError, shown};
pub use crate::bytes::{ByteSource, read_range};
use crate::documents::Snapshot;
use crate::limits::Limits;
use crate::workspace::{Opened, Resolved, Target};
use serde::Serialize;
use std::fs::File;
use std::io;
use std::time::UNIX_EPOCH;

/// An open disk file with its length fixed when it was opened.
pub struct DiskFile {
    file: File,
    len: u64,
}

impl DiskFile {
    /// The open `file` read as `len` bytes (its length when opened: bytes appended later are
    /// not read).
    pub fn new(file: File, len: u64) -> DiskFile {
        DiskFile { file, len }
    }
}

impl ByteSource for DiskFile {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let mut filled = 0;
        while filled < buf.len() {
            match self
                .file
                .read_at(&mut buf[filled..], offset + filled as u64)
            {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(filled)
    }
}

/// Where a tool's bytes come from: the editor's unsaved buffer when the file is open there,
/// else the disk.
pub enum Source {
    Disk(DiskFile),
    Editor(Snapshot),
}

impl Source {
    /// The `source` field of a result: `"editor"` or `"disk"`.
    pub fn name(&self) -> &'static str {
        match self {
            Source::Disk(_) => "disk",
            Source::Editor(_) => "editor",
        }
    }

    /// The editor's document version, for an open file.
    pub fn editor_version(&self) -> Option<i32> {
        match self {
            Source::Disk(_) => None,
            Source::Editor(snapshot) => Some(snapshot.version),
        }
    }
}

impl ByteSource for Source {
    fn len(&self) -> u64 {
        match self {
            Source::Disk(file) => file.len(),
            Source::Editor(snapshot) => snapshot.len(),
        }
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Source::Disk(file) => file.read_at(offset, buf),
            Source::Editor(snapshot) => snapshot.read_at(offset, buf),
        }
    }
}

impl versions::Versioned for Source {
    fn version_key(&self) -> Option<VersionKey> {
        match self {
            // `fstat` on the open file: the version of the bytes this source reads.
            Source::Disk(disk) => disk
                .file
                .metadata()
                .ok()
                .filter(|m| m.is_file() && m.len() == disk.len)
                .map(|m| VersionKey::of(&m)),
            Source::Editor(_) => None,
        }
    }
}

/// A text file opened for reading, with its workspace path.
pub struct OpenedFile {
    pub resolved: Resolved,
    pub source: Source,
    /// Where the file was opened beneath the root: the folder a rewrite of it lands in.
    pub opened: Opened,
    /// The version stamp used when the file is too large to hash.
    stamp: String,
}

/// Opens `path` beneath its workspace root: the editor's buffer when the file is open there,
/// else the regular file on disk, read from the descriptor the walk opened.
pub fn open_file(ctx: &ToolContext, path: &str) -> Result<OpenedFile, ToolError> {
    let opened = ctx.open(path)?;
    let resolved = opened.resolved.clone();
    if let Some(snapshot) = ctx.editor.and_then(|e| e.snapshot(&resolved.absolute)) {
        return Ok(OpenedFile {
            resolved,
            source: Source::Editor(snapshot),
            opened,
            stamp: String::new(),
        });
    }
    let display = shown(&resolved.display).to_string();
    match &opened.target {
        Target::File(..) => {}
        Target::Missing(_) => {
            return Err(ToolError::new(
                ErrorCode::NotFound,
                format!(
                    "{display} does not exist; use pen_list or pen_search to find the right path"
                ),
            ));
        }
        Target::DanglingLink => {
            // As the OS reports a dangling link: its target does not exist.
            let err = io::Error::from_raw_os_error(libc::ENOENT);
            return Err(ToolError::io(&display, &err));
        }
        Target::Dir(_) => {
            return Err(ToolError::new(
                ErrorCode::NotAFile,
                format!("{display} is a directory; use pen_list to see what it holds"),
            ));
        }
        Target::Other => {
            return Err(ToolError::new(
                ErrorCode::NotAFile,
                format!("{display} is not a regular file"),
            ));
        }
    }
    let (file, metadata) = opened
        .read_file()
        .map_err(|e| ToolError::io(&display, &e))?;
    let modified = metadata
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    let stamp = format!("stat:{}:{modified}", metadata.len());
    Ok(OpenedFile {
        resolved,
        source: Source::Disk(DiskFile {
            file,
            len: metadata.len(),
        }),
        opened,
        stamp,
    })
}

/// Facts about a whole file that cost O(1) reads, plus its version hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileFacts {
    pub len: u64,
    pub bom: bool,
    pub final_newline: bool,
    /// `xxh3:…` of the content for files up to `max_edit_file_bytes`, else a size-and-mtime
    /// stamp. pen_edit compares it with the file's current value. Cached per file version
    /// (see [`versions`]).
    pub hash: String,
}

/// The UTF-8 byte-order mark.
pub const BOM: &[u8] = b"\xEF\xBB\xBF";

impl OpenedFile {
    /// Refuses a binary file (a NUL in the first `binary_sniff_bytes`); returns the bytes read.
    pub fn sniff_binary(&self, limits: &Limits) -> Result<Vec<u8>, ToolError> {
        let display = shown(&self.resolved.display);
        let head = read_range(&self.source, 0, limits.binary_sniff_bytes as u64)
            .map_err(|e| ToolError::io(display, &e))?;
        if let Some(at) = memchr::memchr(0, &head) {
            return Err(ToolError::new(
                ErrorCode::Binary,
                format!(
                    "{display} looks binary (a NUL byte at offset {at}); the text tools read UTF-8 text only. \
                     Use pen_search to find text in it or an approved command to inspect it."
                ),
            ));
        }
        Ok(head)
    }

    /// Probes the file: the NUL sniff for binaries, the BOM, the final newline and the hash.
    pub fn facts(&self, limits: &Limits) -> Result<FileFacts, ToolError> {
        let display = shown(&self.resolved.display);
        let io_err = |e: io::Error| ToolError::io(display, &e);
        let len = self.source.len();
        let head = self.sniff_binary(limits)?;
        let last = read_range(&self.source, len.saturating_sub(1), len).map_err(io_err)?;
        let hash = match &self.source {
            Source::Editor(snapshot) => snapshot_hash(snapshot),
            // Hashed once per file version (and its line marks built in the same pass), so a
            // page of an unchanged file does not read the whole file again.
            Source::Disk(_) if len <= limits.max_edit_file_bytes => {
                versions::content_hash(&self.source).map_err(io_err)?
            }
            Source::Disk(_) => self.stamp.clone(),
        };
        Ok(FileFacts {
            len,
            bom: head.starts_with(BOM),
            final_newline: last == b"\n",
            hash,
        })
    }
}

impl OpenedFile {
    /// Line look-ups on this file, starting from what is known of its version.
    pub fn lines(&self) -> Lines<'_, Source> {
        match &self.source {
            Source::Disk(_) => Lines::of_version(&self.source, self.source.version_key()),
            Source::Editor(_) => Lines::uncached(&self.source),
        }
    }

    /// Keeps what `lines` learned for later calls, when the file is still that version.
    pub fn keep_lines(&self, lines: Lines<'_, Source>) {
        lines.save(self.source.version_key());
    }
}

/// The content hash of a file's bytes as pen_read reports it and pen_edit checks it.
pub fn hash_bytes(bytes: &[u8]) -> String {
    format!("xxh3:{:016x}", xxhash_rust::xxh3::xxh3_64(bytes))
}

/// The content hash of an editor buffer, the same as [`hash_bytes`] of its text, computed
/// chunk by chunk without copying the rope.
pub fn snapshot_hash(snapshot: &Snapshot) -> String {
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    for chunk in snapshot.rope.chunks() {
        hasher.update(chunk.as_bytes());
    }
    format!("xxh3:{:016x}", hasher.digest())
}

/// The line-ending style of some text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Eol {
    Lf,
    Crlf,
    Mixed,
    /// No line break at all.
    None,
}

impl Eol {
    /// Classifies the line breaks of `bytes`: `\r\n` counts as CRLF, a lone `\n` as LF.
    pub fn of(bytes: &[u8]) -> Eol {
        let mut lf = 0usize;
        let mut crlf = 0usize;
        for at in memchr::memchr_iter(b'\n', bytes) {
            if at > 0 && bytes[at - 1] == b'\r' {
                crlf += 1;
            } else {
                lf += 1;
            }
            if lf > 0 && crlf > 0 {
                return Eol::Mixed;
            }
        }
        match (lf, crlf) {
            (0, 0) => Eol::None,
            (_, 0) => Eol::Lf,
            _ => Eol::Crlf,
        }
    }
}

/// Checks that `bytes`, which start at `offset` in the file, are UTF-8. An incomplete sequence
/// at the very end is allowed (the caller cuts it); anything else fails naming the byte.
/// Returns the length of the valid prefix.
pub fn check_utf8(bytes: &[u8], offset: u64, display: &str) -> Result<usize, ToolError> {
    match std::str::from_utf8(bytes) {
        Ok(_) => Ok(bytes.len()),
        Err(e) if e.error_len().is_none() => Ok(e.valid_up_to()),
        Err(e) => {
            let at = e.valid_up_to();
            Err(invalid_utf8(bytes[at], offset + at as u64, display))
        }
    }
}

/// The error for a byte at `offset` that does not start a UTF-8 character.
pub fn invalid_utf8(byte: u8, offset: u64, display: &str) -> ToolError {
    ToolError::new(
        ErrorCode::InvalidUtf8,
        format!(
            "{} is not valid UTF-8: byte 0x{byte:02X} at offset {offset} does not start a character. \
             The text tools read UTF-8 only; use pen_search for text in it or an approved command \
             to convert or inspect it.",
            shown(display)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eol_styles() {
        assert_eq!(Eol::of(b"a\nb\n"), Eol::Lf);
        assert_eq!(Eol::of(b"a\r\nb\r\n"), Eol::Crlf);
        assert_eq!(Eol::of(b"a\r\nb\n"), Eol::Mixed);
        assert_eq!(Eol::of(b"abc"), Eol::None);
        assert_eq!(Eol::of(b"\n"), Eol::Lf);
    }

    #[test]
    fn utf8_check_names_the_byte() {
        assert_eq!(check_utf8("aé".as_bytes(), 0, "f").unwrap(), 3);
        assert_eq!(check_utf8(&"aé".as_bytes()[..2], 0, "f").unwrap(), 1);
        let err = check_utf8(b"ab\xFFc", 100, "f").unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidUtf8);
        assert!(
            err.message.contains("0xFF at offset 102"),
            "{}",
            err.message
        );
    }

    #[test]
    fn a_snapshot_hashes_like_its_bytes() {
        let text = "héllo\r\n😀".repeat(5_000);
        assert_eq!(
            snapshot_hash(&Snapshot::new(3, &text)),
            hash_bytes(text.as_bytes())
        );
    }

    #[test]
    fn slices_read_at_offsets() {
        let data: &[u8] = b"hello";
        let mut buf = [0u8; 3];
        assert_eq!(data.read_at(3, &mut buf).unwrap(), 2);
        assert_eq!(&buf[..2], b"lo");
        assert_eq!(read_range(data, 1, 99).unwrap(), b"ello");
    }
}
