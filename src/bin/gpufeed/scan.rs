//! `gpufeed scan`: the checks the pipeline does, on every file, with a report.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gpufeed::decode::{CpuDecoder, Image};
use gpufeed::jpeg::{DEFAULT_MAX_PIXELS, parse_header};
use gpufeed::{Source, error::SampleError};
use serde_json::json;

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Files to check, or folders to scan recursively (files with a
    /// .jpg/.jpeg/.jpe/.jfif name); any mix of both.
    #[arg(required = true, value_name = "PATH")]
    data: Vec<PathBuf>,
    /// Refuse images with more pixels than this.
    #[arg(long, default_value_t = DEFAULT_MAX_PIXELS)]
    max_pixels: u64,
    /// A file still decoding after this many seconds is reported as a
    /// timeout.
    #[arg(long, default_value_t = 30)]
    timeout: u64,
    /// Threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// CPU decoder: zune or turbojpeg (needs the `turbojpeg` feature).
    #[arg(long, default_value = "zune", value_parser = super::parse_cpu_decoder)]
    cpu_decoder: gpufeed::decode::CpuBackend,
    /// Print one JSON object instead of lines.
    #[arg(long)]
    json: bool,
}

/// The file a scan thread is on, and since when.
type Busy = Mutex<Option<(usize, Instant)>>;

/// What became of one file.
enum Outcome {
    Decoded,
    Failed(SampleError),
}

fn check(
    source: &Source,
    index: usize,
    max_pixels: u64,
    dec: &mut CpuDecoder,
    img: &mut Image,
) -> Outcome {
    let mut bytes = Vec::new();
    if let Err(e) = source.read(index, &mut bytes, u64::MAX) {
        return Outcome::Failed(e);
    }
    // As the pipeline: a PNG or WebP is an image whatever its name.
    let result = if gpufeed::decode::is_png_or_webp(&bytes) {
        gpufeed::decode::decode_png_or_webp(&bytes, max_pixels, img)
    } else {
        parse_header(&bytes, max_pixels).and_then(|h| dec.decode(&bytes, &h, img))
    };
    match result {
        Ok(()) => Outcome::Decoded,
        Err(e) => Outcome::Failed(e),
    }
}

/// A sample to check: (source, index in it).
type Item = (usize, usize);

/// The files named, the JPEGs under the folders named and the samples of
/// the WebDataset shards named (a `.tar` path or pattern, or a URL), in the
/// order given (each folder sorted): one source per argument, and every
/// (source, sample). A file is checked whatever its name: the user asked
/// for it.
fn list(paths: &[PathBuf]) -> anyhow::Result<(Vec<Source>, Vec<Item>)> {
    let mut sources = Vec::new();
    for p in paths {
        let text = p.to_string_lossy();
        let source = if super::names_shards(&text) {
            Source::webdataset([text.as_ref()])?
        } else {
            let meta = std::fs::metadata(p).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
            if meta.is_dir() {
                Source::recursive(p)?
            } else {
                let parent = p.parent().unwrap_or(std::path::Path::new("."));
                let one = gpufeed::source::Sample {
                    path: p.clone(),
                    label: 0,
                };
                Source::from_samples(parent, vec![one])?
            }
        };
        super::bench::warn_left_out(&source);
        sources.push(source);
    }
    let items = sources
        .iter()
        .enumerate()
        .flat_map(|(si, s)| (0..s.len()).map(move |i| (si, i)))
        .collect();
    Ok((sources, items))
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    // Fail early, with the reason, when the decoder is not compiled in.
    CpuDecoder::with_backend(args.cpu_decoder, true)?;
    let (sources, items) = list(&args.data)?;
    let files: Vec<PathBuf> = items
        .iter()
        .map(|&(s, i)| sources[s].samples()[i].path.clone())
        .collect();
    let threads = args
        .threads
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        })
        .max(1);
    let (work_tx, work_rx) = crossbeam_channel::unbounded::<usize>();
    for i in 0..files.len() {
        work_tx.send(i).expect("receiver alive");
    }
    drop(work_tx);
    let files = Arc::new(files);
    let (sources, items) = (Arc::new(sources), Arc::new(items));
    let (done_tx, done_rx) = crossbeam_channel::unbounded::<(usize, Outcome)>();
    // What each thread is working on, for the timeout watchdog below.
    let busy: Arc<Vec<Busy>> = Arc::new((0..threads).map(|_| Mutex::new(None)).collect());
    for t in 0..threads {
        let (sources, items, work_rx, done_tx, busy) = (
            sources.clone(),
            items.clone(),
            work_rx.clone(),
            done_tx.clone(),
            busy.clone(),
        );
        let (max_pixels, backend) = (args.max_pixels, args.cpu_decoder);
        std::thread::spawn(move || {
            let mut dec = CpuDecoder::with_backend(backend, true).expect("checked above");
            let mut img = Image::default();
            for i in work_rx {
                *busy[t].lock().expect("not poisoned") = Some((i, Instant::now()));
                let (si, index) = items[i];
                let outcome = check(&sources[si], index, max_pixels, &mut dec, &mut img);
                *busy[t].lock().expect("not poisoned") = None;
                if done_tx.send((i, outcome)).is_err() {
                    return;
                }
            }
        });
    }
    drop(done_tx);

    let timeout = Duration::from_secs(args.timeout);
    let mut outcomes: BTreeMap<usize, Result<(), String>> = BTreeMap::new();
    let mut timed_out = Vec::new();
    while outcomes.len() + timed_out.len() < files.len() {
        match done_rx.recv_timeout(Duration::from_millis(200)) {
            Ok((i, o)) => {
                let r = match o {
                    Outcome::Decoded => Ok(()),
                    Outcome::Failed(e) => Err(format!("{} ({})", e, e.kind().name())),
                };
                if !args.json
                    && let Err(msg) = &r
                {
                    println!("BAD {}: {msg}", files[i].display());
                }
                outcomes.insert(i, r);
            }
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
        }
        for slot in busy.iter() {
            let mut slot = slot.lock().expect("not poisoned");
            if let Some((i, since)) = *slot
                && since.elapsed() > timeout
            {
                if !args.json {
                    println!(
                        "BAD {}: no result after {}s (timeout)",
                        files[i].display(),
                        args.timeout
                    );
                }
                timed_out.push(i);
                // The thread is stuck on this file; it is not waited for.
                *slot = None;
            }
        }
    }
    let decoded = outcomes.values().filter(|r| r.is_ok()).count();
    let failed = outcomes.len() - decoded;
    if args.json {
        let bad: Vec<_> = outcomes
            .iter()
            .filter_map(|(i, r)| {
                r.as_ref()
                    .err()
                    .map(|m| json!({"path": files[*i], "error": m}))
            })
            .chain(
                timed_out
                    .iter()
                    .map(|i| json!({"path": files[*i], "error": "timeout"})),
            )
            .collect();
        let out = json!({
            "data": args.data, "files": files.len(), "decoded": decoded,
            "errors": failed, "timeouts": timed_out.len(), "bad": bad,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!(
            "{} files: {decoded} decoded, {failed} typed errors, {} timeouts",
            files.len(),
            timed_out.len()
        );
    }
    let all_good = failed == 0 && timed_out.is_empty();
    if !timed_out.is_empty() {
        // Threads stuck in a decode cannot be joined; leave without them.
        use std::io::Write;
        let _ = std::io::stdout().flush();
        std::process::exit(1);
    }
    Ok(if all_good {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
