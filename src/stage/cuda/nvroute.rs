//! The nvJPEG side of the device stage (issues 5 and 16): the jobs of a
//! decode group's nvJPEG-route images and the routes that decode them into
//! the group's arena (hardware engine, CUDA, CPU).
//!
//! The engine's share goes to engine lanes (`engine_lane.rs`): threads of
//! their own, each with an engine decoder and a stream, that run the
//! support queries, the decode call and the wait for its completion. The
//! batch thread submits a group and goes on filling the next; it collects
//! the answer when the group's samples reach their batch positions.

use std::sync::Mutex;
use std::time::Duration;

use super::engine_lane::{
    EngineJob, EngineLanes, EngineReply, LANE_SPAN, Lane, LaneTimes, rescue, run_lane,
};
use super::prog_route::{self, ProgJob, ProgReply};
use super::*;
use crate::cuda::lanes::{Lanes, Ticket};
use crate::cuda::timeline::GpuTimeline;
use crate::decode::nvjpeg::{BatchedDecoder, DecoupledDecoder, Dest, Meter, Relay, Roi};
use crate::stage::routes::built;

/// One compressed image for nvJPEG: where in the group's arena it goes.
#[derive(Debug)]
pub(crate) struct JpegJob {
    pub(crate) bytes: crate::reader::PooledBytes,
    pub(crate) width: u32,
    pub(crate) height: u32,
    /// Byte offset in the arena, which has room for the whole image.
    pub(crate) at: usize,
    /// The part of the image the crops read, when smaller than the image:
    /// routes that can decode just this window do.
    pub(crate) roi: Option<Roi>,
    /// It goes to the hardware engine (decided by the worker that parsed
    /// it, `nvjpeg::Share::route`); the engine may still refuse it.
    pub(crate) to_engine: bool,
    /// The image's MCU size (`nvjpeg::mcu_size`).
    pub(crate) mcu: (u32, u32),
    /// For gpufeed's own scan kernels (the worker decided: a progressive
    /// file, or a sequential one of the CUDA share): the progressive
    /// lanes' where the route has them.
    pub(crate) kernels: bool,
    /// Their plan of the file, where the worker made it.
    pub(crate) plan: Option<Box<crate::jpeg::scans::Plan>>,
    /// A progressive file (`handoff::Jpeg::progressive`).
    pub(crate) progressive: bool,
}

/// How one job came out: decoded (the whole image, or only the window
/// given, packed at its own width), or why it failed on every route.
pub(crate) type JpegOutcome =
    std::result::Result<Option<crate::decode::nvjpeg::Roi>, crate::error::SampleError>;

impl JpegJob {
    /// Decode on the CPU into `img`, which must come out at the size the
    /// job's arena space was sized for (the header's): the route for what
    /// nvJPEG refuses, and the emulated device's only route.
    pub(crate) fn decode_on_cpu(
        &self,
        cpu: &mut crate::decode::CpuDecoder,
        img: &mut crate::decode::Image,
    ) -> std::result::Result<(), crate::error::SampleError> {
        super::super::handoff::decode_on_cpu(&self.bytes, (self.width, self.height), cpu, img)
    }
}

/// nvJPEG decoders of a pipeline's batch thread: the hardware engine's
/// lanes when the GPU has one, CUDA (decoupled API) for what the workers
/// did not start and the engine refused, and the CPU decoder for what
/// both refuse.
pub(crate) struct NvRoute {
    lanes: Option<Lanes<Vec<EngineJob>, EngineReply>>,
    stats: LaneTimes,
    /// The batch thread's own decoupled decoder: images drawn for the
    /// engine that it refused, or whose engine call failed, and images the
    /// workers could not start (no decoder free in time).
    cuda: DecoupledDecoder,
    cpu: crate::decode::CpuDecoder,
    /// Progressive files decoded by gpufeed's kernels
    /// (`GPUFEED_PROGRESSIVE_GPU=1`; `prog_route.rs`).
    prog: Option<Lanes<Vec<ProgJob>, ProgReply>>,
    /// Which of them take which files, and whose turn it is.
    prog_kinds: super::super::KernelLanes,
}

impl std::fmt::Debug for NvRoute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvRoute")
            .field("lanes", &self.lanes)
            .finish_non_exhaustive()
    }
}

