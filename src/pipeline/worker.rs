//! The threads: readers (bytes only) and CPU workers (parse, decode,
//! augment).
//!
//! ```text
//! tasks ──► reader ×R ──► read ──► worker ×W ──► done ──► Epoch (assembles
//!                 ▲  buffers pool ◄─────┘  ▲ sample pool ◄─┘   batches in order)
//! ```
//!
//! Every task sent produces exactly one `Done`, whatever happens to it,
//! so the epoch can count what is in flight and never waits for a result
//! that will not come. A panic inside a stage becomes a per-sample error.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};

use super::batch::TensorData;
use super::builder::Config;
use super::stats::Counters;
use super::trace::Arg;
use crate::augment::cpu::{OutSpec, Resampler};
use crate::augment::params::{SampleParams, sample_params};
use crate::augment::photo::photo_params;
use crate::decode::{CpuDecoder, Image};
use crate::error::SampleError;
use crate::jpeg::parse_header;
use crate::reader::{BufferPool, PooledBytes, ReadBuf, ReadBytes};
use crate::sizes::Sizes;
use crate::source::Source;
use crate::stage::handoff::{Jpeg, Region, crop_window, shift};

/// State shared by the pipeline, its epochs and its threads.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) source: Source,
    pub(crate) config: Config,
    pub(crate) counters: Counters,
    /// Bumped when an epoch is abandoned: tasks of an older generation are
    /// answered without doing the work.
    pub(crate) generation: AtomicU64,
    /// The reader set by `PipelineBuilder::read_bytes`; `None`: the
    /// default's reads, straight into the pool's buffers (page-locked ones
    /// on the engine route).
    pub(crate) io: Option<Arc<dyn ReadBytes>>,
    /// The sizes of the images decoded (RGB bytes): each worker's image
    /// buffer is grown at once to the largest so far, so that it reaches
    /// its final size within the first epoch instead of creeping up over
    /// many (issue 7), but only up to the size of the images that make up
    /// 19 decoded bytes in 20 (`Sizes::weighted`): a rare very large photo
    /// allocates its own and does not leave every worker holding it. The
    /// read buffers' pool sizes its own (`BufferPool`).
    pub(crate) decoded: Sizes,
    /// The images' heights (as decoded, so EXIF-oriented where the
    /// pipeline orients), which size each worker's resampler rows (the
    /// most a crop may span) in the same way.
    pub(crate) rows: Sizes,
    /// Bytes the CPU workers' scratch holds (decoded image, resampler,
    /// the decoder's orientation scratch), for `Pipeline::memory`.
    pub(crate) scratch_bytes: AtomicU64,
    /// What the read buffers hold, for `Pipeline::memory`.
    pub(crate) read_buffers: crate::reader::Held,
    /// The timeline, when asked for (`PipelineBuilder::trace`).
    pub(crate) trace: Option<Arc<super::trace::Trace>>,
    /// Set when a device stage runs: workers hand it decoded regions of at
    /// most this many bytes (larger ones they augment themselves).
    pub(crate) region_limit: Option<usize>,
    /// Set when the device stage decodes with nvJPEG: workers send images
    /// whose decoded size is at most this many bytes compressed.
    pub(crate) jpeg_limit: Option<usize>,
    /// Set with `jpeg_limit`: where workers decide each nvJPEG image's
    /// route and, where they can, begin its decoding.
    pub(crate) worker_decode: Option<Arc<crate::stage::handoff::WorkerDecode>>,
}

/// The decoded sizes' histogram step: 256 steps of 256 KiB bound images
/// up to 22 megapixels (an ImageNet photo is about 0.2).
pub(crate) const DECODED_STEP: usize = 256 << 10;
/// The heights' step: 256 steps of 32 rows bound images up to 8192 rows.
pub(crate) const ROWS_STEP: usize = 32;

impl Shared {
    /// The memory of the pipeline with device stage `stage`, host buffers
    /// included.
    pub(crate) fn memory(&self, stage: Option<&crate::stage::DeviceStage>) -> crate::stage::Memory {
        crate::stage::Memory {
            read_buffer_bytes: self.read_buffers.bytes(),
            read_buffer_pinned_bytes: self.read_buffers.pinned_bytes(),
            worker_scratch_bytes: self.scratch_bytes.load(Ordering::Relaxed),
            ..stage
                .map(crate::stage::DeviceStage::memory)
                .unwrap_or_default()
        }
    }

