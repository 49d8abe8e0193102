//! Every file of the shared corpus's `tricky/` and `fuzz/` folders either
//! decodes or yields a typed error, within a time limit, without a panic;
//! and the pipeline accounts for every one of them.

mod common;

use common::Outcome;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gpufeed::decode::{CpuBackend, CpuDecoder, Image};
use gpufeed::jpeg::{DEFAULT_MAX_PIXELS, parse_header};
use gpufeed::{Device, Pipeline, pipeline::OnError};

common::tests!(
    tricky_files_decode_or_fail_typed,
    fuzz_files_decode_or_fail_typed,
    photos_decode_or_fail_typed,
    whole_corpus_through_the_pipeline,
    gpu_whole_corpus_through_the_pipeline,
);

/// Per-file limit. Generous: the slowest file (6000x6000) takes well under a
/// second in an optimised build; this only catches hangs.
const LIMIT: Duration = Duration::from_secs(60);

fn all_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        // A trimmed corpus (scripts/gpu-bundle.sh --corpus) lacks some.
        eprintln!("corpus has no {}", dir.display());
        return;
    };
    let mut entries: Vec<_> = entries.map(|e| e.unwrap().path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            all_files(&p, out);
        } else {
            out.push(p);
        }
    }
}

/// The file a thread is decoding, and since when.
type Busy = Mutex<Option<(usize, Instant)>>;

#[derive(Debug, PartialEq)]
enum Verdict {
    Decoded,
    Error,
    Panic(String),
}

/// Decode every file on `threads` threads; a watchdog fails the test when a
/// file runs past `LIMIT`.
fn decode_all(files: &[PathBuf], backend: CpuBackend) -> Vec<Verdict> {
    let files = Arc::new(files.to_vec());
    let next = Arc::new(Mutex::new(0usize));
    let results = Arc::new(Mutex::new(
        (0..files.len()).map(|_| None).collect::<Vec<_>>(),
    ));
    let threads = 2;
    let busy: Arc<Vec<Busy>> = Arc::new((0..threads).map(|_| Mutex::new(None)).collect());
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (files, next, results, busy) =
                (files.clone(), next.clone(), results.clone(), busy.clone());
            std::thread::spawn(move || {
                let mut dec = CpuDecoder::with_backend(backend, true).unwrap();
                let mut img = Image::default();
                loop {
                    let i = {
                        let mut n = next.lock().unwrap();
                        *n += 1;
                        *n - 1
                    };
                    if i >= files.len() {
                        return;
                    }
                    *busy[t].lock().unwrap() = Some((i, Instant::now()));
                    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        let bytes = std::fs::read(&files[i]).expect("corpus file readable");
                        // As the pipeline: a PNG or WebP is an image
                        // whatever its name.
                        if gpufeed::decode::is_png_or_webp(&bytes) {
                            return gpufeed::decode::decode_png_or_webp(
                                &bytes,
                                DEFAULT_MAX_PIXELS,
                                &mut img,
                            );
                        }
                        parse_header(&bytes, DEFAULT_MAX_PIXELS)
                            .and_then(|h| dec.decode(&bytes, &h, &mut img))
                    }));
                    *busy[t].lock().unwrap() = None;
                    let o = match outcome {
                        Ok(Ok(())) => Verdict::Decoded,
                        Ok(Err(_)) => Verdict::Error,
                        Err(p) => Verdict::Panic(format!("{p:?}")),
                    };
                    results.lock().unwrap()[i] = Some(o);
                }
            })
        })
        .collect();
    while !handles.iter().all(|h| h.is_finished()) {
        std::thread::sleep(Duration::from_millis(50));
        for slot in busy.iter() {
            if let Some((i, since)) = *slot.lock().unwrap() {
                assert!(
                    since.elapsed() < LIMIT,
                    "{} still decoding after {LIMIT:?}",
                    files[i].display()
                );
            }
        }
    }
    for h in handles {
        h.join().unwrap();
    }
    let results = Arc::try_unwrap(results).unwrap().into_inner().unwrap();
    results
        .into_iter()
        .map(|o| o.expect("every file visited"))
        .collect()
}

fn check_folder(sub: &str) -> Outcome {
    let corpus = common::corpus()?;
    for backend in common::backends() {
        check_folder_with(&corpus, sub, backend);
    }
    Ok(())
}

