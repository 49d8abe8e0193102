//! Shards in object storage read in the streaming order
//! (`PipelineBuilder::stream_shards`, issue 18): sequential chunks instead
//! of a request per sample.
//!
//! In the streaming order a rank reads its shards front to back and a
//! shuffle buffer of `b` samples mixes them, so the samples asked for at
//! any moment lie within about `b` samples of the read position. Readers
//! therefore fetch whole [`CHUNK`]s and keep the most recent ones, enough
//! to cover the buffer's span: one request per 8 MiB instead of one per
//! 100 kB sample, the shape object stores serve fastest. A chunk being
//! fetched is waited for, not fetched twice. A member that crosses a
//! chunk boundary is fetched on its own, and so is one whose chunk was
//! already dropped this epoch: a shuffle buffer keeps some samples far
//! longer than its size (a sample stays more than 3 buffers' worth of
//! draws with probability e^-3), and fetching 8 MiB again for each of
//! them would read the shard many times over. When a reader takes a
//! chunk, the next [`AHEAD`] chunks of the shard are fetched in the
//! background, so the readers rarely wait at the edge of what is read.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use bytes::Bytes;

use super::{Fetched, Store};
use crate::error::SampleError;

/// Bytes per chunk.
pub(crate) const CHUNK: u64 = 8 << 20;

/// Chunks fetched ahead of the one a reader takes.
pub(crate) const AHEAD: u64 = 2;

/// A chunk's bytes, and whether someone is fetching them.
#[derive(Default)]
enum State {
    #[default]
    Empty,
    Loading,
    Ready(Bytes),
}

/// One chunk: its state, and a condition signalled when a fetch ends.
#[derive(Default)]
pub(crate) struct SlotInner {
    state: Mutex<State>,
    done: Condvar,
}

type Slot = Arc<SlotInner>;

impl SlotInner {
    /// Mark the slot loading if nobody holds or fetches it; whether this
    /// caller is to fetch it.
    fn claim(&self) -> bool {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if matches!(*st, State::Empty) {
            *st = State::Loading;
            true
        } else {
            false
        }
    }

    /// End a fetch (claimed first): the bytes, or empty again.
    fn finish(&self, bytes: Option<Bytes>) {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        *st = bytes.map_or(State::Empty, State::Ready);
        self.done.notify_all();
    }

    /// The bytes, waiting while someone fetches them; `None` when the
    /// slot is empty (the caller claims and fetches).
    fn wait(&self) -> Option<Bytes> {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            match &*st {
                State::Ready(b) => return Some(b.clone()),
                State::Empty => return None,
                State::Loading => {
                    st = self.done.wait(st).unwrap_or_else(PoisonError::into_inner);
                }
            }
        }
    }
}

/// A chunk of one epoch's pass: `(epoch, shard, chunk)`.
type Key = (u64, u32, u64);

/// The slots held, their keys oldest first, and the keys dropped.
#[derive(Default)]
struct Held {
    slots: HashMap<Key, Slot>,
    order: VecDeque<Key>,
    dropped: HashSet<Key>,
}

/// The most recent chunks, oldest first out.
pub(crate) struct Chunks {
    held: Mutex<Held>,
    capacity: usize,
}

impl Chunks {
    /// Room for `capacity` chunks (at least 2).
    pub(crate) fn new(capacity: usize) -> Chunks {
        Chunks {
            held: Mutex::new(Held::default()),
            capacity: capacity.max(2),
        }
    }

    /// The slot of chunk `key`, new (and empty) if not held; `None` when
    /// it was held this epoch and dropped since. The oldest chunk goes
    /// when there are too many (a reader still using it keeps its own
    /// reference); what was dropped in epochs before the last is
    /// forgotten.
    fn slot(&self, key: Key) -> Option<Slot> {
        let mut g = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = g.slots.get(&key) {
            return Some(s.clone());
        }
        if g.dropped.contains(&key) {
            return None;
        }
        let s = Slot::default();
        g.slots.insert(key, s.clone());
        g.order.push_back(key);
        while g.order.len() > self.capacity {
            if let Some(old) = g.order.pop_front() {
                g.slots.remove(&old);
                g.dropped.insert(old);
            }
        }
        let epoch = key.0;
        g.dropped.retain(|k| k.0 + 1 >= epoch);
        Some(s)
    }
}

/// At most this many chunks are kept (1 GiB): a larger buffer's late
/// samples are fetched alone more often instead.
pub(crate) const MAX_CHUNKS: usize = 128;

