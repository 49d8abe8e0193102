//! The emulated backend of the device stage (feature `kernel-emu`): host
//! memory for pinned and device memory, the kernels compiled for the host
//! (`cuda/emu.rs`), and an engine played by CPU decoders on lanes of their
//! own, beside the CUDA backend (`cuda.rs`).
//!
//! The stage matches on both backends without feature arms; the feature is
//! decided here alone. Without it [`EmuDevice`] has no values, so no
//! emulated stage can be made and its arms are dead (candle's dummy
//! backends work the same way), and the host kernels are not linked.

use crate::error::{Error, Result, SampleError};

/// The emulated device, a token the stage's `Engine::Emu` holds.
#[cfg(feature = "kernel-emu")]
#[derive(Debug, Clone, Copy)]
pub(crate) struct EmuDevice;

/// Without `kernel-emu`: no emulated device can exist.
#[cfg(not(feature = "kernel-emu"))]
#[derive(Debug, Clone, Copy)]
pub(crate) enum EmuDevice {}

#[cfg(feature = "kernel-emu")]
pub(super) use crate::cuda::emu::run_launches;

/// Without `kernel-emu` the host kernels are not built; nothing calls this
/// (no [`EmuDevice`] exists).
#[cfg(not(feature = "kernel-emu"))]
pub(super) fn run_launches(
    _staging: &[u8],
    _sources: &[&[u8]],
    _launches: &[crate::cuda::launch::StageLaunch],
    _outs: &mut [&mut [u8]],
    _scratch: Option<&mut [u8]>,
    _elem: usize,
) -> std::result::Result<(), String> {
    Err("built without the emulated device (feature kernel-emu)".into())
}

/// Host memory standing in for pinned + device memory; a failed
/// allocation is an error like a failed cuMemHostAlloc, not an abort.
pub(super) fn emu_alloc(n: usize) -> Result<Vec<u8>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|e| Error::Device(format!("allocate {n} bytes of emulated staging: {e}")))?;
    v.resize(n, 0);
    Ok(v)
}

/// The emulated device's page-locked memory for the readers' blocks:
/// heap memory, so that CI runs the pool's pinned paths and the engine
/// route reading from them.
#[derive(Debug)]
pub(super) struct EmuPins;

impl crate::reader::PinAlloc for EmuPins {
    fn alloc(
        &self,
        count: usize,
        bytes: usize,
    ) -> Option<Vec<Box<dyn crate::reader::PinnedBlock>>> {
        (0..count)
            .map(|_| -> Option<Box<dyn crate::reader::PinnedBlock>> {
                Some(Box::new(emu_alloc(bytes).ok()?))
            })
            .collect()
    }
}

/// The emulated device's kernels' track in the timeline.
pub(super) const STAGE_TRACK: &str = "GPU: stage stream (emulated)";

/// An emulated decode arena.
pub(super) type EmuArena = std::sync::Arc<std::sync::Mutex<Vec<u8>>>;

/// The emulated engine's answer to a group: per job, decoded into the
/// arena by the engine (`true`) or, its call declined after a panic, by
/// the CPU (`false`, as the CUDA backend's batch thread counts it); an
/// error where that failed.
pub(super) type EmuReply = Vec<std::result::Result<bool, SampleError>>;

/// An image for the emulated engine: bytes, header size, window, and
/// where it goes (arena, byte offset).
pub(super) struct EmuJob {
    pub(super) bytes: crate::reader::PooledBytes,
    pub(super) size: (u32, u32),
    pub(super) roi: Option<crate::decode::nvjpeg::Roi>,
    pub(super) arena: EmuArena,
    pub(super) at: usize,
    /// The worker's plan for the scan kernels, as a CUDA lane gets it
    /// (`cuda/prog_route.rs`); `None`: the lane plans.
    pub(super) plan: Option<Box<crate::jpeg::scans::Plan>>,
    /// A progressive file (`handoff::Jpeg::progressive`).
    pub(super) progressive: bool,
}

/// An emulated engine lane's state: a CPU decoder, its image buffer, the
/// largest image any lane has decoded (bytes), shared by the lanes, and
/// the ledger its buffer is counted in, as nvJPEG's buffers are
/// (`Memory::decoder_pinned_bytes`).
pub(super) struct EmuLane {
    pub(super) cpu: crate::decode::CpuDecoder,
    pub(super) img: crate::decode::Image,
    pub(super) largest: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    pub(super) ledger: std::sync::Arc<crate::decode::nvjpeg::Ledger>,
    /// Calls so far (`cuda::lanes::panics_now`).
    pub(super) calls: usize,
}

