//! Sample order: one permutation per epoch, sharded over ranks.
//!
//! The order is a pure function of `(seed, epoch, len, rank, world_size,
//! mode)`; nothing about threads or timing enters it. Sharding follows
//! PyTorch's `DistributedSampler`: the epoch permutation is made divisible by
//! the world size (by padding or dropping, see [`ShardMode`]) and rank `r`
//! takes positions `r, r + w, r + 2w, ...`.
//!
//! WebDataset shards can instead be streamed ([`Sampler::stream_shards`],
//! issue 18): each rank reads its own shards front to back, in an order
//! shuffled per epoch, through a shuffle buffer, as WebDataset's
//! `shardshuffle` + `shuffle(n)` do, so that reads are sequential.

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};

use crate::error::{Error, Result};

/// How a dataset that does not divide evenly over the ranks is shared out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ShardMode {
    /// `DistributedSampler(drop_last=False)`: the permutation is padded with
    /// its own first elements up to a multiple of the world size. Every
    /// sample is seen at least once per epoch; the `len % world` padding
    /// samples are seen twice. All ranks get the same count, so collective
    /// ops in the training step never wait on a rank that has run out.
    #[default]
    Pad,
    /// `DistributedSampler(drop_last=True)`: the permutation's tail is cut to
    /// a multiple of the world size. Every kept sample is seen exactly once;
    /// `len % world` samples (different ones each epoch) are skipped.
    Drop,
    /// No padding or dropping: every sample exactly once per epoch over all
    /// ranks, but ranks may differ by one sample.
    Uneven,
}

/// Decides which samples a rank visits in which order.
#[derive(Debug, Clone)]
pub struct Sampler {
    len: usize,
    seed: u64,
    shuffle: bool,
    rank: usize,
    world_size: usize,
    mode: ShardMode,
    /// Streaming order over shards, when asked for.
    stream: Option<Stream>,
}

/// The streaming order's shards and buffer.
#[derive(Debug, Clone)]
struct Stream {
    /// Per shard, its first sample and sample count (contiguous, in
    /// shard order).
    shards: std::sync::Arc<Vec<(u32, u32)>>,
    buffer: usize,
}

impl Sampler {
    /// A sampler over `len` samples for `rank` of `world_size`.
    pub fn new(
        len: usize,
        seed: u64,
        shuffle: bool,
        rank: usize,
        world_size: usize,
        mode: ShardMode,
    ) -> Result<Sampler> {
        if world_size == 0 || rank >= world_size {
            return Err(Error::Config(format!(
                "shard rank {rank} of world size {world_size}"
            )));
        }
        if len == 0 {
            return Err(Error::Config("no samples to draw from".into()));
        }
        if len > u32::MAX as usize {
            return Err(Error::Config(format!(
                "{len} samples: at most 2^32-1 supported"
            )));
        }
        Ok(Sampler {
            len,
            seed,
            shuffle,
            rank,
            world_size,
            mode,
            stream: None,
        })
    }

    /// Stream shards instead of permuting samples: `shard_sizes[k]`
    /// samples of shard `k` follow each other in the source. Rank `r`
    /// reads shards `r, r + w, r + 2w, ...`, each front to back, in an
    /// order shuffled per `(seed, epoch)`, and the samples pass through a
    /// shuffle buffer of `buffer` samples (a draw from the buffer is
    /// replaced by the next sample read; the rest drain in random order),
    /// so an epoch reads each shard sequentially while samples `buffer`
    /// apart are mixed. Without shuffling, shards and samples keep their
    /// order. [`ShardMode::Pad`] repeats the rank's own first samples up to
    /// the largest rank's count, [`ShardMode::Drop`] cuts to the smallest,
    /// so that every rank runs the same number of steps; `Uneven` keeps
    /// each rank's count.
    pub fn stream_shards(mut self, shard_sizes: &[u32], buffer: usize) -> Result<Sampler> {
        let total: u64 = shard_sizes.iter().map(|&n| u64::from(n)).sum();
        if total != self.len as u64 {
            return Err(Error::Config(format!(
                "shard sizes add up to {total} samples, the source has {}",
                self.len
            )));
        }
        if shard_sizes.len() < self.world_size {
            return Err(Error::Config(format!(
                "streaming {} shard(s) over {} ranks: every rank needs a shard of its own",
                shard_sizes.len(),
                self.world_size
            )));
        }
        if buffer == 0 {
            return Err(Error::Config(
                "a shuffle buffer holds at least 1 sample".into(),
            ));
        }
        let mut start = 0u32;
        let shards = shard_sizes
            .iter()
            .map(|&n| {
                let s = (start, n);
                start += n;
                s
            })
            .collect();
        let stream = Stream {
            shards: std::sync::Arc::new(shards),
            buffer,
        };
        if let Some(r) = self.stream_counts(&stream).iter().position(|&n| n == 0) {
            return Err(Error::Config(format!(
                "streaming shards over {} ranks: rank {r}'s shards hold no samples",
                self.world_size
            )));
        }
        self.stream = Some(stream);
        Ok(self)
    }

