//! The hardware engine in a CUDA context of its own (issue 16, item 3;
//! `PipelineBuilder::engine_context`, a diagnostic, unmeasured).
//!
//! nvJPEG's hardware call frees memory of the video-codec library's own
//! (`cuMemFree` from `libnvcuvid.so`, ~18 times a call; CUPTI on an H200,
//! 4bbffad), and a free waits for its context's work. On the primary
//! context that is every scan kernel and augment launch in flight, which
//! fits what the H200 showed: engine calls of ~280 ms beside the scan
//! kernels against ~18–30 ms alone, and every engine share between 0 and
//! 1 slower than either end. In a context of its own the engine's frees
//! wait for the engine's work only.
//!
//! Memory of one context cannot be written by another's work, so the
//! engine decodes into a slab of its own context and each image is then
//! copied into its place in the decode arena (`cuMemcpyPeerAsync`, which
//! names both contexts), on the lane's stream, before the lane's wait for
//! the call's completion. The slab grows to the largest call so far (a
//! quarter more, in whole MiB) and is counted in the pipeline's nvJPEG
//! ledger (`meter.rs`): a second copy of the engine's share of a batch in
//! flight per lane, beside the arenas.

use std::sync::Arc;

use cudarc::driver::CudaContext;

use super::device_input::layout;
use super::meter::Slab;
use super::{Kind, Meter};
use crate::error::{Error, Result};

/// A slab for `want` bytes: a quarter more, in whole MiB, so that a call a
/// little larger than the last does not free and allocate again (each
/// waits for the engine's context). Not a power of two as the bitstream
/// slabs' (`device_input.rs`): outputs of multi-megapixel photos run to
/// gigabytes a call.
fn grown(want: usize) -> usize {
    want.saturating_add(want / 4).next_multiple_of(1 << 20)
}

/// One image's copy from the slab to the arena: `(to, from, bytes)`.
pub(crate) type Delivery = (u64, u64, usize);

/// An engine decoder's output slab in its own context, and the context its
/// images are delivered to.
pub(crate) struct Relay {
    meter: Arc<Meter>,
    arena: Arc<CudaContext>,
    slab: Option<Slab>,
}

impl Relay {
    /// A relay (no slab yet) from the `meter`'s context, where the engine
    /// decodes, to `arena`'s.
    pub(crate) fn new(meter: &Arc<Meter>, arena: &Arc<CudaContext>) -> Relay {
        Relay {
            meter: meter.clone(),
            arena: arena.clone(),
            slab: None,
        }
    }

    /// Where the engine writes outputs of `sizes` bytes: addresses in the
    /// slab, grown to hold them all, each 256-byte aligned.
    ///
    /// # Safety
    ///
    /// No queued work reads or writes the slab (the engine lanes wait for
    /// each call's stream before the next): a slab too small is freed.
    pub(crate) unsafe fn stage(&mut self, sizes: &[usize]) -> Result<Vec<u64>> {
        let (offsets, total) = layout(sizes);
        let have = self.slab.as_ref().map_or(0, Slab::len);
        if total > have {
            // Freed before allocating, so the ledger holds one.
            self.slab = None;
            self.slab = Some(
                Slab::new(&self.meter, Kind::Device, grown(total)).ok_or_else(|| {
                    Error::Device(format!("engine output slab of {total} bytes not allocated"))
                })?,
            );
        }
        let base = self.slab.as_ref().map_or(0, Slab::ptr) as u64;
        Ok(offsets.into_iter().map(|at| base + at as u64).collect())
    }

    /// Queue on `stream` the copy of each `(to, from, bytes)`: `from` in
    /// the slab, `to` in the arena's context.
    ///
    /// # Safety
    ///
    /// `stream` is a live stream of the meter's context, current on this
    /// thread, on which the engine's writes to each `from` were queued;
    /// each `to` is device memory of the arena's context with room for
    /// `bytes`, kept until the stream reaches this work.
    pub(crate) unsafe fn deliver(
        &self,
        copies: &[Delivery],
        stream: cudarc::driver::sys::CUstream,
    ) -> Result<()> {
        let (engine, arena) = (self.meter.ctx().cu_ctx(), self.arena.cu_ctx());
        for &(to, from, bytes) in copies {
            // SAFETY: both contexts are live (held by the meter and by
            // self), `from` lies in the slab (`stage`), `to` and `stream`
            // are the caller's contract (# Safety); cuMemcpyPeerAsync copies
            // between contexts of one device in stream order (CUDA Driver
            // API, "Memory Management").
            unsafe {
                cudarc::driver::sys::cuMemcpyPeerAsync(to, arena, from, engine, bytes, stream)
            }
            .result()
            .map_err(Error::cuda("deliver the engine's image to the arena"))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn slabs_grow_a_quarter_past_the_call_in_whole_mebibytes() {
        assert_eq!(super::grown(1), 1 << 20);
        assert_eq!(super::grown(4 << 20), 5 << 20);
        assert_eq!(super::grown(144_000_000), 172 << 20);
        assert!(super::grown(9_000_000_000) < 11_300_000_000);
    }
}
