//! nvJPEG's memory, counted and bounded (issue 16, item 5).
//!
//! nvJPEG allocates its pinned and device buffers itself and grows them to
//! the largest image a state or buffer has met; nothing in its API says how
//! much it holds. Handles and buffers made here take nvJPEG's V2 allocators
//! (`nvjpegCreateExV2`, `nvjpegBuffer{Pinned,Device}CreateV2`; nvJPEG docs,
//! "nvJPEG Memory Allocators"), whose context pointer is a [`Meter`]: every
//! allocation nvJPEG makes through that handle goes through
//! `cuMemAlloc`/`cuMemHostAlloc` here and is counted in the meter's
//! [`Ledger`], which may refuse it. A refused allocation is
//! `NVJPEG_STATUS_ALLOCATOR_FAILURE` to the call that wanted it, and the
//! pipeline decodes that image another way (the batch thread's decoder, or
//! the CPU), so a limit costs speed, never samples.
//!
//! `GPUFEED_NVJPEG_METER=0` makes handles with nvJPEG's own allocators
//! instead (nothing counted, nothing bounded): a diagnostic for a GPU box,
//! like `GPUFEED_NVJPEG_FLAGS`.

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::CudaContext;

use super::sys;

/// Which memory an allocation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Page-locked host memory.
    Pinned,
    /// Device memory.
    Device,
}

/// Bytes held, by kind, against a limit on their sum; the peak of the sum.
/// Pure bookkeeping, shared by threads.
#[derive(Debug)]
pub(crate) struct Ledger {
    pinned: AtomicU64,
    device: AtomicU64,
    total: AtomicU64,
    peak: AtomicU64,
    /// Buffers taken from the driver (`Stats::decoder_allocations`).
    allocations: AtomicU64,
    limit: u64,
}

impl Ledger {
    /// A ledger that refuses charges taking the sum past `limit` bytes.
    pub(crate) fn new(limit: u64) -> Ledger {
        Ledger {
            pinned: AtomicU64::new(0),
            device: AtomicU64::new(0),
            total: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            allocations: AtomicU64::new(0),
            limit,
        }
    }

    fn kind(&self, kind: Kind) -> &AtomicU64 {
        match kind {
            Kind::Pinned => &self.pinned,
            Kind::Device => &self.device,
        }
    }

    /// Count `n` more bytes of `kind`, unless the sum would pass the limit.
    pub(crate) fn charge(&self, kind: Kind, n: u64) -> bool {
        let took = self
            .total
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                t.checked_add(n).filter(|&s| s <= self.limit)
            });
        match took {
            Ok(before) => {
                self.kind(kind).fetch_add(n, Ordering::AcqRel);
                self.peak.fetch_max(before + n, Ordering::AcqRel);
                true
            }
            Err(_) => false,
        }
    }

    /// Count `n` bytes of `kind` as given back.
    pub(crate) fn refund(&self, kind: Kind, n: u64) {
        let down = |v: u64| Some(v.saturating_sub(n));
        let _ = self
            .kind(kind)
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, down);
        let _ = self
            .total
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, down);
    }

    /// `(pinned, device)` bytes held now.
    pub(crate) fn held(&self) -> (u64, u64) {
        (
            self.pinned.load(Ordering::Acquire),
            self.device.load(Ordering::Acquire),
        )
    }

    /// Pinned plus device bytes held now.
    pub(crate) fn total(&self) -> u64 {
        self.total.load(Ordering::Acquire)
    }

    /// The most bytes held at once so far.
    pub(crate) fn peak(&self) -> u64 {
        self.peak.load(Ordering::Acquire)
    }

    /// The limit on the sum.
    pub(crate) fn limit(&self) -> u64 {
        self.limit
    }

    /// Count one buffer taken from the driver (or, on the emulated device,
    /// one buffer grown).
    pub(crate) fn note_allocation(&self) {
        self.allocations.fetch_add(1, Ordering::Relaxed);
    }

    /// Buffers taken from the driver so far. Each one, and its free
    /// (`cuMemFree`, `cuMemFreeHost`), waits for the whole device's work:
    /// a count still rising after the first epoch stalls every stream.
    pub(crate) fn allocations(&self) -> u64 {
        self.allocations.load(Ordering::Relaxed)
    }
}

/// The allocations one meter has handed out, by address: what a free
/// gives back is the size that was allocated, whatever size nvJPEG passes
/// to the free callback.
#[derive(Debug, Default)]
struct Book(HashMap<usize, (Kind, u64)>);

impl Book {
    fn open(&mut self, ptr: usize, kind: Kind, n: u64) {
        self.0.insert(ptr, (kind, n));
    }

    fn close(&mut self, ptr: usize) -> Option<(Kind, u64)> {
        self.0.remove(&ptr)
    }
}

