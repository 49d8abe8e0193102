//! The hardware engine's lanes (issue 16, items 1 and 2): threads of
//! their own (`cuda/lanes.rs`), each with an nvJPEG engine decoder and a
//! stream, that run a call's support queries, the decode call and the wait
//! for its completion, and after a panic wait for the stream and hand the
//! call's images back (`lanes::Rescue`). The route that feeds them and
//! collects their answers is `nvroute.rs`.

use std::sync::Mutex;
use std::time::Duration;

use super::*;
use crate::cuda::timeline::GpuTimeline;
use crate::decode::nvjpeg::{BatchedDecoder, Delivery, Dest, Relay, Roi};

/// Per engine lane: its decoder's state (re)initializations and decode
/// calls, with the time each took.
pub(super) type LaneTimes = Arc<Mutex<Vec<[(u64, Duration); 2]>>>;

/// One image for an engine lane: its bytes, where its first pixel goes,
/// its size (the width is the pitch of a whole-image decode) and the
/// window the engine may decode instead of the whole image.
pub(super) struct EngineJob {
    pub(super) bytes: crate::reader::PooledBytes,
    pub(super) dest: u64,
    pub(super) width: u32,
    pub(super) height: u32,
    pub(super) window: Option<Roi>,
    /// The order the engine likes its images in: by chroma subsampling
    /// (the MCU size), then by size (issue 16, item 2; DALI sorts its
    /// hardware batches the same way).
    pub(super) order: ((u32, u32), u64),
}

/// A lane's answer: the bytes back, and per job `Some(window)` where the
/// engine decoded it (`Some(None)`: the whole image) and its writes are
/// complete, `None` where it did not take it.
pub(super) struct EngineReply {
    pub(super) bytes: Vec<crate::reader::PooledBytes>,
    pub(super) taken: Vec<Option<Option<Roi>>>,
}

/// The engine lanes' context: the arenas' (the primary context), or one of
/// their own (`PipelineBuilder::engine_context`; `relay.rs` says why).
pub(crate) struct EngineLanes {
    /// Lanes, one per batch in flight; 0: none.
    pub(crate) count: usize,
    pub(crate) own_context: bool,
}

/// A lane call's GPU span on the timeline: an event recorded before the
/// call, and the lane stream's track name.
type GpuSpan = (CudaEvent, String);

/// An engine lane's state.
pub(super) struct Lane {
    dec: BatchedDecoder,
    /// The lane's context: `ctx` of `NvRoute::new`, or with a relay the
    /// engine's own.
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    /// Recorded after each decode call; the lane waits on it (blocking).
    done: CudaEvent,
    /// This lane's entry of the route's engine timings.
    stats: LaneTimes,
    index: usize,
    /// With a timeline: it, and unless the lane has a context of its own
    /// (the timeline's events are the arenas' context's), an event recorded
    /// before each call and the lane stream's track name.
    gpu: Option<(Arc<GpuTimeline>, Option<GpuSpan>)>,
    /// Calls so far (`cuda::lanes::panics_now`).
    calls: usize,
    /// In a context of its own: the engine's output slab there, copied to
    /// the arena after each call.
    relay: Option<Relay>,
}

impl Drop for Lane {
    fn drop(&mut self) {
        // nvJPEG's hardware handle and state are destroyed in the context
        // they were made in (the fields drop after this); a failure leaves
        // whatever is current, as before.
        let _ = self.ctx.bind_to_thread();
    }
}

impl Lane {
    /// Lane `index` around `dec`, with a stream of its own on `ctx`; with
    /// a `relay`, `ctx` is the engine's own context and the relay delivers
    /// its images to the arenas'.
    pub(super) fn new(
        dec: BatchedDecoder,
        ctx: &Arc<CudaContext>,
        stats: &LaneTimes,
        index: usize,
        timeline: Option<&Arc<GpuTimeline>>,
        relay: Option<Relay>,
    ) -> Result<Lane> {
        let gpu = match timeline {
            Some(t) if relay.is_none() => Some((
                t.clone(),
                Some((
                    t.event().map_err(Error::cuda("event"))?,
                    format!("GPU: engine lane {index}"),
                )),
            )),
            Some(t) => Some((t.clone(), None)),
            None => None,
        };
        Ok(Lane {
            dec,
            ctx: ctx.clone(),
            stream: engine_stream(ctx)?,
            done: crate::cuda::host_wait_event(ctx).map_err(Error::cuda("event"))?,
            stats: stats.clone(),
            index,
            gpu,
            calls: 0,
            relay,
        })
    }
}

