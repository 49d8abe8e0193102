//! The scans of a Huffman JPEG, planned for the GPU's entropy decoder
//! (`kernels/progressive.cu`; issue 16: progressive files are the CPU
//! Huffman work that neither the hardware engine nor nvJPEG's GPU Huffman
//! takes, and sequential files the CPU Huffman work of the CUDA route).
//!
//! [`plan`] walks every marker segment of the file (T.81 Annex B) and
//! returns what the kernel needs: the frame's component grids, each scan's
//! entropy-coded segment and parameters, the Huffman tables in effect for
//! it, folded as libjpeg folds them (`jpeg_make_d_derived_tbl`), and the
//! quantization table each component latched at its first scan (for the
//! inverse DCT that follows). It reads no entropy-coded data beyond
//! finding where each segment ends. What libjpeg refuses, and what the
//! kernel does not do (arithmetic or lossless coding, 12-bit samples),
//! is an error here, and the file goes to another decoder.

use crate::error::SampleError;

/// Scans past this many make the file a CPU one: libjpeg-turbo's own
/// `TJPARAM_SCANLIMIT` suggestion for untrusted input is 500, and real
/// progressive files have about ten.
pub(crate) const MAX_SCANS: usize = 500;

/// Marker segments read before giving up on a file.
pub(super) const MAX_SEGMENTS: usize = 10_000;

/// Distinct Huffman tables a plan's scans may use; past it the file is a
/// CPU one. The corpus's files use at most 16 (`tests/data`,
/// `../shared/testdata`); the bound keeps a batch's tables within the
/// kernels' 16-bit indices and what a crafted file can make a lane upload
/// small.
pub(crate) const MAX_TABLES: usize = 64;

/// A Huffman table folded for decoding: libjpeg's derived table (jdhuff.c)
/// with a 9-bit lookahead.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Folded {
    /// Next 9 bits → `(code length << 8) | symbol`; 0 where the code is
    /// longer than 9 bits.
    pub look: [u16; 512],
    /// Largest code of each length 1..=16, -1 if none; `[17]` ends the
    /// search.
    pub maxcode: [i32; 18],
    /// Symbol index of a code of length `l`: `code + valoff[l]`.
    pub valoff: [i32; 18],
    /// The symbols in code order.
    pub symbols: [u8; 256],
    /// Every symbol fits a DC table (at most 15 bits of difference).
    pub dc_ok: bool,
}

impl std::fmt::Debug for Folded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Folded")
            .field("maxcode", &self.maxcode)
            .finish()
    }
}

/// One component of the frame and its coefficient grid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Component {
    /// Component identifier from the frame header.
    pub id: u8,
    /// Sampling factors.
    pub h: u8,
    pub v: u8,
    /// Quantization table slot (0..=3).
    pub tq: u8,
    /// Blocks per row and rows of the grid, padded to whole MCUs.
    pub stride: u32,
    pub rows: u32,
    /// Blocks a non-interleaved scan of the component covers.
    pub bw: u32,
    pub bh: u32,
    /// The quantization table latched at the component's first scan
    /// (natural order), as libjpeg latches it.
    pub quant: Option<[u16; 64]>,
}

/// One scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Scan {
    /// The entropy-coded segment: byte offset in the file and length, up
    /// to the marker that ends it (or the end of the file).
    pub offset: u32,
    pub length: u32,
    /// Restart interval in MCUs; 0: none.
    pub restart: u32,
    /// `(frame component index, DC table, AC table)` per scan component;
    /// tables index [`Plan::tables`], `u16::MAX` where the scan needs none.
    pub comps: Vec<(u8, u16, u16)>,
    /// Spectral selection and successive approximation.
    pub ss: u8,
    pub se: u8,
    pub ah: u8,
    pub al: u8,
}

/// Everything the scan decoder needs for one file.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub width: u32,
    pub height: u32,
    pub comps: Vec<Component>,
    /// MCUs across and down an interleaved scan.
    pub mcus_x: u32,
    pub mcus_y: u32,
    pub tables: Vec<Folded>,
    pub scans: Vec<Scan>,
    /// A JFIF APP0 segment was seen (the file is YCbCr).
    pub jfif: bool,
    /// The Adobe APP14 segment's transform flag, if any.
    pub adobe: Option<u8>,
    /// Every coefficient of every component refined to its last bit (a
    /// sequential file: every component scanned). Otherwise libjpeg
    /// smooths the blocks' low frequencies as it would for a file still
    /// arriving (jdcoefct.c, `smoothing_ok`), which the GPU's pixel stage
    /// does not do.
    pub complete: bool,
    /// A sequential frame (SOF0 or SOF1): every scan codes whole blocks,
    /// DC and AC together (T.81 F.2.2), with Ss = 0, Se = 63.
    pub sequential: bool,
}

