//! The split kernels' host side (`kernels/progressive.cu`, "Split
//! decoding", issue 16, item 3c): how large a subsequence is and how many
//! rounds resynchronise it, which chains of a launch are split, the
//! kernels' parameters and queueing, and how they fared.

use super::super::jpeg_desc::{GfChain, GfScan, GfSplit, SYNC_BYTES};
use super::{Launch, SCAN_STATUS};
use crate::error::{Error, Result};

/// Bytes of a subsequence of a split sequential scan (progressive.cu's
/// "Split decoding"): `GPUFEED_SCAN_SPLIT` (0: no splitting; at least 64
/// otherwise), else 256. Smaller runs more threads per image, each
/// shorter, but a guess has fewer symbols to resynchronise in before its
/// subsequence ends (then a round decodes it again, or the check does,
/// in order). On an H200 (0d15f52, `gpufeed progressive-bench
/// --sequential`, imagenet-size's sequential photos, batch 256): 4.7 ms
/// at 256 bytes, 9.3 at 1024, 31.3 at 4096, 49.1 unsplit; through the
/// pipeline (4bbffad, share 0, no progressive lanes) 19,800-30,000 img/s
/// at 256 bytes against 15,400-18,700 at 1024 (docs/BENCHMARKS.md).
pub(crate) fn split_bytes() -> u32 {
    std::env::var("GPUFEED_SCAN_SPLIT")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&b: &u32| b == 0 || b >= 64)
        .unwrap_or(256)
}

/// Rounds of `gf_split_round`: a guess that had not resynchronised by
/// its subsequence's end costs two, the next one too. What is still out
/// of step after the last round, `gf_split_check` decodes again one
/// subsequence after another, on the chain's one thread; until session 48
/// such a chain went whole to one thread (`gf_progressive`), seconds of
/// GPU time for a megapixel photo: at 256 bytes and 8 rounds that left 8
/// of the 288 sequential photos of imagenet-size and full to one thread
/// on the emulated device, and `photos/full` ran at 756 img/s through the
/// pipeline on an H200 (4bbffad) against 5,860 at the default route, a
/// batch waiting for its slowest chain. A round in which nothing changes
/// copies each record once. How many subsequences the check redoes at
/// each count of rounds: tests/progressive.rs,
/// `emu_split_scans_equal_libjpeg_turbo`.
pub(crate) const SPLIT_ROUNDS: u32 = 16;

