//! Batched decoding (issue 5): RAII types for the JPEG state and stream,
//! and a decoder per backend (the NVJPG hardware engine, or CUDA) that
//! writes interleaved RGB into device buffers the caller owns.
//!
//! The legacy batched API (`nvjpegDecodeBatchedInitialize` /
//! `nvjpegDecodeBatched`) decodes a whole batch in one call, host Huffman
//! work included; with a handle created for `NVJPEG_BACKEND_HARDWARE` it
//! runs on the hardware engine (nvJPEG docs, "Hardware Acceleration").
//! On the hardware engine, `nvjpegDecodeBatchedEx` takes per-image decode
//! parameters, which carry the crop window (ROI) to decode (issue 5, item
//! 3): the image comes out as just that window.

use std::sync::Arc;

use super::device_input::DeviceInput;
use super::{Handle, Meter, Roi, library, sys};
use crate::error::{Error, Result};

/// Output format: interleaved RGB in one plane, what the augment kernel
/// reads.
pub(super) const RGBI: sys::nvjpegOutputFormat_t = sys::nvjpegOutputFormat_t::NVJPEG_OUTPUT_RGBI;

impl Handle {
    /// A handle for one backend (`nvjpegCreateEx`, default allocators).
    /// The hardware backend fails on GPUs without the NVJPG engine.
    ///
    /// Flags (nvJPEG docs, "nvJPEG Flags"), where the library knows them:
    /// `UPSAMPLING_WITH_INTERPOLATION` upsamples chroma by interpolation,
    /// as libjpeg's default "fancy" upsampling and the CPU decoders do
    /// (nvJPEG 12.1+; DALI turns it on too). On an H100 with nvJPEG 13.0
    /// (2026-11-22) it took the worst photo from 31.9 to 50.3 dB against
    /// the CPU decoder. Not `BITSTREAM_STRICT`: it let damaged files
    /// through on CUDA all the same (and crashed `GPU_HYBRID`, see
    /// [`BatchedDecoder::new`]).
    ///
    /// `GPUFEED_NVJPEG_FLAGS` (a number) replaces these flags: a diagnostic
    /// for bisecting nvJPEG behaviour on a GPU box without a rebuild.
    pub(crate) fn with_backend(backend: sys::nvjpegBackend_t) -> Result<Handle> {
        Handle::metered(backend, None)
    }

    /// A handle for one backend whose allocations go through `meter`
    /// (counted, and refused past its limit), where nvJPEG has the V2
    /// allocators and `GPUFEED_NVJPEG_METER` is not 0; otherwise with
    /// nvJPEG's own allocators.
    pub(crate) fn metered(
        backend: sys::nvjpegBackend_t,
        meter: Option<&Arc<Meter>>,
    ) -> Result<Handle> {
        let flags = std::env::var("GPUFEED_NVJPEG_FLAGS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(sys::NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION);
        let lib = library()?;
        let meter = meter.filter(|_| Meter::enabled() && lib.lib.nvjpegCreateExV2.is_ok());
        Handle::create(backend, flags, meter).or_else(|_| Handle::create(backend, 0, meter))
    }

    fn create(
        backend: sys::nvjpegBackend_t,
        flags: u32,
        meter: Option<&Arc<Meter>>,
    ) -> Result<Handle> {
        let lib = library()?;
        let mut raw: sys::nvjpegHandle_t = std::ptr::null_mut();
        let out: *mut sys::nvjpegHandle_t = &mut raw;
        match meter {
            None => {
                let null_dev: *mut sys::nvjpegDevAllocator_t = std::ptr::null_mut();
                let null_pin: *mut sys::nvjpegPinnedAllocator_t = std::ptr::null_mut();
                // Null allocators select nvJPEG's defaults; `out` is a live
                // slot.
                call!(
                    &lib,
                    nvjpegCreateEx(backend, null_dev, null_pin, flags, out)
                )?;
            }
            Some(m) => {
                let (mut dev, mut pin) = m.allocators();
                let (d, p): (
                    *mut sys::nvjpegDevAllocatorV2_t,
                    *mut sys::nvjpegPinnedAllocatorV2_t,
                ) = (&mut dev, &mut pin);
                // nvJPEG copies the allocator structs; their context, the
                // meter, lives as long as the handle (its `meter` field,
                // dropped after nvjpegDestroy). `out` is a live slot.
                call!(&lib, nvjpegCreateExV2(backend, d, p, flags, out))?;
            }
        }
        if raw.is_null() {
            return Err(Error::Device(
                "nvjpegCreateEx returned a null handle".into(),
            ));
        }
        Ok(Handle {
            raw,
            lib,
            meter: meter.cloned(),
        })
    }

    /// The meter this handle's allocations go through, if any.
    pub(super) fn meter(&self) -> Option<&Arc<Meter>> {
        self.meter.as_ref()
    }
}

/// `nvjpegJpegState_t`: per-decoder scratch; one thread at a time.
pub(super) struct JpegState {
    pub(super) raw: sys::nvjpegJpegState_t,
    handle: Arc<Handle>,
}

impl JpegState {
    /// The state of the decoupled API's `decoder` (nvjpegDecoderStateCreate),
    /// destroyed the same way as the batched API's.
    pub(super) fn for_decoder(
        handle: &Arc<Handle>,
        decoder: sys::nvjpegJpegDecoder_t,
    ) -> Result<JpegState> {
        let mut raw: sys::nvjpegJpegState_t = std::ptr::null_mut();
        let out: *mut sys::nvjpegJpegState_t = &mut raw;
        // Handle and decoder are live (the caller holds both); `out` is a
        // live slot.
        call!(
            &handle.lib,
            nvjpegDecoderStateCreate(handle.raw, decoder, out)
        )?;
        Ok(JpegState {
            raw,
            handle: handle.clone(),
        })
    }

