//! `gpufeed decode-bench`: nvJPEG decoding alone on a GPU (issue 5), per
//! hardware-engine share, with the CPU time it costs per image.

use std::time::Instant;

use gpufeed::stage::DecodeBench;

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
    /// Decode progressive files with gpufeed's scan kernels, as the
    /// pipeline's `progressive_kernels` (`GPUFEED_PROGRESSIVE_GPU=1`).
    #[arg(long)]
    progressive_kernels: bool,
    /// Decode the CUDA share's sequential files with gpufeed's scan
    /// kernels, as the pipeline's `sequential_kernels`
    /// (`GPUFEED_SEQUENTIAL_GPU=1`): the kernel route's decode-only rate.
    #[arg(long)]
    sequential_kernels: bool,
    /// With `--sequential-kernels`, sequential images of more pixels skip
    /// the kernels (to the engine where it takes them, whatever the share,
    /// else nvJPEG's CUDA route), as the pipeline's
    /// `sequential_kernels_max_pixels`. Default: no limit, or
    /// `GPUFEED_SEQUENTIAL_MAX_PIXELS` as in a pipeline.
    #[arg(long, value_name = "PIXELS")]
    sequential_max_pixels: Option<u64>,
    /// Print one JSON array.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let files = super::read_images(args.common.data)?;
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
    let max_pixels = args
        .sequential_max_pixels
        .or_else(|| {
            let v = std::env::var("GPUFEED_SEQUENTIAL_MAX_PIXELS").ok()?;
            v.parse().ok()
        })
        .unwrap_or(u64::MAX);
    let mut rows = Vec::new();
    let runs = args
        .hardware_share
        .iter()
        .flat_map(|&s| args.engine_calls.iter().map(move |&c| (s, c as usize)));
    for (share, calls) in runs {
        let threads = args
            .threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let fixed = match share {
            ShareArg::Fixed(s) => Some(s),
            ShareArg::Auto => None,
        };
        let mut b = DecodeBench::new(
            args.common.device,
            &files,
            args.common.batch,
            fixed,
            threads,
            calls,
        )?
        .sequential_kernels_max_pixels(max_pixels)
        .with_kernels(args.progressive_kernels, args.sequential_kernels);
        for _ in 0..2 {
            b.run_batch()?;
        }
        let (warm, warm_kernels) = (b.routes(), b.decoded_by_kernels());
        let engine0 = b.engine_time();
        let (cpu0, t0) = (super::procstat::cpu_seconds(), Instant::now());
        let mut pixels = 0;
        for _ in 0..args.iters {
            pixels += b.run_batch()?;
        }
        let secs = t0.elapsed().as_secs_f64();
        let cpu = super::procstat::cpu_seconds() - cpu0;
        let images = (args.common.batch * args.iters) as f64;
        let (img_s, mp_s, cpu_ms) = (
            images / secs,
            pixels as f64 / secs / 1e6,
            cpu * 1e3 / images,
        );
        let r = b.routes();
        let (hw, cuda, cpu_fb) = (r.0 - warm.0, r.1 - warm.1, r.2 - warm.2);
        let kernels = b.decoded_by_kernels() - warm_kernels;
        let engine1 = b.engine_time();
        let ms = |k: usize| (engine1[k].1 - engine0[k].1).as_secs_f64() * 1e3;
        let (inits, init_ms, call_ms) = (engine1[0].0 - engine0[0].0, ms(0), ms(1));
        let row = serde_json::json!({
            "backend": b.describe(), "hardware_share": share.to_string(),
            "share_at_end": b.share(), "batch": args.common.batch,
            "threads": threads, "engine_calls": calls,
            "images": images, "seconds": secs, "images_per_s": img_s,
            "megapixels_per_s": mp_s, "cpu_ms_per_image": cpu_ms,
            "decoded_hardware": hw, "decoded_cuda": cuda, "decoded_cpu_fallback": cpu_fb,
            "decoded_kernels": kernels,
            "sequential_max_pixels": (max_pixels < u64::MAX).then_some(max_pixels),
            "engine_inits": inits, "engine_init_ms": init_ms, "engine_call_ms": call_ms,
            "hardware_decoder": engine,
        });
        if !args.json {
            println!(
                "{}: share {share}{}, {calls} engine call(s) per batch, {threads} threads: {img_s:.0} img/s, {mp_s:.0} MP/s, {cpu_ms:.3} CPU-ms per image \
                 (hardware {hw}, CUDA {cuda}, scan kernels {kernels}, CPU {cpu_fb}; engine state re-initialized {inits} \
                 times, {init_ms:.1} ms; in engine calls {call_ms:.1} ms)",
                b.describe(),
                match share {
                    ShareArg::Auto => format!(" (at {:.3} at the end)", b.share()),
                    ShareArg::Fixed(_) => String::new(),
                },
            );
        }
        rows.push(row);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    }
    Ok(())
}
