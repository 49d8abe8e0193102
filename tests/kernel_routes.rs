//! The scan kernels' routes through a whole pipeline
//! (`PipelineBuilder::progressive_kernels` and `sequential_kernels`, issue
//! 16), against the CPU backend with libjpeg-turbo: the same samples,
//! labels and skips in every batch, and emulated the same pixels bit for
//! bit; which files reach the kernels, the engine, the workers and the
//! CPU. One body, two instances, as in `tests/progressive.rs` (the
//! kernels against libjpeg-turbo a file at a time):
//!
//! * `emu_*` (feature `kernel-emu`): the kernel source compiled for the
//!   host, in the emulated device's pipeline;
//! * `gpu_*`: CUDA device 0; ignored without one, a failure under
//!   `GPUFEED_REQUIRE_GPU=1`.
//!
//! Run: `cargo test --features turbojpeg,kernel-emu --test kernel_routes`
//! (CI does; libjpeg-turbo is the CPU backend the batches are compared
//! with, and the reference that picks the files).

mod common;
#[path = "common/scans.rs"]
mod scans;

use common::Outcome;
#[cfg(feature = "kernel-emu")]
use scans::emu_rgb;
use scans::{
    DecodeRgb, Kind, MAX_PIXELS, PROGRESSIVE, SEQUENTIAL, SEQUENTIAL_GPU, files, gpu_rgb, libjpeg,
};

