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

    /// Decode the columns of `window` from its top row to the image's
    /// bottom into `out`, where the backend can: libjpeg-turbo
    /// (`tj3SetCroppingRegion`), on a sequential (not progressive) image
    /// that needs no EXIF rotation. Returns the rectangle decoded, or
    /// `None` when `out` holds the whole image, as from
    /// [`decode`](Self::decode) (also after a window decode failed).
    ///
    /// `window` comes from `nvjpeg::padded_window`: on MCU boundaries, with
    /// an MCU to spare around the pixels the draws read, so that libjpeg's
    /// partial decode, whose "fancy" chroma upsampling treats the window's
    /// left and right edges as the image's (libjpeg.txt, "Decompressing
    /// partial scanlines"), gives those pixels as a full decode does. The
    /// rows below the window are decoded too: libjpeg's skip to the end of
    /// an image marks its data as read without reading it, so a file
    /// damaged there decoded in a window and failed whole (3 fuzz files);
    /// to the bottom, the files that fail are the full decode's. Not
    /// progressive files: those whose scans stop early are smoothed across
    /// blocks (libjpeg's block smoothing), which a window changes more than
    /// an MCU in (4 files of the corpus). A window decode with a libjpeg
    /// warning (damaged data, concealed differently in a window: 9 fuzz
    /// files) is decoded again whole. `tests/differential.rs` holds all
    /// this over the corpus.
    pub(crate) fn decode_window(
        &mut self,
        data: &[u8],
        header: &JpegHeader,
        window: super::Roi,
        out: &mut Image,
    ) -> Result<Option<super::Roi>, SampleError> {
        let to_bottom = super::Roi {
            h: header.height - window.y,
            ..window
        };
        #[cfg(feature = "turbojpeg")]
        if let Some(turbo) = self.turbo.as_mut()
            && header.components != 4
            && header.sof != SofKind::Progressive
            && !(self.apply_orientation && header.orientation != Orientation::Normal)
            && turbo.decode(data, header, Some(to_bottom), out).is_ok()
            && turbo.warning.is_none()
        {
            return Ok(Some(to_bottom));
        }
        #[cfg(not(feature = "turbojpeg"))]
        let _ = to_bottom;
        self.decode(data, header, out).map(|()| None)
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
            turbo.decode(data, header, None, target)?;
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
