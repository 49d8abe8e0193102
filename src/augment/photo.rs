//! Photometric ops of a view (issue 19): what a user asks for, and the
//! per-draw parameters drawn from it on the host.
//!
//! The ops follow torchvision's `transforms.v2` on float images, applied
//! after the crop, resize and flip, in this fixed order (the order of the
//! SimCLR, BYOL and DINO recipes):
//!
//! 1. [`ColorJitter`] (as `RandomApply([ColorJitter(..)], p)`): brightness,
//!    contrast, saturation and hue in a random order;
//! 2. [`View::grayscale`](super::View::grayscale) (`RandomGrayscale`);
//! 3. [`GaussianBlur`] (`RandomApply([GaussianBlur(..)], p)`);
//! 4. [`Solarize`] (`RandomSolarize`);
//! 5. normalize and cast;
//! 6. [`RandomErasing`], on the normalized values as torchvision's
//!    references place it.
//!
//! Every draw is a pure function of `(seed, epoch, sample, view)`, from a
//! ChaCha8 stream of its own, so turning an op on does not move the crops.
//! The arithmetic is in `photo_cpu.rs` (the specification) and
//! `kernels/photo.cu`.

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};

use crate::sampler::{seed_bytes, uniform, uniform_below, unit};

/// torchvision `ColorJitter(brightness, contrast, saturation, hue)`, applied
/// with probability `p` (`RandomApply`). Each of brightness, contrast and
/// saturation `x` draws its factor uniformly from `[max(0, 1 - x), 1 + x]`,
/// hue from `[-hue, hue]`; 0 leaves that op out. The four ops run in a
/// random order, as torchvision's `randperm(4)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ColorJitter {
    /// Brightness jitter: the image is multiplied by the factor.
    pub brightness: f32,
    /// Contrast jitter: the image is blended with the mean of its
    /// grayscale version.
    pub contrast: f32,
    /// Saturation jitter: the image is blended with its grayscale version.
    pub saturation: f32,
    /// Hue jitter in turns (at most 0.5): the hue is rotated in HSV.
    pub hue: f32,
    /// Probability that the jitter is applied at all.
    pub p: f32,
}

impl ColorJitter {
    /// `ColorJitter(brightness, contrast, saturation, hue)` applied with
    /// probability `p`.
    pub fn new(brightness: f32, contrast: f32, saturation: f32, hue: f32, p: f32) -> ColorJitter {
        ColorJitter {
            brightness,
            contrast,
            saturation,
            hue,
            p,
        }
    }
}

/// torchvision `GaussianBlur(kernel, sigma)`, applied with probability `p`:
/// sigma drawn uniformly from `sigma`, taps
/// `exp(-d² / 2σ²)` normalized to sum 1, reflect padding at the borders.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GaussianBlur {
    /// Taps per axis: odd, at most [`GaussianBlur::MAX_KERNEL`], and less
    /// than twice the view's shorter side (reflect padding needs it).
    pub kernel: u32,
    /// Range of the standard deviation, in output pixels.
    pub sigma: (f32, f32),
    /// Probability of blurring.
    pub p: f32,
}

impl GaussianBlur {
    /// The widest kernel the GPU descriptor has room for.
    pub const MAX_KERNEL: u32 = 63;

    /// `GaussianBlur(kernel, sigma)` applied with probability `p`.
    pub fn new(kernel: u32, sigma: (f32, f32), p: f32) -> GaussianBlur {
        GaussianBlur { kernel, sigma, p }
    }
}

/// torchvision `RandomSolarize(threshold, p)`: values at or above
/// `threshold` (in 0..1 units, as for float images) are inverted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Solarize {
    /// Threshold in 0..1 units (0.5 is PIL's 128).
    pub threshold: f32,
    /// Probability of solarizing.
    pub p: f32,
}

/// What [`RandomErasing`] writes into the erased rectangle.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum EraseValue {
    /// A constant, in the output's units (after normalization).
    Constant(f32),
    /// Standard normal noise per element (torchvision's `value="random"`).
    Random,
}