/// Per-route counts of one resolve, for the stats.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct RouteCounts {
    pub(crate) hardware: u64,
    pub(crate) cuda: u64,
    /// Of `cuda`, those whose host phase ran on the batch thread.
    pub(crate) cuda_batch_thread: u64,
    pub(crate) cpu: u64,
    /// Progressive files decoded by gpufeed's kernels.
    pub(crate) progressive: u64,
}

impl RouteCounts {
    /// `n` images decoded with CUDA whose host phase ran on the batch
    /// thread ([`CudaEngine::run_cuda`]).
    fn cuda_here(&mut self, n: usize) {
        self.cuda += n as u64;
        self.cuda_batch_thread += n as u64;
    }
}

impl NvRoute {
    /// nvJPEG's decoders on `engine`'s device: `lanes.count` engine lanes
    /// of at most `batch` images a call (none at 0, or where the GPU has no
    /// engine), in a context of their own with `lanes.own_context` (where
    /// one cannot be made, this says why on stderr and they share the
    /// arenas'); `timeline` hears of each lane call (its
    /// host span and its GPU span), and `busy` counts them (the automatic
    /// share's measure of the engine, and `Stats::engine_busy`); nvJPEG's
    /// memory for them is counted in `ledger`. An error when nvJPEG cannot
    /// be used at all.
    pub(crate) fn new(
        engine: &CudaEngine,
        batch: usize,
        lanes: EngineLanes,
        cpu: crate::decode::CpuDecoder,
        timeline: Option<&Arc<GpuTimeline>>,
        ledger: &Arc<crate::decode::nvjpeg::Ledger>,
        busy: Arc<crate::cuda::lanes::Busy>,
    ) -> Result<NvRoute> {
        let ctx = &engine.k.ctx;
        let meter = Meter::new(ctx, ledger.clone());
        let (own, lanes) = (lanes.own_context && lanes.count > 0, lanes.count);
        // Dropped after the lanes' context below: a cudarc object dropped
        // binds its context, and the context's last drop (here, where no
        // lane was made or one failed) leaves this thread (the caller's,
        // whose trainer uses what is current) with none.
        let _rebind = Rebind(ctx);
        // The lanes' context, and their meter there (the same ledger).
        let (lane_ctx, lane_meter) = match own.then(|| crate::cuda::own_context(ctx)) {
            Some(Ok(c)) => (c.clone(), Meter::new(&c, ledger.clone())),
            Some(Err(e)) => {
                // A diagnostic's own report, as GPUFEED_CUDA_BLOCKING_SYNC's.
                eprintln!("gpufeed: engine_context: {e}; the engine shares the arenas' context");
                (ctx.clone(), meter.clone())
            }
            None => (ctx.clone(), meter.clone()),
        };
        let relay = || (!Arc::ptr_eq(&lane_ctx, ctx)).then(|| Relay::new(&lane_meter, ctx));
        let stats = Arc::new(Mutex::new(vec![Default::default(); lanes.max(1)]));
        // Each engine state's memory pool is sized for a batch rounded up
        // to a multiple of the engine's cores, as nvImageCodec's hardware
        // decoder does (its mini-batch is engines x cores; issue 16,
        // item 2), so that a full call fills every core.
        // The build track's parts (with a timeline): at 4bbffad making 6
        // lanes took 1,762 ms, whether in nvJPEG's hardware handles or in
        // their states unknown; the info query makes a handle alone.
        let observe = timeline.map(|t| t.observe().clone());
        let began = std::time::Instant::now();
        let info = (lanes > 0).then(crate::decode::nvjpeg::hardware_decoder_info);
        built(
            &observe,
            "device: the engine's cores (one hardware handle)",
            began,
        );
        let pool = match info {
            Some(Ok((engines, cores))) if engines > 0 && cores > 0 => {
                batch.next_multiple_of((engines * cores) as usize)
            }
            _ => batch,
        };
        // nvJPEG's handles and states are made in the lanes' context, and
        // this thread (the caller's) is bound back to the arenas' after,
        // whatever happened: the trainer's CUDA calls use what is current.
        let made = lane_ctx
            .bind_to_thread()
            .map_err(Error::cuda("bind the engine's context"))
            .and_then(|()| {
                let mut states = Vec::new();
                let mut device_input =
                    std::env::var("GPUFEED_NVJPEG_DEVICE_INPUT").as_deref() == Ok("1");
                for index in 0..lanes {
                    let began = std::time::Instant::now();
                    if device_input {
                        match BatchedDecoder::engine_with_device_input(pool, &lane_meter) {
                            Ok(dec) => {
                                let lane =
                                    Lane::new(dec, &lane_ctx, &stats, index, timeline, relay())?;
                                states.push(lane);
                                built(&observe, LANE_SPAN, began);
                                continue;
                            }
                            Err(e) => {
                                // A diagnostic's own report, as GPUFEED_CUDA_BLOCKING_SYNC's.
                                eprintln!(
                                    "gpufeed: GPUFEED_NVJPEG_DEVICE_INPUT: no such engine decoder ({e}); host input"
                                );
                                device_input = false;
                            }
                        }
                    }
                    // No engine (or no nvJPEG support for it) is not an error.
                    let Ok(dec) = BatchedDecoder::new(true, pool, Some(&lane_meter)) else {
                        break;
                    };
                    states.push(Lane::new(dec, &lane_ctx, &stats, index, timeline, relay())?);
                    built(&observe, LANE_SPAN, began);
                }
                Ok(states)
            });
        let rebound = ctx.bind_to_thread().map_err(Error::cuda("bind context"));
        let states = made?;
        rebound?;
        let lanes = if states.is_empty() {
            None
        } else {
            let run = |l: &mut Lane, q: &mut Vec<EngineJob>| run_lane(l, q);
            let run = crate::cuda::lanes::observed(run, observe.clone());
            let run = crate::cuda::lanes::counted(run, busy, Vec::len);
            Some(Lanes::new("gpufeed-engine", states, run, rescue())?)
        };
        let began = std::time::Instant::now();
        let cuda = DecoupledDecoder::new(ctx, 2, Some(&meter))?;
        built(&observe, "device: the batch thread's CUDA decoder", began);
        Ok(NvRoute {
            lanes,
            stats,
            cuda,
            cpu,
            prog: None,
            prog_kinds: Default::default(),
        })
    }

