//! The progressive-scan decoder's host side (issue 16: the CPU Huffman
//! work that progressive files cost): the descriptors of `gf_progressive`
//! built from a scan plan (`src/jpeg/scans.rs`; the structs are in
//! `jpeg_desc.rs`), and one file's coefficients decoded on the emulated
//! device (feature `kernel-emu`) or a GPU, for the tests
//! (tests/progressive.rs), which compare them with libjpeg-turbo's, bit
//! for bit. `pixels.rs` makes pixels of them; `prog_batch.rs` runs many
//! files at once.

use std::path::Path;

use super::jpeg_desc::{GfChain, GfCoefs, GfHuff, GfScan, GfSplit, SYNC_BYTES};

use crate::error::{Error, Result};
use crate::jpeg::scans::{Plan, plan};

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
    pub(crate) tables: Vec<GfHuff>,
    /// How many chains each file pushed has, in order.
    pub(crate) chains_of: Vec<usize>,
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
        l.push(p, data, data_len, coef);
        l
    }

    /// Add one file's chains, scans and tables.
    pub(crate) fn push(&mut self, p: &Plan, data: u64, data_len: usize, coef: &[u64]) {
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
        // The plan's table indices, moved past the tables already here;
        // u16::MAX (no table) stays out of range.
        let base = self.tables.len() as u16;
        let at = |t: u16| if t == u16::MAX { t } else { t + base };
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
        self.tables.extend(p.tables.iter().map(GfHuff::from));
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

/// Bytes of a subsequence of a split sequential scan (progressive.cu's
/// "Split decoding"): `GPUFEED_SCAN_SPLIT` (0: no splitting; at least 64
/// otherwise), else 256. Smaller runs more threads per image, each
/// shorter, but a guess has fewer symbols to resynchronise in before its
/// subsequence ends (then a round decodes it again, or the image goes to
/// one thread). On an H200 (0d15f52, `gpufeed progressive-bench
/// --sequential`, imagenet-size's sequential photos, batch 256): 4.7 ms
/// at 256 bytes, 9.3 at 1024, 31.3 at 4096, 49.1 unsplit; through the
/// pipeline (4bbffad, share 0, no progressive lanes) 19,800-30,000 img/s
/// at 256 bytes against 15,400-18,700 at 1024 (docs/BENCHMARKS.md).
pub(crate) fn split_bytes() -> u32 {
    std::env::var("GPUFEED_SCAN_SPLIT")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&b: &u32| b == 0 || b >= 64)
        .unwrap_or(256)
}

/// Rounds of `gf_split_round`: a guess that had not resynchronised by
/// its subsequence's end costs two, the next one too; a chain still out
/// of step after the last round decodes on one thread (`gf_progressive`),
/// seconds of GPU time for a megapixel photo. A round in which nothing
/// changes copies each record once. On the emulated device
/// (tests/progressive.rs, `emu_split_scans_equal_libjpeg_turbo`, the 288
/// sequential photos of imagenet-size and full): at 1024 bytes 8 rounds
/// synchronised all of them (3 left 7 of full's to one thread); at 256
/// bytes 8 rounds left 8 to one thread, 16 none. At 256 bytes with 8
/// rounds `photos/full` ran at 756 img/s through the pipeline on an H200
/// (4bbffad), against 5,860 at the default route: a batch waits for its
/// slowest chain.
pub(crate) const SPLIT_ROUNDS: u32 = 16;

