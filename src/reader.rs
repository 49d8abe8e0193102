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
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crossbeam_channel::{Receiver, Sender};

use crate::error::SampleError;
use crate::sizes::Sizes;

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
    // `buf` is empty here: a new allocation of the right size, rather than
    // a realloc that copies the old one for nothing.
    if buf.capacity() < len as usize {
        *buf = Vec::new();
    }
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

/// The readers' buffer pool: read buffers cycle through a bounded channel,
/// and the pool decides their size.
///
/// A buffer is grown at once to the largest file read so far, up to the
/// size 19 files in 20 fit in (in 64 KiB steps; [`Sizes`]): a buffer that
/// held a larger file is replaced by one of that size when it comes back,
/// and the rare larger file allocates a buffer of its own. Without a bound
/// every buffer of the window (512 at batch 256) ended up as large as the
/// dataset's largest file: on 630 ImageNet-sized photos with 24 files of
/// 5-9 MB among them, the CPU backend's peak RSS climbed with each epoch
/// to 3.2 GB at epoch 20. The first bound, four times the mean file size,
/// still let those 24 files (4 % of them) raise every buffer to 1.3 MB:
/// 640 MiB of read buffers, where buffers that 19 files in 20 fit in hold
/// 96 MiB (docs/BENCHMARKS.md, "Read buffers").
///
/// The pool also counts what its buffers hold ([`Held`], reported by
/// `Pipeline::memory`): the spare ones in the pool and those lent out as
/// [`PooledBytes`]. A buffer a reader is filling at the moment is in
/// neither (at most one per reader thread).
#[derive(Clone, Debug)]
pub(crate) struct BufferPool {
    tx: Sender<Vec<u8>>,
    rx: Receiver<Vec<u8>>,
    book: Arc<Book>,
}

/// The sizes of the files read, and the capacity of the pool's buffers.
#[derive(Debug)]
struct Book {
    sizes: Sizes,
    /// Buffers in the pool.
    pooled: AtomicU64,
    /// Buffers lent out as `PooledBytes`. Each buffer's increment happens
    /// before its decrement (the buffer itself passes between the
    /// threads through channels), so neither count wraps.
    lent: AtomicU64,
}

/// A reading of a pool's buffers' capacity, kept by whoever reports
/// memory.
#[derive(Clone, Debug)]
pub(crate) struct Held(Arc<Book>);

impl Held {
    /// Bytes of capacity the pool's buffers hold, pooled and lent.
    pub(crate) fn bytes(&self) -> u64 {
        self.0.pooled.load(Relaxed) + self.0.lent.load(Relaxed)
    }
}

impl Default for Book {
    fn default() -> Book {
        Book {
            sizes: Sizes::new(64 << 10),
            pooled: AtomicU64::new(0),
            lent: AtomicU64::new(0),
        }
    }
}

impl BufferPool {
    /// A pool of `n` buffers, all empty until first used.
    pub(crate) fn new(n: usize) -> BufferPool {
        let (tx, rx) = crossbeam_channel::bounded(n);
        for _ in 0..n {
            let _ = tx.try_send(Vec::new());
        }
        BufferPool {
            tx,
            rx,
            book: Arc::default(),
        }
    }

    /// What the pool's buffers hold, readable while they cycle.
    pub(crate) fn held(&self) -> Held {
        Held(self.book.clone())
    }

    /// A buffer to read into: a pooled one, or a new one while they are
    /// all out.
    pub(crate) fn take(&self) -> Vec<u8> {
        self.pop().unwrap_or_default()
    }

    fn pop(&self) -> Option<Vec<u8>> {
        let buf = self.rx.try_recv().ok()?;
        self.book.pooled.fetch_sub(buf.capacity() as u64, Relaxed);
        Some(buf)
    }

    /// `buf` into the pool, or back to the caller when the pool is full.
    fn push(&self, buf: Vec<u8>) -> Result<(), Vec<u8>> {
        let n = buf.capacity() as u64;
        // Counted first: a taker may pop it before `try_send` returns.
        self.book.pooled.fetch_add(n, Relaxed);
        self.tx.try_send(buf).map_err(|e| {
            self.book.pooled.fetch_sub(n, Relaxed);
            e.into_inner()
        })
    }

    /// Note the file just read into `buf` and grow `buf` to the pool's
    /// buffer size.
    pub(crate) fn fit(&self, buf: &mut Vec<u8>) {
        let n = buf.len();
        let size = self.book.sizes.note(n);
        buf.reserve_exact(size.saturating_sub(n));
    }

