//! Per-sample geometry drawn on the host: where to crop, how to scale, whether
//! to flip.
//!
//! Every draw comes from a ChaCha8 stream seeded by `(seed, epoch, sample
//! index, view)` and from the image's oriented size, nothing else: the same
//! sample gets the same crop whatever the thread count, batch composition,
//! backend or resume point.

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::SeedableRng;

use super::photo::PhotoParams;
use crate::sampler::{seed_bytes, uniform, uniform_below, unit};

/// How one view's geometry is chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Transform {
    /// The whole image squashed to the output size.
    Resize,
    /// torchvision `RandomResizedCrop(size, scale, ratio)`: a window with
    /// area fraction drawn uniformly from `scale` and aspect ratio (w/h)
    /// drawn log-uniformly from `ratio`, 10 attempts, then the centre crop
    /// clamped to the ratio range.
    RandomResizedCrop {
        /// Range of the crop's area as a fraction of the image. torchvision
        /// default `(0.08, 1.0)`.
        scale: (f32, f32),
        /// Range of the crop's width/height. torchvision default
        /// `(3/4, 4/3)`.
        ratio: (f32, f32),
    },
    /// Evaluation: torchvision `Resize(resize)` (shorter side to `resize`)
    /// then `CenterCrop(output size)`.
    CenterCrop {
        /// Length of the shorter side after resizing, e.g. 256 for a 224 crop.
        resize: u32,
    },
}

impl Transform {
    /// RandomResizedCrop with torchvision's defaults.
    pub const RANDOM_RESIZED_CROP: Transform = Transform::RandomResizedCrop {
        scale: (0.08, 1.0),
        ratio: (3.0 / 4.0, 4.0 / 3.0),
    };

    /// The left-right flip probability a pipeline uses with this transform
    /// when none is set: 0.5 for [`Transform::RandomResizedCrop`] (the
    /// `RandomHorizontalFlip()` of torchvision's ImageNet training recipe),
    /// 0 for [`Transform::CenterCrop`] and [`Transform::Resize`] (torchvision's
    /// and DALI's evaluation pipelines do not flip; issue 15).
    pub fn default_flip_h(self) -> f32 {
        match self {
            Transform::RandomResizedCrop { .. } => 0.5,
            Transform::CenterCrop { .. } | Transform::Resize => 0.0,
        }
    }
}

/// One output axis mapped onto the source: output pixel `o` samples source
/// coordinate `start + max(0, (o + offset + 0.5) * scale - 0.5)`, clamped to
/// `[start, start + len - 1]`.
///
/// A crop followed by a resize (RandomResizedCrop) has `offset = 0` and
/// `scale = crop / output`; a resize followed by a crop (CenterCrop) samples
/// the whole source axis (`start = 0`, `len = source`) with
/// `scale = source / resized` and `offset` = the crop's first resized pixel.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Axis {
    /// First source pixel of the sampled region.
    pub(crate) start: u32,
    /// Source pixels in the region (at least 1).
    pub(crate) len: u32,
    /// Source pixels per output pixel.
    pub(crate) scale: f32,
    /// Output-pixel offset into the resized region.
    pub(crate) offset: f32,
}

/// Everything the augment stage needs to produce one view of one sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct SampleParams {
    /// Horizontal mapping.
    pub(crate) x: Axis,
    /// Vertical mapping.
    pub(crate) y: Axis,
    /// Mirror left-right.
    pub(crate) flip_h: bool,
    /// Mirror top-bottom.
    pub(crate) flip_v: bool,
    /// Photometric ops (issue 19), drawn from a stream of their own by
    /// [`super::photo::photo_params`]; [`PhotoParams::NONE`] here.
    pub(crate) photo: PhotoParams,
}

/// torchvision `RandomResizedCrop.get_params`: `(x, y, w, h)` of the crop in
/// a `width × height` image.
pub(crate) fn random_resized_crop(
    rng: &mut ChaCha8Rng,
    width: u32,
    height: u32,
    scale: (f32, f32),
    ratio: (f32, f32),
) -> (u32, u32, u32, u32) {
    let (wf, hf) = (width as f64, height as f64);
    let area = wf * hf;
    let (log_lo, log_hi) = ((ratio.0 as f64).ln(), (ratio.1 as f64).ln());
    for _ in 0..10 {
        let target = area * uniform(rng, scale.0 as f64, scale.1 as f64);
        let aspect = uniform(rng, log_lo, log_hi).exp();
        // Python's round(): half to even.
        let w = (target * aspect).sqrt().round_ties_even();
        let h = (target / aspect).sqrt().round_ties_even();
        if w > 0.0 && w <= wf && h > 0.0 && h <= hf {
            let (w, h) = (w as u32, h as u32);
            let y = uniform_below(rng, (height - h + 1) as u64) as u32;
            let x = uniform_below(rng, (width - w + 1) as u64) as u32;
            return (x, y, w, h);
        }
    }
    // Fallback: the centre crop of the whole image, clamped to the ratio.
    let in_ratio = wf / hf;
    let (min_r, max_r) = (ratio.0.min(ratio.1) as f64, ratio.0.max(ratio.1) as f64);
    let (w, h) = if in_ratio < min_r {
        (
            width,
            ((wf / min_r).round_ties_even() as u32).clamp(1, height),
        )
    } else if in_ratio > max_r {
        (
            ((hf * max_r).round_ties_even() as u32).clamp(1, width),
            height,
        )
    } else {
        (width, height)
    };
    ((width - w) / 2, (height - h) / 2, w, h)
}

