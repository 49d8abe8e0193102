//! The routing policy (issues 5 and 16, item 7), in one place: which
//! decoder a JPEG goes to. From its header, on the worker that parsed it:
//! the CPU decoder, or nvJPEG ([`gpu_routable`]); of nvJPEG's, whether the
//! hardware engine could take it ([`hardware_takes`]). From the sample
//! alone: whether it goes to the engine, by a draw below the share
//! ([`hardware_draw`], [`Share::route`]). The rest of nvJPEG's images take
//! CUDA; what a route refuses or fails at falls back to the next (engine,
//! CUDA, CPU), in `stage/cuda/nvroute.rs`. The share itself, fixed or
//! steered ([`Share`]).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Whether nvJPEG's CUDA decoders take an image with this header: 8-bit
/// Huffman DCT (baseline, extended, progressive), gray or YCbCr in one of
/// the subsamplings nvJPEG names (`nvjpegChromaSubsampling_t`). Measured on
/// an H100 with nvJPEG 13.0 (2026-11-22): RGB-coded files came out as if
/// YCbCr (7–12 dB against the CPU decoder), and mixed chroma factors
/// (Cb 2x1 with Cr 1x1, luma 1x3, ...) as garbage; those go to the CPU.
/// So do images under 16 pixels on a side (smaller than a 4:2:0 MCU):
/// nvJPEG's interpolated chroma at their edges differed from the CPU
/// decoders' (a 2x2 image: 32.5 dB), and the CPU decodes them for nothing.
pub fn takes(h: &crate::jpeg::JpegHeader) -> bool {
    use crate::jpeg::{SofKind, Subsampling as S};
    h.width >= 16
        && h.height >= 16
        && matches!(
            h.sof,
            SofKind::Baseline | SofKind::Extended | SofKind::Progressive
        )
        && h.precision == 8
        && match h.components {
            1 => true,
            3 => {
                !h.is_rgb()
                    && matches!(
                        h.subsampling,
                        S::S444 | S::S422 | S::S420 | S::S440 | S::S411 | S::S410
                    )
            }
            _ => false,
        }
}

/// [`takes`], narrowed for the hardware engine: baseline files only (the
/// NVJPG engine decodes baseline Huffman JPEGs; nvJPEG documentation,
/// "Hardware Acceleration"). Progressive files used to pass here, be
/// refused by the engine's own support query, and then decode one by one
/// on the batch thread (issue 16, 3b); they now take the CUDA route from
/// the worker. Also excluded: gray images whose one component declares
/// sampling factors other than 1x1 (legal, and meaningless for one
/// component), which the engine decoded as garbage on an H100 where the
/// CUDA decoder got them right.
pub fn hardware_takes(h: &crate::jpeg::JpegHeader) -> bool {
    takes(h)
        && h.sof == crate::jpeg::SofKind::Baseline
        && (h.components == 3 || h.sampling.first() == Some(&(1, 1)))
}

/// Whether the image goes to nvJPEG (issue 5 routing, decided from the
/// header): what [`takes`] accepts. Lossless,
/// arithmetic, hierarchical, 12-bit, CMYK, RGB-coded and odd subsamplings go
/// to the CPU decoder, as do images that need an EXIF rotation (the CPU
/// route applies it).
pub(crate) fn gpu_routable(h: &crate::jpeg::JpegHeader, apply_orientation: bool) -> bool {
    takes(h) && (!apply_orientation || h.orientation == crate::jpeg::Orientation::Normal)
}

/// A uniform draw in `[0, 1)` for sample `index` of `epoch`: the sample goes
/// to the hardware JPEG engine (when the engine takes it) iff the draw is
/// below the hardware share. The two nvJPEG backends round differently, so
/// deciding this from the sample alone keeps an epoch's pixels independent
/// of batch composition, resumption and history (DESIGN.md, Planner).
pub(crate) fn hardware_draw(seed: u64, epoch: u64, index: u64) -> f64 {
    // A stream number no view uses (views are 1..). The last word of the
    // seed bytes is the one that depends on all four inputs.
    let bytes = crate::sampler::seed_bytes(seed, epoch, index, u64::MAX);
    let word = u64::from_le_bytes(bytes[24..].try_into().expect("8 bytes"));
    (word >> 11) as f64 / (1u64 << 53) as f64
}