/// torchvision `RandomErasing(p, scale, ratio, value)`, applied after
/// normalization: a rectangle of area fraction drawn from `scale` and
/// aspect ratio (h/w) drawn log-uniformly from `ratio` is overwritten; 10
/// attempts, none if no attempt fits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RandomErasing {
    /// Probability of erasing.
    pub p: f32,
    /// Range of the erased area as a fraction of the view.
    pub scale: (f32, f32),
    /// Range of the rectangle's height / width.
    pub ratio: (f32, f32),
    /// What the rectangle gets.
    pub value: EraseValue,
}

impl Default for RandomErasing {
    /// torchvision's defaults: p 0.5, scale (0.02, 0.33), ratio (0.3, 3.3),
    /// value 0.
    fn default() -> RandomErasing {
        RandomErasing {
            p: 0.5,
            scale: (0.02, 0.33),
            ratio: (0.3, 3.3),
            value: EraseValue::Constant(0.0),
        }
    }
}

/// The photometric ops of one view; all off by default.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Photometric {
    pub(crate) jitter: Option<ColorJitter>,
    pub(crate) grayscale: f32,
    pub(crate) blur: Option<GaussianBlur>,
    pub(crate) solarize: Option<Solarize>,
    pub(crate) erasing: Option<RandomErasing>,
}

impl Photometric {
    /// Whether any op may run (the view then takes the photometric path).
    pub(crate) fn any(&self) -> bool {
        let on = |p: f32| p > 0.0;
        self.jitter.is_some_and(|j| on(j.p))
            || on(self.grayscale)
            || self.blur.is_some_and(|b| on(b.p))
            || self.solarize.is_some_and(|s| on(s.p))
            || self.erasing.is_some_and(|e| on(e.p))
    }

    /// Why these settings cannot run on a `width × height` view, if they
    /// cannot.
    pub(crate) fn check(&self, width: usize, height: usize) -> Option<String> {
        let prob = |name: &str, p: f32| {
            (!(0.0..=1.0).contains(&p)).then(|| format!("{name}: probability {p} outside 0..=1"))
        };
        if let Some(j) = self.jitter {
            for (name, v) in [
                ("brightness", j.brightness),
                ("contrast", j.contrast),
                ("saturation", j.saturation),
            ] {
                if !(v >= 0.0 && v.is_finite()) {
                    return Some(format!("color jitter: {name} {v} must be >= 0"));
                }
            }
            if !(0.0..=0.5).contains(&j.hue) {
                return Some(format!("color jitter: hue {} outside 0..=0.5", j.hue));
            }
            if let Some(e) = prob("color jitter", j.p) {
                return Some(e);
            }
        }
        if let Some(e) = prob("grayscale", self.grayscale) {
            return Some(e);
        }
        if let Some(b) = self.blur {
            let short = width.min(height) as u32;
            if b.kernel % 2 == 0 || b.kernel > GaussianBlur::MAX_KERNEL {
                return Some(format!(
                    "gaussian blur: kernel {} must be odd and at most {}",
                    b.kernel,
                    GaussianBlur::MAX_KERNEL
                ));
            }
            if b.kernel / 2 >= short {
                return Some(format!(
                    "gaussian blur: kernel {} too wide for a {width}x{height} view",
                    b.kernel
                ));
            }
            if !(b.sigma.0 > 0.0 && b.sigma.0 <= b.sigma.1 && b.sigma.1.is_finite()) {
                return Some(format!(
                    "gaussian blur: sigma {:?} must be 0 < lo <= hi",
                    b.sigma
                ));
            }
            if let Some(e) = prob("gaussian blur", b.p) {
                return Some(e);
            }
        }
        if let Some(s) = self.solarize {
            if !(0.0..=1.0).contains(&s.threshold) {
                return Some(format!("solarize: threshold {} outside 0..=1", s.threshold));
            }
            if let Some(e) = prob("solarize", s.p) {
                return Some(e);
            }
        }
        if let Some(e) = self.erasing {
            let ok = |(lo, hi): (f32, f32)| lo > 0.0 && lo <= hi && hi.is_finite();
            if !ok(e.scale) || e.scale.1 > 1.0 || !ok(e.ratio) {
                return Some(format!(
                    "random erasing: scale {:?} and ratio {:?} must be 0 < lo <= hi (scale <= 1)",
                    e.scale, e.ratio
                ));
            }
            if let Some(m) = prob("random erasing", e.p) {
                return Some(m);
            }
        }
        None
    }
}

