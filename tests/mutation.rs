//! Seeded random mutation of real JPEGs, and of PNGs, WebPs and WebDataset
//! shards, through the fuzz harnesses (issue 7; issues 18 and 19 added the
//! formats): the CI stand-in for `cargo fuzz`, which needs a nightly
//! toolchain. Same targets (`gpufeed::fuzz`), fixed seed, a fixed number
//! of inputs: every run tests the same inputs, and any panic names a file
//! to replay.
//!
//! `GPUFEED_MUTATIONS=N` changes the number of inputs per target (default
//! 100 000 for the parsers, a tenth of that for the decoders, a fifth for
//! the shard listing).

mod common;
#[cfg(feature = "turbojpeg")]
#[path = "common/scans.rs"]
mod scans;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};

/// Files of at most 64 KiB under `dir`, at any depth.
fn small_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if e.metadata().is_ok_and(|m| m.len() <= 64 << 10) {
                files.push(p);
            }
        }
    }
    files
}

/// Seed inputs: small files of the shared corpus's fuzz and tricky folders
/// when present, and the repository's own fixtures always.
fn seeds() -> Vec<Vec<u8>> {
    let mut files = Vec::new();
    // Without the corpus the committed fixtures alone are the seeds.
    if let Ok(corpus) = common::corpus() {
        files.extend(small_files(&corpus.join("fuzz")));
        files.extend(small_files(&corpus.join("tricky")));
    }
    files.extend(small_files(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data"),
    ));
    files.sort();
    // A spread of at most 400 seeds keeps the run short and deterministic.
    let step = files.len().div_ceil(400).max(1);
    files
        .iter()
        .step_by(step)
        .filter_map(|p| std::fs::read(p).ok())
        .filter(|b| !b.is_empty())
        .collect()
}

/// One structural mutation of `b`, like a fuzzer's havoc stage, with
/// JPEG-aware moves (markers, big segment lengths).
fn mutate(rng: &mut ChaCha8Rng, b: &mut Vec<u8>) {
    let n = b.len().max(1);
    let at = rng.next_u64() as usize % n;
    match rng.next_u32() % 9 {
        0 => {
            if let Some(x) = b.get_mut(at) {
                *x ^= 1 << (rng.next_u32() % 8);
            }
        }
        1 => {
            if let Some(x) = b.get_mut(at) {
                *x = rng.next_u32() as u8;
            }
        }
        2 => {
            let m =
                [0xC0, 0xC2, 0xC4, 0xDA, 0xDB, 0xDD, 0xE1, 0xD9, 0xFF][rng.next_u32() as usize % 9];
            b.splice(at.min(b.len())..at.min(b.len()), [0xFF, m]);
        }
        3 => {
            let end = (at + 1 + rng.next_u32() as usize % 64).min(b.len());
            b.drain(at.min(end)..end);
        }
        4 => {
            let end = (at + 1 + rng.next_u32() as usize % 256).min(b.len());
            let chunk = b[at.min(end)..end].to_vec();
            let to = rng.next_u64() as usize % (b.len() + 1);
            b.splice(to..to, chunk);
        }
        5 => b.truncate(at),
        6 => {
            // A segment length of 0, 1, 2 or huge.
            let v = [0u16, 1, 2, 0xFFFF][rng.next_u32() as usize % 4].to_be_bytes();
            if at + 2 <= b.len() {
                b[at..at + 2].copy_from_slice(&v);
            }
        }
        7 => {
            // Dimensions: zero, one, or enormous.
            let v = [0u16, 1, 0x7FFF, 0xFFFF][rng.next_u32() as usize % 4].to_be_bytes();
            if at + 2 <= b.len() {
                b[at..at + 2].copy_from_slice(&v);
            }
        }
        _ => {
            let k = 1 + rng.next_u32() as usize % 16;
            for _ in 0..k {
                let i = rng.next_u64() as usize % n;
                if let Some(x) = b.get_mut(i) {
                    *x = x.wrapping_add(rng.next_u32() as u8);
                }
            }
        }
    }
}

