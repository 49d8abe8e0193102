//! The scan decoder (`kernels/progressive.cu`, issue 16) against
//! libjpeg-turbo, coefficient for coefficient, over every progressive file
//! of the shared corpus (photos, tricky files, fuzz seeds), and over every
//! sequential Huffman one (`sequential_*`). One body, two instances:
//!
//! * `emu_*` (feature `kernel-emu`): the kernel source compiled for the
//!   host;
//! * `gpu_*`: the NVRTC-compiled kernel on CUDA device 0; ignored without
//!   one, a failure under `GPUFEED_REQUIRE_GPU=1`.
//!
//! Run: `cargo test --features turbojpeg,kernel-emu --test progressive`
//! (CI does; the file needs `turbojpeg` for its reference).
//!
//! libjpeg-turbo's coefficients come from `tj3Transform` with a custom
//! filter and no output (its `jpeg_read_coefficients`). Entropy decoding
//! is exact integer work, so the tolerance is zero: wherever every chain
//! of a file reports success, each coefficient of each block that holds
//! the image must equal libjpeg-turbo's, whether libjpeg-turbo warned or
//! not; and every file that libjpeg-turbo decodes without a warning must
//! plan and decode without a fault. A fault (or a file the plan refuses)
//! is allowed only where libjpeg-turbo warned or refused: that file goes
//! to the CPU. Sequential files may also be refused as unsupported
//! (12-bit samples, Motion-JPEG's implied Huffman tables, progression
//! parameters libjpeg ignores with a warning), counted apart. The counts
//! are printed.

mod common;

use std::path::Path;

use common::Outcome;
use gpufeed::cuda::pixels::Rgb;
use gpufeed::cuda::progressive::{CoefGrid, Coefficients, SCAN_STATUS};

common::tests!(
    #[cfg(feature = "kernel-emu")]
    emu_scans_equal_libjpeg_turbo,
    gpu_scans_equal_libjpeg_turbo,
    #[cfg(feature = "kernel-emu")]
    emu_pixels_equal_libjpeg_turbo,
    gpu_pixels_equal_libjpeg_turbo,
    #[cfg(feature = "kernel-emu")]
    emu_route_equals_the_cpu_backend,
    gpu_route_equals_the_cpu_backend,
    #[cfg(feature = "kernel-emu")]
    emu_sequential_scans_equal_libjpeg_turbo,
    gpu_sequential_scans_equal_libjpeg_turbo,
    #[cfg(feature = "kernel-emu")]
    emu_sequential_pixels_equal_libjpeg_turbo,
    gpu_sequential_pixels_equal_libjpeg_turbo,
    #[cfg(feature = "kernel-emu")]
    emu_sequential_route_equals_the_cpu_backend,
    gpu_sequential_route_equals_the_cpu_backend,
    #[cfg(feature = "kernel-emu")]
    emu_split_scans_equal_libjpeg_turbo,
    #[cfg(feature = "kernel-emu")]
    emu_both_routes_equal_the_cpu_backend,
    gpu_both_routes_equal_the_cpu_backend,
    #[cfg(feature = "kernel-emu")]
    emu_large_sequential_files_go_to_the_engine,
    gpu_large_sequential_files_go_to_the_engine,
    #[cfg(feature = "kernel-emu")]
    emu_files_the_kernels_refuse_stay_on_the_workers,
    gpu_files_the_kernels_refuse_stay_on_the_workers,
    #[cfg(feature = "kernel-emu")]
    emu_batches_equal_each_file_alone,
    gpu_batches_equal_each_file_alone,
);

/// The corpus's files of each coding process (its manifest's `sof`).
const PROGRESSIVE: Kind = Kind {
    sequential: false,
    sofs: &["progressive"],
    skip: None,
};
const SEQUENTIAL: Kind = Kind {
    sequential: true,
    sofs: &["baseline", "ext-seq"],
    skip: None,
};
/// The route on a GPU, without `photos/full` (as the route test leaves
/// it out on every device: minutes emulated). The coefficient and pixel
/// tests take them: split into
/// subsequences (progressive.cu's "Split decoding"), a multi-megapixel
/// photo is no longer one GPU thread's seconds of work.
const SEQUENTIAL_GPU: Kind = Kind {
    skip: Some("photos/full/"),
    ..SEQUENTIAL
};

#[derive(Clone, Copy)]
struct Kind {
    sequential: bool,
    sofs: &'static [&'static str],
    /// Files under this folder are left out.
    skip: Option<&'static str>,
}

impl Kind {
    fn name(self) -> &'static str {
        if self.sequential {
            "sequential"
        } else {
            "progressive"
        }
    }
}

/// Files over this many pixels are left out (the corpus's decompression
/// bombs); the photos are under 1.3 MP.
const MAX_PIXELS: u64 = 16_000_000;