/// Counts (and bounds) what nvJPEG allocates through the handles made with
/// it. Handles hold it in an `Arc`, so it outlives every allocation they
/// make and free.
#[derive(Debug)]
pub(crate) struct Meter {
    ledger: Arc<Ledger>,
    book: Mutex<Book>,
    ctx: Arc<CudaContext>,
}

/// cudaErrorMemoryAllocation: what an allocator callback returns on
/// failure (nvJPEG reads any non-zero value as failure).
const ALLOC_FAILED: c_int = 2;

impl Meter {
    /// A meter allocating on `ctx`'s device, counting into `ledger`.
    pub(crate) fn new(ctx: &Arc<CudaContext>, ledger: Arc<Ledger>) -> Arc<Meter> {
        Arc::new(Meter {
            ledger,
            book: Mutex::new(Book::default()),
            ctx: ctx.clone(),
        })
    }

    /// Whether handles take metered allocators (`GPUFEED_NVJPEG_METER`).
    pub(crate) fn enabled() -> bool {
        std::env::var("GPUFEED_NVJPEG_METER").as_deref() != Ok("0")
    }

    /// The allocators to give nvJPEG; their context pointer is `self`,
    /// which the caller keeps alive (in an `Arc`) as long as anything made
    /// with them.
    pub(crate) fn allocators(
        self: &Arc<Self>,
    ) -> (sys::nvjpegDevAllocatorV2_t, sys::nvjpegPinnedAllocatorV2_t) {
        let ctx = Arc::as_ptr(self).cast_mut().cast::<c_void>();
        (
            sys::nvjpegDevAllocatorV2_t {
                dev_malloc: Some(malloc::<false>),
                dev_free: Some(free),
                dev_ctx: ctx,
            },
            sys::nvjpegPinnedAllocatorV2_t {
                pinned_malloc: Some(malloc::<true>),
                pinned_free: Some(free),
                pinned_ctx: ctx,
            },
        )
    }

    /// The context the meter allocates on.
    pub(super) fn ctx(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Allocate `n` bytes of `kind` if the ledger allows: the address, or
    /// `None` (refused, or the driver failed).
    fn alloc(&self, kind: Kind, n: usize) -> Option<usize> {
        if !self.ledger.charge(kind, n as u64) {
            return None;
        }
        let ptr = self.in_ctx(|| match kind {
            // SAFETY: a plain allocation with the meter's context current
            // (in_ctx); the pointer is handed to nvJPEG and freed by `free`.
            Kind::Device => unsafe { cudarc::driver::result::malloc_sync(n) }
                .ok()
                .map(|p| p as usize),
            // SAFETY: as above. PORTABLE: pinned for every context, as
            // cudaHostAlloc memory is under unified addressing.
            Kind::Pinned => unsafe {
                cudarc::driver::result::malloc_host(
                    n,
                    cudarc::driver::sys::CU_MEMHOSTALLOC_PORTABLE,
                )
            }
            .ok()
            .map(|p| p as usize),
        });
        match ptr {
            Some(p) if p != 0 => {
                self.book().open(p, kind, n as u64);
                self.ledger.note_allocation();
                Some(p)
            }
            _ => {
                self.ledger.refund(kind, n as u64);
                None
            }
        }
    }

    /// Free what [`alloc`](Self::alloc) gave out at `ptr`.
    fn free(&self, ptr: usize) -> bool {
        let Some((kind, n)) = self.book().close(ptr) else {
            return false;
        };
        self.ledger.refund(kind, n);
        self.in_ctx(|| match kind {
            // SAFETY: `ptr` came from malloc_sync above (the book says so)
            // and nvJPEG frees it once, when no work of its uses it.
            Kind::Device => unsafe { cudarc::driver::result::free_sync(ptr as u64) }.ok(),
            Kind::Pinned => {
                // SAFETY: `ptr` came from malloc_host above, freed once.
                unsafe { cudarc::driver::result::free_host(ptr as *mut c_void) }.ok()
            }
        })
        .is_some()
    }

    /// Run `f` with the meter's context current on this thread. nvJPEG
    /// may call back from any thread, a trainer's too (a pipeline dropped
    /// there frees its decoders): a context that thread had current is
    /// made current again afterwards.
    fn in_ctx<T>(&self, f: impl FnOnce() -> Option<T>) -> Option<T> {
        let before = cudarc::driver::result::ctx::get_current().ok()?;
        self.ctx.bind_to_thread().ok()?;
        let out = f();
        if let Some(b) = before
            && b != self.ctx.cu_ctx()
        {
            // SAFETY: `b` was this thread's current context a moment ago
            // and its owner still holds it (we only borrowed the thread).
            let _ = unsafe { cudarc::driver::result::ctx::set_current(b) };
        }
        out
    }
}

/// A buffer of gpufeed's own taken through a meter, counted in its ledger
/// like nvJPEG's and freed on drop: the engine's bitstreams on the device
/// (`device_input.rs`).
pub(super) struct Slab {
    meter: Arc<Meter>,
    ptr: usize,
    len: usize,
}

impl Slab {
    /// `len` bytes of `kind`, or `None` where the ledger refuses them or
    /// the driver fails.
    pub(super) fn new(meter: &Arc<Meter>, kind: Kind, len: usize) -> Option<Slab> {
        let len = len.max(1);
        let ptr = meter.alloc(kind, len)?;
        Some(Slab {
            meter: meter.clone(),
            ptr,
            len,
        })
    }

