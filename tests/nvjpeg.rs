//! nvJPEG bindings load against the library (CI: the `nvidia-nvjpeg`
//! wheel) and fail with typed errors, not crashes, when there is no GPU.
//! Without the library they show as ignored; with
//! `GPUFEED_REQUIRE_NVJPEG=1` they fail instead.

mod common;

use common::Outcome;
use gpufeed::decode::nvjpeg;

common::tests!(
    reports_its_version,
    has_every_entry_point_of_the_decoupled_api,
    handle_without_a_gpu_is_a_typed_error,
    routing_keeps_what_nvjpeg_decodes_wrongly_on_the_cpu,
);

fn need_nvjpeg() -> Outcome {
    match nvjpeg::library() {
        Ok(lib) => {
            println!("loaded {}", lib.name);
            Ok(())
        }
        Err(e) => Err(common::not_run("GPUFEED_REQUIRE_NVJPEG", e)),
    }
}

fn reports_its_version() -> Outcome {
    need_nvjpeg()?;
    let (major, minor, patch) = nvjpeg::version().unwrap();
    println!("nvJPEG {major}.{minor}.{patch}");
    assert!(major >= 12, "nvJPEG {major}.{minor}.{patch}");
    Ok(())
}

/// Every entry point the CUDA route's decoupled decoders call resolves in
/// the nvJPEG this machine loads (CI: the `nvidia-nvjpeg` wheel); no GPU
/// needed.
fn has_every_entry_point_of_the_decoupled_api() -> Outcome {
    need_nvjpeg()?;
    let lib = nvjpeg::library().unwrap();
    let missing = lib.missing_decoupled_api();
    assert!(missing.is_empty(), "{}: missing {missing:?}", lib.name);
    Ok(())
}

fn handle_without_a_gpu_is_a_typed_error() -> Outcome {
    need_nvjpeg()?;
    let handle = nvjpeg::Handle::new();
    match gpufeed::cuda::devices() {
        Err(no_gpu) => {
            let e = handle.expect_err("a handle without a GPU");
            println!("no GPU ({no_gpu}); nvjpegCreateSimple: {e}");
            // nvJPEG's own status, typed (issue 16, item 7).
            assert!(
                matches!(
                    e,
                    gpufeed::Error::Nvjpeg {
                        call: "nvjpegCreateSimple",
                        ..
                    }
                ),
                "{e:?}"
            );
            // The engine query is an error too, not a panic.
            let e = nvjpeg::hardware_decoder_info().expect_err("engine info without a GPU");
            assert!(
                matches!(e, gpufeed::Error::Device(_) | gpufeed::Error::Nvjpeg { .. }),
                "{e:?}"
            );
        }
        Ok(devs) => {
            let h = handle.unwrap_or_else(|e| panic!("GPU {:?} present but {e}", devs[0].name));
            drop(h);
            match nvjpeg::hardware_decoder_info() {
                Ok((engines, cores)) => println!("hardware decoder: {engines} x {cores} cores"),
                Err(e) => println!("no hardware decoder: {e}"),
            }
        }
    }
    Ok(())
}

/// The routing rule (issue 5) over the corpus files nvJPEG 13.0 decoded
/// wrongly on an H100 (2026-11-22): RGB-coded files and mixed chroma
/// factors go to the CPU decoder; gray files with 2x2 sampling stay on
/// CUDA's decoder but not the hardware engine's. Plain 4:2:0 and gray
/// photos stay on nvJPEG. Header parsing only: no library, no GPU.
fn routing_keeps_what_nvjpeg_decodes_wrongly_on_the_cpu() -> Outcome {
    let corpus = common::corpus()?;
    if !corpus.join("tricky").is_dir() {
        // A trimmed corpus (gpu-bundle.sh --no-tricky): on an H200
        // (2026-11-27) this read a missing file and failed instead.
        return Err(common::not_run(
            "GPUFEED_REQUIRE_CORPUS",
            "the corpus has no tricky/",
        ));
    }
    let header = |f: &str| {
        let bytes = std::fs::read(corpus.join("tricky").join(f)).unwrap();
        gpufeed::jpeg::parse_header(&bytes, gpufeed::jpeg::DEFAULT_MAX_PIXELS).unwrap()
    };
    for f in [
        "jpeg-decoder-reftest/rgb.jpg",
        "jpeg-js/truecolor.jpg",
        "go/video-001.rgb.jpeg",
    ] {
        let h = header(f);
        assert!(h.is_rgb(), "{f}: RGB-coded");
        assert!(!nvjpeg::takes(&h), "{f}: must go to the CPU");
    }
    for f in [
        "wuffs/peacock.s-weird.jpeg",
        "wuffs/peacock.s-very-weird.jpeg",
        "wuffs/peacock.s1x3.jpeg",
    ] {
        assert!(!nvjpeg::takes(&header(f)), "{f}: must go to the CPU");
    }
    for f in [
        "jpeg-decoder-reftest/grayscale_16x24_sampling2x2.jpg",
        "go/video-005.gray.q50.2x2.jpeg",
    ] {
        let h = header(f);
        assert!(nvjpeg::takes(&h), "{f}: CUDA decodes it");
        assert!(!nvjpeg::hardware_takes(&h), "{f}: not for the engine");
    }
    for f in ["dali-extra/camera-2382826_640.jpg", "pillow/hopper.jpg"] {
        let h = header(f);
        assert!(!h.is_rgb(), "{f}: YCbCr");
        assert!(nvjpeg::hardware_takes(&h), "{f}: for the engine");
    }
    // Issue 16, 3b: the engine decodes baseline files only; progressive
    // photos go to CUDA from the worker instead of being refused by the
    // engine later.
    for f in ["17.jpeg", "35.jpeg"] {
        let bytes = std::fs::read(corpus.join("photos/imagenet-size").join(f)).unwrap();
        let h = gpufeed::jpeg::parse_header(&bytes, gpufeed::jpeg::DEFAULT_MAX_PIXELS).unwrap();
        assert_eq!(h.sof, gpufeed::jpeg::SofKind::Progressive, "{f}");
        assert!(nvjpeg::takes(&h), "{f}: CUDA decodes it");
        assert!(!nvjpeg::hardware_takes(&h), "{f}: not for the engine");
    }
    Ok(())
}
