//! `gpufeed preview`: a contact sheet of one augmented batch, to look at what
//! the model will see.

use std::path::PathBuf;

use anyhow::Context;
use gpufeed::{
    DType, Device, Layout, Pipeline, Tensor, Transform,
    augment::{Normalize, Recipe},
};

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
    #[arg(long, conflicts_with = "recipe")]
    eval: bool,
    /// Show every view of a recipe, one sample per row: imagenet,
    /// imagenet-eval, simclr, byol or dino (photometric ops included).
    #[arg(long, value_name = "NAME", value_parser = clap::builder::PossibleValuesParser::new(Recipe::NAMES))]
    recipe: Option<String>,
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
    let builder = Pipeline::builder()
        .source(source)
        .batch_size(args.batch)
        .seed(args.seed)
        .output_size(args.size, args.size)
        .transform(transform)
        .dtype(DType::F32)
        .layout(Layout::Nchw)
        .normalize(Some(Normalize::IMAGENET))
        .device(Device::Cpu);
    let recipe = args.recipe.as_deref().and_then(Recipe::by_name);
    let mut pipeline = match recipe.clone() {
        Some(r) => builder.recipe(r),
        None => builder,
    }
    .build()?;
    let batch = pipeline
        .epoch(args.epoch)
        .next()
        .context("the epoch has no batches")??;
    for e in batch.skipped() {
        eprintln!("skipped: {e}");
    }
    let n = batch.len();
    let norm = recipe
        .as_ref()
        .map_or(Some(Normalize::IMAGENET), |r| r.normalize);
    // Every draw of a sample: (view tensor, its row). A recipe shows one
    // sample per sheet row; a single view, a square grid.
    let draws = |i: usize| -> Vec<(&Tensor, usize)> {
        batch
            .views()
            .iter()
            .flat_map(|t| {
                let per = t.shape()[0] / n.max(1);
                (0..per).map(move |k| (t, i * per + k))
            })
            .collect()
    };
    let per_sample = draws(0).len();
    let (cols, rows) = if recipe.is_some() {
        (per_sample, n)
    } else {
        let cols = (n as f64).sqrt().ceil() as usize;
        (cols, n.div_ceil(cols))
    };
    let side = |t: &Tensor| (t.shape()[3], t.shape()[2]);
    let tile = batch
        .views()
        .iter()
        .map(side)
        .fold((0, 0), |a, b| (a.0.max(b.0), a.1.max(b.1)));
    let (tile_w, tile_h) = (tile.0 + PAD, tile.1 + LABEL_ROWS * LINE + PAD);
    // Where each cell of a row starts: a recipe's draws at their own
    // widths side by side, a grid's at the widest.
    let col_x: Vec<usize> = (0..=cols)
        .scan(PAD, |x, k| {
            let at = *x;
            *x += match (&recipe, draws(0).get(k)) {
                (Some(_), Some((t, _))) => side(t).0 + PAD,
                _ => tile_w,
            };
            Some(at)
        })
        .collect();
    let (w, h) = (col_x[cols], rows * tile_h + PAD);
    let mut sheet = vec![32u8; w * h * 3];
    for i in 0..n {
        for (k, (t, row)) in draws(i).into_iter().enumerate() {
            let cell = if recipe.is_some() { i * cols + k } else { i };
            let (x0, y0) = (col_x[cell % cols], PAD + (cell / cols) * tile_h);
            let (tw, th) = side(t);
            for y in 0..th {
                for x in 0..tw {
                    let at = ((y0 + y) * w + x0 + x) * 3;
                    for c in 0..3 {
                        let v = t.get(row, c, y, x);
                        let v = norm.map_or(v, |m| (v * m.std[c] + m.mean[c]) * 255.0);
                        sheet[at + c] = v.round().clamp(0.0, 255.0) as u8;
                    }
                }
            }
            if k > 0 && recipe.is_some() {
                continue;
            }
            let label = batch.labels()[i];
            let class = classes
                .get(label as usize)
                .map_or(String::new(), |c| format!(" {c}"));
            let name = batch.keys()[i]
                .file_name()
                .map_or(String::new(), |f| f.to_string_lossy().into());
            let fit = tw / 8;
            for (line, text) in [format!("{label}{class}"), name].iter().enumerate() {
                let text: String = text.chars().take(fit).collect();
                draw_text(&mut sheet, w, x0, y0 + tile.1 + 1 + line * LINE, &text);
            }
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
        match (&args.recipe, args.eval) {
            (Some(r), _) => format!("recipe {r}, {per_sample} views per sample"),
            (None, true) => "eval transform".into(),
            (None, false) => "training transform".into(),
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