    /// Take `buf` back. Never blocks. One larger than the pool's size is
    /// replaced by a new one of that size (not shrunk: a shrinking realloc
    /// may copy). The pool is full when the readers made new buffers while
    /// this one was out: the larger of it and the pool's oldest stays (a
    /// grown buffer is not traded for one still empty), the other is freed.
    pub(crate) fn give_back(&self, mut buf: Vec<u8>) {
        let size = self.book.sizes.size();
        if buf.capacity() > size {
            buf = Vec::with_capacity(size);
        }
        if let Err(buf) = self.push(buf)
            && let Some(old) = self.pop()
        {
            let _ = self.push(if old.capacity() >= buf.capacity() {
                old
            } else {
                buf
            });
        }
    }
}

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
    /// `buf`, given back to the pool `home` when dropped.
    pub(crate) fn new(buf: Vec<u8>, home: BufferPool) -> PooledBytes {
        home.book.lent.fetch_add(buf.capacity() as u64, Relaxed);
        PooledBytes {
            buf,
            home: Some(home),
        }
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
        if let Some(pool) = self.home.take() {
            pool.book
                .lent
                .fetch_sub(self.buf.capacity() as u64, Relaxed);
            pool.give_back(std::mem::take(&mut self.buf));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{BufferPool, PooledBytes};
    use crate::sizes::KEEP_AFTER as KEEP_AFTER_FILES;

    /// `n` bytes as just read by a reader, noted by the pool.
    fn read(pool: &BufferPool, n: usize) -> Vec<u8> {
        let mut buf = pool.take();
        buf.clear();
        buf.resize(n, 0);
        pool.fit(&mut buf);
        buf
    }

    #[test]
    fn a_loaned_buffer_comes_back_to_its_pool_and_a_full_pool_keeps_the_larger() {
        let pool = BufferPool::new(1);
        let b = read(&pool, 100);
        assert_eq!(b.capacity(), 100);
        drop(PooledBytes::new(b, pool.clone()));
        let back = pool.take();
        assert_eq!((back.len(), back.capacity()), (100, 100));

        // Full of an empty buffer: the grown one takes its place.
        pool.give_back(Vec::new());
        drop(PooledBytes::new(Vec::with_capacity(100), pool.clone()));
        assert_eq!(pool.take().capacity(), 100);
        assert!(pool.rx.try_recv().is_err(), "one buffer, not two");

        // Full of a grown one: the loaned one, still empty, is freed.
        pool.give_back(Vec::with_capacity(100));
        drop(PooledBytes::new(Vec::new(), pool.clone()));
        assert_eq!(pool.take().capacity(), 100);

        // Made without a pool: nothing comes back.
        drop(PooledBytes::from(vec![4; 10]));
        assert!(pool.rx.try_recv().is_err());
    }

    #[test]
    fn buffers_grow_to_the_largest_file_but_no_further_than_most_files_need() {
        let pool = BufferPool::new(4);
        // Until the sizes are trusted, buffers grow to the largest file.
        let big = read(&pool, 5 << 20);
        assert_eq!(big.capacity(), 5 << 20);
        pool.give_back(big);
        for _ in 2..KEEP_AFTER_FILES {
            let b = read(&pool, 100 << 10);
            assert_eq!(b.capacity(), 5 << 20);
            pool.give_back(b);
        }
        // From the 256th file on: the 64 KiB step that holds 19 files in
        // 20 (128 KiB). Each buffer comes back at that size.
        let small = read(&pool, 100 << 10);
        assert_eq!(small.capacity(), 5 << 20, "a buffer is not shrunk in use");
        pool.give_back(small);
        let held: Vec<_> = (0..4).map(|_| pool.take()).collect();
        held.into_iter().for_each(|b| pool.give_back(b));
        let caps: Vec<_> = (0..4).map(|_| pool.take().capacity()).collect();
        assert_eq!(caps, [128 << 10; 4]);
        caps.iter()
            .for_each(|&c| pool.give_back(Vec::with_capacity(c)));
        // A larger file grows its buffer only until the buffer comes back.
        let big = read(&pool, 5 << 20);
        assert!(big.capacity() >= 5 << 20);
        pool.give_back(big);
        assert_eq!(pool.take().capacity(), 128 << 10);
        // Once more than one file in 20 is larger (63 of 320 files of
        // 1 MiB, counted at the 320th), the buffers hold those too.
        for _ in 0..63 {
            pool.give_back(read(&pool, 1 << 20));
        }
        let held: Vec<_> = (0..4).map(|_| read(&pool, 100 << 10)).collect();
        let caps: Vec<_> = held.iter().map(|b| b.capacity()).collect();
        assert_eq!(caps, [1 << 20; 4]);
    }
}
