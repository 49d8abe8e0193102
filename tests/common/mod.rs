//! Helpers shared by the integration tests.
#![allow(dead_code, unused_imports)]

use std::path::PathBuf;

/// The repository's sample ImageFolder (28 CC0 photos, 4 classes): in the
/// source tree the tests were built from, else `data/sample` under the
/// current directory (test binaries copied to a GPU machine by
/// scripts/gpu-bundle.sh run from a checkout there).
pub(crate) fn sample_dir() -> PathBuf {
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/sample");
    if built.is_dir() {
        built
    } else {
        PathBuf::from("data/sample")
    }
}

/// Run the `gpufeed` binary with `args`: its exit code (-1 if killed),
/// stdout and stderr.
#[cfg(feature = "cli")]
pub(crate) fn gpufeed(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpufeed"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `gpufeed bench INPUT... --device cpu --size 32 ARGS...`: a quick run
/// on the CPU backend.
#[cfg(feature = "cli")]
pub(crate) fn bench_cpu(input: &[&str], args: &[&str]) -> (i32, String, String) {
    gpufeed(
        &[
            &["bench"],
            input,
            &["--device", "cpu", "--size", "32"],
            args,
        ]
        .concat(),
    )
}

pub(crate) mod harness;
pub(crate) mod shards;
pub(crate) mod tolerance;
pub(crate) use harness::{NotRun, Outcome, serial_tests, tests};

/// The shared test corpus: `$GPUFEED_CORPUS`, else `../shared/testdata`
/// beside the repository. Without it the test is not run (a failure under
/// `GPUFEED_REQUIRE_CORPUS=1`).
pub(crate) fn corpus() -> Result<PathBuf, NotRun> {
    let dir = std::env::var_os("GPUFEED_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/testdata"));
    if dir.join("MANIFEST.tsv").is_file() {
        Ok(dir)
    } else {
        Err(not_run(
            "GPUFEED_REQUIRE_CORPUS",
            format!("corpus not found at {}; set GPUFEED_CORPUS", dir.display()),
        ))
    }
}

/// A test that cannot run here: it shows as ignored with `why` in the
/// runner's summary, or fails when the environment variable `require` is
/// `1` (the GPU runner and CI set them, so a test that could not run there
/// is a failure, never a silent pass).
pub(crate) fn not_run(require: &str, why: impl std::fmt::Display) -> NotRun {
    if std::env::var(require).as_deref() == Ok("1") {
        panic!("{require}=1 but {why}");
    }
    NotRun(why.to_string())
}

/// CUDA device 0, or why not: ignored, or a failure under
/// `GPUFEED_REQUIRE_GPU=1`.
pub(crate) fn need_gpu() -> Result<(), NotRun> {
    gpufeed::cuda::devices()
        .map(drop)
        .map_err(|e| not_run("GPUFEED_REQUIRE_GPU", format!("no CUDA device: {e}")))
}

/// A source of `files` under `root`, every one labelled 0 (the corpus has
/// no classes).
pub(crate) fn unlabelled(root: &std::path::Path, files: &[PathBuf]) -> gpufeed::Source {
    let samples = files
        .iter()
        .map(|p| gpufeed::source::Sample {
            path: p.clone(),
            label: 0,
        })
        .collect();
    gpufeed::Source::from_samples(root, samples).unwrap()
}

/// The CPU decoders compiled into this build.
pub(crate) fn backends() -> Vec<gpufeed::decode::CpuBackend> {
    let mut v = vec![gpufeed::decode::CpuBackend::Zune];
    if cfg!(feature = "turbojpeg") {
        v.push(gpufeed::decode::CpuBackend::TurboJpeg);
    }
    v
}

/// A copy of the sample set with bad files mixed into its classes.
pub(crate) fn corrupt_dataset() -> (tempfile::TempDir, Vec<PathBuf>, Vec<PathBuf>) {
    let dir = tempfile::tempdir().unwrap();
    let mut good = Vec::new();
    for s in gpufeed::Source::image_folder(sample_dir())
        .unwrap()
        .samples()
    {
        let rel = s.path.strip_prefix(sample_dir()).unwrap();
        let dst = dir.path().join(rel);
        std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
        std::fs::copy(&s.path, &dst).unwrap();
        good.push(dst);
    }
    let a_jpeg = std::fs::read(&good[0]).unwrap();
    let mut bomb = vec![0xFF, 0xD8, 0xFF, 0xC0, 0, 17, 8, 0xFF, 0xFF, 0xFF, 0xFF, 3];
    bomb.extend_from_slice(&[1, 0x22, 0, 2, 0x11, 1, 3, 0x11, 1, 0xFF, 0xDA, 0, 2]);
    let bad: Vec<(&str, Vec<u8>)> = vec![
        ("cat/empty.jpg", vec![]),
        ("dog/text.jpg", b"this is not an image".to_vec()),
        ("food/header-only.jpg", a_jpeg[..300].to_vec()),
        ("food/bomb.jpg", bomb),
        ("vehicle/png.jpg", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec()),
    ];
    let mut bad_paths = Vec::new();
    for (rel, bytes) in bad {
        let p = dir.path().join(rel);
        std::fs::write(&p, bytes).unwrap();
        bad_paths.push(p);
    }
    // A dangling symlink: listed, then unreadable.
    let link = dir.path().join("dog/dangling.jpg");
    std::os::unix::fs::symlink(dir.path().join("missing.jpg"), &link).unwrap();
    bad_paths.push(link);
    (dir, good, bad_paths)
}

/// Run `epochs` epochs of `cpu` and `dev` side by side: each device batch
/// must hold the CPU backend's samples (keys, labels, soft labels, and
/// the skipped ones by message) and come in the same number; `check`
/// compares the rest of each pair, named "epoch E batch B". Device
/// batches are compared as they come and dropped: the trainer may hold
/// only prefetch + 1 of them.
pub(crate) fn each_batch_as_cpu(
    cpu: &mut gpufeed::Pipeline,
    dev: &mut gpufeed::Pipeline,
    epochs: u64,
    check: impl FnMut(&gpufeed::Batch, &gpufeed::Batch, &str),
) {
    each_batch_as_cpu_in(cpu, dev, 0..epochs, check);
}

/// [`each_batch_as_cpu`] over the epochs `epochs`.
pub(crate) fn each_batch_as_cpu_in(
    cpu: &mut gpufeed::Pipeline,
    dev: &mut gpufeed::Pipeline,
    epochs: std::ops::Range<u64>,
    mut check: impl FnMut(&gpufeed::Batch, &gpufeed::Batch, &str),
) {
    let names = |e: &[gpufeed::Error]| e.iter().map(|e| e.to_string()).collect::<Vec<_>>();
    for epoch in epochs {
        let want: Vec<_> = cpu.epoch(epoch).map(Result::unwrap).collect();
        let mut batches = 0;
        for (b, (g, w)) in dev.epoch(epoch).zip(&want).enumerate() {
            let g = g.unwrap();
            batches += 1;
            let what = format!("epoch {epoch} batch {b}");
            assert_eq!(g.keys(), w.keys(), "{what}: keys");
            assert_eq!(g.labels(), w.labels(), "{what}: labels");
            assert_eq!(g.soft_labels(), w.soft_labels(), "{what}: soft labels");
            assert_eq!(names(g.skipped()), names(w.skipped()), "{what}: skipped");
            check(&g, w, &what);
        }
        assert_eq!(batches, want.len(), "epoch {epoch}: batch count");
    }
}