    fn new(handle: &Arc<Handle>) -> Result<JpegState> {
        let mut raw: sys::nvjpegJpegState_t = std::ptr::null_mut();
        let out: *mut sys::nvjpegJpegState_t = &mut raw;
        // The handle is live (held by the Arc); `out` is a live slot.
        call!(&handle.lib, nvjpegJpegStateCreate(handle.raw, out))?;
        Ok(JpegState {
            raw,
            handle: handle.clone(),
        })
    }
}

impl Drop for JpegState {
    fn drop(&mut self) {
        // Destroyed once, before the handle it came from (held by Arc).
        let _ = call!(&self.handle.lib, nvjpegJpegStateDestroy(self.raw));
    }
}

/// `nvjpegJpegStream_t`: a parsed bitstream, for support queries.
pub(super) struct JpegStream {
    pub(super) raw: sys::nvjpegJpegStream_t,
    handle: Arc<Handle>,
}

impl JpegStream {
    pub(super) fn new(handle: &Arc<Handle>) -> Result<JpegStream> {
        let mut raw: sys::nvjpegJpegStream_t = std::ptr::null_mut();
        let out: *mut sys::nvjpegJpegStream_t = &mut raw;
        // The handle is live; `out` is a live slot.
        call!(&handle.lib, nvjpegJpegStreamCreate(handle.raw, out))?;
        Ok(JpegStream {
            raw,
            handle: handle.clone(),
        })
    }
}

impl Drop for JpegStream {
    fn drop(&mut self) {
        let _ = call!(&self.handle.lib, nvjpegJpegStreamDestroy(self.raw));
    }
}

/// `nvjpegDecodeParams_t`: one image's options for nvjpegDecodeBatchedEx
/// (its ROI).
pub(super) struct DecodeParams {
    pub(super) raw: sys::nvjpegDecodeParams_t,
    handle: Arc<Handle>,
}

impl DecodeParams {
    pub(super) fn new(handle: &Arc<Handle>) -> Result<DecodeParams> {
        let mut raw: sys::nvjpegDecodeParams_t = std::ptr::null_mut();
        let out: *mut sys::nvjpegDecodeParams_t = &mut raw;
        // The handle is live; `out` is a live slot.
        call!(&handle.lib, nvjpegDecodeParamsCreate(handle.raw, out))?;
        // The output format comes from nvjpegDecodeBatchedInitialize, as
        // in nvImageCodec's hardware decoder, which sets only the ROI here.
        Ok(DecodeParams {
            raw,
            handle: handle.clone(),
        })
    }

    /// Decode `roi`, or the whole image for `None` (nvJPEG's "-1" size,
    /// nvjpegDecodeParamsSetROI).
    pub(super) fn set_roi(&mut self, roi: Option<Roi>) -> Result<()> {
        let (x, y, w, h) = match roi {
            Some(r) => (r.x as i32, r.y as i32, r.w as i32, r.h as i32),
            None => (0, 0, -1, -1),
        };
        // `raw` is owned by self and alive.
        call!(
            &self.handle.lib,
            nvjpegDecodeParamsSetROI(self.raw, x, y, w, h)
        )
    }