    /// Samples each rank streams per epoch, before padding or dropping.
    fn stream_counts(&self, s: &Stream) -> Vec<usize> {
        let mut counts = vec![0usize; self.world_size];
        for (k, &(_, n)) in s.shards.iter().enumerate() {
            counts[k % self.world_size] += n as usize;
        }
        counts
    }

    /// This rank's streamed order for `epoch`, before padding or dropping.
    fn stream_order(&self, s: &Stream, epoch: u64) -> Vec<u32> {
        let mut mine: Vec<usize> = (self.rank..s.shards.len())
            .step_by(self.world_size)
            .collect();
        let samples = |shards: &[usize]| -> Vec<u32> {
            shards
                .iter()
                .flat_map(|&k| {
                    let (first, n) = s.shards[k];
                    first..first + n
                })
                .collect()
        };
        if !self.shuffle {
            return samples(&mine);
        }
        let mut rng = ChaCha8Rng::from_seed(seed_bytes(self.seed, epoch, u64::MAX, 1));
        for i in (1..mine.len()).rev() {
            let j = uniform_below(&mut rng, i as u64 + 1) as usize;
            mine.swap(i, j);
        }
        let mut out = Vec::new();
        let mut buffer: Vec<u32> = Vec::with_capacity(s.buffer);
        for x in samples(&mine) {
            if buffer.len() < s.buffer {
                buffer.push(x);
                continue;
            }
            let j = uniform_below(&mut rng, buffer.len() as u64) as usize;
            out.push(std::mem::replace(&mut buffer[j], x));
        }
        while !buffer.is_empty() {
            let j = uniform_below(&mut rng, buffer.len() as u64) as usize;
            out.push(buffer.swap_remove(j));
        }
        out
    }

    /// Number of positions this rank visits per epoch.
    pub fn len_for_rank(&self) -> usize {
        if let Some(s) = &self.stream {
            let counts = self.stream_counts(s);
            return match self.mode {
                ShardMode::Pad => counts.iter().copied().max().unwrap_or(0),
                ShardMode::Drop => counts.iter().copied().min().unwrap_or(0),
                ShardMode::Uneven => counts[self.rank],
            };
        }
        let (n, w) = (self.len, self.world_size);
        match self.mode {
            ShardMode::Pad => n.div_ceil(w),
            ShardMode::Drop => n / w,
            ShardMode::Uneven => n / w + usize::from(self.rank < n % w),
        }
    }

    /// The whole dataset's order for `epoch` (before sharding): a uniform
    /// permutation of `0..len` from a Fisher–Yates shuffle driven by ChaCha8
    /// seeded with `(seed, epoch)`, or the identity without shuffling.
    pub fn permutation(&self, epoch: u64) -> Vec<u32> {
        let mut order: Vec<u32> = (0..self.len as u32).collect();
        if self.shuffle {
            let mut rng = ChaCha8Rng::from_seed(seed_bytes(self.seed, epoch, u64::MAX, 0));
            for i in (1..order.len()).rev() {
                let j = uniform_below(&mut rng, i as u64 + 1) as usize;
                order.swap(i, j);
            }
        }
        order
    }

    /// The sample indices this rank visits in `epoch`, in order.
    pub fn indices(&self, epoch: u64) -> Vec<u32> {
        if let Some(s) = &self.stream {
            let mut order = self.stream_order(s, epoch);
            let want = self.len_for_rank();
            // Padding repeats the rank's own order from its start, as often
            // as needed (a rank with one small shard beside large ones).
            let own = order.len();
            for i in 0..want.saturating_sub(own) {
                order.push(order[i % own]);
            }
            order.truncate(want);
            return order;
        }
        let perm = self.permutation(epoch);
        let (w, r) = (self.world_size, self.rank);
        let total = self.len_for_rank() * w;
        match self.mode {
            ShardMode::Uneven => perm.into_iter().skip(r).step_by(w).collect(),
            ShardMode::Drop | ShardMode::Pad => {
                // Padding wraps around the permutation as often as needed
                // (more than once when len < world_size), as PyTorch does.
                (0..total)
                    .skip(r)
                    .step_by(w)
                    .map(|p| perm[p % perm.len()])
                    .collect()
            }
        }
    }
}

/// 32 seed bytes from four words, each spread by SplitMix64 so that nearby
/// seeds, epochs, indices and streams give unrelated ChaCha streams.
pub(crate) fn seed_bytes(seed: u64, epoch: u64, index: u64, stream: u64) -> [u8; 32] {
    let mut out = [0u8; 32];
    let mut state = seed;
    let words = [
        splitmix(&mut state),
        epoch,
        index,
        0x6770_7566_6565_6421 ^ stream,
    ];
    for (chunk, w) in out.chunks_exact_mut(8).zip(words) {
        state ^= w;
        chunk.copy_from_slice(&splitmix(&mut state).to_le_bytes());
    }
    out
}

