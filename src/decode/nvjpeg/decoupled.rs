//! The decoupled API (issue 5, item 2): one image at a time in three
//! phases, so the CPU part can run on the thread that owns the decoder and
//! the GPU parts queue on a stream (nvJPEG docs, "Decoupled Decoding"):
//!
//! ```text
//! nvjpegJpegStreamParse → nvjpegDecodeJpegHost        (this thread: Huffman)
//!   → nvjpegDecodeJpegTransferToDevice                 (async H2D, pinned →
//!   → nvjpegDecodeJpegDevice                            device buffer; IDCT,
//!                                                       colour, on the stream)
//! ```
//!
//! Baseline images of at least [`GPU_HUFFMAN_MIN_PIXELS`] that the
//! `NVJPEG_BACKEND_GPU_HYBRID` decoder takes are Huffman-decoded on the GPU
//! instead; the rest by `NVJPEG_BACKEND_HYBRID` on this thread. (The
//! batched API's GPU Huffman crashed on fuzzed files, `BatchedDecoder::new`;
//! this decoder's met the corpus's fuzzed files of 1 MP and more without
//! harm on an H100, tests/nvjpeg_decode.rs, docs/RELIABILITY.md.) Both
//! decoders write interleaved RGB with an optional crop window
//! (nvjpegDecodeParamsSetROI), so the CUDA route can decode only the crop
//! as the hardware engine does.
//!
//! Two pinned buffers can take turns (what nvImageCodec's CUDA decoder does):
//! the host phase of image n+1 fills one while the copy of image n reads
//! the other; an event per buffer says when its copy has run. The device
//! buffer needs no such care: every use is on the one stream, in order.
//!
//! The pipeline's CUDA route: workers run the host phase, the batch
//! thread the transfer and device phase ([`DecoderPool`]); `HostDecoder`
//! exposes it to the GPU tests.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use cudarc::driver::{CudaContext, CudaEvent, CudaStream};

use super::Roi;
use super::batched::{DecodeParams, Dest, JpegState, JpegStream};
use super::fit::Fit;
use super::pool::{self, Pool};
use super::{Handle, Kind, Ledger, Meter, sys};
use crate::error::{Error, Result};

/// Pixels from which an image's Huffman decoding goes to the GPU, where
/// the GPU decoder takes it: DALI's and nvImageCodec's default
/// (`hybrid_huffman_threshold`, 1000 × 1000). Smaller images decode faster
/// on a CPU thread than their GPU launch overhead allows.
pub(crate) const GPU_HUFFMAN_MIN_PIXELS: u64 = 1_000_000;

