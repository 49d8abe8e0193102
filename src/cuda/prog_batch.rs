//! Many progressive files decoded by one launch of each kernel
//! (`gf_progressive`, `gf_idct`, `gf_color`) on CUDA device 0: the shape a
//! route would give them, and `gpufeed progressive-bench`, which times it
//! (issue 16: whether decoding progressive files on the GPU is fast enough
//! to take their CPU Huffman work away).

use std::path::Path;
use std::time::Instant;

use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};

use super::launch::AugmentKernels;
use super::pixels::{GfColor, GfPlane, Rgb, color, planes};
use super::progressive::{Launch, planned};
use crate::error::{Error, Result};
use crate::jpeg::scans::Plan;

/// A batch on the device: the files' bytes, their coefficient grids and
/// sample planes, their RGB8 outputs, and every descriptor, uploaded once.
pub(crate) struct DeviceBatch {
    scan: CudaFunction,
    idct: CudaFunction,
    colour: CudaFunction,
    launch: Launch,
    chains: CudaSlice<super::progressive::GfChain>,
    scans: CudaSlice<super::progressive::GfScan>,
    tables: CudaSlice<super::progressive::GfHuff>,
    planes: CudaSlice<GfPlane>,
    colors: CudaSlice<GfColor>,
    coef: CudaSlice<i16>,
    status: CudaSlice<u32>,
    rgb: CudaSlice<u8>,
    /// Each image's `(width, height, offset into rgb)`.
    images: Vec<(u32, u32, usize)>,
    blocks: u32,
    most_pixels: u32,
    // Kept alive for the descriptors that address them.
    _data: CudaSlice<u8>,
    _samples: CudaSlice<u8>,
}

impl DeviceBatch {
    /// Upload `files` (each planned, `plans[i]` for `files[i]`) to `k`'s
    /// device. Errors if a file's colour or sampling is not one
    /// `gf_color` does.
    pub(crate) fn new(k: &AugmentKernels, plans: &[Plan], files: &[&[u8]]) -> Result<DeviceBatch> {
        let (scan, idct, colour) = k.progressive()?;
        let s = &k.stream;
        let bytes: Vec<u8> = files.concat();
        let data = s.clone_htod(&bytes).map_err(Error::cuda("upload"))?;
        let coefs: usize = plans
            .iter()
            .map(|p| (0..p.comps.len()).map(|c| p.coefficients(c)).sum::<usize>())
            .sum();
        let pixels: usize = plans
            .iter()
            .map(|p| p.width as usize * p.height as usize * 3)
            .sum();
        let coef = k.zeros::<i16>(coefs.max(1))?;
        let samples = k.zeros::<u8>(coefs.max(1))?;
        let rgb = k.zeros::<u8>(pixels.max(1))?;
        let (data_at, coef_at, samples_at, rgb_at) = (
            k.address(&data),
            k.address(&coef),
            k.address(&samples),
            k.address(&rgb),
        );
        let mut launch = Launch::default();
        let (mut gplanes, mut gcolors, mut images) = (Vec::new(), Vec::new(), Vec::new());
        let (mut at_data, mut at_coef, mut at_rgb, mut blocks) = (0usize, 0usize, 0usize, 0u32);
        for (p, f) in plans.iter().zip(files) {
            let mut c_addr = Vec::new();
            let mut s_addr = Vec::new();
            for c in 0..p.comps.len() {
                c_addr.push(coef_at + 2 * at_coef as u64);
                s_addr.push(samples_at + at_coef as u64);
                at_coef += p.coefficients(c);
            }
            launch.push(p, data_at + at_data as u64, f.len(), &c_addr);
            let g = color(p, &s_addr, rgb_at + at_rgb as u64, p.width * 3).map_err(|source| {
                Error::Sample {
                    path: Path::new("(batch)").to_path_buf(),
                    source,
                }
            })?;
            let ps = planes(p, &c_addr, &s_addr, blocks);
            blocks += ps.iter().map(|g| g.stride * g.rows).sum::<u32>();
            gplanes.extend(ps);
            gcolors.push(g);
            images.push((p.width, p.height, at_rgb));
            at_data += f.len();
            at_rgb += p.width as usize * p.height as usize * 3;
        }
        let up = Error::cuda("upload");
        Ok(DeviceBatch {
            scan,
            idct,
            colour,
            chains: s.clone_htod(&launch.chains).map_err(&up)?,
            scans: s.clone_htod(&launch.scans).map_err(&up)?,
            tables: s.clone_htod(&launch.tables).map_err(&up)?,
            planes: s.clone_htod(&gplanes).map_err(&up)?,
            colors: s.clone_htod(&gcolors).map_err(&up)?,
            status: k.zeros::<u32>(launch.chains.len().max(1))?,
            most_pixels: images.iter().map(|&(w, h, _)| w * h).max().unwrap_or(0),
            launch,
            coef,
            rgb,
            images,
            blocks,
            _data: data,
            _samples: samples,
        })
    }

