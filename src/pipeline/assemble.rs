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

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};

use crossbeam_channel::{Receiver, Sender, TryRecvError};

use super::batch::{Batch, Storage, Tensor, TensorData};
use super::builder::OnError;
use super::stats::Counters;
use super::trace::Arg;
use super::worker::{Done, Output, Shared, Task};
use crate::augment::Layout;
use crate::error::{Error, Result, SampleError};
use crate::sampler::Sampler;
use crate::stage::cuda::RouteCounts;
use crate::stage::handoff::Jpeg;
use crate::stage::{DeviceStage, Group, Slot};

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
///
/// Samples enter `queue` in sampler order as workers finish them and leave
/// it, in the same order, for their batch positions. On the device stage
/// an nvJPEG-route sample waits there until its decode group is collected
/// (issue 16, item 1): the groups of the next batches decode meanwhile,
/// and a sample that fails moves the later ones up a position, as on the
/// CPU backend.
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
    /// Next position to take into `queue`.
    assembled: usize,
    in_flight: usize,
    pending: BTreeMap<usize, Done>,
    current: Option<Partial>,
    queue: VecDeque<Waiting>,
    /// Device stage: decode groups, oldest first; the last may be open.
    groups: VecDeque<Group>,
    /// An nvJPEG sample that found every decode arena in use while a
    /// finished batch waited to be sent: later samples wait behind it.
    held: Option<(Jpeg, Meta)>,
    /// Finished batches, in order, not yet sent.
    ready: VecDeque<Batch>,
    /// The epoch's last batch has been made.
    ended: bool,
}

/// Who a sample is.
struct Meta {
    label: u32,
    path: std::path::PathBuf,
    index: u32,
    /// Its position in the epoch's order.
    seq: usize,
}

/// A sample waiting for its batch position.
struct Waiting {
    what: Pending,
    meta: Meta,
}

enum Pending {
    /// Decoded (and possibly augmented) by a worker.
    Ready(Output),
    /// Failed on the worker.
    Failed(SampleError),
    /// The next sample of the oldest decode group.
    Jpeg,
}

