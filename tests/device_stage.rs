//! The device stage (decode on CPU threads, stage crops, one augment launch
//! per view per batch) against the CPU backend, which is the specification.
//! One test body, two instances, like candle's `test_device!`:
//!
//! * `emu_*` (feature `kernel-emu`): `Device::Emulated`, the kernel source
//!   compiled for the host driven by the real staging code; batches must
//!   equal the CPU backend's **bit for bit**.
//! * `gpu_*`: `Device::Cuda(0)`; element-wise within u8 +-1, f16/bf16 one
//!   unit in the last place, f32 1e-4 (`common::tolerance`). Without a GPU
//!   they show as ignored (with the reason) in the summary; with
//!   `GPUFEED_REQUIRE_GPU=1` they fail instead.

mod common;

use common::Outcome;
use common::tolerance::close;

use gpufeed::{
    DType, Device, Layout, Pipeline, PipelineBuilder, Source, Tensor, Transform,
    augment::Normalize, augment::View,
};

common::tests!(
    cpu_prefetch_runs_ahead,
    #[cfg(feature = "kernel-emu")]
    emu_rrc_f32,
    gpu_rrc_f32,
    #[cfg(feature = "kernel-emu")]
    emu_dtypes_layouts_antialias,
    gpu_dtypes_layouts_antialias,
    #[cfg(feature = "kernel-emu")]
    emu_multi_view,
    gpu_multi_view,
    #[cfg(feature = "kernel-emu")]
    emu_small_staging,
    gpu_small_staging,
    #[cfg(feature = "kernel-emu")]
    emu_photometric_ops,
    gpu_photometric_ops,
    #[cfg(feature = "kernel-emu")]
    emu_mixup_and_cutmix,
    gpu_mixup_and_cutmix,
    #[cfg(feature = "kernel-emu")]
    emu_corrupt_files_are_skipped_alike,
    gpu_corrupt_files_are_skipped_alike,
    #[cfg(feature = "kernel-emu")]
    emu_batches_in_flight_change_nothing,
    #[cfg(feature = "kernel-emu")]
    emu_slots_are_fixed,
    gpu_slots_are_fixed,
    #[cfg(feature = "kernel-emu")]
    emu_prefetch_runs_ahead,
    gpu_prefetch_runs_ahead,
    #[cfg(feature = "kernel-emu")]
    emu_abandoned_epochs_return_their_slots,
    gpu_abandoned_epochs_return_their_slots,
    gpu_nvjpeg_route_matches_the_cpu_backend,
    gpu_engine_context_changes_no_pixel,
    #[cfg(feature = "kernel-emu")]
    emu_engine_reads_page_locked_blocks,
    gpu_engine_reads_page_locked_blocks,
    gpu_decoder_memory_is_counted_and_bounded,
    #[cfg(feature = "kernel-emu")]
    emu_trace_shows_the_device_stage,
    gpu_trace_has_gpu_spans,
    pipeline_and_batch_are_send,
);

/// Where the device instance runs, and how it decodes.
#[derive(Clone, Copy)]
struct Target {
    device: Device,
    exact: bool,
    /// nvJPEG route (the emulated device decodes it with the CPU decoder
    /// into its arena; bit-exact). On a real GPU nvJPEG's colour conversion
    /// differs from the CPU decoder's, so GPU instances compare the CPU
    /// decode route and tests/nvjpeg_decode.rs checks nvJPEG by PSNR.
    gpu_decode: bool,
}

/// CUDA device 0, comparing the CPU decode route.
fn gpu() -> Result<Target, common::NotRun> {
    common::need_gpu()?;
    Ok(Target {
        device: Device::Cuda(0),
        exact: false,
        gpu_decode: false,
    })
}

fn base(source: Source, device: Device) -> PipelineBuilder {
    let b = Pipeline::builder()
        .source(source)
        .device(device)
        .batch_size(5)
        .workers(2)
        .output_size(32, 48);
    // The emulated engine and workers decode with the CPU backend's own
    // decoder, so these tests compare with it bit for bit; the scan
    // kernels, the default route since session 52, decode as
    // libjpeg-turbo does and are compared with it in
    // tests/kernel_routes.rs. On a GPU these tests take the default.
    #[cfg(feature = "kernel-emu")]
    if device == Device::Emulated {
        return b.sequential_kernels(false);
    }
    b
}