fn count(default: usize) -> usize {
    std::env::var("GPUFEED_MUTATIONS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .map_or(default, |n| if default < 100_000 { n / 10 } else { n })
}

/// Run `target` on `n` mutated inputs of the JPEG seeds.
fn run(name: &str, n: usize, target: impl Fn(&[u8]) -> bool) {
    run_on(name, n, seeds(), target);
}

/// Run `target` on `n` mutated inputs of `seeds`; a panic saves the input
/// under target/mutation-crashes/ and fails with its path.
fn run_on(name: &str, n: usize, seeds: Vec<Vec<u8>>, target: impl Fn(&[u8]) -> bool) {
    run_with(name, n, seeds, mutate, target);
}

/// [`run_on`] with the mutations `with` makes.
fn run_with(
    name: &str,
    n: usize,
    seeds: Vec<Vec<u8>>,
    with: fn(&mut ChaCha8Rng, &mut Vec<u8>),
    target: impl Fn(&[u8]) -> bool,
) {
    assert!(!seeds.is_empty());
    let mut rng = ChaCha8Rng::seed_from_u64(0x6770_6665_6564);
    let mut accepted = 0;
    for i in 0..n {
        let mut input = seeds[i % seeds.len()].clone();
        for _ in 0..1 + rng.next_u32() % 4 {
            with(&mut rng, &mut input);
        }
        match catch_unwind(AssertUnwindSafe(|| target(&input))) {
            Ok(ok) => accepted += usize::from(ok),
            Err(p) => {
                let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/mutation-crashes");
                std::fs::create_dir_all(&dir).unwrap();
                let file = dir.join(format!("{name}-{i}.bin"));
                std::fs::write(&file, &input).unwrap();
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                panic!(
                    "{name}: input {i} panicked ({msg}); saved to {}",
                    file.display()
                );
            }
        }
    }
    println!(
        "mutation {name}: {n} inputs from {} seeds, {accepted} accepted, 0 panics",
        seeds.len()
    );
}

#[test]
fn header_parser_survives_mutations() {
    // The harness checks `jpeg::complete` too, where the walk reaches EOI:
    // some mutants must (a mutation past EOI, or in a segment's payload).
    let complete = std::cell::Cell::new(0usize);
    let n = count(100_000);
    run("header", n, |b| {
        complete.set(complete.get() + usize::from(gpufeed::jpeg::complete(b)));
        gpufeed::fuzz::header(b).is_some()
    });
    println!("mutation header: {} of {n} complete", complete.get());
    assert!(
        complete.get() * 100 >= n,
        "under 1 % of the inputs complete"
    );
}

#[test]
fn exif_reader_survives_mutations() {
    // The TIFF payload of real files sits after "Exif\0\0" in APP1; the
    // mutated whole file exercises the reader on every offset structure.
    run("exif", count(100_000), |b| {
        let tiff = b
            .windows(6)
            .position(|w| w == b"Exif\0\0")
            .map_or(b, |i| &b[i + 6..]);
        gpufeed::fuzz::exif(tiff);
        true
    });
}

#[test]
fn decode_route_survives_mutations() {
    run("decode", count(10_000), gpufeed::fuzz::decode);
}

/// PNGs of every color type and both common depths (tiny, so that a
/// mutated one decodes fast); lossless WebPs (the encoder
/// at hand writes no lossy ones); and the corpus's reference PNGs when
/// present. (No interlaced seed: this png version writes none.)
fn image_seeds() -> Vec<Vec<u8>> {
    use png::{BitDepth, ColorType};
    let mut out = Vec::new();
    for (color, channels) in [
        (ColorType::Grayscale, 1),
        (ColorType::GrayscaleAlpha, 2),
        (ColorType::Rgb, 3),
        (ColorType::Rgba, 4),
        (ColorType::Indexed, 1),
    ] {
        for depth in [BitDepth::Eight, BitDepth::Sixteen] {
            if color == ColorType::Indexed && depth == BitDepth::Sixteen {
                continue;
            }
            let (w, h) = (13u32, 7u32);
            let bytes_per = channels * if depth == BitDepth::Sixteen { 2 } else { 1 };
            let data: Vec<u8> = (0..w * h * bytes_per)
                .map(|i| (i * 37 % 251) as u8)
                .collect();
            let mut buf = Vec::new();
            let mut e = png::Encoder::new(&mut buf, w, h);
            e.set_color(color);
            e.set_depth(depth);
            if color == ColorType::Indexed {
                e.set_palette(
                    (0..=255u8)
                        .flat_map(|v| [v, 255 - v, v / 2])
                        .collect::<Vec<_>>(),
                );
            }
            e.write_header().unwrap().write_image_data(&data).unwrap();
            out.push(buf);
        }
    }
    for (w, h) in [(9u32, 5u32), (40, 3)] {
        let rgb: Vec<u8> = (0..w * h * 3).map(|i| (i * 11 % 256) as u8).collect();
        let mut buf = Vec::new();
        image_webp::WebPEncoder::new(&mut buf)
            .encode(&rgb, w, h, image_webp::ColorType::Rgb8)
            .unwrap();
        out.push(buf);
    }
    if let Ok(corpus) = common::corpus() {
        let mut pngs: Vec<PathBuf> = small_files(&corpus.join("tricky"))
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "png"))
            .collect();
        pngs.sort();
        out.extend(pngs.iter().take(20).filter_map(|p| std::fs::read(p).ok()));
    }
    out
}