/// [`GPU_HUFFMAN_MIN_PIXELS`], unless `GPUFEED_NVJPEG_GPU_HUFFMAN_MIN_PIXELS`
/// (a number) replaces it: a diagnostic for measuring GPU Huffman decoding
/// on the whole CUDA share (0: every image it takes; issue 16, item 3c),
/// like `GPUFEED_NVJPEG_GPU_HUFFMAN=0`, which turns it off.
fn gpu_huffman_min_pixels() -> u64 {
    static MIN: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *MIN.get_or_init(|| {
        std::env::var("GPUFEED_NVJPEG_GPU_HUFFMAN_MIN_PIXELS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(GPU_HUFFMAN_MIN_PIXELS)
    })
}

/// `nvjpegJpegDecoder_t`: one backend's decoder object.
struct JpegDecoder {
    raw: sys::nvjpegJpegDecoder_t,
    handle: Arc<Handle>,
}

impl JpegDecoder {
    fn new(handle: &Arc<Handle>, backend: sys::nvjpegBackend_t) -> Result<JpegDecoder> {
        let mut raw: sys::nvjpegJpegDecoder_t = std::ptr::null_mut();
        let out: *mut sys::nvjpegJpegDecoder_t = &mut raw;
        // The handle is live (held by the Arc); `out` is a live slot.
        call!(&handle.lib, nvjpegDecoderCreate(handle.raw, backend, out))?;
        Ok(JpegDecoder {
            raw,
            handle: handle.clone(),
        })
    }
}

impl Drop for JpegDecoder {
    fn drop(&mut self) {
        // Destroyed once, after the states made from it (field order of
        // `Backend`), before the handle (held by Arc).
        let _ = call!(&self.handle.lib, nvjpegDecoderDestroy(self.raw));
    }
}

/// `nvjpegBufferPinned_t`: page-locked host memory a state's host phase
/// writes and its transfer reads. Grows to the largest image seen.
struct PinnedBuffer {
    raw: sys::nvjpegBufferPinned_t,
    handle: Arc<Handle>,
}

impl PinnedBuffer {
    fn new(handle: &Arc<Handle>) -> Result<PinnedBuffer> {
        let mut raw: sys::nvjpegBufferPinned_t = std::ptr::null_mut();
        let out: *mut sys::nvjpegBufferPinned_t = &mut raw;
        match handle.meter() {
            Some(m) if handle.lib.lib.nvjpegBufferPinnedCreateV2.is_ok() => {
                let (_, mut pin) = m.allocators();
                let p: *mut sys::nvjpegPinnedAllocatorV2_t = &mut pin;
                // The allocator's context, the meter, lives as long as the
                // handle this buffer holds; `out` is live.
                call!(&handle.lib, nvjpegBufferPinnedCreateV2(handle.raw, p, out))?;
            }
            _ => {
                let default_alloc: *mut sys::nvjpegPinnedAllocator_t = std::ptr::null_mut();
                // Null selects nvJPEG's default pinned allocator; `out` is
                // live.
                call!(
                    &handle.lib,
                    nvjpegBufferPinnedCreate(handle.raw, default_alloc, out)
                )?;
            }
        }
        Ok(PinnedBuffer {
            raw,
            handle: handle.clone(),
        })
    }

    /// Bytes the buffer holds now (`nvjpegBufferPinnedRetrieve`).
    fn size(&self) -> Result<usize> {
        let (mut size, mut ptr) = (0usize, std::ptr::null_mut());
        let (s, p): (*mut usize, *mut *mut std::ffi::c_void) = (&mut size, &mut ptr);
        // The buffer is live (owned by self); both out-pointers are live.
        call!(&self.handle.lib, nvjpegBufferPinnedRetrieve(self.raw, s, p))?;
        Ok(size)
    }

    /// Grow the buffer to `size` bytes. Its contents are lost: the caller
    /// has waited for the last copy that read it.
    fn resize(&self, size: usize) -> Result<()> {
        // The buffer is live; no copy reads it (the caller waited). The
        // null stream: the old memory is freed by the handle's allocator,
        // whose free waits for the device (meter.rs, or cudaFreeHost).
        call!(
            &self.handle.lib,
            nvjpegBufferPinnedResize(self.raw, size, std::ptr::null_mut())
        )
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        // The owner synchronizes the buffer's last copy before dropping it
        // (DecoupledDecoder's Drop).
        let _ = call!(&self.handle.lib, nvjpegBufferPinnedDestroy(self.raw));
    }
}

/// `nvjpegBufferDevice_t`: device memory for the coefficients between the
/// transfer and the device phase.
struct DeviceBuffer {
    raw: sys::nvjpegBufferDevice_t,
    handle: Arc<Handle>,
}

impl DeviceBuffer {
    fn new(handle: &Arc<Handle>) -> Result<DeviceBuffer> {
        let mut raw: sys::nvjpegBufferDevice_t = std::ptr::null_mut();
        let out: *mut sys::nvjpegBufferDevice_t = &mut raw;
        match handle.meter() {
            Some(m) if handle.lib.lib.nvjpegBufferDeviceCreateV2.is_ok() => {
                let (mut dev, _) = m.allocators();
                let d: *mut sys::nvjpegDevAllocatorV2_t = &mut dev;
                // As for the pinned buffer: the meter outlives the buffer.
                call!(&handle.lib, nvjpegBufferDeviceCreateV2(handle.raw, d, out))?;
            }
            _ => {
                let default_alloc: *mut sys::nvjpegDevAllocator_t = std::ptr::null_mut();
                // Null selects cudaMalloc/cudaFree; `out` is a live slot.
                call!(
                    &handle.lib,
                    nvjpegBufferDeviceCreate(handle.raw, default_alloc, out)
                )?;
            }
        }
        Ok(DeviceBuffer {
            raw,
            handle: handle.clone(),
        })
    }

    /// Bytes the buffer holds now (`nvjpegBufferDeviceRetrieve`).
    fn size(&self) -> Result<usize> {
        let (mut size, mut ptr) = (0usize, std::ptr::null_mut());
        let (s, p): (*mut usize, *mut *mut std::ffi::c_void) = (&mut size, &mut ptr);
        // The buffer is live (owned by self); both out-pointers are live.
        call!(&self.handle.lib, nvjpegBufferDeviceRetrieve(self.raw, s, p))?;
        Ok(size)
    }

    /// Grow the buffer to `size` bytes. The device phase before may still
    /// read the old memory: it is freed by the handle's allocator, whose
    /// free waits for the device (`cuMemFree` in meter.rs, or nvJPEG's
    /// `cudaFree`), so nothing reads memory given back.
    fn resize(&self, size: usize) -> Result<()> {
        // The buffer is live and not in a call on another thread (owned
        // by self); the old memory's free waits for its last reader.
        call!(
            &self.handle.lib,
            nvjpegBufferDeviceResize(self.raw, size, std::ptr::null_mut())
        )
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        let _ = call!(&self.handle.lib, nvjpegBufferDeviceDestroy(self.raw));
    }
}

/// One backend: its decoder and the state made from it (field order is
/// drop order: the state first).
struct Backend {
    state: JpegState,
    decoder: JpegDecoder,
}

impl Backend {
    fn new(handle: &Arc<Handle>, backend: sys::nvjpegBackend_t) -> Result<Backend> {
        let decoder = JpegDecoder::new(handle, backend)?;
        let state = JpegState::for_decoder(handle, decoder.raw)?;
        Ok(Backend { state, decoder })
    }
}

/// Whether the parsed stream `js` is baseline DCT, the only coding
/// process `GPU_HYBRID` Huffman-decodes on the GPU. nvJPEG's support query
/// passes progressive files too; nvImageCodec asks it for baseline files
/// only ("gpu hybrid is not supported for progressive", its CUDA decoder).
/// On an H200 (2026-11-27, `photos/full`, commit 2406cce) the pipeline's
/// batch thread, which runs the device phases, spent ~4.8 CPU-ms per
/// CUDA-route image; that route had only the set's 41 progressive photos,
/// 33 of them of 1 MP or more, and on `photos/imagenet-size` (progressive
/// photos all under 1 MP) it spent almost nothing. The reading, not yet
/// measured apart: `GPU_HYBRID` accepts those 33 and Huffman-decodes them
/// on the CPU in a later phase, on the batch thread, instead of the
/// workers' host phase. An unknown encoding (the query failed) is not
/// baseline.
fn baseline(h: &Handle, js: sys::nvjpegJpegStream_t) -> bool {
    let mut enc = sys::nvjpegJpegEncoding_t::NVJPEG_ENCODING_UNKNOWN;
    let out: *mut sys::nvjpegJpegEncoding_t = &mut enc;
    // `js` holds the stream parsed just before; `out` lives for the call.
    call!(&h.lib, nvjpegJpegStreamGetJpegEncoding(js, out)).is_ok()
        && enc == sys::nvjpegJpegEncoding_t::NVJPEG_ENCODING_BASELINE_DCT
}

/// Whether nvJPEG read the frame parsed into `js` as `size`, the frame
/// gpufeed's header parser read and sized the destination and the window
/// from (the window is clipped to it, `padded_window`); a typed error
/// otherwise (the caller decodes the file on the CPU). nvJPEG writes the
/// device phase's pixels at the destination's pitch for the frame it
/// parsed: where a damaged file makes the two parsers disagree (two frame
/// headers, say), a larger frame would be written past the image's place
/// in the arena, over its neighbours. On an H200 (session 59, 2026-11-30)
/// the routes' tests, the mixed epoch's route counts included, came out
/// as without it. `GPUFEED_NVJPEG_CHECK_FRAME=0` leaves it out (a
/// diagnostic).
fn check_frame(h: &Handle, js: sys::nvjpegJpegStream_t, size: (u32, u32)) -> Result<()> {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if !*ON.get_or_init(|| std::env::var("GPUFEED_NVJPEG_CHECK_FRAME").as_deref() != Ok("0")) {
        return Ok(());
    }
    let (mut w, mut hh): (std::ffi::c_uint, std::ffi::c_uint) = (0, 0);
    let (pw, ph): (*mut std::ffi::c_uint, *mut std::ffi::c_uint) = (&mut w, &mut hh);
    // `js` holds the stream parsed just before; both outputs live for the
    // call.
    call!(&h.lib, nvjpegJpegStreamGetFrameDimensions(js, pw, ph))?;
    if (w, hh) != size {
        return Err(Error::Device(format!(
            "nvJPEG reads the frame as {w}x{hh}, the header as {}x{}",
            size.0, size.1
        )));
    }
    Ok(())
}

/// A decoupled decoder: CPU Huffman (`HYBRID`) with GPU Huffman
/// (`GPU_HYBRID`) for large images. Its two halves may run on different
/// threads, one after the other: [`host`](Self::host) on a pipeline
/// worker, [`device`](Self::device) on the batch thread (the decoder moves
/// between them in the sample's hand-off, see [`DecoderPool`]). Field
/// order is drop order: states and decoders before the buffers they were
/// attached to, all before the handle.
pub(crate) struct DecoupledDecoder {
    cpu_huffman: Backend,
    gpu_huffman: Option<Backend>,
    /// One or two (see [`DecoupledDecoder::new`]).
    pinned: Vec<PinnedBuffer>,
    /// When buffer `i`'s last copy to the device has run.
    pinned_free: Vec<CudaEvent>,
    pinned_used: Vec<bool>,
    next: usize,
    /// The image whose host phase ran and whose device phase has not:
    /// which backend took it.
    staged: Option<bool>,
    /// Whether the last host phase chose GPU Huffman decoding.
    last_gpu: bool,
    device: DeviceBuffer,
    stream: JpegStream,
    params: DecodeParams,
    /// The pool's largest buffers, which this decoder's are grown to
    /// before a host phase (`fit.rs`); `None` outside a pool.
    fit: Option<Arc<Fit>>,
    /// Where a pool counts the nanoseconds host phases waited for their
    /// pinned buffer's last copy (`Stats::decoder_pinned_wait`).
    waited: Option<Arc<AtomicU64>>,
    handle: Arc<Handle>,
    ctx: Arc<CudaContext>,
}

// SAFETY: every nvJPEG object here is used by one thread at a time (the
// owner's `&mut self`); nvJPEG allows decoder, state, buffer, stream and
// params objects to move between threads as long as calls on them do not
// overlap (nvJPEG docs, "Thread Safety"). CudaEvent is Send.
unsafe impl Send for DecoupledDecoder {}

impl std::fmt::Debug for DecoupledDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecoupledDecoder")
            .field("gpu_huffman", &self.gpu_huffman.is_some())
            .field("staged", &self.staged)
            .finish_non_exhaustive()
    }
}

