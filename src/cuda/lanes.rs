//! Threads that run the device stage's decode calls off the batch thread
//! (issue 16, item 1): each lane owns its state (an nvJPEG engine decoder
//! with its stream, or the emulated device's CPU decoder) and answers each
//! request on a channel of its own, so that several batches decode at once
//! while the batch thread fills the next. Requests go to the lanes in
//! turn: the batch thread collects them in the same order, so the next
//! lane is the one most likely free, and every lane has worked (its
//! buffers grown) within the first few requests, not whenever timing
//! first picks it (tests/memory.rs: nothing grows after epoch 1). Where
//! the lanes' buffers follow sizes they share, an idle lane grows as soon
//! as another's call raised them ([`Tend`]), for pools whose lanes wait
//! epochs for a call.

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
/// "Latency-bound lanes"). The cost: each lane's buffers grow to the
/// lanes' largest call (counted in `Pipeline::memory()`), within
/// `PipelineBuilder::kernel_memory_limit` over the lanes.
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
    run: impl Fn(&mut S, &mut Q) -> A + Send + Clone + 'static,
    observe: Option<Observe>,
) -> impl Fn(&mut S, &mut Q) -> A + Send + Clone + 'static {
    observed_as(run, observe, CALL)
}

/// `run`, reporting each call to `observe` as `name`.
pub(crate) fn observed_as<S, Q, A>(
    run: impl Fn(&mut S, &mut Q) -> A + Send + Clone + 'static,
    observe: Option<Observe>,
    name: &'static str,
) -> impl Fn(&mut S, &mut Q) -> A + Send + Clone + 'static {
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
    run: impl Fn(&mut S, &mut Q) -> A + Send + Clone + 'static,
    busy: std::sync::Arc<Busy>,
    count: fn(&Q) -> usize,
) -> impl Fn(&mut S, &mut Q) -> A + Send + Clone + 'static {
    move |s, q| {
        busy.enter(count(q));
        // Left on drop, so that a call that panics does not count as
        // busy for ever (the automatic share would read the engine as
        // never free).
        let _in_call = InCall(&busy);
        run(s, q)
    }
}

/// A call under way in a [`Busy`]; dropping it ends the call.
struct InCall<'a>(&'a Busy);

impl Drop for InCall<'_> {
    fn drop(&mut self) {
        self.0.exit();
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

/// `grow` an idle lane's state ([`Tend`]); false where that panicked, and
/// the lane stops as after a call's panic (its state may be
/// half-updated), its device work waited for. A lane that stopped leaves
/// its state alone, so this is not called for it.
fn grow_idle<S, Q, A>(
    grow: fn(&mut S),
    state: &mut S,
    rescue: &Rescue<S, Q, A>,
    lane: &str,
) -> bool {
    use std::panic::{AssertUnwindSafe, catch_unwind};
    if catch_unwind(AssertUnwindSafe(|| grow(state))).is_ok() {
        return true;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| (rescue.settle)(state)));
    // A library's only voice here, as for a call's panic.
    eprintln!("gpufeed: {lane} stopped after a panic while growing its buffers");
    false
}

/// A request and where its answer goes.
type Work<Q, A> = (Q, Sender<A>);

/// What a lane pool does with a request whose call panicked.
///
/// A lane's call holds a batch's files; until session 53 a panic lost
/// them all (each came back as an error naming it, 10 files a run in
/// session 52's lease). Now the lane first makes the device finish what
/// the call had queued (`settle`), since another route will write the same
/// places, then answers the request with nothing decoded (`decline`): the
/// caller sends each file to the routes it uses for files a lane refuses
/// (CUDA, then the CPU). The lane then stops taking requests: its state may
/// be half-updated. Where `settle` fails, the device may still write
/// there, so the request is answered with nothing and its files fail with
/// an error, as before.
pub(crate) struct Rescue<S, Q, A> {
    /// Wait for the state's queued device work; false: it could not.
    pub(crate) settle: fn(&mut S) -> bool,
    /// The request answered with nothing done (run on a lane's thread).
    pub(crate) decline: std::sync::Arc<dyn Fn(Q) -> A + Send + Sync>,
}

impl<S, Q, A> Clone for Rescue<S, Q, A> {
    fn clone(&self) -> Self {
        Rescue {
            settle: self.settle,
            decline: self.decline.clone(),
        }
    }
}

/// How a pool's lanes keep their states grown to sizes they share, such
/// as the scan kernels' buffers to the lanes' largest call
/// (`prog_batch::Marks`): when a call changes the shared sizes' generation,
/// every other lane grows its state between its calls, at once, instead of
/// at its next call. A lane waited up to a few epochs for that call where
/// a call is a batch and batches are few (`tests/memory.rs`: 4 calls an
/// epoch on 6 lanes), so the decoders' memory grew for epochs (issue 16,
/// item 5).
pub(crate) struct Tend<S> {
    /// The shared sizes' generation, read from a state.
    pub(crate) generation: fn(&S) -> u64,
    /// Grow a state to the shared sizes (on its lane's thread, between
    /// calls; a failure is left for the next call to meet).
    pub(crate) grow: fn(&mut S),
}