    /// Replace a worker's share `old` of `scratch_bytes` by `now`; returns
    /// `now`.
    fn note_scratch(&self, old: u64, now: u64) -> u64 {
        if now > old {
            self.scratch_bytes.fetch_add(now - old, Ordering::Relaxed);
        } else if now < old {
            self.scratch_bytes.fetch_sub(old - now, Ordering::Relaxed);
        }
        now
    }

    /// The widest view: the resampler's rows are this wide.
    fn widest(&self) -> usize {
        self.config.views.iter().map(|v| v.width).max().unwrap_or(0)
    }

    /// Count an image of `width` x `height`, as decoded, towards the
    /// sizes of kept buffers (`decoded`, `rows`).
    fn note_image(&self, width: u32, height: u32) {
        self.decoded.note(width as usize * height as usize * 3);
        self.rows.note(height as usize);
    }

    /// Grow `buf` to the size kept image buffers have.
    fn size_image(&self, buf: &mut Vec<u8>) {
        buf.reserve_exact(self.decoded.size().saturating_sub(buf.len()));
    }
}

impl Shared {
    fn is_stale(&self, generation: u64) -> bool {
        self.generation.load(Ordering::Acquire) != generation
    }
}

/// One sample to produce: `seq` is its position in the epoch's order,
/// `index` its place in the source.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Task {
    pub(crate) generation: u64,
    pub(crate) epoch: u64,
    pub(crate) seq: usize,
    pub(crate) index: u32,
}

pub(crate) struct Read {
    task: Task,
    bytes: Result<PooledBytes, SampleError>,
}

/// One sample augmented on the CPU: per view spec, its `count` draws back
/// to back.
pub(crate) type SampleData = Vec<TensorData>;

/// What a worker produced for one sample.
pub(crate) enum Output {
    /// Augmented on the CPU (CPU backend, and regions too large to stage).
    Host(SampleData),
    /// Decoded and cut to its crops, for the device stage.
    Region(Region),
    /// Still compressed, for the device stage's nvJPEG route.
    Jpeg(Jpeg),
}

/// The answer to a task.
pub(crate) struct Done {
    pub(crate) seq: usize,
    pub(crate) index: u32,
    /// `None` when the task was stale and skipped.
    pub(crate) result: Option<Result<Output, SampleError>>,
}

/// Buffers that cycle between threads.
#[derive(Debug, Clone)]
pub(crate) struct Pools {
    pub(crate) bytes: BufferPool,
}

pub(crate) fn reader_loop(
    shared: Arc<Shared>,
    pools: Pools,
    tasks: Receiver<Task>,
    out: Sender<Read>,
    done: Sender<Done>,
) {
    #[cfg(feature = "object-store")]
    if shared.source.store().is_some() {
        return remote_reader_loop(shared, pools, tasks, out, done);
    }
    for task in tasks {
        if shared.is_stale(task.generation) {
            let _ = done.send(Done {
                seq: task.seq,
                index: task.index,
                result: None,
            });
            continue;
        }
        let mut buf = pools.bytes.take();
        let t0 = Instant::now();
        let max = shared.config.max_file_bytes;
        let res = crate::contain::contained(|| {
            let io = shared.io.as_deref();
            let mut sink = pools.bytes.sink(&mut buf);
            shared
                .source
                .read_with(io, task.index as usize, &mut sink, max)
        })
        .unwrap_or_else(|m| Err(SampleError::Panic(format!("reader: {m}"))));
        if !send_read(&shared, &pools, &out, task, t0, true, res.map(|()| buf)) {
            return;
        }
    }
}

/// Count and pass on one sample's bytes (its read time too, where the read
/// was its own); false when the workers are gone.
fn send_read(
    shared: &Shared,
    pools: &Pools,
    out: &Sender<Read>,
    task: Task,
    t0: Instant,
    own_time: bool,
    bytes: Result<ReadBuf, SampleError>,
) -> bool {
    if own_time {
        Counters::add_time(&shared.counters.read_ns, t0.elapsed());
    }
    if let Some(t) = &shared.trace {
        t.span("read", t0, Arg::Sample(task.index));
    }
    let bytes = bytes.map(|mut buf| {
        Counters::add(&shared.counters.bytes_read, buf.len() as u64);
        pools.bytes.fit(&mut buf);
        PooledBytes::new(buf, pools.bytes.clone())
    });
    out.send(Read { task, bytes }).is_ok()
}

