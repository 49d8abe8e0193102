//! The nvJPEG side of the device stage (issue 5): the jobs of a batch's
//! nvJPEG-route images and the routes that decode them into the slot's
//! arena (hardware engine, CUDA, CPU).

use super::*;

/// One compressed image for nvJPEG: where in the slot's arena it goes.
#[derive(Debug)]
pub(crate) struct JpegJob {
    pub(crate) bytes: Vec<u8>,
    pub(crate) width: u32,
    pub(crate) height: u32,
    /// Byte offset in the arena, which has room for the whole image.
    pub(crate) at: usize,
    /// The part of the image the crops read, when smaller than the image:
    /// routes that can decode just this window do.
    pub(crate) roi: Option<crate::decode::nvjpeg::Roi>,
    /// Uniform in `[0, 1)`: the hardware engine takes the job (if it can)
    /// when this is below the share.
    pub(crate) route_draw: f64,
    /// The header allows the hardware engine (`nvjpeg::hardware_takes`).
    pub(crate) engine_ok: bool,
    /// The image's MCU size (`nvjpeg::mcu_size`).
    pub(crate) mcu: (u32, u32),
}

/// How one job came out: decoded (the whole image, or only the window
/// given, packed at its own width), or why it failed on every route.
pub(crate) type JpegOutcome =
    std::result::Result<Option<crate::decode::nvjpeg::Roi>, crate::error::SampleError>;

impl JpegJob {
    /// Decode on the CPU into `img`, which must come out at the size the
    /// job's arena space was sized for (the header's): the route for what
    /// nvJPEG refuses, and the emulated device's only route.
    pub(crate) fn decode_on_cpu(
        &self,
        cpu: &mut crate::decode::CpuDecoder,
        img: &mut crate::decode::Image,
    ) -> std::result::Result<(), crate::error::SampleError> {
        decode_on_cpu(&self.bytes, (self.width, self.height), cpu, img)
    }
}

/// Decode `bytes` on the CPU into `img`, which must come out at `size`
/// (the header's, which the arena space was sized for).
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

/// nvJPEG decoders of a pipeline's batch thread: the hardware engine when
/// the GPU has one, CUDA (decoupled API) for what the workers did not
/// start, and the CPU decoder for what both refuse.
pub(crate) struct NvRoute {
    hw: Option<crate::decode::nvjpeg::BatchedDecoder>,
    /// The batch thread's own decoupled decoder: images drawn for the
    /// engine that it refused, or whose engine batch failed, and images
    /// the workers could not start (no decoder free in time).
    cuda: crate::decode::nvjpeg::DecoupledDecoder,
    cpu: crate::decode::CpuDecoder,
    share: f32,
    /// The hardware engine's stream (made on first use), so that its batch
    /// and the CUDA decodes overlap.
    hw_stream: Option<Arc<CudaStream>>,
}

impl std::fmt::Debug for NvRoute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvRoute")
            .field("hardware", &self.hw.is_some())
            .field("share", &self.share)
            .finish_non_exhaustive()
    }
}

/// Per-route counts of one resolve, for the stats.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct RouteCounts {
    pub(crate) hardware: u64,
    pub(crate) cuda: u64,
    pub(crate) cpu: u64,
}

impl NvRoute {
    /// nvJPEG's decoders on `engine`'s device; `share` of the images the
    /// hardware engine supports go to it. An error when nvJPEG cannot be
    /// used at all.
    pub(crate) fn new(
        engine: &CudaEngine,
        share: f32,
        batch: usize,
        cpu: crate::decode::CpuDecoder,
    ) -> Result<NvRoute> {
        use crate::decode::nvjpeg::{BatchedDecoder, DecoupledDecoder};
        Ok(NvRoute {
            // No engine (or no nvJPEG support for it) is not an error.
            hw: BatchedDecoder::new(true, batch).ok(),
            cuda: DecoupledDecoder::new(&engine.k.ctx, 2)?,
            cpu,
            share,
            hw_stream: None,
        })
    }

    pub(crate) fn has_hardware(&self) -> bool {
        self.hw.is_some()
    }

    pub(crate) fn share(&self) -> f32 {
        self.share
    }

    /// The engine's batched-state (re)initializations and their time, and
    /// its decode calls and the time spent in them (initializations
    /// excluded).
    pub(crate) fn engine_time(&self) -> [(u64, std::time::Duration); 2] {
        self.hw
            .as_ref()
            .map(|h| [h.inits(), h.calls()])
            .unwrap_or_default()
    }
}

