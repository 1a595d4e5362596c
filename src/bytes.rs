//! Random access to the bytes of a file or buffer, below both the editor's documents and the
//! tools, so that paging code is a pure function over bytes at offsets.
//!
//! This module depends on nothing else in pen: `documents` implements
//! [`ByteSource`](crate::bytes::ByteSource) for its snapshots and `tools::source` for disk
//! files, and neither needs the other to do so.

use std::io;

/// Random access to the bytes of a file or buffer.
pub trait ByteSource {
    fn len(&self) -> u64;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Reads at `offset` into `buf`; returns fewer bytes only at the end of the source.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize>;
}

impl ByteSource for [u8] {
    fn len(&self) -> u64 {
        <[u8]>::len(self) as u64
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let start = (offset as usize).min(<[u8]>::len(self));
        let n = buf.len().min(<[u8]>::len(self) - start);
        buf[..n].copy_from_slice(&self[start..start + n]);
        Ok(n)
    }
}

/// Reads `[start, end)` clamped to the source.
pub fn read_range<S: ByteSource + ?Sized>(src: &S, start: u64, end: u64) -> io::Result<Vec<u8>> {
    let end = end.min(src.len());
    let start = start.min(end);
    let mut buf = vec![0; (end - start) as usize];
    let n = src.read_at(start, &mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_is_clamped_to_the_source() {
        let bytes: &[u8] = b"hello";
        assert_eq!(read_range(bytes, 1, 3).unwrap(), b"el");
        assert_eq!(read_range(bytes, 3, 100).unwrap(), b"lo");
        assert_eq!(read_range(bytes, 9, 100).unwrap(), b"");
        assert_eq!(read_range(bytes, 4, 2).unwrap(), b"");
    }
}
