//! `gpufeed preview`: a contact sheet of one augmented batch, to look at what
//! the model will see.

use std::path::PathBuf;

use anyhow::Context;
use gpufeed::{DType, Device, Layout, Pipeline, Transform, augment::Normalize};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// ImageFolder or flat folder of JPEGs. Default: the repository's
    /// data/sample.
    #[arg(conflicts_with = "list")]
    data: Option<PathBuf>,
    /// A list file instead of a folder (`path label` per line).
    #[arg(long, value_name = "FILE")]
    list: Option<PathBuf>,
    /// Output PNG.
    #[arg(short, long, default_value = "preview.png")]
    output: PathBuf,
    /// Shuffle and augmentation seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Epoch to draw from.
    #[arg(long, default_value_t = 0)]
    epoch: u64,
    /// Images on the sheet.
    #[arg(long, default_value_t = 16)]
    batch: usize,
    /// Tile size in pixels.
    #[arg(long, default_value_t = 224)]
    size: usize,
    /// Show the evaluation transform (resize to size*8/7, centre crop)
    /// instead of the training one.
    #[arg(long)]
    eval: bool,
}

const LABEL_ROWS: usize = 2;
const LINE: usize = 10;
const PAD: usize = 4;

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let (source, _) = super::bench::dataset(args.data, args.list.as_deref())?;
    let classes = source.classes().to_vec();
    let transform = if args.eval {
        Transform::CenterCrop {
            resize: (args.size * 8 / 7) as u32,
        }
    } else {
        Transform::RANDOM_RESIZED_CROP
    };
    // The training path exactly (f32, NCHW, normalized), de-normalized here.
    let mut pipeline = Pipeline::builder()
        .source(source)
        .batch_size(args.batch)
        .seed(args.seed)
        .output_size(args.size, args.size)
        .transform(transform)
        .dtype(DType::F32)
        .layout(Layout::Nchw)
        .normalize(Some(Normalize::IMAGENET))
        .device(Device::Cpu)
        .build()?;
    let batch = pipeline
        .epoch(args.epoch)
        .next()
        .context("the epoch has no batches")??;
    for e in batch.skipped() {
        eprintln!("skipped: {e}");
    }
    let t = batch.images();
    let n = batch.len();
    let s = args.size;
    let cols = (n as f64).sqrt().ceil() as usize;
    let rows = n.div_ceil(cols);
    let (tile_w, tile_h) = (s + PAD, s + LABEL_ROWS * LINE + PAD);
    let (w, h) = (cols * tile_w + PAD, rows * tile_h + PAD);
    let mut sheet = vec![32u8; w * h * 3];
    let norm = Normalize::IMAGENET;
    for i in 0..n {
        let (x0, y0) = (PAD + (i % cols) * tile_w, PAD + (i / cols) * tile_h);
        for y in 0..s {
            for x in 0..s {
                let at = ((y0 + y) * w + x0 + x) * 3;
                for c in 0..3 {
                    let v = (t.get(i, c, y, x) * norm.std[c] + norm.mean[c]) * 255.0;
                    sheet[at + c] = v.round().clamp(0.0, 255.0) as u8;
                }
            }
        }
        let label = batch.labels()[i];
        let class = classes
            .get(label as usize)
            .map_or(String::new(), |c| format!(" {c}"));
        let name = batch.keys()[i]
            .file_name()
            .map_or(String::new(), |f| f.to_string_lossy().into());
        let fit = s / 8;
        for (row, text) in [format!("{label}{class}"), name].iter().enumerate() {
            let text: String = text.chars().take(fit).collect();
            draw_text(&mut sheet, w, x0, y0 + s + 1 + row * LINE, &text);
        }
    }
    let file = std::fs::File::create(&args.output)
        .with_context(|| format!("creating {}", args.output.display()))?;
    let mut enc = png::Encoder::new(std::io::BufWriter::new(file), w as u32, h as u32);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    enc.write_header()?.write_image_data(&sheet)?;
    println!(
        "wrote {} ({n} images, epoch {}, seed {}, {})",
        args.output.display(),
        args.epoch,
        args.seed,
        if args.eval {
            "eval transform"
        } else {
            "training transform"
        }
    );
    Ok(())
}

/// Draw ASCII `text` in the public-domain 8x8 font, light gray.
fn draw_text(img: &mut [u8], width: usize, x0: usize, y0: usize, text: &str) {
    for (k, ch) in text.chars().enumerate() {
        let glyph = font8x8::legacy::BASIC_LEGACY[if ch.is_ascii() {
            ch as usize
        } else {
            b'?' as usize
        }];
        for (gy, bits) in glyph.iter().enumerate() {
            for gx in 0..8 {
                if bits >> gx & 1 == 1 {
                    let at = ((y0 + gy) * width + x0 + k * 8 + gx) * 3;
                    if at + 2 < img.len() {
                        img[at..at + 3].copy_from_slice(&[230, 230, 230]);
                    }
                }
            }
        }
    }
}
