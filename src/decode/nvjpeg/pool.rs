//! A pool of decoders lent to samples (issue 5, item 4), bounded in number
//! and, through what it keeps, in memory (issue 16, item 5).
//!
//! A worker takes a decoder, runs the host phase of its sample and sends
//! the decoder along with the sample; the batch thread queues the device
//! phase and drops the [`Lease`], which brings the decoder back. Decoders
//! are made on demand, at most `cap`. A pipeline sets `cap` to the samples
//! it lets be in flight (plus the one it may carry between batches): each
//! lease belongs to such a sample, so a worker's `take` always finds a
//! decoder or one comes back. A smaller pool deadlocks in all but name:
//! leases pile up on samples queued behind the one the batch thread needs
//! next, whose worker is the one waiting (measured on an H100, 2026-11-22:
//! a pool of 4 per worker + 16 took share 0 from 11,894 to 685 img/s,
//! every worker waiting out its timeout).
//!
//! A decoder's buffers grow to the largest image it decoded, so a pool
//! that keeps every decoder holds about `cap` times that size. Where the
//! pool's `keep` test says no as a decoder comes back, the decoder is
//! freed and its place in the pool becomes a token: whoever takes the
//! token makes a fresh, small decoder. The count of decoders and tokens
//! never passes `cap`, and a worker waiting for a decoder wakes for a
//! token as for a decoder.
//!
//! The free decoders are a stack: the one given back last is lent first.
//! A queue lent them in turn, so every decoder of the pool came to meet
//! the largest images and grew for them, one pinned allocation after
//! another: on an H200 (2026-11-26) nvJPEG's pool memory in
//! `tests/memory.rs` crept from 1.4 to 2.3 MiB over 35 epochs. A stack
//! keeps the busy few warm and the rest as small as they were made.
//!
//! But the decoder given back last is the one least likely to be ready:
//! the batch thread gives a decoder back as soon as it has queued the
//! copy of its image to the device, and the next host phase must wait for
//! that copy to run before it overwrites the pinned buffer. So `take`
//! lends the topmost of the [`READY_SCAN`] top decoders that the pool's
//! `ready` test passes, and the top one when none does.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::Result;

/// What is free: decoders, the last given back on top, and tokens (the
/// right to make one, left by a decoder that was freed).
struct Free<T> {
    decoders: Vec<Box<T>>,
    tokens: usize,
}

/// Makes a decoder.
type Make<T> = Box<dyn Fn() -> Result<T> + Send + Sync>;

/// Whether a decoder coming back is kept.
type Keep = Box<dyn Fn() -> bool + Send + Sync>;

/// Whether a free decoder can start at once (no wait for the device).
type Ready<T> = Box<dyn Fn(&T) -> bool + Send + Sync>;

/// How many free decoders from the top of the stack `take` asks `ready`
/// about: enough to skip the few whose copies the batch thread queued
/// last, few enough that the pool's lock is held for a handful of cheap
/// queries (`cuEventQuery`).
pub(crate) const READY_SCAN: usize = 8;

/// Decoders shared by a pipeline's workers and its batch thread.
pub(crate) struct Pool<T> {
    free: Mutex<Free<T>>,
    /// Told when a decoder or a token is given back.
    returned: Condvar,
    /// Decoders and tokens in existence.
    made: AtomicUsize,
    /// Decoders freed on their way back (the `keep` test said no).
    freed: AtomicUsize,
    cap: usize,
    make: Make<T>,
    keep: Keep,
    ready: Ready<T>,
    timeout: Duration,
}

impl<T> std::fmt::Debug for Pool<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("made", &self.made.load(Ordering::Relaxed))
            .field("freed", &self.freed.load(Ordering::Relaxed))
            .field("cap", &self.cap)
            .finish_non_exhaustive()
    }
}

impl<T> Pool<T> {
    /// A pool of at most `cap` decoders made by `make`; one is made now,
    /// so that a pipeline learns at build time whether decoders can be
    /// made. `keep` is asked as each decoder comes back, `ready` of free
    /// decoders as one is taken; `timeout` bounds a `take` that finds the
    /// pool empty and full.
    pub(crate) fn new(
        cap: usize,
        make: impl Fn() -> Result<T> + Send + Sync + 'static,
        keep: impl Fn() -> bool + Send + Sync + 'static,
        ready: impl Fn(&T) -> bool + Send + Sync + 'static,
        timeout: Duration,
    ) -> Result<Arc<Pool<T>>> {
        let cap = cap.max(1);
        let first = Box::new(make()?);
        Ok(Arc::new(Pool {
            free: Mutex::new(Free {
                decoders: vec![first],
                tokens: 0,
            }),
            returned: Condvar::new(),
            made: AtomicUsize::new(1),
            freed: AtomicUsize::new(0),
            cap,
            make: Box::new(make),
            keep: Box::new(keep),
            ready: Box::new(ready),
            timeout,
        }))
    }