// The two instances' decoders: coefficients and RGB8 of one file.
#[cfg(feature = "kernel-emu")]
fn emu_coef(p: &Path, d: &[u8]) -> gpufeed::Result<Coefficients> {
    gpufeed::cuda::progressive::emu_coefficients(p, d, MAX_PIXELS)
}
fn gpu_coef(p: &Path, d: &[u8]) -> gpufeed::Result<Coefficients> {
    gpufeed::cuda::progressive::gpu_coefficients(p, d, MAX_PIXELS)
}
#[cfg(feature = "kernel-emu")]
fn emu_rgb(p: &Path, d: &[u8]) -> gpufeed::Result<Rgb> {
    gpufeed::cuda::pixels::emu_rgb(p, d, MAX_PIXELS)
}
fn gpu_rgb(p: &Path, d: &[u8]) -> gpufeed::Result<Rgb> {
    gpufeed::cuda::prog_batch::gpu_rgb(p, d, MAX_PIXELS)
}

#[cfg(feature = "kernel-emu")]
fn emu_scans_equal_libjpeg_turbo() -> Outcome {
    compare(PROGRESSIVE, &emu_coef)
}

fn gpu_scans_equal_libjpeg_turbo() -> Outcome {
    common::need_gpu()?;
    compare(PROGRESSIVE, &gpu_coef)
}

#[cfg(feature = "kernel-emu")]
fn emu_pixels_equal_libjpeg_turbo() -> Outcome {
    compare_pixels(PROGRESSIVE, &emu_rgb)
}

fn gpu_pixels_equal_libjpeg_turbo() -> Outcome {
    common::need_gpu()?;
    compare_pixels(PROGRESSIVE, &gpu_rgb)
}

#[cfg(feature = "kernel-emu")]
fn emu_sequential_scans_equal_libjpeg_turbo() -> Outcome {
    compare(SEQUENTIAL, &emu_coef)
}

fn gpu_sequential_scans_equal_libjpeg_turbo() -> Outcome {
    common::need_gpu()?;
    compare(SEQUENTIAL, &gpu_coef)
}

#[cfg(feature = "kernel-emu")]
fn emu_sequential_pixels_equal_libjpeg_turbo() -> Outcome {
    compare_pixels(SEQUENTIAL, &emu_rgb)
}

fn gpu_sequential_pixels_equal_libjpeg_turbo() -> Outcome {
    common::need_gpu()?;
    compare_pixels(SEQUENTIAL, &gpu_rgb)
}

/// The split kernels (progressive.cu's "Split decoding": one thread per
/// subsequence of a sequential scan) at subsequences of 256 bytes, where
/// a guess often has not resynchronised by its subsequence's end, 1024
/// (the default) and 4096: the same coefficients as libjpeg-turbo over the
/// sequential corpus, and how many split chains synchronised (the others
/// decode on one thread, as before). Every photo of imagenet-size and
/// full is split at each size. On 2026-11-27, with 8 rounds: 433 of 466,
/// 433 of 443 and 400 of 405, the 288 photos 280, 288 and 288 (with 3
/// rounds: 143, 281 and 288).
#[cfg(feature = "kernel-emu")]
fn emu_split_scans_equal_libjpeg_turbo() -> Outcome {
    use gpufeed::cuda::progressive::{SplitCount, emu_coefficients_split};
    use std::cell::Cell;
    for sub_bytes in [256, 1024, 4096] {
        let (all, photos) = (Cell::new(SplitCount::default()), Cell::new(0u32));
        let add = |n: &Cell<SplitCount>, c: SplitCount| {
            let a = n.get();
            n.set(SplitCount {
                split: a.split + c.split,
                synced: a.synced + c.synced,
            });
        };
        let decode = |p: &Path, d: &[u8]| {
            let (c, count) = emu_coefficients_split(p, d, MAX_PIXELS, sub_bytes)?;
            add(&all, count);
            let name = p.to_string_lossy();
            if name.contains("photos/imagenet-size/") || name.contains("photos/full/") {
                assert_eq!(count.split, 1, "{}: not split", p.display());
                photos.set(photos.get() + count.synced);
            }
            Ok(c)
        };
        compare(SEQUENTIAL, &decode)?;
        let a = all.get();
        println!(
            "subsequences of {sub_bytes} bytes: {} of {} split chains synchronised \
             ({} of them the 288 photos of imagenet-size and full)",
            a.synced,
            a.split,
            photos.get()
        );
        assert!(a.synced > 0);
    }
    Ok(())
}

/// A refusal the sequential tests allow of a file libjpeg-turbo decodes
/// cleanly: what the planner does not do, never a file it calls corrupt.
fn unsupported(kind: Kind, e: &gpufeed::Error) -> bool {
    kind.sequential
        && matches!(
            e,
            gpufeed::Error::Sample {
                source: gpufeed::error::SampleError::Unsupported(_),
                ..
            }
        )
}

#[cfg(feature = "kernel-emu")]
fn emu_route_equals_the_cpu_backend() -> Outcome {
    route(PROGRESSIVE, gpufeed::Device::Emulated, &emu_rgb)
}

fn gpu_route_equals_the_cpu_backend() -> Outcome {
    common::need_gpu()?;
    route(PROGRESSIVE, gpufeed::Device::Cuda(0), &gpu_rgb)
}

/// The CUDA share's sequential files at the same lanes
/// (`PipelineBuilder::sequential_kernels`, issue 16, item 3c).
#[cfg(feature = "kernel-emu")]
fn emu_sequential_route_equals_the_cpu_backend() -> Outcome {
    route(SEQUENTIAL, gpufeed::Device::Emulated, &emu_rgb)
}

