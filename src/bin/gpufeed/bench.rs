//! `gpufeed bench`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use gpufeed::{DType, ErrorKind, Layout, Normalize, Pipeline, Source, Transform};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;

#[derive(clap::Args)]
pub(crate) struct Args {
    /// ImageFolder dataset (ROOT/CLASS/IMAGE). Default: the repository's
    /// data/sample.
    data: Option<PathBuf>,
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
    #[arg(long, default_value_t = 3)]
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
    /// Antialiased (triangle-filter) shrinking, like torchvision
    /// antialias=True.
    #[arg(long)]
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
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
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
pub(crate) fn open_dataset(data: &std::path::Path) -> anyhow::Result<Source> {
    let has_subdirs = std::fs::read_dir(data)
        .with_context(|| format!("reading {}", data.display()))?
        .filter_map(|e| e.ok())
        .any(|e| e.path().is_dir());
    Ok(if has_subdirs {
        Source::image_folder(data)?
    } else {
        Source::recursive(data)?
    })
}

struct EpochResult {
    images: u64,
    batches: u64,
    seconds: f64,
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let data = super::data_or_sample(args.data)?;
    let source = open_dataset(&data)?;
    let classes = source.classes().len();
    let n_files = source.len();
    let mut builder = Pipeline::builder()
        .source(source)
        .batch_size(args.batch)
        .readers(args.readers)
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
        .flip_h(if args.transform == "train" { 0.5 } else { 0.0 })
        .antialias(args.antialias)
        .cpu_backend(args.cpu_decoder)
        .device(args.device);
    if let Some(w) = args.workers {
        builder = builder.workers(w);
    }
    let mut pipeline = builder.build().context("building the pipeline")?;

    let total = pipeline.batches_per_epoch() as u64 * args.epochs;
    let bar = if args.json {
        ProgressBar::hidden()
    } else {
        let b = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        b.set_style(
            ProgressStyle::with_template("{bar:40} {pos}/{len} batches  {per_sec}  eta {eta}")
                .expect("static template"),
        );
        b
    };
    let mut epochs = Vec::new();
    let t_all = Instant::now();
    for e in 0..args.epochs {
        let t0 = Instant::now();
        let (mut images, mut batches) = (0u64, 0u64);
        for batch in pipeline.epoch(e) {
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
            images += batch.len() as u64;
            batches += 1;
            bar.inc(1);
        }
        epochs.push(EpochResult {
            images,
            batches,
            seconds: t0.elapsed().as_secs_f64(),
        });
    }
    bar.finish_and_clear();
    let wall = t_all.elapsed().as_secs_f64();
    let stats = pipeline.stats();
    let backend = pipeline.backend();
    let memory = pipeline.memory();

    // Steady state: every epoch after the first, when there is more than one.
    let steady: Vec<&EpochResult> = epochs.iter().skip(usize::from(epochs.len() > 1)).collect();
    let steady_images: u64 = steady.iter().map(|e| e.images).sum();
    let steady_secs: f64 = steady.iter().map(|e| e.seconds).sum();
    let img_per_s = steady_images as f64 / steady_secs.max(1e-9);
    let per_image_ms = |d: Duration| d.as_secs_f64() * 1e3 / stats.samples.max(1) as f64;
    let workers = args.workers.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });

    if args.json {
        let errors: serde_json::Map<_, _> = ErrorKind::ALL
            .iter()
            .map(|k| (k.name().to_string(), json!(stats.errors_of(*k))))
            .collect();
        let out = json!({
            "data": data.display().to_string(),
            "files": n_files,
            "classes": classes,
            "device": backend,
            "pinned_bytes": memory.pinned_bytes,
            "device_bytes": memory.device_bytes,
            "launches": stats.launches,
            "host_augmented": stats.host_augmented,
            "batch": args.batch,
            "readers": args.readers,
            "workers": workers,
            "size": args.size,
            "dtype": args.dtype.name(),
            "transform": args.transform,
            "antialias": args.antialias,
            "cpu_decoder": format!("{:?}", args.cpu_decoder),
            "epochs": epochs.iter().enumerate().map(|(i, e)| json!({
                "epoch": i, "images": e.images, "batches": e.batches, "seconds": e.seconds,
                "img_per_s": e.images as f64 / e.seconds.max(1e-9),
            })).collect::<Vec<_>>(),
            "img_per_s": img_per_s,
            "wall_seconds": wall,
            "bytes_read": stats.bytes_read,
            "stage_ms_per_image": {
                "read": per_image_ms(stats.read),
                "parse": per_image_ms(stats.parse),
                "decode": per_image_ms(stats.decode),
                "augment": per_image_ms(stats.augment),
                "wait": per_image_ms(stats.wait),
            },
            "errors": errors,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }

    println!(
        "gpufeed bench  {}  ({n_files} files, {classes} classes)\n  device {backend}, batch {}, \
         {} readers, {workers} workers, {}x{} {} {:?}, {} transform{}, decoder {:?}",
        data.display(),
        args.batch,
        args.readers,
        args.size,
        args.size,
        args.dtype.name(),
        args.layout,
        args.transform,
        if args.antialias { " (antialias)" } else { "" },
        args.cpu_decoder,
    );
    println!(
        "\n  {:>5}  {:>8}  {:>8}  {:>9}  {:>9}",
        "epoch", "images", "batches", "seconds", "img/s"
    );
    for (i, e) in epochs.iter().enumerate() {
        let note = if i == 0 && epochs.len() > 1 {
            "  (warm-up)"
        } else {
            ""
        };
        println!(
            "  {:>5}  {:>8}  {:>8}  {:>9.3}  {:>9.1}{note}",
            i,
            e.images,
            e.batches,
            e.seconds,
            e.images as f64 / e.seconds.max(1e-9)
        );
    }
    println!("\n  throughput (steady state): {img_per_s:.1} img/s");
    println!(
        "\n  {:<9}  {:>10}  {:>12}",
        "stage", "total s", "ms / image"
    );
    for (name, d) in [
        ("read", stats.read),
        ("parse", stats.parse),
        ("decode", stats.decode),
        ("augment", stats.augment),
        ("wait", stats.wait),
    ] {
        println!(
            "  {name:<9}  {:>10.3}  {:>12.3}",
            d.as_secs_f64(),
            per_image_ms(d)
        );
    }
    println!("  (read/parse/decode/augment are summed over threads; wait is the consumer blocked)");
    if memory.slots > 0 {
        println!(
            "\n  device stage: {} launches, {} samples augmented on the CPU (crop over the \
             staging), pools {} MiB pinned + {} MiB device in {} slots",
            stats.launches,
            stats.host_augmented,
            memory.pinned_bytes >> 20,
            memory.device_bytes >> 20,
            memory.slots
        );
    }
    let errs: Vec<String> = ErrorKind::ALL
        .iter()
        .filter(|k| stats.errors_of(**k) > 0)
        .map(|k| format!("{} {}", stats.errors_of(*k), k.name()))
        .collect();
    println!(
        "\n  {} MB read, errors: {}",
        stats.bytes_read / 1_000_000,
        if errs.is_empty() {
            "none".to_string()
        } else {
            errs.join(", ")
        }
    );
    Ok(())
}