/// Run `epochs` on the CPU backend and on `target` with the same settings;
/// every batch must hold the same samples, labels, skips and images.
fn same_as_cpu(
    target: Target,
    source: Source,
    f: impl Fn(PipelineBuilder) -> PipelineBuilder,
) -> gpufeed::pipeline::Stats {
    let mut cpu = f(base(source.clone(), Device::Cpu)).build().unwrap();
    // Half the nvJPEG route to the (emulated) engine's batches on the
    // batch thread, half begun on the workers: both halves run.
    let dev = base(source, target.device)
        .gpu_decode(target.gpu_decode)
        .hardware_decode_share(0.5);
    let mut dev = f(dev).build().unwrap();
    assert_ne!(dev.backend(), "cpu");
    let stream = dev.cuda_context().map(|c| c.default_stream());
    common::each_batch_as_cpu(&mut cpu, &mut dev, 2, |g, w, what| {
        assert_eq!(g.views().len(), w.views().len());
        for (v, (gt, wt)) in g.views().iter().zip(w.views()).enumerate() {
            let host = gt.to_host().unwrap();
            close(&host, wt, target.exact, &format!("{what} view {v}"));
        }
        if g.images().is_cuda() {
            assert!(g.event().is_some(), "{what}: a CUDA batch has an event");
            let stream = stream.as_ref().unwrap();
            let labels = stream.clone_dtoh(&g.labels_cuda().unwrap()).unwrap();
            assert_eq!(labels, g.labels(), "{what}: device labels");
            if let Some(soft) = g.soft_labels_cuda() {
                let soft = stream.clone_dtoh(&soft).unwrap();
                assert_eq!(
                    Some(&soft[..]),
                    g.soft_labels(),
                    "{what}: device soft labels"
                );
            }
        }
    });
    dev.stats()
}

fn sample() -> Source {
    Source::image_folder(common::sample_dir()).unwrap()
}

fn rrc_f32(t: Target) {
    let s = same_as_cpu(t, sample(), |b| b);
    let gpu_decoded = s.decoded_hardware + s.decoded_cuda + s.decoded_cpu_fallback;
    // Every sample photo is 8-bit baseline without EXIF rotation.
    assert_eq!(
        gpu_decoded,
        if t.gpu_decode { s.samples } else { 0 },
        "{s:?}"
    );
    assert!(s.decoded_cuda_batch_thread <= s.decoded_cuda, "{s:?}");
    if t.gpu_decode && t.device != Device::Cuda(0) {
        // The emulated device counts what the workers began as CUDA and
        // what its engine lanes decoded as hardware: both halves ran.
        assert!(s.decoded_cuda > 0 && s.decoded_hardware > 0, "{s:?}");
    }
}

fn dtypes_layouts_antialias(t: Target) {
    for (dtype, layout, aa) in [
        (DType::U8, Layout::Nchw, false),
        (DType::F16, Layout::Nhwc, true),
        (DType::BF16, Layout::Nchw, true),
        (DType::F32, Layout::Nhwc, false),
    ] {
        same_as_cpu(t, sample(), |b| {
            let norm = (dtype != DType::U8).then_some(Normalize::IMAGENET);
            b.dtype(dtype)
                .layout(layout)
                .antialias(aa)
                .normalize(norm)
                .flip_v(0.5)
        });
    }
}

fn multi_view(t: Target) {
    same_as_cpu(t, sample(), |b| {
        b.views(vec![
            View {
                height: 24,
                width: 24,
                transform: Transform::RANDOM_RESIZED_CROP,
                flip_h: 0.5,
                flip_v: 0.0,
                count: 2,
                photo: Default::default(),
            },
            View {
                height: 16,
                width: 20,
                transform: Transform::CenterCrop { resize: 18 },
                flip_h: 0.0,
                flip_v: 0.0,
                count: 1,
                photo: Default::default(),
            },
        ])
        .dtype(DType::F16)
    });
}

