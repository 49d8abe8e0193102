//! nvJPEG, loaded at run time: generated bindings (`sys.rs`, dynamic
//! loading, every symbol optional) → checked calls returning
//! [`NvJpegStatus`] → RAII handles.
//!
//! The library loads (`libnvjpeg.so.13`, `.so.12`, `.so`) at first use;
//! `batched.rs` holds the decode path the pipeline's device stage drives
//! for the hardware engine, `decoupled.rs` the decoupled API of the CUDA
//! route (host phase on the pipeline's workers, device phase on its batch
//! thread, crop windows), `host.rs` the single-image hook the GPU tests
//! use for each route.
#![allow(unsafe_code)]

/// Call an nvJPEG function through the loaded library: a missing symbol or
/// a status other than success becomes an `Error` naming the function.
macro_rules! call {
    ($lib:expr, $f:ident ( $($arg:expr),* )) => {{
        let lib: &$crate::decode::nvjpeg::Library = $lib;
        match lib.lib.$f.as_ref() {
            Err(_) => Err($crate::error::Error::Device(format!(
                "{}: symbol missing from {}", stringify!($f), lib.name
            ))),
            Ok(f) => {
                // SAFETY: the function pointer was resolved from the loaded
                // library with the signature bindgen generated from
                // nvjpeg.h; argument validity is argued at each call site.
                let status = unsafe { f($($arg),*) };
                $crate::decode::nvjpeg::check_status(status).map_err(|source| {
                    $crate::error::Error::Nvjpeg { call: stringify!($f), source }
                })
            }
        }
    }};
}

mod batched;
mod decoupled;
mod device_input;
mod fit;
mod host;
mod meter;
mod pool;
mod relay;
mod route;
#[allow(clippy::all)]
mod sys;
mod window;

pub(crate) use super::Roi;
pub(crate) use batched::{BatchedDecoder, Dest};
pub(crate) use decoupled::{DecoderPool, DecoupledDecoder, Lease, decoder_pool};
pub use host::{HostDecoder, Route};
pub(crate) use meter::{Kind, Ledger, Meter};
pub(crate) use relay::{Delivery, Relay};
pub(crate) use route::{Share, gpu_routable, hardware_draw};
pub use route::{hardware_takes, takes};
pub(crate) use window::{
    engine_takes as engine_takes_window, mcu_size, padded as padded_window, takes_window,
};

use std::ffi::c_int;
use std::sync::{Arc, OnceLock};

use crate::error::{Error, Result};

/// Library names tried in order: nvJPEG 13 (CUDA 13), 12, then unversioned.
const LIBRARY_NAMES: [&str; 3] = ["libnvjpeg.so.13", "libnvjpeg.so.12", "libnvjpeg.so"];

pub use crate::error::NvJpegStatus;

/// An `nvjpegStatus_t` read: success, or the status with its meaning
/// (nvJPEG documentation, "nvJPEG API Return Codes").
pub(crate) fn check_status(status: sys::nvjpegStatus_t) -> std::result::Result<(), NvJpegStatus> {
    let (name, meaning) = match status.0 {
        0 => return Ok(()),
        1 => (
            "NVJPEG_STATUS_NOT_INITIALIZED",
            "the library handle was not initialized",
        ),
        2 => (
            "NVJPEG_STATUS_INVALID_PARAMETER",
            "wrong parameter passed to an nvJPEG call",
        ),
        3 => ("NVJPEG_STATUS_BAD_JPEG", "cannot parse the JPEG stream"),
        4 => (
            "NVJPEG_STATUS_JPEG_NOT_SUPPORTED",
            "JPEG stream not supported by nvJPEG",
        ),
        5 => (
            "NVJPEG_STATUS_ALLOCATOR_FAILURE",
            "a memory allocator failed",
        ),
        6 => (
            "NVJPEG_STATUS_EXECUTION_FAILED",
            "GPU kernel execution failed",
        ),
        7 => (
            "NVJPEG_STATUS_ARCH_MISMATCH",
            "the device capabilities are not enough",
        ),
        8 => ("NVJPEG_STATUS_INTERNAL_ERROR", "internal error in nvJPEG"),
        9 => (
            "NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED",
            "no implementation for this",
        ),
        10 => (
            "NVJPEG_STATUS_INCOMPLETE_BITSTREAM",
            "the bitstream is incomplete",
        ),
        _ => ("NVJPEG_STATUS_UNKNOWN", "a status this build does not know"),
    };
    Err(NvJpegStatus {
        code: status.0,
        name,
        meaning,
    })
}

