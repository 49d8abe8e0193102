//! The scan decoder (`kernels/progressive.cu`, issue 16) against
//! libjpeg-turbo, coefficient for coefficient, over every progressive file
//! of the shared corpus (photos, tricky files, fuzz seeds), and over every
//! sequential Huffman one (`sequential_*`). One body, two instances:
//!
//! * `emu_*` (feature `kernel-emu`): the kernel source compiled for the
//!   host;
//! * `gpu_*`: the NVRTC-compiled kernel on CUDA device 0; ignored without
//!   one, a failure under `GPUFEED_REQUIRE_GPU=1`.
//!
//! Run: `cargo test --features turbojpeg,kernel-emu --test progressive`
//! (CI does; the file needs `turbojpeg` for its reference). The kernels'
//! routes through a pipeline are `tests/kernel_routes.rs`.
//!
//! libjpeg-turbo's coefficients come from `tj3Transform` with a custom
//! filter and no output (its `jpeg_read_coefficients`). Entropy decoding
//! is exact integer work, so the tolerance is zero: wherever every chain
//! of a file reports success, each coefficient of each block that holds
//! the image must equal libjpeg-turbo's, whether libjpeg-turbo warned or
//! not; and every file that libjpeg-turbo decodes without a warning must
//! plan and decode without a fault. A fault (or a file the plan refuses)
//! is allowed only where libjpeg-turbo warned or refused: that file goes
//! to the CPU. Sequential files may also be refused as unsupported
//! (12-bit samples, Motion-JPEG's implied Huffman tables, progression
//! parameters libjpeg ignores with a warning), counted apart. The counts
//! are printed.

mod common;
#[path = "common/scans.rs"]
mod scans;

use std::path::Path;

use common::Outcome;
use gpufeed::cuda::pixels::Rgb;
use gpufeed::cuda::progressive::{CoefGrid, Coefficients, SCAN_STATUS, SplitCount};
#[cfg(feature = "kernel-emu")]
use scans::emu_rgb;
use scans::{
    DecodeRgb, Kind, MAX_PIXELS, PROGRESSIVE, SEQUENTIAL, enough, files, gpu_rgb, libjpeg,
    max_files,
};

common::tests!(
    #[cfg(feature = "kernel-emu")]
    emu_scans_equal_libjpeg_turbo,
    gpu_scans_equal_libjpeg_turbo,
    #[cfg(feature = "kernel-emu")]
    emu_pixels_equal_libjpeg_turbo,
    gpu_pixels_equal_libjpeg_turbo,
    #[cfg(feature = "kernel-emu")]
    emu_sequential_scans_equal_libjpeg_turbo,
    gpu_sequential_scans_equal_libjpeg_turbo,
    #[cfg(feature = "kernel-emu")]
    emu_sequential_pixels_equal_libjpeg_turbo,
    gpu_sequential_pixels_equal_libjpeg_turbo,
    #[cfg(feature = "kernel-emu")]
    emu_split_scans_equal_libjpeg_turbo,
    #[cfg(feature = "kernel-emu")]
    emu_split_kernels_name_the_faults_of_damaged_photos,
    gpu_split_kernels_name_the_faults_of_damaged_photos,
    #[cfg(feature = "kernel-emu")]
    emu_split_kernels_decode_restart_intervals,
    gpu_split_kernels_decode_restart_intervals,
    #[cfg(feature = "kernel-emu")]
    emu_split_kernels_keep_step_where_blocks_share_tables,
    gpu_split_kernels_keep_step_where_blocks_share_tables,
    #[cfg(feature = "kernel-emu")]
    emu_batches_equal_each_file_alone,
    gpu_batches_equal_each_file_alone,
);

// The two instances' coefficient decoders of one file.
#[cfg(feature = "kernel-emu")]
fn emu_coef(p: &Path, d: &[u8]) -> gpufeed::Result<Coefficients> {
    gpufeed::cuda::progressive::emu_coefficients(p, d, MAX_PIXELS)
}
fn gpu_coef(p: &Path, d: &[u8]) -> gpufeed::Result<Coefficients> {
    gpufeed::cuda::progressive::gpu_coefficients(p, d, MAX_PIXELS)
}

