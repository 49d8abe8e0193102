//! Sample order: one permutation per epoch, sharded over ranks.
//!
//! The order is a pure function of `(seed, epoch, len, rank, world_size,
//! mode)`; nothing about threads or timing enters it. Sharding follows
//! PyTorch's `DistributedSampler`: the epoch permutation is made divisible by
//! the world size (by padding or dropping, see [`ShardMode`]) and rank `r`
//! takes positions `r, r + w, r + 2w, ...`.

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
        })
    }

    /// Number of positions this rank visits per epoch.
    pub fn len_for_rank(&self) -> usize {
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

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
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

    #[test]
    fn no_shuffle_is_identity() {
        let s = Sampler::new(5, 7, false, 0, 1, ShardMode::Pad).unwrap();
        assert_eq!(s.indices(3), vec![0, 1, 2, 3, 4]);
    }
}
