//! The CPU reference of the photometric ops (issue 19): the specification
//! `kernels/photo.cu` reproduces, operation for operation (same formulas,
//! same summation order, separate multiply and add).
//!
//! A draw with photometric ops is first resampled as usual (crop, resize,
//! flip) into three f32 planes of 0..=255 values, `R`, `G`, `B`, each
//! `width × height`. Then, with `gray(r, g, b) = r·0.2989 + g·0.587 +
//! b·0.114` (torchvision's `rgb_to_grayscale`), `clamp` to `[0, 255]` and
//! `blend(a, b, f) = clamp(a·f + b·(1 − f))` (torchvision's `_blend`):
//!
//! * brightness `f`: `x ← clamp(x·f)`;
//! * contrast `f`: `x ← blend(x, m, f)`, `m` the mean of `gray` over the
//!   whole view as it enters the op. The mean's summation order is part of
//!   the specification, so that every backend gets the same bits: lane
//!   `t < 256` sums pixels `t, t + 256, t + 512, …` in order, then the lanes
//!   are added pairwise (`s[t] += s[t + k]` for `k = 128, 64, …, 1`);
//! * saturation `f`: `x ← blend(x, gray, f)`;
//! * hue `f`: torchvision's `_rgb_to_hsv`, `h ← (h + f) mod 1`,
//!   `_hsv_to_rgb`, with `v` in 0..=255 units instead of 0..=1;
//! * grayscale: `r, g, b ← gray`;
//! * blur: separable taps `w(|k|)` for `k = −r..=r` in that order, rows
//!   first, then columns, reflecting at the borders (`−i`, `2(n − 1) − i`);
//! * solarize `t`: `x ← 255 − x` where `x ≥ t`;
//! * normalize and cast as the fused path (`x·scale + shift`);
//! * erasing: the rectangle's elements become the constant, or
//!   [`erase_noise`] of their logical NCHW index, in output units.

use super::cpu::Element;
use super::photo::{BRIGHTNESS, CONTRAST, EraseValue, HUE, PhotoParams, SATURATION};
use super::{Fma, Layout};

/// Lanes of the contrast mean's sum: the kernel's threads per block
/// (`GF_PHOTO_THREADS`).
pub(crate) const LANES: usize = 256;

#[inline]
fn clamp(v: f32) -> f32 {
    v.clamp(0.0, 255.0)
}

#[inline]
pub(crate) fn gray(p: [f32; 3]) -> f32 {
    p[0] * 0.2989 + p[1] * 0.587 + p[2] * 0.114
}

#[inline]
fn blend(a: f32, b: f32, f: f32) -> f32 {
    clamp(a * f + b * (1.0 - f))
}

/// `x.floor()` for `|x| < 2²²`, in float operations only: adding and
/// subtracting 1.5 · 2²³ rounds to the nearest integer (the sum's ulp is
/// 1), and one less where that rounded up. The library's `floorf` is a
/// call on the baseline x86-64 target (no SSE4.1 `roundps`), and a
/// conversion through an integer (`as i32`, which saturates) keeps the
/// hue loop scalar; this one vectorizes. A zero comes out positive; in
/// [`hue`] every such zero is subtracted from or scaled into a value whose
/// sign it cannot change (`hue_matches_the_library_rounding` checks it bit
/// for bit).
#[inline]
fn floor_small(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0;
    let r = (x + MAGIC) - MAGIC;
    if r > x { r - 1.0 } else { r }
}

/// `x.trunc()` for `|x| < 2²²`, as [`floor_small`].
#[inline]
fn trunc_small(x: f32) -> f32 {
    if x < 0.0 {
        -floor_small(-x)
    } else {
        floor_small(x)
    }
}

/// torchvision's hue rotation of one pixel.
pub(crate) fn hue(p: [f32; 3], f: f32) -> [f32; 3] {
    hue_rounded(p, f, trunc_small, floor_small)
}

