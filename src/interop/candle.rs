//! Batches as candle tensors (feature `candle`; issue 17, item 1).
//!
//! CPU backend: [`into_candle`] moves the batch's buffers into candle
//! tensors on `Device::Cpu`, without a copy: the tensors own them from then
//! on, and the pipeline allocates a fresh buffer for a later batch in
//! their place. CUDA batches are refused for now: wrapping a device slot's
//! buffer needs the slot to go back only when the last tensor is dropped,
//! which candle's storage cannot tell us; use [`crate::interop::dlpack`]
//! (or the cudarc views) on CUDA.

use candle_core::{DType as CDType, Device, Shape, Tensor};

use crate::augment::DType;
use crate::error::{Error, Result};
use crate::pipeline::{Batch, TensorData};

fn candle_err(e: candle_core::Error) -> Error {
    Error::Config(format!("candle: {e}"))
}

/// The candle dtype of a gpufeed dtype.
pub fn dtype(d: DType) -> CDType {
    match d {
        DType::U8 => CDType::U8,
        DType::F16 => CDType::F16,
        DType::BF16 => CDType::BF16,
        DType::F32 => CDType::F32,
    }
}

/// The batch's first view's images (`[n, 3, h, w]` for NCHW, `[n, h, w, 3]`
/// for NHWC, in the batch's dtype) and its labels (`u32`, `[n]`), as candle
/// tensors on `Device::Cpu`, moved out of the batch without a copy.
pub fn into_candle(mut batch: Batch) -> Result<(Tensor, Tensor)> {
    if batch.images().is_cuda() {
        return Err(Error::Config(
            "candle tensors of CUDA batches are not supported yet: use \
             gpufeed::interop::dlpack or the cudarc views"
                .into(),
        ));
    }
    let t = &batch.views[0];
    let shape = Shape::from(t.shape().to_vec());
    let len = t.len();
    let data = batch.views[0]
        .take_host()
        .ok_or_else(|| Error::Config("the batch has no host buffer".into()))?;
    let images = match data {
        TensorData::U8(mut v) => {
            v.truncate(len);
            Tensor::from_vec(v, shape, &Device::Cpu)
        }
        TensorData::F16(mut v) => {
            v.truncate(len);
            Tensor::from_vec(v, shape, &Device::Cpu)
        }
        TensorData::BF16(mut v) => {
            v.truncate(len);
            Tensor::from_vec(v, shape, &Device::Cpu)
        }
        TensorData::F32(mut v) => {
            v.truncate(len);
            Tensor::from_vec(v, shape, &Device::Cpu)
        }
    }
    .map_err(candle_err)?;
    let labels = std::mem::take(&mut batch.labels);
    let n = labels.len();
    let labels = Tensor::from_vec(labels, n, &Device::Cpu).map_err(candle_err)?;
    Ok((images, labels))
}
