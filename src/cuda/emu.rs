//! The kernel source, compiled for the host (`kernel-emu` feature, see
//! tests/emu/augment_emu.cpp), run over the same cases as the CPU reference
//! and compared bit for bit. This is the GPU test matrix of issue 4 (dtypes,
//! layouts, flips, crops at image edges, 1x1 and 10000-pixel-wide inputs,
//! grayscale, antialias on and off, several tiles per launch) checked on a
//! machine without a GPU; the real-device run compares with tolerances
//! (u8 +-1, f32 1e-4) because ptxas may still differ in transcendental-free
//! but rounding-sensitive places this emulation cannot see.

use half::{bf16, f16};

use super::desc::{GfLaunch, GfTile};
use crate::augment::cpu::{Element, OutSpec, Resampler};
use crate::augment::params::{Transform, sample_params};
use crate::augment::{Fma, Layout, Normalize};
use crate::decode::Image;

unsafe extern "C" {
    fn gf_emu_augment(
        which: i32,
        tiles: *const GfTile,
        p: GfLaunch,
        out: *mut std::ffi::c_void,
    ) -> i32;
    fn gf_emu_f16(v: f32) -> u16;
}

/// Index into `AUGMENT_KERNELS` for an element type and layout.
trait EmuElement: Element + Default + PartialEq + std::fmt::Debug {
    const BASE: i32;
}
impl EmuElement for u8 {
    const BASE: i32 = 0;
}
impl EmuElement for f16 {
    const BASE: i32 = 2;
}
impl EmuElement for bf16 {
    const BASE: i32 = 4;
}
impl EmuElement for f32 {
    const BASE: i32 = 6;
}

/// A deterministic test image: pseudo-random pixels, or gray (R=G=B).
fn image(w: u32, h: u32, seed: u32, gray: bool) -> Image {
    let mut state = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        (state >> 24) as u8
    };
    let mut data = Vec::with_capacity((w * h * 3) as usize);
    for _ in 0..w * h {
        if gray {
            let v = next();
            data.extend([v, v, v]);
        } else {
            data.extend([next(), next(), next()]);
        }
    }
    Image {
        width: w,
        height: h,
        data,
    }
}

struct Case {
    img: Image,
    transform: Transform,
    out: (usize, usize),
    seed: u64,
}

/// Run one launch of several tiles on the emulated kernel and the same
/// tiles on the CPU reference; compare every element.
fn check<T: EmuElement>(cases: &[Case], layout: Layout, antialias: bool, fma: &Fma, flips: bool) {
    let (ow, oh) = cases[0].out;
    let n = 3 * ow * oh;
    let mut want = vec![T::default(); n * cases.len()];
    let mut tiles = Vec::new();
    let mut resampler = Resampler::default();
    for (i, c) in cases.iter().enumerate() {
        let (fh, fv) = if flips { (0.5, 0.5) } else { (0.0, 0.0) };
        let p = sample_params(
            c.transform,
            fh,
            fv,
            c.seed,
            0,
            i as u64,
            0,
            (c.img.width, c.img.height),
            (ow as u32, oh as u32),
        );
        let spec = OutSpec {
            width: ow,
            height: oh,
            layout,
            antialias,
            fma,
        };
        resampler.run(&c.img, &p, spec, &mut want[i * n..(i + 1) * n]);
        tiles.push(GfTile::new(
            c.img.data.as_ptr() as u64,
            c.img.width * 3,
            c.img.height,
            &p,
            (ow, oh),
            (i * n) as u64,
        ));
    }
    let launch = GfLaunch {
        out_w: ow as u32,
        out_h: oh as u32,
        antialias: antialias as u32,
        n_tiles: tiles.len() as u32,
        scale: fma.scale,
        shift: fma.shift,
    };
    let mut got = vec![T::default(); n * cases.len()];
    let which = T::BASE + if layout == Layout::Nchw { 0 } else { 1 };
    // SAFETY: every tile's `src` points into an image borrowed for this
    // call, with `pitch * height` bytes; `dst` offsets and the launch size
    // stay inside `got`, which holds n * tiles elements of the kernel's
    // element type; the emulation runs synchronously on this thread.
    let rc = unsafe {
        gf_emu_augment(
            which,
            tiles.as_ptr(),
            launch,
            got.as_mut_ptr() as *mut std::ffi::c_void,
        )
    };
    assert_eq!(rc, 0);
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            g == w,
            "kernel {which} tile {} element {}: kernel {g:?} vs reference {w:?} \
             (layout {layout:?}, antialias {antialias})",
            k / n,
            k % n
        );
    }
}

