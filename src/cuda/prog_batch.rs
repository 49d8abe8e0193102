//! Many progressive files decoded by one launch of each kernel
//! (`gf_progressive`, `gf_idct`, `gf_color`): device buffers that grow to
//! the largest batch met and are then reused (a free in the driver waits
//! for the whole device), the descriptors of a batch, the copies of its
//! files, its launches; and a batch decoded so for the tests, on a GPU or
//! emulated (`prog_bench.rs` times it).

use std::path::Path;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DeviceRepr, LaunchConfig, PushKernelArg};
use cudarc::driver::{CudaEvent, PinnedHostSlice, ValidAsZeroBits};

use super::jpeg_desc::{GfChain, GfColor, GfHuff, GfPlane, GfScan};
use super::launch::{AugmentKernels, ProgressiveKernels};
use super::pixels::{Rgb, color, planes};
use super::progressive::{
    Launch, per_file, planned_all, queue_split, scan_config, scan_pipeline, split_bytes,
    split_params, split_rounds, sync_bytes, unpermute,
};
use crate::error::{Error, Result, SampleError};
use crate::jpeg::scans::Plan;

mod marks;
mod tend;
pub(crate) use marks::{Marks, OTHERS, Parts, STAGING};

/// The host side of one batch: every descriptor, with the device
/// addresses of its parts laid out from bases the caller gives.
pub(crate) struct Layout {
    pub(crate) launch: Launch,
    /// Where each launched chain was pushed ([`Launch::longest_first`]).
    pub(crate) order: Vec<u32>,
    pub(crate) planes: Vec<GfPlane>,
    pub(crate) colors: Vec<GfColor>,
    pub(crate) blocks: u32,
    pub(crate) most_pixels: u32,
}

/// What a batch of `plans` needs: bytes of the files, coefficients (i16,
/// as many sample bytes).
pub(crate) fn sizes(plans: &[Plan], files: &[&[u8]]) -> (usize, usize) {
    let bytes = files.iter().map(|f| f.len()).sum();
    let coefs = plans.iter().map(Plan::all_coefficients).sum();
    (bytes, coefs)
}

impl Layout {
    /// The descriptors of `plans` (for `files`): their bytes packed from
    /// `data`, coefficients from `coef`, samples from `samples`, image `i`
    /// written as RGB8 at `out[i]` (`(address, bytes per row)`). An error
    /// names the first file whose colour or sampling `gf_color` lacks.
    pub(crate) fn new(
        plans: &[Plan],
        files: &[&[u8]],
        (data, coef, samples): (u64, u64, u64),
        out: &[(u64, u32)],
    ) -> std::result::Result<Layout, (usize, SampleError)> {
        let mut l = Layout {
            launch: Launch::default(),
            order: Vec::new(),
            planes: Vec::new(),
            colors: Vec::new(),
            blocks: 0,
            most_pixels: 0,
        };
        let (mut at_data, mut at_coef) = (0u64, 0u64);
        for (i, ((p, f), &(dest, pitch))) in plans.iter().zip(files).zip(out).enumerate() {
            let mut c_addr = Vec::new();
            let mut s_addr = Vec::new();
            for c in 0..p.comps.len() {
                c_addr.push(coef + 2 * at_coef);
                s_addr.push(samples + at_coef);
                at_coef += p.coefficients(c) as u64;
            }
            if !l.launch.push(p, data + at_data, f.len(), &c_addr) {
                return Err((
                    i,
                    SampleError::Unsupported(
                        "a batch of more Huffman tables than the kernels index".into(),
                    ),
                ));
            }
            l.colors
                .push(color(p, &s_addr, dest, pitch).map_err(|e| (i, e))?);
            let ps = planes(p, &c_addr, &s_addr, l.blocks);
            l.blocks += ps.iter().map(|g| g.stride * g.rows).sum::<u32>();
            l.planes.extend(ps);
            l.most_pixels = l.most_pixels.max(p.width * p.height);
            at_data += f.len() as u64;
        }
        l.order = l.launch.longest_first();
        Ok(l)
    }
}

/// A device buffer that grows (to twice its size, at least) and is
/// otherwise kept.
struct Grown<T>(Option<CudaSlice<T>>);