/// The hardware engine's share of the images it supports (issue 16, item
/// 3): fixed (`PipelineBuilder::hardware_decode_share`), or steered by the
/// batch thread from what each route costs, measured as it runs
/// (`hardware_decode_share_auto`).
///
/// Workers read the share when they parse an image and decide its route
/// there, once ([`Share::route`]); the decision travels with the sample,
/// so the stage never decides it again with a share that has moved since.
#[derive(Debug)]
pub(crate) struct Share {
    bits: AtomicU32,
    /// The engine lanes' calls (`cuda::lanes::counted`): the automatic
    /// share's measure of the engine, and `Stats::engine_busy`.
    engine: Arc<crate::cuda::lanes::Busy>,
    /// The scan kernels' lanes' calls: the automatic share's measure of
    /// the CUDA share where those kernels decode it, and
    /// `Stats::progressive_busy`.
    kernels: Arc<crate::cuda::lanes::Busy>,
    auto: Option<Auto>,
}

/// What the automatic share measures, and its estimates.
#[derive(Debug, Default)]
struct Auto {
    workers: f64,
    /// Worker nanoseconds: in all tasks, and in the CUDA host phases of
    /// engine-supported images.
    task_ns: AtomicU64,
    host_ns: AtomicU64,
    tasks: AtomicU64,
    /// Engine-supported images, and those of them begun on a worker.
    eligible: AtomicU64,
    hosted: AtomicU64,
    est: Mutex<Estimates>,
}

/// The smoothed costs, and when the window they were last folded from
/// ended (`None` before the first: the pipeline's start-up is no pace).
#[derive(Debug, Default)]
struct Estimates {
    costs: Costs,
    since: Option<Instant>,
}

/// Seconds per image, smoothed: the engine's (busy time per image it
/// took), a worker's CUDA host phase per engine-supported image, and a
/// worker's other work per task; the engine-supported share of tasks; and
/// the pace, wall seconds per task, at which tasks were done. Where the
/// scan kernels decode the CUDA share (`sequential_kernels`), their lanes'
/// busy time per image they took, and the images per task they took that
/// the engine does not support (progressive files, with
/// `progressive_kernels`).
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(crate) struct Costs {
    pub(crate) engine: Option<f64>,
    pub(crate) host: Option<f64>,
    pub(crate) other: Option<f64>,
    pub(crate) eligible: Option<f64>,
    pub(crate) pace: Option<f64>,
    pub(crate) kernels: Option<f64>,
    pub(crate) kernel_other: Option<f64>,
}

/// Before both routes have been measured, the automatic share stays this
/// far from 0 and 1, so that each route decodes some images.
pub(crate) const EXPLORE: f64 = 1.0 / 16.0;

/// Once both routes are measured, the balance stays at most `1 − PROBE`:
/// the CUDA route's host phase is measured only on images it takes, and
/// at a balance of 1 an estimate made once (on an H200, 2026-11-26, from
/// the first batch's host phases, 1.2 s each while decoders were made)
/// would never be corrected. The lean to the engine for a slow trainer
/// may still reach 1.
pub(crate) const PROBE: f64 = 1.0 / 64.0;

/// The engine's busy fraction the share leans to when something else sets
/// the pace ([`Costs::share`]): room for bursts, as at an epoch's start.
pub(crate) const ENGINE_HEADROOM: f64 = 0.8;

