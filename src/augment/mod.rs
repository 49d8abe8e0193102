//! Turning a decoded image into one output sample: crop, resize, normalize,
//! cast and lay out, written into the sample's slot of the batch tensor.
//!
//! `cpu.rs` is the reference implementation; its formulas are the
//! specification the CUDA kernels reproduce.

pub(crate) mod cpu;
pub(crate) mod mix;
pub(crate) mod params;
pub(crate) mod photo;
pub(crate) mod photo_cpu;
mod recipe;
mod tensor_data;

pub use mix::Mixup;
pub use params::Transform;
pub use photo::{ColorJitter, EraseValue, GaussianBlur, Photometric, RandomErasing, Solarize};
pub use recipe::Recipe;
pub(crate) use tensor_data::TensorData;

/// `img` resized to `width × height` (both at least 1) with the pipeline's
/// filter: triangle (bilinear) taps widened by the shrink factor when
/// `antialias` (Pillow's and torchvision v2's antialiased resize), plain
/// bilinear otherwise; values rounded to 8 bits. What `gpufeed pack
/// --max-side` shrinks images with.
pub fn resize(
    img: &crate::decode::Image,
    width: u32,
    height: u32,
    antialias: bool,
) -> crate::decode::Image {
    let (width, height) = (width.max(1), height.max(1));
    let p = params::sample_params(
        Transform::Resize,
        0.0,
        0.0,
        0,
        0,
        0,
        0,
        (img.width, img.height),
        (width, height),
    );
    let spec = cpu::OutSpec {
        width: width as usize,
        height: height as usize,
        layout: Layout::Nhwc,
        antialias,
        fma: &Fma::IDENTITY,
    };
    let mut data = vec![0u8; 3 * width as usize * height as usize];
    cpu::Resampler::default().run(img, &p, spec, &mut data);
    crate::decode::Image {
        width,
        height,
        data,
    }
}

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

/// One view of each sample: its output size, geometry and flips. A
/// single-view pipeline has one; self-supervised recipes ask for several
/// (e.g. 2 global 224 px crops and 6 local 96 px crops).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct View {
    /// Output height in pixels.
    pub height: usize,
    /// Output width in pixels.
    pub width: usize,
    /// How the crop is chosen.
    pub transform: Transform,
    /// Probability of a left-right mirror.
    pub flip_h: f32,
    /// Probability of a top-bottom mirror.
    pub flip_v: f32,
    /// How many independent draws of this view each sample gets.
    pub count: usize,
    /// Photometric ops (color jitter, grayscale, blur, solarize, erasing);
    /// none by default. Set with the methods below.
    pub photo: Photometric,
}

impl View {
    /// A view of `height × width` with torchvision's training defaults:
    /// [`Transform::RANDOM_RESIZED_CROP`], left-right flip with p = 0.5, no
    /// vertical flip, one draw per sample.
    pub fn new(height: usize, width: usize) -> View {
        View {
            height,
            width,
            transform: Transform::RANDOM_RESIZED_CROP,
            flip_h: 0.5,
            flip_v: 0.0,
            count: 1,
            photo: Photometric::default(),
        }
    }

    /// Set the transform, and the left-right flip probability to the
    /// transform's default ([`Transform::default_flip_h`]: 0.5 for
    /// RandomResizedCrop, 0 for evaluation and resize); call
    /// [`View::flip_h`] after this to choose another.
    pub fn transform(mut self, t: Transform) -> View {
        self.transform = t;
        self.flip_h = t.default_flip_h();
        self
    }

    /// Set the left-right flip probability.
    pub fn flip_h(mut self, p: f32) -> View {
        self.flip_h = p;
        self
    }

    /// Set the top-bottom flip probability.
    pub fn flip_v(mut self, p: f32) -> View {
        self.flip_v = p;
        self
    }

    /// Set the number of draws per sample.
    pub fn count(mut self, n: usize) -> View {
        self.count = n;
        self
    }

    /// Color jitter (torchvision `RandomApply([ColorJitter(..)], p)`).
    /// Default: none.
    pub fn color_jitter(mut self, j: ColorJitter) -> View {
        self.photo.jitter = Some(j);
        self
    }

    /// Grayscale with probability `p` (torchvision `RandomGrayscale(p)`).
    /// Default: 0.
    pub fn grayscale(mut self, p: f32) -> View {
        self.photo.grayscale = p;
        self
    }

    /// Gaussian blur (torchvision `RandomApply([GaussianBlur(..)], p)`).
    /// Default: none.
    pub fn blur(mut self, b: GaussianBlur) -> View {
        self.photo.blur = Some(b);
        self
    }

    /// Solarize (torchvision `RandomSolarize(threshold, p)`, threshold in
    /// 0..1 units). Default: none.
    pub fn solarize(mut self, threshold: f32, p: f32) -> View {
        self.photo.solarize = Some(Solarize { threshold, p });
        self
    }

    /// Random erasing after normalization (torchvision `RandomErasing`).
    /// Default: none.
    pub fn erasing(mut self, e: RandomErasing) -> View {
        self.photo.erasing = Some(e);
        self
    }

    /// Elements of one draw of this view.
    pub(crate) fn sample_len(&self) -> usize {
        3 * self.height * self.width
    }
}

/// Entry points for the criterion benchmarks only; not part of the API.
#[doc(hidden)]
pub mod bench_support {
    use half::f16;

    use super::cpu::{OutSpec, Resampler};
    use super::params::sample_params;
    use super::{Layout, Normalize, Transform};
    use crate::decode::Image;

    /// Reusable state for [`augment_f16_nchw`].
    #[derive(Debug, Default)]
    pub struct Augmenter(Resampler);

    /// One RandomResizedCrop + flip + normalize view of `img` into `out`
    /// (`3 * size * size` f16, NCHW), as the CPU pipeline does it.
    pub fn augment_f16_nchw(
        a: &mut Augmenter,
        img: &Image,
        index: u64,
        size: usize,
        antialias: bool,
        out: &mut [f16],
    ) {
        let p = sample_params(
            Transform::RANDOM_RESIZED_CROP,
            0.5,
            0.0,
            0,
            0,
            index,
            0,
            (img.width, img.height),
            (size as u32, size as u32),
        );
        let fma = Normalize::IMAGENET.fold();
        let spec = OutSpec {
            width: size,
            height: size,
            layout: Layout::Nchw,
            antialias,
            fma: &fma,
        };
        a.0.run(img, &p, spec, out);
    }
}
