//! candle CUDA tensors of CUDA batches without a copy (issue 17, item 1;
//! feature `candle-cuda`). candle's CUDA backend builds its kernels with
//! nvcc (scripts/cuda-root.sh makes a toolkit of pip wheels) and links
//! libcuda, libcudart, libnvrtc, libcublas(Lt) and libcurand: CI links it
//! against stubs of them (scripts/cuda-link-stubs.sh) and runs it with the
//! stubs last on the library path. Without a GPU the tests show as
//! ignored; with `GPUFEED_REQUIRE_GPU=1` they fail instead.

mod common;

use candle_core::{Device as CDevice, Storage};
use common::Outcome;
use cudarc::driver::DevicePtr;
use gpufeed::interop::candle::into_candle_on;
use gpufeed::{DType, Device, Pipeline, PipelineBuilder, Source};
use half::f16;

common::tests!(
    gpu_candle_tensor_is_the_batch_buffer_and_outlives_the_pipeline,
    gpu_candle_tensors_equal_the_cpu_backend,
);

fn builder(device: Device) -> PipelineBuilder {
    Pipeline::builder()
        .source(Source::image_folder(common::sample_dir()).unwrap())
        .device(device)
        .gpu_decode(false)
        .batch_size(4)
        .output_size(16, 24)
        .dtype(DType::F16)
        .shuffle(false)
        .prefetch(1)
}

/// The device address a candle CUDA tensor's storage starts at.
fn address(t: &candle_core::Tensor) -> u64 {
    let (storage, _) = t.storage_and_layout();
    let Storage::Cuda(s) = &*storage else {
        panic!("not a CUDA tensor")
    };
    let slice = s.as_cuda_slice::<f16>().unwrap();
    let (ptr, _sync) = slice.device_ptr(slice.stream());
    ptr
}

fn gpu_candle_tensor_is_the_batch_buffer_and_outlives_the_pipeline() -> Outcome {
    common::need_gpu()?;
    let dev = CDevice::new_cuda(0).unwrap();
    let CDevice::Cuda(cuda) = &dev else {
        unreachable!()
    };
    let mut p = builder(Device::Cuda(0)).build().unwrap();
    let (images, labels, want, want_labels) = {
        let mut epoch = p.epoch(0);
        let batch = epoch.next().unwrap().unwrap();
        let want = batch.images().to_host().unwrap().as_f16().unwrap().to_vec();
        let want_labels = batch.labels().to_vec();
        let before = batch.images().device_ptr().unwrap();
        let (images, labels) = into_candle_on(batch, &dev).unwrap();
        // No copy: the tensor's storage is the batch's buffer.
        assert_eq!(address(&images), before);
        assert!(images.device().same_device(&dev));
        // 1,000 batches more with the tensor held: the slot got a fresh
        // buffer, so nothing starves and nothing overwrites the tensor.
        for b in epoch {
            b.unwrap();
        }
        for e in 1..150 {
            assert_eq!(p.epoch(e).count(), 7);
        }
        (images, labels, want, want_labels)
    };
    drop(p);
    let got: Vec<f16> = images.flatten_all().unwrap().to_vec1().unwrap();
    assert_eq!(got, want);
    assert_eq!(labels.to_vec1::<u32>().unwrap(), want_labels);
    let _ = cuda;
    Ok(())
}

fn gpu_candle_tensors_equal_the_cpu_backend() -> Outcome {
    common::need_gpu()?;
    let dev = CDevice::new_cuda(0).unwrap();
    let mut cpu = builder(Device::Cpu).build().unwrap();
    let mut gpu = builder(Device::Cuda(0)).build().unwrap();
    for (c, g) in cpu.epoch(0).zip(gpu.epoch(0)) {
        let (c, g) = (c.unwrap(), g.unwrap());
        let want: Vec<f16> = c.images().as_f16().unwrap().to_vec();
        let (images, _) = into_candle_on(g, &dev).unwrap();
        let got: Vec<f16> = images.flatten_all().unwrap().to_vec1().unwrap();
        assert_eq!(got.len(), want.len());
        // The kernels' f16 tolerance: one unit in the last place.
        let bad = common::tolerance::count_bad(&got, &want, common::tolerance::f16_close);
        assert_eq!(bad, 0);
    }
    Ok(())
}