impl<T: DeviceRepr + ValidAsZeroBits> Grown<T> {
    fn at_least(&mut self, stream: &Arc<CudaStream>, n: usize) -> Result<&mut CudaSlice<T>> {
        let small = self.0.as_ref().is_none_or(|b| b.len() < n);
        if small {
            let len = n.max(self.0.as_ref().map_or(0, |b| 2 * b.len())).max(1);
            self.0 = None;
            self.0 = Some(stream.alloc_zeros(len).map_err(Error::cuda("allocate"))?);
        }
        Ok(self.0.as_mut().expect("allocated above"))
    }

    /// At least `n` elements, grown to exactly `n` when fewer: for the
    /// buffers sized by the lanes' [`Marks`], which do the doubling within
    /// their bound.
    fn marked(&mut self, stream: &Arc<CudaStream>, n: usize) -> Result<&mut CudaSlice<T>> {
        if self.0.as_ref().is_none_or(|b| b.len() < n) {
            self.0 = None;
            self.0 = Some(
                stream
                    .alloc_zeros(n.max(1))
                    .map_err(Error::cuda("allocate"))?,
            );
        }
        Ok(self.0.as_mut().expect("allocated above"))
    }

    fn address(&self, stream: &Arc<CudaStream>) -> u64 {
        use cudarc::driver::DevicePtr;
        self.0.as_ref().map_or(0, |b| b.device_ptr(stream).0)
    }

    fn bytes(&self) -> usize {
        self.0
            .as_ref()
            .map_or(0, |b| b.len() * std::mem::size_of::<T>())
    }
}

/// Page-locked staging for a batch's files: the host packs them there
/// once and the copy to the device is the copy engine's alone. From
/// pageable memory the driver would first copy them into staging of its
/// own, on the calling thread (CUDA Programming Guide, "Page-Locked Host
/// Memory"): a second CPU copy of every byte, on the lane that issue 16
/// wants to cost next to nothing.
#[derive(Default)]
struct Staging {
    buf: Option<PinnedHostSlice<u8>>,
    /// Recorded after the last copy out of `buf`; waited for before `buf`
    /// is written or freed.
    copied: Option<CudaEvent>,
}

impl Staging {
    /// Wait for the last copy out, grow to `bytes` (twice the old size at
    /// least, within `room`: the lanes' mark for the files' bytes) and
    /// pack `files` from the start; the packed bytes.
    fn pack<'f>(
        &mut self,
        ctx: &Arc<CudaContext>,
        files: impl Iterator<Item = &'f [u8]>,
        bytes: usize,
        room: usize,
    ) -> Result<&[u8]> {
        if bytes == 0 {
            // Every file of the call was read into page-locked blocks.
            // Before, a lane whose first call was such a call had no
            // staging and panicked here (photos/full on an H200,
            // 2026-11-30).
            return Ok(&[]);
        }
        if let Some(e) = self.copied.take() {
            e.synchronize().map_err(Error::cuda("staging event"))?;
        }
        self.reserve(ctx, staging_len(self.bytes(), bytes, room))?;
        let host = self
            .buf
            .as_mut()
            .expect("allocated above, or as large as bytes > 0")
            .as_mut_slice()
            .map_err(Error::cuda("pinned staging"))?;
        pack(host, files);
        Ok(&host[..bytes])
    }

    /// Grow to `len` bytes where smaller, once no copy reads the buffer.
    fn reserve(&mut self, ctx: &Arc<CudaContext>, len: usize) -> Result<()> {
        if len <= self.bytes() {
            return Ok(());
        }
        if let Some(e) = self.copied.take() {
            e.synchronize().map_err(Error::cuda("staging event"))?;
        }
        self.buf = None;
        // SAFETY: u8 has no invalid values, and only bytes packed there are
        // ever read (by the copies to the device).
        let buf = unsafe { ctx.alloc_pinned::<u8>(len) }
            .map_err(Error::cuda("allocate pinned staging"))?;
        self.buf = Some(buf);
        Ok(())
    }

    fn bytes(&self) -> usize {
        self.buf.as_ref().map_or(0, |b| b.len())
    }
}

