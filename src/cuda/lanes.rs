//! Threads that run the device stage's decode calls off the batch thread
//! (issue 16, item 1): each lane owns its state (an nvJPEG engine decoder
//! with its stream, or the emulated device's CPU decoder) and answers each
//! request on a channel of its own, so that several batches decode at once
//! while the batch thread fills the next. Requests go to the lanes in
//! turn: the batch thread collects them in the same order, so the next
//! lane is the one most likely free, and every lane has worked (its
//! buffers grown) within the first few requests, not whenever timing
//! first picks it (tests/memory.rs: nothing grows after epoch 1).

use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender, TryRecvError, bounded, unbounded};

use crate::error::{Error, Result};

pub(crate) use super::timeline::Observe;

/// The name lane calls show under in a timeline.
pub(crate) const CALL: &str = "engine: decode call";

/// The name progressive lanes' calls show under
/// (`stage/cuda/prog_route.rs`).
pub(crate) const PROGRESSIVE_CALL: &str = "progressive: decode call";

/// Scan kernels' lanes per kind of file (`stage::KernelLanes`), at least.
const PROGRESSIVE_LANES: usize = 2;

/// The scan kernels' lanes per kind of file for a pipeline with
/// `in_flight` batches in flight (CUDA and emulated): one per batch in
/// flight, at least [`PROGRESSIVE_LANES`], unless
/// `GPUFEED_PROGRESSIVE_LANES` (1-16, a diagnostic) says otherwise. A
/// lane answers one call at a time and a call lasts as long as its
/// slowest file (a batch's progressive photos, one GPU thread per chain:
/// ~70 ms on an H200, 0d15f52), and each batch in flight has at most one
/// call per kind out; with fewer lanes, calls queue behind each other. On
/// the emulated device, calls held to a fixed latency ran the pipeline at
/// about min(lanes, in flight - 1) x batch / latency (docs/BENCHMARKS.md,
/// "Latency-bound lanes"). The cost: each lane's buffers grow to its
/// largest call (counted in `Pipeline::memory()`).
pub(crate) fn progressive_lanes(in_flight: usize) -> usize {
    static LANES: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    let set = *LANES.get_or_init(|| {
        std::env::var("GPUFEED_PROGRESSIVE_LANES")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|n| (1..=16).contains(n))
    });
    set.unwrap_or(in_flight.max(PROGRESSIVE_LANES))
}

/// `run`, reporting each call to `observe` when there is one.
pub(crate) fn observed<S, Q, A>(
    run: impl Fn(&mut S, Q) -> A + Send + Clone + 'static,
    observe: Option<Observe>,
) -> impl Fn(&mut S, Q) -> A + Send + Clone + 'static {
    observed_as(run, observe, CALL)
}

/// `run`, reporting each call to `observe` as `name`.
pub(crate) fn observed_as<S, Q, A>(
    run: impl Fn(&mut S, Q) -> A + Send + Clone + 'static,
    observe: Option<Observe>,
    name: &'static str,
) -> impl Fn(&mut S, Q) -> A + Send + Clone + 'static {
    move |s, q| {
        let t0 = std::time::Instant::now();
        let a = run(s, q);
        if let Some(o) = &observe {
            o(super::timeline::Seen {
                track: None,
                name,
                start: t0,
                end: std::time::Instant::now(),
            });
        }
        a
    }
}

/// `run`, its calls counted in `busy` with the items `count` says each
/// call takes (the automatic engine share's measure of the engine, issue
/// 16, item 3).
pub(crate) fn counted<S, Q: 'static, A>(
    run: impl Fn(&mut S, Q) -> A + Send + Clone + 'static,
    busy: std::sync::Arc<Busy>,
    count: fn(&Q) -> usize,
) -> impl Fn(&mut S, Q) -> A + Send + Clone + 'static {
    move |s, q| {
        busy.enter(count(&q));
        let a = run(s, q);
        busy.exit();
        a
    }
}

/// The wall time during which at least one lane was in a call, and the
/// items of the calls begun: with several calls in flight on one engine,
/// the union of their spans (not their sum) is what the engine spent.
#[derive(Debug, Default)]
pub(crate) struct Busy {
    state: std::sync::Mutex<BusyState>,
}

#[derive(Debug, Default)]
struct BusyState {
    active: usize,
    /// Since when the time is not yet counted, while `active > 0`.
    since: Option<std::time::Instant>,
    busy: std::time::Duration,
    items: u64,
    /// All busy time so far, never taken (`Stats::engine_busy`).
    total: std::time::Duration,
}