impl Costs {
    /// The share that balances the two routes: the engine, at `engine`
    /// seconds per image, takes `s` of the `e` engine-supported images
    /// per task, while `workers` threads run every task's other work and
    /// the CUDA host phase of the rest:
    ///
    /// ```text
    /// s · e · engine = (other + (1 − s) · e · host) / workers
    /// s = (other + e · host) / (e · (workers · engine + host))
    /// ```
    ///
    /// clamped to `[0, 1 − PROBE]` (to `[EXPLORE, 1 − EXPLORE]` while a
    /// route is unmeasured). `None` while it cannot be said (nothing
    /// measured, no engine-supported images).
    ///
    /// Where the scan kernels' lanes decode the CUDA share (their cost
    /// measured), they are that side instead of the workers, whose work
    /// then hardly depends on the share: the engine takes `x = s · e` of
    /// the images per task, the kernels the rest of the supported ones
    /// and `kernel_other` more, and both are busy alike when
    ///
    /// ```text
    /// x · engine = (kernel_other + e − x) · kernels
    /// s = (kernel_other + e) · kernels / (e · (engine + kernels))
    /// ```
    pub(crate) fn balance(&self, workers: f64) -> Option<f64> {
        let (other, e) = (self.other?, self.eligible?);
        // The CUDA share's measure: the kernels' where there is one.
        let cuda = self.kernels.or(self.host);
        let (lo, hi) = match (self.engine, cuda) {
            (Some(_), Some(_)) => (0.0, 1.0 - PROBE),
            _ => (EXPLORE, 1.0 - EXPLORE),
        };
        let s = match (self.engine, self.kernels, self.host) {
            (Some(engine), Some(kernels), _) => {
                let den = e * (engine + kernels);
                if e <= 0.0 || den <= 0.0 {
                    return None;
                }
                (self.kernel_other.unwrap_or(0.0) + e) * kernels / den
            }
            (Some(engine), None, Some(host)) => {
                let den = e * (workers * engine + host);
                if e <= 0.0 || den <= 0.0 {
                    return None;
                }
                (other + e * host) / den
            }
            // One side unmeasured: go toward it, to measure it.
            (Some(_), None, None) => 0.0,
            (None, _, _) if cuda.is_some() => 1.0,
            (None, _, _) => return None,
        };
        Some(s.clamp(lo, hi))
    }

    /// The share to set: the [`balance`](Self::balance), or more when the
    /// pipeline is not the bottleneck. When the trainer (or anything but
    /// the two routes) sets the pace, tasks come in slower than either
    /// route could take them, and the engine alone can keep up at the
    /// share where it is busy `ENGINE_HEADROOM` of the time:
    ///
    /// ```text
    /// s · e · engine = ENGINE_HEADROOM · pace
    /// ```
    ///
    /// Every image moved from CUDA to the engine saves a worker's host
    /// phase (about 1 CPU-ms on an H100; issue 16, item 4), so the share
    /// is the larger of the two, at most 1. When the routes set the pace,
    /// the engine is busy all of it at the balance and the lean is
    /// `ENGINE_HEADROOM` times the balance, below it; a share above the
    /// balance that the engine cannot keep up with makes the pace the
    /// engine's, and each move then takes the share down by that factor
    /// until the balance holds again. Only once both routes are measured.
    pub(crate) fn share(&self, workers: f64) -> Option<f64> {
        let b = self.balance(workers)?;
        let cuda = self.kernels.or(self.host);
        let lean = match (self.pace, self.engine, cuda, self.eligible) {
            (Some(pace), Some(engine), Some(_), Some(e)) if engine > 0.0 && e > 0.0 => {
                ENGINE_HEADROOM * pace / (e * engine)
            }
            _ => return Some(b),
        };
        Some(b.max(lean.min(1.0)))
    }

    /// Fold one window's measures in (halving the old estimates' weight).
    /// The pace is the last window's alone: a trainer's pause (an
    /// evaluation between epochs) makes one window's pace huge, and a
    /// smoothed pace would keep the share leaning to the engine for many
    /// moves after the pipeline is the bottleneck again.
    fn fold(&mut self, now: Costs) {
        let mix = |old: Option<f64>, new: Option<f64>| match (old, new) {
            (Some(o), Some(n)) => Some(0.5 * o + 0.5 * n),
            (o, n) => n.or(o),
        };
        *self = Costs {
            engine: mix(self.engine, now.engine),
            host: mix(self.host, now.host),
            other: mix(self.other, now.other),
            eligible: mix(self.eligible, now.eligible),
            pace: now.pace.or(self.pace),
            kernels: mix(self.kernels, now.kernels),
            kernel_other: mix(self.kernel_other, now.kernel_other),
        };
    }
}