/// Readers of shards in object storage: each takes the tasks queued
/// behind its first and fetches them together (`remote.rs` merges
/// neighbours and runs the rest concurrently), so a reader thread keeps
/// several requests in flight where a local read would keep one.
#[cfg(feature = "object-store")]
fn remote_reader_loop(
    shared: Arc<Shared>,
    pools: Pools,
    tasks: Receiver<Task>,
    out: Sender<Read>,
    done: Sender<Done>,
) {
    let Some(store) = shared.source.store() else {
        return;
    };
    let max = shared.config.max_file_bytes;
    // Chunks to keep in the streaming order: from the members' mean size,
    // computed once (it walks every member).
    let chunks = shared
        .config
        .stream_buffer
        .map(|buffer| shared.source.stream_chunks(buffer, shared.config.readers));
    while let Ok(first) = tasks.recv() {
        let mut group = vec![first];
        while group.len() < store.per_reader() {
            match tasks.try_recv() {
                Ok(t) => group.push(t),
                Err(_) => break,
            }
        }
        let t0 = Instant::now();
        let mut wanted = Vec::new();
        let mut answers: Vec<Option<Result<ReadBuf, SampleError>>> = Vec::new();
        for task in &group {
            let answer = if shared.is_stale(task.generation) {
                let _ = done.send(Done {
                    seq: task.seq,
                    index: task.index,
                    result: None,
                });
                None
            } else {
                match shared.source.member(task.index as usize) {
                    Some((_, m)) if m.problem.is_some() => Some(Err(SampleError::Corrupt(
                        m.problem.unwrap_or_default().to_string(),
                    ))),
                    Some((_, m)) if m.len > max => Some(Err(SampleError::FileTooLarge {
                        bytes: m.len,
                        limit: max,
                    })),
                    Some((_, m)) => {
                        wanted.push((answers.len(), (m.shard, m.offset, m.len)));
                        Some(Ok(ReadBuf::default()))
                    }
                    None => Some(Err(SampleError::Corrupt("not a shard member".into()))),
                }
            };
            answers.push(answer);
        }
        let reqs: Vec<_> = wanted.iter().map(|&(_, r)| r).collect();
        let got = crate::contain::contained(|| match chunks {
            // The streaming order reads shards front to back: whole chunks.
            Some(capacity) => store.read_streamed(group[0].epoch, &reqs, capacity),
            None => store.read_many(&reqs),
        })
        .map(|f| {
            Counters::add(&shared.counters.requests, f.requests);
            Counters::add(&shared.counters.retries, f.retries);
            f.results
        })
        .unwrap_or_else(|m| {
            let e = || SampleError::Panic(format!("reader: {m}"));
            reqs.iter().map(|_| Err(e())).collect()
        });
        for (&(at, _), r) in wanted.iter().zip(got) {
            answers[at] = Some(r.map(|b| {
                use crate::reader::Sink;
                let mut buf = pools.bytes.take();
                pools
                    .bytes
                    .sink(&mut buf)
                    .with_len(b.len())
                    .copy_from_slice(&b);
                buf
            }));
        }
        // The group's wait is reader time once, not once per sample.
        Counters::add_time(&shared.counters.read_ns, t0.elapsed());
        for (task, answer) in group.into_iter().zip(answers) {
            if let Some(bytes) = answer
                && !send_read(&shared, &pools, &out, task, t0, false, bytes)
            {
                return;
            }
        }
    }
}

/// Per-thread scratch of a CPU worker.
#[derive(Default)]
struct Scratch {
    image: Image,
    resampler: Resampler,
    /// Of the last task, for the automatic engine share: whether the
    /// engine supports its image and, if this worker ran the image's CUDA
    /// host phase, how long that took.
    eligible: bool,
    host_phase: Option<std::time::Duration>,
}

impl Scratch {
    /// What this worker holds between samples, its decoder's buffers
    /// included.
    fn held_bytes(&self, decoder: &CpuDecoder) -> u64 {
        (self.image.data.capacity() + self.resampler.held_bytes() + decoder.held_bytes()) as u64
    }

    /// Free buffers larger than the pipeline keeps (`Shared::decoded`,
    /// `Shared::rows`): each is replaced by one of the kept size, as
    /// `size_image` and `Resampler::reserve` would grow it.
    fn trim(&mut self, decoder: &mut CpuDecoder, shared: &Shared) {
        let keep = shared.decoded.size();
        if self.image.data.capacity() > keep {
            self.image = Image {
                data: Vec::with_capacity(keep),
                ..Default::default()
            };
        }
        decoder.trim(keep);
        self.resampler.trim(shared.rows.size(), shared.widest());
    }
}

