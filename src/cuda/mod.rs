//! The CUDA side: device discovery, kernel sources and their compilation.
//!
//! Everything here is guarded so that a machine without a driver, without
//! NVRTC or without a GPU gets an [`Error`], never a panic:
//! cudarc loads `libcuda`/`libnvrtc` lazily and panics when they are missing,
//! so every entry point checks `is_culib_present()` first.
//!
//! The pipeline drives the kernels through `stage.rs`: decoded pixels are
//! packed into pinned staging, copied once per batch, and augmented by one
//! launch per view spec into device buffers that the trainer receives.
#![allow(unsafe_code)]

#[doc(hidden)]
pub mod bench;
pub(crate) mod buffer;
pub(crate) mod desc;
#[cfg(feature = "kernel-emu")]
pub(crate) mod emu;
pub(crate) mod jpeg_desc;
#[doc(hidden)]
pub mod kernel_check;
pub(crate) mod lanes;
pub(crate) mod launch;
pub mod nvrtc;
#[doc(hidden)]
pub mod pixels;
#[doc(hidden)]
pub mod prog_batch;
#[doc(hidden)]
pub mod prog_bench;
#[doc(hidden)]
pub mod progressive;
pub(crate) mod timeline;

use crate::error::{Error, Result};

/// An event the host waits on (`synchronize`): created with
/// `CU_EVENT_BLOCKING_SYNC`, so the waiting thread sleeps until the event
/// fires instead of spinning on a core (issue 16, 3b: the bench consumer's
/// spin alone cost about half of the engine route's CPU time per image).
/// cudarc's flag type cannot also say `CU_EVENT_DISABLE_TIMING`, so these
/// events keep timing, which costs little at a few records per batch.
pub(crate) fn host_wait_event(
    ctx: &std::sync::Arc<cudarc::driver::CudaContext>,
) -> std::result::Result<cudarc::driver::CudaEvent, cudarc::driver::DriverError> {
    ctx.new_event(Some(
        cudarc::driver::sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC,
    ))
}

/// A CUDA device as the driver reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Ordinal.
    pub index: usize,
    /// Marketing name, e.g. `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// Compute capability `(major, minor)`.
    pub compute_capability: (u32, u32),
}

