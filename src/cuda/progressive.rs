//! The progressive-scan decoder's host side (issue 16: the CPU Huffman
//! work that progressive files cost): the descriptors of `gf_progressive`
//! built from a scan plan (`src/jpeg/scans.rs`; the structs are in
//! `jpeg_desc.rs`), and one file's coefficients decoded on the emulated
//! device (feature `kernel-emu`) or a GPU, for the tests
//! (tests/progressive.rs), which compare them with libjpeg-turbo's, bit
//! for bit. `pixels.rs` makes pixels of them; `prog_batch.rs` runs many
//! files at once.

use std::collections::BTreeMap;
use std::path::Path;

use super::jpeg_desc::{GfChain, GfCoefs, GfHuff, GfScan};

mod split;
pub use split::SplitCount;
pub(crate) use split::{queue_split, split_bytes, split_params, split_rounds, sync_bytes};

use crate::error::{Error, Result};
use crate::jpeg::scans::{Folded, Plan, plan};

/// What `gf_progressive` writes per chain (`GF_SCAN_*` in scan.cuh).
pub const SCAN_STATUS: [&str; 6] = [
    "decoded",
    "no Huffman code matches",
    "the scan needs bits past its segment",
    "restart marker missing or out of order",
    "refinement symbol of magnitude other than 1, or DC sum past an int",
    "descriptor out of range",
];

/// The descriptors of one launch of `gf_progressive` over one or more
/// files.
#[derive(Default)]
pub(crate) struct Launch {
    pub(crate) chains: Vec<GfChain>,
    pub(crate) scans: Vec<GfScan>,
    /// Each distinct table of the files once: ImageNet-like photos mostly
    /// carry libjpeg's standard tables (160 of `photos/imagenet-size`'s
    /// 169 files code with the same four), so a batch's scans share a few
    /// tables, and the threads that read them their cache lines: 256 of
    /// those files upload 93 tables (129 KB) instead of 1,096 (1.5 MB),
    /// for 0.34 ms of layout on the host against 0.20–0.30 ms
    /// (docs/BENCHMARKS.md, 2026-11-28).
    pub(crate) tables: Vec<GfHuff>,
    /// How many chains each file pushed has, in order.
    pub(crate) chains_of: Vec<usize>,
    /// `tables` by [`table_key`]: the first table of each key. Ordered,
    /// not hashed: a `HashMap`'s SipHash is seeded per process, so its
    /// probing, and the branches a fuzzer counts, differed from run to run
    /// (docs/RELIABILITY.md); a batch has some 100 distinct tables.
    keys: BTreeMap<u64, u16>,
    /// Where the last file's tables are in `tables`: a batch's files
    /// mostly have the tables of the one before, found so without a hash.
    last: Vec<u16>,
}

/// A hash of a table's codes and symbols (its lookahead follows from
/// them), to find it among a launch's tables: FxHash's word mix (as in
/// rustc); SipHash over these 400 bytes cost more than copying the table.
fn table_key(t: &Folded) -> u64 {
    let mut h = 0u64;
    let mut mix = |w: u64| h = (h.rotate_left(5) ^ w).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    for pair in t.maxcode.chunks_exact(2).chain(t.valoff.chunks_exact(2)) {
        mix(u64::from(pair[0] as u32) << 32 | u64::from(pair[1] as u32));
    }
    for w in t.symbols.chunks_exact(8) {
        mix(u64::from_le_bytes(w.try_into().expect("8 bytes")));
    }
    h
}

fn same(g: &GfHuff, t: &Folded) -> bool {
    g.maxcode == t.maxcode && g.valoff == t.valoff && g.symbols == t.symbols && g.look == t.look
}

impl Launch {
    /// Scans of the longest chain (at least 1): `gf_progressive`'s warps
    /// per block with the pipeline on ([`scan_config`]).
    pub(crate) fn most_scans(&self) -> u32 {
        self.chains.iter().map(|c| c.scans).max().unwrap_or(1)
    }

