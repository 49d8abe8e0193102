//! The device stage (issue 4): decoded pixels in, augmented batches on the
//! device out, one kernel launch per view spec per batch.
//!
//! ```text
//! worker: decode ─► cut the union of the sample's crop windows (Region)
//!         or, for nvJPEG-routable JPEGs (Jpeg): the engine's share passes
//!         the bytes on, the rest runs nvJPEG's host phase (CUDA route)
//! batch thread (assemble.rs), samples in sampler order:
//!         Jpeg ─► a decode group's arena (stage/jpeg.rs): host phase done
//!                 ─► copy + device phase queued at once; bytes ─► when
//!                 the group is sealed (about a batch), one call at an
//!                 engine lane, which waits for it off this thread;
//!                 several groups decode at once (issue 16)
//!         in order, once decoded: Region ─► pinned staging of the batch
//!                 slot + one GfTile per draw; Jpeg ─► one GfTile per draw
//!                 reading the arena
//!         end of batch ─► one H2D copy (pixels, tiles, labels)
//!                     ─► one launch per view ─► event ─► Batch, queued
//! ```
//!
//! Slots (staging, outputs, labels, event) and decode arenas are allocated
//! at `build()` and cycle: a `Batch` holds its slot and gives it back on
//! drop; an arena goes back once the launches reading it are queued, and
//! takes new decodes once they have run. When a batch's regions overflow
//! the staging, the stage flushes what it has (copy + launch), waits for
//! the copy and goes on: the batch costs more than one launch but nothing
//! is lost. A region larger than the whole staging is augmented on the CPU
//! by the worker and uploaded (the CPU reference is the specification, so
//! the result is the same within the stated tolerance).
//!
//! The same packing runs on an emulated device (feature `kernel-emu`: the
//! kernel source compiled for the host, device memory = host memory, an
//! engine played by CPU decoders on lanes of their own), which is how CI
//! checks this file without a GPU.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender, bounded, select};

use crate::augment::TensorData;
use crate::augment::mix::MixParams;
use crate::augment::params::SampleParams;
use crate::augment::{DType, Layout};
use crate::config::Config;
use crate::cuda::desc::{GfLaunch, GfMix, GfPhoto, GfTile};
use crate::decode::nvjpeg::{Ledger, Share};
use crate::error::{Error, Result};
use crate::tensor::{Storage, Tensor};
use cuda::{CudaEngine, LaunchKind, StageLaunch};
use handoff::{Placed, Region, WorkerDecode};
pub(crate) use routes::KernelLanes;
use routes::built;

pub(crate) mod cuda;
mod decode_bench;
pub(crate) mod handoff;

pub use decode_bench::{DecodeBench, PHASES as DECODE_BENCH_PHASES};
mod jpeg;
mod photo;
mod report;
mod routes;
mod slot;

use jpeg::JpegRoute;
// The emulated backend (feature `kernel-emu`) beside the CUDA one; without
// the feature its device cannot be made (`emu::EmuDevice`), so the stage
// has no feature arms.
mod emu;
pub(crate) use emu::EmuDevice;
use emu::emu_alloc;
pub(crate) use jpeg::{Arena, Group};
pub use slot::Memory;

pub(crate) use slot::{Slot, SlotHome};
use slot::{SlotMem, StagingLayout};

/// The scan kernels' lanes may hold this fraction (1 / n) of the device's
/// memory by default (`PipelineBuilder::kernel_memory_limit`).
const KERNEL_MEMORY_SHARE: u64 = 4;

/// Kernel launches have at most this many tiles (the grid's y limit).
const MAX_TILES_PER_LAUNCH: usize = 65_535;

/// Where the pipeline's kernels run.
pub(crate) enum Engine {
    Cuda(CudaEngine),
    /// Host emulation of the kernels (tests; feature `kernel-emu`, without
    /// which it cannot be made).
    #[cfg_attr(not(feature = "kernel-emu"), allow(dead_code))]
    Emu(EmuDevice),
}

