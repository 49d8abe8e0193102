//! Augmentation through the whole pipeline: multi-view batches, the eval
//! transform, EXIF orientation before cropping, determinism.

mod common;

use std::path::PathBuf;

use gpufeed::{DType, Device, Layout, Pipeline, Source, Transform, augment::View, source::Sample};

/// The image bytes of the first batch of `epoch`.
fn first_batch_bytes(p: &mut Pipeline, epoch: u64) -> Vec<u8> {
    p.epoch(epoch)
        .next()
        .unwrap()
        .unwrap()
        .images()
        .as_bytes()
        .unwrap()
        .to_vec()
}

fn sample_source() -> Source {
    Source::image_folder(common::sample_dir()).unwrap()
}

#[test]
fn multi_view_batches_hold_one_tensor_per_spec() {
    let global = View::new(64, 64)
        .transform(Transform::RandomResizedCrop {
            scale: (0.4, 1.0),
            ratio: (0.75, 4.0 / 3.0),
        })
        .count(2);
    let local = View::new(24, 24)
        .transform(Transform::RandomResizedCrop {
            scale: (0.05, 0.4),
            ratio: (0.75, 4.0 / 3.0),
        })
        .count(6);
    let mut p = Pipeline::builder()
        .source(sample_source())
        .device(Device::Cpu)
        .batch_size(5)
        .views(vec![global, local])
        .build()
        .unwrap();
    let b = p.epoch(0).next().unwrap().unwrap();
    assert_eq!(b.views().len(), 2);
    assert_eq!(b.views()[0].shape(), [10, 3, 64, 64]);
    assert_eq!(b.views()[1].shape(), [30, 3, 24, 24]);
    assert_eq!(b.images().shape(), [10, 3, 64, 64]);
    // The draws of one sample differ from each other.
    let t = &b.views()[1];
    let per = 3 * 24 * 24 * 4;
    let bytes = t.as_bytes().unwrap();
    for i in 0..5 {
        let draws: Vec<&[u8]> = (0..6).map(|k| &bytes[(i * 6 + k) * per..][..per]).collect();
        for k in 1..6 {
            assert_ne!(draws[0], draws[k], "sample {i} draw {k} repeats draw 0");
        }
    }
}

#[test]
fn center_crop_is_deterministic_and_epoch_independent() {
    let mut p = Pipeline::builder()
        .source(sample_source())
        .device(Device::Cpu)
        .batch_size(28)
        .shuffle(false)
        .transform(Transform::CenterCrop { resize: 73 })
        .output_size(64, 64)
        .flip_h(0.0)
        .build()
        .unwrap();
    let e0 = first_batch_bytes(&mut p, 0);
    let e5 = first_batch_bytes(&mut p, 5);
    assert!(e0 == e5, "eval output changed between epochs");
    // A training transform does change between epochs.
    let mut t = Pipeline::builder()
        .source(sample_source())
        .device(Device::Cpu)
        .batch_size(28)
        .shuffle(false)
        .output_size(64, 64)
        .build()
        .unwrap();
    let a = first_batch_bytes(&mut t, 0);
    let b = first_batch_bytes(&mut t, 1);
    assert!(a != b);
}

/// Pillow's hopper_orientation_N files show the same upright picture once
/// orientation is applied; so must the pipeline's centre crops of them,
/// which are drawn in the oriented frame.
#[test]
fn orientation_is_applied_before_cropping() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/pillow");
    let mut samples = vec![Sample {
        path: dir.join("hopper.jpg"),
        label: 1,
    }];
    for n in 2..=8 {
        samples.push(Sample {
            path: dir.join(format!("hopper_orientation_{n}.jpg")),
            label: n,
        });
    }
    let run = |orient: bool| {
        let mut p = Pipeline::builder()
            .source(Source::from_samples(&dir, samples.clone()).unwrap())
            .device(Device::Cpu)
            .batch_size(8)
            .shuffle(false)
            .transform(Transform::CenterCrop { resize: 100 })
            .output_size(80, 60)
            .flip_h(0.0)
            .dtype(DType::U8)
            .layout(Layout::Nhwc)
            .normalize(None)
            .apply_exif_orientation(orient)
            .build()
            .unwrap();
        first_batch_bytes(&mut p, 0) // u8: the bytes are the values
    };
    let mean_diff = |img: &[u8], i: usize| {
        let n = 80 * 60 * 3;
        let (a, b) = (&img[..n], &img[i * n..(i + 1) * n]);
        a.iter()
            .zip(b)
            .map(|(x, y)| x.abs_diff(*y) as f64)
            .sum::<f64>()
            / n as f64
    };
    let upright = run(true);
    let raw = run(false);
    for i in 1..8 {
        let d = mean_diff(&upright, i);
        assert!(
            d < 6.0,
            "orientation {}: mean diff {d:.2} from upright hopper",
            i + 1
        );
        assert!(
            mean_diff(&raw, i) > 10.0,
            "orientation {} looks upright unrotated",
            i + 1
        );
    }
}

