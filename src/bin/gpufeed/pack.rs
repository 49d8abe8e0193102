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
    /// Output folder for shard-000000.tar, shard-000001.tar, ..., or a
    /// URL prefix in object storage (`s3://bucket/train`; needs the
    /// `object-store` feature): each shard and its index are uploaded as
    /// soon as they are written, and the local copy removed.
    #[arg(short, long)]
    output: String,
    /// Start a new shard once one holds this much (B, KB, MB, GB; powers
    /// of 1000; KiB, MiB, GiB of 1024).
    #[arg(long, default_value = "1GB", value_parser = super::parse_size)]
    shard_size: u64,
    /// Re-encode images whose longer side exceeds this many pixels: shrunk
    /// to it (aspect kept, antialiased, EXIF orientation applied) and
    /// saved as JPEG at --quality, like FFCV's max_resolution. Others are
    /// stored as they are. Default: every file as it is.
    #[arg(long, value_name = "PIXELS", value_parser = clap::value_parser!(u32).range(8..=65_535))]
    max_side: Option<u32>,
    /// JPEG quality of re-encoded images.
    #[arg(long, default_value_t = 90, value_parser = clap::value_parser!(u8).range(1..=100))]
    quality: u8,
    /// Threads reading (and re-encoding) samples. Default: all cores.
    #[arg(long)]
    threads: Option<usize>,
}

/// A sample's image member: its bytes and extension.
struct Member {
    bytes: Vec<u8>,
    ext: String,
    /// Re-encoded (shrunk), or kept because it could not be decoded.
    reencoded: bool,
    undecodable: bool,
}