/// The stage: engine, slot pool, layout.
pub(crate) struct DeviceStage {
    engine: Engine,
    /// The nvJPEG route, when decoding on the device.
    jpeg: Option<Mutex<JpegRoute>>,
    /// Its lanes' stop flags, read without its lock.
    lane_stops: Vec<crate::cuda::lanes::StopFlags>,
    /// The part of the nvJPEG route the workers run (and where they
    /// decide each image's route).
    worker_decode: Option<Arc<WorkerDecode>>,
    /// The hardware engine's share, fixed or steered.
    share: Arc<Share>,
    /// Bytes per decode arena.
    arena: usize,
    /// Free decode arenas (issue 16, item 1): one per batch decoding at
    /// once.
    arenas: (Sender<Arena>, Receiver<Arena>),
    /// Every emulated arena, for the launches to read: tiles hold their
    /// addresses (their buffers never move or change size).
    emu_arenas: Vec<emu::EmuArena>,
    pool: (Sender<Slot>, Receiver<Slot>),
    /// Slots held by batches (see [`SlotHome`]).
    in_batches: Arc<AtomicUsize>,
    layout: StagingLayout,
    memory: Memory,
    /// What nvJPEG holds (issue 16, item 5): the decoder pool's ledger,
    /// bounded by `decoder_memory_limit`, the batch thread's and engine
    /// lanes', counted only, and the scan kernels' lanes' (bounded by
    /// `kernel_memory_limit` where they size their buffers).
    decoders: Vec<Arc<Ledger>>,
    /// The last of `decoders` (`Memory::kernel_device_bytes`).
    kernel_ledger: Arc<Ledger>,
    /// Nanoseconds the workers' nvJPEG host phases waited for their pooled
    /// decoder's last copy (`Stats::decoder_pinned_wait`).
    pinned_wait: Arc<std::sync::atomic::AtomicU64>,
    /// Time with a progressive lane call in flight
    /// (`Stats::progressive_busy`).
    progressive_busy: Arc<crate::cuda::lanes::Busy>,
    /// The pipeline's timeline, for the emulated device's kernels.
    observe: Option<crate::cuda::lanes::Observe>,
    /// Images per engine call while a group fills; 0: one call at its
    /// sealing (`PipelineBuilder::engine_call_images`).
    engine_call: usize,
    /// Output elements per draw, per view.
    draw_len: Vec<usize>,
    /// The photometric planes (issue 19), shared by every slot: all work
    /// runs on one stream, round after round.
    scratch: Option<Mutex<Scratch>>,
}

/// The photometric kernels' planes: f32 on the device.
enum Scratch {
    Cuda(cudarc::driver::CudaSlice<f32>),
    Emu(Vec<f32>),
}

impl std::fmt::Debug for DeviceStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceStage")
            .field("memory", &self.memory)
            .finish_non_exhaustive()
    }
}

fn kernel_index(dtype: DType, layout: Layout) -> usize {
    let d = match dtype {
        DType::U8 => 0,
        DType::F16 => 1,
        DType::BF16 => 2,
        DType::F32 => 3,
    };
    2 * d + usize::from(layout == Layout::Nhwc)
}

