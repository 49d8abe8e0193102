//! Recipes and photometric ops through the whole pipeline (issue 19), on
//! the CPU backend (tests/device_stage.rs holds the device against it):
//! shapes, and determinism with every op on — the same seed gives
//! byte-identical batches whatever the thread counts, and on resume.

mod common;

use gpufeed::augment::{EraseValue, RandomErasing, Recipe};
use gpufeed::{DType, Device, Pipeline, PipelineBuilder, Source};

fn builder(recipe: Recipe) -> PipelineBuilder {
    Pipeline::builder()
        .source(Source::image_folder(common::sample_dir()).unwrap())
        .device(Device::Cpu)
        .batch_size(4)
        .seed(11)
        .dtype(DType::F16)
        .recipe(recipe)
}

/// A small DINO (global 64, 4 local 32) with random erasing on the locals
/// too: every photometric op in one pipeline.
fn every_op() -> Recipe {
    let mut r = Recipe::dino(64, 32, 4);
    let locals = r.views[2].erasing(RandomErasing {
        value: EraseValue::Random,
        ..RandomErasing::default()
    });
    r.views[2] = locals;
    r
}

/// Every view's bytes of every batch of `epoch` from `position` on.
fn run(p: &mut Pipeline, epoch: u64, position: usize) -> Vec<Vec<Vec<u8>>> {
    p.epoch_from(epoch, position)
        .map(|b| {
            let b = b.unwrap();
            b.views()
                .iter()
                .map(|t| t.as_bytes().unwrap().to_vec())
                .collect()
        })
        .collect()
}

#[test]
fn dino_batches_have_every_view() {
    let mut p = builder(Recipe::dino(64, 32, 4)).build().unwrap();
    let b = p.epoch(0).next().unwrap().unwrap();
    let shapes: Vec<[usize; 4]> = b.views().iter().map(|t| t.shape()).collect();
    assert_eq!(shapes, [[4, 3, 64, 64], [4, 3, 64, 64], [16, 3, 32, 32]]);
}

#[test]
fn every_op_on_is_deterministic_across_threads_and_resume() {
    let mut one = builder(every_op()).workers(1).readers(1).build().unwrap();
    let mut four = builder(every_op()).workers(4).readers(3).build().unwrap();
    let a = run(&mut one, 2, 0);
    let b = run(&mut four, 2, 0);
    assert_eq!(a.len(), b.len());
    assert!(a == b, "batches differ between 1 and 4 workers");
    // Resume after two batches (8 samples): the rest, byte for byte.
    let rest = run(&mut four, 2, 8);
    assert!(rest == a[2..], "resumed batches differ");
    // A different epoch draws differently.
    assert!(run(&mut one, 3, 0) != a);
}

#[test]
fn photometric_ops_change_the_pixels_and_not_the_crops() {
    // The same views without photometric ops: same geometry draws (their
    // own stream), so the ops are the only difference.
    let mut plain = every_op();
    for v in &mut plain.views {
        v.photo = Default::default();
    }
    let a = run(&mut builder(every_op()).build().unwrap(), 0, 0);
    let b = run(&mut builder(plain).build().unwrap(), 0, 0);
    assert_eq!(a.len(), b.len());
    // A local draw has no op at all with p 0.2 · 0.8 · 0.5 · 0.5 = 0.04:
    // those few must equal the plain pipeline's draw byte for byte (same
    // crop, same flip), the rest must differ.
    let draw = 3 * 32 * 32 * 2;
    let (mut same, mut differ) = (0, 0);
    for (x, y) in a.iter().zip(&b) {
        assert!(x[0] != y[0], "the first global view is always blurred");
        for (p, q) in x[2].chunks(draw).zip(y[2].chunks(draw)) {
            if p == q { same += 1 } else { differ += 1 }
        }
    }
    assert!(
        same >= 1 && differ > 10 * same,
        "{same} same, {differ} differ"
    );
}

#[test]
fn bad_settings_are_refused_naming_the_op() {
    let mut r = Recipe::simclr(32);
    r.views[0] = r.views[0].blur(gpufeed::augment::GaussianBlur::new(8, (0.1, 2.0), 0.5));
    let err = builder(r).build().unwrap_err().to_string();
    assert!(
        err.contains("gaussian blur") && err.contains("odd"),
        "{err}"
    );
    let mut r = Recipe::byol(32);
    r.views[1] = r.views[1].solarize(1.5, 0.2);
    let err = builder(r).build().unwrap_err().to_string();
    assert!(err.contains("solarize"), "{err}");
}

#[test]
fn mixup_gives_soft_labels_and_repeats() {
    use gpufeed::augment::Mixup;
    let m = Mixup::deit(4);
    let build = |workers| {
        builder(Recipe::imagenet_train(32))
            .mixup(m)
            .workers(workers)
            .build()
            .unwrap()
    };
    let (mut one, mut four) = (build(1), build(4));
    let soft = |p: &mut Pipeline, position| -> Vec<(Vec<f32>, Vec<u8>)> {
        p.epoch_from(1, position)
            .map(|b| {
                let b = b.unwrap();
                let s = b.soft_labels().expect("mixup gives soft labels").to_vec();
                assert_eq!(s.len(), b.len() * 4);
                for (row, &label) in s.chunks(4).zip(b.labels()) {
                    // Rows sum to 1; the sample's own class holds at least
                    // the smoothing floor 0.025, most of the mass when λ is
                    // large.
                    assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-5, "{row:?}");
                    assert!(row[label as usize] >= 0.025);
                }
                (s, b.images().as_bytes().unwrap().to_vec())
            })
            .collect()
    };
    let a = soft(&mut one, 0);
    assert!(
        a == soft(&mut four, 0),
        "mixup differs between thread counts"
    );
    assert!(soft(&mut four, 8) == a[2..], "mixup differs on resume");
    // Without mixup: hard labels only, and other pixels.
    let mut plain = builder(Recipe::imagenet_train(32)).build().unwrap();
    let b = plain.epoch(1).next().unwrap().unwrap();
    assert!(b.soft_labels().is_none());
    assert!(b.images().as_bytes().unwrap() != a[0].1.as_slice());
}

#[test]
fn mixup_settings_are_checked() {
    use gpufeed::augment::Mixup;
    let err = |r: Recipe, m: Mixup| builder(r).mixup(m).build().unwrap_err().to_string();
    let e = err(Recipe::dino(32, 16, 2), Mixup::deit(4));
    assert!(e.contains("single view"), "{e}");
    let e = err(Recipe::imagenet_train(32), Mixup::deit(3));
    assert!(e.contains("4 classes"), "{e}");
    let e = err(
        Recipe::imagenet_train(32),
        Mixup {
            mixup_alpha: 0.0,
            cutmix_alpha: 0.0,
            ..Mixup::deit(4)
        },
    );
    assert!(e.contains("alphas"), "{e}");
}