impl Plan {
    /// Groups of scans, each decodable by one thread independently of the
    /// others, in file order within a group: all DC scans (they alone
    /// write coefficient 0), then the AC scans of each component. A
    /// sequential file's scans are one group: they may name a component
    /// again, each over what the last left (jdcoefct.c, multi-scan mode).
    pub(crate) fn chains(&self) -> Vec<Vec<usize>> {
        if self.sequential {
            return vec![(0..self.scans.len()).collect()];
        }
        let mut out = vec![Vec::new(); 1 + self.comps.len()];
        for (i, s) in self.scans.iter().enumerate() {
            let g = if s.ss == 0 {
                0
            } else {
                1 + s.comps[0].0 as usize
            };
            out[g].push(i);
        }
        out.retain(|c| !c.is_empty());
        out
    }

    /// Coefficients of every component's grid.
    pub(crate) fn all_coefficients(&self) -> usize {
        (0..self.comps.len()).map(|c| self.coefficients(c)).sum()
    }

    /// Coefficients of component `c`'s grid (64 per block).
    pub(crate) fn coefficients(&self, c: usize) -> usize {
        self.comps[c].stride as usize * self.comps[c].rows as usize * 64
    }
}

/// The Huffman tables while a file is planned: each (class, slot)'s
/// current definition, as the DHT segment gave it, is folded and enters
/// [`Plan::tables`] at the first scan that uses it, and only if no table
/// there is the same. So the plan holds what its scans use, once, and
/// folds nothing else: a file may redefine its slots thousands of times
/// (a crafted 9 MB file of 546,000 definitions made 546,000 folded tables,
/// 0.78 GB, and wrapped their 16-bit indices so that its scan named one of
/// them), and the ImageNet-like photos' scans share tables. As libjpeg,
/// which checks a table's codes when a scan starts
/// (`jpeg_make_d_derived_tbl`), an unused table is not checked.
#[derive(Default)]
struct Tables {
    defined: [[Option<Box<Def>>; 4]; 2],
    /// Where the current definition is in `list`, once a scan used it.
    entered: [[Option<u16>; 4]; 2],
    list: Vec<Folded>,
}

/// A table as a DHT segment defines it: codes per length, symbols.
struct Def {
    bits: [u8; 17],
    vals: [u8; 256],
}

impl Tables {
    /// Define `(class, slot)` (checked in range) with `bits` and `vals`,
    /// the symbols (as many as codes, at most 256).
    fn define(&mut self, class: usize, slot: usize, bits: [u8; 17], vals: &[u8]) {
        let def = self.defined[class][slot].get_or_insert_with(|| {
            Box::new(Def {
                bits,
                vals: [0; 256],
            })
        });
        def.bits = bits;
        def.vals[..vals.len()].copy_from_slice(vals);
        self.entered[class][slot] = None;
    }

    /// The index in `list` of the table a scan names as `(class, slot)`
    /// (`slot` from a 4-bit field: undefined past 3).
    fn used(&mut self, class: usize, slot: usize) -> Result<u16, SampleError> {
        if let Some(&Some(at)) = self.entered[class].get(slot) {
            return Ok(at);
        }
        let Some(Some(def)) = self.defined[class].get(slot) else {
            return Err(corrupt("SOS uses an undefined Huffman table"));
        };
        let count: usize = def.bits.iter().map(|&b| usize::from(b)).sum();
        let table = fold(&def.bits, &def.vals[..count])?;
        let at = match self.list.iter().position(|t| t == &table) {
            Some(at) => at,
            None if self.list.len() == MAX_TABLES => {
                return Err(SampleError::Unsupported(format!(
                    "scans using more than {MAX_TABLES} Huffman tables"
                )));
            }
            None => {
                self.list.push(table);
                self.list.len() - 1
            }
        };
        self.entered[class][slot] = Some(at as u16);
        Ok(at as u16)
    }
}

