//! The fused kernel's achieved bandwidth against the device's copy
//! bandwidth (issue 4): decoded ImageNet-size images already on the device,
//! one launch per batch, timed with CUDA events.

use cudarc::driver::sys::CUevent_flags;
use half::f16;

use super::desc::{GfLaunch, GfTile};
use super::launch::AugmentKernels;
use crate::augment::Normalize;
use crate::augment::params::{Transform, sample_params};
use crate::decode::Image;
use crate::error::{Error, Result};

/// Index of `gf_augment_f16_nchw` in `AUGMENT_KERNELS` (and of the f16
/// NCHW entry of the other kernel lists).
const F16_NCHW: usize = 2;
/// Index of `gf_augment_f32_nchw`: what resamples into the scratch.
const F32_NCHW: usize = 6;

/// What [`kernel_bandwidth`] measured.
#[derive(Debug, Clone)]
pub struct KernelBench {
    /// Device name.
    pub device: String,
    /// `sm_XY` the kernel was compiled for.
    pub arch: String,
    /// Images per launch.
    pub batch: usize,
    /// Mean time of one launch in milliseconds.
    pub kernel_ms: f64,
    /// Bytes the kernel reads (each tile's source crop window) and writes
    /// (the f16 output) per launch.
    pub bytes_per_launch: u64,
    /// `bytes_per_launch / kernel time`, GB/s.
    pub kernel_gbps: f64,
    /// Device-to-device copy bandwidth (read + write bytes per second) of a
    /// 256 MiB buffer, GB/s: the reference the kernel is measured against.
    pub copy_gbps: f64,
    /// Images per second through the kernel alone.
    pub images_per_s: f64,
}

/// Run RandomResizedCrop + flip + normalize to `size`×`size` f16 NCHW over
/// `batch` images drawn from `images` (cycled), `iters` timed launches after
/// a warm-up, on CUDA device `index`.
pub fn kernel_bandwidth(
    index: usize,
    images: &[Image],
    batch: usize,
    size: usize,
    iters: usize,
) -> Result<KernelBench> {
    let (k, device, srcs) = setup("kernel_bandwidth", index, images, batch, iters)?;
    let n = 3 * size * size;
    let mut tiles = Vec::with_capacity(batch);
    let mut read = 0u64;
    for i in 0..batch {
        let img = &images[i % images.len()];
        let p = sample_params(
            Transform::RANDOM_RESIZED_CROP,
            0.5,
            0.0,
            0,
            0,
            i as u64,
            0,
            (img.width, img.height),
            (size as u32, size as u32),
        );
        read += p.x.len as u64 * p.y.len as u64 * 3;
        let src = k.address(&srcs[i % images.len()]);
        tiles.push(GfTile::new(
            src,
            img.width * 3,
            img.height,
            &p,
            (size, size),
            (i * n) as u64,
        ));
    }
    let d_tiles = k.upload(&tiles)?;
    let mut out = k.zeros::<f16>(batch * n)?;
    let fma = Normalize::IMAGENET.fold();
    let launch = GfLaunch {
        out_w: size as u32,
        out_h: size as u32,
        antialias: 0,
        n_tiles: batch as u32,
        scale: fma.scale,
        shift: fma.shift,
    };
    let kernel_ms = time_ms(&k, iters, || {
        // SAFETY: every tile's src is an uploaded image of pitch * height
        // bytes alive in `srcs` for this whole function; dst offsets stay
        // inside `out` (batch * n f16 elements); kernel 2 writes f16.
        unsafe { k.launch(F16_NCHW, &d_tiles, launch, &mut out) }
    })?;
    let written = (batch * n * 2) as u64;
    let bytes_per_launch = read + written;

    // Copy bandwidth: device-to-device copies of 256 MiB, read + write.
    let copy_bytes = 256usize << 20;
    let a = k.zeros::<u8>(copy_bytes)?;
    let mut b = k.zeros::<u8>(copy_bytes)?;
    let copy_ms = time_ms(&k, 10, || {
        k.stream
            .memcpy_dtod(&a, &mut b)
            .map_err(Error::cuda("copy"))
    })?;
    drop(srcs);
    Ok(KernelBench {
        device,
        arch: k.arch.clone(),
        batch,
        kernel_ms,
        bytes_per_launch,
        kernel_gbps: bytes_per_launch as f64 / (kernel_ms * 1e6),
        copy_gbps: (2 * copy_bytes) as f64 / (copy_ms * 1e6),
        images_per_s: batch as f64 / (kernel_ms / 1e3),
    })
}

