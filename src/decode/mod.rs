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

pub use cpu::{CpuBackend, CpuDecoder};
pub use orient::apply_orientation;

/// Whether `bytes` start with the PNG signature: the pipeline decodes
/// such a file as a PNG whatever its name.
pub fn is_png(bytes: &[u8]) -> bool {
    png::is_png(bytes)
}

/// Decode a PNG (any color type, 8 or 16 bits) to RGB, as the pipeline
/// does for files whose bytes are a PNG whatever their name; images over
/// `max_pixels` are refused from the header.
pub fn decode_png(
    bytes: &[u8],
    max_pixels: u64,
    out: &mut Image,
) -> Result<(), crate::error::SampleError> {
    png::decode(bytes, max_pixels, out)
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
    pub(crate) fn window_rows(&self, r: nvjpeg::Roi) -> impl Iterator<Item = &[u8]> {
        let (row, pitch) = (r.w as usize * 3, self.width as usize * 3);
        (r.y as usize..(r.y + r.h) as usize).map(move |y| {
            let at = y * pitch + r.x as usize * 3;
            &self.data[at..at + row]
        })
    }
}
