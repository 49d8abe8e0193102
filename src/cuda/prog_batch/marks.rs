//! The sizes the scan kernels' lanes grow their buffers for the files to,
//! shared by a pipeline's lanes and bounded by
//! `PipelineBuilder::kernel_memory_limit` (issue 16, item 5).

use std::ops::Range;
use std::sync::Mutex;

/// Twice the largest call met by any lane of a pipeline, as the files'
/// bytes and coefficients. Each lane grows its buffers for the files to
/// these, so that the lanes stop growing once the largest calls have been
/// met by any of them, not each lane at its own next largest call: with
/// one mark per lane the emulated lanes' memory still grew at epoch 35 of
/// 60 (`tests/memory.rs`, session 52; issue 16, item 5).
///
/// Twice the call that passed them, from the first call on: a call
/// passes them only where it is more than twice every call before it, so
/// that the lanes grow in their first calls, not at a record call epochs
/// later. Marks that grew to the call alone the first time and to twice
/// themselves after doubled in the third epoch of twelve on
/// `imagenet-size` (169 photos, batches of 32, emulated, session 60).
/// The steady state is the same: the first call passed by a later one
/// doubled them.
///
/// With a bound, the marks never hold more than `cap` bytes of a lane's
/// device memory ([`Marks::held`]): [`Marks::parts`] cuts a call into
/// parts that fit, and leaves out the files that do not fit beside the
/// buffers the parts before them raised.
///
/// The marks also keep the largest of the lanes' other buffers (their
/// page-locked staging and the descriptors' device buffers, [`Marks::note`])
/// and a generation that changes whenever anything rises. A lane idle
/// while the marks rose grows to them between calls (`cuda::lanes::Tend`).
/// Growing at its next call instead, a lane of `tests/memory.rs` (4 calls
/// an epoch on 6 lanes) first grew as late as epoch 5, and the decoders'
/// memory rose from 39 MB after epoch 1 to 117 MB by epoch 9 (emulated;
/// 41 MB to 121.6 MB on an H200, session 59).
#[derive(Debug)]
pub(crate) struct Marks {
    state: Mutex<State>,
    cap: usize,
}

/// What [`Marks`] guards.
#[derive(Debug, Default)]
struct State {
    sizes: [usize; 2],
    /// The largest of each of the lanes' other buffers ([`Marks::note`]).
    others: [usize; OTHERS],
    /// Changed by every rise.
    generation: u64,
}

/// How many other buffers a lane has ([`Marks::note`]): its page-locked
/// staging (first, [`STAGING`]) and the device buffers of its descriptors.
pub(crate) const OTHERS: usize = 9;

/// Where [`Marks::note`] takes the staging's bytes.
pub(crate) const STAGING: usize = 0;

impl Default for Marks {
    fn default() -> Marks {
        Marks::bounded(usize::MAX)
    }
}

/// A call cut by [`Marks::parts`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Parts {
    /// Runs of the call's files, in order, each a call within the bound.
    pub(crate) calls: Vec<Range<usize>>,
    /// The files that alone pass the bound, in order.
    pub(crate) refused: Vec<usize>,
    /// The sizes to grow the buffers to (the marks, raised for `calls`).
    pub(crate) grow: [usize; 2],
}

impl Marks {
    /// Marks whose buffers hold at most `cap` bytes of device memory.
    pub(crate) fn bounded(cap: usize) -> Marks {
        Marks {
            state: Mutex::new(State::default()),
            cap,
        }
    }