fn corrupt(what: &str) -> SampleError {
    SampleError::Corrupt(what.to_string())
}

/// Fold one Huffman table (`bits[l]`: codes of length `l`, 1..=16).
pub(crate) fn fold(bits: &[u8; 17], vals: &[u8]) -> Result<Folded, SampleError> {
    let sizes: Vec<u8> = (1..=16u8)
        .flat_map(|l| std::iter::repeat_n(l, bits[l as usize] as usize))
        .collect();
    if sizes.len() > 256 || sizes.len() > vals.len() {
        return Err(corrupt("Huffman table with more codes than symbols"));
    }
    // Canonical codes (T.81 C.2), with libjpeg's check that no length
    // runs out of codes.
    let mut codes = vec![0u32; sizes.len()];
    let (mut code, mut p) = (0u32, 0usize);
    let mut si = sizes.first().copied().unwrap_or(0);
    while p < sizes.len() {
        while p < sizes.len() && sizes[p] == si {
            codes[p] = code;
            code += 1;
            p += 1;
        }
        if code >= 1 << si {
            return Err(corrupt("Huffman table with too many codes of one length"));
        }
        code <<= 1;
        si += 1;
    }
    let mut t = Folded {
        look: [0; 512],
        maxcode: [-1; 18],
        valoff: [0; 18],
        symbols: [0; 256],
        dc_ok: vals[..sizes.len()].iter().all(|&v| v <= 15),
    };
    t.symbols[..sizes.len()].copy_from_slice(&vals[..sizes.len()]);
    let mut p = 0usize;
    for (l, &n) in bits.iter().enumerate().skip(1) {
        let n = n as usize;
        if n > 0 {
            t.valoff[l] = p as i32 - codes[p] as i32;
            p += n;
            t.maxcode[l] = codes[p - 1] as i32;
        }
    }
    t.maxcode[17] = 0xF_FFFF;
    let mut p = 0usize;
    for (l, &n) in bits.iter().enumerate().take(10).skip(1) {
        for _ in 0..n {
            let first = (codes[p] as usize) << (9 - l);
            for e in &mut t.look[first..first + (1 << (9 - l))] {
                *e = ((l as u16) << 8) | vals[p] as u16;
            }
            p += 1;
        }
    }
    Ok(t)
}

/// The frame header of a Huffman JPEG (SOF0, SOF1 or SOF2), 8-bit.
fn frame(seg: &[u8], max_pixels: u64) -> Result<(u32, u32, Vec<Component>), SampleError> {
    if seg.len() < 6 {
        return Err(corrupt("short SOF segment"));
    }
    if seg[0] != 8 {
        return Err(SampleError::Unsupported(format!("{}-bit samples", seg[0])));
    }
    let height = u16::from_be_bytes([seg[1], seg[2]]) as u32;
    let width = u16::from_be_bytes([seg[3], seg[4]]) as u32;
    if width == 0 || height == 0 {
        return Err(SampleError::BadDimensions { width, height });
    }
    if width as u64 * height as u64 > max_pixels {
        return Err(SampleError::TooLarge {
            width,
            height,
            limit: max_pixels,
        });
    }
    let n = seg[5] as usize;
    if !(1..=4).contains(&n) || seg.len() < 6 + 3 * n {
        return Err(corrupt("bad component count in SOF"));
    }
    let mut comps = Vec::with_capacity(n);
    for c in seg[6..6 + 3 * n].chunks_exact(3) {
        let (h, v) = (c[1] >> 4, c[1] & 15);
        if !(1..=4).contains(&h) || !(1..=4).contains(&v) || c[2] > 3 {
            return Err(corrupt("bad sampling factor or table in SOF"));
        }
        if comps.iter().any(|k: &Component| k.id == c[0]) {
            return Err(corrupt("duplicate component id in SOF"));
        }
        comps.push(Component {
            id: c[0],
            h,
            v,
            tq: c[2],
            stride: 0,
            rows: 0,
            bw: 0,
            bh: 0,
            quant: None,
        });
    }
    // One component: its MCU is one block, whatever factors it declares
    // (T.81 A.2.2), and libjpeg's grid is the plain block count.
    let (hmax, vmax) = if n == 1 {
        (comps[0].h as u32, comps[0].v as u32)
    } else {
        (
            comps.iter().map(|c| c.h as u32).max().unwrap_or(1),
            comps.iter().map(|c| c.v as u32).max().unwrap_or(1),
        )
    };
    let mcus_x = width.div_ceil(8 * hmax);
    let mcus_y = height.div_ceil(8 * vmax);
    for c in &mut comps {
        c.stride = mcus_x * c.h as u32;
        c.rows = mcus_y * c.v as u32;
        c.bw = (width * c.h as u32).div_ceil(8 * hmax);
        c.bh = (height * c.v as u32).div_ceil(8 * vmax);
    }
    Ok((width, height, comps))
}

