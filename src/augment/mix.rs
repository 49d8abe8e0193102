//! Mixup and CutMix (issue 19), with timm's `Mixup` semantics in its
//! default `mode="batch"`: one draw per batch, sample `i` mixed with sample
//! `n − 1 − i` (the batch flipped), soft labels `[batch, classes]` with
//! label smoothing.
//!
//! The draw is a pure function of `(seed, epoch, batch)`, the batch named
//! by its resume position, so it repeats across thread counts and on
//! resume. The CPU reference below is the specification of
//! `kernels/mix.cu`: for every element of the pair, in f32 and rounded
//! once to the output type,
//!
//! * mixup: `x_i ← x_i·λ + x_j·(1 − λ)` (`1 − λ` folded on the host);
//! * cutmix: inside the box, `x_i ← x_j` (both ways: a swap).

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::SeedableRng;

use super::Layout;
use super::cpu::Element;
use crate::sampler::{seed_bytes, uniform_below, unit};

/// timm `Mixup(mixup_alpha, cutmix_alpha, prob, switch_prob, mode="batch",
/// label_smoothing, num_classes)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mixup {
    /// Beta(α, α) for mixup's λ; 0 turns mixup off.
    pub mixup_alpha: f32,
    /// Beta(α, α) for cutmix's λ; 0 turns cutmix off.
    pub cutmix_alpha: f32,
    /// Probability that a batch is mixed at all.
    pub prob: f32,
    /// Probability of cutmix rather than mixup when both are on.
    pub switch_prob: f32,
    /// Label smoothing of the soft labels.
    pub label_smoothing: f32,
    /// Classes: the soft labels' width; every label must be below it.
    pub num_classes: usize,
}

impl Mixup {
    /// The DeiT / timm ImageNet setting: mixup α 0.8, cutmix α 1.0, always
    /// mixed, switch 0.5, label smoothing 0.1.
    pub fn deit(num_classes: usize) -> Mixup {
        Mixup {
            mixup_alpha: 0.8,
            cutmix_alpha: 1.0,
            prob: 1.0,
            switch_prob: 0.5,
            label_smoothing: 0.1,
            num_classes,
        }
    }

    /// Why these settings cannot run, if they cannot.
    pub(crate) fn check(&self) -> Option<String> {
        let unit = |p: f32| (0.0..=1.0).contains(&p);
        let alpha_ok = |a: f32| a >= 0.0 && a.is_finite();
        if !alpha_ok(self.mixup_alpha)
            || !alpha_ok(self.cutmix_alpha)
            || self.mixup_alpha + self.cutmix_alpha == 0.0
        {
            return Some(format!(
                "mixup: alphas {} and {} must be >= 0, one of them > 0",
                self.mixup_alpha, self.cutmix_alpha
            ));
        }
        if !unit(self.prob) || !unit(self.switch_prob) || !unit(self.label_smoothing) {
            return Some("mixup: prob, switch_prob and label_smoothing must be in 0..=1".into());
        }
        if self.num_classes == 0 {
            return Some("mixup: num_classes must be at least 1".into());
        }
        None
    }
}

/// One batch's draw: λ and the cutmix box `(x0, y0, x1, y1)` (half-open),
/// or none for mixup.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct MixParams {
    pub(crate) lam: f32,
    /// `1 − λ` rounded once from f64, as timm's `mul_(1. - lam)`.
    pub(crate) rest: f32,
    pub(crate) cut: Option<(u32, u32, u32, u32)>,
}

impl MixParams {
    /// Whether the images change (timm returns early at λ = 1).
    pub(crate) fn mixes(&self) -> bool {
        self.lam != 1.0
    }
}