#[cfg(feature = "kernel-emu")]
fn emu_scans_equal_libjpeg_turbo() -> Outcome {
    compare(PROGRESSIVE, &emu_coef)
}

fn gpu_scans_equal_libjpeg_turbo() -> Outcome {
    common::need_gpu()?;
    compare(PROGRESSIVE, &gpu_coef)
}

#[cfg(feature = "kernel-emu")]
fn emu_pixels_equal_libjpeg_turbo() -> Outcome {
    compare_pixels(PROGRESSIVE, &emu_rgb)
}

fn gpu_pixels_equal_libjpeg_turbo() -> Outcome {
    common::need_gpu()?;
    compare_pixels(PROGRESSIVE, &gpu_rgb)
}

#[cfg(feature = "kernel-emu")]
fn emu_sequential_scans_equal_libjpeg_turbo() -> Outcome {
    compare(SEQUENTIAL, &emu_coef)
}

fn gpu_sequential_scans_equal_libjpeg_turbo() -> Outcome {
    common::need_gpu()?;
    compare(SEQUENTIAL, &gpu_coef)
}

#[cfg(feature = "kernel-emu")]
fn emu_sequential_pixels_equal_libjpeg_turbo() -> Outcome {
    compare_pixels(SEQUENTIAL, &emu_rgb)
}

fn gpu_sequential_pixels_equal_libjpeg_turbo() -> Outcome {
    common::need_gpu()?;
    compare_pixels(SEQUENTIAL, &gpu_rgb)
}

/// The split kernels (progressive.cu's "Split decoding": one thread per
/// subsequence of a sequential scan) over the sequential corpus: the same
/// coefficients as libjpeg-turbo at subsequences of 256 bytes (the
/// default), where a guess often has not resynchronised by its
/// subsequence's end, with no round of resynchronisation at all (the
/// check then decodes again, one after another, every subsequence whose
/// guess was wrong), 1, 8 and the default 16; and at 1024 and 4096 bytes.
/// Every photo of imagenet-size and full is split and decoded by the split
/// kernels at each setting, and every split chain of the corpus is decided
/// by them: decoded, or its fault named (none goes to one thread). Printed:
/// those counts, and how many subsequences the check decoded again, in all
/// and at most in one chain (that chain's thread's serial work). Before
/// session 48 a chain out of step after the rounds went whole to one
/// thread: on 2026-11-27, at 256 bytes and 8 rounds, 433 of 466 chains
/// synchronised, the 288 photos 280; before session 49 a chain whose
/// decode faulted did (at 256 bytes and 16 rounds, 14 of 466). Since
/// session 50 scans with restart markers split too: 496 chains at 256
/// bytes, 30 of them such scans (a 9.9 MB camera MPO among them).
#[cfg(feature = "kernel-emu")]
fn emu_split_scans_equal_libjpeg_turbo() -> Outcome {
    use std::cell::Cell;
    for split in [
        (256, 0),
        (256, 1),
        (256, 8),
        (256, 16),
        (1024, 16),
        (4096, 16),
    ] {
        let (all, photos) = (
            Cell::new(SplitCount::default()),
            Cell::new(SplitCount::default()),
        );
        let decode = |p: &Path, d: &[u8]| {
            let (c, count) = emu_split(p, d, split)?;
            all.set(all.get().merge(count));
            let name = p.to_string_lossy();
            if name.contains("photos/imagenet-size/") || name.contains("photos/full/") {
                assert_eq!(count.split, 1, "{}: not split", p.display());
                assert_eq!(count.synced, 1, "{}: to one thread", p.display());
                photos.set(photos.get().merge(count));
            }
            Ok(c)
        };
        compare(SEQUENTIAL, &decode)?;
        let (a, ph) = (all.get(), photos.get());
        println!(
            "subsequences of {} bytes, {} rounds: {} of {} split chains decoded split ({} of \
             them faulted); the check decoded {} subsequences again, at most {} in one chain \
             (the 288 photos of imagenet-size and full: {}, at most {})",
            split.0,
            split.1,
            a.synced,
            a.split,
            a.faults,
            a.redone,
            a.redone_most,
            ph.redone,
            ph.redone_most
        );
        assert_eq!(ph.split, 288, "the photos are not all there");
        assert_eq!(a.synced, a.split, "split chains went to one thread");
    }
    Ok(())
}

