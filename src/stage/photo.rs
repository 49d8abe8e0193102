//! The photometric draws of a flush (issue 19). A draw with photometric
//! ops is resampled by the augment kernel into f32 planes of the stage's
//! scratch (NCHW, 0..=255, flipped, not normalized), then the photometric
//! kernel (`kernels/photo.cu`, one block per draw) applies the ops and
//! writes the output. Draws are packed in rounds that fit the scratch; each
//! round is one resample launch and one photometric launch per view, all on
//! the stage's stream, so a round reuses the scratch only after the one
//! before has read it. Draws whose ops all came out "off" take the fused
//! path like any other.

use super::cuda::{LaunchKind, StageLaunch};
use super::{MAX_TILES_PER_LAUNCH, kernel_index};
use crate::augment::photo::PhotoParams;
use crate::config::Config;
use crate::cuda::desc::{GfLaunch, GfPhoto, GfTile};
use crate::error::{Error, Result};

/// The scratch a stage allocates at most, in bytes: room for 256 draws of
/// 224 × 224 (two planes sets of 3 × 224 × 224 f32 each, about 1.2 MB per
/// draw) per round; a batch with more photometric draws takes more rounds.
const MAX_SCRATCH_BYTES: usize = 320 << 20;

/// Scratch f32 elements one draw of a `width × height` view uses: its
/// planes and the blur's row pass.
pub(super) fn draw_scratch(width: usize, height: usize) -> usize {
    2 * 3 * width * height
}

/// Scratch elements for `cfg`, or `None` when no view has photometric
/// ops: every photometric draw of a batch, capped at
/// [`MAX_SCRATCH_BYTES`] and at 4 × `staging_bytes` (the setting that
/// bounds the stage's memory), never less than one draw of the largest
/// view.
pub(super) fn scratch_len(cfg: &Config) -> Option<usize> {
    let photo = cfg.views.iter().filter(|v| v.photo.any());
    let largest = photo
        .clone()
        .map(|v| draw_scratch(v.width, v.height))
        .max()?;
    let all: usize = photo
        .map(|v| cfg.batch_size * v.count * draw_scratch(v.width, v.height))
        .sum();
    Some(
        all.min(MAX_SCRATCH_BYTES / 4)
            .min(cfg.staging_bytes)
            .max(largest),
    )
}

/// The descriptors of one round, per view.
type Round = Vec<Vec<(GfTile, GfPhoto)>>;

/// Append the launches of the photometric draws `draws` (per view: the
/// tile as the fused path would run it, and the draw's ops), writing
/// their descriptors into `host` from `*tiles_at` up to `end`.
/// `(base, len)`: the scratch's device address and length in f32.
#[allow(clippy::too_many_arguments)]
pub(super) fn pack(
    cfg: &Config,
    draws: &[Vec<(GfTile, PhotoParams)>],
    (base, len): (u64, usize),
    host: &mut [u8],
    tiles_at: &mut usize,
    end: usize,
    launches: &mut Vec<StageLaunch>,
) -> Result<()> {
    let mut round: Round = vec![Vec::new(); cfg.views.len()];
    let mut used = 0usize;
    for (v, view) in cfg.views.iter().enumerate() {
        let n = 3 * view.width * view.height;
        for (tile, pp) in &draws[v] {
            if used + 2 * n > len {
                emit(cfg, &mut round, host, tiles_at, end, launches)?;
                used = 0;
            }
            if 2 * n > len {
                return Err(Error::Device(
                    "photometric scratch smaller than one draw (stage bug)".into(),
                ));
            }
            let mut t = *tile;
            t.dst = used as u64;
            let at = |k: usize| base + 4 * k as u64;
            let d = GfPhoto::new(at(used), at(used + n), tile.dst, pp);
            round[v].push((t, d));
            used += 2 * n;
        }
    }
    emit(cfg, &mut round, host, tiles_at, end, launches)
}

/// Write `items` as descriptors at `*at` (below `end`) and launch them in
/// chunks that fit a grid.
fn put<T: bytemuck::Pod>(
    items: &[T],
    host: &mut [u8],
    at: &mut usize,
    end: usize,
    mut launch: impl FnMut(usize, u32),
) -> Result<()> {
    for chunk in items.chunks(MAX_TILES_PER_LAUNCH) {
        let bytes: &[u8] = bytemuck::cast_slice(chunk);
        if *at + bytes.len() > end {
            return Err(Error::Device(
                "photometric descriptors overflow the staging (stage bug)".into(),
            ));
        }
        host[*at..*at + bytes.len()].copy_from_slice(bytes);
        launch(*at, chunk.len() as u32);
        *at += bytes.len();
    }
    Ok(())
}

/// The launches of one round: every view's resample into the scratch,
/// then every view's photometric pass out of it.
fn emit(
    cfg: &Config,
    round: &mut Round,
    host: &mut [u8],
    tiles_at: &mut usize,
    end: usize,
    launches: &mut Vec<StageLaunch>,
) -> Result<()> {
    let params = |v: usize, n: u32, photo: bool| {
        let view = &cfg.views[v];
        let fma = if photo {
            cfg.fma
        } else {
            crate::augment::Fma::IDENTITY
        };
        GfLaunch {
            out_w: view.width as u32,
            out_h: view.height as u32,
            antialias: cfg.antialias as u32,
            n_tiles: n,
            scale: fma.scale,
            shift: fma.shift,
        }
    };
    let f32_nchw = kernel_index(crate::augment::DType::F32, crate::augment::Layout::Nchw);
    for (v, draws) in round.iter().enumerate() {
        let tiles: Vec<GfTile> = draws.iter().map(|d| d.0).collect();
        put(&tiles, host, tiles_at, end, |at, n| {
            launches.push(StageLaunch {
                which: f32_nchw,
                kind: LaunchKind::Augment,
                tiles_at: at,
                params: params(v, n, false),
                out: None,
            })
        })?;
    }
    let which = kernel_index(cfg.dtype, cfg.layout);
    for (v, draws) in round.iter_mut().enumerate() {
        let descs: Vec<GfPhoto> = draws.iter().map(|d| d.1).collect();
        put(&descs, host, tiles_at, end, |at, n| {
            launches.push(StageLaunch {
                which,
                kind: LaunchKind::Photo,
                tiles_at: at,
                params: params(v, n, true),
                out: Some(v),
            })
        })?;
        draws.clear();
    }
    Ok(())
}
