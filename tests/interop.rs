//! DLPack export (issue 17): tensors that outlive their batch, the
//! pipeline's next batches and the pipeline itself, and that give the
//! batch back when their deleter runs.

mod common;

use gpufeed::interop::dlpack::{self, Part, SharedBatch};
use gpufeed::{DType, Device, Pipeline, PipelineBuilder, Source};

common::tests!(
    exported_tensors_outlive_the_batch_the_epoch_and_the_pipeline,
    a_consumer_calls_the_deleter_once,
    #[cfg(feature = "kernel-emu")]
    dropped_tensors_give_their_slots_back_over_a_thousand_batches,
    #[cfg(feature = "candle")]
    cpu_batches_move_into_candle_tensors,
    gpu_cuda_batches_export_device_memory,
);

fn builder(device: Device) -> PipelineBuilder {
    Pipeline::builder()
        .source(Source::image_folder(common::sample_dir()).unwrap())
        .device(device)
        .batch_size(4)
        .output_size(16, 24)
        .dtype(DType::F16)
        .prefetch(1)
}

/// The bytes a DLPack tensor points at, read as the consumer would.
fn read(t: &dlpack::Dlpack) -> (Vec<i64>, Vec<u8>) {
    let dl = t.tensor();
    assert_eq!(
        (dl.device.device_type, dl.byte_offset),
        (1, 0),
        "a host tensor"
    );
    let shape = t.shape().to_vec();
    let n: i64 = shape.iter().product();
    let bytes = n as usize * usize::from(dl.dtype.bits / 8);
    // SAFETY: a host tensor of `n` dense elements of `bits` bits.
    let data = unsafe { std::slice::from_raw_parts(dl.data as *const u8, bytes) }.to_vec();
    (shape, data)
}

fn exported_tensors_outlive_the_batch_the_epoch_and_the_pipeline() {
    let mut p = builder(Device::Cpu).build().unwrap();
    let (images, labels, want_images, want_labels) = {
        let mut epoch = p.epoch(0);
        let batch = epoch.next().unwrap().unwrap();
        let want_images = batch.images().as_bytes().unwrap().to_vec();
        let want_labels = batch.labels().to_vec();
        let shared = SharedBatch::new(batch);
        let images = shared.export(Part::View(0)).unwrap();
        let labels = shared.export(Part::Labels).unwrap();
        drop(shared);
        // The rest of the epoch runs; the pool must not reuse the buffer.
        for b in epoch {
            b.unwrap();
        }
        (images, labels, want_images, want_labels)
    };
    for e in 1..3 {
        assert_eq!(p.epoch(e).count(), 7);
    }
    drop(p);
    let (shape, data) = read(&images);
    assert_eq!(shape, [4, 3, 16, 24]);
    assert_eq!(data, want_images);
    let dl = images.tensor();
    assert_eq!((dl.dtype.code, dl.dtype.bits, dl.dtype.lanes), (2, 16, 1));
    // SAFETY: 4 strides inside the context.
    let strides = unsafe { std::slice::from_raw_parts(dl.strides, 4) };
    assert_eq!(strides, [3 * 16 * 24, 16 * 24, 24, 1]);
    let (shape, data) = read(&labels);
    assert_eq!(shape, [4]);
    let got: Vec<u32> = data
        .chunks(4)
        .map(|c| u32::from_ne_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(got, want_labels);
}

fn a_consumer_calls_the_deleter_once() {
    let mut p = builder(Device::Cpu).build().unwrap();
    let batch = p.epoch(0).next().unwrap().unwrap();
    let shared = SharedBatch::new(batch);
    let raw = shared.export(Part::View(0)).unwrap().into_raw();
    let legacy = shared.export(Part::Labels).unwrap().into_raw_legacy();
    drop(shared);
    // SAFETY: as a consumer does, once each.
    unsafe {
        assert_eq!((*raw).version.major, 1);
        assert_eq!((*legacy).dl_tensor.ndim, 1);
        ((*raw).deleter.unwrap())(raw);
        ((*legacy).deleter.unwrap())(legacy);
    }
    assert!(
        SharedBatch::new(p.epoch(1).next().unwrap().unwrap())
            .export(Part::View(3))
            .is_err()
    );
}

/// On the device stage a batch holds one of `prefetch + 1` slots: a
/// tensor that never gave its slot back would starve the pipeline within
/// a few batches.
#[cfg(feature = "kernel-emu")]
fn dropped_tensors_give_their_slots_back_over_a_thousand_batches() {
    let mut p = builder(Device::Emulated).build().unwrap();
    let mut n = 0;
    'outer: for e in 0.. {
        for b in p.epoch(e) {
            let shared = SharedBatch::new(b.unwrap());
            let t = shared.export(Part::View(0)).unwrap();
            let l = shared.export(Part::Labels).unwrap();
            drop(shared);
            drop((t, l));
            n += 1;
            if n == 1000 {
                break 'outer;
            }
        }
    }
    assert_eq!(p.memory().slots, 2);
}