/// Where the entropy-coded segment starting at `from` ends: at the first
/// marker that is not a restart marker (its first 0xFF, fill bytes
/// included), or at the end of the data.
pub(super) fn segment_end(data: &[u8], from: usize) -> usize {
    let mut i = from;
    while i < data.len() {
        i = next_ff(data, i);
        if i == data.len() {
            break;
        }
        let mut j = i + 1;
        while j < data.len() && data[j] == 0xFF {
            j += 1;
        }
        match data.get(j) {
            Some(0x00) | Some(0xD0..=0xD7) => i = j + 1,
            _ => return i,
        }
    }
    data.len()
}

/// The first 0xFF at or after `i`, or `data.len()`. Eight bytes at a
/// time: planning's cost is this walk over the entropy-coded data, in
/// which 0xFF is rare.
fn next_ff(data: &[u8], mut i: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    while let Some(word) = data.get(i..i + 8) {
        // A byte of `w` is 0xFF where `!w` has a zero byte, which the
        // classic test finds: (v - 0x01..) & !v & 0x80.. is nonzero.
        let v = !u64::from_le_bytes(word.try_into().expect("8 bytes"));
        if v.wrapping_sub(ONES) & !v & HIGHS != 0 {
            break;
        }
        i += 8;
    }
    while i < data.len() && data[i] != 0xFF {
        i += 1;
    }
    i
}

/// `given` (a worker's plan of `data`, `handoff::Jpeg::plan`), else the
/// plan of `data` made here: what the scan kernels' lanes decode from.
pub(crate) fn given_or_planned(given: Option<Box<Plan>>, data: &[u8]) -> Result<Plan, SampleError> {
    match given {
        Some(p) => Ok(*p),
        None => plan(data, u64::MAX),
    }
}

