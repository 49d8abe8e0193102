//! `cargo fuzz run progressive` (planner only), or with the kernels
//! compiled for the host by clang, checked by ASan and UBSan and guided by
//! their coverage: `scripts/fuzz-kernels.sh SECONDS`.
//! See src/fuzz.rs for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = gpufeed::fuzz::progressive(data);
});
