//! The nvJPEG routes a device stage decodes JPEGs with, made at `build()`
//! (issue 16, item 7): on a GPU the engine lanes and the CUDA route's
//! decoder pool for the workers' host phases; on the emulated device its
//! engine lanes (CPU decoders), so that CI runs both halves of the route.

use std::sync::Arc;
use std::time::Instant;

use super::Engine;
use super::cuda::NvRoute;
use super::handoff::{KernelRule, LiveLanes, WorkerDecode, WorkerDecodeKind};
use super::jpeg::JpegRoute;
use crate::config::Config;
use crate::cuda::lanes::Observe;
use crate::cuda::timeline::GpuTimeline;
use crate::decode::nvjpeg::{Ledger, Share, decoder_pool};
use crate::error::Result;

/// How the scan kernels' lanes are shared between the two kinds of file
/// they decode (issue 16, item 3c). A lane's call lasts as long as its
/// slowest file: a progressive photo on one GPU thread per chain (a batch's
/// dozen took ~70 ms on an H200, 0d15f52), against ~19 ms for a batch's
/// sequential files on the split kernels (4bbffad). With both kinds on,
/// each has `progressive_lanes(in_flight)` lanes of its own (lanes `0..n`
/// for the sequential files, `n..2n` for the progressive ones), so that
/// sequential files never wait behind a progressive call; with one kind,
/// it has the `n` lanes to itself.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct KernelLanes {
    per_kind: usize,
    both: bool,
    /// Calls so far per kind: the next goes to the next of its lanes.
    turns: [usize; 2],
}

impl KernelLanes {
    /// For a pipeline with the progressive and/or sequential kernels on
    /// and `in_flight` batches in flight.
    pub(crate) fn new(progressive: bool, sequential: bool, in_flight: usize) -> KernelLanes {
        KernelLanes {
            per_kind: crate::cuda::lanes::progressive_lanes(in_flight),
            both: progressive && sequential,
            turns: [0; 2],
        }
    }

    /// Lanes in the pool.
    pub(crate) fn lanes(&self) -> usize {
        if self.both {
            2 * self.per_kind
        } else {
            self.per_kind
        }
    }

    /// The lanes that take files of one kind (progressive or not).
    pub(crate) fn range(&self, progressive: bool) -> std::ops::Range<usize> {
        let n = self.per_kind;
        match (self.both, progressive) {
            (true, true) => n..2 * n,
            _ => 0..n,
        }
    }

    /// The calls for the files `files` (`progressive(f)`: f is one), each
    /// with the lanes it may go to and its kind's turn count for
    /// `Lanes::submit_among`: one call, or with both kinds on one per kind
    /// (sequential first; either may be empty).
    pub(crate) fn split<T>(
        &mut self,
        files: Vec<T>,
        progressive: impl Fn(&T) -> bool,
    ) -> Vec<(Vec<T>, std::ops::Range<usize>, &mut usize)> {
        let (seq_lanes, prog_lanes) = (self.range(false), self.range(true));
        let [seq_turn, prog_turn] = &mut self.turns;
        if !self.both {
            return vec![(files, seq_lanes, seq_turn)];
        }
        let (prog, seq): (Vec<T>, Vec<T>) = files.into_iter().partition(|f| progressive(f));
        vec![(seq, seq_lanes, seq_turn), (prog, prog_lanes, prog_turn)]
    }
}

/// Where the routes count their memory and waits.
pub(super) struct Ledgers {
    /// The engine lanes' and the batch thread's nvJPEG memory (unbounded).
    pub(super) route: Arc<Ledger>,
    /// The decoder pool's (bounded by `decoder_memory_limit`).
    pub(super) pool: Arc<Ledger>,
    /// The pool's host phases' waits for pinned buffers, in nanoseconds.
    pub(super) pinned_wait: Arc<std::sync::atomic::AtomicU64>,
    /// Time with a progressive lane call in flight
    /// (`Stats::progressive_busy`).
    pub(super) progressive_busy: Arc<crate::cuda::lanes::Busy>,
    /// The scan kernels' lanes' buffers for their files, coefficients and
    /// samples (`Memory::kernel_device_bytes`); their descriptors and
    /// staging are in `route`.
    pub(super) kernels: Arc<Ledger>,
    /// Device bytes those buffers may hold, all lanes together
    /// (`PipelineBuilder::kernel_memory_limit`; `u64::MAX`: no bound).
    pub(super) kernel_limit: u64,
}

