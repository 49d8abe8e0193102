//! The device stage's nvJPEG route (issue 5): samples that arrive
//! compressed or with their host phase done, kept tentative until decoded
//! so that batch positions follow sampler order.

use super::{DeviceStage, Engine, JpegRoute, Slot, SlotMem};
use crate::cuda::stage::{JpegJob, JpegOutcome, RouteCounts};
use crate::error::{Error, Result, SampleError};
use crate::pipeline::builder::Config;
use crate::pipeline::handoff::{Jpeg, Placed, Staged, shift};

impl DeviceStage {
    /// Whether `j` fits the slot's arena without a resolve or flush first.
    pub(crate) fn jpeg_fits(&self, slot: &Slot, j: &Jpeg) -> bool {
        slot.arena_used + j.need() <= self.arena
    }

    /// Add an nvJPEG-route sample as tentative; one a worker began is
    /// finished now (its device phase queued into the arena, overlapping
    /// the rest of the batch). When the arena is full the caller has
    /// resolved the tentative ones; what is staged is launched and the
    /// arena reused (stream order keeps the kernel's reads before the next
    /// decode's writes). Returns the launches made.
    pub(crate) fn put_jpeg(&self, cfg: &Config, slot: &mut Slot, mut j: Jpeg) -> Result<usize> {
        let mut launches = 0;
        if !self.jpeg_fits(slot, &j) {
            if !slot.tentative.is_empty() {
                return Err(Error::Device(
                    "arena full with undecoded samples (stage bug)".into(),
                ));
            }
            launches = self.flush(cfg, slot, None, None)?;
            slot.used = 0;
            slot.arena_used = 0;
        }
        let at = slot.arena_used;
        slot.arena_used += j.need();
        // A failed device phase leaves the sample to `resolve`'s routes.
        let done = match j.staged.take() {
            None => None,
            Some(staged) => {
                let roi = j.window();
                self.finish_staged(slot, at, &j, roi, staged)
                    .ok()
                    .map(|()| roi)
            }
        };
        slot.tentative.push((j, at, done));
        Ok(launches)
    }

    /// Queue the rest of a worker's decode of `j` into the arena at `at`.
    fn finish_staged(
        &self,
        slot: &mut Slot,
        at: usize,
        j: &Jpeg,
        roi: Option<crate::decode::nvjpeg::Roi>,
        staged: Staged,
    ) -> Result<()> {
        match (&self.engine, &mut slot.mem, staged) {
            (Engine::Cuda(e), SlotMem::Cuda(c), Staged::Cuda(lease)) => {
                e.decode_staged(c, at, (j.width, j.height), roi, lease)
            }
            #[cfg(feature = "kernel-emu")]
            (Engine::Emu, SlotMem::Emu(_), Staged::Emu(px)) => {
                slot.emu_arena
                    .get_mut(at..at + px.len())
                    .ok_or_else(|| Error::Device("staged image outside the arena".into()))?
                    .copy_from_slice(&px);
                Ok(())
            }
            #[allow(unreachable_patterns)]
            _ => Err(Error::Device("staged decode of another engine".into())),
        }
    }

    /// Decode the tentative samples, in the order they were put; each
    /// comes back placed in the arena (ready for [`place`](Self::place)) or
    /// with the error that stopped it on every route.
    pub(crate) fn resolve(
        &self,
        slot: &mut Slot,
    ) -> Result<(Vec<std::result::Result<Placed, SampleError>>, RouteCounts)> {
        let pending = std::mem::take(&mut slot.tentative);
        let mut counts = RouteCounts::default();
        if pending.is_empty() {
            return Ok((Vec::new(), counts));
        }
        let Some(route) = &self.jpeg else {
            return Err(Error::Device(
                "tentative samples without a JPEG route".into(),
            ));
        };
        let mut route = route.lock().unwrap_or_else(|p| p.into_inner());
        let mut geometry = Vec::with_capacity(pending.len());
        let mut jobs = Vec::with_capacity(pending.len());
        // Per sample: decoded by a worker and `put_jpeg` (its window), or
        // the next of `jobs`.
        let mut begun = Vec::with_capacity(pending.len());
        for (j, at, done) in pending {
            let roi = j.window();
            geometry.push((j.width, j.height, at, j.params));
            begun.push(done);
            if done.is_some() {
                counts.cuda += 1;
                continue;
            }
            jobs.push(JpegJob {
                bytes: j.bytes,
                width: j.width,
                height: j.height,
                at,
                roi,
                route_draw: j.route_draw,
                engine_ok: j.engine_ok,
                mcu: j.mcu,
            });
        }
        let outcome: Vec<JpegOutcome> = match (&self.engine, &mut slot.mem, &mut *route) {
            _ if jobs.is_empty() => Vec::new(),
            (Engine::Cuda(e), SlotMem::Cuda(c), JpegRoute::Cuda(r)) => {
                e.decode_jpegs(c, jobs, r, &mut counts)?
            }
            #[cfg(feature = "kernel-emu")]
            (Engine::Emu, SlotMem::Emu(_), JpegRoute::Emu(cpu)) => {
                // Every image takes the crop-region route here, as on a
                // hardware engine with ROI support: the decoded window is
                // packed at its own width, and placement must shift the
                // draws to it. CI checks that bookkeeping bit for bit.
                let mut img = crate::decode::Image::default();
                let mut out = Vec::with_capacity(jobs.len());
                for j in &jobs {
                    out.push(j.decode_on_cpu(cpu, &mut img).map(|()| {
                        let arena = &mut slot.emu_arena[j.at..];
                        match j.roi {
                            None => arena[..img.data.len()].copy_from_slice(&img.data),
                            Some(r) => {
                                let row = r.w as usize * 3;
                                for (y, src) in img.window_rows(r).enumerate() {
                                    arena[y * row..][..row].copy_from_slice(src);
                                }
                            }
                        }
                        counts.cpu += 1;
                        j.roi
                    }));
                }
                out
            }
            #[allow(unreachable_patterns)]
            _ => return Err(Error::Device("JPEG route of another engine".into())),
        };
        let base = self.arena_base(slot);
        let mut outcome = outcome.into_iter();
        let placed = geometry
            .into_iter()
            .zip(begun)
            .map(|((w, h, at, mut params), begun)| {
                let decoded = match begun {
                    Some(roi) => Ok(roi),
                    None => outcome.next().ok_or_else(|| {
                        SampleError::Panic("fewer outcomes than jobs (stage bug)".into())
                    })?,
                };
                let (width, height) = match decoded? {
                    None => (w, h),
                    Some(r) => {
                        shift(&mut params, r.x, r.y);
                        (r.w, r.h)
                    }
                };
                Ok(Placed {
                    src: base + at as u64,
                    width,
                    height,
                    params,
                })
            })
            .collect();
        Ok((placed, counts))
    }
}
