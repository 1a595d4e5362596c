//! What pen learns about one version of a disk file by reading all of it, kept so that later
//! pages of the same version do not read it again: the content hash and a sparse line index.
//!
//! A version is named by [`VersionKey`]: device, inode, size, and the modification and change
//! times in nanoseconds, taken with `fstat` on the open file. Any write changes the change time
//! (`ctime`), which no program can set back, and a replaced file has a new inode. The one way a
//! changed file keeps its key is a second write within the same timestamp tick as the version
//! pen saw, so a version is cached only once its timestamps are [`FILE_VERSION_SETTLE`] older
//! than the moment pen started reading it, and only when `fstat` gives the same key after the
//! read as before (git's "racily clean" rule). Until then every page reads the file again.
//! pen_list keeps a folder's sorted listing under the folder's key by the same rule (`list.rs`).
//!
//! The stale-write guard itself never trusts this cache: pen_edit hashes the bytes it is about
//! to rewrite. A stale cached hash could only make an edit fail as stale, never let one through.
//!
//! The cache is process-wide, so `pen tool`, `pen run` and `pen serve` all use it; it holds at
//! most [`FILE_VERSION_CACHE_ENTRIES`] versions and forgets the least recently used.

use crate::bytes::{ByteSource, read_range};
use crate::limits::{
    FILE_VERSION_CACHE_ENTRIES, FILE_VERSION_SETTLE, LINE_INDEX_MAX_MARKS, LINE_INDEX_STRIDE,
};
use rustix::fs::{AtFlags, StatxFlags, StatxTimestamp, statx};
use std::collections::HashMap;
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The identity of one version of a disk file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VersionKey {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl VersionKey {
    /// The key of the file `metadata` describes (from `fstat` on the open file).
    pub fn of(metadata: &std::fs::Metadata) -> VersionKey {
        use std::os::unix::fs::MetadataExt;
        VersionKey {
            dev: metadata.dev(),
            ino: metadata.ino(),
            size: metadata.size(),
            mtime: (metadata.mtime(), metadata.mtime_nsec()),
            ctime: (metadata.ctime(), metadata.ctime_nsec()),
        }
    }

    /// The key of the file or folder `fd` refers to, from `statx` on the descriptor itself (an
    /// `O_PATH` one will do): a folder's timestamps change whenever an entry is added, removed
    /// or renamed in it.
    pub fn of_fd(fd: BorrowedFd<'_>) -> io::Result<VersionKey> {
        let stat = statx(fd, "", AtFlags::EMPTY_PATH, StatxFlags::BASIC_STATS)?;
        let time = |t: StatxTimestamp| (t.tv_sec, i64::from(t.tv_nsec));
        Ok(VersionKey {
            dev: libc::makedev(stat.stx_dev_major, stat.stx_dev_minor),
            ino: stat.stx_ino,
            size: stat.stx_size,
            mtime: time(stat.stx_mtime),
            ctime: time(stat.stx_ctime),
        })
    }

    /// Whether both keys name the same file (device and inode), whatever its version.
    pub fn same_file(&self, other: &VersionKey) -> bool {
        (self.dev, self.ino) == (other.dev, other.ino)
    }

    /// Whether both timestamps are at least [`FILE_VERSION_SETTLE`] before `read_started`: a
    /// later write then gets a later change time, so this key cannot outlive the content.
    pub fn settled(&self, read_started: SystemTime) -> bool {
        let Ok(now) = read_started.duration_since(UNIX_EPOCH) else {
            return false;
        };
        let settled_before = now.saturating_sub(FILE_VERSION_SETTLE);
        [self.mtime, self.ctime].iter().all(|&(secs, nanos)| {
            let (Ok(secs), Ok(nanos)) = (u64::try_from(secs), u32::try_from(nanos)) else {
                return false;
            };
            Duration::new(secs, nanos.min(999_999_999)) < settled_before
        })
    }
}

/// Newline counts at every `stride` bytes of a source's start: `marks[k]` is the number of
/// `\n` in `[0, k × stride)`. A line number at any offset then costs a look-up and a scan of
/// less than one stride.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineMarks {
    stride: u64,
    marks: Vec<u64>,
}