impl Ledgers {
    /// Ledgers for a pipeline whose decoder pool may hold `pool_limit`
    /// bytes and whose kernel lanes' buffers `kernel_limit`; the kernel
    /// lanes count their calls in `progressive_busy` (the engine share's,
    /// `Share::kernel_busy`).
    pub(super) fn new(
        pool_limit: u64,
        kernel_limit: u64,
        progressive_busy: Arc<crate::cuda::lanes::Busy>,
    ) -> Ledgers {
        Ledgers {
            route: Arc::new(Ledger::new(u64::MAX)),
            pool: Arc::new(Ledger::new(pool_limit)),
            pinned_wait: Arc::default(),
            progressive_busy,
            kernels: Arc::new(Ledger::new(u64::MAX)),
            kernel_limit,
        }
    }

    /// The device bytes each of `lanes` kernel lanes may hold for its
    /// files' buffers, so that all together stay within `kernel_limit`.
    pub(super) fn kernel_lane_bytes(&self, lanes: usize) -> usize {
        usize::try_from(self.kernel_limit / lanes.max(1) as u64).unwrap_or(usize::MAX)
    }

    /// The marks for `lanes` kernel lanes: each lane's buffers grow to
    /// them ([`kernel_lane_bytes`](Self::kernel_lane_bytes) at most).
    pub(super) fn kernel_marks(&self, lanes: usize) -> crate::cuda::prog_batch::Marks {
        crate::cuda::prog_batch::Marks::bounded(self.kernel_lane_bytes(lanes))
    }
}