fn gpu_sequential_route_equals_the_cpu_backend() -> Outcome {
    common::need_gpu()?;
    route(SEQUENTIAL_GPU, gpufeed::Device::Cuda(0), &gpu_rgb)
}

/// Both kernel routes at once (`progressive_kernels` and
/// `sequential_kernels`): the progressive files and the sequential photos
/// of `photos/imagenet-size`, each kind at lanes of its own
/// (`stage::KernelLanes`), so that sequential files do not wait behind a
/// progressive call.
#[cfg(feature = "kernel-emu")]
fn emu_both_routes_equal_the_cpu_backend() -> Outcome {
    route_both(gpufeed::Device::Emulated, &emu_rgb)
}

fn gpu_both_routes_equal_the_cpu_backend() -> Outcome {
    common::need_gpu()?;
    route_both(gpufeed::Device::Cuda(0), &gpu_rgb)
}

/// `sequential_kernels_max_pixels`: at an engine share of 0 the
/// sequential photos of `photos/imagenet-size` over the limit (the
/// set's commonest size, 500×333) go to the engine, the others to the
/// scan kernels, every sample arrives and, emulated, every batch equals
/// the CPU backend's bit for bit. On CUDA the engine's pixels are not
/// libjpeg-turbo's: there the routes' counts are the test, and the
/// batches' samples.
#[cfg(feature = "kernel-emu")]
fn emu_large_sequential_files_go_to_the_engine() -> Outcome {
    large_to_engine(gpufeed::Device::Emulated)
}

fn gpu_large_sequential_files_go_to_the_engine() -> Outcome {
    common::need_gpu()?;
    large_to_engine(gpufeed::Device::Cuda(0))
}

fn large_to_engine(device: gpufeed::Device) -> Outcome {
    use gpufeed::source::Sample;
    let root = common::corpus()?;
    let limit = 500 * 333;
    let manifest = std::fs::read_to_string(root.join("MANIFEST.tsv")).unwrap();
    let (mut samples, mut large, mut small) = (Vec::new(), 0u64, 0u64);
    for row in manifest.lines() {
        let f: Vec<&str> = row.split('\t').collect();
        if f.len() > 4 && f[0].starts_with("photos/imagenet-size/") && f[4] == "baseline" {
            let path = root.join(f[0]);
            let h = gpufeed::jpeg::parse_header(&std::fs::read(&path).unwrap(), u64::MAX).unwrap();
            if gpufeed::decode::nvjpeg::hardware_takes(&h) {
                let pixels = u64::from(h.width) * u64::from(h.height);
                if pixels > limit {
                    large += 1;
                } else {
                    small += 1;
                }
                let label = samples.len() as u32 % 7;
                samples.push(Sample { path, label });
            }
        }
    }
    assert!(large > 0 && small > 0, "{large} large, {small} not");
    let source = gpufeed::Source::from_samples(&root, samples).unwrap();
    let s = two_epochs_against_cpu(&source, device, |b, on| {
        b.sequential_kernels(on)
            .sequential_kernels_max_pixels(limit)
            .hardware_decode_share(0.0)
    });
    let emulated = device != gpufeed::Device::Cuda(0);
    println!(
        "{large} photos over {limit} pixels, {small} not, two epochs: {} on the engine, {} on \
         the kernels, {} on nvJPEG's CUDA route, {} on the CPU",
        s.decoded_hardware, s.decoded_progressive, s.decoded_cuda, s.decoded_cpu_fallback
    );
    // The kernels refuse none of these photos (tests above).
    assert_eq!(s.decoded_progressive, 2 * small, "{s:?}");
    if emulated {
        assert_eq!(s.decoded_hardware, 2 * large, "{s:?}");
    } else {
        // What the engine refuses at its call decodes another way.
        let elsewhere = s.decoded_hardware + s.decoded_cuda + s.decoded_cpu_fallback;
        assert_eq!(elsewhere, 2 * large, "{s:?}");
        let engine = gpufeed::decode::nvjpeg::hardware_decoder_info().is_ok();
        assert_eq!(s.decoded_hardware > 0, engine, "{s:?}");
    }
    Ok(())
}

/// Files the scan kernels refuse before decoding (the planner refuses
/// them, or `gf_color` does not convert their plan: incomplete
/// progressions, colour or sampling it leaves to others) though
/// libjpeg-turbo decodes them, with both kernel routes on at an engine
/// share of 0: the worker that plans one sees the refusal and decodes it
/// on its own route (nvJPEG's host phase there; emulated, the CPU), so
/// none reaches a kernel lane, none comes back from one to the batch
/// thread, and emulated every batch equals the CPU backend's bit for bit.
/// Before, such a file went to a lane, which planned it again, refused
/// it and handed it to the batch thread (issue 16, item 1: nothing
/// decodes there).
#[cfg(feature = "kernel-emu")]
fn emu_files_the_kernels_refuse_stay_on_the_workers() -> Outcome {
    refused_on_workers(gpufeed::Device::Emulated, &emu_rgb)
}

fn gpu_files_the_kernels_refuse_stay_on_the_workers() -> Outcome {
    common::need_gpu()?;
    refused_on_workers(gpufeed::Device::Cuda(0), &gpu_rgb)
}

