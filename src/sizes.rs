//! The sizes a kind of reusable buffer has needed, and how large such
//! buffers are kept.
//!
//! Buffers that cycle (the readers' pool, each CPU worker's decoded image)
//! are grown at once to the largest need so far, so that they reach their
//! final size within the first epoch and live memory is flat after it
//! (issue 7). Grown to the largest need without a limit, though, every
//! buffer ends up as large as the dataset's largest file or image, and a
//! few camera files among ImageNet-sized photos make that the bulk of the
//! host memory (docs/BENCHMARKS.md, "Read buffers"). So once enough needs
//! were seen, kept buffers are bounded by the step of a size histogram
//! that holds 19 needs in 20, counted by number or by bytes; the rarer
//! larger need gets a buffer of its own, freed after use, which costs
//! little next to reading or decoding that file.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

/// Needs seen before their sizes are trusted to bound the buffers.
pub(crate) const KEEP_AFTER: u64 = 256;
/// The bound is computed again after this many more needs.
const KEEP_EVERY: u64 = 64;
/// Kept buffers fit this share of the needs (as a fraction of 20).
const KEEP_TWENTIETHS: u64 = 19;
/// Histogram buckets; needs past the last one's start share it.
const BUCKETS: usize = 256;

/// A histogram of buffer needs and the size kept buffers are grown to.
/// Shared by the threads whose buffers it sizes.
#[derive(Debug)]
pub(crate) struct Sizes {
    /// The buckets' width: the bound moves in these steps.
    step: usize,
    /// Whether a need counts by its size rather than as one.
    weighted: bool,
    seen: AtomicU64,
    largest: AtomicUsize,
    /// Needs by size: entry `i` counts (or sums, `weighted`) those in
    /// `(i × step, (i + 1) × step]` (0 bytes in the first), the last entry
    /// every larger one.
    by_size: [AtomicU64; BUCKETS],
    /// The bound on kept buffers, from `by_size`; 0 until `KEEP_AFTER`
    /// needs were seen, `usize::MAX` when the percentile falls in the
    /// last bucket.
    keep: AtomicUsize,
}

impl Sizes {
    /// A histogram in buckets of `step` bytes: it bounds buffers up to
    /// 255 steps, and leaves larger ones at the largest need. Each need
    /// counts as one: kept buffers fit 19 needs in 20.
    pub(crate) fn new(step: usize) -> Sizes {
        Sizes::weighed(step, false)
    }

    /// As [`new`](Self::new), but each need counts by its size: kept
    /// buffers fit the needs that make up 19 units in 20 (bytes of
    /// decoded images, rows resampled). For buffers whose use costs in
    /// proportion to their size, so that the needs that allocate their own
    /// buffer are at most one twentieth of the work, whatever their
    /// number: on a set where a few very large photos are most of the
    /// decoding, the buffers stay at their size.
    pub(crate) fn weighted(step: usize) -> Sizes {
        Sizes::weighed(step, true)
    }

    fn weighed(step: usize, weighted: bool) -> Sizes {
        Sizes {
            step,
            weighted,
            seen: AtomicU64::new(0),
            largest: AtomicUsize::new(0),
            by_size: std::array::from_fn(|_| AtomicU64::new(0)),
            keep: AtomicUsize::new(0),
        }
    }

    /// Count a need of `n` bytes; returns the size to grow buffers to
    /// afterwards ([`size`](Self::size)).
    pub(crate) fn note(&self, n: usize) -> usize {
        let seen = self.seen.fetch_add(1, Relaxed) + 1;
        self.largest.fetch_max(n, Relaxed);
        let bucket = n.saturating_sub(1) / self.step;
        let weight = if self.weighted { n as u64 } else { 1 };
        self.by_size[bucket.min(BUCKETS - 1)].fetch_add(weight, Relaxed);
        if seen >= KEEP_AFTER && seen.is_multiple_of(KEEP_EVERY) {
            self.keep.store(self.percentile(), Relaxed);
        }
        self.size()
    }

    /// The upper end of the bucket that holds the needs' (or, weighted,
    /// their sizes') 95th percentile (`usize::MAX` in the last bucket).
    fn percentile(&self) -> usize {
        let counts: [u64; BUCKETS] = std::array::from_fn(|i| self.by_size[i].load(Relaxed));
        let want = (counts.iter().sum::<u64>() * KEEP_TWENTIETHS).div_ceil(20);
        let mut seen = 0;
        for (i, c) in counts.iter().enumerate().take(BUCKETS - 1) {
            seen += c;
            if seen >= want {
                return (i + 1) * self.step;
            }
        }
        usize::MAX
    }

    /// The bound on kept buffers, once known and finite.
    pub(crate) fn bound(&self) -> Option<usize> {
        match self.keep.load(Relaxed) {
            0 | usize::MAX => None,
            keep => Some(keep),
        }
    }

    /// The size buffers are grown to: the largest need so far, at most the
    /// bound once it is known. A buffer of larger capacity is not kept.
    pub(crate) fn size(&self) -> usize {
        let largest = self.largest.load(Relaxed);
        match self.keep.load(Relaxed) {
            0 => largest,
            keep => largest.min(keep),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{KEEP_AFTER, Sizes};

    #[test]
    fn the_largest_need_until_trusted_then_the_step_that_holds_nineteen_in_twenty() {
        let s = Sizes::new(1000);
        assert_eq!(s.size(), 0);
        assert_eq!(s.note(5000), 5000);
        for _ in 2..KEEP_AFTER {
            assert_eq!(s.note(1500), 5000);
        }
        // The 256th need: 255 of 256 are in (1000, 2000].
        assert_eq!(s.note(1500), 2000);
        // 1 + 64 of 320 larger (counted at the 320th): 20 % are past the
        // bucket, so the bound moves up to theirs.
        for _ in 0..64 {
            s.note(4500);
        }
        assert_eq!(s.size(), 5000);
        // Weighted: 3 needs of 5000 among 256 are 4 % of the sum, 12 of
        // them 14 %.
        let s = Sizes::weighted(1000);
        for i in 0..KEEP_AFTER {
            s.note(if i % 101 == 0 { 5000 } else { 1500 });
        }
        assert_eq!(s.size(), 2000);
        let s = Sizes::weighted(1000);
        for i in 0..KEEP_AFTER {
            s.note(if i % 101 < 4 { 5000 } else { 1500 });
        }
        assert_eq!(s.size(), 5000);
        // Past the last bucket: the bound is the largest need.
        let s = Sizes::new(1);
        for _ in 0..KEEP_AFTER {
            s.note(1000);
        }
        assert_eq!(s.size(), 1000);
    }
}