impl Drop for Staging {
    /// Free the staging only once no copy reads it.
    fn drop(&mut self) {
        if let Some(e) = self.copied.take() {
            let _ = e.synchronize();
        }
    }
}

/// The length a lane's page-locked staging of `have` bytes grows to for a
/// part that packs `bytes` ([`Staging`]): to twice `bytes`, within `room`
/// (the lanes' mark for the files' bytes), so that it grows in the first
/// calls, as the [`Marks`] do, not at a record call later; unchanged
/// where `bytes` fit, or are none (every file of the part was read into
/// page-locked blocks). The emulated lanes count their staging by it too
/// (`stage/emu.rs`).
pub(crate) fn staging_len(have: usize, bytes: usize, room: usize) -> usize {
    if bytes <= have {
        return have;
    }
    bytes.max(bytes.saturating_mul(2).min(room))
}

/// One copy of a batch's files to the device buffer, where they lie one
/// after another in order ([`uploads`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Upload {
    /// File `file`, from the readers' page-locked block it was read into,
    /// to `at`.
    File { file: usize, at: usize },
    /// `len` bytes packed in the staging from `from`, to `at`.
    Staged { from: usize, at: usize, len: usize },
}

/// How files of `lens` bytes reach the device, `pinned` telling which the
/// readers read into page-locked memory: those are copied from there,
/// by the copy engine alone (issue 16, item 4: the readers' blocks are
/// what the engine's copies read too), and each run of the others is
/// packed into the staging and copied at once. Also the bytes staged.
pub(crate) fn uploads(lens: &[usize], pinned: &[bool]) -> (Vec<Upload>, usize) {
    let (mut out, mut at, mut staged) = (Vec::new(), 0, 0);
    for (file, (&len, &pin)) in lens.iter().zip(pinned).enumerate() {
        if len == 0 {
            continue;
        }
        match out.last_mut() {
            _ if pin => out.push(Upload::File { file, at }),
            Some(Upload::Staged { at: a, len: l, .. }) if *a + *l == at => *l += len,
            _ => out.push(Upload::Staged {
                from: staged,
                at,
                len,
            }),
        }
        if !pin {
            staged += len;
        }
        at += len;
    }
    (out, staged)
}

/// `files` one after another from the start of `host`.
fn pack<'f>(host: &mut [u8], files: impl Iterator<Item = &'f [u8]>) {
    let mut at = 0;
    for f in files {
        host[at..at + f.len()].copy_from_slice(f);
        at += f.len();
    }
}

/// Make the copies `ups` of `files` (those packed into `packed` by
/// [`pack`] in order), each `copy(bytes, at)`.
fn copy_files<E>(
    files: &[&[u8]],
    ups: &[Upload],
    packed: &[u8],
    mut copy: impl FnMut(&[u8], usize) -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    for &u in ups {
        match u {
            Upload::File { file, at } => copy(files[file], at)?,
            Upload::Staged { from, at, len } => copy(&packed[from..from + len], at)?,
        }
    }
    Ok(())
}

/// Device buffers for batches of progressive files on one stream, grown
/// as batches need and reused.
pub(crate) struct Buffers {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    kernels: ProgressiveKernels,
    staging: Staging,
    data: Grown<u8>,
    coef: Grown<i16>,
    samples: Grown<u8>,
    chains: Grown<GfChain>,
    scans: Grown<GfScan>,
    tables: Grown<GfHuff>,
    planes: Grown<GfPlane>,
    colors: Grown<GfColor>,
    status: Grown<u32>,
    sub_first: Grown<u32>,
    sync: Grown<u32>,
    /// The sizes the files' buffers are grown to, shared by a pipeline's
    /// lanes ([`Marks`]).
    marks: Arc<Marks>,
    /// Recorded before the status download and waited on, blocking
    /// (made on first use).
    done: Option<CudaEvent>,
    /// Whether chains' scans run in a pipeline ([`scan_pipeline`]).
    pub(crate) pipeline: bool,
    /// Bytes of a split scan's subsequence; 0: none split
    /// ([`split_bytes`]).
    pub(crate) sub_bytes: u32,
}

