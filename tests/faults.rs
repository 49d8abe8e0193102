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
