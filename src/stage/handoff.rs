//! What workers hand the device stage for one sample (`stage/mod.rs`): the crop
//! region of an image decoded on a CPU thread, or the compressed bytes of a
//! JPEG for nvJPEG (with its decoding begun on the worker, on the CUDA
//! route), each with its draws.

use std::sync::Arc;

use crate::augment::params::SampleParams;
use crate::decode::nvjpeg::Roi;

/// What a worker hands to the device stage for one sample: the smallest
/// rectangle of the decoded image that every draw reads, and the draws'
/// parameters relative to it (view-major, then draw).
#[derive(Debug)]
pub(crate) struct Region {
    pub(crate) pixels: Vec<u8>,
    pub(crate) width: u32,
    pub(crate) height: u32,
    pub(crate) params: Vec<SampleParams>,
}

/// The bounding box of every draw's source window: the only pixels the
/// kernel reads (the CPU reference asserts the same).
fn bounds(params: &[SampleParams]) -> Roi {
    let x = params.iter().map(|p| p.x.start).min().unwrap_or(0);
    let y = params.iter().map(|p| p.y.start).min().unwrap_or(0);
    let x1 = params
        .iter()
        .map(|p| p.x.start + p.x.len)
        .max()
        .unwrap_or(0);
    let y1 = params
        .iter()
        .map(|p| p.y.start + p.y.len)
        .max()
        .unwrap_or(0);
    Roi {
        x,
        y,
        w: x1 - x,
        h: y1 - y,
    }
}

/// Shift the draws so that `(x0, y0)` becomes the origin. The kernel adds
/// the integer start after computing taps relative to it, so the shift
/// changes no arithmetic.
pub(crate) fn shift(params: &mut [SampleParams], x0: u32, y0: u32) {
    for p in params {
        p.x.start -= x0;
        p.y.start -= y0;
    }
}

impl Region {
    /// Cut the bounding box of every draw's source window out of `img` and
    /// shift the draws to it.
    pub(crate) fn cut(img: &crate::decode::Image, mut params: Vec<SampleParams>) -> Region {
        let r = bounds(&params);
        let mut pixels = Vec::with_capacity(r.w as usize * r.h as usize * 3);
        img.window_rows(r)
            .for_each(|row| pixels.extend_from_slice(row));
        shift(&mut params, r.x, r.y);
        Region {
            pixels,
            width: r.w,
            height: r.h,
            params,
        }
    }
}

/// A sample for the nvJPEG route: compressed bytes, the stored size, and
/// the draws (in that frame: the route takes only images that need no EXIF
/// rotation).
#[derive(Debug)]
pub(crate) struct Jpeg {
    pub(crate) bytes: crate::reader::PooledBytes,
    /// Whether it goes to the hardware engine, decided once by the worker
    /// that parsed it ([`WorkerDecode::route`]).
    pub(crate) to_engine: bool,
    /// The MCU size ([`crate::decode::nvjpeg::mcu_size`]): crop windows
    /// are padded by it.
    pub(crate) mcu: (u32, u32),
    /// For gpufeed's own scan kernels, decided once by the worker that
    /// parsed it ([`WorkerDecode::kernels`]).
    pub(crate) kernels: bool,
    /// The kernels' plan of the file, made by that worker
    /// ([`crate::jpeg::scans::plan`]), so that the lane that decodes it
    /// does not: a lane's call is on the batch's critical path, and its
    /// planning was about 40 % of a lane's CPU time (~16 us an image; a
    /// lane spent ~10 ms of CPU a batch of 256 on an H200, 4bbffad).
    /// `None` with `GPUFEED_PLAN_ON_WORKERS=0` (a diagnostic: the lane
    /// plans); a file the worker's plan refuses does not go to the
    /// kernels ([`Planned::Refused`]).
    pub(crate) plan: Option<Box<crate::jpeg::scans::Plan>>,
    /// A progressive file (SOF2): with the sequential kernels on too, the
    /// scan kernels' lanes keep them apart (`cuda/lanes.rs`,
    /// `Lanes::submit_among`).
    pub(crate) progressive: bool,
    pub(crate) width: u32,
    pub(crate) height: u32,
    pub(crate) params: Vec<SampleParams>,
    /// Decoding the worker began ([`WorkerDecode::start`]); `None`: the
    /// batch thread decodes the bytes.
    pub(crate) staged: Option<Staged>,
}