fn refused_on_workers(device: gpufeed::Device, decode: DecodeRgb) -> Outcome {
    use gpufeed::source::Sample;
    let root = common::corpus()?;
    let mut samples = Vec::new();
    for kind in [PROGRESSIVE, SEQUENTIAL] {
        for (_, path, data) in files(&root, kind, false) {
            let routed = gpufeed::jpeg::parse_header(&data, u64::MAX)
                .is_ok_and(|h| gpufeed::decode::nvjpeg::takes(&h));
            if routed && decode(&path, &data).is_err() && libjpeg::rgb(&data, MAX_PIXELS).is_ok() {
                let label = samples.len() as u32 % 7;
                samples.push(Sample { path, label });
            }
        }
    }
    let n = samples.len() as u64;
    assert!(n > 0, "no file the kernels refuse");
    let source = gpufeed::Source::from_samples(&root, samples).unwrap();
    let s = two_epochs_against_cpu(&source, device, |b, on| {
        b.staging_bytes(8 << 20)
            .progressive_kernels(on)
            .sequential_kernels(on)
            .hardware_decode_share(0.0)
    });
    let emulated = device != gpufeed::Device::Cuda(0);
    println!(
        "{n} files the kernels refuse, two epochs: {} on the workers' route ({} of them on the \
         batch thread), {} on the kernels, {} on the CPU, {} skipped",
        s.decoded_cuda,
        s.decoded_cuda_batch_thread,
        s.decoded_progressive,
        s.decoded_cpu_fallback,
        s.errors.iter().sum::<u64>()
    );
    assert_eq!(s.decoded_progressive, 0, "{s:?}");
    assert_eq!(s.decoded_cuda_batch_thread, 0, "{s:?}");
    if emulated {
        // The workers' stand-in decodes every one of them.
        assert_eq!(s.decoded_cuda, 2 * n, "{s:?}");
        assert_eq!(s.decoded_cpu_fallback, 0, "{s:?}");
    }
    Ok(())
}

/// Two epochs of `source` on `device` against the CPU backend, each
/// pipeline [`small_u8_batches`] set up by `setup` (`on`: the device's):
/// the same samples in every batch and, emulated, the same pixels bit for
/// bit (on CUDA the engine's and nvJPEG's pixels are not libjpeg-turbo's).
/// The device pipeline's stats.
fn two_epochs_against_cpu(
    source: &gpufeed::Source,
    device: gpufeed::Device,
    setup: impl Fn(gpufeed::PipelineBuilder, bool) -> gpufeed::PipelineBuilder,
) -> gpufeed::pipeline::Stats {
    let build = |device, on| setup(small_u8_batches(source, device), on).build().unwrap();
    let emulated = device != gpufeed::Device::Cuda(0);
    let mut cpu = build(gpufeed::Device::Cpu, false);
    let mut dev = build(device, true);
    common::each_batch_as_cpu(&mut cpu, &mut dev, 2, |g, w, what| {
        if emulated {
            let got = g.images().to_host().unwrap();
            assert!(got.as_u8() == w.images().as_u8(), "{what}: pixels");
        }
    });
    dev.stats()
}

/// The route tests' pipeline on `device`: batches of 8 small u8 NHWC
/// images, unnormalised, libjpeg-turbo on the CPU, no EXIF rotation (the
/// kernels' pixels are libjpeg-turbo's, unrotated).
fn small_u8_batches(source: &gpufeed::Source, device: gpufeed::Device) -> gpufeed::PipelineBuilder {
    gpufeed::Pipeline::builder()
        .source(source.clone())
        .device(device)
        .cpu_backend(gpufeed::decode::CpuBackend::TurboJpeg)
        .apply_exif_orientation(false)
        .batch_size(8)
        .workers(2)
        .output_size(32, 48)
        .dtype(gpufeed::DType::U8)
        .normalize(None)
        .layout(gpufeed::Layout::Nhwc)
}

fn route_both(device: gpufeed::Device, decode: DecodeRgb) -> Outcome {
    route_with(PROGRESSIVE, device, decode, true)
}

/// The progressive route (`PipelineBuilder::progressive_kernels`) through
/// a whole pipeline, against the CPU backend with libjpeg-turbo: the same
/// samples, labels, skips and pixels, two epochs. For `SEQUENTIAL`, the
/// sequential files through `sequential_kernels`, the same way, with no
/// engine share, so that every file goes to the kernels first (on CUDA
/// the engine's pixels are not libjpeg-turbo's).
///
/// * Emulated (bit for bit): every progressive file of the corpus but
///   `photos/full` (minutes emulated), damaged, incomplete and CMYK ones
///   included, and the sequential photos of `photos/imagenet-size` (for
///   the emulated engine, beside). The files the kernels refuse decode
///   on the CPU (the workers', where the plan refused them; the lane's,
///   where a scan faulted), so both halves of the route run, and the
///   batches equal the CPU backend's.
/// * CUDA: the files the kernels decode equal to libjpeg-turbo on their
///   own (`decode`, a file at a time), so that every image of every
///   batch comes from the route: each decoded by the kernels, and the
///   batches within the augment kernel's tolerance (u8 +-1) of the CPU
///   backend's. The other files would go to nvJPEG, whose pixels differ.
fn route(kind: Kind, device: gpufeed::Device, decode: DecodeRgb) -> Outcome {
    route_with(kind, device, decode, false)
}

