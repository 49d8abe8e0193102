//! Fuzz harness bodies (issue 7), shared by the `cargo fuzz` targets in
//! `fuzz/` and by the seeded mutation test that CI runs on the stable
//! toolchain (`tests/mutation.rs`). Not part of the API.
//!
//! Each function takes arbitrary bytes and must return; any panic is a bug.
//! Besides "no panic" they check what must hold for every input.

use std::cell::RefCell;

use crate::decode::{CpuDecoder, Image};
use crate::jpeg::{JpegHeader, exif_orientation, parse_header};

/// Pixel limit under fuzzing: big enough for real structure, small enough
/// that one input cannot take seconds.
const MAX_PIXELS: u64 = 4_000_000;

/// The header parser. A header it accepts is self-consistent. Then the
/// completeness check that keeps files off nvJPEG's CUDA route
/// ([`complete`](crate::jpeg::complete)) on the same bytes.
pub fn header(data: &[u8]) -> Option<JpegHeader> {
    completeness(data);
    let h = parse_header(data, MAX_PIXELS).ok()?;
    assert!(h.width > 0 && h.height > 0, "accepted a zero dimension");
    assert!(u64::from(h.width) * u64::from(h.height) <= MAX_PIXELS);
    assert_eq!(h.sampling.len(), usize::from(h.components));
    Some(h)
}

/// [`complete`](crate::jpeg::complete) is decided by its walk from SOI to
/// EOI: of a complete file, every prefix that holds that EOI is complete
/// and every shorter one is not (the walk over a prefix is the file's
/// until it reads past the prefix's end, and then it stops incomplete),
/// and bytes appended after the file change nothing. The shortest
/// complete prefix, found by halving, ends in the EOI marker. Its
/// entropy-coded data is walked eight bytes at a time, so a marker
/// straddling a word or the data's end shows here.
fn completeness(data: &[u8]) {
    use crate::jpeg::complete;
    if !complete(data) {
        return;
    }
    let (mut lo, mut hi) = (0, data.len());
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if complete(&data[..mid]) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    assert!(hi >= 4 && data[hi - 2..hi] == [0xFF, 0xD9], "ends at EOI");
    assert!(complete(&data[..hi]) && !complete(&data[..hi - 1]));
    assert!(complete(&data[..hi.midpoint(data.len())]), "past EOI");
    let mut longer = data.to_vec();
    longer.extend(data.iter().rev().take(37));
    assert!(complete(&longer), "bytes after the file");
}

/// The EXIF reader on a raw TIFF structure.
pub fn exif(data: &[u8]) {
    let _ = exif_orientation(data);
}

/// The decode route the pipeline's workers take: header, then the CPU
/// decoder. A decoded image has the header's (oriented) size. Returns
/// whether it decoded.
pub fn decode(data: &[u8]) -> bool {
    thread_local! {
        static STATE: RefCell<Option<(CpuDecoder, Image)>> = const { RefCell::new(None) };
    }
    let Some(h) = header(data) else {
        return false;
    };
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        let (dec, img) = s.get_or_insert_with(|| (CpuDecoder::new(true), Image::default()));
        if dec.decode(data, &h, img).is_err() {
            return false;
        }
        assert_eq!((img.width, img.height), h.oriented_size(), "decoded size");
        assert_eq!(img.data.len(), img.width as usize * img.height as usize * 3);
        true
    })
}

/// libjpeg-turbo's window decode, as the CPU route uses it: over a few
/// windows of the image (grown by `nvjpeg::padded_window`), the pixels
/// each was grown around equal a full decode's, and a window decode fails
/// where the full decode does. `Ok(None)`: not a JPEG header;
/// `Ok(Some(n))`: `n` windows decoded as windows and checked (the decoder
/// declines some, and decodes those whole); `Err`: what differs.
#[cfg(feature = "turbojpeg")]
pub fn turbo_window(data: &[u8]) -> Result<Option<usize>, String> {
    use crate::decode::nvjpeg::{mcu_size, padded_window};
    use crate::decode::{CpuBackend, Roi};
    let Some(h) = header(data) else {
        return Ok(None);
    };
    // No EXIF rotation: windows are in the stored frame.
    let mut dec =
        CpuDecoder::with_backend(CpuBackend::TurboJpeg, false).map_err(|e| e.to_string())?;
    let mut full = Image::default();
    let whole = dec.decode(data, &h, &mut full).map_err(|e| e.to_string());
    let (iw, ih) = (h.width, h.height);
    let mut checked = 0;
    for (fx, fy, fw, fh) in [
        (0.0, 0.0, 1.0, 0.5),
        (0.3, 0.2, 0.4, 0.5),
        (0.5, 0.5, 0.5, 0.5),
        (0.13, 0.61, 0.21, 0.3),
        (0.7, 0.0, 0.3, 1.0),
        (0.45, 0.45, 0.02, 0.02),
    ] {
        let at = |f: f64, n: u32| ((f * f64::from(n)) as u32).min(n - 1);
        let (x, y) = (at(fx, iw), at(fy, ih));
        let want = Roi {
            x,
            y,
            w: ((fw * f64::from(iw)) as u32).clamp(1, iw - x),
            h: ((fh * f64::from(ih)) as u32).clamp(1, ih - y),
        };
        let window = padded_window(want, (iw, ih), mcu_size(&h));
        if (window.w, window.h) == (iw, ih) {
            continue;
        }
        let mut part = Image::default();
        let r = match (dec.decode_window(data, &h, window, &mut part), &whole) {
            (Ok(Some(r)), Ok(())) => r,
            (Ok(None), Ok(())) | (Err(_), Err(_)) => continue,
            (got, whole) => {
                return Err(format!(
                    "window {window:?}: {:?}, the full decode {whole:?}",
                    got.map(|r| r.map(|_| "decoded as a window"))
                ));
            }
        };
        if (r.x, r.y, r.w) != (window.x, window.y, window.w)
            || (part.width, part.height) != (r.w, r.h)
        {
            return Err(format!(
                "window {window:?} came out as {r:?}, {}x{}",
                part.width, part.height
            ));
        }
        for py in want.y..want.y + want.h {
            for px in want.x..want.x + want.w {
                let a = full.pixel(px, py);
                let b = part.pixel(px - r.x, py - r.y);
                if a != b {
                    return Err(format!(
                        "window {window:?} around {want:?}: pixel ({px}, {py}) {b:?}, full decode {a:?}"
                    ));
                }
            }
        }
        checked += 1;
    }
    Ok(Some(checked))
}

