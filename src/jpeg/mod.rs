//! JPEG header parsing without decoding (ITU-T T.81, Annex B).
//!
//! The planner needs dimensions, components, subsampling, the coding process
//! and the EXIF orientation of every image before any pixel is decoded: to
//! route the image to a decoder, to draw crop parameters in the oriented
//! frame, and to refuse decompression bombs before anything is allocated.
//! The parser walks the marker segments up to the first SOS and never reads
//! entropy-coded data.

mod exif;
pub(crate) mod scans;

pub use exif::Orientation;
pub(crate) use exif::exif_orientation;

use crate::error::SampleError;

/// Default pixel limit: 100 megapixels.
pub const DEFAULT_MAX_PIXELS: u64 = 100_000_000;

/// Marker segments visited before giving up; real files have a few dozen.
const MAX_SEGMENTS: usize = 4096;

/// The coding process, from the SOF marker (T.81 Table B.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SofKind {
    /// SOF0: baseline DCT, Huffman.
    Baseline,
    /// SOF1: extended sequential DCT, Huffman (8 or 12 bit).
    Extended,
    /// SOF2: progressive DCT, Huffman.
    Progressive,
    /// SOF3: lossless, Huffman.
    Lossless,
    /// SOF9: extended sequential DCT, arithmetic coding.
    ArithmeticSequential,
    /// SOF10: progressive DCT, arithmetic coding.
    ArithmeticProgressive,
    /// SOF11: lossless, arithmetic coding.
    ArithmeticLossless,
    /// SOF5–7 and SOF13–15: hierarchical (differential) coding.
    Hierarchical,
}

impl SofKind {
    fn from_marker(m: u8) -> Option<SofKind> {
        Some(match m {
            0xC0 => SofKind::Baseline,
            0xC1 => SofKind::Extended,
            0xC2 => SofKind::Progressive,
            0xC3 => SofKind::Lossless,
            0xC5..=0xC7 | 0xCD..=0xCF => SofKind::Hierarchical,
            0xC9 => SofKind::ArithmeticSequential,
            0xCA => SofKind::ArithmeticProgressive,
            0xCB => SofKind::ArithmeticLossless,
            _ => return None,
        })
    }

    /// A short lowercase name (`baseline`, `progressive`, ...).
    pub fn name(self) -> &'static str {
        match self {
            SofKind::Baseline => "baseline",
            SofKind::Extended => "extended",
            SofKind::Progressive => "progressive",
            SofKind::Lossless => "lossless",
            SofKind::ArithmeticSequential => "arith-sequential",
            SofKind::ArithmeticProgressive => "arith-progressive",
            SofKind::ArithmeticLossless => "arith-lossless",
            SofKind::Hierarchical => "hierarchical",
        }
    }
}

/// Chroma subsampling, named as `J:a:b` from the first two components'
/// sampling factors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Subsampling {
    /// One component.
    Gray,
    /// No subsampling.
    S444,
    /// Half horizontal.
    S422,
    /// Half horizontal and vertical.
    S420,
    /// Half vertical.
    S440,
    /// Quarter horizontal.
    S411,
    /// Quarter horizontal, half vertical.
    S410,
    /// Anything else (components with differing chroma factors, chroma
    /// sampled more densely than luma, ...).
    Other,
}

impl Subsampling {
    /// `4:2:0` style name, or `gray` / `other`.
    pub fn name(self) -> &'static str {
        match self {
            Subsampling::Gray => "gray",
            Subsampling::S444 => "4:4:4",
            Subsampling::S422 => "4:2:2",
            Subsampling::S420 => "4:2:0",
            Subsampling::S440 => "4:4:0",
            Subsampling::S411 => "4:1:1",
            Subsampling::S410 => "4:1:0",
            Subsampling::Other => "other",
        }
    }
}

