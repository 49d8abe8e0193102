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
    /// Compressed bytes, width and height of each distinct image.
    jpegs: Vec<(Vec<u8>, u32, u32, bool)>,
    batch: usize,
    next: usize,
    counts: super::cuda::RouteCounts,
    threads: usize,
    pool: std::sync::Arc<crate::decode::nvjpeg::DecoderPool>,
}

impl std::fmt::Debug for DecodeBench {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecodeBench")
            .field("batch", &self.batch)
            .field("images", &self.jpegs.len())
            .finish_non_exhaustive()
    }
}

impl DecodeBench {
    /// Keep the nvJPEG-routable files of `files` (the pipeline's rule) in
    /// host memory and set up device `index` to decode `batch` of them at a
    /// time, `hardware_share` of the engine-supported ones on the engine,
    /// the CUDA route's host phases on `threads` threads (0: all on the
    /// calling thread).
    pub fn new(
        index: usize,
        files: &[Vec<u8>],
        batch: usize,
        hardware_share: f32,
        threads: usize,
    ) -> Result<DecodeBench> {
        let mut jpegs = Vec::new();
        for bytes in files {
            let Ok(h) = crate::jpeg::parse_header(bytes, crate::jpeg::DEFAULT_MAX_PIXELS) else {
                continue;
            };
            if crate::decode::nvjpeg::gpu_routable(&h, false) {
                let engine_ok = crate::decode::nvjpeg::hardware_takes(&h);
                jpegs.push((bytes.clone(), h.width, h.height, engine_ok));
            }
        }
        if jpegs.is_empty() || batch == 0 {
            return Err(Error::Config(
                "the decode benchmark needs nvJPEG-routable JPEGs and a batch".into(),
            ));
        }
        // A batch never holds one image twice: its bytes move into the
        // batch while the device reads them.
        let distinct = jpegs.len();
        while jpegs.len() < batch {
            jpegs.extend_from_within(..distinct);
        }
        // Arena room for the `batch` largest images, so any batch fits.
        let mut sizes: Vec<usize> = jpegs
            .iter()
            .map(|j| (j.1 as usize * j.2 as usize * 3).next_multiple_of(256))
            .collect();
        sizes.sort_unstable_by(|a, b| b.cmp(a));
        let arena: usize = sizes.iter().cycle().take(batch).sum();
        let engine = super::cuda::CudaEngine::new(index)?;
        let arena = engine.alloc_arena(arena)?;
        let cpu = crate::decode::CpuDecoder::new(false);
        // One batch at a time: one engine lane.
        // Counted, not bounded: the benchmark measures the routes' speed.
        let ledger = std::sync::Arc::new(crate::decode::nvjpeg::Ledger::new(u64::MAX));
        let route =
            super::cuda::NvRoute::new(&engine, hardware_share, batch, 1, cpu, None, &ledger)?;
        let pool = crate::decode::nvjpeg::decoder_pool(engine.context(), batch + 1, &ledger)?;
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
        })
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

    /// Decode the next `batch` images (cycling) and wait for the device.
    /// Returns the pixels decoded; an image that fails everywhere is an
    /// error naming its position.
    pub fn run_batch(&mut self) -> Result<u64> {
        let n = self.jpegs.len();
        let mut jobs = Vec::with_capacity(self.batch);
        let mut at = 0;
        let mut pixels = 0;
        for k in 0..self.batch {
            let i = (self.next + k) % n;
            let (bytes, w, h, engine_ok) = &mut self.jpegs[i];
            let (w, h, engine_ok) = (*w, *h, *engine_ok);
            pixels += u64::from(w) * u64::from(h);
            jobs.push(super::cuda::JpegJob {
                bytes: std::mem::take(bytes),
                width: w,
                height: h,
                at,
                roi: None,
                // A fixed draw per distinct image, as the pipeline's.
                route_draw: crate::decode::nvjpeg::hardware_draw(0, 0, i as u64),
                engine_ok,
                // Whole images: no window to pad.
                mcu: (16, 16),
            });
            at += (w as usize * h as usize * 3).next_multiple_of(256);
        }
        let first = self.next;
        self.next = (self.next + self.batch) % n;
        // The CUDA route's host phases on the threads (the pipeline's
        // workers), their device phases here; what fails, and the engine's
        // share, through `decode_jpegs` as on the batch thread.
        let share = self.route.share();
        let engine = self.route.has_hardware();
        let for_workers: Vec<usize> = (0..jobs.len())
            .filter(|&k| {
                !crate::decode::nvjpeg::to_engine(
                    engine,
                    jobs[k].engine_ok,
                    jobs[k].route_draw,
                    share,
                )
            })
            .filter(|_| self.threads > 0)
            .collect();
        let staged = self.host_phases(&jobs, &for_workers);
        let mut rest = Vec::with_capacity(jobs.len());
        let mut rest_at = Vec::with_capacity(jobs.len());
        let mut staged = staged.into_iter().peekable();
        for (k, mut j) in jobs.into_iter().enumerate() {
            if staged.peek().is_some_and(|(sk, _)| *sk == k) {
                let (_, lease) = staged.next().expect("peeked");
                if let Some(lease) = lease {
                    let size = (j.width, j.height);
                    self.engine
                        .decode_staged(&self.arena, j.at, size, None, lease)?;
                    self.counts.cuda += 1;
                    // nvJPEG copied what it needs in the host phase.
                    self.jpegs[(first + k) % n].0 = std::mem::take(&mut j.bytes);
                    continue;
                }
            }
            rest.push(j);
            rest_at.push(k);
        }
        let (out, back) =
            self.engine
                .decode_jpegs(&mut self.arena, rest, &mut self.route, &mut self.counts)?;
        // Give the bytes back to their images for the next round.
        for (&k, bytes) in rest_at.iter().zip(back) {
            self.jpegs[(first + k) % n].0 = bytes;
        }
        if let Some(k) = out.iter().position(Result::is_err) {
            return Err(Error::Device(format!(
                "image {} of the benchmark set failed on every route",
                (first + rest_at[k]) % n
            )));
        }
        Ok(pixels)
    }

    /// Host phases of `jobs[ks]` on `self.threads` threads, each with a
    /// decoder of the pool: per job, in order, its leased decoder when the
    /// phase succeeded.
    fn host_phases(
        &self,
        jobs: &[super::cuda::JpegJob],
        ks: &[usize],
    ) -> Vec<(usize, Option<crate::decode::nvjpeg::Lease>)> {
        if ks.is_empty() {
            return Vec::new();
        }
        let chunk = ks.len().div_ceil(self.threads.max(1));
        let pool = &self.pool;
        std::thread::scope(|sc| {
            let handles: Vec<_> = ks
                .chunks(chunk)
                .map(|part| {
                    sc.spawn(move || {
                        part.iter()
                            .map(|&k| {
                                let j = &jobs[k];
                                let pixels = u64::from(j.width) * u64::from(j.height);
                                let lease = pool.take().and_then(|mut l| {
                                    l.host(&j.bytes, pixels, None).ok().map(|()| l)
                                });
                                (k, lease)
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

    /// Images decoded per route so far: hardware engine, CUDA, CPU.
    pub fn routes(&self) -> (u64, u64, u64) {
        (self.counts.hardware, self.counts.cuda, self.counts.cpu)
    }
}