/// torchvision `Resize(short)` output size for a `width × height` image:
/// the shorter side becomes `short`, the longer `int(short * long / short)`.
pub(crate) fn resized_size(width: u32, height: u32, short: u32) -> (u32, u32) {
    let (s, l) = (width.min(height) as u64, width.max(height) as u64);
    let long = ((short as u64 * l) / s).max(1) as u32;
    if width <= height {
        (short, long)
    } else {
        (long, short)
    }
}

/// The view's draws for sample `index` of `epoch` in an image of oriented
/// size `width × height`, output `out_w × out_h`. `view` numbers the views
/// of one sample (0 for single-view pipelines).
#[allow(clippy::too_many_arguments)]
pub(crate) fn sample_params(
    transform: Transform,
    flip_h_p: f32,
    flip_v_p: f32,
    seed: u64,
    epoch: u64,
    index: u64,
    view: u64,
    (width, height): (u32, u32),
    (out_w, out_h): (u32, u32),
) -> SampleParams {
    let mut rng = ChaCha8Rng::from_seed(seed_bytes(seed, epoch, index, view + 1));
    let crop_axis = |start: u32, len: u32, out: u32| Axis {
        start,
        len,
        scale: len as f32 / out as f32,
        offset: 0.0,
    };
    let (x, y) = match transform {
        Transform::Resize => (crop_axis(0, width, out_w), crop_axis(0, height, out_h)),
        Transform::RandomResizedCrop { scale, ratio } => {
            let (cx, cy, cw, ch) = random_resized_crop(&mut rng, width, height, scale, ratio);
            (crop_axis(cx, cw, out_w), crop_axis(cy, ch, out_h))
        }
        Transform::CenterCrop { resize } => {
            let (rw, rh) = resized_size(width, height, resize);
            // torchvision CenterCrop: int(round((resized - crop) / 2)); a
            // crop larger than the resized image pads in torchvision; here
            // the edge pixels are repeated instead (sampling clamps).
            let off = |r: u32, o: u32| ((r as f64 - o as f64) / 2.0).round_ties_even() as f32;
            (
                Axis {
                    start: 0,
                    len: width,
                    scale: width as f32 / rw as f32,
                    offset: off(rw, out_w),
                },
                Axis {
                    start: 0,
                    len: height,
                    scale: height as f32 / rh as f32,
                    offset: off(rh, out_h),
                },
            )
        }
    };
    let flip_h = flip_h_p > 0.0 && unit(&mut rng) < flip_h_p as f64;
    let flip_v = flip_v_p > 0.0 && unit(&mut rng) < flip_v_p as f64;
    SampleParams {
        x,
        y,
        flip_h,
        flip_v,
        photo: PhotoParams::NONE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::seed_bytes;

    #[test]
    fn center_crop_by_hand() {
        // 500x375 -> Resize(256): short 375 -> 256, long int(256*500/375)=341.
        assert_eq!(resized_size(500, 375, 256), (341, 256));
        assert_eq!(resized_size(375, 500, 256), (256, 341));
        let p = sample_params(
            Transform::CenterCrop { resize: 256 },
            0.0,
            0.0,
            0,
            0,
            0,
            0,
            (500, 375),
            (224, 224),
        );
        // round((341-224)/2) = round(58.5) = 58 (half to even); round(16) = 16.
        assert_eq!(p.x.offset, 58.0);
        assert_eq!(p.y.offset, 16.0);
        assert_eq!((p.x.start, p.x.len, p.y.len), (0, 500, 375));
        assert!((p.x.scale - 500.0 / 341.0).abs() < 1e-6);
    }

    #[test]
    fn fallback_is_center_crop_clamped_to_ratio() {
        // A 1000x10 strip: no attempt fits a ratio <= 4/3 crop of area
        // >= 8%, so the fallback takes h = 10, w = round(10 * 4/3) = 13.
        let mut rng = ChaCha8Rng::from_seed([7; 32]);
        let (x, y, w, h) = random_resized_crop(&mut rng, 1000, 10, (0.08, 1.0), (0.75, 4.0 / 3.0));
        assert_eq!((w, h), (13, 10));
        assert_eq!((x, y), ((1000 - 13) / 2, 0));
        // Tall strip: w = 10, h = round(10 / (3/4)) = 13.
        let (x, y, w, h) = random_resized_crop(&mut rng, 10, 1000, (0.08, 1.0), (0.75, 4.0 / 3.0));
        assert_eq!((x, y, w, h), (0, (1000 - 13) / 2, 10, 13));
        // In-range ratio but impossible scale: whole image.
        let r = random_resized_crop(&mut rng, 40, 40, (2.0, 3.0), (0.75, 4.0 / 3.0));
        assert_eq!(r, (0, 0, 40, 40));
    }

    use proptest::prelude::*;

    fn is_fallback(w: u32, h: u32, crop: (u32, u32, u32, u32), ratio: (f32, f32)) -> bool {
        let mut rng = ChaCha8Rng::from_seed([0; 32]);
        // With an impossible scale every attempt fails: the fallback.
        crop == random_resized_crop(&mut rng, w, h, (1e9, 1e9), ratio)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Windows lie inside the image; unless they are the fallback, their
        /// area fraction and aspect ratio are within the requested ranges up
        /// to the rounding of w and h to whole pixels (each off by <= 0.5).
        #[test]
        fn crops_inside_and_within_bounds(
            w in 1u32..=10000, h in 1u32..=10000, seed: u64, index in 0u64..1_000_000,
            s0 in 0.01f32..1.0, ds in 0.0f32..1.0, r0 in 0.2f32..1.0, dr in 0.0f32..3.0,
        ) {
            let scale = (s0, (s0 + ds).min(1.0));
            let ratio = (r0, r0 + dr);
            let mut rng = ChaCha8Rng::from_seed(seed_bytes(seed, 0, index, 1));
            let (x, y, cw, ch) = random_resized_crop(&mut rng, w, h, scale, ratio);
            prop_assert!(cw >= 1 && ch >= 1);
            prop_assert!(x + cw <= w && y + ch <= h);
            if !is_fallback(w, h, (x, y, cw, ch), ratio) {
                let (cwf, chf) = (cw as f64, ch as f64);
                let area = w as f64 * h as f64;
                let slack = 0.5 * (cwf + chf) + 0.25;
                prop_assert!(cwf * chf >= scale.0 as f64 * area - slack);
                prop_assert!(cwf * chf <= scale.1 as f64 * area + slack);
                prop_assert!((cwf - 0.5) / (chf + 0.5) <= ratio.1 as f64 + 1e-9);
                if chf > 0.5 {
                    prop_assert!((cwf + 0.5) / (chf - 0.5) >= ratio.0 as f64 - 1e-9);
                }
            }
        }

        /// The centre-crop fallback stays inside too and respects the ratio
        /// range up to rounding.
        #[test]
        fn fallback_inside(w in 1u32..=10000, h in 1u32..=10000) {
            let ratio = (0.75f32, 4.0 / 3.0);
            let mut rng = ChaCha8Rng::from_seed([1; 32]);
            let (x, y, cw, ch) = random_resized_crop(&mut rng, w, h, (1e9, 1e9), ratio);
            prop_assert!(cw >= 1 && ch >= 1 && x + cw <= w && y + ch <= h);
            let r = cw as f64 / ch as f64;
            let in_ratio = w as f64 / h as f64;
            if (0.75..=4.0 / 3.0).contains(&in_ratio) {
                prop_assert_eq!((cw, ch), (w, h));
            } else {
                prop_assert!(cw == w || ch == h);
                prop_assert!(r >= 0.75 * (1.0 - 1.0 / ch as f64) - 1e-9);
                prop_assert!(r <= 4.0 / 3.0 * (1.0 + 1.0 / ch as f64) + 1e-9, "{cw}x{ch}");
            }
        }

        /// Same `(seed, epoch, index, view)`, same parameters.
        #[test]
        fn params_are_a_pure_function(
            w in 1u32..=4000, h in 1u32..=4000, seed: u64, epoch in 0u64..100, index: u32,
        ) {
            let draw = |view| sample_params(
                Transform::RANDOM_RESIZED_CROP, 0.5, 0.5, seed, epoch, index as u64, view,
                (w, h), (224, 224),
            );
            prop_assert_eq!(draw(0), draw(0));
            prop_assert_eq!(draw(3), draw(3));
        }
    }

    #[test]
    fn epochs_and_views_draw_differently() {
        let draw = |epoch, view, index| {
            sample_params(
                Transform::RANDOM_RESIZED_CROP,
                0.5,
                0.0,
                42,
                epoch,
                index,
                view,
                (500, 375),
                (224, 224),
            )
        };
        let differ = |f: &dyn Fn(u64) -> bool| (0..200).filter(|&i| f(i)).count();
        // Crops are continuous draws: a repeat across 200 samples would mean
        // the epoch or view is not in the seed.
        assert!(differ(&|i| draw(0, 0, i) != draw(1, 0, i)) >= 195);
        assert!(differ(&|i| draw(0, 0, i) != draw(0, 1, i)) >= 195);
        assert!(differ(&|i| draw(0, 0, i) != draw(0, 0, i + 1)) >= 195);
        // Flips happen about half the time.
        let flips = (0..2000).filter(|&i| draw(0, 0, i).flip_h).count();
        assert!((850..1150).contains(&flips), "{flips}");
    }
}
