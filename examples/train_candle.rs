//! A small convolutional network trained with candle on batches from
//! gpufeed (issue 17, item 3): the trainer side of the library, end to end.
//!
//! ```sh
//! cargo run --release --features candle-example --example train_candle -- [DATA] [--epochs N]
//! ```
//!
//! DATA is an ImageFolder (default `data/sample`). Prints the loss and the
//! images per second of each epoch. Batches come from the CPU backend and
//! move into candle tensors without a copy (`gpufeed::interop::candle`).
//! `--device cuda:N` (build with `--features candle-example,candle-cuda`)
//! takes them from the CUDA backend as candle CUDA tensors, again without
//! a copy, and trains on that GPU.

use std::time::Instant;

use candle_core::{D, DType, Device, Module, Tensor};
use candle_nn::{Conv2dConfig, Optimizer, VarBuilder, VarMap};
use gpufeed::{Pipeline, Source, Transform};

/// What to train.
pub(crate) struct Options {
    pub(crate) data: std::path::PathBuf,
    pub(crate) epochs: u64,
    pub(crate) batch_size: usize,
    pub(crate) size: usize,
    pub(crate) transform: Transform,
    pub(crate) learning_rate: f64,
    pub(crate) seed: u64,
    /// CUDA device to train on (and decode with); `None`: the CPU.
    pub(crate) cuda: Option<usize>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            data: std::path::PathBuf::from("data/sample"),
            epochs: 10,
            batch_size: 16,
            size: 64,
            transform: Transform::RANDOM_RESIZED_CROP,
            learning_rate: 3e-3,
            seed: 0,
            cuda: None,
        }
    }
}

/// Two strided convolutions, global average pooling, a linear classifier.
struct Net {
    c1: candle_nn::Conv2d,
    c2: candle_nn::Conv2d,
    fc: candle_nn::Linear,
}

impl Net {
    fn new(vb: VarBuilder, classes: usize) -> candle_core::Result<Net> {
        let cfg = Conv2dConfig {
            stride: 2,
            padding: 1,
            ..Default::default()
        };
        Ok(Net {
            c1: candle_nn::conv2d(3, 16, 3, cfg, vb.pp("c1"))?,
            c2: candle_nn::conv2d(16, 32, 3, cfg, vb.pp("c2"))?,
            fc: candle_nn::linear(32, classes, vb.pp("fc"))?,
        })
    }
}

impl Module for Net {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let x = self.c1.forward(x)?.relu()?;
        let x = self.c2.forward(&x)?.relu()?;
        self.fc.forward(&x.mean(D::Minus1)?.mean(D::Minus1)?)
    }
}

/// Re-initialise every weight from `seed` (candle cannot seed its CPU
/// generator): uniform in ±1/sqrt(fan-in), like PyTorch's default, so a run
/// repeats exactly.
fn seed_weights(vars: &VarMap, seed: u64) -> candle_core::Result<()> {
    let data = vars.data().lock().expect("not poisoned");
    let mut names: Vec<&String> = data.keys().collect();
    names.sort();
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for name in names {
        let var = &data[name];
        let dims = var.dims().to_vec();
        let fan_in: usize = dims.iter().skip(1).product::<usize>().max(1);
        let bound = 1.0 / (fan_in as f32).sqrt();
        let n: usize = dims.iter().product();
        let values: Vec<f32> = (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                ((state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * bound
            })
            .collect();
        var.set(&Tensor::from_vec(values, dims, var.device())?)?;
    }
    Ok(())
}

/// Train; returns the loss of every step, printing one line per epoch.
pub(crate) fn train(o: &Options) -> anyhow::Result<Vec<f32>> {
    let source = Source::image_folder(&o.data)?;
    let classes = source.classes().len();
    let mut pipeline = Pipeline::builder()
        .source(source)
        .batch_size(o.batch_size)
        .output_size(o.size, o.size)
        .transform(o.transform)
        .dtype(gpufeed::DType::F32)
        .seed(o.seed)
        .device(o.cuda.map_or(gpufeed::Device::Cpu, gpufeed::Device::Cuda))
        .build()?;
    let dev = match o.cuda {
        None => Device::Cpu,
        Some(i) => Device::new_cuda(i)?,
    };
    let vars = VarMap::new();
    let net = Net::new(VarBuilder::from_varmap(&vars, DType::F32, &dev), classes)?;
    seed_weights(&vars, o.seed)?;
    let mut opt = candle_nn::AdamW::new_lr(vars.all_vars(), o.learning_rate)?;
    let mut losses = Vec::new();
    for epoch in 0..o.epochs {
        let t0 = Instant::now();
        let (mut images, mut sum) = (0usize, 0f32);
        let steps = losses.len();
        for batch in pipeline.epoch(epoch) {
            let (x, y) = gpufeed::interop::candle::into_candle_on(batch?, &dev)?;
            images += y.dims1()?;
            let logits = net.forward(&x)?;
            let loss = candle_nn::loss::cross_entropy(&logits, &y)?;
            opt.backward_step(&loss)?;
            let l = loss.to_scalar::<f32>()?;
            sum += l;
            losses.push(l);
        }
        let n = (losses.len() - steps).max(1);
        println!(
            "epoch {epoch}: loss {:.4}, {:.0} images/s",
            sum / n as f32,
            images as f64 / t0.elapsed().as_secs_f64()
        );
    }
    Ok(losses)
}

#[allow(dead_code)] // The test includes this file for `train`.
fn main() -> anyhow::Result<()> {
    let mut o = Options::default();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--epochs" => o.epochs = args.next().unwrap_or_default().parse()?,
            "--device" => {
                let d = args.next().unwrap_or_default();
                o.cuda = match d.strip_prefix("cuda:") {
                    _ if d == "cpu" => None,
                    Some(i) if cfg!(feature = "candle-cuda") => Some(i.parse()?),
                    Some(_) => anyhow::bail!("--device {d}: build with --features candle-cuda"),
                    None => anyhow::bail!("--device {d}: cpu or cuda:N"),
                };
            }
            _ => o.data = a.into(),
        }
    }
    train(&o)?;
    Ok(())
}
