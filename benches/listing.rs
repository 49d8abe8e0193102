//! Listing cost: an ImageFolder of 200 000 empty files (1000 classes x 200),
//! generated once in a temporary folder. Listing must not `stat` each file,
//! so this measures `getdents` plus sorting.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use gpufeed::Source;

const CLASSES: usize = 1000;
const PER_CLASS: usize = 200;

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    for class in 0..CLASSES {
        let d = dir.path().join(format!("n{class:08}"));
        std::fs::create_dir(&d).unwrap();
        for i in 0..PER_CLASS {
            std::fs::File::create(d.join(format!("n{class:08}_{i}.JPEG"))).unwrap();
        }
    }
    let mut g = c.benchmark_group("listing");
    g.sample_size(10);
    g.throughput(Throughput::Elements((CLASSES * PER_CLASS) as u64));
    g.bench_function("image_folder_200k", |b| {
        b.iter(|| {
            let s = Source::image_folder(dir.path()).unwrap();
            assert_eq!(s.len(), CLASSES * PER_CLASS);
            s
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
