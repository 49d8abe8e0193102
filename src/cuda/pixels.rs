//! From a progressive file's coefficients to RGB8 pixels on the device:
//! the descriptors of `gf_idct` and `gf_color` (the structs are in
//! `jpeg_desc.rs`) for one planned file, and one file decoded on the
//! emulated device (feature `kernel-emu`). The kernels compute what
//! libjpeg-turbo computes with TurboJPEG's defaults (accurate integer
//! IDCT, fancy upsampling), which tests/progressive.rs checks bit for bit.

use super::jpeg_desc::*;

use crate::error::{Result, SampleError};
use crate::jpeg::scans::Plan;

/// The colour conversion of a planned file, as libjpeg chooses it
/// (jdapimin.c, `default_decompress_parms`), and each plane's upsampling
/// (jdsample.c, `jinit_upsampler`, fancy upsampling on). Planes at
/// `plane[c]` (`pitch[c]` bytes per row); RGB8 out at `out`.
pub(crate) fn color(
    p: &Plan,
    plane: &[u64],
    out: u64,
    out_pitch: u32,
) -> Result<GfColor, SampleError> {
    if !p.complete {
        return Err(SampleError::Unsupported(
            "an incomplete progression (libjpeg smooths its blocks)".into(),
        ));
    }
    let color = match p.comps.len() {
        1 => COLOR_GRAY,
        3 if p.jfif => COLOR_YCC,
        3 if p.adobe.is_some() => {
            if p.adobe == Some(0) {
                COLOR_RGB
            } else {
                COLOR_YCC
            }
        }
        3 if p.comps.iter().map(|c| c.id).eq([b'R', b'G', b'B']) => COLOR_RGB,
        3 => COLOR_YCC,
        n => {
            return Err(SampleError::Unsupported(format!(
                "{n} components on the GPU progressive route"
            )));
        }
    };
    let hmax = p.comps.iter().map(|c| c.h).max().unwrap_or(1);
    let vmax = p.comps.iter().map(|c| c.v).max().unwrap_or(1);
    let mut g = GfColor {
        out,
        out_pitch,
        width: p.width,
        height: p.height,
        color,
        ..GfColor::default()
    };
    for (i, c) in p.comps.iter().enumerate() {
        let (hm, vm) = if p.comps.len() == 1 {
            (c.h, c.v)
        } else {
            (hmax, vmax)
        };
        g.plane[i] = plane[i];
        g.pitch[i] = c.stride * 8;
        g.dw[i] = (p.width * c.h as u32).div_ceil(hm as u32);
        g.dh[i] = (p.height * c.v as u32).div_ceil(vm as u32);
        let (h, v) = (c.h, c.v);
        let fancy_width = g.dw[i] > 2;
        g.mode[i] = if (h, v) == (hm, vm) {
            UP_FULL
        } else if h * 2 == hm && v == vm && fancy_width {
            UP_H2V1
        } else if h == hm && v * 2 == vm {
            UP_H1V2
        } else if h * 2 == hm && v * 2 == vm && fancy_width {
            UP_H2V2
        } else if hm % h == 0 && vm % v == 0 {
            UP_REPLICATE
        } else {
            return Err(SampleError::Unsupported(
                "fractional sampling ratios".into(),
            ));
        };
        g.he[i] = hm / h;
        g.ve[i] = vm / v;
    }
    Ok(g)
}

/// Whether `gf_color` converts `p` (its colour, sampling and progression),
/// so that a batch of such plans lays out without error.
pub(crate) fn converts(p: &Plan) -> bool {
    color(p, &[0; 4], 0, 0).is_ok()
}

/// The IDCT planes of a planned file: component `c`'s coefficients at
/// `coef[c]`, its samples to `out[c]`; blocks numbered from `first`.
pub(crate) fn planes(p: &Plan, coef: &[u64], out: &[u64], mut first: u32) -> Vec<GfPlane> {
    p.comps
        .iter()
        .enumerate()
        .map(|(i, c)| {
            // libjpeg-turbo's SIMD build keeps multipliers in 16 bits
            // (jmorecfg.h, MULTIPLIER short): a 16-bit table entry over
            // 32767 multiplies as its wrapped value there too.
            let quant = c.quant.unwrap_or([0; 64]).map(|q| q as i16);
            let g = GfPlane {
                coef: coef[i],
                out: out[i],
                stride: c.stride,
                rows: c.rows,
                first,
                pad: 0,
                quant,
            };
            first += c.stride * c.rows;
            g
        })
        .collect()
}

/// A file decoded to RGB8 by the three kernels, and the scan decoder's
/// status per chain ([`super::progressive::SCAN_STATUS`]); the pixels mean
/// nothing unless every status is 0.
#[derive(Debug, Clone)]
pub struct Rgb {
    /// Image size.
    pub width: u32,
    /// Image height.
    pub height: u32,
    /// `width * 3` bytes per row.
    pub pixels: Vec<u8>,
    /// Per chain of scans.
    pub status: Vec<u32>,
}

/// Decode `data` to RGB8 with the kernel sources compiled for the host.
/// Not part of the API.
#[cfg(feature = "kernel-emu")]
#[doc(hidden)]
pub fn emu_rgb(path: &std::path::Path, data: &[u8], max_pixels: u64) -> Result<Rgb> {
    let p = super::progressive::planned(path, data, max_pixels)?;
    let mut pixels = vec![0u8; p.width as usize * p.height as usize * 3];
    let status =
        emu_decode(&p, data, &mut pixels).map_err(|source| crate::error::Error::Sample {
            path: path.to_path_buf(),
            source,
        })?;
    Ok(Rgb {
        width: p.width,
        height: p.height,
        pixels,
        status,
    })
}

/// Decode `data`, planned as `p`, to RGB8 in `out` (`width * 3` bytes a
/// row, `height` rows) with the kernel sources compiled for the host; each
/// chain's status, as [`Rgb::status`]. An error where `gf_color` does not
/// convert the plan or `out` is too small; nothing is written then.
#[cfg(feature = "kernel-emu")]
pub(crate) fn emu_decode(p: &Plan, data: &[u8], out: &mut [u8]) -> Result<Vec<u32>, SampleError> {
    let need = p.width as usize * p.height as usize * 3;
    if out.len() < need {
        return Err(SampleError::Panic(format!(
            "{} bytes for a {}x{} image",
            out.len(),
            p.width,
            p.height
        )));
    }
    let mut samples: Vec<Vec<u8>> = (0..p.comps.len())
        .map(|c| vec![0u8; p.coefficients(c)])
        .collect();
    let planes_out: Vec<u64> = samples.iter_mut().map(|s| s.as_mut_ptr() as u64).collect();
    // Before the scans: a plan `gf_color` cannot convert costs no decoding.
    let c = color(p, &planes_out, out.as_mut_ptr() as u64, p.width * 3)?;
    let (mut comps, status) = super::progressive::emu_scans(p, data);
    let coef: Vec<u64> = comps
        .iter_mut()
        .map(|g| g.coef.as_mut_ptr() as u64)
        .collect();
    let planes = planes(p, &coef, &planes_out, 0);
    let blocks = planes.iter().map(|g| g.stride * g.rows).sum();
    // SAFETY: every plane's coefficients and samples are the Vecs above,
    // stride * rows blocks each (64 i16 and 64 bytes a block), and the
    // colour pass reads those samples and writes `out`, which holds
    // width * height * 3 bytes (checked above) at width * 3 a row; all
    // outlive the synchronous calls.
    unsafe {
        super::emu::idct(&planes, blocks);
        super::emu::color(&[c]);
    }
    Ok(status)
}