/// Every photometric op on (issue 19), two views of different sizes, the
/// draws whose ops came out "off" on the fused path beside them. The
/// second run's staging caps the scratch (4 × 600 KB) at three 160 px
/// draws, so a batch runs in several rounds of resample + photometric
/// launches.
fn photometric_ops(t: Target) {
    use gpufeed::augment::{ColorJitter, EraseValue, GaussianBlur, RandomErasing};
    let views = |value: EraseValue, size: usize| {
        vec![
            View::new(size, size)
                .count(2)
                .color_jitter(ColorJitter::new(0.4, 0.4, 0.2, 0.1, 0.8))
                .grayscale(0.2)
                .blur(GaussianBlur::new(9, (0.1, 2.0), 0.5))
                .solarize(0.5, 0.3),
            View::new(16, 20)
                .count(3)
                .transform(Transform::CenterCrop { resize: 18 })
                .color_jitter(ColorJitter::new(0.8, 0.8, 0.8, 0.5, 1.0))
                .blur(GaussianBlur::new(5, (0.5, 1.5), 1.0))
                .erasing(RandomErasing {
                    p: 0.7,
                    value,
                    ..RandomErasing::default()
                }),
        ]
    };
    same_as_cpu(t, sample(), |b| {
        b.views(views(EraseValue::Random, 24))
            .dtype(DType::F16)
            .normalize(Some(Normalize::IMAGENET))
    });
    let s = same_as_cpu(t, sample(), |b| {
        b.views(views(EraseValue::Constant(7.0), 160))
            .dtype(DType::U8)
            .layout(Layout::Nhwc)
            .normalize(None)
            .staging_bytes(600_000)
    });
    // Per batch: 5 fused launches at most (both views, and staging
    // flushes), then rounds of two per view.
    assert!(s.launches > 8 * s.batches, "{s:?}");
}

/// Mixup and cutmix over the finished batch (issue 19): the kernel against
/// the CPU backend, with the last partial batch odd-sized (26 samples in
/// batches of 5: its middle sample mixes with itself), in two dtypes and
/// layouts, and with the host-augmented route's uploads mixed too.
fn mixup_and_cutmix(t: Target) {
    let m = gpufeed::augment::Mixup::deit(4);
    let s = same_as_cpu(t, sample(), |b| {
        b.mixup(m)
            .dtype(DType::BF16)
            .normalize(Some(Normalize::IMAGENET))
    });
    assert_eq!(s.host_augmented, 0);
    same_as_cpu(t, sample(), |b| {
        b.mixup(gpufeed::augment::Mixup {
            switch_prob: 0.8,
            ..m
        })
        .dtype(DType::U8)
        .layout(Layout::Nhwc)
        .normalize(None)
        .staging_bytes(200_000)
    });
}

/// A staging buffer that holds only a few crops: batches are launched in
/// several parts. One smaller than any crop: every sample takes the
/// CPU-augment-and-upload route. Neither may change a single element.
fn small_staging(t: Target) {
    let s = same_as_cpu(t, sample(), |b| b.staging_bytes(8 << 20));
    assert_eq!((s.launches, s.host_augmented), (s.batches, 0));
    // Crops of the ~500x333 sample photos are 20-500 KB. On the nvJPEG
    // route the decode arena (4 x the staging) holds a few whole images;
    // with one batch in flight a batch fills it and launches what it read
    // so far to free it (issue 16's arena cycle).
    let s = same_as_cpu(t, sample(), |b| {
        b.staging_bytes(600_000).batches_in_flight(1)
    });
    assert!(s.launches > s.batches, "{s:?}");
    let s = same_as_cpu(t, sample(), |b| b.staging_bytes(64));
    assert_eq!(s.host_augmented, s.samples, "{s:?}");
}

fn corrupt_files_are_skipped_alike(t: Target) {
    let (dir, _good, _bad) = common::corrupt_dataset();
    same_as_cpu(t, Source::image_folder(dir.path()).unwrap(), |b| b);
}

/// A JPEG whose header parses but whose data cannot decode (no Huffman
/// tables): it fails on the device stage's decode route, after its
/// sample took a place in the queue.
#[cfg(feature = "kernel-emu")]
fn without_huffman_tables(jpeg: &[u8]) -> Vec<u8> {
    let mut out = jpeg[..2].to_vec();
    let mut i = 2;
    while i + 4 <= jpeg.len() {
        let (marker, len) = (jpeg[i + 1], u16::from_be_bytes([jpeg[i + 2], jpeg[i + 3]]));
        if marker == 0xDA {
            out.extend_from_slice(&jpeg[i..]);
            break;
        }
        if marker != 0xC4 {
            out.extend_from_slice(&jpeg[i..i + 2 + len as usize]);
        }
        i += 2 + len as usize;
    }
    out
}

