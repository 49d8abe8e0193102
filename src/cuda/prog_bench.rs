//! `gpufeed progressive-bench`: the scan kernels' planning on the host and
//! each kernel's device time per batch (issue 16: whether decoding
//! progressive and sequential files on the GPU is fast enough to take
//! their CPU Huffman work away), over the lanes' own buffers
//! (`prog_batch::Buffers`).

use std::time::Instant;

use cudarc::driver::sys::CUevent_flags;

use super::launch::AugmentKernels;
use super::pixels::converts;
use super::prog_batch::Buffers;
use crate::error::{Error, Result};
use crate::jpeg::scans::Plan;

/// What `gpufeed progressive-bench` measured.
#[derive(Debug, Clone)]
pub struct ProgressiveBench {
    /// Files given.
    pub files: usize,
    /// How many of them the GPU route takes.
    pub taken: usize,
    /// Images per launch.
    pub batch: usize,
    /// Timed launches of each kernel.
    pub iters: usize,
    /// Median device time per batch of `gf_progressive` (with the
    /// coefficients' zeroing), ms (CUDA events).
    pub scans_ms: f64,
    /// Whether `scans_ms` ran with the chains' scans in a pipeline
    /// (`GPUFEED_SCAN_PIPELINE`).
    pub pipeline: bool,
    /// Bytes of a split scan's subsequence `scans_ms` ran with
    /// (`GPUFEED_SCAN_SPLIT`; 0: none split).
    pub sub_bytes: u32,
    /// The scan kernels timed alone: (the chains' scans in a pipeline,
    /// bytes of a subsequence, ms).
    pub scans_ms_alone: Vec<(bool, u32, f64)>,
    /// Of `gf_idct`.
    pub idct_ms: f64,
    /// Of `gf_color`.
    pub color_ms: f64,
    /// Images per second over the three kernels, from their medians.
    pub img_per_s: f64,
    /// Images whose scans faulted (they would go to the CPU).
    pub faults: usize,
}

/// How many of `files` the GPU progressive route takes (with
/// `sequential`, how many sequential files the kernels would take), and
/// the CPU time planning one of those takes, ms (no GPU needed). Not part
/// of the API.
#[doc(hidden)]
pub fn plan_cost(files: &[Vec<u8>], sequential: bool) -> (usize, f64) {
    let (plans, _) = plan_all(files, sequential);
    let t0 = Instant::now();
    for (_, f) in &plans {
        let _ = crate::jpeg::scans::plan(f, u64::MAX);
    }
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    (plans.len(), ms / plans.len().max(1) as f64)
}

/// The progressive files the GPU progressive route takes (or the
/// sequential ones the kernels take), planned, and the CPU time planning
/// took per file given, ms.
fn plan_all(files: &[Vec<u8>], sequential: bool) -> (Vec<(Plan, &[u8])>, f64) {
    let t0 = Instant::now();
    let plans: Vec<(Plan, &[u8])> = files
        .iter()
        .filter_map(|f| Some((crate::jpeg::scans::plan(f, u64::MAX).ok()?, f.as_slice())))
        .filter(|(p, _)| p.sequential == sequential && converts(p))
        .collect();
    let ms = t0.elapsed().as_secs_f64() * 1e3 / files.len().max(1) as f64;
    (plans, ms)
}

