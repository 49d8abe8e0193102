//! The augment kernels against the CPU reference, one test body with two
//! instances (like candle's `test_device!`):
//!
//! * `emu_*` (feature `kernel-emu`): the kernel source compiled for the host
//!   (tests/emu/augment_emu.cpp); must match **bit for bit**.
//! * `gpu_*`: the NVRTC-compiled CUBIN on CUDA device 0; tolerance u8 +-1,
//!   f16/bf16 one unit in the last place, f32 1e-4.
//!
//! The test runner is tests/kernel_device.rs (it shows the GPU instances as
//! ignored where there is no device, which a unit test cannot); the bodies
//! live here because they drive crate-private types. Not part of the API:
//! the functions panic on a mismatch, like a test.
//!
//! The matrix is issue 4's: every dtype and layout, flips, crops at image
//! edges, 1x1 and 10000-pixel-wide inputs, grayscale, antialias on and off,
//! several tiles per launch.

use half::{bf16, f16};

use cudarc::driver::{DeviceRepr, ValidAsZeroBits};

use super::desc::{GfLaunch, GfPhoto, GfTile};
use super::launch::AugmentKernels;
use crate::augment::cpu::{Element, OutSpec, Resampler};
use crate::augment::params::{SampleParams, Transform, sample_params};
use crate::augment::photo::{
    ColorJitter, EraseValue, GaussianBlur, PhotoParams, Photometric, RandomErasing, Solarize,
    photo_params,
};
use crate::augment::{Fma, Layout, Normalize};
use crate::decode::Image;

/// An output element type: its kernel index base in `AUGMENT_KERNELS` and
/// the GPU tolerance.
trait EmuElement:
    Element + Default + PartialEq + std::fmt::Debug + DeviceRepr + ValidAsZeroBits + bytemuck::Pod
{
    const BASE: i32;
    /// Whether `got` is within the device tolerance of `want`.
    fn close(got: Self, want: Self) -> bool;
}
impl EmuElement for u8 {
    const BASE: i32 = 0;
    fn close(got: u8, want: u8) -> bool {
        got.abs_diff(want) <= 1
    }
}
impl EmuElement for f16 {
    const BASE: i32 = 2;
    fn close(got: f16, want: f16) -> bool {
        got.to_bits().abs_diff(want.to_bits()) <= 1
    }
}
impl EmuElement for bf16 {
    const BASE: i32 = 4;
    fn close(got: bf16, want: bf16) -> bool {
        got.to_bits().abs_diff(want.to_bits()) <= 1
    }
}
impl EmuElement for f32 {
    const BASE: i32 = 6;
    fn close(got: f32, want: f32) -> bool {
        (got - want).abs() <= 1e-4
    }
}

/// Runs one launch of the augment kernel somewhere.
trait Runner {
    /// Run kernel `which` over one tile per image; `n` elements per tile.
    fn run<T: EmuElement>(
        &mut self,
        which: i32,
        images: &[&Image],
        params: &[SampleParams],
        launch: GfLaunch,
        n: usize,
    ) -> Vec<T>;
    /// Run photometric kernel `which` over one draw per entry of `planes`
    /// (f32 planes, `3 * out_w * out_h` each) with its parameters; `n`
    /// elements per draw.
    fn photo<T: EmuElement>(
        &mut self,
        which: i32,
        planes: &[Vec<f32>],
        params: &[PhotoParams],
        launch: GfLaunch,
    ) -> Vec<T>;
    /// Bit-exact comparison, or the device tolerance.
    fn exact(&self) -> bool;
}

/// The scratch of a photometric launch: each draw's planes then room for
/// its blur rows; the descriptors for scratch base address `base`.
fn photo_scratch(
    planes: &[Vec<f32>],
    params: &[PhotoParams],
    base: u64,
) -> (Vec<f32>, Vec<GfPhoto>) {
    let mut scratch = Vec::new();
    let mut descs = Vec::new();
    for (i, (pl, p)) in planes.iter().zip(params).enumerate() {
        let at = |k: usize| base + 4 * k as u64;
        let start = scratch.len();
        scratch.extend_from_slice(pl);
        scratch.resize(start + 2 * pl.len(), 0.0);
        descs.push(GfPhoto::new(
            at(start),
            at(start + pl.len()),
            (i * pl.len()) as u64,
            p,
        ));
    }
    (scratch, descs)
}