fn check_folder_with(corpus: &Path, sub: &str, backend: CpuBackend) {
    let mut files = Vec::new();
    all_files(&corpus.join(sub), &mut files);
    assert!(!files.is_empty());
    let outcomes = decode_all(&files, backend);
    let decoded = outcomes.iter().filter(|o| **o == Verdict::Decoded).count();
    let errors = outcomes.iter().filter(|o| **o == Verdict::Error).count();
    let panics: Vec<String> = files
        .iter()
        .zip(&outcomes)
        .filter_map(|(f, o)| match o {
            Verdict::Panic(m) => Some(format!("{}: {m}", f.display())),
            _ => None,
        })
        .collect();
    println!(
        "{backend:?} {sub}: {} files: {decoded} decoded, {errors} typed errors, {} panics, 0 timeouts",
        files.len(),
        panics.len()
    );
    assert!(panics.is_empty(), "panics:\n{}", panics.join("\n"));

    // Through the pipeline: every file is delivered exactly once or skipped
    // with an error that names it.
    let mut pipeline = Pipeline::builder()
        .source(common::unlabelled(corpus, &files))
        .cpu_backend(backend)
        .batch_size(64)
        .output_size(32, 32)
        .device(Device::Cpu)
        .on_error(OnError::Skip)
        .build()
        .unwrap();
    let (mut delivered, mut skipped) = (Vec::new(), Vec::new());
    for batch in pipeline.epoch(0) {
        let batch = batch.unwrap();
        delivered.extend(batch.keys().iter().cloned());
        for e in batch.skipped() {
            match e {
                gpufeed::Error::Sample { path, .. } => skipped.push(path.clone()),
                other => panic!("unexpected error {other}"),
            }
        }
    }
    let stats = pipeline.stats();
    assert_eq!(delivered.len() as u64, stats.samples);
    assert_eq!(delivered.len() + stats.total_errors() as usize, files.len());
    assert_eq!(delivered.len(), decoded, "pipeline and direct decode agree");
    // Every failure rides on a batch (trailing ones on the last).
    assert_eq!(skipped.len(), errors);
    let mut all: Vec<PathBuf> = delivered.into_iter().chain(skipped).collect();
    all.sort();
    all.dedup();
    assert!(all.len() <= files.len());
}

fn tricky_files_decode_or_fail_typed() -> Outcome {
    check_folder("tricky")
}

fn fuzz_files_decode_or_fail_typed() -> Outcome {
    check_folder("fuzz")
}

fn photos_decode_or_fail_typed() -> Outcome {
    check_folder("photos")
}

