//! The CPU reference: one view of one sample, from decoded RGB pixels to the
//! output slot. Its formulas are the specification the CUDA kernel follows.
//!
//! **Sampling.** Each output axis is an [`Axis`]: output pixel `o` is centred
//! on source coordinate (relative to the region start)
//!
//! ```text
//! c = (o + offset + 0.5) * scale            (pixel centres)
//! ```
//!
//! *Bilinear* (default, and always when `scale <= 1`): PyTorch
//! `upsample_bilinear2d(align_corners=False)` on the region:
//!
//! ```text
//! s  = max(0, c - 0.5)
//! i0 = min(floor(s), len - 1),  i1 = min(i0 + 1, len - 1),  f = s - i0
//! taps: (i0, 1 - f), (i1, f)
//! ```
//!
//! *Antialiased* (option, only where `scale > 1`): the triangle filter of
//! PIL / torchvision `antialias=True`, support `scale`:
//!
//! ```text
//! lo = max(int(c - scale + 0.5), 0),  hi = min(int(c + scale + 0.5), len)
//! w(i) = max(0, 1 - |i - c + 0.5| / scale)  for i in lo..hi, normalised to sum 1
//! ```
//!
//! **Order.** Separable: the horizontal taps are applied to each source row
//! first (in `f32`), then the vertical taps to those rows. Values stay in
//! 0..=255 units until the end.
//!
//! **Flip.** A flipped axis writes output pixel `o` to position `n - 1 - o`.
//!
//! **Normalize and cast.** `out[c] = cast(v * scale[c] + shift[c])` with the
//! constants folded on the host from mean/std: one multiply and one add,
//! each rounded to f32 (not fused: a fused FMA is a slow library call on CPUs
//! built without the `fma` target feature, and the result must not depend on
//! build flags; the CUDA kernel uses `__fmul_rn`/`__fadd_rn` to match). Float
//! casts round to nearest even; `u8` rounds half away from zero and
//! saturates to 0..=255.

use half::{bf16, f16};

use super::params::{Axis, SampleParams};
use super::{Fma, Layout};
use crate::decode::Image;

/// An element type the output tensor can hold.
pub(crate) trait Element: Copy + bytemuck::Pod + Send + 'static {
    fn from_f32(v: f32) -> Self;
    /// `from_f32` of each value: the same results, in one call per row so
    /// that `f16` converts eight values per instruction (F16C) instead of
    /// one call per value (18 % of the resampler's time with f16 output).
    fn from_f32_slice(src: &[f32], dst: &mut [Self]) {
        for (d, &v) in dst.iter_mut().zip(src) {
            *d = Self::from_f32(v);
        }
    }
    /// Exact: every element type widens to f32 without rounding.
    fn to_f32(self) -> f32;
    /// `to_f32` of each value, in one call per run (F16C for `f16`).
    fn to_f32_slice(src: &[Self], dst: &mut [f32]) {
        for (d, &v) in dst.iter_mut().zip(src) {
            *d = v.to_f32();
        }
    }
}

impl Element for u8 {
    fn from_f32(v: f32) -> u8 {
        v.clamp(0.0, 255.0).round() as u8
    }
    fn to_f32(self) -> f32 {
        f32::from(self)
    }
}

impl Element for f16 {
    fn from_f32(v: f32) -> f16 {
        f16::from_f32(v)
    }
    fn from_f32_slice(src: &[f32], dst: &mut [f16]) {
        use half::slice::HalfFloatSliceExt;
        // Round to nearest even like `f16::from_f32`, with or without F16C.
        dst.convert_from_f32_slice(src);
    }
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    fn to_f32_slice(src: &[f16], dst: &mut [f32]) {
        use half::slice::HalfFloatSliceExt;
        src.convert_to_f32_slice(dst);
    }
}

impl Element for bf16 {
    fn from_f32(v: f32) -> bf16 {
        bf16::from_f32(v)
    }
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
}