/// `GPUFEED_SHARE_LOG=1`: print each move of the automatic share.
fn log() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("GPUFEED_SHARE_LOG").is_ok_and(|v| v == "1"))
}

/// Tasks a window needs before the automatic share moves: fewer measure
/// noise.
const WINDOW_TASKS: u64 = 64;

impl Share {
    pub(crate) fn fixed(share: f32) -> Share {
        Share {
            bits: AtomicU32::new(share.to_bits()),
            engine: Arc::default(),
            kernels: Arc::default(),
            auto: None,
        }
    }

    /// A share steered from measured costs, starting at `start`, for
    /// `workers` worker threads; the engine lanes' calls go into the
    /// returned share's [`engine_busy`](Self::engine_busy).
    pub(crate) fn auto(start: f32, workers: usize) -> Share {
        Share {
            bits: AtomicU32::new(start.to_bits()),
            engine: Arc::default(),
            kernels: Arc::default(),
            auto: Some(Auto {
                workers: workers.max(1) as f64,
                ..Auto::default()
            }),
        }
    }

    pub(crate) fn get(&self) -> f32 {
        f32::from_bits(self.bits.load(Relaxed))
    }

    /// Whether any image may go to the engine: a steered share, or a
    /// fixed one above 0.
    pub(crate) fn may_engine(&self) -> bool {
        self.auto.is_some() || self.get() > 0.0
    }

    /// Where the engine lanes count their calls.
    pub(crate) fn engine_busy(&self) -> Arc<crate::cuda::lanes::Busy> {
        self.engine.clone()
    }

    /// Where the scan kernels' lanes count their calls.
    pub(crate) fn kernel_busy(&self) -> Arc<crate::cuda::lanes::Busy> {
        self.kernels.clone()
    }

    /// The route of one image, decided once, on the worker that parsed it
    /// (or by the decode benchmark): the engine iff the pipeline has one,
    /// the header allows it ([`hardware_takes`]) and the sample's draw
    /// ([`hardware_draw`]) is below the share now.
    pub(crate) fn route(&self, engine: bool, engine_ok: bool, draw: f64) -> bool {
        engine && engine_ok && draw < f64::from(self.get())
    }

    /// One worker task: its time, whether the engine supported its image
    /// and, if the worker ran that image's CUDA host phase, its time.
    pub(crate) fn task(&self, took: Duration, eligible: bool, host: Option<Duration>) {
        let Some(a) = &self.auto else { return };
        a.task_ns.fetch_add(took.as_nanos() as u64, Relaxed);
        a.tasks.fetch_add(1, Relaxed);
        if eligible {
            a.eligible.fetch_add(1, Relaxed);
            if let Some(h) = host {
                a.host_ns.fetch_add(h.as_nanos() as u64, Relaxed);
                a.hosted.fetch_add(1, Relaxed);
            }
        }
    }

    /// Move the share to [`Costs::share`] of what was measured since the
    /// last move, once enough tasks came in (the batch thread, once a
    /// batch). Returns the estimates when it moved; with
    /// `GPUFEED_SHARE_LOG=1` each move is printed, for tuning on a GPU box.
    pub(crate) fn steer(&self) -> Option<(f32, Costs)> {
        self.steer_at(Instant::now())
    }

