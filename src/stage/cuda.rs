//! CUDA memory and work of the pipeline's device stage (issue 4): pinned
//! staging, device buffers and the per-batch copy + launches. The packing
//! logic that decides what goes where lives in `stage/mod.rs` and is the
//! same for the emulated device; this file is only the CUDA side of it.
//!
//! Every buffer is allocated when the pipeline is built (one set per batch
//! slot) and reused; nothing here allocates per batch.

// The CUDA backend of the stage: pinned memory and raw copies, each
// `unsafe` block with its SAFETY comment.
#![allow(unsafe_code)]

use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::{
    CudaContext, CudaEvent, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, result,
};

use crate::augment::DType;
use crate::augment::TensorData;
pub(crate) use crate::cuda::buffer::OutBuf;
use crate::cuda::launch::AugmentKernels;
pub(crate) use crate::cuda::launch::{LaunchKind, StageLaunch};
use crate::cuda::timeline::{GpuTimeline, Observe};
use crate::error::{Error, Result};

/// Page-locked host memory from `cuMemHostAlloc`, freed on drop.
struct Pinned {
    ctx: Arc<CudaContext>,
    ptr: *mut u8,
    len: usize,
}

// SAFETY: cuMemHostAlloc returns ordinary host memory that is page-locked
// and registered with the driver (CUDA Driver API, cuMemHostAlloc); any
// thread may access it. `Pinned` owns it exclusively, so moving it between
// threads moves the only access path.
unsafe impl Send for Pinned {}

