//! The CPU reference: bilinear resampling of a crop window into one output
//! sample.
//!
//! For output pixel `(ox, oy)` of an `out_w × out_h` sample taken from crop
//! `(x, y, w, h)`:
//!
//! ```text
//! sx = max(0, (ox + 0.5) * w / out_w - 0.5)        (pixel centres,
//! sy = max(0, (oy + 0.5) * h / out_h - 0.5)         align_corners=False)
//! x0 = min(floor(sx), w - 1),  x1 = min(x0 + 1, w - 1),  fx = sx - x0
//! y0 = min(floor(sy), h - 1),  y1 = min(y0 + 1, h - 1),  fy = sy - y0
//! v  = (1-fy) * ((1-fx) p(x0,y0) + fx p(x1,y0)) + fy * ((1-fx) p(x0,y1) + fx p(x1,y1))
//! out[c] = cast(v * scale[c] + shift[c])
//! ```
//!
//! with `p` read at `(x + xi, y + yi)` in the image: samples never leave the
//! crop window (edge clamp), exactly like PyTorch's
//! `upsample_bilinear2d(align_corners=False)` applied to the cropped tensor.
//! The cast rounds to nearest (`u8` saturates to 0..=255).

use half::{bf16, f16};

use super::{Crop, Fma, Layout};
use crate::decode::Image;

/// An element type the output tensor can hold.
pub(crate) trait Element: Copy + bytemuck::Pod + Send + 'static {
    fn from_f32(v: f32) -> Self;
}

impl Element for u8 {
    fn from_f32(v: f32) -> u8 {
        v.clamp(0.0, 255.0).round() as u8
    }
}

impl Element for f16 {
    fn from_f32(v: f32) -> f16 {
        f16::from_f32(v)
    }
}

impl Element for bf16 {
    fn from_f32(v: f32) -> bf16 {
        bf16::from_f32(v)
    }
}

impl Element for f32 {
    fn from_f32(v: f32) -> f32 {
        v
    }
}

/// One source coordinate of the bilinear filter: the two neighbouring
/// indices (relative to the crop) and the weight of the second.
#[derive(Debug, Clone, Copy)]
struct Tap {
    i0: usize,
    i1: usize,
    frac: f32,
}

fn taps(out: usize, crop_len: u32, taps: &mut Vec<Tap>) {
    taps.clear();
    let scale = crop_len as f32 / out as f32;
    let last = crop_len as usize - 1;
    for o in 0..out {
        let s = ((o as f32 + 0.5) * scale - 0.5).max(0.0);
        let i0 = (s.floor() as usize).min(last);
        let i1 = (i0 + 1).min(last);
        let frac = (s - i0 as f32).clamp(0.0, 1.0);
        taps.push(Tap { i0, i1, frac });
    }
}

/// Reusable scratch for resampling, one per worker thread.
#[derive(Debug, Default)]
pub(crate) struct Resampler {
    xs: Vec<Tap>,
    ys: Vec<Tap>,
}

impl Resampler {
    /// Resample `crop` of `img` to `out_w × out_h` into `out`, which holds
    /// exactly one sample (`3 * out_w * out_h` elements) in `layout`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn run<T: Element>(
        &mut self,
        img: &Image,
        crop: Crop,
        out_w: usize,
        out_h: usize,
        layout: Layout,
        fma: &Fma,
        out: &mut [T],
    ) {
        assert_eq!(out.len(), 3 * out_w * out_h, "output slot size");
        debug_assert!(crop.x + crop.width <= img.width && crop.y + crop.height <= img.height);
        taps(out_w, crop.width, &mut self.xs);
        taps(out_h, crop.height, &mut self.ys);
        let stride = img.width as usize * 3;
        let (cx, cy) = (crop.x as usize, crop.y as usize);
        let plane = out_w * out_h;
        for (oy, ty) in self.ys.iter().enumerate() {
            let row0 = &img.data[(cy + ty.i0) * stride..][..stride];
            let row1 = &img.data[(cy + ty.i1) * stride..][..stride];
            for (ox, tx) in self.xs.iter().enumerate() {
                let (a, b) = ((cx + tx.i0) * 3, (cx + tx.i1) * 3);
                for c in 0..3 {
                    let top = row0[a + c] as f32 * (1.0 - tx.frac) + row0[b + c] as f32 * tx.frac;
                    let bot = row1[a + c] as f32 * (1.0 - tx.frac) + row1[b + c] as f32 * tx.frac;
                    let v = top * (1.0 - ty.frac) + bot * ty.frac;
                    let idx = match layout {
                        Layout::Nchw => c * plane + oy * out_w + ox,
                        Layout::Nhwc => (oy * out_w + ox) * 3 + c,
                    };
                    out[idx] = T::from_f32(v.mul_add(fma.scale[c], fma.shift[c]));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gray(w: u32, h: u32, px: &[u8]) -> Image {
        Image {
            width: w,
            height: h,
            data: px.iter().flat_map(|&v| [v, v, v]).collect(),
        }
    }

    #[test]
    fn identity_size_copies() {
        let img = gray(2, 2, &[10, 20, 30, 40]);
        let mut out = vec![0u8; 12];
        let mut r = Resampler::default();
        r.run(
            &img,
            Crop::full(2, 2),
            2,
            2,
            Layout::Nchw,
            &Fma::IDENTITY,
            &mut out,
        );
        assert_eq!(&out[..4], &[10, 20, 30, 40]);
        assert_eq!(&out[4..8], &[10, 20, 30, 40]);
    }

    #[test]
    fn upscale_2x_by_hand() {
        // 2x1 -> 4x1: sx = (ox+0.5)/2 - 0.5 = -0.25, 0.25, 0.75, 1.25
        // clamped/interpolated: 0 -> p0, 0.25 -> 0.75 p0 + 0.25 p1,
        // 0.75 -> 0.25 p0 + 0.75 p1, 1.25 -> x0 = 1 (last), p1.
        let img = gray(2, 1, &[0, 100]);
        let mut out = vec![0f32; 12];
        Resampler::default().run(
            &img,
            Crop::full(2, 1),
            4,
            1,
            Layout::Nchw,
            &Fma::IDENTITY,
            &mut out,
        );
        assert_eq!(&out[..4], &[0.0, 25.0, 75.0, 100.0]);
    }

    #[test]
    fn downscale_2x_averages_pairs() {
        // 4x1 -> 2x1: sx = 0.5, 2.5: midway between neighbours.
        let img = gray(4, 1, &[0, 10, 20, 40]);
        let mut out = vec![0f32; 6];
        Resampler::default().run(
            &img,
            Crop::full(4, 1),
            2,
            1,
            Layout::Nhwc,
            &Fma::IDENTITY,
            &mut out,
        );
        assert_eq!(out, vec![5.0, 5.0, 5.0, 30.0, 30.0, 30.0]);
    }
}