/// What every kernel benchmark starts from: the kernels on device `index`,
/// its name, and `images` uploaded (checked to be there, with a batch and
/// iterations to time; `what` names the benchmark in the error).
fn setup(
    what: &str,
    index: usize,
    images: &[Image],
    batch: usize,
    iters: usize,
) -> Result<(AugmentKernels, String, Vec<cudarc::driver::CudaSlice<u8>>)> {
    if images.is_empty() || batch == 0 || iters == 0 {
        return Err(Error::Config(format!(
            "{what} needs images, batch and iters"
        )));
    }
    let k = AugmentKernels::new(index)?;
    let name = super::devices()?.swap_remove(index).name;
    let srcs = images
        .iter()
        .map(|img| k.upload(&img.data))
        .collect::<Result<Vec<_>>>()?;
    Ok((k, name, srcs))
}

/// Mean milliseconds per call of `run` on `k`'s stream over `iters` calls
/// timed with CUDA events, after one untimed warm-up call.
fn time_ms(k: &AugmentKernels, iters: usize, mut run: impl FnMut() -> Result<()>) -> Result<f64> {
    run()?;
    let timing = Some(CUevent_flags::CU_EVENT_DEFAULT);
    let start = k
        .stream
        .record_event(timing)
        .map_err(Error::cuda("event"))?;
    for _ in 0..iters {
        run()?;
    }
    let end = k
        .stream
        .record_event(timing)
        .map_err(Error::cuda("event"))?;
    end.synchronize().map_err(Error::cuda("sync"))?;
    Ok(start.elapsed_ms(&end).map_err(Error::cuda("elapsed"))? as f64 / iters as f64)
}

/// What [`recipe_time`] measured: the device work of one batch of a
/// recipe (issue 19), every view and photometric op, from decoded images
/// already on the device.
#[derive(Debug, Clone)]
pub struct RecipeBench {
    /// Device name.
    pub device: String,
    /// Images per batch.
    pub batch: usize,
    /// Draws per batch (all views).
    pub draws: usize,
    /// Of those, draws that took the photometric path.
    pub photo_draws: usize,
    /// Kernel launches per batch.
    pub launches: usize,
    /// Mean device time of one batch in milliseconds.
    pub batch_ms: f64,
}