/// A batch put on the device by [`Buffers::put`]: the counts its
/// launches need.
pub(crate) struct Put {
    chains: u32,
    scans: u32,
    tables: u32,
    planes: u32,
    images: u32,
    blocks: u32,
    most_pixels: u32,
    /// Scans of the longest chain.
    most_scans: u32,
    coefs: usize,
    /// Subsequences of the split kernels.
    subs: u32,
    /// Chains per file, in order.
    pub(crate) chains_of: Vec<usize>,
    /// Where each launched chain was pushed.
    order: Vec<u32>,
}

impl Buffers {
    pub(crate) fn new(
        ctx: &Arc<CudaContext>,
        stream: Arc<CudaStream>,
        kernels: ProgressiveKernels,
    ) -> Buffers {
        Buffers {
            ctx: ctx.clone(),
            stream,
            kernels,
            staging: Staging::default(),
            data: Grown(None),
            coef: Grown(None),
            samples: Grown(None),
            chains: Grown(None),
            scans: Grown(None),
            tables: Grown(None),
            planes: Grown(None),
            colors: Grown(None),
            status: Grown(None),
            sub_first: Grown(None),
            sync: Grown(None),
            marks: Arc::default(),
            done: None,
            pipeline: scan_pipeline(),
            sub_bytes: split_bytes(),
        }
    }

    /// Grow the files' buffers to `marks`, shared with other lanes.
    pub(crate) fn with_marks(mut self, marks: Arc<Marks>) -> Buffers {
        self.marks = marks;
        self
    }

    /// Page-locked host bytes held (the files' staging).
    pub(crate) fn pinned_bytes(&self) -> usize {
        self.staging.bytes()
    }

    /// Device bytes held for the files, their coefficients and samples:
    /// the buffers the lanes' [`Marks`] size and bound.
    pub(crate) fn file_bytes(&self) -> usize {
        self.data.bytes() + self.coef.bytes() + self.samples.bytes()
    }

    /// A call of files sized `sizes` cut to the lanes' bound
    /// ([`Marks::parts`]).
    pub(crate) fn parts(&self, sizes: &[[usize; 2]]) -> Parts {
        self.marks.parts(sizes)
    }

    /// Device bytes held.
    pub(crate) fn bytes(&self) -> usize {
        self.file_bytes()
            + self.chains.bytes()
            + self.scans.bytes()
            + self.tables.bytes()
            + self.planes.bytes()
            + self.colors.bytes()
            + self.status.bytes()
            + self.sub_first.bytes()
            + self.sync.bytes()
    }

    /// Upload `plans`' files and descriptors, image `i` to be written at
    /// `out[i]`; an error of one file is `(its index, why)`.
    pub(crate) fn put(
        &mut self,
        plans: &[Plan],
        files: &[&[u8]],
        out: &[(u64, u32)],
    ) -> Result<std::result::Result<Put, (usize, SampleError)>> {
        self.put_from(plans, files, &vec![false; files.len()], out)
    }