impl LineMarks {
    /// Empty marks for a source of `len` bytes: the stride is [`LINE_INDEX_STRIDE`], widened
    /// for huge files so that there are at most [`LINE_INDEX_MAX_MARKS`] marks.
    pub fn new(len: u64) -> LineMarks {
        let stride = len
            .div_ceil(LINE_INDEX_MAX_MARKS)
            .next_multiple_of(LINE_INDEX_STRIDE)
            .max(LINE_INDEX_STRIDE);
        LineMarks {
            stride,
            marks: vec![0],
        }
    }

    /// The bytes the marks cover.
    fn covered(&self) -> u64 {
        (self.marks.len() as u64 - 1) * self.stride
    }

    /// Adds the mark after one whole stride of bytes that starts at [`Self::covered`].
    fn push_stride(&mut self, bytes: &[u8]) {
        let last = self.marks.last().copied().unwrap_or(0);
        self.marks
            .push(last + memchr::memchr_iter(b'\n', bytes).count() as u64);
    }

    /// Marks every whole stride up to `target` (at most the source's end).
    fn extend_to<S: ByteSource + ?Sized>(&mut self, src: &S, target: u64) -> io::Result<()> {
        let target = target.min(src.len());
        while self.covered() + self.stride <= target {
            let at = self.covered();
            let chunk = read_range(src, at, at + self.stride)?;
            self.push_stride(&chunk);
        }
        Ok(())
    }

    /// The number of `\n` before `offset`: the 1-based line at `offset` is one more.
    pub fn newlines_before<S: ByteSource + ?Sized>(
        &mut self,
        src: &S,
        offset: u64,
    ) -> io::Result<u64> {
        let offset = offset.min(src.len());
        self.extend_to(src, offset)?;
        let k = (offset / self.stride).min(self.marks.len() as u64 - 1);
        let from = k * self.stride;
        let rest = read_range(src, from, offset)?;
        Ok(self.marks[k as usize] + memchr::memchr_iter(b'\n', &rest).count() as u64)
    }

    /// The offset where 1-based `line` starts, or `None` past the end.
    pub fn line_start<S: ByteSource + ?Sized>(
        &mut self,
        src: &S,
        line: u64,
    ) -> io::Result<Option<u64>> {
        let wanted = line.saturating_sub(1);
        if wanted == 0 {
            return Ok(Some(0));
        }
        let len = src.len();
        // Mark strides until one ends past the wanted newline (or the file does).
        while self.marks.last().is_some_and(|&m| m < wanted) && self.covered() + self.stride <= len
        {
            let at = self.covered();
            let chunk = read_range(src, at, at + self.stride)?;
            self.push_stride(&chunk);
        }
        // The last stride whose start has fewer newlines before it than wanted holds the one.
        let k = self
            .marks
            .partition_point(|&m| m < wanted)
            .saturating_sub(1);
        let from = k as u64 * self.stride;
        let mut needed = wanted - self.marks[k];
        // Below the last mark the newline is within this stride; past it, in the file's tail.
        let to = if k + 1 < self.marks.len() {
            from + self.stride
        } else {
            len
        };
        let rest = read_range(src, from, to)?;
        for i in memchr::memchr_iter(b'\n', &rest) {
            needed -= 1;
            if needed == 0 {
                let start = from + i as u64 + 1;
                return Ok((start < len).then_some(start));
            }
        }
        Ok(None)
    }

    /// The lines of the source (a last line without a newline counts).
    pub fn count_lines<S: ByteSource + ?Sized>(&mut self, src: &S) -> io::Result<u64> {
        let len = src.len();
        let newlines = self.newlines_before(src, len)?;
        let last = read_range(src, len.saturating_sub(1), len)?;
        Ok(newlines + u64::from(last.first().is_some_and(|&b| b != b'\n')))
    }
}