/// Plan the scans of `data`, a Huffman JPEG (progressive or sequential,
/// 8-bit) of at most `max_pixels` pixels.
pub(crate) fn plan(data: &[u8], max_pixels: u64) -> Result<Plan, SampleError> {
    if data.len() < 2 || data[0] != 0xFF || data[1] != 0xD8 {
        return Err(SampleError::NotJpeg("no SOI marker"));
    }
    let mut frame_seen: Option<(u32, u32, Vec<Component>)> = None;
    let mut sequential = false;
    let mut tables = Tables::default();
    let mut quant: [Option<[u16; 64]>; 4] = [None; 4];
    let mut restart = 0u32;
    let mut scans: Vec<Scan> = Vec::new();
    let (mut jfif, mut adobe) = (false, None);
    let mut pos = 2usize;
    for _ in 0..MAX_SEGMENTS {
        let Some((marker, after)) = super::next_marker(data, pos) else {
            break; // no EOI: the scans so far, as libjpeg decodes them
        };
        pos = after;
        match marker {
            0x00 | 0x01 | 0xD0..=0xD7 => continue,
            0xD9 => break,
            // What libjpeg's read_markers refuses outright (jdmarker.c:
            // JERR_SOI_DUPLICATE, JERR_UNKNOWN_MARKER), wherever it comes
            // before EOI: the CPU decoder would refuse the file too.
            0xD8 => return Err(corrupt("second SOI marker")),
            0x02..=0xBF | 0xC8 | 0xDE | 0xDF | 0xF0..=0xFD => {
                return Err(corrupt("unknown marker"));
            }
            _ => {}
        }
        let Some(len) = data.get(pos..pos + 2) else {
            break;
        };
        let len = u16::from_be_bytes([len[0], len[1]]) as usize;
        if len < 2 {
            // libjpeg skips a segment it does not read by its length less
            // two (jdmarker.c, skip_variable), so a length of 0 or 1 skips
            // nothing; one it reads is then too short (JERR_BAD_LENGTH).
            if matches!(marker, 0xC0..=0xCF | 0xDA..=0xDD) {
                return Err(corrupt("marker segment of length under 2"));
            }
            pos += 2;
            continue;
        }
        let Some(seg) = data.get(pos + 2..pos + len) else {
            break;
        };
        pos += len;
        match marker {
            0xC0..=0xC2 if frame_seen.is_none() => {
                frame_seen = Some(frame(seg, max_pixels)?);
                sequential = marker != 0xC2;
            }
            0xC0..=0xC2 => return Err(corrupt("second frame header")),
            0xC3 | 0xC5..=0xC7 | 0xC9..=0xCB | 0xCD..=0xCF => {
                return Err(SampleError::Unsupported(format!(
                    "coding process of SOF 0x{marker:02X}"
                )));
            }
            0xC4 => {
                let mut s = seg;
                while !s.is_empty() {
                    let (class, slot) = ((s[0] >> 4) as usize, (s[0] & 15) as usize);
                    if class > 1 || slot > 3 || s.len() < 17 {
                        return Err(corrupt("bad DHT segment"));
                    }
                    let mut bits = [0u8; 17];
                    bits[1..].copy_from_slice(&s[1..17]);
                    let count: usize = bits.iter().map(|&b| b as usize).sum();
                    if count > 256 || s.len() < 17 + count {
                        return Err(corrupt("bad DHT segment"));
                    }
                    tables.define(class, slot, bits, &s[17..17 + count]);
                    s = &s[17 + count..];
                }
            }
            0xDB => {
                let mut s = seg;
                while !s.is_empty() {
                    let (wide, slot) = (s[0] >> 4 != 0, (s[0] & 15) as usize);
                    let need = if wide { 129 } else { 65 };
                    if slot > 3 || s.len() < need {
                        return Err(corrupt("bad DQT segment"));
                    }
                    let mut q = [0u16; 64];
                    for (k, &nat) in NATURAL.iter().enumerate() {
                        q[nat as usize] = if wide {
                            u16::from_be_bytes([s[1 + 2 * k], s[2 + 2 * k]])
                        } else {
                            s[1 + k] as u16
                        };
                    }
                    quant[slot] = Some(q);
                    s = &s[need..];
                }
            }
            // As libjpeg reads them (jdmarker.c, examine_app0/14).
            0xE0 if seg.len() >= 14 && seg.starts_with(b"JFIF\0") => jfif = true,
            0xEE if seg.len() >= 12 && seg.starts_with(b"Adobe") => adobe = Some(seg[11]),
            0xDD => {
                if seg.len() < 2 {
                    return Err(corrupt("short DRI segment"));
                }
                restart = u16::from_be_bytes([seg[0], seg[1]]) as u32;
            }
            0xDA => {
                let Some((_, _, comps)) = frame_seen.as_mut() else {
                    return Err(corrupt("scan before frame header"));
                };
                // libjpeg takes a sequential file whose first scan has
                // every component for a one-scan file, and a second scan
                // is then a fatal error (jdinput.c, JERR_EOI_EXPECTED).
                if sequential && scans.len() == 1 && scans[0].comps.len() == comps.len() {
                    return Err(corrupt("a second scan after a one-scan frame"));
                }
                let scan = sos(seg, comps, &mut tables, &quant, restart, sequential)?;
                let end = segment_end(data, pos);
                if scans.len() == MAX_SCANS {
                    return Err(SampleError::Unsupported(format!(
                        "more than {MAX_SCANS} scans"
                    )));
                }
                scans.push(Scan {
                    offset: pos as u32,
                    length: (end - pos) as u32,
                    ..scan
                });
                pos = end;
            }
            _ => {}
        }
        if pos >= data.len() {
            break;
        }
    }
    let Some((width, height, comps)) = frame_seen else {
        return Err(SampleError::Unsupported(
            "no Huffman frame header (SOF0, SOF1 or SOF2)".into(),
        ));
    };
    if scans.is_empty() {
        return Err(SampleError::Truncated("no scan"));
    }
    // libjpeg's coef_bits: the point transform of the last scan that
    // coded each coefficient, -1 before any (jdphuff.c, start_pass).
    let mut bits = vec![[-1i8; 64]; comps.len()];
    for s in &scans {
        for &(c, _, _) in &s.comps {
            for b in &mut bits[c as usize][s.ss as usize..=s.se as usize] {
                *b = s.al as i8;
            }
        }
    }
    let complete = if sequential {
        bits.iter().all(|b| b[0] == 0)
    } else {
        bits.iter().all(|b| b.iter().all(|&v| v == 0))
    };
    let (mcus_x, mcus_y) = (
        comps[0].stride / comps[0].h as u32,
        comps[0].rows / comps[0].v as u32,
    );
    Ok(Plan {
        width,
        height,
        comps,
        mcus_x,
        mcus_y,
        tables: tables.list,
        scans,
        jfif,
        adobe,
        complete,
        sequential,
    })
}