/// [`hue`] with the `trunc` and `floor` to use (the test compares the
/// library's).
#[inline(always)]
fn hue_rounded(
    p: [f32; 3],
    f: f32,
    trunc: impl Fn(f32) -> f32,
    floor: impl Fn(f32) -> f32,
) -> [f32; 3] {
    let [r, g, b] = p;
    let maxc = r.max(g).max(b);
    let minc = r.min(g).min(b);
    let eqc = maxc == minc;
    let range = maxc - minc;
    let s = range / if eqc { 1.0 } else { maxc };
    let div = if eqc { 1.0 } else { range };
    let rc = (maxc - r) / div;
    let gc = (maxc - g) / div;
    let bc = (maxc - b) / div;
    let h = if maxc == r {
        bc - gc
    } else if maxc == g {
        (rc + 2.0) - bc
    } else {
        (gc + 4.0) - rc
    };
    // fmod(x, 1) of a positive x, exactly (kernels/photo.cu likewise).
    let h = h * (1.0 / 6.0) + 1.0;
    let h = h - trunc(h);
    // torch's remainder: the result takes the divisor's sign.
    let h = h + f;
    let h = h - floor(h);
    let v = maxc;
    let h6 = h * 6.0;
    let i = floor(h6);
    let fr = h6 - i;
    // The sector `i mod 6` (h6 is in [0, 6], so i is 0..=6), kept a float
    // and chosen by comparisons, so that the loop stays vectorized:
    // sector 0 [v, t, p], 1 [q, v, p], 2 [p, v, t], 3 [p, q, v],
    // 4 [t, p, v], 5 [v, p, q].
    let i = if i >= 6.0 { i - 6.0 } else { i };
    let sxf = s * fr;
    let q = clamp((1.0 - sxf) * v);
    let t = clamp((sxf + (1.0 - s)) * v);
    let pp = clamp((1.0 - s) * v);
    let pick = |c: bool, a: f32, b: f32| if c { a } else { b };
    let r = pick(
        i == 0.0 || i == 5.0,
        v,
        pick(i == 1.0, q, pick(i == 4.0, t, pp)),
    );
    let g = pick(
        i == 0.0,
        t,
        pick(i == 1.0 || i == 2.0, v, pick(i == 3.0, q, pp)),
    );
    let b = pick(
        i == 0.0 || i == 1.0,
        pp,
        pick(i == 2.0, t, pick(i == 5.0, q, v)),
    );
    [r, g, b]
}

/// One jitter op on one pixel; `mean` is the contrast mean.
#[inline]
pub(crate) fn jitter_op(op: u8, f: f32, p: [f32; 3], mean: f32) -> [f32; 3] {
    match op {
        BRIGHTNESS => p.map(|x| clamp(x * f)),
        CONTRAST => p.map(|x| blend(x, mean, f)),
        SATURATION => {
            let g = gray(p);
            p.map(|x| blend(x, g, f))
        }
        HUE => hue(p, f),
        _ => p,
    }
}

/// One jitter op over every pixel of `planes` (`n` per channel). The op is
/// matched once per plane, not per pixel, so that each loop holds one op's
/// formula (`jitter_op`'s, value for value) and vectorizes.
fn jitter_plane(op: u8, f: f32, planes: &mut [f32], n: usize, mean: f32) {
    fn each(planes: &mut [f32], n: usize, k: impl Fn([f32; 3]) -> [f32; 3]) {
        let (r, rest) = planes.split_at_mut(n);
        let (g, b) = rest.split_at_mut(n);
        for ((r, g), b) in r.iter_mut().zip(g.iter_mut()).zip(b.iter_mut()) {
            [*r, *g, *b] = k([*r, *g, *b]);
        }
    }
    match op {
        BRIGHTNESS => each(planes, n, |p| jitter_op(BRIGHTNESS, f, p, mean)),
        CONTRAST => each(planes, n, |p| jitter_op(CONTRAST, f, p, mean)),
        SATURATION => each(planes, n, |p| jitter_op(SATURATION, f, p, mean)),
        HUE => each(planes, n, |p| jitter_op(HUE, f, p, mean)),
        _ => {}
    }
}