/// Every sequential photo of imagenet-size and full, damaged two ways: cut
/// at 60 % of its bytes (a truncated download: the scan runs out of bits),
/// and with 32 one-bits written at the middle of its bytes (no Huffman code
/// matches them). Split at the defaults (256 bytes, 16 rounds), each must
/// end with the same status as one thread's decode of the whole scan (the
/// same kernels, unsplit), and that fault must be the split kernels' own:
/// before session 49 the check left such a chain to one thread, which
/// decoded the scan again to name the fault (a truncated megapixel photo:
/// hundreds of ms on one GPU thread, its batch waiting). On a GPU,
/// imagenet-size's alone: one thread decoding `full`'s damaged megapixel
/// photos would take minutes of a lease.
fn damaged_photos(decode: DecodeSplit, sets: &[&str]) -> Outcome {
    let root = common::corpus()?;
    let (mut photos, mut faulted) = (0, 0);
    for (name, path, data) in sequential_photos(&root, sets) {
        photos += 1;
        let cut = data[..data.len() * 3 / 5].to_vec();
        let mut ones = data.clone();
        let mut at = data.len() / 2;
        // Not the zero of a stuffed 0xFF: 0xFF 0xFF there is a fill byte.
        while data[at - 1] == 0xFF {
            at += 1;
        }
        ones[at..at + 8].copy_from_slice(&[0xFF, 0, 0xFF, 0, 0xFF, 0, 0xFF, 0]);
        for (how, d) in [("cut", cut), ("ones", ones)] {
            let name = format!("{name} ({how})");
            let (one, _) = decode(&path, &d, (0, 0)).expect(&name);
            let (split, c) = decode(&path, &d, (256, 16)).expect(&name);
            assert_eq!(c.split, 1, "{name}: not split");
            assert_eq!(one.status, split.status, "{name}");
            if one.status.iter().any(|&s| s != 0) {
                faulted += 1;
                assert_eq!(c.faults, 1, "{name}: the fault went to one thread");
            }
        }
    }
    println!(
        "damaged photos: {photos} sequential photos, twice each; {faulted} faulted, every fault \
         named by the split kernels"
    );
    if max_files().is_none() {
        assert_eq!(photos, photos_in(sets), "the photos are not all there");
    }
    assert!(
        photos > 0 && faulted >= 2 * photos * 95 / 100,
        "{faulted} faulted"
    );
    Ok(())
}

/// The corpus's sequential photos in `sets` (folders of `photos/`), as
/// [`files`] gives them (capped by `GPUFEED_TEST_MAX_FILES`).
fn sequential_photos(
    root: &Path,
    sets: &[&str],
) -> impl Iterator<Item = (String, std::path::PathBuf, Vec<u8>)> {
    let prefixes: Vec<String> = sets.iter().map(|s| format!("photos/{s}/")).collect();
    files(root, SEQUENTIAL, true).filter(move |f| prefixes.iter().any(|p| f.0.starts_with(p)))
}

/// How many sequential photos `sets` hold: imagenet-size 160, full 128.
fn photos_in(sets: &[&str]) -> usize {
    sets.iter()
        .map(|&s| if s == "full" { 128 } else { 160 })
        .sum()
}

type DecodeSplit<'a> =
    &'a dyn Fn(&Path, &[u8], (u32, u32)) -> gpufeed::Result<(Coefficients, SplitCount)>;