/// Issue 16, item 1: several batches decode at once, yet batches are the
/// CPU backend's whatever the number in flight, the engine's share, the
/// engine's call size (item 2: calls sent as a group fills) and the arena
/// size (a small one splits batches over several decode groups
/// and exhausts the arenas), with files that fail on the workers and
/// files that fail only at the decode route, in the middle of the queue.
/// Emulated device only: on a GPU nvJPEG's pixels are not the CPU
/// decoder's (tests/nvjpeg_decode.rs holds the route to itself across
/// batches in flight).
#[cfg(feature = "kernel-emu")]
fn emu_batches_in_flight_change_nothing() {
    let t = Target {
        device: Device::Emulated,
        exact: true,
        gpu_decode: true,
    };
    let (dir, good, _bad) = common::corrupt_dataset();
    let photo = std::fs::read(&good[0]).unwrap();
    let broken = without_huffman_tables(&photo);
    for (k, class) in ["cat", "dog", "food", "vehicle", "cat"].iter().enumerate() {
        std::fs::write(
            dir.path().join(class).join(format!("z-nodht-{k}.jpg")),
            &broken,
        )
        .unwrap();
    }
    let source = Source::image_folder(dir.path()).unwrap();
    for (in_flight, call) in [(1, 0), (2, 0), (5, 0), (1, 3), (2, 1), (5, 3)] {
        for share in [0.5, 1.0] {
            for staging in [None, Some(300_000)] {
                let s = same_as_cpu(t, source.clone(), |b| {
                    let b = b
                        .batches_in_flight(in_flight)
                        .engine_call_images(call)
                        .hardware_decode_share(share);
                    match staging {
                        Some(n) => b.staging_bytes(n),
                        None => b,
                    }
                });
                let failed: u64 = s.errors.iter().sum();
                let what = format!("{in_flight} in flight, calls of {call}, share {share}");
                assert!(failed >= 10, "{what}: {s:?}");
                assert!(s.decoded_hardware > 0, "{what}: {s:?}");
            }
        }
    }
}

/// The trainer may keep `prefetch + 1` batches; asking for one more while
/// holding them all is an error (waiting would deadlock), and dropping one
/// lets the epoch go on.
fn slots_are_fixed(t: Target) {
    let mut p = base(sample(), t.device)
        .gpu_decode(t.gpu_decode)
        .prefetch(1)
        .build()
        .unwrap();
    let mem = p.memory().pools();
    assert_eq!(mem.slots, 2);
    let mut it = p.epoch(0);
    let a = it.next().unwrap().unwrap();
    let b = it.next().unwrap().unwrap();
    let err = it.next().unwrap().unwrap_err();
    assert!(
        matches!(err, gpufeed::Error::SlotsHeld { slots: 2 }),
        "{err}"
    );
    drop((a, b));
    drop(it);
    let n: usize = p.epoch(1).map(|b| b.unwrap().len()).sum();
    assert_eq!(n, 28);
    assert_eq!(p.memory().pools(), mem, "pools never grow");
}

/// Abandoning epochs mid-batch, again and again, gives every slot back.
fn abandoned_epochs_return_their_slots(t: Target) {
    let mut p = base(sample(), t.device)
        .gpu_decode(t.gpu_decode)
        .build()
        .unwrap();
    for epoch in 0..10 {
        let mut it = p.epoch(epoch);
        drop(it.next().unwrap().unwrap());
        drop(it);
    }
    let n: usize = p.epoch(10).map(|b| b.unwrap().len()).sum();
    assert_eq!(n, 28);
}