impl Element for f32 {
    fn from_f32(v: f32) -> f32 {
        v
    }
    fn to_f32(self) -> f32 {
        self
    }
}

/// Filter taps of all output pixels of one axis, flattened: output `o` uses
/// source pixels `first[o] .. first[o] + count[o]` (absolute) with weights
/// `weights[at[o] ..]`.
#[derive(Debug, Default)]
struct Taps {
    first: Vec<usize>,
    count: Vec<usize>,
    at: Vec<usize>,
    weights: Vec<f32>,
}

impl Taps {
    fn build(&mut self, axis: &Axis, out: usize, antialias: bool) {
        self.first.clear();
        self.count.clear();
        self.at.clear();
        self.weights.clear();
        let len = axis.len as usize;
        let start = axis.start as usize;
        for o in 0..out {
            let c = (o as f32 + axis.offset + 0.5) * axis.scale;
            self.at.push(self.weights.len());
            if antialias && axis.scale > 1.0 {
                let support = axis.scale;
                // `as i64` truncates toward zero, like PIL's (int) cast.
                let lo = ((c - support + 0.5) as i64).max(0) as usize;
                let hi = ((c + support + 0.5) as i64).clamp(0, len as i64) as usize;
                let lo = lo.min(len - 1);
                let hi = hi.max(lo + 1);
                let mut total = 0.0;
                let base = self.weights.len();
                for i in lo..hi {
                    let w = (1.0 - ((i as f32 - c + 0.5) / support).abs()).max(0.0);
                    self.weights.push(w);
                    total += w;
                }
                if total > 0.0 {
                    for w in &mut self.weights[base..] {
                        *w /= total;
                    }
                } else {
                    self.weights[base] = 1.0;
                }
                self.first.push(start + lo);
                self.count.push(hi - lo);
            } else {
                let s = (c - 0.5).max(0.0);
                let i0 = (s.floor() as usize).min(len - 1);
                let i1 = (i0 + 1).min(len - 1);
                let f = (s - i0 as f32).clamp(0.0, 1.0);
                self.first.push(start + i0);
                if i1 == i0 {
                    self.count.push(1);
                    self.weights.push(1.0);
                } else {
                    self.count.push(2);
                    self.weights.extend_from_slice(&[1.0 - f, f]);
                }
            }
        }
    }

    fn taps(&self, o: usize) -> (usize, &[f32]) {
        (
            self.first[o],
            &self.weights[self.at[o]..self.at[o] + self.count[o]],
        )
    }
}

/// One row of the horizontal pass: output pixel `o` (four lanes in `dst`)
/// is `Σ_j ws[o·k + j] · src_row[off[o] + 3j ..][..4]` over `j < k`, summed
/// in order of `j` from 0.
#[inline(always)]
fn h_row(k: usize, src_row: &[f32], off: &[usize], ws: &[f32], dst: &mut [f32]) {
    for ((px, &o), ws) in dst.chunks_exact_mut(4).zip(off).zip(ws.chunks_exact(k)) {
        let from = &src_row[o..o + 3 * k + 1];
        let mut acc = [0.0f32; 4];
        for (j, &w) in ws.iter().enumerate() {
            let v = &from[3 * j..3 * j + 4];
            for c in 0..4 {
                acc[c] += w * v[c];
            }
        }
        px.copy_from_slice(&acc);
    }
}

/// Reusable scratch for one worker thread.
#[derive(Debug, Default)]
pub(crate) struct Resampler {
    xs: Taps,
    ys: Taps,
    /// Horizontally filtered rows: `rows × out_w × 4` values (RGB and a
    /// lane that is dropped, so that a pixel is one SSE register).
    rows: Vec<f32>,
    /// The columns of one source row that the horizontal taps read, as
    /// f32, then zeros for the largest tap count's padded taps and one
    /// float more, so that every tap loads four lanes.
    src_row: Vec<f32>,
    /// Per output pixel of the horizontal pass: where its taps start in
    /// `src_row`, and its weights padded with zeros to the row's largest
    /// tap count.
    h_off: Vec<usize>,
    h_weights: Vec<f32>,
    /// One vertically filtered output row.
    line: Vec<f32>,
    /// That row normalized, in the output's layout and flip, before the cast.
    out_row: Vec<f32>,
    /// A draw's f32 planes and the blur's rows, for the photometric ops
    /// (`photo_cpu.rs`): kept, so that they stop growing at the largest view.
    pub(crate) photo: (Vec<f32>, Vec<f32>),
}