pub(crate) fn worker_loop(
    shared: Arc<Shared>,
    input: Receiver<Read>,
    done: Sender<Done>,
    mut decoder: CpuDecoder,
) {
    crate::sched::lower_worker_priority();
    let mut scratch = Scratch::default();
    // What this worker's scratch adds to `Shared::scratch_bytes`.
    let mut scratch_held = 0;
    for Read { task, bytes } in input {
        let result = if shared.is_stale(task.generation) {
            None
        } else {
            Some(bytes.and_then(|mut b| {
                let t0 = Instant::now();
                (scratch.eligible, scratch.host_phase) = (false, None);
                let r = crate::contain::contained(|| {
                    process(&shared, &mut decoder, &mut scratch, task, &mut b)
                });
                if let Some(w) = &shared.worker_decode {
                    w.share
                        .task(t0.elapsed(), scratch.eligible, scratch.host_phase);
                }
                let r = r.unwrap_or_else(|m| {
                    // The scratch may be half-written: start afresh.
                    scratch = Scratch::default();
                    Err(SampleError::Panic(format!("CPU worker: {m}")))
                });
                scratch.trim(&mut decoder, &shared);
                scratch_held = shared.note_scratch(scratch_held, scratch.held_bytes(&decoder));
                // Dropping `b` gives the buffer back to the pool, unless an
                // nvJPEG sample took it along (it goes back when its decode
                // lands).
                r
            }))
        };
        if done
            .send(Done {
                seq: task.seq,
                index: task.index,
                result,
            })
            .is_err()
        {
            break;
        }
    }
    shared.note_scratch(scratch_held, 0);
}

