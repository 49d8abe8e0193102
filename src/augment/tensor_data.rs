//! Host tensor elements, typed: what the CPU backend's batches hold and
//! what the device stage downloads and uploads. Below both the pipeline
//! and `cuda/` (issue 16, item 7: `cuda/` imports nothing from
//! `pipeline/`).

use half::{bf16, f16};

use super::DType;
use crate::error::{Error, Result};

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

    /// [`zeros`](Self::zeros), but an error instead of an abort when the
    /// memory is not there (batch buffers allocated at `build()`).
    pub(crate) fn try_zeros(dtype: DType, len: usize) -> Result<TensorData> {
        fn z<T: Clone>(len: usize, zero: T) -> Result<Vec<T>> {
            let mut v = Vec::new();
            v.try_reserve_exact(len).map_err(|e| {
                Error::Config(format!(
                    "cannot allocate a batch buffer of {len} elements: {e}"
                ))
            })?;
            v.resize(len, zero);
            Ok(v)
        }
        Ok(match dtype {
            DType::U8 => TensorData::U8(z(len, 0)?),
            DType::F16 => TensorData::F16(z(len, f16::ZERO)?),
            DType::BF16 => TensorData::BF16(z(len, bf16::ZERO)?),
            DType::F32 => TensorData::F32(z(len, 0.0)?),
        })
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            TensorData::U8(v) => v.len(),
            TensorData::F16(v) => v.len(),
            TensorData::BF16(v) => v.len(),
            TensorData::F32(v) => v.len(),
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
