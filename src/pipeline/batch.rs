//! What the trainer receives.

use std::path::PathBuf;

use crossbeam_channel::Sender;
use cudarc::driver::{CudaEvent, CudaView};

pub(crate) use crate::augment::TensorData;
use crate::error::Error;
use crate::stage::{Slot, SlotHome};
pub(crate) use crate::tensor::Storage;
pub use crate::tensor::Tensor;

/// One batch: images, labels and the keys of the samples, in order.
///
/// Dropping a batch returns its buffer to the pipeline's pool.
#[derive(Debug)]
pub struct Batch {
    /// One tensor per view spec; emptied on drop.
    pub(crate) views: Vec<Tensor>,
    pub(crate) labels: Vec<u32>,
    pub(crate) keys: Vec<PathBuf>,
    pub(crate) indices: Vec<u32>,
    pub(crate) epoch: u64,
    pub(crate) resume_position: usize,
    pub(crate) skipped: Vec<Error>,
    /// Mixup's soft labels, `[len, classes]` row-major.
    pub(crate) soft_labels: Option<Vec<f32>>,
    pub(crate) recycle: Option<Sender<Vec<TensorData>>>,
    /// The device slot holding this batch (device stage), and where it goes
    /// back on drop.
    pub(crate) slot: Option<(Slot, SlotHome)>,
    /// The timeline, when traced: when the trainer got the batch, and its
    /// number in the epoch.
    pub(crate) held: Option<(std::sync::Arc<super::trace::Trace>, std::time::Instant, u64)>,
}

impl Batch {
    /// The image tensor (of the first view, for multi-view pipelines).
    pub fn images(&self) -> &Tensor {
        &self.views[0]
    }

    /// One tensor per view spec, in the order given to
    /// [`PipelineBuilder::views`](crate::PipelineBuilder::views).
    pub fn views(&self) -> &[Tensor] {
        &self.views
    }

    /// Class labels, one per image.
    pub fn labels(&self) -> &[u32] {
        &self.labels
    }

    /// With [`PipelineBuilder::mixup`](crate::PipelineBuilder::mixup): the
    /// mixed labels, `[len, num_classes]` row-major f32 (timm's
    /// `mixup_target`, label smoothing included); `None` otherwise.
    pub fn soft_labels(&self) -> Option<&[f32]> {
        self.soft_labels.as_deref()
    }

    /// The labels on the device (CUDA backend), uploaded with the images.
    pub fn labels_cuda(&self) -> Option<CudaView<'_, u32>> {
        let (slot, _) = self.slot.as_ref()?;
        Some(slot.labels()?.slice(..self.labels.len()))
    }

    /// Mixup's soft labels on the device (CUDA backend with
    /// [`PipelineBuilder::mixup`](crate::PipelineBuilder::mixup)), `[len,
    /// num_classes]` row-major, uploaded with the images.
    pub fn soft_labels_cuda(&self) -> Option<CudaView<'_, f32>> {
        let soft = self.soft_labels.as_ref()?;
        let (slot, _) = self.slot.as_ref()?;
        Some(slot.soft_labels()?.slice(..soft.len()))
    }

    /// The event recorded after the kernels and copies that produced this
    /// batch (CUDA backend): make the training stream wait on it
    /// (`stream.wait(event)`) before using [`Tensor::device_ptr`]. Users of
    /// the `cuda_*` views are ordered by cudarc without it.
    pub fn event(&self) -> Option<&CudaEvent> {
        self.slot.as_ref()?.0.event()
    }

    /// The file of each image: its path, or for WebDataset shards
    /// `SHARD/KEY.EXT` (`s3://bucket/shard-000003.tar/000000123.jpg`), a
    /// name rather than a file that `std::fs` could open.
    pub fn keys(&self) -> &[PathBuf] {
        &self.keys
    }

    /// Index of each image in the [`Source`](crate::Source)'s sample list.
    pub fn indices(&self) -> &[u32] {
        &self.indices
    }

    /// Number of images.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Always false for a batch the trainer receives: an epoch in which
    /// no sample could be used ends with [`Error::NoSamples`] instead.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The epoch this batch belongs to.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Where to resume after this batch: pass `(epoch(), resume_position())`
    /// to [`Pipeline::epoch_from`](crate::Pipeline::epoch_from) to get the
    /// batches that follow this one. Counts positions in this rank's order,
    /// skipped samples included.
    pub fn resume_position(&self) -> usize {
        self.resume_position
    }

    /// Samples that failed and were skipped while this batch was assembled
    /// (under [`OnError::Skip`](crate::pipeline::OnError::Skip)), each naming its file.
    pub fn skipped(&self) -> &[Error] {
        &self.skipped
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        if let Some((t, since, n)) = self.held.take() {
            t.span("trainer holds batch", since, super::trace::Arg::Batch(n));
        }
        if let Some((mut slot, home)) = self.slot.take() {
            slot.outs = std::mem::take(&mut self.views)
                .into_iter()
                .map(|t| t.storage)
                .collect();
            home.give_back(slot);
            return;
        }
        if let Some(tx) = self.recycle.take() {
            // A full pool or a pipeline already gone just frees the buffers.
            let data = std::mem::take(&mut self.views)
                .into_iter()
                .filter_map(|t| match t.storage {
                    Storage::Host(d) => Some(d),
                    Storage::Cuda(_) => None,
                })
                .collect();
            let _ = tx.try_send(data);
        }
    }
}