pub(crate) fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A uniform draw in `[0, 1)` with 53 random bits (the augment draws).
pub(crate) fn unit(rng: &mut ChaCha8Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// A uniform draw in `[lo, hi)`.
pub(crate) fn uniform(rng: &mut ChaCha8Rng, lo: f64, hi: f64) -> f64 {
    lo + (hi - lo) * unit(rng)
}

/// Uniform integer in `0..n` without modulo bias (Lemire's method with
/// rejection), written out so the order never depends on a crate version.
pub(crate) fn uniform_below(rng: &mut ChaCha8Rng, n: u64) -> u64 {
    let threshold = n.wrapping_neg() % n;
    loop {
        let m = (rng.next_u64() as u128) * (n as u128);
        if (m as u64) >= threshold {
            return (m >> 64) as u64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutation_is_uniform_enough() {
        // Position of element 0 over many epochs of a 4-element shuffle:
        // each position should get about a quarter.
        let s = Sampler::new(4, 7, true, 0, 1, ShardMode::Pad).unwrap();
        let mut counts = [0u32; 4];
        for e in 0..4000 {
            let p = s.permutation(e);
            counts[p.iter().position(|&x| x == 0).unwrap()] += 1;
        }
        for c in counts {
            assert!((850..1150).contains(&c), "{counts:?}");
        }
    }

    /// Streaming: every rank reads whole shards of its own, front to back
    /// (buffer 1); a buffer mixes them; Pad and Drop equalise the counts;
    /// orders are a pure function of the seed.
    #[test]
    fn streaming_reads_shards_in_order_through_the_buffer() {
        let sizes = [5u32, 3, 4, 2, 6];
        let base = |mode| Sampler::new(20, 9, true, 0, 1, mode).unwrap();
        let one = base(ShardMode::Pad).stream_shards(&sizes, 1).unwrap();
        // Buffer 1: shards front to back, shard order shuffled.
        let order = one.indices(4);
        let starts = [0u32, 5, 8, 12, 14];
        let mut at = 0;
        while at < order.len() {
            let k = starts.iter().position(|&s| s == order[at]).unwrap();
            let n = sizes[k] as usize;
            let want: Vec<u32> = (starts[k]..starts[k] + n as u32).collect();
            assert_eq!(order[at..at + n], want[..], "{order:?}");
            at += n;
        }
        assert_ne!(one.indices(4), one.indices(5), "shard order per epoch");
        let buffered = base(ShardMode::Pad).stream_shards(&sizes, 4).unwrap();
        let o = buffered.indices(2);
        let mut sorted = o.clone();
        sorted.sort();
        assert_eq!(sorted, (0..20).collect::<Vec<u32>>());
        assert_eq!(o, buffered.indices(2));
        let plain = Sampler::new(20, 9, false, 0, 1, ShardMode::Pad)
            .unwrap()
            .stream_shards(&sizes, 4)
            .unwrap();
        assert_eq!(plain.indices(0), (0..20).collect::<Vec<u32>>());
        // Two ranks: shards 0, 2, 4 (15 samples) and 1, 3 (5).
        for (mode, want) in [
            (ShardMode::Pad, [15, 15]),
            (ShardMode::Drop, [5, 5]),
            (ShardMode::Uneven, [15, 5]),
        ] {
            let mut seen = Vec::new();
            for (rank, &n) in want.iter().enumerate() {
                let s = Sampler::new(20, 9, true, rank, 2, mode)
                    .unwrap()
                    .stream_shards(&sizes, 3)
                    .unwrap();
                let ix = s.indices(1);
                assert_eq!(ix.len(), n, "{mode:?}");
                assert_eq!(s.len_for_rank(), n);
                let shard_of = |x: u32| starts.iter().rposition(|&st| st <= x).unwrap();
                assert!(ix.iter().all(|&x| shard_of(x) % 2 == rank), "{ix:?}");
                seen.extend(ix);
            }
            if mode == ShardMode::Uneven {
                seen.sort();
                assert_eq!(seen, (0..20).collect::<Vec<u32>>());
            }
        }
        assert!(base(ShardMode::Pad).stream_shards(&[5, 3], 4).is_err());
        assert!(base(ShardMode::Pad).stream_shards(&[20, 0], 4).is_ok());
        assert!(
            Sampler::new(20, 9, true, 1, 2, ShardMode::Pad)
                .unwrap()
                .stream_shards(&[20, 0], 4)
                .is_err(),
            "a rank whose shards are empty"
        );
        assert!(
            Sampler::new(20, 9, true, 0, 6, ShardMode::Pad)
                .unwrap()
                .stream_shards(&sizes, 4)
                .is_err()
        );
    }

    #[test]
    fn no_shuffle_is_identity() {
        let s = Sampler::new(5, 7, false, 0, 1, ShardMode::Pad).unwrap();
        assert_eq!(s.indices(3), vec![0, 1, 2, 3, 4]);
    }
}