/// An nvJPEG-route sample whose decoding a worker began.
#[derive(Debug)]
pub(crate) enum Staged {
    /// The host phase ran on the worker; the batch thread queues the copy
    /// and device phase into the arena, and the lease goes home.
    Cuda(crate::decode::nvjpeg::Lease),
    /// The emulated device's stand-in: the window ([`Jpeg::window`], or
    /// the whole image) decoded on the CPU, packed at its own width.
    Emu(Vec<u8>),
}

/// What the workers need to begin the nvJPEG route's decoding themselves
/// (issue 5, items 2 and 4): the CUDA route's host phase (Huffman decoding)
/// runs on every worker thread instead of the batch thread alone, and its
/// device phase is queued as the sample reaches its batch, overlapping the
/// filling of the batch.
#[derive(Debug)]
pub(crate) struct WorkerDecode {
    /// A hardware engine is in use (the emulated device plays one):
    /// samples it takes, by their draw below the share, go to the batch
    /// thread compressed, to be decoded at an engine lane with their
    /// decode group.
    pub(crate) engine: bool,
    pub(crate) share: Arc<crate::decode::nvjpeg::Share>,
    pub(crate) kind: WorkerDecodeKind,
    /// Which files go to the batch thread compressed for gpufeed's scan
    /// kernels instead of a host phase here.
    pub(crate) kernels: KernelRule,
    /// Whether the lanes those files would go to still take them.
    pub(crate) live: LiveLanes,
}

/// The decode lanes the workers send files to, by kind (`None`: none
/// made). A lane stops after a panic (`cuda::lanes::Rescue`) and hands
/// back what reaches it, which the batch thread then decodes alone; once
/// every lane of a kind has stopped, the workers keep that kind's files
/// on their own routes (nvJPEG's host phase, or the CPU where nvJPEG
/// refuses), so that the pipeline degrades to its CUDA route at the
/// workers' pace instead of the batch thread's.
#[derive(Debug, Default)]
pub(crate) struct LiveLanes {
    engine: Option<crate::cuda::lanes::LaneSet>,
    /// The scan kernels' lanes for sequential files, then progressive.
    kernels: [Option<crate::cuda::lanes::LaneSet>; 2],
}

impl LiveLanes {
    /// The engine's lanes' flags, and the scan kernels' pool's, shared
    /// between the kinds as `kinds` says.
    pub(crate) fn of(
        engine: Option<crate::cuda::lanes::StopFlags>,
        kernels: Option<crate::cuda::lanes::StopFlags>,
        kinds: &super::KernelLanes,
    ) -> LiveLanes {
        use crate::cuda::lanes::LaneSet;
        let kind = |progressive| {
            let flags = kernels.clone()?;
            Some(LaneSet::new(flags, kinds.range(progressive)))
        };
        LiveLanes {
            engine: engine.map(LaneSet::all),
            kernels: [kind(false), kind(true)],
        }
    }

    fn live(set: &Option<crate::cuda::lanes::LaneSet>) -> bool {
        set.as_ref().is_none_or(|s| s.any_live())
    }
}

/// Which JPEGs gpufeed's scan kernels take (issue 16, item 3c): one rule
/// for the pipeline's workers and `decode-bench`, so that the benchmark's
/// decode-only rates are the pipeline's routes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KernelRule {
    /// Progressive files (`stage/cuda/prog_route.rs`).
    pub(crate) progressive: bool,
    /// Sequential files of the CUDA share, whatever their size up to
    /// `max_pixels` (under 1 MP their Huffman decoding is the CUDA route's
    /// CPU cost; from 1 MP nvJPEG's GPU Huffman decodes them, slowly, and
    /// timed out on the fuzz corpus; the split kernels make a large photo
    /// many threads' work), where the route has lanes.
    pub(crate) sequential: bool,
    /// Sequential images of more pixels skip the kernels: to the engine
    /// where it takes them, whatever the share, else the CUDA route
    /// (`PipelineBuilder::sequential_kernels_max_pixels`).
    pub(crate) max_pixels: u64,
    /// Device bytes a lane may hold for its files' buffers
    /// (`PipelineBuilder::kernel_memory_limit` over the lanes): a file
    /// whose buffers alone pass it stays on the worker's route, as one
    /// the plan refuses ([`WorkerDecode::plan`]).
    pub(crate) lane_bytes: usize,
}

impl KernelRule {
    /// No file to the kernels.
    pub(crate) const OFF: KernelRule = KernelRule {
        progressive: false,
        sequential: false,
        max_pixels: u64::MAX,
        lane_bytes: usize::MAX,
    };

