//! A batch's images as a tensor, in host memory (CPU backend) or on a CUDA
//! device: what the pipeline hands a trainer and the device stage fills.

use cudarc::driver::CudaView;
use half::{bf16, f16};

use crate::augment::{DType, Layout, TensorData};
use crate::cuda::buffer::OutBuf;
use crate::error::Result;

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
        /// wait on [`Batch::event`](crate::Batch::event) instead.
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
    /// Wait on [`Batch::event`](crate::Batch::event) before reading through it.
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
