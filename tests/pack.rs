//! `gpufeed pack` (issue 18): the shards it writes read back through
//! `bench`, `scan` and `Source::webdataset`, re-encoded or packed again.

mod common;

use common::{bench_cpu, gpufeed};

common::tests!(
    pack_writes_shards_that_bench_reads,
    pack_reencodes_to_a_max_side_and_repacks_shards,
);

/// Issue 18: `pack` writes WebDataset shards; `bench` reads them back by
/// brace pattern.
fn pack_writes_shards_that_bench_reads() {
    let dir = tempfile::tempdir().unwrap();
    let sample = common::sample_dir();
    let (code, out, err) = gpufeed(&[
        "pack",
        sample.to_str().unwrap(),
        "-o",
        dir.path().to_str().unwrap(),
        "--shard-size",
        "800KB",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("packed 28 samples") && out.contains("3 shards"),
        "{out}"
    );
    let pattern = dir.path().join("shard-{000000..000002}.tar");
    let (code, out, err) = bench_cpu(&[pattern.to_str().unwrap()], &["--epochs", "1", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["files"], 28);
    assert_eq!(v["epochs"][0]["images"], 28);
    // scan reads the shards' members too.
    let (code, out, err) = gpufeed(&["scan", pattern.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("28 files: 28 decoded, 0 typed errors"),
        "{out}"
    );
    let (code, _, err) = gpufeed(&["pack", "-o", "/tmp/x", "--shard-size", "1 parsec"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown unit"), "{err}");
    // The shards and their indexes, and nothing else: each shard was
    // written under `.partial` and named once whole.
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [0, 1, 2]
            .iter()
            .flat_map(|n| [format!("shard-{n:06}.tar"), format!("shard-{n:06}.tar.idx")])
            .collect::<Vec<_>>()
    );
    // Every shard has its index, which lists what the tar headers list.
    for n in 0..3 {
        let idx = dir.path().join(format!("shard-{n:06}.tar.idx"));
        assert!(
            std::fs::read_to_string(&idx)
                .unwrap()
                .starts_with("gpufeed-wds-index 2 ")
        );
    }
}

/// Issue 18: `pack --max-side 64` shrinks every photo (all are larger) to
/// a 64 px long side, upright, as JPEG; the shards' batches are close to
/// the folder's (Resize to 32 px: the same picture); packing the shards
/// again, with 4 threads, keeps the samples, labels and bytes.
fn pack_reencodes_to_a_max_side_and_repacks_shards() {
    use gpufeed::{Device, Pipeline, Source, Transform};
    let dir = tempfile::tempdir().unwrap();
    let small = dir.path().join("small");
    let sample = common::sample_dir();
    let (code, out, err) = gpufeed(&[
        "pack",
        sample.to_str().unwrap(),
        "-o",
        small.to_str().unwrap(),
        "--max-side",
        "64",
        "--quality",
        "85",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("28 re-encoded to at most 64 px"), "{out}");
    let shards = small.join("shard-000000.tar");
    let wds = Source::webdataset([shards.to_str().unwrap()]).unwrap();
    let folder = Source::image_folder(&sample).unwrap();
    let labels = |s: &Source| s.samples().iter().map(|x| x.label).collect::<Vec<_>>();
    assert_eq!(labels(&wds), labels(&folder));
    let mut bytes = Vec::new();
    for i in 0..wds.len() {
        wds.read(i, &mut bytes, u64::MAX).unwrap();
        let h = gpufeed::jpeg::parse_header(&bytes, u64::MAX).unwrap();
        assert_eq!(h.width.max(h.height), 64, "sample {i}");
        assert!(wds.samples()[i].path.extension().unwrap() == "jpg");
    }
    let batch = |s: Source| {
        let mut p = Pipeline::builder()
            .source(s)
            .device(Device::Cpu)
            .transform(Transform::Resize)
            .output_size(32, 32)
            .batch_size(28)
            .dtype(gpufeed::DType::U8)
            .normalize(None)
            .shuffle(false)
            .build()
            .unwrap();
        let b = p.epoch(0).next().unwrap().unwrap();
        b.images().as_bytes().unwrap().to_vec()
    };
    let (a, b) = (batch(folder), batch(wds));
    let mse = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (*x as f64 - *y as f64).powi(2))
        .sum::<f64>()
        / a.len() as f64;
    let psnr = 10.0 * (255.0f64 * 255.0 / mse).log10();
    assert!(
        psnr > 25.0,
        "shrunk shards vs folder at 32 px: {psnr:.1} dB"
    );
    // Shards packed again (from shards), on 4 threads: the same members.
    let again = dir.path().join("again");
    let (code, _, err) = gpufeed(&[
        "pack",
        shards.to_str().unwrap(),
        "-o",
        again.to_str().unwrap(),
        "--threads",
        "4",
    ]);
    assert_eq!(code, 0, "{err}");
    let (x, y) = (
        std::fs::read(&shards).unwrap(),
        std::fs::read(again.join("shard-000000.tar")).unwrap(),
    );
    assert_eq!(x, y, "a shard packed again is the same tar");
}