/// What the header says about an image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JpegHeader {
    /// Width as coded in the frame (before EXIF orientation).
    pub width: u32,
    /// Height as coded in the frame (before EXIF orientation).
    pub height: u32,
    /// Number of components (1 gray, 3 YCbCr/RGB, 4 CMYK/YCCK).
    pub components: u8,
    /// Sample precision in bits (8 for almost every photo; 12, 16 exist).
    pub precision: u8,
    /// Coding process.
    pub sof: SofKind,
    /// Horizontal and vertical sampling factors per component.
    pub sampling: Vec<(u8, u8)>,
    /// Component identifiers, in frame order (1, 2, 3 for most YCbCr
    /// files; `R`, `G`, `B` for some RGB ones).
    pub component_ids: Vec<u8>,
    /// Subsampling class derived from `sampling`.
    pub subsampling: Subsampling,
    /// Restart interval in MCUs from a DRI before the first scan; 0 if none.
    pub restart_interval: u16,
    /// The transform flag of an Adobe APP14 segment (0 none/CMYK, 1 YCbCr,
    /// 2 YCCK), if the segment is present.
    pub adobe_transform: Option<u8>,
    /// EXIF orientation (1 when there is no EXIF or no orientation tag).
    pub orientation: Orientation,
    /// Whether an APP1 EXIF segment was found.
    pub has_exif: bool,
}

impl JpegHeader {
    /// Dimensions after EXIF orientation is applied: `(width, height)`.
    pub fn oriented_size(&self) -> (u32, u32) {
        if self.orientation.swaps_axes() {
            (self.height, self.width)
        } else {
            (self.width, self.height)
        }
    }

    /// Whether three components hold R, G, B rather than YCbCr: an Adobe
    /// APP14 transform of 0, or, with no APP14, the component identifiers
    /// `R`, `G`, `B` (libjpeg's rule, jdapimin.c `default_decompress_parms`).
    pub fn is_rgb(&self) -> bool {
        self.components == 3
            && match self.adobe_transform {
                Some(t) => t == 0,
                None => self.component_ids == b"RGB",
            }
    }

    /// Number of pixels in the coded frame.
    pub fn pixels(&self) -> u64 {
        self.width as u64 * self.height as u64
    }
}

/// Parse the header of a JPEG held in `data`, refusing images with more than
/// `max_pixels` pixels.
///
/// Reads marker segments from SOI up to the first SOS. Bytes between
/// segments that are not a marker are skipped, as libjpeg does with a
/// warning ("extraneous bytes before marker").
pub fn parse_header(data: &[u8], max_pixels: u64) -> Result<JpegHeader, SampleError> {
    if data.is_empty() {
        return Err(SampleError::NotJpeg("empty file"));
    }
    if data.len() < 2 || data[0] != 0xFF || data[1] != 0xD8 {
        return Err(SampleError::NotJpeg("no SOI marker"));
    }
    let mut pos = 2;
    let mut frame: Option<JpegHeader> = None;
    let mut restart_interval = 0u16;
    let mut adobe_transform = None;
    let mut orientation = Orientation::Normal;
    let mut has_exif = false;

    for _ in 0..MAX_SEGMENTS {
        let Some((marker, after)) = next_marker(data, pos) else {
            return Err(SampleError::Truncated("header ends before the first scan"));
        };
        pos = after;
        match marker {
            // Stuffed zero outside entropy data, TEM, RSTn, a second SOI: no
            // length field.
            0x00 | 0x01 | 0xD0..=0xD8 => continue,
            0xD9 => return Err(SampleError::Corrupt("EOI before any scan".into())),
            _ => {}
        }
        let Some(len_bytes) = data.get(pos..pos + 2) else {
            return Err(SampleError::Truncated("segment length cut off"));
        };
        let len = u16::from_be_bytes([len_bytes[0], len_bytes[1]]) as usize;
        if len < 2 && matches!(marker, 0xE0..=0xEF | 0xFE) {
            // libjpeg skips an APPn/COM segment of impossible length as if it
            // had none (jdmarker.c, skip_variable); so do we.
            pos += 2;
            continue;
        }
        if len < 2 {
            return Err(SampleError::Corrupt(format!(
                "segment 0x{marker:02X} has length {len}"
            )));
        }
        let Some(seg) = data.get(pos + 2..pos + len) else {
            if marker == 0xDA && frame.is_some() {
                // A SOS header cut off still tells us the frame; decoding
                // will report the truncation.
                break;
            }
            return Err(SampleError::Truncated("marker segment runs past the end"));
        };
        pos += len;
        match marker {
            0xDA => {
                if frame.is_none() {
                    return Err(SampleError::Corrupt(
                        "scan before frame header (SOF)".into(),
                    ));
                }
                break;
            }
            0xC0..=0xCF
                if marker != 0xC4 && marker != 0xC8 && marker != 0xCC && frame.is_none() =>
            {
                let sof = SofKind::from_marker(marker).expect("SOF range checked above");
                frame = Some(parse_sof(sof, seg)?);
            }
            0xDD => {
                if seg.len() < 2 {
                    return Err(SampleError::Corrupt("short DRI segment".into()));
                }
                restart_interval = u16::from_be_bytes([seg[0], seg[1]]);
            }
            0xE1 if seg.starts_with(b"Exif\0") && !has_exif => {
                has_exif = true;
                orientation = exif_orientation(&seg[6.min(seg.len())..]);
            }
            0xEE if seg.len() >= 12 && seg.starts_with(b"Adobe") => {
                adobe_transform = Some(seg[11]);
            }
            _ => {}
        }
        if pos >= data.len() {
            break;
        }
    }

    let Some(mut header) = frame else {
        return Err(SampleError::Truncated("no frame header (SOF) found"));
    };
    if header.width == 0 || header.height == 0 {
        return Err(SampleError::BadDimensions {
            width: header.width,
            height: header.height,
        });
    }
    if header.pixels() > max_pixels {
        return Err(SampleError::TooLarge {
            width: header.width,
            height: header.height,
            limit: max_pixels,
        });
    }
    header.restart_interval = restart_interval;
    header.adobe_transform = adobe_transform;
    header.orientation = orientation;
    header.has_exif = has_exif;
    Ok(header)
}