    /// Its lane pools' stop flags (`Stats::lanes_stopped`).
    pub(in crate::stage) fn stop_flags(&self) -> Vec<crate::cuda::lanes::StopFlags> {
        let engine = self.lanes.iter().map(|l| l.stop_flags());
        engine
            .chain(self.prog.iter().map(|l| l.stop_flags()))
            .collect()
    }

    /// Its lanes as the workers' routing reads them.
    pub(in crate::stage) fn live_lanes(&self) -> super::super::handoff::LiveLanes {
        super::super::handoff::LiveLanes::of(
            self.lanes.as_ref().map(|l| l.stop_flags()),
            self.prog.as_ref().map(|l| l.stop_flags()),
            &self.prog_kinds,
        )
    }

    /// Send progressive files to the progressive lanes (as many as `kinds`
    /// says: `cuda::lanes::progressive_lanes`) on `engine`'s device
    /// (`prog_route.rs`),
    /// their buffers counted in `ledgers` (and bounded, as
    /// `ledgers.kernel_limit` says) and their calls in
    /// `ledgers.progressive_busy`, their calls reported to `observe` (the
    /// timeline); where the kernels cannot be made, say why and go on
    /// without them (the workers then decode those files' Huffman codes,
    /// as before).
    /// With `kinds` of both files, each kind has lanes of its own
    /// ([`KernelLanes`](super::super::KernelLanes)).
    pub(in crate::stage) fn add_progressive(
        &mut self,
        engine: &CudaEngine,
        ledgers: &crate::stage::routes::Ledgers,
        observe: Option<crate::cuda::lanes::Observe>,
        kinds: super::super::KernelLanes,
    ) {
        self.prog_kinds = kinds;
        let made = engine
            .k
            .progressive()
            .and_then(|k| prog_route::lanes(&engine.k.ctx, k, kinds.lanes(), ledgers, observe));
        match made {
            Ok(l) => self.prog = Some(l),
            // A setting's own report, as GPUFEED_NVJPEG_DEVICE_INPUT's.
            Err(e) => eprintln!("gpufeed: progressive_kernels: no progressive lanes ({e})"),
        }
    }