/// Standard normal noise for element `idx` (logical NCHW index) of a draw
/// erased with seed `seed`: Box–Muller on two 24-bit uniforms from
/// SplitMix64, `sqrt(−2 ln u1) · cos(2π u2)` with `u1` in `(0, 1]`.
pub(crate) fn erase_noise(seed: u64, idx: u64) -> f32 {
    let z = crate::sampler::splitmix(&mut (seed ^ idx.wrapping_mul(0x9E37_79B9_7F4A_7C15)));
    let u1 = ((z >> 40) + 1) as f32 * (1.0 / 16_777_216.0);
    let u2 = ((z >> 16) & 0xFF_FFFF) as f32 * (1.0 / 16_777_216.0);
    (-2.0 * u1.ln()).sqrt() * (6.283_185_5 * u2).cos()
}

fn reflect(i: isize, n: usize) -> usize {
    let n = n as isize;
    let i = if i < 0 { -i } else { i };
    (if i >= n { 2 * (n - 1) - i } else { i }) as usize
}

/// Apply every op up to (not including) normalization to `planes`
/// (`3 × width × height`, planar RGB, 0..=255), using `tmp` for the blur.
pub(crate) fn apply(
    pp: &PhotoParams,
    width: usize,
    height: usize,
    planes: &mut [f32],
    tmp: &mut Vec<f32>,
) {
    let n = width * height;
    assert_eq!(planes.len(), 3 * n);
    let ops = pp.jitter();
    // Without contrast there is no mean to take: every op runs in one pass.
    // Each op runs over the whole view in turn; every op is per pixel, so
    // each pixel sees the same sequence as in the kernel's single loop.
    let cpos = ops.iter().position(|&(op, _)| op == CONTRAST);
    let mut mean = 0.0f32;
    if let Some(cpos) = cpos {
        for &(op, f) in &ops[..cpos] {
            jitter_plane(op, f, planes, n, 0.0);
        }
        let (r, rest) = planes.split_at(n);
        let (g, b) = rest.split_at(n);
        let mut lanes = [0.0f32; LANES];
        for ((r, g), b) in r.chunks(LANES).zip(g.chunks(LANES)).zip(b.chunks(LANES)) {
            for (t, lane) in lanes.iter_mut().enumerate().take(r.len()) {
                *lane += gray([r[t], g[t], b[t]]);
            }
        }
        let mut k = LANES / 2;
        while k > 0 {
            for t in 0..k {
                lanes[t] += lanes[t + k];
            }
            k /= 2;
        }
        mean = lanes[0] / n as f32;
    }
    for &(op, f) in &ops[cpos.unwrap_or(0)..] {
        jitter_plane(op, f, planes, n, mean);
    }
    if pp.grayscale {
        let (r, rest) = planes.split_at_mut(n);
        let (g, b) = rest.split_at_mut(n);
        for ((r, g), b) in r.iter_mut().zip(g.iter_mut()).zip(b.iter_mut()) {
            let v = gray([*r, *g, *b]);
            (*r, *g, *b) = (v, v, v);
        }
    }
    let taps = pp.taps();
    if !taps.is_empty() {
        tmp.clear();
        tmp.resize(3 * n, 0.0);
        // Rows of every plane into `tmp`, then columns back.
        blur_pass(planes, tmp, width, height * 3, taps, true);
        for c in 0..3 {
            let (src, dst) = (&tmp[c * n..][..n], &mut planes[c * n..][..n]);
            blur_pass(src, dst, width, height, taps, false);
        }
    }
}

/// One blur pass over a plane, along rows (`along_x`) or columns. Each
/// output is `0 + Σ_k w(|k|)·src(reflect(i + k))` with `k` ascending, the
/// kernel's order. Outputs are summed a block at a time in registers
/// (`blur_row`): every tap adds into all the block's sums, which are
/// stored once, and the block's independent sums keep the adds in flight.
fn blur_pass(
    src: &[f32],
    dst: &mut [f32],
    width: usize,
    height: usize,
    taps: &[f32],
    along_x: bool,
) {
    let r = taps.len() as isize - 1;
    let ws: Vec<f32> = (-r..=r).map(|k| taps[k.unsigned_abs()]).collect();
    let mut padded = Vec::new();
    let mut at = Vec::with_capacity(ws.len());
    for y in 0..height {
        let out = &mut dst[y * width..][..width];
        if along_x {
            let row = &src[y * width..][..width];
            padded.clear();
            // Reflected at the two edges only; the middle is the row.
            padded.extend((-r..0).map(|i| row[reflect(i, width)]));
            padded.extend_from_slice(row);
            padded.extend((width as isize..width as isize + r).map(|i| row[reflect(i, width)]));
            blur_row(out, &ws, |k| &padded[k..][..width]);
        } else {
            at.clear();
            at.extend((-r..=r).map(|k| reflect(y as isize + k, height) * width));
            blur_row(out, &ws, |k| &src[at[k]..][..width]);
        }
    }
}

