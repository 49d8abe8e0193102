//! `#[repr(C)]` mirrors of `kernels/scan.cuh` and `kernels/pixels.cuh`,
//! the descriptors of the progressive-file kernels (issue 16). Sizes and
//! offsets are asserted here at compile time and by `static_assert` in the
//! headers. A leaf: the host code that fills them (`progressive.rs`,
//! `pixels.rs`, `prog_batch.rs`) and the emulated device both use it.

use std::mem::{offset_of, size_of};

use cudarc::driver::{DeviceRepr, ValidAsZeroBits};

use crate::jpeg::scans::Folded;

/// `GfHuff`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct GfHuff {
    pub(crate) look: [u16; 512],
    pub(crate) maxcode: [i32; 18],
    pub(crate) valoff: [i32; 18],
    pub(crate) symbols: [u8; 256],
}

/// `GfScan`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct GfScan {
    pub(crate) offset: u32,
    pub(crate) length: u32,
    pub(crate) restart: u32,
    pub(crate) dc: [u16; 4],
    pub(crate) ac: [u16; 4],
    pub(crate) comps: u8,
    pub(crate) comp: [u8; 4],
    pub(crate) ss: u8,
    pub(crate) se: u8,
    pub(crate) ah: u8,
    pub(crate) al: u8,
    pub(crate) pad: [u8; 3],
}

/// `GfCoefs`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct GfCoefs {
    pub(crate) coef: u64,
    pub(crate) stride: u32,
    pub(crate) rows: u32,
    pub(crate) bw: u32,
    pub(crate) bh: u32,
    pub(crate) h: u8,
    pub(crate) v: u8,
    pub(crate) pad: [u8; 6],
}

/// `GfChain`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct GfChain {
    pub(crate) data: u64,
    pub(crate) data_len: u32,
    pub(crate) first_scan: u32,
    pub(crate) scans: u32,
    pub(crate) mcus_x: u32,
    pub(crate) mcus_y: u32,
    pub(crate) comps: u32,
    pub(crate) comp: [GfCoefs; 4],
}

/// `GfSplit`: one launch of the split kernels (progressive.cu's "Split
/// decoding"), passed by value.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct GfSplit {
    pub(crate) chains: u64,
    pub(crate) scans: u64,
    pub(crate) tables: u64,
    pub(crate) sub_first: u64,
    pub(crate) sync: u64,
    pub(crate) status: u64,
    pub(crate) n: u32,
    pub(crate) n_scans: u32,
    pub(crate) n_tables: u32,
    pub(crate) n_subs: u32,
    pub(crate) sub_bytes: u32,
    pub(crate) rounds: u32,
}

/// Bytes of one `GfSync` record: the split kernels' scratch, which only
/// the device reads and writes (2 per subsequence).
pub(crate) const SYNC_BYTES: usize = 56;

const _: () = assert!(size_of::<GfSplit>() == 72);
const _: () = assert!(size_of::<GfHuff>() == 1424);
const _: () = assert!(size_of::<GfScan>() == 40);
const _: () = assert!(size_of::<GfCoefs>() == 32);
const _: () = assert!(size_of::<GfChain>() == 160);
const _: () = assert!(offset_of!(GfChain, comp) == 32);

impl From<&Folded> for GfHuff {
    fn from(t: &Folded) -> GfHuff {
        GfHuff {
            look: t.look,
            maxcode: t.maxcode,
            valoff: t.valoff,
            symbols: t.symbols,
        }
    }
}

/// `GfPlane`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct GfPlane {
    pub(crate) coef: u64,
    pub(crate) out: u64,
    pub(crate) stride: u32,
    pub(crate) rows: u32,
    pub(crate) first: u32,
    pub(crate) pad: u32,
    pub(crate) quant: [i16; 64],
}

/// `GfColor`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct GfColor {
    pub(crate) plane: [u64; 3],
    pub(crate) out: u64,
    pub(crate) pitch: [u32; 3],
    pub(crate) dw: [u32; 3],
    pub(crate) dh: [u32; 3],
    pub(crate) out_pitch: u32,
    pub(crate) width: u32,
    pub(crate) height: u32,
    pub(crate) mode: [u8; 3],
    pub(crate) he: [u8; 3],
    pub(crate) ve: [u8; 3],
    pub(crate) color: u8,
    pub(crate) pad: [u8; 6],
}

const _: () = assert!(size_of::<GfPlane>() == 160);
const _: () = assert!(offset_of!(GfPlane, quant) == 32);
const _: () = assert!(size_of::<GfColor>() == 96);
const _: () = assert!(offset_of!(GfColor, pitch) == 32);