fn cases(out: (usize, usize)) -> Vec<Case> {
    let rrc = Transform::RANDOM_RESIZED_CROP;
    vec![
        Case {
            img: image(37, 23, 1, false),
            transform: rrc,
            out,
            seed: 1,
        },
        Case {
            img: image(1, 1, 2, false),
            transform: Transform::Resize,
            out,
            seed: 2,
        },
        Case {
            img: image(10000, 3, 3, false),
            transform: Transform::Resize,
            out,
            seed: 3,
        },
        Case {
            img: image(10000, 3, 4, false),
            transform: rrc,
            out,
            seed: 4,
        },
        Case {
            img: image(64, 48, 5, true),
            transform: rrc,
            out,
            seed: 5,
        },
        Case {
            img: image(90, 40, 6, false),
            transform: Transform::CenterCrop { resize: 20 },
            out,
            seed: 6,
        },
        // Crops at the right and bottom edges: small crop scale on a wide
        // image puts windows anywhere, including against the border.
        Case {
            img: image(200, 13, 7, false),
            transform: Transform::RandomResizedCrop {
                scale: (0.01, 0.05),
                ratio: (0.5, 2.0),
            },
            out,
            seed: 7,
        },
        Case {
            img: image(5, 300, 8, false),
            transform: rrc,
            out,
            seed: 8,
        },
    ]
}

fn all_dtypes(out: (usize, usize), layout: Layout, antialias: bool, flips: bool) {
    let norm = Normalize::IMAGENET.fold();
    let cs = cases(out);
    check::<u8>(&cs, layout, antialias, &Fma::IDENTITY, flips);
    check::<f16>(&cs, layout, antialias, &norm, flips);
    check::<bf16>(&cs, layout, antialias, &norm, flips);
    check::<f32>(&cs, layout, antialias, &norm, flips);
    check::<f32>(&cs, layout, antialias, &Fma::IDENTITY, flips);
}

#[test]
fn kernel_matches_reference_nchw() {
    for antialias in [false, true] {
        for flips in [false, true] {
            all_dtypes((16, 12), Layout::Nchw, antialias, flips);
        }
    }
}

#[test]
fn kernel_matches_reference_nhwc() {
    for antialias in [false, true] {
        for flips in [false, true] {
            all_dtypes((9, 14), Layout::Nhwc, antialias, flips);
        }
    }
}

#[test]
fn kernel_matches_reference_when_upscaling() {
    // Output larger than every crop: bilinear taps only, clamped at edges.
    all_dtypes((64, 40), Layout::Nchw, true, true);
}

#[test]
fn half_conversion_matches_the_half_crate() {
    // The host stand-in for cvt.rn.f16.f32 must round like `half`, which the
    // CPU reference uses: every f32 with the low 9 mantissa bits zero plus
    // ties and neighbours of half's rounding points, normals, subnormals,
    // overflow, infinities.
    let mut checked = 0u64;
    for hi in 0..=0x7fffu32 {
        for lo in [0u32, 0xfff, 0x1000, 0x1001, 0x1fff] {
            for sign in [0u32, 0x8000_0000] {
                let bits = sign | (hi << 16) | (lo & 0xffff);
                let v = f32::from_bits(bits);
                if v.is_nan() {
                    continue;
                }
                // SAFETY: a pure function of its argument.
                let got = unsafe { gf_emu_f16(v) };
                assert_eq!(got, f16::from_f32(v).to_bits(), "{v:e} ({bits:#010x})");
                checked += 1;
            }
        }
    }
    assert!(checked > 300_000);
}
