//! Hot CPU functions on ImageNet-sized photos: header parsing, CPU decode,
//! and the whole CPU pipeline. Uses `photos/imagenet-size` from the shared
//! corpus when present, else the repository's `data/sample`.

use std::path::PathBuf;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use gpufeed::augment::bench_support::{Augmenter, augment_f16_nchw};
use gpufeed::decode::{CpuDecoder, Image};
use gpufeed::jpeg::{DEFAULT_MAX_PIXELS, parse_header};
use gpufeed::{Device, Pipeline, Source};

fn photos() -> (PathBuf, Vec<Vec<u8>>) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let shared = std::env::var_os("GPUFEED_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("../shared/testdata"))
        .join("photos/imagenet-size");
    let dir = if shared.is_dir() {
        shared
    } else {
        root.join("data/sample")
    };
    let source = Source::recursive(&dir).expect("photo folder lists");
    let files = source
        .samples()
        .iter()
        .map(|s| std::fs::read(&s.path).unwrap())
        .collect();
    (dir, files)
}

fn bench(c: &mut Criterion) {
    let (dir, files) = photos();
    let n = files.len() as u64;
    eprintln!("benchmark photos: {} ({n} files)", dir.display());

    let mut g = c.benchmark_group("cpu");
    g.throughput(Throughput::Elements(n));
    g.bench_function("header_parse", |b| {
        b.iter(|| {
            for f in &files {
                std::hint::black_box(parse_header(f, DEFAULT_MAX_PIXELS).unwrap());
            }
        })
    });
    g.sample_size(10);
    g.bench_function("decode_zune", |b| {
        let mut dec = CpuDecoder::default();
        let mut img = Image::default();
        b.iter(|| {
            for f in &files {
                let h = parse_header(f, DEFAULT_MAX_PIXELS).unwrap();
                dec.decode(f, &h, &mut img).unwrap();
            }
        })
    });
    #[cfg(feature = "turbojpeg")]
    g.bench_function("decode_turbojpeg", |b| {
        let mut dec =
            CpuDecoder::with_backend(gpufeed::decode::CpuBackend::TurboJpeg, true).unwrap();
        let mut img = Image::default();
        b.iter(|| {
            for f in &files {
                let h = parse_header(f, DEFAULT_MAX_PIXELS).unwrap();
                dec.decode(f, &h, &mut img).unwrap();
            }
        })
    });
    let decoded: Vec<Image> = files
        .iter()
        .map(|f| {
            let mut img = Image::default();
            let h = parse_header(f, DEFAULT_MAX_PIXELS).unwrap();
            CpuDecoder::default().decode(f, &h, &mut img).unwrap();
            img
        })
        .collect();
    for antialias in [false, true] {
        let name = if antialias {
            "augment_rrc_224_f16_nchw_aa"
        } else {
            "augment_rrc_224_f16_nchw"
        };
        g.bench_function(name, |b| {
            let mut a = Augmenter::default();
            let mut out = vec![half::f16::ZERO; 3 * 224 * 224];
            let mut index = 0;
            b.iter(|| {
                for img in &decoded {
                    index += 1;
                    augment_f16_nchw(&mut a, img, index, 224, antialias, &mut out);
                }
            })
        });
    }
    let mut pipeline = Pipeline::builder()
        .source(Source::recursive(&dir).unwrap())
        .batch_size(32)
        .device(Device::Cpu)
        .build()
        .unwrap();
    let mut epoch = 0;
    g.bench_function("pipeline_epoch_rrc_224_f32", |b| {
        b.iter(|| {
            epoch += 1;
            for batch in pipeline.epoch(epoch) {
                std::hint::black_box(batch.unwrap());
            }
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
