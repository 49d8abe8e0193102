//! The engine's bitstreams in device memory (`NVJPEG_BACKEND_HARDWARE_DEVICE`,
//! nvJPEG docs, "nvJPEG Backend": input bitstreams on the device, batched
//! API only, the hardware engine's formats). A diagnostic for issue 16,
//! item 4, behind `GPUFEED_NVJPEG_DEVICE_INPUT=1`, unmeasured.
//!
//! On an H200 (2026-11-26, 243e3c9) the engine lanes spent 0.086 CPU-ms
//! per image inside `nvjpegDecodeBatchedEx` with host bitstreams, 0.073
//! with every wait blocking: nvJPEG's own host work, most of the 0.1 CPU-ms
//! per image issue 16 allows. What that work is cannot be seen from here;
//! if it is mostly handling the bitstreams on the host (a copy into its
//! pinned staging, a scan of the entropy-coded data), handing the engine
//! bitstreams already on the device leaves the lanes one `memcpy` per image
//! into a pinned slab and one asynchronous copy per call.
//!
//! Each decoder with device input holds one pinned slab and one device
//! slab, grown to the largest call so far and counted in the pipeline's
//! nvJPEG ledger (`meter.rs`), so `decoder_memory_limit` bounds them and
//! `Pipeline::memory()` reports them.

use std::sync::Arc;

use cudarc::driver::CudaEvent;

use super::meter::Slab;
use super::{Kind, Meter};
use crate::error::{Error, Result};

/// Where each bitstream starts in a slab: each at a multiple of `ALIGN`
/// (the alignment `cuMemAlloc` gives, so every bitstream starts as the
/// engine would find one nvJPEG staged itself). With the slab's total
/// length.
pub(super) fn layout(lens: &[usize]) -> (Vec<usize>, usize) {
    let mut at = 0usize;
    let offsets = lens
        .iter()
        .map(|&n| {
            let here = at;
            at = (at + n).next_multiple_of(ALIGN);
            here
        })
        .collect();
    (offsets, at)
}

const ALIGN: usize = 256;

/// The smallest slab size `have` can grow to for `want` bytes: `have`
/// itself when it holds them, else a power of two of at least 1 MiB, so
/// that a call a little larger than the last one does not free and
/// allocate again (each of which waits for the device).
pub(super) fn grown(have: usize, want: usize) -> usize {
    if want <= have {
        have
    } else {
        want.next_power_of_two().max(1 << 20)
    }
}

/// A decoder's bitstream slabs: pinned staging and its device copy.
pub(super) struct DeviceInput {
    meter: Arc<Meter>,
    pinned: Option<Slab>,
    device: Option<Slab>,
    /// Recorded after the last call that read the slabs (a blocking-sync
    /// event); waited on before they are written or freed again.
    free: CudaEvent,
    pending: bool,
}

impl DeviceInput {
    /// Slabs (none allocated yet) on the meter's device, counted there.
    pub(super) fn new(meter: &Arc<Meter>) -> Result<DeviceInput> {
        let free = crate::cuda::host_wait_event(meter.ctx()).map_err(Error::cuda("event"))?;
        Ok(DeviceInput {
            meter: meter.clone(),
            pinned: None,
            device: None,
            free,
            pending: false,
        })
    }

