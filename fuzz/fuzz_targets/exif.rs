//! `cargo fuzz run exif`: see src/fuzz.rs for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    gpufeed::fuzz::exif(data);
});