    /// [`steer`](Self::steer), with the window ending at `now`.
    fn steer_at(&self, now: Instant) -> Option<(f32, Costs)> {
        let a = self.auto.as_ref()?;
        if a.tasks.load(Relaxed) < WINDOW_TASKS {
            return None;
        }
        let tasks = a.tasks.swap(0, Relaxed);
        let task_s = a.task_ns.swap(0, Relaxed) as f64 * 1e-9;
        let host_s = a.host_ns.swap(0, Relaxed) as f64 * 1e-9;
        let hosted = a.hosted.swap(0, Relaxed);
        let eligible = a.eligible.swap(0, Relaxed);
        let (busy, taken) = self.engine.take();
        let (kernel_busy, kernel_took) = self.kernels.take();
        let per = |s: f64, n: u64| (n > 0).then(|| s / n as f64);
        // What the kernels took beyond the supported images the engine did
        // not (the windows' edges do not line up exactly: never below 0).
        let beyond = kernel_took.saturating_sub(eligible.saturating_sub(taken));
        let mut est = a.est.lock().unwrap_or_else(|p| p.into_inner());
        let wall = est.since.replace(now).map(|t| now.duration_since(t));
        let window = Costs {
            engine: per(busy.as_secs_f64(), taken),
            host: per(host_s, hosted),
            other: per(task_s - host_s, tasks).map(|o| o.max(0.0)),
            eligible: Some(eligible as f64 / tasks as f64),
            pace: wall.and_then(|w| per(w.as_secs_f64(), tasks)),
            kernels: per(kernel_busy.as_secs_f64(), kernel_took),
            kernel_other: (kernel_took > 0).then(|| beyond as f64 / tasks as f64),
        };
        let est = &mut est.costs;
        est.fold(window);
        let s = est.share(a.workers)? as f32;
        self.bits.store(s.to_bits(), Relaxed);
        if log() {
            let ms = |v: Option<f64>| v.map_or("?".into(), |v| format!("{:.3}", v * 1e3));
            eprintln!(
                "gpufeed: engine share {s:.3} (ms per image: engine {}, host phase {}, scan \
                 kernels {}, other work {}, pace {}; engine-supported {})",
                ms(est.engine),
                ms(est.host),
                ms(est.kernels),
                ms(est.other),
                ms(est.pace),
                est.eligible.map_or("?".into(), |e| format!("{e:.2}")),
            );
        }
        Some((s, *est))
    }
}

#[cfg(test)]
mod tests {
    use super::{Costs, ENGINE_HEADROOM, EXPLORE, PROBE, Share, hardware_draw};
    use std::time::{Duration, Instant};

    /// Costs of a two-route machine: per image, the engine's seconds, a
    /// worker's CUDA host phase, a worker's other work.
    fn costs(engine: f64, host: f64, other: f64) -> Costs {
        Costs {
            engine: Some(engine),
            host: Some(host),
            other: Some(other),
            eligible: Some(1.0),
            ..Costs::default()
        }
    }

    #[test]
    fn the_balance_evens_the_routes_out() {
        // 16 workers; the engine at 10,000 img/s; a host phase of 1 ms
        // (16,000 img/s on 16 workers) and 0.2 ms of other work.
        let c = costs(1e-4, 1e-3, 2e-4);
        let s = c.balance(16.0).unwrap();
        // Both sides take the same time per task at the balance.
        let engine = s * 1e-4;
        let workers = (2e-4 + (1.0 - s) * 1e-3) / 16.0;
        assert!((engine - workers).abs() < 1e-12, "{engine} vs {workers}");
        assert!(s > 0.4 && s < 0.5, "{s}");
        // A slow engine gets less; workers busy elsewhere send it more.
        assert!(costs(4e-4, 1e-3, 2e-4).balance(16.0).unwrap() < s);
        assert!(costs(1e-4, 1e-3, 2e-3).balance(16.0).unwrap() > s);
        // Clamped: a free engine takes all but the probe, a hopeless one
        // nothing.
        assert_eq!(costs(1e-9, 1e-3, 1e-4).balance(16.0), Some(1.0 - PROBE));
        assert_eq!(
            costs(1.0, 1e-6, 0.0).balance(16.0).map(|s| s < 1e-3),
            Some(true)
        );
    }

