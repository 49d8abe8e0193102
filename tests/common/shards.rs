//! What the WebDataset tests share: one pipeline setting, and the check
//! that shards give a folder's batches.

use gpufeed::{Device, Pipeline, PipelineBuilder, Source};

/// The shard tests' pipeline: CPU, batches of 5 at 24×32, seed 11.
pub(crate) fn builder(source: Source) -> PipelineBuilder {
    Pipeline::builder()
        .source(source)
        .device(Device::Cpu)
        .batch_size(5)
        .output_size(24, 32)
        .seed(11)
}

/// Two pipelines, same seed, one on the folder and one on the shards
/// packed from it: the same labels, and over two epochs the same order
/// and pixels. Returns the shards pipeline's counters.
pub(crate) fn same_batches(folder: Source, wds: Source) -> gpufeed::pipeline::Stats {
    assert_eq!(wds.len(), folder.len());
    let labels = |s: &Source| s.samples().iter().map(|x| x.label).collect::<Vec<_>>();
    assert_eq!(labels(&wds), labels(&folder));
    let mut a = builder(folder).build().unwrap();
    let mut b = builder(wds).build().unwrap();
    for epoch in 0..2 {
        let fa: Vec<_> = a.epoch(epoch).map(Result::unwrap).collect();
        let fb: Vec<_> = b.epoch(epoch).map(Result::unwrap).collect();
        assert_eq!(fa.len(), fb.len());
        for (x, y) in fa.iter().zip(&fb) {
            assert_eq!(x.indices(), y.indices(), "epoch {epoch}: order");
            assert_eq!(x.labels(), y.labels());
            assert!(x.images().as_bytes() == y.images().as_bytes(), "pixels");
        }
    }
    b.stats()
}
