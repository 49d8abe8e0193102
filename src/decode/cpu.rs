//! CPU JPEG decode with `zune-jpeg` (pure Rust).

use zune_core::bytestream::ZCursor;
use zune_core::colorspace::ColorSpace;
use zune_core::options::DecoderOptions;
use zune_jpeg::JpegDecoder;
use zune_jpeg::errors::DecodeErrors;

use super::{Image, apply_orientation};
use crate::error::{Error, SampleError};
use crate::jpeg::{JpegHeader, Orientation, SofKind};

/// Progressive scans accepted before a file is refused. Real encoders write
/// about ten; crafted files with thousands of scans make decoding quadratic.
const MAX_SCANS: usize = 256;

/// Which library decodes JPEGs on the CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CpuBackend {
    /// `zune-jpeg`: pure Rust, no system dependencies.
    #[default]
    Zune,
    /// libjpeg-turbo through the `turbojpeg` crate; needs the crate feature
    /// `turbojpeg`. Also decodes arithmetic-coded and 8-bit lossless files.
    /// CMYK/YCCK images go to zune-jpeg (TurboJPEG cannot convert them to
    /// RGB).
    TurboJpeg,
}

/// A reusable CPU decoder: one per thread. Holds scratch memory so that the
/// steady state allocates nothing.
pub struct CpuDecoder {
    apply_orientation: bool,
    scratch: Image,
    padded: Vec<u8>,
    #[cfg(feature = "turbojpeg")]
    turbo: Option<super::turbo::Turbo>,
}

impl std::fmt::Debug for CpuDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuDecoder")
            .field("apply_orientation", &self.apply_orientation)
            .field("backend", &self.backend())
            .finish_non_exhaustive()
    }
}

impl Default for CpuDecoder {
    fn default() -> Self {
        CpuDecoder::new(true)
    }
}

impl CpuDecoder {
    /// A zune-jpeg decoder that applies EXIF orientation when
    /// `apply_orientation`.
    pub fn new(apply_orientation: bool) -> CpuDecoder {
        CpuDecoder {
            apply_orientation,
            scratch: Image::default(),
            padded: Vec::new(),
            #[cfg(feature = "turbojpeg")]
            turbo: None,
        }
    }

    /// A decoder using `backend`; an error when that backend is not
    /// compiled in or cannot start.
    pub fn with_backend(backend: CpuBackend, apply_orientation: bool) -> Result<CpuDecoder, Error> {
        #[allow(unused_mut)]
        let mut dec = CpuDecoder::new(apply_orientation);
        match backend {
            CpuBackend::Zune => {}
            #[cfg(feature = "turbojpeg")]
            CpuBackend::TurboJpeg => dec.turbo = Some(super::turbo::Turbo::new()?),
            #[cfg(not(feature = "turbojpeg"))]
            CpuBackend::TurboJpeg => {
                return Err(Error::Config(
                    "CpuBackend::TurboJpeg needs gpufeed built with the `turbojpeg` feature".into(),
                ));
            }
        }
        Ok(dec)
    }

    /// The libjpeg warning of the last successful decode on the
    /// libjpeg-turbo backend (`Corrupt JPEG data: ...`, `Premature end of
    /// JPEG file`): the data was damaged and libjpeg concealed it, as
    /// Pillow does. Always `None` on zune-jpeg, which reports no warnings.
    pub fn warning(&self) -> Option<&str> {
        #[cfg(feature = "turbojpeg")]
        if let Some(t) = &self.turbo {
            return t.warning.as_deref();
        }
        None
    }

    /// Bytes this decoder keeps between images: the oriented image's
    /// scratch and the copy of a file cut short.
    pub(crate) fn held_bytes(&self) -> usize {
        self.scratch.data.capacity() + self.padded.capacity()
    }

    /// Free the orientation scratch if it holds more than `keep` bytes
    /// (the pipeline's bound on kept image buffers).
    pub(crate) fn trim(&mut self, keep: usize) {
        if self.scratch.data.capacity() > keep {
            self.scratch = Image::default();
        }
    }

    /// The library this decoder uses.
    pub fn backend(&self) -> CpuBackend {
        #[cfg(feature = "turbojpeg")]
        if self.turbo.is_some() {
            return CpuBackend::TurboJpeg;
        }
        CpuBackend::Zune
    }

