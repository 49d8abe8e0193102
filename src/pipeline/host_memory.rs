//! Whether a configuration's batch buffers fit the machine (issue 15):
//! `build()` refuses one that cannot, with the bytes it needs, rather than
//! leaving it to the OOM killer.

use crate::augment::{DType, View};

/// Host bytes the pipeline allocates at `build()` and keeps: on the CPU
/// backend `prefetch + 2` batch buffers (`Pipeline::start`), on the CUDA
/// backend pinned staging for each of its `prefetch + 1` slots.
pub(super) fn fixed_host_bytes(
    batch: usize,
    views: &[View],
    dtype: DType,
    prefetch: usize,
    cpu: bool,
    staging: usize,
) -> u64 {
    if cpu {
        let per_batch: u64 = views
            .iter()
            .map(|v| (batch * v.count) as u64 * v.sample_len() as u64 * dtype.size() as u64)
            .sum();
        per_batch.saturating_mul(prefetch as u64 + 2)
    } else {
        (staging as u64).saturating_mul(prefetch as u64 + 1)
    }
}

/// `MemAvailable` from /proc/meminfo: what the kernel can give without
/// swapping. `None` where it cannot be read (not Linux).
pub(super) fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kib * 1024)
}
