//! I/O: whole files into reusable buffers with positioned reads.
//!
//! Readers never touch pixels. A buffer is sized from one `fstat` of the
//! already-open file (never at listing time) and filled with `pread`, then
//! handed on; buffers cycle through a bounded pool so the memory held by
//! readers is fixed by the prefetch depth (plus, on the nvJPEG route, the
//! buffers of the samples still decoding: `PooledBytes`). On the hardware
//! engine's route the pool's buffers are page-locked blocks (`buf.rs`).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicU8, AtomicU64};

use crossbeam_channel::{Receiver, Sender};

use crate::error::SampleError;
use crate::sizes::Sizes;

mod buf;
pub(crate) use buf::{PinAlloc, PinnedBlock, Pinning, PoolSink, ReadBuf, Sink};

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
        read_range(path, offset, len, buf, max_bytes)
    }
}

/// Read all of `path` into `buf` (in place of what it held), refusing
/// files over `max_bytes`.
pub(crate) fn read_file<S: Sink + ?Sized>(
    path: &Path,
    buf: &mut S,
    max_bytes: u64,
) -> Result<(), SampleError> {
    buf.with_len(0);
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
    read_at_into(&file, 0, len, buf).map(|_| ())
}

/// Read `len` bytes of the shard `path` from `offset` (one member) into
/// `buf`, refusing more than `max_bytes`.
pub(crate) fn read_range<S: Sink + ?Sized>(
    path: &Path,
    offset: u64,
    len: u64,
    buf: &mut S,
    max_bytes: u64,
) -> Result<(), SampleError> {
    buf.with_len(0);
    if len > max_bytes {
        return Err(SampleError::FileTooLarge {
            bytes: len,
            limit: max_bytes,
        });
    }
    let file = File::open(path)?;
    if read_at_into(&file, offset, len, buf)? < len as usize {
        return Err(SampleError::Truncated("the shard ends inside this member"));
    }
    Ok(())
}

