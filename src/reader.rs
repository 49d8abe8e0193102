//! I/O: whole files into reusable buffers with positioned reads.
//!
//! Readers never touch pixels. A buffer is sized from one `fstat` of the
//! already-open file (never at listing time) and filled with `pread`, then
//! handed on; buffers cycle through a bounded pool so the memory held by
//! readers is fixed by the prefetch depth (plus, on the nvJPEG route, the
//! buffers of the samples still decoding: `PooledBytes`).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crossbeam_channel::{Receiver, Sender, TrySendError};

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

/// The readers' buffer pool: a bounded channel's two ends.
pub(crate) type BufferPool = (Sender<Vec<u8>>, Receiver<Vec<u8>>);

/// A read buffer on loan from the readers' pool: it derefs to the bytes
/// read, and dropping it sends the buffer back to the pool. The nvJPEG
/// route keeps a sample's compressed bytes until its decode lands, so the
/// worker hands the reader's buffer on instead of a copy of it (issue 16,
/// item 4: about 9 µs per engine image went to that copy). One made
/// `From<Vec<u8>>` has no pool and is freed like a `Vec`.
#[derive(Default)]
pub(crate) struct PooledBytes {
    buf: Vec<u8>,
    home: Option<BufferPool>,
}

impl PooledBytes {
    /// `buf`, given back to the pool `home` (both ends of its channel)
    /// when dropped.
    pub(crate) fn new(buf: Vec<u8>, home: BufferPool) -> PooledBytes {
        PooledBytes {
            buf,
            home: Some(home),
        }
    }

    /// The buffer itself, no longer bound for the pool.
    pub(crate) fn into_vec(mut self) -> Vec<u8> {
        self.home = None;
        std::mem::take(&mut self.buf)
    }
}

impl From<Vec<u8>> for PooledBytes {
    fn from(buf: Vec<u8>) -> PooledBytes {
        PooledBytes { buf, home: None }
    }
}

impl std::ops::Deref for PooledBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf
    }
}

impl std::fmt::Debug for PooledBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PooledBytes")
            .field("len", &self.buf.len())
            .field("pooled", &self.home.is_some())
            .finish()
    }
}

impl Drop for PooledBytes {
    fn drop(&mut self) {
        let Some((tx, rx)) = self.home.take() else {
            return;
        };
        // Never blocks. The pool is full when the readers made new buffers
        // while this one was out: the larger of it and the pool's oldest
        // stays (a buffer grown to the largest file is not traded for one
        // still empty), the other is freed.
        if let Err(TrySendError::Full(buf)) = tx.try_send(std::mem::take(&mut self.buf))
            && let Ok(old) = rx.try_recv()
        {
            let _ = tx.try_send(if old.capacity() >= buf.capacity() {
                old
            } else {
                buf
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::PooledBytes;

    #[test]
    fn a_loaned_buffer_comes_back_to_its_pool_and_a_full_pool_keeps_the_larger() {
        let pool = crossbeam_channel::bounded::<Vec<u8>>(1);
        drop(PooledBytes::new(vec![7; 100], pool.clone()));
        let back = pool.1.try_recv().unwrap();
        assert_eq!((back.len(), back.capacity()), (100, 100));

        // Full of an empty buffer: the grown one takes its place.
        pool.0.try_send(Vec::new()).unwrap();
        let b = PooledBytes::new(Vec::with_capacity(4096), pool.clone());
        drop(b);
        assert_eq!(pool.1.try_recv().unwrap().capacity(), 4096);
        assert!(pool.1.try_recv().is_err(), "one buffer, not two");

        // Full of a larger one: the loaned one is freed.
        pool.0.try_send(Vec::with_capacity(8192)).unwrap();
        drop(PooledBytes::new(Vec::with_capacity(16), pool.clone()));
        assert_eq!(pool.1.try_recv().unwrap().capacity(), 8192);

        // Taken out for good, or made without a pool: nothing comes back.
        let v = PooledBytes::new(vec![1, 2, 3], pool.clone()).into_vec();
        assert_eq!(v, [1, 2, 3]);
        drop(PooledBytes::from(vec![4; 10]));
        assert!(pool.1.try_recv().is_err());
    }
}