/// Whether `data`'s markers, read from SOI as libjpeg reads them, reach
/// EOI with every marker segment within the data: the file is complete.
/// A truncated file (no EOI) is not, nor one whose segment claims bytes
/// past its end. Bytes after EOI (data some cameras append) do not
/// matter. The entropy-coded data is walked eight bytes at a time (12 µs
/// for a 110 KB photo of `photos/imagenet-size`, release build, on a
/// 2-core x86-64 VM, 2026-12-01).
///
/// nvJPEG's CUDA route takes complete files only: its host phase
/// corrupted the heap on a truncated progressive file, and its GPU
/// Huffman decoder hung on a file whose scan is followed by an APP6
/// segment of 65,023 bytes in a file of 1,415 (H200, session 59,
/// docs/RELIABILITY.md). Such files decode on the CPU, the specification.
/// Every photo of the test corpus is complete; 2,613 of its 3,270 fuzz
/// seeds and 14 of its 288 tricky files are not.
pub fn complete(data: &[u8]) -> bool {
    if data.len() < 2 || data[0] != 0xFF || data[1] != 0xD8 {
        return false;
    }
    let mut pos = 2;
    for _ in 0..scans::MAX_SEGMENTS {
        let Some((marker, after)) = next_marker(data, pos) else {
            return false;
        };
        pos = after;
        match marker {
            0xD9 => return true,
            // No segment: a stray restart marker, TEM, or a stuffed zero.
            0x00 | 0x01 | 0xD0..=0xD7 => continue,
            _ => {}
        }
        let Some(len) = data.get(pos..pos + 2) else {
            return false;
        };
        let len = usize::from(u16::from_be_bytes([len[0], len[1]]));
        if len < 2 || pos + len > data.len() {
            return false;
        }
        pos += len;
        if marker == 0xDA {
            pos = scans::segment_end(data, pos);
        }
    }
    false
}

/// The next marker at or after `pos` (0xFF, any fill bytes 0xFF, then the
/// marker's code; junk before it skipped, as libjpeg skips it with a
/// warning) and the position after its code; `None` at the end of data.
pub(crate) fn next_marker(data: &[u8], mut pos: usize) -> Option<(u8, usize)> {
    while pos < data.len() && data[pos] != 0xFF {
        pos += 1;
    }
    while pos < data.len() && data[pos] == 0xFF {
        pos += 1;
    }
    data.get(pos).map(|&m| (m, pos + 1))
}