impl DecoupledDecoder {
    /// A decoder on `ctx`'s device with `buffers` pinned buffers: two let
    /// the host phase of one image run while the copy of the one before
    /// reads the other (one thread decoding image after image); a pooled
    /// decoder needs one, since the pool's cycle lies between its uses, and
    /// each buffer grows to the largest image decoded. Without the GPU
    /// Huffman backend (older nvJPEG, or `GPUFEED_NVJPEG_GPU_HUFFMAN=0`),
    /// every image takes the CPU Huffman path. With a `meter`, nvJPEG's
    /// allocations for this decoder are counted there (`meter.rs`). On a
    /// handle of its own; a pool's decoders share one
    /// ([`on_handle`](Self::on_handle)).
    pub(crate) fn new(
        ctx: &Arc<CudaContext>,
        buffers: usize,
        meter: Option<&Arc<Meter>>,
    ) -> Result<DecoupledDecoder> {
        DecoupledDecoder::on_handle(ctx, buffers, &decoupled_handle(meter)?)
    }

    /// [`new`](Self::new), on `handle` ([`decoupled_handle`]), which other
    /// decoders may share: nvJPEG's thread-safety rules ask for a stream,
    /// state and buffers per thread, which each decoder has, and leave the
    /// handle shareable (nvJPEG docs, "Thread Safety"); DALI's decoupled
    /// decoder shares one handle across its threads the same way.
    pub(crate) fn on_handle(
        ctx: &Arc<CudaContext>,
        buffers: usize,
        handle: &Arc<Handle>,
    ) -> Result<DecoupledDecoder> {
        let buffers = buffers.clamp(1, 2);
        use sys::nvjpegBackend_t as B;
        let handle = handle.clone();
        let cpu_huffman = Backend::new(&handle, B::NVJPEG_BACKEND_HYBRID)?;
        let gpu_huffman = if std::env::var("GPUFEED_NVJPEG_GPU_HUFFMAN").as_deref() == Ok("0") {
            None
        } else {
            Backend::new(&handle, B::NVJPEG_BACKEND_GPU_HYBRID).ok()
        };
        let drv = Error::cuda("event");
        // Waited on from the host before a pinned buffer is reused.
        let event = || crate::cuda::host_wait_event(ctx).map_err(drv);
        let mut params = DecodeParams::new(&handle)?;
        params.set_rgbi()?;
        Ok(DecoupledDecoder {
            cpu_huffman,
            gpu_huffman,
            pinned: (0..buffers)
                .map(|_| PinnedBuffer::new(&handle))
                .collect::<Result<_>>()?,
            pinned_free: (0..buffers).map(|_| event()).collect::<Result<_>>()?,
            pinned_used: vec![false; buffers],
            next: 0,
            staged: None,
            last_gpu: false,
            device: DeviceBuffer::new(&handle)?,
            stream: JpegStream::new(&handle)?,
            params,
            fit: None,
            waited: None,
            handle,
            ctx: ctx.clone(),
        })
    }