/// Output geometry and value mapping of one view.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OutSpec<'a> {
    pub(crate) width: usize,
    pub(crate) height: usize,
    pub(crate) layout: Layout,
    pub(crate) antialias: bool,
    pub(crate) fma: &'a Fma,
}

impl Resampler {
    /// Bytes of scratch held.
    pub(crate) fn held_bytes(&self) -> usize {
        let f32s = |v: &Vec<f32>| v.capacity() * size_of::<f32>();
        let usizes = |v: &Vec<usize>| v.capacity() * size_of::<usize>();
        let taps =
            |t: &Taps| usizes(&t.first) + usizes(&t.count) + usizes(&t.at) + f32s(&t.weights);
        taps(&self.xs)
            + taps(&self.ys)
            + f32s(&self.rows)
            + f32s(&self.src_row)
            + usizes(&self.h_off)
            + f32s(&self.h_weights)
            + f32s(&self.line)
            + f32s(&self.out_row)
            + f32s(&self.photo.0)
            + f32s(&self.photo.1)
    }

    /// Make room for `rows` horizontally filtered rows of width `out_w`
    /// (the most any crop of an image that tall needs), so that the scratch
    /// stops growing once the tallest image has been seen.
    pub(crate) fn reserve(&mut self, rows: usize, out_w: usize) {
        let n = rows * out_w * 4;
        self.rows.reserve_exact(n.saturating_sub(self.rows.len()));
    }

    /// Free the filtered rows if they hold more than `rows` rows of width
    /// `out_w` (replaced by room for that many, as `reserve` would grow
    /// them).
    pub(crate) fn trim(&mut self, rows: usize, out_w: usize) {
        let n = rows * out_w * 4;
        if self.rows.capacity() > n {
            self.rows = Vec::with_capacity(n);
        }
    }