fn parse_sof(sof: SofKind, seg: &[u8]) -> Result<JpegHeader, SampleError> {
    if seg.len() < 6 {
        return Err(SampleError::Corrupt("short SOF segment".into()));
    }
    let precision = seg[0];
    let height = u16::from_be_bytes([seg[1], seg[2]]) as u32;
    let width = u16::from_be_bytes([seg[3], seg[4]]) as u32;
    let components = seg[5];
    if !matches!(components, 1 | 3 | 4) {
        return Err(SampleError::Unsupported(format!("{components} components")));
    }
    if seg.len() < 6 + 3 * components as usize {
        return Err(SampleError::Corrupt(
            "SOF segment shorter than its component list".into(),
        ));
    }
    let mut sampling = Vec::with_capacity(components as usize);
    let mut component_ids = Vec::with_capacity(components as usize);
    for c in 0..components as usize {
        component_ids.push(seg[6 + 3 * c]);
        let hv = seg[6 + 3 * c + 1];
        let (h, v) = (hv >> 4, hv & 0x0F);
        if !(1..=4).contains(&h) || !(1..=4).contains(&v) {
            return Err(SampleError::Corrupt(format!("sampling factors {h}x{v}")));
        }
        sampling.push((h, v));
    }
    Ok(JpegHeader {
        width,
        height,
        components,
        precision,
        sof,
        subsampling: classify_subsampling(&sampling),
        sampling,
        component_ids,
        restart_interval: 0,
        adobe_transform: None,
        orientation: Orientation::Normal,
        has_exif: false,
    })
}