/// Standard normal (Box–Muller, the cosine half).
fn normal(rng: &mut ChaCha8Rng) -> f64 {
    let u1 = 1.0 - unit(rng);
    let u2 = unit(rng);
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Gamma(a, 1) by Marsaglia and Tsang (2000), with the `a < 1` boost.
fn gamma(rng: &mut ChaCha8Rng, a: f64) -> f64 {
    if a < 1.0 {
        let u = 1.0 - unit(rng);
        return gamma(rng, a + 1.0) * u.powf(1.0 / a);
    }
    let d = a - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let x = normal(rng);
        let v = 1.0 + c * x;
        if v <= 0.0 {
            continue;
        }
        let v = v * v * v;
        let u = 1.0 - unit(rng);
        if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
            return d * v;
        }
    }
}

/// Beta(a, a).
fn beta(rng: &mut ChaCha8Rng, a: f64) -> f64 {
    let x = gamma(rng, a);
    let y = gamma(rng, a);
    if x + y == 0.0 { 0.5 } else { x / (x + y) }
}

/// timm's `rand_bbox` for centre `(cy, cx)` and its λ correction:
/// `((x0, y0, x1, y1), λ)`.
pub(crate) fn cutmix_box(
    lam: f64,
    (cy, cx): (u32, u32),
    (width, height): (u32, u32),
) -> ((u32, u32, u32, u32), f64) {
    let ratio = (1.0 - lam).sqrt();
    let cut_h = (f64::from(height) * ratio) as i64;
    let cut_w = (f64::from(width) * ratio) as i64;
    let clip = |v: i64, hi: u32| v.clamp(0, i64::from(hi)) as u32;
    let (cy, cx) = (i64::from(cy), i64::from(cx));
    let y0 = clip(cy - cut_h / 2, height);
    let y1 = clip(cy + (cut_h + 1) / 2, height);
    let x0 = clip(cx - cut_w / 2, width);
    let x1 = clip(cx + (cut_w + 1) / 2, width);
    let area = f64::from((y1 - y0) * (x1 - x0));
    let lam = 1.0 - area / (f64::from(width) * f64::from(height));
    ((x0, y0, x1, y1), lam)
}

/// The draw of the batch ending at `position` of `epoch`, for images of
/// `width × height`: timm's `_params_per_batch`, then the box. Draw order:
/// mix?, cutmix?, λ, box centre y, x.
pub(crate) fn mix_params(
    m: &Mixup,
    seed: u64,
    epoch: u64,
    position: u64,
    (width, height): (u32, u32),
) -> MixParams {
    let mut rng = ChaCha8Rng::from_seed(seed_bytes(seed, epoch, position, u64::MAX - 1));
    let mut lam = 1.0f64;
    let mut cut = false;
    if unit(&mut rng) < f64::from(m.prob) {
        let (mix, cm) = (f64::from(m.mixup_alpha), f64::from(m.cutmix_alpha));
        cut = match (mix > 0.0, cm > 0.0) {
            (true, true) => unit(&mut rng) < f64::from(m.switch_prob),
            (false, _) => true,
            (true, false) => false,
        };
        lam = beta(&mut rng, if cut { cm } else { mix });
    }
    let mut boxed = None;
    if cut && lam != 1.0 {
        let cy = uniform_below(&mut rng, u64::from(height)) as u32;
        let cx = uniform_below(&mut rng, u64::from(width)) as u32;
        let (b, l) = cutmix_box(lam, (cy, cx), (width, height));
        boxed = Some(b);
        lam = l;
    }
    MixParams {
        lam: lam as f32,
        rest: (1.0 - lam) as f32,
        cut: boxed,
    }
}

