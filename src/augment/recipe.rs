//! Known training and evaluation recipes as one call (issue 19): the views,
//! their photometric ops and the normalization of a paper or reference
//! implementation, for [`PipelineBuilder::recipe`](crate::PipelineBuilder::recipe).
//!
//! Each constructor cites what it follows; where the reference uses PIL
//! operations (DINO's and BYOL's blur and solarize), the torchvision
//! equivalents are used: `GaussianBlur` with a kernel of about 10 % of the
//! view's side (SimCLR's choice) and the same sigma range, `RandomSolarize`
//! at 0.5 (PIL's 128).

use super::photo::{ColorJitter, GaussianBlur};
use super::{Normalize, Transform, View};

/// A recipe: views and normalization (ImageNet statistics in every
/// constructor here). Its fields are public, so a recipe can be adjusted
/// before it is applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Recipe {
    /// The views of each sample, in the order the batch holds them.
    pub views: Vec<View>,
    /// Normalization of the float output.
    pub normalize: Option<Normalize>,
}

/// An odd kernel of about 10 % of `side` (SimCLR), at least 3 and at most
/// the widest the kernels take.
fn blur_kernel(side: usize) -> u32 {
    let k = (side / 10) as u32 | 1;
    k.clamp(3, GaussianBlur::MAX_KERNEL)
}

fn rrc(size: usize, scale: (f32, f32)) -> View {
    View::new(size, size).transform(Transform::RandomResizedCrop {
        scale,
        ratio: (3.0 / 4.0, 4.0 / 3.0),
    })
}

impl Recipe {
    /// torchvision's ImageNet classification reference, training
    /// (`ClassificationPresetTrain` without auto-augment): RandomResizedCrop
    /// to `size`, horizontal flip p 0.5, ImageNet normalization.
    pub fn imagenet_train(size: usize) -> Recipe {
        Recipe {
            views: vec![View::new(size, size)],
            normalize: Some(Normalize::IMAGENET),
        }
    }

    /// torchvision's ImageNet classification reference, evaluation
    /// (`ClassificationPresetEval`): Resize(`resize`) then CenterCrop(`size`),
    /// no flip (224 and 256 in the reference).
    pub fn imagenet_eval(size: usize, resize: u32) -> Recipe {
        Recipe {
            views: vec![View::new(size, size).transform(Transform::CenterCrop { resize })],
            normalize: Some(Normalize::IMAGENET),
        }
    }

    /// SimCLR (Chen et al. 2020, appendix A): two views, each
    /// RandomResizedCrop(`size`), flip 0.5, ColorJitter(0.8, 0.8, 0.8, 0.2)
    /// with p 0.8, grayscale p 0.2, Gaussian blur (sigma 0.1–2.0) p 0.5.
    pub fn simclr(size: usize) -> Recipe {
        let view = rrc(size, (0.08, 1.0))
            .count(2)
            .color_jitter(ColorJitter::new(0.8, 0.8, 0.8, 0.2, 0.8))
            .grayscale(0.2)
            .blur(GaussianBlur::new(blur_kernel(size), (0.1, 2.0), 0.5));
        Recipe {
            views: vec![view],
            normalize: Some(Normalize::IMAGENET),
        }
    }

    /// BYOL (Grill et al. 2020, table 6): two asymmetric views of
    /// RandomResizedCrop(`size`), flip 0.5, ColorJitter(0.4, 0.4, 0.2, 0.1)
    /// p 0.8, grayscale p 0.2; the first blurred always, the second with
    /// p 0.1 and solarized with p 0.2.
    pub fn byol(size: usize) -> Recipe {
        let base = rrc(size, (0.08, 1.0))
            .color_jitter(ColorJitter::new(0.4, 0.4, 0.2, 0.1, 0.8))
            .grayscale(0.2);
        let kernel = blur_kernel(size);
        Recipe {
            views: vec![
                base.blur(GaussianBlur::new(kernel, (0.1, 2.0), 1.0)),
                base.blur(GaussianBlur::new(kernel, (0.1, 2.0), 0.1))
                    .solarize(0.5, 0.2),
            ],
            normalize: Some(Normalize::IMAGENET),
        }
    }

    /// DINO multi-crop (Caron et al. 2021, `DataAugmentationDINO`): two
    /// global views of `global` px with scale (0.4, 1.0), flip 0.5,
    /// ColorJitter(0.4, 0.4, 0.2, 0.1) p 0.8, grayscale p 0.2, the first
    /// blurred always, the second blurred p 0.1 and solarized p 0.2; then
    /// `locals` local views of `local` px with scale (0.05, 0.4), blurred
    /// p 0.5. The reference: 224, 96 and 8.
    pub fn dino(global: usize, local: usize, locals: usize) -> Recipe {
        let flip_jitter_gray = |v: View| {
            v.color_jitter(ColorJitter::new(0.4, 0.4, 0.2, 0.1, 0.8))
                .grayscale(0.2)
        };
        let g = flip_jitter_gray(rrc(global, (0.4, 1.0)));
        let gk = blur_kernel(global);
        let mut views = vec![
            g.blur(GaussianBlur::new(gk, (0.1, 2.0), 1.0)),
            g.blur(GaussianBlur::new(gk, (0.1, 2.0), 0.1))
                .solarize(0.5, 0.2),
        ];
        if locals > 0 {
            views.push(
                flip_jitter_gray(rrc(local, (0.05, 0.4)))
                    .count(locals)
                    .blur(GaussianBlur::new(blur_kernel(local), (0.1, 2.0), 0.5)),
            );
        }
        Recipe {
            views,
            normalize: Some(Normalize::IMAGENET),
        }
    }

    /// A recipe by name, as the CLI takes it: `imagenet` (training, 224),
    /// `imagenet-eval` (224 from 256), `simclr`, `byol` (224) or `dino`
    /// (224, 8 × 96).
    pub fn by_name(name: &str) -> Option<Recipe> {
        Some(match name {
            "imagenet" => Recipe::imagenet_train(224),
            "imagenet-eval" => Recipe::imagenet_eval(224, 256),
            "simclr" => Recipe::simclr(224),
            "byol" => Recipe::byol(224),
            "dino" => Recipe::dino(224, 96, 8),
            _ => return None,
        })
    }

    /// The names [`Recipe::by_name`] knows.
    pub const NAMES: [&'static str; 5] = ["imagenet", "imagenet-eval", "simclr", "byol", "dino"];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_recipe_passes_the_view_checks() {
        for name in Recipe::NAMES {
            let r = Recipe::by_name(name).unwrap();
            for v in &r.views {
                assert!(v.photo.check(v.width, v.height).is_none(), "{name}");
                assert_eq!(v.photo.any(), !name.starts_with("imagenet"), "{name}");
            }
        }
        let dino = Recipe::dino(224, 96, 8);
        let draws: Vec<(usize, usize)> = dino.views.iter().map(|v| (v.width, v.count)).collect();
        assert_eq!(draws, [(224, 1), (224, 1), (96, 8)]);
        assert_eq!(blur_kernel(224), 23);
        assert_eq!(blur_kernel(96), 9);
        assert_eq!(blur_kernel(16), 3);
    }
}