/// A lane's stream: of the device's greatest priority with
/// `GPUFEED_ENGINE_STREAM_PRIORITY=1`, else of the default one. A
/// diagnostic (issue 16, item 3): at an engine share of 0.5 on an H200
/// (2026-11-27) the engine's calls took about twice as long per image as
/// at share 1, while the CUDA route's device phases and the batch kernels
/// ran on the stage's stream; whether the engine calls' own kernels wait
/// behind those is what a greater priority would show. Where the priority
/// cannot be had, say so and use a plain stream.
fn engine_stream(ctx: &Arc<CudaContext>) -> Result<Arc<CudaStream>> {
    if std::env::var("GPUFEED_ENGINE_STREAM_PRIORITY").as_deref() == Ok("1") {
        let made = ctx
            .bind_to_thread()
            .and_then(|()| cudarc::driver::result::stream::get_priority_range())
            .and_then(|(_, greatest)| ctx.new_stream_with_priority(greatest));
        match made {
            Ok(s) => return Ok(s),
            // A diagnostic's own report, as GPUFEED_CUDA_BLOCKING_SYNC's.
            Err(e) => eprintln!("gpufeed: GPUFEED_ENGINE_STREAM_PRIORITY: {e:?}"),
        }
    }
    ctx.new_stream().map_err(Error::cuda("engine stream"))
}

/// The timeline's names for a lane call's host parts (issue 16, item 4:
/// the lanes' ~0.1 CPU-ms per image is nvJPEG's host work, and these say
/// whether the support queries or the batched call spend it); the rest of
/// a call is the blocking wait for its completion.
const SUPPORT_SPAN: &str = "engine: support queries";
const SUBMIT_SPAN: &str = "engine: batched call (host)";
/// An engine lane's making, on the build track: its hardware handle,
/// state and buffers for a call.
pub(super) const LANE_SPAN: &str = "device: an engine lane (handle, state)";

impl Lane {
    /// With a timeline, a span on this lane's thread from `start` to now.
    fn host_span(&self, name: &'static str, start: std::time::Instant) {
        if let Some((t, _)) = &self.gpu {
            (t.observe())(crate::cuda::timeline::Seen {
                track: None,
                name,
                start,
                end: std::time::Instant::now(),
            });
        }
    }
}

/// Support queries, one decode call and the wait for its completion, on
/// the lane's thread (issue 16, items 1 and 3b).
pub(super) fn run_lane(lane: &mut Lane, jobs: &mut [EngineJob]) -> EngineReply {
    let mut taken: Vec<Option<Option<Roi>>> = vec![None; jobs.len()];
    let fail = crate::cuda::lanes::panics_now(&mut lane.calls);
    if lane.ctx.bind_to_thread().is_ok() {
        let mut ks = Vec::with_capacity(jobs.len());
        let mut rois = Vec::with_capacity(jobs.len());
        let queried = std::time::Instant::now();
        for (k, j) in jobs.iter().enumerate() {
            if let Some(w) = lane.dec.hardware_support(&j.bytes, j.window) {
                taken[k] = Some(w);
                ks.push(k);
                rois.push(w);
            }
        }
        lane.host_span(SUPPORT_SPAN, queried);
        if !ks.is_empty() {
            let mut by_order: Vec<usize> = (0..ks.len()).collect();
            by_order.sort_by_key(|&i| jobs[ks[i]].order);
            let ks: Vec<usize> = by_order.iter().map(|&i| ks[i]).collect();
            let rois: Vec<Option<Roi>> = by_order.iter().map(|&i| rois[i]).collect();
            let data: Vec<&[u8]> = ks.iter().map(|&k| &jobs[k].bytes[..]).collect();
            if let Some((_, Some((began, _)))) = &lane.gpu {
                // Only the timeline reads it: a failure loses a span.
                let _ = began.record(&lane.stream);
            }
            let called = std::time::Instant::now();
            let stream = lane.stream.cu_stream();
            // SAFETY: each destination lies in a decode arena with room for
            // the whole image (so for any window of it; checked by
            // `submit_jpegs`), which the batch thread keeps until this
            // reply is in (`Submitted` waits for it on drop), or in the
            // relay's slab, which no earlier call still uses (each ends in
            // the wait below, or in `rescue`'s); `data` lives in `jobs`
            // until the wait below is over (after a panic, until `rescue`'s
            // wait: the lane pool keeps `jobs` through the unwinding); the
            // lane's context is bound to this thread above, `stream` belongs
            // to it and so does the relay's slab.
            let r = unsafe { targets(lane, jobs, &ks, &rois) }.and_then(|(dst, copies)| {
                // SAFETY: as above.
                unsafe { lane.dec.decode(&data, &dst, &rois, stream.cast()) }?;
                match &lane.relay {
                    // SAFETY: as above; the copies follow the decode on the
                    // same stream.
                    Some(relay) => unsafe { relay.deliver(&copies, stream) },
                    None => Ok(()),
                }
            });
            lane.host_span(SUBMIT_SPAN, called);
            assert!(
                !fail,
                "GPUFEED_TEST_LANE_PANIC: an engine call, its decode queued"
            );
            let r = r
                .and_then(|()| {
                    lane.done
                        .record(&lane.stream)
                        .map_err(Error::cuda("record"))
                })
                .and_then(|()| {
                    lane.done
                        .synchronize()
                        .map_err(Error::cuda("wait for the engine"))
                });
            if let (Ok(()), Some((t, Some((began, track))))) = (&r, &lane.gpu) {
                t.span(track, "engine decode", began, &lane.done);
            }
            if r.is_err() {
                // What the call queued must finish before these images are
                // decoded elsewhere into the same place.
                let _ = lane.stream.synchronize();
                for &k in &ks {
                    taken[k] = None;
                }
            }
        }
        if let Ok(mut s) = lane.stats.lock() {
            s[lane.index] = [lane.dec.inits(), lane.dec.calls()];
        }
    }
    EngineReply {
        bytes: jobs
            .iter_mut()
            .map(|j| std::mem::take(&mut j.bytes))
            .collect(),
        taken,
    }
}

