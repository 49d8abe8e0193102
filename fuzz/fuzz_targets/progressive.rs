//! `cargo fuzz run progressive` (planner only), or with the kernels
//! compiled for the host and checked by ASan:
//! `CXXFLAGS=-fsanitize=address cargo +nightly fuzz run --features kernel-emu progressive`.
//! See src/fuzz.rs for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = gpufeed::fuzz::progressive(data);
});
