//! WebP on the CPU route (issue 19, item 4; WebDataset shards carry
//! `.webp` members, issue 18): decoded with `image-webp` (image-rs's
//! pure-Rust decoder, lossy and lossless) to 8-bit RGB as Pillow's
//! `convert("RGB")` gives it: alpha dropped, the first frame of an
//! animation.

use std::io::Cursor;

use super::Image;
use crate::error::SampleError;

/// Whether `bytes` start like a WebP file: a RIFF container of type WEBP.
pub(crate) fn is_webp(bytes: &[u8]) -> bool {
    bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP"
}

fn corrupt(e: image_webp::DecodingError) -> SampleError {
    match e {
        image_webp::DecodingError::IoError(_) => SampleError::Truncated("WebP data ends early"),
        other => SampleError::Corrupt(format!("WebP: {other}")),
    }
}

/// Decode a WebP into `out` as RGB, refusing images over `max_pixels` from
/// the header, before any allocation.
pub(crate) fn decode(bytes: &[u8], max_pixels: u64, out: &mut Image) -> Result<(), SampleError> {
    let mut dec = image_webp::WebPDecoder::new(Cursor::new(bytes)).map_err(corrupt)?;
    // The decoder's own allocations (lossless transforms, animation
    // canvases) follow the pixel limit too: 4 bytes a pixel, RGBA.
    dec.set_memory_limit(usize::try_from(max_pixels.saturating_mul(4)).unwrap_or(usize::MAX));
    let (w, h) = dec.dimensions();
    super::check_size(w, h, max_pixels)?;
    let size = dec
        .output_buffer_size()
        .ok_or_else(|| SampleError::Corrupt("WebP: size overflow".into()))?;
    out.width = w;
    out.height = h;
    if dec.has_alpha() {
        let mut rgba = vec![0u8; size];
        dec.read_image(&mut rgba).map_err(corrupt)?;
        out.data.clear();
        out.data.reserve(w as usize * h as usize * 3);
        for p in rgba.chunks_exact(4) {
            out.data.extend(&p[..3]);
        }
    } else {
        out.data.resize(size, 0);
        dec.read_image(&mut out.data).map_err(corrupt)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use image_webp::{ColorType, WebPEncoder};

    fn encode(w: u32, h: u32, color: ColorType, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        WebPEncoder::new(&mut out)
            .encode(data, w, h, color)
            .unwrap();
        out
    }

    /// Lossless WebP round trips exactly; alpha is dropped, gray
    /// replicated.
    #[test]
    fn lossless_webp_becomes_rgb() {
        let mut img = Image::default();
        let cases: Vec<(Vec<u8>, Vec<u8>)> = vec![
            (
                encode(2, 1, ColorType::Rgb8, &[1, 2, 3, 4, 5, 6]),
                vec![1, 2, 3, 4, 5, 6],
            ),
            (
                encode(2, 1, ColorType::Rgba8, &[1, 2, 3, 9, 4, 5, 6, 9]),
                vec![1, 2, 3, 4, 5, 6],
            ),
            (encode(2, 1, ColorType::L8, &[7, 8]), vec![7, 7, 7, 8, 8, 8]),
        ];
        for (bytes, want) in cases {
            assert!(is_webp(&bytes));
            decode(&bytes, 100, &mut img).unwrap();
            assert_eq!((img.width, img.height), (2, 1));
            assert_eq!(img.data, want);
        }
        let big = encode(20, 10, ColorType::L8, &[0; 200]);
        assert!(matches!(
            decode(&big, 100, &mut img),
            Err(SampleError::TooLarge { .. })
        ));
        assert!(decode(&big[..big.len() / 2], 1000, &mut img).is_err());
        assert!(!is_webp(b"RIFF\0\0\0\0WAVEfmt "));
    }
}