// The two instances' split decoders of one file: subsequences of
// `split.0` bytes (0: one thread), `split.1` rounds.
#[cfg(feature = "kernel-emu")]
fn emu_split(p: &Path, d: &[u8], split: (u32, u32)) -> gpufeed::Result<(Coefficients, SplitCount)> {
    gpufeed::cuda::progressive::emu_coefficients_split(p, d, MAX_PIXELS, split)
}
fn gpu_split(p: &Path, d: &[u8], split: (u32, u32)) -> gpufeed::Result<(Coefficients, SplitCount)> {
    gpufeed::cuda::progressive::gpu_coefficients_split(p, d, MAX_PIXELS, split)
}

#[cfg(feature = "kernel-emu")]
fn emu_split_kernels_name_the_faults_of_damaged_photos() -> Outcome {
    damaged_photos(&emu_split, &["imagenet-size", "full"])
}

fn gpu_split_kernels_name_the_faults_of_damaged_photos() -> Outcome {
    common::need_gpu()?;
    damaged_photos(&gpu_split, &["imagenet-size"])
}

/// Every sequential photo of `sets`, transcoded losslessly with restart
/// markers (the corpus's photos have none; cameras and editors write them
/// into large photos): every MCU, every row of MCUs, every 3 rows, or
/// every 2 to 62 MCUs, by the photo's place in the list. Split at the
/// defaults (256 bytes, 16 rounds), each must be decoded by the split
/// kernels (before session 50 a scan with restart markers went to one
/// thread), to libjpeg-turbo's coefficients of the original file (the
/// transcode keeps them). Then damaged three ways: its middle marker
/// renumbered (out of turn: one thread stops there), that marker removed,
/// and the file cut at 60 %. Each must end with one thread's status, every
/// fault named by the split kernels. Every `nth` photo.
fn restart_photos(decode: DecodeSplit, sets: &[&str], nth: usize) -> Outcome {
    use libjpeg::Restarts;
    let root = common::corpus()?;
    let (mut photos, mut faulted) = (0usize, 0usize);
    for (i, (name, path, data)) in sequential_photos(&root, sets).step_by(nth).enumerate() {
        let every = match i % 4 {
            0 => Restarts::Mcus(1),
            1 => Restarts::Rows(1),
            2 => Restarts::Rows(3),
            _ => Restarts::Mcus(2 + (i % 61) as u16),
        };
        let name = format!("{name} (restarts {every:?})");
        let rst = libjpeg::with_restarts(&data, every).expect(&name);
        let (want, _) = libjpeg::coefficients(&data, MAX_PIXELS).expect(&name);
        let (one, _) = decode(&path, &rst, (0, 0)).expect(&name);
        let (split, c) = decode(&path, &rst, (256, 16)).expect(&name);
        assert_eq!((c.split, c.synced, c.faults), (1, 1, 0), "{name}");
        assert!(one.status == [0] && split.status == [0], "{name}");
        if let Some(d) = first_difference(&split.comps, &want) {
            panic!("{name}: {d}");
        }
        photos += 1;
        let markers = scans::first_scan(&rst).expect("no SOS").1;
        assert!(markers.len() >= 2, "{name}: {} markers", markers.len());
        let mid = markers[markers.len() / 2];
        let mut renumbered = rst.clone();
        renumbered[mid + 1] = 0xD0 | ((rst[mid + 1] + 1) & 7);
        let mut removed = rst.clone();
        removed.drain(mid..mid + 2);
        let cut = rst[..rst.len() * 3 / 5].to_vec();
        for (how, d) in [
            ("renumbered", renumbered),
            ("removed", removed),
            ("cut", cut),
        ] {
            let name = format!("{name} ({how})");
            let (one, _) = decode(&path, &d, (0, 0)).expect(&name);
            let (split, c) = decode(&path, &d, (256, 16)).expect(&name);
            assert_eq!(c.split, 1, "{name}: not split");
            assert_eq!(one.status, split.status, "{name}");
            if how == "renumbered" {
                // GF_SCAN_BAD_RESTART
                assert_eq!(one.status, [3], "{name}");
            }
            if one.status.iter().any(|&s| s != 0) {
                faulted += 1;
                assert_eq!(c.faults, 1, "{name}: the fault went to one thread");
            }
        }
    }
    println!(
        "restart intervals: {photos} sequential photos transcoded with restart markers, each \
         decoded by the split kernels to the original's coefficients; damaged three ways, \
         {faulted} faulted, every fault named by the split kernels"
    );
    if max_files().is_none() {
        let want = photos_in(sets).div_ceil(nth);
        assert_eq!(photos, want, "the photos are not all there");
    }
    assert!(photos > 0 && faulted >= 2 * photos, "{faulted} faulted");
    Ok(())
}