/// Read sample `i`, shrinking and re-encoding it where `--max-side` asks.
fn member(source: &gpufeed::Source, i: usize, args: &Args) -> anyhow::Result<Member> {
    let path = &source.samples()[i].path;
    let mut bytes = Vec::new();
    source
        .read(i, &mut bytes, u64::MAX)
        .with_context(|| path.display().to_string())?;
    let ext = path.extension().map_or("jpg".to_string(), |e| {
        e.to_string_lossy().to_ascii_lowercase()
    });
    let mut m = Member {
        bytes,
        ext,
        reencoded: false,
        undecodable: false,
    };
    let Some(max) = args.max_side else {
        return Ok(m);
    };
    let mut img = gpufeed::decode::Image::default();
    let decoded = if gpufeed::decode::is_png_or_webp(&m.bytes) {
        gpufeed::decode::decode_png_or_webp(&m.bytes, u64::MAX, &mut img)
    } else {
        match gpufeed::jpeg::parse_header(&m.bytes, u64::MAX) {
            // Small enough: kept as it is, without decoding.
            Ok(h) if h.width.max(h.height) <= max => return Ok(m),
            Ok(h) => gpufeed::decode::CpuDecoder::new(true).decode(&m.bytes, &h, &mut img),
            Err(e) => Err(e),
        }
    };
    if decoded.is_err() {
        // Stored as it is: the pipeline names it when it fails there.
        m.undecodable = true;
        return Ok(m);
    }
    let long = img.width.max(img.height);
    if long <= max {
        return Ok(m);
    }
    let scale = max as f64 / long as f64;
    let w = ((img.width as f64 * scale).round() as u32).max(1);
    let h = ((img.height as f64 * scale).round() as u32).max(1);
    img = gpufeed::augment::resize(&img, w, h, true);
    let mut out = Vec::new();
    jpeg_encoder::Encoder::new(&mut out, args.quality)
        .encode(
            &img.data,
            img.width as u16,
            img.height as u16,
            jpeg_encoder::ColorType::Rgb,
        )
        .with_context(|| format!("re-encoding {}", path.display()))?;
    m.bytes = out;
    m.ext = "jpg".into();
    m.reencoded = true;
    Ok(m)
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

/// Where shards go: a local folder, or a store they are uploaded to from
/// a local staging folder.
struct Output {
    dir: PathBuf,
    #[cfg(feature = "object-store")]
    upload: Option<upload::Uploader>,
}

impl Output {
    fn new(output: &str) -> anyhow::Result<Output> {
        if output.contains("://") {
            #[cfg(feature = "object-store")]
            {
                let dir = std::env::temp_dir().join(format!("gpufeed-pack-{}", std::process::id()));
                std::fs::create_dir_all(&dir)?;
                return Ok(Output {
                    dir,
                    upload: Some(upload::Uploader::new(output)?),
                });
            }
            #[cfg(not(feature = "object-store"))]
            bail!(
                "{output}: writing to object storage needs gpufeed built with the `object-store` feature"
            );
        }
        let dir = PathBuf::from(output);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Output {
            dir,
            #[cfg(feature = "object-store")]
            upload: None,
        })
    }

    /// Close a shard, give it its name, write its index beside it, and
    /// upload both where the output is a store. Until then the shard is
    /// written under `partial(path)`, so that a pack killed mid-shard
    /// leaves no cut file under a shard's name (a reader would list it,
    /// and lose the members after the cut).
    fn finish(&self, b: tar::Builder<std::fs::File>, path: &std::path::Path) -> anyhow::Result<()> {
        let file = b.into_inner().context("finishing a shard")?;
        // Durable before it is named: a rename can reach the disk before
        // the data it names.
        file.sync_all().context("finishing a shard")?;
        std::fs::rename(partial(path), path)
            .with_context(|| format!("naming {}", path.display()))?;
        let p = path.to_string_lossy();
        gpufeed::source::index_shards([p.as_ref()], &Default::default())
            .with_context(|| format!("indexing {p}"))?;
        #[cfg(feature = "object-store")]
        if let Some(up) = &self.upload {
            let idx = PathBuf::from(format!("{p}.idx"));
            for f in [path, &idx] {
                up.put(f)?;
                std::fs::remove_file(f)?;
            }
        }
        Ok(())
    }

    /// How the shards are named to the user: `output` is the argument.
    fn shown(&self, output: &str) -> String {
        #[cfg(feature = "object-store")]
        if self.upload.is_some() {
            return output.trim_end_matches('/').to_string();
        }
        let _ = output;
        self.dir.display().to_string()
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        #[cfg(feature = "object-store")]
        if self.upload.is_some() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Uploads through the `object_store` crate, configured from the
/// standard environment (`AWS_*`, `GOOGLE_*`, `AZURE_*`).
#[cfg(feature = "object-store")]
mod upload {
    use anyhow::Context;
    use object_store::{ObjectStore, ObjectStoreExt, WriteMultipart, path::Path};

    /// Files above this go up in parts (S3's parts are 5 MiB at least).
    const PART: usize = 16 << 20;

    pub(super) struct Uploader {
        rt: tokio::runtime::Runtime,
        store: Box<dyn ObjectStore>,
        prefix: Path,
    }

    impl Uploader {
        pub(super) fn new(url: &str) -> anyhow::Result<Uploader> {
            let parsed = url::Url::parse(url).with_context(|| format!("{url}: not a URL"))?;
            let env = std::env::vars().map(|(k, v)| (k.to_ascii_lowercase(), v));
            let (store, prefix) = object_store::parse_url_opts(&parsed, env)
                .with_context(|| format!("{url}: opening the store"))?;
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            Ok(Uploader { rt, store, prefix })
        }

        /// Upload one local file under the prefix, by its file name.
        pub(super) fn put(&self, file: &std::path::Path) -> anyhow::Result<()> {
            let name = file.file_name().map(|n| n.to_string_lossy().into_owned());
            let key = Path::from(format!("{}/{}", self.prefix, name.unwrap_or_default()));
            let bytes = std::fs::read(file)?;
            self.rt
                .block_on(async {
                    if bytes.len() <= PART {
                        self.store.put(&key, bytes.into()).await.map(drop)
                    } else {
                        let mut w = WriteMultipart::new_with_chunk_size(
                            self.store.put_multipart(&key).await?,
                            PART,
                        );
                        for chunk in bytes.chunks(PART) {
                            w.wait_for_capacity(4).await?;
                            w.write(chunk);
                        }
                        w.finish().await.map(drop)
                    }
                })
                .with_context(|| format!("uploading {key}"))
        }
    }
}

fn shard_path(dir: &std::path::Path, i: usize) -> PathBuf {
    dir.join(format!("shard-{i:06}.tar"))
}

/// Where a shard is written until it is whole: `shard-000001.tar.partial`,
/// which no `shard-*.tar` pattern matches.
fn partial(shard: &std::path::Path) -> PathBuf {
    let mut s = shard.as_os_str().to_owned();
    s.push(".partial");
    s.into()
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let (source, data) = super::bench::dataset(args.data.clone(), args.list.as_deref())?;
    let out = Output::new(&args.output)?;
    let bar = ProgressBar::new(source.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} files  {per_sec}  eta {eta}")
            .expect("static template"),
    );
    let (mut shards, mut in_shard, mut bytes) = (0usize, 0u64, 0u64);
    let (mut reencoded, mut undecodable) = (0usize, 0usize);
    let mut builder: Option<tar::Builder<std::fs::File>> = None;
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    // Samples are read (and re-encoded) by `threads` threads a window at a
    // time, and written in the source's order.
    let window = 64 * threads;
    for start in (0..source.len()).step_by(window) {
        let end = (start + window).min(source.len());
        let mut done: Vec<Option<anyhow::Result<Member>>> = (start..end).map(|_| None).collect();
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let (source, args) = (&source, &args);
                    scope.spawn(move || {
                        (start + t..end)
                            .step_by(threads)
                            .map(|i| (i, member(source, i, args)))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            for h in handles {
                for (i, m) in h.join().unwrap_or_default() {
                    done[i - start] = Some(m);
                }
            }
        });
        for (offset, m) in done.into_iter().enumerate() {
            let i = start + offset;
            let s = &source.samples()[i];
            let m = m.context("a reading thread failed")??;
            reencoded += usize::from(m.reencoded);
            undecodable += usize::from(m.undecodable);
            let data = m.bytes;
            if builder.is_none() || in_shard + data.len() as u64 > args.shard_size && in_shard > 0 {
                if let Some(b) = builder.take() {
                    out.finish(b, &shard_path(&out.dir, shards - 1))?;
                }
                let path = partial(&shard_path(&out.dir, shards));
                let file = std::fs::File::create(&path)
                    .with_context(|| format!("creating {}", path.display()))?;
                builder = Some(tar::Builder::new(file));
                shards += 1;
                in_shard = 0;
            }
            let Some(b) = builder.as_mut() else {
                bail!("no shard open");
            };
            let key = format!("{i:09}");
            let label = format!("{}", s.label);
            for (name, body) in [
                (format!("{key}.{}", m.ext), &data[..]),
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
    }
    if let Some(b) = builder.take() {
        out.finish(b, &shard_path(&out.dir, shards - 1))?;
    }
    bar.finish_and_clear();
    println!(
        "packed {} samples ({} MB) from {} into {shards} shard{} in {}: {}",
        source.len(),
        bytes / 1_000_000,
        data.display(),
        if shards == 1 { "" } else { "s" },
        out.shown(&args.output),
        format!("{}/shard-000000.tar", out.shown(&args.output)).replace(
            "000000",
            &format!("{{000000..{:06}}}", shards.saturating_sub(1))
        )
    );
    if let Some(max) = args.max_side {
        println!(
            "  {reencoded} re-encoded to at most {max} px (quality {}); {undecodable} could not \
             be decoded and were stored as they are",
            args.quality
        );
    }
    Ok(())
}