    /// A free decoder (a ready one near the top of the stack, else the
    /// top one); a new one for a token, or while fewer than `cap` exist;
    /// or one that comes back within the timeout. `None` otherwise, or
    /// when a new decoder cannot be made.
    pub(crate) fn take(self: &Arc<Self>) -> Option<Lease<T>> {
        let deadline = Instant::now() + self.timeout;
        let mut free = self.lock();
        // `None`: make one (a token, or room under the cap).
        let place = loop {
            let n = free.decoders.len();
            if let Some(i) = (n.saturating_sub(READY_SCAN)..n)
                .rev()
                .find(|&i| (self.ready)(&free.decoders[i]))
            {
                break Some(free.decoders.remove(i));
            }
            if let Some(d) = free.decoders.pop() {
                break Some(d);
            }
            if free.tokens > 0 {
                free.tokens -= 1;
                break None;
            }
            let grew = self
                .made
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    (n < self.cap).then_some(n + 1)
                })
                .is_ok();
            if grew {
                break None;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            free = self
                .returned
                .wait_timeout(free, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        };
        drop(free);
        let item = match place {
            Some(d) => d,
            None => match (self.make)() {
                Ok(d) => Box::new(d),
                Err(_) => {
                    // The place is lost with the failed make; a later
                    // take may grow again.
                    self.made.fetch_sub(1, Ordering::AcqRel);
                    return None;
                }
            },
        };
        Some(Lease {
            item: Some(item),
            pool: self.clone(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Free<T>> {
        self.free.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `(made, freed)`: decoders and tokens in existence, and decoders
    /// freed on their way back.
    #[cfg(test)]
    pub(crate) fn counts(&self) -> (usize, usize) {
        (
            self.made.load(Ordering::Acquire),
            self.freed.load(Ordering::Acquire),
        )
    }
}

/// A decoder taken from a [`Pool`]; dropping it gives it back, or frees it
/// and gives back a token.
pub(crate) struct Lease<T> {
    item: Option<Box<T>>,
    pool: Arc<Pool<T>>,
}

impl<T: std::fmt::Debug> std::fmt::Debug for Lease<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease").field("item", &self.item).finish()
    }
}

impl<T> std::ops::Deref for Lease<T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.item
            .as_ref()
            .expect("a lease holds its decoder until dropped")
    }
}

impl<T> std::ops::DerefMut for Lease<T> {
    fn deref_mut(&mut self) -> &mut T {
        self.item
            .as_mut()
            .expect("a lease holds its decoder until dropped")
    }
}

impl<T> Drop for Lease<T> {
    fn drop(&mut self) {
        let Some(d) = self.item.take() else {
            return;
        };
        if (self.pool.keep)() {
            self.pool.lock().decoders.push(d);
        } else {
            drop(d);
            self.pool.freed.fetch_add(1, Ordering::AcqRel);
            self.pool.lock().tokens += 1;
        }
        self.pool.returned.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    /// A decoder that counts the live ones.
    struct Dec(Arc<AtomicUsize>);

    impl Drop for Dec {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::AcqRel);
        }
    }

    fn pool(cap: usize, keep: Arc<AtomicBool>) -> (Arc<Pool<Dec>>, Arc<AtomicUsize>) {
        let live = Arc::new(AtomicUsize::new(0));
        let l = live.clone();
        let p = Pool::new(
            cap,
            move || {
                l.fetch_add(1, Ordering::AcqRel);
                Ok(Dec(l.clone()))
            },
            move || keep.load(Ordering::Acquire),
            |_| true,
            Duration::from_secs(5),
        )
        .unwrap();
        (p, live)
    }

    #[test]
    fn the_pool_makes_on_demand_up_to_its_cap_and_reuses() {
        let (p, live) = pool(3, Arc::new(AtomicBool::new(true)));
        assert_eq!(live.load(Ordering::Acquire), 1, "one made at build");
        let a = p.take().unwrap();
        let b = p.take().unwrap();
        let c = p.take().unwrap();
        assert_eq!((live.load(Ordering::Acquire), p.counts()), (3, (3, 0)));
        drop(a);
        let d = p.take().unwrap();
        assert_eq!(live.load(Ordering::Acquire), 3, "reused, not made");
        drop((b, c, d));
        assert_eq!(p.counts(), (3, 0));
    }

