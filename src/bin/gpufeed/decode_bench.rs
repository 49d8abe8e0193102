//! `gpufeed decode-bench`: nvJPEG decoding alone on a GPU (issue 5), per
//! hardware-engine share, with the CPU time it costs per image.

use std::time::Instant;

use gpufeed::stage::{DECODE_BENCH_PHASES, DecodeBench};

use super::ShareArg;

#[derive(clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    common: super::DeviceBench,
    /// Timed batches per share (after two warm-up batches).
    #[arg(long, default_value_t = 20)]
    iters: usize,
    /// Shares of engine-supported images sent to the hardware engine, one
    /// measurement each; `auto` steers it from what each route costs (the
    /// pipeline's `hardware_decode_share_auto`), starting at 1.
    #[arg(long, value_delimiter = ',', value_name = "SHARE|auto",
          default_values_t = [ShareArg::Fixed(0.0), ShareArg::Fixed(0.5), ShareArg::Auto, ShareArg::Fixed(1.0)])]
    hardware_share: Vec<ShareArg>,
    /// Threads running the CUDA route's host phases, as the pipeline's
    /// workers do (0: all on the decoding thread). Default: one per core.
    #[arg(long)]
    threads: Option<usize>,
    /// Engine calls per batch, one measurement each: the engine's share of
    /// a batch split into this many calls, each on a stream and engine
    /// state of its own, all in flight at once (issue 16, item 2).
    #[arg(long, value_delimiter = ',', default_values_t = [1u64],
          value_parser = clap::value_parser!(u64).range(1..=64))]
    engine_calls: Vec<u64>,
    /// Batches decoding at once, one measurement each: this many
    /// benchmarks, each on a thread of its own with its own arena, engine
    /// and kernel lanes and `threads / N` host-phase threads, timed
    /// together (issue 16: the routes' ceiling with several batches in
    /// flight, as the pipeline keeps them; one batch at a time ran 13,651
    /// img/s where the pipeline ran 46,496: H200, aeb05d5, 2026-11-30).
    #[arg(long, value_delimiter = ',', default_values_t = [1u64],
          value_parser = clap::value_parser!(u64).range(1..=16))]
    in_flight: Vec<u64>,
    /// Decode progressive files with gpufeed's scan kernels, as the
    /// pipeline's `progressive_kernels`. Default: the pipeline's (off, or
    /// `GPUFEED_PROGRESSIVE_GPU=1`).
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          value_name = "BOOL")]
    progressive_kernels: Option<bool>,
    /// Decode the CUDA share's sequential files with gpufeed's scan
    /// kernels, as the pipeline's `sequential_kernels`: the kernel
    /// route's decode-only rate. Default: the pipeline's (on, or off where
    /// `GPUFEED_SEQUENTIAL_GPU=0`); `--sequential-kernels=false`:
    /// nvJPEG's CUDA route alone.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          value_name = "BOOL")]
    sequential_kernels: Option<bool>,
    /// With `--sequential-kernels`, sequential images of more pixels skip
    /// the kernels (to the engine where it takes them, whatever the share,
    /// else nvJPEG's CUDA route), as the pipeline's
    /// `sequential_kernels_max_pixels`. Default: no limit, or
    /// `GPUFEED_SEQUENTIAL_MAX_PIXELS` as in a pipeline.
    #[arg(long, value_name = "PIXELS")]
    sequential_max_pixels: Option<u64>,
    /// The engine lanes in a CUDA context of their own, their images
    /// copied into the arena after each call (the pipeline's hidden
    /// `engine_context`; issue 16, item 3).
    #[arg(long)]
    engine_context: bool,
    /// Print one JSON array.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let files = super::read_images(args.common.data)?;
    // No device is every setting's failure: said once.
    gpufeed::cuda::devices()?;
    // The engine's width, as the library reports it (issue 16, item 2).
    let engine = match gpufeed::decode::nvjpeg::hardware_decoder_info() {
        Ok((engines, cores)) => {
            if !args.json {
                println!("hardware JPEG decoder: {engines} engines x {cores} cores");
            }
            serde_json::json!({"engines": engines, "cores_per_engine": cores})
        }
        Err(e) => {
            if !args.json {
                println!("hardware JPEG decoder: none ({e})");
            }
            serde_json::Value::Null
        }
    };
    let env = |k: &str| std::env::var(k).ok();
    let max_pixels = args
        .sequential_max_pixels
        .or_else(|| env("GPUFEED_SEQUENTIAL_MAX_PIXELS")?.parse().ok())
        .unwrap_or(u64::MAX);
    // The pipeline's defaults (`PipelineBuilder::sequential_kernels`,
    // `progressive_kernels`), so that a plain run measures its route.
    let kernels = Kernels {
        progressive: args
            .progressive_kernels
            .unwrap_or(env("GPUFEED_PROGRESSIVE_GPU").as_deref() == Some("1")),
        sequential: args
            .sequential_kernels
            .unwrap_or(env("GPUFEED_SEQUENTIAL_GPU").as_deref() != Some("0")),
        max_pixels,
    };
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let (mut rows, mut failed) = (Vec::new(), None);
    let mut runs = Vec::new();
    for &share in &args.hardware_share {
        for &calls in &args.engine_calls {
            for &k in &args.in_flight {
                runs.push((share, calls as usize, k as usize));
            }
        }
    }
    for (share, calls, in_flight) in runs {
        let fixed = match share {
            ShareArg::Fixed(s) => Some(s),
            ShareArg::Auto => None,
        };
        // The pipeline's workers are one pool for every batch in flight.
        let each = if threads == 0 {
            0
        } else {
            (threads / in_flight).max(1)
        };
        let setting = Setting {
            device: args.common.device,
            engine_context: args.engine_context,
            batch: args.common.batch,
            share: fixed,
            threads: each,
            calls,
            iters: args.iters,
            kernels,
        };
        // A setting the device cannot hold (more engine states than
        // nvJPEG makes, say) fails alone: the others are still measured.
        let m = match measure(&files, &setting, in_flight) {
            Ok(m) => m,
            Err(e) => {
                eprintln!("share {share}, {calls} engine call(s), {in_flight} in flight: {e:#}");
                failed.get_or_insert(e);
                continue;
            }
        };
        let images = (args.common.batch * args.iters * in_flight) as f64;
        let (img_s, mp_s, cpu_ms) = (
            images / m.seconds,
            m.pixels as f64 / m.seconds / 1e6,
            m.cpu_seconds * 1e3 / images,
        );
        let [hw, cuda, cpu_fb, by_kernels] = m.routes;
        let ms = |k: usize| m.engine[k].1.as_secs_f64() * 1e3;
        let (inits, init_ms, call_ms) = (m.engine[0].0, ms(0), ms(1));
        // Where a batch's time went on its thread: ms per batch by part.
        let per_batch: Vec<f64> = m
            .phases
            .iter()
            .map(|t| t.as_secs_f64() * 1e3 / m.batches.max(1) as f64)
            .collect();
        let parts: serde_json::Map<String, serde_json::Value> = DECODE_BENCH_PHASES
            .iter()
            .zip(&per_batch)
            .map(|(name, &ms)| (name.to_string(), ms.into()))
            .collect();
        let said = DECODE_BENCH_PHASES
            .iter()
            .zip(&per_batch)
            .map(|(name, ms)| format!("{name} {ms:.1}"))
            .collect::<Vec<_>>()
            .join(", ");
        let row = serde_json::json!({
            "backend": m.describe, "hardware_share": share.to_string(),
            "share_at_end": m.share_at_end, "batch": args.common.batch,
            "threads": threads, "threads_per_batch": each, "in_flight": in_flight,
            "engine_calls": calls, "engine_context": args.engine_context,
            "images": images, "seconds": m.seconds, "images_per_s": img_s,
            "megapixels_per_s": mp_s, "cpu_ms_per_image": cpu_ms,
            "decoded_hardware": hw, "decoded_cuda": cuda, "decoded_cpu_fallback": cpu_fb,
            "decoded_kernels": by_kernels,
            "progressive_kernels": kernels.progressive,
            "sequential_kernels": kernels.sequential,
            "sequential_max_pixels": (max_pixels < u64::MAX).then_some(max_pixels),
            "engine_inits": inits, "engine_init_ms": init_ms, "engine_call_ms": call_ms,
            "hardware_decoder": engine, "ms_per_batch_by_part": parts,
        });
        if !args.json {
            println!(
                "{}: share {share}{}, {calls} engine call(s) per batch, {in_flight} batch(es) in flight, \
                 {threads} threads: {img_s:.0} img/s, {mp_s:.0} MP/s, {cpu_ms:.3} CPU-ms per image \
                 (hardware {hw}, CUDA {cuda}, scan kernels {by_kernels}, CPU {cpu_fb}; engine state re-initialized {inits} \
                 times, {init_ms:.1} ms; in engine calls {call_ms:.1} ms); ms per batch: {said}",
                m.describe,
                match share {
                    ShareArg::Auto => format!(" (at {:.3} at the end)", m.share_at_end),
                    ShareArg::Fixed(_) => String::new(),
                },
            );
        }
        rows.push(row);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    }
    failed.map_or(Ok(()), Err)
}

