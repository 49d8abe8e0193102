//! Turning a decoded image into one output sample: crop, resize, normalize,
//! cast and lay out, written into the sample's slot of the batch tensor.
//!
//! `cpu.rs` is the reference implementation; its formulas are the
//! specification the CUDA kernels reproduce.

pub(crate) mod cpu;

/// Element type of the image tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// Unsigned 8-bit, raw 0..=255 values (no normalization).
    U8,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    BF16,
    /// IEEE single precision.
    F32,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::U8 => 1,
            DType::F16 | DType::BF16 => 2,
            DType::F32 => 4,
        }
    }

    /// Lowercase name (`u8`, `f16`, `bf16`, `f32`).
    pub fn name(self) -> &'static str {
        match self {
            DType::U8 => "u8",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
        }
    }
}

/// Memory layout of the image tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layout {
    /// `[batch, channel, height, width]` (PyTorch's default).
    Nchw,
    /// `[batch, height, width, channel]` (channels-last).
    Nhwc,
}

/// Per-channel normalization `(x / 255 - mean) / std`, with `x` the 0..=255
/// pixel value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Normalize {
    /// Channel means in 0..1 units (R, G, B).
    pub mean: [f32; 3],
    /// Channel standard deviations in 0..1 units (R, G, B).
    pub std: [f32; 3],
}

impl Normalize {
    /// The ImageNet statistics used by torchvision's reference recipes.
    pub const IMAGENET: Normalize = Normalize {
        mean: [0.485, 0.456, 0.406],
        std: [0.229, 0.224, 0.225],
    };

    /// Folded into one multiply-add per value: `x * scale + shift`, with
    /// `scale = 1 / (255 std)` and `shift = -mean / std`.
    pub(crate) fn fold(self) -> Fma {
        let mut f = Fma {
            scale: [0.0; 3],
            shift: [0.0; 3],
        };
        for c in 0..3 {
            f.scale[c] = 1.0 / (255.0 * self.std[c]);
            f.shift[c] = -self.mean[c] / self.std[c];
        }
        f
    }
}

/// The per-channel multiply-add applied to 0..=255 values before the cast.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Fma {
    pub(crate) scale: [f32; 3],
    pub(crate) shift: [f32; 3],
}

impl Fma {
    /// No normalization: values stay in 0..=255.
    pub(crate) const IDENTITY: Fma = Fma {
        scale: [1.0; 3],
        shift: [0.0; 3],
    };
}

/// A crop window in source pixels: the rectangle `[x, x + width) × [y, y +
/// height)` of the (oriented) decoded image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Crop {
    /// Left column.
    pub(crate) x: u32,
    /// Top row.
    pub(crate) y: u32,
    /// Width in pixels, at least 1.
    pub(crate) width: u32,
    /// Height in pixels, at least 1.
    pub(crate) height: u32,
}

impl Crop {
    /// The whole of a `width` × `height` image.
    pub(crate) fn full(width: u32, height: u32) -> Crop {
        Crop {
            x: 0,
            y: 0,
            width,
            height,
        }
    }
}