/// The CPU route for a file whose bytes are a PNG or a WebP whatever its
/// name (issue 19, item 4), as the workers take it: decoded to RGB within
/// the pixel limit, or a typed error. Returns whether it decoded.
pub fn image(data: &[u8]) -> bool {
    if !crate::decode::is_png_or_webp(data) {
        return false;
    }
    let mut img = Image::default();
    if crate::decode::decode_png_or_webp(data, MAX_PIXELS, &mut img).is_err() {
        return false;
    }
    assert!(img.width > 0 && img.height > 0, "decoded an empty image");
    assert!(u64::from(img.width) * u64::from(img.height) <= MAX_PIXELS);
    assert_eq!(img.data.len(), img.width as usize * img.height as usize * 3);
    true
}

/// A WebDataset shard's listing (issue 18) from arbitrary bytes, as `gpufeed
/// index` and the pipeline walk a local shard (and as a download streams
/// it, to the same index): the tar walk keeps what it found before and
/// after any damage (going on at the next valid header), in shard order,
/// the index file's text gives back exactly that,
/// and the members group into samples, one with a member past the end
/// failing. Returns the members found, `None` where the shard is damaged.
pub fn shard(data: &[u8]) -> Option<usize> {
    use crate::source::index::{Index, Listing};
    use crate::source::walk::{walk_file, walk_stream};
    let ix = walk_file(std::io::Cursor::new(data))
        .0
        .index(data.len() as u64);
    // A download walks the same bytes as a stream: the same members, and
    // damage where a file's walk finds it (the tar crate's words for it
    // may differ).
    let streamed = walk_stream(data).0.index(data.len() as u64);
    assert_eq!(
        (
            &streamed.entries,
            &streamed.borders,
            streamed.damage.is_some()
        ),
        (&ix.entries, &ix.borders, ix.damage.is_some()),
        "a stream's walk differs from a file's"
    );
    assert_eq!(ix.damage.is_some(), !ix.borders.is_empty());
    assert!(
        ix.entries.windows(2).all(|w| w[0].offset < w[1].offset),
        "a walk went back"
    );
    let text = ix.to_text();
    let back = Index::parse(&text).expect("an index's own text parses");
    assert_eq!(
        (back.shard_bytes, &back.entries),
        (ix.shard_bytes, &ix.entries),
        "the index text gives back what the walk found"
    );
    // An index file cut short is refused, never read as fewer members or
    // another label (format 2); where the input cuts it is the input's.
    let cut = data.len() % text.len();
    if text.is_char_boundary(cut) {
        assert_eq!(Index::parse(&text[..cut]), None, "a cut index was read");
    }
    // Nor does arbitrary text as an index file panic.
    if let Ok(t) = std::str::from_utf8(data) {
        let _ = Index::parse(t);
    }
    let (mut samples, mut members) = (Vec::new(), Vec::<crate::source::Member>::new());
    let mut left_out = Default::default();
    Listing {
        samples: &mut samples,
        members: &mut members,
        left_out: &mut left_out,
    }
    .add(&ix, 0, std::path::Path::new("shard.tar"));
    assert!(samples.len() <= ix.entries.len());
    for m in &members {
        let whole = m
            .offset
            .checked_add(m.len)
            .is_some_and(|e| e <= ix.shard_bytes);
        assert!(whole || m.problem.is_some(), "a cut member read as whole");
    }
    assert_eq!(
        left_out.damaged_shards.is_empty(),
        ix.damage.is_none(),
        "damage not named"
    );
    ix.damage.is_none().then_some(ix.entries.len())
}

