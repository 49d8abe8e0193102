//! How close a device batch must be to the CPU backend's, which is the
//! specification (DESIGN.md): the emulated device runs the kernel source
//! on the host and must equal it bit for bit. A real GPU compiles the
//! same formulas without contraction (`--fmad=false`, src/cuda/nvrtc.rs)
//! but with CUDA's math library, not the host's (`expf`, `powf`, `sqrtf`
//! may round differently), so its elements may differ by 1 in u8, one
//! unit in the last place of f16 or bf16, or 1e-4 in f32.

use gpufeed::{DType, Tensor};
use half::f16;

/// Asserts `got` equals `want` in shape, dtype and layout, and element
/// for element: bit for bit when `exact`, else within the GPU tolerance.
pub(crate) fn close(got: &Tensor, want: &Tensor, exact: bool, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    assert_eq!(got.dtype(), want.dtype(), "{what}: dtype");
    assert_eq!(got.layout(), want.layout(), "{what}: layout");
    if exact {
        assert!(
            got.as_bytes().unwrap() == want.as_bytes().unwrap(),
            "{what}: bytes differ from the CPU backend"
        );
        return;
    }
    let bad = match want.dtype() {
        DType::U8 => count_bad(got.as_u8().unwrap(), want.as_u8().unwrap(), |a, b| {
            a.abs_diff(*b) <= 1
        }),
        DType::F16 => count_bad(got.as_f16().unwrap(), want.as_f16().unwrap(), f16_close),
        DType::BF16 => count_bad(got.as_bf16().unwrap(), want.as_bf16().unwrap(), |a, b| {
            a.to_bits().abs_diff(b.to_bits()) <= 1
        }),
        DType::F32 => count_bad(got.as_f32().unwrap(), want.as_f32().unwrap(), |a, b| {
            (a - b).abs() <= 1e-4
        }),
    };
    assert_eq!(bad, 0, "{what}: {bad} elements outside the tolerance");
}

/// f16 within one unit in the last place.
pub(crate) fn f16_close(a: &f16, b: &f16) -> bool {
    a.to_bits().abs_diff(b.to_bits()) <= 1
}

/// How many elements of `got` are not `ok` against `want`'s (the lengths
/// must be equal).
pub(crate) fn count_bad<T>(got: &[T], want: &[T], ok: impl Fn(&T, &T) -> bool) -> usize {
    assert_eq!(got.len(), want.len(), "element count");
    got.iter().zip(want).filter(|(a, b)| !ok(a, b)).count()
}

/// The PSNR of `got` against `want` in dB, 8-bit samples (the lengths
/// must be equal): how the nvJPEG route's pixels are held to the CPU
/// decoder's, which they need not equal.
pub(crate) fn psnr_u8(got: &[u8], want: &[u8]) -> f64 {
    assert_eq!(got.len(), want.len(), "element count");
    let mse = got
        .iter()
        .zip(want)
        .map(|(x, y)| (f64::from(*x) - f64::from(*y)).powi(2))
        .sum::<f64>()
        / got.len().max(1) as f64;
    10.0 * (255.0 * 255.0 / mse.max(1e-12)).log10()
}
