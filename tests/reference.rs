//! CPU decode against reference pixels.
//!
//! Tolerances: JPEG decoders may legitimately differ in IDCT precision and
//! chroma upsampling (T.81 only bounds IDCT accuracy, Annex A.3.3), so
//! decodes are compared with a per-channel bound on the largest difference
//! and on the mean absolute difference, stated per corpus below.

mod common;

use common::Outcome;

common::tests!(
    go_fixtures_match_reference_png,
    go_corpus_matches_reference_png,
    jpeg_decoder_reftests_match_reference_png,
    exif_orientations_come_out_upright,
    dali_orientation_files_follow_their_tag,
);

use std::path::{Path, PathBuf};

use gpufeed::decode::{CpuBackend, CpuDecoder, Image};
use gpufeed::jpeg::{DEFAULT_MAX_PIXELS, parse_header};

fn decode(path: &Path, backend: CpuBackend) -> Image {
    let bytes = std::fs::read(path).unwrap();
    let header = parse_header(&bytes, DEFAULT_MAX_PIXELS)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut img = Image::default();
    CpuDecoder::with_backend(backend, true)
        .unwrap()
        .decode(&bytes, &header, &mut img)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    img
}

/// Decode without applying EXIF orientation.
fn decode_raw(bytes: &[u8], h: &gpufeed::jpeg::JpegHeader, backend: CpuBackend) -> Image {
    let mut raw = Image::default();
    CpuDecoder::with_backend(backend, false)
        .unwrap()
        .decode(bytes, h, &mut raw)
        .unwrap();
    raw
}

/// A PNG as 8-bit RGB (gray replicated, alpha dropped).
fn read_png(path: &Path) -> Image {
    let mut dec = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
    dec.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = dec.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let px = &buf[..info.buffer_size()];
    let data = match info.color_type {
        png::ColorType::Rgb => px.to_vec(),
        png::ColorType::Rgba => px.chunks(4).flat_map(|p| [p[0], p[1], p[2]]).collect(),
        png::ColorType::Grayscale => px.iter().flat_map(|&v| [v, v, v]).collect(),
        png::ColorType::GrayscaleAlpha => px.chunks(2).flat_map(|p| [p[0], p[0], p[0]]).collect(),
        other => panic!("{}: unexpected PNG colour type {other:?}", path.display()),
    };
    Image {
        width: info.width,
        height: info.height,
        data,
    }
}

/// `(max abs difference, mean abs difference)` over all channels.
fn diff(a: &Image, b: &Image) -> (u8, f64) {
    assert_eq!((a.width, a.height), (b.width, b.height), "sizes differ");
    let mut max = 0u8;
    let mut sum = 0u64;
    for (x, y) in a.data.iter().zip(&b.data) {
        let d = x.abs_diff(*y);
        max = max.max(d);
        sum += d as u64;
    }
    (max, sum as f64 / a.data.len() as f64)
}

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

/// Go's `image/jpeg` test pairs: the PNG holds Go's own decode of the JPEG.
/// Bound: max 8 per channel (Go's own test tolerance, `image/decode_test.go`
/// uses `8 << 8` on 16-bit values), mean 1.5. Exceptions: `video-001.rgb.jpeg`
/// (R at full resolution, G and B subsampled 2x2) and `video-001.221212.jpeg`
/// (chroma sampled 1x2 against 2x2 luma), where the upsampling filter (Go:
/// nearest; zune-jpeg: interpolating) decides edge pixels: bound mean 5.0
/// (measured 4.2 and 1.0), no bound on the maximum.
fn check_go(dir: &Path, pairs: &[(&str, &str)]) {
    for backend in common::backends() {
        for (jpeg, png) in pairs {
            check_go_pair(dir, jpeg, png, backend);
        }
    }
}

fn check_go_pair(dir: &Path, jpeg: &str, png: &str, backend: CpuBackend) {
    {
        let got = decode(&dir.join(jpeg), backend);
        let want = read_png(&dir.join(png));
        let (max, mean) = diff(&got, &want);
        println!("{backend:?} {jpeg}: max {max}, mean {mean:.3}");
        if jpeg.ends_with("rgb.jpeg") || jpeg.ends_with("221212.jpeg") {
            assert!(mean <= 5.0, "{jpeg}: mean {mean:.3}");
        } else {
            assert!(max <= 8 && mean <= 1.5, "{jpeg}: max {max}, mean {mean:.3}");
        }
    }
}

/// BT.601 luma of each pixel, rounded.
fn luma(img: &Image) -> Image {
    let data = img
        .data
        .chunks(3)
        .flat_map(|p| {
            let y = (0.299 * p[0] as f32 + 0.587 * p[1] as f32 + 0.114 * p[2] as f32).round();
            [y as u8; 3]
        })
        .collect();
    Image {
        width: img.width,
        height: img.height,
        data,
    }
}

fn go_fixtures_match_reference_png() {
    check_go(
        &fixtures().join("go"),
        &[
            ("video-001.jpeg", "video-001.png"),
            ("video-001.progressive.jpeg", "video-001.png"),
            ("video-001.cmyk.jpeg", "video-001.cmyk.png"),
            ("video-005.gray.jpeg", "video-005.gray.png"),
        ],
    );
}

fn go_corpus_matches_reference_png() -> Outcome {
    let corpus = common::corpus()?;
    let dir = corpus.join("tricky/go");
    let refs = dir.join("reference_png");
    let mut pairs = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let Some(stem) = name.strip_suffix(".jpeg") else {
            continue;
        };
        // `x.progressive.jpeg` is the same picture as `x.jpeg`.
        let base = stem.strip_suffix(".progressive").unwrap_or(stem);
        let png = format!("{base}.png");
        if refs.join(&png).is_file() {
            pairs.push((name.clone(), format!("reference_png/{png}")));
        }
    }
    assert!(pairs.len() >= 6, "{pairs:?}");
    let pairs: Vec<(&str, &str)> = pairs
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    check_go(&dir, &pairs);
    Ok(())
}

