//! The kernel source compiled for the host (feature `kernel-emu`,
//! tests/emu/augment_emu.cpp): the same arithmetic as the CUBIN, run on CPU
//! threads. It backs the kernel tests and the emulated device that lets the
//! whole CUDA pipeline stage (staging, tiles, offsets, flushes) run in CI
//! without a GPU.

use super::desc::{GfLaunch, GfMix, GfPhoto, GfTile};
use super::jpeg_desc::{GfChain, GfColor, GfHuff, GfPlane, GfScan, GfSplit};
use super::launch::{LaunchKind, StageLaunch};

unsafe extern "C" {
    fn gf_emu_augment(
        which: i32,
        tiles: *const GfTile,
        p: GfLaunch,
        out: *mut std::ffi::c_void,
    ) -> i32;
    fn gf_emu_mix(which: i32, m: GfMix, out: *mut std::ffi::c_void) -> i32;
    fn gf_emu_progressive(
        chains: *const GfChain,
        n: u32,
        scans: *const GfScan,
        n_scans: u32,
        tables: *const GfHuff,
        n_tables: u32,
        status: *mut u32,
    );
    fn gf_emu_split(p: GfSplit, redone: *mut u32);
    fn gf_emu_idct(planes: *const GfPlane, n: u32, blocks: u32);
    fn gf_emu_color(images: *const GfColor, n: u32);
    fn gf_emu_photo(
        which: i32,
        draws: *const GfPhoto,
        p: GfLaunch,
        out: *mut std::ffi::c_void,
    ) -> i32;
    #[cfg(test)]
    fn gf_emu_f16(v: f32) -> u16;
}

/// Run kernel `which` (an index into `AUGMENT_KERNELS`) over `tiles` into
/// `out`, synchronously.
///
/// # Safety
///
/// Every tile's `src` must point to readable host memory of at least
/// `src_pitch * src_height` bytes, every tile's output (`dst` plus
/// `3 * out_w * out_h` elements) must lie inside `out`, and `out`'s
/// elements must be the type kernel `which` writes.
pub(crate) unsafe fn augment(which: usize, tiles: &[GfTile], p: GfLaunch, out: &mut [u8]) {
    assert!(which < super::AUGMENT_KERNELS.len());
    assert_eq!(p.n_tiles as usize, tiles.len());
    // SAFETY: the tile list is a live slice of n_tiles descriptors; source
    // and output validity are the caller's contract (see # Safety).
    let rc = unsafe { gf_emu_augment(which as i32, tiles.as_ptr(), p, out.as_mut_ptr().cast()) };
    assert_eq!(rc, 0, "gf_emu_augment rejected kernel {which}");
}

/// Run `gf_progressive` (kernels/progressive.cu) over `chains`, one
/// emulated thread per chain in turn; `status[i]` gets chain i's code.
/// `status` must hold 0s, or what [`split`] left there.
///
/// # Safety
///
/// Every chain's `data` must point to `data_len` readable bytes and each of
/// its components' `coef` to `stride * rows * 64` writable `i16` that no
/// other chain's scans write (the plan's chains code disjoint bands).
pub(crate) unsafe fn progressive(
    chains: &[GfChain],
    scans: &[GfScan],
    tables: &[GfHuff],
    status: &mut [u32],
) {
    assert_eq!(chains.len(), status.len());
    // SAFETY: the slices are live for the synchronous call and their
    // lengths are passed with them; the addresses inside the descriptors
    // are the caller's contract (# Safety).
    unsafe {
        gf_emu_progressive(
            chains.as_ptr(),
            chains.len() as u32,
            scans.as_ptr(),
            scans.len() as u32,
            tables.as_ptr(),
            tables.len() as u32,
            status.as_mut_ptr(),
        )
    }
}

