//! The decode benchmark (`gpufeed decode-bench`, issue 5): the device
//! stage's nvJPEG routes alone, on batches of JPEGs already in memory.

use crate::error::{Error, Result};

/// nvJPEG decoding alone (issue 5): batches of JPEGs already in host
/// memory decoded by the pipeline's routes (hardware engine for its share,
/// CUDA for the rest, the CPU for what both refuse) into a device arena and
/// waited for; the caller times [`DecodeBench::run_batch`] and reads the
/// process's CPU time around it. As in the pipeline, the CUDA route's host
/// phases run on `threads` threads (the pipeline's workers) and its device
/// phases on the calling thread (the batch thread).
pub struct DecodeBench {
    engine: super::cuda::CudaEngine,
    arena: super::cuda::CudaArena,
    route: super::cuda::NvRoute,
    /// Compressed bytes, width and height of each distinct image, whether
    /// the engine supports it, and its coding process.
    jpegs: Vec<Image>,
    batch: usize,
    next: usize,
    counts: super::cuda::RouteCounts,
    threads: usize,
    pool: std::sync::Arc<crate::decode::nvjpeg::DecoderPool>,
    share: crate::decode::nvjpeg::Share,
    /// Engine calls per batch, each on a lane of its own, in flight at once.
    engine_calls: usize,
    /// Which files gpufeed's scan kernels take
    /// ([`with_kernels`](Self::with_kernels),
    /// [`sequential_kernels_max_pixels`](Self::sequential_kernels_max_pixels)).
    kernels: super::handoff::KernelRule,
    /// Wall time of the calling thread in each part of
    /// [`run_batch`](Self::run_batch), summed ([`PHASES`] names them).
    phases: [std::time::Duration; 5],
}

/// The parts of a benchmark batch on the calling thread, in order: the
/// engine's and the scan kernels' submissions; the CUDA route's host
/// phases on the threads (waited for as a whole); their device phases
/// queued; the engine's and the kernels' replies waited for; what is left
/// decoded and the device waited for. Where a batch's time goes, as the
/// pipeline (which overlaps them across batches) cannot show: decode-bench
/// with 6 in flight ran half the pipeline's rate on an H200 (0de8cfd),
/// unexplained.
pub const PHASES: [&str; 5] = ["submit", "host phases", "device phases", "replies", "rest"];

/// A benchmark image: its bytes, width, height, whether the engine takes
/// it, and its coding process.
type Image = (
    crate::reader::PooledBytes,
    u32,
    u32,
    bool,
    crate::jpeg::SofKind,
);

impl std::fmt::Debug for DecodeBench {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecodeBench")
            .field("batch", &self.batch)
            .field("images", &self.jpegs.len())
            .finish_non_exhaustive()
    }
}

/// A job of a benchmark batch and its position in the batch.
type Job = (usize, super::cuda::JpegJob);

