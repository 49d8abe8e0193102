//! `gpufeed pack`: WebDataset tar shards from an ImageFolder or a list
//! (issue 18, item 3). Members `KEY.jpg` (the file's bytes, as they are)
//! and `KEY.cls` (the label), keys numbered in the source's order, so that
//! `Source::webdataset` over the shards lists the same samples in the same
//! order as the folder. Each shard gets its index, `SHARD.idx` (member
//! offsets), so that it opens from object storage without a download.

use std::path::PathBuf;

use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressStyle};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// ImageFolder (or a flat folder of JPEGs). Default: data/sample.
    #[arg(conflicts_with = "list")]
    data: Option<PathBuf>,
    /// A list file instead of a folder.
    #[arg(long, value_name = "FILE")]
    list: Option<PathBuf>,
    /// Output folder for shard-000000.tar, shard-000001.tar, ...
    #[arg(short, long)]
    output: PathBuf,
    /// Start a new shard once one holds this much (B, KB, MB, GB; powers
    /// of 1000; KiB, MiB, GiB of 1024).
    #[arg(long, default_value = "1GB", value_parser = parse_size)]
    shard_size: u64,
}

#[derive(clap::Args)]
pub(crate) struct IndexArgs {
    /// Shards: paths, patterns (`shard-{000000..000009}.tar`,
    /// `shards/*.tar`) or URLs (`s3://bucket/shard-*.tar`; needs the
    /// `object-store` feature). The index is written beside each.
    #[arg(required = true)]
    shards: Vec<String>,
}

pub(crate) fn index(args: IndexArgs) -> anyhow::Result<()> {
    let opts = gpufeed::source::StoreOptions::default();
    let done = gpufeed::source::index_shards(&args.shards, &opts)?;
    let members: usize = done.iter().map(|(_, n)| n).sum();
    for (shard, n) in &done {
        println!("{shard}.idx: {n} members");
    }
    println!("indexed {} shard(s), {members} members", done.len());
    Ok(())
}

/// Close a shard and write its index beside it.
fn finish(b: tar::Builder<std::fs::File>, path: &std::path::Path) -> anyhow::Result<()> {
    b.into_inner().context("finishing a shard")?;
    let p = path.to_string_lossy();
    gpufeed::source::index_shards([p.as_ref()], &Default::default())
        .with_context(|| format!("indexing {p}"))?;
    Ok(())
}

fn parse_size(s: &str) -> Result<u64, String> {
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

fn shard_path(dir: &std::path::Path, i: usize) -> PathBuf {
    dir.join(format!("shard-{i:06}.tar"))
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let (source, data) = super::bench::dataset(args.data, args.list.as_deref())?;
    std::fs::create_dir_all(&args.output)
        .with_context(|| format!("creating {}", args.output.display()))?;
    let bar = ProgressBar::new(source.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} files  {per_sec}  eta {eta}")
            .expect("static template"),
    );
    let (mut shards, mut in_shard, mut bytes) = (0usize, 0u64, 0u64);
    let mut builder: Option<tar::Builder<std::fs::File>> = None;
    for (i, s) in source.samples().iter().enumerate() {
        let data = std::fs::read(&s.path).with_context(|| s.path.display().to_string())?;
        if builder.is_none() || in_shard + data.len() as u64 > args.shard_size && in_shard > 0 {
            if let Some(b) = builder.take() {
                finish(b, &shard_path(&args.output, shards - 1))?;
            }
            let path = shard_path(&args.output, shards);
            let file = std::fs::File::create(&path)
                .with_context(|| format!("creating {}", path.display()))?;
            builder = Some(tar::Builder::new(file));
            shards += 1;
            in_shard = 0;
        }
        let Some(b) = builder.as_mut() else {
            bail!("no shard open");
        };
        let ext = s.path.extension().map_or("jpg".to_string(), |e| {
            e.to_string_lossy().to_ascii_lowercase()
        });
        let key = format!("{i:09}");
        let label = format!("{}", s.label);
        for (name, body) in [
            (format!("{key}.{ext}"), &data[..]),
            (format!("{key}.cls"), label.as_bytes()),
        ] {
            let mut h = tar::Header::new_gnu();
            h.set_size(body.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            b.append_data(&mut h, &name, body)
                .with_context(|| format!("writing {name}"))?;
        }
        in_shard += data.len() as u64;
        bytes += data.len() as u64;
        bar.inc(1);
    }
    if let Some(b) = builder.take() {
        finish(b, &shard_path(&args.output, shards - 1))?;
    }
    bar.finish_and_clear();
    println!(
        "packed {} samples ({} MB) from {} into {shards} shard{} in {}: {}",
        source.len(),
        bytes / 1_000_000,
        data.display(),
        if shards == 1 { "" } else { "s" },
        args.output.display(),
        shard_path(&args.output, 0).display().to_string().replace(
            "000000",
            &format!("{{000000..{:06}}}", shards.saturating_sub(1))
        )
    );
    Ok(())
}