    /// Interleaved RGB (the decoupled API reads the format from here; the
    /// batched API from nvjpegDecodeBatchedInitialize).
    pub(super) fn set_rgbi(&mut self) -> Result<()> {
        // `raw` is owned by self and alive.
        call!(
            &self.handle.lib,
            nvjpegDecodeParamsSetOutputFormat(self.raw, RGBI)
        )
    }
}

impl Drop for DecodeParams {
    fn drop(&mut self) {
        let _ = call!(&self.handle.lib, nvjpegDecodeParamsDestroy(self.raw));
    }
}

/// A decoder for one backend. Not `Sync`: the state is per thread.
pub(crate) struct BatchedDecoder {
    handle: Arc<Handle>,
    state: JpegState,
    stream: JpegStream,
    /// One per image of the largest batch so far (hardware engine).
    params: Vec<DecodeParams>,
    /// The batch size the state was initialized for.
    initialized: usize,
    /// (Re)initializations so far and the time they took: the batched API
    /// needs one whenever the batch size changes (decode-bench prints it).
    inits: (u64, std::time::Duration),
    /// Decode calls so far and the time the calling thread spent in them.
    calls: (u64, std::time::Duration),
    hardware: bool,
    /// Bitstreams staged on the device (`NVJPEG_BACKEND_HARDWARE_DEVICE`,
    /// [`engine_with_device_input`](Self::engine_with_device_input)).
    input: Option<DeviceInput>,
}

// SAFETY: the state, stream and decode-params objects are used by one
// thread at a time (the owner's `&mut self`); nvJPEG allows them to move
// between threads as long as calls on them do not overlap (nvJPEG docs,
// "Thread Safety": per-thread instances of the state and stream types).
unsafe impl Send for BatchedDecoder {}

impl std::fmt::Debug for BatchedDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchedDecoder")
            .field("hardware", &self.hardware)
            .finish_non_exhaustive()
    }
}

/// A destination image: device pointer and row pitch in bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Dest {
    pub(crate) ptr: u64,
    pub(crate) pitch: usize,
}

impl BatchedDecoder {
    /// A decoder on the hardware engine (`hardware`) or CUDA (the pipeline
    /// uses the decoupled API for CUDA; this one serves the GPU tests as a
    /// reference). The CUDA decoder uses `NVJPEG_BACKEND_DEFAULT` (Huffman
    /// decoding on the calling thread), not `GPU_HYBRID`, whose GPU Huffman kernel
    /// (`decodeDcHuffman`) read address 0 on the corpus's fuzzed files on
    /// an H100 with nvJPEG 13.0 (2026-11-22, compute-sanitizer), with or
    /// without strict mode and in calls of 50 images or fewer, and so killed
    /// the CUDA context and the pipeline with it; the default backend
    /// decoded the whole fuzz corpus with typed errors.
    /// `GPUFEED_NVJPEG_CUDA_BACKEND=hybrid` selects `GPU_HYBRID` (for
    /// measuring).
    ///
    /// The hardware decoder pre-allocates its memory pool for `batch`
    /// images (`nvjpegDecodeBatchedPreAllocate`, nvJPEG 11.6+; skipped where
    /// the symbol is missing). Its 1×1 size hint only turns the pool on: it
    /// grows to the largest batch seen and is then reused, instead of
    /// allocating per batch (what nvImageCodec's hardware decoder does too).
    /// With a `meter`, its allocations are counted there (`meter.rs`).
    pub(crate) fn new(
        hardware: bool,
        batch: usize,
        meter: Option<&Arc<Meter>>,
    ) -> Result<BatchedDecoder> {
        use sys::nvjpegBackend_t as B;
        let backend = if hardware {
            B::NVJPEG_BACKEND_HARDWARE
        } else if std::env::var("GPUFEED_NVJPEG_CUDA_BACKEND").as_deref() == Ok("hybrid") {
            // A diagnostic, like GPUFEED_NVJPEG_FLAGS.
            B::NVJPEG_BACKEND_GPU_HYBRID
        } else {
            B::NVJPEG_BACKEND_DEFAULT
        };
        BatchedDecoder::on_backend(backend, batch, meter, None)
    }

    /// A hardware-engine decoder (as [`new`](Self::new)) that takes its
    /// bitstreams from device memory (`NVJPEG_BACKEND_HARDWARE_DEVICE`):
    /// [`decode`](Self::decode) copies them into slabs counted by `meter`
    /// and hands the engine their device addresses (`device_input.rs`; a
    /// diagnostic, `GPUFEED_NVJPEG_DEVICE_INPUT=1`). An error where nvJPEG
    /// lacks that backend.
    pub(crate) fn engine_with_device_input(
        batch: usize,
        meter: &Arc<Meter>,
    ) -> Result<BatchedDecoder> {
        let input = DeviceInput::new(meter)?;
        let backend = sys::nvjpegBackend_t::NVJPEG_BACKEND_HARDWARE_DEVICE;
        BatchedDecoder::on_backend(backend, batch, Some(meter), Some(input))
    }

