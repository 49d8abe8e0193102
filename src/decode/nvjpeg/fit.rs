//! The pooled decoders' buffers grown once, to the pool's largest, rather
//! than image by image (issue 16, items 3 and 5).
//!
//! nvJPEG grows a decoder's pinned and device buffers when an image needs
//! more than they hold: it frees the old buffer and allocates a larger
//! one. Those driver calls are implicitly synchronizing (CUDA C++
//! Programming Guide, "Implicit Synchronization"; `cuMemFree` and
//! `cuMemFreeHost` wait for the device), so a worker growing a buffer
//! waits for every call in flight, the hardware engine's too, and other
//! streams cannot overlap across it. A pool lends each decoder a random
//! image at a time; each grows whenever it meets a larger image than any
//! before, and on a dataset of 169 distinct files repeated (the H200 runs
//! of 2026-11-26) a decoder that has decoded 25 images has still not met
//! the largest with probability (168/169)^25 ≈ 0.86: growth goes on for
//! epochs (`tests/memory.rs` saw nvJPEG's memory rise until epoch 15). A
//! simulation of 400 decoders lent 25 of those files an epoch each (the
//! CUDA share at engine share 0.5) grows each buffer 0.55 times per
//! decoder in the second epoch, 0.35 in the third, 0.2 in the fourth:
//! about 440 frees and 440 allocations of buffers, all synchronizing, in
//! an epoch of about 1.4 s.
//!
//! So the pool remembers the largest buffer of each kind any of its
//! decoders has held, and before a host phase a decoder whose buffer is
//! smaller is grown to it (`nvjpegBuffer{Pinned,Device}Resize`) while the
//! pool's memory stays within a budget. Once some decoder has met the
//! largest image, every decoder grows at most once more, and the pool's
//! memory stops changing after the first epoch, as the emulated engine
//! lanes' buffers do. DALI reaches the same end with its
//! `device_memory_padding` / `host_memory_padding` (16 / 8 MiB per
//! thread): "If the value is correctly selected, no additional
//! allocations will occur during the pipeline execution."

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{Kind, Ledger};

/// The largest buffers the pool's decoders have held, and the budget
/// within which the others are grown to them ahead of need.
#[derive(Debug)]
pub(crate) struct Fit {
    pinned: AtomicUsize,
    device: AtomicUsize,
    ledger: Arc<Ledger>,
    budget: u64,
}

impl Fit {
    /// For a pool whose memory is counted in `ledger`: buffers are grown
    /// ahead of need only while the pool holds at most `budget` bytes
    /// after growing them (beyond it, as an image needs).
    pub(crate) fn new(ledger: &Arc<Ledger>, budget: u64) -> Arc<Fit> {
        Arc::new(Fit {
            pinned: AtomicUsize::new(0),
            device: AtomicUsize::new(0),
            ledger: ledger.clone(),
            budget,
        })
    }

    fn largest(&self, kind: Kind) -> &AtomicUsize {
        match kind {
            Kind::Pinned => &self.pinned,
            Kind::Device => &self.device,
        }
    }

    /// A decoder's buffer of `kind` holds `size` bytes.
    pub(crate) fn saw(&self, kind: Kind, size: usize) {
        self.largest(kind).fetch_max(size, Ordering::AcqRel);
    }

    /// The size to grow a buffer of `kind` holding `have` bytes to before
    /// its next use: the largest the pool has seen, if that is more and
    /// the pool stays within its budget; `None` to leave it.
    pub(crate) fn grow(&self, kind: Kind, have: usize) -> Option<usize> {
        let want = self.largest(kind).load(Ordering::Acquire);
        let more = want.checked_sub(have).filter(|&m| m > 0)? as u64;
        (self.ledger.total().saturating_add(more) <= self.budget).then_some(want)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_grow_to_the_largest_seen_within_the_budget() {
        let ledger = Arc::new(Ledger::new(u64::MAX));
        let fit = Fit::new(&ledger, 1_000);
        assert_eq!(fit.grow(Kind::Pinned, 0), None, "nothing seen yet");
        fit.saw(Kind::Pinned, 300);
        fit.saw(Kind::Pinned, 200);
        fit.saw(Kind::Device, 50);
        assert_eq!(fit.grow(Kind::Pinned, 100), Some(300));
        assert_eq!(fit.grow(Kind::Pinned, 300), None, "already there");
        assert_eq!(fit.grow(Kind::Pinned, 400), None, "larger already");
        assert_eq!(fit.grow(Kind::Device, 0), Some(50), "kinds apart");
        // The pool holds 800: growing by 200 fits the budget, by 201 not.
        assert!(ledger.charge(Kind::Device, 800));
        assert_eq!(fit.grow(Kind::Pinned, 100), Some(300));
        assert_eq!(fit.grow(Kind::Pinned, 99), None, "past the budget");
    }

    #[test]
    fn the_largest_holds_under_threads() {
        let fit = Fit::new(&Arc::new(Ledger::new(u64::MAX)), u64::MAX);
        let hs: Vec<_> = (0..8)
            .map(|t| {
                let fit = fit.clone();
                std::thread::spawn(move || (0..1_000).for_each(|i| fit.saw(Kind::Device, t * i)))
            })
            .collect();
        hs.into_iter().for_each(|h| h.join().unwrap());
        assert_eq!(fit.grow(Kind::Device, 0), Some(7 * 999));
    }
}