    /// The descriptors of one file: its bytes at `data`, component `c`'s
    /// coefficients at `coef[c]`.
    pub(crate) fn new(p: &Plan, data: u64, data_len: usize, coef: &[u64]) -> Launch {
        let mut l = Launch::default();
        let pushed = l.push(p, data, data_len, coef);
        // A plan has at most MAX_TABLES tables, far below the indices'.
        debug_assert!(pushed);
        l
    }

    /// The index of table `t`, the `j`th of its file, in `tables`, added
    /// unless it is there.
    fn table(&mut self, j: usize, t: &Folded) -> u16 {
        if let Some(&at) = self.last.get(j)
            && same(&self.tables[usize::from(at)], t)
        {
            return at;
        }
        let key = table_key(t);
        if let Some(&at) = self.keys.get(&key)
            && same(&self.tables[usize::from(at)], t)
        {
            return at;
        }
        let at = self.tables.len() as u16;
        self.tables.push(GfHuff::from(t));
        self.keys.entry(key).or_insert(at);
        at
    }

    /// Add one file's chains, scans and tables; false, and nothing added,
    /// where its tables might take the launch's past the kernels' 16-bit
    /// table indices (`u16::MAX` is "no table"): 1,024 files of
    /// [`MAX_TABLES`](crate::jpeg::scans::MAX_TABLES) distinct tables
    /// each, which only crafted files have.
    pub(crate) fn push(&mut self, p: &Plan, data: u64, data_len: usize, coef: &[u64]) -> bool {
        if self.tables.len() + p.tables.len() > usize::from(u16::MAX) {
            return false;
        }
        let mut comp = [GfCoefs::default(); 4];
        for (g, (c, &at)) in comp.iter_mut().zip(p.comps.iter().zip(coef)) {
            *g = GfCoefs {
                coef: at,
                stride: c.stride,
                rows: c.rows,
                bw: c.bw,
                bh: c.bh,
                h: c.h,
                v: c.v,
                pad: [0; 6],
            };
        }
        // The plan's table indices, as `tables` holds them; u16::MAX (no
        // table) stays out of range.
        let index: Vec<u16> = (p.tables.iter().enumerate())
            .map(|(j, t)| self.table(j, t))
            .collect();
        let at = |t: u16| {
            if t == u16::MAX {
                t
            } else {
                index[usize::from(t)]
            }
        };
        let chains = p.chains();
        self.chains_of.push(chains.len());
        for chain in chains {
            self.chains.push(GfChain {
                data,
                data_len: data_len as u32,
                first_scan: self.scans.len() as u32,
                scans: chain.len() as u32,
                mcus_x: p.mcus_x,
                mcus_y: p.mcus_y,
                comps: p.comps.len() as u32,
                comp,
            });
            for &i in &chain {
                let s = &p.scans[i];
                let mut g = GfScan {
                    offset: s.offset,
                    length: s.length,
                    restart: s.restart,
                    comps: s.comps.len() as u8,
                    ss: s.ss,
                    se: s.se,
                    ah: s.ah,
                    al: s.al,
                    ..GfScan::default()
                };
                for (k, &(ci, dc, ac)) in s.comps.iter().enumerate() {
                    g.comp[k] = ci;
                    g.dc[k] = at(dc);
                    g.ac[k] = at(ac);
                }
                self.scans.push(g);
            }
        }
        self.last = index;
        true
    }

    /// Reorder the chains, most entropy-coded bytes first, and return
    /// where each came from (`order[launched] = pushed`). Threads of a
    /// warp run in step, so a warp lasts as long as its longest chain:
    /// chains of like length together waste less of it, and the longest
    /// start first (issue 16, item 3c: one thread decodes a sequential
    /// image). Statuses come back in launch order: [`unpermute`] them.
    pub(crate) fn longest_first(&mut self) -> Vec<u32> {
        let work = |c: &GfChain| -> u64 {
            let first = c.first_scan as usize;
            self.scans[first..first + c.scans as usize]
                .iter()
                .map(|s| u64::from(s.length))
                .sum()
        };
        let mut order: Vec<u32> = (0..self.chains.len() as u32).collect();
        // Stable: equal work keeps push order.
        order.sort_by_key(|&i| std::cmp::Reverse(work(&self.chains[i as usize])));
        self.chains = order.iter().map(|&i| self.chains[i as usize]).collect();
        order
    }
}