impl DeviceStage {
    /// Allocate `slots` slots for `cfg`: every buffer the stage will use,
    /// but for the decoders of the workers' nvJPEG host phases, which are
    /// made as needed, at most one per sample in flight.
    /// `observe` hears of each engine-lane call and of the GPU's spans
    /// (the pipeline's timeline).
    pub(crate) fn new(
        mut engine: Engine,
        cfg: &Config,
        slots: usize,
        observe: Option<crate::cuda::lanes::Observe>,
    ) -> Result<DeviceStage> {
        let draws: usize = cfg.views.iter().map(|v| v.count).sum();
        let t = Instant::now();
        if let Engine::Cuda(e) = &engine {
            let photo = cfg.views.iter().any(|v| v.photo.any());
            e.prepare_kernels(photo, cfg.mixup.is_some())?;
        }
        built(&observe, "device: photometric and mix kernels", t);
        let timeline = match (&mut engine, &observe) {
            (Engine::Cuda(e), Some(o)) => Some(e.watch(o.clone())?),
            _ => None,
        };
        let share = Arc::new(if cfg.hardware_share_auto {
            Share::auto(cfg.hardware_share, cfg.workers)
        } else {
            Share::fixed(cfg.hardware_share)
        });
        let kernel_memory = match &engine {
            // The default (`PipelineBuilder::kernel_memory_limit`): every
            // lane holds twice the largest call, so without a bound 6
            // lanes of 256 photos of 12 MP would ask for more than an
            // H100 has, beside the trainer's own memory.
            Engine::Cuda(e) if cfg.kernel_memory == u64::MAX => e
                .context()
                .total_mem()
                .map_or(u64::MAX, |total| total as u64 / KERNEL_MEMORY_SHARE),
            _ => cfg.kernel_memory,
        };
        let ledgers = routes::Ledgers::new(cfg.decoder_memory, kernel_memory, share.kernel_busy());
        let (jpeg, worker_decode) =
            routes::make(&engine, cfg, &share, timeline.as_ref(), &observe, &ledgers)?;
        let t = Instant::now();
        let arena = if jpeg.is_some() {
            cfg.staging_bytes.saturating_mul(4)
        } else {
            0
        };
        let soft = cfg.mixup.map_or(0, |m| cfg.batch_size * m.num_classes);
        let descriptors: usize = cfg
            .views
            .iter()
            .map(|v| {
                let each = size_of::<GfTile>()
                    + if v.photo.any() {
                        size_of::<GfPhoto>()
                    } else {
                        0
                    };
                v.count * each
            })
            .sum();
        debug_assert!(descriptors >= draws * size_of::<GfTile>());
        let layout = StagingLayout::new(
            cfg.staging_bytes,
            cfg.batch_size * descriptors,
            cfg.batch_size,
            soft,
        );
        let outs: Vec<(DType, usize)> = cfg
            .views
            .iter()
            .map(|v| (cfg.dtype, cfg.batch_size * v.count * v.sample_len()))
            .collect();
        let pool = bounded(slots);
        let mut memory = Memory {
            slots,
            ..Memory::default()
        };
        let arenas = bounded(cfg.in_flight);
        let mut emu_arenas = Vec::new();
        for _ in 0..if jpeg.is_some() { cfg.in_flight } else { 0 } {
            let a = match &engine {
                Engine::Cuda(e) => {
                    let a = e.alloc_arena(arena)?;
                    memory.device_bytes += a.len() as u64;
                    Arena::Cuda(a)
                }
                Engine::Emu(_) => {
                    let a = Arc::new(Mutex::new(emu_alloc(arena)?));
                    emu_arenas.push(a.clone());
                    Arena::Emu(a)
                }
            };
            arenas
                .0
                .send(a)
                .map_err(|_| Error::Device("arena pool closed".into()))?;
        }
        for _ in 0..slots {
            let (mem, outs) = match &engine {
                Engine::Cuda(e) => {
                    let (slot, bufs) = e.alloc_slot(layout.total, (cfg.batch_size, soft), &outs)?;
                    memory.pinned_bytes += slot.pinned_bytes() as u64;
                    memory.device_bytes += slot.device_bytes() as u64
                        + bufs.iter().map(|b| b.num_bytes() as u64).sum::<u64>();
                    (
                        SlotMem::Cuda(slot),
                        bufs.into_iter().map(Storage::Cuda).collect(),
                    )
                }
                Engine::Emu(_) => (
                    SlotMem::Emu(emu_alloc(layout.total)?),
                    outs.iter()
                        .map(|&(d, n)| Storage::Host(TensorData::zeros(d, n)))
                        .collect(),
                ),
            };
            let slot = Slot {
                mem,
                outs,
                used: 0,
                arenas: Vec::new(),
                tiles: vec![Vec::new(); cfg.views.len()],
                photo: vec![Vec::new(); cfg.views.len()],
            };
            pool.0
                .send(slot)
                .map_err(|_| Error::Device("slot pool closed".into()))?;
        }
        let scratch = match (photo::scratch_len(cfg), &engine) {
            (None, _) => None,
            (Some(n), Engine::Cuda(e)) => {
                memory.device_bytes += 4 * n as u64;
                Some(Scratch::Cuda(e.alloc_scratch(n)?))
            }
            (Some(n), Engine::Emu(_)) => Some(Scratch::Emu(vec![0.0; n])),
        };
        built(&observe, "device: arenas and slots", t);
        Ok(DeviceStage {
            scratch: scratch.map(Mutex::new),
            engine,
            lane_stops: jpeg.as_ref().map(|j| j.stop_flags()).unwrap_or_default(),
            jpeg: jpeg.map(Mutex::new),
            worker_decode,
            share,
            arena,
            arenas,
            emu_arenas,
            pool,
            in_batches: Arc::new(AtomicUsize::new(0)),
            layout,
            memory,
            decoders: vec![
                ledgers.pool.clone(),
                ledgers.route.clone(),
                ledgers.kernels.clone(),
            ],
            kernel_ledger: ledgers.kernels.clone(),
            pinned_wait: ledgers.pinned_wait.clone(),
            progressive_busy: ledgers.progressive_busy.clone(),
            observe,
            engine_call: cfg.engine_call,
            draw_len: cfg.views.iter().map(|v| v.sample_len()).collect(),
        })
    }