/// `n` threads, each owning one state, answering requests in the order a
/// free lane takes them.
pub(crate) struct Lanes<Q: Send + 'static, A: Send + 'static> {
    /// One queue per lane; emptied on drop.
    tx: Vec<Sender<Work<Q, A>>>,
    /// Per lane: whether it stopped after a panic (it still declines what
    /// reaches it, until its queue closes).
    stopped: StopFlags,
    threads: Vec<JoinHandle<()>>,
    /// Requests submitted so far: the next goes to lane `next % n`.
    next: std::sync::atomic::AtomicUsize,
}

impl<Q: Send + 'static, A: Send + 'static> std::fmt::Debug for Lanes<Q, A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lanes")
            .field("threads", &self.threads.len())
            .field("stopped", &stopped(self.stopped.iter()))
            .finish()
    }
}

/// `GPUFEED_TEST_LANE_PANIC=N`, a test's fault (tests/faults.rs): every
/// decode lane, engine or scan kernels, CUDA or emulated, panics in its
/// `N`th call once the call's device work is queued (on the emulated
/// device, once its first file is in the arena), so that [`Rescue`] is
/// tested end to end: no file may be lost, and the places written before
/// the panic must be written again. Counts the call in `calls`; true
/// where this call is to panic. Never true unless set.
pub(crate) fn panics_now(calls: &mut usize) -> bool {
    static N: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    let n = *N.get_or_init(|| {
        std::env::var("GPUFEED_TEST_LANE_PANIC")
            .ok()
            .and_then(|v| v.parse().ok())
    });
    *calls += 1;
    n == Some(*calls)
}

/// Per lane of a pool, whether it stopped after a panic.
pub(crate) type StopFlags = std::sync::Arc<[std::sync::atomic::AtomicBool]>;

/// Some lanes of a pool (a range of its stop flags), for the workers'
/// routing: once none of them takes requests, files that would go there
/// go to the workers' own routes instead of to lanes that would only hand
/// them back to the batch thread.
#[derive(Debug, Clone)]
pub(crate) struct LaneSet {
    flags: StopFlags,
    range: std::ops::Range<usize>,
}

impl LaneSet {
    /// Lanes `range` of the pool whose flags are `flags`.
    pub(crate) fn new(flags: StopFlags, range: std::ops::Range<usize>) -> LaneSet {
        LaneSet { flags, range }
    }

    /// Every lane of the pool whose flags are `flags`.
    pub(crate) fn all(flags: StopFlags) -> LaneSet {
        let range = 0..flags.len();
        LaneSet { flags, range }
    }

    /// Whether any of them has not stopped.
    pub(crate) fn any_live(&self) -> bool {
        let set = self.flags.get(self.range.clone()).unwrap_or_default();
        stopped(set) < set.len() as u64
    }
}

/// How many of `flags`' lanes stopped (`Stats::lanes_stopped`).
pub(crate) fn stopped<'a>(
    flags: impl IntoIterator<Item = &'a std::sync::atomic::AtomicBool>,
) -> u64 {
    let stopped = |s: &&std::sync::atomic::AtomicBool| s.load(std::sync::atomic::Ordering::Acquire);
    flags.into_iter().filter(stopped).count() as u64
}

impl<Q: Send + 'static, A: Send + 'static> Lanes<Q, A> {
    /// One thread per state, named `name-K`; `run` answers a request, and
    /// `rescue` one whose call panicked.
    pub(crate) fn new<S, F>(
        name: &str,
        states: Vec<S>,
        run: F,
        rescue: Rescue<S, Q, A>,
    ) -> Result<Self>
    where
        S: Send + 'static,
        F: Fn(&mut S, &mut Q) -> A + Send + Clone + 'static,
    {
        Lanes::tended(name, states, run, rescue, None)
    }