/// The emulated lanes' rescue: nothing to wait for (the writes are the
/// lane thread's own, done when the call unwound), and the call's jobs
/// decoded on a CPU decoder of `backend`, as the CUDA backend's batch
/// thread decodes a declined call's files on its other routes; its memory
/// is not the lanes' (not counted).
pub(super) fn emu_rescue<S, A: 'static>(
    backend: crate::decode::CpuBackend,
    decode: fn(crate::decode::CpuDecoder, &mut [EmuJob]) -> A,
) -> crate::cuda::lanes::Rescue<S, Vec<EmuJob>, A> {
    crate::cuda::lanes::Rescue {
        settle: |_| true,
        decline: std::sync::Arc::new(move |mut jobs: Vec<EmuJob>| {
            decode(
                crate::decode::CpuDecoder::with_backend(backend, false)
                    .unwrap_or_else(|_| crate::decode::CpuDecoder::new(false)),
                &mut jobs,
            )
        }),
    }
}

/// A declined engine call: each job decoded as the engine lane decodes it.
pub(super) fn emu_engine_declined(cpu: crate::decode::CpuDecoder, jobs: &mut [EmuJob]) -> EmuReply {
    let mut lane = EmuLane {
        cpu,
        img: Default::default(),
        largest: Default::default(),
        ledger: std::sync::Arc::new(crate::decode::nvjpeg::Ledger::new(u64::MAX)),
        calls: 0,
    };
    decode_engine_jobs(&mut lane, jobs, false)
}

/// A declined scan-kernel call: each job decoded whole on the CPU.
pub(super) fn emu_progressive_declined(
    cpu: crate::decode::CpuDecoder,
    jobs: &mut [EmuJob],
) -> EmuProgReply {
    let mut lane = EmuProgLane {
        cpu,
        img: Default::default(),
        ledger: std::sync::Arc::new(crate::decode::nvjpeg::Ledger::new(u64::MAX)),
        kernels: std::sync::Arc::new(crate::decode::nvjpeg::Ledger::new(u64::MAX)),
        held: (0, 0),
        marks: Default::default(),
        calls: 0,
    };
    jobs.iter()
        .map(|j| decode_progressive(&mut lane, j, None))
        .collect()
}

/// The emulated engine's lane: decode each job on the CPU and write its
/// window (or whole image), packed at its own width, into the arena, as
/// the engine does. Its decoder and image buffer are reused, and the
/// buffer grows to the largest image any lane has seen before it decodes,
/// so that lanes stop allocating once one epoch has passed, whichever
/// lane met the largest image (tests/memory.rs).
pub(super) fn emu_engine(lane: &mut EmuLane, jobs: &mut [EmuJob]) -> EmuReply {
    let fail = crate::cuda::lanes::panics_now(&mut lane.calls);
    let (first, rest) = jobs.split_at(jobs.len().min(1));
    let mut reply = decode_engine_jobs(lane, first, true);
    assert!(
        !fail,
        "GPUFEED_TEST_LANE_PANIC: an emulated engine call, its first file written"
    );
    reply.extend(decode_engine_jobs(lane, rest, true));
    reply
}

/// The engine's decode of `jobs` (see [`emu_engine`]), answered as by
/// the engine where `engine`, else as by the CPU.
fn decode_engine_jobs(lane: &mut EmuLane, jobs: &[EmuJob], engine: bool) -> EmuReply {
    use crate::decode::nvjpeg::Kind;
    use std::sync::atomic::Ordering::Relaxed;
    let EmuLane {
        cpu,
        img,
        largest,
        ledger,
        ..
    } = lane;
    jobs.iter()
        .map(|j| {
            let bytes = j.size.0 as usize * j.size.1 as usize * 3;
            let want = largest.fetch_max(bytes, Relaxed).max(bytes);
            let before = img.data.capacity();
            img.data.reserve(want.saturating_sub(img.data.len()));
            count_growth(ledger, Kind::Pinned, before, img.data.capacity());
            super::handoff::decode_on_cpu(&j.bytes, j.size, cpu, img)?;
            let whole = crate::decode::nvjpeg::Roi {
                x: 0,
                y: 0,
                w: j.size.0,
                h: j.size.1,
            };
            let r = j.roi.unwrap_or(whole);
            let row = r.w as usize * 3;
            let mut arena = j.arena.lock().unwrap_or_else(|p| p.into_inner());
            let out = arena
                .get_mut(j.at..j.at + row * r.h as usize)
                .ok_or_else(|| {
                    crate::error::SampleError::Panic("window outside the arena".into())
                })?;
            for (y, src) in img.window_rows(r).enumerate() {
                out[y * row..][..row].copy_from_slice(src);
            }
            Ok(engine)
        })
        .collect()
}