#[cfg(feature = "kernel-emu")]
fn emu_split_kernels_decode_restart_intervals() -> Outcome {
    restart_photos(&emu_split, &["imagenet-size", "full"], 1)
}

/// On a GPU, every other photo of imagenet-size: one thread decoding
/// `full`'s would take minutes of a lease, and the lease's `progressive`
/// step has 180 s for every `gpu_` test of this file (6 ran in 32 s at
/// 0d15f52, before the damaged photos' 640 decodes and these 640).
fn gpu_split_kernels_decode_restart_intervals() -> Outcome {
    common::need_gpu()?;
    restart_photos(&gpu_split, &["imagenet-size"], 2)
}

/// Every `nth` sequential photo of `sets`, encoded again RGB-coded
/// (`libjpeg::rgb_coded`: every block of the MCU decoded with the same
/// tables). Split at the defaults (256 bytes, 16 rounds), each must be
/// decoded by the split kernels to libjpeg-turbo's coefficients of that
/// file, with at most 8 subsequences of a photo decoded again by the
/// check. Before session 51 a guess a block off in the MCU never came back
/// into step (nothing in the bits tells it), and the check decoded the
/// rest of the photo again, one subsequence after another: over
/// imagenet-size's 160, 54,796 subsequences, 747 of one photo, and none
/// of the photos at 8 or fewer (emulated, 2026-11-29; now none).
fn shared_table_photos(decode: DecodeSplit, sets: &[&str], nth: usize) -> Outcome {
    let root = common::corpus()?;
    let (mut photos, mut redone) = (0usize, SplitCount::default());
    for (name, path, data) in sequential_photos(&root, sets).step_by(nth) {
        let name = format!("{name} (RGB-coded)");
        let rgb = libjpeg::rgb_coded(&data, MAX_PIXELS).expect(&name);
        let (want, warned) = libjpeg::coefficients(&rgb, MAX_PIXELS).expect(&name);
        assert!(!warned, "{name}: libjpeg-turbo warned");
        let (split, c) = decode(&path, &rgb, (256, 16)).expect(&name);
        assert_eq!((c.split, c.synced, c.faults), (1, 1, 0), "{name}");
        assert!(split.status == [0], "{name}: {:?}", split.status);
        if let Some(d) = first_difference(&split.comps, &want) {
            panic!("{name}: {d}");
        }
        assert!(
            c.redone_most <= 8,
            "{name}: {} subsequences decoded again",
            c.redone_most
        );
        redone = redone.merge(c);
        photos += 1;
    }
    println!(
        "shared tables: {photos} sequential photos encoded RGB-coded, each decoded by the split \
         kernels to libjpeg-turbo's coefficients; the check decoded {} subsequences again, at \
         most {} in one photo",
        redone.redone, redone.redone_most
    );
    if max_files().is_none() {
        assert_eq!(
            photos,
            photos_in(sets).div_ceil(nth),
            "the photos are not all there"
        );
    }
    assert!(photos > 0, "no photo");
    Ok(())
}

#[cfg(feature = "kernel-emu")]
fn emu_split_kernels_keep_step_where_blocks_share_tables() -> Outcome {
    shared_table_photos(&emu_split, &["imagenet-size"], 1)
}

/// Every other photo, as the restart photos' twin, for the lease's
/// `progressive` step's 180 s.
fn gpu_split_kernels_keep_step_where_blocks_share_tables() -> Outcome {
    common::need_gpu()?;
    shared_table_photos(&gpu_split, &["imagenet-size"], 2)
}

/// A refusal the sequential tests allow of a file libjpeg-turbo decodes
/// cleanly: what the planner does not do, never a file it calls corrupt.
fn unsupported(kind: Kind, e: &gpufeed::Error) -> bool {
    kind.sequential
        && matches!(
            e,
            gpufeed::Error::Sample {
                source: gpufeed::error::SampleError::Unsupported(_),
                ..
            }
        )
}

