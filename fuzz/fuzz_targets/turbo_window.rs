//! `cargo fuzz run --features turbojpeg turbo_window`: libjpeg-turbo's
//! crop-window decode against its full decode of the same bytes
//! (`gpufeed::fuzz::turbo_window`); any difference is a crash.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(e) = gpufeed::fuzz::turbo_window(data) {
        panic!("{e}");
    }
});