/// Whether libcuda can be loaded. cudarc panics on its first call without
/// it, so every entry point asks this first.
#[cfg(not(feature = "candle-cuda"))]
fn driver_present() -> bool {
    // SAFETY: is_culib_present only tries to dlopen libcuda and closes it;
    // it touches no CUDA state.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// With `candle-cuda`, candle has cudarc link libcuda at build time
/// (its `dynamic-linking`): a process that started has the library.
#[cfg(feature = "candle-cuda")]
fn driver_present() -> bool {
    true
}

/// The devices the driver can see; an error that says why when there are
/// none to be had (no driver library, driver init failure, no device).
pub fn devices() -> Result<Vec<DeviceInfo>> {
    use cudarc::driver::{result, sys};
    if !driver_present() {
        return Err(Error::Device(
            "libcuda not found: no NVIDIA driver on this machine".into(),
        ));
    }
    result::init().map_err(|e| Error::Device(format!("cuInit failed: {e:?}")))?;
    let count = result::device::get_count()
        .map_err(|e| Error::Device(format!("cuDeviceGetCount failed: {e:?}")))?;
    let mut out = Vec::new();
    for i in 0..count.max(0) {
        let dev = result::device::get(i)
            .map_err(|e| Error::Device(format!("cuDeviceGet({i}) failed: {e:?}")))?;
        let name = result::device::get_name(dev).unwrap_or_else(|_| "unknown".into());
        let attr = |a| {
            // SAFETY: `dev` is a valid device handle from cuDeviceGet after a
            // successful cuInit (CUDA Driver API, cuDeviceGetAttribute).
            unsafe { result::device::get_attribute(dev, a) }
                .map(|v| v as u32)
                .unwrap_or(0)
        };
        let major = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
        let minor = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
        out.push(DeviceInfo {
            index: i as usize,
            name,
            compute_capability: (major, minor),
        });
    }
    if out.is_empty() {
        return Err(Error::Device(
            "the NVIDIA driver reports no CUDA device".into(),
        ));
    }
    Ok(out)
}

/// The primary context of device `index`, shared by every pipeline and
/// decoder of this process and kept until it exits, as the CUDA runtime
/// keeps it. cudarc releases the primary context with its last `Arc`, and
/// the driver then tears it down: a training loop that rebuilds its
/// pipeline would otherwise pay a context creation (hundreds of
/// milliseconds, and every module and pool with it) each time.
pub(crate) fn context(index: usize) -> Result<std::sync::Arc<cudarc::driver::CudaContext>> {
    use std::sync::{Arc, Mutex, OnceLock};
    static CONTEXTS: OnceLock<Mutex<Vec<Option<Arc<cudarc::driver::CudaContext>>>>> =
        OnceLock::new();
    let mut held = CONTEXTS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if held.len() <= index {
        held.resize(index + 1, None);
    }
    if let Some(c) = &held[index] {
        return Ok(c.clone());
    }
    // cudarc panics without libcuda: devices() checks first.
    devices()?;
    if std::env::var("GPUFEED_CUDA_BLOCKING_SYNC").as_deref() == Ok("1") {
        blocking_sync(index);
    }
    let ctx = cudarc::driver::CudaContext::new(index)
        .map_err(|e| Error::Device(format!("cuda:{index}: context: {e:?}")))?;
    held[index] = Some(ctx.clone());
    Ok(ctx)
}

/// A CUDA context of its own on the device of `primary` (not the primary
/// context), for work that must not wait for the rest of the device: the
/// hardware engine's lanes with `PipelineBuilder::engine_context` (issue
/// 16, item 3). A driver call that waits for "the device" waits for its
/// context's streams, and nvJPEG's hardware call frees memory
/// (`cuMemFree`, ~18 times a call, CUPTI on an H200 at 4bbffad), so on the
/// primary context each engine call waited for every scan kernel in
/// flight. Destroyed with its last `Arc`, after whatever holds one; the
/// calling thread is left bound to `primary`.
///
/// Its host waits block (`CU_CTX_SCHED_BLOCKING_SYNC`), those inside
/// nvJPEG's calls included, which gpufeed's own blocking-sync events
/// cannot reach: the engine lanes' threads only wait there, and spinning
/// they took 0.136 CPU-ms per image at share 1 on an H200 (0de8cfd),
/// more than issue 16's 0.1 for everything (item 4). On the primary
/// context the flag would be the trainer's too
/// (`GPUFEED_CUDA_BLOCKING_SYNC`, 15 % slower there); here it is the
/// engine's alone.
pub(crate) fn own_context(
    primary: &std::sync::Arc<cudarc::driver::CudaContext>,
) -> Result<std::sync::Arc<cudarc::driver::CudaContext>> {
    use cudarc::driver::{CudaContext, sys};
    let flags = sys::CUctx_flags_enum::CU_CTX_SCHED_BLOCKING_SYNC as std::ffi::c_uint;
    let failed = |what: &str, e: &dyn std::fmt::Debug| {
        Error::Device(format!(
            "cuda:{}: the engine's own context: {what}: {e:?}",
            primary.ordinal()
        ))
    };
    // cudarc panics on a symbol the driver lacks: cuCtxCreate_v4 came with
    // CUDA 12.5.
    let mut version = 0;
    // SAFETY: `version` is a live slot; the driver was loaded and
    // initialized for `primary` (CUDA Driver API, cuDriverGetVersion).
    unsafe { sys::cuDriverGetVersion(&mut version) }
        .result()
        .map_err(|e| failed("cuDriverGetVersion", &e))?;
    if version < 12050 {
        return Err(failed("needs a CUDA 12.5 driver or later, found", &version));
    }
    let mut raw: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: the device handle comes from the live primary context (cuInit
    // done); `raw` is a live slot; null creation parameters ask for a plain
    // context (CUDA Driver API, cuCtxCreate_v4).
    let created =
        unsafe { sys::cuCtxCreate_v4(&mut raw, std::ptr::null_mut(), flags, primary.cu_device()) }
            .result();
    if let Err(e) = created {
        let _ = primary.bind_to_thread();
        return Err(failed("cuCtxCreate", &e));
    }
    // The new context was pushed on this thread's stack: popped, so that
    // the stack is as deep as before (cudarc binds by replacing its top).
    let mut popped: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: `popped` is a live slot; the stack holds the new context.
    let _ = unsafe { sys::cuCtxPopCurrent_v2(&mut popped) };
    // SAFETY: `raw` was just created on that device and nothing else owns
    // it; the returned value destroys it on drop (cudarc,
    // `from_raw_context`).
    let own = unsafe { CudaContext::from_raw_context(primary.ordinal(), primary.cu_device(), raw) };
    let rebound = primary.bind_to_thread();
    let own = own.map_err(|e| {
        // SAFETY: wrapping failed before taking ownership, so the context
        // is destroyed here, once.
        let _ = unsafe { sys::cuCtxDestroy_v2(raw) };
        let _ = primary.bind_to_thread();
        failed("wrap", &e)
    })?;
    rebound.map_err(|e| failed("rebind the primary context", &e))?;
    Ok(own)
}

/// `GPUFEED_CUDA_BLOCKING_SYNC=1`, a diagnostic (issue 16, item 4): the
/// primary context's host waits block instead of spinning, those inside
/// nvJPEG included, which gpufeed's own blocking-sync events cannot reach.
/// By the driver's default (`CU_CTX_SCHED_AUTO`: spin while the process
/// has fewer contexts than cores) a thread waiting inside a library call
/// burns its core: on an H200 (2026-11-26) the engine lanes took 0.1
/// CPU-ms per image, about two cores at 14,000 img/s, while their own
/// waits block. The flag is the process's (the trainer's waits on the
/// primary context too), so it is not a default before it is measured.
/// Set before the context is first made here; a failure is printed.
fn blocking_sync(index: usize) {
    use cudarc::driver::{result, sys};
    let flags = sys::CUctx_flags_enum::CU_CTX_SCHED_BLOCKING_SYNC as std::ffi::c_uint;
    let r = result::device::get(index as std::ffi::c_int).and_then(|dev| {
        // SAFETY: `dev` comes from cuDeviceGet after cuInit (`devices()`);
        // cuDevicePrimaryCtxSetFlags takes any device and a flag word
        // (CUDA Driver API, "Primary Context Management").
        unsafe { sys::cuDevicePrimaryCtxSetFlags_v2(dev, flags) }.result()
    });
    if let Err(e) = r {
        eprintln!("gpufeed: GPUFEED_CUDA_BLOCKING_SYNC: cuDevicePrimaryCtxSetFlags failed: {e:?}");
    }
}

/// The embedded kernel sources: `(file name, text)`, headers inlined.
pub fn kernel_sources() -> Vec<(&'static str, String)> {
    vec![
        ("augment.cu", inline_headers(AUGMENT_CU)),
        ("photo.cu", inline_headers(PHOTO_CU)),
        ("mix.cu", inline_headers(MIX_CU)),
        ("progressive.cu", inline_headers(PROGRESSIVE_CU)),
        ("pixels.cu", inline_headers(PIXELS_CU)),
    ]
}

/// Kernel entry points of `augment.cu`, one per dtype and layout.
pub const AUGMENT_KERNELS: [&str; 8] = [
    "gf_augment_u8_nchw",
    "gf_augment_u8_nhwc",
    "gf_augment_f16_nchw",
    "gf_augment_f16_nhwc",
    "gf_augment_bf16_nchw",
    "gf_augment_bf16_nhwc",
    "gf_augment_f32_nchw",
    "gf_augment_f32_nhwc",
];

/// Kernel entry points of `photo.cu`, indexed as [`AUGMENT_KERNELS`].
pub const PHOTO_KERNELS: [&str; 8] = [
    "gf_photo_u8_nchw",
    "gf_photo_u8_nhwc",
    "gf_photo_f16_nchw",
    "gf_photo_f16_nhwc",
    "gf_photo_bf16_nchw",
    "gf_photo_bf16_nhwc",
    "gf_photo_f32_nchw",
    "gf_photo_f32_nhwc",
];

/// Kernel entry points of `mix.cu`, indexed as [`AUGMENT_KERNELS`].
pub const MIX_KERNELS: [&str; 8] = [
    "gf_mix_u8_nchw",
    "gf_mix_u8_nhwc",
    "gf_mix_f16_nchw",
    "gf_mix_f16_nhwc",
    "gf_mix_bf16_nchw",
    "gf_mix_bf16_nhwc",
    "gf_mix_f32_nchw",
    "gf_mix_f32_nhwc",
];

/// Kernel entry points of `pixels.cu`: the IDCT, then the colour
/// conversion, of progressive files decoded on the device.
pub const PIXELS_KERNELS: [&str; 2] = ["gf_idct", "gf_color"];
/// `kernels/progressive.cu`'s entry points: the scan decoder, then the
/// split kernels' four steps.
pub const PROGRESSIVE_KERNELS: [&str; 5] = [
    "gf_progressive",
    "gf_split_guess",
    "gf_split_round",
    "gf_split_check",
    "gf_split_write",
];

const AUGMENT_CU: &str = include_str!("../../kernels/augment.cu");
const MIX_CU: &str = include_str!("../../kernels/mix.cu");
const PHOTO_CU: &str = include_str!("../../kernels/photo.cu");
const PROGRESSIVE_CU: &str = include_str!("../../kernels/progressive.cu");
const PIXELS_CU: &str = include_str!("../../kernels/pixels.cu");
const HEADERS: [(&str, &str); 7] = [
    ("augment.cuh", include_str!("../../kernels/augment.cuh")),
    ("cast.cuh", include_str!("../../kernels/cast.cuh")),
    ("photo.cuh", include_str!("../../kernels/photo.cuh")),
    ("mix.cuh", include_str!("../../kernels/mix.cuh")),
    ("scan.cuh", include_str!("../../kernels/scan.cuh")),
    ("entropy.cuh", include_str!("../../kernels/entropy.cuh")),
    ("pixels.cuh", include_str!("../../kernels/pixels.cuh")),
];

/// NVRTC is given one self-contained source: each header is pasted where
/// it is included, so no include path (and no CUDA toolkit) is needed.
/// Headers are `#pragma once`, and include no other header.
fn inline_headers(src: &str) -> String {
    HEADERS.iter().fold(src.to_string(), |s, (name, text)| {
        s.replace(&format!("#include \"{name}\""), text)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pasting is all NVRTC gets: a header left unlisted, or one that
    /// includes another, would reach it as an unresolved `#include` (the
    /// NVRTC compile test would catch that, but only where libnvrtc loads).
    #[test]
    fn every_kernel_include_is_pasted() {
        for (name, text) in HEADERS {
            assert!(!text.contains("#include"), "{name} includes a header");
            assert!(text.contains("#pragma once"), "{name} is not #pragma once");
        }
        for (name, src) in kernel_sources() {
            assert!(!src.contains("#include"), "{name}: an #include left");
        }
        let listed: Vec<&str> = HEADERS.iter().map(|(n, _)| *n).collect();
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/kernels");
        for e in std::fs::read_dir(dir).unwrap() {
            let file = e.unwrap().file_name().into_string().unwrap();
            if file.ends_with(".cuh") {
                assert!(listed.contains(&file.as_str()), "{file} not in HEADERS");
            }
        }
    }
}