    /// Decode `data`, whose parsed header is `header`, into `out` as RGB.
    ///
    /// Grayscale is replicated to three channels; CMYK and YCCK (Adobe
    /// APP14) are converted to RGB; EXIF orientation is applied when this
    /// decoder was built to do so. Coding processes the backend lacks
    /// (zune-jpeg: lossless, arithmetic, hierarchical; both: precision
    /// other than 8 bits) are refused with [`SampleError::Unsupported`]
    /// before any work.
    pub fn decode(
        &mut self,
        data: &[u8],
        header: &JpegHeader,
        out: &mut Image,
    ) -> Result<(), SampleError> {
        let rotate = self.apply_orientation && header.orientation != Orientation::Normal;
        #[cfg(feature = "turbojpeg")]
        if let Some(turbo) = self.turbo.as_mut()
            && header.components != 4
        {
            let target = if rotate { &mut self.scratch } else { &mut *out };
            turbo.decode(data, header, target)?;
            if rotate {
                apply_orientation(&self.scratch, header.orientation, out);
            }
            return Ok(());
        }
        check_supported(header)?;
        let target = if rotate { &mut self.scratch } else { &mut *out };
        // zune-jpeg is written to return errors, but a decoder fed hostile
        // bytes is the most likely place for a bug; a panic here must cost
        // one sample, not the training run.
        let guarded = |data: &[u8], target: &mut Image| {
            crate::contain::contained(|| zune_decode(data, header, target))
                .map_err(SampleError::Panic)?
        };
        if let Err(first) = guarded(data, target) {
            // libjpeg treats data that stops before EOI as a warning and
            // decodes what is there (jdhuff.c: "premature end of data",
            // filled with zeros); zune-jpeg refuses. Retry once with an EOI
            // appended so a file cut short still yields its pixels, as it
            // does under Pillow.
            if data.ends_with(&[0xFF, 0xD9]) {
                return Err(first);
            }
            self.padded.clear();
            self.padded.extend_from_slice(data);
            self.padded.extend_from_slice(&[0, 0, 0, 0, 0xFF, 0xD9]);
            let padded = std::mem::take(&mut self.padded);
            let target = if rotate { &mut self.scratch } else { &mut *out };
            let second = guarded(&padded, target);
            self.padded = padded;
            second.map_err(|_| first)?;
        }
        if rotate {
            apply_orientation(&self.scratch, header.orientation, out);
        }
        Ok(())
    }
}

fn check_supported(header: &JpegHeader) -> Result<(), SampleError> {
    match header.sof {
        SofKind::Baseline | SofKind::Extended | SofKind::Progressive => {}
        other => {
            return Err(SampleError::Unsupported(format!(
                "{} coding process (CPU decoder)",
                other.name()
            )));
        }
    }
    if header.precision != 8 {
        return Err(SampleError::Unsupported(format!(
            "{}-bit samples",
            header.precision
        )));
    }
    Ok(())
}

fn zune_decode(data: &[u8], header: &JpegHeader, out: &mut Image) -> Result<(), SampleError> {
    let options = DecoderOptions::default()
        .set_strict_mode(false)
        .set_max_width(header.width as usize)
        .set_max_height(header.height as usize)
        .jpeg_set_max_scans(MAX_SCANS)
        .jpeg_set_out_colorspace(ColorSpace::RGB);
    let mut dec = JpegDecoder::new_with_options(ZCursor::new(data), options);
    dec.decode_headers().map_err(map_error)?;
    let (w, h) = dec
        .dimensions()
        .ok_or(SampleError::Truncated("no frame header"))?;
    if (w as u32, h as u32) != (header.width, header.height) {
        return Err(SampleError::Corrupt(format!(
            "decoder sees {w}x{h}, header parser {}x{}",
            header.width, header.height
        )));
    }
    let size = dec
        .output_buffer_size()
        .ok_or(SampleError::Corrupt("size overflow".into()))?;
    if size != w * h * 3 {
        return Err(SampleError::Unsupported(format!(
            "output colorspace {:?}",
            dec.output_colorspace()
        )));
    }
    out.width = w as u32;
    out.height = h as u32;
    out.data.clear();
    out.data.resize(size, 0);
    dec.decode_into(&mut out.data).map_err(map_error)
}

fn map_error(e: DecodeErrors) -> SampleError {
    match e {
        DecodeErrors::ExhaustedData => SampleError::Truncated("entropy-coded data ends early"),
        DecodeErrors::Unsupported(s) => SampleError::Unsupported(format!("{s:?}")),
        DecodeErrors::LargeDimensions(n) => SampleError::Corrupt(format!("dimension {n}")),
        other => SampleError::Corrupt(other.to_string()),
    }
}
