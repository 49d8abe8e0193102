//! `gpufeed kernel-bench`: the fused augment kernel's bandwidth on a GPU.

use anyhow::Context;
use gpufeed::decode::{CpuDecoder, Image};
use gpufeed::jpeg::{DEFAULT_MAX_PIXELS, parse_header};

#[derive(clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    common: super::DeviceBench,
    /// Output side length.
    #[arg(long, default_value_t = 224)]
    size: usize,
    /// Timed launches.
    #[arg(long, default_value_t = 50)]
    iters: usize,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Time a whole recipe's device work per batch instead (every view
    /// and photometric op): imagenet, simclr, byol or dino.
    #[arg(long, value_name = "NAME", value_parser = clap::builder::PossibleValuesParser::new(gpufeed::augment::Recipe::NAMES))]
    recipe: Option<String>,
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let data = super::data_or_sample(args.common.data)?;
    let source = gpufeed::Source::recursive(&data)?;
    let mut dec = CpuDecoder::default();
    let mut images = Vec::new();
    for s in source.samples().iter().take(args.common.batch) {
        let bytes = std::fs::read(&s.path).with_context(|| s.path.display().to_string())?;
        let mut img = Image::default();
        let ok =
            parse_header(&bytes, DEFAULT_MAX_PIXELS).and_then(|h| dec.decode(&bytes, &h, &mut img));
        if ok.is_ok() {
            images.push(img);
        }
    }
    if let Some(name) = &args.recipe {
        let recipe = gpufeed::augment::Recipe::by_name(name).context("unknown recipe")?;
        let r = gpufeed::cuda::bench::recipe_time(
            args.common.device,
            &images,
            args.common.batch,
            &recipe,
            args.iters,
        )?;
        // The time one batch may take at 25,000 img/s (issue 16's target).
        let budget_ms = r.batch as f64 / 25_000.0 * 1e3;
        let share = r.batch_ms / budget_ms;
        if args.json {
            let v = serde_json::json!({
                "device": r.device, "recipe": name, "batch": r.batch, "draws": r.draws,
                "photo_draws": r.photo_draws, "launches": r.launches, "batch_ms": r.batch_ms,
                "budget_ms_at_25k": budget_ms, "share_of_budget": share,
                "distinct_images": images.len(),
            });
            println!("{}", serde_json::to_string_pretty(&v)?);
        } else {
            println!(
                "{}: recipe {name}, batch {} ({} draws, {} photometric, {} launches), f16 NCHW\n  \
                 {:.3} ms/batch = {:.0} % of the {:.2} ms a batch may take at 25,000 img/s",
                r.device,
                r.batch,
                r.draws,
                r.photo_draws,
                r.launches,
                r.batch_ms,
                share * 100.0,
                budget_ms
            );
        }
        return Ok(());
    }
    let r = gpufeed::cuda::bench::kernel_bandwidth(
        args.common.device,
        &images,
        args.common.batch,
        args.size,
        args.iters,
    )?;
    let ratio = r.kernel_gbps / r.copy_gbps;
    if args.json {
        let v = serde_json::json!({
            "device": r.device, "arch": r.arch, "batch": r.batch, "size": args.size,
            "dtype": "f16", "layout": "nchw", "distinct_images": images.len(),
            "kernel_ms": r.kernel_ms, "bytes_per_launch": r.bytes_per_launch,
            "kernel_gbps": r.kernel_gbps, "copy_gbps": r.copy_gbps,
            "fraction_of_copy": ratio, "images_per_s": r.images_per_s,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "{} ({}): batch {} x {}x{} f16 NCHW from {} distinct images\n  \
             kernel {:.3} ms/launch, {:.0} img/s, {:.1} GB/s ({} B/launch)\n  \
             device copy {:.1} GB/s -> kernel at {:.0} % of copy bandwidth",
            r.device,
            r.arch,
            r.batch,
            args.size,
            args.size,
            images.len(),
            r.kernel_ms,
            r.images_per_s,
            r.kernel_gbps,
            r.bytes_per_launch,
            r.copy_gbps,
            ratio * 100.0
        );
    }
    Ok(())
}