/// What is cached for one version.
#[derive(Debug, Clone)]
struct Known {
    /// The content hash, when the file was small enough to hash.
    hash: Option<String>,
    marks: LineMarks,
    /// When it was last used, for eviction.
    used: u64,
}

#[derive(Default)]
struct Cache {
    versions: HashMap<VersionKey, Known>,
    clock: u64,
}

static CACHE: LazyLock<Mutex<Cache>> = LazyLock::new(Mutex::default);

fn with_cache<T>(f: impl FnOnce(&mut Cache) -> T) -> T {
    // A panic elsewhere while the lock was held leaves nothing half-written worth refusing.
    let mut cache = CACHE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    f(&mut cache)
}

fn lookup(key: &VersionKey) -> Option<Known> {
    with_cache(|cache| {
        cache.clock += 1;
        let clock = cache.clock;
        cache.versions.get_mut(key).map(|known| {
            known.used = clock;
            known.clone()
        })
    })
}

fn store(key: VersionKey, hash: Option<String>, marks: LineMarks) {
    with_cache(|cache| {
        cache.clock += 1;
        let used = cache.clock;
        let known = cache.versions.entry(key).or_insert_with(|| Known {
            hash: None,
            marks: marks.clone(),
            used,
        });
        known.used = used;
        if hash.is_some() {
            known.hash = hash;
        }
        if marks.marks.len() > known.marks.marks.len() {
            known.marks = marks;
        }
        while cache.versions.len() > FILE_VERSION_CACHE_ENTRIES {
            let Some(oldest) = cache
                .versions
                .iter()
                .min_by_key(|(_, known)| known.used)
                .map(|(key, _)| *key)
            else {
                break;
            };
            cache.versions.remove(&oldest);
        }
    });
}

/// A disk file's version as the tools see it: `fstat` before and after reading.
pub trait Versioned: ByteSource {
    /// The key of the file as it is now, or `None` when it cannot be taken (or the file is not
    /// the length it was opened with).
    fn version_key(&self) -> Option<VersionKey>;
}

/// The content hash of a whole disk file, as [`super::source::hash_bytes`] of its bytes, from
/// the cache when this version was hashed before; the line marks are built in the same pass.
pub fn content_hash<S: Versioned + ?Sized>(src: &S) -> io::Result<String> {
    let before = src.version_key();
    if let Some(key) = &before
        && let Some(Known {
            hash: Some(hash), ..
        }) = lookup(key)
    {
        return Ok(hash);
    }
    let started = SystemTime::now();
    let len = src.len();
    let mut marks = LineMarks::new(len);
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    let mut at = 0;
    while at < len {
        let chunk = read_range(src, at, at + marks.stride)?;
        if chunk.is_empty() {
            break;
        }
        hasher.update(&chunk);
        if chunk.len() as u64 == marks.stride {
            marks.push_stride(&chunk);
        }
        at += chunk.len() as u64;
    }
    let hash = format!("xxh3:{:016x}", hasher.digest());
    if let Some(key) = before
        && key.settled(started)
        && src.version_key() == Some(key)
    {
        store(key, Some(hash.clone()), marks);
    }
    Ok(hash)
}

/// Line look-ups on one opened source: the cached marks of its version to start from, and what
/// this call adds to them kept for the next.
pub struct Lines<'a, S: ByteSource + ?Sized> {
    src: &'a S,
    key: Option<VersionKey>,
    started: SystemTime,
    marks: LineMarks,
    cached_len: usize,
}

