//! EXIF orientation applied to decoded pixels (EXIF 2.32 §4.6.4, tag 0x0112).

use super::Image;
use crate::jpeg::Orientation;

/// Transform `src` by `orientation` into `dst` so that the result is upright.
///
/// For a destination pixel `(x', y')` the source pixel is, with `w`, `h` the
/// source size:
///
/// | EXIF | name        | source `(x, y)`          |
/// |------|-------------|--------------------------|
/// | 1    | normal      | `(x', y')`               |
/// | 2    | flip H      | `(w-1-x', y')`           |
/// | 3    | rotate 180  | `(w-1-x', h-1-y')`       |
/// | 4    | flip V      | `(x', h-1-y')`           |
/// | 5    | transpose   | `(y', x')`               |
/// | 6    | rotate 90   | `(y', h-1-x')`           |
/// | 7    | transverse  | `(w-1-y', h-1-x')`       |
/// | 8    | rotate 270  | `(w-1-y', x')`           |
pub fn apply_orientation(src: &Image, orientation: Orientation, dst: &mut Image) {
    let (w, h) = (src.width as usize, src.height as usize);
    let (dw, dh) = if orientation.swaps_axes() {
        (h, w)
    } else {
        (w, h)
    };
    dst.width = dw as u32;
    dst.height = dh as u32;
    dst.data.clear();
    dst.data.resize(dw * dh * 3, 0);
    for y2 in 0..dh {
        let row = &mut dst.data[y2 * dw * 3..(y2 + 1) * dw * 3];
        for (x2, px) in row.chunks_exact_mut(3).enumerate() {
            let (x, y) = match orientation {
                Orientation::Normal => (x2, y2),
                Orientation::FlipH => (w - 1 - x2, y2),
                Orientation::Rotate180 => (w - 1 - x2, h - 1 - y2),
                Orientation::FlipV => (x2, h - 1 - y2),
                Orientation::Transpose => (y2, x2),
                Orientation::Rotate90 => (y2, h - 1 - x2),
                Orientation::Transverse => (w - 1 - y2, h - 1 - x2),
                Orientation::Rotate270 => (w - 1 - y2, x2),
            };
            let i = (y * w + x) * 3;
            px.copy_from_slice(&src.data[i..i + 3]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 3x2 image whose red channel numbers the pixels 0..6 in row order.
    fn numbered() -> Image {
        Image {
            width: 3,
            height: 2,
            data: (0..6).flat_map(|i| [i, 0, 0]).collect(),
        }
    }

    fn reds(img: &Image) -> Vec<u8> {
        img.data.chunks(3).map(|p| p[0]).collect()
    }

    #[test]
    fn all_eight_by_hand() {
        // Source:  0 1 2
        //          3 4 5
        let cases: [(u16, u32, &[u8]); 8] = [
            (1, 3, &[0, 1, 2, 3, 4, 5]),
            (2, 3, &[2, 1, 0, 5, 4, 3]),
            (3, 3, &[5, 4, 3, 2, 1, 0]),
            (4, 3, &[3, 4, 5, 0, 1, 2]),
            (5, 2, &[0, 3, 1, 4, 2, 5]),
            (6, 2, &[3, 0, 4, 1, 5, 2]),
            (7, 2, &[5, 2, 4, 1, 3, 0]),
            (8, 2, &[2, 5, 1, 4, 0, 3]),
        ];
        let mut dst = Image::default();
        for (v, width, want) in cases {
            apply_orientation(&numbered(), Orientation::from_exif(v), &mut dst);
            assert_eq!(dst.width, width, "orientation {v}");
            assert_eq!(reds(&dst), want, "orientation {v}");
        }
    }
}
