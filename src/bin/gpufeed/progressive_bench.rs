//! `gpufeed progressive-bench`: progressive JPEGs decoded by gpufeed's own
//! kernels on a GPU (issue 16: the files neither the hardware engine nor
//! nvJPEG's GPU Huffman takes), one launch of each kernel per batch, with
//! the CPU time planning costs per image. The pipeline uses them under
//! `GPUFEED_PROGRESSIVE_GPU=1` (`src/stage/cuda/prog_route.rs`). With
//! `--sequential`, the baseline and extended sequential files instead:
//! whether the same kernels could take the CUDA route's share off the
//! workers' Huffman decoding (issue 16, item 3c; `GPUFEED_SEQUENTIAL_GPU=1`),
//! timed unsplit and split into subsequences of several sizes.

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Folder of images (searched recursively); the progressive JPEGs among
    /// them are decoded, the others ignored. Device: CUDA device 0.
    data: Option<std::path::PathBuf>,
    /// Images per batch, drawn in turn from the progressive files.
    #[arg(long, default_value_t = 256)]
    batch: usize,
    /// Timed batches (after one warm-up).
    #[arg(long, default_value_t = 20)]
    iters: usize,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Decode the sequential (SOF0, SOF1) files instead of the progressive
    /// ones.
    #[arg(long)]
    sequential: bool,
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let files = super::read_images(args.data)?;
    // Planning is the route's only CPU work: measured here, GPU or not.
    let (taken, plan_ms) = gpufeed::cuda::prog_bench::plan_cost(&files, args.sequential);
    if !args.json {
        println!(
            "{taken} of {} files taken; planning: {plan_ms:.4} CPU-ms per file taken",
            files.len()
        );
    }
    let r = gpufeed::cuda::prog_bench::bench(
        &files,
        args.batch.max(1),
        args.iters.max(1),
        args.sequential,
    )?;
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "files": r.files, "taken": r.taken, "plan_ms_per_file_taken": plan_ms,
                "batch": r.batch, "iters": r.iters, "scans_ms": r.scans_ms,
                "idct_ms": r.idct_ms, "color_ms": r.color_ms, "img_per_s": r.img_per_s,
                "faults": r.faults, "sequential": args.sequential,
                "pipeline": r.pipeline, "sub_bytes": r.sub_bytes,
                "scans_ms_alone": r.scans_ms_alone,
            })
        );
    } else {
        let alone: Vec<String> = r
            .scans_ms_alone
            .iter()
            .map(|&(piped, split, ms)| match (split, piped) {
                (0, true) => format!("{ms:.2} ms with scans in a pipeline"),
                (0, false) => format!("{ms:.2} ms with scans in turn"),
                _ => format!("{ms:.2} ms split by {split} bytes"),
            })
            .collect();
        println!(
            "batch {}: scans {:.2} ms (scans in a pipeline: {}, split by {} bytes; alone: {}), \
             IDCT {:.2} ms, colour {:.2} ms (medians of {}): {:.0} img/s; {} faulted",
            r.batch,
            r.scans_ms,
            r.pipeline,
            r.sub_bytes,
            alone.join(", "),
            r.idct_ms,
            r.color_ms,
            r.iters,
            r.img_per_s,
            r.faults
        );
    }
    Ok(())
}
