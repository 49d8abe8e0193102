//! The automatic hardware-engine share (issue 16, items 3 and 4): how it
//! moves and what it must never change. `emu_*` run on the emulated device
//! (feature `kernel-emu`), whose engine lanes and CUDA route both decode
//! with the CPU decoder, so batches can be compared bit for bit; `gpu_*`
//! on CUDA device 0, shown as ignored without one (a failure under
//! `GPUFEED_REQUIRE_GPU=1`).

mod common;

use gpufeed::{Device, Pipeline, PipelineBuilder, Source};

common::tests!(
    #[cfg(feature = "kernel-emu")]
    emu_automatic_share_moves_and_changes_no_pixel,
    #[cfg(feature = "kernel-emu")]
    emu_a_slow_trainer_gets_the_engine,
    #[cfg(feature = "kernel-emu")]
    emu_automatic_share_prices_the_scan_kernels,
    gpu_a_slow_trainer_gets_the_engine,
);

/// 28 samples an epoch, 6 batches.
fn base(device: Device) -> PipelineBuilder {
    Pipeline::builder()
        .source(Source::image_folder(common::sample_dir()).unwrap())
        .device(device)
        .batch_size(5)
        .workers(2)
        .output_size(32, 48)
        .gpu_decode(true)
        // nvJPEG's CUDA route, priced by the workers' host phases; with
        // the scan kernels (the default route since session 52) see
        // `emu_automatic_share_prices_the_scan_kernels`.
        .sequential_kernels(false)
}

/// Issue 16, item 3: the automatic share, starting at 1, moves once it
/// has measured (toward the unmeasured CUDA route first) and, on the
/// emulated device, whose routes decode alike, changes no bit of any
/// batch over the epochs it moves in.
#[cfg(feature = "kernel-emu")]
fn emu_automatic_share_moves_and_changes_no_pixel() {
    let build = |device, auto| {
        base(device)
            .hardware_decode_share(1.0)
            .hardware_decode_share_auto(auto)
            .build()
            .unwrap()
    };
    let mut cpu = build(Device::Cpu, false);
    let mut fixed = build(Device::Emulated, false);
    let mut auto = build(Device::Emulated, true);
    // The share moves at most once per 64 tasks.
    for epoch in 0..8 {
        let want: Vec<_> = cpu.epoch(epoch).map(Result::unwrap).collect();
        for p in [&mut fixed, &mut auto] {
            // Compared as they come: the trainer may hold only a few.
            let mut n = 0;
            for (b, (g, w)) in p.epoch(epoch).zip(&want).enumerate() {
                let (g, what) = (g.unwrap(), format!("epoch {epoch} batch {b}"));
                assert_eq!(g.keys(), w.keys(), "{what}");
                let host = g.images().to_host().unwrap();
                assert!(
                    host.as_bytes().unwrap() == w.images().as_bytes().unwrap(),
                    "{what}: not bit-identical to the CPU backend"
                );
                n += 1;
            }
            assert_eq!(n, want.len(), "epoch {epoch}");
        }
    }
    let (f, a) = (fixed.stats(), auto.stats());
    let nvjpeg = |s: &gpufeed::pipeline::Stats| s.decoded_hardware + s.decoded_cuda;
    assert_eq!(nvjpeg(&f), nvjpeg(&a), "{f:?}\n{a:?}");
    assert!(a.decoded_hardware > 0, "{a:?}");
    // With share 1 fixed, only what the engine cannot take goes to CUDA.
    assert!(a.decoded_cuda > f.decoded_cuda, "{f:?}\n{a:?}");
}