    /// [`put`](Self::put), the files `pinned` says were read into
    /// page-locked memory copied from there ([`uploads`]): the caller
    /// keeps those bytes as they are until the stream has done them
    /// ([`status`](Self::status) waits for it, as [`settle`](Self::settle)
    /// does after an error).
    pub(crate) fn put_from(
        &mut self,
        plans: &[Plan],
        files: &[&[u8]],
        pinned: &[bool],
        out: &[(u64, u32)],
    ) -> Result<std::result::Result<Put, (usize, SampleError)>> {
        let s = self.stream.clone();
        self.ctx
            .bind_to_thread()
            .map_err(Error::cuda("bind context"))?;
        let (bytes, coefs) = sizes(plans, files);
        // Grown to the lanes' marks; `coefs` stays this call's (the
        // zeroing covers only these).
        let [grow_bytes, grow_coefs] = self.marks.raise([bytes, coefs]);
        self.data.marked(&s, grow_bytes)?;
        self.coef.marked(&s, grow_coefs)?;
        self.samples.marked(&s, grow_coefs)?;
        let bases = (
            self.data.address(&s),
            self.coef.address(&s),
            self.samples.address(&s),
        );
        let l = match Layout::new(plans, files, bases, out) {
            Ok(l) => l,
            Err(e) => return Ok(Err(e)),
        };
        let up = Error::cuda("upload");
        let lens: Vec<usize> = files.iter().map(|f| f.len()).collect();
        let (uploads, staged) = uploads(&lens, pinned);
        let unpinned = files.iter().zip(pinned).filter(|(_, p)| !**p);
        let packed = self
            .staging
            .pack(&self.ctx, unpinned.map(|(f, _)| *f), staged, grow_bytes)?;
        let data = self.data.at_least(&s, bytes)?;
        // From page-locked memory each copy is asynchronous: the event
        // recorded after them keeps `pack` from writing the staging again
        // before they are done.
        copy_files(files, &uploads, packed, |from, at| {
            s.memcpy_htod(from, &mut data.slice_mut(at..at + from.len()))
        })
        .map_err(&up)?;
        if staged > 0 {
            self.staging.copied = Some(s.record_event(None).map_err(Error::cuda("staging event"))?);
        }
        upload(&s, &mut self.chains, &l.launch.chains)?;
        upload(&s, &mut self.scans, &l.launch.scans)?;
        upload(&s, &mut self.tables, &l.launch.tables)?;
        upload(&s, &mut self.planes, &l.planes)?;
        upload(&s, &mut self.colors, &l.colors)?;
        self.status.at_least(&s, l.launch.chains.len())?;
        let first = l.launch.split(self.sub_bytes);
        let subs = *first.last().unwrap_or(&0);
        upload(&s, &mut self.sub_first, &first)?;
        self.sync.at_least(&s, (sync_bytes(subs) / 4).max(1))?;
        Ok(Ok(Put {
            chains: l.launch.chains.len() as u32,
            scans: l.launch.scans.len() as u32,
            tables: l.launch.tables.len() as u32,
            planes: l.planes.len() as u32,
            images: l.colors.len() as u32,
            blocks: l.blocks,
            most_pixels: l.most_pixels,
            most_scans: l.launch.most_scans(),
            coefs,
            subs,
            chains_of: l.launch.chains_of,
            order: l.order,
        }))
    }

    /// Queue the coefficients' zeroing (progressive decoding builds on
    /// zero) and the statuses', the split kernels and `gf_progressive`.
    pub(crate) fn queue_scans(&mut self, p: &Put) -> Result<()> {
        let s = self.stream.clone();
        let coef = self.coef.at_least(&s, p.coefs)?;
        s.memset_zeros(&mut coef.slice_mut(..p.coefs))
            .map_err(Error::cuda("memset"))?;
        let st = self.status.at_least(&s, p.chains as usize)?;
        s.memset_zeros(&mut st.slice_mut(..p.chains as usize))
            .map_err(Error::cuda("memset"))?;
        let (chains, scans, tables) = (
            self.chains.address(&s),
            self.scans.address(&s),
            self.tables.address(&s),
        );
        let status = self.status.address(&s);
        let split = split_params(
            (
                chains,
                scans,
                tables,
                self.sub_first.address(&s),
                self.sync.address(&s),
                status,
            ),
            (p.chains, p.scans, p.tables, p.subs),
            (self.sub_bytes, split_rounds()),
        );
        queue_split(&s, &self.kernels.split, &split)?;
        let mut b = s.launch_builder(&self.kernels.scans);
        b.arg(&chains);
        b.arg(&p.chains);
        b.arg(&scans);
        b.arg(&p.scans);
        b.arg(&tables);
        b.arg(&p.tables);
        b.arg(&status);
        let cfg = scan_config(p.chains, p.most_scans, self.pipeline);
        // SAFETY: (const GfChain*, u32, const GfScan*, u32, const GfHuff*,
        // u32, u32*), device addresses passed as pointers: the lists and
        // the buffers the descriptors address are this object's, filled by
        // `put` on this stream and kept until the caller has waited for it
        // (they are replaced only by a later `put`, after that wait).
        unsafe { b.launch(cfg) }
            .map(drop)
            .map_err(Error::cuda("kernel launch"))
    }