    /// [`new`](Self::new), the states kept grown to what they share by
    /// `tend`.
    pub(crate) fn tended<S, F>(
        name: &str,
        states: Vec<S>,
        run: F,
        rescue: Rescue<S, Q, A>,
        tend: Option<Tend<S>>,
    ) -> Result<Self>
    where
        S: Send + 'static,
        F: Fn(&mut S, &mut Q) -> A + Send + Clone + 'static,
    {
        use std::panic::{AssertUnwindSafe, catch_unwind};
        use std::sync::atomic::{AtomicBool, Ordering};
        let mut threads = Vec::with_capacity(states.len());
        let mut txs = Vec::with_capacity(states.len());
        let stopped: StopFlags = states.iter().map(|_| AtomicBool::new(false)).collect();
        // One signal pending at most per lane: signals sent while one waits
        // ask for the same growth.
        let (bells, rings): (Vec<_>, Vec<_>) = states.iter().map(|_| bounded::<()>(1)).unzip();
        let bells: std::sync::Arc<[Sender<()>]> = bells.into();
        for ((k, mut state), ring) in states.into_iter().enumerate().zip(rings) {
            let (tx, rx) = unbounded::<Work<Q, A>>();
            txs.push(tx);
            let (run, rescue, stopped) = (run.clone(), rescue.clone(), stopped.clone());
            let (bells, tend) = (bells.clone(), tend.as_ref().map(|t| (t.generation, t.grow)));
            let lane = format!("{name}-{k}");
            let t = std::thread::Builder::new()
                .name(lane.clone())
                .spawn(move || {
                    let mut alive = true;
                    loop {
                        let work = match tend {
                            None => rx.recv(),
                            Some((_, grow)) => crossbeam_channel::select! {
                                recv(rx) -> work => work,
                                recv(ring) -> _ => {
                                    if alive {
                                        alive = grow_idle(grow, &mut state, &rescue, &lane);
                                        stopped[k].store(!alive, Ordering::Release);
                                    }
                                    continue;
                                }
                            },
                        };
                        let Ok((mut q, reply)) = work else { break };
                        // Nobody waiting (an abandoned ticket) is fine.
                        if !alive {
                            // Sent before the pool saw this lane stop.
                            if let Ok(a) = catch_unwind(AssertUnwindSafe(|| (rescue.decline)(q))) {
                                let _ = reply.send(a);
                            }
                            continue;
                        }
                        // Unwind safety: after a panic the state is used
                        // only by `settle`, which waits on its stream, and
                        // the request only by `decline`, which hands its
                        // files back.
                        let before = tend.map(|(generation, _)| generation(&state));
                        match catch_unwind(AssertUnwindSafe(|| run(&mut state, &mut q))) {
                            Ok(a) => {
                                if let Some((generation, _)) = tend
                                    && before != Some(generation(&state))
                                {
                                    for (j, bell) in bells.iter().enumerate() {
                                        if j != k {
                                            let _ = bell.try_send(());
                                        }
                                    }
                                }
                                let _ = reply.send(a);
                            }
                            Err(p) => {
                                alive = false;
                                stopped[k].store(true, Ordering::Release);
                                let settled = catch_unwind(AssertUnwindSafe(|| {
                                    (rescue.settle)(&mut state)
                                }))
                                .unwrap_or(false);
                                // A library's only voice here: the panic is
                                // a gpufeed bug, and this says what became
                                // of the files (the panic hook said where).
                                eprintln!(
                                    "gpufeed: {lane} stopped after a panic ({}); {}",
                                    crate::contain::message(p.as_ref()),
                                    if settled {
                                        "its call's files go to the other routes"
                                    } else {
                                        "its device work could not be waited for, so its call's files fail"
                                    }
                                );
                                if settled
                                    && let Ok(a) =
                                        catch_unwind(AssertUnwindSafe(|| (rescue.decline)(q)))
                                {
                                    let _ = reply.send(a);
                                }
                            }
                        }
                    }
                })
                .map_err(|e| Error::Worker(format!("cannot start a {name} thread: {e}")))?;
            threads.push(t);
        }
        Ok(Lanes {
            tx: txs,
            stopped,
            threads,
            next: Default::default(),
        })
    }

    /// How many lanes stopped after a panic.
    #[cfg(test)]
    fn stopped(&self) -> u64 {
        stopped(self.stopped.iter())
    }

    /// Per lane, whether it stopped after a panic (read with [`stopped`]).
    pub(crate) fn stop_flags(&self) -> StopFlags {
        self.stopped.clone()
    }

    /// Queue `q` for the next lane in turn (passing over lanes that
    /// stopped).
    pub(crate) fn submit(&self, q: Q) -> Ticket<A> {
        let first = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.send_from(q, first)
    }

    /// Queue `q` for the next in turn (`turn` counts) of this pool's lanes
    /// `among` (passing over lanes that stopped, among all of them): a
    /// kind of request kept off the lanes another kind holds up.
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

    /// To the first live lane from `first` on; with none live, to `first`,
    /// whose thread declines it (the caller then decodes its files on its
    /// other routes).
    fn send_from(&self, q: Q, first: usize) -> Ticket<A> {
        let (reply, rx) = bounded(1);
        let n = self.tx.len();
        if n > 0 {
            let k = (0..n)
                .map(|k| (first + k) % n)
                .find(|&k| !self.stopped[k].load(std::sync::atomic::Ordering::Acquire))
                .unwrap_or(first % n);
            // A failed send (the thread is gone) drops the reply: the
            // ticket answers `None`.
            let _ = self.tx[k].send((q, reply));
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
                // No answer will come (a panicked call whose device work
                // could not be waited for, or the lane's thread is gone).
                Err(TryRecvError::Disconnected) => return true,
            }
        }
        true
    }

    /// The answer, waiting for it; `None` when none will come (see
    /// [`Rescue`]).
    pub(crate) fn wait(mut self) -> Option<A> {
        self.got.take().or_else(|| self.rx.recv().ok())
    }
}

#[cfg(test)]
mod tests;