impl DecodeBench {
    /// Keep the nvJPEG-routable files of `files` (the pipeline's rule) in
    /// host memory and set up device `index` to decode `batch` of them at a
    /// time, `hardware_share` of the engine-supported ones on the engine
    /// (`None`: the pipeline's automatic share, starting at 1), the CUDA
    /// route's host phases on `threads` threads (0: all on the calling
    /// thread). The engine's share of a batch goes out as `engine_calls`
    /// calls of about equal size, each to a lane (stream and engine state)
    /// of its own, all in flight at once: whether several calls raise the
    /// engine's rate (issue 16, item 2). With `engine_context` the lanes
    /// run in a CUDA context of their own (the pipeline's hidden
    /// `engine_context`).
    pub fn new(
        index: usize,
        files: &[Vec<u8>],
        batch: usize,
        hardware_share: Option<f32>,
        threads: usize,
        engine_calls: usize,
        engine_context: bool,
    ) -> Result<DecodeBench> {
        let mut jpegs = Vec::new();
        for bytes in files {
            let Ok(h) = crate::jpeg::parse_header(bytes, crate::jpeg::DEFAULT_MAX_PIXELS) else {
                continue;
            };
            if crate::decode::nvjpeg::gpu_routable(&h, false) {
                let engine_ok = crate::decode::nvjpeg::hardware_takes(&h);
                jpegs.push((bytes.clone(), h.width, h.height, engine_ok, h.sof));
            }
        }
        if jpegs.is_empty() || batch == 0 || engine_calls == 0 {
            return Err(Error::Config(
                "the decode benchmark needs nvJPEG-routable JPEGs, a batch and an engine call"
                    .into(),
            ));
        }
        // A batch never holds one image twice: its bytes move into the
        // batch while the device reads them.
        let distinct = jpegs.len();
        while jpegs.len() < batch {
            jpegs.extend_from_within(..distinct);
        }
        let jpegs: Vec<Image> = jpegs
            .into_iter()
            .map(|(b, w, h, ok, sof)| (b.into(), w, h, ok, sof))
            .collect();
        // Arena room for the `batch` largest images, so any batch fits.
        let mut sizes: Vec<usize> = jpegs
            .iter()
            .map(|j| (j.1 as usize * j.2 as usize * 3).next_multiple_of(256))
            .collect();
        sizes.sort_unstable_by(|a, b| b.cmp(a));
        let arena: usize = sizes.iter().cycle().take(batch).sum();
        let engine = super::cuda::CudaEngine::new(index, Default::default())?;
        let arena = engine.alloc_arena(arena)?;
        let cpu = crate::decode::CpuDecoder::new(false);
        let share = match hardware_share {
            Some(s) => crate::decode::nvjpeg::Share::fixed(s),
            None => crate::decode::nvjpeg::Share::auto(1.0, threads),
        };
        // One batch at a time: a lane per engine call.
        // Counted, not bounded: the benchmark measures the routes' speed.
        let ledger = std::sync::Arc::new(crate::decode::nvjpeg::Ledger::new(u64::MAX));
        let busy = share.engine_busy();
        let call = batch.div_ceil(engine_calls);
        let lanes = super::cuda::EngineLanes {
            count: engine_calls,
            own_context: engine_context,
        };
        let route = super::cuda::NvRoute::new(&engine, call, lanes, cpu, None, &ledger, busy)?;
        let waited = std::sync::Arc::default();
        let pool =
            crate::decode::nvjpeg::decoder_pool(engine.context(), batch + 1, &ledger, &waited)?;
        Ok(DecodeBench {
            threads,
            pool,
            engine,
            arena,
            route,
            jpegs,
            batch,
            next: 0,
            counts: Default::default(),
            share,
            engine_calls,
            kernels: super::handoff::KernelRule::OFF,
            phases: Default::default(),
        })
    }

    /// Decode progressive files and/or the CUDA share's sequential ones
    /// with gpufeed's scan kernels at lanes of their own, as the
    /// pipeline's `progressive_kernels` and `sequential_kernels` do (the
    /// lanes plan each file, as `GPUFEED_PLAN_ON_WORKERS=0` has them do
    /// in a pipeline): the kernel routes' decode-only rate (issue 16).
    /// Where the kernels cannot be made, this says why on stderr and
    /// nvJPEG decodes those files, as in a pipeline.
    pub fn with_kernels(mut self, progressive: bool, sequential: bool) -> DecodeBench {
        if !(progressive || sequential) {
            return self;
        }
        let busy = self.share.kernel_busy();
        let ledgers = super::routes::Ledgers::new(u64::MAX, u64::MAX, busy);
        // One batch at a time.
        let kinds = super::KernelLanes::new(progressive, sequential, 1);
        self.route
            .add_progressive(&self.engine, &ledgers, None, kinds);
        if self.route.has_progressive() {
            (self.kernels.progressive, self.kernels.sequential) = (progressive, sequential);
        }
        self
    }

    /// Sequential images of more than `pixels` pixels skip the sequential
    /// kernels, as the pipeline's `sequential_kernels_max_pixels`: to the
    /// engine where it takes them, whatever the share, else nvJPEG's CUDA
    /// route. Default: no limit. Set it before
    /// [`with_kernels`](Self::with_kernels) or after, either way.
    pub fn sequential_kernels_max_pixels(mut self, pixels: u64) -> DecodeBench {
        self.kernels.max_pixels = pixels;
        self
    }

    /// Device name, and whether the hardware JPEG engine is used.
    pub fn describe(&self) -> String {
        let hw = if self.route.has_hardware() {
            "hardware engine + CUDA"
        } else {
            "CUDA (no hardware engine)"
        };
        format!("{}, nvJPEG {hw}", self.engine.describe())
    }