    #[test]
    fn a_decoder_not_kept_is_freed_and_its_place_remade() {
        let keep = Arc::new(AtomicBool::new(false));
        let (p, live) = pool(2, keep.clone());
        let a = p.take().unwrap();
        let b = p.take().unwrap();
        drop(a);
        assert_eq!(live.load(Ordering::Acquire), 1, "freed on its way back");
        assert_eq!(p.counts(), (2, 1));
        // The token makes a fresh decoder; the cap still holds.
        let c = p.take().unwrap();
        assert_eq!((live.load(Ordering::Acquire), p.counts()), (2, (2, 1)));
        keep.store(true, Ordering::Release);
        drop((b, c));
        assert_eq!((live.load(Ordering::Acquire), p.counts()), (2, (2, 1)));
    }

    #[test]
    fn a_waiting_taker_wakes_for_a_token() {
        let (p, _live) = pool(1, Arc::new(AtomicBool::new(false)));
        let a = p.take().unwrap();
        let q = p.clone();
        let waiter = std::thread::spawn(move || q.take().is_some());
        std::thread::sleep(Duration::from_millis(50));
        drop(a);
        assert!(
            waiter.join().unwrap(),
            "woke for the token, not the timeout"
        );
    }

    #[test]
    fn the_last_decoder_given_back_is_lent_first() {
        // Decoders numbered as made: 0 at build, then 1, 2.
        let next = Arc::new(AtomicUsize::new(0));
        let p: Arc<Pool<usize>> = Pool::new(
            4,
            move || Ok(next.fetch_add(1, Ordering::AcqRel)),
            || true,
            |_| true,
            Duration::from_millis(10),
        )
        .unwrap();
        let (a, b, c) = (p.take().unwrap(), p.take().unwrap(), p.take().unwrap());
        assert_eq!((*a, *b, *c), (0, 1, 2));
        drop(a);
        drop(c);
        drop(b);
        // One sample at a time meets decoder 1 alone: the others stay as
        // they were made.
        for _ in 0..10 {
            assert_eq!(*p.take().unwrap(), 1);
        }
        let (x, y) = (p.take().unwrap(), p.take().unwrap());
        assert_eq!((*x, *y), (1, 2));
        assert_eq!(p.counts(), (3, 0), "none made while one was free");
    }

    #[test]
    fn a_ready_decoder_near_the_top_is_lent_before_the_top_one() {
        // Decoders numbered as made; those in `busy` are not ready (their
        // last copy to the device has not run).
        let next = Arc::new(AtomicUsize::new(0));
        let busy = Arc::new(Mutex::new(vec![]));
        let b = busy.clone();
        let p: Arc<Pool<usize>> = Pool::new(
            16,
            move || Ok(next.fetch_add(1, Ordering::AcqRel)),
            || true,
            move |d: &usize| !b.lock().unwrap().contains(d),
            Duration::from_millis(10),
        )
        .unwrap();
        let all: Vec<_> = (0..12).map(|_| p.take().unwrap()).collect();
        drop(all); // the stack, bottom to top: 0..=11
        *busy.lock().unwrap() = vec![11, 10, 9];
        let a = p.take().unwrap();
        assert_eq!(*a, 8, "the topmost ready one");
        // None ready within the scan: the top one after all.
        *busy.lock().unwrap() = (0..12).collect();
        let b = p.take().unwrap();
        assert_eq!(*b, 11);
        // Left, bottom to top: 0..=7, 9, 10. Decoder 0 alone is ready,
        // below the scan, so not looked for: the top one.
        const { assert!(READY_SCAN < 9) };
        *busy.lock().unwrap() = (1..12).collect();
        assert_eq!(*p.take().unwrap(), 10);
        assert_eq!(p.counts(), (12, 0), "none made while some were free");
        drop((a, b));
    }

    #[test]
    fn a_failed_make_gives_its_place_back() {
        let fail = Arc::new(AtomicBool::new(false));
        let f = fail.clone();
        let p: Arc<Pool<u8>> = Pool::new(
            2,
            move || {
                if f.load(Ordering::Acquire) {
                    Err(crate::error::Error::Device("no".into()))
                } else {
                    Ok(0)
                }
            },
            || true,
            |_| true,
            Duration::from_millis(10),
        )
        .unwrap();
        let a = p.take().unwrap();
        fail.store(true, Ordering::Release);
        assert!(p.take().is_none());
        assert_eq!(p.counts(), (1, 0));
        fail.store(false, Ordering::Release);
        let b = p.take().unwrap();
        assert_eq!(p.counts(), (2, 0));
        drop((a, b));
    }
}