type DecodeBatch<'a> = &'a dyn Fn(&[(&Path, &[u8])], &[bool]) -> gpufeed::Result<Vec<Rgb>>;

#[cfg(feature = "kernel-emu")]
fn emu_batches_equal_each_file_alone() -> Outcome {
    use gpufeed::cuda::prog_batch::emu_rgb_batch;
    batches(&|f, p| emu_rgb_batch(f, p, MAX_PIXELS), &emu_rgb)
}

fn gpu_batches_equal_each_file_alone() -> Outcome {
    common::need_gpu()?;
    use gpufeed::cuda::prog_batch::gpu_rgb_batch;
    batches(&|f, p| gpu_rgb_batch(f, p, MAX_PIXELS), &gpu_rgb)
}

/// `photos/imagenet-size`'s files that the kernels decode alone, in
/// batches of 64 as a lane decodes them (tables shared: 160 of the files
/// have the same four; chains longest first; every third file copied on
/// its own, as from the readers' page-locked blocks): each image's bytes
/// those of the file decoded alone (the same kernels; zero tolerance).
fn batches(batch: DecodeBatch, alone: DecodeRgb) -> Outcome {
    let dir = common::corpus()?.join("photos/imagenet-size");
    let mut paths: Vec<_> = (std::fs::read_dir(&dir).unwrap())
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    let mut files = Vec::new();
    for path in paths {
        let data = std::fs::read(&path).unwrap();
        if let Ok(r) = alone(&path, &data)
            && r.status.iter().all(|&s| s == 0)
        {
            files.push((path, data, r.pixels));
        }
    }
    assert!(files.len() >= 150, "{} files decode alone", files.len());
    for chunk in files.chunks(64) {
        let with: Vec<(&Path, &[u8])> = chunk
            .iter()
            .map(|(p, d, _)| (p.as_path(), &d[..]))
            .collect();
        let pinned: Vec<bool> = (0..chunk.len()).map(|i| i % 3 == 1).collect();
        let got = batch(&with, &pinned).unwrap();
        assert_eq!(got.len(), chunk.len());
        for ((path, _, want), g) in chunk.iter().zip(&got) {
            let name = path.display();
            assert!(g.status.iter().all(|&s| s == 0), "{name}: {:?}", g.status);
            assert!(
                g.pixels == *want,
                "{name}: the batch's pixels are not the file's alone"
            );
        }
    }
    println!(
        "photos/imagenet-size: {} images in batches of 64 equal to their files decoded alone",
        files.len()
    );
    Ok(())
}

/// The progressive files whose scans decode without a fault, to RGB8,
/// against libjpeg-turbo's `tj3Decompress8` with its defaults (accurate
/// IDCT, fancy upsampling): every byte equal where libjpeg-turbo decoded
/// without a warning.
fn compare_pixels(kind: Kind, decode: DecodeRgb) -> Outcome {
    let root = common::corpus()?;
    let (mut equal, mut other, mut refused) = (0, 0, 0);
    let mut failures = Vec::new();
    for (name, path, data) in files(&root, kind, true) {
        let reference = libjpeg::rgb(&data, MAX_PIXELS);
        let Ok((want, false)) = reference else {
            // Decoded all the same (under Valgrind, CI's memcheck run, a
            // read or write out of bounds on a damaged file would show),
            // compared only where libjpeg-turbo did not warn.
            let _ = decode(&path, &data);
            continue;
        };
        let got = match decode(&path, &data) {
            Ok(g) if g.status.iter().all(|&s| s == 0) => g,
            Ok(g) => {
                failures.push(format!("{}: scan status {:?}", name, g.status));
                continue;
            }
            Err(e) => {
                // CMYK and fractional sampling stay on the CPU.
                refused += 1;
                println!("{e}");
                continue;
            }
        };
        if got.pixels == want {
            equal += 1;
            continue;
        }
        other += 1;
        let i = got
            .pixels
            .iter()
            .zip(&want)
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        let (x, y) = ((i / 3) % got.width as usize, i / 3 / got.width as usize);
        failures.push(format!(
            "{}: pixel ({x}, {y}) channel {}: {} vs libjpeg {} ({} bytes of {} differ)",
            name,
            i % 3,
            got.pixels.get(i).copied().unwrap_or(0),
            want.get(i).copied().unwrap_or(0),
            got.pixels.iter().zip(&want).filter(|(a, b)| a != b).count(),
            want.len()
        ));
    }
    println!(
        "{} files decoded without a warning: {equal} equal to libjpeg-turbo's RGB, \
         {other} not, {refused} left to the CPU",
        kind.name()
    );
    assert!(equal >= enough(), "only {equal} files compared");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}

