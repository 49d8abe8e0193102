//! Decoding compressed bytes to RGB pixels.
//!
//! The CPU decoder here is the fallback route of the GPU pipeline (for what
//! nvJPEG refuses) and the decoder of the CPU backend.

mod cpu;
pub mod nvjpeg;
mod orient;
pub(crate) mod png;
#[cfg(feature = "turbojpeg")]
mod turbo;
pub(crate) mod webp;

pub use cpu::{CpuBackend, CpuDecoder};
pub use orient::apply_orientation;

/// A window of the stored image, in pixels: what a crop reads and a crop-region
/// decode writes, packed at a pitch of `w * 3` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Roi {
    pub(crate) x: u32,
    pub(crate) y: u32,
    pub(crate) w: u32,
    pub(crate) h: u32,
}

/// Whether `bytes` are a PNG or a WebP (by signature): the pipeline
/// decodes such a file on the CPU whatever its name, and everything else
/// as a JPEG.
pub fn is_png_or_webp(bytes: &[u8]) -> bool {
    png::is_png(bytes) || webp::is_webp(bytes)
}

/// Decode a PNG (any color type, 8 or 16 bits) or a WebP (lossy or
/// lossless; the first frame of an animation) to RGB, alpha dropped, as
/// the pipeline does for files whose bytes are one whatever their name;
/// images over `max_pixels` are refused from the header. Anything else is
/// an [`Unsupported`](crate::error::SampleError::Unsupported) error, and a
/// panic in the decoder crate a [`Panic`](crate::error::SampleError::Panic)
/// error: the `png` crate (0.18.1) panicked on a palette whose length is
/// not a multiple of 3 (found by `cargo fuzz run image`, 2026-11-26), and
/// `gpufeed scan` and `pack` call this outside the pipeline's workers,
/// which contain panics themselves.
pub fn decode_png_or_webp(
    bytes: &[u8],
    max_pixels: u64,
    out: &mut Image,
) -> Result<(), crate::error::SampleError> {
    use crate::error::SampleError;
    type Decode = fn(&[u8], u64, &mut Image) -> Result<(), SampleError>;
    let (name, decode): (&str, Decode) = if png::is_png(bytes) {
        ("PNG", png::decode)
    } else if webp::is_webp(bytes) {
        ("WebP", webp::decode)
    } else {
        return Err(SampleError::Unsupported("neither a PNG nor a WebP".into()));
    };
    crate::contain::contained(|| decode(bytes, max_pixels, out))
        .unwrap_or_else(|m| Err(SampleError::Panic(format!("{name} decoder: {m}"))))
}

/// Refuse an image of `width × height` from its header: empty, or over
/// `max_pixels` (before any allocation).
pub(crate) fn check_size(
    width: u32,
    height: u32,
    max_pixels: u64,
) -> Result<(), crate::error::SampleError> {
    use crate::error::SampleError;
    if width == 0 || height == 0 {
        return Err(SampleError::BadDimensions { width, height });
    }
    if u64::from(width) * u64::from(height) > max_pixels {
        return Err(SampleError::TooLarge {
            width,
            height,
            limit: max_pixels,
        });
    }
    Ok(())
}

/// An 8-bit RGB image, rows top to bottom, pixels interleaved `RGBRGB...`,
/// no row padding.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Image {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// `width * height * 3` bytes.
    pub data: Vec<u8>,
}

impl Image {
    /// The pixel at `(x, y)`.
    pub fn pixel(&self, x: u32, y: u32) -> [u8; 3] {
        let i = (y as usize * self.width as usize + x as usize) * 3;
        [self.data[i], self.data[i + 1], self.data[i + 2]]
    }

    /// The rows of window `r`, top to bottom.
    pub(crate) fn window_rows(&self, r: Roi) -> impl Iterator<Item = &[u8]> {
        let (row, pitch) = (r.w as usize * 3, self.width as usize * 3);
        (r.y as usize..(r.y + r.h) as usize).map(move |y| {
            let at = y * pitch + r.x as usize * 3;
            &self.data[at..at + row]
        })
    }
}
