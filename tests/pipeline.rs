//! The pipeline end to end on the CPU backend, on committed fixtures.

mod common;

use std::collections::HashMap;
use std::path::PathBuf;

use gpufeed::{
    DType, Device, Error, Layout, Pipeline, PipelineBuilder, Source, error::ErrorKind,
    error::SampleError, pipeline::OnError, sampler::ShardMode,
};

fn builder(source: Source) -> PipelineBuilder {
    Pipeline::builder()
        .source(source)
        .device(Device::Cpu)
        .output_size(32, 48)
}

/// Every batch of an epoch: (keys, labels, image bytes).
fn run_epoch(p: &mut Pipeline, epoch: u64) -> Vec<(Vec<PathBuf>, Vec<u32>, Vec<u8>)> {
    p.epoch(epoch)
        .map(|b| {
            let b = b.unwrap();
            (
                b.keys().to_vec(),
                b.labels().to_vec(),
                b.images().as_bytes().unwrap().to_vec(),
            )
        })
        .collect()
}

#[test]
fn image_folder_labels_are_sorted_class_folders() {
    let s = Source::image_folder(common::sample_dir()).unwrap();
    assert_eq!(s.classes(), ["cat", "dog", "food", "vehicle"]);
    assert_eq!(s.len(), 28);
    for sample in s.samples() {
        let class = sample
            .path
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_str()
            .unwrap();
        assert_eq!(s.classes()[sample.label as usize], class);
    }
    // Sorted within a class, classes in label order.
    let paths: Vec<_> = s.samples().iter().map(|x| x.path.clone()).collect();
    let mut sorted = paths.clone();
    sorted.sort();
    assert_eq!(paths, sorted);
}

#[test]
fn listing_errors_name_the_folder() {
    let missing = Source::image_folder("/nonexistent/gpufeed").unwrap_err();
    assert!(
        missing.to_string().contains("/nonexistent/gpufeed"),
        "{missing}"
    );
    let empty = tempfile::tempdir().unwrap();
    let e = Source::image_folder(empty.path()).unwrap_err();
    assert!(matches!(e, Error::Dataset { .. }), "{e}");
    std::fs::create_dir(empty.path().join("class")).unwrap();
    std::fs::write(empty.path().join("class/readme.txt"), b"x").unwrap();
    let e = Source::image_folder(empty.path()).unwrap_err();
    assert!(e.to_string().contains("no files"), "{e}");
}

#[test]
fn file_list_reads_both_separators() {
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("train.txt");
    std::fs::write(
        &list,
        "# comment\na/x.jpg\t3\nb,with,commas.jpg\t1\n\nc/y.jpg,7\r\n",
    )
    .unwrap();
    let s = Source::file_list(&list).unwrap();
    let got: Vec<_> = s
        .samples()
        .iter()
        .map(|x| (x.path.clone(), x.label))
        .collect();
    assert_eq!(
        got,
        vec![
            (dir.path().join("a/x.jpg"), 3),
            (dir.path().join("b,with,commas.jpg"), 1),
            (dir.path().join("c/y.jpg"), 7),
        ]
    );
    std::fs::write(&list, "a.jpg\t3\nb.jpg\tseven\n").unwrap();
    let e = Source::file_list(&list).unwrap_err();
    assert!(e.to_string().contains("line 2"), "{e}");
}

#[test]
fn one_epoch_visits_every_sample_once_with_its_label() {
    let source = Source::image_folder(common::sample_dir()).unwrap();
    let by_path: HashMap<PathBuf, u32> = source
        .samples()
        .iter()
        .map(|s| (s.path.clone(), s.label))
        .collect();
    let mut p = builder(source).batch_size(8).build().unwrap();
    assert_eq!(p.batches_per_epoch(), 4);
    let batches = run_epoch(&mut p, 0);
    assert_eq!(
        batches.iter().map(|b| b.0.len()).collect::<Vec<_>>(),
        [8, 8, 8, 4]
    );
    let mut seen: Vec<PathBuf> = Vec::new();
    for (keys, labels, bytes) in &batches {
        assert_eq!(bytes.len(), keys.len() * 3 * 32 * 48 * 4);
        for (k, l) in keys.iter().zip(labels) {
            assert_eq!(by_path[k], *l);
            seen.push(k.clone());
        }
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 28);
    let stats = p.stats();
    assert_eq!(
        (stats.samples, stats.batches, stats.total_errors()),
        (28, 4, 0)
    );
    assert!(stats.bytes_read > 0);
}

