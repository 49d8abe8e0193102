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

/// A lane's state: its buffers on a stream of its own, counted in the
/// route's nvJPEG ledger (`Pipeline::memory()`) as they grow: device
/// buffers, and the page-locked staging of the files.
pub(super) struct ProgLane {
    buffers: Buffers,
    ctx: Arc<CudaContext>,
    ledger: Arc<Ledger>,
    counted: usize,
    counted_pinned: usize,
    /// Calls so far (`cuda::lanes::panics_now`).
    calls: usize,
}

impl Drop for ProgLane {
    fn drop(&mut self) {
        self.ledger.refund(Kind::Device, self.counted as u64);
        self.ledger.refund(Kind::Pinned, self.counted_pinned as u64);
    }
}

/// `lanes` lanes on `ctx` with `kernels`, their buffers counted in
/// `ledger`, their calls' time in `busy`, each call reported to `observe`
/// (the timeline).
pub(super) fn lanes(
    ctx: &Arc<CudaContext>,
    kernels: ProgressiveKernels,
    lanes: usize,
    ledger: &Arc<Ledger>,
    busy: &Arc<crate::cuda::lanes::Busy>,
    observe: Option<crate::cuda::lanes::Observe>,
) -> Result<Lanes<Vec<ProgJob>, ProgReply>> {
    let mut states = Vec::new();
    let marks = Arc::<crate::cuda::prog_batch::Marks>::default();
    for _ in 0..lanes.max(1) {
        let stream = ctx
            .new_stream()
            .map_err(Error::cuda("progressive stream"))?;
        states.push(ProgLane {
            buffers: Buffers::new(ctx, stream, kernels.clone()).with_marks(marks.clone()),
            ctx: ctx.clone(),
            ledger: ledger.clone(),
            counted: 0,
            counted_pinned: 0,
            calls: 0,
        });
    }
    let run = |l: &mut ProgLane, q: &mut Vec<ProgJob>| run_lane(l, q);
    let run = crate::cuda::lanes::observed_as(run, observe, crate::cuda::lanes::PROGRESSIVE_CALL);
    let run = crate::cuda::lanes::counted(run, busy.clone(), Vec::len);
    Lanes::new("gpufeed-progressive", states, run, rescue())
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
        if let Ok(ok) = decode(lane, jobs, &ks, &plans) {
            for k in ok {
                taken[k] = true;
            }
        }
        // Buffers only grow; a refused charge (past the ledger's limit)
        // leaves them uncounted until the next growth.
        let grown = |kind, now: usize, counted: &mut usize| {
            if now > *counted && lane.ledger.charge(kind, (now - *counted) as u64) {
                *counted = now;
            }
        };
        grown(Kind::Device, lane.buffers.bytes(), &mut lane.counted);
        grown(
            Kind::Pinned,
            lane.buffers.pinned_bytes(),
            &mut lane.counted_pinned,
        );
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
/// pixels are in place. An error leaves every job to the batch thread,
/// after the stream has finished what was queued (those places get
/// decoded again).
fn decode(
    lane: &mut ProgLane,
    jobs: &[ProgJob],
    ks: &[usize],
    plans: &[Plan],
) -> Result<Vec<usize>> {
    let fail = crate::cuda::lanes::panics_now(&mut lane.calls);
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