/// With the scan kernels decoding the CUDA share (session 61: the share
/// prices them by their lanes' busy time per image), the share, started
/// at 1, first moves toward the unmeasured kernels and then steers
/// between the two: both decode, and no sample is lost or moved against
/// a fixed share's. Which images each route takes depends on timing, and
/// the kernels decode as libjpeg-turbo, the emulated engine as the CPU
/// decoder, so the pixels are not compared here (tests/kernel_routes.rs
/// compares each route's).
#[cfg(feature = "kernel-emu")]
fn emu_automatic_share_prices_the_scan_kernels() {
    let build = |auto| {
        base(Device::Emulated)
            .sequential_kernels(true)
            .hardware_decode_share(1.0)
            .hardware_decode_share_auto(auto)
            .build()
            .unwrap()
    };
    let (mut fixed, mut auto) = (build(false), build(true));
    // Keys and labels only: a batch held would hold its device slot.
    let seen = |p: &mut Pipeline, epoch| -> Vec<_> {
        p.epoch(epoch)
            .map(|b| {
                let b = b.unwrap();
                (b.keys().to_vec(), b.labels().to_vec())
            })
            .collect()
    };
    for epoch in 0..6 {
        assert_eq!(
            seen(&mut auto, epoch),
            seen(&mut fixed, epoch),
            "epoch {epoch}"
        );
    }
    let (f, a) = (fixed.stats(), auto.stats());
    assert_eq!(a.samples, f.samples, "{a:?}\n{f:?}");
    assert_eq!(f.decoded_progressive, 0, "a fixed share of 1: {f:?}");
    assert!(a.decoded_hardware > 0, "{a:?}");
    assert!(
        a.decoded_progressive > 0,
        "the kernels were measured: {a:?}"
    );
    assert!(a.progressive_busy > std::time::Duration::ZERO, "{a:?}");
}

#[cfg(feature = "kernel-emu")]
fn emu_a_slow_trainer_gets_the_engine() {
    a_slow_trainer_gets_the_engine(Device::Emulated);
}

fn gpu_a_slow_trainer_gets_the_engine() -> Result<(), common::NotRun> {
    common::need_gpu()?;
    a_slow_trainer_gets_the_engine(Device::Cuda(0));
    Ok(())
}

/// Issue 16, item 4: when the trainer sets the pace, the automatic share
/// leans to the engine as far as the engine keeps up, since every image
/// the CUDA route takes costs a worker its Huffman decoding
/// (`Costs::share`). Started at an even mix, with a trainer step of
/// 80 ms per batch of 5 (16 ms per image: several times what even the
/// emulated engine, decoding on a CPU core, takes), the share reaches 1
/// within a few moves, and the last epochs send CUDA only what a fixed
/// share of 1 sends it (what the engine refuses).
///
/// It depends on timing only through that margin: the engine would have
/// to take more than 0.8 × 16 ms per image for the share to stay below 1.
fn a_slow_trainer_gets_the_engine(device: Device) {
    let build = |share, auto| {
        base(device)
            .hardware_decode_share(share)
            .hardware_decode_share_auto(auto)
            .build()
            .unwrap()
    };
    let mut fixed = build(1.0, false);
    let mut auto = build(0.5, true);
    let step = std::time::Duration::from_millis(80);
    const EPOCHS: u64 = 10;
    // CUDA decodes per epoch, from the cumulative counts.
    let cuda = |p: &mut Pipeline, epoch, sleep: bool| {
        let before = p.stats().decoded_cuda;
        for b in p.epoch(epoch) {
            let b = b.unwrap();
            if sleep {
                std::thread::sleep(step);
            }
            drop(b);
        }
        p.stats().decoded_cuda - before
    };
    let mut auto_cuda = Vec::new();
    let mut fixed_cuda = Vec::new();
    for epoch in 0..EPOCHS {
        auto_cuda.push(cuda(&mut auto, epoch, true));
        fixed_cuda.push(cuda(&mut fixed, epoch, false));
    }
    let what = format!("CUDA decodes per epoch: auto {auto_cuda:?}, fixed 1 {fixed_cuda:?}");
    // It started mixed: the first epoch sent CUDA more than share 1 does.
    assert!(auto_cuda[0] > fixed_cuda[0], "{what}");
    // It ended on the engine.
    let last = EPOCHS as usize - 2..;
    assert_eq!(auto_cuda[last.clone()], fixed_cuda[last], "{what}");
    let (a, f) = (auto.stats(), fixed.stats());
    assert_eq!(a.samples, f.samples, "no sample lost: {a:?}\n{f:?}");
}