/// [`route`], or with `both`, both kernel routes on, `kind`'s files and
/// the sequential photos of `photos/imagenet-size` at share 0.
fn route_with(kind: Kind, device: gpufeed::Device, decode: DecodeRgb, both: bool) -> Outcome {
    use gpufeed::source::Sample;
    let root = common::corpus()?;
    let emulated = device != gpufeed::Device::Cuda(0);
    let sequential = kind.sequential;
    let most = 2_000_000;
    let mut samples = Vec::new();
    let mut taken = 0;
    for (name, path, data) in files(&root, kind, false) {
        if name.starts_with("photos/full/") {
            continue;
        }
        let kernels = matches!(decode(&path, &data), Ok(r) if r.status.iter().all(|&s| s == 0)
            && libjpeg::rgb(&data, MAX_PIXELS).is_ok_and(|(px, _)| px == r.pixels)
            && u64::from(r.width) * u64::from(r.height) <= most
            // What the nvJPEG routes take at all (the rest decode on the
            // CPU route, never at a lane).
            && gpufeed::jpeg::parse_header(&data, u64::MAX)
                .is_ok_and(|h| gpufeed::decode::nvjpeg::takes(&h)));
        taken += usize::from(kernels);
        if kernels || emulated {
            let label = samples.len() as u32 % 7;
            samples.push(Sample { path, label });
        }
    }
    if (emulated || both) && !sequential {
        // Sequential photos too, for the emulated engine (or, `both`, for
        // the sequential kernels): groups that split between the engine
        // (or those kernels' lanes) and the progressive lanes.
        let manifest = std::fs::read_to_string(root.join("MANIFEST.tsv")).unwrap();
        for row in manifest.lines() {
            let f: Vec<&str> = row.split('\t').collect();
            if f.len() > 4 && f[0].starts_with("photos/imagenet-size/") && f[4] != "progressive" {
                let label = samples.len() as u32 % 7;
                samples.push(Sample {
                    path: root.join(f[0]),
                    label,
                });
            }
        }
    }
    let n = samples.len();
    let source = gpufeed::Source::from_samples(&root, samples).unwrap();
    let build = |device, on: bool| {
        small_u8_batches(&source, device)
            .staging_bytes(8 << 20)
            .progressive_kernels(on && !sequential)
            .sequential_kernels(on && (sequential || both))
            .hardware_decode_share(if sequential || both { 0.0 } else { 1.0 })
            .trace(on)
            .build()
            .unwrap()
    };
    let mut cpu = build(gpufeed::Device::Cpu, false);
    let mut dev = build(device, true);
    common::each_batch_as_cpu(&mut cpu, &mut dev, 2, |g, w, what| {
        let got = g.images().to_host().unwrap();
        let (a, b) = (got.as_u8().unwrap(), w.images().as_u8().unwrap());
        assert_eq!(a.len(), b.len(), "{what}");
        let bad = a
            .iter()
            .zip(b)
            .filter(|(x, y)| x.abs_diff(**y) > u8::from(!emulated))
            .count();
        assert_eq!(
            bad, 0,
            "{what}: {bad} elements differ from the CPU backend's"
        );
    });
    let s = dev.stats();
    println!(
        "{} files ({taken} the kernels decode alone), two epochs: {} decoded by the kernels, \
         {} on the workers after a refused plan, {} on the CPU after a scan fault, {} on the \
         (emulated) engine, {} skipped",
        n,
        s.decoded_progressive,
        s.decoded_cuda,
        s.decoded_cpu_fallback,
        s.decoded_hardware,
        s.errors.iter().sum::<u64>()
    );
    // The lanes' calls in the timeline (issue 16, item 6), on tracks of
    // their own.
    let json = dev.trace_json().unwrap();
    assert!(
        json.contains("\"name\":\"progressive: decode call\"")
            && json.contains("gpufeed-emu-progressive-") == emulated
            && json.contains("\"gpufeed-progressive-") != emulated,
        "the progressive lanes' calls"
    );
    if both {
        // Calls at the sequential files' lanes (0..n) and at the
        // progressive files' (n..2n): a lane per kind and batch in flight
        // (the default 3), unless the environment says otherwise.
        let n: usize = std::env::var("GPUFEED_PROGRESSIVE_LANES")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|n| (1..=16).contains(n))
            .unwrap_or(3);
        let lane = if emulated {
            "gpufeed-emu-progressive"
        } else {
            "gpufeed-progressive"
        };
        let used = |k: usize| json.contains(&format!("{lane}-{k}\""));
        assert!((0..2 * n).all(used), "every lane of both kinds took calls");
        assert!(!used(2 * n), "no more lanes than {n} per kind");
    }
    // The lanes' buffers are in memory() (issue 16, item 5): on CUDA
    // their device buffers, on the emulated device the image buffer of
    // their CPU decoder, which alone counts as device memory there.
    let m = dev.memory();
    assert!(m.decoder_device_bytes > 0, "{m:?}");
    // The readers read into page-locked blocks once 256 files told their
    // pool the size (issue 16, item 4), and the lanes copy the files from
    // there (`prog_batch::uploads`), whatever the engine share.
    if 2 * n > 256 && std::env::var("GPUFEED_PINNED_READS").as_deref() != Ok("0") {
        assert!(m.read_buffer_pinned_bytes > 0, "{m:?}");
    }
    // Their calls' time, which `gpufeed bench` weighs against the other
    // stages to name the limit.
    assert!(s.progressive_busy > std::time::Duration::ZERO, "{s:?}");
    if emulated {
        // Both halves of the route ran: the files the kernels refuse
        // decoded on the workers (a refused plan) or on the lane's CPU (a
        // scan fault); and (progressive files alone) the engine beside
        // them.
        assert!(
            s.decoded_progressive > 0
                && s.decoded_cuda + s.decoded_cpu_fallback > 0
                && (s.decoded_hardware > 0) != (sequential || both),
            "{s:?}"
        );
    } else {
        assert_eq!(s.decoded_progressive, 2 * n as u64, "{s:?}");
    }
    Ok(())
}