/// Which files the scan kernels take, as the pipeline's settings.
#[derive(Clone, Copy)]
struct Kernels {
    progressive: bool,
    sequential: bool,
    max_pixels: u64,
}

/// One benchmark's settings.
struct Setting {
    device: usize,
    engine_context: bool,
    batch: usize,
    share: Option<f32>,
    threads: usize,
    calls: usize,
    iters: usize,
    kernels: Kernels,
}

/// What the timed batches of one measurement did, summed over the
/// benchmarks in flight.
struct Measured {
    describe: String,
    seconds: f64,
    cpu_seconds: f64,
    pixels: u64,
    /// Images by route: engine, CUDA, CPU, scan kernels.
    routes: [u64; 4],
    /// Engine state (re)initializations and engine calls: count, time.
    engine: [(u64, std::time::Duration); 2],
    /// The engine's share at the end, averaged over the benchmarks.
    share_at_end: f32,
    /// The benchmarks' threads' wall time in each part of a batch
    /// (`DECODE_BENCH_PHASES`), summed over them.
    phases: [std::time::Duration; 5],
    /// Timed batches, summed over the benchmarks.
    batches: usize,
}

impl Measured {
    /// One of `n` benchmarks' timed batches added in.
    fn add(&mut self, part: Measured, n: usize) {
        self.describe = part.describe;
        self.pixels += part.pixels;
        for (sum, k) in self.routes.iter_mut().zip(part.routes) {
            *sum += k;
        }
        for (sum, (k, t)) in self.engine.iter_mut().zip(part.engine) {
            sum.0 += k;
            sum.1 += t;
        }
        self.share_at_end += part.share_at_end / n as f32;
        for (sum, t) in self.phases.iter_mut().zip(part.phases) {
            *sum += t;
        }
        self.batches += part.batches;
    }
}