    pub(crate) fn memory(&self) -> Memory {
        let mut m = self.memory;
        for l in &self.decoders {
            let (pinned, device) = l.held();
            m.decoder_pinned_bytes += pinned;
            m.decoder_device_bytes += device;
            // The sum of the ledgers' peaks: never below the peak of the
            // sum (`Memory::decoder_peak_bytes`).
            m.decoder_peak_bytes += l.peak();
        }
        m.kernel_device_bytes = self.kernel_ledger.held().1;
        m
    }

    /// Put back a slot that no batch took (an abandoned or empty batch).
    pub(crate) fn put_back(&self, mut slot: Slot) {
        for a in slot.arenas.drain(..) {
            self.release(a);
        }
        let _ = self.pool.0.try_send(slot);
    }

    /// Hand a finished batch's slot out with the way home.
    pub(crate) fn lend(&self, slot: Slot) -> (Slot, SlotHome) {
        self.in_batches.fetch_add(1, Ordering::AcqRel);
        let home = SlotHome {
            tx: self.pool.0.clone(),
            in_batches: self.in_batches.clone(),
        };
        (slot, home)
    }

    /// Whether batches hold every slot: with none of them queued for the
    /// trainer, the trainer holds them all and no batch can be made.
    pub(crate) fn all_lent(&self) -> bool {
        self.in_batches.load(Ordering::Acquire) == self.memory.slots
    }

    /// The pixel bytes one slot can stage: regions larger than this are
    /// augmented on the CPU by the worker.
    pub(crate) fn region_limit(&self) -> usize {
        self.layout.pixels
    }

    /// The engine's description for notices.
    pub(crate) fn cuda_context(&self) -> Option<&std::sync::Arc<cudarc::driver::CudaContext>> {
        match &self.engine {
            Engine::Cuda(e) => Some(e.context()),
            Engine::Emu(_) => None,
        }
    }

