//! nvJPEG bindings load against the library (CI: the `nvidia-nvjpeg`
//! wheel) and fail with typed errors, not crashes, when there is no GPU.
//! With `GPUFEED_REQUIRE_NVJPEG=1` a missing library fails instead of
//! skipping.

mod common;

use gpufeed::decode::nvjpeg;

fn lib_or_skip(test: &str) -> bool {
    match nvjpeg::library() {
        Ok(lib) => {
            println!("loaded {}", lib.name);
            true
        }
        Err(e) => {
            common::skip(test, "GPUFEED_REQUIRE_NVJPEG", e);
            false
        }
    }
}

#[test]
fn reports_its_version() {
    if !lib_or_skip("reports_its_version") {
        return;
    }
    let (major, minor, patch) = nvjpeg::version().unwrap();
    println!("nvJPEG {major}.{minor}.{patch}");
    assert!(major >= 12, "nvJPEG {major}.{minor}.{patch}");
}

#[test]
fn handle_without_a_gpu_is_a_typed_error() {
    if !lib_or_skip("handle_without_a_gpu_is_a_typed_error") {
        return;
    }
    let handle = nvjpeg::Handle::new();
    match gpufeed::cuda::devices() {
        Err(no_gpu) => {
            let e = handle.expect_err("a handle without a GPU");
            println!("no GPU ({no_gpu}); nvjpegCreateSimple: {e}");
            assert!(matches!(e, gpufeed::Error::Device(_)), "{e:?}");
            assert!(e.to_string().contains("nvjpegCreateSimple"), "{e}");
        }
        Ok(devs) => {
            let h = handle.unwrap_or_else(|e| panic!("GPU {:?} present but {e}", devs[0].name));
            drop(h);
        }
    }
}