    pub(crate) fn has_hardware(&self) -> bool {
        self.lanes.is_some()
    }

    /// Whether progressive files go to the progressive lanes (so workers
    /// leave them compressed).
    pub(crate) fn has_progressive(&self) -> bool {
        self.prog.is_some()
    }

    /// The engine's batched-state (re)initializations and their time, and
    /// its decode calls and the time spent in them (initializations
    /// excluded), over every lane.
    pub(crate) fn engine_time(&self) -> [(u64, Duration); 2] {
        let s = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        s.iter().fold(Default::default(), |mut acc, l| {
            for (a, b) in acc.iter_mut().zip(l) {
                a.0 += b.0;
                a.1 += b.1;
            }
            acc
        })
    }
}

/// Binds its context to the thread when dropped.
struct Rebind<'a>(&'a Arc<CudaContext>);

impl Drop for Rebind<'_> {
    fn drop(&mut self) {
        // Nothing to do on failure: the next call that needs the context
        // binds it and reports.
        let _ = self.0.bind_to_thread();
    }
}

/// A decode group on its way: the engine's share at a lane, the rest
/// decoded or failed. The lane writes into the group's arena until it
/// answers, so dropping this waits for the answer.
pub(crate) struct Submitted {
    jobs: Vec<JpegJob>,
    /// Jobs at the lane (their bytes with it).
    to_hw: Vec<usize>,
    ticket: Option<Ticket<EngineReply>>,
    result: Vec<JpegOutcome>,
    /// Jobs CUDA failed at submission: the CPU's.
    failed: Vec<usize>,
    /// Jobs at the progressive lanes (their bytes with them), a ticket
    /// per call (one, or one per kind of file: `KernelLanes`).
    prog: Vec<(Vec<usize>, Ticket<ProgReply>)>,
}

impl std::fmt::Debug for Submitted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Submitted")
            .field("jobs", &self.jobs.len())
            .field("engine", &self.to_hw.len())
            .finish_non_exhaustive()
    }
}

impl Submitted {
    /// Whether the engine has answered (never blocks).
    pub(crate) fn ready(&mut self) -> bool {
        self.ticket.as_mut().is_none_or(Ticket::ready) && self.prog.iter_mut().all(|p| p.1.ready())
    }
}

impl Drop for Submitted {
    fn drop(&mut self) {
        if let Some(t) = self.ticket.take() {
            let _ = t.wait();
        }
        // A lane may still be writing into the arena.
        for p in self.prog.drain(..) {
            let _ = p.1.wait();
        }
    }
}

impl CudaEngine {
    /// Start decoding `jobs` into `arena`: the hardware engine's share (of
    /// what it supports, only the job's window where it can) goes to an
    /// engine lane; the rest decodes now, one by one, with the batch
    /// thread's decoupled CUDA decoder (the job's window). Returns at once
    /// for the engine's part; [`complete_jpegs`](Self::complete_jpegs)
    /// collects it.
    ///
    /// In a pipeline the workers have begun most CUDA-route images already
    /// ([`decode_staged`](Self::decode_staged)); what reaches CUDA here is
    /// what no worker decoder was free for.
    pub(crate) fn submit_jpegs(
        &self,
        arena: &CudaArena,
        mut jobs: Vec<JpegJob>,
        route: &mut NvRoute,
        counts: &mut RouteCounts,
    ) -> Result<Submitted> {
        self.k
            .ctx
            .bind_to_thread()
            .map_err(Error::cuda("bind context"))?;
        let base = self.arena_base(arena);
        for j in &jobs {
            if j.at + j.width as usize * j.height as usize * 3 > arena.len() {
                return Err(Error::Device("JPEG outside its arena (stage bug)".into()));
            }
        }
        let engine = route.lanes.is_some();
        let (to_hw, to_cuda): (Vec<usize>, Vec<usize>) =
            (0..jobs.len()).partition(|&k| engine && jobs[k].to_engine);
        let prog = route.prog.is_some();
        let (to_prog, to_cuda): (Vec<usize>, Vec<usize>) =
            to_cuda.into_iter().partition(|&k| prog && jobs[k].kernels);
        let mut prog_tickets = Vec::new();
        if let Some(l) = route.prog.as_ref() {
            for (group, among, turn) in route.prog_kinds.split(to_prog, |&k| jobs[k].progressive) {
                if group.is_empty() {
                    continue;
                }
                let prog_jobs = group
                    .iter()
                    .map(|&k| {
                        let j = &mut jobs[k];
                        ProgJob {
                            bytes: std::mem::take(&mut j.bytes),
                            plan: j.plan.take(),
                            dest: base + j.at as u64,
                            width: j.width,
                            height: j.height,
                        }
                    })
                    .collect();
                prog_tickets.push((group, l.submit_among(prog_jobs, among, turn)));
            }
        }
        let ticket = route.lanes.as_ref().filter(|_| !to_hw.is_empty()).map(|l| {
            let engine_jobs = to_hw
                .iter()
                .map(|&k| {
                    let j = &mut jobs[k];
                    let size = (j.width, j.height);
                    EngineJob {
                        bytes: std::mem::take(&mut j.bytes),
                        dest: base + j.at as u64,
                        width: j.width,
                        height: j.height,
                        order: (j.mcu, u64::from(j.width) * u64::from(j.height)),
                        window: j.roi.filter(|r| {
                            crate::decode::nvjpeg::engine_takes_window(*r, size, j.mcu)
                        }),
                    }
                })
                .collect();
            l.submit(engine_jobs)
        });
        // After the engine's submission, so that the engine decodes while
        // this thread runs the CUDA share's host phases (issue 16, item 3:
        // both routes from the start of a batch, not one after the other).
        let failed = self.run_cuda(base, &jobs, &to_cuda, &mut route.cuda);
        counts.cuda_here(to_cuda.len() - failed.len());
        Ok(Submitted {
            result: jobs.iter().map(|j| Ok(j.roi)).collect(),
            jobs,
            to_hw,
            ticket,
            failed,
            prog: prog_tickets,
        })
    }