type DecodeRgb<'a> = &'a dyn Fn(&Path, &[u8]) -> gpufeed::Result<Rgb>;
type DecodeBatch<'a> = &'a dyn Fn(&[(&Path, &[u8])], &[bool]) -> gpufeed::Result<Vec<Rgb>>;

#[cfg(feature = "kernel-emu")]
fn emu_batches_equal_each_file_alone() -> Outcome {
    use gpufeed::cuda::prog_batch::emu_rgb_batch;
    batches(&|f, p| emu_rgb_batch(f, p, MAX_PIXELS), &emu_rgb)
}

fn gpu_batches_equal_each_file_alone() -> Outcome {
    common::need_gpu()?;
    use gpufeed::cuda::prog_batch::gpu_rgb_batch;
    batches(&|f, p| gpu_rgb_batch(f, p, MAX_PIXELS), &gpu_rgb)
}

/// `photos/imagenet-size`'s files that the kernels decode alone, in
/// batches of 64 as a lane decodes them (tables shared: 160 of the files
/// have the same four; chains longest first; every third file copied on
/// its own, as from the readers' page-locked blocks): each image's bytes
/// those of the file decoded alone (the same kernels; zero tolerance).
fn batches(batch: DecodeBatch, alone: DecodeRgb) -> Outcome {
    let dir = common::corpus()?.join("photos/imagenet-size");
    let mut paths: Vec<_> = (std::fs::read_dir(&dir).unwrap())
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    let mut files = Vec::new();
    for path in paths {
        let data = std::fs::read(&path).unwrap();
        if let Ok(r) = alone(&path, &data)
            && r.status.iter().all(|&s| s == 0)
        {
            files.push((path, data, r.pixels));
        }
    }
    assert!(files.len() >= 150, "{} files decode alone", files.len());
    for chunk in files.chunks(64) {
        let with: Vec<(&Path, &[u8])> = chunk
            .iter()
            .map(|(p, d, _)| (p.as_path(), &d[..]))
            .collect();
        let pinned: Vec<bool> = (0..chunk.len()).map(|i| i % 3 == 1).collect();
        let got = batch(&with, &pinned).unwrap();
        assert_eq!(got.len(), chunk.len());
        for ((path, _, want), g) in chunk.iter().zip(&got) {
            let name = path.display();
            assert!(g.status.iter().all(|&s| s == 0), "{name}: {:?}", g.status);
            assert!(
                g.pixels == *want,
                "{name}: the batch's pixels are not the file's alone"
            );
        }
    }
    println!(
        "photos/imagenet-size: {} images in batches of 64 equal to their files decoded alone",
        files.len()
    );
    Ok(())
}

/// The progressive files whose scans decode without a fault, to RGB8,
/// against libjpeg-turbo's `tj3Decompress8` with its defaults (accurate
/// IDCT, fancy upsampling): every byte equal where libjpeg-turbo decoded
/// without a warning.
fn compare_pixels(kind: Kind, decode: DecodeRgb) -> Outcome {
    let root = common::corpus()?;
    let (mut equal, mut other, mut refused) = (0, 0, 0);
    let mut failures = Vec::new();
    for (name, path, data) in files(&root, kind, true) {
        let reference = libjpeg::rgb(&data, MAX_PIXELS);
        let Ok((want, false)) = reference else {
            // Decoded all the same (under Valgrind, CI's memcheck run, a
            // read or write out of bounds on a damaged file would show),
            // compared only where libjpeg-turbo did not warn.
            let _ = decode(&path, &data);
            continue;
        };
        let got = match decode(&path, &data) {
            Ok(g) if g.status.iter().all(|&s| s == 0) => g,
            Ok(g) => {
                failures.push(format!("{}: scan status {:?}", name, g.status));
                continue;
            }
            Err(e) => {
                // CMYK and fractional sampling stay on the CPU.
                refused += 1;
                println!("{e}");
                continue;
            }
        };
        if got.pixels == want {
            equal += 1;
            continue;
        }
        other += 1;
        let i = got
            .pixels
            .iter()
            .zip(&want)
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        let (x, y) = ((i / 3) % got.width as usize, i / 3 / got.width as usize);
        failures.push(format!(
            "{}: pixel ({x}, {y}) channel {}: {} vs libjpeg {} ({} bytes of {} differ)",
            name,
            i % 3,
            got.pixels.get(i).copied().unwrap_or(0),
            want.get(i).copied().unwrap_or(0),
            got.pixels.iter().zip(&want).filter(|(a, b)| a != b).count(),
            want.len()
        ));
    }
    println!(
        "{} files decoded without a warning: {equal} equal to libjpeg-turbo's RGB, \
         {other} not, {refused} left to the CPU",
        kind.name()
    );
    assert!(equal >= enough(), "only {equal} files compared");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}