/// The kernel source compiled for the host.
#[cfg(feature = "kernel-emu")]
struct Emu;

#[cfg(feature = "kernel-emu")]
impl Runner for Emu {
    fn run<T: EmuElement>(
        &mut self,
        which: i32,
        images: &[&Image],
        params: &[SampleParams],
        launch: GfLaunch,
        n: usize,
    ) -> Vec<T> {
        let out = (launch.out_w as usize, launch.out_h as usize);
        let tiles: Vec<GfTile> = images
            .iter()
            .zip(params)
            .enumerate()
            .map(|(i, (img, p))| {
                let src = img.data.as_ptr() as u64;
                GfTile::new(src, img.width * 3, img.height, p, out, (i * n) as u64)
            })
            .collect();
        let mut got = vec![T::default(); n * images.len()];
        // SAFETY: every tile's `src` points into an image borrowed for this
        // call, with `pitch * height` bytes; `dst` offsets and the launch
        // size stay inside `got`, which holds n * tiles elements of the
        // kernel's element type; the emulation runs synchronously here.
        unsafe {
            super::emu::augment(
                which as usize,
                &tiles,
                launch,
                bytemuck::cast_slice_mut(&mut got),
            )
        };
        got
    }

    fn photo<T: EmuElement>(
        &mut self,
        which: i32,
        planes: &[Vec<f32>],
        params: &[PhotoParams],
        launch: GfLaunch,
    ) -> Vec<T> {
        // The addresses depend on where the scratch lands: build it, then
        // the descriptors for its address.
        let (mut scratch, _) = photo_scratch(planes, params, 0);
        let (filled, descs) = photo_scratch(planes, params, scratch.as_mut_ptr() as u64);
        scratch.copy_from_slice(&filled);
        let n = planes.first().map_or(0, Vec::len);
        let mut got = vec![T::default(); n * planes.len()];
        // SAFETY: every descriptor's planes lie in `scratch` (two sets of
        // n f32 per draw, apart), alive and unaliased for this call; the
        // outputs stay inside `got` (n elements per draw) of the kernel's
        // element type; the emulation runs synchronously here.
        unsafe {
            super::emu::photo(
                which as usize,
                &descs,
                launch,
                bytemuck::cast_slice_mut(&mut got),
            )
        };
        got
    }

    fn exact(&self) -> bool {
        true
    }
}

/// The CUBIN on a real device.
struct Gpu(AugmentKernels);

impl Runner for Gpu {
    fn run<T: EmuElement>(
        &mut self,
        which: i32,
        images: &[&Image],
        params: &[SampleParams],
        launch: GfLaunch,
        n: usize,
    ) -> Vec<T> {
        let k = &self.0;
        let out = (launch.out_w as usize, launch.out_h as usize);
        let srcs: Vec<_> = images
            .iter()
            .map(|img| k.upload(&img.data).unwrap())
            .collect();
        let tiles: Vec<GfTile> = images
            .iter()
            .zip(params)
            .zip(&srcs)
            .enumerate()
            .map(|(i, ((img, p), src))| {
                GfTile::new(
                    k.address(src),
                    img.width * 3,
                    img.height,
                    p,
                    out,
                    (i * n) as u64,
                )
            })
            .collect();
        let d_tiles = k.upload(&tiles).unwrap();
        let mut d_out = k.zeros::<T>(n * images.len()).unwrap();
        // SAFETY: `srcs` hold each image's pitch * height bytes and live
        // until after the download below, which waits for the stream; dst
        // offsets and the launch size stay inside `d_out`; T is the
        // element type of kernel `which` (EmuElement::BASE).
        unsafe { k.launch(which as usize, &d_tiles, launch, &mut d_out) }.unwrap();
        let got = k.download(&d_out).unwrap();
        drop(srcs);
        got
    }