    /// Collect a group: wait for the engine's answer, decode what it did
    /// not take with CUDA, then what failed there with the CPU decoder
    /// (uploaded). One outcome per job, and the jobs' bytes back.
    pub(crate) fn complete_jpegs(
        &self,
        arena: &mut CudaArena,
        mut sub: Submitted,
        route: &mut NvRoute,
        counts: &mut RouteCounts,
    ) -> Result<(Vec<JpegOutcome>, Vec<crate::reader::PooledBytes>)> {
        let mut retry = Vec::new();
        if let Some(t) = sub.ticket.take() {
            match t.wait() {
                Some(reply) => {
                    for ((&k, bytes), taken) in sub.to_hw.iter().zip(reply.bytes).zip(reply.taken) {
                        sub.jobs[k].bytes = bytes;
                        match taken {
                            Some(w) => {
                                counts.hardware += 1;
                                sub.result[k] = Ok(w);
                            }
                            None => retry.push(k),
                        }
                    }
                }
                None => {
                    for &k in &sub.to_hw {
                        sub.result[k] = Err(crate::error::SampleError::Panic(
                            "the engine lane decoding it panicked, and its device work could not be waited for".into(),
                        ));
                    }
                }
            }
        }
        for (to_prog, ticket) in std::mem::take(&mut sub.prog) {
            match ticket.wait() {
                Some(reply) => {
                    for ((&k, bytes), taken) in to_prog.iter().zip(reply.bytes).zip(reply.taken) {
                        sub.jobs[k].bytes = bytes;
                        if taken {
                            // Decoded on the GPU, whole.
                            counts.progressive += 1;
                            sub.result[k] = Ok(None);
                        } else {
                            retry.push(k);
                        }
                    }
                }
                None => {
                    for &k in &to_prog {
                        sub.result[k] = Err(crate::error::SampleError::Panic(
                            "the scan-kernel lane decoding it panicked, and its device work could not be waited for".into(),
                        ));
                    }
                }
            }
        }
        self.k
            .ctx
            .bind_to_thread()
            .map_err(Error::cuda("bind context"))?;
        let base = self.arena_base(arena);
        let mut failed = std::mem::take(&mut sub.failed);
        let cuda_failed = self.run_cuda(base, &sub.jobs, &retry, &mut route.cuda);
        counts.cuda_here(retry.len() - cuda_failed.len());
        failed.extend(cuda_failed);
        let s = &self.k.stream;
        for k in failed {
            // The CPU decoder, uploaded into the same place as a whole
            // image: the kernel cannot tell the routes apart.
            let j = &sub.jobs[k];
            let mut img = crate::decode::Image::default();
            match j.decode_on_cpu(&mut route.cpu, &mut img) {
                Ok(()) => {
                    s.memcpy_htod(
                        img.data.as_slice(),
                        &mut arena.buf.slice_mut(j.at..j.at + img.data.len()),
                    )
                    .map_err(Error::cuda("upload CPU-decoded image"))?;
                    counts.cpu += 1;
                    sub.result[k] = Ok(None);
                }
                Err(e) => sub.result[k] = Err(e),
            }
        }
        let result = std::mem::take(&mut sub.result);
        let bytes = std::mem::take(&mut sub.jobs)
            .into_iter()
            .map(|j| j.bytes)
            .collect();
        Ok((result, bytes))
    }

