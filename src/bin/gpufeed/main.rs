//! `gpufeed`: benchmark the pipeline on a dataset, or check a dataset's files.

mod bench;
mod decode_bench;
mod doctor;
mod kernel_bench;
mod pack;
mod preview;
mod procstat;
mod progressive_bench;
mod scan;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use gpufeed::Device;

#[derive(Parser)]
#[command(
    name = "gpufeed",
    version,
    about = "Image batches for GPU training, fast"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the pipeline over a dataset and report throughput and stage times.
    Bench(bench::Args),
    /// Measure the fused augment kernel's bandwidth on a CUDA device.
    KernelBench(kernel_bench::Args),
    /// Measure JPEG decoding alone on a CUDA device (the pipeline's routes:
    /// nvJPEG's and the scan kernels), per hardware share and batches in
    /// flight.
    DecodeBench(decode_bench::Args),
    /// Progressive JPEGs decoded by gpufeed's own kernels on a GPU, timed
    /// per kernel.
    ProgressiveBench(progressive_bench::Args),
    /// Write a PNG contact sheet of one augmented batch, labelled.
    Preview(preview::Args),
    /// Write WebDataset tar shards (KEY.jpg + KEY.cls) from a folder or list.
    Pack(pack::Args),
    /// Write SHARD.idx beside WebDataset shards (local or in object
    /// storage), so they open without a walk of every tar header.
    Index(pack::IndexArgs),
    /// Read, parse and decode files, or every JPEG under folders; list the
    /// bad ones. Exit code 0 when all decode, 1 otherwise.
    Scan(scan::Args),
    /// What this machine gives gpufeed: the CUDA driver and devices, NVRTC
    /// (the kernels compile), nvJPEG and the hardware JPEG engine, and
    /// which backend Device::Auto takes.
    Doctor(doctor::Args),
}

/// Dataset, device and batch of the device benchmarks.
#[derive(clap::Args)]
pub(crate) struct DeviceBench {
    /// Folder of JPEGs, loaded once before timing. Default: the
    /// repository's data/sample.
    pub(crate) data: Option<PathBuf>,
    /// CUDA device index.
    #[arg(long, default_value_t = 0)]
    pub(crate) device: usize,
    /// Images per batch (one kernel launch, or one nvJPEG batch).
    #[arg(long, default_value_t = 256)]
    pub(crate) batch: usize,
}

/// `cpu`, `auto`, `cuda` or `cuda:N`.
fn parse_device(s: &str) -> anyhow::Result<Device> {
    Ok(match s {
        "cpu" => Device::Cpu,
        "auto" => Device::Auto,
        "cuda" => Device::Cuda(0),
        // The emulated device (builds with `kernel-emu`): the device
        // stage's packing, queue and decode groups without a GPU.
        #[cfg(feature = "kernel-emu")]
        "emulated" => Device::Emulated,
        _ => match s.strip_prefix("cuda:") {
            Some(n) => Device::Cuda(n.parse().context("device index after `cuda:`")?),
            None => bail!("unknown device {s:?}: expected cpu, auto, cuda or cuda:N"),
        },
    })
}

/// `zune` or `turbojpeg`.
fn parse_cpu_decoder(s: &str) -> anyhow::Result<gpufeed::decode::CpuBackend> {
    use gpufeed::decode::CpuBackend;
    Ok(match s {
        "zune" => CpuBackend::Zune,
        "turbojpeg" => CpuBackend::TurboJpeg,
        _ => bail!("unknown CPU decoder {s:?}: expected zune or turbojpeg"),
    })
}

/// Whether a dataset argument names WebDataset shards: a `.tar` path or
/// pattern (`{000..009}`, `*`), or a URL (`s3://...`).
pub(crate) fn names_shards(s: &str) -> bool {
    s.ends_with(".tar") || s.contains('{') || s.contains("://")
}

/// The dataset given, or the sample set shipped in the repository.
fn data_or_sample(data: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(d) = data {
        if !d.exists() {
            bail!("dataset folder {} does not exist", d.display());
        }
        return Ok(d);
    }
    for candidate in [
        PathBuf::from("data/sample"),
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/sample"),
    ] {
        if candidate.is_dir() {
            return Ok(candidate);
        }
    }
    bail!("no DATA given and the repository's data/sample was not found")
}

/// The bytes of every image under `data` (or the sample set), for the
/// decode benches.
fn read_images(data: Option<PathBuf>) -> anyhow::Result<Vec<Vec<u8>>> {
    let data = data_or_sample(data)?;
    let source = gpufeed::Source::recursive(&data)?;
    source
        .samples()
        .iter()
        .map(|s| std::fs::read(&s.path).with_context(|| s.path.display().to_string()))
        .collect()
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(args) => bench::run(args).map(|()| {
            // 128 + SIGINT, as a shell reports an interrupted command.
            if bench::interrupted() {
                ExitCode::from(130)
            } else {
                ExitCode::SUCCESS
            }
        }),
        Command::Scan(args) => scan::run(args),
        Command::Doctor(args) => doctor::run(args),
        Command::Preview(args) => preview::run(args).map(|()| ExitCode::SUCCESS),
        Command::Pack(args) => pack::run(args).map(|()| ExitCode::SUCCESS),
        Command::Index(args) => pack::index(args).map(|()| ExitCode::SUCCESS),
        Command::KernelBench(args) => kernel_bench::run(args).map(|()| ExitCode::SUCCESS),
        Command::DecodeBench(args) => decode_bench::run(args).map(|()| ExitCode::SUCCESS),
        Command::ProgressiveBench(args) => progressive_bench::run(args).map(|()| ExitCode::SUCCESS),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("gpufeed: error: {}", report(&e));
            ExitCode::from(2)
        }
    }
}

/// An error and its causes on one line, each said once: the library's
/// errors already show their source in their message (`path: os error`),
/// so a cause whose text is already there is not repeated.
fn report(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

/// `--hardware-share`: a share of the engine-supported images in 0..=1,
/// or `auto` (steered while running, issue 16, item 3).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum ShareArg {
    Fixed(f32),
    Auto,
}

impl std::str::FromStr for ShareArg {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.trim().eq_ignore_ascii_case("auto") {
            return Ok(ShareArg::Auto);
        }
        s.trim()
            .parse()
            .map(ShareArg::Fixed)
            .map_err(|_| format!("share {s:?}: a number in 0..=1 or `auto`"))
    }
}

impl std::fmt::Display for ShareArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ShareArg::Fixed(v) => write!(f, "{v}"),
            ShareArg::Auto => f.write_str("auto"),
        }
    }
}

/// A byte count with an optional unit: `4GiB`, `512MB`, `1000`.
pub(crate) fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("size {s:?}: a number and a unit"))?;
    let scale = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        u => return Err(format!("size {s:?}: unknown unit {u:?}")),
    };
    let bytes = n * scale;
    if !(bytes >= 1.0 && bytes.is_finite()) {
        return Err(format!("size {s:?}: at least 1 byte"));
    }
    Ok(bytes as u64)
}