    /// This decoder as a pool's: its buffers grown to `fit`'s (if any)
    /// before each host phase and their sizes told to it after each
    /// phase; the host phases' waits for a pinned buffer added to
    /// `waited` (nanoseconds).
    pub(crate) fn pooled(
        mut self,
        fit: Option<Arc<Fit>>,
        waited: Arc<AtomicU64>,
    ) -> DecoupledDecoder {
        self.fit = fit;
        self.waited = Some(waited);
        self
    }

    /// Whether the next host phase can start without waiting for the
    /// device: the pinned buffer it writes has no copy pending.
    pub(crate) fn ready(&self) -> bool {
        let k = self.next;
        // The query needs the event's context current; a thread that
        // cannot bind it reads as not ready (the pool then lends the top
        // decoder, which waits as before).
        !self.pinned_used[k]
            || (self.ctx.bind_to_thread().is_ok() && self.pinned_free[k].is_complete())
    }

    /// Grow pinned buffer `k` and the device buffer to the pool's largest
    /// (`fit.rs`). Pinned buffer `k`'s last copy has run (the caller
    /// waited). A failed resize is left to the host phase, which grows
    /// what the image needs or fails with a typed error: growing ahead is
    /// an optimisation, never a condition of decoding.
    fn fit_buffers(&self, k: usize) {
        let Some(fit) = &self.fit else { return };
        if let Ok(have) = self.pinned[k].size()
            && let Some(want) = fit.grow(Kind::Pinned, have)
        {
            let _ = self.pinned[k].resize(want);
        }
        if let Ok(have) = self.device.size()
            && let Some(want) = fit.grow(Kind::Device, have)
        {
            let _ = self.device.resize(want);
        }
    }