fn process(
    shared: &Shared,
    decoder: &mut CpuDecoder,
    s: &mut Scratch,
    task: Task,
    buf: &mut PooledBytes,
) -> Result<Output, SampleError> {
    let bytes = &buf[..];
    let cfg = &shared.config;
    let c = &shared.counters;
    let t0 = Instant::now();
    if crate::decode::is_png_or_webp(bytes) {
        // A PNG or WebP, whatever its name: decoded here, then augmented
        // like a CPU-decoded JPEG (issue 19, item 4).
        crate::decode::decode_png_or_webp(bytes, cfg.max_pixels, &mut s.image)?;
        shared.note_image(s.image.width, s.image.height);
        shared.size_image(&mut s.image.data);
        Counters::add_time(&c.decode_ns, t0.elapsed());
        let params = draws(cfg, task, (s.image.width, s.image.height));
        return Ok(augment_decoded(shared, s, task, params));
    }
    let header = parse_header(bytes, cfg.max_pixels)?;
    // Every image counts towards the kept sizes, whichever route decodes
    // it: on a device the workers decode few, and would otherwise not
    // learn the dataset's sizes.
    let (w, h) = if cfg.apply_orientation {
        header.oriented_size()
    } else {
        (header.width, header.height)
    };
    shared.note_image(w, h);
    let t1 = Instant::now();
    Counters::add_time(&c.parse_ns, t1 - t0);
    let trace = |name, from: Instant| {
        if let Some(t) = &shared.trace {
            t.span(name, from, Arg::Sample(task.index));
        }
    };
    trace("parse", t0);
    let mut refused = false;
    if let Some(limit) = shared.jpeg_limit
        && crate::decode::nvjpeg::gpu_routable(&header, cfg.apply_orientation)
        && header.width as usize * header.height as usize * 3 <= limit
    {
        // The bytes go to nvJPEG; on the CUDA route this thread runs the
        // host phase (Huffman decoding) first.
        let size = (header.width, header.height);
        let engine_ok = crate::decode::nvjpeg::hardware_takes(&header);
        let draw = crate::decode::nvjpeg::hardware_draw(cfg.seed, task.epoch, task.index.into());
        let pixels = u64::from(header.width) * u64::from(header.height);
        let to_engine = shared
            .worker_decode
            .as_ref()
            .is_some_and(|w| w.route(engine_ok, draw, header.sof, pixels));
        s.eligible = engine_ok;
        let mut j = Jpeg {
            bytes: std::mem::take(buf),
            to_engine,
            mcu: crate::decode::nvjpeg::mcu_size(&header),
            kernels: shared
                .worker_decode
                .as_ref()
                .is_some_and(|w| w.to_kernels(header.sof, to_engine, pixels)),
            plan: None,
            progressive: header.sof == crate::jpeg::SofKind::Progressive,
            width: header.width,
            height: header.height,
            params: draws(cfg, task, size),
            staged: None,
        };
        let mut t2 = t1;
        if j.kernels {
            use crate::stage::handoff::{Planned, WorkerDecode};
            let lane_bytes = shared
                .worker_decode
                .as_ref()
                .map_or(usize::MAX, |w| w.kernels.lane_bytes);
            match WorkerDecode::plan(&j.bytes, cfg.max_pixels, size, lane_bytes) {
                Planned::Plan(p) => j.plan = Some(p),
                Planned::Refused => j.kernels = false,
                Planned::NotTried => {}
            }
            t2 = Instant::now();
            trace("scan plan", t1);
        }
        let started = match &shared.worker_decode {
            Some(w) => {
                if w.decodes_into_image(&j) {
                    // Grown to the kept size first, as for a CPU decode,
                    // so that it stops growing after epoch 1.
                    shared.size_image(&mut s.image.data);
                }
                w.start(&j, decoder, &mut s.image)
            }
            None => Ok(None),
        };
        Counters::add_time(&c.decode_ns, t1.elapsed());
        trace("nvJPEG host phase", t2);
        if let Ok(Some((_, host))) = &started {
            s.host_phase = Some(*host);
        }
        match started {
            Ok(staged) => {
                j.staged = staged.map(|(staged, _)| staged);
                return Ok(Output::Jpeg(j));
            }
            // nvJPEG refused it: the CPU decoder's turn, here (what the
            // batch thread would do, without its time).
            Err(_) => {
                *buf = j.bytes;
                refused = true;
            }
        }
    }
    let bytes = &buf[..];
    let t1 = Instant::now();
    // The draws from the header's (oriented) size are those the decoded
    // image's would give; where the decoder can, it decodes only the
    // window they read.
    let mut params = draws(cfg, task, (w, h));
    let windowed = match cpu_window(decoder, &header, &params) {
        Some(window) => match decoder.decode_window(bytes, &header, window, &mut s.image)? {
            Some(r) => {
                shift(&mut params, r.x, r.y);
                true
            }
            None => false,
        },
        None => {
            decoder.decode(bytes, &header, &mut s.image)?;
            false
        }
    };
    if refused {
        Counters::add(&c.decoded_cpu_fallback, 1);
    }
    if windowed {
        Counters::add(&c.decoded_cpu_window, 1);
    }
    shared.size_image(&mut s.image.data);
    Counters::add_time(&c.decode_ns, t1.elapsed());
    trace("decode", t1);
    Ok(augment_decoded(shared, s, task, params))
}

/// The window of the image to decode on the CPU for the draws `params`:
/// `None` where the decoder decodes whole images only (zune-jpeg) or the
/// draws read (nearly) all of it.
fn cpu_window(
    decoder: &CpuDecoder,
    header: &crate::jpeg::JpegHeader,
    params: &[SampleParams],
) -> Option<crate::decode::Roi> {
    if decoder.backend() != crate::decode::CpuBackend::TurboJpeg {
        return None;
    }
    let mcu = crate::decode::nvjpeg::mcu_size(header);
    crop_window(params, (header.width, header.height), mcu)
}

/// The decoded image in `s.image`, cut to its crop region for the device
/// stage, or augmented here, with the draws `params` (in its frame).
fn augment_decoded(
    shared: &Shared,
    s: &mut Scratch,
    task: Task,
    params: Vec<SampleParams>,
) -> Output {
    let c = &shared.counters;
    let trace = |name, from: Instant| {
        if let Some(t) = &shared.trace {
            t.span(name, from, Arg::Sample(task.index));
        }
    };
    let t2 = Instant::now();
    if let Some(limit) = shared.region_limit {
        let region = Region::cut(&s.image, params);
        if region.pixels.len() <= limit {
            return Output::Region(region);
        }
        // Too large to stage: augment here from the region, which the
        // shifted parameters address exactly like the full image.
        let img = crate::decode::Image {
            width: region.width,
            height: region.height,
            data: region.pixels,
        };
        let out = augment_on_cpu(shared, &mut s.resampler, &img, &region.params);
        Counters::add_time(&c.augment_ns, t2.elapsed());
        trace("augment", t2);
        return Output::Host(out);
    }
    let out = augment_on_cpu(shared, &mut s.resampler, &s.image, &params);
    Counters::add_time(&c.augment_ns, t2.elapsed());
    trace("augment", t2);
    Output::Host(out)
}