/// [`SPLIT_ROUNDS`], or `GPUFEED_SPLIT_ROUNDS` (0 to 256; 0: the check
/// alone): a diagnostic.
pub(crate) fn split_rounds() -> u32 {
    std::env::var("GPUFEED_SPLIT_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|r: &u32| *r <= 256)
        .unwrap_or(SPLIT_ROUNDS)
}

impl Launch {
    /// The split kernels' subsequences of the chains as they are now
    /// ordered: chain c owns `[first[c], first[c + 1])`, none unless it is
    /// one sequential scan of at least two subsequences of `sub_bytes` (0:
    /// none split), without restart markers or with at least two
    /// intervals (since session 50). A thread decodes at least one whole
    /// interval, in its guess and again as it writes: a scan of one
    /// interval would take one thread twice as long as `gf_progressive`.
    pub(crate) fn split(&self, sub_bytes: u32) -> Vec<u32> {
        let intervals = |c: &GfChain, s: &GfScan| -> u64 {
            let mcus = match (s.comps, c.comp.get(usize::from(s.comp[0]))) {
                (1, Some(g)) => u64::from(g.bw) * u64::from(g.bh),
                _ => u64::from(c.mcus_x) * u64::from(c.mcus_y),
            };
            mcus.div_ceil(u64::from(s.restart.max(1)))
        };
        let mut first = Vec::with_capacity(self.chains.len() + 1);
        let mut at = 0u32;
        first.push(at);
        for c in &self.chains {
            let s = (c.scans == 1)
                .then(|| &self.scans[c.first_scan as usize])
                .filter(|s| s.ss == 0 && s.se == 63 && s.ah == 0 && s.al == 0)
                .filter(|s| s.restart == 0 || intervals(c, s) >= 2);
            let subs = match (s, sub_bytes) {
                (Some(s), 1..) => s.length.div_ceil(sub_bytes),
                _ => 0,
            };
            if subs >= 2 {
                at += subs;
            }
            first.push(at);
        }
        first
    }
}

/// The split kernels' parameters for a launch of `n` chains, `n_scans`
/// scans and `n_tables` tables at these device (or, emulated, host)
/// addresses, its subsequences of `sub_bytes` as `sub_first` (from
/// [`Launch::split`]), and `rounds` of `gf_split_round` ([`split_rounds`]).
pub(crate) fn split_params(
    (chains, scans, tables, sub_first, sync, status): (u64, u64, u64, u64, u64, u64),
    (n, n_scans, n_tables, n_subs): (u32, u32, u32, u32),
    (sub_bytes, rounds): (u32, u32),
) -> GfSplit {
    GfSplit {
        chains,
        scans,
        tables,
        sub_first,
        sync,
        status,
        n,
        n_scans,
        n_tables,
        n_subs,
        sub_bytes,
        rounds,
    }
}

/// Bytes of `GfSync` scratch that `subs` subsequences need (two records
/// each: the rounds read one and write the other).
pub(crate) fn sync_bytes(subs: u32) -> usize {
    2 * subs as usize * SYNC_BYTES
}

/// Queue the split kernels (`k`: guess, round, check, write) for `p` on
/// `s`. The statuses must be zero before; `gf_progressive` must follow.
pub(crate) fn queue_split(
    s: &std::sync::Arc<cudarc::driver::CudaStream>,
    k: &[cudarc::driver::CudaFunction; 4],
    p: &GfSplit,
) -> Result<()> {
    use cudarc::driver::{LaunchConfig, PushKernelArg};
    if p.n_subs == 0 {
        return Ok(());
    }
    let over = |n: u32| LaunchConfig {
        grid_dim: (n.div_ceil(32).max(1), 1, 1),
        block_dim: (32, 1, 1),
        shared_mem_bytes: 0,
    };
    let fail = Error::cuda("kernel launch");
    let mut b = s.launch_builder(&k[0]);
    b.arg(p);
    // SAFETY: (this launch and the three below) the signature is (GfSplit), or
    // (GfSplit, u32) for the rounds; `p`'s addresses are the caller's
    // device buffers (descriptor lists, `n + 1` sub_first, `2 * n_subs`
    // GfSync records, `n` zeroed statuses), kept until the caller has
    // waited for the stream; the kernels check every index against the
    // counts in `p`.
    unsafe { b.launch(over(p.n_subs)) }.map_err(&fail)?;
    for r in 0..p.rounds {
        let mut b = s.launch_builder(&k[1]);
        b.arg(p);
        b.arg(&r);
        // SAFETY: as above.
        unsafe { b.launch(over(p.n_subs)) }.map_err(&fail)?;
    }
    let mut b = s.launch_builder(&k[2]);
    b.arg(p);
    // SAFETY: as above.
    unsafe { b.launch(over(p.n)) }.map_err(&fail)?;
    let mut b = s.launch_builder(&k[3]);
    b.arg(p);
    // SAFETY: as above.
    unsafe { b.launch(over(p.n_subs)) }.map_err(&fail)?;
    Ok(())
}

/// How the split kernels fared on one file: chains they split, of
/// those, chains they decoded or found a fault in (the rest went to one
/// thread each), and the subsequences that `gf_split_check` decoded again
/// one after another because the rounds had left them out of step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SplitCount {
    /// Chains split into subsequences.
    pub split: u32,
    /// Split chains the split kernels decoded (a fault they met counts).
    pub synced: u32,
    /// Of those, chains whose fault they met: its status is theirs, no
    /// thread decoded the chain again to name it (since session 49).
    pub faults: u32,
    /// Subsequences the check decoded again, over all chains.
    pub redone: u32,
    /// The most of them in one chain: its thread's serial work, in
    /// subsequences.
    pub redone_most: u32,
}

impl SplitCount {
    /// The counts of a launch split as `first` (`Launch::split`), from the
    /// statuses the split kernels left and the subsequences the check
    /// decoded again per chain (all 0 where unknown).
    pub(crate) fn of(first: &[u32], status: &[u32], redone: &[u32]) -> SplitCount {
        let mut count = SplitCount::default();
        let redone = redone.iter().chain(std::iter::repeat(&0));
        for ((c, &s), &r) in first.windows(2).zip(status).zip(redone) {
            if c[1] > c[0] {
                count.split += 1;
                count.synced += u32::from(s != 0);
                count.faults += u32::from(s != 0 && (s as usize) < SCAN_STATUS.len());
                count.redone += r;
                count.redone_most = count.redone_most.max(r);
            }
        }
        count
    }

    /// Both counts together (`redone_most` the larger).
    pub fn merge(self, o: SplitCount) -> SplitCount {
        SplitCount {
            split: self.split + o.split,
            synced: self.synced + o.synced,
            faults: self.faults + o.faults,
            redone: self.redone + o.redone,
            redone_most: self.redone_most.max(o.redone_most),
        }
    }
}
