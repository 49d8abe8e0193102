//! Batches as candle tensors (feature `candle`; issue 17, item 1).
//!
//! CPU backend: [`into_candle`] moves the batch's buffers into candle
//! tensors on `Device::Cpu`, without a copy: the tensors own them from then
//! on, and the pipeline allocates a fresh buffer for a later batch in
//! their place.
//!
//! CUDA backend (feature `candle-cuda`): [`into_candle_on`] does the same
//! on the device. The batch's device buffer (a cudarc `CudaSlice`, the
//! same cudarc as candle's) is wrapped as candle CUDA storage, no copy; the
//! slot gets a fresh buffer of the same size in its place, so it goes back
//! to the pipeline whole when the batch is dropped, and the tensor frees
//! its memory when candle drops it, after the work queued on it (cudarc
//! orders the free after the slice's recorded uses). Ordering: candle's
//! stream waits on the batch's event before the tensor is returned, so
//! every kernel candle queues reads finished pixels. The labels are copied
//! (a few hundred bytes) into a tensor on the same device.

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

/// The batch's first view's images and labels as candle tensors on
/// `device`: [`into_candle`] for `Device::Cpu`; for `Device::Cuda` (feature
/// `candle-cuda`) the CUDA batch's buffer itself, see the module docs.
pub fn into_candle_on(batch: Batch, device: &Device) -> Result<(Tensor, Tensor)> {
    match device {
        Device::Cpu => into_candle(batch),
        #[cfg(feature = "candle-cuda")]
        Device::Cuda(d) => cuda::into_candle_cuda(batch, d),
        #[allow(unreachable_patterns)]
        _ => Err(Error::Config(
            "candle: CPU tensors, or CUDA tensors with the candle-cuda feature".into(),
        )),
    }
}

/// The batch's first view's images (`[n, 3, h, w]` for NCHW, `[n, h, w, 3]`
/// for NHWC, in the batch's dtype) and its labels (`u32`, `[n]`), as candle
/// tensors on `Device::Cpu`, moved out of the batch without a copy. A CUDA
/// batch: [`into_candle_on`].
pub fn into_candle(mut batch: Batch) -> Result<(Tensor, Tensor)> {
    if batch.images().is_cuda() {
        return Err(Error::Config(
            "a CUDA batch: use gpufeed::interop::candle::into_candle_on with a \
             candle CUDA device (feature candle-cuda)"
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

#[cfg(feature = "candle-cuda")]
mod cuda {
    use candle_core::op::BackpropOp;
    use candle_core::{CudaDevice, CudaStorage, Device, Shape, Storage, Tensor};

    use super::candle_err;
    use crate::cuda::buffer::OutBuf;
    use crate::error::{Error, Result};
    use crate::pipeline::Batch;

    pub(super) fn into_candle_cuda(mut batch: Batch, dev: &CudaDevice) -> Result<(Tensor, Tensor)> {
        let ordinal = batch.images().device_ordinal();
        if ordinal != Some(dev.cuda_stream().context().ordinal()) {
            return Err(Error::Config(format!(
                "candle: the batch is on {ordinal:?}, the candle device on cuda:{}",
                dev.cuda_stream().context().ordinal()
            )));
        }
        if let Some(ev) = batch.event() {
            dev.cuda_stream()
                .wait(ev)
                .map_err(Error::cuda("candle stream waits for the batch"))?;
        }
        let t = &mut batch.views[0];
        let shape = Shape::from(t.shape().to_vec());
        let buf = t
            .take_cuda()?
            .ok_or_else(|| Error::Config("the batch has no device buffer".into()))?;
        let storage = match buf {
            OutBuf::U8(s) => CudaStorage::wrap_cuda_slice(s, dev.clone()),
            OutBuf::F16(s) => CudaStorage::wrap_cuda_slice(s, dev.clone()),
            OutBuf::BF16(s) => CudaStorage::wrap_cuda_slice(s, dev.clone()),
            OutBuf::F32(s) => CudaStorage::wrap_cuda_slice(s, dev.clone()),
        };
        // The storage holds a full batch; a short last batch's tensor is
        // its first `len` elements (contiguous from offset 0).
        let images = Tensor::from_storage(Storage::Cuda(storage), shape, BackpropOp::none(), false);
        let n = batch.labels().len();
        let labels = Tensor::from_slice(batch.labels(), n, &Device::Cuda(dev.clone()))
            .map_err(candle_err)?;
        Ok((images, labels))
    }
}