    /// The engine's share now (it moves when automatic).
    pub fn share(&self) -> f32 {
        self.share.get()
    }

    /// Decode the next `batch` images (cycling) and wait for the device.
    /// Returns the pixels decoded; an image that fails everywhere is an
    /// error naming its position.
    ///
    /// As in the pipeline, the engine's share goes to its lane first and
    /// decodes while the threads run the CUDA route's host phases (issue
    /// 16, item 3: the two routes run at once from the start of a batch);
    /// the device phases are queued as the host phases finish.
    pub fn run_batch(&mut self) -> Result<u64> {
        let mut lap = std::time::Instant::now();
        let mut laps = [std::time::Duration::ZERO; 5];
        let mut mark = |k: usize| {
            let now = std::time::Instant::now();
            laps[k] += now - lap;
            lap = now;
        };
        let n = self.jpegs.len();
        let engine = self.route.has_hardware();
        let mut to_engine = Vec::new();
        let mut to_kernels = Vec::new();
        let mut to_cuda = Vec::new();
        let mut at = 0;
        let mut pixels = 0;
        for k in 0..self.batch {
            let i = (self.next + k) % n;
            let (bytes, w, h, engine_ok, sof) = &mut self.jpegs[i];
            let (w, h, engine_ok, sof) = (*w, *h, *engine_ok, *sof);
            let area = u64::from(w) * u64::from(h);
            pixels += area;
            // A fixed draw per distinct image, as the pipeline's, and the
            // pipeline's rule (`WorkerDecode::route`).
            let draw = crate::decode::nvjpeg::hardware_draw(0, 0, i as u64);
            let engine_takes = self.share.route(engine, engine_ok, draw)
                || (engine && engine_ok && self.kernels.too_large(sof, area));
            let kernels = self.kernels.takes(sof, engine_takes, area);
            let job = super::cuda::JpegJob {
                bytes: std::mem::take(bytes),
                width: w,
                height: h,
                at,
                roi: None,
                to_engine: engine_takes,
                // Whole images: no window to pad.
                mcu: (16, 16),
                kernels,
                // The lane plans: decode-bench times the decode as a
                // whole.
                plan: None,
                progressive: sof == crate::jpeg::SofKind::Progressive,
            };
            at += (w as usize * h as usize * 3).next_multiple_of(256);
            if job.to_engine {
                // Its worker cost in a pipeline: a parse, not counted here.
                self.share.task(std::time::Duration::ZERO, true, None);
                to_engine.push((k, job));
            } else if job.kernels {
                // As above: the kernels' cost is their lanes' busy time.
                self.share.task(std::time::Duration::ZERO, engine_ok, None);
                to_kernels.push((k, job));
            } else {
                to_cuda.push((k, job));
            }
        }
        let first = self.next;
        self.next = (self.next + self.batch) % n;
        // The engine's share in `engine_calls` parts; the lanes take
        // submissions in turn, so each part has a lane to itself.
        let per_call = to_engine.len().div_ceil(self.engine_calls).max(1);
        let mut subs = Vec::new();
        let mut to_engine = to_engine.into_iter().peekable();
        while to_engine.peek().is_some() {
            let (ks, jobs): (Vec<usize>, Vec<_>) = to_engine.by_ref().take(per_call).unzip();
            let sub =
                self.engine
                    .submit_jpegs(&self.arena, jobs, &mut self.route, &mut self.counts)?;
            subs.push((ks, sub));
        }
        // The scan kernels' files, at their lanes (`NvRoute::submit_jpegs`
        // sends them there, by kind).
        if !to_kernels.is_empty() {
            let (ks, jobs): (Vec<usize>, Vec<_>) = to_kernels.into_iter().unzip();
            let sub =
                self.engine
                    .submit_jpegs(&self.arena, jobs, &mut self.route, &mut self.counts)?;
            subs.push((ks, sub));
        }
        mark(0);
        // The CUDA route's host phases on the threads (the pipeline's
        // workers), their device phases here; what fails goes through
        // `decode_jpegs` as on the batch thread.
        let staged = if self.threads > 0 {
            self.host_phases(&to_cuda)
        } else {
            Vec::new()
        };
        mark(1);
        let mut leases: Vec<Option<crate::decode::nvjpeg::Lease>> =
            (0..to_cuda.len()).map(|_| None).collect();
        for (slot, lease, took) in staged {
            let eligible = self.jpegs[(first + to_cuda[slot].0) % n].3;
            let host = lease.as_ref().map(|_| took);
            self.share.task(took, eligible, host);
            leases[slot] = lease;
        }
        let mut rest = Vec::new();
        let mut rest_ks = Vec::new();
        for ((k, mut j), lease) in to_cuda.into_iter().zip(leases) {
            if let Some(lease) = lease {
                let size = (j.width, j.height);
                self.engine
                    .decode_staged(&self.arena, j.at, size, None, lease)?;
                self.counts.cuda += 1;
                // nvJPEG copied what it needs in the host phase.
                self.jpegs[(first + k) % n].0 = std::mem::take(&mut j.bytes);
            } else {
                rest.push(j);
                rest_ks.push(k);
            }
        }
        mark(2);
        let mut outcomes = Vec::new();
        for (ks, sub) in subs {
            let (out, back) = self.engine.complete_jpegs(
                &mut self.arena,
                sub,
                &mut self.route,
                &mut self.counts,
            )?;
            outcomes.extend(ks.into_iter().zip(out.into_iter().zip(back)));
        }
        mark(3);
        // Ends with a wait for the device: every route's writes are done.
        let (out, back) =
            self.engine
                .decode_jpegs(&mut self.arena, rest, &mut self.route, &mut self.counts)?;
        mark(4);
        for (sum, k) in self.phases.iter_mut().zip(laps) {
            *sum += k;
        }
        outcomes.extend(rest_ks.into_iter().zip(out.into_iter().zip(back)));
        let mut failed = None;
        // Give the bytes back to their images for the next round.
        for (k, (outcome, bytes)) in outcomes {
            self.jpegs[(first + k) % n].0 = bytes;
            if outcome.is_err() {
                failed.get_or_insert(k);
            }
        }
        if let Some(k) = failed {
            return Err(Error::Device(format!(
                "image {} of the benchmark set failed on every route",
                (first + k) % n
            )));
        }
        self.share.steer();
        Ok(pixels)
    }