#[test]
fn shapes_dtypes_and_layouts() {
    for (dtype, layout) in [
        (DType::U8, Layout::Nhwc),
        (DType::F16, Layout::Nchw),
        (DType::BF16, Layout::Nhwc),
        (DType::F32, Layout::Nchw),
    ] {
        let norm = (dtype != DType::U8).then_some(gpufeed::augment::Normalize::IMAGENET);
        let mut p = builder(Source::image_folder(common::sample_dir()).unwrap())
            .batch_size(5)
            .dtype(dtype)
            .layout(layout)
            .normalize(norm)
            .build()
            .unwrap();
        let b = p.epoch(0).next().unwrap().unwrap();
        let t = b.images();
        assert_eq!(t.dtype(), dtype);
        let want = match layout {
            Layout::Nchw => [5, 3, 32, 48],
            Layout::Nhwc => [5, 32, 48, 3],
        };
        assert_eq!(t.shape(), want);
        assert_eq!(t.as_bytes().unwrap().len(), 5 * 3 * 32 * 48 * dtype.size());
        // Normalized values are centred near 0; raw u8 near the middle.
        let mean: f32 = (0..3).map(|c| t.get(2, c, 16, 24)).sum::<f32>() / 3.0;
        if dtype == DType::U8 {
            assert!(t.as_u8().is_some() && (0.0..=255.0).contains(&mean));
        } else {
            assert!((-3.0..3.0).contains(&mean), "{dtype:?} {mean}");
        }
    }
}

#[test]
fn same_batches_whatever_the_thread_counts() {
    let run = |readers, workers| {
        let mut p = builder(Source::image_folder(common::sample_dir()).unwrap())
            .batch_size(6)
            .seed(9)
            .readers(readers)
            .workers(workers)
            .build()
            .unwrap();
        run_epoch(&mut p, 3)
    };
    let one = run(1, 1);
    let four = run(4, 4);
    assert_eq!(one.len(), four.len());
    for (a, b) in one.iter().zip(&four) {
        assert_eq!(a.0, b.0);
        assert_eq!(a.1, b.1);
        assert!(a.2 == b.2, "image bytes differ");
    }
}

#[test]
fn resume_gives_the_remaining_batches() {
    let mut p = builder(Source::image_folder(common::sample_dir()).unwrap())
        .batch_size(5)
        .seed(1)
        .build()
        .unwrap();
    let full = run_epoch(&mut p, 2);
    // Stop after two batches, as a checkpoint would.
    let position = {
        let mut e = p.epoch(2);
        e.next().unwrap().unwrap();
        e.next().unwrap().unwrap().resume_position()
    };
    assert_eq!(position, 10);
    let rest: Vec<_> = p
        .epoch_from(2, position)
        .map(|b| {
            let b = b.unwrap();
            (
                b.keys().to_vec(),
                b.labels().to_vec(),
                b.images().as_bytes().unwrap().to_vec(),
            )
        })
        .collect();
    assert_eq!(rest.len(), full.len() - 2);
    assert!(rest == full[2..], "resumed batches differ");
    // Past the end: nothing.
    assert_eq!(p.epoch_from(2, 10_000).count(), 0);
}

#[test]
fn epochs_differ_and_seeds_repeat() {
    let mut p = builder(Source::image_folder(common::sample_dir()).unwrap())
        .batch_size(28)
        .seed(5)
        .build()
        .unwrap();
    let e0 = run_epoch(&mut p, 0);
    let e1 = run_epoch(&mut p, 1);
    let e0_again = run_epoch(&mut p, 0);
    assert_ne!(e0[0].0, e1[0].0);
    assert!(e0 == e0_again);
}

