//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

/// The repository's sample ImageFolder (28 CC0 photos, 4 classes).
pub(crate) fn sample_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/sample")
}

/// The shared test corpus: `$GPUFEED_CORPUS`, else `../shared/testdata`
/// beside the repository. `None` (after printing why) when absent.
pub(crate) fn corpus(test: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("GPUFEED_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/testdata"));
    if dir.join("MANIFEST.tsv").is_file() {
        Some(dir)
    } else {
        eprintln!(
            "SKIPPED ({test}: corpus not found at {}; set GPUFEED_CORPUS)",
            dir.display()
        );
        None
    }
}

/// The CPU decoders compiled into this build.
pub(crate) fn backends() -> Vec<gpufeed::decode::CpuBackend> {
    let mut v = vec![gpufeed::decode::CpuBackend::Zune];
    if cfg!(feature = "turbojpeg") {
        v.push(gpufeed::decode::CpuBackend::TurboJpeg);
    }
    v
}
