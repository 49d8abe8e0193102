//! PNG on the CPU route (issue 19, item 4): a PNG saved under a `.jpg`
//! name (ImageNet's train set has one; scraped datasets have more) is an
//! image, not a skipped file. Decoded with the `png` crate to 8-bit RGB as
//! Pillow's `convert("RGB")` gives it: gray replicated, palettes expanded,
//! alpha dropped, 16-bit samples scaled to their high byte.

use std::io::Cursor;

use super::Image;
use crate::error::SampleError;

/// The PNG signature.
pub(crate) const MAGIC: &[u8; 8] = b"\x89PNG\r\n\x1a\n";

/// Whether `bytes` start like a PNG.
pub(crate) fn is_png(bytes: &[u8]) -> bool {
    bytes.starts_with(MAGIC)
}

fn corrupt(e: png::DecodingError) -> SampleError {
    match e {
        png::DecodingError::IoError(_) => SampleError::Truncated("PNG data ends early"),
        other => SampleError::Corrupt(format!("PNG: {other}")),
    }
}

/// Decode a PNG into `out` as RGB, refusing images over `max_pixels` from
/// the header, before any allocation.
pub(crate) fn decode(bytes: &[u8], max_pixels: u64, out: &mut Image) -> Result<(), SampleError> {
    let mut dec = png::Decoder::new(Cursor::new(bytes));
    dec.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    // The decoder's own allocation cap follows the pixel limit (8 bytes a
    // pixel: 16-bit RGBA), so a forged header cannot make it allocate more.
    dec.set_limits(png::Limits {
        bytes: usize::try_from(max_pixels.saturating_mul(8)).unwrap_or(usize::MAX),
    });
    let mut reader = dec.read_info().map_err(corrupt)?;
    let (w, h) = (reader.info().width, reader.info().height);
    super::check_size(w, h, max_pixels)?;
    let size = reader
        .output_buffer_size()
        .ok_or_else(|| SampleError::Corrupt("PNG: size overflow".into()))?;
    let mut buf = vec![0u8; size];
    let frame = reader.next_frame(&mut buf).map_err(corrupt)?;
    let channels = match frame.color_type {
        png::ColorType::Grayscale => 1,
        png::ColorType::GrayscaleAlpha => 2,
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        png::ColorType::Indexed => {
            return Err(SampleError::Unsupported("PNG palette not expanded".into()));
        }
    };
    let pixels = w as usize * h as usize;
    out.width = w;
    out.height = h;
    out.data.clear();
    out.data.reserve(pixels * 3);
    for y in 0..h as usize {
        let row = &buf[y * frame.line_size..][..w as usize * channels];
        for p in row.chunks_exact(channels) {
            match channels {
                1 | 2 => out.data.extend([p[0], p[0], p[0]]),
                _ => out.data.extend(&p[..3]),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(w: u32, h: u32, color: png::ColorType, depth: png::BitDepth, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut e = png::Encoder::new(&mut out, w, h);
        e.set_color(color);
        e.set_depth(depth);
        if color == png::ColorType::Indexed {
            e.set_palette(vec![255, 0, 0, 0, 255, 0]);
        }
        e.write_header().unwrap().write_image_data(data).unwrap();
        out
    }

    /// A palette whose length is not a multiple of 3 (5 bytes): the `png`
    /// crate 0.18.1 panics expanding it, which must cost the file, not the
    /// caller (`decode_png_or_webp` contains it).
    #[test]
    fn a_palette_not_in_threes_is_an_error_not_a_panic() {
        let bytes = include_bytes!("../../tests/data/made/palette-of-5-bytes.png");
        let mut img = Image::default();
        let e = crate::decode::decode_png_or_webp(bytes, 1 << 20, &mut img).unwrap_err();
        assert!(
            matches!(e, SampleError::Panic(_) | SampleError::Corrupt(_)),
            "{e:?}"
        );
    }

    #[test]
    fn every_color_type_becomes_rgb() {
        let mut img = Image::default();
        use png::{BitDepth as B, ColorType as C};
        let cases: Vec<(Vec<u8>, [u8; 6])> = vec![
            (
                encode(2, 1, C::Rgb, B::Eight, &[1, 2, 3, 4, 5, 6]),
                [1, 2, 3, 4, 5, 6],
            ),
            (
                encode(2, 1, C::Rgba, B::Eight, &[1, 2, 3, 9, 4, 5, 6, 9]),
                [1, 2, 3, 4, 5, 6],
            ),
            (
                encode(2, 1, C::Grayscale, B::Eight, &[7, 8]),
                [7, 7, 7, 8, 8, 8],
            ),
            (
                encode(2, 1, C::GrayscaleAlpha, B::Eight, &[7, 0, 8, 0]),
                [7, 7, 7, 8, 8, 8],
            ),
            (
                encode(2, 1, C::Indexed, B::Eight, &[1, 0]),
                [0, 255, 0, 255, 0, 0],
            ),
            // 16-bit: the high byte.
            (
                encode(2, 1, C::Grayscale, B::Sixteen, &[0x12, 0x34, 0xAB, 0xCD]),
                [0x12, 0x12, 0x12, 0xAB, 0xAB, 0xAB],
            ),
        ];
        for (bytes, want) in cases {
            assert!(is_png(&bytes));
            decode(&bytes, 100, &mut img).unwrap();
            assert_eq!((img.width, img.height), (2, 1));
            assert_eq!(img.data, want);
        }
        let big = encode(20, 10, C::Grayscale, B::Eight, &[0; 200]);
        assert!(matches!(
            decode(&big, 100, &mut img),
            Err(SampleError::TooLarge { .. })
        ));
        assert!(decode(&big[..40], 1000, &mut img).is_err());
    }
}
