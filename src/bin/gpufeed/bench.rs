//! `gpufeed bench`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::procstat::{KINDS, cpu_by_kind, reset_peak_rss, status_kib};
use anyhow::{Context, bail};
use gpufeed::{DType, Layout, Pipeline, Source, Transform, augment::Normalize};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::Value;

mod report;

use report::{report_one, row_json, write_out};

#[derive(clap::Args, Clone)]
pub(crate) struct Args {
    /// ImageFolder dataset (ROOT/CLASS/IMAGE), or a flat folder of JPEGs.
    /// Default: the repository's data/sample.
    #[arg(conflicts_with = "list")]
    data: Option<PathBuf>,
    /// A list file instead of a folder: `path label` per line (tab, comma
    /// or spaces), paths relative to the list's folder.
    #[arg(long, value_name = "FILE")]
    list: Option<PathBuf>,
    /// Images per batch.
    #[arg(long, default_value_t = 64)]
    batch: usize,
    /// I/O reader threads.
    #[arg(long, default_value_t = 2)]
    readers: usize,
    /// CPU decode/augment threads (default: all cores).
    #[arg(long)]
    workers: Option<usize>,
    /// Output side length in pixels.
    #[arg(long, default_value_t = 224)]
    size: usize,
    /// Epochs to run; the first is reported separately as warm-up.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    epochs: u64,
    /// cpu, auto, cuda or cuda:N.
    #[arg(long, default_value = "auto", value_parser = super::parse_device)]
    device: gpufeed::Device,
    /// Output dtype: u8, f16, bf16, f32 (u8 is not normalized).
    #[arg(long, default_value = "f32", value_parser = parse_dtype)]
    dtype: DType,
    /// Geometry: train (RandomResizedCrop + flip), eval (resize to
    /// size*8/7, centre crop) or resize (squash the whole image).
    #[arg(long, default_value = "train", value_parser = ["train", "eval", "resize"])]
    transform: String,
    /// Antialiased (triangle-filter) shrinking, like torchvision v2's
    /// default antialias=True; `--antialias false` for plain bilinear.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    antialias: bool,
    /// Output layout: nchw or nhwc.
    #[arg(long, default_value = "nchw", value_parser = parse_layout)]
    layout: Layout,
    /// Shuffle seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// CPU decoder: zune or turbojpeg (needs the `turbojpeg` feature).
    #[arg(long, default_value = "zune", value_parser = super::parse_cpu_decoder)]
    cpu_decoder: gpufeed::decode::CpuBackend,
    /// Batches prepared ahead of the consumer.
    #[arg(long, default_value_t = 2)]
    prefetch: usize,
    /// WebDataset shards: stream each rank's shards front to back through
    /// a shuffle buffer of this many samples (0: random access, a
    /// full-epoch shuffle).
    #[arg(long, default_value_t = 0, value_name = "BUFFER")]
    stream_shards: usize,
    /// A recipe's views and photometric ops instead of one view of
    /// `--size` (imagenet, imagenet-eval, simclr, byol, dino); img/s counts
    /// samples, each with every view.
    #[arg(long, value_name = "NAME", value_parser = clap::builder::PossibleValuesParser::new(gpufeed::augment::Recipe::NAMES))]
    recipe: Option<String>,
    /// Mixup and CutMix on every batch with DeiT's settings (timm: mixup
    /// α 0.8, cutmix α 1.0, switch 0.5, label smoothing 0.1), soft labels
    /// over the source's classes (without class names: 1,000, or the
    /// highest label + 1).
    #[arg(long)]
    mixup: bool,
    /// CUDA backend: decode on CPU threads instead of nvJPEG.
    #[arg(long)]
    cpu_decode: bool,
    /// CUDA backend: share of hardware-decodable images sent to the
    /// hardware JPEG engine, or `auto` to steer it while running from
    /// what each route costs (default: the library's fixed share).
    #[arg(long, value_name = "SHARE|auto")]
    hardware_share: Option<super::ShareArg>,
    /// CUDA backend, nvJPEG route: batches decoding at once (default: the
    /// library's).
    #[arg(long, value_name = "N")]
    batches_in_flight: Option<usize>,
    /// CUDA backend, nvJPEG route: images per hardware-engine call, sent as
    /// a batch fills (0: one call per batch, the default).
    #[arg(long, value_name = "N", hide = true)]
    engine_call: Option<usize>,
    /// CUDA backend, nvJPEG route: the engine lanes in a CUDA context of
    /// their own (the library's hidden `engine_context`; default off).
    #[arg(long, hide = true)]
    engine_context: bool,
    /// CUDA backend, nvJPEG route: pinned + device bytes the CUDA route's
    /// decoder pool may hold, e.g. `2GiB` (default: the library's).
    #[arg(long, value_name = "SIZE", value_parser = super::parse_size)]
    decoder_memory_limit: Option<u64>,
    /// CUDA backend, scan kernels: device bytes their lanes may hold for
    /// their calls' files, coefficients and samples, all lanes together,
    /// e.g. `1GiB` (default: the library's, a quarter of the device's memory).
    #[arg(long, value_name = "SIZE", value_parser = super::parse_size)]
    kernel_memory_limit: Option<u64>,
    /// Simulated training step: sleep this many milliseconds per batch
    /// (after waiting for a device batch), to see whether the loader keeps
    /// up with a model.
    #[arg(long, default_value_t = 0.0)]
    consumer_ms: f64,
    /// Run every combination of these settings (repeatable), e.g.
    /// `--sweep readers=1,2,4,8 --sweep batch=64,256`. Keys: readers,
    /// workers, batch, prefetch, stream-shards, size, dtype, layout, antialias, device,
    /// cpu-decoder, transform, recipe, mixup, consumer-ms, cpu-decode, hardware-share,
    /// in-flight, engine-call, engine-context, decoder-memory, kernel-memory.
    #[arg(long = "sweep", value_name = "KEY=V1,V2,..")]
    sweep: Vec<String>,
    /// Also write the results table to PREFIX.json and PREFIX.csv.
    #[arg(long, value_name = "PREFIX")]
    out: Option<PathBuf>,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
    /// Write a timeline of the run to FILE (Chrome trace JSON: open it in
    /// Perfetto or chrome://tracing): per thread, reads, parses, decodes,
    /// augments, the device stage's calls and the trainer's waits.
    #[arg(long, value_name = "FILE.json", conflicts_with = "sweep")]
    trace: Option<PathBuf>,
}

