//! A batch's output buffer on the device, typed by element (issue 4): what
//! the augment kernels write and a trainer reads. Below the device stage
//! and the tensors that hold it.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use half::{bf16, f16};

use crate::augment::{DType, TensorData};
use crate::error::{Error, Result};

/// A batch's output tensor on the device, typed so that the trainer gets a
/// `CudaSlice` of the right element type.
#[derive(Debug)]
pub(crate) enum OutBuf {
    U8(CudaSlice<u8>),
    F16(CudaSlice<f16>),
    BF16(CudaSlice<bf16>),
    F32(CudaSlice<f32>),
}

impl OutBuf {
    pub(crate) fn alloc(stream: &Arc<CudaStream>, dtype: DType, len: usize) -> Result<OutBuf> {
        let e = Error::cuda("allocate output");
        Ok(match dtype {
            DType::U8 => OutBuf::U8(stream.alloc_zeros(len).map_err(e)?),
            DType::F16 => OutBuf::F16(stream.alloc_zeros(len).map_err(e)?),
            DType::BF16 => OutBuf::BF16(stream.alloc_zeros(len).map_err(e)?),
            DType::F32 => OutBuf::F32(stream.alloc_zeros(len).map_err(e)?),
        })
    }

    /// A zeroed buffer of the same type and length on the same stream: what
    /// a slot gets back when its buffer leaves with a framework's tensor.
    pub(crate) fn replacement(&self) -> Result<OutBuf> {
        let (stream, dtype, len) = match self {
            OutBuf::U8(s) => (s.stream(), DType::U8, s.len()),
            OutBuf::F16(s) => (s.stream(), DType::F16, s.len()),
            OutBuf::BF16(s) => (s.stream(), DType::BF16, s.len()),
            OutBuf::F32(s) => (s.stream(), DType::F32, s.len()),
        };
        OutBuf::alloc(stream, dtype, len)
    }

    pub(crate) fn num_bytes(&self) -> usize {
        match self {
            OutBuf::U8(s) => s.num_bytes(),
            OutBuf::F16(s) => s.num_bytes(),
            OutBuf::BF16(s) => s.num_bytes(),
            OutBuf::F32(s) => s.num_bytes(),
        }
    }

    /// The CUDA device the buffer is on.
    pub(crate) fn ordinal(&self) -> usize {
        match self {
            OutBuf::U8(s) => s.stream().context().ordinal(),
            OutBuf::F16(s) => s.stream().context().ordinal(),
            OutBuf::BF16(s) => s.stream().context().ordinal(),
            OutBuf::F32(s) => s.stream().context().ordinal(),
        }
    }

    /// The raw device address (`CUdeviceptr`).
    pub(crate) fn address(&self) -> u64 {
        fn addr<T>(s: &CudaSlice<T>) -> u64 {
            // Recording a read on the slice's own stream orders nothing the
            // pipeline does not already order: its writes use that stream.
            let (ptr, _record) = s.device_ptr(s.stream());
            ptr
        }
        match self {
            OutBuf::U8(s) => addr(s),
            OutBuf::F16(s) => addr(s),
            OutBuf::BF16(s) => addr(s),
            OutBuf::F32(s) => addr(s),
        }
    }

    /// Copy the first `len` elements to the host (waits for the copy).
    pub(crate) fn download(&self, len: usize) -> Result<TensorData> {
        let e = Error::cuda("download");
        Ok(match self {
            OutBuf::U8(s) => TensorData::U8(s.stream().clone_dtoh(&s.slice(..len)).map_err(e)?),
            OutBuf::F16(s) => TensorData::F16(s.stream().clone_dtoh(&s.slice(..len)).map_err(e)?),
            OutBuf::BF16(s) => TensorData::BF16(s.stream().clone_dtoh(&s.slice(..len)).map_err(e)?),
            OutBuf::F32(s) => TensorData::F32(s.stream().clone_dtoh(&s.slice(..len)).map_err(e)?),
        })
    }
}