/// The `jpeg-decoder` crate's reftests: PNGs are libjpeg-turbo decodes.
/// Bound: max 16, mean 1.0 (different IDCT and upsampling from
/// libjpeg-turbo's islow + fancy upsampling). Images smaller than 8 pixels
/// in a dimension are nearly all edge, where the chroma upsampling filter
/// (the references use a box filter there) dominates: for those, luma is
/// compared with the same bound. Files zune-jpeg refuses (lossless, which
/// the reftests also cover) must fail with a typed error.
fn jpeg_decoder_reftests_match_reference_png() -> Outcome {
    let corpus = common::corpus()?;
    for backend in common::backends() {
        reftests(&corpus, backend);
    }
    Ok(())
}

fn reftests(corpus: &Path, backend: CpuBackend) {
    let dir = corpus.join("tricky/jpeg-decoder-reftest");
    let mut checked = 0;
    let mut refused = Vec::new();
    let mut mismatched = Vec::new();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".jpg"))
        .collect();
    names.sort();
    let mut dec = CpuDecoder::with_backend(backend, true).unwrap();
    for name in names {
        let png = dir.join("reference_png").join(name.replace(".jpg", ".png"));
        if !png.is_file() {
            continue;
        }
        let bytes = std::fs::read(dir.join(&name)).unwrap();
        let mut img = Image::default();
        let result =
            parse_header(&bytes, DEFAULT_MAX_PIXELS).and_then(|h| dec.decode(&bytes, &h, &mut img));
        if let Err(e) = result {
            refused.push(format!("{name}: {e}"));
            continue;
        }
        let want = read_png(&png);
        let (max, mean) = if img.width.min(img.height) < 8 {
            diff(&luma(&img), &luma(&want))
        } else {
            diff(&img, &want)
        };
        println!("{backend:?} {name}: max {max}, mean {mean:.3}");
        if !(max <= 16 && mean <= 1.0) {
            mismatched.push(format!("{name}: max {max}, mean {mean:.3}"));
        }
        checked += 1;
    }
    println!("{checked} compared, refused with typed errors: {refused:#?}");
    assert!(mismatched.is_empty(), "outside tolerance: {mismatched:#?}");
    assert!(checked >= 30, "only {checked} reftests compared");
}

/// Pillow's `hopper_orientation_N.jpg` store hopper transformed so that
/// applying orientation N shows it upright: every one must decode to
/// (nearly) `hopper.jpg`. Bound: mean 6.0 (each file was re-encoded after
/// the transform, so blocks fall differently: measured 4.7-4.9 for all
/// seven), while the same files decoded without orientation are over 10
/// away.
fn exif_orientations_come_out_upright() {
    for backend in common::backends() {
        orientations(backend);
    }
}

fn orientations(backend: CpuBackend) {
    let dir = fixtures().join("pillow");
    let upright = decode(&dir.join("hopper.jpg"), backend);
    for n in 2..=8 {
        let path = dir.join(format!("hopper_orientation_{n}.jpg"));
        let bytes = std::fs::read(&path).unwrap();
        let h = parse_header(&bytes, DEFAULT_MAX_PIXELS).unwrap();
        assert_eq!(h.orientation.exif_value(), n);
        let img = decode(&path, backend);
        let (max, mean) = diff(&img, &upright);
        let raw = decode_raw(&bytes, &h, backend);
        println!(
            "orientation {n}: max {max}, mean {mean:.3}, unrotated {:?}",
            (raw.width, raw.height, img.width, img.height)
        );
        assert!(mean <= 6.0, "orientation {n}: mean {mean:.3}");
        // Without orientation, the picture is visibly different.
        let raw = decode_raw(&bytes, &h, backend);
        assert!(
            diff(&raw, &upright).1 > 10.0,
            "orientation {n} looks upright unrotated"
        );
    }
}

/// DALI_extra's padlock files carry identical entropy-coded data and differ
/// only in the EXIF orientation tag, so each must decode to exactly the
/// no-orientation picture transformed as its tag says (T.81 output plus
/// EXIF 2.32 §4.6.4), and to the untouched picture when orientation is off.
fn dali_orientation_files_follow_their_tag() -> Outcome {
    let corpus = common::corpus()?;
    let dir = corpus.join("tricky/dali-extra");
    for backend in common::backends() {
        let base = decode(&dir.join("padlock-406986_640_no_orientation.jpg"), backend);
        let mut seen = Vec::new();
        for name in [
            "horizontal",
            "mirror_horizontal",
            "rotate_180",
            "mirror_vertical",
            "mirror_horizontal_rotate_270",
            "rotate_90",
            "mirror_horizontal_rotate_90",
            "rotate_270",
        ] {
            let path = dir.join(format!("padlock-406986_640_{name}.jpg"));
            let bytes = std::fs::read(&path).unwrap();
            let h = parse_header(&bytes, DEFAULT_MAX_PIXELS).unwrap();
            seen.push(h.orientation.exif_value());
            let mut want = Image::default();
            gpufeed::decode::apply_orientation(&base, h.orientation, &mut want);
            let got = decode(&path, backend);
            assert!(
                got == want,
                "{backend:?} {name}: differs from the transformed base"
            );
            let raw = decode_raw(&bytes, &h, backend);
            assert!(
                raw == base,
                "{backend:?} {name}: raw decode differs from the base"
            );
        }
        seen.sort();
        assert_eq!(seen, [1, 2, 3, 4, 5, 6, 7, 8]);
    }
    Ok(())
}