/// The four jitter ops, numbered as torchvision's `fn_idx`.
pub(crate) const BRIGHTNESS: u8 = 0;
pub(crate) const CONTRAST: u8 = 1;
pub(crate) const SATURATION: u8 = 2;
pub(crate) const HUE: u8 = 3;

/// Blur taps the kernel descriptor has room for (radius + 1).
pub(crate) const MAX_TAPS: usize = (GaussianBlur::MAX_KERNEL as usize).div_ceil(2);

/// One draw's photometric parameters, resolved: what the CPU reference and
/// the kernel's descriptor are built from. Plain data (it travels with the
/// draw's geometry through every route).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct PhotoParams {
    /// Jitter ops to apply, in order, with their factors: the first
    /// `n_jitter` entries.
    pub(crate) jitter: [(u8, f32); 4],
    pub(crate) n_jitter: u8,
    pub(crate) grayscale: bool,
    /// Blur taps by distance from the centre (`taps[0]` the centre) up to
    /// `radius`; no blur when `radius` is 0.
    pub(crate) taps: [f32; MAX_TAPS],
    pub(crate) radius: u32,
    /// Solarize threshold in 0..255 units.
    pub(crate) solarize: Option<f32>,
    /// Erased rectangle `(x, y, w, h)` in output pixels (after the flip).
    pub(crate) erase: Option<(u32, u32, u32, u32)>,
    pub(crate) erase_value: EraseValue,
    /// Seed of the erasing noise ([`EraseValue::Random`]).
    pub(crate) noise: u64,
}

impl PhotoParams {
    /// No op at all.
    pub(crate) const NONE: PhotoParams = PhotoParams {
        jitter: [(0, 1.0); 4],
        n_jitter: 0,
        grayscale: false,
        taps: [0.0; MAX_TAPS],
        radius: 0,
        solarize: None,
        erase: None,
        erase_value: EraseValue::Constant(0.0),
        noise: 0,
    };

    /// Whether the draw changes anything (else the fused path serves it).
    pub(crate) fn any(&self) -> bool {
        self.n_jitter > 0
            || self.grayscale
            || self.radius > 0
            || self.solarize.is_some()
            || self.erase.is_some()
    }

    /// The jitter ops in order.
    pub(crate) fn jitter(&self) -> &[(u8, f32)] {
        &self.jitter[..self.n_jitter as usize]
    }

    /// The blur taps, centre first; empty without blur.
    pub(crate) fn taps(&self) -> &[f32] {
        if self.radius == 0 {
            &[]
        } else {
            &self.taps[..=self.radius as usize]
        }
    }
}

fn happens(rng: &mut ChaCha8Rng, p: f32) -> bool {
    // Drawn even when p is 0 or 1, so that later draws do not shift.
    let u = unit(rng);
    u < f64::from(p)
}

/// torchvision's Gaussian taps for `kernel` and `sigma`, by distance from
/// the centre: `w(d) = exp(-d² / 2σ²) / Σ_{|e| <= r} exp(-e² / 2σ²)`,
/// computed in f64 and rounded once to f32. The host folds them; kernels
/// only multiply and add.
pub(crate) fn gaussian_taps(kernel: u32, sigma: f64) -> Vec<f32> {
    let r = (kernel / 2) as i64;
    let w = |d: i64| (-((d * d) as f64) / (2.0 * sigma * sigma)).exp();
    let total: f64 = (-r..=r).map(w).sum();
    (0..=r).map(|d| (w(d) / total) as f32).collect()
}