/// Time the three kernels over batches of `batch` images drawn in turn
/// from `files` (the progressive ones the route takes; with `sequential`,
/// the sequential ones: the CUDA route's Huffman work on the GPU, issue
/// 16, item 3c), `iters` times after one warm-up, on CUDA device 0. Not
/// part of the API.
#[doc(hidden)]
pub fn bench(
    files: &[Vec<u8>],
    batch: usize,
    iters: usize,
    sequential: bool,
) -> Result<ProgressiveBench> {
    let (plans, _) = plan_all(files, sequential);
    if plans.is_empty() {
        return Err(Error::Config(format!(
            "no {} file the kernels take",
            if sequential {
                "sequential"
            } else {
                "progressive"
            }
        )));
    }
    let k = AugmentKernels::new(0)?;
    let chosen: Vec<&(Plan, &[u8])> = plans.iter().cycle().take(batch).collect();
    let p: Vec<Plan> = chosen.iter().map(|c| c.0.clone()).collect();
    let f: Vec<&[u8]> = chosen.iter().map(|c| c.1).collect();
    let total: usize = p
        .iter()
        .map(|p| p.width as usize * p.height as usize * 3)
        .sum();
    let rgb = k.zeros::<u8>(total.max(1))?;
    let mut out = Vec::new();
    let mut at = k.address(&rgb);
    for p in &p {
        out.push((at, p.width * 3));
        at += p.width as u64 * p.height as u64 * 3;
    }
    let mut b = Buffers::new(&k.ctx, k.stream.clone(), k.progressive()?);
    let put = b
        .put(&p, &f, &out)?
        .map_err(|(_, e)| Error::Config(e.to_string()))?;
    let timing = Some(CUevent_flags::CU_EVENT_DEFAULT);
    let ev = Error::cuda("event");
    let mut times: [Vec<f64>; 3] = Default::default();
    for it in 0..=iters {
        // Each kernel between two events on the stream.
        let s = k.stream.clone();
        let e0 = s.record_event(timing).map_err(&ev)?;
        b.queue_scans(&put)?;
        let e1 = s.record_event(timing).map_err(&ev)?;
        b.queue_idct(&put)?;
        let e2 = s.record_event(timing).map_err(&ev)?;
        b.queue_color(&put)?;
        let e3 = s.record_event(timing).map_err(&ev)?;
        e3.synchronize().map_err(&ev)?;
        if it > 0 {
            for (t, (a, z)) in times.iter_mut().zip([(&e0, &e1), (&e1, &e2), (&e2, &e3)]) {
                t.push(a.elapsed_ms(z).map_err(&ev)? as f64);
            }
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    let [scans, idct, colr] = times.map(median);
    // The scan kernels alone in each shape they might run in: a chain's
    // scans in turn and in a pipeline ([`scan_pipeline`]), and split
    // sequential scans in subsequences of 256, 1024 and 4096 bytes
    // ([`split_bytes`]; the default's time is `scans`).
    let (default_pipeline, default_split) = (b.pipeline, b.sub_bytes);
    let mut alone = Vec::new();
    let shapes = [
        (false, 0),
        (true, 0),
        (true, 256),
        (true, 1024),
        (true, 4096),
    ];
    for (pipeline, split) in shapes {
        if split > 0 && !sequential {
            continue;
        }
        (b.pipeline, b.sub_bytes) = (pipeline, split);
        let put = b
            .put(&p, &f, &out)?
            .map_err(|(_, e)| Error::Config(e.to_string()))?;
        let mut t = Vec::new();
        for it in 0..=iters {
            let s = k.stream.clone();
            let e0 = s.record_event(timing).map_err(&ev)?;
            b.queue_scans(&put)?;
            let e1 = s.record_event(timing).map_err(&ev)?;
            e1.synchronize().map_err(&ev)?;
            if it > 0 {
                t.push(e0.elapsed_ms(&e1).map_err(&ev)? as f64);
            }
        }
        alone.push((pipeline, split, median(t)));
    }
    (b.pipeline, b.sub_bytes) = (default_pipeline, default_split);
    let put = b
        .put(&p, &f, &out)?
        .map_err(|(_, e)| Error::Config(e.to_string()))?;
    b.queue_scans(&put)?;
    let status = b.status(&put)?;
    let mut faults = 0;
    let mut chain = 0;
    for &n in &put.chains_of {
        faults += usize::from(status[chain..chain + n].iter().any(|&s| s != 0));
        chain += n;
    }
    drop(rgb);
    Ok(ProgressiveBench {
        files: files.len(),
        taken: plans.len(),
        batch,
        iters,
        scans_ms: scans,
        pipeline: default_pipeline,
        sub_bytes: default_split,
        scans_ms_alone: alone,
        idct_ms: idct,
        color_ms: colr,
        img_per_s: batch as f64 / ((scans + idct + colr) / 1e3),
        faults,
    })
}
