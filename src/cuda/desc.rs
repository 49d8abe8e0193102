//! `#[repr(C)]` mirrors of `kernels/augment.cuh` and `kernels/photo.cuh`.
//! Sizes and offsets are asserted here at compile time and by
//! `static_assert` in the headers.

use std::mem::{offset_of, size_of};

use crate::augment::EraseValue;
use crate::augment::params::{Axis, SampleParams};
use crate::augment::photo::{MAX_TAPS, PhotoParams};

/// `GfAxis`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct GfAxis {
    pub(crate) start: u32,
    pub(crate) len: u32,
    pub(crate) scale: f32,
    pub(crate) offset: f32,
    pub(crate) dst0: i32,
    pub(crate) step: i32,
}

/// `GfTile`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct GfTile {
    pub(crate) src: u64,
    pub(crate) dst: u64,
    pub(crate) src_pitch: u32,
    pub(crate) src_height: u32,
    pub(crate) x: GfAxis,
    pub(crate) y: GfAxis,
}

/// `GfLaunch`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct GfLaunch {
    pub(crate) out_w: u32,
    pub(crate) out_h: u32,
    pub(crate) antialias: u32,
    pub(crate) n_tiles: u32,
    pub(crate) scale: [f32; 3],
    pub(crate) shift: [f32; 3],
}

// SAFETY: GfTile is #[repr(C)], Copy, built only from u64/u32/i32/f32
// fields, has no padding (its size equals the sum of its fields, asserted
// below), and every bit pattern is a valid value; all-zero is valid.
unsafe impl bytemuck::Zeroable for GfTile {}
// SAFETY: as above.
unsafe impl bytemuck::Pod for GfTile {}

/// `GfPhoto`: one draw of the photometric kernels.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct GfPhoto {
    pub(crate) src: u64,
    pub(crate) tmp: u64,
    pub(crate) dst: u64,
    pub(crate) noise: u64,
    pub(crate) ops: u32,
    pub(crate) n_ops: u32,
    pub(crate) factor: [f32; 4],
    pub(crate) flags: u32,
    pub(crate) threshold: f32,
    pub(crate) erase_value: f32,
    pub(crate) radius: u32,
    pub(crate) erase: [u32; 4],
    pub(crate) taps: [f32; MAX_TAPS],
}

// SAFETY: as for GfTile: #[repr(C)], Copy, integers and floats only, no
// padding (size asserted below), every bit pattern valid.
unsafe impl bytemuck::Zeroable for GfPhoto {}
// SAFETY: as above.
unsafe impl bytemuck::Pod for GfPhoto {}

const _: () = assert!(size_of::<GfPhoto>() == 216);
const _: () = assert!(offset_of!(GfPhoto, factor) == 40);
const _: () = assert!(offset_of!(GfPhoto, taps) == 88);
const _: () = assert!(MAX_TAPS == 32);

/// `GF_PHOTO_*` flags.
const GRAY: u32 = 1;
const SOLARIZE: u32 = 2;
const ERASE: u32 = 4;
const NOISE: u32 = 8;

impl GfPhoto {
    /// The descriptor of draw `p`: planes at device addresses `src` and
    /// `tmp`, output at element `dst`.
    pub(crate) fn new(src: u64, tmp: u64, dst: u64, p: &PhotoParams) -> GfPhoto {
        let mut d = GfPhoto {
            src,
            tmp,
            dst,
            noise: p.noise,
            ops: 0,
            n_ops: p.n_jitter as u32,
            factor: [0.0; 4],
            flags: 0,
            threshold: p.solarize.unwrap_or(0.0),
            erase_value: 0.0,
            radius: p.radius,
            erase: [0; 4],
            taps: p.taps,
        };
        for (k, &(op, f)) in p.jitter().iter().enumerate() {
            d.ops |= u32::from(op) << (4 * k);
            d.factor[k] = f;
        }
        if p.grayscale {
            d.flags |= GRAY;
        }
        if p.solarize.is_some() {
            d.flags |= SOLARIZE;
        }
        if let Some((x, y, w, h)) = p.erase {
            d.flags |= ERASE;
            d.erase = [x, y, w, h];
            match p.erase_value {
                EraseValue::Constant(v) => d.erase_value = v,
                EraseValue::Random => d.flags |= NOISE,
            }
        }
        d
    }
}

/// `GfMix`: the launch constants of the mixup / cutmix kernels.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct GfMix {
    pub(crate) n: u32,
    pub(crate) out_w: u32,
    pub(crate) out_h: u32,
    pub(crate) cut: u32,
    pub(crate) lam: f32,
    pub(crate) rest: f32,
    pub(crate) box_: [u32; 4],
}

const _: () = assert!(size_of::<GfMix>() == 40);

