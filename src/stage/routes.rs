//! The nvJPEG routes a device stage decodes JPEGs with, made at `build()`
//! (issue 16, item 7): on a GPU the engine lanes and the CUDA route's
//! decoder pool for the workers' host phases; on the emulated device its
//! engine lanes (CPU decoders), so that CI runs both halves of the route.

use std::sync::Arc;
use std::time::Instant;

use super::Engine;
use super::cuda::NvRoute;
use super::handoff::{WorkerDecode, WorkerDecodeKind};
use super::jpeg::JpegRoute;
use crate::config::Config;
use crate::cuda::lanes::Observe;
use crate::cuda::timeline::GpuTimeline;
use crate::decode::nvjpeg::{Ledger, Share, decoder_pool};
use crate::error::Result;

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
    Ok(if cfg.gpu_decode {
        match &engine {
            Engine::Cuda(e) => {
                let lanes = cfg.in_flight;
                let cpu = fallback()?;
                let (busy, batch) = (share.engine_busy(), cfg.batch_size);
                let (t, began) = (timeline, Instant::now());
                let route = NvRoute::new(e, batch, lanes, cpu, t, &ledgers.route, busy);
                built(observe, "device: nvJPEG engine lanes", began);
                match route {
                    Ok(mut r) => {
                        if cfg.progressive || cfg.sequential {
                            let began = Instant::now();
                            r.add_progressive(e, ledgers, observe.clone());
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
                            progressive_gpu: r.has_progressive() && cfg.progressive,
                            sequential_gpu: r.has_progressive() && cfg.sequential,
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
                let workers = WorkerDecode {
                    engine: true,
                    share: share.clone(),
                    kind: WorkerDecodeKind::Emu,
                    progressive_gpu: cfg.progressive,
                    sequential_gpu: cfg.sequential,
                };
                let largest: Arc<std::sync::atomic::AtomicUsize> = Arc::default();
                let cpus = (0..cfg.in_flight)
                    .map(|_| {
                        Ok(super::emu::EmuLane {
                            cpu: fallback()?,
                            img: crate::decode::Image::default(),
                            largest: largest.clone(),
                            ledger: ledgers.route.clone(),
                        })
                    })
                    .collect::<Result<Vec<_>>>()?;
                let lanes = crate::cuda::lanes::Lanes::new(
                    "gpufeed-emu-engine",
                    cpus,
                    crate::cuda::lanes::counted(
                        crate::cuda::lanes::observed(super::emu::emu_engine, observe.clone()),
                        share.engine_busy(),
                        Vec::len,
                    ),
                )?;
                // Progressive lanes, as on CUDA: the kernels compiled
                // for the host, a CPU decoder for what they refuse.
                let prog = if cfg.progressive || cfg.sequential {
                    let states = (0..crate::cuda::lanes::progressive_lanes())
                        .map(|_| {
                            Ok(super::emu::EmuProgLane {
                                cpu: fallback()?,
                                img: crate::decode::Image::default(),
                                ledger: ledgers.route.clone(),
                            })
                        })
                        .collect::<Result<Vec<_>>>()?;
                    let run = crate::cuda::lanes::counted(
                        crate::cuda::lanes::observed_as(
                            super::emu::emu_progressive,
                            observe.clone(),
                            crate::cuda::lanes::PROGRESSIVE_CALL,
                        ),
                        ledgers.progressive_busy.clone(),
                        Vec::len,
                    );
                    Some(crate::cuda::lanes::Lanes::new(
                        "gpufeed-emu-progressive",
                        states,
                        run,
                    )?)
                } else {
                    None
                };
                let route = super::jpeg::EmuRoute {
                    engine: lanes,
                    prog,
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
