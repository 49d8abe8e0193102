//! The kernels in `kernels/` are embedded with `include_str!` and compiled
//! at run time by NVRTC; the build only has to notice when they change.
//! With the `kernel-emu` feature it also compiles them as host C++ for the
//! emulation tests (tests/emu/).

fn main() {
    println!("cargo:rerun-if-changed=kernels");
    println!("cargo:rerun-if-changed=tests/emu");
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "kernel-emu")]
    emu();
}

#[cfg(feature = "kernel-emu")]
fn emu() {
    println!("cargo:rerun-if-env-changed=GPUFEED_EMU_CXXFLAGS");
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .file("tests/emu/augment_emu.cpp")
        .include("kernels")
        .flag_if_supported("-std=c++17")
        // Keep a * b + c as two roundings, as the kernel (--fmad=false) and
        // the CPU reference compute it.
        .flag_if_supported("-ffp-contract=off")
        .flag_if_supported("-Wno-unused-function");
    // Flags for the kernels alone, not for every C++ file of the build as
    // CXXFLAGS would be: CI builds them with UBSan's traps, and
    // scripts/fuzz-kernels.sh instruments them for libFuzzer's coverage
    // (-fsanitize=fuzzer-no-link), which must not reach libFuzzer's own
    // sources in the same build.
    for flag in std::env::var("GPUFEED_EMU_CXXFLAGS")
        .unwrap_or_default()
        .split_whitespace()
    {
        build.flag(flag);
    }
    build.compile("gf_emu");
}