    pub(crate) fn describe(&self) -> String {
        let decode = match (&self.jpeg, self.has_hardware_decoder()) {
            (None, _) => "decode on CPU threads",
            (Some(_), true) => match &self.engine {
                Engine::Cuda(_) => "nvJPEG: hardware engine + CUDA",
                Engine::Emu(_) => "emulated engine (CPU decoders on lanes) + CUDA route",
            },
            (Some(_), false) => "nvJPEG: CUDA",
        };
        match &self.engine {
            Engine::Cuda(e) => format!("{}, {decode}", e.describe()),
            Engine::Emu(_) => format!("emulated device (kernel-emu), {decode}"),
        }
    }

    /// A free slot, waiting for one when batches hold them all. Before
    /// waiting it calls `starved`, which tells the trainer's side (a trainer
    /// that holds every slot while asking for the next batch would wait
    /// forever, and gets an error instead); `false` from it, or a message
    /// or disconnection on `cancel`, abandons the wait.
    pub(crate) fn acquire(
        &self,
        cancel: &Receiver<()>,
        starved: impl FnOnce() -> bool,
    ) -> Result<Slot> {
        let cancelled = || Error::Worker("epoch abandoned".into());
        let mut slot = match self.pool.1.try_recv() {
            Ok(s) => s,
            Err(_) => {
                if !starved() {
                    return Err(cancelled());
                }
                select! {
                    recv(self.pool.1) -> s => s.map_err(|_| cancelled())?,
                    recv(cancel) -> _ => return Err(cancelled()),
                }
            }
        };
        slot.used = 0;
        slot.tiles.iter_mut().for_each(Vec::clear);
        match &mut slot.mem {
            SlotMem::Cuda(c) => c.recycle()?,
            SlotMem::Emu(_) => {}
        }
        Ok(slot)
    }

    /// The largest decoded image (bytes) the nvJPEG route takes, when there
    /// is one: workers send such images compressed.
    pub(crate) fn jpeg_limit(&self) -> Option<usize> {
        self.jpeg.as_ref().map(|_| self.arena)
    }

    /// Page-locked memory for the readers' buffers, where the hardware
    /// engine may decode or the scan kernels' lanes run (issue 16, item
    /// 4): the engine's copies, and the lanes' (`prog_batch::uploads`),
    /// read the files from the readers' buffers. `GPUFEED_PINNED_READS=0`
    /// turns it off, to measure it.
    pub(crate) fn read_pinning(&self) -> Option<Arc<dyn crate::reader::PinAlloc>> {
        let reads = self.worker_decode.as_ref().is_some_and(|w| {
            (w.engine && w.share.may_engine()) || w.kernels.progressive || w.kernels.sequential
        });
        if !reads || std::env::var("GPUFEED_PINNED_READS").is_ok_and(|v| v == "0") {
            return None;
        }
        Some(match &self.engine {
            Engine::Cuda(e) => Arc::new(cuda::PinnedReads::new(e.context())),
            Engine::Emu(_) => Arc::new(emu::EmuPins),
        })
    }

    /// What the workers run of the nvJPEG route, when they run some.
    pub(crate) fn worker_decode(&self) -> Option<Arc<WorkerDecode>> {
        self.worker_decode.clone()
    }

    /// Steer the automatic engine share (once a batch, on the batch
    /// thread).
    pub(crate) fn steer_share(&self) {
        if self.worker_decode.as_ref().is_some_and(|w| w.engine) {
            self.share.steer();
        }
    }

    /// Whether the hardware JPEG engine is in use (the emulated device
    /// plays one).
    pub(crate) fn has_hardware_decoder(&self) -> bool {
        self.jpeg
            .as_ref()
            .is_some_and(|j| match &*j.lock().unwrap_or_else(|p| p.into_inner()) {
                JpegRoute::Cuda(r) => r.has_hardware(),
                JpegRoute::Emu(_) => true,
            })
    }

    /// Launch what the slot has staged (a batch in parts), so that the
    /// decode arenas its tiles read go back. Returns the launches made.
    pub(crate) fn flush_partial(&self, cfg: &Config, slot: &mut Slot) -> Result<usize> {
        let n = self.flush(cfg, slot, None, None)?;
        slot.used = 0;
        Ok(n)
    }