    /// Device bytes of a lane's buffers for calls of `[bytes,
    /// coefficients]`: the files (a byte each), the coefficients (i16) and
    /// the samples (a byte per coefficient).
    pub(crate) fn held([bytes, coefs]: [usize; 2]) -> usize {
        bytes.saturating_add(coefs.saturating_mul(3))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `need` raised to the marks; a mark that `need` passes first grows to
    /// twice `need` where the bound allows, else to `need`.
    pub(crate) fn raise(&self, need: [usize; 2]) -> [usize; 2] {
        let mut m = self.lock();
        let grown = self.grown(m.sizes, need);
        m.set_sizes(grown);
        m.sizes
    }

    /// The marks as they are: the files' buffers' sizes and the other
    /// buffers' ([`note`](Self::note)).
    pub(crate) fn current(&self) -> ([usize; 2], [usize; OTHERS]) {
        let m = self.lock();
        (m.sizes, m.others)
    }

    /// Changes whenever a mark rises: a lane that grew to the marks at one
    /// generation need not grow again until it changes.
    pub(crate) fn generation(&self) -> u64 {
        self.lock().generation
    }

    /// Note the sizes a lane's other buffers have (element counts, in a
    /// fixed order of the lane's choosing): each mark rises to the largest
    /// any lane has, for the idle lanes to grow to.
    pub(crate) fn note(&self, others: [usize; OTHERS]) {
        let mut m = self.lock();
        let raised: [usize; OTHERS] = std::array::from_fn(|k| m.others[k].max(others[k]));
        if raised != m.others {
            m.others = raised;
            m.generation += 1;
        }
    }

    /// The marks `m` raised for `need`: a passed mark to twice `need`
    /// where that stays within the bound, else to `need`.
    fn grown(&self, m: [usize; 2], need: [usize; 2]) -> [usize; 2] {
        let at_least = [m[0].max(need[0]), m[1].max(need[1])];
        let twice = |k: usize| {
            if need[k] > m[k] {
                need[k].saturating_mul(2)
            } else {
                m[k]
            }
        };
        let doubled = [twice(0), twice(1)];
        if Marks::held(doubled) <= self.cap {
            doubled
        } else {
            at_least
        }
    }

    /// Cut a call of files sized `sizes` (`[bytes, coefficients]` each)
    /// into runs that fit the bound one after another, and raise the marks
    /// for them. A run fits when the buffers grown for it and for the runs
    /// before it (and every lane's calls before) hold at most the bound; a
    /// file that does not fit beside those buffers is refused (it decodes
    /// as the kernels' refusals do): one whose coefficients fit only
    /// beside a smaller bytes' mark than a run before it raised, for
    /// example. Without a bound: one run of every file.
    pub(crate) fn parts(&self, sizes: &[[usize; 2]]) -> Parts {
        let mut state = self.lock();
        let m = state.sizes;
        let fits = |w: [usize; 2], n: [usize; 2]| {
            Marks::held([w[0].max(n[0]), w[1].max(n[1])]) <= self.cap
        };
        let (mut calls, mut refused) = (Vec::new(), Vec::new());
        // The marks as raised for the runs so far, and the run being cut.
        let (mut w, mut run, mut sum) = (m, 0..0, [0usize; 2]);
        for (i, &s) in sizes.iter().enumerate() {
            if !run.is_empty() {
                let more = [sum[0].saturating_add(s[0]), sum[1].saturating_add(s[1])];
                if fits(w, more) {
                    run.end = i + 1;
                    sum = more;
                    continue;
                }
                // The run ends here; the marks it raises are what the
                // next run must fit beside, its first file included (a
                // file that fitted the marks before this run may not).
                w = [w[0].max(sum[0]), w[1].max(sum[1])];
                calls.push(std::mem::replace(&mut run, 0..0));
                sum = [0; 2];
            }
            if fits(w, s) {
                run = i..i + 1;
                sum = s;
            } else {
                refused.push(i);
            }
        }
        if !run.is_empty() {
            w = [w[0].max(sum[0]), w[1].max(sum[1])];
            calls.push(run);
        }
        state.set_sizes(self.grown(m, w));
        Parts {
            calls,
            refused,
            grow: state.sizes,
        }
    }
}

impl State {
    fn set_sizes(&mut self, sizes: [usize; 2]) {
        if sizes != self.sizes {
            self.sizes = sizes;
            self.generation += 1;
        }
    }
}