/// The JPEG route of `engine` for `cfg` and what the workers need to take
/// their part in it; `(None, None)` without `gpu_decode`, or where nvJPEG
/// cannot be used (said on stderr: the workers then decode on the CPU).
pub(super) fn make(
    engine: &Engine,
    cfg: &Config,
    share: &Arc<Share>,
    timeline: Option<&Arc<GpuTimeline>>,
    observe: &Option<Observe>,
    ledgers: &Ledgers,
) -> Result<(Option<JpegRoute>, Option<Arc<WorkerDecode>>)> {
    let fallback = || crate::decode::CpuDecoder::with_backend(cfg.cpu_backend, false);
    let kinds = KernelLanes::new(cfg.progressive, cfg.sequential, cfg.in_flight);
    Ok(if cfg.gpu_decode {
        match &engine {
            Engine::Cuda(e) => {
                // At a fixed share of 0 no image goes to the engine, so no
                // lanes: making them (a hardware nvJPEG handle and state
                // each) took 1,762 ms of the 2.3 s `build()` on an H200
                // with 6 in flight (4bbffad, the timeline's "build"
                // track).
                // Unless the sequential kernels' size limit sends the
                // larger images there whatever the share.
                let capped = cfg.sequential && cfg.sequential_max_pixels < u64::MAX;
                let lanes = if share.may_engine() || capped {
                    cfg.in_flight
                } else {
                    0
                };
                let cpu = fallback()?;
                let (busy, batch) = (share.engine_busy(), cfg.batch_size);
                let (t, began) = (timeline, Instant::now());
                let lanes = super::cuda::EngineLanes {
                    count: lanes,
                    own_context: cfg.engine_context,
                };
                let route = NvRoute::new(e, batch, lanes, cpu, t, &ledgers.route, busy);
                built(
                    observe,
                    "device: nvJPEG route (engine lanes, CUDA decoder)",
                    began,
                );
                match route {
                    Ok(mut r) => {
                        if cfg.progressive || cfg.sequential {
                            let began = Instant::now();
                            r.add_progressive(e, ledgers, observe.clone(), kinds);
                            built(observe, "device: progressive lanes", began);
                        }
                        // One per sample in flight, and the carried
                        // one: never fewer than the leases samples can
                        // hold (`decode/nvjpeg/pool.rs`).
                        let cap = cfg.window() + 2;
                        let began = Instant::now();
                        let pool =
                            decoder_pool(e.context(), cap, &ledgers.pool, &ledgers.pinned_wait);
                        built(observe, "device: nvJPEG decoder pool", began);
                        let kind = match pool {
                            Ok(p) => WorkerDecodeKind::Cuda(p),
                            Err(_) => WorkerDecodeKind::Off,
                        };
                        let workers = WorkerDecode {
                            engine: r.has_hardware(),
                            share: share.clone(),
                            kind,
                            kernels: KernelRule {
                                progressive: r.has_progressive() && cfg.progressive,
                                sequential: r.has_progressive() && cfg.sequential,
                                max_pixels: cfg.sequential_max_pixels,
                                lane_bytes: ledgers.kernel_lane_bytes(kinds.lanes()),
                            },
                            live: r.live_lanes(),
                        };
                        (Some(JpegRoute::Cuda(r)), Some(Arc::new(workers)))
                    }
                    Err(e) => {
                        eprintln!("gpufeed: nvJPEG unusable ({e}); decoding on CPU threads");
                        (None, None)
                    }
                }
            }
            Engine::Emu(_) => {
                // The emulated device plays a hardware engine, so that
                // CI runs both halves of the route: the share's draws
                // decode at its lanes, the rest on the workers.
                let mut workers = WorkerDecode {
                    engine: true,
                    share: share.clone(),
                    kind: WorkerDecodeKind::Emu,
                    kernels: KernelRule {
                        progressive: cfg.progressive,
                        sequential: cfg.sequential,
                        max_pixels: cfg.sequential_max_pixels,
                        lane_bytes: ledgers.kernel_lane_bytes(kinds.lanes()),
                    },
                    live: LiveLanes::default(),
                };
                let largest: Arc<std::sync::atomic::AtomicUsize> = Arc::default();
                let cpus = (0..cfg.in_flight)
                    .map(|_| {
                        Ok(super::emu::EmuLane {
                            cpu: fallback()?,
                            img: crate::decode::Image::default(),
                            largest: largest.clone(),
                            ledger: ledgers.route.clone(),
                            calls: 0,
                        })
                    })
                    .collect::<Result<Vec<_>>>()?;
                let lanes = crate::cuda::lanes::Lanes::new(
                    "gpufeed-emu-engine",
                    cpus,
                    crate::cuda::lanes::counted(
                        crate::cuda::lanes::observed(
                            |l: &mut super::emu::EmuLane, q: &mut Vec<_>| {
                                super::emu::emu_engine(l, q)
                            },
                            observe.clone(),
                        ),
                        share.engine_busy(),
                        Vec::len,
                    ),
                    super::emu::emu_rescue(cfg.cpu_backend, super::emu::emu_engine_declined),
                )?;
                // Progressive lanes, as on CUDA: the kernels compiled
                // for the host, a CPU decoder for what they refuse.
                let prog = if cfg.progressive || cfg.sequential {
                    let marks = Arc::new(ledgers.kernel_marks(kinds.lanes()));
                    let states = (0..kinds.lanes())
                        .map(|_| {
                            Ok(super::emu::EmuProgLane {
                                cpu: fallback()?,
                                img: crate::decode::Image::default(),
                                ledger: ledgers.route.clone(),
                                kernels: ledgers.kernels.clone(),
                                held: (0, 0),
                                marks: marks.clone(),
                                calls: 0,
                            })
                        })
                        .collect::<Result<Vec<_>>>()?;
                    let run = crate::cuda::lanes::counted(
                        crate::cuda::lanes::observed_as(
                            |l: &mut super::emu::EmuProgLane, q: &mut Vec<_>| {
                                super::emu::emu_progressive(l, q)
                            },
                            observe.clone(),
                            crate::cuda::lanes::PROGRESSIVE_CALL,
                        ),
                        ledgers.progressive_busy.clone(),
                        Vec::len,
                    );
                    Some(crate::cuda::lanes::Lanes::tended(
                        "gpufeed-emu-progressive",
                        states,
                        run,
                        super::emu::emu_rescue(
                            cfg.cpu_backend,
                            super::emu::emu_progressive_declined,
                        ),
                        Some(crate::cuda::lanes::Tend {
                            generation: |l: &super::emu::EmuProgLane| l.marks.generation(),
                            grow: super::emu::emu_tend,
                        }),
                    )?)
                } else {
                    None
                };
                workers.live = LiveLanes::of(
                    Some(lanes.stop_flags()),
                    prog.as_ref().map(|p| p.stop_flags()),
                    &kinds,
                );
                let route = super::jpeg::EmuRoute {
                    engine: lanes,
                    prog,
                    prog_kinds: kinds,
                };
                (Some(JpegRoute::Emu(route)), Some(Arc::new(workers)))
            }
        }
    } else {
        (None, None)
    })
}

/// Tell the timeline (if any) that build step `name` ran from `start` to
/// now, on its "build" track.
pub(super) fn built(observe: &Option<Observe>, name: &'static str, start: Instant) {
    if let Some(o) = observe {
        o(crate::cuda::timeline::Seen {
            track: Some("build"),
            name,
            start,
            end: Instant::now(),
        });
    }
}
