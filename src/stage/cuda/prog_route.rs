//! The device stage's route for progressive JPEGs on CUDA (issue 16):
//! lanes that decode a group's progressive files with gpufeed's own
//! kernels (`kernels/progressive.cu`, `pixels.cu`) straight into the
//! group's arena, so that no CPU thread decodes their Huffman codes. A
//! lane plans its files (the route's only host work), uploads them, queues
//! the three kernels on its own stream and waits for them, as an engine
//! lane waits for the engine. A file whose scans fault goes back to the
//! batch thread, which decodes it as it decodes the engine's refusals
//! (CUDA, then the CPU); so does one the plan refuses, where the lane
//! plans (`GPUFEED_PLAN_ON_WORKERS=0`; otherwise the worker that planned it
//! kept it, `handoff::Planned::Refused`).
//!
//! Off unless `PipelineBuilder::progressive_kernels` (or
//! `GPUFEED_PROGRESSIVE_GPU=1`): correct on an H200 but slow there, and
//! the hardware engine's calls slow down ~10x beside its kernels
//! (docs/BENCHMARKS.md, 0d15f52). With `sequential_kernels`
//! (`GPUFEED_SEQUENTIAL_GPU=1`) the same lanes take the CUDA share's
//! sequential files under 1 MP too (session 33: the planner and kernels
//! decode sequential scans). On the emulated device the kernels equal
//! libjpeg-turbo's output, alone and through a pipeline
//! (tests/progressive.rs, tests/kernel_routes.rs; the emulated route is
//! in `stage/emu.rs`).

use std::sync::Arc;

use cudarc::driver::CudaContext;

use crate::cuda::lanes::Lanes;
use crate::cuda::launch::ProgressiveKernels;
use crate::cuda::pixels::converts;
use crate::cuda::prog_batch::Buffers;
use crate::decode::nvjpeg::{Kind, Ledger};
use crate::error::{Error, Result};
use crate::jpeg::scans::{Plan, given_or_planned};

/// One progressive file for a lane: its bytes and where its RGB8 goes
/// (`width * 3` bytes a row, in an arena with room for the whole image).
pub(super) struct ProgJob {
    pub(super) bytes: crate::reader::PooledBytes,
    /// The worker's plan of `bytes` (`handoff::Jpeg::plan`); `None`: the
    /// lane plans.
    pub(super) plan: Option<Box<Plan>>,
    pub(super) dest: u64,
    pub(super) width: u32,
    pub(super) height: u32,
}

/// A lane's answer: the bytes back, and per job whether its pixels are in
/// place (its writes complete).
pub(super) struct ProgReply {
    pub(super) bytes: Vec<crate::reader::PooledBytes>,
    pub(super) taken: Vec<bool>,
}

/// A lane's state: its buffers on a stream of its own, counted as they
/// grow (`Pipeline::memory()`): those for the files, their coefficients
/// and samples in the kernels' ledger, the descriptors and the
/// page-locked staging of the files in the route's.
pub(super) struct ProgLane {
    buffers: Buffers,
    ctx: Arc<CudaContext>,
    ledger: Arc<Ledger>,
    kernels: Arc<Ledger>,
    /// Bytes counted: (descriptors, files' buffers, staging).
    counted: [usize; 3],
    /// Calls so far (`cuda::lanes::panics_now`).
    calls: usize,
}

impl Drop for ProgLane {
    fn drop(&mut self) {
        let [descriptors, files, staging] = self.counted;
        self.ledger.refund(Kind::Device, descriptors as u64);
        self.kernels.refund(Kind::Device, files as u64);
        self.ledger.refund(Kind::Pinned, staging as u64);
    }
}

/// `lanes` lanes on `ctx` with `kernels`, their buffers counted in
/// `ledgers` (the files' buffers, all lanes together, within
/// `ledgers.kernel_limit`), their calls' time in
/// `ledgers.progressive_busy`, each call reported to `observe` (the
/// timeline).
pub(super) fn lanes(
    ctx: &Arc<CudaContext>,
    kernels: ProgressiveKernels,
    lanes: usize,
    ledgers: &crate::stage::routes::Ledgers,
    observe: Option<crate::cuda::lanes::Observe>,
) -> Result<Lanes<Vec<ProgJob>, ProgReply>> {
    let mut states = Vec::new();
    let marks = Arc::new(ledgers.kernel_marks(lanes));
    for _ in 0..lanes.max(1) {
        let stream = ctx
            .new_stream()
            .map_err(Error::cuda("progressive stream"))?;
        states.push(ProgLane {
            buffers: Buffers::new(ctx, stream, kernels.clone()).with_marks(marks.clone()),
            ctx: ctx.clone(),
            ledger: ledgers.route.clone(),
            kernels: ledgers.kernels.clone(),
            counted: [0; 3],
            calls: 0,
        });
    }
    let run = |l: &mut ProgLane, q: &mut Vec<ProgJob>| run_lane(l, q);
    let run = crate::cuda::lanes::observed_as(run, observe, crate::cuda::lanes::PROGRESSIVE_CALL);
    let busy = ledgers.progressive_busy.clone();
    let run = crate::cuda::lanes::counted(run, busy, Vec::len);
    let tend = crate::cuda::lanes::Tend {
        generation: |l: &ProgLane| l.buffers.generation(),
        grow: |l: &mut ProgLane| {
            // A growth that fails (out of memory) is met again, and
            // reported, by the lane's next call.
            let _ = l.buffers.tend();
            l.count();
        },
    };
    Lanes::tended("gpufeed-progressive", states, run, rescue(), Some(tend))
}