    /// Whether an image of coding process `sof` and `pixels` pixels,
    /// routed to the engine or not (`to_engine`), goes to the kernels.
    pub(crate) fn takes(&self, sof: crate::jpeg::SofKind, to_engine: bool, pixels: u64) -> bool {
        use crate::jpeg::SofKind::{Baseline, Extended, Progressive};
        match sof {
            Progressive => self.progressive,
            Baseline | Extended => self.sequential && !to_engine && !self.too_large(sof, pixels),
            _ => false,
        }
    }

    /// A sequential image the sequential kernels would take but for its
    /// size: the engine takes it where it can, whatever the share.
    pub(crate) fn too_large(&self, sof: crate::jpeg::SofKind, pixels: u64) -> bool {
        use crate::jpeg::SofKind::{Baseline, Extended};
        self.sequential && matches!(sof, Baseline | Extended) && pixels > self.max_pixels
    }
}

/// What a worker's planner made of a file for the scan kernels.
#[derive(Debug)]
pub(crate) enum Planned {
    /// Its plan, for the lane.
    Plan(Box<crate::jpeg::scans::Plan>),
    /// The kernels do not take it (the plan refused it, its size is not
    /// the header's, or `gf_color` does not convert it): the worker's
    /// route takes it instead of the lane, which would hand it back to the
    /// batch thread (issue 16, item 1: the batch thread decodes nothing).
    Refused,
    /// `GPUFEED_PLAN_ON_WORKERS=0` (a diagnostic): the lane plans.
    NotTried,
}

#[derive(Debug)]
pub(crate) enum WorkerDecodeKind {
    Cuda(Arc<crate::decode::nvjpeg::DecoderPool>),
    Emu,
    /// No decoder pool: the batch thread decodes the CUDA route's images.
    Off,
}

impl WorkerDecode {
    /// The route of an image of coding process `sof` and `pixels` pixels
    /// whose header allows the engine or not (`engine_ok`) and whose draw
    /// is `draw`: decided here, once, with the share as it is now (it
    /// moves when steered). The engine also takes the sequential images
    /// too large for the scan kernels.
    pub(crate) fn route(
        &self,
        engine_ok: bool,
        draw: f64,
        sof: crate::jpeg::SofKind,
        pixels: u64,
    ) -> bool {
        let engine = self.share.route(self.engine, engine_ok, draw)
            || (self.engine && engine_ok && self.kernels.too_large(sof, pixels));
        engine && LiveLanes::live(&self.live.engine)
    }

    /// Whether an image of coding process `sof` and `pixels` pixels,
    /// routed to the engine or not (`to_engine`), goes to the scan
    /// kernels: by the rule, while a lane of its kind takes files.
    pub(crate) fn to_kernels(
        &self,
        sof: crate::jpeg::SofKind,
        to_engine: bool,
        pixels: u64,
    ) -> bool {
        let kind = usize::from(sof == crate::jpeg::SofKind::Progressive);
        self.kernels.takes(sof, to_engine, pixels) && LiveLanes::live(&self.live.kernels[kind])
    }

    /// The scan kernels' plan of `bytes`, a `size` image, for
    /// [`Jpeg::plan`], unless `GPUFEED_PLAN_ON_WORKERS=0`; refused where
    /// its buffers alone would pass a lane's `lane_bytes`
    /// (`prog_batch::Marks`: the lane would refuse it too).
    pub(crate) fn plan(
        bytes: &[u8],
        max_pixels: u64,
        size: (u32, u32),
        lane_bytes: usize,
    ) -> Planned {
        static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let on = *ON.get_or_init(|| std::env::var("GPUFEED_PLAN_ON_WORKERS").as_deref() != Ok("0"));
        if !on {
            return Planned::NotTried;
        }
        // The lanes' own test (`stage/cuda/prog_route.rs`, `stage/emu.rs`).
        match crate::jpeg::scans::plan(bytes, max_pixels) {
            Ok(p)
                if (p.width, p.height) == size
                    && crate::cuda::pixels::converts(&p)
                    && crate::cuda::prog_batch::Marks::held([
                        bytes.len(),
                        p.all_coefficients(),
                    ]) <= lane_bytes =>
            {
                Planned::Plan(Box::new(p))
            }
            _ => Planned::Refused,
        }
    }

    /// Whether [`start`](Self::start) decodes `j` into the caller's image
    /// buffer (the emulated device's stand-in does; nvJPEG's host phase
    /// writes its own buffers), which the caller then sizes first.
    pub(crate) fn decodes_into_image(&self, j: &Jpeg) -> bool {
        matches!(self.kind, WorkerDecodeKind::Emu) && !j.to_engine
    }