/// Count a lane's buffer grown from `before` to `after` bytes in `ledger`
/// as `kind`, as one allocation (nvJPEG's buffers are counted so).
fn count_growth(
    ledger: &crate::decode::nvjpeg::Ledger,
    kind: crate::decode::nvjpeg::Kind,
    before: usize,
    after: usize,
) {
    let grew = after.saturating_sub(before);
    if grew > 0 {
        // The ledger has no limit: the charge always goes through.
        let _ = ledger.charge(kind, grew as u64);
        ledger.note_allocation();
    }
}

/// An emulated progressive lane (`PipelineBuilder::progressive_kernels`):
/// the progressive kernels compiled for the host, and a CPU decoder for
/// the files they refuse, which on CUDA go back to the batch thread's
/// decoders (`stage/cuda/prog_route.rs`). A CUDA lane's buffers grow to
/// the lanes' largest call, within `kernel_memory_limit`, and stay
/// (`cuda/prog_batch.rs`, `Buffers`, `Marks`): device memory for the
/// files, their coefficients (i16) and samples (a byte each), page-locked
/// staging for the files. `held` counts what those would be for this
/// lane's calls, as the CUDA lane counts them: the device buffers in
/// `kernels`, the staging in `ledger`, where the CPU decoder's image
/// buffer counts too (issue 16, item 5); the kernels' scratch here lives
/// only for a call.
pub(super) struct EmuProgLane {
    pub(super) cpu: crate::decode::CpuDecoder,
    pub(super) img: crate::decode::Image,
    pub(super) ledger: std::sync::Arc<crate::decode::nvjpeg::Ledger>,
    /// Where the kernels' buffers for the files count
    /// (`Memory::kernel_device_bytes`).
    pub(super) kernels: std::sync::Arc<crate::decode::nvjpeg::Ledger>,
    /// (device, page-locked) bytes counted for the kernels' buffers.
    pub(super) held: (usize, usize),
    /// The sizes those grow to, shared with the other lanes, as on CUDA.
    pub(super) marks: std::sync::Arc<crate::cuda::prog_batch::Marks>,
    /// Calls so far (`cuda::lanes::panics_now`).
    pub(super) calls: usize,
}

impl EmuProgLane {
    /// Hold `held` (device, page-locked) bytes for the kernels' buffers,
    /// counting what grew. The ledgers have no limit: the charges always
    /// go through.
    fn hold(&mut self, held: (usize, usize)) {
        use crate::decode::nvjpeg::Kind;
        let held = (held.0.max(self.held.0), held.1.max(self.held.1));
        let _ = self
            .kernels
            .charge(Kind::Device, (held.0 - self.held.0) as u64);
        let _ = self
            .ledger
            .charge(Kind::Pinned, (held.1 - self.held.1) as u64);
        self.held = held;
    }
}

/// Grow an idle lane's buffers to the lanes' marks, as a CUDA lane's
/// `Buffers::tend` does (`cuda::lanes::Tend`): the files' buffers and the
/// staging, the two this lane counts.
pub(super) fn emu_tend(lane: &mut EmuProgLane) {
    let (sizes, others) = lane.marks.current();
    lane.hold((
        crate::cuda::prog_batch::Marks::held(sizes),
        others[crate::cuda::prog_batch::STAGING],
    ));
}

/// Per job: decoded by the kernels (`true`) or, refused by them, by the
/// lane's CPU decoder (`false`); an error where that failed too.
pub(super) type EmuProgReply = Vec<std::result::Result<bool, SampleError>>;