/// The corpus's files of `kind` under [`MAX_PIXELS`] that are there (a
/// partial copy, as the GPU bundle's, has photos/ only): manifest name,
/// path, bytes.
///
/// `GPUFEED_TEST_MAX_FILES=N` keeps the first N photos (`photos/`) where
/// `capped` (the comparisons, not the routes): for the sanitizer runs of
/// the GPU instances, where every launch is instrumented and the whole
/// set outlasts its step (memcheck over `gpu_pixels` ran past 150 s on an
/// H200, 2026-11-27).
fn files(
    root: &Path,
    kind: Kind,
    capped: bool,
) -> impl Iterator<Item = (String, std::path::PathBuf, Vec<u8>)> {
    let manifest = std::fs::read_to_string(root.join("MANIFEST.tsv")).unwrap();
    let most = max_files().filter(|_| capped).unwrap_or(usize::MAX);
    let root = root.to_path_buf();
    let rows: Vec<String> = manifest.lines().skip(1).map(str::to_string).collect();
    rows.into_iter()
        .filter_map(move |row| {
            let f: Vec<&str> = row.split('\t').collect();
            if f.len() < 5 || !kind.sofs.contains(&f[4]) {
                return None;
            }
            let sampled = most < usize::MAX;
            if kind.skip.is_some_and(|d| f[0].starts_with(d))
                || (sampled && !f[0].starts_with("photos/"))
            {
                return None;
            }
            let (w, h): (u64, u64) = (f[2].parse().unwrap_or(0), f[3].parse().unwrap_or(0));
            if w * h > MAX_PIXELS {
                return None;
            }
            let path = root.join(f[0]);
            let data = std::fs::read(&path).ok()?;
            Some((f[0].to_string(), path, data))
        })
        .take(most)
}