common::tests!(
    #[cfg(feature = "kernel-emu")]
    emu_route_equals_the_cpu_backend,
    gpu_route_equals_the_cpu_backend,
    #[cfg(feature = "kernel-emu")]
    emu_sequential_route_equals_the_cpu_backend,
    gpu_sequential_route_equals_the_cpu_backend,
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
    emu_kernel_memory_limit_bounds_the_lanes,
    gpu_kernel_memory_limit_bounds_the_lanes,
);

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
    let (mut samples, mut large, mut small) = (Vec::new(), 0u64, 0u64);
    for path in imagenet_size(&root, |c| c == "baseline") {
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

/// `kernel_memory_limit` (issue 16, item 5): with a third of what the
/// scan kernels' lanes hold without a limit, they hold at most the limit
/// for their files, coefficients and samples
/// (`Memory::kernel_device_bytes`), cutting calls into parts one after
/// another, and still decode files; with the least limit (1 MiB) the
/// files past a lane's share alone stay on the workers' route; every batch has the CPU backend's samples
/// and, emulated, its pixels bit for bit.
#[cfg(feature = "kernel-emu")]
fn emu_kernel_memory_limit_bounds_the_lanes() -> Outcome {
    kernel_memory_bound(gpufeed::Device::Emulated)
}

fn gpu_kernel_memory_limit_bounds_the_lanes() -> Outcome {
    common::need_gpu()?;
    kernel_memory_bound(gpufeed::Device::Cuda(0))
}

fn kernel_memory_bound(device: gpufeed::Device) -> Outcome {
    use gpufeed::source::Sample;
    let root = common::corpus()?;
    let samples: Vec<Sample> = imagenet_size(&root, |c| c == "baseline")
        .into_iter()
        .take(64)
        .enumerate()
        .map(|(i, path)| Sample {
            path,
            label: i as u32 % 7,
        })
        .collect();
    let source = gpufeed::Source::from_samples(&root, samples).unwrap();
    let emulated = device != gpufeed::Device::Cuda(0);
    let run = |limit: Option<u64>| {
        let build = |device, on: bool| {
            let b = small_u8_batches(&source, device)
                .staging_bytes(8 << 20)
                .sequential_kernels(on)
                .hardware_decode_share(0.0)
                .batches_in_flight(3);
            match limit {
                Some(l) if on => b.kernel_memory_limit(l),
                _ => b,
            }
            .build()
            .unwrap()
        };
        let mut cpu = build(gpufeed::Device::Cpu, false);
        let mut dev = build(device, true);
        common::each_batch_as_cpu(&mut cpu, &mut dev, 2, |g, w, what| {
            if emulated {
                let got = g.images().to_host().unwrap();
                assert!(got.as_u8() == w.images().as_u8(), "{what}: pixels");
            }
        });
        (dev.memory().kernel_device_bytes, dev.stats())
    };
    let (free, _) = run(None);
    let limit = (free / 3).max(1 << 20);
    let (held, s) = run(Some(limit));
    println!(
        "the lanes held {free} bytes without a limit, {held} with {limit}; two epochs: {} on the \
         kernels, {} on nvJPEG's CUDA route, {} on the CPU",
        s.decoded_progressive, s.decoded_cuda, s.decoded_cpu_fallback
    );
    assert!(free > limit, "a limit below what the lanes hold: {free}");
    assert!(
        held > 0 && held <= limit,
        "{held} bytes held, limit {limit}"
    );
    assert!(s.decoded_progressive > 0, "{s:?}");
    // The least limit, a third of a MiB a lane: none of these photos'
    // buffers (about 1 MB each) fit, so the workers that planned them keep
    // them on their own route, as they keep the files the plan refuses
    // (emulated, none comes back from a lane to the CPU), and every
    // sample still arrives.
    let (held, s) = run(Some(1 << 20));
    println!(
        "with 1 MiB: {held} bytes held; {} on the kernels, {} on nvJPEG's CUDA route, {} on \
         the CPU",
        s.decoded_progressive, s.decoded_cuda, s.decoded_cpu_fallback
    );
    assert_eq!(held, 0, "nothing for the lanes to hold");
    assert_eq!(s.decoded_progressive, 0, "{s:?}");
    assert!(s.decoded_cuda > 0, "{s:?}");
    if emulated {
        assert_eq!(s.decoded_cpu_fallback, 0, "{s:?}");
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
    let cut = tempfile::tempdir().unwrap();
    let mut candidates: Vec<_> = [PROGRESSIVE, SEQUENTIAL]
        .into_iter()
        .flat_map(|kind| files(&root, kind, false))
        .map(|(_, path, data)| (path, data))
        .collect();
    candidates.extend(first_scans_only(&root, cut.path()));
    let mut samples = Vec::new();
    let (mut made, mut incomplete) = (0, 0);
    for (path, data) in candidates {
        let routed = gpufeed::jpeg::parse_header(&data, u64::MAX)
            .is_ok_and(|h| gpufeed::decode::nvjpeg::takes(&h));
        if routed && decode(&path, &data).is_err() && libjpeg::rgb(&data, MAX_PIXELS).is_ok() {
            made += usize::from(path.starts_with(cut.path()));
            incomplete += u64::from(!gpufeed::jpeg::complete(&data));
            let label = samples.len() as u32 % 7;
            samples.push(Sample { path, label });
        }
    }
    let n = samples.len() as u64;
    assert!(made > 0, "no photo cut after its first scan was refused");
    let source = gpufeed::Source::from_samples(&root, samples).unwrap();
    let s = two_epochs_against_cpu(&source, device, |b, on| {
        b.staging_bytes(8 << 20)
            .progressive_kernels(on)
            .sequential_kernels(on)
            .hardware_decode_share(0.0)
    });
    let emulated = device != gpufeed::Device::Cuda(0);
    println!(
        "{n} files the kernels refuse ({incomplete} not complete), two epochs: {} on the workers' \
         route ({} of them on the batch thread), {} on the kernels, {} on the CPU, {} skipped",
        s.decoded_cuda,
        s.decoded_cuda_batch_thread,
        s.decoded_progressive,
        s.decoded_cpu_fallback,
        s.errors.iter().sum::<u64>()
    );
    assert_eq!(s.decoded_progressive, 0, "{s:?}");
    assert_eq!(s.decoded_cuda_batch_thread, 0, "{s:?}");
    // The workers' route (nvJPEG's CUDA route, emulated its stand-in)
    // leaves the files that are not complete to the worker's CPU decoder
    // (`gpufeed::jpeg::complete`); emulated, it decodes every other one.
    assert!(s.decoded_cpu_fallback >= 2 * incomplete, "{s:?}");
    if emulated {
        assert_eq!(s.decoded_cpu_fallback, 2 * incomplete, "{s:?}");
        assert_eq!(s.decoded_cuda, 2 * (n - incomplete), "{s:?}");
    }
    Ok(())
}

/// Progressive photos cut after their first scan (an EOI where the
/// second scan's markers begin), written to `dir`: incomplete
/// progressions, which libjpeg-turbo decodes and the kernels refuse. The
/// corpus's own refused files are in `tricky/` and `fuzz/`, which a GPU
/// bundle's copy leaves out; there this test found none (H200,
/// 2026-11-30).
fn first_scans_only(
    root: &std::path::Path,
    dir: &std::path::Path,
) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for (name, _, data) in files(root, PROGRESSIVE, false) {
        if !name.starts_with("photos/") || out.len() == 8 {
            continue;
        }
        let Some((scan, _)) = scans::first_scan(&data) else {
            continue;
        };
        let end = scan.end;
        let mut cut = data[..end].to_vec();
        cut.extend_from_slice(&[0xFF, 0xD9]);
        let path = dir.join(format!("{}.jpg", out.len()));
        std::fs::write(&path, &cut).unwrap();
        out.push((path, cut));
    }
    out
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

/// The photos of `photos/imagenet-size` whose coding process (the
/// manifest's fifth column: baseline, progressive, ...) `keep` takes.
fn imagenet_size(root: &std::path::Path, keep: impl Fn(&str) -> bool) -> Vec<std::path::PathBuf> {
    let manifest = std::fs::read_to_string(root.join("MANIFEST.tsv")).unwrap();
    manifest
        .lines()
        .map(|row| row.split('\t').collect::<Vec<_>>())
        .filter(|f| f.len() > 4 && f[0].starts_with("photos/imagenet-size/") && keep(f[4]))
        .map(|f| root.join(f[0]))
        .collect()
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
        for path in imagenet_size(&root, |c| c != "progressive") {
            let label = samples.len() as u32 % 7;
            samples.push(Sample { path, label });
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
            .batches_in_flight(3)
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
        // (3 here), unless the environment says otherwise.
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