/// The loaded nvJPEG library.
pub struct Library {
    lib: sys::NvjpegLib,
    /// The file name that loaded.
    pub name: &'static str,
}

impl Library {
    /// The entry points the CUDA route's decoupled decoders call that this
    /// library lacks (none in nvJPEG 12 and 13): a decoder made without
    /// them fails with a typed error naming the symbol, and the route is
    /// not used.
    pub fn missing_decoupled_api(&self) -> Vec<&'static str> {
        let l = &self.lib;
        let present = [
            ("nvjpegDecoderCreate", l.nvjpegDecoderCreate.is_ok()),
            (
                "nvjpegDecoderStateCreate",
                l.nvjpegDecoderStateCreate.is_ok(),
            ),
            (
                "nvjpegDecoderJpegSupported",
                l.nvjpegDecoderJpegSupported.is_ok(),
            ),
            (
                "nvjpegBufferPinnedCreate",
                l.nvjpegBufferPinnedCreate.is_ok(),
            ),
            (
                "nvjpegBufferDeviceCreate",
                l.nvjpegBufferDeviceCreate.is_ok(),
            ),
            (
                "nvjpegBufferPinnedCreateV2",
                l.nvjpegBufferPinnedCreateV2.is_ok(),
            ),
            (
                "nvjpegBufferDeviceCreateV2",
                l.nvjpegBufferDeviceCreateV2.is_ok(),
            ),
            (
                "nvjpegBufferPinnedRetrieve",
                l.nvjpegBufferPinnedRetrieve.is_ok(),
            ),
            (
                "nvjpegBufferDeviceRetrieve",
                l.nvjpegBufferDeviceRetrieve.is_ok(),
            ),
            (
                "nvjpegBufferPinnedResize",
                l.nvjpegBufferPinnedResize.is_ok(),
            ),
            (
                "nvjpegBufferDeviceResize",
                l.nvjpegBufferDeviceResize.is_ok(),
            ),
            (
                "nvjpegStateAttachPinnedBuffer",
                l.nvjpegStateAttachPinnedBuffer.is_ok(),
            ),
            (
                "nvjpegStateAttachDeviceBuffer",
                l.nvjpegStateAttachDeviceBuffer.is_ok(),
            ),
            ("nvjpegJpegStreamParse", l.nvjpegJpegStreamParse.is_ok()),
            (
                "nvjpegDecodeParamsSetOutputFormat",
                l.nvjpegDecodeParamsSetOutputFormat.is_ok(),
            ),
            (
                "nvjpegDecodeParamsSetROI",
                l.nvjpegDecodeParamsSetROI.is_ok(),
            ),
            ("nvjpegDecodeJpegHost", l.nvjpegDecodeJpegHost.is_ok()),
            (
                "nvjpegDecodeJpegTransferToDevice",
                l.nvjpegDecodeJpegTransferToDevice.is_ok(),
            ),
            ("nvjpegDecodeJpegDevice", l.nvjpegDecodeJpegDevice.is_ok()),
        ];
        present
            .into_iter()
            .filter(|(_, ok)| !ok)
            .map(|(name, _)| name)
            .collect()
    }
}