impl GfMix {
    /// Mix `n` images of `width × height` as `p` says.
    pub(crate) fn new(
        p: &crate::augment::mix::MixParams,
        n: usize,
        (width, height): (usize, usize),
    ) -> GfMix {
        let (cut, box_) = match p.cut {
            Some((x0, y0, x1, y1)) => (1, [x0, y0, x1, y1]),
            None => (0, [0; 4]),
        };
        GfMix {
            n: n as u32,
            out_w: width as u32,
            out_h: height as u32,
            cut,
            lam: p.lam,
            rest: p.rest,
            box_,
        }
    }
}

const _: () = assert!(size_of::<GfAxis>() == 24);
const _: () = assert!(size_of::<GfTile>() == 72);
const _: () = assert!(offset_of!(GfTile, x) == 24);
const _: () = assert!(offset_of!(GfTile, y) == 48);
const _: () = assert!(size_of::<GfLaunch>() == 40);
const _: () = assert!(offset_of!(GfLaunch, scale) == 16);

impl GfAxis {
    /// The host folds the flip into where output pixel 0 goes and the step.
    fn new(a: &Axis, out: usize, flip: bool) -> GfAxis {
        let (dst0, step) = if flip { (out as i32 - 1, -1) } else { (0, 1) };
        GfAxis {
            start: a.start,
            len: a.len,
            scale: a.scale,
            offset: a.offset,
            dst0,
            step,
        }
    }
}

impl GfTile {
    /// The tile of one view draw: `src` points at an RGB8 image with rows
    /// `pitch` bytes apart; the result goes to element `dst` of the output.
    pub(crate) fn new(
        src: u64,
        pitch: u32,
        height: u32,
        p: &SampleParams,
        (out_w, out_h): (usize, usize),
        dst: u64,
    ) -> GfTile {
        GfTile {
            src,
            dst,
            src_pitch: pitch,
            src_height: height,
            x: GfAxis::new(&p.x, out_w, p.flip_h),
            y: GfAxis::new(&p.y, out_h, p.flip_v),
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// The number right after the first occurrence of `pat` in `text` (a
    /// kernel header).
    pub(in crate::cuda) fn number_after(text: &str, pat: &str) -> usize {
        let at = text
            .find(pat)
            .unwrap_or_else(|| panic!("{pat:?} missing from the header"));
        let rest = text[at + pat.len()..].trim_start_matches([' ', '\n', '/']);
        rest.chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .unwrap()
    }

    /// The header's static_asserts and offset notes state the numbers the
    /// Rust asserts above check; read them out of the embedded text.
    #[test]
    fn header_states_the_same_layout() {
        let h = include_str!("../../kernels/augment.cuh");
        assert_eq!(number_after(h, "sizeof(GfAxis) =="), size_of::<GfAxis>());
        assert_eq!(number_after(h, "sizeof(GfTile) =="), size_of::<GfTile>());
        assert_eq!(
            number_after(h, "sizeof(GfLaunch) =="),
            size_of::<GfLaunch>()
        );
        assert_eq!(number_after(h, "x at"), offset_of!(GfTile, x));
        assert_eq!(number_after(h, "y at"), offset_of!(GfTile, y));
        assert_eq!(number_after(h, "scale at"), offset_of!(GfLaunch, scale));
        let m = include_str!("../../kernels/mix.cuh");
        assert_eq!(number_after(m, "sizeof(GfMix) =="), size_of::<GfMix>());
        let h = include_str!("../../kernels/photo.cuh");
        assert_eq!(number_after(h, "sizeof(GfPhoto) =="), size_of::<GfPhoto>());
        assert_eq!(number_after(h, "factor at"), offset_of!(GfPhoto, factor));
        assert_eq!(number_after(h, "taps at"), offset_of!(GfPhoto, taps));
        assert_eq!(number_after(h, "#define GF_PHOTO_TAPS"), MAX_TAPS);
        assert_eq!(
            number_after(h, "#define GF_PHOTO_THREADS"),
            crate::augment::photo_cpu::LANES
        );
        for (name, bit) in [
            ("GF_PHOTO_GRAY", GRAY),
            ("GF_PHOTO_SOLARIZE", SOLARIZE),
            ("GF_PHOTO_ERASE", ERASE),
            ("GF_PHOTO_NOISE", NOISE),
        ] {
            assert_eq!(number_after(h, &format!("#define {name}")), bit as usize);
        }
    }

    #[test]
    fn flips_fold_to_a_sign() {
        let a = Axis {
            start: 3,
            len: 10,
            scale: 0.5,
            offset: 0.0,
        };
        assert_eq!(
            (
                GfAxis::new(&a, 224, false).dst0,
                GfAxis::new(&a, 224, false).step
            ),
            (0, 1)
        );
        assert_eq!(
            (
                GfAxis::new(&a, 224, true).dst0,
                GfAxis::new(&a, 224, true).step
            ),
            (223, -1)
        );
    }
}