/// A scan header (T.81 B.2.3), checked as libjpeg's progressive decoder
/// checks it (jdphuff.c, `start_pass_phuff_decoder`), or for a sequential
/// frame as its sequential one (jdhuff.c); latches the quantization table
/// of each component at its first scan.
fn sos(
    seg: &[u8],
    comps: &mut [Component],
    tables: &mut Tables,
    quant: &[Option<[u16; 64]>; 4],
    restart: u32,
    sequential: bool,
) -> Result<Scan, SampleError> {
    let n = *seg.first().ok_or_else(|| corrupt("empty SOS"))? as usize;
    if !(1..=4).contains(&n) || seg.len() < 4 + 2 * n {
        return Err(corrupt("bad SOS segment"));
    }
    let tail = &seg[1 + 2 * n..];
    let (ss, se, ah, al) = (tail[0], tail[1], tail[2] >> 4, tail[2] & 15);
    // libjpeg warns (JWRN_NOT_SEQUENTIAL) and decodes whole blocks all the
    // same; such a file goes to another decoder.
    if sequential && (ss, se, ah, al) != (0, 63, 0, 0) {
        return Err(SampleError::Unsupported(
            "sequential scan with progression parameters".into(),
        ));
    }
    let dc = ss == 0;
    let bad = if sequential {
        false
    } else if dc {
        se != 0
    } else {
        ss > se || se > 63 || n != 1
    } || (ah != 0 && al != ah - 1)
        || al > 13;
    if bad {
        return Err(corrupt("bad progression parameters in SOS"));
    }
    let mut out = Vec::with_capacity(n);
    for c in seg[1..1 + 2 * n].chunks_exact(2) {
        let Some(ci) = comps.iter().position(|k| k.id == c[0]) else {
            return Err(corrupt("SOS names a component not in the frame"));
        };
        if out.iter().any(|&(k, _, _)| k as usize == ci) {
            return Err(corrupt("SOS names a component twice"));
        }
        let (td, ta) = ((c[1] >> 4) as usize, (c[1] & 15) as usize);
        let d = if dc && ah == 0 {
            let t = tables.used(0, td)?;
            if !tables.list[t as usize].dc_ok {
                return Err(corrupt("DC Huffman table with a symbol over 15"));
            }
            t
        } else {
            u16::MAX
        };
        let a = if dc && !sequential {
            u16::MAX
        } else {
            tables.used(1, ta)?
        };
        let comp = &mut comps[ci];
        if comp.quant.is_none() {
            comp.quant =
                Some(quant[comp.tq as usize].ok_or_else(|| corrupt("component's DQT missing"))?);
        }
        out.push((ci as u8, d, a));
    }
    // jdinput.c, per_scan_setup (JERR_BAD_MCU_SIZE).
    let blocks: u32 = out
        .iter()
        .map(|&(c, _, _)| comps[c as usize].h as u32 * comps[c as usize].v as u32)
        .sum();
    if n > 1 && blocks > 10 {
        return Err(corrupt("more than 10 blocks in an MCU"));
    }
    Ok(Scan {
        offset: 0,
        length: 0,
        restart,
        comps: out,
        ss,
        se,
        ah,
        al,
    })
}

/// Zigzag index → natural index (T.81 Figure A.6).
pub(crate) const NATURAL: [u8; 64] = [
    0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5, 12, 19, 26, 33, 40, 48, 41, 34, 27, 20,
    13, 6, 7, 14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51, 58, 59,
    52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63,
];

#[cfg(test)]
mod tests;