impl<'a, S: ByteSource + ?Sized> Lines<'a, S> {
    /// Lines of a source with no version (an editor buffer, a slice): nothing is cached.
    pub fn uncached(src: &'a S) -> Lines<'a, S> {
        Lines {
            src,
            key: None,
            started: SystemTime::now(),
            marks: LineMarks::new(src.len()),
            cached_len: 1,
        }
    }

    /// Lines of a disk file version, starting from what the cache knows of it.
    pub fn of_version(src: &'a S, key: Option<VersionKey>) -> Lines<'a, S> {
        let started = SystemTime::now();
        let marks = key
            .as_ref()
            .and_then(lookup)
            .map_or_else(|| LineMarks::new(src.len()), |known| known.marks);
        let cached_len = marks.marks.len();
        Lines {
            src,
            key,
            started,
            marks,
            cached_len,
        }
    }

    pub fn newlines_before(&mut self, offset: u64) -> io::Result<u64> {
        self.marks.newlines_before(self.src, offset)
    }

    pub fn line_start(&mut self, line: u64) -> io::Result<Option<u64>> {
        self.marks.line_start(self.src, line)
    }

    pub fn count_lines(&mut self) -> io::Result<u64> {
        self.marks.count_lines(self.src)
    }

    /// Keeps the marks this call added for later pages of the same settled version.
    pub fn save(self, now_key: Option<VersionKey>) {
        if let Some(key) = self.key
            && self.marks.marks.len() > self.cached_len
            && key.settled(self.started)
            && now_key == Some(key)
        {
            store(key, None, self.marks);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text_of(lines: usize) -> String {
        (0..lines).map(|i| format!("line {i}\n")).collect()
    }

    #[test]
    fn marks_agree_with_a_plain_count_at_every_offset() {
        // A small stride exercises many marks on a small text.
        let text = text_of(3_000) + "no newline";
        let bytes = text.as_bytes();
        let mut marks = LineMarks {
            stride: 64,
            marks: vec![0],
        };
        for offset in (0..bytes.len() as u64 + 3).step_by(7) {
            let end = (offset as usize).min(bytes.len());
            let expected = memchr::memchr_iter(b'\n', &bytes[..end]).count() as u64;
            assert_eq!(marks.newlines_before(bytes, offset).unwrap(), expected);
        }
        assert_eq!(marks.count_lines(bytes).unwrap(), 3_001);
    }

    #[test]
    fn line_starts_from_fresh_and_filled_marks() {
        let text = text_of(500);
        let bytes = text.as_bytes();
        let expected = |line: u64| {
            let mut at = 0;
            for _ in 1..line {
                at += text[at..].find('\n').unwrap() + 1;
            }
            (at < text.len()).then_some(at as u64)
        };
        for line in [1u64, 2, 3, 99, 250, 499, 500, 501, 502, 10_000] {
            let mut fresh = LineMarks {
                stride: 100,
                marks: vec![0],
            };
            let want = if line > 501 { None } else { expected(line) };
            assert_eq!(fresh.line_start(bytes, line).unwrap(), want, "line {line}");
            let mut filled = LineMarks {
                stride: 100,
                marks: vec![0],
            };
            filled.newlines_before(bytes, bytes.len() as u64).unwrap();
            assert_eq!(filled.line_start(bytes, line).unwrap(), want, "line {line}");
        }
    }

    #[test]
    fn huge_files_get_a_wider_stride() {
        assert_eq!(LineMarks::new(0).stride, LINE_INDEX_STRIDE);
        assert_eq!(LineMarks::new(16 << 20).stride, LINE_INDEX_STRIDE);
        let huge = LineMarks::new(100 << 30);
        assert!(huge.stride > LINE_INDEX_STRIDE);
        assert!((100u64 << 30).div_ceil(huge.stride) <= LINE_INDEX_MAX_MARKS);
    }

    #[test]
    fn only_settled_versions_are_cached() {
        let key = |secs: i64| VersionKey {
            dev: 1,
            ino: 2,
            size: 3,
            mtime: (secs, 0),
            ctime: (secs, 5),
        };
        let now = UNIX_EPOCH + Duration::from_secs(1_000);
        assert!(key(900).settled(now));
        assert!(!key(999).settled(now));
        assert!(!key(1_000).settled(now));
        assert!(!key(-1).settled(now));
    }

    /// A file in memory with a version key and a count of the bytes read from it.
    struct FakeFile {
        bytes: std::cell::RefCell<Vec<u8>>,
        key: std::cell::Cell<VersionKey>,
        read: std::cell::Cell<u64>,
        /// A key to switch to after the first read, as a write during the hash would.
        key_after_read: Option<VersionKey>,
    }

    impl ByteSource for FakeFile {
        fn len(&self) -> u64 {
            self.bytes.borrow().len() as u64
        }

        fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.bytes.borrow().as_slice().read_at(offset, buf)?;
            self.read.set(self.read.get() + n as u64);
            if let Some(key) = self.key_after_read {
                self.key.set(key);
            }
            Ok(n)
        }
    }

    impl Versioned for FakeFile {
        fn version_key(&self) -> Option<VersionKey> {
            Some(self.key.get())
        }
    }

    fn fake(ino: u64, age_secs: u64, bytes: Vec<u8>) -> FakeFile {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let at = (now - age_secs) as i64;
        FakeFile {
            key: std::cell::Cell::new(VersionKey {
                dev: 0xfeed,
                ino,
                size: bytes.len() as u64,
                mtime: (at, 1),
                ctime: (at, 2),
            }),
            bytes: std::cell::RefCell::new(bytes),
            read: std::cell::Cell::new(0),
            key_after_read: None,
        }
    }

    #[test]
    fn a_settled_version_is_hashed_once_and_its_lines_come_from_the_marks() {
        let text = text_of(100_000).into_bytes();
        let file = fake(1, 60, text.clone());
        let hash = content_hash(&file).unwrap();
        assert_eq!(hash, super::super::source::hash_bytes(&text));
        assert_eq!(file.read.get(), text.len() as u64);
        // The second page of the same version reads nothing for its hash.
        assert_eq!(content_hash(&file).unwrap(), hash);
        assert_eq!(file.read.get(), text.len() as u64);
        // Nor more than a stride for the line at an offset deep in the file.
        let deep = text.len() as u64 - 100;
        let mut lines = Lines::of_version(&file, file.version_key());
        let expected = memchr::memchr_iter(b'\n', &text[..deep as usize]).count() as u64;
        assert_eq!(lines.newlines_before(deep).unwrap(), expected);
        assert!(file.read.get() - text.len() as u64 <= LINE_INDEX_STRIDE);
        // A new version (a write changes the change time) is hashed again.
        file.bytes.borrow_mut()[0] = b'L';
        let mut key = file.key.get();
        key.ctime.1 += 1;
        file.key.set(key);
        let changed = content_hash(&file).unwrap();
        assert_ne!(changed, hash);
        assert_eq!(
            changed,
            super::super::source::hash_bytes(&file.bytes.borrow())
        );
    }

    #[test]
    fn a_fresh_or_changing_version_is_not_cached() {
        // Written a moment ago: a second write in the same tick could keep its key.
        let fresh = fake(2, 0, b"one\ntwo\n".to_vec());
        let hash = content_hash(&fresh).unwrap();
        fresh.bytes.borrow_mut()[0] = b'O';
        assert_ne!(content_hash(&fresh).unwrap(), hash);
        // Changed while it was being read: what was read is not kept.
        let mut changing = fake(3, 60, b"one\ntwo\n".to_vec());
        let original = changing.key.get();
        let mut later = original;
        later.ctime.1 += 1;
        changing.key_after_read = Some(later);
        let hash = content_hash(&changing).unwrap();
        // Back under the key it had when the read began, with other content: had that read
        // been kept, its hash would come back now.
        changing.key_after_read = None;
        changing.key.set(original);
        changing.bytes.borrow_mut()[0] = b'O';
        assert_ne!(content_hash(&changing).unwrap(), hash);
    }

    #[test]
    fn the_cache_is_bounded() {
        for i in 0..(FILE_VERSION_CACHE_ENTRIES as u64 + 10) {
            let key = VersionKey {
                dev: u64::MAX,
                ino: i,
                size: 0,
                mtime: (0, 0),
                ctime: (0, 0),
            };
            store(key, Some(format!("h{i}")), LineMarks::new(0));
        }
        with_cache(|cache| assert!(cache.versions.len() <= FILE_VERSION_CACHE_ENTRIES));
    }
}