/// `GPUFEED_TEST_MAX_FILES`, when set (see [`files`]).
fn max_files() -> Option<usize> {
    std::env::var("GPUFEED_TEST_MAX_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
}

/// The files a comparison must have found equal: 40 (photos/ alone has 50
/// progressive files, the whole corpus 87, and 288 sequential ones), or
/// all of a `GPUFEED_TEST_MAX_FILES` sample of photos.
fn enough() -> usize {
    max_files().map_or(40, |n| n.clamp(1, 40))
}

type Decode<'a> = &'a dyn Fn(&Path, &[u8]) -> gpufeed::Result<Coefficients>;

fn compare(kind: Kind, decode: Decode) -> Outcome {
    let root = common::corpus()?;
    let (mut equal, mut faulted, mut unplanned, mut warned, mut clean_files) = (0, 0, 0, 0, 0);
    let mut unsupported_clean = 0;
    let mut failures = Vec::new();
    for (name, path, data) in files(&root, kind, true) {
        let reference = libjpeg::coefficients(&data, MAX_PIXELS);
        let clean = matches!(reference, Ok((_, false)));
        warned += usize::from(matches!(reference, Ok((_, true))));
        clean_files += usize::from(clean);
        let got = match decode(&path, &data) {
            Ok(c) => c,
            Err(e) => {
                unplanned += 1;
                if clean && unsupported(kind, &e) {
                    unsupported_clean += 1;
                    println!("{e}");
                } else if clean {
                    failures.push(format!("{}: not planned: {e}", name));
                }
                continue;
            }
        };
        if let Some(&s) = got.status.iter().find(|&&s| s != 0) {
            faulted += 1;
            let why = SCAN_STATUS
                .get(s as usize)
                .copied()
                .unwrap_or("unknown status");

            if s == 5 || clean {
                failures.push(format!("{}: {why} (status {:?})", name, got.status));
            }
            continue;
        }
        let Ok((want, _)) = reference else {
            continue; // libjpeg-turbo refused it outright
        };
        match first_difference(&got.comps, &want) {
            None => equal += 1,
            Some(d) => failures.push(format!("{}: {d}", name)),
        }
    }
    println!(
        "{} files: {equal} equal to libjpeg-turbo, {faulted} left to the CPU by a scan \
         fault, {unplanned} not planned ({unsupported_clean} of them unsupported though \
         libjpeg-turbo decoded them cleanly); libjpeg-turbo decoded {clean_files} without a \
         warning and {warned} with one",
        kind.name()
    );
    assert!(
        clean_files >= enough() && equal >= enough(),
        "only {clean_files} clean files, {equal} equal: is the corpus there?"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}

/// Where `got` first differs from libjpeg-turbo's rows of blocks.
fn first_difference(got: &[CoefGrid], want: &[Vec<Vec<i16>>]) -> Option<String> {
    if got.len() != want.len() {
        return Some(format!("{} components, libjpeg {}", got.len(), want.len()));
    }
    for (c, (g, rows)) in got.iter().zip(want).enumerate() {
        if rows.len() < g.bh {
            return Some(format!(
                "component {c}: libjpeg has {} block rows",
                rows.len()
            ));
        }
        for (by, row) in rows.iter().take(g.bh).enumerate() {
            if row.len() != g.bw * 64 {
                return Some(format!("component {c}: row of {} blocks", row.len() / 64));
            }
            let ours = &g.coef[by * g.stride * 64..(by * g.stride + g.bw) * 64];
            if let Some(i) = ours.iter().zip(row).position(|(a, b)| a != b) {
                return Some(format!(
                    "component {c} block ({}, {by}) coefficient {}: {} vs libjpeg {}",
                    i / 64,
                    i % 64,
                    ours[i],
                    row[i]
                ));
            }
        }
    }
    None
}

mod libjpeg {
    use std::ffi::{c_int, c_short, c_void};

    use turbojpeg::raw;

    /// Per component, per block row, the coefficients of its blocks (64
    /// each, natural order); and whether libjpeg-turbo warned.
    pub(crate) type Rows = Vec<Vec<Vec<i16>>>;

    unsafe extern "C" fn keep(
        coeffs: *mut c_short,
        array: raw::tjregion,
        _plane: raw::tjregion,
        component: c_int,
        _transform: c_int,
        t: *mut raw::tjtransform,
    ) -> c_int {
        // SAFETY: `data` is the `Rows` that `coefficients` passed, alive
        // for the tj3Transform call that runs this filter; libjpeg-turbo
        // hands one row of `array.w / 8` blocks of 64 coefficients
        // (turbojpeg.c, the customFilter loop).
        unsafe {
            let rows = &mut *((*t).data as *mut Rows);
            let c = component as usize;
            if rows.len() <= c {
                rows.resize(c + 1, Vec::new());
            }
            let n = (array.w / 8) as usize * 64;
            rows[c].push(std::slice::from_raw_parts(coeffs, n).to_vec());
        }
        0
    }

    /// libjpeg-turbo's RGB8 decode with TurboJPEG's defaults, and whether
    /// it warned.
    pub(crate) fn rgb(data: &[u8], max_pixels: u64) -> Result<(Vec<u8>, bool), String> {
        // SAFETY: a plain TurboJPEG session: the handle is checked and
        // destroyed here; the output holds width * height * 3 bytes, as
        // the header read first says, and `data` is a live slice.
        unsafe {
            let h = raw::tj3Init(raw::TJINIT_TJINIT_DECOMPRESS as c_int);
            if h.is_null() {
                return Err("tj3Init failed".into());
            }
            raw::tj3Set(
                h,
                raw::TJPARAM_TJPARAM_MAXPIXELS as c_int,
                max_pixels as c_int,
            );
            let len = data.len() as raw::size_t;
            if raw::tj3DecompressHeader(h, data.as_ptr(), len) != 0 {
                raw::tj3Destroy(h);
                return Err("header".into());
            }
            let w = raw::tj3Get(h, raw::TJPARAM_TJPARAM_JPEGWIDTH as c_int);
            let ht = raw::tj3Get(h, raw::TJPARAM_TJPARAM_JPEGHEIGHT as c_int);
            let mut out = vec![0u8; w.max(0) as usize * ht.max(0) as usize * 3];
            let pf = raw::TJPF_TJPF_RGB as c_int;
            let r = raw::tj3Decompress8(h, data.as_ptr(), len, out.as_mut_ptr(), w * 3, pf);
            let warning = raw::tj3GetErrorCode(h) == raw::TJERR_TJERR_WARNING as c_int;
            raw::tj3Destroy(h);
            match r {
                0 => Ok((out, false)),
                _ if warning => Ok((out, true)),
                _ => Err("libjpeg-turbo refused it".into()),
            }
        }
    }

    pub(crate) fn coefficients(data: &[u8], max_pixels: u64) -> Result<(Rows, bool), String> {
        let mut rows: Rows = Vec::new();
        // SAFETY: a plain TurboJPEG session: the handle is checked and
        // destroyed here; the transform struct, the (unused) destination
        // arrays and `rows` outlive the call; `data` is a live slice.
        unsafe {
            let h = raw::tj3Init(raw::TJINIT_TJINIT_TRANSFORM as c_int);
            if h.is_null() {
                return Err("tj3Init failed".into());
            }
            raw::tj3Set(
                h,
                raw::TJPARAM_TJPARAM_MAXPIXELS as c_int,
                max_pixels as c_int,
            );
            let mut t: raw::tjtransform = std::mem::zeroed();
            t.op = raw::TJXOP_TJXOP_NONE as c_int;
            t.options = (raw::TJXOPT_NOOUTPUT | raw::TJXOPT_COPYNONE) as c_int;
            t.customFilter = Some(keep);
            t.data = (&mut rows as *mut Rows).cast::<c_void>();
            let mut buf: *mut u8 = std::ptr::null_mut();
            let mut size: raw::size_t = 0;
            let len = data.len() as raw::size_t;
            let r = raw::tj3Transform(h, data.as_ptr(), len, 1, &mut buf, &mut size, &t);
            raw::tj3Destroy(h);
            // A fatal error longjmps out before the filter runs (after
            // jpeg_read_coefficients); a warning leaves r = -1 with the
            // filter run (STOPONWARNING is off).
            if rows.is_empty() {
                Err("libjpeg-turbo refused it".into())
            } else {
                Ok((rows, r != 0))
            }
        }
    }
}
