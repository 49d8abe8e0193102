//! Fault injection (issue 7): I/O errors, short reads, slow storage, files
//! that disappear after listing, and pools too large to allocate. Each must
//! end as delivered samples plus typed, named errors; nothing panics,
//! hangs or loses a good sample.

mod common;

use common::Outcome;

common::tests!(
    eio_fails_only_the_files_it_hits,
    short_reads_end_typed,
    slow_storage_keeps_the_window_and_reports_waits,
    files_deleted_after_listing_are_named,
    unreadable_files_are_named,
    #[cfg(feature = "kernel-emu")]
    staging_too_large_to_allocate_is_an_error,
    absurd_staging_is_refused_by_build,
    #[cfg(feature = "kernel-emu")]
    emu_lane_panics_lose_no_file,
    gpu_lane_panics_lose_no_file,
);

use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use gpufeed::{
    Device, Error, Pipeline, PipelineBuilder, Source, error::ErrorKind, error::SampleError,
    pipeline::OnError, reader::FileReader, reader::ReadBytes,
};

fn builder(source: Source) -> PipelineBuilder {
    Pipeline::builder()
        .source(source)
        .device(Device::Cpu)
        .batch_size(4)
        .output_size(16, 16)
        .on_error(OnError::Skip)
}

/// Run one epoch: (delivered keys, skipped (path, kind)). A contained panic
/// fails the test: these inputs must end as ordinary typed errors.
fn run(p: &mut Pipeline) -> (Vec<PathBuf>, Vec<(PathBuf, ErrorKind)>) {
    let (mut delivered, mut skipped) = (Vec::new(), Vec::new());
    let mut note = |e: &Error| {
        let Error::Sample { path, source } = e else {
            panic!("not a sample error: {e}")
        };
        assert!(
            !matches!(source, SampleError::Panic(_)),
            "{}: {source}",
            path.display()
        );
        skipped.push((path.clone(), source.kind()));
    };
    for batch in p.epoch(0) {
        match batch {
            Ok(b) => {
                delivered.extend(b.keys().iter().cloned());
                b.skipped().iter().for_each(&mut note);
            }
            // An epoch in which nothing decodes ends with the list instead
            // of a batch.
            Err(Error::NoSamples { skipped, .. }) => skipped.iter().for_each(&mut note),
            Err(e) => panic!("{e}"),
        }
    }
    delivered.sort();
    skipped.sort_by(|a, b| a.0.cmp(&b.0));
    (delivered, skipped)
}