/// Fill `buf` with up to `len` bytes of `file` from `offset` by positioned
/// reads; shorter when the file ends first. Returns the bytes read.
fn read_at_into<S: Sink + ?Sized>(
    file: &File,
    offset: u64,
    len: u64,
    buf: &mut S,
) -> Result<usize, SampleError> {
    let want = buf.with_len(len as usize);
    let mut done = 0usize;
    while done < want.len() {
        match file.read_at(&mut want[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    buf.truncate(done);
    Ok(done)
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
/// With [`Pinning`] (the engine route) the pool makes `Pinning::blocks`
/// page-locked blocks of that bound once it is known (256 files in), or
/// as many as fit in `Pinning::bytes`, in
/// place of the heap buffers, and keeps them: a file larger than a block
/// is read into heap memory, and a block is never grown, shrunk or freed
/// while the pool lives (freeing page-locked memory waits for the device;
/// allocating it serialises streams, so it is done once, in one call on
/// CUDA).
///
/// The pool also counts what its buffers hold ([`Held`], reported by
/// `Pipeline::memory`): the spare ones in the pool and those lent out as
/// [`PooledBytes`]. A buffer a reader is filling at the moment is in
/// neither (at most one per reader thread).
#[derive(Clone, Debug)]
pub(crate) struct BufferPool {
    tx: Sender<ReadBuf>,
    rx: Receiver<ReadBuf>,
    book: Arc<Book>,
    pinned: Option<Pinned>,
}

/// The page-locked blocks' own channel, with room for all of them, so
/// that a block coming back always finds room.
#[derive(Clone, Debug)]
struct Pinned {
    with: Pinning,
    tx: Sender<ReadBuf>,
    rx: Receiver<ReadBuf>,
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
    /// Bytes of the page-locked blocks.
    pinned_bytes: AtomicU64,
    /// `PIN_NONE` until the blocks are made (`PIN_ALL`, `PIN_SOME`) or
    /// the driver refused them (`PIN_REFUSED`: the pool asks no more).
    pin_state: AtomicU8,
}

const PIN_NONE: u8 = 0;
const PIN_MAKING: u8 = 1;
/// Made: one block per buffer, or fewer (`Pinning::bytes`).
const PIN_ALL: u8 = 2;
const PIN_SOME: u8 = 3;
const PIN_REFUSED: u8 = 4;

/// A reading of a pool's buffers' capacity, kept by whoever reports
/// memory.
#[derive(Clone, Debug)]
pub(crate) struct Held(Arc<Book>);

impl Held {
    /// Bytes of capacity the pool's buffers hold, pooled and lent.
    pub(crate) fn bytes(&self) -> u64 {
        self.0.pooled.load(Relaxed) + self.0.lent.load(Relaxed)
    }

    /// Bytes of the page-locked blocks the pool made, wherever they are.
    pub(crate) fn pinned_bytes(&self) -> u64 {
        self.0.pinned_bytes.load(Relaxed)
    }
}

impl Default for Book {
    fn default() -> Book {
        Book {
            sizes: Sizes::new(64 << 10),
            pooled: AtomicU64::new(0),
            lent: AtomicU64::new(0),
            pinned_bytes: AtomicU64::new(0),
            pin_state: AtomicU8::new(PIN_NONE),
        }
    }
}

impl BufferPool {
    /// A pool of `n` buffers, all empty until first used, and page-locked
    /// ones with `pinning`.
    pub(crate) fn new(n: usize, pinning: Option<Pinning>) -> BufferPool {
        let (tx, rx) = crossbeam_channel::bounded(n.max(1));
        for _ in 0..n {
            let _ = tx.try_send(ReadBuf::default());
        }
        let pinned = pinning.map(|with| {
            let (tx, rx) = crossbeam_channel::bounded(with.blocks.max(1));
            Pinned { with, tx, rx }
        });
        BufferPool {
            tx,
            rx,
            book: Arc::default(),
            pinned,
        }
    }

    /// What the pool's buffers hold, readable while they cycle.
    pub(crate) fn held(&self) -> Held {
        Held(self.book.clone())
    }

    /// A buffer to read into: a spare page-locked block where the pool
    /// has them, else a pooled heap buffer, or a new one while they are
    /// all out. The first take after the pool's bound is known makes the
    /// blocks.
    pub(crate) fn take(&self) -> ReadBuf {
        if let Some(p) = &self.pinned {
            if self.book.pin_state.load(Acquire) == PIN_NONE {
                self.pin(p);
            }
            if let Some(buf) = self.pop(&p.rx) {
                return buf;
            }
        }
        self.pop(&self.rx).unwrap_or_default()
    }

    /// `buf` as the sink of a read, which may trade it for another.
    pub(crate) fn sink<'a>(&'a self, buf: &'a mut ReadBuf) -> PoolSink<'a> {
        PoolSink { buf, pool: self }
    }

    /// Make all the page-locked blocks at once, of the pool's bound, once
    /// it is known (one thread; the others read into heap buffers
    /// meanwhile), and free the spare heap buffers they replace: so that
    /// read buffers change once, not as the buffers out at once reach
    /// their most.
    fn pin(&self, p: &Pinned) {
        let b = &self.book;
        let Some(size) = b.sizes.bound() else { return };
        if b.pin_state
            .compare_exchange(PIN_NONE, PIN_MAKING, AcqRel, Acquire)
            .is_err()
        {
            return;
        }
        let count = p.with.blocks.min(p.with.bytes / size);
        let made = (count > 0)
            .then(|| p.with.alloc.alloc(count, size))
            .flatten();
        let Some(blocks) = made else {
            b.pin_state.store(PIN_REFUSED, Release);
            return;
        };
        b.pinned_bytes
            .fetch_add((blocks.len() * size) as u64, Relaxed);
        for block in blocks {
            let _ = self.push(ReadBuf::pinned(block));
        }
        // Fewer blocks than buffers (large files): the heap buffers serve
        // the rest, pooled as before.
        let all = count >= p.with.blocks;
        b.pin_state
            .store(if all { PIN_ALL } else { PIN_SOME }, Release);
        if all {
            while self.pop(&self.rx).is_some() {}
        }
    }

    /// Whether the pool's page-locked blocks are one per buffer that can
    /// be out at once, so that heap buffers are lent only while a block is
    /// being made or a file is larger than a block.
    fn pinned_all(&self) -> bool {
        self.book.pin_state.load(Acquire) == PIN_ALL
    }

    fn pop(&self, rx: &Receiver<ReadBuf>) -> Option<ReadBuf> {
        let buf = rx.try_recv().ok()?;
        self.book.pooled.fetch_sub(buf.capacity() as u64, Relaxed);
        Some(buf)
    }

    /// `buf` into the pool, or back to the caller when there is no room.
    fn push(&self, buf: ReadBuf) -> Result<(), ReadBuf> {
        let tx = match &self.pinned {
            Some(p) if buf.is_pinned() => &p.tx,
            _ => &self.tx,
        };
        let n = buf.capacity() as u64;
        // Counted first: a taker may pop it before `try_send` returns.
        self.book.pooled.fetch_add(n, Relaxed);
        tx.try_send(buf).map_err(|e| {
            self.book.pooled.fetch_sub(n, Relaxed);
            e.into_inner()
        })
    }

    /// Note the file just read into `buf` and grow `buf` to the pool's
    /// buffer size (a page-locked block keeps its size).
    pub(crate) fn fit(&self, buf: &mut ReadBuf) {
        let n = buf.len();
        let size = self.book.sizes.note(n);
        if let Some(v) = buf.heap_mut() {
            v.reserve_exact(size.saturating_sub(n));
        }
    }

    /// Take `buf` back. Never blocks. A page-locked block always has room.
    /// A heap buffer larger than the pool's size is replaced by a new one
    /// of that size (not shrunk: a shrinking realloc may copy), and is
    /// freed once the pool has made all its page-locked blocks (it was
    /// lent while they were all out). The heap buffers' pool is full when
    /// the readers made new buffers while this one was out: the larger of
    /// it and the pool's oldest stays (a grown buffer is not traded for one
    /// still empty), the other is freed.
    pub(crate) fn give_back(&self, mut buf: ReadBuf) {
        let size = self.book.sizes.size();
        if let Some(v) = buf.heap_mut() {
            if self.pinned_all() {
                return;
            }
            if v.capacity() > size {
                *v = Vec::with_capacity(size);
            }
        }
        if let Err(buf) = self.push(buf) {
            if buf.is_pinned() {
                // Not while the pool lives: its channel has room for all.
                return;
            }
            if let Some(old) = self.pop(&self.rx) {
                let keep = if old.capacity() >= buf.capacity() {
                    old
                } else {
                    buf
                };
                let _ = self.push(keep);
            }
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
    buf: ReadBuf,
    home: Option<BufferPool>,
}

impl PooledBytes {
    /// `buf`, given back to the pool `home` when dropped.
    pub(crate) fn new(buf: ReadBuf, home: BufferPool) -> PooledBytes {
        home.book.lent.fetch_add(buf.capacity() as u64, Relaxed);
        PooledBytes {
            buf,
            home: Some(home),
        }
    }

    /// Whether the bytes are in page-locked memory: a kernel lane copies
    /// such a file to the device from where it is.
    pub(crate) fn is_pinned(&self) -> bool {
        self.buf.is_pinned()
    }
}

impl From<Vec<u8>> for PooledBytes {
    fn from(buf: Vec<u8>) -> PooledBytes {
        PooledBytes {
            buf: buf.into(),
            home: None,
        }
    }
}

impl std::ops::Deref for PooledBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.buf.as_slice()
    }
}

impl std::fmt::Debug for PooledBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PooledBytes")
            .field("len", &self.buf.len())
            .field("pinned", &self.buf.is_pinned())
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
    use std::sync::Arc;

    use super::{BufferPool, PinAlloc, PinnedBlock, Pinning, PooledBytes, ReadBuf, Sink};
    use crate::sizes::KEEP_AFTER as KEEP_AFTER_FILES;

    /// `n` bytes as just read by a reader, noted by the pool.
    fn read(pool: &BufferPool, n: usize) -> ReadBuf {
        let mut buf = pool.take();
        pool.sink(&mut buf).with_len(n).fill(7);
        pool.fit(&mut buf);
        buf
    }

    fn heap(capacity: usize) -> ReadBuf {
        Vec::with_capacity(capacity).into()
    }

    #[test]
    fn a_loaned_buffer_comes_back_to_its_pool_and_a_full_pool_keeps_the_larger() {
        let pool = BufferPool::new(1, None);
        let b = read(&pool, 100);
        assert_eq!(b.capacity(), 100);
        drop(PooledBytes::new(b, pool.clone()));
        let back = pool.take();
        assert_eq!((back.len(), back.capacity()), (100, 100));

        // Full of an empty buffer: the grown one takes its place.
        pool.give_back(ReadBuf::default());
        drop(PooledBytes::new(heap(100), pool.clone()));
        assert_eq!(pool.take().capacity(), 100);
        assert!(pool.rx.try_recv().is_err(), "one buffer, not two");

        // Full of a grown one: the loaned one, still empty, is freed.
        pool.give_back(heap(100));
        drop(PooledBytes::new(ReadBuf::default(), pool.clone()));
        assert_eq!(pool.take().capacity(), 100);

        // Made without a pool: nothing comes back.
        drop(PooledBytes::from(vec![4; 10]));
        assert!(pool.rx.try_recv().is_err());
    }

    #[test]
    fn buffers_grow_to_the_largest_file_but_no_further_than_most_files_need() {
        let pool = BufferPool::new(4, None);
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
        caps.iter().for_each(|&c| pool.give_back(heap(c)));
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

    /// Heap memory standing in for page-locked blocks, counting them.
    #[derive(Debug, Default)]
    struct Blocks {
        made: std::sync::atomic::AtomicUsize,
        refuse: bool,
    }

    impl PinAlloc for Blocks {
        fn alloc(&self, count: usize, bytes: usize) -> Option<Vec<Box<dyn PinnedBlock>>> {
            if self.refuse {
                return None;
            }
            self.made
                .fetch_add(count, std::sync::atomic::Ordering::Relaxed);
            let block = |_| -> Box<dyn PinnedBlock> { Box::new(vec![0u8; bytes]) };
            Some((0..count).map(block).collect())
        }
    }

    fn pinning(blocks: usize, refuse: bool) -> (Arc<Blocks>, BufferPool) {
        let alloc = Arc::new(Blocks {
            refuse,
            ..Blocks::default()
        });
        let with = Pinning {
            alloc: alloc.clone(),
            blocks,
            bytes: 1 << 20,
        };
        (alloc, BufferPool::new(2, Some(with)))
    }

    fn made(b: &Blocks) -> usize {
        b.made.load(std::sync::atomic::Ordering::Relaxed)
    }

    #[test]
    fn page_locked_blocks_are_made_once_the_bound_is_known_and_then_only_reused() {
        let (alloc, pool) = pinning(3, false);
        for _ in 0..KEEP_AFTER_FILES - 1 {
            let b = read(&pool, 100 << 10);
            assert!(!b.is_pinned(), "no bound yet");
            pool.give_back(b);
        }
        // The 256th file sets the bound (128 KiB); the next read makes the
        // three blocks of that size, and readers get them while they last.
        pool.give_back(read(&pool, 100 << 10));
        let out: Vec<_> = (0..5).map(|_| read(&pool, 100 << 10)).collect();
        let pinned: Vec<_> = out.iter().map(ReadBuf::is_pinned).collect();
        assert_eq!(pinned, [true, true, true, false, false]);
        assert!(out.iter().all(|b| b.as_slice() == [7; 100 << 10]));
        assert_eq!(pool.held().pinned_bytes(), 3 * (128 << 10));
        let lent: Vec<_> = out
            .into_iter()
            .map(|b| PooledBytes::new(b, pool.clone()))
            .collect();
        assert!(lent[0].is_pinned() && lent[0][..] == [7; 100 << 10]);
        drop(lent);
        // All three came back, and the heap buffers lent beside them were
        // freed: the pool keeps only blocks now.
        for _ in 0..100 {
            let b = read(&pool, 90 << 10);
            assert!(b.is_pinned());
            pool.give_back(b);
        }
        assert_eq!(made(&alloc), 3);
        assert_eq!(pool.held().pinned_bytes(), 3 * (128 << 10));
        assert_eq!(pool.held().bytes(), 3 * (128 << 10));
    }

    #[test]
    fn a_file_larger_than_a_block_is_read_into_heap_memory_and_the_block_stays() {
        let (alloc, pool) = pinning(1, false);
        for _ in 0..KEEP_AFTER_FILES {
            pool.give_back(read(&pool, 100 << 10));
        }
        let big = read(&pool, 1 << 20);
        assert!(!big.is_pinned());
        assert_eq!(big.as_slice(), vec![7; 1 << 20]);
        pool.give_back(big);
        // The one block went back to the pool when the file did not fit.
        let b = read(&pool, 100 << 10);
        assert!(b.is_pinned());
        assert_eq!(made(&alloc), 1);
        // A reader that fills a Vec gets heap memory, and the block goes
        // back too.
        let mut buf = b;
        pool.sink(&mut buf).vec().extend_from_slice(b"abc");
        assert!(!buf.is_pinned());
        assert!(pool.take().is_pinned());
        assert_eq!(made(&alloc), 1);
    }

    #[test]
    fn blocks_take_no_more_than_their_byte_limit() {
        // 100 blocks wanted, 1 MiB allowed: 8 of 128 KiB.
        let (alloc, pool) = pinning(100, false);
        for _ in 0..KEEP_AFTER_FILES {
            pool.give_back(read(&pool, 100 << 10));
        }
        let out: Vec<_> = (0..10).map(|_| read(&pool, 100 << 10)).collect();
        assert_eq!(out.iter().filter(|b| b.is_pinned()).count(), 8);
        assert_eq!(made(&alloc), 8);
        assert_eq!(pool.held().pinned_bytes(), 1 << 20);
        // The heap buffers lent beside them stay pooled: they serve the
        // buffers the blocks do not cover.
        out.into_iter().for_each(|b| pool.give_back(b));
        assert_eq!(pool.held().bytes(), (1 << 20) + 2 * (100 << 10));
        // Files larger than the limit itself: no blocks at all.
        let (alloc, pool) = pinning(100, false);
        for _ in 0..KEEP_AFTER_FILES {
            pool.give_back(read(&pool, 2 << 20));
        }
        assert!(!read(&pool, 2 << 20).is_pinned());
        assert_eq!(made(&alloc), 0);
    }

    #[test]
    fn a_driver_that_refuses_blocks_leaves_heap_buffers() {
        let (_, pool) = pinning(4, true);
        for _ in 0..KEEP_AFTER_FILES + 10 {
            let b = read(&pool, 100 << 10);
            assert!(!b.is_pinned());
            pool.give_back(b);
        }
        // The heap buffers cycle as without pinning.
        assert_eq!(pool.held().pinned_bytes(), 0);
        assert_eq!(pool.held().bytes(), 2 * (100 << 10));
    }

    #[test]
    fn a_read_fills_a_block_as_it_fills_a_vec() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..70_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let (_, pool) = pinning(1, false);
        for _ in 0..KEEP_AFTER_FILES {
            pool.give_back(read(&pool, 100 << 10));
        }
        let mut buf = pool.take();
        assert!(buf.is_pinned());
        super::read_file(&path, &mut pool.sink(&mut buf), u64::MAX).unwrap();
        assert_eq!(buf.as_slice(), &data[..]);
        super::read_range(&path, 1000, 500, &mut pool.sink(&mut buf), u64::MAX).unwrap();
        assert_eq!(buf.as_slice(), &data[1000..1500]);
        assert!(buf.is_pinned());
        let e = super::read_range(&path, 69_900, 500, &mut pool.sink(&mut buf), u64::MAX);
        assert!(e.is_err(), "a member past the shard's end");
        let mut v = Vec::new();
        super::read_file(&path, &mut v, u64::MAX).unwrap();
        assert_eq!(v, data);
    }
}