/// A batch being filled.
struct Partial {
    /// One buffer per view spec (CPU backend).
    data: Vec<TensorData>,
    /// The device slot being staged (device stage).
    slot: Option<Slot>,
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
            queue: VecDeque::new(),
            groups: VecDeque::new(),
            held: None,
            ready: VecDeque::new(),
            ended: false,
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
            // The send fails when the trainer dropped its Epoch; the
            // cancel covers one leaked instead (`Pipeline::end_epoch`).
            let sent = crossbeam_channel::select! {
                send(self.out, msg) -> r => r.is_ok(),
                recv(self.cancel) -> _ => false,
            };
            if !sent || last {
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
                labels: Vec::with_capacity(cfg.batch_size),
                keys: Vec::with_capacity(cfg.batch_size),
                indices: Vec::with_capacity(cfg.batch_size),
                skipped: Vec::new(),
            });
        }
        Ok(self.current.as_mut().expect("set above"))
    }

    /// Queue one finished sample (in order), and place what can be placed.
    fn take(&mut self, done: Done) -> Result<()> {
        let sample = &self.p.shared.source.samples()[done.index as usize];
        let meta = Meta {
            label: sample.label,
            path: sample.path.clone(),
            index: done.index,
            seq: done.seq,
        };
        let result = done.result.unwrap_or_else(|| {
            Err(SampleError::Panic(
                "task of a cancelled epoch delivered".into(),
            ))
        });
        let what = match result {
            Err(e) => Pending::Failed(e),
            Ok(Output::Jpeg(j)) => {
                if let Some(j) = self.put_jpeg(j)? {
                    self.held = Some((j, meta));
                    return Ok(());
                }
                Pending::Jpeg
            }
            Ok(output) => Pending::Ready(output),
        };
        self.queue.push_back(Waiting { what, meta });
        self.queued_one()
    }

    /// After a sample joined the queue: seal the open decode group where a
    /// batch would end if nothing fails (so the engine gets a batch's
    /// images per call), place what is decoded, and keep the queue within
    /// the batches allowed in flight.
    fn queued_one(&mut self) -> Result<()> {
        let cfg = &self.p.shared.config;
        let filled = self.current.as_ref().map_or(0, |p| p.labels.len()) + self.queue.len();
        if let (Some(stage), Some(g)) = (&self.p.stage, self.groups.back_mut())
            && !g.sealed()
            && g.len() > 0
            && (filled.is_multiple_of(cfg.batch_size) || g.len() >= cfg.batch_size)
        {
            let mut counts = RouteCounts::default();
            stage.seal(g, &mut counts)?;
            self.count(counts);
        }
        self.advance(false)?;
        let bound = cfg.in_flight * cfg.batch_size;
        while self.queue.len() > bound && self.advance(true)? {}
        Ok(())
    }

    fn count(&self, c: RouteCounts) {
        let k = &self.p.shared.counters;
        Counters::add(&k.decoded_hardware, c.hardware);
        Counters::add(&k.decoded_cuda, c.cuda);
        Counters::add(&k.decoded_cuda_batch_thread, c.cuda_batch_thread);
        Counters::add(&k.decoded_cpu_fallback, c.cpu);
        Counters::add(&k.decoded_progressive, c.progressive);
    }

    /// Put an nvJPEG-route sample into the open decode group, opening one
    /// when it does not fit. Gives the sample back when every arena is in
    /// use and a finished batch must go to the trainer before one frees.
    fn put_jpeg(&mut self, j: Jpeg) -> Result<Option<Jpeg>> {
        let p = self.p;
        let stage = p
            .stage
            .as_deref()
            .ok_or_else(|| Error::Worker("an nvJPEG sample without a device stage".into()))?;
        let t0 = std::time::Instant::now();
        if !self.groups.back().is_some_and(|g| stage.group_fits(g, &j)) {
            if let Some(g) = self.groups.back_mut() {
                let mut counts = RouteCounts::default();
                stage.seal(g, &mut counts)?;
                self.count(counts);
            }
            loop {
                self.retire_done();
                if let Some(g) = stage.open_group()? {
                    self.groups.push_back(g);
                    break;
                }
                if !self.ready.is_empty() {
                    return Ok(Some(j));
                }
                // Every arena is in use: place the oldest group's samples
                // (waiting for it), or launch what the batch being filled
                // read from arenas, so they free.
                if !self.advance(true)? && !self.flush_current()? {
                    return Err(Error::Device("no decode arena frees (stage bug)".into()));
                }
            }
        }
        let g = self.groups.back_mut().expect("pushed above");
        let mut counts = RouteCounts::default();
        stage.put_jpeg(g, j, &mut counts)?;
        self.count(counts);
        if let Some(t) = &self.p.shared.trace {
            t.span("device: put JPEG", t0, Arg::None);
        }
        Ok(None)
    }

    /// Give back the arenas of the oldest groups whose samples are all
    /// placed: to the batch being filled, whose tiles may read them.
    fn retire_done(&mut self) {
        let Some(stage) = &self.p.stage else { return };
        while self.groups.front().is_some_and(Group::done) {
            let g = self.groups.pop_front().expect("checked");
            let slot = self.current.as_mut().and_then(|p| p.slot.as_mut());
            stage.retire(g, slot);
        }
    }

    /// Launch what the batch being filled has staged, so that the arenas it
    /// read go back; false when it read none.
    fn flush_current(&mut self) -> Result<bool> {
        let (Some(stage), Some(slot)) = (
            &self.p.stage,
            self.current.as_mut().and_then(|p| p.slot.as_mut()),
        ) else {
            return Ok(false);
        };
        if !slot.holds_arenas() {
            return Ok(false);
        }
        let n = stage.flush_partial(&self.p.shared.config, slot)?;
        Counters::add(&self.p.shared.counters.launches, n as u64);
        Ok(true)
    }

    /// Give queued samples their batch positions, in order, while their
    /// outcome is known; with `block`, wait for the oldest group once if
    /// it is what stops the queue. A batch that is full when the next good
    /// sample comes is finished (queued in `ready`), and placing stops
    /// until it is sent: its slot must reach the trainer before another is
    /// taken. Returns whether anything moved.
    fn advance(&mut self, block: bool) -> Result<bool> {
        let batch = self.p.shared.config.batch_size;
        let mut progressed = false;
        let mut may_wait = block;
        while self.ready.is_empty() {
            let Some(front) = self.queue.front() else {
                break;
            };
            let good = match &front.what {
                Pending::Failed(_) => false,
                Pending::Ready(_) => true,
                Pending::Jpeg => {
                    let (Some(stage), Some(g)) = (&self.p.stage, self.groups.front_mut()) else {
                        return Err(Error::Device("a JPEG without its group (stage bug)".into()));
                    };
                    if !g.collected() {
                        if !may_wait && !stage.group_ready(g) {
                            break;
                        }
                        may_wait = false;
                        let t0 = std::time::Instant::now();
                        let mut counts = RouteCounts::default();
                        stage.collect(g, &mut counts)?;
                        if let Some(t) = &self.p.shared.trace {
                            t.span("device: collect decodes", t0, Arg::None);
                        }
                        self.count(counts);
                    }
                    let g = self.groups.front().expect("checked above");
                    g.next_ok()
                }
            };
            if good
                && self
                    .current
                    .as_ref()
                    .is_some_and(|p| p.labels.len() == batch)
            {
                // The failures since the batch filled ride on it; it
                // resumes at this sample.
                let seq = self.queue.front().expect("checked").meta.seq;
                if let Some(b) = self.finish_batch(seq)? {
                    self.ready.push_back(b);
                }
                progressed = true;
                continue;
            }
            let w = self.queue.pop_front().expect("checked");
            self.place(w)?;
            progressed = true;
        }
        Ok(progressed)
    }

    /// Give one sample the next position of the batch being filled, or
    /// count its failure.
    fn place(&mut self, w: Waiting) -> Result<()> {
        let Waiting { what, meta } = w;
        let p = self.p;
        let cfg = &p.shared.config;
        let c = &p.shared.counters;
        let output = match what {
            Pending::Failed(e) => return self.fail(e, meta.path),
            Pending::Ready(o) => Ok(o),
            Pending::Jpeg => {
                let (Some(stage), Some(g)) = (&p.stage, self.groups.front_mut()) else {
                    return Err(Error::Device("a JPEG without its group (stage bug)".into()));
                };
                match stage.take_entry(g)? {
                    Ok(placed) => Err(placed),
                    Err(e) => {
                        self.fail(e, meta.path)?;
                        self.retire_done();
                        return Ok(());
                    }
                }
            }
        };
        let part = self.partial()?;
        let i = part.labels.len();
        match (output, &p.stage, part.slot.as_mut()) {
            (Ok(Output::Host(data)), None, _) => {
                for (dst, src) in part.data.iter_mut().zip(&data) {
                    let n = src.as_bytes().len();
                    dst.as_bytes_mut()[i * n..(i + 1) * n].copy_from_slice(src.as_bytes());
                }
            }
            (Ok(Output::Host(data)), Some(stage), Some(slot)) => {
                stage.put_host(cfg, slot, i, &data)?;
                Counters::add(&c.host_augmented, 1);
            }
            (Ok(Output::Region(r)), Some(stage), Some(slot)) => {
                let n = stage.put_region(cfg, slot, i, &r)?;
                Counters::add(&c.launches, n as u64);
            }
            (Err(placed), Some(stage), Some(slot)) => stage.place(cfg, slot, &placed, i)?,
            _ => {
                return Err(Error::Worker(
                    "a sample for another backend (pipeline bug)".into(),
                ));
            }
        }
        part.labels.push(meta.label);
        part.keys.push(meta.path);
        part.indices.push(meta.index);
        self.retire_done();
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

    /// Hand the batch being filled out; `resume_position` is where an
    /// epoch resumed after it starts.
    fn finish_batch(&mut self, resume_position: usize) -> Result<Option<Batch>> {
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
                stage.steer_share();
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
        let c = &self.p.shared.counters;
        let ready = self.pending.len() + self.p.done.len();
        Counters::add(&c.queue_depth_sum, ready as u64);
        Counters::add(&c.queue_depth_polls, 1);
        loop {
            if let Some(b) = self.ready.pop_front() {
                return Ok(Some(b));
            }
            if self.ended {
                return Ok(None);
            }
            if self.cancelled() {
                return Err(Error::Worker("epoch abandoned".into()));
            }
            if let Some((j, meta)) = self.held.take() {
                match self.put_jpeg(j)? {
                    Some(j) => self.held = Some((j, meta)),
                    None => {
                        self.queue.push_back(Waiting {
                            what: Pending::Jpeg,
                            meta,
                        });
                        self.queued_one()?;
                    }
                }
                continue;
            }
            self.top_up()?;
            while self.held.is_none() && self.ready.is_empty() {
                let Some(done) = self.pending.remove(&self.assembled) else {
                    break;
                };
                self.assembled += 1;
                self.take(done)?;
            }
            if !self.ready.is_empty() || self.held.is_some() {
                continue;
            }
            if self.assembled == self.order.len() {
                if !self.queue.is_empty() {
                    if !self.advance(true)? && self.ready.is_empty() {
                        return Err(Error::Device(
                            "queued samples never decode (stage bug)".into(),
                        ));
                    }
                    continue;
                }
                self.ended = true;
                let short = self
                    .current
                    .as_ref()
                    .is_some_and(|p| p.labels.len() < self.p.shared.config.batch_size);
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
                return self.finish_batch(self.order.len());
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
        self.queue.clear();
        self.held = None;
        self.ready.clear();
        if let Some(stage) = &self.p.stage {
            // Decode groups give their arenas back once the engine is done
            // with them; a batch being assembled gives its slot back.
            for g in self.groups.drain(..) {
                stage.abandon(g);
            }
            if let Some(slot) = self.current.take().and_then(|mut p| p.slot.take()) {
                stage.put_back(slot);
            }
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
