//! The kernels in `kernels/` are embedded with `include_str!` and compiled
//! at run time by NVRTC; the build only has to notice when they change.

fn main() {
    println!("cargo:rerun-if-changed=kernels");
    println!("cargo:rerun-if-changed=build.rs");
}