/// Chunks to keep for a shuffle buffer of `buffer` samples of `mean`
/// bytes read by `readers` threads: three times the buffer's span (a
/// sample outlives that with probability e^-3, 5 %, and is then fetched
/// alone), plus the chunks the readers are fetching or fetching ahead,
/// plus one; at most [`MAX_CHUNKS`], beyond what the readers hold.
pub(crate) fn capacity(buffer: usize, mean: u64, readers: usize) -> usize {
    let span = (buffer as u64).saturating_mul(mean).div_ceil(CHUNK) as usize;
    let moving = readers * (1 + AHEAD as usize) + 1;
    (3 * span).min(MAX_CHUNKS) + moving
}

impl Store {
    /// [`Store::read_many`] for the streaming order of `epoch`: members
    /// inside one chunk come from the chunk (fetched once, kept in
    /// `chunks`), the others are fetched on their own.
    pub(crate) fn read_streamed(
        &self,
        epoch: u64,
        reqs: &[(u32, u64, u64)],
        capacity: usize,
    ) -> Fetched {
        let chunks = self.chunks.get_or_init(|| Chunks::new(capacity));
        let retries = AtomicU64::new(0);
        let mut requests = 0;
        let mut results: Vec<Option<Result<Bytes, SampleError>>> =
            (0..reqs.len()).map(|_| None).collect();
        let mut alone = Vec::new();
        for (i, &(shard, offset, len)) in reqs.iter().enumerate() {
            let c = offset / CHUNK;
            if len == 0 || (offset + len - 1) / CHUNK != c {
                alone.push(i);
                continue;
            }
            let Some(slot) = chunks.slot((epoch, shard, c)) else {
                alone.push(i);
                continue;
            };
            let chunk_range = |c: u64| c * CHUNK..((c + 1) * CHUNK).min(self.size(shard));
            // Fetch ahead: the next chunks of this shard, in the
            // background, where nobody has yet.
            for next in c + 1..=c + AHEAD {
                if next * CHUNK >= self.size(shard) {
                    break;
                }
                if let Some(ahead) = chunks.slot((epoch, shard, next))
                    && ahead.claim()
                {
                    requests += 1;
                    self.spawn_fetch(shard, chunk_range(next), move |b| ahead.finish(b));
                }
            }
            let bytes = loop {
                if let Some(b) = slot.wait() {
                    break Ok(b);
                }
                if slot.claim() {
                    requests += 1;
                    match self.block_on(self.fetch(shard, chunk_range(c), &retries)) {
                        Ok(b) => {
                            slot.finish(Some(b.clone()));
                            break Ok(b);
                        }
                        Err(e) => {
                            slot.finish(None);
                            break Err(e);
                        }
                    }
                }
            };
            let start = (offset - c * CHUNK) as usize;
            results[i] = Some(bytes.map(|b| b.slice(start..start + len as usize)));
        }
        if !alone.is_empty() {
            let asked: Vec<_> = alone.iter().map(|&i| reqs[i]).collect();
            let got = self.read_many(&asked);
            requests += got.requests;
            for (&i, r) in alone.iter().zip(got.results) {
                results[i] = Some(r);
            }
            retries.fetch_add(got.retries, std::sync::atomic::Ordering::Relaxed);
        }
        Fetched {
            results: results
                .into_iter()
                .map(|r| r.unwrap_or_else(|| Err(SampleError::Corrupt("no answer".into()))))
                .collect(),
            requests,
            retries: retries.into_inner(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_covers_the_buffer() {
        // 1000 samples of 110 kB: 14 chunks of span; 2 readers each
        // taking one and fetching 2 ahead; 1.
        assert_eq!(capacity(1000, 110_000, 2), 3 * 14 + 6 + 1);
        assert_eq!(capacity(1, 1, 1), 3 + 3 + 1);
        // 100,000 samples: capped at 1 GiB.
        assert_eq!(capacity(100_000, 110_000, 2), MAX_CHUNKS + 6 + 1);
    }

    #[test]
    fn the_oldest_chunk_goes_first_and_is_not_fetched_again() {
        let c = Chunks::new(2);
        let a = c.slot((0, 0, 0)).unwrap();
        assert!(a.claim() && !a.claim(), "one fetcher");
        a.finish(Some(Bytes::from_static(b"a")));
        assert!(c.slot((0, 0, 0)).unwrap().wait().is_some(), "held");
        c.slot((0, 0, 1));
        c.slot((0, 1, 0));
        assert!(
            c.slot((0, 0, 0)).is_none(),
            "dropped this epoch: fetch alone"
        );
        // A reader's own reference outlives the eviction.
        assert!(a.wait().is_some());
        // The next epoch reads the shard again, from its start.
        assert!(c.slot((1, 0, 0)).is_some());
        c.slot((2, 0, 0));
        c.slot((3, 0, 0));
        let dropped = c.held.lock().unwrap().dropped.clone();
        assert!(dropped.iter().all(|k| k.0 >= 2), "{dropped:?}");
    }
}