/// Fails reads of every file whose path contains `needle` with EIO.
#[derive(Debug)]
struct Eio(&'static str);

impl ReadBytes for Eio {
    fn read(&self, path: &Path, buf: &mut Vec<u8>, max: u64) -> Result<(), SampleError> {
        if path.to_string_lossy().contains(self.0) {
            return Err(SampleError::Read(io::Error::from_raw_os_error(5)));
        }
        FileReader.read(path, buf, max)
    }
}

fn eio_fails_only_the_files_it_hits() {
    let source = Source::image_folder(common::sample_dir()).unwrap();
    let all: Vec<PathBuf> = source.samples().iter().map(|s| s.path.clone()).collect();
    let mut p = builder(source).read_bytes(Eio("/dog/")).build().unwrap();
    let (delivered, skipped) = run(&mut p);
    let hit: Vec<_> = all
        .iter()
        .filter(|p| p.to_string_lossy().contains("/dog/"))
        .cloned()
        .collect();
    assert!(!hit.is_empty());
    let mut want: Vec<_> = all.iter().filter(|p| !hit.contains(p)).cloned().collect();
    want.sort();
    assert_eq!(delivered, want, "every good sample, once");
    let named: Vec<_> = skipped.iter().map(|(p, _)| p.clone()).collect();
    let mut hit_sorted = hit.clone();
    hit_sorted.sort();
    assert_eq!(named, hit_sorted, "every failed file named");
    assert!(skipped.iter().all(|(_, k)| *k == ErrorKind::Read));
    assert!(
        p.epoch(1)
            .next()
            .unwrap()
            .unwrap()
            .skipped()
            .iter()
            .all(|e| e.to_string().contains("Input/output error")),
        "the OS error text reaches the user"
    );
}

/// Returns only the first `keep` of every file's bytes, as a file truncated
/// by a failing disk or a short network read would.
#[derive(Debug)]
struct Short(usize);

impl ReadBytes for Short {
    fn read(&self, path: &Path, buf: &mut Vec<u8>, max: u64) -> Result<(), SampleError> {
        FileReader.read(path, buf, max)?;
        buf.truncate(self.0.min(buf.len()));
        Ok(())
    }
}

fn short_reads_end_typed() {
    for keep in [0, 1, 2, 200, 2_000, 20_000] {
        let source = Source::image_folder(common::sample_dir()).unwrap();
        let n = source.len();
        let mut p = builder(source).read_bytes(Short(keep)).build().unwrap();
        let (delivered, skipped) = run(&mut p);
        assert_eq!(
            delivered.len() + skipped.len(),
            n,
            "keep {keep}: all accounted"
        );
        if keep < 200 {
            assert!(
                delivered.is_empty(),
                "keep {keep}: nothing decodes from a stub"
            );
        }
    }
}

/// Every read takes `delay`; counts reads started so the test can check
/// that the pipeline reads no further ahead than its prefetch window.
#[derive(Debug)]
struct Slow {
    delay: Duration,
    started: Arc<AtomicUsize>,
}

impl ReadBytes for Slow {
    fn read(&self, path: &Path, buf: &mut Vec<u8>, max: u64) -> Result<(), SampleError> {
        self.started.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(self.delay);
        FileReader.read(path, buf, max)
    }
}

fn slow_storage_keeps_the_window_and_reports_waits() {
    let started = Arc::new(AtomicUsize::new(0));
    let source = Source::image_folder(common::sample_dir()).unwrap();
    let n = source.len();
    let (batch, prefetch) = (4, 2);
    let mut p = builder(source)
        .batch_size(batch)
        .prefetch(prefetch)
        .readers(2)
        .read_bytes(Slow {
            delay: Duration::from_millis(20),
            started: started.clone(),
        })
        .build()
        .unwrap();
    let mut consumed = 0;
    for b in p.epoch(0) {
        let b = b.unwrap();
        consumed += b.len();
        // Reads started but not yet handed out never exceed the window
        // (prefetch batches) plus the carried sample.
        let ahead = started.load(Ordering::SeqCst) - consumed;
        assert!(
            ahead <= prefetch * batch + 1,
            "{ahead} reads ahead of the consumer, window {}",
            prefetch * batch
        );
    }
    assert_eq!(consumed, n);
    let stats = p.stats();
    assert!(
        stats.wait > Duration::ZERO,
        "the consumer's waits are reported"
    );
    assert!(stats.read >= Duration::from_millis(20) * n as u32);
}

fn files_deleted_after_listing_are_named() {
    let (dir, good, _bad) = common::corrupt_dataset();
    let source = Source::image_folder(dir.path()).unwrap();
    let gone: Vec<PathBuf> = good.iter().step_by(7).cloned().collect();
    for g in &gone {
        std::fs::remove_file(g).unwrap();
    }
    let mut p = builder(source).build().unwrap();
    let (delivered, skipped) = run(&mut p);
    let delivered: HashSet<_> = delivered.into_iter().collect();
    for g in &good {
        assert_eq!(delivered.contains(g), !gone.contains(g), "{}", g.display());
    }
    for g in &gone {
        assert!(
            skipped.contains(&(g.clone(), ErrorKind::Read)),
            "{} named as a read error",
            g.display()
        );
    }
}

fn unreadable_files_are_named() -> Outcome {
    use std::os::unix::fs::PermissionsExt;
    let (dir, good, _bad) = common::corrupt_dataset();
    let locked = &good[3];
    std::fs::set_permissions(locked, std::fs::Permissions::from_mode(0o000)).unwrap();
    if std::fs::read(locked).is_ok() {
        return Err(common::NotRun(
            "running as root, which file modes do not stop".into(),
        ));
    }
    let mut p = builder(Source::image_folder(dir.path()).unwrap())
        .build()
        .unwrap();
    let (delivered, skipped) = run(&mut p);
    assert!(!delivered.contains(locked));
    assert!(skipped.contains(&(locked.clone(), ErrorKind::Read)));
    Ok(())
}

/// Pools that cannot be allocated are an error from `build()`, not an abort.
#[cfg(feature = "kernel-emu")]
fn staging_too_large_to_allocate_is_an_error() {
    let err = builder(Source::image_folder(common::sample_dir()).unwrap())
        .device(Device::Emulated)
        .staging_bytes(1 << 40)
        .build()
        .unwrap_err();
    assert!(matches!(err, Error::Device(_)), "{err}");
    assert!(err.to_string().contains("allocate"), "{err}");
}

fn absurd_staging_is_refused_by_build() {
    let err = builder(Source::image_folder(common::sample_dir()).unwrap())
        .staging_bytes(usize::MAX)
        .build()
        .unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err}");
}