impl CudaEngine {
    /// Decode `jobs` into the slot's arena: the hardware engine (its share
    /// of what it supports, only the job's window where it can) on its own
    /// thread and stream, the rest one by one with the decoupled CUDA
    /// decoder (the job's window) beside it; then CUDA for a hardware batch
    /// that failed, then the CPU decoder (uploaded). One outcome per job.
    ///
    /// In a pipeline the workers have begun most CUDA-route images already
    /// ([`decode_staged`](Self::decode_staged)); what reaches CUDA here is
    /// what the engine refused and what no worker decoder was free for.
    pub(crate) fn decode_jpegs(
        &self,
        slot: &mut CudaSlot,
        jobs: Vec<JpegJob>,
        route: &mut NvRoute,
        counts: &mut RouteCounts,
    ) -> Result<Vec<JpegOutcome>> {
        use crate::decode::nvjpeg::{BatchedDecoder, Dest, Roi};
        let s = &self.k.stream;
        self.k.ctx.bind_to_thread().map_err(drv("bind context"))?;
        let base = {
            let (p, _record) = slot.arena.device_ptr_mut(s);
            p
        };
        let dest = |j: &JpegJob, roi: Option<Roi>| Dest {
            ptr: base + j.at as u64,
            pitch: roi.map_or(j.width, |r| r.w) as usize * 3,
        };
        for j in &jobs {
            assert!(j.at + j.width as usize * j.height as usize * 3 <= slot.arena.len());
        }
        // Per job: the window the hardware engine decodes (None: whole).
        let mut windows: Vec<Option<Roi>> = vec![None; jobs.len()];
        let (mut to_hw, mut to_cuda) = (Vec::new(), Vec::new());
        for (k, j) in jobs.iter().enumerate() {
            // The draw first: an image bound for CUDA skips the engine's
            // header parse and support query.
            let drawn = j.engine_ok && j.route_draw < f64::from(route.share);
            let support = route.hw.as_mut().filter(|_| drawn).and_then(|hw| {
                let size = (j.width, j.height);
                let roi = j
                    .roi
                    .filter(|r| crate::decode::nvjpeg::engine_takes_window(*r, size, j.mcu));
                hw.hardware_support(&j.bytes, roi)
            });
            if support.is_some() {
                windows[k] = support.flatten();
                to_hw.push(k);
            } else {
                to_cuda.push(k);
            }
        }
        let ctx = &self.k.ctx;
        let run_hw =
            |dec: &mut BatchedDecoder, ks: &[usize], rois: &[Option<Roi>], on: &CudaStream| {
                let data: Vec<&[u8]> = ks.iter().map(|&k| jobs[k].bytes.as_slice()).collect();
                let dst: Vec<Dest> = ks
                    .iter()
                    .zip(rois)
                    .map(|(&k, &r)| dest(&jobs[k], r))
                    .collect();
                ctx.bind_to_thread().map_err(drv("bind context"))?;
                // SAFETY: each destination is inside the arena (asserted
                // above: the job's space holds the whole image, so also any
                // window of it), which lives in the slot until `ready`
                // completes; the compressed bytes move into `slot.jpegs` below
                // and stay there until then too; the context was bound to this
                // thread just above.
                unsafe { dec.decode(&data, &dst, rois, on.cu_stream().cast()) }
            };
        // One at a time: the jobs that failed go on to the CPU.
        let run_cuda = |dec: &mut crate::decode::nvjpeg::DecoupledDecoder, ks: &[usize]| {
            let mut failed = Vec::new();
            for &k in ks {
                let j = &jobs[k];
                let pixels = u64::from(j.width) * u64::from(j.height);
                dec.host(&j.bytes, pixels, j.roi)
                    .and_then(|()| {
                        // SAFETY: the destination (the job's window, or the
                        // whole image) is inside the arena (asserted above),
                        // which lives until `ready` completes; `host` bound
                        // the decoder's context, `s`'s, to this thread; every
                        // device phase of this decoder is on `s`.
                        unsafe { dec.device(dest(j, j.roi), s) }
                    })
                    .unwrap_or_else(|_| failed.push(k));
            }
            failed
        };
        let mut result: Vec<JpegOutcome> = jobs.iter().map(|j| Ok(j.roi)).collect();
        let NvRoute {
            hw,
            cuda,
            cpu,
            hw_stream,
            ..
        } = route;
        let (hw_done, cuda_failed) = match hw.as_mut().filter(|_| !to_hw.is_empty()) {
            None => (None, run_cuda(cuda, &to_cuda)),
            Some(hw) => {
                let hs = match hw_stream {
                    Some(h) => h.clone(),
                    None => hw_stream
                        .insert(s.fork().map_err(drv("hardware stream"))?)
                        .clone(),
                };
                // The engine's writes go after what `s` has queued (the
                // previous kernel's reads of this arena), and `s` goes on
                // only once they are done.
                hs.join(s).map_err(drv("hardware stream wait"))?;
                let rois: Vec<Option<Roi>> = to_hw.iter().map(|&k| windows[k]).collect();
                let (hw_done, cuda_failed) = std::thread::scope(|sc| {
                    let engine = sc.spawn(|| run_hw(hw, &to_hw, &rois, &hs));
                    let cuda_failed = run_cuda(cuda, &to_cuda);
                    let hw_done = engine.join().unwrap_or_else(|_| {
                        Err(Error::Device("hardware decode thread panicked".into()))
                    });
                    (hw_done, cuda_failed)
                });
                ctx.bind_to_thread().map_err(drv("bind context"))?;
                s.join(&hs).map_err(drv("hardware stream join"))?;
                (Some(hw_done), cuda_failed)
            }
        };
        counts.cuda += (to_cuda.len() - cuda_failed.len()) as u64;
        let mut retry = cuda_failed;
        match hw_done {
            Some(Ok(())) => {
                counts.hardware += to_hw.len() as u64;
                for &k in &to_hw {
                    result[k] = Ok(windows[k]);
                }
            }
            // On CUDA instead (the job's window).
            Some(Err(_)) => {
                let failed = run_cuda(cuda, &to_hw);
                counts.cuda += (to_hw.len() - failed.len()) as u64;
                retry.extend(failed);
            }
            None => {}
        }
        for k in retry {
            // The CPU decoder, uploaded into the same place as a whole
            // image: the kernel cannot tell the routes apart.
            let j = &jobs[k];
            let mut img = crate::decode::Image::default();
            match j.decode_on_cpu(cpu, &mut img) {
                Ok(()) => {
                    s.memcpy_htod(
                        img.data.as_slice(),
                        &mut slot.arena.slice_mut(j.at..j.at + img.data.len()),
                    )
                    .map_err(drv("upload CPU-decoded image"))?;
                    counts.cpu += 1;
                    result[k] = Ok(None);
                }
                Err(e) => result[k] = Err(e),
            }
        }
        slot.jpegs.extend(jobs.into_iter().map(|j| j.bytes));
        Ok(result)
    }