/// Statuses in push order from `launched`, in the launch order that
/// [`Launch::longest_first`] returned as `order`.
pub(crate) fn unpermute(order: &[u32], launched: &[u32]) -> Vec<u32> {
    let mut out = vec![u32::MAX; order.len()];
    for (&from, &s) in order.iter().zip(launched) {
        out[from as usize] = s;
    }
    out
}

/// One component's decoded coefficients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoefGrid {
    /// Blocks per grid row (padded to whole MCUs).
    pub stride: usize,
    /// Grid rows (padded to whole MCUs).
    pub rows: usize,
    /// Blocks across that hold the image (libjpeg's `width_in_blocks`).
    pub bw: usize,
    /// Blocks down that hold the image (`height_in_blocks`).
    pub bh: usize,
    /// 64 per block, natural order, row-major over the padded grid.
    pub coef: Vec<i16>,
}

/// A file's coefficients as the scan decoder left them, and each chain's
/// status (an index into [`SCAN_STATUS`]).
#[derive(Debug, Clone)]
pub struct Coefficients {
    /// Image size from the frame header.
    pub width: u32,
    /// Image height.
    pub height: u32,
    /// Per component, in frame order.
    pub comps: Vec<CoefGrid>,
    /// Per chain (DC scans first, then each component's AC scans).
    pub status: Vec<u32>,
}

pub(crate) fn planned(path: &Path, data: &[u8], max_pixels: u64) -> Result<Plan> {
    plan(data, max_pixels).map_err(|source| Error::Sample {
        path: path.to_path_buf(),
        source,
    })
}