impl Pinned {
    /// `len` bytes, page-locked for `ctx`, or for every context with
    /// `portable`.
    fn new(ctx: &Arc<CudaContext>, len: usize, portable: bool) -> Result<Pinned> {
        ctx.bind_to_thread().map_err(Error::cuda("bind context"))?;
        let flags = if portable {
            cudarc::driver::sys::CU_MEMHOSTALLOC_PORTABLE
        } else {
            0
        };
        // SAFETY: a plain allocation call (page-locked for this context, or
        // every context with PORTABLE; not mapped, not write-combined); the
        // returned pointer is checked before use.
        let ptr = unsafe { result::malloc_host(len.max(1), flags) }
            .map_err(Error::cuda("cuMemHostAlloc (pinned staging)"))?;
        if ptr.is_null() {
            return Err(Error::Device("cuMemHostAlloc returned null".into()));
        }
        Ok(Pinned {
            ctx: ctx.clone(),
            ptr: ptr.cast(),
            len,
        })
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` is a live allocation of `len` bytes owned by self;
        // the &mut borrow of self makes this the only reference. Callers
        // wait for the device's last read (CudaSlot::ready) before writing.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    fn as_slice(&self) -> &[u8] {
        // SAFETY: as above, shared borrow.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

// SAFETY: a shared `&Pinned` gives plain reads of host memory, which any
// thread may make (CUDA Driver API, cuMemHostAlloc: the memory is
// ordinary host memory, page-locked); writes need `&mut`, or, for a
// slab's parts (`SlabPart`), a part of their own.
unsafe impl Sync for Pinned {}

/// The readers' page-locked blocks (issue 16, item 4), in the stage's
/// context: parts of one slab, made in one `cuMemHostAlloc` call (each
/// call serialises the device's streams), page-locked for every context:
/// the engine lanes may run on one of their own
/// (`PipelineBuilder::engine_context`). nvJPEG's hardware decode copies
/// each file by DMA from them; the engine lane keeps a file's buffer until
/// the call's completion event (`nvroute.rs`), so a reader refills it only
/// after that copy.
#[derive(Debug)]
pub(crate) struct PinnedReads(Arc<CudaContext>);

impl PinnedReads {
    pub(crate) fn new(ctx: &Arc<CudaContext>) -> PinnedReads {
        PinnedReads(ctx.clone())
    }
}

impl crate::reader::PinAlloc for PinnedReads {
    fn alloc(
        &self,
        count: usize,
        bytes: usize,
    ) -> Option<Vec<Box<dyn crate::reader::PinnedBlock>>> {
        let slab = Arc::new(Pinned::new(&self.0, count.checked_mul(bytes)?, true).ok()?);
        Some(
            (0..count)
                .map(|i| -> Box<dyn crate::reader::PinnedBlock> {
                    Box::new(SlabPart {
                        slab: slab.clone(),
                        at: i * bytes,
                        len: bytes,
                    })
                })
                .collect(),
        )
    }
}

/// `len` bytes of a slab from `at`: the parts of a slab never overlap.
struct SlabPart {
    slab: Arc<Pinned>,
    at: usize,
    len: usize,
}

impl crate::reader::PinnedBlock for SlabPart {
    fn bytes(&self) -> &[u8] {
        // SAFETY: `at..at + len` lies in the slab (made so by
        // `PinnedReads::alloc`), which the Arc keeps alive; no other part
        // covers these bytes, and writes to them need `&mut self`.
        unsafe { std::slice::from_raw_parts(self.slab.ptr.add(self.at), self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above; `&mut self` makes this the only reference to
        // this part's bytes (the slab itself is never sliced whole).
        unsafe { std::slice::from_raw_parts_mut(self.slab.ptr.add(self.at), self.len) }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        // Errors cannot be reported from drop; a failed free leaks the
        // buffer rather than panicking.
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: `ptr` came from cuMemHostAlloc in this context and is
            // freed once; CudaSlot::drop waited for the device's last read.
            let _ = unsafe { result::free_host(self.ptr.cast()) };
        }
    }
}

/// One batch slot's CUDA memory besides its outputs.
pub(crate) struct CudaSlot {
    pinned: Pinned,
    staging: CudaSlice<u8>,
    labels: CudaSlice<u32>,
    /// Mixup's soft labels (issue 19): `batch × classes`, or 1 unused.
    soft: CudaSlice<f32>,
    /// Recorded after the slot's last enqueued work: the trainer's stream
    /// waits on it, and the host waits on it before writing `pinned` again.
    ready: CudaEvent,
    host_free: bool,
    /// With a timeline (`trace(true)`): recorded as each flush begins, and
    /// whether the flush since has not been reported yet.
    gpu: Option<SlotTimeline>,
}

/// A slot's part in the GPU timeline.
struct SlotTimeline {
    timeline: Arc<GpuTimeline>,
    began: CudaEvent,
    pending: bool,
}

/// The stage stream's track in the timeline.
const STAGE_TRACK: &str = "GPU: stage stream";

/// A flush's span there: its staging copies, kernels and label copies (not
/// the CUDA route's device phases queued on the stream before it).
pub(crate) const FLUSH_SPAN: &str = "copies and kernels";

impl std::fmt::Debug for CudaSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaSlot")
            .field("staging_bytes", &self.pinned.len)
            .finish_non_exhaustive()
    }
}

impl CudaSlot {
    pub(crate) fn labels(&self) -> &CudaSlice<u32> {
        &self.labels
    }

    pub(crate) fn soft_labels(&self) -> &CudaSlice<f32> {
        &self.soft
    }

    pub(crate) fn event(&self) -> &CudaEvent {
        &self.ready
    }

    pub(crate) fn pinned_bytes(&self) -> usize {
        self.pinned.len
    }

    pub(crate) fn device_bytes(&self) -> usize {
        self.staging.num_bytes() + self.labels.num_bytes() + self.soft.num_bytes()
    }

    /// Wait for the slot's last work.
    pub(crate) fn recycle(&mut self) -> Result<()> {
        self.ready
            .synchronize()
            .map_err(Error::cuda("wait for slot"))?;
        self.host_free = true;
        self.report();
        Ok(())
    }

    /// Put the last flush on the timeline; `ready` has fired.
    fn report(&mut self) {
        if let Some(g) = &mut self.gpu
            && std::mem::take(&mut g.pending)
        {
            g.timeline
                .span(STAGE_TRACK, FLUSH_SPAN, &g.began, &self.ready);
        }
    }
}

impl Drop for CudaSlot {
    fn drop(&mut self) {
        // The pinned buffer may still be the source of an async copy.
        let _ = self.ready.synchronize();
    }
}

/// Where nvJPEG writes one decode group's images (RGB interleaved) for the
/// kernel (issue 16, item 1): a few exist, so that the engine decodes the
/// next batch into one while the kernel reads the last from another.
pub(crate) struct CudaArena {
    buf: CudaSlice<u8>,
    /// Recorded on the stage's stream after the last launch that reads the
    /// arena. The host waits on it before the arena takes new decodes: the
    /// engine writes from a stream of its own, and the H100's hardware path
    /// is reported not to honour stream order alone (issue 16, item 3b).
    released: CudaEvent,
    recorded: bool,
}

impl std::fmt::Debug for CudaArena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaArena")
            .field("bytes", &self.buf.len())
            .finish_non_exhaustive()
    }
}

impl CudaArena {
    pub(crate) fn len(&self) -> usize {
        self.buf.len()
    }
}

impl Drop for CudaArena {
    fn drop(&mut self) {
        // Launches may still read it; the free below is stream-ordered on
        // the stage's stream, but the engine's is not.
        if self.recorded {
            let _ = self.released.synchronize();
        }
    }
}

/// The CUDA device of a pipeline: its kernels and stream.
pub(crate) struct CudaEngine {
    k: AugmentKernels,
    name: String,
    /// GPU spans for the pipeline's timeline (`trace(true)`).
    timeline: Option<Arc<GpuTimeline>>,
}

impl std::fmt::Debug for CudaEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaEngine")
            .field("name", &self.name)
            .field("arch", &self.k.arch)
            .finish_non_exhaustive()
    }
}

impl CudaEngine {
    /// Open device `index` and load the kernels, those of `needs`
    /// compiled at the same time (`KernelNeeds`); an error (never a panic)
    /// without a driver or device.
    pub(crate) fn new(index: usize, needs: crate::cuda::launch::KernelNeeds) -> Result<CudaEngine> {
        let k = AugmentKernels::with(index, needs)?;
        let name = k.ctx.name().unwrap_or_else(|_| format!("cuda:{index}"));
        Ok(CudaEngine {
            k,
            name,
            timeline: None,
        })
    }

    /// Load the photometric and mix kernels now where the pipeline uses
    /// them (they are otherwise loaded at their first launch).
    pub(crate) fn prepare_kernels(&self, photo: bool, mix: bool) -> Result<()> {
        self.k.prepare(photo, mix)
    }

    /// Report GPU spans to `observe` (a timeline tied to this device's
    /// clock); slots allocated after this take part.
    pub(crate) fn watch(&mut self, observe: Observe) -> Result<Arc<GpuTimeline>> {
        let t = GpuTimeline::new(&self.k.ctx, observe).map_err(Error::cuda("timeline"))?;
        self.timeline = Some(t.clone());
        Ok(t)
    }

    /// Device name and CUBIN architecture, for notices.
    pub(crate) fn describe(&self) -> String {
        format!("{} ({})", self.name, self.k.arch)
    }

    /// The context, for users that create their own streams on it.
    pub(crate) fn context(&self) -> &Arc<CudaContext> {
        &self.k.ctx
    }

    /// Allocate one slot: `staging` bytes pinned and on the device, room for
    /// `batch` labels and `soft` soft-label values, and one output of `len`
    /// elements per `(dtype, len)`.
    pub(crate) fn alloc_slot(
        &self,
        staging: usize,
        (batch, soft): (usize, usize),
        outs: &[(DType, usize)],
    ) -> Result<(CudaSlot, Vec<OutBuf>)> {
        let s = &self.k.stream;
        let pinned = Pinned::new(&self.k.ctx, staging, false)?;
        let staging = s
            .alloc_zeros::<u8>(staging)
            .map_err(Error::cuda("allocate staging"))?;
        let labels = s
            .alloc_zeros::<u32>(batch)
            .map_err(Error::cuda("allocate labels"))?;
        let soft = s
            .alloc_zeros::<f32>(soft.max(1))
            .map_err(Error::cuda("allocate soft labels"))?;
        // The trainer and the staging refill wait on it from the host.
        let ready = crate::cuda::host_wait_event(&self.k.ctx).map_err(Error::cuda("event"))?;
        let outs = outs
            .iter()
            .map(|&(d, n)| OutBuf::alloc(s, d, n))
            .collect::<Result<Vec<_>>>()?;
        let gpu = match &self.timeline {
            Some(t) => Some(SlotTimeline {
                timeline: t.clone(),
                began: t.event().map_err(Error::cuda("event"))?,
                pending: false,
            }),
            None => None,
        };
        let slot = CudaSlot {
            pinned,
            staging,
            labels,
            soft,
            ready,
            host_free: false,
            gpu,
        };
        Ok((slot, outs))
    }

    /// A decode arena of `bytes`.
    pub(crate) fn alloc_arena(&self, bytes: usize) -> Result<CudaArena> {
        let mut arena = CudaArena {
            buf: self
                .k
                .stream
                .alloc_zeros::<u8>(bytes.max(1))
                .map_err(Error::cuda("allocate decode arena"))?,
            released: crate::cuda::host_wait_event(&self.k.ctx).map_err(Error::cuda("event"))?,
            recorded: false,
        };
        // The zeroing is queued on the stage's stream; the engine writes
        // from its own, so its first use waits for it like any other.
        self.release_arena(&mut arena)?;
        Ok(arena)
    }

    /// Mark the end of the reads of `arena` queued so far on the stage's
    /// stream (the launches that read its images).
    pub(crate) fn release_arena(&self, arena: &mut CudaArena) -> Result<()> {
        self.k
            .ctx
            .bind_to_thread()
            .map_err(Error::cuda("bind context"))?;
        arena
            .released
            .record(&self.k.stream)
            .map_err(Error::cuda("record arena event"))?;
        arena.recorded = true;
        Ok(())
    }

    /// Wait (a blocking sync, not a spin) until the launches that read
    /// `arena` last have finished, so that new decodes may write it.
    pub(crate) fn reuse_arena(&self, arena: &mut CudaArena) -> Result<()> {
        if arena.recorded {
            arena
                .released
                .synchronize()
                .map_err(Error::cuda("wait for arena"))?;
            arena.recorded = false;
        }
        Ok(())
    }

    /// Wait for everything queued on the stage's stream (the decode
    /// benchmark's end of a batch).
    pub(crate) fn synchronize(&self) -> Result<()> {
        self.k
            .stream
            .synchronize()
            .map_err(Error::cuda("wait for stream"))
    }

    /// The slot's host staging, once the device has finished reading it.
    pub(crate) fn host<'a>(&self, slot: &'a mut CudaSlot) -> Result<&'a mut [u8]> {
        if !slot.host_free {
            slot.ready
                .synchronize()
                .map_err(Error::cuda("wait for staging"))?;
            slot.host_free = true;
            slot.report();
        }
        Ok(slot.pinned.as_mut_slice())
    }

    /// The device address of staging byte 0 (what tiles point into).
    pub(crate) fn base(&self, slot: &CudaSlot) -> u64 {
        let (ptr, _record) = slot.staging.device_ptr(&self.k.stream);
        ptr
    }

    /// Device memory for the photometric planes (issue 19): `len` f32.
    pub(crate) fn alloc_scratch(&self, len: usize) -> Result<CudaSlice<f32>> {
        self.k
            .stream
            .alloc_zeros::<f32>(len.max(1))
            .map_err(Error::cuda("allocate photometric scratch"))
    }

    /// Device address of a scratch buffer's first element.
    pub(crate) fn scratch_base(&self, scratch: &CudaSlice<f32>) -> u64 {
        let (ptr, _record) = scratch.device_ptr(&self.k.stream);
        ptr
    }

    /// Copy `ranges` of the staging to the device, run `launches`, then copy
    /// `labels` (byte ranges of the pinned staging holding the labels, u32,
    /// and the soft labels, f32) into the slot's label buffers, and record
    /// the slot's event. Asynchronous.
    /// Launches into the photometric scratch need `scratch`; every launch
    /// is on the stage's one stream, so the next round of draws writes the
    /// scratch only after the previous round's photometric kernel read it.
    pub(crate) fn flush(
        &self,
        slot: &mut CudaSlot,
        ranges: &[Range<usize>],
        launches: &[StageLaunch],
        outs: &mut [&mut OutBuf],
        mut scratch: Option<&mut CudaSlice<f32>>,
        labels: Option<(Range<usize>, Range<usize>)>,
    ) -> Result<()> {
        let s = &self.k.stream;
        self.k
            .ctx
            .bind_to_thread()
            .map_err(Error::cuda("bind context"))?;
        if let Some(g) = &mut slot.gpu {
            // An earlier flush not yet reported (no host wait came between)
            // merges into this one's span.
            if !g.pending {
                g.began.record(s).map_err(Error::cuda("record event"))?;
                g.pending = true;
            }
        }
        {
            let host = slot.pinned.as_slice();
            let (dev, _record) = slot.staging.device_ptr_mut(s);
            for r in ranges.iter().filter(|r| !r.is_empty()) {
                assert!(r.end <= host.len());
                // SAFETY: the source is r.len() bytes of live pinned memory
                // that is not written until `ready` (recorded below, after
                // this copy) completes; the destination is the same range of
                // the device staging buffer, which has the same length.
                unsafe {
                    result::memcpy_htod_async(dev + r.start as u64, &host[r.clone()], s.cu_stream())
                }
                .map_err(Error::cuda("copy staging to device"))?;
            }
        }
        let base = self.base(slot);
        for l in launches {
            let tiles = base + l.tiles_at as u64;
            let Some(v) = l.out else {
                let scratch = scratch
                    .as_deref_mut()
                    .ok_or_else(|| Error::Device("no photometric scratch (stage bug)".into()))?;
                // SAFETY: as below; the output is the f32 scratch, which
                // the f32 NCHW augment kernel (`which`) writes, each tile
                // inside it (stage/photo.rs packs them).
                unsafe { self.k.launch_at(l.which, tiles, l.params, scratch) }?;
                continue;
            };
            // SAFETY: the descriptors were written by stage/mod.rs into
            // the staging copied above; each points into that staging buffer
            // (or the arena, or the scratch) at pixels written before it on
            // this stream and writes inside `outs[v]`, whose element type
            // matches kernel `which` (chosen from the output's dtype).
            // For a mix: the output's batch holds `n` images, all written by
            // the launches before it on this stream.
            unsafe {
                match &mut *outs[v] {
                    OutBuf::U8(o) => self.k.launch_any(l.kind, l.which, tiles, l.params, o),
                    OutBuf::F16(o) => self.k.launch_any(l.kind, l.which, tiles, l.params, o),
                    OutBuf::BF16(o) => self.k.launch_any(l.kind, l.which, tiles, l.params, o),
                    OutBuf::F32(o) => self.k.launch_any(l.kind, l.which, tiles, l.params, o),
                }
            }?;
        }
        let (hard, soft) = labels.unzip();
        let host = slot.pinned.as_slice();
        copy_labels(host, hard, &mut slot.labels, s)?;
        copy_labels(host, soft, &mut slot.soft, s)?;
        slot.ready.record(s).map_err(Error::cuda("record event"))?;
        slot.host_free = false;
        Ok(())
    }

    /// Copy one sample augmented on the host into `out` at element `at`
    /// (the route for regions larger than the staging).
    pub(crate) fn upload_sample(
        &self,
        out: &mut OutBuf,
        at: usize,
        data: &TensorData,
    ) -> Result<()> {
        let s = &self.k.stream;
        let e = Error::cuda("upload host-augmented sample");
        // Copies from pageable memory are staged by the driver before the
        // call returns (CUDA Runtime API, "API synchronization behavior"),
        // so `data` may be reused right after.
        match (out, data) {
            (OutBuf::U8(o), TensorData::U8(v)) => {
                s.memcpy_htod(v.as_slice(), &mut o.slice_mut(at..at + v.len()))
            }
            (OutBuf::F16(o), TensorData::F16(v)) => {
                s.memcpy_htod(v.as_slice(), &mut o.slice_mut(at..at + v.len()))
            }
            (OutBuf::BF16(o), TensorData::BF16(v)) => {
                s.memcpy_htod(v.as_slice(), &mut o.slice_mut(at..at + v.len()))
            }
            (OutBuf::F32(o), TensorData::F32(v)) => {
                s.memcpy_htod(v.as_slice(), &mut o.slice_mut(at..at + v.len()))
            }
            _ => {
                return Err(Error::Device(
                    "host sample dtype differs from the output".into(),
                ));
            }
        }
        .map_err(e)
    }
}

/// Copy the pinned staging's byte range `r` (if any) to the start of `dst`
/// on `s`, asynchronously.
fn copy_labels<T: cudarc::driver::DeviceRepr>(
    host: &[u8],
    r: Option<Range<usize>>,
    dst: &mut CudaSlice<T>,
    s: &CudaStream,
) -> Result<()> {
    let Some(r) = r.filter(|r| !r.is_empty()) else {
        return Ok(());
    };
    assert!(r.len() <= dst.num_bytes() && r.end <= host.len());
    let (ptr, _w) = dst.device_ptr_mut(s);
    // Straight from the pinned staging: the flush's `ranges` cover pixels
    // and tiles only, so the device staging never holds the labels.
    // SAFETY: the source is live pinned memory not written until the slot's
    // `ready` (recorded after this) completes; the destination holds at
    // least `r.len()` bytes (asserted).
    unsafe { result::memcpy_htod_async(ptr, &host[r], s.cu_stream()) }
        .map_err(Error::cuda("copy labels"))
}

mod engine_lane;
mod nvroute;
mod prog_route;
pub(crate) use engine_lane::EngineLanes;
pub(crate) use nvroute::{JpegJob, JpegOutcome, NvRoute, RouteCounts, Submitted};
