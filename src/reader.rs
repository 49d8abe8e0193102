//! I/O: whole files into reusable buffers with positioned reads.
//!
//! Readers never touch pixels. A buffer is sized from one `fstat` of the
//! already-open file (never at listing time) and filled with `pread`, then
//! handed on; buffers cycle through a bounded pool so the memory held by
//! readers is fixed by the prefetch depth.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::error::SampleError;

/// Where reader threads get a sample's bytes. The default, [`FileReader`],
/// reads the local file system; another implementation can serve an object
/// store or an archive, and the tests use one to inject faults (EIO, short
/// reads, latency).
pub trait ReadBytes: Send + Sync + std::fmt::Debug {
    /// Replace the contents of `buf` with the bytes of `path`, refusing
    /// more than `max_bytes` with [`SampleError::FileTooLarge`]. Called
    /// concurrently from the reader threads.
    fn read(&self, path: &Path, buf: &mut Vec<u8>, max_bytes: u64) -> Result<(), SampleError>;

    /// Replace the contents of `buf` with `len` bytes of `path` from
    /// `offset` (a member of a tar shard). The default reads the whole file
    /// with [`read`](Self::read) and keeps the range; [`FileReader`] reads
    /// only the range.
    fn read_range(
        &self,
        path: &Path,
        offset: u64,
        len: u64,
        buf: &mut Vec<u8>,
        max_bytes: u64,
    ) -> Result<(), SampleError> {
        self.read(path, buf, u64::MAX)?;
        let (start, end) = (offset as usize, offset.saturating_add(len) as usize);
        if len > max_bytes {
            return Err(SampleError::FileTooLarge {
                bytes: len,
                limit: max_bytes,
            });
        }
        if end > buf.len() {
            return Err(SampleError::Truncated("the shard ends inside this member"));
        }
        buf.copy_within(start..end, 0);
        buf.truncate(end - start);
        Ok(())
    }
}

/// Whole files with one `fstat` and positioned reads (the default).
#[derive(Debug, Clone, Copy, Default)]
pub struct FileReader;

impl ReadBytes for FileReader {
    fn read(&self, path: &Path, buf: &mut Vec<u8>, max_bytes: u64) -> Result<(), SampleError> {
        read_file(path, buf, max_bytes)
    }

    fn read_range(
        &self,
        path: &Path,
        offset: u64,
        len: u64,
        buf: &mut Vec<u8>,
        max_bytes: u64,
    ) -> Result<(), SampleError> {
        buf.clear();
        if len > max_bytes {
            return Err(SampleError::FileTooLarge {
                bytes: len,
                limit: max_bytes,
            });
        }
        let file = File::open(path)?;
        read_at_into(&file, offset, len, buf)?;
        if buf.len() < len as usize {
            return Err(SampleError::Truncated("the shard ends inside this member"));
        }
        Ok(())
    }
}

/// Read all of `path` into `buf` (cleared first), refusing files over
/// `max_bytes`.
pub(crate) fn read_file(path: &Path, buf: &mut Vec<u8>, max_bytes: u64) -> Result<(), SampleError> {
    buf.clear();
    let file = File::open(path)?;
    let meta = file.metadata()?;
    if meta.is_dir() {
        return Err(SampleError::Read(io::Error::new(
            io::ErrorKind::IsADirectory,
            "is a directory",
        )));
    }
    let len = meta.len();
    if len > max_bytes {
        return Err(SampleError::FileTooLarge {
            bytes: len,
            limit: max_bytes,
        });
    }
    // A file that shrank after the fstat keeps what is there; the parser
    // reports the truncation with its own words.
    read_at_into(&file, 0, len, buf)
}

/// Fill `buf` with up to `len` bytes of `file` from `offset` by positioned
/// reads; shorter when the file ends first.
fn read_at_into(file: &File, offset: u64, len: u64, buf: &mut Vec<u8>) -> Result<(), SampleError> {
    buf.resize(len as usize, 0);
    let mut done = 0usize;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    buf.truncate(done);
    Ok(())
}