    /// Tell the pool's fit the sizes of pinned buffer `k` (if given) and
    /// the device buffer, which nvJPEG may have grown for the image just
    /// decoded.
    fn note_sizes(&self, k: Option<usize>) {
        let Some(fit) = &self.fit else { return };
        if let Some(Ok(n)) = k.map(|k| self.pinned[k].size()) {
            fit.saw(Kind::Pinned, n);
        }
        if let Ok(n) = self.device.size() {
            fit.saw(Kind::Device, n);
        }
    }

    /// Decode `data` (its window `roi`, or all of it) into `dest`:
    /// [`host`](Self::host) then [`device`](Self::device).
    ///
    /// # Safety
    ///
    /// As for [`device`](Self::device).
    pub(crate) unsafe fn decode(
        &mut self,
        data: &[u8],
        size: (u32, u32),
        dest: Dest,
        roi: Option<Roi>,
        stream: &CudaStream,
    ) -> Result<()> {
        self.host(data, size, roi)?;
        // SAFETY: the caller's guarantees (# Safety) are device's.
        unsafe { self.device(dest, stream) }
    }

    /// The host phase of `data` (its window `roi`, or all of it), on this
    /// thread: parse, and Huffman decoding into a pinned buffer unless the
    /// image is Huffman-decoded on the GPU. A file that is not
    /// [complete](crate::jpeg::complete) is refused first (the callers
    /// decode what this refuses on the CPU). `size` is the frame as
    /// gpufeed's header parser read it, from which the caller sized the
    /// destination and the window; its area picks the Huffman decoder. A
    /// host phase that has no device phase yet is dropped.
    pub(crate) fn host(&mut self, data: &[u8], size: (u32, u32), roi: Option<Roi>) -> Result<()> {
        let pixels = u64::from(size.0) * u64::from(size.1);
        self.staged = None;
        self.last_gpu = false;
        if !crate::jpeg::complete(data) {
            return Err(Error::Device(
                "an incomplete JPEG (no EOI, or a segment past its end): decoded on the CPU".into(),
            ));
        }
        // nvJPEG grows the pinned buffer here (cudaHostAlloc): the
        // allocation must land in this decoder's context, whatever thread
        // this is.
        self.ctx
            .bind_to_thread()
            .map_err(Error::cuda("bind context"))?;
        let h = &self.handle;
        let js = self.stream.raw;
        // `data` is live for the call; the stream object belongs to this
        // handle. nvJPEG copies what it keeps of the bitstream into the
        // state during the host phase, so `data` may go after it.
        call!(
            &h.lib,
            nvjpegJpegStreamParse(h.raw, data.as_ptr(), data.len(), 0, 0, js)
        )?;
        check_frame(h, js, size)?;
        self.params.set_roi(roi)?;
        let params = self.params.raw;
        let gpu = match &self.gpu_huffman {
            Some(g) if pixels >= gpu_huffman_min_pixels() && baseline(h, js) => {
                let mut unsupported: std::ffi::c_int = 1;
                let out: *mut std::ffi::c_int = &mut unsupported;
                // Decoder, parsed stream and params are live; 0 means the
                // decoder takes the image (nvjpegDecoderJpegSupported).
                call!(
                    &h.lib,
                    nvjpegDecoderJpegSupported(g.decoder.raw, js, params, out)
                )
                .is_ok()
                    && unsupported == 0
            }
            _ => false,
        };
        let backend = match (&self.gpu_huffman, gpu) {
            (Some(g), true) => g,
            _ => &self.cpu_huffman,
        };
        let (dec, state) = (backend.decoder.raw, backend.state.raw);
        let k = self.next;
        if self.pinned_used[k] && !self.pinned_free[k].is_complete() {
            // The host phase below overwrites the buffer the copy of the
            // image before last may still be reading.
            let t0 = std::time::Instant::now();
            self.pinned_free[k]
                .synchronize()
                .map_err(Error::cuda("wait for pinned buffer"))?;
            if let Some(w) = &self.waited {
                w.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
            }
        }
        self.fit_buffers(k);
        // State and buffers belong to this handle and are owned by self;
        // attaching replaces what the state used before.
        call!(
            &h.lib,
            nvjpegStateAttachPinnedBuffer(state, self.pinned[k].raw)
        )?;
        call!(
            &h.lib,
            nvjpegStateAttachDeviceBuffer(state, self.device.raw)
        )?;
        // All objects are live and belong together; the host phase works
        // on this thread only.
        call!(&h.lib, nvjpegDecodeJpegHost(h.raw, dec, state, params, js))?;
        self.note_sizes(Some(k));
        self.staged = Some(gpu);
        self.last_gpu = gpu;
        Ok(())
    }

