//! The trainer's side of an epoch: receives the batches the batch thread
//! (`assemble.rs`) has queued.

use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender, bounded, select};

use super::Pipeline;
use super::assemble::{Msg, Start};
use super::batch::Batch;
use super::stats::Counters;
use super::trace::Arg;
use crate::error::{Error, Result};

/// Iterator over the batches of one epoch; see [`Pipeline::epoch`].
///
/// Up to `prefetch` batches are made ahead of the trainer, from the moment
/// the epoch is created. Dropping it mid-epoch cancels the work in flight
/// and waits only for the samples being decoded at that moment; batches
/// made ahead and not taken give their memory back.
pub struct Epoch<'a> {
    p: &'a mut Pipeline,
    out: Option<Receiver<Msg>>,
    queued: Arc<AtomicIsize>,
    finished: bool,
    epoch: u64,
    /// Batches yielded so far.
    yielded: u64,
}

/// The ends of the running epoch's channels that the pipeline keeps, not
/// the [`Epoch`]: an `Epoch` leaked (`mem::forget` is safe Rust) would
/// otherwise leave the batch thread waiting to hand it a batch forever,
/// and the next epoch, or the pipeline's drop, waiting for the batch
/// thread.
pub(super) struct LiveEpoch {
    /// Dropped to tell the batch thread that the epoch is abandoned.
    cancel: Sender<()>,
    /// The batch thread's word that it has let the epoch go.
    idle: Receiver<()>,
    /// The batches, for dropping those not taken (their slots come back).
    out: Receiver<Msg>,
}

impl Pipeline {
    /// End the epoch on the batch thread, if one runs: workers skip what
    /// is still queued for it, the batch thread drains what is in flight
    /// and puts its slot back, and batches made ahead and not taken are
    /// dropped, so the next epoch starts with empty queues and every slot.
    pub(super) fn end_epoch(&mut self) {
        let Some(live) = self.live.take() else { return };
        self.shared.generation.fetch_add(1, Ordering::AcqRel);
        drop(live.cancel);
        loop {
            select! {
                recv(live.out) -> m => {
                    if m.is_err() {
                        // The batch thread is done with the epoch, or gone.
                        let _ = live.idle.recv();
                        break;
                    }
                }
                recv(live.idle) -> _ => break,
            }
        }
        while let Ok(m) = live.out.try_recv() {
            drop(m);
        }
    }
}

impl<'a> Epoch<'a> {
    pub(super) fn new(p: &'a mut Pipeline, epoch: u64, position: usize) -> Epoch<'a> {
        // An epoch whose `Epoch` was leaked, not dropped, ends here.
        p.end_epoch();
        let (out_tx, out) = bounded(p.shared.config.prefetch);
        let (cancel, cancel_rx) = bounded(0);
        let (idle_tx, idle) = bounded(1);
        let queued = Arc::new(AtomicIsize::new(0));
        let start = Start {
            epoch,
            position,
            out: out_tx,
            queued: queued.clone(),
            cancel: cancel_rx,
            idle: idle_tx,
        };
        // A batch thread that is gone shows as a disconnected `out` below.
        if p.starts.as_ref().is_some_and(|s| s.send(start).is_ok()) {
            p.live = Some(LiveEpoch {
                cancel,
                idle,
                out: out.clone(),
            });
        }
        Epoch {
            p,
            out: Some(out),
            queued,
            finished: false,
            epoch,
            yielded: 0,
        }
    }

    /// Batches already made and waiting for the trainer (at most the
    /// pipeline's `prefetch`): their decodes, copies and kernels are
    /// enqueued on the device, or done.
    pub fn ready(&self) -> usize {
        self.queued.load(Ordering::Acquire).max(0) as usize
    }

    fn next_batch(&mut self) -> Result<Option<Batch>> {
        let out = self.out.as_ref().expect("taken only on drop");
        let t0 = Instant::now();
        let waited = |p: &Pipeline| Counters::add_time(&p.shared.counters.wait_ns, t0.elapsed());
        loop {
            match out.recv() {
                Ok(Msg::Batch(b)) => {
                    self.queued
                        .fetch_sub(isize::from(b.is_ok()), Ordering::AcqRel);
                    waited(self.p);
                    return match b {
                        // Issue 15: no batch without images. The batch
                        // thread hands out a full batch only once the next
                        // good sample arrives, so failures ride on the batch
                        // before them; a batch without images carries the
                        // failures of an epoch in which no sample was good.
                        Ok(mut b) if b.is_empty() => Err(Error::NoSamples {
                            epoch: self.epoch,
                            skipped: std::mem::take(&mut b.skipped),
                        }),
                        Ok(mut b) => {
                            if let Some(t) = &self.p.shared.trace {
                                let n = Arg::Batch(self.yielded);
                                t.span_to("trainer waits", t0, Instant::now(), n);
                                b.held = Some((t.clone(), Instant::now(), self.yielded));
                            }
                            self.yielded += 1;
                            Ok(Some(b))
                        }
                        Err(e) => Err(e),
                    };
                }
                Ok(Msg::End) => return Ok(None),
                Ok(Msg::Starved) => {
                    // Batches hold every slot and none is queued: the
                    // trainer holds them all, and waiting would deadlock.
                    let stage = self.p.stage.as_ref();
                    if stage.is_some_and(|s| s.all_lent()) && out.is_empty() {
                        return Err(Error::SlotsHeld {
                            slots: self.p.memory().slots,
                        });
                    }
                }
                Err(_) => {
                    return Err(Error::Worker(
                        "the pipeline's batch thread has exited".into(),
                    ));
                }
            }
        }
    }
}

impl Iterator for Epoch<'_> {
    type Item = Result<Batch>;

    fn next(&mut self) -> Option<Result<Batch>> {
        if self.finished {
            return None;
        }
        match self.next_batch() {
            Ok(Some(b)) => Some(Ok(b)),
            Ok(None) => {
                self.finished = true;
                None
            }
            Err(e) => {
                self.finished = true;
                Some(Err(e))
            }
        }
    }
}

impl Drop for Epoch<'_> {
    fn drop(&mut self) {
        self.out = None;
        self.p.end_epoch();
    }
}