/// Mix `data` (`n` images of `width × height`, 3 channels, `layout`) in
/// place: the formulas above, computed a run of elements at a time (one
/// cast per run, as the resampler writes rows) with the same f32
/// operations, so the values are those of one element at a time.
pub(crate) fn mix_images<T: Element>(
    p: &MixParams,
    data: &mut [T],
    n: usize,
    (width, height): (usize, usize),
    layout: Layout,
) {
    if !p.mixes() {
        return;
    }
    let len = 3 * width * height;
    assert_eq!(data.len(), n * len);
    let mut scratch = [Vec::new(), Vec::new()];
    for i in 0..n / 2 {
        let (head, tail) = data.split_at_mut((n - 1 - i) * len);
        let (a, b) = (&mut head[i * len..(i + 1) * len], &mut tail[..len]);
        match p.cut {
            Some(cut) => {
                for r in box_runs(cut, (width, height), layout) {
                    a[r.clone()].swap_with_slice(&mut b[r]);
                }
            }
            None => mix_runs(p, a, b, &mut scratch),
        }
    }
    // The middle image of an odd batch is its own partner: a swap leaves it
    // as it is, and mixup gives `x·λ + x·(1 − λ)`, rounded once.
    if n % 2 == 1 && p.cut.is_none() {
        let m = &mut data[n / 2 * len..(n / 2 + 1) * len];
        let [fa, _] = &mut scratch;
        for run in m.chunks_mut(RUN) {
            fa.resize(run.len(), 0.0);
            T::to_f32_slice(run, fa);
            for x in fa.iter_mut() {
                *x = *x * p.lam + *x * p.rest;
            }
            T::from_f32_slice(fa, run);
        }
    }
}

/// Elements mixed per cast: long enough to vectorize, short enough that the
/// two f32 runs stay in L1.
const RUN: usize = 1024;

/// Mixup of a pair, `a ← a·λ + b·(1 − λ)` and `b ← b·λ + a·(1 − λ)` from
/// the values before either changed.
fn mix_runs<T: Element>(p: &MixParams, a: &mut [T], b: &mut [T], scratch: &mut [Vec<f32>; 2]) {
    let [fa, fb] = scratch;
    for (ra, rb) in a.chunks_mut(RUN).zip(b.chunks_mut(RUN)) {
        fa.resize(ra.len(), 0.0);
        fb.resize(rb.len(), 0.0);
        T::to_f32_slice(ra, fa);
        T::to_f32_slice(rb, fb);
        for (x, y) in fa.iter_mut().zip(fb.iter_mut()) {
            (*x, *y) = (*x * p.lam + *y * p.rest, *y * p.lam + *x * p.rest);
        }
        T::from_f32_slice(fa, ra);
        T::from_f32_slice(fb, rb);
    }
}

/// The element ranges of one image inside the cutmix box `(x0, y0, x1,
/// y1)` (clipped to the image): a run per box row, per channel in NCHW.
fn box_runs(
    (x0, y0, x1, y1): (u32, u32, u32, u32),
    (width, height): (usize, usize),
    layout: Layout,
) -> impl Iterator<Item = std::ops::Range<usize>> {
    let (x1, y1) = ((x1 as usize).min(width), (y1 as usize).min(height));
    let (x0, y0) = ((x0 as usize).min(x1), (y0 as usize).min(y1));
    let channels = match layout {
        Layout::Nchw => 0..3,
        Layout::Nhwc => 0..1,
    };
    channels.flat_map(move |c| {
        (y0..y1).map(move |y| match layout {
            Layout::Nchw => {
                let row = (c * height + y) * width;
                row + x0..row + x1
            }
            Layout::Nhwc => (y * width + x0) * 3..(y * width + x1) * 3,
        })
    })
}