/// Issue 5, item 4: batches are made ahead of the trainer. While it holds
/// the first batch, the batch thread goes on until `prefetch` more wait
/// (their work enqueued), and the queue never holds more. The deadline is a
/// hang watchdog, not a speed bound.
fn prefetch_runs_ahead(t: Target) {
    let prefetch = 3;
    let mut p = base(sample(), t.device)
        .gpu_decode(t.gpu_decode)
        .batch_size(4)
        .prefetch(prefetch)
        .build()
        .unwrap();
    let mut it = p.epoch(0);
    let first = it.next().unwrap().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while it.ready() < prefetch {
        assert!(
            std::time::Instant::now() < deadline,
            "{} batches made ahead",
            it.ready()
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    assert_eq!(it.ready(), prefetch);
    let mut n = first.len();
    drop(first);
    for b in it.by_ref() {
        n += b.unwrap().len();
    }
    assert_eq!((n, it.ready()), (28, 0));
}

fn cpu_prefetch_runs_ahead() {
    prefetch_runs_ahead(Target {
        device: Device::Cpu,
        exact: true,
        gpu_decode: false,
    });
}

macro_rules! device_test {
    ($body:ident, $emu:ident, $gpu:ident) => {
        #[cfg(feature = "kernel-emu")]
        fn $emu() {
            for gpu_decode in [false, true] {
                $body(Target {
                    device: Device::Emulated,
                    exact: true,
                    gpu_decode,
                });
            }
        }

        fn $gpu() -> Outcome {
            $body(gpu()?);
            Ok(())
        }
    };
}

device_test!(rrc_f32, emu_rrc_f32, gpu_rrc_f32);
device_test!(
    dtypes_layouts_antialias,
    emu_dtypes_layouts_antialias,
    gpu_dtypes_layouts_antialias
);
device_test!(multi_view, emu_multi_view, gpu_multi_view);
device_test!(small_staging, emu_small_staging, gpu_small_staging);
device_test!(photometric_ops, emu_photometric_ops, gpu_photometric_ops);
device_test!(mixup_and_cutmix, emu_mixup_and_cutmix, gpu_mixup_and_cutmix);
device_test!(
    corrupt_files_are_skipped_alike,
    emu_corrupt_files_are_skipped_alike,
    gpu_corrupt_files_are_skipped_alike
);
device_test!(slots_are_fixed, emu_slots_are_fixed, gpu_slots_are_fixed);
device_test!(
    prefetch_runs_ahead,
    emu_prefetch_runs_ahead,
    gpu_prefetch_runs_ahead
);
device_test!(
    abandoned_epochs_return_their_slots,
    emu_abandoned_epochs_return_their_slots,
    gpu_abandoned_epochs_return_their_slots
);

/// The nvJPEG route end to end on a GPU (hardware engine with crop-region
/// decode where the GPU has one, CUDA beside it), against the CPU
/// backend: same samples, labels and order, and per batch a PSNR of at
/// least 30 dB over u8 outputs. nvJPEG's pixels differ from the CPU
/// decoder's (tests/nvjpeg_decode.rs holds them to 35 dB per image), and a
/// crop can sit where they differ most; a staging, arena or stream-order
/// bug shows as garbage, far below this.
fn gpu_nvjpeg_route_matches_the_cpu_backend() -> Outcome {
    gpu()?;
    // Half to the engine (the default sends all it takes), so that both
    // nvJPEG routes and their overlap run.
    let (dev, _) = nvjpeg_as_cpu(0.5, 2);
    let s = dev.stats();
    assert!(
        s.decoded_hardware + s.decoded_cuda > 0,
        "nvJPEG decoded nothing"
    );
    Ok(())
}

/// The engine lanes in a CUDA context of their own (the hidden
/// `engine_context`, issue 16 item 3) deliver the same bytes as on the
/// pipeline's context: a relay slab placed or copied wrongly, or a copy
/// the batch does not wait for, shows as a differing byte. Share 0.5, so
/// that the scan kernels and the workers' CUDA route run beside the
/// engine, as in the mix the setting is for.
fn gpu_engine_context_changes_no_pixel() -> Outcome {
    gpu()?;
    let f = |own: bool| {
        base(sample(), Device::Cuda(0))
            .dtype(DType::U8)
            .normalize(None)
            .layout(Layout::Nhwc)
            .batch_size(8)
            .gpu_decode(true)
            .hardware_decode_share(0.5)
            .engine_context(own)
            .build()
            .unwrap()
    };
    let (mut shared, mut own) = (f(false), f(true));
    common::each_batch_as_cpu(&mut shared, &mut own, 2, |g, w, what| {
        let (g, w) = (g.images().to_host().unwrap(), w.images().to_host().unwrap());
        assert!(g.as_u8().unwrap() == w.as_u8().unwrap(), "{what}: pixels");
    });
    let (s, o) = (shared.stats(), own.stats());
    println!(
        "engine in its own context: decoded by hardware {}, CUDA {}, kernels {}, CPU fallback {}; \
         nvJPEG device bytes {} (shared context: {})",
        o.decoded_hardware,
        o.decoded_cuda,
        o.decoded_progressive,
        o.decoded_cpu_fallback,
        own.memory().decoder_device_bytes,
        shared.memory().decoder_device_bytes
    );
    if s.decoded_hardware == 0 {
        return Err(common::not_run(
            "GPUFEED_REQUIRE_HW_JPEG",
            "this GPU has no hardware JPEG engine",
        ));
    }
    // The same images on the engine: its lanes were made and decoded in
    // their own context, refusing what they refuse in the shared one.
    assert_eq!(o.decoded_hardware, s.decoded_hardware, "{o:?}\n{s:?}");
    Ok(())
}

/// `epochs` of the sample on the nvJPEG route at engine share `share`,
/// each batch within the PSNR of `gpu_nvjpeg_route_matches_the_cpu_backend`
/// of the CPU backend's; returns the pipeline and its read buffers'
/// page-locked bytes after each epoch.
fn nvjpeg_as_cpu(share: f32, epochs: u64) -> (Pipeline, Vec<u64>) {
    let f = |b: PipelineBuilder| {
        b.dtype(DType::U8)
            .normalize(None)
            .layout(Layout::Nhwc)
            .batch_size(8)
    };
    let mut cpu = f(base(sample(), Device::Cpu)).build().unwrap();
    let mut dev = f(base(sample(), Device::Cuda(0)))
        .gpu_decode(true)
        .hardware_decode_share(share)
        .build()
        .unwrap();
    let (mut worst, mut pinned) = (f64::INFINITY, Vec::new());
    for epoch in 0..epochs {
        let want: Vec<_> = cpu.epoch(epoch).map(Result::unwrap).collect();
        let mut n = 0;
        for (g, w) in dev.epoch(epoch).zip(&want) {
            let g = g.unwrap();
            n += 1;
            assert_eq!((g.keys(), g.labels()), (w.keys(), w.labels()));
            let got = g.images().to_host().unwrap();
            let psnr =
                common::tolerance::psnr_u8(got.as_u8().unwrap(), w.images().as_u8().unwrap());
            worst = worst.min(psnr);
            assert!(psnr >= 30.0, "epoch {epoch}: batch PSNR {psnr:.1} dB");
        }
        assert_eq!(n, want.len(), "epoch {epoch}: batch count");
        pinned.push(dev.memory().read_buffer_pinned_bytes);
    }
    let s = dev.stats();
    println!(
        "{}, share {share}: worst batch PSNR {worst:.1} dB; decoded by hardware {}, CUDA {}, \
         CPU fallback {}; page-locked read buffers after each epoch {pinned:?} B",
        dev.backend(),
        s.decoded_hardware,
        s.decoded_cuda,
        s.decoded_cpu_fallback
    );
    (dev, pinned)
}

/// On the engine route the readers read into page-locked blocks (issue
/// 16, item 4), made once 256 files were read (the tenth epoch of these
/// 28), and the engine decodes from them as from heap memory.
fn gpu_engine_reads_page_locked_blocks() -> Outcome {
    gpu()?;
    let (dev, pinned) = nvjpeg_as_cpu(1.0, 12);
    if dev.stats().decoded_hardware == 0 {
        assert!(pinned.iter().all(|&b| b == 0), "no engine, no blocks");
        return Err(common::NotRun(
            "this GPU has no hardware JPEG engine".into(),
        ));
    }
    assert_eq!(pinned[8], 0, "no blocks before the 256th file: {pinned:?}");
    assert!(pinned[9] > 0, "blocks from the 256th file: {pinned:?}");
    assert!(pinned[9..].iter().all(|&b| b == pinned[9]), "{pinned:?}");
    Ok(())
}

/// The emulated twin: bit for bit the CPU backend's batches before and
/// after the readers move to page-locked blocks, and with another reader
/// (`read_bytes`), which fills heap buffers, none.
#[cfg(feature = "kernel-emu")]
fn emu_engine_reads_page_locked_blocks() {
    for own_reader in [false, true] {
        let mut cpu = base(sample(), Device::Cpu).build().unwrap();
        let dev = base(sample(), Device::Emulated).hardware_decode_share(1.0);
        let mut dev = match own_reader {
            true => dev.read_bytes(gpufeed::reader::FileReader),
            false => dev,
        }
        .build()
        .unwrap();
        common::each_batch_as_cpu(&mut cpu, &mut dev, 12, |g, w, what| {
            close(&g.images().to_host().unwrap(), w.images(), true, what);
        });
        let m = dev.memory();
        assert!(dev.stats().decoded_hardware > 0);
        if own_reader {
            assert_eq!(m.read_buffer_pinned_bytes, 0, "{m:?}");
        } else {
            assert!(m.read_buffer_pinned_bytes > 0, "{m:?}");
            assert_eq!(m.read_buffer_bytes, m.read_buffer_pinned_bytes, "{m:?}");
        }
    }
}

/// nvJPEG's memory (issue 16, item 5): its allocations are counted in
/// `Pipeline::memory`, and a decoder-pool limit far below what the CUDA
/// route wants sends images to the CPU decoder instead, losing none: the
/// same keys and labels as the CPU backend, epoch after epoch.
fn gpu_decoder_memory_is_counted_and_bounded() -> Outcome {
    gpu()?;
    // nvJPEG's CUDA route, whatever `GPUFEED_SEQUENTIAL_GPU` says: the
    // scan kernels hold no decoder of the pool, so with them the limit
    // had nothing to refuse (H200, 2026-11-30).
    let f = |b: PipelineBuilder| {
        b.batch_size(8)
            .gpu_decode(true)
            .hardware_decode_share(0.0)
            .sequential_kernels(false)
            .progressive_kernels(false)
    };
    let mut cpu = f(base(sample(), Device::Cpu)).build().unwrap();
    let mut roomy = f(base(sample(), Device::Cuda(0))).build().unwrap();
    let n: usize = roomy.epoch(0).map(|b| b.unwrap().len()).sum();
    assert_eq!(n, 28);
    let m = roomy.memory();
    println!("default limit: {m:?}");
    assert!(
        m.decoder_pinned_bytes > 0 && m.decoder_device_bytes > 0,
        "nvJPEG's buffers are counted: {m:?}"
    );
    assert!(m.decoder_peak_bytes >= m.decoder_pinned_bytes + m.decoder_device_bytes);
    let mut tight = f(base(sample(), Device::Cuda(0)))
        .decoder_memory_limit(1 << 20)
        .build()
        .unwrap();
    for epoch in 0..3 {
        // Batch by batch: the CUDA backend has `prefetch + 1` slots, fewer
        // than an epoch's 4 batches, so collecting them all would hold
        // every slot (the pipeline says so with an error).
        let mut want = cpu.epoch(epoch).map(Result::unwrap);
        let mut batches = 0;
        for g in tight.epoch(epoch) {
            let (g, w) = (g.unwrap(), want.next().expect("as many batches"));
            assert_eq!((g.keys(), g.labels()), (w.keys(), w.labels()));
            batches += 1;
        }
        assert!(want.next().is_none(), "epoch {epoch}: {batches} batches");
    }
    let s = tight.stats();
    println!("1 MiB limit: {:?}; {s:?}", tight.memory());
    assert!(
        s.decoded_cpu_fallback > 0,
        "the limit refused nothing: {s:?}"
    );
    Ok(())
}

/// Trainers move pipelines and batches across threads (a loader thread, a
/// training thread); the CUDA types inside must not prevent it.
fn pipeline_and_batch_are_send() {
    fn send<T: Send>() {}
    send::<Pipeline>();
    send::<gpufeed::Batch>();
    send::<Tensor>();
}

/// The timeline of a device-stage pipeline has the batch thread's calls.
#[cfg(feature = "kernel-emu")]
fn emu_trace_shows_the_device_stage() {
    // One epoch's timeline with the engine's share and its call size.
    let timeline = |share: f32, call: usize| {
        let mut p = base(sample(), Device::Emulated)
            .gpu_decode(true)
            .hardware_decode_share(share)
            .engine_call_images(call)
            .trace(true)
            .build()
            .unwrap();
        let n: usize = p.epoch(0).map(|b| b.unwrap().len()).sum();
        assert_eq!(n, 28);
        // The engine's time is counted too (bench names it as the limit
        // when it is the busiest stage).
        let engine = p.stats().engine_busy;
        assert!(engine > std::time::Duration::ZERO, "engine time {engine:?}");
        assert_eq!(
            p.monitor().stats().map(|s| s.engine_busy >= engine),
            Some(true)
        );
        p.trace_json().unwrap()
    };
    let json = timeline(0.5, 0);
    for span in [
        "device: put JPEG",
        "device: collect decodes",
        "engine: decode call",
        "device: copies and launches",
        "nvJPEG host phase",
        "trainer holds batch",
        "copies and kernels",
        // What `build()` spent its time on, on the "build" track.
        "device: context, augment kernels",
        "device: arenas and slots",
    ] {
        assert!(
            json.contains(&format!("\"name\":\"{span}\"")),
            "{span} missing"
        );
    }
    assert!(json.contains("gpufeed-batch"), "the batch thread's track");
    assert!(json.contains("\"name\":\"build\""), "the build's track");
    assert!(
        json.contains("gpufeed-emu-engine-"),
        "an engine lane's track"
    );
    // The device's own track (GPU spans from CUDA events on a GPU; the
    // emulated kernels' host time here).
    assert!(
        json.contains("\"name\":\"GPU: stage stream (emulated)\""),
        "the device's track"
    );
    // Engine calls of one image each, sent as the batches fill (issue 16,
    // item 2), against one call per batch of 5.
    let calls = |n: usize| {
        let json = timeline(1.0, n);
        json.matches("\"name\":\"engine: decode call\"").count()
    };
    let (whole, single) = (calls(0), calls(1));
    assert!(whole <= 6, "{whole} calls for 6 batches");
    // Samples the engine would not take (progressive) go to the workers.
    assert!(single >= 20, "{single} calls: one per engine image");
}

/// On a GPU the timeline has the device's own tracks, timed with CUDA
/// events and placed on the host's clock (issue 16, item 6): each flush's
/// copies and kernels on the stage stream, and each engine call on its
/// lane's stream where the GPU has an engine. Every GPU span must lie
/// inside the run, as host spans do: a wrong tie between the clocks puts
/// them seconds off.
fn gpu_trace_has_gpu_spans() -> Outcome {
    gpu()?;
    let mut p = base(sample(), Device::Cuda(0))
        .gpu_decode(true)
        .hardware_decode_share(0.5)
        .trace(true)
        .build()
        .unwrap();
    for epoch in 0..2 {
        let n: usize = p.epoch(epoch).map(|b| b.unwrap().len()).sum();
        assert_eq!(n, 28);
    }
    let v: serde_json::Value = serde_json::from_str(&p.trace_json().unwrap()).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    let track = |name: &str| {
        events.iter().find_map(|e| {
            (e["ph"] == "M" && e["args"]["name"] == name).then(|| e["tid"].as_u64().unwrap())
        })
    };
    let spans = |tid: u64| -> Vec<(f64, f64)> {
        events
            .iter()
            .filter(|e| e["ph"] == "X" && e["tid"].as_u64() == Some(tid))
            .map(|e| (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap()))
            .collect()
    };
    let end = events
        .iter()
        .filter(|e| e["ph"] == "X")
        .map(|e| e["ts"].as_f64().unwrap() + e["dur"].as_f64().unwrap())
        .fold(0.0, f64::max);
    let stage = track("GPU: stage stream").expect("the stage stream's track");
    let mut gpu = spans(stage);
    assert!(!gpu.is_empty(), "no flush spans");
    if p.stats().decoded_hardware > 0 {
        let lane = track("GPU: engine lane 0").expect("an engine lane's track");
        gpu.extend(spans(lane));
    }
    for (ts, dur) in gpu {
        assert!(
            ts > 0.0 && dur >= 0.0 && ts + dur <= end,
            "{ts} + {dur} vs {end}"
        );
    }
    Ok(())
}
