//! CPU decode with libjpeg-turbo (feature `turbojpeg`).

use std::panic::{AssertUnwindSafe, catch_unwind};

use super::Image;
use super::cpu::panic_message;
use crate::error::{Error, SampleError};
use crate::jpeg::{JpegHeader, SofKind};

/// Same scan limit as the zune-jpeg route (see `cpu.rs`).
const MAX_SCANS: u32 = 256;

pub(super) struct Turbo {
    dec: turbojpeg::Decompressor,
}

impl Turbo {
    pub(super) fn new() -> Result<Turbo, Error> {
        let mut dec = turbojpeg::Decompressor::new()
            .map_err(|e| Error::Config(format!("libjpeg-turbo: {e}")))?;
        dec.set_scan_limit(MAX_SCANS)
            .map_err(|e| Error::Config(format!("libjpeg-turbo: {e}")))?;
        Ok(Turbo { dec })
    }

    /// Decode one image. After a failure the TurboJPEG handle is replaced:
    /// libjpeg's state machine is left mid-image by an error (the next
    /// image then fails with "two SOI markers"), and one bad file must not
    /// poison the ones after it.
    pub(super) fn decode(
        &mut self,
        data: &[u8],
        header: &JpegHeader,
        out: &mut Image,
    ) -> Result<(), SampleError> {
        let result = self.decode_inner(data, header, out);
        if result.is_err()
            && let Ok(fresh) = Turbo::new()
        {
            *self = fresh;
        }
        result
    }

    fn decode_inner(
        &mut self,
        data: &[u8],
        header: &JpegHeader,
        out: &mut Image,
    ) -> Result<(), SampleError> {
        if header.sof == SofKind::Hierarchical || header.precision != 8 {
            return Err(SampleError::Unsupported(format!(
                "{} {}-bit (libjpeg-turbo, 8-bit API)",
                header.sof.name(),
                header.precision
            )));
        }
        let corrupt = |e: turbojpeg::Error| SampleError::Corrupt(format!("libjpeg-turbo: {e}"));
        match self.dec.read_header(data) {
            Ok(th) if (th.width as u32, th.height as u32) != (header.width, header.height) => {
                return Err(SampleError::Corrupt(format!(
                    "libjpeg-turbo sees {}x{}, header parser {}x{}",
                    th.width, th.height, header.width, header.height
                )));
            }
            Ok(_) => {}
            Err(e) if is_warning(&e) => {}
            Err(e) => return Err(corrupt(e)),
        }
        let (w, h) = (header.width as usize, header.height as usize);
        out.width = header.width;
        out.height = header.height;
        out.data.clear();
        out.data.resize(w * h * 3, 0);
        let image = turbojpeg::Image {
            pixels: out.data.as_mut_slice(),
            width: w,
            pitch: w * 3,
            height: h,
            format: turbojpeg::PixelFormat::RGB,
        };
        // The crate asserts on buffer geometry; contain any panic like the
        // zune-jpeg route does.
        match catch_unwind(AssertUnwindSafe(|| self.dec.decompress(data, image)))
            .map_err(|p| SampleError::Panic(panic_message(&p)))?
        {
            Ok(()) => Ok(()),
            Err(e) if is_warning(&e) => Ok(()),
            Err(e) => Err(corrupt(e)),
        }
    }
}

/// Whether a TurboJPEG failure is one of libjpeg's warnings (`JWRN_*` in
/// jerror.h). With TJPARAM_STOPONWARNING off (the default) TurboJPEG
/// finishes the image and only then reports the warning as a failure; the
/// pixels are what libjpeg, and so Pillow, would deliver.
fn is_warning(e: &turbojpeg::Error) -> bool {
    const WARNINGS: [&str; 6] = [
        "Corrupt JPEG data",
        "Premature end of JPEG file",
        "Warning:",
        "Inconsistent progression sequence",
        "Invalid SOS parameters for sequential JPEG",
        "Application transferred too many scanlines",
    ];
    match e {
        turbojpeg::Error::TurboJpegError(msg) => WARNINGS.iter().any(|w| msg.starts_with(w)),
        _ => false,
    }
}
