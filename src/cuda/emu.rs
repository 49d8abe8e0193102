//! The kernel source compiled for the host (feature `kernel-emu`,
//! tests/emu/augment_emu.cpp): the same arithmetic as the CUBIN, run on CPU
//! threads. It backs the kernel tests and the emulated device that lets the
//! whole CUDA pipeline stage (staging, tiles, offsets, flushes) run in CI
//! without a GPU.

use super::desc::{GfLaunch, GfTile};
use super::stage::StageLaunch;

unsafe extern "C" {
    fn gf_emu_augment(
        which: i32,
        tiles: *const GfTile,
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

/// The host stand-in for `cvt.rn.f16.f32`.
#[cfg(test)]
pub(crate) fn f32_to_f16_bits(v: f32) -> u16 {
    // SAFETY: a pure function of its argument.
    unsafe { gf_emu_f16(v) }
}

/// Run the launches of one pipeline flush on the emulated device: `staging`
/// holds the tiles, `sources` the buffers their pixels may come from,
/// `outs[l.out]` is the output of launch `l` (`elem` bytes per element).
/// Every tile is checked against those buffers first, so a packing bug is
/// an error, not a wild read or write.
pub(crate) fn run_launches(
    staging: &[u8],
    sources: &[&[u8]],
    launches: &[StageLaunch],
    outs: &mut [&mut [u8]],
    elem: usize,
) -> Result<(), String> {
    let ranges: Vec<(u64, u64)> = sources
        .iter()
        .map(|s| (s.as_ptr() as u64, s.as_ptr() as u64 + s.len() as u64))
        .collect();
    for l in launches {
        let n = l.params.n_tiles as usize;
        let bytes = staging
            .get(l.tiles_at..l.tiles_at + n * size_of::<GfTile>())
            .ok_or("tile list outside the staging")?;
        let tiles: Vec<GfTile> = bytes
            .chunks_exact(size_of::<GfTile>())
            .map(bytemuck::pod_read_unaligned)
            .collect();
        let out = outs.get_mut(l.out).ok_or("no such output")?;
        let plane = l.params.out_w as u64 * l.params.out_h as u64;
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
        // by construction of the launch (the caller's dtype).
        unsafe { augment(l.which, &tiles, l.params, out) };
    }
    Ok(())
}
