//! CPU decode with libjpeg-turbo (feature `turbojpeg`), through the
//! TurboJPEG 3 C API (`turbojpeg::raw`).
//!
//! Not the `turbojpeg` crate's safe `Decompressor`: its `decompress` first
//! re-reads the header and returns that step's libjpeg *warning* (for
//! example "Corrupt JPEG data: 5 extraneous bytes before marker 0xdb" on a
//! file with junk between segments) as an error without decompressing, so
//! a caller that treats warnings as success, as Pillow does, handed on an
//! all-black image (issue 15, found by tests/differential.rs). Here the
//! header and the pixels are one `tj3Decompress8` call, and
//! `tj3GetErrorCode` tells a warning (pixels complete, damage concealed)
//! from a fatal error.
#![allow(unsafe_code)]

use std::ffi::{CStr, c_int};
use std::ptr::NonNull;

use turbojpeg::raw;

use super::{Image, Roi};
use crate::error::{Error, SampleError};
use crate::jpeg::{JpegHeader, SofKind};

/// Same scan limit as the zune-jpeg route (see `cpu.rs`).
const MAX_SCANS: c_int = 256;

/// A TurboJPEG decompression instance.
struct Handle(NonNull<std::ffi::c_void>);

// SAFETY: a TurboJPEG instance is plain heap state with no thread affinity;
// TurboJPEG's documentation allows using an instance from any thread as
// long as calls on it are not concurrent ("TurboJPEG instances are not
// thread-safe", turbojpeg.h), which `&mut self` on every call guarantees.
unsafe impl Send for Handle {}

impl Handle {
    fn new() -> Result<Handle, Error> {
        // SAFETY: tj3Init has no preconditions; it returns null on failure.
        let h = unsafe { raw::tj3Init(raw::TJINIT_TJINIT_DECOMPRESS as c_int) };
        let h =
            NonNull::new(h).ok_or_else(|| Error::Config("libjpeg-turbo: tj3Init failed".into()))?;
        let handle = Handle(h);
        // SAFETY: `handle` is a live decompression instance.
        let rc = unsafe {
            raw::tj3Set(
                handle.0.as_ptr(),
                raw::TJPARAM_TJPARAM_SCANLIMIT as c_int,
                MAX_SCANS,
            )
        };
        if rc != 0 {
            return Err(Error::Config(format!(
                "libjpeg-turbo: {}",
                handle.error().1
            )));
        }
        Ok(handle)
    }

    /// The last error: (is a warning, message).
    fn error(&self) -> (bool, String) {
        // SAFETY: the handle is live; tj3GetErrorStr returns a pointer to a
        // NUL-terminated string owned by the instance, valid until the next
        // call on it, and copied here at once.
        unsafe {
            let code = raw::tj3GetErrorCode(self.0.as_ptr());
            let msg = CStr::from_ptr(raw::tj3GetErrorStr(self.0.as_ptr()))
                .to_string_lossy()
                .into_owned();
            (code == raw::TJERR_TJERR_WARNING as c_int, msg)
        }
    }

    /// A frame dimension as libjpeg reads it (after `tj3DecompressHeader`).
    fn get(&self, param: raw::TJPARAM) -> c_int {
        // SAFETY: the handle is live; reading a parameter has no other
        // precondition.
        unsafe { raw::tj3Get(self.0.as_ptr(), param as c_int) }
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: the instance came from tj3Init and is destroyed once.
        unsafe { raw::tj3Destroy(self.0.as_ptr()) }
    }
}

pub(super) struct Turbo {
    handle: Handle,
    /// The libjpeg warning of the last decode, if it had one.
    pub(super) warning: Option<String>,
}

impl Turbo {
    pub(super) fn new() -> Result<Turbo, Error> {
        Ok(Turbo {
            handle: Handle::new()?,
            warning: None,
        })
    }

