//! The kernels in `kernels/` are embedded with `include_str!` and compiled
//! at run time by NVRTC; the build only has to notice when they change.
//! With the `kernel-emu` feature it also compiles them as host C++ for the
//! emulation tests (tests/emu/).

fn main() {
    println!("cargo:rerun-if-changed=kernels");
    println!("cargo:rerun-if-changed=tests/emu");
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "kernel-emu")]
    cc::Build::new()
        .cpp(true)
        .file("tests/emu/augment_emu.cpp")
        .include("kernels")
        .flag_if_supported("-std=c++17")
        // Keep a * b + c as two roundings, as the kernel (--fmad=false) and
        // the CPU reference compute it.
        .flag_if_supported("-ffp-contract=off")
        .flag_if_supported("-Wno-unused-function")
        .compile("gf_emu");
}