    /// Queue `gf_idct`.
    pub(crate) fn queue_idct(&mut self, p: &Put) -> Result<()> {
        let s = self.stream.clone();
        let planes = self.planes.address(&s);
        let mut b = s.launch_builder(&self.kernels.idct);
        b.arg(&planes);
        b.arg(&p.planes);
        b.arg(&p.blocks);
        let cfg = LaunchConfig {
            grid_dim: (p.blocks.div_ceil(64).max(1), 1, 1),
            block_dim: (64, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: (const GfPlane*, u32, u32): as in `queue_scans`, the
        // planes address this object's coefficient and sample buffers.
        unsafe { b.launch(cfg) }
            .map(drop)
            .map_err(Error::cuda("kernel launch"))
    }

    /// Queue `gf_color`, which writes each image at its `out` address.
    pub(crate) fn queue_color(&mut self, p: &Put) -> Result<()> {
        let s = self.stream.clone();
        let colors = self.colors.address(&s);
        let mut b = s.launch_builder(&self.kernels.color);
        b.arg(&colors);
        let cfg = LaunchConfig {
            grid_dim: (p.most_pixels.div_ceil(256).max(1), p.images.max(1), 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: (const GfColor*): one per image, reading its sample
        // planes (this object's) and writing width * height * 3 bytes at
        // out_pitch per row at its `out`, which `put`'s caller provides.
        unsafe { b.launch(cfg) }
            .map(drop)
            .map_err(Error::cuda("kernel launch"))
    }

    /// The chains' statuses of the last batch, in the files' order
    /// (waits for the stream). The wait is a blocking-sync event's: the
    /// download's own wait spins under the driver's default scheduling,
    /// and on an H200 (2026-11-27, commit 2406cce) the progressive lanes'
    /// threads spent 0.306 CPU-ms per image of the pipeline in it.
    pub(crate) fn status(&mut self, p: &Put) -> Result<Vec<u32>> {
        let s = self.stream.clone();
        if self.done.is_none() {
            self.done = Some(super::host_wait_event(&self.ctx).map_err(Error::cuda("event"))?);
        }
        if let Some(done) = &self.done {
            done.record(&s).map_err(Error::cuda("record"))?;
            done.synchronize()
                .map_err(Error::cuda("wait for the scans"))?;
        }
        let st = self.status.at_least(&s, p.chains as usize)?;
        let launched = s
            .clone_dtoh(&st.slice(..p.chains as usize))
            .map_err(Error::cuda("download"))?;
        Ok(unpermute(&p.order, &launched))
    }

    /// Wait, as well as the stream can, for what was queued: after an
    /// error, before the caller lets go of the files that
    /// [`put_from`](Self::put_from) copies from the readers' blocks.
    /// False where the wait failed.
    pub(crate) fn settle(&self) -> bool {
        self.stream.synchronize().is_ok()
    }
}

/// Grow `buf` to hold `v` and copy `v` to its start.
fn upload<T: DeviceRepr + ValidAsZeroBits>(
    s: &Arc<CudaStream>,
    buf: &mut Grown<T>,
    v: &[T],
) -> Result<()> {
    let b = buf.at_least(s, v.len())?;
    s.memcpy_htod(v, &mut b.slice_mut(..v.len()))
        .map_err(Error::cuda("upload"))
}

/// `files` decoded to RGB8 as a CUDA lane decodes a batch ([`Buffers`]):
/// one [`Layout`] (tables shared, chains longest first), the files copied
/// where [`uploads`] says (`pinned`: those read into the readers' blocks),
/// the kernels compiled for the host, host memory standing for the
/// device's. Not part of the API.
#[cfg(feature = "kernel-emu")]
#[doc(hidden)]
pub fn emu_rgb_batch(
    files: &[(&Path, &[u8])],
    pinned: &[bool],
    max_pixels: u64,
) -> Result<Vec<Rgb>> {
    let (plans, refs) = planned_all(files, max_pixels)?;
    let (bytes, coefs) = sizes(&plans, &refs);
    let mut data = vec![0u8; bytes];
    let mut coef = vec![0i16; coefs];
    let mut samples = vec![0u8; coefs];
    let mut images: Vec<Vec<u8>> = (plans.iter())
        .map(|p| vec![0u8; p.width as usize * p.height as usize * 3])
        .collect();
    let out: Vec<(u64, u32)> = (images.iter_mut().zip(&plans))
        .map(|(img, p)| (img.as_mut_ptr() as u64, p.width * 3))
        .collect();
    let bases = (
        data.as_mut_ptr() as u64,
        coef.as_mut_ptr() as u64,
        samples.as_mut_ptr() as u64,
    );
    let l = Layout::new(&plans, &refs, bases, &out).map_err(|(i, source)| Error::Sample {
        path: files[i].0.to_path_buf(),
        source,
    })?;
    let lens: Vec<usize> = refs.iter().map(|f| f.len()).collect();
    let (ups, staged) = uploads(&lens, pinned);
    let mut packed = vec![0u8; staged];
    let unpinned = refs.iter().zip(pinned).filter(|(_, p)| !**p);
    pack(&mut packed, unpinned.map(|(f, _)| *f));
    let data_ptr = data.as_mut_ptr();
    copy_files(&refs, &ups, &packed, |from, at| {
        // SAFETY: `uploads` puts each byte at most once within the
        // `bytes` of `data`, which nothing else touches now.
        unsafe { std::ptr::copy_nonoverlapping(from.as_ptr(), data_ptr.add(at), from.len()) };
        Ok::<(), std::convert::Infallible>(())
    })
    .unwrap_or_else(|e| match e {});
    // SAFETY: the layout's descriptors address `data` (its files, copied
    // above), `coef` and `samples` (sized by `sizes` for these plans) and
    // `images` (width * height * 3 bytes each at width * 3 a row), all
    // alive and untouched by anything else during these synchronous calls.
    let status = unsafe {
        let (status, _) =
            super::progressive::emu_kernels(&l.launch, (split_bytes(), split_rounds()));
        super::emu::idct(&l.planes, l.blocks);
        super::emu::color(&l.colors);
        status
    };
    let status = per_file(&unpermute(&l.order, &status), &l.launch.chains_of);
    Ok((plans.iter().zip(images).zip(status))
        .map(|((p, pixels), status)| Rgb {
            width: p.width,
            height: p.height,
            pixels,
            status,
        })
        .collect())
}

/// Decode `data` to RGB8 with the three kernels on CUDA device 0, as a
/// batch of one. Not part of the API.
#[doc(hidden)]
pub fn gpu_rgb(path: &Path, data: &[u8], max_pixels: u64) -> Result<Rgb> {
    let mut one = gpu_rgb_batch(&[(path, data)], &[false], max_pixels)?;
    one.pop()
        .ok_or_else(|| Error::Device("a batch of one decoded to none".into()))
}

/// `files` decoded to RGB8 on CUDA device 0 as a lane decodes a batch
/// ([`Buffers::put_from`]; `pinned`, which files it copies on their own,
/// as if from the readers' blocks). Not part of the API.
#[doc(hidden)]
pub fn gpu_rgb_batch(
    files: &[(&Path, &[u8])],
    pinned: &[bool],
    max_pixels: u64,
) -> Result<Vec<Rgb>> {
    let (plans, refs) = planned_all(files, max_pixels)?;
    let k = AugmentKernels::device0()?;
    let mut b = Buffers::new(&k.ctx, k.stream.clone(), k.progressive()?);
    let rgbs = (plans.iter())
        .map(|p| k.zeros::<u8>(p.width as usize * p.height as usize * 3))
        .collect::<Result<Vec<_>>>()?;
    let out: Vec<(u64, u32)> = (rgbs.iter().zip(&plans))
        .map(|(r, p)| (k.address(r), p.width * 3))
        .collect();
    let put = b
        .put_from(&plans, &refs, pinned, &out)?
        .map_err(|(i, source)| Error::Sample {
            path: files[i].0.to_path_buf(),
            source,
        })?;
    b.queue_scans(&put)?;
    b.queue_idct(&put)?;
    b.queue_color(&put)?;
    let status = per_file(&b.status(&put)?, &put.chains_of);
    (plans.iter().zip(&rgbs).zip(status))
        .map(|((p, rgb), status)| {
            Ok(Rgb {
                width: p.width,
                height: p.height,
                pixels: k.download(rgb)?,
                status,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests;
