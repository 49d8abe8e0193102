//! The batch thread: dispatches an epoch's tasks up to the prefetch window,
//! assembles the answers into batches in sampler order, runs the device
//! stage on them, and queues up to `prefetch` finished batches for the
//! trainer (issue 5, item 4: the trainer's thread only receives batches
//! whose copies, decodes and launches are already enqueued).
//!
//! Batches are composed only from the sampler order and from which samples
//! fail, never from timing: results are reordered by sequence number before
//! they enter a batch, so the same `(seed, epoch)` gives byte-identical
//! batches whatever the thread counts.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};

use crossbeam_channel::{Receiver, Sender, TryRecvError};

use super::batch::{Batch, Storage, Tensor, TensorData};
use super::builder::OnError;
use super::gpu::{DeviceStage, Slot};
use super::stats::Counters;
use super::trace::Arg;
use super::worker::{Done, Output, Shared, Task};
use crate::augment::Layout;
use crate::error::{Error, Result, SampleError};
use crate::sampler::Sampler;

/// What the batch thread sends the trainer's [`Epoch`](super::Epoch).
#[allow(clippy::large_enum_variant)] // Nearly every message is a batch.
pub(super) enum Msg {
    Batch(Result<Batch>),
    /// The thread waits for a device slot (see `DeviceStage::acquire`).
    Starved,
    /// The epoch has no more batches.
    End,
}

/// One epoch for the batch thread to run.
pub(super) struct Start {
    pub(super) epoch: u64,
    pub(super) position: usize,
    pub(super) out: Sender<Msg>,
    /// Batches in `out` (it also carries other messages); counted after the
    /// send, so the trainer may see -1 for a moment.
    pub(super) queued: Arc<AtomicIsize>,
    /// Disconnected when the trainer abandons the epoch.
    pub(super) cancel: Receiver<()>,
    /// Told once the epoch's work has drained and its slots are home.
    pub(super) idle: Sender<()>,
}

/// What the batch thread owns for the pipeline's lifetime.
pub(super) struct Assembler {
    pub(super) shared: Arc<Shared>,
    pub(super) sampler: Sampler,
    pub(super) tasks: Sender<Task>,
    pub(super) done: Receiver<Done>,
    pub(super) batches: (Sender<Vec<TensorData>>, Receiver<Vec<TensorData>>),
    pub(super) stage: Option<Arc<DeviceStage>>,
}

/// The batch thread's body: one epoch per `Start`, until the pipeline
/// closes the command channel.
pub(super) fn assembler_loop(a: Assembler, starts: Receiver<Start>) {
    while let Ok(start) = starts.recv() {
        let idle = start.idle.clone();
        let mut run = Assembly::new(&a, start);
        run.run();
        // Drop drains the work in flight and returns the slot being filled.
        drop(run);
        let _ = idle.send(());
    }
}

/// The batch thread's state for one epoch.
struct Assembly<'a> {
    p: &'a Assembler,
    out: Sender<Msg>,
    queued: Arc<AtomicIsize>,
    cancel: Receiver<()>,
    epoch: u64,
    generation: u64,
    order: Vec<u32>,
    /// Next position of `order` to dispatch.
    dispatched: usize,
    /// Next position to assemble.
    assembled: usize,
    in_flight: usize,
    pending: BTreeMap<usize, Done>,
    current: Option<Partial>,
    /// The first good sample after a full batch, held for the next batch.
    carry: Option<Done>,
}

/// A device-stage sample waiting for its batch position.
enum Pending {
    /// Decoded (and possibly augmented) by a worker.
    Ready(Output),
    /// Compressed, in the slot's nvJPEG queue.
    Jpeg,
}

/// A batch being filled.
struct Partial {
    /// One buffer per view spec (CPU backend).
    data: Vec<TensorData>,
    /// The device slot being staged (device stage).
    slot: Option<Slot>,
    /// Device stage: samples taken but not yet given a batch position.
    tentative: Vec<(Pending, (u32, std::path::PathBuf, u32))>,
    labels: Vec<u32>,
    keys: Vec<std::path::PathBuf>,
    indices: Vec<u32>,
    skipped: Vec<Error>,
}

