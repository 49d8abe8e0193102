//! Reading a pipeline's counters while an epoch borrows it.

use std::sync::{Arc, Weak};

use super::Stats;
use super::worker::Shared;
use crate::stage::{DeviceStage, Memory};

/// A pipeline's counters and memory, readable from any thread while an
/// epoch borrows the pipeline (a logging thread, a progress bar, Python's
/// `stats()` in the middle of an epoch). It holds the pipeline weakly: once
/// the pipeline is dropped it reads `None`, and it never keeps the
/// pipeline's buffers alive.
#[derive(Debug, Clone)]
pub struct Monitor {
    pub(super) shared: Weak<Shared>,
    pub(super) stage: Option<Weak<DeviceStage>>,
}

impl Monitor {
    pub(super) fn new(shared: &Arc<Shared>, stage: Option<&Arc<DeviceStage>>) -> Monitor {
        Monitor {
            shared: Arc::downgrade(shared),
            stage: stage.map(Arc::downgrade),
        }
    }

    /// [`Pipeline::stats`](super::Pipeline::stats) now; `None` once the
    /// pipeline is gone.
    pub fn stats(&self) -> Option<Stats> {
        let shared = self.shared.upgrade()?;
        let stage = match &self.stage {
            None => None,
            Some(s) => Some(s.upgrade()?),
        };
        Some(shared.counters.snapshot(stage.as_deref()))
    }

    /// [`Pipeline::memory`](super::Pipeline::memory) now; `None` once the
    /// pipeline is gone.
    pub fn memory(&self) -> Option<Memory> {
        let shared = self.shared.upgrade()?;
        let stage = match &self.stage {
            None => None,
            Some(s) => Some(s.upgrade()?),
        };
        Some(shared.memory(stage.as_deref()))
    }
}