/// Where the engine writes the images `ks` of `jobs` (windows `rois`):
/// their places in the arena, or with a relay places in its slab, and then
/// the copies from there to the arena (`(to, from, bytes)`).
///
/// # Safety
///
/// As for `Relay::stage`: no queued work still uses the relay's slab.
unsafe fn targets(
    lane: &mut Lane,
    jobs: &[EngineJob],
    ks: &[usize],
    rois: &[Option<Roi>],
) -> Result<(Vec<Dest>, Vec<Delivery>)> {
    let (dst, bytes) = in_arena(jobs, ks, rois);
    let Some(relay) = &mut lane.relay else {
        return Ok((dst, Vec::new()));
    };
    // SAFETY: the caller's contract.
    let at = unsafe { relay.stage(&bytes) }?;
    Ok(relayed(&dst, &bytes, &at))
}

/// The arena places of the images `ks` of `jobs` decoded as `rois` say
/// (a window is packed at its own width), and their bytes.
fn in_arena(jobs: &[EngineJob], ks: &[usize], rois: &[Option<Roi>]) -> (Vec<Dest>, Vec<usize>) {
    ks.iter()
        .zip(rois)
        .map(|(&k, r)| {
            let (w, h) = r.map_or((jobs[k].width, jobs[k].height), |r| (r.w, r.h));
            let pitch = w as usize * 3;
            let dest = Dest {
                ptr: jobs[k].dest,
                pitch,
            };
            (dest, pitch * h as usize)
        })
        .unzip()
}

/// The engine's places in the relay's slab (`at`, one per image) for the
/// arena places `dst` of `bytes` each, and the copies to the arena.
fn relayed(dst: &[Dest], bytes: &[usize], at: &[u64]) -> (Vec<Dest>, Vec<Delivery>) {
    dst.iter()
        .zip(bytes)
        .zip(at)
        .map(|((d, &n), &from)| {
            let slab = Dest {
                ptr: from,
                pitch: d.pitch,
            };
            (slab, (d.ptr, from, n))
        })
        .unzip()
}

/// After a lane's call panicked: its stream's work done, nothing taken, so
/// that the batch thread decodes the call's images with CUDA or the CPU
/// (`complete_jpegs`), as it does those the engine refuses.
pub(super) fn rescue() -> crate::cuda::lanes::Rescue<Lane, Vec<EngineJob>, EngineReply> {
    crate::cuda::lanes::Rescue {
        settle: |lane| lane.ctx.bind_to_thread().is_ok() && lane.stream.synchronize().is_ok(),
        decline: Arc::new(|jobs: Vec<EngineJob>| EngineReply {
            taken: vec![None; jobs.len()],
            bytes: jobs.into_iter().map(|j| j.bytes).collect(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(dest: u64, width: u32, height: u32) -> EngineJob {
        EngineJob {
            bytes: Default::default(),
            dest,
            width,
            height,
            window: None,
            order: ((16, 16), 0),
        }
    }

    #[test]
    fn relayed_images_land_where_the_arena_would_have_them() {
        // A whole image and a window, taken in the lane's order (1, 0).
        let jobs = [job(4096, 500, 375), job(1 << 20, 640, 480)];
        let window = Roi {
            x: 16,
            y: 32,
            w: 224,
            h: 200,
        };
        let (ks, rois) = ([1, 0], [Some(window), None]);
        let (dst, bytes) = in_arena(&jobs, &ks, &rois);
        assert_eq!(dst[0].ptr, 1 << 20);
        assert_eq!((dst[0].pitch, bytes[0]), (224 * 3, 224 * 3 * 200));
        assert_eq!((dst[1].ptr, dst[1].pitch), (4096, 500 * 3));
        assert_eq!(bytes[1], 500 * 3 * 375);
        // The slab's places, as `Relay::stage` gives them.
        let at = [
            0x7000_0000,
            0x7000_0000 + bytes[0].next_multiple_of(256) as u64,
        ];
        let (slab, copies) = relayed(&dst, &bytes, &at);
        for i in 0..2 {
            // The engine writes at the slab's place with the arena's pitch,
            // and the copy takes exactly those bytes to the arena's place.
            assert_eq!((slab[i].ptr, slab[i].pitch), (at[i], dst[i].pitch));
            assert_eq!(copies[i], (dst[i].ptr, at[i], bytes[i]));
        }
        assert!(at[0] + bytes[0] as u64 <= at[1], "no overlap in the slab");
    }
}