#[test]
fn antialias_changes_shrunk_output_only() {
    let run = |aa: bool, size: usize| {
        let mut p = Pipeline::builder()
            .source(sample_source())
            .device(Device::Cpu)
            .batch_size(4)
            .shuffle(false)
            .transform(Transform::Resize)
            .output_size(size, size)
            .flip_h(0.0)
            .antialias(aa)
            .build()
            .unwrap();
        first_batch_bytes(&mut p, 0)
    };
    // Shrinking 500 px photos to 32: the filters differ.
    assert!(run(true, 32) != run(false, 32));
    // Enlarging to 1024 px on both axes: antialias does nothing.
    assert!(run(true, 1024) == run(false, 1024));
}

/// Every batch of epoch 0 of `b`, images concatenated.
fn epoch_bytes(b: gpufeed::PipelineBuilder) -> Vec<u8> {
    let mut p = b.build().unwrap();
    p.epoch(0)
        .flat_map(|b| b.unwrap().images().as_bytes().unwrap().to_vec())
        .collect()
}

#[test]
fn eval_and_resize_pipelines_do_not_flip_unless_asked() {
    // Issue 15: `.transform(CenterCrop)` alone must give torchvision's and
    // DALI's evaluation output, never a mirrored image.
    for t in [Transform::CenterCrop { resize: 73 }, Transform::Resize] {
        let eval = || {
            Pipeline::builder()
                .source(sample_source())
                .device(Device::Cpu)
                .batch_size(7)
                .output_size(64, 64)
                .transform(t)
        };
        let default = epoch_bytes(eval());
        assert_eq!(
            default,
            epoch_bytes(eval().flip_h(0.0)),
            "{t:?} flips by default"
        );
        // The comparison can see a flip: every sample mirrored differs.
        assert_ne!(default, epoch_bytes(eval().flip_h(1.0)), "{t:?}");
    }
    // The training transform keeps torchvision's RandomHorizontalFlip(0.5).
    let train = || {
        Pipeline::builder()
            .source(sample_source())
            .device(Device::Cpu)
            .batch_size(7)
            .output_size(32, 32)
    };
    assert_eq!(epoch_bytes(train()), epoch_bytes(train().flip_h(0.5)));
    assert_ne!(epoch_bytes(train()), epoch_bytes(train().flip_h(0.0)));
    // Views follow their transform the same way.
    let v = View::new(8, 8).transform(Transform::CenterCrop { resize: 9 });
    assert_eq!(v.flip_h, 0.0);
    assert_eq!(View::new(8, 8).flip_h, 0.5);
}

#[test]
fn pipelines_antialias_by_default() {
    // Issue 15: torchvision v2 (0.17+) and DALI antialias when shrinking,
    // and so does a pipeline built without `.antialias(..)`. The antialias
    // filter itself is pinned to Pillow's output by the golden test in
    // src/augment/cpu.rs (tests/golden/resize.json).
    let shrink = || {
        Pipeline::builder()
            .source(sample_source())
            .device(Device::Cpu)
            .batch_size(4)
            .shuffle(false)
            .transform(Transform::Resize)
            .output_size(32, 32)
    };
    let default = first_batch_bytes(&mut shrink().build().unwrap(), 0);
    let on = first_batch_bytes(&mut shrink().antialias(true).build().unwrap(), 0);
    let off = first_batch_bytes(&mut shrink().antialias(false).build().unwrap(), 0);
    assert!(default == on, "the default is not antialias(true)");
    assert!(default != off);
}