/// Time the device work of one `batch` of `recipe` (f16 NCHW): per view,
/// the fused launch for draws without photometric ops, then the resample
/// into the scratch and the photometric kernel for the others, as the
/// pipeline's stage launches them (one round: the scratch holds the whole
/// batch). `iters` timed batches after a warm-up, on CUDA device `index`.
pub fn recipe_time(
    index: usize,
    images: &[Image],
    batch: usize,
    recipe: &crate::augment::Recipe,
    iters: usize,
) -> Result<RecipeBench> {
    use super::desc::GfPhoto;
    use super::launch::LaunchKind;
    use crate::augment::photo::photo_params;
    let (k, device, srcs) = setup("recipe_time", index, images, batch, iters)?;
    let fma = recipe
        .normalize
        .map_or(crate::augment::Fma::IDENTITY, Normalize::fold);
    // Per view: fused tiles, scratch tiles, photometric descriptors.
    struct Lists {
        out: cudarc::driver::CudaSlice<f16>,
        fused: Vec<GfTile>,
        staged: Vec<GfTile>,
        photo: Vec<GfPhoto>,
    }
    let photo_len: usize = recipe
        .views
        .iter()
        .filter(|v| v.photo.any())
        .map(|v| batch * v.count * 6 * v.width * v.height)
        .sum();
    let scratch = k.zeros::<f32>(photo_len.max(1))?;
    let base = k.address(&scratch);
    let mut used = 0usize;
    let mut lists: Vec<Lists> = Vec::new();
    let mut draw = 0u64;
    let (mut draws, mut photo_draws) = (0, 0);
    for v in &recipe.views {
        let n = 3 * v.width * v.height;
        let mut l = Lists {
            out: k.zeros::<f16>(batch * v.count * n)?,
            fused: Vec::new(),
            staged: Vec::new(),
            photo: Vec::new(),
        };
        for i in 0..batch {
            let img = &images[i % images.len()];
            for c in 0..v.count {
                let size = (v.width as u32, v.height as u32);
                let mut p = sample_params(
                    v.transform,
                    v.flip_h,
                    v.flip_v,
                    0,
                    0,
                    i as u64,
                    draw + c as u64,
                    (img.width, img.height),
                    size,
                );
                p.photo = photo_params(&v.photo, 0, 0, i as u64, draw + c as u64, size);
                let src = k.address(&srcs[i % images.len()]);
                let dst = ((i * v.count + c) * n) as u64;
                let tile =
                    GfTile::new(src, img.width * 3, img.height, &p, (v.width, v.height), dst);
                draws += 1;
                if p.photo.any() {
                    photo_draws += 1;
                    let at = |e: usize| base + 4 * e as u64;
                    let mut t = tile;
                    t.dst = used as u64;
                    l.staged.push(t);
                    l.photo
                        .push(GfPhoto::new(at(used), at(used + n), dst, &p.photo));
                    used += 2 * n;
                } else {
                    l.fused.push(tile);
                }
            }
        }
        draw += v.count as u64;
        lists.push(l);
    }
    // Upload the lists once; the timed loop only launches. Per view: the
    // fused tiles, the scratch tiles, the photometric descriptors.
    let mut bufs: Vec<[Option<(u64, GfLaunch)>; 3]> = Vec::new();
    let mut alive_tiles = Vec::new();
    let mut alive_descs = Vec::new();
    for (v, l) in recipe.views.iter().zip(&lists) {
        let params = |n: usize, fma: crate::augment::Fma| GfLaunch {
            out_w: v.width as u32,
            out_h: v.height as u32,
            antialias: 1,
            n_tiles: n as u32,
            scale: fma.scale,
            shift: fma.shift,
        };
        let mut row = [None; 3];
        for (slot, tiles, fm) in [
            (0, &l.fused, fma),
            (1, &l.staged, crate::augment::Fma::IDENTITY),
        ] {
            if !tiles.is_empty() {
                let d = k.upload(tiles)?;
                row[slot] = Some((k.address(&d), params(tiles.len(), fm)));
                alive_tiles.push(d);
            }
        }
        if !l.photo.is_empty() {
            let d = k.upload(bytemuck::cast_slice::<GfPhoto, u8>(&l.photo))?;
            row[2] = Some((k.address(&d), params(l.photo.len(), fma)));
            alive_descs.push(d);
        }
        bufs.push(row);
    }
    let mut scratch = scratch;
    let launches = bufs.iter().flatten().filter(|b| b.is_some()).count();
    let batch_ms = time_ms(&k, iters, || {
        for (l, row) in lists.iter_mut().zip(&bufs) {
            // SAFETY: every tile's src is an uploaded image alive in `srcs`
            // for this whole function; fused tiles write inside their
            // view's output (batch * count draws), scratch tiles and the
            // photometric planes inside `scratch` (sized for every
            // photometric draw, each at its own offset); the descriptor
            // lists stay alive in `alive_*`; kernel 2 (of each list) writes
            // f16 NCHW, kernel 6 f32 NCHW (the scratch).
            unsafe {
                if let Some((at, p)) = row[0] {
                    k.launch_any(LaunchKind::Augment, F16_NCHW, at, p, &mut l.out)?;
                }
                if let Some((at, p)) = row[1] {
                    k.launch_any(LaunchKind::Augment, F32_NCHW, at, p, &mut scratch)?;
                }
                if let Some((at, p)) = row[2] {
                    k.launch_any(LaunchKind::Photo, F16_NCHW, at, p, &mut l.out)?;
                }
            }
        }
        Ok(())
    })?;
    drop((alive_tiles, alive_descs, srcs));
    Ok(RecipeBench {
        device,
        batch,
        draws,
        photo_draws,
        launches,
        batch_ms,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn f16_nchw_index() {
        assert_eq!(
            super::super::AUGMENT_KERNELS[super::F16_NCHW],
            "gf_augment_f16_nchw"
        );
    }
}