/// Every draw's geometry, view-major: a pure function of the sample and the
/// (oriented) image size, so every backend and route draws the same crops.
fn draws(cfg: &Config, task: Task, size: (u32, u32)) -> Vec<SampleParams> {
    let mut params = Vec::with_capacity(cfg.views.iter().map(|v| v.count).sum());
    for view in &cfg.views {
        let out = (view.width as u32, view.height as u32);
        for _ in 0..view.count {
            let k = params.len() as u64;
            let mut p = sample_params(
                view.transform,
                view.flip_h,
                view.flip_v,
                cfg.seed,
                task.epoch,
                task.index as u64,
                k,
                size,
                out,
            );
            p.photo = photo_params(&view.photo, cfg.seed, task.epoch, task.index as u64, k, out);
            params.push(p);
        }
    }
    params
}

/// The CPU reference over every draw of one sample.
fn augment_on_cpu(
    shared: &Shared,
    resampler: &mut Resampler,
    img: &crate::decode::Image,
    params: &[SampleParams],
) -> SampleData {
    let cfg = &shared.config;
    resampler.reserve(shared.rows.size(), shared.widest());
    // Not pooled: a pool of these would grow with the most samples ever
    // in flight at once, creeping up over epochs; a fresh allocation per
    // sample is cheap next to decoding it and is freed when it is batched.
    let mut out: SampleData = (0..cfg.views.len())
        .map(|_| TensorData::zeros(cfg.dtype, 0))
        .collect();
    let mut draws = params.iter();
    for (view, data) in cfg.views.iter().zip(out.iter_mut()) {
        let n = view.sample_len();
        data.set_len(n * view.count);
        let spec = OutSpec {
            width: view.width,
            height: view.height,
            layout: cfg.layout,
            antialias: cfg.antialias,
            fma: &cfg.fma,
        };
        for k in 0..view.count {
            let p = draws.next().expect("one parameter set per draw");
            let r = k * n..(k + 1) * n;
            if p.photo.any() {
                photo_on_cpu(resampler, img, p, spec, data, r);
                continue;
            }
            match data {
                TensorData::U8(v) => resampler.run(img, p, spec, &mut v[r]),
                TensorData::F16(v) => resampler.run(img, p, spec, &mut v[r]),
                TensorData::BF16(v) => resampler.run(img, p, spec, &mut v[r]),
                TensorData::F32(v) => resampler.run(img, p, spec, &mut v[r]),
            }
        }
    }
    out
}

/// One draw with photometric ops on the CPU: resampled into f32 planes
/// (0..=255, flipped), the ops of `augment/photo_cpu.rs`, then written.
fn photo_on_cpu(
    resampler: &mut Resampler,
    img: &crate::decode::Image,
    p: &SampleParams,
    spec: OutSpec<'_>,
    data: &mut TensorData,
    r: std::ops::Range<usize>,
) {
    use crate::augment::photo_cpu;
    let (w, h) = (spec.width, spec.height);
    let (mut planes, mut tmp) = std::mem::take(&mut resampler.photo);
    planes.resize(3 * w * h, 0.0);
    let plain = OutSpec {
        layout: crate::augment::Layout::Nchw,
        fma: &crate::augment::Fma::IDENTITY,
        ..spec
    };
    resampler.run(img, p, plain, &mut planes);
    photo_cpu::apply(&p.photo, w, h, &mut planes, &mut tmp);
    let (layout, fma) = (spec.layout, spec.fma);
    match data {
        TensorData::U8(v) => photo_cpu::write(&p.photo, w, h, &planes, layout, fma, &mut v[r]),
        TensorData::F16(v) => photo_cpu::write(&p.photo, w, h, &planes, layout, fma, &mut v[r]),
        TensorData::BF16(v) => photo_cpu::write(&p.photo, w, h, &planes, layout, fma, &mut v[r]),
        TensorData::F32(v) => photo_cpu::write(&p.photo, w, h, &planes, layout, fma, &mut v[r]),
    }
    resampler.photo = (planes, tmp);
}