    fn on_backend(
        backend: sys::nvjpegBackend_t,
        batch: usize,
        meter: Option<&Arc<Meter>>,
        input: Option<DeviceInput>,
    ) -> Result<BatchedDecoder> {
        use sys::nvjpegBackend_t as B;
        let hardware = matches!(
            backend,
            B::NVJPEG_BACKEND_HARDWARE | B::NVJPEG_BACKEND_HARDWARE_DEVICE
        );
        let handle = Handle::metered(backend, meter)?;
        let handle = Arc::new(handle);
        let state = JpegState::new(&handle)?;
        let stream = JpegStream::new(&handle)?;
        if hardware {
            let n = batch.clamp(1, i32::MAX as usize) as std::ffi::c_int;
            let css = sys::nvjpegChromaSubsampling_t::NVJPEG_CSS_444;
            // Handle and state are live and belong together. Failure (or a
            // missing symbol) only loses the pool, so it is not an error.
            let _ = call!(
                &handle.lib,
                nvjpegDecodeBatchedPreAllocate(handle.raw, state.raw, n, 1, 1, css, RGBI)
            );
        }
        Ok(BatchedDecoder {
            handle,
            state,
            stream,
            params: Vec::new(),
            initialized: 0,
            inits: Default::default(),
            calls: Default::default(),
            hardware,
            input,
        })
    }

    /// How often the state was (re)initialized for a new batch size, and
    /// the time that took.
    pub(crate) fn inits(&self) -> (u64, std::time::Duration) {
        self.inits
    }

    /// Decode calls so far, and the time the calling thread spent in them.
    pub(crate) fn calls(&self) -> (u64, std::time::Duration) {
        self.calls
    }

    /// Whether this (hardware) decoder takes `data` with the crop window
    /// `roi`: `Some(roi)` when it decodes just the window, `Some(None)` when
    /// only the whole image (older nvJPEG, or a window it refuses), `None`
    /// when not at all. Callers first rule out, from the header they
    /// parsed, what the engine accepts but decodes wrongly
    /// (`super::hardware_takes`).
    pub(crate) fn hardware_support(
        &mut self,
        data: &[u8],
        roi: Option<Roi>,
    ) -> Option<Option<Roi>> {
        if !self.hardware || !self.supports(data) {
            return None;
        }
        let Some(r) = roi else {
            return Some(None);
        };
        if self.params.is_empty() {
            match DecodeParams::new(&self.handle) {
                Ok(p) => self.params.push(p),
                Err(_) => return Some(None),
            }
        }
        if self.params[0].set_roi(Some(r)).is_err() {
            return Some(None);
        }
        let h = &self.handle;
        let mut unsupported: std::ffi::c_int = 1;
        let out: *mut std::ffi::c_int = &mut unsupported;
        // `supports` just parsed `data` into the stream; the params belong
        // to this handle; `out` is a live slot. 0 means supported.
        let ok = call!(
            &h.lib,
            nvjpegDecodeBatchedSupportedEx(h.raw, self.stream.raw, self.params[0].raw, out)
        )
        .is_ok()
            && unsupported == 0;
        Some(ok.then_some(r))
    }

    /// Whether this decoder's backend takes `data`
    /// (`nvjpegDecodeBatchedSupported`; for CUDA every stream nvJPEG
    /// parses). A parse failure means no.
    pub(crate) fn supports(&mut self, data: &[u8]) -> bool {
        let h = &self.handle;
        // The support query needs only the headers: parsing them alone
        // (nvjpegJpegStreamParseHeader, nvJPEG 11.4+) spares this thread a
        // scan of the entropy-coded data; older libraries parse it all.
        // `data` is live for the call; the stream object belongs to this
        // handle.
        let parsed = if h.lib.lib.nvjpegJpegStreamParseHeader.is_ok() {
            call!(
                &h.lib,
                nvjpegJpegStreamParseHeader(h.raw, data.as_ptr(), data.len(), self.stream.raw)
            )
        } else {
            call!(
                &h.lib,
                nvjpegJpegStreamParse(h.raw, data.as_ptr(), data.len(), 0, 0, self.stream.raw)
            )
        };
        if parsed.is_err() {
            return false;
        }
        if !self.hardware {
            return true;
        }
        let mut unsupported: std::ffi::c_int = 1;
        let out: *mut std::ffi::c_int = &mut unsupported;
        // nvJPEG reports 0 for "supported" (nvjpegDecodeBatchedSupported).
        call!(
            &h.lib,
            nvjpegDecodeBatchedSupported(h.raw, self.stream.raw, out)
        )
        .is_ok()
            && unsupported == 0
    }