    #[test]
    fn with_the_scan_kernels_their_busy_time_is_the_other_side() {
        // The engine at 10,000 img/s, the kernels at 40,000; 95 % of the
        // images supported by the engine, the other 5 % (progressive) on
        // the kernels whatever the share.
        let c = Costs {
            kernels: Some(2.5e-5),
            kernel_other: Some(0.05),
            eligible: Some(0.95),
            ..costs(1e-4, 1e-3, 2e-4)
        };
        let s = c.balance(16.0).unwrap();
        // Both busy alike: the engine's images against the kernels'.
        let x = s * 0.95;
        let (engine, kernels) = (x * 1e-4, (0.05 + 0.95 - x) * 2.5e-5);
        assert!((engine - kernels).abs() < 1e-12, "{engine} vs {kernels}");
        assert!((x - 0.2).abs() < 1e-12, "{x}");
        // The workers' host phases no longer decide it, and a slower
        // engine gets less.
        assert_eq!(
            Costs {
                host: Some(1.0),
                ..c
            }
            .balance(16.0),
            Some(s)
        );
        assert_eq!(Costs { host: None, ..c }.balance(16.0), Some(s));
        assert!(
            Costs {
                engine: Some(2e-4),
                ..c
            }
            .balance(16.0)
            .unwrap()
                < s
        );
        // Measured on one side only: explore the other.
        let k = Costs {
            engine: None,
            host: None,
            ..c
        };
        assert_eq!(k.balance(16.0), Some(1.0 - EXPLORE));
        let e = Costs {
            kernels: None,
            host: None,
            ..c
        };
        assert_eq!(e.balance(16.0), Some(EXPLORE));
        // A slow trainer leans to the engine as with the host phases.
        let slow = Costs {
            pace: Some(1e-3),
            ..c
        };
        assert_eq!(slow.share(16.0), Some(1.0));
    }

    #[test]
    fn a_slow_trainer_moves_the_share_to_the_engine() {
        // The machine of the test above: balance between 0.4 and 0.5.
        let c = costs(1e-4, 1e-3, 2e-4);
        let b = c.balance(16.0).unwrap();
        // The routes set the pace: the engine is busy all of it at the
        // balance, so the lean is below the balance and changes nothing.
        let at = |pace| {
            Costs {
                pace: Some(pace),
                ..c
            }
            .share(16.0)
            .unwrap()
        };
        assert_eq!(at(b * 1e-4), b);
        // A trainer at twice that pace: the engine alone keeps up with
        // more, to where it is busy ENGINE_HEADROOM of the time.
        let s = at(2.0 * b * 1e-4);
        assert!((s - ENGINE_HEADROOM * 2.0 * b).abs() < 1e-12, "{s} vs {b}");
        assert!(s > b);
        // A slow trainer: everything the engine supports goes to it.
        assert_eq!(at(1e-3), 1.0);
        // With a share above what the engine keeps up with, the pace is
        // the engine's and the lean goes down by the headroom per move.
        let over = 0.9 * 1e-4;
        assert!((at(over) - ENGINE_HEADROOM * 0.9).abs() < 1e-12);
        // After a pause (a window at a slow pace), the next window's pace
        // alone counts: back to the balance at once.
        let mut est = Costs {
            pace: Some(1.0),
            ..c
        };
        assert_eq!(est.share(16.0), Some(1.0));
        est.fold(Costs {
            pace: Some(b * 1e-4),
            ..c
        });
        assert_eq!(est.share(16.0), Some(b));
        // No lean while a route is unmeasured: exploring comes first.
        let unmeasured = Costs {
            host: None,
            pace: Some(1.0),
            ..c
        };
        assert_eq!(unmeasured.share(16.0), Some(EXPLORE));
    }

    #[test]
    fn an_unmeasured_route_is_explored_not_abandoned() {
        let mut c = costs(1e-4, 1e-3, 0.0);
        c.host = None;
        assert_eq!(c.balance(16.0), Some(EXPLORE));
        c.host = Some(1e-3);
        c.engine = None;
        assert_eq!(c.balance(16.0), Some(1.0 - EXPLORE));
        c.engine = Some(1e-9);
        c.eligible = Some(0.0);
        assert_eq!(c.balance(16.0), None);
        assert_eq!(Costs::default().balance(16.0), None);
    }