/// The photometric draws of one view draw: a pure function of its
/// arguments. `view` numbers the draws of one sample as the geometry's
/// does; the stream is a different one, so the crops do not depend on
/// which ops are on. Draw order: jitter (apply?, permutation by
/// Fisher-Yates, then the factors of the ops that are on: brightness,
/// contrast, saturation, hue), grayscale, blur (apply?, sigma), solarize,
/// erasing (apply?, then per attempt area, log-ratio, and on success the
/// top and left), then the noise seed.
#[allow(clippy::too_many_arguments)]
pub(crate) fn photo_params(
    ph: &Photometric,
    seed: u64,
    epoch: u64,
    index: u64,
    view: u64,
    (out_w, out_h): (u32, u32),
) -> PhotoParams {
    let mut out = PhotoParams::NONE;
    if !ph.any() {
        return out;
    }
    let mut rng = ChaCha8Rng::from_seed(seed_bytes(seed, epoch, index, (1 << 32) | view));
    if let Some(j) = ph.jitter
        && happens(&mut rng, j.p)
    {
        let mut order = [BRIGHTNESS, CONTRAST, SATURATION, HUE];
        for i in (1..4).rev() {
            let k = uniform_below(&mut rng, i as u64 + 1) as usize;
            order.swap(i, k);
        }
        let range = |x: f32| (f64::from((1.0 - x).max(0.0)), f64::from(1.0 + x));
        let mut factor = [None; 4];
        for (op, x) in [
            (BRIGHTNESS, j.brightness),
            (CONTRAST, j.contrast),
            (SATURATION, j.saturation),
        ] {
            if x > 0.0 {
                let (lo, hi) = range(x);
                factor[op as usize] = Some(uniform(&mut rng, lo, hi) as f32);
            }
        }
        if j.hue > 0.0 {
            let h = f64::from(j.hue);
            factor[HUE as usize] = Some(uniform(&mut rng, -h, h) as f32);
        }
        for op in order {
            if let Some(f) = factor[op as usize] {
                out.jitter[out.n_jitter as usize] = (op, f);
                out.n_jitter += 1;
            }
        }
    }
    out.grayscale = ph.grayscale > 0.0 && happens(&mut rng, ph.grayscale);
    if let Some(b) = ph.blur
        && happens(&mut rng, b.p)
    {
        let sigma = uniform(&mut rng, f64::from(b.sigma.0), f64::from(b.sigma.1));
        let taps = gaussian_taps(b.kernel, sigma);
        out.taps[..taps.len()].copy_from_slice(&taps);
        out.radius = b.kernel / 2;
    }
    if let Some(s) = ph.solarize
        && happens(&mut rng, s.p)
    {
        out.solarize = Some(s.threshold * 255.0);
    }
    if let Some(e) = ph.erasing
        && happens(&mut rng, e.p)
    {
        out.erase = erase_rect(&mut rng, out_w, out_h, e.scale, e.ratio);
        out.erase_value = e.value;
        out.noise = rng.next_u64();
    }
    out
}

