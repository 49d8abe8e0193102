//! The training example (examples/train_candle.rs) for a few epochs on the
//! sample set: the loss must fall (issue 17, item 3). The eval transform
//! keeps the images fixed, so the network memorises 28 photos.

mod common;

#[path = "../examples/train_candle.rs"]
mod example;

#[test]
fn the_loss_falls() {
    let o = example::Options {
        data: common::sample_dir(),
        epochs: 20,
        batch_size: 28,
        size: 32,
        transform: gpufeed::Transform::CenterCrop { resize: 36 },
        learning_rate: 3e-2,
        seed: 1,
        cuda: None,
    };
    let losses = example::train(&o).unwrap();
    assert_eq!(losses.len(), 20);
    let first: f32 = losses[..3].iter().sum::<f32>() / 3.0;
    let last: f32 = losses[17..].iter().sum::<f32>() / 3.0;
    println!("losses: {losses:?}");
    assert!(last < 0.8 * first, "loss did not fall: {losses:?}");
}