/// Issue 17, item 1: a CPU batch moves into candle tensors without a copy,
/// with its shape, dtype, values and labels; the pipeline goes on.
#[cfg(feature = "candle")]
fn cpu_batches_move_into_candle_tensors() {
    let mut p = builder(Device::Cpu).dtype(DType::F32).build().unwrap();
    let mut kept = Vec::new();
    for e in 0..2 {
        for b in p.epoch(e) {
            let b = b.unwrap();
            let want = b.images().as_f32().unwrap().to_vec();
            let want_labels = b.labels().to_vec();
            let (x, y) = gpufeed::interop::candle::into_candle(b).unwrap();
            assert_eq!(x.dims(), [want_labels.len(), 3, 16, 24]);
            assert_eq!(x.dtype(), candle_core::DType::F32);
            assert_eq!(x.flatten_all().unwrap().to_vec1::<f32>().unwrap(), want);
            assert_eq!(y.to_vec1::<u32>().unwrap(), want_labels);
            kept.push((x, want));
        }
    }
    drop(p);
    // Tensors held past later batches and the pipeline keep their values.
    for (x, want) in kept {
        assert_eq!(x.flatten_all().unwrap().to_vec1::<f32>().unwrap(), want);
    }
}

/// A CUDA batch's images and mixup's soft labels export as device memory
/// (DLPack `kDLCUDA`): the batch's own buffers, no copy, holding the
/// values the batch reports (`torch.from_dlpack` gets CUDA tensors).
fn gpu_cuda_batches_export_device_memory() -> common::Outcome {
    common::need_gpu()?;
    let mut p = builder(Device::Cuda(0))
        .mixup(gpufeed::augment::Mixup::deit(4))
        .build()
        .unwrap();
    let ctx = p.cuda_context().expect("a CUDA pipeline");
    let batch = p.epoch(0).next().unwrap().unwrap();
    let images_at = batch.images().device_ptr().unwrap();
    let want_images = batch
        .images()
        .to_host()
        .unwrap()
        .as_bytes()
        .unwrap()
        .to_vec();
    let want_soft = batch.soft_labels().unwrap().to_vec();
    let shared = SharedBatch::new(batch);
    let images = shared.export(Part::View(0)).unwrap();
    let soft = shared.export(Part::SoftLabels).unwrap();
    drop(shared);
    // Device memory read back as a CUDA consumer would.
    let fetch = |t: &dlpack::Dlpack, bytes: usize| {
        let dl = t.tensor();
        assert_eq!((dl.device.device_type, dl.device.device_id), (2, 0));
        ctx.bind_to_thread().unwrap();
        let mut host = vec![0u8; bytes];
        // SAFETY: `dl.data` is device memory of at least `bytes` bytes
        // (the tensor's dense size) that the held tensor keeps alive; the
        // export waited for the batch's event.
        unsafe {
            cudarc::driver::result::memcpy_dtoh_sync(&mut host, dl.data as u64).unwrap();
        }
        host
    };
    assert_eq!(images.tensor().data as u64, images_at, "no copy");
    assert_eq!(fetch(&images, want_images.len()), want_images);
    assert_eq!(soft.shape(), [4, 4]);
    let got: Vec<f32> = fetch(&soft, want_soft.len() * 4)
        .chunks(4)
        .map(|c| f32::from_ne_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(got, want_soft);
    Ok(())
}