    /// Queue the three kernels on `k`'s stream.
    pub(crate) fn queue(&mut self, k: &AugmentKernels) -> Result<()> {
        self.queue_scans(k)?;
        self.queue_idct(k)?;
        self.queue_color(k)
    }

    /// The coefficients zeroed (progressive decoding builds on zero),
    /// then `gf_progressive`.
    fn queue_scans(&mut self, k: &AugmentKernels) -> Result<()> {
        let s = &k.stream;
        s.memset_zeros(&mut self.coef)
            .map_err(Error::cuda("memset"))?;
        let n = self.launch.chains.len() as u32;
        let n_scans = self.launch.scans.len() as u32;
        let n_tables = self.launch.tables.len() as u32;
        let mut b = s.launch_builder(&self.scan);
        b.arg(&self.chains);
        b.arg(&n);
        b.arg(&self.scans);
        b.arg(&n_scans);
        b.arg(&self.tables);
        b.arg(&n_tables);
        b.arg(&mut self.status);
        let cfg = LaunchConfig {
            grid_dim: (n.div_ceil(32).max(1), 1, 1),
            block_dim: (32, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: (const GfChain*, u32, const GfScan*, u32, const GfHuff*,
        // u32, u32*): the lists are this batch's uploads, and every address
        // in them is one of its buffers, sized by the plans; all live as
        // long as `self`, which the caller keeps until the stream is done.
        unsafe { b.launch(cfg) }
            .map(drop)
            .map_err(Error::cuda("kernel launch"))
    }

    fn queue_idct(&mut self, k: &AugmentKernels) -> Result<()> {
        let n_planes = self.planes.len() as u32;
        let mut b = k.stream.launch_builder(&self.idct);
        b.arg(&self.planes);
        b.arg(&n_planes);
        b.arg(&self.blocks);
        let cfg = LaunchConfig {
            grid_dim: (self.blocks.div_ceil(64).max(1), 1, 1),
            block_dim: (64, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: (const GfPlane*, u32, u32): planes address this batch's
        // coefficient and sample buffers, stride * rows blocks each.
        unsafe { b.launch(cfg) }
            .map(drop)
            .map_err(Error::cuda("kernel launch"))
    }

    fn queue_color(&mut self, k: &AugmentKernels) -> Result<()> {
        let mut b = k.stream.launch_builder(&self.colour);
        b.arg(&self.colors);
        let cfg = LaunchConfig {
            grid_dim: (
                self.most_pixels.div_ceil(256).max(1),
                self.images.len() as u32,
                1,
            ),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: (const GfColor*): one per image, reading its sample
        // planes and writing its part of `rgb`, all this batch's.
        unsafe { b.launch(cfg) }
            .map(drop)
            .map_err(Error::cuda("kernel launch"))
    }

    /// Each image's RGB8 and chain statuses (waits for the stream).
    pub(crate) fn download(&self, k: &AugmentKernels) -> Result<Vec<Rgb>> {
        let rgb = k.download(&self.rgb)?;
        let status = k.download(&self.status)?;
        let mut out = Vec::new();
        let mut chain = 0usize;
        for (i, &(w, h, at)) in self.images.iter().enumerate() {
            let n = self.launch.chains_of[i];
            out.push(Rgb {
                width: w,
                height: h,
                pixels: rgb[at..at + w as usize * h as usize * 3].to_vec(),
                status: status[chain..chain + n].to_vec(),
            });
            chain += n;
        }
        Ok(out)
    }
}

/// Decode `data` to RGB8 with the three kernels on CUDA device 0, as a
/// batch of one. Not part of the API.
#[doc(hidden)]
pub fn gpu_rgb(path: &Path, data: &[u8], max_pixels: u64) -> Result<Rgb> {
    let p = planned(path, data, max_pixels)?;
    let k = AugmentKernels::new(0)?;
    let mut b = DeviceBatch::new(&k, std::slice::from_ref(&p), &[data]).map_err(|e| match e {
        Error::Sample { source, .. } => Error::Sample {
            path: path.to_path_buf(),
            source,
        },
        e => e,
    })?;
    b.queue(&k)?;
    Ok(b.download(&k)?.remove(0))
}

/// What `gpufeed progressive-bench` measured.
#[derive(Debug, Clone)]
pub struct ProgressiveBench {
    /// Files given.
    pub files: usize,
    /// How many of them the GPU route takes.
    pub taken: usize,
    /// CPU time to plan one file (the route's only host work), ms.
    pub plan_ms_per_image: f64,
    /// Images per launch.
    pub batch: usize,
    /// Timed launches of each kernel.
    pub iters: usize,
    /// Median device time per batch of `gf_progressive` (with the
    /// coefficients' zeroing), ms (CUDA events).
    pub scans_ms: f64,
    /// Of `gf_idct`.
    pub idct_ms: f64,
    /// Of `gf_color`.
    pub color_ms: f64,
    /// Images per second over the three kernels, from their medians.
    pub img_per_s: f64,
    /// Images whose scans faulted (they would go to the CPU).
    pub faults: usize,
}

/// How many of `files` the GPU progressive route takes, and the CPU time
/// planning them all took per file taken, ms (no GPU needed). Not part of
/// the API.
#[doc(hidden)]
pub fn plan_cost(files: &[Vec<u8>]) -> (usize, f64) {
    let (plans, ms) = plan_all(files);
    (
        plans.len(),
        ms * files.len() as f64 / plans.len().max(1) as f64,
    )
}

/// The files the GPU progressive route takes, planned, and the CPU time
/// planning took per file given, ms.
fn plan_all(files: &[Vec<u8>]) -> (Vec<(Plan, &[u8])>, f64) {
    let t0 = Instant::now();
    let plans: Vec<(Plan, &[u8])> = files
        .iter()
        .filter_map(|f| Some((crate::jpeg::scans::plan(f, u64::MAX).ok()?, f.as_slice())))
        .filter(|(p, _)| color(p, &[0; 4], 0, 0).is_ok())
        .collect();
    let ms = t0.elapsed().as_secs_f64() * 1e3 / files.len().max(1) as f64;
    (plans, ms)
}

/// Time the three kernels over batches of `batch` images drawn in turn
/// from `files` (those the route takes), `iters` times after one warm-up,
/// on CUDA device 0. Not part of the API.
#[doc(hidden)]
pub fn bench(files: &[Vec<u8>], batch: usize, iters: usize) -> Result<ProgressiveBench> {
    let (plans, plan_ms) = plan_all(files);
    if plans.is_empty() {
        return Err(Error::Config(
            "no file the GPU progressive route takes".into(),
        ));
    }
    let k = AugmentKernels::new(0)?;
    let chosen: Vec<&(Plan, &[u8])> = plans.iter().cycle().take(batch).collect();
    let p: Vec<Plan> = chosen.iter().map(|c| c.0.clone()).collect();
    let f: Vec<&[u8]> = chosen.iter().map(|c| c.1).collect();
    let mut b = DeviceBatch::new(&k, &p, &f)?;
    let timing = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
    let ev = Error::cuda("event");
    let mut times: [Vec<f64>; 3] = Default::default();
    for it in 0..=iters {
        // Each kernel between two events on the stream.
        let s = &k.stream;
        let e0 = s.record_event(timing).map_err(&ev)?;
        b.queue_scans(&k)?;
        let e1 = s.record_event(timing).map_err(&ev)?;
        b.queue_idct(&k)?;
        let e2 = s.record_event(timing).map_err(&ev)?;
        b.queue_color(&k)?;
        let e3 = s.record_event(timing).map_err(&ev)?;
        e3.synchronize().map_err(&ev)?;
        if it > 0 {
            for (t, (a, z)) in times.iter_mut().zip([(&e0, &e1), (&e1, &e2), (&e2, &e3)]) {
                t.push(a.elapsed_ms(z).map_err(&ev)? as f64);
            }
        }
    }
    let [scans, idct, colr] = times.map(|mut v| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    });
    let faults = b
        .download(&k)?
        .iter()
        .filter(|r| r.status.iter().any(|&s| s != 0))
        .count();
    Ok(ProgressiveBench {
        files: files.len(),
        taken: plans.len(),
        plan_ms_per_image: plan_ms,
        batch,
        iters,
        scans_ms: scans,
        idct_ms: idct,
        color_ms: colr,
        img_per_s: batch as f64 / ((scans + idct + colr) / 1e3),
        faults,
    })
}
