//! Fuzz harness bodies (issue 7), shared by the `cargo fuzz` targets in
//! `fuzz/` and by the seeded mutation test that CI runs on the stable
//! toolchain (`tests/mutation.rs`). Not part of the API.
//!
//! Each function takes arbitrary bytes and must return; any panic is a bug.
//! Besides "no panic" they check what must hold for every input.

use std::cell::RefCell;

use crate::decode::{CpuDecoder, Image};
use crate::jpeg::{JpegHeader, exif_orientation, parse_header};

/// Pixel limit under fuzzing: big enough for real structure, small enough
/// that one input cannot take seconds.
const MAX_PIXELS: u64 = 4_000_000;

/// The header parser. A header it accepts is self-consistent.
pub fn header(data: &[u8]) -> Option<JpegHeader> {
    let h = parse_header(data, MAX_PIXELS).ok()?;
    assert!(h.width > 0 && h.height > 0, "accepted a zero dimension");
    assert!(u64::from(h.width) * u64::from(h.height) <= MAX_PIXELS);
    assert_eq!(h.sampling.len(), usize::from(h.components));
    Some(h)
}

/// The EXIF reader on a raw TIFF structure.
pub fn exif(data: &[u8]) {
    let _ = exif_orientation(data);
}

/// The decode route the pipeline's workers take: header, then the CPU
/// decoder. A decoded image has the header's (oriented) size. Returns
/// whether it decoded.
pub fn decode(data: &[u8]) -> bool {
    thread_local! {
        static STATE: RefCell<Option<(CpuDecoder, Image)>> = const { RefCell::new(None) };
    }
    let Some(h) = header(data) else {
        return false;
    };
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        let (dec, img) = s.get_or_insert_with(|| (CpuDecoder::new(true), Image::default()));
        if dec.decode(data, &h, img).is_err() {
            return false;
        }
        assert_eq!((img.width, img.height), h.oriented_size(), "decoded size");
        assert_eq!(img.data.len(), img.width as usize * img.height as usize * 3);
        true
    })
}