/// `out[x] = 0 + Σ_k ws[k]·tap(k)[x]`, `k` ascending; `tap(k)` is the
/// source row aligned with `out` for tap `k`.
#[inline(always)]
fn blur_row<'s>(out: &mut [f32], ws: &[f32], tap: impl Fn(usize) -> &'s [f32]) {
    const BLOCK: usize = 16;
    let x0 = out.len() / BLOCK * BLOCK;
    for (b, o) in out.chunks_exact_mut(BLOCK).enumerate() {
        let mut acc = [0.0f32; BLOCK];
        for (k, &w) in ws.iter().enumerate() {
            let from = &tap(k)[b * BLOCK..][..BLOCK];
            for j in 0..BLOCK {
                acc[j] += w * from[j];
            }
        }
        o.copy_from_slice(&acc);
    }
    for (x, o) in out.iter_mut().enumerate().skip(x0) {
        let mut acc = 0.0f32;
        for (k, &w) in ws.iter().enumerate() {
            acc += w * tap(k)[x];
        }
        *o = acc;
    }
}

/// Solarize, normalize, cast, lay out and erase `planes` (after
/// [`apply`]) into `out` (one draw, `3 × width × height` elements).
pub(crate) fn write<T: Element>(
    pp: &PhotoParams,
    width: usize,
    height: usize,
    planes: &[f32],
    layout: Layout,
    fma: &Fma,
    out: &mut [T],
) {
    let n = width * height;
    assert_eq!(out.len(), 3 * n);
    // One row at a time in f32, then one cast per row (as in
    // `Resampler::run`): a channel's row in NCHW, the three interleaved in
    // NHWC.
    let mut row = vec![0.0f32; 3 * width];
    for y in 0..height {
        for c in 0..3 {
            for x in 0..width {
                let i = y * width + x;
                let mut v = planes[c * n + i];
                if let Some(t) = pp.solarize
                    && v >= t
                {
                    v = 255.0 - v;
                }
                let mut o = v * fma.scale[c] + fma.shift[c];
                if let Some((ex, ey, ew, eh)) = pp.erase
                    && (ex as usize..(ex + ew) as usize).contains(&x)
                    && (ey as usize..(ey + eh) as usize).contains(&y)
                {
                    o = match pp.erase_value {
                        EraseValue::Constant(k) => k,
                        EraseValue::Random => erase_noise(pp.noise, (c * n + i) as u64),
                    };
                }
                match layout {
                    Layout::Nchw => row[x] = o,
                    Layout::Nhwc => row[x * 3 + c] = o,
                }
            }
            if layout == Layout::Nchw {
                T::from_f32_slice(&row[..width], &mut out[c * n + y * width..][..width]);
            }
        }
        if layout == Layout::Nhwc {
            T::from_f32_slice(&row, &mut out[y * width * 3..][..width * 3]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NHWC holds NCHW's values transposed, bit for bit, in every dtype,
    /// with solarize, normalize and random erasing on (the NCHW write is
    /// the one the goldens and the emulated kernel check).
    #[test]
    fn nhwc_is_nchw_transposed() {
        fn check<T: Element + PartialEq + std::fmt::Debug>() {
            let (w, h) = (13, 7);
            let n = w * h;
            let planes: Vec<f32> = (0..3 * n).map(|k| ((k * 37) % 256) as f32).collect();
            let fma = Fma {
                scale: [0.017, 0.0175, 0.0174],
                shift: [-2.1, -2.03, -1.8],
            };
            let mut pp = PhotoParams::NONE;
            pp.solarize = Some(128.0);
            pp.erase = Some((2, 1, 5, 4));
            for value in [EraseValue::Constant(0.5), EraseValue::Random] {
                pp.erase_value = value;
                pp.noise = 99;
                let zero = T::from_f32(0.0);
                let (mut chw, mut hwc) = (vec![zero; 3 * n], vec![zero; 3 * n]);
                write(&pp, w, h, &planes, Layout::Nchw, &fma, &mut chw);
                write(&pp, w, h, &planes, Layout::Nhwc, &fma, &mut hwc);
                for c in 0..3 {
                    for i in 0..n {
                        assert_eq!(hwc[i * 3 + c], chw[c * n + i], "c {c} pixel {i}");
                    }
                }
            }
        }
        check::<u8>();
        check::<half::f16>();
        check::<half::bf16>();
        check::<f32>();
    }

    #[test]
    fn hue_matches_the_library_rounding() {
        let bits = |p: [f32; 3]| p.map(f32::to_bits);
        let factors = [-0.5f32, -0.0, 0.0, 0.5, -0.25, 0.125, 1e-8, -1e-8, 0.3333];
        let mut levels: Vec<f32> = (0..=255).step_by(15).map(|v| v as f32).collect();
        levels.extend([0.5, 254.5, 1e-6, 127.999]);
        for &r in &levels {
            for &g in &levels {
                for &b in &levels {
                    for &f in &factors {
                        let p = [r, g, b];
                        let libm = hue_rounded(p, f, f32::trunc, f32::floor);
                        assert_eq!(bits(hue(p, f)), bits(libm), "{p:?} {f}");
                    }
                }
            }
        }
    }

    #[test]
    fn hue_by_hand() {
        // Pure red rotated by a third of a turn is pure green, by two thirds
        // pure blue; a half turn of (200, 100, 50) is (50, 150, 200).
        let close = |a: [f32; 3], b: [f32; 3]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-3);
        assert!(close(hue([255.0, 0.0, 0.0], 1.0 / 3.0), [0.0, 255.0, 0.0]));
        assert!(close(hue([255.0, 0.0, 0.0], -1.0 / 3.0), [0.0, 0.0, 255.0]));
        assert!(close(hue([200.0, 100.0, 50.0], 0.5), [50.0, 150.0, 200.0]));
        // Grays have no hue.
        assert_eq!(hue([90.0; 3], 0.3), [90.0; 3]);
    }

    #[test]
    fn contrast_uses_the_mean_of_the_image_entering_it() {
        // Brightness 2 first clamps the bright half: the mean contrast then
        // blends toward is the clamped image's, not twice the original's.
        let (w, h) = (4, 2);
        let mut planes: Vec<f32> = (0..3 * w * h).map(|i| [50.0, 200.0][i % 2]).collect();
        let mut pp = PhotoParams::NONE;
        pp.jitter[0] = (BRIGHTNESS, 2.0);
        pp.jitter[1] = (CONTRAST, 0.0);
        pp.n_jitter = 2;
        apply(&pp, w, h, &mut planes, &mut Vec::new());
        // After brightness: 100 and 255; gray = value (all channels equal,
        // weights sum to 0.9999); contrast 0 leaves the mean.
        let mean = (100.0 + 255.0) / 2.0;
        assert!(
            planes.iter().all(|v| (v - mean * 0.9999).abs() < 1e-3),
            "{planes:?}"
        );
    }

    #[test]
    fn blur_keeps_constants_and_reflects() {
        let (w, h) = (5, 4);
        let mut pp = PhotoParams::NONE;
        let taps = super::super::photo::gaussian_taps(5, 1.0);
        pp.taps[..3].copy_from_slice(&taps);
        pp.radius = 2;
        let mut planes = vec![77.0f32; 3 * w * h];
        apply(&pp, w, h, &mut planes, &mut Vec::new());
        assert!(planes.iter().all(|v| (v - 77.0).abs() < 1e-3));
        // An impulse at the corner: reflection doubles the off-centre taps
        // that fold back onto it: out(0,0) = (t0 + 2·0)... = t0², and the
        // pixel one step in gets t1·t0 (from the impulse) on each axis.
        let mut planes = vec![0.0f32; 3 * w * h];
        planes[0] = 1.0;
        apply(&pp, w, h, &mut planes, &mut Vec::new());
        assert!((planes[0] - taps[0] * taps[0]).abs() < 1e-6);
        assert!((planes[1] - taps[1] * taps[0]).abs() < 1e-6);
        assert!((planes[w + 1] - taps[1] * taps[1]).abs() < 1e-6);
    }

    #[test]
    fn noise_is_standard_normal() {
        let v: Vec<f64> = (0..100_000).map(|i| f64::from(erase_noise(9, i))).collect();
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64;
        assert!(
            mean.abs() < 0.02 && (var - 1.0).abs() < 0.02,
            "{mean} {var}"
        );
        assert!(v.iter().all(|x| x.is_finite()));
    }

    /// torchvision's own outputs for fixed parameters
    /// (tests/golden/make_photo_golden.py). Tolerance 2e-3 in 0..255 units
    /// (about 1e-5 of the range): the two sum in different orders (the
    /// blur's 2-D convolution against our two passes, torch's pairwise
    /// mean) and torch's vector code may fuse multiply-adds.
    #[test]
    fn goldens_from_torchvision() {
        use crate::augment::photo::{HUE, gaussian_taps};
        let g: serde_json::Value =
            serde_json::from_str(include_str!("../../tests/golden/photo.json")).unwrap();
        let (w, h) = (
            g["width"].as_u64().unwrap() as usize,
            g["height"].as_u64().unwrap() as usize,
        );
        let f = |v: &serde_json::Value| v.as_f64().unwrap() as f32;
        let pixels: Vec<f32> = g["pixels"].as_array().unwrap().iter().map(f).collect();
        let norm = crate::augment::Normalize {
            mean: [0, 1, 2].map(|c| f(&g["mean"][c])),
            std: [0, 1, 2].map(|c| f(&g["std"][c])),
        }
        .fold();
        let cases = g["cases"].as_array().unwrap();
        assert_eq!(cases.len(), 19);
        for case in cases {
            let name = case["name"].as_str().unwrap();
            let mut pp = PhotoParams::NONE;
            let mut fma = Fma::IDENTITY;
            for op in case["ops"].as_array().unwrap() {
                let arg = |k: usize| f(&op[k]);
                let mut jitter = |id: u8| {
                    pp.jitter[pp.n_jitter as usize] = (id, arg(1));
                    pp.n_jitter += 1;
                };
                match op[0].as_str().unwrap() {
                    "brightness" => jitter(BRIGHTNESS),
                    "contrast" => jitter(CONTRAST),
                    "saturation" => jitter(SATURATION),
                    "hue" => jitter(HUE),
                    "grayscale" => pp.grayscale = true,
                    "blur" => {
                        let taps = gaussian_taps(arg(1) as u32, f64::from(arg(2)));
                        pp.taps[..taps.len()].copy_from_slice(&taps);
                        pp.radius = taps.len() as u32 - 1;
                    }
                    "solarize" => pp.solarize = Some(arg(1) * 255.0),
                    "normalize" => fma = norm,
                    "erase" => {
                        let u = |k: usize| op[k].as_u64().unwrap() as u32;
                        pp.erase = Some((u(2), u(1), u(4), u(3)));
                        pp.erase_value = EraseValue::Constant(arg(5));
                    }
                    other => panic!("unknown op {other}"),
                }
            }
            let mut planes = pixels.clone();
            apply(&pp, w, h, &mut planes, &mut Vec::new());
            let mut out = vec![0.0f32; 3 * w * h];
            write(&pp, w, h, &planes, Layout::Nchw, &fma, &mut out);
            // Normalized values are ~1/(255 std) times larger per unit.
            let tol = if fma == Fma::IDENTITY { 2e-3 } else { 4e-5 };
            let want: Vec<f32> = case["expected"].as_array().unwrap().iter().map(f).collect();
            let worst = out
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            println!("{name}: worst difference {worst:e}");
            for (i, (got, want)) in out.iter().zip(&want).enumerate() {
                assert!(
                    (got - want).abs() <= tol,
                    "{name}: element {i}: got {got}, torchvision {want}"
                );
            }
        }
    }
}