/// A decode lane that panics mid-call (issue 16's lanes; session 52's
/// lease lost 10 files a run to one): its call's files are decoded on the
/// other routes and the lane stops. This binary runs itself with
/// `GPUFEED_TEST_LANE_PANIC=1`, so that every lane panics in its first
/// call, once part of it is written: the default route (the scan kernels'
/// lanes) and the engine's. Every sample must come through, as the CPU
/// backend's: bit for bit on the emulated device, within the nvJPEG
/// route's PSNR on a GPU (tests/device_stage.rs).
fn lane_panics_lose_no_file(device: Device) {
    const FAULT: &str = "GPUFEED_TEST_LANE_PANIC";
    let name = match device {
        Device::Cuda(_) => "gpu_lane_panics_lose_no_file",
        _ => "emu_lane_panics_lose_no_file",
    };
    if std::env::var(FAULT).is_err() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([name, "--exact", "--test-threads=1", "--nocapture"])
            .env(FAULT, "1")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{text}");
        assert!(text.contains("1 passed"), "{text}");
        // The lanes said what became of their files.
        assert!(
            text.contains("stopped after a panic") && text.contains("go to the other routes"),
            "{text}"
        );
        return;
    }
    let exact = device != Device::Cuda(0);
    let f = |b: PipelineBuilder| {
        b.dtype(gpufeed::DType::U8)
            .normalize(None)
            .batch_size(5)
            .workers(2)
            .output_size(32, 48)
    };
    type Pin = fn(PipelineBuilder) -> PipelineBuilder;
    let routes: [(&str, Pin); 2] = [
        ("the default route", |b| b),
        ("the engine", |b| {
            b.sequential_kernels(false).hardware_decode_share(1.0)
        }),
    ];
    for (route, pin) in routes {
        let source = Source::image_folder(common::sample_dir()).unwrap();
        let mut cpu = f(builder(source.clone())).build().unwrap();
        let mut dev = pin(f(builder(source)).device(device).gpu_decode(true))
            .build()
            .unwrap();
        let worst = std::cell::Cell::new(f64::INFINITY);
        let check = |g: &gpufeed::Batch, w: &gpufeed::Batch, what: &str| {
            assert!(g.skipped().is_empty(), "{route}, {what}: {:?}", g.skipped());
            let got = g.images().to_host().unwrap();
            if exact {
                common::tolerance::close(&got, w.images(), true, &format!("{route}, {what}"));
                return;
            }
            let psnr =
                common::tolerance::psnr_u8(got.as_u8().unwrap(), w.images().as_u8().unwrap());
            worst.set(worst.get().min(psnr));
            assert!(psnr >= 30.0, "{route}, {what}: PSNR {psnr:.1} dB");
        };
        common::each_batch_as_cpu(&mut cpu, &mut dev, 2, check);
        let s = dev.stats();
        println!("{route}: worst batch PSNR {:.1} dB; {s:?}", worst.get());
        // A GPU without a hardware engine makes no engine lanes: there the
        // engine route has none to stop (its files take CUDA throughout).
        let engine =
            device != Device::Cuda(0) || gpufeed::decode::nvjpeg::hardware_decoder_info().is_ok();
        if route == "the default route" || engine {
            assert!(s.lanes_stopped >= 1, "{route}: {s:?}");
        }
        assert_eq!(s.errors.iter().sum::<u64>(), 0, "{route}: {s:?}");
        // No lane finished a call: neither the kernels nor the engine
        // decoded a file, the other routes decoded them all.
        assert_eq!(s.decoded_progressive, 0, "{route}: {s:?}");
        assert_eq!(s.decoded_hardware, 0, "{route}: {s:?}");
        assert!(
            s.decoded_cuda + s.decoded_cpu_fallback > 0,
            "{route}: {s:?}"
        );
        // Every lane stopped in those two epochs (a batch's call each).
        // From then on the workers keep the files on their own route
        // instead of sending them to lanes that hand them back to the
        // batch thread: in a third epoch, the workers' host phases
        // decode them (the emulated device counts the batch thread's
        // decodes as the CPU's, CUDA as `decoded_cuda_batch_thread`).
        common::each_batch_as_cpu_in(&mut cpu, &mut dev, 2..3, check);
        let t = dev.stats();
        let workers = |s: &gpufeed::pipeline::Stats| s.decoded_cuda - s.decoded_cuda_batch_thread;
        let (by_workers, samples) = (workers(&t) - workers(&s), t.samples - s.samples);
        println!("{route}, epoch 2: the workers decoded {by_workers} of {samples}; {t:?}");
        assert_eq!(t.decoded_progressive, 0, "{route}: {t:?}");
        assert_eq!(t.decoded_hardware, 0, "{route}: {t:?}");
        if exact {
            assert_eq!(by_workers, samples, "{route}: {t:?}");
            assert_eq!(
                t.decoded_cpu_fallback, s.decoded_cpu_fallback,
                "{route}: {t:?}"
            );
        } else {
            // On CUDA the batch thread also takes a file no worker decoder
            // was free for.
            assert!(by_workers > 0, "{route}: {t:?}");
        }
    }
}

#[cfg(feature = "kernel-emu")]
fn emu_lane_panics_lose_no_file() {
    lane_panics_lose_no_file(Device::Emulated);
}

fn gpu_lane_panics_lose_no_file() -> Outcome {
    common::need_gpu()?;
    lane_panics_lose_no_file(Device::Cuda(0));
    Ok(())
}