/// `GF_UP_*` and `GF_COLOR_*` (pixels.cuh).
pub(crate) const UP_FULL: u8 = 0;
pub(crate) const UP_H2V1: u8 = 1;
pub(crate) const UP_H1V2: u8 = 2;
pub(crate) const UP_H2V2: u8 = 3;
pub(crate) const UP_REPLICATE: u8 = 4;
pub(crate) const COLOR_GRAY: u8 = 0;
pub(crate) const COLOR_YCC: u8 = 1;
pub(crate) const COLOR_RGB: u8 = 2;

// SAFETY: every descriptor here is #[repr(C)] plain data, integers and
// integer arrays only (device addresses as u64, no references), with the
// layout of its C mirror asserted above: cudarc's DeviceRepr asks only
// that the bytes can be copied to the device and passed as kernel
// parameters, and all-zero bytes are a valid value of each
// (ValidAsZeroBits; the growable buffers of prog_batch.rs start zeroed).
unsafe impl DeviceRepr for GfChain {}
// SAFETY: as above.
unsafe impl DeviceRepr for GfScan {}
// SAFETY: as above.
unsafe impl DeviceRepr for GfHuff {}
// SAFETY: as above.
unsafe impl DeviceRepr for GfPlane {}
// SAFETY: as above.
unsafe impl DeviceRepr for GfColor {}
// SAFETY: as above.
unsafe impl DeviceRepr for GfSplit {}
// SAFETY: as above.
unsafe impl ValidAsZeroBits for GfChain {}
// SAFETY: as above.
unsafe impl ValidAsZeroBits for GfScan {}
// SAFETY: as above.
unsafe impl ValidAsZeroBits for GfHuff {}
// SAFETY: as above.
unsafe impl ValidAsZeroBits for GfPlane {}
// SAFETY: as above.
unsafe impl ValidAsZeroBits for GfColor {}

#[cfg(test)]
mod tests {
    use super::super::desc::tests::number_after;
    use super::*;

    #[test]
    fn scan_header_states_the_same_layout() {
        let h = include_str!("../../kernels/scan.cuh");
        assert_eq!(number_after(h, "sizeof(GfHuff) =="), size_of::<GfHuff>());
        assert_eq!(number_after(h, "sizeof(GfScan) =="), size_of::<GfScan>());
        assert_eq!(number_after(h, "sizeof(GfCoefs) =="), size_of::<GfCoefs>());
        assert_eq!(number_after(h, "sizeof(GfChain) =="), size_of::<GfChain>());
        assert_eq!(number_after(h, "comp at"), offset_of!(GfChain, comp));
        assert_eq!(number_after(h, "sizeof(GfSplit) =="), size_of::<GfSplit>());
        assert_eq!(number_after(h, "sizeof(GfSync) =="), SYNC_BYTES);
        for (i, name) in [
            "GF_SCAN_OK",
            "GF_SCAN_BAD_CODE",
            "GF_SCAN_OVERRUN",
            "GF_SCAN_BAD_RESTART",
            "GF_SCAN_BAD_SYMBOL",
            "GF_SCAN_BAD_DESC",
        ]
        .iter()
        .enumerate()
        {
            assert_eq!(number_after(h, &format!("#define {name} ")), i);
        }
        assert_eq!(super::super::progressive::SCAN_STATUS.len(), 6);
        assert_eq!(
            number_after(h, "#define GF_SCAN_WARPS_MAX "),
            super::super::progressive::SCAN_WARPS_MAX as usize
        );
    }

    #[test]
    fn pixels_header_states_the_same_layout() {
        let h = include_str!("../../kernels/pixels.cuh");
        assert_eq!(number_after(h, "sizeof(GfPlane) =="), size_of::<GfPlane>());
        assert_eq!(number_after(h, "sizeof(GfColor) =="), size_of::<GfColor>());
        assert_eq!(number_after(h, "quant at"), offset_of!(GfPlane, quant));
        assert_eq!(number_after(h, "pitch at"), offset_of!(GfColor, pitch));
        for (name, v) in [
            ("GF_UP_FULL", UP_FULL),
            ("GF_UP_H2V1", UP_H2V1),
            ("GF_UP_H1V2", UP_H1V2),
            ("GF_UP_H2V2", UP_H2V2),
            ("GF_UP_REPLICATE", UP_REPLICATE),
            ("GF_COLOR_GRAY", COLOR_GRAY),
            ("GF_COLOR_YCC", COLOR_YCC),
            ("GF_COLOR_RGB", COLOR_RGB),
        ] {
            assert_eq!(number_after(h, &format!("#define {name} ")), v as usize);
        }
    }
}