#[test]
fn ranks_split_the_dataset() {
    for (world, mode) in [
        (3, ShardMode::Uneven),
        (4, ShardMode::Drop),
        (3, ShardMode::Pad),
    ] {
        let mut all = Vec::new();
        let mut lens = Vec::new();
        for rank in 0..world {
            let mut p = builder(Source::image_folder(common::sample_dir()).unwrap())
                .batch_size(4)
                .shard(rank, world)
                .shard_mode(mode)
                .build()
                .unwrap();
            let keys: Vec<PathBuf> = run_epoch(&mut p, 0).into_iter().flat_map(|b| b.0).collect();
            lens.push(keys.len());
            all.extend(keys);
        }
        let n = all.len();
        all.sort();
        all.dedup();
        match mode {
            ShardMode::Uneven => assert_eq!((n, all.len()), (28, 28)),
            ShardMode::Drop => assert_eq!((n, all.len(), &lens[..]), (28, 28, &[7, 7, 7, 7][..])),
            ShardMode::Pad => assert_eq!((n, all.len(), &lens[..]), (30, 28, &[10, 10, 10][..])),
        }
    }
}

#[test]
fn drop_last_drops_the_partial_batch() {
    let mut p = builder(Source::image_folder(common::sample_dir()).unwrap())
        .batch_size(8)
        .drop_last(true)
        .build()
        .unwrap();
    assert_eq!(p.batches_per_epoch(), 3);
    let sizes: Vec<usize> = run_epoch(&mut p, 0).iter().map(|b| b.0.len()).collect();
    assert_eq!(sizes, [8, 8, 8]);
}

#[test]
fn skip_delivers_every_good_sample_once_and_names_the_bad() {
    let (dir, good, bad) = common::corrupt_dataset();
    let source = Source::image_folder(dir.path()).unwrap();
    assert_eq!(source.len(), good.len() + bad.len());
    for batch_size in [1, 4, 7, 64] {
        let mut p = builder(Source::image_folder(dir.path()).unwrap())
            .batch_size(batch_size)
            .on_error(OnError::Skip)
            .build()
            .unwrap();
        let (mut delivered, mut named) = (Vec::new(), Vec::new());
        for batch in p.epoch(0) {
            let batch = batch.unwrap();
            assert!(batch.len() == batch_size || batch.resume_position() == 34);
            delivered.extend(batch.keys().iter().cloned());
            for e in batch.skipped() {
                let Error::Sample { path, source } = e else {
                    panic!("{e}")
                };
                assert!(e.to_string().contains(path.to_str().unwrap()));
                named.push((path.clone(), source.kind()));
            }
        }
        delivered.sort();
        let mut want = good.clone();
        want.sort();
        assert_eq!(delivered, want, "batch size {batch_size}");
        let stats = p.stats();
        assert_eq!(stats.total_errors(), bad.len() as u64);
        assert_eq!(stats.errors_of(ErrorKind::Dimensions), 1);
        assert_eq!(stats.errors_of(ErrorKind::Read), 1);
        // Every bad file is named exactly once, trailing ones on the last
        // batch (issue 7: say exactly what happened).
        let mut named_paths: Vec<_> = named.iter().map(|(p, _)| p.clone()).collect();
        named_paths.sort();
        let mut want_bad = bad.clone();
        want_bad.sort();
        assert_eq!(named_paths, want_bad, "batch size {batch_size}");
    }
}

#[test]
fn fail_stops_the_epoch_naming_the_file() {
    let (dir, _, bad) = common::corrupt_dataset();
    let mut p = builder(Source::image_folder(dir.path()).unwrap())
        .batch_size(4)
        .shuffle(false)
        .on_error(OnError::Fail)
        .build()
        .unwrap();
    let results: Vec<_> = p.epoch(0).collect();
    let err = results.last().unwrap().as_ref().unwrap_err();
    let Error::Sample { path, .. } = err else {
        panic!("{err}")
    };
    assert!(bad.contains(path));
    assert!(results[..results.len() - 1].iter().all(|r| r.is_ok()));
    // Without shuffling the first bad file in sorted order is cat/empty.jpg.
    assert!(path.ends_with("cat/empty.jpg"), "{}", path.display());
    assert!(matches!(err.sample_error(), Some(SampleError::NotJpeg(_))));
    // The pipeline stays usable: the next epoch (same order, no shuffle)
    // delivers the same good batches and stops at the same file.
    let again: Vec<_> = p.epoch(1).collect();
    assert_eq!(again.len(), results.len());
    let Some(Err(Error::Sample {
        path: again_path, ..
    })) = again.last()
    else {
        panic!()
    };
    assert_eq!(again_path, path);
}