/// WebDataset shards as `gpufeed pack` and others write them: image and
/// `cls` members, a member without a label, a bad label, two images under
/// one key, a long (GNU) name, a directory entry.
fn shard_seeds() -> Vec<Vec<u8>> {
    let member = |b: &mut tar::Builder<Vec<u8>>, name: &str, body: &[u8]| {
        let mut h = tar::Header::new_gnu();
        h.set_size(body.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, name, body).unwrap();
    };
    let mut out = Vec::new();
    for variant in 0..3 {
        let mut b = tar::Builder::new(Vec::new());
        member(&mut b, "000000000.jpg", &[0xFF, 0xD8, 0xFF, 0xD9]);
        member(&mut b, "000000000.cls", b"7");
        member(&mut b, "000000001.png", b"\x89PNG\r\n\x1a\n");
        if variant > 0 {
            member(&mut b, "000000002.jpg", b"x");
            member(&mut b, "000000002.cls", b"not a number");
            member(&mut b, "000000003.jpg", b"y");
            member(&mut b, "000000003.webp", b"RIFF");
        }
        if variant > 1 {
            let long = format!("{}/000000004.jpg", "d".repeat(150));
            member(&mut b, &long, b"z");
            let mut d = tar::Header::new_gnu();
            d.set_entry_type(tar::EntryType::Directory);
            d.set_size(0);
            d.set_cksum();
            b.append_data(&mut d, "dir/", std::io::empty()).unwrap();
        }
        out.push(b.into_inner().unwrap());
    }
    out
}

#[test]
fn png_and_webp_route_survives_mutations() {
    run_on("image", count(10_000), image_seeds(), gpufeed::fuzz::image);
}

#[test]
fn shard_listing_survives_mutations() {
    run_on("shard", count(100_000) / 5, shard_seeds(), |b| {
        gpufeed::fuzz::shard(b).is_some()
    });
}

/// The progressive route's planner (and, built with `kernel-emu`, its
/// kernels compiled for the host) on mutated progressive files of the
/// seeds.
#[test]
fn progressive_route_survives_mutations() {
    let progressive = seeds_of(|sof| sof == gpufeed::jpeg::SofKind::Progressive);
    run_on(
        "progressive",
        count(10_000),
        progressive,
        gpufeed::fuzz::progressive,
    );
}

/// The JPEG seeds whose frame is of a coding process `keep` takes.
fn seeds_of(keep: impl Fn(gpufeed::jpeg::SofKind) -> bool) -> Vec<Vec<u8>> {
    seeds()
        .into_iter()
        .filter(|b| gpufeed::jpeg::parse_header(b, u64::MAX).is_ok_and(|h| keep(h.sof)))
        .collect()
}

/// The same on mutated sequential (baseline and extended) files of the
/// seeds: the planner and kernels take those too, for the CUDA route's
/// Huffman work (issue 16, item 3c).
#[test]
fn sequential_scans_survive_mutations() {
    use gpufeed::jpeg::SofKind;
    let sequential = seeds_of(|sof| matches!(sof, SofKind::Baseline | SofKind::Extended));
    run_on(
        "sequential",
        count(10_000),
        sequential,
        gpufeed::fuzz::progressive,
    );
}

/// The split kernels (kernels/progressive.cu, "Split decoding") against
/// one thread per image on the same mutated sequential files, in
/// subsequences of 64 bytes, where guesses resynchronise least, after 0,
/// 3 or 16 rounds in turn (what the rounds leave out of step, the check
/// decodes again: with none, every wrong guess): whatever the bytes,
/// splitting changes no outcome. Where one thread decodes a file without
/// a fault, so does the split decode, to the same coefficients; where one
/// thread faults, the split decode reports the same fault.
#[cfg(feature = "kernel-emu")]
#[test]
fn split_decoding_equals_one_thread_under_mutation() {
    use gpufeed::jpeg::SofKind;
    let sequential = seeds_of(|sof| matches!(sof, SofKind::Baseline | SofKind::Extended));
    split_equals_one_thread("split", sequential, mutate);
}

