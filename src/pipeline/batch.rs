//! What the trainer receives.

use std::path::PathBuf;

use crossbeam_channel::Sender;
use half::{bf16, f16};

use crate::augment::{DType, Layout};
use crate::error::Error;

/// Typed storage of a host tensor. Kept typed (not `Vec<u8>`) so that every
/// element view is correctly aligned without `unsafe`.
#[derive(Debug)]
pub(crate) enum TensorData {
    U8(Vec<u8>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
    F32(Vec<f32>),
}

impl TensorData {
    pub(crate) fn zeros(dtype: DType, len: usize) -> TensorData {
        match dtype {
            DType::U8 => TensorData::U8(vec![0; len]),
            DType::F16 => TensorData::F16(vec![f16::ZERO; len]),
            DType::BF16 => TensorData::BF16(vec![bf16::ZERO; len]),
            DType::F32 => TensorData::F32(vec![0.0; len]),
        }
    }

    pub(crate) fn dtype(&self) -> DType {
        match self {
            TensorData::U8(_) => DType::U8,
            TensorData::F16(_) => DType::F16,
            TensorData::BF16(_) => DType::BF16,
            TensorData::F32(_) => DType::F32,
        }
    }

    /// Resize to `len` elements, keeping the allocation when it is big
    /// enough.
    pub(crate) fn set_len(&mut self, len: usize) {
        match self {
            TensorData::U8(v) => v.resize(len, 0),
            TensorData::F16(v) => v.resize(len, f16::ZERO),
            TensorData::BF16(v) => v.resize(len, bf16::ZERO),
            TensorData::F32(v) => v.resize(len, 0.0),
        }
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            TensorData::U8(v) => v,
            TensorData::F16(v) => bytemuck::cast_slice(v),
            TensorData::BF16(v) => bytemuck::cast_slice(v),
            TensorData::F32(v) => bytemuck::cast_slice(v),
        }
    }

    pub(crate) fn as_bytes_mut(&mut self) -> &mut [u8] {
        match self {
            TensorData::U8(v) => v,
            TensorData::F16(v) => bytemuck::cast_slice_mut(v),
            TensorData::BF16(v) => bytemuck::cast_slice_mut(v),
            TensorData::F32(v) => bytemuck::cast_slice_mut(v),
        }
    }
}

/// A batch of images in host memory.
#[derive(Debug)]
pub struct Tensor {
    pub(crate) shape: [usize; 4],
    pub(crate) layout: Layout,
    pub(crate) data: TensorData,
}

impl Tensor {
    /// `[n, c, h, w]` for NCHW, `[n, h, w, c]` for NHWC.
    pub fn shape(&self) -> [usize; 4] {
        self.shape
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }

    /// Memory layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The raw bytes, native endian, densely packed.
    pub fn as_bytes(&self) -> &[u8] {
        self.data.as_bytes()
    }

    /// The elements when the dtype is `u8`.
    pub fn as_u8(&self) -> Option<&[u8]> {
        match &self.data {
            TensorData::U8(v) => Some(v),
            _ => None,
        }
    }

    /// The elements when the dtype is `f16`.
    pub fn as_f16(&self) -> Option<&[f16]> {
        match &self.data {
            TensorData::F16(v) => Some(v),
            _ => None,
        }
    }

    /// The elements when the dtype is `bf16`.
    pub fn as_bf16(&self) -> Option<&[bf16]> {
        match &self.data {
            TensorData::BF16(v) => Some(v),
            _ => None,
        }
    }

    /// The elements when the dtype is `f32`.
    pub fn as_f32(&self) -> Option<&[f32]> {
        match &self.data {
            TensorData::F32(v) => Some(v),
            _ => None,
        }
    }

    /// Element `[n, c, y, x]` converted to `f32`, whatever the dtype and
    /// layout. Panics when out of range, like slice indexing.
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
        match &self.data {
            TensorData::U8(v) => v[i] as f32,
            TensorData::F16(v) => v[i].to_f32(),
            TensorData::BF16(v) => v[i].to_f32(),
            TensorData::F32(v) => v[i],
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
    pub(crate) recycle: Option<Sender<Vec<TensorData>>>,
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

    /// The file of each image.
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

    /// True for a batch without images (never yielded by a pipeline).
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
    /// (under [`OnError::Skip`](crate::OnError::Skip)), each naming its file.
    pub fn skipped(&self) -> &[Error] {
        &self.skipped
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        if let Some(tx) = self.recycle.take() {
            // A full pool or a pipeline already gone just frees the buffers.
            let data = std::mem::take(&mut self.views)
                .into_iter()
                .map(|t| t.data)
                .collect();
            let _ = tx.try_send(data);
        }
    }
}