    /// Decode one image, on a fresh TurboJPEG instance. A used one carries
    /// its past into the next image: libjpeg's state machine is left
    /// mid-image by an error (the next image then fails with "two SOI
    /// markers"), and where a damaged file's header reads no frame (a
    /// tables-only stream) the instance still holds the last image's size
    /// and tables. A fuzz file whose header parser's size matched the
    /// previous image's then failed later, with another message, than it
    /// does on its own: the CPU backend's workers and the device's
    /// progressive lanes skipped it with different errors
    /// (tests/progressive.rs). A fresh instance makes the outcome a
    /// function of the file alone. tj3Init and tj3Destroy cost about
    /// 0.16 µs together, and decoding photos/imagenet-size took 788 µs a
    /// photo with a fresh instance each, 813 reusing one (best of 5,
    /// release build, this 2-core VM, 2026-11-26, on 9b9bd05). Should tj3Init fail,
    /// the old instance is used.
    ///
    /// With `window`, only that rectangle of the image is decoded (its left
    /// edge on an iMCU boundary), into `out` at the window's size.
    pub(super) fn decode(
        &mut self,
        data: &[u8],
        header: &JpegHeader,
        window: Option<Roi>,
        out: &mut Image,
    ) -> Result<(), SampleError> {
        self.warning = None;
        if let Ok(fresh) = Handle::new() {
            self.handle = fresh;
        }
        self.decode_inner(data, header, window, out)
    }

    fn decode_inner(
        &mut self,
        data: &[u8],
        header: &JpegHeader,
        window: Option<Roi>,
        out: &mut Image,
    ) -> Result<(), SampleError> {
        if header.sof == SofKind::Hierarchical || header.precision != 8 {
            return Err(SampleError::Unsupported(format!(
                "{} {}-bit (libjpeg-turbo, 8-bit API)",
                header.sof.name(),
                header.precision
            )));
        }
        let h = self.handle.0.as_ptr();
        // SAFETY: `h` is live and `data` is a valid slice for the call.
        let rc = unsafe { raw::tj3DecompressHeader(h, data.as_ptr(), data.len() as raw::size_t) };
        self.check(rc)?;
        let (tw, th) = (
            self.handle.get(raw::TJPARAM_TJPARAM_JPEGWIDTH),
            self.handle.get(raw::TJPARAM_TJPARAM_JPEGHEIGHT),
        );
        if (tw as i64, th as i64) != (header.width as i64, header.height as i64) {
            return Err(SampleError::Corrupt(format!(
                "libjpeg-turbo sees {tw}x{th}, header parser {}x{}",
                header.width, header.height
            )));
        }
        let r = window.unwrap_or(Roi {
            x: 0,
            y: 0,
            w: header.width,
            h: header.height,
        });
        // The whole image is TJUNCROPPED (all zeros). Set on every call:
        // the instance keeps the last region.
        let region = match window {
            Some(r) => raw::tjregion {
                x: r.x as c_int,
                y: r.y as c_int,
                w: r.w as c_int,
                h: r.h as c_int,
            },
            None => raw::tjregion {
                x: 0,
                y: 0,
                w: 0,
                h: 0,
            },
        };
        // SAFETY: `h` is live and its header was just read, as
        // tj3SetCroppingRegion requires; the region is passed by value.
        let rc = unsafe { raw::tj3SetCroppingRegion(h, region) };
        self.check(rc)?;
        let (w, hh) = (r.w as usize, r.h as usize);
        out.width = r.w;
        out.height = r.h;
        out.data.clear();
        out.data.resize(w * hh * 3, 0);
        let pitch = c_int::try_from(w * 3)
            .map_err(|_| SampleError::Unsupported(format!("width {w} (libjpeg-turbo)")))?;
        let dst = out.data.as_mut_ptr();
        // libjpeg reports errors through longjmp inside the library, never
        // by unwinding; the guard is for a Rust panic in this frame only.
        let rc = crate::contain::contained(|| {
            // SAFETY: `h` is live; `data` is readable for its length; `dst`
            // holds height * pitch bytes, the RGB image of the cropping
            // region just set (the whole frame, whose size libjpeg just
            // reported and was checked equal above, or a window inside
            // it), unscaled.
            unsafe {
                raw::tj3Decompress8(
                    h,
                    data.as_ptr(),
                    data.len() as raw::size_t,
                    dst,
                    pitch,
                    raw::TJPF_TJPF_RGB as c_int,
                )
            }
        })
        .map_err(SampleError::Panic)?;
        self.check(rc)
    }

    /// A call's return code: success, a libjpeg warning (recorded; with
    /// TJPARAM_STOPONWARNING off, the default, the call completed and the
    /// pixels are what libjpeg, and so Pillow, delivers), or a fatal error.
    fn check(&mut self, rc: c_int) -> Result<(), SampleError> {
        if rc == 0 {
            return Ok(());
        }
        match self.handle.error() {
            (true, msg) => {
                self.warning = Some(msg);
                Ok(())
            }
            (false, msg) => Err(SampleError::Corrupt(format!("libjpeg-turbo: {msg}"))),
        }
    }
}