fn classify_subsampling(s: &[(u8, u8)]) -> Subsampling {
    if s.len() == 1 {
        return Subsampling::Gray;
    }
    let (y, c) = (s[0], s[1]);
    if s[2..].iter().any(|&o| o != c) || y.0 % c.0 != 0 || y.1 % c.1 != 0 {
        return Subsampling::Other;
    }
    match (y.0 / c.0, y.1 / c.1) {
        (1, 1) => Subsampling::S444,
        (2, 1) => Subsampling::S422,
        (2, 2) => Subsampling::S420,
        (1, 2) => Subsampling::S440,
        (4, 1) => Subsampling::S411,
        (4, 2) => Subsampling::S410,
        _ => Subsampling::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SOI, APP14 Adobe (transform 2), DRI 4, SOF0 16x8 YCbCr 4:2:0, SOS.
    fn tiny(sof: u8, w: u16, h: u16) -> Vec<u8> {
        let mut v = vec![0xFF, 0xD8];
        v.extend_from_slice(&[0xFF, 0xEE, 0, 14]);
        v.extend_from_slice(b"Adobe\0\x64\0\0\0\0\x02");
        v.extend_from_slice(&[0xFF, 0xDD, 0, 4, 0, 4]);
        v.extend_from_slice(&[0xFF, sof, 0, 17, 8]);
        v.extend_from_slice(&h.to_be_bytes());
        v.extend_from_slice(&w.to_be_bytes());
        v.extend_from_slice(&[3, 1, 0x22, 0, 2, 0x11, 1, 3, 0x11, 1]);
        v.extend_from_slice(&[0xFF, 0xDA, 0, 12, 3, 1, 0, 2, 0x11, 3, 0x11, 0, 63, 0]);
        v
    }

    /// libjpeg's colour rule: the Adobe transform decides; without APP14,
    /// component identifiers `R`, `G`, `B` mean RGB.
    #[test]
    fn rgb_from_adobe_transform_or_component_ids() {
        let mut v = tiny(0xC0, 16, 8);
        let h = parse_header(&v, DEFAULT_MAX_PIXELS).unwrap();
        assert_eq!(h.component_ids, [1, 2, 3]);
        assert_eq!(h.adobe_transform, Some(2));
        assert!(!h.is_rgb());
        // APP14 transform 0 (its last byte, at offset 2 + 4 + 11).
        v[17] = 0;
        assert!(parse_header(&v, DEFAULT_MAX_PIXELS).unwrap().is_rgb());
        // No APP14 (drop its 16 bytes), identifiers R, G, B.
        let mut plain: Vec<u8> = [&v[..2], &v[18..]].concat();
        let sof = plain.windows(2).position(|w| w == [0xFF, 0xC0]).unwrap();
        for (k, id) in b"RGB".iter().enumerate() {
            plain[sof + 10 + 3 * k] = *id;
        }
        let h = parse_header(&plain, DEFAULT_MAX_PIXELS).unwrap();
        assert_eq!(
            (h.adobe_transform, h.component_ids.as_slice()),
            (None, &b"RGB"[..])
        );
        assert!(h.is_rgb());
    }

    #[test]
    fn reads_frame_and_markers() {
        let h = parse_header(&tiny(0xC0, 16, 8), DEFAULT_MAX_PIXELS).unwrap();
        assert_eq!((h.width, h.height, h.components), (16, 8, 3));
        assert_eq!(h.sof, SofKind::Baseline);
        assert_eq!(h.subsampling, Subsampling::S420);
        assert_eq!(h.restart_interval, 4);
        assert_eq!(h.adobe_transform, Some(2));
        assert_eq!(h.orientation, Orientation::Normal);
        let p = parse_header(&tiny(0xC2, 16, 8), DEFAULT_MAX_PIXELS).unwrap();
        assert_eq!(p.sof, SofKind::Progressive);
        let a = parse_header(&tiny(0xC9, 16, 8), DEFAULT_MAX_PIXELS).unwrap();
        assert_eq!(a.sof, SofKind::ArithmeticSequential);
    }

    #[test]
    fn refuses_bad_input() {
        assert!(matches!(
            parse_header(b"", 100),
            Err(SampleError::NotJpeg(_))
        ));
        assert!(matches!(
            parse_header(b"\x89PNG\r\n", 100),
            Err(SampleError::NotJpeg(_))
        ));
        let full = tiny(0xC0, 16, 8);
        for cut in 2..full.len() - 14 {
            assert!(
                matches!(
                    parse_header(&full[..cut], 1000),
                    Err(SampleError::Truncated(_))
                ),
                "cut at {cut}"
            );
        }
        assert!(matches!(
            parse_header(&tiny(0xC0, 0, 8), 100),
            Err(SampleError::BadDimensions { .. })
        ));
        assert!(matches!(
            parse_header(&tiny(0xC0, 65535, 65535), DEFAULT_MAX_PIXELS),
            Err(SampleError::TooLarge {
                width: 65535,
                height: 65535,
                ..
            })
        ));
    }

    #[test]
    fn skips_junk_between_segments() {
        let mut v = tiny(0xC0, 16, 8);
        v.splice(2..2, [0x12, 0x34, 0x00]);
        assert_eq!(parse_header(&v, 1000).unwrap().width, 16);
    }

    /// A file is complete when its markers reach EOI within the data:
    /// every cut of a photo before its EOI is not (truncated in a segment,
    /// in the entropy-coded data, between markers), bytes after EOI do not
    /// matter, and a segment that claims bytes past the end makes it
    /// incomplete wherever EOI seems to follow.
    #[test]
    fn complete_files_reach_eoi_within_their_data() {
        let photo = std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("data/sample/cat/cat-2083492_1280.jpg"),
        )
        .unwrap();
        assert!(complete(&photo));
        let eoi = photo.len() - 2;
        assert_eq!(photo[eoi..], [0xFF, 0xD9]);
        for cut in (0..eoi).step_by(97).chain([eoi, eoi + 1]) {
            assert!(!complete(&photo[..cut]), "cut at {cut} of {}", photo.len());
        }
        let mut appended = photo.clone();
        appended.extend_from_slice(b"\x00\x00ftypmp42 a video some cameras append");
        assert!(complete(&appended));
        // Session 59's hang, in small: after the scan an APP6 segment
        // longer than the rest of the file, which still ends in EOI.
        let mut long = photo[..eoi].to_vec();
        long.extend_from_slice(&[0xFF, 0xE6, 0xFD, 0xFF, 1, 2, 3, 0xFF, 0xD9]);
        assert!(!complete(&long));
        // The same segment of its true length is fine.
        let mut short = photo[..eoi].to_vec();
        short.extend_from_slice(&[0xFF, 0xE6, 0, 5, 1, 2, 3, 0xFF, 0xD9]);
        assert!(complete(&short));
        assert!(!complete(b"\xFF\xD9"), "no SOI");
        assert!(!complete(&tiny(0xC0, 16, 8)), "no EOI after the scan");
    }
}