/// torchvision `RandomErasing.make_params`: `(x, y, w, h)` or none.
fn erase_rect(
    rng: &mut ChaCha8Rng,
    width: u32,
    height: u32,
    scale: (f32, f32),
    ratio: (f32, f32),
) -> Option<(u32, u32, u32, u32)> {
    let area = f64::from(width) * f64::from(height);
    let (lo, hi) = (f64::from(ratio.0).ln(), f64::from(ratio.1).ln());
    for _ in 0..10 {
        let erase = area * uniform(rng, f64::from(scale.0), f64::from(scale.1));
        let aspect = uniform(rng, lo, hi).exp();
        // Python's round(): half to even. h from area * ratio, as torchvision.
        let h = (erase * aspect).sqrt().round_ties_even();
        let w = (erase / aspect).sqrt().round_ties_even();
        if !(h < f64::from(height) && w < f64::from(width)) {
            continue;
        }
        let (h, w) = (h as u32, w as u32);
        let y = uniform_below(rng, u64::from(height - h) + 1) as u32;
        let x = uniform_below(rng, u64::from(width - w) + 1) as u32;
        return Some((x, y, w, h));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_on() -> Photometric {
        Photometric {
            jitter: Some(ColorJitter::new(0.4, 0.4, 0.2, 0.1, 0.8)),
            grayscale: 0.2,
            blur: Some(GaussianBlur::new(23, (0.1, 2.0), 0.5)),
            solarize: Some(Solarize {
                threshold: 0.5,
                p: 0.2,
            }),
            erasing: Some(RandomErasing::default()),
        }
    }

    #[test]
    fn taps_are_torchvisions() {
        // torchvision _get_gaussian_kernel1d(5, 1.0): softmax of -(x/σ)² on
        // linspace(-lim, lim, 5), lim = 4 / (2√2) — exp(-d²/2) normalized.
        let t = gaussian_taps(5, 1.0);
        let e = |d: f64| (-d * d / 2.0).exp();
        let total = e(0.0) + 2.0 * (e(1.0) + e(2.0));
        assert_eq!(t.len(), 3);
        for (d, w) in t.iter().enumerate() {
            assert!((f64::from(*w) - e(d as f64) / total).abs() < 1e-7);
        }
        let sum: f32 = t[0] + 2.0 * t[1..].iter().sum::<f32>();
        assert!((sum - 1.0).abs() < 1e-6);
    }

    #[test]
    fn draws_are_pure_and_rates_match() {
        let ph = all_on();
        let draw = |i| photo_params(&ph, 7, 1, i, 0, (224, 224));
        assert_eq!(draw(5), draw(5));
        let n = 4000;
        let ds: Vec<PhotoParams> = (0..n).map(draw).collect();
        let rate = |f: &dyn Fn(&PhotoParams) -> bool| ds.iter().filter(|d| f(d)).count();
        let near =
            |got: usize, p: f64| (got as f64 - p * n as f64).abs() < 4.0 * (p * n as f64).sqrt();
        assert!(near(rate(&|d| d.n_jitter > 0), 0.8));
        assert!(near(rate(&|d| d.grayscale), 0.2));
        assert!(near(rate(&|d| d.radius == 11), 0.5));
        assert!(near(rate(&|d| d.solarize.is_some()), 0.2));
        // Erasing may fail its 10 attempts only rarely at these settings.
        assert!(near(rate(&|d| d.erase.is_some()), 0.5));
        for d in &ds {
            if d.n_jitter > 0 {
                assert_eq!(d.n_jitter, 4);
                let mut ops: Vec<u8> = d.jitter().iter().map(|j| j.0).collect();
                ops.sort();
                assert_eq!(ops, [0, 1, 2, 3]);
                for &(op, f) in d.jitter() {
                    let ok = match op {
                        BRIGHTNESS | CONTRAST => (0.6..=1.4).contains(&f),
                        SATURATION => (0.8..=1.2).contains(&f),
                        _ => (-0.1..=0.1).contains(&f),
                    };
                    assert!(ok, "op {op} factor {f}");
                }
            }
            if let Some((x, y, w, h)) = d.erase {
                assert!(x + w <= 224 && y + h <= 224 && w < 224 && h < 224);
                let area = f64::from(w * h) / (224.0 * 224.0);
                assert!((0.015..=0.34).contains(&area), "{area}");
            }
        }
        // All 24 orders of the four ops show up.
        let mut orders: Vec<Vec<u8>> = ds
            .iter()
            .filter(|d| d.n_jitter > 0)
            .map(|d| d.jitter().iter().map(|j| j.0).collect())
            .collect();
        orders.sort();
        orders.dedup();
        assert_eq!(orders.len(), 24);
    }

    #[test]
    fn geometry_does_not_move_when_ops_turn_on() {
        // Photometric draws come from their own stream; the geometry's draw
        // for the same (seed, epoch, index, view) is untouched by design, and
        // an op-free view draws nothing.
        assert_eq!(
            photo_params(&Photometric::default(), 1, 2, 3, 0, (8, 8)),
            PhotoParams::NONE
        );
    }

    #[test]
    fn checks_name_the_bad_setting() {
        let bad = |ph: Photometric| ph.check(96, 96).expect("rejected");
        let mut ph = all_on();
        assert!(ph.check(96, 96).is_none());
        ph.blur = Some(GaussianBlur::new(24, (0.1, 2.0), 1.0));
        assert!(bad(ph).contains("odd"));
        ph.blur = Some(GaussianBlur::new(23, (0.1, 2.0), 1.0));
        assert!(ph.check(11, 96).is_some_and(|e| e.contains("too wide")));
        ph.jitter = Some(ColorJitter::new(0.4, 0.4, 0.4, 0.6, 1.0));
        assert!(bad(ph).contains("hue"));
        ph.jitter = None;
        ph.grayscale = 1.5;
        assert!(bad(ph).contains("grayscale"));
    }
}
