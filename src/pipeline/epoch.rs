//! The trainer's side of an epoch: receives the batches the batch thread
//! (`assemble.rs`) has queued.

use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender, bounded};

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
    /// Dropped to tell the batch thread that the epoch is abandoned.
    cancel: Option<Sender<()>>,
    idle: Receiver<()>,
    finished: bool,
    epoch: u64,
    /// Batches yielded so far.
    yielded: u64,
}

impl<'a> Epoch<'a> {
    pub(super) fn new(p: &'a mut Pipeline, epoch: u64, position: usize) -> Epoch<'a> {
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
        let _ = p.starts.as_ref().map(|s| s.send(start));
        Epoch {
            p,
            out: Some(out),
            queued,
            cancel: Some(cancel),
            idle,
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
        // Workers skip what is still queued from here on; the batch thread
        // sees the cancel, drains what is in flight, puts its slot back and
        // reports idle, so the next epoch starts with empty queues.
        self.p.shared.generation.fetch_add(1, Ordering::AcqRel);
        self.cancel = None;
        self.out = None;
        let _ = self.idle.recv();
    }
}