    /// Decode `data[i]` into `dest[i]` (RGB interleaved, 8-bit) on
    /// `stream`; where `rois[i]` is set, only that window (hardware engine
    /// only, nvjpegDecodeBatchedEx). Asynchronous: the destinations are
    /// written in stream order. One failing image fails the call.
    ///
    /// # Safety
    ///
    /// Each destination must be device memory of at least `pitch * height`
    /// bytes of its image (of its window, with a ROI), and it and `data`
    /// must stay valid until the
    /// stream reaches this work; the CUDA context of `stream` must be
    /// current on this thread.
    pub(crate) unsafe fn decode(
        &mut self,
        data: &[&[u8]],
        dest: &[Dest],
        rois: &[Option<Roi>],
        stream: *mut std::ffi::c_void,
    ) -> Result<()> {
        assert_eq!(data.len(), dest.len());
        assert_eq!(data.len(), rois.len());
        let with_roi = rois.iter().any(Option::is_some);
        if with_roi && !self.hardware {
            return Err(Error::Device(
                "crop-region decode is only wired for the hardware engine".into(),
            ));
        }
        if data.is_empty() {
            return Ok(());
        }
        let h = &self.handle;
        if self.initialized != data.len() {
            // The batched API decodes exactly the batch size it was
            // initialized with (nvjpegDecodeBatchedInitialize).
            let n = data.len() as std::ffi::c_int;
            let t0 = std::time::Instant::now();
            call!(
                &h.lib,
                nvjpegDecodeBatchedInitialize(h.raw, self.state.raw, n, 1, RGBI)
            )?;
            self.initialized = data.len();
            self.inits.0 += 1;
            self.inits.1 += t0.elapsed();
        }
        let t0 = std::time::Instant::now();
        if with_roi {
            // Before any bitstream is staged: nothing below may return
            // between the staging and `used_by`.
            while self.params.len() < rois.len() {
                self.params.push(DecodeParams::new(h)?);
            }
            for (p, roi) in self.params.iter_mut().zip(rois) {
                p.set_roi(*roi)?;
            }
        }
        let lens: Vec<usize> = data.iter().map(|d| d.len()).collect();
        let ptrs: Vec<*const u8> = match &mut self.input {
            None => data.iter().map(|d| d.as_ptr()).collect(),
            // SAFETY: `stream` belongs to the current context (# Safety),
            // the meter's: decoders with device input are made for the
            // pipeline's device, on whose context the caller decodes;
            // `used_by` follows the decode call below, on `stream`.
            Some(input) => unsafe { input.stage(data, &lens, stream.cast()) }?
                .into_iter()
                .map(|a| a as usize as *const u8)
                .collect(),
        };
        let mut out: Vec<sys::nvjpegImage_t> = dest
            .iter()
            .map(|d| sys::nvjpegImage_t {
                channel: [
                    d.ptr as *mut u8,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                ],
                pitch: [d.pitch, 0, 0, 0],
            })
            .collect();
        let r = if with_roi {
            let mut raw: Vec<sys::nvjpegDecodeParams_t> =
                self.params[..rois.len()].iter().map(|p| p.raw).collect();
            // As below, plus: one live params object per image, owned by
            // self for the duration of the call.
            call!(
                &h.lib,
                nvjpegDecodeBatchedEx(
                    h.raw,
                    self.state.raw,
                    ptrs.as_ptr(),
                    lens.as_ptr(),
                    out.as_mut_ptr(),
                    raw.as_mut_ptr(),
                    stream.cast()
                )
            )
        } else {
            // The pointer arrays live until the call returns; the bytes
            // they point at and the destinations are the caller's contract
            // (# Safety).
            call!(
                &h.lib,
                nvjpegDecodeBatched(
                    h.raw,
                    self.state.raw,
                    ptrs.as_ptr(),
                    lens.as_ptr(),
                    out.as_mut_ptr(),
                    stream.cast()
                )
            )
        };
        if let Some(input) = &mut self.input {
            // SAFETY: as for `stage` above. Recorded after a failed call
            // too: whatever it queued may still read the slabs.
            let used = unsafe { input.used_by(stream.cast()) };
            if r.is_ok() {
                used?;
            }
        }
        self.calls.0 += 1;
        self.calls.1 += t0.elapsed();
        if r.is_err() {
            // A failed call may leave the state mid-batch: initialize
            // afresh next time so one bad batch does not poison the next.
            self.initialized = 0;
        }
        r
    }
}