    /// Whether the last [`host`](Self::host) phase left the image's
    /// Huffman decoding to the GPU (`GPU_HYBRID`).
    pub(crate) fn last_gpu_huffman(&self) -> bool {
        self.last_gpu
    }

    /// The rest of the image whose [`host`](Self::host) phase ran: copy to
    /// the device and decode there, both queued on `stream`, into `dest`
    /// as interleaved RGB (the window's size with a ROI).
    ///
    /// # Safety
    ///
    /// `dest` must be device memory of at least `pitch * height` bytes of
    /// the image (of the window, with a ROI) that stays valid until
    /// `stream` reaches this work; `stream`'s context must be current on
    /// this thread and be this decoder's. Device phases of one decoder
    /// must be ordered on the device (one stream, or the caller's events):
    /// each reuses the device buffer the previous one read.
    pub(crate) unsafe fn device(&mut self, dest: Dest, stream: &CudaStream) -> Result<()> {
        let gpu = self
            .staged
            .take()
            .ok_or_else(|| Error::Device("device phase without a host phase".into()))?;
        let backend = match (&self.gpu_huffman, gpu) {
            (Some(g), true) => g,
            _ => &self.cpu_huffman,
        };
        let (dec, state) = (backend.decoder.raw, backend.state.raw);
        let h = &self.handle;
        let js = self.stream.raw;
        let k = self.next;
        let cu = stream.cu_stream().cast();
        // The caller made the stream's context current (# Safety); the
        // copy reads pinned buffer k, which is not written again before
        // `pinned_free[k]` (recorded next) has completed.
        call!(
            &h.lib,
            nvjpegDecodeJpegTransferToDevice(h.raw, dec, state, js, cu)
        )?;
        self.pinned_free[k]
            .record(stream)
            .map_err(Error::cuda("record pinned event"))?;
        self.pinned_used[k] = true;
        self.next = (k + 1) % self.pinned.len();
        let mut out = sys::nvjpegImage_t {
            channel: [
                dest.ptr as *mut u8,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            ],
            pitch: [dest.pitch, 0, 0, 0],
        };
        // `dest` is valid device memory until the stream reaches this work
        // (# Safety); `out` lives until the call returns.
        call!(
            &h.lib,
            nvjpegDecodeJpegDevice(h.raw, dec, state, &mut out, cu)
        )?;
        self.note_sizes(None);
        Ok(())
    }
}