fn parse_dtype(s: &str) -> Result<DType, String> {
    Ok(match s {
        "u8" => DType::U8,
        "f16" => DType::F16,
        "bf16" => DType::BF16,
        "f32" => DType::F32,
        _ => {
            return Err(format!(
                "unknown dtype {s:?}: expected u8, f16, bf16 or f32"
            ));
        }
    })
}

fn parse_layout(s: &str) -> Result<Layout, String> {
    match s {
        "nchw" => Ok(Layout::Nchw),
        "nhwc" => Ok(Layout::Nhwc),
        _ => Err(format!("unknown layout {s:?}: expected nchw or nhwc")),
    }
}

/// An ImageFolder when `data` has class sub-folders, otherwise every JPEG
/// under it with label 0 (a flat folder of photos benchmarks just as well).
/// Files the listing left out are named in a warning on stderr.
pub(crate) fn open_dataset(data: &std::path::Path) -> anyhow::Result<Source> {
    let has_subdirs = std::fs::read_dir(data)
        .with_context(|| format!("reading {}", data.display()))?
        .filter_map(|e| e.ok())
        .any(|e| e.path().is_dir());
    let source = if has_subdirs {
        Source::image_folder(data)?
    } else {
        Source::recursive(data)?
    };
    warn_left_out(&source);
    Ok(source)
}

/// A warning naming what a listing left out, when it left out anything.
pub(crate) fn warn_left_out(source: &Source) {
    if !source.left_out().is_empty() {
        eprintln!("gpufeed: warning: {}", source.left_out());
    }
}

/// The dataset of `bench` and `preview`: `--list FILE`, or DATA (default
/// data/sample); with the path to show for it.
pub(crate) fn dataset(
    data: Option<PathBuf>,
    list: Option<&std::path::Path>,
) -> anyhow::Result<(Source, PathBuf)> {
    if let Some(list) = list {
        return Ok((Source::file_list(list)?, list.to_path_buf()));
    }
    if let Some(d) = data.as_ref().and_then(|d| d.to_str())
        && super::names_shards(d)
    {
        let source = Source::webdataset([d])?;
        warn_left_out(&source);
        return Ok((source, PathBuf::from(d)));
    }
    let data = super::data_or_sample(data)?;
    Ok((open_dataset(&data)?, data))
}

/// The profile this binary was built with: a debug build of gpufeed (or
/// of a trainer that depends on it without optimising its dependencies)
/// runs tens of times slower, so every report says which it measured.
pub(crate) const BUILD: &str = if cfg!(debug_assertions) {
    "debug"
} else {
    "release"
};