    /// Decode `jobs` into `arena` on every route and wait for the device:
    /// [`submit_jpegs`](Self::submit_jpegs), then
    /// [`complete_jpegs`](Self::complete_jpegs) (the decode benchmark).
    pub(crate) fn decode_jpegs(
        &self,
        arena: &mut CudaArena,
        jobs: Vec<JpegJob>,
        route: &mut NvRoute,
        counts: &mut RouteCounts,
    ) -> Result<(Vec<JpegOutcome>, Vec<crate::reader::PooledBytes>)> {
        let sub = self.submit_jpegs(arena, jobs, route, counts)?;
        let out = self.complete_jpegs(arena, sub, route, counts)?;
        self.synchronize()?;
        Ok(out)
    }

    /// Decode `jobs[ks]` one by one with the decoupled decoder on the
    /// stage's stream into the arena at `base` (the job's window); returns
    /// those that failed.
    fn run_cuda(
        &self,
        base: u64,
        jobs: &[JpegJob],
        ks: &[usize],
        dec: &mut DecoupledDecoder,
    ) -> Vec<usize> {
        let s = &self.k.stream;
        let mut failed = Vec::new();
        for &k in ks {
            let j = &jobs[k];
            let dest = Dest {
                ptr: base + j.at as u64,
                pitch: j.roi.map_or(j.width, |r| r.w) as usize * 3,
            };
            dec.host(&j.bytes, (j.width, j.height), j.roi)
                .and_then(|()| {
                    // SAFETY: the destination (the job's window, or the
                    // whole image) is inside the arena (checked by
                    // `submit_jpegs`), which the batch thread keeps until
                    // the launches reading it have finished; `host` bound
                    // the decoder's context, `s`'s, to this thread; every
                    // device phase of this decoder is on `s`.
                    unsafe { dec.device(dest, s) }
                })
                .unwrap_or_else(|_| failed.push(k));
        }
        failed
    }

    /// Finish an image whose host phase a worker ran: queue its copy and
    /// device phase on the stage's stream, into `arena` at `at` (the
    /// window `roi` packed at its own width, or the whole `width` ×
    /// `height` image). The lease goes back to its pool when dropped, after
    /// this returns.
    pub(crate) fn decode_staged(
        &self,
        arena: &CudaArena,
        at: usize,
        (width, height): (u32, u32),
        roi: Option<Roi>,
        mut lease: crate::decode::nvjpeg::Lease,
    ) -> Result<()> {
        let s = &self.k.stream;
        if at + width as usize * height as usize * 3 > arena.len() {
            return Err(Error::Device(
                "staged image outside the arena (stage bug)".into(),
            ));
        }
        let dest = Dest {
            ptr: self.arena_base(arena) + at as u64,
            pitch: roi.map_or(width, |r| r.w) as usize * 3,
        };
        self.k
            .ctx
            .bind_to_thread()
            .map_err(Error::cuda("bind context"))?;
        // SAFETY: the destination (the window, or the whole image) lies in
        // the arena (checked above), which the batch thread keeps until the
        // launches reading it have finished; the context is `s`'s, bound
        // just above; every device phase of a pooled decoder is queued on
        // `s`, in order.
        unsafe { lease.device(dest, s) }
    }

    /// Device address of arena byte 0.
    pub(crate) fn arena_base(&self, arena: &CudaArena) -> u64 {
        let (ptr, _record) = arena.buf.device_ptr(&self.k.stream);
        ptr
    }
}