impl Busy {
    fn lock(&self) -> std::sync::MutexGuard<'_, BusyState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn enter(&self, items: usize) {
        let mut s = self.lock();
        if s.active == 0 {
            s.since = Some(std::time::Instant::now());
        }
        s.active += 1;
        s.items += items as u64;
    }

    pub(crate) fn exit(&self) {
        let mut s = self.lock();
        s.active = s.active.saturating_sub(1);
        if s.active == 0
            && let Some(t) = s.since.take()
        {
            let d = t.elapsed();
            s.busy += d;
            s.total += d;
        }
    }

    /// All busy time since the start, calls under way counted up to now.
    pub(crate) fn total(&self) -> std::time::Duration {
        let s = self.lock();
        s.total
            + s.since
                .filter(|_| s.active > 0)
                .map(|t| t.elapsed())
                .unwrap_or_default()
    }

    /// Busy time and items since the last take (calls under way count up
    /// to now, their items when they began).
    pub(crate) fn take(&self) -> (std::time::Duration, u64) {
        let mut s = self.lock();
        if s.active > 0 {
            let now = std::time::Instant::now();
            if let Some(t) = s.since.replace(now) {
                s.busy += now - t;
                s.total += now - t;
            }
        }
        let out = (s.busy, s.items);
        s.busy = std::time::Duration::ZERO;
        s.items = 0;
        out
    }
}

/// A request and where its answer goes.
type Work<Q, A> = (Q, Sender<A>);

/// `n` threads, each owning one state, answering requests in the order a
/// free lane takes them.
pub(crate) struct Lanes<Q: Send + 'static, A: Send + 'static> {
    /// One queue per lane; emptied on drop.
    tx: Vec<Sender<Work<Q, A>>>,
    threads: Vec<JoinHandle<()>>,
    /// Requests submitted so far: the next goes to lane `next % n`.
    next: std::sync::atomic::AtomicUsize,
}

impl<Q: Send + 'static, A: Send + 'static> std::fmt::Debug for Lanes<Q, A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lanes")
            .field("threads", &self.threads.len())
            .finish()
    }
}

impl<Q: Send + 'static, A: Send + 'static> Lanes<Q, A> {
    /// One thread per state, named `name-K`; `run` answers a request.
    pub(crate) fn new<S, F>(name: &str, states: Vec<S>, run: F) -> Result<Self>
    where
        S: Send + 'static,
        F: Fn(&mut S, Q) -> A + Send + Clone + 'static,
    {
        let mut threads = Vec::with_capacity(states.len());
        let mut txs = Vec::with_capacity(states.len());
        for (k, mut state) in states.into_iter().enumerate() {
            let (tx, rx) = unbounded::<Work<Q, A>>();
            txs.push(tx);
            let (rx, run): (Receiver<Work<Q, A>>, F) = (rx, run.clone());
            let t = std::thread::Builder::new()
                .name(format!("{name}-{k}"))
                .spawn(move || {
                    while let Ok((q, reply)) = rx.recv() {
                        // Nobody waiting (an abandoned ticket) is fine.
                        let _ = reply.send(run(&mut state, q));
                    }
                })
                .map_err(|e| Error::Worker(format!("cannot start a {name} thread: {e}")))?;
            threads.push(t);
        }
        Ok(Lanes {
            tx: txs,
            threads,
            next: Default::default(),
        })
    }

    /// Queue `q` for the next lane in turn (passing over lanes that died).
    pub(crate) fn submit(&self, q: Q) -> Ticket<A> {
        let first = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.send_from(q, first)
    }

    /// Queue `q` for the next in turn (`turn` counts) of this pool's lanes
    /// `among` (passing over lanes that died, among all of them): a kind
    /// of request kept off the lanes another kind holds up.
    pub(crate) fn submit_among(
        &self,
        q: Q,
        among: std::ops::Range<usize>,
        turn: &mut usize,
    ) -> Ticket<A> {
        let n = self.tx.len().max(1);
        let len = among.len().clamp(1, n);
        let first = among.start.min(n - 1) + *turn % len;
        *turn = turn.wrapping_add(1);
        self.send_from(q, first)
    }

