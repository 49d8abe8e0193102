//! What the device stage reports in `Stats`: its routes' counters,
//! read from another thread without the routes' locks.

use super::DeviceStage;

impl DeviceStage {
    /// Buffers nvJPEG took from the driver, over every decoder's ledger
    /// (`Stats::decoder_allocations`).
    pub(crate) fn decoder_allocations(&self) -> u64 {
        self.decoders.iter().map(|l| l.allocations()).sum()
    }

    /// `Stats::decoder_pinned_wait`.
    pub(crate) fn pinned_wait(&self) -> std::time::Duration {
        let ns = self.pinned_wait.load(std::sync::atomic::Ordering::Relaxed);
        std::time::Duration::from_nanos(ns)
    }

    /// Wall time with an engine call in flight (`Stats::engine_busy`).
    pub(crate) fn engine_busy(&self) -> std::time::Duration {
        self.share.engine_busy().total()
    }

    /// `Stats::lanes_stopped`.
    pub(crate) fn lanes_stopped(&self) -> u64 {
        crate::cuda::lanes::stopped(self.lane_stops.iter().flat_map(|f| f.iter()))
    }

    /// Wall time with a progressive lane call in flight
    /// (`Stats::progressive_busy`).
    pub(crate) fn progressive_busy(&self) -> std::time::Duration {
        self.progressive_busy.total()
    }
}