impl Drop for DecoupledDecoder {
    fn drop(&mut self) {
        // A copy may still read a pinned buffer: wait for both before they
        // are freed. Errors cannot be reported from drop.
        for (ev, used) in self.pinned_free.iter().zip(&self.pinned_used) {
            if *used {
                let _ = ev.synchronize();
            }
        }
    }
}

/// The handle decoupled decoders are made on (allocations counted in
/// `meter`, when given).
pub(crate) fn decoupled_handle(meter: Option<&Arc<Meter>>) -> Result<Arc<Handle>> {
    let default = sys::nvjpegBackend_t::NVJPEG_BACKEND_DEFAULT;
    Ok(Arc::new(Handle::metered(default, meter)?))
}

/// Decoupled decoders shared by a pipeline's workers and its batch thread
/// (issue 5, items 2 and 4; the lending is `pool.rs`'s).
pub(crate) type DecoderPool = Pool<DecoupledDecoder>;

/// A pooled decoder lent to a sample.
pub(crate) type Lease = pool::Lease<DecoupledDecoder>;

/// How long a worker waits for a decoder before handing its sample to the
/// batch thread compressed, which decodes it with a decoder of its own
/// (the same backend choice and window, so the same pixels, later). With
/// the pipeline's `cap` no wait lasts this long; it bounds the harm should
/// that reasoning ever fail.
const TAKE_TIMEOUT: Duration = Duration::from_secs(1);