    /// Copy `data` (of lengths `lens`) into the pinned slab and queue its
    /// copy into the device slab on `stream`: the device address of each
    /// bitstream.
    ///
    /// # Safety
    ///
    /// `stream` is a live stream of the meter's context, which is current
    /// on this thread; [`used_by`](Self::used_by) follows the work that
    /// reads the device addresses, on the same stream.
    pub(super) unsafe fn stage(
        &mut self,
        data: &[&[u8]],
        lens: &[usize],
        stream: cudarc::driver::sys::CUstream,
    ) -> Result<Vec<u64>> {
        if self.pending {
            // The last call's copy and decode are done with both slabs.
            self.free
                .synchronize()
                .map_err(Error::cuda("wait for the engine's bitstreams"))?;
            self.pending = false;
        }
        let (offsets, total) = layout(lens);
        let have = self.pinned.as_ref().map_or(0, Slab::len);
        if total > have {
            let want = grown(have, total);
            // Freed before allocating, so the ledger holds one of each.
            self.pinned = None;
            self.device = None;
            let refused = || Error::Device("bitstream slabs refused (decoder_memory_limit)".into());
            self.pinned = Some(Slab::new(&self.meter, Kind::Pinned, want).ok_or_else(refused)?);
            self.device = Some(Slab::new(&self.meter, Kind::Device, want).ok_or_else(refused)?);
        }
        let (Some(pinned), Some(device)) = (&self.pinned, &self.device) else {
            return Err(Error::Device("bitstream slabs missing".into()));
        };
        // SAFETY: the pinned slab is `pinned.len()` bytes of page-locked
        // host memory this value owns; no copy reads it now (`pending` was
        // waited for above, or it is new), and nothing else aliases it.
        let host = unsafe { std::slice::from_raw_parts_mut(pinned.ptr() as *mut u8, pinned.len()) };
        for (d, &at) in data.iter().zip(&offsets) {
            host[at..at + d.len()].copy_from_slice(d);
        }
        // SAFETY: the device slab holds `total` bytes and no queued work
        // uses it (as above); the stream and context are the caller's
        // contract (# Safety). The source stays unchanged until `free`,
        // recorded after this copy's reader, has completed.
        unsafe {
            cudarc::driver::result::memcpy_htod_async(device.ptr() as u64, &host[..total], stream)
        }
        .map_err(Error::cuda("copy the engine's bitstreams"))?;
        self.pending = true;
        Ok(offsets
            .iter()
            .map(|&at| device.ptr() as u64 + at as u64)
            .collect())
    }

    /// The work queued on `stream` so far is the last to read the slabs.
    ///
    /// # Safety
    ///
    /// As for [`stage`](Self::stage).
    pub(super) unsafe fn used_by(&mut self, stream: cudarc::driver::sys::CUstream) -> Result<()> {
        // SAFETY: the event is live (owned here) and belongs to the meter's
        // context, as does `stream` (the caller's contract).
        let r = unsafe { cudarc::driver::result::event::record(self.free.cu_event(), stream) };
        // SAFETY: as above. Without the event, the stream itself is waited
        // for, so that `pending` never stands for an event not recorded.
        if r.is_err() && unsafe { cudarc::driver::result::stream::synchronize(stream) }.is_ok() {
            self.pending = false;
        }
        r.map_err(Error::cuda("record"))
    }
}

impl Drop for DeviceInput {
    fn drop(&mut self) {
        if self.pending {
            // The slabs' frees must not pull memory from under a copy or a
            // decode still queued: wait, and free nothing on failure.
            if self.free.synchronize().is_err() {
                std::mem::forget(self.pinned.take());
                std::mem::forget(self.device.take());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitstreams_start_aligned_one_after_another() {
        let (at, total) = layout(&[10, 256, 0, 300]);
        assert_eq!(at, vec![0, 256, 512, 512]);
        assert_eq!(total, 1024);
        assert_eq!(layout(&[]), (vec![], 0));
        for (&a, n) in at.iter().zip([10usize, 256, 0, 300]) {
            assert_eq!(a % ALIGN, 0);
            assert!(a + n <= total);
        }
    }

    #[test]
    fn slabs_grow_in_powers_of_two_from_a_mebibyte() {
        assert_eq!(grown(0, 1), 1 << 20);
        assert_eq!(grown(1 << 20, 1 << 20), 1 << 20);
        assert_eq!(grown(1 << 20, (1 << 20) + 1), 2 << 20);
        assert_eq!(grown(32 << 20, 28 << 20), 32 << 20, "kept when it fits");
        assert_eq!(grown(0, 27_000_000), 32 << 20);
    }
}