/// The same on the sequential seeds transcoded losslessly with restart
/// markers every 1 to 5 MCUs (the split kernels' restart intervals, since
/// session 50), half of the mutations moving a marker: renumbered, gone,
/// doubled, shifted by a byte, or made a stuffed 0xFF.
#[cfg(all(feature = "kernel-emu", feature = "turbojpeg"))]
#[test]
fn split_restart_intervals_equal_one_thread_under_mutation() {
    use gpufeed::jpeg::SofKind;
    use scans::libjpeg::{Restarts, with_restarts};
    let sequential = seeds_of(|sof| matches!(sof, SofKind::Baseline | SofKind::Extended));
    let seeds: Vec<Vec<u8>> = (sequential.iter().enumerate())
        .filter_map(|(i, b)| with_restarts(b, Restarts::Mcus(1 + (i % 5) as u16)).ok())
        .collect();
    assert!(seeds.len() >= 20, "{} seeds transcoded", seeds.len());
    split_equals_one_thread("split-restarts", seeds, |rng, b| {
        let markers: Vec<usize> = (0..b.len().saturating_sub(1))
            .filter(|&i| b[i] == 0xFF && (0xD0..=0xD7).contains(&b[i + 1]))
            .collect();
        if markers.is_empty() || rng.next_u32() % 2 == 0 {
            return mutate(rng, b);
        }
        let at = markers[rng.next_u64() as usize % markers.len()];
        match rng.next_u32() % 5 {
            0 => b[at + 1] = 0xD0 | (rng.next_u32() as u8 & 7),
            1 => drop(b.drain(at..at + 2)),
            2 => {
                let m = b[at + 1];
                b.splice(at..at, [0xFF, m]);
            }
            3 => b.insert(at, rng.next_u32() as u8),
            _ => b[at + 1] = 0,
        }
    });
}

/// The same on the sequential seeds encoded again RGB-coded (every block
/// of the MCU decoded with the same tables, where the split kernels leave
/// the block's place in the MCU out of the states they compare, since
/// session 51), mutated as the plain seeds are.
#[cfg(all(feature = "kernel-emu", feature = "turbojpeg"))]
#[test]
fn split_shared_tables_equal_one_thread_under_mutation() {
    use gpufeed::jpeg::SofKind;
    let sequential = seeds_of(|sof| matches!(sof, SofKind::Baseline | SofKind::Extended));
    let seeds: Vec<Vec<u8>> = (sequential.iter())
        .filter_map(|b| scans::libjpeg::rgb_coded(b, 1 << 22).ok())
        .collect();
    assert!(seeds.len() >= 20, "{} seeds encoded", seeds.len());
    split_equals_one_thread("split-shared-tables", seeds, mutate);
}

/// Split (64 bytes, 0, 3 or 16 rounds in turn) against one thread on
/// `seeds` mutated by `with`.
#[cfg(feature = "kernel-emu")]
fn split_equals_one_thread(
    name: &str,
    seeds: Vec<Vec<u8>>,
    with: fn(&mut ChaCha8Rng, &mut Vec<u8>),
) {
    use gpufeed::cuda::progressive::{SplitCount, emu_coefficients_split};
    use std::cell::Cell;
    let (n, counted) = (Cell::new(0usize), Cell::new(SplitCount::default()));
    let path = Path::new("mutated.jpg");
    run_with(name, count(10_000), seeds, with, |b| {
        let Ok((one, _)) = emu_coefficients_split(path, b, 1 << 22, (0, 0)) else {
            return false;
        };
        let rounds = [0, 3, 16][n.get() % 3];
        n.set(n.get() + 1);
        let (many, c) =
            emu_coefficients_split(path, b, 1 << 22, (64, rounds)).expect("planned once");
        counted.set(counted.get().merge(c));
        // The same status, fault for fault: since session 49 the split
        // kernels name most faults themselves (`SplitCount::faults`).
        assert_eq!(one.status, many.status);
        let ok = one.status.iter().all(|&s| s == 0);
        if ok {
            assert!(one.comps == many.comps, "split coefficients differ");
        }
        ok
    });
    let c = counted.get();
    println!(
        "{name}: {} of {} split chains decoded split ({} of them faulted, the fault named by the \
         split kernels); the check decoded {} subsequences again, at most {} in one chain",
        c.synced, c.split, c.faults, c.redone, c.redone_most
    );
    assert!(c.redone > 0 && c.faults > 0);
    assert_eq!(c.synced, c.split, "split chains went to one thread");
}