/// Files that are not JPEGs, or not files: what a real dataset folder
/// accumulates. Returns (sample paths, temp dir keeping them alive).
fn hostile_extras() -> (Vec<PathBuf>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut out = Vec::new();
    let mut add = |name: &str, bytes: Option<&[u8]>| {
        let p = d.join(name);
        if let Some(b) = bytes {
            std::fs::write(&p, b).unwrap();
        }
        out.push(p);
    };
    // A real PNG (the sample dataset's PNG fixtures are not JPEGs).
    add(
        "image.png.jpg",
        Some(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x02\0\0\0\x90wS\xde"),
    );
    add("empty.jpg", Some(b""));
    add("soi-only.jpg", Some(b"\xFF\xD8"));
    let mut zeros =
        b"\xFF\xD8\xFF\xE0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00".to_vec();
    zeros.resize(1 << 20, 0);
    add("header-then-zeros.jpg", Some(&zeros));
    std::fs::create_dir(d.join("a-directory.jpg")).unwrap();
    add("a-directory.jpg", None);
    std::os::unix::fs::symlink(d.join("a-directory.jpg"), d.join("link-to-dir.jpg")).unwrap();
    add("link-to-dir.jpg", None);
    std::os::unix::fs::symlink(d.join("nowhere.jpg"), d.join("dangling.jpg")).unwrap();
    add("dangling.jpg", None);
    add("missing.jpg", None);
    // 1 GiB: sparse, so creating it costs nothing; the reader must refuse
    // it from its size (max_file_bytes, 256 MiB default) without reading.
    let big = std::fs::File::create(d.join("one-gib.jpg")).unwrap();
    big.set_len(1 << 30).unwrap();
    add("one-gib.jpg", None);
    (out, dir)
}

/// Issue 7's report: every file of the corpus (tricky, fuzz, photos) plus
/// hostile non-JPEG entries through the full pipeline, on every backend
/// this machine has. A watchdog aborts when no batch arrives for `LIMIT`
/// (a hang); every file must end delivered or as a typed, named error.
fn whole_corpus_through_the_pipeline() -> Outcome {
    #[cfg_attr(not(feature = "kernel-emu"), allow(unused_mut))]
    let mut devices = vec![Device::Cpu];
    #[cfg(feature = "kernel-emu")]
    devices.push(Device::Emulated);
    whole_corpus(&devices)
}

/// The same on CUDA device 0, against the CPU backend.
fn gpu_whole_corpus_through_the_pipeline() -> Outcome {
    common::need_gpu()?;
    whole_corpus(&[Device::Cpu, Device::Cuda(0)])
}

fn whole_corpus(devices: &[Device]) -> Outcome {
    let corpus = common::corpus()?;
    let mut files = Vec::new();
    for sub in ["tricky", "fuzz", "photos"] {
        all_files(&corpus.join(sub), &mut files);
    }
    let (extras, _keep) = hostile_extras();
    files.extend(extras);
    let mut reports = Vec::new();
    for &device in devices {
        let mut pipeline = Pipeline::builder()
            .source(common::unlabelled(&corpus, &files))
            .batch_size(64)
            .output_size(32, 32)
            .device(device)
            .on_error(OnError::Skip)
            .shuffle(false)
            // A diagnostic: which nvJPEG route a failure is on.
            .hardware_decode_share(
                std::env::var("GPUFEED_TEST_HARDWARE_SHARE")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(1.0),
            )
            .build()
            .unwrap();
        let (tick, ticks) = std::sync::mpsc::channel::<()>();
        let watchdog = std::thread::spawn(move || {
            loop {
                match ticks.recv_timeout(LIMIT) {
                    Ok(()) => {}
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
                    Err(_) => {
                        eprintln!("whole corpus on {device:?}: no batch for {LIMIT:?}: hang");
                        std::process::abort();
                    }
                }
            }
        });
        let (mut decoded, mut errors, mut contained) = (0usize, 0usize, 0usize);
        let mut seen = std::collections::HashSet::new();
        let mut delivered = std::collections::BTreeSet::new();
        for batch in pipeline.epoch(0) {
            let batch = batch.unwrap();
            tick.send(()).unwrap();
            decoded += batch.len();
            seen.extend(batch.keys().iter().cloned());
            delivered.extend(batch.keys().iter().cloned());
            for e in batch.skipped() {
                let gpufeed::Error::Sample { path, source } = e else {
                    panic!("not a per-sample error: {e}")
                };
                assert!(
                    seen.insert(path.clone()),
                    "{} reported twice",
                    path.display()
                );
                errors += 1;
                contained += usize::from(matches!(source, gpufeed::error::SampleError::Panic(_)));
            }
        }
        drop(tick);
        watchdog.join().unwrap();
        assert_eq!(
            decoded + errors,
            files.len(),
            "{device:?}: every file accounted for"
        );
        assert_eq!(seen.len(), files.len());
        let line = format!(
            "{device:?}: {} files: {decoded} decoded, {errors} typed errors ({contained} of \
             them contained decoder panics), 0 panics, 0 timeouts",
            files.len()
        );
        println!("{line}");
        reports.push((device, delivered));
    }
    // The device stage changes where pixels are augmented, not which files
    // decode: every backend delivers what the CPU backend delivers (a GPU
    // decode failure is retried on the CPU). Only nvJPEG may deliver more:
    // it decodes some damaged files (a truncated scan, say) that the CPU
    // decoders refuse, as DALI does; those are listed.
    let (_, cpu) = &reports[0];
    for (device, delivered) in &reports[1..] {
        let lost: Vec<_> = cpu.difference(delivered).collect();
        assert!(
            lost.is_empty(),
            "{device:?} lost files the CPU decodes: {lost:?}"
        );
        let more: Vec<_> = delivered.difference(cpu).collect();
        if matches!(device, Device::Cuda(_)) {
            for f in &more {
                println!(
                    "{device:?}: nvJPEG decodes what the CPU decoder refuses: {}",
                    f.display()
                );
            }
        } else {
            assert!(
                more.is_empty(),
                "{device:?} decodes files the CPU refuses: {more:?}"
            );
        }
    }
    Ok(())
}