/// [`planned`] for each of `files` (path, bytes), and their bytes.
pub(crate) fn planned_all<'a>(
    files: &[(&Path, &'a [u8])],
    max_pixels: u64,
) -> Result<(Vec<Plan>, Vec<&'a [u8]>)> {
    let plans = files
        .iter()
        .map(|&(path, data)| planned(path, data, max_pixels))
        .collect::<Result<_>>()?;
    Ok((plans, files.iter().map(|f| f.1).collect()))
}

/// The chains' `status`, in push order, cut into each file's
/// (`chains_of`: how many each has).
pub(crate) fn per_file(status: &[u32], chains_of: &[usize]) -> Vec<Vec<u32>> {
    let mut at = 0;
    (chains_of.iter())
        .map(|&n| {
            at += n;
            status[at - n..at].to_vec()
        })
        .collect()
}

fn grids(p: &Plan) -> Vec<CoefGrid> {
    (0..p.comps.len())
        .map(|c| CoefGrid {
            stride: p.comps[c].stride as usize,
            rows: p.comps[c].rows as usize,
            bw: p.comps[c].bw as usize,
            bh: p.comps[c].bh as usize,
            coef: vec![0; p.coefficients(c)],
        })
        .collect()
}

/// Decode the scans of `data` (the file at `path`, for errors) with the
/// kernel source compiled for the host. Not part of the API.
#[cfg(feature = "kernel-emu")]
#[doc(hidden)]
pub fn emu_coefficients(path: &Path, data: &[u8], max_pixels: u64) -> Result<Coefficients> {
    let p = planned(path, data, max_pixels)?;
    let (comps, status) = emu_scans(&p, data);
    Ok(Coefficients {
        width: p.width,
        height: p.height,
        comps,
        status,
    })
}

/// [`emu_coefficients`] with subsequences of `sub_bytes` (0: none split)
/// and `rounds` of `gf_split_round`, and how the split kernels fared. Not
/// part of the API.
#[cfg(feature = "kernel-emu")]
#[doc(hidden)]
pub fn emu_coefficients_split(
    path: &Path,
    data: &[u8],
    max_pixels: u64,
    (sub_bytes, rounds): (u32, u32),
) -> Result<(Coefficients, SplitCount)> {
    let p = planned(path, data, max_pixels)?;
    let (comps, status, count) = emu_scans_split(&p, data, (sub_bytes, rounds));
    let c = Coefficients {
        width: p.width,
        height: p.height,
        comps,
        status,
    };
    Ok((c, count))
}

/// The scans of `data`, planned as `p`, decoded with the kernel source
/// compiled for the host: each component's grid and each chain's status.
#[cfg(feature = "kernel-emu")]
pub(crate) fn emu_scans(p: &Plan, data: &[u8]) -> (Vec<CoefGrid>, Vec<u32>) {
    let (comps, status, _) = emu_scans_split(p, data, (split_bytes(), split_rounds()));
    (comps, status)
}

#[cfg(feature = "kernel-emu")]
fn emu_scans_split(
    p: &Plan,
    data: &[u8],
    split: (u32, u32),
) -> (Vec<CoefGrid>, Vec<u32>, SplitCount) {
    let (mut files, count) = emu_launch(&[(p, data)], split);
    let (comps, status) = files.pop().unwrap_or_default();
    (comps, status, count)
}

/// Files planned as `files` decoded by one launch of the scan kernels
/// compiled for the host, as a CUDA lane launches a batch (its tables
/// shared, its chains longest first): each file's grids and its chains'
/// statuses, and how the split kernels fared. Not part of the API.
#[cfg(feature = "kernel-emu")]
#[doc(hidden)]
pub fn emu_coefficients_batch(
    files: &[(&Path, &[u8])],
    max_pixels: u64,
) -> Result<Vec<Coefficients>> {
    let (plans, bytes) = planned_all(files, max_pixels)?;
    let with: Vec<(&Plan, &[u8])> = plans.iter().zip(bytes).collect();
    let (decoded, _) = emu_launch(&with, (split_bytes(), split_rounds()));
    Ok(plans
        .iter()
        .zip(decoded)
        .map(|(p, (comps, status))| Coefficients {
            width: p.width,
            height: p.height,
            comps,
            status,
        })
        .collect())
}

/// The split kernels (subsequences of `sub_bytes`, `rounds` rounds) and
/// `gf_progressive`, compiled for the host, over `l` as launched (its
/// chains in launch order): each chain's status in that order, and how
/// the split kernels fared.
///
/// # Safety
///
/// Every chain of `l` must address its file's bytes (`data_len` of them)
/// and its components' coefficient grids (`stride * rows` blocks of 64
/// `i16`), valid for the call and touched by nothing else meanwhile.
#[cfg(feature = "kernel-emu")]
pub(crate) unsafe fn emu_kernels(
    l: &Launch,
    (sub_bytes, rounds): (u32, u32),
) -> (Vec<u32>, SplitCount) {
    let mut status = vec![0u32; l.chains.len()];
    let first = l.split(sub_bytes);
    let subs = *first.last().unwrap_or(&0);
    let mut sync = vec![0u32; sync_bytes(subs) / 4];
    let p = split_params(
        (
            l.chains.as_ptr() as u64,
            l.scans.as_ptr() as u64,
            l.tables.as_ptr() as u64,
            first.as_ptr() as u64,
            sync.as_mut_ptr() as u64,
            status.as_mut_ptr() as u64,
        ),
        (
            l.chains.len() as u32,
            l.scans.len() as u32,
            l.tables.len() as u32,
            subs,
        ),
        (sub_bytes, rounds),
    );
    let mut count = SplitCount::default();
    if subs > 0 {
        // SAFETY: the chains' files and grids are the caller's (this
        // function's contract); the lists, `first` (from `split`: sorted,
        // 0 to `subs`), the zeroed records (2 * subs, 4-aligned) and the
        // statuses are `l`'s and the vectors above; all outlive the
        // synchronous call, and nothing else writes them meanwhile.
        let redone = unsafe { super::emu::split(p) };
        count = SplitCount::of(&first, &status, &redone);
    }
    // SAFETY: as for `split` above; the statuses hold 0 or what it left.
    unsafe { super::emu::progressive(&l.chains, &l.scans, &l.tables, &mut status) };
    (status, count)
}

/// One file's grids and its chains' statuses.
#[cfg(feature = "kernel-emu")]
type Decoded = (Vec<CoefGrid>, Vec<u32>);

#[cfg(feature = "kernel-emu")]
fn emu_launch(files: &[(&Plan, &[u8])], split: (u32, u32)) -> (Vec<Decoded>, SplitCount) {
    let mut all: Vec<Vec<CoefGrid>> = files.iter().map(|(p, _)| grids(p)).collect();
    let mut l = Launch::default();
    let mut pushed = Vec::with_capacity(files.len());
    for ((p, data), comps) in files.iter().zip(&mut all) {
        let coef: Vec<u64> = comps
            .iter_mut()
            .map(|g| g.coef.as_mut_ptr() as u64)
            .collect();
        pushed.push(l.push(p, data.as_ptr() as u64, data.len(), &coef));
    }
    // In the order the CUDA lanes launch them, so that the tests check the
    // reordering too.
    let order = l.longest_first();
    // SAFETY: the chains address the files (data_len bytes each) and the
    // grids just allocated, each stride * rows blocks as the plan sized
    // them; all outlive the call, and nothing else touches them meanwhile.
    let (status, count) = unsafe { emu_kernels(&l, split) };
    let status = unpermute(&order, &status);
    // Each file's statuses, in push order; "descriptor out of range" for
    // one the launch refused (past its table indices).
    let mut chains = l.chains_of.iter();
    let mut at = 0;
    let out = all
        .into_iter()
        .zip(pushed)
        .map(|(comps, ok)| {
            let n = if ok {
                chains.next().copied().unwrap_or(0)
            } else {
                0
            };
            at += n;
            let st = if ok {
                status[at - n..at].to_vec()
            } else {
                vec![5]
            };
            (comps, st)
        })
        .collect();
    (out, count)
}

/// `gf_progressive`'s warps per chain at most (`GF_SCAN_WARPS_MAX` in
/// kernels/scan.cuh; a test checks they agree).
pub(crate) const SCAN_WARPS_MAX: u32 = 16;

/// Whether a chain's scans run in a pipeline, a warp each
/// (progressive.cu, "Scans in a pipeline"): unless `GPUFEED_SCAN_PIPELINE=0`
/// (a diagnostic: warp 0 decodes them in turn, as before). One block per
/// chain either way: a batch has a few hundred chains (one per sequential
/// image, about four per progressive one), and in blocks of many chains
/// they ran as warps whose threads took different branches, each warp as
/// slow as its longest chain, while a block each spreads them over every
/// SM (on an H200, 2026-11-27, 256 sequential photos: 49 ms in blocks of
/// one thread, 226 ms in blocks of 32; `gpufeed progressive-bench`).
pub(crate) fn scan_pipeline() -> bool {
    std::env::var("GPUFEED_SCAN_PIPELINE").as_deref() != Ok("0")
}

/// `gf_progressive`'s launch over `chains` chains of at most `most_scans`
/// scans: a block per chain, of a warp per scan with the pipeline on (at
/// most [`SCAN_WARPS_MAX`]; a longer chain decodes in turn), else of one.
pub(crate) fn scan_config(
    chains: u32,
    most_scans: u32,
    pipeline: bool,
) -> cudarc::driver::LaunchConfig {
    let warps = if pipeline {
        most_scans.clamp(1, SCAN_WARPS_MAX)
    } else {
        1
    };
    cudarc::driver::LaunchConfig {
        grid_dim: (chains.max(1), 1, 1),
        block_dim: (32 * warps, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Launch the split kernels (subsequences of `sub_bytes`, `rounds`
/// rounds) and `gf_progressive` (`pk`) over `l`'s descriptors on `k`'s
/// stream and return each chain's status, and how the split kernels
/// fared (the subsequences redone uncounted; waits for the stream).
pub(crate) fn launch_scans(
    k: &super::launch::AugmentKernels,
    pk: &super::launch::ProgressiveKernels,
    l: &Launch,
    (sub_bytes, rounds): (u32, u32),
) -> Result<(Vec<u32>, SplitCount)> {
    use cudarc::driver::PushKernelArg;
    let s = &k.stream;
    let chains = s.clone_htod(&l.chains).map_err(Error::cuda("upload"))?;
    let scans = s.clone_htod(&l.scans).map_err(Error::cuda("upload"))?;
    let tables = s.clone_htod(&l.tables).map_err(Error::cuda("upload"))?;
    let mut status = k.zeros::<u32>(l.chains.len())?;
    let n = l.chains.len() as u32;
    let (n_scans, n_tables) = (l.scans.len() as u32, l.tables.len() as u32);
    let first = l.split(sub_bytes);
    let subs = *first.last().unwrap_or(&0);
    let first_dev = s.clone_htod(&first).map_err(Error::cuda("upload"))?;
    let sync = k.zeros::<u32>((sync_bytes(subs) / 4).max(1))?;
    let p = split_params(
        (
            k.address(&chains),
            k.address(&scans),
            k.address(&tables),
            k.address(&first_dev),
            k.address(&sync),
            k.address(&status),
        ),
        (n, n_scans, n_tables, subs),
        (sub_bytes, rounds),
    );
    queue_split(s, &pk.split, &p)?;
    // What the split kernels left, before gf_progressive reads it.
    let count = SplitCount::of(&first, &k.download(&status)?, &[]);
    let cfg = scan_config(n, l.most_scans(), scan_pipeline());
    let mut b = s.launch_builder(&pk.scans);
    b.arg(&chains);
    b.arg(&n);
    b.arg(&scans);
    b.arg(&n_scans);
    b.arg(&tables);
    b.arg(&n_tables);
    b.arg(&mut status);
    // SAFETY: the signature is (const GfChain*, u32, const GfScan*, u32,
    // const GfHuff*, u32, u32*); the descriptors' lists are the uploads
    // above, and the addresses inside them are the caller's buffers, alive
    // until the download below has waited for the stream.
    unsafe { b.launch(cfg) }.map_err(Error::cuda("kernel launch"))?;
    Ok((k.download(&status)?, count))
}

/// Decode the scans of `data` with `gf_progressive` on CUDA device 0.
/// Not part of the API.
#[doc(hidden)]
pub fn gpu_coefficients(path: &Path, data: &[u8], max_pixels: u64) -> Result<Coefficients> {
    let split = (split_bytes(), split_rounds());
    Ok(gpu_coefficients_split(path, data, max_pixels, split)?.0)
}

/// [`gpu_coefficients`] with subsequences of `sub_bytes` (0: none split)
/// and `rounds` of `gf_split_round`, and how the split kernels fared (the
/// subsequences redone uncounted): `emu_coefficients_split` on CUDA
/// device 0. Not part of the API.
#[doc(hidden)]
pub fn gpu_coefficients_split(
    path: &Path,
    data: &[u8],
    max_pixels: u64,
    split: (u32, u32),
) -> Result<(Coefficients, SplitCount)> {
    let p = planned(path, data, max_pixels)?;
    let k = super::launch::AugmentKernels::device0()?;
    let pk = k.progressive()?;
    let dev_data = k.stream.clone_htod(data).map_err(Error::cuda("upload"))?;
    let mut grids_dev = Vec::new();
    for c in 0..p.comps.len() {
        grids_dev.push(k.zeros::<i16>(p.coefficients(c))?);
    }
    let coef: Vec<u64> = grids_dev.iter().map(|g| k.address(g)).collect();
    let l = Launch::new(&p, k.address(&dev_data), data.len(), &coef);
    let (status, count) = launch_scans(&k, &pk, &l, split)?;
    let mut comps = grids(&p);
    for (g, d) in comps.iter_mut().zip(&grids_dev) {
        g.coef = k.download(d)?;
    }
    let c = Coefficients {
        width: p.width,
        height: p.height,
        comps,
        status,
    };
    Ok((c, count))
}

#[cfg(test)]
pub(crate) mod tests;