/// [`SPLIT_ROUNDS`], or `GPUFEED_SPLIT_ROUNDS` (1 to 256): a diagnostic.
pub(crate) fn split_rounds() -> u32 {
    std::env::var("GPUFEED_SPLIT_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|r: &u32| (1..=256).contains(r))
        .unwrap_or(SPLIT_ROUNDS)
}

impl Launch {
    /// The split kernels' subsequences of the chains as they are now
    /// ordered: chain c owns `[first[c], first[c + 1])`, none unless it is
    /// one sequential scan without restart markers of at least two
    /// subsequences of `sub_bytes` (0: none split).
    pub(crate) fn split(&self, sub_bytes: u32) -> Vec<u32> {
        let mut first = Vec::with_capacity(self.chains.len() + 1);
        let mut at = 0u32;
        first.push(at);
        for c in &self.chains {
            let s = (c.scans == 1)
                .then(|| &self.scans[c.first_scan as usize])
                .filter(|s| s.ss == 0 && s.se == 63 && s.ah == 0 && s.al == 0 && s.restart == 0);
            let subs = match (s, sub_bytes) {
                (Some(s), 1..) => s.length.div_ceil(sub_bytes),
                _ => 0,
            };
            if subs >= 2 {
                at += subs;
            }
            first.push(at);
        }
        first
    }
}

/// The split kernels' parameters for a launch of `n` chains, `n_scans`
/// scans and `n_tables` tables at these device (or, emulated, host)
/// addresses, its subsequences as `sub_first` (from [`Launch::split`]).
pub(crate) fn split_params(
    (chains, scans, tables, sub_first, sync, status): (u64, u64, u64, u64, u64, u64),
    (n, n_scans, n_tables, n_subs): (u32, u32, u32, u32),
    sub_bytes: u32,
) -> GfSplit {
    GfSplit {
        chains,
        scans,
        tables,
        sub_first,
        sync,
        status,
        n,
        n_scans,
        n_tables,
        n_subs,
        sub_bytes,
        rounds: split_rounds(),
    }
}

/// Bytes of `GfSync` scratch that `subs` subsequences need (two records
/// each: the rounds read one and write the other).
pub(crate) fn sync_bytes(subs: u32) -> usize {
    2 * subs as usize * SYNC_BYTES
}

/// Queue the split kernels (`k`: guess, round, check, write) for `p` on
/// `s`. The statuses must be zero before; `gf_progressive` must follow.
pub(crate) fn queue_split(
    s: &std::sync::Arc<cudarc::driver::CudaStream>,
    k: &[cudarc::driver::CudaFunction; 4],
    p: &GfSplit,
) -> Result<()> {
    use cudarc::driver::{LaunchConfig, PushKernelArg};
    if p.n_subs == 0 {
        return Ok(());
    }
    let over = |n: u32| LaunchConfig {
        grid_dim: (n.div_ceil(32).max(1), 1, 1),
        block_dim: (32, 1, 1),
        shared_mem_bytes: 0,
    };
    let fail = Error::cuda("kernel launch");
    let mut b = s.launch_builder(&k[0]);
    b.arg(p);
    // SAFETY: (this launch and the three below) the signature is (GfSplit), or
    // (GfSplit, u32) for the rounds; `p`'s addresses are the caller's
    // device buffers (descriptor lists, `n + 1` sub_first, `2 * n_subs`
    // GfSync records, `n` zeroed statuses), kept until the caller has
    // waited for the stream; the kernels check every index against the
    // counts in `p`.
    unsafe { b.launch(over(p.n_subs)) }.map_err(&fail)?;
    for r in 0..p.rounds {
        let mut b = s.launch_builder(&k[1]);
        b.arg(p);
        b.arg(&r);
        // SAFETY: as above.
        unsafe { b.launch(over(p.n_subs)) }.map_err(&fail)?;
    }
    let mut b = s.launch_builder(&k[2]);
    b.arg(p);
    // SAFETY: as above.
    unsafe { b.launch(over(p.n)) }.map_err(&fail)?;
    let mut b = s.launch_builder(&k[3]);
    b.arg(p);
    // SAFETY: as above.
    unsafe { b.launch(over(p.n_subs)) }.map_err(&fail)?;
    Ok(())
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

/// How the split kernels fared on one file: chains they split, and of
/// those, chains whose subsequences synchronised (the rest went to one
/// thread each).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SplitCount {
    /// Chains split into subsequences.
    pub split: u32,
    /// Split chains the split kernels decoded (a fault they met counts).
    pub synced: u32,
}

/// [`emu_coefficients`] with subsequences of `sub_bytes` (0: none split),
/// and how the split kernels fared. Not part of the API.
#[cfg(feature = "kernel-emu")]
#[doc(hidden)]
pub fn emu_coefficients_split(
    path: &Path,
    data: &[u8],
    max_pixels: u64,
    sub_bytes: u32,
) -> Result<(Coefficients, SplitCount)> {
    let p = planned(path, data, max_pixels)?;
    let (comps, status, count) = emu_scans_split(&p, data, sub_bytes);
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
    let (comps, status, _) = emu_scans_split(p, data, split_bytes());
    (comps, status)
}

#[cfg(feature = "kernel-emu")]
fn emu_scans_split(p: &Plan, data: &[u8], sub_bytes: u32) -> (Vec<CoefGrid>, Vec<u32>, SplitCount) {
    let mut comps = grids(p);
    let coef: Vec<u64> = comps
        .iter_mut()
        .map(|g| g.coef.as_mut_ptr() as u64)
        .collect();
    let mut l = Launch::new(p, data.as_ptr() as u64, data.len(), &coef);
    // In the order the CUDA lanes launch them, so that the tests check the
    // reordering too.
    let order = l.longest_first();
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
        sub_bytes,
    );
    let mut count = SplitCount::default();
    if subs > 0 {
        // SAFETY: the chains address `data` (data_len bytes) and the grids
        // just allocated, each stride * rows blocks as the plan sized them;
        // the lists, `first` (from `split`: sorted, 0 to `subs`), the
        // zeroed records (2 * subs, 4-aligned) and statuses are the vectors
        // above; all outlive the synchronous call, and nothing else writes
        // them meanwhile.
        unsafe { super::emu::split(p) };
        for (c, &s) in first.windows(2).zip(&status) {
            if c[1] > c[0] {
                count.split += 1;
                count.synced += u32::from(s != 0);
            }
        }
    }
    // SAFETY: as for `split` above; the statuses hold 0 or what it left.
    unsafe { super::emu::progressive(&l.chains, &l.scans, &l.tables, &mut status) };
    (comps, unpermute(&order, &status), count)
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

/// Launch the split kernels and `gf_progressive` (`pk`) over `l`'s
/// descriptors on `k`'s stream and return each chain's status (waits for
/// the stream).
pub(crate) fn launch_scans(
    k: &super::launch::AugmentKernels,
    pk: &super::launch::ProgressiveKernels,
    l: &Launch,
) -> Result<Vec<u32>> {
    use cudarc::driver::PushKernelArg;
    let s = &k.stream;
    let chains = s.clone_htod(&l.chains).map_err(Error::cuda("upload"))?;
    let scans = s.clone_htod(&l.scans).map_err(Error::cuda("upload"))?;
    let tables = s.clone_htod(&l.tables).map_err(Error::cuda("upload"))?;
    let mut status = k.zeros::<u32>(l.chains.len())?;
    let n = l.chains.len() as u32;
    let (n_scans, n_tables) = (l.scans.len() as u32, l.tables.len() as u32);
    let sub_bytes = split_bytes();
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
        sub_bytes,
    );
    queue_split(s, &pk.split, &p)?;
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
    k.download(&status)
}

