//! What `gpufeed bench` prints and writes: the report of one run, the
//! sweep's JSON and CSV rows.

use std::time::Duration;

use anyhow::Context;
use gpufeed::error::ErrorKind;
use serde_json::{Value, json};

use super::{Args, BUILD, Run, interrupted};

/// CPU milliseconds per image by thread kind, as a JSON object.
fn by_kind_json(r: &Run) -> Value {
    Value::Object(
        r.cpu_ms_by_kind
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect(),
    )
}

pub(super) fn row_json(r: &Run) -> Value {
    json!({
        "config": r.label,
        "device": r.backend,
        "img_per_s": r.img_per_s,
        "build_ms": r.build_s * 1e3,
        "first_batch_ms": r.first_batch_s.map(|s| s * 1e3),
        "mb_per_s": r.mb_per_s,
        "requests_per_s": r.requests_per_s,
        "cpu_s_per_1000_images": r.cpu_s_per_1000,
        "cpu_ms_per_image_by_thread": by_kind_json(r),
        "peak_rss_mib": r.peak_rss_mib,
        "pinned_mib": r.memory.pinned_bytes as f64 / (1 << 20) as f64,
        "device_mib": r.memory.device_bytes as f64 / (1 << 20) as f64,
        "decoder_peak_mib": r.memory.decoder_peak_bytes as f64 / (1 << 20) as f64,
        "decoder_allocations_steady": r.steady_allocations,
        "decoder_pinned_wait_s": r.stats.decoder_pinned_wait.as_secs_f64(),
        "read_buffer_mib": r.memory.read_buffer_bytes as f64 / (1 << 20) as f64,
        "worker_scratch_mib": r.memory.worker_scratch_bytes as f64 / (1 << 20) as f64,
        "queue_depth_batches": r.queue_depth_batches,
        "wait_fraction": r.wait_fraction,
        "limit": r.limit,
        "decoded_hardware": r.stats.decoded_hardware,
        "decoded_cuda": r.stats.decoded_cuda,
        "decoded_cuda_batch_thread": r.stats.decoded_cuda_batch_thread,
        "decoded_cpu_fallback": r.stats.decoded_cpu_fallback,
        "decoded_cpu_window": r.stats.decoded_cpu_window,
        "decoded_progressive": r.stats.decoded_progressive,
    })
}

pub(super) fn write_out(prefix: &std::path::Path, rows: &[Value]) -> anyhow::Result<()> {
    let json_path = prefix.with_extension("json");
    std::fs::write(&json_path, serde_json::to_string_pretty(rows)?)
        .with_context(|| format!("writing {}", json_path.display()))?;
    let keys = [
        "config",
        "device",
        "img_per_s",
        "mb_per_s",
        "requests_per_s",
        "cpu_s_per_1000_images",
        "peak_rss_mib",
        "pinned_mib",
        "device_mib",
        "queue_depth_batches",
        "wait_fraction",
        "limit",
    ];
    let mut csv = keys.join(",") + "\n";
    for r in rows {
        let cells: Vec<String> = keys
            .iter()
            .map(|k| match &r[*k] {
                Value::String(s) => format!("\"{}\"", s.replace('"', "\"\"")),
                v => v.to_string(),
            })
            .collect();
        csv += &(cells.join(",") + "\n");
    }
    let csv_path = prefix.with_extension("csv");
    std::fs::write(&csv_path, csv).with_context(|| format!("writing {}", csv_path.display()))?;
    eprintln!("wrote {} and {}", json_path.display(), csv_path.display());
    Ok(())
}