/// The progressive route's host side (issue 16): the scan planner
/// (`jpeg/scans.rs`, progressive and sequential files), and with the
/// `kernel-emu` feature the three kernels compiled for the host. A plan it accepts addresses only the file and
/// itself: every scan's segment inside the bytes, every table index and
/// component in range, each grid whole MCUs that cover the blocks its
/// non-interleaved scans read. The kernels answer any scan data with a
/// status per chain, never a read or write outside their buffers (under
/// `cargo fuzz` with `CXXFLAGS=-fsanitize=address` the host-compiled
/// kernels are checked too). Returns whether the file planned and, with
/// the kernels, whether every chain decoded.
pub fn progressive(data: &[u8]) -> bool {
    let Ok(p) = crate::jpeg::scans::plan(data, MAX_PIXELS) else {
        return false;
    };
    assert!(p.width > 0 && p.height > 0, "accepted a zero dimension");
    assert!(u64::from(p.width) * u64::from(p.height) <= MAX_PIXELS);
    for c in &p.comps {
        assert!(
            c.stride >= c.bw && c.rows >= c.bh,
            "grid smaller than its blocks"
        );
    }
    for s in &p.scans {
        let end = u64::from(s.offset) + u64::from(s.length);
        assert!(end <= data.len() as u64, "scan segment past the file");
        let table = |t: u16| t == u16::MAX || usize::from(t) < p.tables.len();
        for &(c, dc, ac) in &s.comps {
            assert!(
                usize::from(c) < p.comps.len(),
                "scan component out of range"
            );
            assert!(table(dc) && table(ac), "Huffman table index out of range");
        }
    }
    kernels(&p, data)
}

/// The three kernels compiled for the host on a plan of `data`: whether
/// every chain decoded (without `kernel-emu`: nothing to run, true).
///
/// Then the file twice in one launch, as a CUDA lane batches its files
/// (`prog_batch::emu_rgb_batch`: one layout, the second file's Huffman
/// tables found equal to the first's and shared, the second copied on its
/// own as from a reader's page-locked block): each copy must give the
/// file's own chain statuses and pixels, byte for byte, faults included,
/// except a faulted file's pixels with the scans' warps on threads
/// (`GPUFEED_EMU_THREADS=1`, as on a GPU): there a chain's later scans
/// stop wherever they had got to when an earlier one faulted (the file
/// goes to the CPU; kernels/progressive.cu, "Scans in a pipeline"). A
/// layout that let one file's scans read another's bytes or tables, or
/// write past its own grids, shows here. One input in four, picked by its
/// bytes (so that a reproduction takes the same path): the batch triples
/// the kernels' time, and CI's two million mutants would take three
/// minutes more.
#[cfg(feature = "kernel-emu")]
fn kernels(p: &crate::jpeg::scans::Plan, data: &[u8]) -> bool {
    let mut out = vec![0u8; p.width as usize * p.height as usize * 3];
    let Ok(status) = crate::cuda::pixels::emu_decode(p, data, &mut out) else {
        return false;
    };
    let clean = status.iter().all(|&s| s == 0);
    let fnv = (data.iter()).fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    if fnv % 8 == 1 {
        split_equals_one_thread(data, fnv);
    }
    if fnv % 4 != 0 {
        return clean;
    }
    let path = std::path::Path::new("fuzzed.jpg");
    let twice = crate::cuda::prog_batch::emu_rgb_batch(
        &[(path, data), (path, data)],
        &[false, true],
        MAX_PIXELS,
    )
    .expect("a file that decodes alone lays out in a batch");
    let in_turn = std::env::var("GPUFEED_EMU_THREADS").map_or(true, |v| !v.starts_with('1'));
    for (i, img) in twice.iter().enumerate() {
        assert_eq!(img.status, status, "batch file {i}: the chains' statuses");
        if clean || in_turn {
            assert!(img.pixels == out, "batch file {i}: the pixels");
        }
    }
    clean
}

/// The split kernels (subsequences of 64 bytes, 0, 3 or 16 rounds by the
/// input's hash) against one thread: the same statuses, fault for fault
/// (the split kernels name a fault themselves since session 49), and the
/// same coefficients where clean, as `tests/mutation.rs` checks on mutated
/// files; here guided by the kernels' coverage. One input in eight.
#[cfg(feature = "kernel-emu")]
fn split_equals_one_thread(data: &[u8], hash: u64) {
    use crate::cuda::progressive::emu_coefficients_split;
    let path = std::path::Path::new("fuzzed.jpg");
    let Ok((one, _)) = emu_coefficients_split(path, data, MAX_PIXELS, (0, 0)) else {
        return;
    };
    let rounds = [0, 3, 16][(hash >> 8) as usize % 3];
    let (split, c) = emu_coefficients_split(path, data, MAX_PIXELS, (64, rounds))
        .expect("a file planned once plans again");
    assert_eq!(split.status, one.status, "split: the chains' statuses");
    assert_eq!(c.synced, c.split, "split: a chain went to one thread");
    if one.status.iter().all(|&s| s == 0) {
        assert!(split.comps == one.comps, "split: the coefficients");
    }
}

#[cfg(not(feature = "kernel-emu"))]
fn kernels(_: &crate::jpeg::scans::Plan, _: &[u8]) -> bool {
    true
}
