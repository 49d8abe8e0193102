//! What the pipeline's timeline hears from below `pipeline/` (issue 16,
//! item 6): host spans of the device stage's helper threads, and GPU spans
//! timed with CUDA events, placed on the host's clock.
//!
//! CUDA events give GPU timestamps only relative to each other
//! (`cuEventElapsedTime`). [`GpuTimeline`] ties them to the host: it
//! records an origin event on a stream of its own with nothing queued, so
//! the event fires at once, and notes `Instant::now()` when the wait for
//! it returns. An event's host time is then that instant plus its elapsed
//! time from the origin. The tie is good to the latency of that wait (a few
//! microseconds) and is renewed every [`RECALIBRATE`], so that
//! `cuEventElapsedTime`'s f32 milliseconds keep about a microsecond of
//! resolution and the two clocks cannot drift apart.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cudarc::driver::{CudaContext, CudaEvent, CudaStream, DriverError};

/// A span for the timeline: on the calling thread's track (`track: None`)
/// or on a named one (a GPU stream's).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Seen<'a> {
    pub(crate) track: Option<&'a str>,
    pub(crate) name: &'static str,
    pub(crate) start: Instant,
    pub(crate) end: Instant,
}

/// Told of each span (the pipeline's timeline; `cuda/` knows nothing of
/// it).
pub(crate) type Observe = Arc<dyn Fn(Seen<'_>) + Send + Sync>;

/// How often the GPU clock is tied to the host's again.
const RECALIBRATE: Duration = Duration::from_secs(10);

/// GPU spans of one context, reported to an [`Observe`].
pub(crate) struct GpuTimeline {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    /// The origin event and the host instant it fired at.
    origin: Mutex<(CudaEvent, Instant)>,
    observe: Observe,
}

impl std::fmt::Debug for GpuTimeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuTimeline").finish_non_exhaustive()
    }
}

impl GpuTimeline {
    /// A timeline of `ctx`'s GPU work, reporting to `observe`.
    pub(crate) fn new(
        ctx: &Arc<CudaContext>,
        observe: Observe,
    ) -> Result<Arc<GpuTimeline>, DriverError> {
        let stream = ctx.new_stream()?;
        let origin = tie(ctx, &stream)?;
        Ok(Arc::new(GpuTimeline {
            ctx: ctx.clone(),
            stream,
            origin: Mutex::new(origin),
            observe,
        }))
    }

    /// The hook for host spans.
    pub(crate) fn observe(&self) -> &Observe {
        &self.observe
    }

    /// An event that can be timed (cudarc's default disables timing).
    pub(crate) fn event(&self) -> Result<CudaEvent, DriverError> {
        self.ctx
            .new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
    }

    /// Report `name` on `track` from `start` to `end`, two events that
    /// have fired (the caller waited for `end`, recorded after `start` on
    /// one stream). Nothing is reported if a time cannot be read.
    pub(crate) fn span(&self, track: &str, name: &'static str, start: &CudaEvent, end: &CudaEvent) {
        let mut origin = self.origin.lock().unwrap_or_else(|p| p.into_inner());
        if origin.1.elapsed() > RECALIBRATE
            && let Ok(o) = tie(&self.ctx, &self.stream)
        {
            *origin = o;
        }
        let at = |e: &CudaEvent| -> Option<Instant> {
            let ms = origin.0.elapsed_ms(e).ok()?;
            let d = Duration::try_from_secs_f64(f64::from(ms.abs()) / 1e3).ok()?;
            if ms >= 0.0 {
                origin.1.checked_add(d)
            } else {
                origin.1.checked_sub(d)
            }
        };
        let (Some(s), Some(e)) = (at(start), at(end)) else {
            return;
        };
        drop(origin);
        (self.observe)(Seen {
            track: Some(track),
            name,
            start: s,
            end: e.max(s),
        });
    }
}

/// Record an origin on `stream` (idle: nothing else is ever queued on it)
/// and note the host instant the wait for it returns.
fn tie(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
) -> Result<(CudaEvent, Instant), DriverError> {
    // A spinning (default) event: the wait returns within microseconds of
    // the event firing, which is the tie's error.
    let e = ctx.new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))?;
    e.record(stream)?;
    e.synchronize()?;
    Ok((e, Instant::now()))
}