    #[test]
    fn a_steered_share_follows_its_measures() {
        let share = Share::auto(1.0, 4);
        assert_eq!(share.steer(), None, "nothing measured");
        // 64 tasks: each 1 ms on a worker, of which 0.8 ms a host phase
        // for the 32 that took CUDA; the engine busy 1.6 ms for 32.
        let busy = share.engine_busy();
        busy.enter(32);
        std::thread::sleep(Duration::from_millis(2));
        busy.exit();
        for k in 0..64 {
            let host = (k % 2 == 0).then_some(Duration::from_micros(800));
            share.task(Duration::from_millis(1), true, host);
        }
        let (s, c) = share.steer().unwrap();
        assert_eq!(s, share.get());
        let want = c.balance(4.0).unwrap() as f32;
        assert_eq!(s, want);
        assert!(c.engine.unwrap() >= 2e-3 / 32.0);
        assert!((c.host.unwrap() - 8e-4).abs() < 1e-9);
        // Other work: 64 ms of tasks less 25.6 ms of host phases.
        assert!((c.other.unwrap() - (64e-3 - 25.6e-3) / 64.0).abs() < 1e-9);
        assert_eq!(c.eligible, Some(1.0));
        // The window restarts empty.
        assert_eq!(share.steer(), None);
        // The next window knows its pace: 64 tasks in 6.4 s, far slower
        // than the engine's 0.06 ms or so per image, so it takes them all.
        for k in 0..64 {
            let host = (k % 2 == 0).then_some(Duration::from_micros(800));
            share.task(Duration::from_millis(1), true, host);
        }
        let later = Instant::now() + Duration::from_millis(6_400);
        let (s, c) = share.steer_at(later).unwrap();
        assert!(c.pace.unwrap() >= 0.1, "{c:?}");
        assert_eq!(s, 1.0, "{c:?}");
        // A pause is forgotten at the next window: 64 tasks in 6.4 ms.
        for k in 0..64 {
            let host = (k % 2 == 0).then_some(Duration::from_micros(800));
            share.task(Duration::from_millis(1), true, host);
        }
        let (s, c) = share
            .steer_at(later + Duration::from_micros(6_400))
            .unwrap();
        assert!((c.pace.unwrap() - 1e-4).abs() < 1e-9, "{c:?}");
        assert_eq!(s, share.get());
        // A fixed share never moves and routes by the draw.
        let fixed = Share::fixed(0.25);
        fixed.task(Duration::from_millis(1), true, None);
        assert_eq!(fixed.steer(), None);
        assert!(fixed.route(true, true, 0.2));
        assert!(!fixed.route(true, true, 0.3));
        assert!(!fixed.route(false, true, 0.2));
        assert!(!fixed.route(true, false, 0.2));
    }

    #[test]
    fn a_steered_share_measures_the_kernel_lanes() {
        let share = Share::auto(1.0, 4);
        // 64 supported images: 32 at the engine (busy 2 ms), 32 at the
        // kernels (busy 6 ms), no host phase on a worker.
        let (engine, kernels) = (share.engine_busy(), share.kernel_busy());
        engine.enter(32);
        std::thread::sleep(Duration::from_millis(2));
        engine.exit();
        kernels.enter(32);
        std::thread::sleep(Duration::from_millis(6));
        kernels.exit();
        for _ in 0..64 {
            share.task(Duration::from_micros(50), true, None);
        }
        let (s, c) = share.steer().unwrap();
        assert!(c.kernels.unwrap() >= 6e-3 / 32.0, "{c:?}");
        assert_eq!(c.kernel_other, Some(0.0), "all the kernels' were supported");
        assert_eq!(c.host, None);
        assert_eq!(s, c.balance(4.0).unwrap() as f32);
        assert!(s > 0.0 && s < 1.0, "{c:?}");
    }

    #[test]
    fn hardware_draws_are_pure_and_uniform() {
        let draws: Vec<f64> = (0..20_000).map(|i| hardware_draw(42, 3, i)).collect();
        assert!(draws.iter().all(|d| (0.0..1.0).contains(d)));
        assert_eq!(hardware_draw(42, 3, 17), draws[17]);
        assert_ne!(hardware_draw(42, 4, 17), draws[17]);
        assert_ne!(hardware_draw(43, 3, 17), draws[17]);
        for share in [0.25, 0.65] {
            let taken = draws.iter().filter(|&&d| d < share).count() as f64 / 20_000.0;
            assert!((taken - share).abs() < 0.02, "share {share}: {taken}");
        }
    }
}