pub(super) fn report_one(args: &Args, data: &std::path::Path, r: &Run) -> anyhow::Result<()> {
    let (n_files, classes) = (r.files, r.classes);
    let stats = &r.stats;
    let per_image_ms = |d: Duration| d.as_secs_f64() * 1e3 / stats.samples.max(1) as f64;
    let workers = r.workers;
    let wall: f64 = r.epochs.iter().map(|e| e.seconds).sum();
    let backend = &r.backend;
    let memory = r.memory;
    let img_per_s = r.img_per_s;
    let epochs = &r.epochs;
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
            "decoder_pinned_bytes": memory.decoder_pinned_bytes,
            "decoder_device_bytes": memory.decoder_device_bytes,
            "decoder_peak_bytes": memory.decoder_peak_bytes,
            "launches": stats.launches,
            "host_augmented": stats.host_augmented,
            "decoded_hardware": stats.decoded_hardware,
            "decoded_cuda": stats.decoded_cuda,
            "decoded_cpu_fallback": stats.decoded_cpu_fallback,
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
            "requests": stats.requests,
            "retries": stats.retries,
            "requests_per_s": r.requests_per_s,
            "stage_ms_per_image": {
                "read": per_image_ms(stats.read),
                "parse": per_image_ms(stats.parse),
                "decode": per_image_ms(stats.decode),
                "augment": per_image_ms(stats.augment),
                "wait": per_image_ms(stats.wait),
            },
            "errors": errors,
            "mb_per_s": r.mb_per_s,
            "cpu_s_per_1000_images": r.cpu_s_per_1000,
            "cpu_ms_per_image_by_thread": by_kind_json(r),
            "peak_rss_mib": r.peak_rss_mib,
            "queue_depth_batches": r.queue_depth_batches,
            "wait_fraction": r.wait_fraction,
            "limit": r.limit,
            "consumer_ms": args.consumer_ms,
            "build": BUILD,
            "interrupted": interrupted(),
        });
        // Past what one json! call can expand.
        let mut out = out;
        out["build_ms"] = json!(r.build_s * 1e3);
        out["first_batch_ms"] = json!(r.first_batch_s.map(|s| s * 1e3));
        out["recipe"] = json!(args.recipe);
        out["mixup"] = json!(args.mixup);
        out["read_buffer_bytes"] = json!(memory.read_buffer_bytes);
        out["read_buffer_pinned_bytes"] = json!(memory.read_buffer_pinned_bytes);
        out["worker_scratch_bytes"] = json!(memory.worker_scratch_bytes);
        out["kernel_device_bytes"] = json!(memory.kernel_device_bytes);
        out["decoded_cpu_window"] = json!(stats.decoded_cpu_window);
        out["decoded_progressive"] = json!(stats.decoded_progressive);
        out["decoded_cuda_batch_thread"] = json!(stats.decoded_cuda_batch_thread);
        // Over the whole run, warm-up included.
        out["engine_busy_s"] = json!(stats.engine_busy.as_secs_f64());
        out["progressive_busy_s"] = json!(stats.progressive_busy.as_secs_f64());
        out["decoder_allocations"] = json!(stats.decoder_allocations);
        out["decoder_pinned_wait_s"] = json!(stats.decoder_pinned_wait.as_secs_f64());
        out["decoder_allocations_steady"] = json!(r.steady_allocations);
        out["lanes_stopped"] = json!(stats.lanes_stopped);
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }

    println!(
        "gpufeed bench  {}  ({n_files} files, {classes} classes; {} build{})\n  device {backend}, \
         batch {}, {} readers, {workers} workers, {}x{} {} {:?}, {} transform{}, decoder {:?}",
        data.display(),
        BUILD,
        if interrupted() {
            "; interrupted, partial"
        } else {
            ""
        },
        args.batch,
        args.readers,
        args.size,
        args.size,
        args.dtype.name(),
        args.layout,
        args.transform,
        if args.antialias {
            " (antialias)"
        } else {
            " (no antialias)"
        },
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
    println!(
        "\n  throughput (steady state): {img_per_s:.1} img/s, {:.1} MB/s read, {:.2} CPU-s per \
         1000 images, peak RSS {:.0} MiB\n  consumer waited {:.0} % of the time; queue {:.2} \
         batches; limit: {}",
        r.mb_per_s,
        r.cpu_s_per_1000,
        r.peak_rss_mib,
        r.wait_fraction * 100.0,
        r.queue_depth_batches,
        r.limit
    );
    if let Some(first) = r.first_batch_s {
        println!(
            "  time to first batch: {:.0} ms (build {:.0} ms, then the first batch {:.0} ms)",
            (r.build_s + first) * 1e3,
            r.build_s * 1e3,
            first * 1e3
        );
    }
    let kinds: Vec<String> = r
        .cpu_ms_by_kind
        .iter()
        .map(|(k, v)| format!("{k} {v:.3}"))
        .collect();
    println!("  CPU ms per image by thread: {}", kinds.join(", "));
    if stats.requests > 0 {
        println!(
            "  object storage: {:.1} requests/s, {} requests, {} retries",
            r.requests_per_s, stats.requests, stats.retries
        );
    }
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
    if stats.decoded_cpu_window > 0 {
        println!(
            "  {} JPEGs decoded on the CPU as the window their crops read",
            stats.decoded_cpu_window
        );
    }
    println!(
        "\n  host buffers at the end: {} MiB read buffers ({} MiB of them page-locked), \
         {} MiB CPU workers' scratch",
        memory.read_buffer_bytes >> 20,
        memory.read_buffer_pinned_bytes >> 20,
        memory.worker_scratch_bytes >> 20
    );
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
        let nvjpeg = stats.decoded_hardware + stats.decoded_cuda;
        if nvjpeg + stats.decoded_cpu_fallback > 0 {
            println!(
                "  nvJPEG route: {} on the engine, {} with CUDA ({} of them parsed and \
                 Huffman-decoded on the batch thread; {:.1} % on the engine), {} on the CPU \
                 after nvJPEG refused them",
                stats.decoded_hardware,
                stats.decoded_cuda,
                stats.decoded_cuda_batch_thread,
                100.0 * stats.decoded_hardware as f64 / nvjpeg.max(1) as f64,
                stats.decoded_cpu_fallback
            );
        }
        if stats.decoded_progressive > 0 {
            println!(
                "  progressive lanes: {} progressive JPEGs decoded by gpufeed's kernels",
                stats.decoded_progressive
            );
        }
        if stats.lanes_stopped > 0 {
            println!(
                "  {} decode lanes stopped after a panic (a gpufeed bug: please report it); \
                 their files were decoded on the other routes",
                stats.lanes_stopped
            );
        }
        if !stats.decoder_pinned_wait.is_zero() {
            println!(
                "  CUDA route host phases waited {:.3} ms per image (over the run) for their \
                 decoder's last copy to the device",
                stats.decoder_pinned_wait.as_secs_f64() * 1e3 / stats.decoded_cuda.max(1) as f64
            );
        }
        if memory.decoder_peak_bytes > 0 {
            println!(
                "  decoders (nvJPEG): {} MiB pinned + {} MiB device at the end, peak {} MiB; \
                 {} buffers allocated, {} of them in the steady epochs",
                memory.decoder_pinned_bytes >> 20,
                memory.decoder_device_bytes >> 20,
                memory.decoder_peak_bytes >> 20,
                stats.decoder_allocations,
                r.steady_allocations
            );
        }
        if memory.kernel_device_bytes > 0 {
            println!(
                "  of which the scan kernels' buffers for their files: {} MiB device",
                memory.kernel_device_bytes >> 20
            );
        }
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