    /// The address: a device pointer, or a host pointer for pinned memory.
    pub(super) fn ptr(&self) -> usize {
        self.ptr
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Slab {
    fn drop(&mut self) {
        // The owner lets no queued work use the slab past its drop
        // (`device_input.rs`); the free is booked, so it happens once.
        let _ = self.meter.free(self.ptr);
    }
}

/// The allocator callbacks. nvJPEG calls them with the context pointer of
/// [`Meter::allocators`]; they never unwind (nothing in them panics).
fn callback_alloc(ctx: *mut c_void, out: *mut *mut c_void, size: usize, kind: Kind) -> c_int {
    if ctx.is_null() || out.is_null() {
        return ALLOC_FAILED;
    }
    // SAFETY: `ctx` is `Arc::as_ptr` of a Meter that the handle holds
    // alive for as long as nvJPEG may call back (Meter::allocators).
    let meter = unsafe { &*ctx.cast::<Meter>() };
    let ptr = if size == 0 {
        Some(0)
    } else {
        meter.alloc(kind, size)
    };
    match ptr {
        Some(p) => {
            // SAFETY: nvJPEG passes a live slot for the address.
            unsafe { *out = p as *mut c_void };
            0
        }
        None => ALLOC_FAILED,
    }
}

fn callback_free(ctx: *mut c_void, ptr: *mut c_void) -> c_int {
    if ctx.is_null() || ptr.is_null() {
        return 0;
    }
    // SAFETY: as in callback_alloc.
    let meter = unsafe { &*ctx.cast::<Meter>() };
    if meter.free(ptr as usize) {
        0
    } else {
        ALLOC_FAILED
    }
}

/// nvJPEG's `tDevMallocV2` / `tPinnedMallocV2`, one for each kind.
unsafe extern "C" fn malloc<const PINNED: bool>(
    ctx: *mut c_void,
    ptr: *mut *mut c_void,
    size: usize,
    _stream: sys::cudaStream_t,
) -> c_int {
    let kind = if PINNED { Kind::Pinned } else { Kind::Device };
    callback_alloc(ctx, ptr, size, kind)
}

/// nvJPEG's `tDevFreeV2` / `tPinnedFreeV2`: the book knows the kind.
unsafe extern "C" fn free(
    ctx: *mut c_void,
    ptr: *mut c_void,
    _size: usize,
    _stream: sys::cudaStream_t,
) -> c_int {
    callback_free(ctx, ptr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ledger_counts_refuses_and_keeps_the_peak() {
        let l = Ledger::new(100);
        assert!(l.charge(Kind::Pinned, 60));
        assert!(l.charge(Kind::Device, 30));
        assert!(!l.charge(Kind::Device, 11), "would pass the limit");
        assert_eq!(l.held(), (60, 30));
        assert!(l.charge(Kind::Device, 10));
        assert_eq!((l.total(), l.peak()), (100, 100));
        l.refund(Kind::Pinned, 60);
        assert_eq!((l.held(), l.total(), l.peak()), ((0, 40), 40, 100));
        assert!(l.charge(Kind::Pinned, 50));
        assert_eq!(l.peak(), 100);
        // A refund never takes a count below zero.
        l.refund(Kind::Device, 1_000);
        assert_eq!(l.held(), (50, 0));
        assert!(!Ledger::new(10).charge(Kind::Pinned, u64::MAX), "overflow");
    }

    #[test]
    fn the_ledger_holds_its_limit_under_threads() {
        let l = Arc::new(Ledger::new(1_000));
        let hs: Vec<_> = (0..8)
            .map(|_| {
                let l = l.clone();
                std::thread::spawn(move || (0..500).filter(|_| l.charge(Kind::Device, 7)).count())
            })
            .collect();
        let won: usize = hs.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(won, 1_000 / 7);
        assert_eq!(l.total(), won as u64 * 7);
        assert!(l.peak() <= 1_000);
    }

    #[test]
    fn frees_give_back_what_was_booked() {
        let mut b = Book::default();
        b.open(0x1000, Kind::Device, 64);
        b.open(0x2000, Kind::Pinned, 32);
        assert_eq!(b.close(0x1000), Some((Kind::Device, 64)));
        assert_eq!(b.close(0x1000), None, "freed once");
        assert_eq!(b.close(0x3000), None, "never ours");
        assert_eq!(b.close(0x2000), Some((Kind::Pinned, 32)));
    }
}
