//! Read buffers: heap memory, or page-locked memory that the hardware
//! JPEG engine's copies read straight from (issue 16, item 4).
//!
//! nvJPEG's hardware decode copies each file from the pointer it is given
//! to the device. From pageable memory that copy is the driver's: it
//! copies the file into a page-locked staging buffer of its own on the
//! calling thread, and the call returns once the staging is done. A CUPTI
//! window of the engine route (H200, 4bbffad) counted 3,861 such copies a
//! second, 229 MB, all pageable, on the engine lanes' threads; the lanes'
//! `cudaMemcpyAsync` calls took 620 ms of each second. From page-locked
//! memory the copy is a DMA the call only queues. So on the engine route
//! the readers' pool hands out page-locked blocks and the readers `pread`
//! into them: the bytes are copied once, by the kernel, and never again
//! by a CPU.

use std::sync::Arc;

/// Page-locked host memory for the readers' pool, from the device stage
/// (`cuMemHostAlloc` on CUDA; heap memory standing in for it on the
/// emulated device, so that CI runs the pool's pinned paths).
pub(crate) trait PinAlloc: Send + Sync + std::fmt::Debug {
    /// `count` blocks of `bytes` bytes each, or `None` where the driver
    /// refuses: the pool then reads into heap memory.
    fn alloc(&self, count: usize, bytes: usize) -> Option<Vec<Box<dyn PinnedBlock>>>;
}

/// A page-locked block's bytes. Freeing one (`cuMemFreeHost`) waits for
/// the device, so the pool keeps its blocks for its life.
pub(crate) trait PinnedBlock: Send + Sync {
    fn bytes(&self) -> &[u8];
    fn bytes_mut(&mut self) -> &mut [u8];
}

/// Heap memory as a block: the emulated device's stand-in for page-locked
/// memory, and the tests'.
impl PinnedBlock for Vec<u8> {
    fn bytes(&self) -> &[u8] {
        self
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        self
    }
}

/// The pool's setting for page-locked buffers.
#[derive(Debug, Clone)]
pub(crate) struct Pinning {
    pub(crate) alloc: Arc<dyn PinAlloc>,
    /// The most blocks the pool makes: the buffers that can be out at once
    /// (the window's, plus the samples of the decode groups in flight,
    /// which keep theirs until their decode lands).
    pub(crate) blocks: usize,
    /// The most bytes they may take together: fewer blocks where the
    /// files are large (multi-megapixel photos), the rest heap buffers.
    pub(crate) bytes: usize,
}

/// A read buffer: heap memory, or a page-locked block holding `len`
/// bytes (then `heap` is empty).
#[derive(Default)]
pub(crate) struct ReadBuf {
    heap: Vec<u8>,
    pinned: Option<(Box<dyn PinnedBlock>, usize)>,
}

impl From<Vec<u8>> for ReadBuf {
    fn from(heap: Vec<u8>) -> ReadBuf {
        ReadBuf { heap, pinned: None }
    }
}

impl ReadBuf {
    /// An empty buffer in a page-locked block.
    pub(crate) fn pinned(block: Box<dyn PinnedBlock>) -> ReadBuf {
        ReadBuf {
            heap: Vec::new(),
            pinned: Some((block, 0)),
        }
    }

    /// Bytes the buffer holds room for.
    pub(crate) fn capacity(&self) -> usize {
        match &self.pinned {
            Some((block, _)) => block.bytes().len(),
            None => self.heap.capacity(),
        }
    }

    pub(crate) fn is_pinned(&self) -> bool {
        self.pinned.is_some()
    }

    /// The bytes read.
    pub(crate) fn as_slice(&self) -> &[u8] {
        match &self.pinned {
            Some((block, len)) => &block.bytes()[..*len],
            None => &self.heap,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.as_slice().len()
    }

    /// The heap buffer, to grow (nothing where the buffer is pinned).
    pub(super) fn heap_mut(&mut self) -> Option<&mut Vec<u8>> {
        self.pinned.is_none().then_some(&mut self.heap)
    }
}

impl std::fmt::Debug for ReadBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadBuf")
            .field("len", &self.len())
            .field("capacity", &self.capacity())
            .field("pinned", &self.is_pinned())
            .finish()
    }
}

/// Where a read puts a file's bytes.
pub(crate) trait Sink {
    /// `len` bytes to fill, in place of what the sink held (their contents
    /// are unspecified).
    fn with_len(&mut self, len: usize) -> &mut [u8];
    /// Keep the first `n` bytes (`n` at most the length given last).
    fn truncate(&mut self, n: usize);
    /// The bytes as a `Vec`, for a [`ReadBytes`](super::ReadBytes) that fills one.
    fn vec(&mut self) -> &mut Vec<u8>;
}

impl Sink for Vec<u8> {
    fn with_len(&mut self, len: usize) -> &mut [u8] {
        // A new allocation of the right size rather than a realloc that
        // copies the old contents for nothing.
        if self.capacity() < len {
            *self = Vec::new();
        }
        self.clear();
        self.resize(len, 0);
        self
    }

    fn truncate(&mut self, n: usize) {
        Vec::truncate(self, n);
    }

    fn vec(&mut self) -> &mut Vec<u8> {
        self
    }
}

/// A pool buffer being filled: a page-locked block too small for the file
/// goes back to the pool, and the file gets heap memory (as any file
/// larger than the pool's buffers does).
pub(crate) struct PoolSink<'a> {
    pub(super) buf: &'a mut ReadBuf,
    pub(super) pool: &'a super::BufferPool,
}

impl PoolSink<'_> {
    /// Trade a page-locked block for heap memory, unless it holds `len`.
    fn unpin_under(&mut self, len: usize) {
        if self.buf.capacity() < len
            && let Some(p) = self.buf.pinned.take()
        {
            self.pool.give_back(ReadBuf {
                heap: Vec::new(),
                pinned: Some(p),
            });
        }
    }
}

impl Sink for PoolSink<'_> {
    fn with_len(&mut self, len: usize) -> &mut [u8] {
        self.unpin_under(len);
        match &mut self.buf.pinned {
            Some((block, at)) => {
                *at = len;
                &mut block.bytes_mut()[..len]
            }
            None => self.buf.heap.with_len(len),
        }
    }

    fn truncate(&mut self, n: usize) {
        match &mut self.buf.pinned {
            Some((_, len)) => *len = n.min(*len),
            None => self.buf.heap.truncate(n),
        }
    }

    fn vec(&mut self) -> &mut Vec<u8> {
        self.unpin_under(usize::MAX);
        &mut self.buf.heap
    }
}
