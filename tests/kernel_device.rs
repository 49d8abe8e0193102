//! The augment kernels against the CPU reference (bodies in
//! src/cuda/kernel_check.rs), one test body with two instances:
//!
//! * `emu_*` (feature `kernel-emu`): the kernel source compiled for the
//!   host; must match **bit for bit**.
//! * `gpu_*`: the NVRTC-compiled CUBIN on CUDA device 0, within u8 +-1,
//!   f16/bf16 one unit in the last place, f32 1e-4. Without a device they
//!   show as ignored with the reason; with `GPUFEED_REQUIRE_GPU=1` they
//!   fail instead.

mod common;

use common::Outcome;
use gpufeed::cuda::kernel_check::{Matrix, on_gpu};

common::tests!(
    #[cfg(feature = "kernel-emu")]
    emu_matches_reference_nchw,
    #[cfg(feature = "kernel-emu")]
    emu_matches_reference_nhwc,
    #[cfg(feature = "kernel-emu")]
    emu_matches_reference_upscaling,
    gpu_matches_reference_nchw,
    gpu_matches_reference_nhwc,
    gpu_matches_reference_upscaling,
    #[cfg(feature = "kernel-emu")]
    emu_photometric_matches_reference,
    gpu_photometric_matches_reference,
    a_gpu_test_without_a_gpu_is_ignored_or_fails_when_required,
);

fn gpu(m: Matrix) -> Outcome {
    common::need_gpu()?;
    on_gpu(m).unwrap_or_else(|e| panic!("{m:?}: {e}"));
    Ok(())
}

fn gpu_matches_reference_nchw() -> Outcome {
    gpu(Matrix::Nchw)
}

fn gpu_matches_reference_nhwc() -> Outcome {
    gpu(Matrix::Nhwc)
}

fn gpu_matches_reference_upscaling() -> Outcome {
    gpu(Matrix::Upscaling)
}

fn gpu_photometric_matches_reference() -> Outcome {
    gpu(Matrix::Photometric)
}

#[cfg(feature = "kernel-emu")]
fn emu_photometric_matches_reference() {
    gpufeed::cuda::kernel_check::on_emulator(Matrix::Photometric);
}

#[cfg(feature = "kernel-emu")]
fn emu_matches_reference_nchw() {
    gpufeed::cuda::kernel_check::on_emulator(Matrix::Nchw);
}

#[cfg(feature = "kernel-emu")]
fn emu_matches_reference_nhwc() {
    gpufeed::cuda::kernel_check::on_emulator(Matrix::Nhwc);
}

#[cfg(feature = "kernel-emu")]
fn emu_matches_reference_upscaling() {
    gpufeed::cuda::kernel_check::on_emulator(Matrix::Upscaling);
}

/// Issue 15: without a device a GPU test shows as ignored with the reason
/// in the runner's summary, never as passed, and `GPUFEED_REQUIRE_GPU=1`
/// turns it into a failure. This binary runs itself on one GPU test.
fn a_gpu_test_without_a_gpu_is_ignored_or_fails_when_required() {
    let run = |require: Option<&str>| {
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args(["gpu_matches_reference_nhwc", "--exact", "--test-threads=1"]);
        match require {
            Some(v) => cmd.env("GPUFEED_REQUIRE_GPU", v),
            None => cmd.env_remove("GPUFEED_REQUIRE_GPU"),
        };
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    };
    let (ok, text) = run(None);
    assert!(ok, "{text}");
    if gpufeed::cuda::devices().is_ok() {
        assert!(text.contains("1 passed"), "{text}");
        return;
    }
    assert!(
        text.contains("gpu_matches_reference_nhwc ... ignored (no CUDA device"),
        "{text}"
    );
    assert!(text.contains("0 passed; 0 failed; 1 ignored"), "{text}");
    let (ok, text) = run(Some("1"));
    assert!(!ok, "GPUFEED_REQUIRE_GPU=1 without a GPU passed:\n{text}");
    assert!(
        text.contains("GPUFEED_REQUIRE_GPU=1 but no CUDA device"),
        "{text}"
    );
    assert!(text.contains("0 passed; 1 failed"), "{text}");
}