type Decode<'a> = &'a dyn Fn(&Path, &[u8]) -> gpufeed::Result<Coefficients>;

fn compare(kind: Kind, decode: Decode) -> Outcome {
    let root = common::corpus()?;
    let (mut equal, mut faulted, mut unplanned, mut warned, mut clean_files) = (0, 0, 0, 0, 0);
    let mut unsupported_clean = 0;
    let mut failures = Vec::new();
    for (name, path, data) in files(&root, kind, true) {
        let reference = libjpeg::coefficients(&data, MAX_PIXELS);
        let clean = matches!(reference, Ok((_, false)));
        warned += usize::from(matches!(reference, Ok((_, true))));
        clean_files += usize::from(clean);
        let got = match decode(&path, &data) {
            Ok(c) => c,
            Err(e) => {
                unplanned += 1;
                if clean && unsupported(kind, &e) {
                    unsupported_clean += 1;
                    println!("{e}");
                } else if clean {
                    failures.push(format!("{}: not planned: {e}", name));
                }
                continue;
            }
        };
        if let Some(&s) = got.status.iter().find(|&&s| s != 0) {
            faulted += 1;
            let why = SCAN_STATUS
                .get(s as usize)
                .copied()
                .unwrap_or("unknown status");

            if s == 5 || clean {
                failures.push(format!("{}: {why} (status {:?})", name, got.status));
            }
            continue;
        }
        let Ok((want, _)) = reference else {
            continue; // libjpeg-turbo refused it outright
        };
        match first_difference(&got.comps, &want) {
            None => equal += 1,
            Some(d) => failures.push(format!("{}: {d}", name)),
        }
    }
    println!(
        "{} files: {equal} equal to libjpeg-turbo, {faulted} left to the CPU by a scan \
         fault, {unplanned} not planned ({unsupported_clean} of them unsupported though \
         libjpeg-turbo decoded them cleanly); libjpeg-turbo decoded {clean_files} without a \
         warning and {warned} with one",
        kind.name()
    );
    assert!(
        clean_files >= enough() && equal >= enough(),
        "only {clean_files} clean files, {equal} equal: is the corpus there?"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}

/// Where `got` first differs from libjpeg-turbo's rows of blocks.
fn first_difference(got: &[CoefGrid], want: &[Vec<Vec<i16>>]) -> Option<String> {
    if got.len() != want.len() {
        return Some(format!("{} components, libjpeg {}", got.len(), want.len()));
    }
    for (c, (g, rows)) in got.iter().zip(want).enumerate() {
        if rows.len() < g.bh {
            return Some(format!(
                "component {c}: libjpeg has {} block rows",
                rows.len()
            ));
        }
        for (by, row) in rows.iter().take(g.bh).enumerate() {
            if row.len() != g.bw * 64 {
                return Some(format!("component {c}: row of {} blocks", row.len() / 64));
            }
            let ours = &g.coef[by * g.stride * 64..(by * g.stride + g.bw) * 64];
            if let Some(i) = ours.iter().zip(row).position(|(a, b)| a != b) {
                return Some(format!(
                    "component {c} block ({}, {by}) coefficient {}: {} vs libjpeg {}",
                    i / 64,
                    i % 64,
                    ours[i],
                    row[i]
                ));
            }
        }
    }
    None
}