#[test]
fn dropping_an_epoch_midway_leaves_the_next_one_intact() {
    let mut p = builder(Source::image_folder(common::sample_dir()).unwrap())
        .batch_size(3)
        .prefetch(4)
        .build()
        .unwrap();
    let want = run_epoch(&mut p, 1);
    for _ in 0..5 {
        let mut e = p.epoch(0);
        let held = e.next().unwrap().unwrap();
        drop(e);
        drop(held);
    }
    assert!(run_epoch(&mut p, 1) == want);
}

#[test]
fn builder_validates() {
    let src = || Source::image_folder(common::sample_dir()).unwrap();
    let err = |b: PipelineBuilder| b.build().unwrap_err().to_string();
    assert!(err(Pipeline::builder()).contains("no source"));
    assert!(err(builder(src()).batch_size(0)).contains("batch_size"));
    assert!(err(builder(src()).readers(0)).contains("readers"));
    assert!(err(builder(src()).prefetch(0)).contains("prefetch"));
    assert!(err(builder(src()).output_size(0, 10)).contains("output size"));
    assert!(err(builder(src()).dtype(DType::U8)).contains("u8"));
    assert!(err(builder(src()).shard(2, 2)).contains("rank"));
    assert!(err(builder(src()).batches_in_flight(0)).contains("batches_in_flight"));
    assert!(err(builder(src()).decoder_memory_limit(1000)).contains("decoder_memory_limit"));
    let e = builder(src()).device(Device::Cuda(0)).build().unwrap_err();
    assert!(matches!(e, Error::Device(_)), "{e}");
    if !cfg!(feature = "turbojpeg") {
        let e = builder(src())
            .cpu_backend(gpufeed::decode::CpuBackend::TurboJpeg)
            .build();
        assert!(e.unwrap_err().to_string().contains("turbojpeg"));
    }
    let auto = builder(src()).device(Device::Auto).build();
    assert!(auto.is_ok(), "Auto falls back to the CPU");
}

/// With libjpeg-turbo the CPU route decodes only the window an image's
/// crops read (`Stats::decoded_cpu_window`): pixels that
/// `tests/differential.rs` holds equal to a full decode's over the
/// corpus. Every image still comes out, in the same batches whatever the
/// thread counts.
#[cfg(feature = "turbojpeg")]
#[test]
fn turbojpeg_decodes_the_crops_windows() {
    let run = |workers| {
        let mut p = builder(Source::image_folder(common::sample_dir()).unwrap())
            .cpu_backend(gpufeed::decode::CpuBackend::TurboJpeg)
            .batch_size(6)
            .seed(5)
            .workers(workers)
            .build()
            .unwrap();
        let batches = run_epoch(&mut p, 1);
        (batches, p.stats())
    };
    let (one, stats) = run(1);
    assert_eq!(stats.samples, 28);
    assert!(
        (1..=28).contains(&stats.decoded_cpu_window),
        "{} windows",
        stats.decoded_cpu_window
    );
    let (three, _) = run(3);
    assert!(one == three, "batches differ with 3 workers");
}

/// The monitor reads the counters while an epoch borrows the pipeline,
/// from another thread, and reads nothing once the pipeline is gone.
#[test]
fn the_monitor_reads_during_an_epoch_and_not_after_the_drop() {
    let mut p = builder(Source::image_folder(common::sample_dir()).unwrap())
        .batch_size(4)
        .build()
        .unwrap();
    let monitor = p.monitor();
    let mut epoch = p.epoch(0);
    epoch.next().unwrap().unwrap();
    let elsewhere = monitor.clone();
    let seen = std::thread::spawn(move || elsewhere.stats().unwrap().batches)
        .join()
        .unwrap();
    assert!(seen >= 1, "{seen}");
    assert_eq!(monitor.memory().unwrap().slots, 0, "the CPU backend");
    drop(epoch);
    drop(p);
    assert!(monitor.stats().is_none() && monitor.memory().is_none());
}

#[test]
fn held_batches_keep_their_data() {
    let mut p = builder(Source::image_folder(common::sample_dir()).unwrap())
        .batch_size(4)
        .shuffle(false)
        .build()
        .unwrap();
    let held: Vec<_> = p.epoch(0).map(|b| b.unwrap()).collect();
    let again = run_epoch(&mut p, 0);
    for (h, a) in held.iter().zip(&again) {
        assert_eq!(h.images().as_bytes().unwrap(), &a.2[..]);
        assert_eq!(h.keys(), &a.0[..]);
    }
    assert!(held.iter().all(|b| b.epoch() == 0));
}
