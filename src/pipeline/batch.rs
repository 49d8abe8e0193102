//! What the trainer receives.

use std::path::PathBuf;

use crossbeam_channel::Sender;
use cudarc::driver::{CudaEvent, CudaView};
use half::{bf16, f16};

use super::gpu::{Slot, SlotHome};
pub(crate) use crate::augment::TensorData;
use crate::augment::{DType, Layout};
use crate::cuda::stage::OutBuf;
use crate::error::{Error, Result};

/// Where a tensor's elements live.
#[derive(Debug)]
pub(crate) enum Storage {
    Host(TensorData),
    /// A device buffer with room for a full batch; the tensor's shape says
    /// how many elements are valid.
    Cuda(OutBuf),
}

/// A batch of images, in host memory (CPU backend) or on a CUDA device.
#[derive(Debug)]
pub struct Tensor {
    pub(crate) shape: [usize; 4],
    pub(crate) layout: Layout,
    pub(crate) dtype: DType,
    pub(crate) storage: Storage,
}

macro_rules! host_view {
    ($(#[$doc:meta])* $name:ident, $variant:ident, $t:ty) => {
        $(#[$doc])*
        pub fn $name(&self) -> Option<&[$t]> {
            match &self.storage {
                Storage::Host(TensorData::$variant(v)) => Some(&v[..self.len()]),
                _ => None,
            }
        }
    };
}

macro_rules! cuda_view {
    ($(#[$doc:meta])* $name:ident, $variant:ident, $t:ty) => {
        $(#[$doc])*
        pub fn $name(&self) -> Option<CudaView<'_, $t>> {
            match &self.storage {
                Storage::Cuda(OutBuf::$variant(s)) => Some(s.slice(..self.len())),
                _ => None,
            }
        }
    };
}

impl Tensor {
    pub(crate) fn new(shape: [usize; 4], layout: Layout, dtype: DType, storage: Storage) -> Tensor {
        Tensor {
            shape,
            layout,
            dtype,
            storage,
        }
    }

    /// `[n, c, h, w]` for NCHW, `[n, h, w, c]` for NHWC.
    pub fn shape(&self) -> [usize; 4] {
        self.shape
    }

    /// Number of elements (the product of the shape).
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// True when the shape has a zero (never for a yielded batch).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Memory layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Move the host elements out (an empty buffer stays behind).
    #[cfg(feature = "candle")]
    pub(crate) fn take_host(&mut self) -> Option<TensorData> {
        match &mut self.storage {
            Storage::Host(d) => {
                let empty = TensorData::zeros(self.dtype, 0);
                Some(std::mem::replace(d, empty))
            }
            Storage::Cuda(_) => None,
        }
    }

    /// The device buffer, for a framework tensor to own from now on; a
    /// fresh one of the same size takes its place, so the slot goes back
    /// whole when the batch is dropped. `None` for a host tensor.
    #[cfg_attr(not(feature = "candle-cuda"), allow(dead_code))]
    pub(crate) fn take_cuda(&mut self) -> Result<Option<OutBuf>> {
        match &mut self.storage {
            Storage::Cuda(b) => {
                let fresh = b.replacement()?;
                Ok(Some(std::mem::replace(b, fresh)))
            }
            Storage::Host(_) => Ok(None),
        }
    }

    /// The CUDA device holding the elements, for a device tensor.
    pub(crate) fn device_ordinal(&self) -> Option<usize> {
        match &self.storage {
            Storage::Cuda(b) => Some(b.ordinal()),
            Storage::Host(_) => None,
        }
    }

    /// True when the elements are in CUDA device memory.
    pub fn is_cuda(&self) -> bool {
        matches!(self.storage, Storage::Cuda(_))
    }

    /// The raw bytes, native endian, densely packed; `None` on a device.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match &self.storage {
            Storage::Host(d) => Some(&d.as_bytes()[..self.len() * self.dtype.size()]),
            Storage::Cuda(_) => None,
        }
    }

    host_view!(
        /// The host elements when the dtype is `u8`.
        as_u8, U8, u8
    );
    host_view!(
        /// The host elements when the dtype is `f16`.
        as_f16, F16, f16
    );
    host_view!(
        /// The host elements when the dtype is `bf16`.
        as_bf16, BF16, bf16
    );
    host_view!(
        /// The host elements when the dtype is `f32`.
        as_f32, F32, f32
    );
    cuda_view!(
        /// The device elements when the dtype is `u8`: a view of exactly
        /// [`len`](Self::len) elements, no copy. cudarc orders the kernel
        /// that wrote it before any use on another stream; raw-pointer users
        /// wait on [`Batch::event`] instead.
        cuda_u8, U8, u8
    );
    cuda_view!(
        /// The device elements when the dtype is `f16` (see
        /// [`cuda_u8`](Self::cuda_u8)).
        cuda_f16, F16, f16
    );
    cuda_view!(
        /// The device elements when the dtype is `bf16` (see
        /// [`cuda_u8`](Self::cuda_u8)).
        cuda_bf16, BF16, bf16
    );
    cuda_view!(
        /// The device elements when the dtype is `f32` (see
        /// [`cuda_u8`](Self::cuda_u8)).
        cuda_f32, F32, f32
    );

    /// The raw device address (`CUdeviceptr`) of element 0, for trainers
    /// that take pointers (tch's `from_blob`, DLPack); `None` on the host.
    /// Wait on [`Batch::event`] before reading through it.
    pub fn device_ptr(&self) -> Option<u64> {
        match &self.storage {
            Storage::Cuda(b) => Some(b.address()),
            Storage::Host(_) => None,
        }
    }

    /// A host copy (downloads and waits when the tensor is on a device).
    pub fn to_host(&self) -> Result<Tensor> {
        let data = match &self.storage {
            Storage::Host(d) => {
                let mut c = TensorData::zeros(self.dtype, self.len());
                c.as_bytes_mut()
                    .copy_from_slice(&d.as_bytes()[..self.len() * self.dtype.size()]);
                c
            }
            Storage::Cuda(b) => b.download(self.len())?,
        };
        Ok(Tensor::new(
            self.shape,
            self.layout,
            self.dtype,
            Storage::Host(data),
        ))
    }

    /// Element `[n, c, y, x]` converted to `f32`, whatever the dtype and
    /// layout. Panics when out of range, like slice indexing, and on a
    /// device tensor (call [`to_host`](Self::to_host) first).
    pub fn get(&self, n: usize, c: usize, y: usize, x: usize) -> f32 {
        let (h, w) = match self.layout {
            Layout::Nchw => (self.shape[2], self.shape[3]),
            Layout::Nhwc => (self.shape[1], self.shape[2]),
        };
        assert!(
            n < self.shape[0] && c < 3 && y < h && x < w,
            "index out of range"
        );
        let i = match self.layout {
            Layout::Nchw => ((n * 3 + c) * h + y) * w + x,
            Layout::Nhwc => ((n * h + y) * w + x) * 3 + c,
        };
        match &self.storage {
            Storage::Host(TensorData::U8(v)) => v[i] as f32,
            Storage::Host(TensorData::F16(v)) => v[i].to_f32(),
            Storage::Host(TensorData::BF16(v)) => v[i].to_f32(),
            Storage::Host(TensorData::F32(v)) => v[i],
            Storage::Cuda(_) => panic!("Tensor::get on a device tensor: call to_host() first"),
        }
    }
}

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