impl<'a> Assembly<'a> {
    fn new(p: &'a Assembler, s: Start) -> Assembly<'a> {
        let (epoch, position) = (s.epoch, s.position);
        let order = p.sampler.indices(epoch);
        let start = position.min(order.len());
        let generation = p.shared.generation.load(Ordering::Acquire);
        Assembly {
            p,
            out: s.out,
            queued: s.queued,
            cancel: s.cancel,
            epoch,
            generation,
            order,
            dispatched: start,
            assembled: start,
            in_flight: 0,
            pending: BTreeMap::new(),
            current: None,
            carry: None,
        }
    }

    /// Send batches until the epoch ends, fails, or is abandoned.
    fn run(&mut self) {
        loop {
            let (msg, last) = match self.next_batch() {
                Ok(Some(b)) => (Msg::Batch(Ok(b)), false),
                Ok(None) => (Msg::End, true),
                Err(e) => (Msg::Batch(Err(e)), true),
            };
            // A send fails only when the trainer dropped its Epoch.
            if self.out.send(msg).is_err() || last {
                return;
            }
            self.queued.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Whether the trainer abandoned the epoch.
    fn cancelled(&self) -> bool {
        matches!(self.cancel.try_recv(), Err(TryRecvError::Disconnected))
    }

    fn top_up(&mut self) -> Result<()> {
        let window = self.p.shared.config.window();
        let tasks = &self.p.tasks;
        while self.dispatched < self.order.len() && self.dispatched - self.assembled < window {
            let task = Task {
                generation: self.generation,
                epoch: self.epoch,
                seq: self.dispatched,
                index: self.order[self.dispatched],
            };
            tasks
                .send(task)
                .map_err(|_| Error::Worker("reader threads have exited".into()))?;
            self.dispatched += 1;
            self.in_flight += 1;
        }
        Ok(())
    }

    fn partial(&mut self) -> Result<&mut Partial> {
        if self.current.is_none() {
            let cfg = &self.p.shared.config;
            let (data, slot) = match &self.p.stage {
                Some(stage) => {
                    let out = &self.out;
                    let starved = || out.send(Msg::Starved).is_ok();
                    (Vec::new(), Some(stage.acquire(&self.cancel, starved)?))
                }
                None => {
                    let mut data = self.p.batches.1.try_recv().unwrap_or_default();
                    data.resize_with(cfg.views.len(), || TensorData::zeros(cfg.dtype, 0));
                    for (d, v) in data.iter_mut().zip(&cfg.views) {
                        if d.dtype() != cfg.dtype {
                            *d = TensorData::zeros(cfg.dtype, 0);
                        }
                        d.set_len(cfg.batch_size * v.count * v.sample_len());
                    }
                    (data, None)
                }
            };
            self.current = Some(Partial {
                data,
                slot,
                tentative: Vec::new(),
                labels: Vec::with_capacity(cfg.batch_size),
                keys: Vec::with_capacity(cfg.batch_size),
                indices: Vec::with_capacity(cfg.batch_size),
                skipped: Vec::new(),
            });
        }
        Ok(self.current.as_mut().expect("set above"))
    }

    /// Move one finished sample (in order) into the current batch. Returns an
    /// error under [`OnError::Fail`].
    fn take(&mut self, done: Done) -> Result<()> {
        let sample = &self.p.shared.source.samples()[done.index as usize];
        let (path, label) = (sample.path.clone(), sample.label);
        let result = done.result.unwrap_or_else(|| {
            Err(SampleError::Panic(
                "task of a cancelled epoch delivered".into(),
            ))
        });
        let output = match result {
            Ok(output) => output,
            Err(e) => return self.fail(e, path),
        };
        self.partial()?;
        if self.p.stage.is_some() {
            return self.take_device(output, (label, path, done.index));
        }
        let part = self.current.as_mut().expect("partial() made it");
        let i = part.labels.len();
        let Output::Host(data) = output else {
            return Err(Error::Worker(
                "a device-stage output without a device stage".into(),
            ));
        };
        for (dst, src) in part.data.iter_mut().zip(&data) {
            let n = src.as_bytes().len();
            dst.as_bytes_mut()[i * n..(i + 1) * n].copy_from_slice(src.as_bytes());
        }
        part.labels.push(label);
        part.keys.push(path);
        part.indices.push(done.index);
        Ok(())
    }

    /// Count a failed sample and apply the policy.
    fn fail(&mut self, e: SampleError, path: std::path::PathBuf) -> Result<()> {
        Counters::add(&self.p.shared.counters.errors[e.kind().index()], 1);
        let err = e.at(path);
        match self.p.shared.config.on_error {
            OnError::Fail => Err(err),
            OnError::Skip => {
                self.partial()?.skipped.push(err);
                Ok(())
            }
        }
    }

    /// Device stage: the sample waits as tentative, so that batch positions
    /// follow sampler order even though nvJPEG-route samples are only known
    /// good once decoded (in `resolve`).
    fn take_device(&mut self, output: Output, meta: (u32, std::path::PathBuf, u32)) -> Result<()> {
        let pending = match output {
            Output::Jpeg(j) => {
                let (stage, _, slot) = self.device_parts();
                if !stage.jpeg_fits(slot, &j) {
                    self.resolve()?;
                }
                let (stage, shared, slot) = self.device_parts();
                let t0 = std::time::Instant::now();
                let n = stage.put_jpeg(&shared.config, slot, j)?;
                if let Some(t) = &shared.trace {
                    t.span("device: put JPEG", t0, Arg::None);
                }
                Counters::add(&shared.counters.launches, n as u64);
                Pending::Jpeg
            }
            other => Pending::Ready(other),
        };
        let part = self.current.as_mut().expect("take() made the partial");
        part.tentative.push((pending, meta));
        if part.labels.len() + part.tentative.len() == self.p.shared.config.batch_size {
            self.resolve()?;
        }
        Ok(())
    }

    /// The device stage, the shared state and the slot of the batch being
    /// filled; only called on the device path after `partial()`.
    fn device_parts(&mut self) -> (&DeviceStage, &Shared, &mut Slot) {
        let p = self.p;
        let stage = p.stage.as_ref().expect("device path");
        let slot = self
            .current
            .as_mut()
            .and_then(|c| c.slot.as_mut())
            .expect("device partials hold a slot");
        (stage, &p.shared, slot)
    }

    /// Decode the tentative nvJPEG samples and give every tentative sample
    /// its batch position, in order; failures join `skipped`.
    fn resolve(&mut self) -> Result<()> {
        let p = self.p;
        let (Some(stage), Some(part)) = (&p.stage, self.current.as_mut()) else {
            return Ok(());
        };
        let Some(slot) = part.slot.as_mut() else {
            return Ok(());
        };
        let cfg = &p.shared.config;
        let c = &p.shared.counters;
        let tentative = std::mem::take(&mut part.tentative);
        let t0 = std::time::Instant::now();
        let (decoded, counts) = stage.resolve(slot)?;
        if let Some(t) = &p.shared.trace {
            t.span("device: resolve (engine batch)", t0, Arg::None);
        }
        Counters::add(&c.decoded_hardware, counts.hardware);
        Counters::add(&c.decoded_cuda, counts.cuda);
        Counters::add(&c.decoded_cpu_fallback, counts.cpu);
        let mut decoded = decoded.into_iter();
        let mut failures = Vec::new();
        for (pending, (label, path, index)) in tentative {
            let i = part.labels.len();
            match pending {
                Pending::Ready(Output::Host(data)) => {
                    stage.put_host(cfg, slot, i, &data)?;
                    Counters::add(&c.host_augmented, 1);
                }
                Pending::Ready(Output::Region(r)) => {
                    let n = stage.put_region(cfg, slot, i, &r)?;
                    Counters::add(&c.launches, n as u64);
                }
                Pending::Ready(Output::Jpeg(_)) => unreachable!("JPEGs wait as Pending::Jpeg"),
                Pending::Jpeg => match decoded.next() {
                    Some(Ok(placed)) => stage.place(cfg, slot, &placed, i)?,
                    Some(Err(e)) => {
                        failures.push((e, path));
                        continue;
                    }
                    None => {
                        return Err(Error::Device("fewer decodes than JPEGs (stage bug)".into()));
                    }
                },
            }
            part.labels.push(label);
            part.keys.push(path);
            part.indices.push(index);
        }
        for (e, path) in failures {
            self.fail(e, path)?;
        }
        Ok(())
    }

    fn finish_batch(&mut self) -> Result<Option<Batch>> {
        let Some(mut part) = self.current.take() else {
            return Ok(None);
        };
        let cfg = &self.p.shared.config;
        let n = part.labels.len();
        if n == 0 && part.skipped.is_empty() {
            // Nothing to deliver or report (an empty shard). A slot taken
            // for it goes back unused.
            if let (Some(slot), Some(stage)) = (part.slot.take(), &self.p.stage) {
                stage.put_back(slot);
            }
            return Ok(None);
        }
        // A carried sample was assembled but belongs to the next batch.
        let resume_position = self.assembled - usize::from(self.carry.is_some());
        let mix = cfg.mixup.as_ref().map(|m| {
            let v = &cfg.views[0];
            let size = (v.width as u32, v.height as u32);
            let p = crate::augment::mix::mix_params(
                m,
                cfg.seed,
                self.epoch,
                resume_position as u64,
                size,
            );
            (p, crate::augment::mix::soft_labels(&part.labels, m, &p))
        });
        let (views, slot) = match (part.slot.take(), &self.p.stage) {
            (Some(mut slot), Some(stage)) => {
                let t0 = std::time::Instant::now();
                let finished = stage.finish(
                    cfg,
                    &mut slot,
                    &part.labels,
                    mix.as_ref().map(|m| (&m.0, m.1.as_slice())),
                );
                if let Some(t) = &self.p.shared.trace {
                    t.span("device: copies and launches", t0, Arg::None);
                }
                let views = match finished {
                    Ok((v, n)) => {
                        Counters::add(&self.p.shared.counters.launches, n as u64);
                        v
                    }
                    Err(e) => {
                        stage.put_back(slot);
                        return Err(e);
                    }
                };
                (views, Some(stage.lend(slot)))
            }
            _ => {
                let views = part
                    .data
                    .into_iter()
                    .zip(&cfg.views)
                    .map(|(mut data, v)| {
                        let rows = n * v.count;
                        data.set_len(rows * v.sample_len());
                        if let Some((p, _)) = &mix {
                            mix_host(p, &mut data, rows, (v.width, v.height), cfg.layout);
                        }
                        let shape = match cfg.layout {
                            Layout::Nchw => [rows, 3, v.height, v.width],
                            Layout::Nhwc => [rows, v.height, v.width, 3],
                        };
                        Tensor::new(shape, cfg.layout, cfg.dtype, Storage::Host(data))
                    })
                    .collect();
                (views, None)
            }
        };
        let c = &self.p.shared.counters;
        Counters::add(&c.batches, 1);
        Counters::add(&c.samples, n as u64);
        Ok(Some(Batch {
            views,
            labels: part.labels,
            keys: part.keys,
            indices: part.indices,
            epoch: self.epoch,
            resume_position,
            skipped: part.skipped,
            soft_labels: mix.map(|m| m.1),
            recycle: Some(self.p.batches.0.clone()),
            slot,
            held: None,
        }))
    }

    fn next_batch(&mut self) -> Result<Option<Batch>> {
        let batch_size = self.p.shared.config.batch_size;
        let c = &self.p.shared.counters;
        let ready = self.pending.len() + self.p.done.len();
        Counters::add(&c.queue_depth_sum, ready as u64);
        Counters::add(&c.queue_depth_polls, 1);
        if let Some(done) = self.carry.take() {
            self.take(done)?;
        }
        loop {
            if self.cancelled() {
                return Err(Error::Worker("epoch abandoned".into()));
            }
            self.top_up()?;
            while let Some(done) = self.pending.remove(&self.assembled) {
                self.assembled += 1;
                let full = self
                    .current
                    .as_ref()
                    .is_some_and(|p| p.labels.len() == batch_size);
                // A full batch is handed out only when the next good sample
                // arrives (or the epoch ends), so the failures between them
                // ride on it: every skipped file is reported on some batch.
                if full && matches!(done.result, Some(Ok(_))) {
                    self.carry = Some(done);
                    return self.finish_batch();
                }
                self.take(done)?;
            }
            if self.assembled == self.order.len() {
                self.resolve()?;
                let short = self
                    .current
                    .as_ref()
                    .is_some_and(|p| p.labels.len() < batch_size);
                if short && self.p.shared.config.drop_last {
                    // Its samples are dropped by request; its failures were
                    // counted in the stats.
                    if let Some(mut part) = self.current.take()
                        && let (Some(slot), Some(stage)) = (part.slot.take(), &self.p.stage)
                    {
                        stage.put_back(slot);
                    }
                    return Ok(None);
                }
                return self.finish_batch();
            }
            // Assembling freed window space: refill it before blocking, or
            // an empty pipeline would wait on itself.
            self.top_up()?;
            let done = self
                .p
                .done
                .recv()
                .map_err(|_| Error::Worker("all pipeline threads have exited".into()))?;
            self.in_flight -= 1;
            self.pending.insert(done.seq, done);
        }
    }
}

impl Drop for Assembly<'_> {
    fn drop(&mut self) {
        // Make the threads skip what is still queued, then collect one
        // answer per task sent so the next epoch starts with empty queues.
        self.p.shared.generation.fetch_add(1, Ordering::AcqRel);
        // A batch being assembled gives its device slot back.
        if let (Some(slot), Some(stage)) = (
            self.current.take().and_then(|mut p| p.slot.take()),
            &self.p.stage,
        ) {
            stage.put_back(slot);
        }
        while self.in_flight > 0 {
            match self.p.done.recv() {
                Ok(_) => {
                    self.in_flight -= 1;
                }
                Err(_) => break,
            }
        }
    }
}

/// Mixup on the CPU backend's batch (the reference `kernels/mix.cu`
/// follows).
fn mix_host(
    p: &crate::augment::mix::MixParams,
    data: &mut TensorData,
    n: usize,
    size: (usize, usize),
    layout: Layout,
) {
    use crate::augment::mix::mix_images;
    match data {
        TensorData::U8(v) => mix_images(p, v, n, size, layout),
        TensorData::F16(v) => mix_images(p, v, n, size, layout),
        TensorData::BF16(v) => mix_images(p, v, n, size, layout),
        TensorData::F32(v) => mix_images(p, v, n, size, layout),
    }
}