/// Run the split kernels' four steps (kernels/progressive.cu) for `p`,
/// which must be followed by [`progressive`] over the same chains: for
/// each chain, how many of its subsequences `gf_split_check` decoded again
/// (the rounds had left them out of step).
///
/// # Safety
///
/// `p`'s addresses must be host memory: `n` chains, `n_scans` scans,
/// `n_tables` tables, `n + 1` sorted `sub_first` entries from 0 to
/// `n_subs`, `2 * n_subs` writable `GfSync` records (`SYNC_BYTES` each,
/// 4-aligned) and `n` statuses, each 0; the chains' own addresses as for
/// [`progressive`].
pub(crate) unsafe fn split(p: GfSplit) -> Vec<u32> {
    let mut redone = vec![0u32; p.n as usize];
    // SAFETY: the caller's contract (# Safety); `redone` holds the `n`
    // counts the harness writes.
    unsafe { gf_emu_split(p, redone.as_mut_ptr()) };
    redone
}

/// Run `gf_idct` (kernels/pixels.cu) over `blocks` blocks of `planes`.
///
/// # Safety
///
/// Every plane's `coef` must point to `stride * rows * 64` readable `i16`
/// and its `out` to as many writable bytes, apart from every other's.
pub(crate) unsafe fn idct(planes: &[GfPlane], blocks: u32) {
    // SAFETY: the list is a live slice of planes.len() descriptors; the
    // buffers they address are the caller's contract (# Safety).
    unsafe { gf_emu_idct(planes.as_ptr(), planes.len() as u32, blocks) }
}

/// Run `gf_color` (kernels/pixels.cu) over `images`.
///
/// # Safety
///
/// Every image's planes must hold `dh` rows of `pitch` readable bytes and
/// its `out` `height` rows of `out_pitch` writable bytes.
pub(crate) unsafe fn color(images: &[GfColor]) {
    // SAFETY: as for `idct`.
    unsafe { gf_emu_color(images.as_ptr(), images.len() as u32) }
}

/// Run photometric kernel `which` (an index into `PHOTO_KERNELS`) over
/// `draws` into `out`, synchronously.
///
/// # Safety
///
/// Every draw's `src` and `tmp` must point to `3 * out_w * out_h` f32 of
/// writable host memory each, apart from every other draw's, and its output
/// (`dst` plus `3 * out_w * out_h` elements) must lie inside `out`, whose
/// elements must be the type kernel `which` writes.
pub(crate) unsafe fn photo(which: usize, draws: &[GfPhoto], p: GfLaunch, out: &mut [u8]) {
    assert!(which < super::PHOTO_KERNELS.len());
    assert_eq!(p.n_tiles as usize, draws.len());
    // SAFETY: the caller's contract (see # Safety); the list is a live
    // slice of n_tiles descriptors.
    let rc = unsafe { gf_emu_photo(which as i32, draws.as_ptr(), p, out.as_mut_ptr().cast()) };
    assert_eq!(rc, 0, "gf_emu_photo rejected kernel {which}");
}

/// The host stand-in for `cvt.rn.f16.f32`.
#[cfg(test)]
pub(crate) fn f32_to_f16_bits(v: f32) -> u16 {
    // SAFETY: a pure function of its argument.
    unsafe { gf_emu_f16(v) }
}

