//! Every file of the shared corpus's `tricky/` and `fuzz/` folders either
//! decodes or yields a typed error, within a time limit, without a panic;
//! and the pipeline accounts for every one of them.

mod common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gpufeed::decode::{CpuBackend, CpuDecoder, Image};
use gpufeed::jpeg::{DEFAULT_MAX_PIXELS, parse_header};
use gpufeed::{Device, OnError, Pipeline, Sample, Source};

/// Per-file limit. Generous: the slowest file (6000x6000) takes well under a
/// second in an optimised build; this only catches hangs.
const LIMIT: Duration = Duration::from_secs(60);

fn all_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
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
enum Outcome {
    Decoded,
    Error,
    Panic(String),
}

/// Decode every file on `threads` threads; a watchdog fails the test when a
/// file runs past `LIMIT`.
fn decode_all(files: &[PathBuf], backend: CpuBackend) -> Vec<Outcome> {
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
                        parse_header(&bytes, DEFAULT_MAX_PIXELS)
                            .and_then(|h| dec.decode(&bytes, &h, &mut img))
                    }));
                    *busy[t].lock().unwrap() = None;
                    let o = match outcome {
                        Ok(Ok(())) => Outcome::Decoded,
                        Ok(Err(_)) => Outcome::Error,
                        Err(p) => Outcome::Panic(format!("{p:?}")),
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

fn check_folder(sub: &str) {
    let Some(corpus) = common::corpus(&format!("corpus_{sub}")) else {
        return;
    };
    for backend in common::backends() {
        check_folder_with(&corpus, sub, backend);
    }
}

fn check_folder_with(corpus: &Path, sub: &str, backend: CpuBackend) {
    let mut files = Vec::new();
    all_files(&corpus.join(sub), &mut files);
    assert!(!files.is_empty());
    let outcomes = decode_all(&files, backend);
    let decoded = outcomes.iter().filter(|o| **o == Outcome::Decoded).count();
    let errors = outcomes.iter().filter(|o| **o == Outcome::Error).count();
    let panics: Vec<String> = files
        .iter()
        .zip(&outcomes)
        .filter_map(|(f, o)| match o {
            Outcome::Panic(m) => Some(format!("{}: {m}", f.display())),
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
    let samples = files
        .iter()
        .map(|p| Sample {
            path: p.clone(),
            label: 0,
        })
        .collect();
    let mut pipeline = Pipeline::builder()
        .source(Source::from_samples(corpus, samples).unwrap())
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

#[test]
fn tricky_files_decode_or_fail_typed() {
    check_folder("tricky");
}

#[test]
fn fuzz_files_decode_or_fail_typed() {
    check_folder("fuzz");
}