    /// Make a decoded image batch position `i`.
    pub(crate) fn place(&self, cfg: &Config, slot: &mut Slot, p: &Placed, i: usize) -> Result<()> {
        self.push_tiles(cfg, slot, p.src, p.width * 3, p.height, &p.params, i)
    }

    /// One tile per draw of sample `i`, reading an RGB8 image at `src`.
    #[allow(clippy::too_many_arguments)]
    fn push_tiles(
        &self,
        cfg: &Config,
        slot: &mut Slot,
        src: u64,
        pitch: u32,
        height: u32,
        params: &[SampleParams],
        i: usize,
    ) -> Result<()> {
        let mut draws = params.iter();
        for (v, view) in cfg.views.iter().enumerate() {
            let len = self.draw_len[v];
            for k in 0..view.count {
                let p = draws.next().ok_or_else(|| {
                    Error::Device("sample has fewer draws than the views (worker bug)".into())
                })?;
                let dst = ((i * view.count + k) * len) as u64;
                let tile = GfTile::new(src, pitch, height, p, (view.width, view.height), dst);
                if p.photo.any() {
                    slot.photo[v].push((tile, p.photo));
                } else {
                    slot.tiles[v].push(tile);
                }
            }
        }
        Ok(())
    }

    fn host<'a>(&self, slot: &'a mut Slot) -> Result<&'a mut [u8]> {
        match (&self.engine, &mut slot.mem) {
            (Engine::Cuda(e), SlotMem::Cuda(c)) => e.host(c),
            (Engine::Emu(_), SlotMem::Emu(v)) => Ok(v.as_mut_slice()),
            _ => unreachable!("slots come from their engine"),
        }
    }

    fn base(&self, slot: &Slot) -> u64 {
        match (&self.engine, &slot.mem) {
            (Engine::Cuda(e), SlotMem::Cuda(c)) => e.base(c),
            (Engine::Emu(_), SlotMem::Emu(v)) => v.as_ptr() as u64,
            _ => unreachable!("slots come from their engine"),
        }
    }

    /// Stage sample `i` of the batch from its decoded region.
    pub(crate) fn put_region(
        &self,
        cfg: &Config,
        slot: &mut Slot,
        i: usize,
        r: &Region,
    ) -> Result<usize> {
        let n = r.pixels.len();
        if n > self.layout.pixels {
            return Err(Error::Device(format!(
                "region of {n} bytes exceeds the {} byte staging (worker bug)",
                self.layout.pixels
            )));
        }
        let mut launches = 0;
        if slot.used + n > self.layout.pixels {
            launches = self.flush(cfg, slot, None, None)?;
            slot.used = 0;
        }
        let at = slot.used;
        self.host(slot)?[at..at + n].copy_from_slice(&r.pixels);
        slot.used = (at + n).next_multiple_of(16);
        let src = self.base(slot) + at as u64;
        self.push_tiles(cfg, slot, src, r.width * 3, r.height, &r.params, i)?;
        Ok(launches)
    }

    /// Place sample `i`, already augmented on the host (one buffer per view
    /// with its draws back to back), into the outputs.
    pub(crate) fn put_host(
        &self,
        cfg: &Config,
        slot: &mut Slot,
        i: usize,
        data: &[TensorData],
    ) -> Result<()> {
        for (v, (view, src)) in cfg.views.iter().zip(data).enumerate() {
            let at = i * view.count * self.draw_len[v];
            match (&self.engine, &mut slot.outs[v]) {
                (Engine::Cuda(e), Storage::Cuda(out)) => e.upload_sample(out, at, src)?,
                (_, Storage::Host(out)) => {
                    let b = src.as_bytes();
                    let size = b.len() / src.len().max(1);
                    out.as_bytes_mut()[at * size..at * size + b.len()].copy_from_slice(b);
                }
                #[allow(unreachable_patterns)]
                _ => return Err(Error::Device("output storage of another engine".into())),
            }
        }
        Ok(())
    }

    /// Launch what is staged; with `labels`, also upload them and record
    /// the slot's event (the end of a batch). Returns the launches made.
    /// With `mix`, the end of the batch mixes its images (issue 19) and
    /// uploads the soft labels with the labels, before the event.
    fn flush(
        &self,
        cfg: &Config,
        slot: &mut Slot,
        labels: Option<&[u32]>,
        mix: Option<(&MixParams, &[f32])>,
    ) -> Result<usize> {
        let l = self.layout;
        let mut launches = Vec::new();
        let mut tiles_at = l.tiles_at;
        let which = kernel_index(cfg.dtype, cfg.layout);
        let fma = &cfg.fma;
        let tiles = std::mem::take(&mut slot.tiles);
        let photo = std::mem::take(&mut slot.photo);
        let staged: usize = tiles.iter().map(Vec::len).sum::<usize>() * size_of::<GfTile>()
            + photo.iter().map(Vec::len).sum::<usize>()
                * (size_of::<GfTile>() + size_of::<GfPhoto>());
        if staged > l.tiles {
            return Err(Error::Device(format!(
                "{staged} descriptor bytes staged, room for {} (stage bug)",
                l.tiles
            )));
        }
        let mut scratch = self
            .scratch
            .as_ref()
            .map(|m| m.lock().unwrap_or_else(|p| p.into_inner()));
        let scratch_at = scratch.as_deref().map(|s| match (s, &self.engine) {
            (Scratch::Cuda(c), Engine::Cuda(e)) => (e.scratch_base(c), c.len()),
            (Scratch::Emu(v), _) => (v.as_ptr() as u64, v.len()),
            _ => unreachable!("scratch comes from its engine"),
        });
        let host = self.host(slot)?;
        for (v, (view, ts)) in cfg.views.iter().zip(&tiles).enumerate() {
            for chunk in ts.chunks(MAX_TILES_PER_LAUNCH) {
                let bytes: &[u8] = bytemuck::cast_slice(chunk);
                host[tiles_at..tiles_at + bytes.len()].copy_from_slice(bytes);
                launches.push(StageLaunch {
                    which,
                    kind: LaunchKind::Augment,
                    tiles_at,
                    params: GfLaunch {
                        out_w: view.width as u32,
                        out_h: view.height as u32,
                        antialias: cfg.antialias as u32,
                        n_tiles: chunk.len() as u32,
                        scale: fma.scale,
                        shift: fma.shift,
                    },
                    out: Some(v),
                });
                tiles_at += bytes.len();
            }
        }
        if photo.iter().any(|d| !d.is_empty()) {
            let at = scratch_at
                .ok_or_else(|| Error::Device("photometric draws without a scratch".into()))?;
            let end = l.tiles_at + l.tiles;
            photo::pack(cfg, &photo, at, host, &mut tiles_at, end, &mut launches)?;
        }
        if let (Some((m, _)), Some(ls)) = (mix.filter(|m| m.0.mixes()), labels) {
            let v = &cfg.views[0];
            launches.push(StageLaunch {
                kind: LaunchKind::Mix(GfMix::new(m, ls.len(), (v.width, v.height))),
                which,
                tiles_at: 0,
                params: GfLaunch {
                    out_w: v.width as u32,
                    out_h: v.height as u32,
                    antialias: 0,
                    n_tiles: 0,
                    scale: [1.0; 3],
                    shift: [0.0; 3],
                },
                out: Some(0),
            });
        }
        let label_range = labels.map(|ls| {
            let b: &[u8] = bytemuck::cast_slice(ls);
            host[l.labels_at..l.labels_at + b.len()].copy_from_slice(b);
            let soft: &[u8] = bytemuck::cast_slice(mix.map_or(&[][..], |m| m.1));
            host[l.soft_at..l.soft_at + soft.len()].copy_from_slice(soft);
            (
                l.labels_at..l.labels_at + b.len(),
                l.soft_at..l.soft_at + soft.len(),
            )
        });
        slot.tiles = tiles;
        slot.tiles.iter_mut().for_each(Vec::clear);
        slot.photo = photo;
        slot.photo.iter_mut().for_each(Vec::clear);
        match (&self.engine, &mut slot.mem) {
            (Engine::Cuda(e), SlotMem::Cuda(c)) => {
                let mut outs: Vec<&mut _> = slot
                    .outs
                    .iter_mut()
                    .map(|s| match s {
                        Storage::Cuda(o) => Ok(o),
                        Storage::Host(_) => {
                            Err(Error::Device("host storage in a CUDA slot".into()))
                        }
                    })
                    .collect::<Result<_>>()?;
                let ranges = [0..slot.used, l.tiles_at..tiles_at];
                let scratch = match scratch.as_deref_mut() {
                    Some(Scratch::Cuda(c)) => Some(c),
                    _ => None,
                };
                e.flush(c, &ranges, &launches, &mut outs, scratch, label_range)?;
            }
            (Engine::Emu(_), SlotMem::Emu(host)) => {
                let mut outs: Vec<&mut [u8]> = slot
                    .outs
                    .iter_mut()
                    .map(|s| match s {
                        Storage::Host(d) => Ok(d.as_bytes_mut()),
                        Storage::Cuda(_) => {
                            Err(Error::Device("CUDA storage in an emulated slot".into()))
                        }
                    })
                    .collect::<Result<_>>()?;
                let arenas: Vec<_> = self
                    .emu_arenas
                    .iter()
                    .map(|a| a.lock().unwrap_or_else(|p| p.into_inner()))
                    .collect();
                let mut sources = vec![host.as_slice()];
                sources.extend(arenas.iter().map(|a| a.as_slice()));
                let scratch = match scratch.as_deref_mut() {
                    Some(Scratch::Emu(v)) => Some(bytemuck::cast_slice_mut(v.as_mut_slice())),
                    _ => None,
                };
                let t0 = std::time::Instant::now();
                emu::run_launches(
                    host,
                    &sources,
                    &launches,
                    &mut outs,
                    scratch,
                    cfg.dtype.size(),
                )
                .map_err(|e| Error::Device(format!("emulated launch: {e}")))?;
                // The emulated device's "GPU" is this thread: its kernels
                // go on a GPU track of their own, as the CUDA backend's.
                if let Some(o) = &self.observe {
                    o(crate::cuda::timeline::Seen {
                        track: Some(emu::STAGE_TRACK),
                        name: cuda::FLUSH_SPAN,
                        start: t0,
                        end: std::time::Instant::now(),
                    });
                }
            }
            _ => unreachable!("slots come from their engine"),
        }
        // The launches that read these arenas are queued: they may take new
        // decodes once those finish.
        for a in slot.arenas.drain(..) {
            self.release(a);
        }
        Ok(launches.len())
    }

    /// End the batch of `labels.len()` samples: launch (and mix, with
    /// `mix`), upload labels, record the event, and hand the outputs out as
    /// tensors.
    pub(crate) fn finish(
        &self,
        cfg: &Config,
        slot: &mut Slot,
        labels: &[u32],
        mix: Option<(&MixParams, &[f32])>,
    ) -> Result<(Vec<Tensor>, usize)> {
        let launches = self.flush(cfg, slot, Some(labels), mix)?;
        let n = labels.len();
        let outs = std::mem::take(&mut slot.outs);
        let tensors = outs
            .into_iter()
            .zip(&cfg.views)
            .map(|(storage, v)| {
                let rows = n * v.count;
                let shape = match cfg.layout {
                    Layout::Nchw => [rows, 3, v.height, v.width],
                    Layout::Nhwc => [rows, v.height, v.width, 3],
                };
                Tensor::new(shape, cfg.layout, cfg.dtype, storage)
            })
            .collect();
        Ok((tensors, launches))
    }
}