struct EpochResult {
    images: u64,
    batches: u64,
    seconds: f64,
}

/// Set one `--sweep` key on a copy of the arguments.
fn apply(args: &mut Args, key: &str, v: &str) -> anyhow::Result<()> {
    let num = |v: &str| v.parse::<usize>().with_context(|| format!("{key}={v}"));
    match key {
        "readers" => args.readers = num(v)?,
        "workers" => args.workers = Some(num(v)?),
        "batch" => args.batch = num(v)?,
        "prefetch" => args.prefetch = num(v)?,
        "stream-shards" => args.stream_shards = num(v)?,
        "size" => args.size = num(v)?,
        "dtype" => args.dtype = parse_dtype(v).map_err(anyhow::Error::msg)?,
        "layout" => args.layout = parse_layout(v).map_err(anyhow::Error::msg)?,
        "antialias" => args.antialias = v.parse().with_context(|| format!("{key}={v}"))?,
        "device" => args.device = super::parse_device(v)?,
        "cpu-decoder" => args.cpu_decoder = super::parse_cpu_decoder(v)?,
        "transform" => args.transform = v.to_string(),
        "recipe" => {
            gpufeed::augment::Recipe::by_name(v).with_context(|| {
                format!("recipe={v}: one of {:?}", gpufeed::augment::Recipe::NAMES)
            })?;
            args.recipe = Some(v.to_string())
        }
        "mixup" => args.mixup = v.parse().with_context(|| format!("{key}={v}"))?,
        "consumer-ms" => args.consumer_ms = v.parse().with_context(|| format!("{key}={v}"))?,
        "cpu-decode" => args.cpu_decode = v.parse().with_context(|| format!("{key}={v}"))?,
        "hardware-share" => args.hardware_share = Some(v.parse().map_err(anyhow::Error::msg)?),
        "in-flight" => {
            args.batches_in_flight = Some(v.parse().with_context(|| format!("{key}={v}"))?)
        }
        "engine-call" => args.engine_call = Some(v.parse().with_context(|| format!("{key}={v}"))?),
        "engine-context" => {
            args.engine_context = match v {
                "1" | "true" => true,
                "0" | "false" => false,
                _ => bail!("{key}={v}: 0 or 1"),
            }
        }
        "decoder-memory" => {
            args.decoder_memory_limit = Some(super::parse_size(v).map_err(anyhow::Error::msg)?)
        }
        "kernel-memory" => {
            args.kernel_memory_limit = Some(super::parse_size(v).map_err(anyhow::Error::msg)?)
        }
        _ => bail!("unknown --sweep key {key:?}"),
    }
    Ok(())
}

/// Every combination of the sweeps: (label, arguments).
fn expand(args: &Args) -> anyhow::Result<Vec<(String, Args)>> {
    let mut configs = vec![(String::new(), args.clone())];
    for s in &args.sweep {
        let (key, values) = s
            .split_once('=')
            .with_context(|| format!("--sweep {s:?}: expected KEY=V1,V2,.."))?;
        let mut next = Vec::new();
        for (label, a) in &configs {
            for v in values.split(',').filter(|v| !v.is_empty()) {
                let mut a = a.clone();
                apply(&mut a, key, v)?;
                let sep = if label.is_empty() { "" } else { " " };
                next.push((format!("{label}{sep}{key}={v}"), a));
            }
        }
        configs = next;
    }
    Ok(configs)
}