/// Run the launches of one pipeline flush on the emulated device: `staging`
/// holds the descriptors, `sources` the buffers their pixels may come from,
/// `outs[v]` is the output of a launch into view `v` (`elem` bytes per
/// element) and `scratch` the photometric planes (f32). Every descriptor is
/// checked against those buffers first, so a packing bug is an error, not
/// a wild read or write.
pub(crate) fn run_launches(
    staging: &[u8],
    sources: &[&[u8]],
    launches: &[StageLaunch],
    outs: &mut [&mut [u8]],
    mut scratch: Option<&mut [u8]>,
    elem: usize,
) -> Result<(), String> {
    let ranges: Vec<(u64, u64)> = sources
        .iter()
        .map(|s| (s.as_ptr() as u64, s.as_ptr() as u64 + s.len() as u64))
        .collect();
    let scratch_range = scratch
        .as_deref()
        .map(|s| (s.as_ptr() as u64, s.as_ptr() as u64 + s.len() as u64));
    for l in launches {
        let n = l.params.n_tiles as usize;
        let plane = l.params.out_w as u64 * l.params.out_h as u64;
        let (out, elem): (&mut [u8], usize) = match l.out {
            Some(v) => (outs.get_mut(v).ok_or("no such output")?, elem),
            None => (scratch.as_deref_mut().ok_or("no scratch")?, 4),
        };
        if let LaunchKind::Mix(m) = l.kind {
            if u64::from(m.n) * 3 * u64::from(m.out_w) * u64::from(m.out_h) * elem as u64
                > out.len() as u64
            {
                return Err("mixed images outside the buffer".into());
            }
            // SAFETY: the n images lie inside `out` (checked above) and
            // `which` matches its element size by construction.
            let rc = unsafe { gf_emu_mix(l.which as i32, m, out.as_mut_ptr().cast()) };
            if rc != 0 {
                return Err(format!("gf_emu_mix rejected kernel {}", l.which));
            }
            continue;
        }
        if l.kind == LaunchKind::Photo {
            let draws: Vec<GfPhoto> = read_descriptors(staging, l.tiles_at, n)?;
            let (lo, hi) = scratch_range.ok_or("photometric launch without a scratch")?;
            for d in &draws {
                for at in [d.src, d.tmp] {
                    if at < lo || at + 12 * plane > hi || at % 4 != 0 {
                        return Err(format!("photometric planes at {at:#x} outside the scratch"));
                    }
                }
                if d.src.abs_diff(d.tmp) < 12 * plane {
                    return Err("photometric planes overlap".into());
                }
                if (d.dst + 3 * plane) * elem as u64 > out.len() as u64 {
                    return Err("photometric output outside the buffer".into());
                }
            }
            // SAFETY: checked above: every draw's planes lie inside the
            // scratch, apart, and its output inside `out`; `which` matches
            // the element size of `out` by construction of the launch.
            let rc = unsafe {
                gf_emu_photo(
                    l.which as i32,
                    draws.as_ptr(),
                    l.params,
                    out.as_mut_ptr().cast(),
                )
            };
            if rc != 0 {
                return Err(format!("gf_emu_photo rejected kernel {}", l.which));
            }
            continue;
        }
        let tiles: Vec<GfTile> = read_descriptors(staging, l.tiles_at, n)?;
        for t in &tiles {
            let end = t.src + t.src_pitch as u64 * t.src_height as u64;
            let Some(&(_, hi)) = ranges.iter().find(|(lo, hi)| t.src >= *lo && end <= *hi) else {
                return Err(format!(
                    "tile source {:#x}..{end:#x} outside every buffer",
                    t.src
                ));
            };
            let last_row_end = t.src + (t.src_height.max(1) as u64 - 1) * t.src_pitch as u64;
            let need_x = (t.x.start as u64 + t.x.len as u64) * 3;
            let need_y = t.y.start as u64 + t.y.len as u64;
            if need_x > t.src_pitch as u64 || need_y > t.src_height as u64 || last_row_end > hi {
                return Err("tile window outside its source".into());
            }
            if (t.dst + 3 * plane) * elem as u64 > out.len() as u64 {
                return Err("tile output outside the buffer".into());
            }
        }
        // SAFETY: checked above: every tile's source (pitch * height bytes)
        // lies inside one of `sources`, its window inside the source, and its
        // output inside `out`; `which` matches the element size of `out`
        // by construction of the launch (the caller's dtype, or f32 for the
        // scratch).
        unsafe { augment(l.which, &tiles, l.params, out) };
    }
    Ok(())
}

/// `n` descriptors of type `T` from `staging` at byte `at`.
fn read_descriptors<T: bytemuck::Pod>(
    staging: &[u8],
    at: usize,
    n: usize,
) -> Result<Vec<T>, String> {
    let bytes = staging
        .get(at..at + n * size_of::<T>())
        .ok_or("descriptor list outside the staging")?;
    Ok(bytes
        .chunks_exact(size_of::<T>())
        .map(bytemuck::pod_read_unaligned)
        .collect())
}