    /// Begin decoding `j` on this thread: what was staged, and how long
    /// the host phase itself took (not the wait for a decoder: the
    /// automatic share's measure of the CUDA route, which a pool's first
    /// decoders, made during the first batch, would inflate). `Ok(None)`:
    /// the batch thread decodes it (the engine's sample, or no decoder
    /// free in time). An error: nvJPEG refused it here, and the caller
    /// decodes it on the CPU, as the batch thread would.
    pub(crate) fn start(
        &self,
        j: &Jpeg,
        cpu: &mut crate::decode::CpuDecoder,
        img: &mut crate::decode::Image,
    ) -> crate::error::Result<Option<(Staged, std::time::Duration)>> {
        if j.to_engine || j.kernels {
            return Ok(None);
        }
        let roi = j.window();
        match &self.kind {
            WorkerDecodeKind::Cuda(pool) => {
                let Some(mut lease) = pool.take() else {
                    return Ok(None);
                };
                let t0 = std::time::Instant::now();
                lease.host(&j.bytes, (j.width, j.height), roi)?;
                Ok(Some((Staged::Cuda(lease), t0.elapsed())))
            }
            WorkerDecodeKind::Off => Ok(None),
            WorkerDecodeKind::Emu => {
                // As the decoupled decoder refuses it on CUDA
                // (`DecoupledDecoder::host`), so that the routes' counts
                // are the same.
                if !crate::jpeg::complete(&j.bytes) {
                    return Err(crate::error::Error::Device(
                        "an incomplete JPEG: decoded on the CPU".into(),
                    ));
                }
                let t0 = std::time::Instant::now();
                decode_on_cpu(&j.bytes, (j.width, j.height), cpu, img)
                    .map_err(|e| crate::error::Error::Device(e.to_string()))?;
                let whole = Roi {
                    x: 0,
                    y: 0,
                    w: j.width,
                    h: j.height,
                };
                let px = img.window_rows(roi.unwrap_or(whole)).flatten().copied();
                Ok(Some((Staged::Emu(px.collect()), t0.elapsed())))
            }
        }
    }
}

impl Jpeg {
    /// Arena bytes its decoded image takes.
    pub(super) fn need(&self) -> usize {
        (self.width as usize * self.height as usize * 3).next_multiple_of(256)
    }

    /// The window a crop-region decode asks for (issue 5, item 3), when it
    /// is smaller than the image: the draws' bounding box, padded so that
    /// its pixels decode as in a full decode
    /// ([`crate::decode::nvjpeg::padded_window`]). None for progressive
    /// images ([`crate::decode::nvjpeg::takes_window`]).
    pub(super) fn window(&self) -> Option<Roi> {
        if !crate::decode::nvjpeg::takes_window(self.progressive) {
            return None;
        }
        crop_window(&self.params, (self.width, self.height), self.mcu)
    }
}

/// The window of an image of `size` (MCUs of `mcu`) that the draws
/// `params` read, padded so that its pixels decode as in a full decode
/// ([`crate::decode::nvjpeg::padded_window`]); `None` when it would be the
/// whole image or the draws read nothing. The nvJPEG routes' and the CPU
/// route's (libjpeg-turbo) crop-region decodes both ask for it.
pub(crate) fn crop_window(
    params: &[SampleParams],
    size: (u32, u32),
    mcu: (u32, u32),
) -> Option<Roi> {
    let want = bounds(params);
    if want.w == 0 || want.h == 0 {
        return None;
    }
    let roi = crate::decode::nvjpeg::padded_window(want, size, mcu);
    ((roi.w, roi.h) != size).then_some(roi)
}

/// A decoded nvJPEG-route image in the arena, waiting for its batch
/// position.
#[derive(Debug)]
pub(crate) struct Placed {
    pub(super) src: u64,
    pub(super) width: u32,
    pub(super) height: u32,
    pub(super) params: Vec<SampleParams>,
}

/// Decode `bytes` on the CPU into `img`, which must come out at `size`
/// (the header's, which the arena space was sized for): the route for
/// what nvJPEG refuses, the emulated device's engine and its workers'
/// stand-in for the CUDA route.
pub(crate) fn decode_on_cpu(
    bytes: &[u8],
    size: (u32, u32),
    cpu: &mut crate::decode::CpuDecoder,
    img: &mut crate::decode::Image,
) -> std::result::Result<(), crate::error::SampleError> {
    let h = crate::jpeg::parse_header(bytes, u64::MAX)?;
    cpu.decode(bytes, &h, img)?;
    if (img.width, img.height) != size {
        return Err(crate::error::SampleError::Corrupt(format!(
            "decoded {}x{}, header says {}x{}",
            img.width, img.height, size.0, size.1
        )));
    }
    Ok(())
}
