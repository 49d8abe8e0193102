//! `cargo fuzz run image`: see src/fuzz.rs for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = gpufeed::fuzz::image(data);
});