impl ProgLane {
    /// Count what the buffers grew to since last counted. Buffers only
    /// grow; a refused charge (past the ledger's limit) leaves them
    /// uncounted until the next growth.
    fn count(&mut self) {
        let grown = |ledger: &Ledger, kind, now: usize, counted: &mut usize| {
            if now > *counted && ledger.charge(kind, (now - *counted) as u64) {
                *counted = now;
            }
        };
        let b = &self.buffers;
        let files = b.file_bytes();
        let [descriptors, counted_files, staging] = &mut self.counted;
        grown(&self.ledger, Kind::Device, b.bytes() - files, descriptors);
        grown(&self.kernels, Kind::Device, files, counted_files);
        grown(&self.ledger, Kind::Pinned, b.pinned_bytes(), staging);
    }
}

/// After a lane's call panicked: its stream's work done, nothing taken, so
/// that the batch thread decodes the call's files with nvJPEG or the CPU,
/// as it does those the kernels refuse.
fn rescue() -> crate::cuda::lanes::Rescue<ProgLane, Vec<ProgJob>, ProgReply> {
    crate::cuda::lanes::Rescue {
        settle: |lane| lane.ctx.bind_to_thread().is_ok() && lane.buffers.settle(),
        decline: Arc::new(|jobs: Vec<ProgJob>| ProgReply {
            taken: vec![false; jobs.len()],
            bytes: jobs.into_iter().map(|j| j.bytes).collect(),
        }),
    }
}

/// Plan, upload, decode and wait, on the lane's thread.
fn run_lane(lane: &mut ProgLane, jobs: &mut [ProgJob]) -> ProgReply {
    let mut taken = vec![false; jobs.len()];
    if lane.ctx.bind_to_thread().is_ok() {
        // The jobs the plan takes and `gf_color` converts, in job order.
        let (ks, plans): (Vec<usize>, Vec<Plan>) = jobs
            .iter_mut()
            .enumerate()
            .filter_map(|(k, j)| {
                let p = given_or_planned(j.plan.take(), &j.bytes).ok()?;
                ((p.width, p.height) == (j.width, j.height) && converts(&p)).then_some((k, p))
            })
            .unzip();
        for k in decode(lane, jobs, &ks, &plans) {
            taken[k] = true;
        }
        // For the idle lanes to grow to (`cuda::lanes::Tend`).
        lane.buffers.note();
        lane.count();
    }
    ProgReply {
        bytes: jobs
            .iter_mut()
            .map(|j| std::mem::take(&mut j.bytes))
            .collect(),
        taken,
    }
}

/// Decode jobs `ks` (planned as `plans`); the indices of those whose
/// pixels are in place. The jobs go in parts within the lanes' memory
/// bound (`PipelineBuilder::kernel_memory_limit`), one after another; a
/// job that does not fit beside the parts' buffers is left to the batch
/// thread, as a refused one is. An error leaves every job of its part and
/// the parts after to the batch thread, after the stream has finished
/// what was queued (those places get decoded again).
fn decode(lane: &mut ProgLane, jobs: &[ProgJob], ks: &[usize], plans: &[Plan]) -> Vec<usize> {
    let fail = crate::cuda::lanes::panics_now(&mut lane.calls);
    let sizes: Vec<[usize; 2]> = ks
        .iter()
        .zip(plans)
        .map(|(&k, p)| [jobs[k].bytes.len(), p.all_coefficients()])
        .collect();
    let mut ok = Vec::new();
    for (n, r) in lane.buffers.parts(&sizes).calls.into_iter().enumerate() {
        match decode_part(lane, jobs, &ks[r.clone()], &plans[r], fail && n == 0) {
            Ok(part) => ok.extend(part),
            Err(_) => break,
        }
    }
    ok
}

/// [`decode`] of one part, within the bound; `fail`: panic once its
/// kernels are queued (`GPUFEED_TEST_LANE_PANIC`).
fn decode_part(
    lane: &mut ProgLane,
    jobs: &[ProgJob],
    ks: &[usize],
    plans: &[Plan],
    fail: bool,
) -> Result<Vec<usize>> {
    if ks.is_empty() {
        return Ok(Vec::new());
    }
    let files: Vec<&[u8]> = ks.iter().map(|&k| &jobs[k].bytes[..]).collect();
    let pinned: Vec<bool> = ks.iter().map(|&k| jobs[k].bytes.is_pinned()).collect();
    let out: Vec<(u64, u32)> = ks
        .iter()
        .map(|&k| (jobs[k].dest, jobs[k].width * 3))
        .collect();
    // Files read into the readers' page-locked blocks are copied from
    // there (no packing on this thread): they go back to the readers only
    // once the stream is done with them, which `status` waits for, and
    // `settle` after an error.
    let put = match lane.buffers.put_from(plans, &files, &pinned, &out) {
        Ok(Ok(put)) => put,
        Ok(Err((_, e))) => return Err(Error::Device(format!("progressive layout: {e}"))),
        Err(e) => {
            lane.buffers.settle();
            return Err(e);
        }
    };
    let queued = lane
        .buffers
        .queue_scans(&put)
        .and_then(|()| lane.buffers.queue_idct(&put))
        .and_then(|()| lane.buffers.queue_color(&put));
    assert!(
        !fail,
        "GPUFEED_TEST_LANE_PANIC: a scan-kernel call, its kernels queued"
    );
    // The status download waits for the stream: the writes into the arena
    // are complete when it returns, failed or not.
    let status = lane.buffers.status(&put);
    if queued.is_err() || status.is_err() {
        lane.buffers.settle();
    }
    queued?;
    let status = status?;
    let mut ok = Vec::new();
    let mut chain = 0;
    for (&k, &n) in ks.iter().zip(&put.chains_of) {
        if status[chain..chain + n].iter().all(|&s| s == 0) {
            ok.push(k);
        }
        chain += n;
    }
    Ok(ok)
}
