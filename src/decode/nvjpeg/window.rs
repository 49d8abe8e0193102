//! Crop windows for nvJPEG's region decode (issue 5, item 3): the window
//! asked of nvJPEG is wider than the pixels the draws read, so that those
//! pixels come out as in a full decode.
//!
//! With interpolated chroma upsampling (`NVJPEG_FLAGS_UPSAMPLING_WITH_
//! INTERPOLATION`, which the CPU decoders' output needs), nvJPEG 13.0
//! treats a window's edges as the image's: on an H100 (2026-11-22) windows
//! came out 16–34 dB off the cropped full decode near their edges, on the
//! hardware engine and the decoupled CUDA route alike, and bit-identical
//! without the flag. Interpolation reaches one chroma sample beyond a
//! pixel, never more than one MCU; a window grown to MCU boundaries and
//! then by one more MCU on each side (within the image) gives every pixel
//! of the wanted window the neighbours a full decode uses.

use super::Roi;
use crate::jpeg::JpegHeader;

/// The MCU of an image in pixels, `(width, height)`: 8 × the largest
/// sampling factors; one 8×8 block for a single component, which is coded
/// non-interleaved (ITU T.81, A.2.2).
pub(crate) fn mcu_size(h: &JpegHeader) -> (u32, u32) {
    if h.components == 1 {
        return (8, 8);
    }
    let hmax = h.sampling.iter().map(|s| s.0).max().unwrap_or(1).max(1);
    let vmax = h.sampling.iter().map(|s| s.1).max().unwrap_or(1).max(1);
    (8 * u32::from(hmax), 8 * u32::from(vmax))
}

/// The window to decode for the pixels `want` of an image of `size`: `want`
/// grown outward to MCU boundaries plus one MCU on each side, clipped to
/// the image.
pub(crate) fn padded(want: Roi, size: (u32, u32), mcu: (u32, u32)) -> Roi {
    let axis = |start: u32, len: u32, full: u32, m: u32| {
        let m = m.max(1);
        let lo = (start / m).saturating_sub(1) * m;
        let hi = ((start + len).div_ceil(m) + 1).saturating_mul(m).min(full);
        (lo, hi - lo)
    };
    let (x, w) = axis(want.x, want.w, size.0, mcu.0);
    let (y, h) = axis(want.y, want.h, size.1, mcu.1);
    Roi { x, y, w, h }
}

/// Whether the hardware engine decodes window `roi` (from [`padded`]) of
/// an image of `size` as the full decode would. Not where the window ends
/// at an image edge that falls on an MCU boundary: on the H100 of
/// 2026-11-22 such windows (48x48, 64x64, 128x128, 256x512 and 160x120
/// 4:4:4 images) came out 25–34 dB off the cropped full decode with
/// interpolated upsampling, where windows ending at unaligned edges (the
/// 500x375 photos) and on the decoupled CUDA route were exact. The engine
/// then decodes the whole image.
pub(crate) fn engine_takes(roi: Roi, size: (u32, u32), mcu: (u32, u32)) -> bool {
    let aligned_edge = |end: u32, full: u32, m: u32| end == full && full.is_multiple_of(m.max(1));
    !aligned_edge(roi.x + roi.w, size.0, mcu.0) && !aligned_edge(roi.y + roi.h, size.1, mcu.1)
}

/// Whether nvJPEG is asked for a window of an image at all, or decodes it
/// whole (the device stage then reads the window from the whole image).
/// Not for progressive images. On an H200 (session 59, 2026-11-30)
/// windows of a truncated progressive fuzz seed (`fuzz/libjpeg-turbo-seed-
/// corpora/afl-testcases_jpeg_full_images/id:002424,...`, 4:2:0, its width
/// fuzzed to 59,395) corrupted the heap inside the decoupled route's host
/// phase (`nvjpegDecodeJpegHost`: glibc aborted, AddressSanitizer saw it
/// write past a buffer); whole-frame decodes of the fuzz corpus, this
/// file among them, passed. The whole corpus through the pipeline on CUDA
/// died of it. The engine never
/// takes progressive images, and a progressive image is Huffman-decoded
/// whole on the CPU whatever the window, so the window saved only the
/// GPU's inverse DCT and colour conversion outside it.
pub(crate) fn takes_window(progressive: bool) -> bool {
    !progressive
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_covers_the_window_with_an_mcu_to_spare() {
        let mut checked = 0;
        for &(iw, ih) in &[(500u32, 375u32), (17, 33), (16, 16), (4000, 3000)] {
            for mcu in [(8, 8), (16, 16), (16, 8), (32, 8)] {
                for x in (0..iw).step_by((iw as usize / 7).max(1)) {
                    for w in [1, 3, iw / 3, iw - x] {
                        if w == 0 || x + w > iw {
                            continue;
                        }
                        let want = Roi {
                            x,
                            y: ih / 4,
                            w,
                            h: (ih / 2).max(1),
                        };
                        let r = padded(want, (iw, ih), mcu);
                        // Inside the image, around the window.
                        assert!(r.x <= want.x && want.x + want.w <= r.x + r.w);
                        assert!(r.y <= want.y && want.y + want.h <= r.y + r.h);
                        assert!(r.x + r.w <= iw && r.y + r.h <= ih);
                        // MCU-aligned start; an MCU of margin or the edge.
                        assert_eq!(r.x % mcu.0, 0);
                        assert_eq!(r.y % mcu.1, 0);
                        assert!(r.x == 0 || want.x - r.x >= mcu.0);
                        assert!(r.x + r.w == iw || r.x + r.w - (want.x + want.w) >= mcu.0);
                        assert!(r.y == 0 || want.y - r.y >= mcu.1);
                        assert!(r.y + r.h == ih || r.y + r.h - (want.y + want.h) >= mcu.1);
                        // No more than two MCUs of margin past alignment.
                        assert!(r.w < w + 4 * mcu.0);
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 100);
    }

    #[test]
    fn the_engine_skips_windows_ending_at_an_aligned_edge() {
        let roi = |x, y, w, h| Roi { x, y, w, h };
        // 128x128 4:2:0: ending at the right or the bottom edge.
        assert!(!engine_takes(roi(64, 0, 64, 64), (128, 128), (16, 16)));
        assert!(!engine_takes(roi(0, 64, 64, 64), (128, 128), (16, 16)));
        assert!(engine_takes(roi(16, 16, 64, 64), (128, 128), (16, 16)));
        // 500x375: its edges cut an MCU.
        assert!(engine_takes(roi(304, 224, 196, 151), (500, 375), (16, 16)));
        // 160x120 4:4:4 (8x8 MCU) is aligned both ways; 4:2:0 only across.
        assert!(!engine_takes(roi(96, 64, 64, 56), (160, 120), (8, 8)));
        assert!(engine_takes(roi(16, 64, 64, 56), (160, 120), (16, 16)));
    }
}