/// Decode each job, whole, into its place in the arena (`width * 3` bytes
/// a row, as the CUDA lanes write it): with the kernels where the plan
/// takes the file and every chain of its scans decodes, else on the CPU.
pub(super) fn emu_progressive(lane: &mut EmuProgLane, jobs: &mut [EmuJob]) -> EmuProgReply {
    let t0 = std::time::Instant::now();
    let fail = crate::cuda::lanes::panics_now(&mut lane.calls);
    // A CUDA call lasts as long as its slowest file, and the split kernels
    // make sequential ones short (4bbffad): the latency is progressive
    // files' alone.
    let slow = jobs.iter().any(|j| j.progressive);
    // Planned first, as a CUDA lane plans its call before sizing its
    // buffers for the files the plans take.
    let mut planned: Vec<_> = jobs
        .iter_mut()
        .map(|j| {
            let p = crate::jpeg::scans::given_or_planned(j.plan.take(), &j.bytes).ok();
            let p = p.filter(|p| (p.width, p.height) == j.size);
            (&*j, p)
        })
        .collect();
    // Cut to the lanes' bound as the CUDA lane cuts its call
    // (`prog_batch::Marks::parts`): a file that does not fit beside the
    // parts' buffers is refused, and decodes on the CPU here (on CUDA at
    // the batch thread).
    let at: Vec<usize> = (0..planned.len())
        .filter(|&k| planned[k].1.is_some())
        .collect();
    let sizes: Vec<[usize; 2]> = at
        .iter()
        .map(|&k| {
            let (j, p) = &planned[k];
            let coefs = p.as_ref().map_or(0, |p| p.all_coefficients());
            [j.bytes.len(), coefs]
        })
        .collect();
    let parts = lane.marks.parts(&sizes);
    for &r in &parts.refused {
        planned[at[r]].1 = None;
    }
    // Charged as the CUDA lane charges its buffers' growth (no driver
    // allocation counted: those are nvJPEG's, `Stats::decoder_allocations`).
    // The files' buffers are the marks' (`Marks::held`); the staging grows
    // part by part to the files not read into page-locked blocks, by the
    // CUDA lane's rule (`prog_batch::staging_len`).
    let staging = parts.calls.iter().fold(lane.held.1, |have, r| {
        let staged = at[r.clone()]
            .iter()
            .map(|&k| &planned[k].0.bytes)
            .filter(|b| !b.is_pinned())
            .map(|b| b.len())
            .sum();
        crate::cuda::prog_batch::staging_len(have, staged, parts.grow[0])
    });
    // A call with no part puts nothing on the device (`prog_route.rs`):
    // its buffers stay as they are.
    let device = if parts.calls.is_empty() {
        lane.held.0
    } else {
        crate::cuda::prog_batch::Marks::held(parts.grow).max(lane.held.0)
    };
    let mut noted = [0; crate::cuda::prog_batch::OTHERS];
    noted[crate::cuda::prog_batch::STAGING] = staging;
    lane.marks.note(noted);
    lane.hold((device, staging));
    let mut reply = Vec::with_capacity(planned.len());
    for (j, p) in planned {
        reply.push(decode_progressive(lane, j, p));
        assert!(
            !fail,
            "GPUFEED_TEST_LANE_PANIC: an emulated scan-kernel call, its first file written"
        );
    }
    if slow {
        std::thread::sleep(progressive_latency().saturating_sub(t0.elapsed()));
    }
    reply
}

/// One job of [`emu_progressive`], planned as `plan` (`None`: refused).
fn decode_progressive(
    lane: &mut EmuProgLane,
    j: &EmuJob,
    plan: Option<crate::jpeg::scans::Plan>,
) -> std::result::Result<bool, SampleError> {
    let bytes = j.size.0 as usize * j.size.1 as usize * 3;
    let mut arena = j.arena.lock().unwrap_or_else(|p| p.into_inner());
    let out = arena
        .get_mut(j.at..j.at + bytes)
        .ok_or_else(|| SampleError::Panic("progressive image outside the arena".into()))?;
    if kernels_decode(&j.bytes, plan, out) {
        return Ok(true);
    }
    let before = lane.img.data.capacity();
    let decoded = super::handoff::decode_on_cpu(&j.bytes, j.size, &mut lane.cpu, &mut lane.img);
    count_growth(
        &lane.ledger,
        crate::decode::nvjpeg::Kind::Device,
        before,
        lane.img.data.capacity(),
    );
    decoded?;
    out.copy_from_slice(
        lane.img
            .data
            .get(..bytes)
            .ok_or_else(|| SampleError::Panic("CPU decode smaller than its header".into()))?,
    );
    Ok(false)
}

/// How long an emulated progressive lane's call holding a progressive
/// file lasts at least: `GPUFEED_EMU_PROGRESSIVE_LATENCY_MS`, else 0. A diagnostic standing for
/// a CUDA lane's latency (a call lasts about as long as its slowest
/// image's decode on one GPU thread: ~70 ms on an H200, 2026-11-27), so
/// that how the stage overlaps such calls is measured without a GPU.
fn progressive_latency() -> std::time::Duration {
    static MS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    std::time::Duration::from_millis(*MS.get_or_init(|| {
        std::env::var("GPUFEED_EMU_PROGRESSIVE_LATENCY_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }))
}

/// Whether the kernels decoded `data`, planned as `plan` at its header's
/// size (`None`: the plan refused it), into `out`: as the CUDA lanes
/// check, `gf_color` must convert the plan and every chain of scans
/// report success.
#[cfg(feature = "kernel-emu")]
fn kernels_decode(data: &[u8], plan: Option<crate::jpeg::scans::Plan>, out: &mut [u8]) -> bool {
    plan.is_some_and(|p| {
        crate::cuda::pixels::emu_decode(&p, data, out)
            .is_ok_and(|status| status.iter().all(|&s| s == 0))
    })
}

/// Without `kernel-emu` the kernels are not built; nothing calls this (no
/// [`EmuDevice`] exists).
#[cfg(not(feature = "kernel-emu"))]
fn kernels_decode(_data: &[u8], _plan: Option<crate::jpeg::scans::Plan>, _out: &mut [u8]) -> bool {
    false
}