/// Decode the scans of `data` with `gf_progressive` on CUDA device 0.
/// Not part of the API.
#[doc(hidden)]
pub fn gpu_coefficients(path: &Path, data: &[u8], max_pixels: u64) -> Result<Coefficients> {
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
    let status = launch_scans(&k, &pk, &l)?;
    let mut comps = grids(&p);
    for (g, d) in comps.iter_mut().zip(&grids_dev) {
        g.coef = k.download(d)?;
    }
    Ok(Coefficients {
        width: p.width,
        height: p.height,
        comps,
        status,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The descriptors of a baseline file and its progressive twin.
    fn two_files() -> Launch {
        let files: [&[u8]; 2] = [
            include_bytes!("../../tests/data/go/video-001.jpeg"),
            include_bytes!("../../tests/data/go/video-001.progressive.jpeg"),
        ];
        let mut l = Launch::default();
        for f in files {
            let p = plan(f, u64::MAX).unwrap();
            l.push(&p, 0, f.len(), &[0; 4]);
        }
        l
    }

    #[test]
    fn only_long_sequential_scans_without_restarts_are_split() {
        let mut l = two_files();
        // The baseline file's one chain: one scan, Ss 0 to Se 63.
        let seq = l.scans[l.chains[0].first_scan as usize];
        assert_eq!((l.chains[0].scans, seq.ss, seq.se), (1, 0, 63));
        let first = l.split(64);
        assert_eq!(first.len(), l.chains.len() + 1);
        assert_eq!(first[1], seq.length.div_ceil(64));
        // The progressive file's chains are not split, nor is anything at
        // 0 bytes, or at a size that leaves one subsequence.
        assert!(first[1..].iter().all(|&f| f == first[1]));
        assert!(l.split(0).iter().all(|&f| f == 0));
        assert!(l.split(seq.length).iter().all(|&f| f == 0));
        // A restart interval keeps the chain on one thread.
        l.scans[l.chains[0].first_scan as usize].restart = 4;
        assert!(l.split(64).iter().all(|&f| f == 0));
    }

    #[test]
    fn longest_chains_launch_first_and_statuses_come_back_in_push_order() {
        let mut l = two_files();
        let pushed = l.chains.clone();
        let work = |l: &Launch, c: &GfChain| -> u64 {
            let s = &l.scans[c.first_scan as usize..][..c.scans as usize];
            s.iter().map(|s| u64::from(s.length)).sum()
        };
        let order = l.longest_first();
        // A permutation, each launched chain the one pushed at `order[i]`,
        // in order of falling work.
        let mut seen = order.clone();
        seen.sort_unstable();
        assert_eq!(seen, (0..pushed.len() as u32).collect::<Vec<_>>());
        for (c, &from) in l.chains.iter().zip(&order) {
            assert_eq!(c.first_scan, pushed[from as usize].first_scan);
        }
        assert!(
            l.chains
                .windows(2)
                .all(|w| work(&l, &w[0]) >= work(&l, &w[1]))
        );
        // The baseline file's one chain holds all of its data, more than
        // any chain of the progressive file: launched first.
        assert_eq!(order[0], 0);
        // Launched chain i reports the index it was pushed at.
        assert_eq!(
            unpermute(&order, &order),
            (0..pushed.len() as u32).collect::<Vec<_>>()
        );
    }
}