    /// Write one view of `img` into `out`, which holds exactly one sample
    /// (`3 * width * height` elements) in `spec.layout`.
    pub(crate) fn run<T: Element>(
        &mut self,
        img: &Image,
        p: &SampleParams,
        spec: OutSpec<'_>,
        out: &mut [T],
    ) {
        let (ow, oh) = (spec.width, spec.height);
        assert_eq!(out.len(), 3 * ow * oh, "output slot size");
        debug_assert!(p.x.start + p.x.len <= img.width && p.y.start + p.y.len <= img.height);
        self.xs.build(&p.x, ow, spec.antialias);
        self.ys.build(&p.y, oh, spec.antialias);

        // Horizontal pass over the source rows the vertical taps touch.
        let row_lo = self.ys.first.iter().copied().min().unwrap_or(0);
        let row_hi = (0..oh)
            .map(|o| self.ys.first[o] + self.ys.count[o])
            .max()
            .unwrap_or(0);
        // Every value of `rows[..n]` is written below, so only growth is
        // zero-filled.
        let n = (row_hi - row_lo) * ow * 4;
        if self.rows.len() < n {
            self.rows.resize(n, 0.0);
        }
        let rows = &mut self.rows[..n];
        let xs = &self.xs;
        let stride = img.width as usize * 3;
        // The source columns the taps read, converted to f32 once per row
        // (a vectorized pass); each tap then multiplies and adds a pixel's
        // three channels as one four-lane SSE operation, the fourth lane
        // (the next pixel's red, or the padding) carried through both
        // passes and dropped at the end. Every output pixel takes the row's
        // largest tap count, the extra taps weighted 0 after its own: a sum
        // of non-negative terms plus `0·v` is unchanged, so each channel's
        // sum is the same f32 value as one channel and one tap at a time.
        let col_lo = xs.first.iter().copied().min().unwrap_or(0);
        let col_hi = (0..ow)
            .map(|o| xs.first[o] + xs.count[o])
            .max()
            .unwrap_or(0);
        let k = xs.count.iter().copied().max().unwrap_or(1);
        self.h_off.clear();
        self.h_weights.clear();
        for o in 0..ow {
            let (first, ws) = xs.taps(o);
            self.h_off.push((first - col_lo) * 3);
            self.h_weights.extend_from_slice(ws);
            self.h_weights.resize((o + 1) * k, 0.0);
        }
        self.src_row.clear();
        self.src_row.resize((col_hi - col_lo + k) * 3 + 1, 0.0);
        let src_row = &mut self.src_row;
        for (r, dst) in (row_lo..row_hi).zip(rows.chunks_exact_mut(ow * 4)) {
            let src = &img.data[r * stride..][col_lo * 3..col_hi * 3];
            for (d, &v) in src_row.iter_mut().zip(src) {
                *d = f32::from(v);
            }
            let (off, ws) = (&self.h_off[..], &self.h_weights[..]);
            // A constant tap count lets the compiler unroll the taps and
            // drop their bounds checks.
            match k {
                1 => h_row(1, src_row, off, ws, dst),
                2 => h_row(2, src_row, off, ws, dst),
                3 => h_row(3, src_row, off, ws, dst),
                4 => h_row(4, src_row, off, ws, dst),
                5 => h_row(5, src_row, off, ws, dst),
                6 => h_row(6, src_row, off, ws, dst),
                7 => h_row(7, src_row, off, ws, dst),
                8 => h_row(8, src_row, off, ws, dst),
                _ => h_row(k, src_row, off, ws, dst),
            }
        }

        // Vertical pass over whole rows (contiguous, so it vectorises), then
        // normalize and flip into `out_row` in the output's order, and one
        // cast per row of the output.
        let plane = ow * oh;
        self.line.clear();
        self.line.resize(ow * 4, 0.0);
        self.out_row.clear();
        self.out_row.resize(ow * 3, 0.0);
        let (sc, sh) = (spec.fma.scale, spec.fma.shift);
        for oy in 0..oh {
            let (first, ws) = self.ys.taps(oy);
            // The first tap starts the sum: `0 + w·v` is `w·v` exactly (both
            // are ≥ 0, so no sign of zero can differ).
            let row = |k: usize| &rows[(first + k - row_lo) * ow * 4..][..ow * 4];
            for (acc, v) in self.line.iter_mut().zip(row(0)) {
                *acc = ws[0] * v;
            }
            for (k, w) in ws.iter().enumerate().skip(1) {
                for (acc, v) in self.line.iter_mut().zip(row(k)) {
                    *acc += w * v;
                }
            }
            let ty = if p.flip_v { oh - 1 - oy } else { oy };
            let o = &mut self.out_row;
            for (ox, px) in self.line.chunks_exact(4).enumerate() {
                let tx = if p.flip_h { ow - 1 - ox } else { ox };
                for c in 0..3 {
                    let v = px[c] * sc[c] + sh[c];
                    match spec.layout {
                        Layout::Nchw => o[c * ow + tx] = v,
                        Layout::Nhwc => o[tx * 3 + c] = v,
                    }
                }
            }
            match spec.layout {
                Layout::Nchw => {
                    for c in 0..3 {
                        let dst = &mut out[c * plane + ty * ow..][..ow];
                        T::from_f32_slice(&o[c * ow..][..ow], dst);
                    }
                }
                Layout::Nhwc => T::from_f32_slice(o, &mut out[ty * ow * 3..][..ow * 3]),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! Golden values computed by hand from the formulas in the module docs.
    use super::*;
    use crate::augment::Normalize;
    use crate::augment::params::{Axis, SampleParams};

    /// A gray image with pixel `(x, y)` = `f(x, y)` in all three channels.
    fn gray(w: u32, h: u32, f: impl Fn(u32, u32) -> u8) -> Image {
        let mut data = Vec::new();
        for y in 0..h {
            for x in 0..w {
                data.extend([f(x, y); 3]);
            }
        }
        Image {
            width: w,
            height: h,
            data,
        }
    }

    fn whole(w: u32, h: u32, ow: usize, oh: usize) -> SampleParams {
        let axis = |len: u32, out: usize| Axis {
            start: 0,
            len,
            scale: len as f32 / out as f32,
            offset: 0.0,
        };
        SampleParams {
            x: axis(w, ow),
            y: axis(h, oh),
            flip_h: false,
            flip_v: false,
            photo: crate::augment::photo::PhotoParams::NONE,
        }
    }

    fn run<T: Element + Default>(
        img: &Image,
        p: &SampleParams,
        (ow, oh): (usize, usize),
        layout: Layout,
        antialias: bool,
        fma: &Fma,
    ) -> Vec<T> {
        let mut out = vec![T::default(); 3 * ow * oh];
        let spec = OutSpec {
            width: ow,
            height: oh,
            layout,
            antialias,
            fma,
        };
        Resampler::default().run(img, p, spec, &mut out);
        out
    }

    fn approx(got: &[f32], want: &[f32]) {
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-4, "got {got:?}, want {want:?}");
        }
    }

    #[test]
    fn same_size_copies_exactly() {
        let img = gray(4, 4, |x, y| (x * 50 + y * 3) as u8);
        let out: Vec<u8> = run(
            &img,
            &whole(4, 4, 4, 4),
            (4, 4),
            Layout::Nchw,
            true,
            &Fma::IDENTITY,
        );
        let want: Vec<u8> = (0..4)
            .flat_map(|y| (0..4).map(move |x| (x * 50 + y * 3) as u8))
            .collect();
        assert_eq!(&out[..16], &want[..]);
        assert_eq!(&out[32..], &want[..]);
    }

    /// Resize a one-row gray image of `src` values to `out` pixels.
    fn resize_1d(src: &[u8], out: usize, antialias: bool) -> Vec<f32> {
        let img = gray(src.len() as u32, 1, |x, _| src[x as usize]);
        let p = whole(src.len() as u32, 1, out, 1);
        let v: Vec<f32> = run(&img, &p, (out, 1), Layout::Nchw, antialias, &Fma::IDENTITY);
        v[..out].to_vec()
    }

    #[test]
    fn bilinear_1d_by_hand() {
        // 2 -> 4: centres -0.25 (clamped to 0), 0.25, 0.75, 1.25 (i0 = 1).
        approx(&resize_1d(&[0, 100], 4, false), &[0.0, 25.0, 75.0, 100.0]);
        // 4 -> 2: centres 0.5 and 2.5, midway between neighbours.
        approx(&resize_1d(&[0, 10, 20, 40], 2, false), &[5.0, 30.0]);
    }

    #[test]
    fn antialias_1d_by_hand() {
        // 4 -> 2, scale 2: output 0 has centre 1, taps x = 0,1,2 with
        // triangle weights 0.75, 0.75, 0.25 (sum 1.75) = 3/7, 3/7, 1/7;
        // output 1 has centre 3, taps x = 1,2,3 with 1/7, 3/7, 3/7.
        approx(
            &resize_1d(&[0, 10, 20, 40], 2, true),
            &[50.0 / 7.0, 190.0 / 7.0],
        );
        // Upscaling ignores the option: plain bilinear.
        approx(&resize_1d(&[0, 100], 4, true), &[0.0, 25.0, 75.0, 100.0]);
    }

    /// 4x4 ramp p(x, y) = 10x + 40y to 2x2. Both filters are linear, so the
    /// result is the ramp at the filter's centre of mass: bilinear samples
    /// x, y in {0.5, 2.5}; antialias averages to {5/7, 16/7}.
    #[test]
    fn ramp_4x4_to_2x2_both_filters_and_layouts() {
        let img = gray(4, 4, |x, y| (10 * x + 40 * y) as u8);
        let p = whole(4, 4, 2, 2);
        let bil: Vec<f32> = run(&img, &p, (2, 2), Layout::Nchw, false, &Fma::IDENTITY);
        let want = [25.0, 45.0, 105.0, 125.0];
        for c in 0..3 {
            approx(&bil[c * 4..c * 4 + 4], &want);
        }
        let aa: Vec<f32> = run(&img, &p, (2, 2), Layout::Nhwc, true, &Fma::IDENTITY);
        let want_aa = [250.0 / 7.0, 360.0 / 7.0, 690.0 / 7.0, 800.0 / 7.0];
        for (i, w) in want_aa.iter().enumerate() {
            approx(&aa[i * 3..i * 3 + 3], &[*w; 3]);
        }
    }

    #[test]
    fn flips_mirror_the_output() {
        let img = gray(4, 4, |x, y| (10 * x + 40 * y) as u8);
        let mut p = whole(4, 4, 2, 2);
        p.flip_h = true;
        let h: Vec<f32> = run(&img, &p, (2, 2), Layout::Nchw, false, &Fma::IDENTITY);
        approx(&h[..4], &[45.0, 25.0, 125.0, 105.0]);
        p.flip_v = true;
        let hv: Vec<f32> = run(&img, &p, (2, 2), Layout::Nchw, false, &Fma::IDENTITY);
        approx(&hv[..4], &[125.0, 105.0, 45.0, 25.0]);
        p.flip_h = false;
        let v: Vec<f32> = run(&img, &p, (2, 2), Layout::Nchw, false, &Fma::IDENTITY);
        approx(&v[..4], &[105.0, 125.0, 25.0, 45.0]);
    }

    #[test]
    fn crop_window_and_offset() {
        // Region x in [1, 3), y in [2, 4) of the ramp, same size: exact copy.
        let img = gray(4, 4, |x, y| (10 * x + 40 * y) as u8);
        let p = SampleParams {
            x: Axis {
                start: 1,
                len: 2,
                scale: 1.0,
                offset: 0.0,
            },
            y: Axis {
                start: 2,
                len: 2,
                scale: 1.0,
                offset: 0.0,
            },
            flip_h: false,
            flip_v: false,
            photo: crate::augment::photo::PhotoParams::NONE,
        };
        let out: Vec<f32> = run(&img, &p, (2, 2), Layout::Nchw, false, &Fma::IDENTITY);
        approx(&out[..4], &[90.0, 100.0, 130.0, 140.0]);
        // Resize-then-crop: whole 4-px axis at scale 0.5 (resized to 8),
        // crop offset 3: centres (3.5, 4.5) * 0.5 = 1.75, 2.25 -> s = 1.25,
        // 1.75 -> 10 * s = 12.5, 17.5.
        let img = gray(4, 1, |x, _| (10 * x) as u8);
        let p = SampleParams {
            x: Axis {
                start: 0,
                len: 4,
                scale: 0.5,
                offset: 3.0,
            },
            y: Axis {
                start: 0,
                len: 1,
                scale: 1.0,
                offset: 0.0,
            },
            flip_h: false,
            flip_v: false,
            photo: crate::augment::photo::PhotoParams::NONE,
        };
        let out: Vec<f32> = run(&img, &p, (2, 1), Layout::Nchw, false, &Fma::IDENTITY);
        approx(&out[..2], &[12.5, 17.5]);
    }

    #[test]
    fn normalize_and_every_dtype() {
        // 250/7 = 35.714286 after antialiasing (see the ramp test).
        let img = gray(4, 4, |x, y| (10 * x + 40 * y) as u8);
        let p = whole(4, 4, 2, 2);
        let n = Normalize::IMAGENET.fold();
        let f: Vec<f32> = run(&img, &p, (2, 2), Layout::Nchw, true, &n);
        let v = 250.0f32 / 7.0;
        for c in 0..3 {
            let want = (v / 255.0 - Normalize::IMAGENET.mean[c]) / Normalize::IMAGENET.std[c];
            assert!(
                (f[c * 4] - want).abs() < 1e-5,
                "channel {c}: {} vs {want}",
                f[c * 4]
            );
        }
        // Casts of 35.714286 without normalization, worked out by hand:
        // u8 rounds to 36; f16 keeps 10 mantissa bits: 32 * (1 + 119/1024)
        // = 35.71875; bf16 keeps 7: 32 * (1 + 15/128) = 35.75.
        let u: Vec<u8> = run(&img, &p, (2, 2), Layout::Nchw, true, &Fma::IDENTITY);
        assert_eq!(u[0], 36);
        let h: Vec<f16> = run(&img, &p, (2, 2), Layout::Nchw, true, &Fma::IDENTITY);
        assert_eq!(h[0].to_f32(), 35.71875);
        let b: Vec<bf16> = run(&img, &p, (2, 2), Layout::Nchw, true, &Fma::IDENTITY);
        assert_eq!(b[0].to_f32(), 35.75);
        // u8 saturates.
        assert_eq!(u8::from_f32(300.0), 255);
        assert_eq!(u8::from_f32(-3.0), 0);
    }

    /// Larger goldens from `tests/golden/make_golden.py` (Pillow for the
    /// antialiased shrink, a NumPy transcription of PyTorch's bilinear
    /// otherwise). Tolerance per case in the file: 1e-3 for float bilinear;
    /// 1.0 (one 8-bit level) against Pillow, which rounds to uint8 between
    /// its horizontal and vertical passes and uses fixed-point weights.
    #[test]
    fn goldens_from_script() {
        let g: serde_json::Value =
            serde_json::from_str(include_str!("../../tests/golden/resize.json")).unwrap();
        let (w, h) = (
            g["width"].as_u64().unwrap() as u32,
            g["height"].as_u64().unwrap() as u32,
        );
        let pixels: Vec<u8> = g["pixels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u8)
            .collect();
        let img = Image {
            width: w,
            height: h,
            data: pixels,
        };
        let cases = g["cases"].as_array().unwrap();
        assert_eq!(cases.len(), 6);
        for case in cases {
            let name = case["name"].as_str().unwrap();
            let num = |v: &serde_json::Value| v.as_u64().unwrap() as u32;
            let crop: Vec<u32> = case["crop"].as_array().unwrap().iter().map(num).collect();
            let out: Vec<u32> = case["out"].as_array().unwrap().iter().map(num).collect();
            let (ow, oh) = (out[0] as usize, out[1] as usize);
            let p = SampleParams {
                x: Axis {
                    start: crop[0],
                    len: crop[2],
                    scale: crop[2] as f32 / ow as f32,
                    offset: 0.0,
                },
                y: Axis {
                    start: crop[1],
                    len: crop[3],
                    scale: crop[3] as f32 / oh as f32,
                    offset: 0.0,
                },
                flip_h: false,
                flip_v: false,
                photo: crate::augment::photo::PhotoParams::NONE,
            };
            let aa = case["antialias"].as_bool().unwrap();
            let got: Vec<f32> = run(&img, &p, (ow, oh), Layout::Nhwc, aa, &Fma::IDENTITY);
            let want: Vec<f64> = case["expected"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap())
                .collect();
            let tol = case["tolerance"].as_f64().unwrap();
            let worst = got
                .iter()
                .zip(&want)
                .map(|(g, w)| (*g as f64 - w).abs())
                .fold(0.0, f64::max);
            assert!(worst <= tol, "{name}: worst difference {worst} > {tol}");
        }
    }
}