    fn photo<T: EmuElement>(
        &mut self,
        which: i32,
        planes: &[Vec<f32>],
        params: &[PhotoParams],
        launch: GfLaunch,
    ) -> Vec<T> {
        use super::launch::LaunchKind;
        let k = &self.0;
        let (host, _) = photo_scratch(planes, params, 0);
        let scratch = k.upload(&host).unwrap();
        let (_, descs) = photo_scratch(planes, params, k.address(&scratch));
        let d_descs = k
            .upload(bytemuck::cast_slice::<GfPhoto, u8>(&descs))
            .unwrap();
        let n = planes.first().map_or(0, Vec::len);
        let mut d_out = k.zeros::<T>(n * planes.len()).unwrap();
        // SAFETY: every descriptor's planes lie in `scratch` (uploaded
        // above, two sets of n f32 per draw, apart) and its output inside
        // `d_out`; both live until the download below waits for the stream;
        // T is the element type of kernel `which`.
        unsafe {
            k.launch_any(
                LaunchKind::Photo,
                which as usize,
                k.address(&d_descs),
                launch,
                &mut d_out,
            )
        }
        .unwrap();
        let got = k.download(&d_out).unwrap();
        drop((scratch, d_descs));
        got
    }

    fn exact(&self) -> bool {
        false
    }
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

/// Run one launch of several tiles on `runner` and the same tiles on the
/// CPU reference; compare every element.
fn check<T: EmuElement, R: Runner>(
    runner: &mut R,
    cases: &[Case],
    layout: Layout,
    antialias: bool,
    fma: &Fma,
    flips: bool,
) {
    let (ow, oh) = cases[0].out;
    let n = 3 * ow * oh;
    let mut want = vec![T::default(); n * cases.len()];
    let mut params = Vec::new();
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
        params.push(p);
    }
    let launch = GfLaunch {
        out_w: ow as u32,
        out_h: oh as u32,
        antialias: antialias as u32,
        n_tiles: cases.len() as u32,
        scale: fma.scale,
        shift: fma.shift,
    };
    let which = T::BASE + if layout == Layout::Nchw { 0 } else { 1 };
    let images: Vec<&Image> = cases.iter().map(|c| &c.img).collect();
    let got: Vec<T> = runner.run(which, &images, &params, launch, n);
    let exact = runner.exact();
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            if exact { g == w } else { T::close(*g, *w) },
            "kernel {which} tile {} element {}: kernel {g:?} vs reference {w:?} \
             (layout {layout:?}, antialias {antialias}, exact {exact})",
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

fn all_dtypes<R: Runner>(r: &mut R, out: (usize, usize), layout: Layout, aa: bool, flips: bool) {
    let norm = Normalize::IMAGENET.fold();
    let cs = cases(out);
    check::<u8, R>(r, &cs, layout, aa, &Fma::IDENTITY, flips);
    check::<f16, R>(r, &cs, layout, aa, &norm, flips);
    check::<bf16, R>(r, &cs, layout, aa, &norm, flips);
    check::<f32, R>(r, &cs, layout, aa, &norm, flips);
    check::<f32, R>(r, &cs, layout, aa, &Fma::IDENTITY, flips);
}

fn nchw<R: Runner>(r: &mut R) {
    for antialias in [false, true] {
        for flips in [false, true] {
            all_dtypes(r, (16, 12), Layout::Nchw, antialias, flips);
        }
    }
}

fn nhwc<R: Runner>(r: &mut R) {
    for antialias in [false, true] {
        for flips in [false, true] {
            all_dtypes(r, (9, 14), Layout::Nhwc, antialias, flips);
        }
    }
}

/// Output larger than every crop: bilinear taps only, clamped at edges.
fn upscaling<R: Runner>(r: &mut R) {
    all_dtypes(r, (64, 40), Layout::Nchw, true, true);
}

/// The photometric kernel against `photo_cpu` (issue 19): drawn parameters
/// over every op, in every order, with gray, black and white pixels among
/// random ones (the hue's special cases), for every dtype and layout.
fn photometric<R: Runner>(r: &mut R) {
    let settings = |value| Photometric {
        jitter: Some(ColorJitter::new(0.8, 0.8, 0.8, 0.5, 0.9)),
        grayscale: 0.3,
        blur: Some(GaussianBlur::new(9, (0.1, 3.0), 0.5)),
        solarize: Some(Solarize {
            threshold: 0.5,
            p: 0.4,
        }),
        erasing: Some(RandomErasing {
            p: 0.6,
            value,
            ..RandomErasing::default()
        }),
    };
    for (out_w, out_h) in [(17usize, 11usize), (24, 30)] {
        let n = 3 * out_w * out_h;
        let planes: Vec<Vec<f32>> = (0..12u32)
            .map(|d| {
                let img = image(out_w as u32, out_h as u32, 100 + d, d % 4 == 0);
                let mut pl = vec![0.0f32; n];
                for (i, px) in img.data.chunks_exact(3).enumerate() {
                    for c in 0..3 {
                        // Every fifth pixel black or white; the rest as drawn.
                        let v = match i % 10 {
                            0 => 0,
                            5 => 255,
                            _ => px[c],
                        };
                        pl[c * out_w * out_h + i] = f32::from(v) + 0.25 * c as f32;
                    }
                }
                pl
            })
            .collect();
        for value in [EraseValue::Random, EraseValue::Constant(0.5)] {
            let params: Vec<PhotoParams> = (0..planes.len() as u64)
                .map(|i| photo_params(&settings(value), 9, 0, i, 0, (out_w as u32, out_h as u32)))
                .collect();
            assert!(params.iter().all(PhotoParams::any));
            for layout in [Layout::Nchw, Layout::Nhwc] {
                let norm = Normalize::IMAGENET.fold();
                photo_check::<u8, R>(r, &planes, &params, (out_w, out_h), layout, &Fma::IDENTITY);
                photo_check::<f16, R>(r, &planes, &params, (out_w, out_h), layout, &norm);
                photo_check::<bf16, R>(r, &planes, &params, (out_w, out_h), layout, &norm);
                photo_check::<f32, R>(r, &planes, &params, (out_w, out_h), layout, &norm);
            }
        }
    }
}

fn photo_check<T: EmuElement, R: Runner>(
    r: &mut R,
    planes: &[Vec<f32>],
    params: &[PhotoParams],
    (out_w, out_h): (usize, usize),
    layout: Layout,
    fma: &Fma,
) {
    use crate::augment::photo_cpu;
    let n = 3 * out_w * out_h;
    let mut want = vec![T::default(); n * planes.len()];
    for (i, (pl, p)) in planes.iter().zip(params).enumerate() {
        let mut pl = pl.clone();
        photo_cpu::apply(p, out_w, out_h, &mut pl, &mut Vec::new());
        photo_cpu::write(
            p,
            out_w,
            out_h,
            &pl,
            layout,
            fma,
            &mut want[i * n..(i + 1) * n],
        );
    }
    let launch = GfLaunch {
        out_w: out_w as u32,
        out_h: out_h as u32,
        antialias: 0,
        n_tiles: planes.len() as u32,
        scale: fma.scale,
        shift: fma.shift,
    };
    let which = T::BASE + if layout == Layout::Nchw { 0 } else { 1 };
    let got: Vec<T> = r.photo(which, planes, params, launch);
    let bad = got
        .iter()
        .zip(&want)
        .filter(|(g, w)| {
            if r.exact() {
                g != w
            } else {
                !T::close(**g, **w)
            }
        })
        .count();
    assert_eq!(
        bad,
        0,
        "photometric {}x{out_h} {layout:?} {}: {bad} elements differ",
        out_w,
        std::any::type_name::<T>()
    );
}

/// One part of the test matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Matrix {
    /// Every dtype, NCHW, antialias and flips on and off.
    Nchw,
    /// Every dtype, NHWC, antialias and flips on and off.
    Nhwc,
    /// Output larger than every crop.
    Upscaling,
    /// The photometric kernel (issue 19).
    Photometric,
}

fn run_matrix<R: Runner>(m: Matrix, r: &mut R) {
    match m {
        Matrix::Nchw => nchw(r),
        Matrix::Nhwc => nhwc(r),
        Matrix::Upscaling => upscaling(r),
        Matrix::Photometric => photometric(r),
    }
}

/// The kernel source compiled for the host against the CPU reference,
/// bit for bit. Panics on a difference.
#[cfg(feature = "kernel-emu")]
pub fn on_emulator(m: Matrix) {
    run_matrix(m, &mut Emu);
}

/// The CUBIN on CUDA device 0 against the CPU reference, within the
/// device tolerance. An error when there is no usable device; panics on a
/// difference.
pub fn on_gpu(m: Matrix) -> crate::Result<()> {
    let mut gpu = Gpu(AugmentKernels::new(0)?);
    run_matrix(m, &mut gpu);
    Ok(())
}

#[cfg(all(test, feature = "kernel-emu"))]
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
                let got = super::emu::f32_to_f16_bits(v);
                assert_eq!(got, f16::from_f32(v).to_bits(), "{v:e} ({bits:#010x})");
                checked += 1;
            }
        }
    }
    assert!(checked > 300_000);
}