/// `in_flight` benchmarks of `setting`, each on a thread of its own: two
/// warm-up batches each, then `iters` timed batches each, all started at
/// once and timed until the last ends, with the process's CPU time.
fn measure(files: &[Vec<u8>], setting: &Setting, in_flight: usize) -> anyhow::Result<Measured> {
    let start = std::sync::Barrier::new(in_flight + 1);
    let (parts, seconds, cpu_seconds) = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..in_flight)
            .map(|_| sc.spawn(|| one(files, setting, &start)))
            .collect();
        start.wait();
        let (cpu0, t0) = (super::procstat::cpu_seconds(), Instant::now());
        let parts: Vec<anyhow::Result<Measured>> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a benchmark thread panicked")))
            })
            .collect();
        let cpu = super::procstat::cpu_seconds() - cpu0;
        (parts, t0.elapsed().as_secs_f64(), cpu)
    });
    let mut m = Measured {
        describe: String::new(),
        seconds,
        cpu_seconds,
        pixels: 0,
        routes: [0; 4],
        engine: Default::default(),
        share_at_end: 0.0,
        phases: Default::default(),
        batches: 0,
    };
    for part in parts {
        m.add(part?, in_flight);
    }
    Ok(m)
}

/// One benchmark of [`measure`]: built and warmed up, then its timed
/// batches once `start` lets every benchmark go (their time is
/// `measure`'s). It waits at `start` whatever happens before, so that the
/// others are not kept waiting.
fn one(files: &[Vec<u8>], s: &Setting, start: &std::sync::Barrier) -> anyhow::Result<Measured> {
    let made = DecodeBench::new(
        s.device,
        files,
        s.batch,
        s.share,
        s.threads,
        s.calls,
        s.engine_context,
    );
    let warmed = made
        .map(|b| {
            b.sequential_kernels_max_pixels(s.kernels.max_pixels)
                .with_kernels(s.kernels.progressive, s.kernels.sequential)
        })
        .and_then(|mut b| {
            for _ in 0..2 {
                b.run_batch()?;
            }
            Ok(b)
        });
    start.wait();
    let mut b = warmed?;
    let routes = |b: &DecodeBench| {
        let (hw, cuda, cpu) = b.routes();
        [hw, cuda, cpu, b.decoded_by_kernels()]
    };
    let (routes0, engine0, phases0) = (routes(&b), b.engine_time(), b.phases());
    let mut pixels = 0;
    for _ in 0..s.iters {
        pixels += b.run_batch()?;
    }
    let (routes1, engine1, phases1) = (routes(&b), b.engine_time(), b.phases());
    let routes = std::array::from_fn(|k| routes1[k] - routes0[k]);
    let engine =
        std::array::from_fn(|k| (engine1[k].0 - engine0[k].0, engine1[k].1 - engine0[k].1));
    Ok(Measured {
        describe: b.describe(),
        seconds: 0.0,
        cpu_seconds: 0.0,
        pixels,
        routes,
        engine,
        share_at_end: b.share(),
        phases: std::array::from_fn(|k| phases1[k] - phases0[k]),
        batches: s.iters,
    })
}