/// timm's `mixup_target`: `[n, classes]` row-major, `y_i = onehot(t_i)·λ +
/// onehot(t_j)·(1 − λ)` with on `1 − s + s/k` and off `s/k`.
pub(crate) fn soft_labels(labels: &[u32], m: &Mixup, p: &MixParams) -> Vec<f32> {
    let (n, k) = (labels.len(), m.num_classes);
    let off = m.label_smoothing / k as f32;
    let on = 1.0 - m.label_smoothing + off;
    let mut out = vec![0.0f32; n * k];
    for (i, row) in out.chunks_exact_mut(k).enumerate() {
        let (a, b) = (labels[i] as usize, labels[n - 1 - i] as usize);
        for (c, v) in row.iter_mut().enumerate() {
            let y1 = if c == a { on } else { off };
            let y2 = if c == b { on } else { off };
            *v = y1 * p.lam + y2 * p.rest;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The formulas of the module docs, one element at a time.
    fn by_element<T: Element>(
        p: &MixParams,
        data: &mut [T],
        n: usize,
        (width, height): (usize, usize),
        layout: Layout,
    ) {
        let len = 3 * width * height;
        for i in 0..n.div_ceil(2) {
            let j = n - 1 - i;
            for c in 0..3 {
                for y in 0..height {
                    for x in 0..width {
                        let at = match layout {
                            Layout::Nchw => (c * height + y) * width + x,
                            Layout::Nhwc => (y * width + x) * 3 + c,
                        };
                        let (a, b) = (data[i * len + at], data[j * len + at]);
                        let (na, nb) = match p.cut {
                            Some((x0, y0, x1, y1)) => {
                                let inside = (x0 as usize..x1 as usize).contains(&x)
                                    && (y0 as usize..y1 as usize).contains(&y);
                                if inside { (b, a) } else { (a, b) }
                            }
                            None => {
                                let (fa, fb) = (a.to_f32(), b.to_f32());
                                (
                                    T::from_f32(fa * p.lam + fb * p.rest),
                                    T::from_f32(fb * p.lam + fa * p.rest),
                                )
                            }
                        };
                        data[i * len + at] = na;
                        data[j * len + at] = nb;
                    }
                }
            }
        }
    }

    /// The run-at-a-time mix equals the element-at-a-time formulas bit for
    /// bit: every dtype and layout, odd and even batches, runs longer than
    /// `RUN`, boxes inside, on the edge and past it.
    #[test]
    fn runs_equal_the_formulas() {
        fn check<T: Element + PartialEq + std::fmt::Debug>(make: fn(f32) -> T) {
            let (w, h) = (37, 29);
            let len = 3 * w * h;
            let lams = [0.3f32, 0.0, 0.77];
            let cuts = [
                None,
                Some((3, 4, 20, 17)),
                Some((0, 0, 37, 29)),
                Some((30, 20, 40, 35)),
                Some((5, 5, 5, 9)),
            ];
            for n in [1, 2, 5, 6] {
                let base: Vec<T> = (0..n * len)
                    .map(|k| make(((k * 7919) % 509) as f32 * 0.5 - 3.25))
                    .collect();
                for layout in [Layout::Nchw, Layout::Nhwc] {
                    for lam in lams {
                        for cut in cuts {
                            let p = MixParams {
                                lam,
                                rest: 1.0 - lam,
                                cut,
                            };
                            let (mut got, mut want) = (base.clone(), base.clone());
                            mix_images(&p, &mut got, n, (w, h), layout);
                            by_element(&p, &mut want, n, (w, h), layout);
                            assert!(got == want, "n {n} {layout:?} lam {lam} cut {cut:?}");
                        }
                    }
                }
            }
        }
        check::<u8>(|v| u8::from_f32(v * 2.0 + 60.0));
        check::<half::f16>(half::f16::from_f32);
        check::<half::bf16>(half::bf16::from_f32);
        check::<f32>(|v| v);
    }

    #[test]
    fn beta_has_the_right_mean_and_variance() {
        let mut rng = ChaCha8Rng::from_seed([3; 32]);
        for a in [0.2f64, 0.8, 1.0, 4.0] {
            let v: Vec<f64> = (0..40_000).map(|_| beta(&mut rng, a)).collect();
            let mean = v.iter().sum::<f64>() / v.len() as f64;
            let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64;
            // Beta(a, a): mean 1/2, variance 1 / (4 (2a + 1)).
            let want = 1.0 / (4.0 * (2.0 * a + 1.0));
            assert!((mean - 0.5).abs() < 0.01, "a {a}: mean {mean}");
            assert!(
                (var - want).abs() < 0.05 * want + 0.002,
                "a {a}: var {var} want {want}"
            );
            assert!(v.iter().all(|x| (0.0..=1.0).contains(x)));
        }
    }

    #[test]
    fn draws_are_pure_and_switch() {
        let m = Mixup::deit(10);
        let d = |pos| mix_params(&m, 5, 1, pos, (32, 24));
        assert_eq!(d(40), d(40));
        let cuts = (0..2000).filter(|&k| d(k).cut.is_some()).count();
        assert!((900..1100).contains(&cuts), "{cuts}");
        for k in 0..200 {
            let p = d(k);
            if let Some((x0, y0, x1, y1)) = p.cut {
                assert!(x0 <= x1 && x1 <= 32 && y0 <= y1 && y1 <= 24);
                let area = f64::from((x1 - x0) * (y1 - y0)) / (32.0 * 24.0);
                assert!((f64::from(p.lam) - (1.0 - area)).abs() < 1e-6);
            }
        }
        let off = Mixup { prob: 0.0, ..m };
        assert!(!mix_params(&off, 5, 1, 3, (32, 24)).mixes());
    }

    /// timm's own outputs (tests/golden/make_mix_golden.py): rand_bbox for
    /// fixed centres, the mixed images for a fixed λ and box, and
    /// mixup_target.
    #[test]
    fn goldens_from_timm() {
        let g: serde_json::Value =
            serde_json::from_str(include_str!("../../tests/golden/mix.json")).unwrap();
        let f = |v: &serde_json::Value| v.as_f64().unwrap();
        let u = |v: &serde_json::Value| v.as_u64().unwrap() as u32;
        for b in g["boxes"].as_array().unwrap() {
            let (lam, cy, cx) = (f(&b["lam"]), u(&b["cy"]), u(&b["cx"]));
            let (bx, l) = cutmix_box(lam, (cy, cx), (u(&b["w"]), u(&b["h"])));
            let want = b["box"].as_array().unwrap();
            // timm: (yl, yh, xl, xh).
            assert_eq!(
                (bx.1, bx.3, bx.0, bx.2),
                (u(&want[0]), u(&want[1]), u(&want[2]), u(&want[3]))
            );
            assert!((l - f(&b["lam_out"])).abs() < 1e-12);
        }
        let shape: Vec<usize> = g["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect();
        let (n, h, w) = (shape[0], shape[2], shape[3]);
        let x: Vec<f32> = g["x"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| f(v) as f32)
            .collect();
        let labels: Vec<u32> = g["labels"].as_array().unwrap().iter().map(u).collect();
        for case in g["cases"].as_array().unwrap() {
            let lam = f(&case["lam"]);
            let cut = case["box"]
                .as_array()
                .map(|b| (u(&b[2]), u(&b[0]), u(&b[3]), u(&b[1])));
            let p = MixParams {
                lam: lam as f32,
                rest: (1.0 - lam) as f32,
                cut,
            };
            let mut data = x.clone();
            mix_images(&p, &mut data, n, (w, h), Layout::Nchw);
            let want: Vec<f32> = case["x"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| f(v) as f32)
                .collect();
            assert_eq!(data, want, "{}", case["name"]);
            let m = Mixup {
                label_smoothing: f(&case["smoothing"]) as f32,
                num_classes: u(&case["classes"]) as usize,
                ..Mixup::deit(1)
            };
            let y = soft_labels(&labels, &m, &p);
            let want: Vec<f64> = case["y"].as_array().unwrap().iter().map(f).collect();
            for (a, b) in y.iter().zip(&want) {
                assert!(
                    (f64::from(*a) - b).abs() < 1e-6,
                    "{}: {a} vs {b}",
                    case["name"]
                );
            }
        }
    }
}