impl std::fmt::Debug for Library {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Library")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Call a symbol that may be missing from this nvJPEG version: a missing
/// symbol becomes an [`Error::Device`] naming the call, a failing status an
/// [`Error::Nvjpeg`].
macro_rules! nvcall {
    ($lib:expr, $f:ident ( $($arg:expr),* )) => {{
        match $lib.lib.$f.as_ref() {
            Err(_) => Err(Error::Device(format!(
                "{}: symbol missing from {}", stringify!($f), $lib.name
            ))),
            Ok(f) => {
                // SAFETY: the function pointer was resolved from the loaded
                // library with the signature bindgen generated from
                // nvjpeg.h; argument validity is argued at each call site.
                let status = unsafe { f($($arg),*) };
                check_status(status).map_err(|source| Error::Nvjpeg {
                    call: stringify!($f),
                    source,
                })
            }
        }
    }};
}

/// Load nvJPEG once per process; an error (never a panic) when it is absent.
pub fn library() -> Result<Arc<Library>> {
    static LIB: OnceLock<std::result::Result<Arc<Library>, String>> = OnceLock::new();
    LIB.get_or_init(|| {
        let mut tried = Vec::new();
        for name in LIBRARY_NAMES {
            // SAFETY: loading nvJPEG runs its ELF initialisers, which only
            // set up internal state (it links no CUDA driver at load time);
            // all symbols are resolved lazily as Result fields.
            match unsafe { sys::NvjpegLib::new(name) } {
                Ok(lib) => return Ok(Arc::new(Library { lib, name })),
                Err(e) => tried.push(format!("{name}: {e}")),
            }
        }
        Err(format!("nvJPEG not found ({})", tried.join("; ")))
    })
    .clone()
    .map_err(Error::Device)
}

/// nvJPEG's `(major, minor, patch)` version.
pub fn version() -> Result<(i32, i32, i32)> {
    let lib = library()?;
    let mut v = [0 as c_int; 3];
    for (i, slot) in v.iter_mut().enumerate() {
        let prop = sys::libraryPropertyType_t(i as u32);
        let out: *mut c_int = slot;
        // `out` points at a live c_int for the duration of the call.
        nvcall!(lib, nvjpegGetProperty(prop, out))?;
    }
    Ok((v[0], v[1], v[2]))
}

/// The hardware JPEG engine as nvJPEG reports it: `(engines, cores per
/// engine)` (`nvjpegGetHardwareDecoderInfo` on a handle of the hardware
/// backend). An error on a GPU without the engine, or without a GPU. The
/// engine lanes size their memory pools to a multiple of engines x cores
/// (issue 16, item 2); `gpufeed decode-bench` prints it.
pub fn hardware_decoder_info() -> Result<(u32, u32)> {
    let h = Handle::with_backend(sys::nvjpegBackend_t::NVJPEG_BACKEND_HARDWARE)?;
    let (mut engines, mut cores) = (0 as std::os::raw::c_uint, 0 as std::os::raw::c_uint);
    let (e, c): (*mut std::os::raw::c_uint, *mut std::os::raw::c_uint) = (&mut engines, &mut cores);
    let raw = h.raw;
    // `raw` is a live handle of the hardware backend; `e` and `c` point at
    // live integers for the duration of the call.
    nvcall!(h.lib, nvjpegGetHardwareDecoderInfo(raw, e, c))?;
    Ok((engines, cores))
}

/// An nvJPEG library handle, destroyed on drop. Field order is drop
/// order: nvJPEG frees the handle's memory through the meter's callbacks
/// as the handle is destroyed, so the meter goes after it.
pub struct Handle {
    raw: sys::nvjpegHandle_t,
    lib: Arc<Library>,
    /// The allocators' context (`meter.rs`), where this handle was made
    /// with them.
    meter: Option<Arc<Meter>>,
}

// SAFETY: nvJPEG documents handles as thread safe ("nvjpegHandle_t ... can
// be used by multiple threads"; per-thread state lives in nvjpegJpegState_t,
// which this type does not hold).
unsafe impl Send for Handle {}
// SAFETY: as above.
unsafe impl Sync for Handle {}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle")
            .field("library", &self.lib.name)
            .finish_non_exhaustive()
    }
}

impl Handle {
    /// Create a handle with the default backend and allocators. Without a
    /// usable GPU this returns nvJPEG's error status, typed.
    pub fn new() -> Result<Handle> {
        let lib = library()?;
        let mut raw: sys::nvjpegHandle_t = std::ptr::null_mut();
        let out: *mut sys::nvjpegHandle_t = &mut raw;
        // `out` points at a live handle slot for the duration of the call.
        nvcall!(lib, nvjpegCreateSimple(out))?;
        if raw.is_null() {
            return Err(Error::Device(
                "nvjpegCreateSimple returned a null handle".into(),
            ));
        }
        Ok(Handle {
            raw,
            lib,
            meter: None,
        })
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // A failing destroy leaks the handle; Drop must not panic.
        // `raw` came from nvjpegCreateSimple and is destroyed only here.
        let raw = self.raw;
        let _ = nvcall!(self.lib, nvjpegDestroy(raw));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_have_names() {
        assert!(check_status(sys::nvjpegStatus_t(0)).is_ok());
        let e = check_status(sys::nvjpegStatus_t(3)).unwrap_err();
        assert_eq!(e.name, "NVJPEG_STATUS_BAD_JPEG");
        let unknown = check_status(sys::nvjpegStatus_t(99)).unwrap_err();
        assert_eq!((unknown.code, unknown.name), (99, "NVJPEG_STATUS_UNKNOWN"));
    }
}
