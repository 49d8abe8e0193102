//! The one EXIF field the pipeline needs: orientation (TIFF tag 0x0112 in
//! IFD0, EXIF 2.32 §4.6.4 Table 4).

/// EXIF orientation: how the stored pixels must be transformed to be shown
/// upright. Values follow the EXIF numbering 1..=8.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Orientation {
    /// 1: as stored.
    #[default]
    Normal,
    /// 2: mirrored left-right.
    FlipH,
    /// 3: rotated 180°.
    Rotate180,
    /// 4: mirrored top-bottom.
    FlipV,
    /// 5: mirrored along the main diagonal (transpose).
    Transpose,
    /// 6: needs a 90° clockwise rotation to be upright.
    Rotate90,
    /// 7: mirrored along the anti-diagonal (transverse).
    Transverse,
    /// 8: needs a 90° counter-clockwise rotation to be upright.
    Rotate270,
}

impl Orientation {
    /// From the EXIF value; anything outside 1..=8 is treated as 1, as
    /// libexif and Pillow's `exif_transpose` do.
    pub fn from_exif(v: u16) -> Orientation {
        match v {
            2 => Orientation::FlipH,
            3 => Orientation::Rotate180,
            4 => Orientation::FlipV,
            5 => Orientation::Transpose,
            6 => Orientation::Rotate90,
            7 => Orientation::Transverse,
            8 => Orientation::Rotate270,
            _ => Orientation::Normal,
        }
    }

    /// The EXIF value 1..=8.
    pub fn exif_value(self) -> u16 {
        self as u16 + 1
    }

    /// Whether width and height trade places when the orientation is applied.
    pub fn swaps_axes(self) -> bool {
        matches!(
            self,
            Orientation::Transpose
                | Orientation::Rotate90
                | Orientation::Transverse
                | Orientation::Rotate270
        )
    }
}

/// Orientation from a TIFF structure (the APP1 payload after `Exif\0\0`).
/// Malformed or missing data yields [`Orientation::Normal`]: a broken EXIF
/// block must not cost us the image.
pub(crate) fn exif_orientation(tiff: &[u8]) -> Orientation {
    read_orientation(tiff).map_or(Orientation::Normal, Orientation::from_exif)
}

fn read_orientation(tiff: &[u8]) -> Option<u16> {
    let big_endian = match tiff.get(0..4)? {
        b"II*\0" => false,
        b"MM\0*" => true,
        _ => return None,
    };
    let u16_at = |at: usize| -> Option<u16> {
        let b = tiff.get(at..at + 2)?;
        Some(if big_endian {
            u16::from_be_bytes([b[0], b[1]])
        } else {
            u16::from_le_bytes([b[0], b[1]])
        })
    };
    let u32_at = |at: usize| -> Option<u32> {
        let b = tiff.get(at..at + 4)?;
        let b = [b[0], b[1], b[2], b[3]];
        Some(if big_endian {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
    };
    let ifd0 = u32_at(4)? as usize;
    let count = u16_at(ifd0)? as usize;
    for i in 0..count {
        let entry = ifd0.checked_add(2 + 12 * i)?;
        if u16_at(entry)? != 0x0112 {
            continue;
        }
        // Type SHORT (3), count 1: the value sits in the first two bytes of
        // the value field. Some writers use LONG (4), or the signed SSHORT
        // (8) and SLONG (9) (gdk-pixbuf's bug725582-testrotate.jpg); Pillow
        // and libexif read all four, and so do we.
        return match u16_at(entry + 2)? {
            3 | 8 => u16_at(entry + 8),
            4 | 9 => u32_at(entry + 8).and_then(|v| u16::try_from(v).ok()),
            _ => None,
        };
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiff(big_endian: bool, value: u16) -> Vec<u8> {
        tiff_typed(big_endian, value, 3)
    }

    fn tiff_typed(big_endian: bool, value: u16, typ: u16) -> Vec<u8> {
        let mut v = Vec::new();
        let p16 = |v: &mut Vec<u8>, x: u16| {
            v.extend(if big_endian {
                x.to_be_bytes()
            } else {
                x.to_le_bytes()
            })
        };
        let p32 = |v: &mut Vec<u8>, x: u32| {
            v.extend(if big_endian {
                x.to_be_bytes()
            } else {
                x.to_le_bytes()
            })
        };
        v.extend_from_slice(if big_endian { b"MM\0*" } else { b"II*\0" });
        p32(&mut v, 8);
        p16(&mut v, 2);
        // An unrelated tag first (ImageWidth), then Orientation.
        p16(&mut v, 0x0100);
        p16(&mut v, 3);
        p32(&mut v, 1);
        p32(&mut v, 640);
        p16(&mut v, 0x0112);
        p16(&mut v, typ);
        p32(&mut v, 1);
        if typ == 4 || typ == 9 {
            p32(&mut v, u32::from(value));
        } else {
            p16(&mut v, value);
            p16(&mut v, 0);
        }
        p32(&mut v, 0);
        v
    }

    #[test]
    fn both_byte_orders() {
        for v in 1..=8 {
            assert_eq!(exif_orientation(&tiff(false, v)).exif_value(), v);
            assert_eq!(exif_orientation(&tiff(true, v)).exif_value(), v);
        }
        assert_eq!(exif_orientation(&tiff(true, 9)), Orientation::Normal);
    }

    #[test]
    fn signed_and_long_types() {
        for typ in [4, 8, 9] {
            for be in [false, true] {
                assert_eq!(exif_orientation(&tiff_typed(be, 6, typ)).exif_value(), 6);
            }
        }
        // ASCII or RATIONAL orientations are not orientations.
        assert_eq!(
            exif_orientation(&tiff_typed(false, 6, 2)),
            Orientation::Normal
        );
    }

    #[test]
    fn broken_blocks_are_normal() {
        let t = tiff(false, 6);
        for cut in 0..t.len() - 4 {
            // A cut inside the orientation entry loses it; never panics.
            let _ = exif_orientation(&t[..cut]);
        }
        assert_eq!(exif_orientation(b"junk"), Orientation::Normal);
        let mut bad_offset = t.clone();
        bad_offset[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(exif_orientation(&bad_offset), Orientation::Normal);
    }
}