/// The share of the pool's memory limit past which decoders coming back
/// are freed: the rest is headroom for the decoders still out to grow
/// into before the limit refuses them.
const TRIM_AT: (u64, u64) = (3, 4);

/// A pool of at most `cap` decoders on `ctx`'s device whose nvJPEG memory
/// is counted in `ledger`, which refuses what passes its limit (an image
/// whose host phase is refused decodes on the worker's CPU decoder). A
/// decoder coming back while the pool holds more than 3/4 of the limit is
/// freed. Each decoder's buffers (pinned and device) grow to the largest
/// image it decoded: unbounded, the route's memory is about the window
/// times that size (on photos/imagenet-size, batch 256, prefetch 2, ~0.8
/// GiB more peak RSS than the engine's route, H100, 2026-11-22). They are
/// grown ahead to the largest any decoder of the pool holds while the pool
/// holds at most half the trim mark (`fit.rs`), so that they stop growing
/// after the first epoch; `GPUFEED_NVJPEG_FIT=0` leaves each to grow as
/// its images need (a diagnostic, to measure the difference on a GPU).
/// A worker is lent a decoder whose last copy to the device has run where
/// one near the top of the pool's stack has (`pool.rs`).
pub(crate) fn decoder_pool(
    ctx: &Arc<CudaContext>,
    cap: usize,
    ledger: &Arc<Ledger>,
    waited: &Arc<AtomicU64>,
) -> Result<Arc<DecoderPool>> {
    let meter = Meter::new(ctx, ledger.clone());
    // One handle for the pool (issue 16: on an H200, 2026-11-26, each
    // pooled decoder made its own as it was first lent, and the first
    // batch's CUDA host phases took 1-2.2 s, the first batch 2.4 s).
    let handle = decoupled_handle(Some(&meter))?;
    let ctx = ctx.clone();
    let full = ledger.clone();
    let trim_at = ledger.limit() / TRIM_AT.1 * TRIM_AT.0;
    let fit = (std::env::var("GPUFEED_NVJPEG_FIT").as_deref() != Ok("0"))
        .then(|| Fit::new(ledger, trim_at / 2));
    let waited = waited.clone();
    // `GPUFEED_NVJPEG_READY_FIRST=0` lends the top decoder always (the
    // stack alone, as at 243e3c9): a diagnostic, to measure the
    // difference on a GPU.
    let ready_first = std::env::var("GPUFEED_NVJPEG_READY_FIRST").as_deref() != Ok("0");
    Pool::new(
        cap,
        move || {
            let d = DecoupledDecoder::on_handle(&ctx, 1, &handle)?;
            Ok(d.pooled(fit.clone(), waited.clone()))
        },
        move || full.total() <= trim_at,
        move |d: &DecoupledDecoder| ready_first && d.ready(),
        TAKE_TIMEOUT,
    )
}