    /// Host phases of `jobs` on `self.threads` threads, each with a
    /// decoder of the pool: per job (its index in `jobs`), its leased
    /// decoder when the phase succeeded, and the time the phase took.
    fn host_phases(
        &self,
        jobs: &[Job],
    ) -> Vec<(
        usize,
        Option<crate::decode::nvjpeg::Lease>,
        std::time::Duration,
    )> {
        if jobs.is_empty() {
            return Vec::new();
        }
        let chunk = jobs.len().div_ceil(self.threads.max(1));
        let pool = &self.pool;
        std::thread::scope(|sc| {
            let handles: Vec<_> = jobs
                .chunks(chunk)
                .enumerate()
                .map(|(c, part)| {
                    sc.spawn(move || {
                        part.iter()
                            .enumerate()
                            .map(|(i, (_, j))| {
                                let t0 = std::time::Instant::now();
                                let lease = pool.take().and_then(|mut l| {
                                    l.host(&j.bytes, (j.width, j.height), None).ok().map(|()| l)
                                });
                                (c * chunk + i, lease, t0.elapsed())
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap_or_default())
                .collect()
        })
    }

    /// The engine's batched-state (re)initializations so far (one per
    /// change of the engine's batch size) and the time they took; its
    /// decode calls and the time the decoding thread spent in them.
    pub fn engine_time(&self) -> [(u64, std::time::Duration); 2] {
        self.route.engine_time()
    }

    /// The calling thread's wall time in each part of the batches so far,
    /// in the order [`PHASES`] names them.
    pub fn phases(&self) -> [std::time::Duration; 5] {
        self.phases
    }

    /// Images decoded per route so far: hardware engine, CUDA, CPU.
    pub fn routes(&self) -> (u64, u64, u64) {
        (self.counts.hardware, self.counts.cuda, self.counts.cpu)
    }

    /// Images the scan kernels decoded so far ([`with_kernels`](Self::with_kernels)).
    pub fn decoded_by_kernels(&self) -> u64 {
        self.counts.progressive
    }
}