    fn send_from(&self, q: Q, first: usize) -> Ticket<A> {
        let (reply, rx) = bounded(1);
        let n = self.tx.len();
        let mut work = (q, reply);
        for k in 0..n {
            match self.tx[(first + k) % n].send(work) {
                Ok(()) => break,
                // That lane exited (a panic): the next one. With none
                // left, the ticket answers `None`.
                Err(back) => work = back.0,
            }
        }
        Ticket { rx, got: None }
    }
}

impl<Q: Send + 'static, A: Send + 'static> Drop for Lanes<Q, A> {
    fn drop(&mut self) {
        // Closing the queues ends every lane after the work it holds.
        self.tx.clear();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The answer to one request, once a lane has given it.
#[derive(Debug)]
pub(crate) struct Ticket<A> {
    rx: Receiver<A>,
    got: Option<A>,
}

impl<A> Ticket<A> {
    /// Whether the answer is in (never blocks).
    pub(crate) fn ready(&mut self) -> bool {
        if self.got.is_none() {
            match self.rx.try_recv() {
                Ok(a) => self.got = Some(a),
                Err(TryRecvError::Empty) => return false,
                // The lane died (a panic): waiting is over, with no answer.
                Err(TryRecvError::Disconnected) => return true,
            }
        }
        true
    }

    /// The answer, waiting for it; `None` when the lane died first.
    pub(crate) fn wait(mut self) -> Option<A> {
        self.got.take().or_else(|| self.rx.recv().ok())
    }
}

#[cfg(test)]
mod tests {
    use super::{Busy, Lanes};

    #[test]
    fn busy_counts_the_union_of_overlapping_calls() {
        use std::time::{Duration, Instant};
        let b = Busy::default();
        assert_eq!(b.take(), (Duration::ZERO, 0));
        let start = Instant::now();
        b.enter(3);
        b.enter(2);
        std::thread::sleep(Duration::from_millis(20));
        b.exit();
        std::thread::sleep(Duration::from_millis(20));
        let t0 = Instant::now();
        let (mid, items) = b.take();
        let whole = start.elapsed();
        assert_eq!(items, 5);
        // One call or the other covered both sleeps: counted once (the
        // union), never as the two calls' summed time.
        assert!(mid >= Duration::from_millis(40), "{mid:?}");
        assert!(mid <= whole, "{mid:?} > {whole:?}");
        b.exit();
        let gap = t0.elapsed();
        std::thread::sleep(Duration::from_millis(20));
        // Idle time after the last call is not counted.
        let (idle, items) = b.take();
        assert_eq!(items, 0);
        assert!(idle <= gap, "{idle:?} > {gap:?}");
    }

    #[test]
    fn lanes_answer_every_request_and_survive_a_panic() {
        let lanes = Lanes::new("test", vec![0u32, 100], |s: &mut u32, q: u32| {
            assert!(q != 7, "lane panics on 7");
            *s += 1;
            q * 2
        })
        .unwrap();
        let mut tickets: Vec<_> = (0..20)
            .filter(|&q| q != 7)
            .map(|q| lanes.submit(q))
            .collect();
        let dead = lanes.submit(7);
        assert_eq!(dead.wait(), None);
        let mut first = tickets.remove(0);
        while !first.ready() {
            std::thread::yield_now();
        }
        assert_eq!(first.wait(), Some(0));
        // One lane died with the panic; the other answers the rest.
        let got: Vec<_> = tickets.into_iter().map(|t| t.wait()).collect();
        let want: Vec<_> = (1..20).filter(|&q| q != 7).map(|q| Some(q * 2)).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_kind_of_request_keeps_to_its_lanes() {
        // Each lane answers with its own index.
        let lanes =
            Lanes::new("test", vec![0usize, 1, 2, 3, 4], |s: &mut usize, _q: ()| *s).unwrap();
        let (mut a, mut b) = (0, 0);
        let got = |among: std::ops::Range<usize>, turn: &mut usize| {
            (0..6)
                .map(|_| lanes.submit_among((), among.clone(), turn).wait().unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(got(0..2, &mut a), [0, 1, 0, 1, 0, 1]);
        assert_eq!(got(2..5, &mut b), [2, 3, 4, 2, 3, 4]);
        // Ranges past the pool fall back on its lanes, never panic.
        let (mut c, mut d) = (0, 0);
        assert_eq!(got(7..9, &mut c), [4, 0, 4, 0, 4, 0]);
        assert_eq!(got(3..3, &mut d), [3, 3, 3, 3, 3, 3]);
    }
}