    /// Finish an image whose host phase a worker ran: queue its copy and
    /// device phase on the stage's stream, into the arena at `at` (the
    /// window `roi` packed at its own width, or the whole `width` ×
    /// `height` image). The lease goes back to its pool when dropped, after
    /// this returns.
    pub(crate) fn decode_staged(
        &self,
        slot: &mut CudaSlot,
        at: usize,
        (width, height): (u32, u32),
        roi: Option<crate::decode::nvjpeg::Roi>,
        mut lease: crate::decode::nvjpeg::Lease,
    ) -> Result<()> {
        let s = &self.k.stream;
        if at + width as usize * height as usize * 3 > slot.arena.len() {
            return Err(Error::Device(
                "staged image outside the arena (stage bug)".into(),
            ));
        }
        let base = {
            let (p, _record) = slot.arena.device_ptr_mut(s);
            p
        };
        let dest = crate::decode::nvjpeg::Dest {
            ptr: base + at as u64,
            pitch: roi.map_or(width, |r| r.w) as usize * 3,
        };
        self.k.ctx.bind_to_thread().map_err(drv("bind context"))?;
        // SAFETY: the destination (the window, or the whole image) lies in
        // the arena (checked above), which lives in the slot until `ready`
        // completes; the context is `s`'s, bound just above; every device
        // phase of a pooled decoder is queued on `s`, in order.
        unsafe { lease.device(dest, s) }
    }

    /// Device address of arena byte 0.
    pub(crate) fn arena_base(&self, slot: &CudaSlot) -> u64 {
        let (ptr, _record) = slot.arena.device_ptr(&self.k.stream);
        ptr
    }
}
