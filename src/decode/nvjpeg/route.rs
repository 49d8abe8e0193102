//! The routing policy (issues 5 and 16, item 7), in one place: which
//! decoder a JPEG goes to. From its header, on the worker that parsed it:
//! the CPU decoder, or nvJPEG ([`gpu_routable`]); of nvJPEG's, whether the
//! hardware engine could take it ([`hardware_takes`]). From the sample
//! alone: whether it goes to the engine, by a draw below the share
//! ([`hardware_draw`], [`to_engine`]). The rest of nvJPEG's images take
//! CUDA; what a route refuses or fails at falls back to the next (engine,
//! CUDA, CPU), in `stage/cuda/nvroute.rs`.

/// Whether nvJPEG's CUDA decoders take an image with this header: 8-bit
/// Huffman DCT (baseline, extended, progressive), gray or YCbCr in one of
/// the subsamplings nvJPEG names (`nvjpegChromaSubsampling_t`). Measured on
/// an H100 with nvJPEG 13.0 (2026-11-22): RGB-coded files came out as if
/// YCbCr (7–12 dB against the CPU decoder), and mixed chroma factors
/// (Cb 2x1 with Cr 1x1, luma 1x3, ...) as garbage; those go to the CPU.
/// So do images under 16 pixels on a side (smaller than a 4:2:0 MCU):
/// nvJPEG's interpolated chroma at their edges differed from the CPU
/// decoders' (a 2x2 image: 32.5 dB), and the CPU decodes them for nothing.
pub fn takes(h: &crate::jpeg::JpegHeader) -> bool {
    use crate::jpeg::{SofKind, Subsampling as S};
    h.width >= 16
        && h.height >= 16
        && matches!(
            h.sof,
            SofKind::Baseline | SofKind::Extended | SofKind::Progressive
        )
        && h.precision == 8
        && match h.components {
            1 => true,
            3 => {
                !h.is_rgb()
                    && matches!(
                        h.subsampling,
                        S::S444 | S::S422 | S::S420 | S::S440 | S::S411 | S::S410
                    )
            }
            _ => false,
        }
}

/// [`takes`], narrowed for the hardware engine: baseline files only (the
/// NVJPG engine decodes baseline Huffman JPEGs; nvJPEG documentation,
/// "Hardware Acceleration"). Progressive files used to pass here, be
/// refused by the engine's own support query, and then decode one by one
/// on the batch thread (issue 16, 3b); they now take the CUDA route from
/// the worker. Also excluded: gray images whose one component declares
/// sampling factors other than 1x1 (legal, and meaningless for one
/// component), which the engine decoded as garbage on an H100 where the
/// CUDA decoder got them right.
pub fn hardware_takes(h: &crate::jpeg::JpegHeader) -> bool {
    takes(h)
        && h.sof == crate::jpeg::SofKind::Baseline
        && (h.components == 3 || h.sampling.first() == Some(&(1, 1)))
}

/// Whether the image goes to nvJPEG (issue 5 routing, decided from the
/// header): what [`takes`] accepts. Lossless,
/// arithmetic, hierarchical, 12-bit, CMYK, RGB-coded and odd subsamplings go
/// to the CPU decoder, as do images that need an EXIF rotation (the CPU
/// route applies it).
pub(crate) fn gpu_routable(h: &crate::jpeg::JpegHeader, apply_orientation: bool) -> bool {
    takes(h) && (!apply_orientation || h.orientation == crate::jpeg::Orientation::Normal)
}

/// Whether an image goes to the hardware engine: the pipeline uses an
/// engine, the image's header allows it ([`hardware_takes`]) and its draw
/// ([`hardware_draw`]) is below the share. Workers (which begin the rest
/// on CUDA), the batch thread and the decode benchmark all ask this.
pub(crate) fn to_engine(engine: bool, engine_ok: bool, draw: f64, share: f32) -> bool {
    engine && engine_ok && draw < f64::from(share)
}

/// A uniform draw in `[0, 1)` for sample `index` of `epoch`: the sample goes
/// to the hardware JPEG engine (when the engine takes it) iff the draw is
/// below the hardware share. The two nvJPEG backends round differently, so
/// deciding this from the sample alone keeps an epoch's pixels independent
/// of batch composition, resumption and history (DESIGN.md, Planner).
pub(crate) fn hardware_draw(seed: u64, epoch: u64, index: u64) -> f64 {
    // A stream number no view uses (views are 1..). The last word of the
    // seed bytes is the one that depends on all four inputs.
    let bytes = crate::sampler::seed_bytes(seed, epoch, index, u64::MAX);
    let word = u64::from_le_bytes(bytes[24..].try_into().expect("8 bytes"));
    (word >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::hardware_draw;

    #[test]
    fn hardware_draws_are_pure_and_uniform() {
        let draws: Vec<f64> = (0..20_000).map(|i| hardware_draw(42, 3, i)).collect();
        assert!(draws.iter().all(|d| (0.0..1.0).contains(d)));
        assert_eq!(hardware_draw(42, 3, 17), draws[17]);
        assert_ne!(hardware_draw(42, 4, 17), draws[17]);
        assert_ne!(hardware_draw(43, 3, 17), draws[17]);
        for share in [0.25, 0.65] {
            let taken = draws.iter().filter(|&&d| d < share).count() as f64 / 20_000.0;
            assert!((taken - share).abs() < 0.02, "share {share}: {taken}");
        }
    }
}