/// One configuration's measurement.
struct Run {
    label: String,
    backend: String,
    /// Seconds in `build()` (device set-up, kernel compilation or the
    /// kernel cache), and from the first epoch's start to its first batch
    /// ready on the device: together, a trainer's time to first batch
    /// (issue 20).
    build_s: f64,
    first_batch_s: Option<f64>,
    epochs: Vec<EpochResult>,
    /// Steady state: the epochs after the first (all when there is one).
    img_per_s: f64,
    mb_per_s: f64,
    /// Requests to object storage per second (0 for local files).
    requests_per_s: f64,
    cpu_s_per_1000: f64,
    /// CPU milliseconds per image by thread kind ([`KINDS`]).
    cpu_ms_by_kind: Vec<(&'static str, f64)>,
    peak_rss_mib: f64,
    memory: gpufeed::pipeline::Memory,
    /// Buffers nvJPEG took from the driver during the steady epochs.
    steady_allocations: u64,
    queue_depth_batches: f64,
    wait_fraction: f64,
    limit: String,
    stats: gpufeed::pipeline::Stats,
    workers: usize,
    files: usize,
    classes: usize,
}

/// The pipeline settings of one configuration.
fn builder(args: &Args, source: Source) -> gpufeed::PipelineBuilder {
    // Labels without class names (a list, shards, a flat folder) give no
    // class count for mixup's soft labels: ImageNet's 1,000, or more if a
    // listed label is higher, make them cost what they would in training.
    let classes = match source.classes().len() {
        0 => source
            .samples()
            .iter()
            .map(|s| s.label as usize + 1)
            .fold(1000, usize::max),
        n => n,
    };
    let mut builder = Pipeline::builder()
        .source(source)
        .batch_size(args.batch)
        .readers(args.readers)
        .prefetch(args.prefetch)
        .output_size(args.size, args.size)
        .dtype(args.dtype)
        .layout(args.layout)
        .normalize((args.dtype != DType::U8).then_some(Normalize::IMAGENET))
        .seed(args.seed)
        .transform(match args.transform.as_str() {
            "eval" => Transform::CenterCrop {
                resize: (args.size * 8 / 7) as u32,
            },
            "resize" => Transform::Resize,
            _ => Transform::RANDOM_RESIZED_CROP,
        })
        .antialias(args.antialias)
        .cpu_backend(args.cpu_decoder)
        .gpu_decode(!args.cpu_decode)
        .device(args.device)
        .trace(args.trace.is_some());
    if let Some(w) = args.workers {
        builder = builder.workers(w);
    }
    match args.hardware_share {
        Some(super::ShareArg::Fixed(s)) => builder = builder.hardware_decode_share(s),
        Some(super::ShareArg::Auto) => builder = builder.hardware_decode_share_auto(true),
        None => {}
    }
    if let Some(n) = args.batches_in_flight {
        builder = builder.batches_in_flight(n);
    }
    if let Some(n) = args.engine_call {
        builder = builder.engine_call_images(n);
    }
    if args.engine_context {
        builder = builder.engine_context(true);
    }
    if let Some(b) = args.decoder_memory_limit {
        builder = builder.decoder_memory_limit(b);
    }
    if let Some(b) = args.kernel_memory_limit {
        builder = builder.kernel_memory_limit(b);
    }
    if args.stream_shards > 0 {
        builder = builder.stream_shards(args.stream_shards);
    }
    if args.mixup {
        builder = builder.mixup(gpufeed::augment::Mixup::deit(classes));
    }
    if let Some(r) = args
        .recipe
        .as_deref()
        .and_then(gpufeed::augment::Recipe::by_name)
    {
        let u8 = args.dtype == DType::U8;
        builder = builder.recipe(r);
        if u8 {
            builder = builder.normalize(None);
        }
    }
    builder
}

/// Set by Ctrl-C: the run stops after the batch in hand and reports what
/// it measured.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

fn run_one(label: String, args: &Args, source: &Source, bar: bool) -> anyhow::Result<Run> {
    let (files, classes) = (source.len(), source.classes().len());
    reset_peak_rss();
    let built = Instant::now();
    let mut pipeline = builder(args, source.clone())
        .build()
        .context("building the pipeline")?;
    let build_s = built.elapsed().as_secs_f64();
    let mut first_batch_s = None;
    let total = pipeline.batches_per_epoch() as u64 * args.epochs;
    let bar = if bar {
        let b = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        b.set_style(
            ProgressStyle::with_template("{bar:40} {pos}/{len} batches  {per_sec}  eta {eta}")
                .expect("static template"),
        );
        b
    } else {
        ProgressBar::hidden()
    };
    let step = Duration::from_secs_f64(args.consumer_ms.max(0.0) / 1e3);
    let mut epochs = Vec::new();
    let mut steady_start = pipeline.stats();
    let mut kinds_start = cpu_by_kind();
    let warmup = args.epochs > 1;
    for e in 0..args.epochs {
        if INTERRUPTED.load(Ordering::Relaxed) {
            break;
        }
        let t0 = Instant::now();
        let (mut images, mut batches) = (0u64, 0u64);
        for batch in pipeline.epoch(e) {
            if INTERRUPTED.load(Ordering::Relaxed) {
                break;
            }
            let batch = batch?;
            for err in batch.skipped() {
                bar.suspend(|| eprintln!("skipped: {err}"));
            }
            // Like a trainer: the batch is consumed once its kernels are
            // done, so device throughput is measured, not enqueue rate.
            if let Some(ev) = batch.event() {
                ev.synchronize()
                    .map_err(|e| anyhow::anyhow!("waiting for batch: {e:?}"))?;
            }
            first_batch_s.get_or_insert_with(|| t0.elapsed().as_secs_f64());
            if !step.is_zero() {
                std::thread::sleep(step);
            }
            images += batch.len() as u64;
            batches += 1;
            bar.inc(1);
        }
        epochs.push(EpochResult {
            images,
            batches,
            seconds: t0.elapsed().as_secs_f64(),
        });
        if e == 0 && warmup {
            steady_start = pipeline.stats();
            kinds_start = cpu_by_kind();
        }
    }
    bar.finish_and_clear();
    let kinds_end = cpu_by_kind();
    // The total is the kinds' sum, from the same two readings: a total
    // read apart from them differs by whole clock ticks (10 ms), which on
    // a short run is more than a tenth of a millisecond per image.
    let by_kind: Vec<(&'static str, f64)> = KINDS
        .iter()
        .map(|&k| (k, (kinds_end[k] - kinds_start[k]).max(0.0)))
        .collect();
    let cpu: f64 = by_kind.iter().map(|&(_, s)| s).sum();
    if let (Some(path), Some(json)) = (&args.trace, pipeline.trace_json()) {
        std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote the timeline to {}", path.display());
    }
    let stats = pipeline.stats();
    // An interrupted run may end inside the warm-up epoch: then that
    // partial epoch is all there is to report.
    let skip = usize::from(warmup && epochs.len() > 1);
    let steady: Vec<&EpochResult> = epochs.iter().skip(skip).collect();
    let images: u64 = steady.iter().map(|e| e.images).sum();
    let batches: u64 = steady.iter().map(|e| e.batches).sum();
    let secs: f64 = steady.iter().map(|e| e.seconds).sum::<f64>().max(1e-9);
    let workers = args.workers.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let d = |a: Duration, b: Duration| a.saturating_sub(b).as_secs_f64();
    let wait = d(stats.wait, steady_start.wait);
    // Busy fraction of each stage's threads over the steady epochs: the
    // stage nearest 100 % is what limits throughput.
    let cpu_work = d(stats.parse, steady_start.parse)
        + d(stats.decode, steady_start.decode)
        + d(stats.augment, steady_start.augment);
    let mut stages = vec![
        (
            format!("read ({} threads)", args.readers),
            d(stats.read, steady_start.read) / (args.readers as f64 * secs),
        ),
        (
            format!("decode/augment ({workers} threads)"),
            cpu_work / (workers as f64 * secs),
        ),
        (
            "consumer (training step)".to_string(),
            (batches as f64 * step.as_secs_f64()) / secs,
        ),
    ];
    // The batch thread assembles batches and runs the device stage. Its CPU
    // time over the steady epochs says how busy it is: its waits on the
    // device block rather than spin (issue 16, 3b).
    let batch_thread = kinds_end["batch thread"] - kinds_start["batch thread"];
    let what = if pipeline.memory().slots > 0 {
        "batch thread (device stage: staging, nvJPEG, launches)"
    } else {
        "batch thread (assembly)"
    };
    stages.push((what.into(), batch_thread.max(0.0) / secs));
    // The hardware engine: the time with a call in flight. On an H200 it
    // was the limit while the threads above were 13 % busy (issue 16).
    let engine = d(stats.engine_busy, steady_start.engine_busy);
    if engine > 0.0 {
        stages.push((
            "hardware JPEG engine (a call in flight)".into(),
            engine / secs,
        ));
    }
    // The progressive lanes likewise: at 2406cce on an H200 they held the
    // pipeline to ~3,500 img/s while this table named the engine.
    let progressive = d(stats.progressive_busy, steady_start.progressive_busy);
    if progressive > 0.0 {
        stages.push((
            "progressive lanes (a call in flight)".into(),
            progressive / secs,
        ));
    }
    let (name, busy) = stages
        .iter()
        .cloned()
        .fold((String::new(), -1.0), |a, b| if b.1 > a.1 { b } else { a });
    let polls = (stats.queue_depth_polls - steady_start.queue_depth_polls).max(1);
    let depth = (stats.queue_depth_sum - steady_start.queue_depth_sum) as f64 / polls as f64;
    Ok(Run {
        label,
        backend: pipeline.backend(),
        build_s,
        first_batch_s,
        img_per_s: images as f64 / secs,
        mb_per_s: (stats.bytes_read - steady_start.bytes_read) as f64 / 1e6 / secs,
        requests_per_s: (stats.requests - steady_start.requests) as f64 / secs,
        cpu_s_per_1000: cpu * 1000.0 / images.max(1) as f64,
        cpu_ms_by_kind: by_kind
            .iter()
            .map(|&(k, s)| (k, s * 1000.0 / images.max(1) as f64))
            .collect(),
        peak_rss_mib: status_kib("VmHWM") as f64 / 1024.0,
        memory: pipeline.memory(),
        steady_allocations: stats.decoder_allocations - steady_start.decoder_allocations,
        queue_depth_batches: depth / args.batch as f64,
        wait_fraction: wait / secs,
        limit: format!("{name}: {:.0} % busy", busy * 100.0),
        epochs,
        stats,
        workers,
        files,
        classes,
    })
}

/// Whether the run was interrupted (Ctrl-C); `main` then exits with 130
/// after the partial report.
pub(crate) fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let (source, data) = dataset(args.data.clone(), args.list.as_deref())?;
    // Issue 15: every configuration and the output files are checked
    // before any work, so a bad value late in a sweep or an unwritable
    // --out cannot waste a run.
    let configs = expand(&args)?;
    for (label, a) in &configs {
        builder(a, source.clone())
            .check()
            .with_context(|| format!("configuration {label:?}"))?;
    }
    let outputs = args
        .out
        .iter()
        .flat_map(|p| [p.with_extension("json"), p.with_extension("csv")])
        .chain(args.trace.clone());
    for path in outputs {
        std::fs::write(&path, "").with_context(|| format!("writing {}", path.display()))?;
    }
    ctrlc::set_handler(|| {
        if INTERRUPTED.swap(true, Ordering::Relaxed) {
            // A second Ctrl-C: the user does not want the report.
            std::process::exit(130);
        }
        eprintln!("\ngpufeed: interrupted; reporting what was measured (Ctrl-C again to quit)");
    })
    .context("installing the Ctrl-C handler")?;
    if args.sweep.is_empty() {
        let r = run_one(String::new(), &args, &source, !args.json)?;
        if let Some(prefix) = &args.out {
            write_out(prefix, &[row_json(&r)])?;
        }
        return report_one(&args, &data, &r);
    }
    let mut rows = Vec::new();
    for (i, (label, a)) in configs.iter().enumerate() {
        if interrupted() {
            break;
        }
        eprintln!("[{}/{}] {label}", i + 1, configs.len());
        rows.push(run_one(label.clone(), a, &source, false)?);
    }
    let best = rows
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.img_per_s.total_cmp(&b.1.img_per_s))
        .map_or(0, |(i, _)| i);
    let values: Vec<Value> = rows.iter().map(row_json).collect();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&values)?);
    } else {
        println!(
            "gpufeed bench --sweep  {}  ({} of {} configurations{}, {} epochs each, first is \
             warm-up; {} build)\n",
            data.display(),
            rows.len(),
            configs.len(),
            if interrupted() { ", interrupted" } else { "" },
            args.epochs,
            BUILD
        );
        println!(
            "  {:<34} {:>9} {:>7} {:>9} {:>8} {:>8} {:>8} {:>7} {:>6} {:>5}  limit",
            "config",
            "img/s",
            "MB/s",
            "CPU-s/1k",
            "RSS MiB",
            "pin MiB",
            "dev MiB",
            "allocs",
            "queue",
            "wait"
        );
        for (i, r) in rows.iter().enumerate() {
            println!(
                "{} {:<34} {:>9.1} {:>7.1} {:>9.2} {:>8.0} {:>8.0} {:>8.0} {:>7} {:>6.2} {:>4.0}%  {}",
                if i == best { "*" } else { " " },
                r.label,
                r.img_per_s,
                r.mb_per_s,
                r.cpu_s_per_1000,
                r.peak_rss_mib,
                r.memory.pinned_bytes as f64 / (1 << 20) as f64,
                r.memory.device_bytes as f64 / (1 << 20) as f64,
                r.steady_allocations,
                r.queue_depth_batches,
                r.wait_fraction * 100.0,
                r.limit
            );
        }
        println!(
            "\n  * best. allocs: buffers nvJPEG took from the driver in the steady epochs (each \
             one stalls the device); queue: batches' worth of finished samples waiting when \
             the consumer asked; wait: share of time the consumer waited for data; limit: the \
             busiest stage."
        );
    }
    if let Some(prefix) = &args.out {
        write_out(prefix, &values)?;
    }
    Ok(())
}
