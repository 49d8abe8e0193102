//! A device batch slot: its memory, the packing state of the batch being
//! assembled in it, and the way home of a slot a batch holds.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crossbeam_channel::Sender;

use super::Arena;
use super::cuda::CudaSlot;
use crate::augment::photo::PhotoParams;
use crate::cuda::desc::GfTile;
use crate::tensor::Storage;

#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // One per slot; boxing buys nothing.
pub(crate) enum SlotMem {
    Cuda(CudaSlot),
    Emu(Vec<u8>),
}

/// One batch's worth of device memory, plus the packing state of the batch
/// being assembled in it.
#[derive(Debug)]
pub(crate) struct Slot {
    pub(crate) mem: SlotMem,
    /// One per view spec; moved into the batch's tensors while the trainer
    /// holds the batch.
    pub(crate) outs: Vec<Storage>,
    /// Staging bytes used by pixels since the last flush.
    pub(crate) used: usize,
    /// Decode arenas whose last images this slot's tiles read: released
    /// at the next flush.
    pub(crate) arenas: Vec<Arena>,
    /// Tiles not yet launched, per view; `src` is an absolute address.
    pub(crate) tiles: Vec<Vec<GfTile>>,
    /// Draws with photometric ops not yet launched, per view (issue 19).
    pub(crate) photo: Vec<Vec<(GfTile, PhotoParams)>>,
}

impl Slot {
    /// Whether decode arenas wait for this slot's next flush.
    pub(crate) fn holds_arenas(&self) -> bool {
        !self.arenas.is_empty()
    }

    /// The event the trainer's stream waits on (CUDA slots).
    pub(crate) fn event(&self) -> Option<&cudarc::driver::CudaEvent> {
        match &self.mem {
            SlotMem::Cuda(c) => Some(c.event()),
            SlotMem::Emu(_) => None,
        }
    }

    /// Labels on the device (CUDA slots), `batch_size` long.
    pub(crate) fn labels(&self) -> Option<&cudarc::driver::CudaSlice<u32>> {
        match &self.mem {
            SlotMem::Cuda(c) => Some(c.labels()),
            SlotMem::Emu(_) => None,
        }
    }

    /// Mixup's soft labels on the device (CUDA slots of mixup pipelines).
    pub(crate) fn soft_labels(&self) -> Option<&cudarc::driver::CudaSlice<f32>> {
        match &self.mem {
            SlotMem::Cuda(c) => Some(c.soft_labels()),
            SlotMem::Emu(_) => None,
        }
    }
}

/// Byte layout of a slot's staging buffer: `[pixels | tiles | labels]`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StagingLayout {
    pub(crate) pixels: usize,
    pub(crate) tiles_at: usize,
    /// Bytes of descriptors a batch may need: a `GfTile` per draw, and a
    /// `GfPhoto` more per draw of a view with photometric ops.
    pub(crate) tiles: usize,
    pub(crate) labels_at: usize,
    /// Mixup's soft labels, after the labels (issue 19).
    pub(crate) soft_at: usize,
    pub(crate) total: usize,
}

impl StagingLayout {
    pub(crate) fn new(pixels: usize, tiles: usize, batch: usize, soft: usize) -> StagingLayout {
        let tiles_at = pixels.next_multiple_of(256);
        let labels_at = (tiles_at + tiles).next_multiple_of(256);
        StagingLayout {
            pixels,
            tiles_at,
            tiles,
            labels_at,
            soft_at: labels_at + batch * 4,
            total: labels_at + batch * 4 + soft * 4,
        }
    }
}

/// Memory a pipeline holds: on the device backends its pinned and device
/// pools, made at `build()`, and nvJPEG's buffers, which grow with the
/// images decoded; on every backend the host buffers its threads reuse
/// (read buffers, CPU workers' scratch).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Memory {
    /// Page-locked host memory (staging).
    pub pinned_bytes: u64,
    /// Device memory (staging copies, outputs, labels, the nvJPEG route's
    /// decode arenas and the photometric scratch).
    pub device_bytes: u64,
    /// Batch slots (`prefetch + 1`): batches queued for the trainer, held by
    /// it, or being filled.
    pub slots: usize,
    /// Page-locked host memory nvJPEG holds now: the CUDA route's pooled
    /// decoders, the batch thread's decoder and the engine lanes' states.
    /// Grows as larger images come, the pool's part up to
    /// [`decoder_memory_limit`](crate::PipelineBuilder::decoder_memory_limit).
    /// (The emulated device counts its engine lanes' image buffers here.)
    pub decoder_pinned_bytes: u64,
    /// Device memory nvJPEG holds now, as for `decoder_pinned_bytes`, and
    /// the scan kernels' lanes' buffers (kept at the largest call's size;
    /// see `kernel_device_bytes`). (The emulated device counts here what
    /// its lanes' buffers would be, and its lanes' CPU decoders' image
    /// buffers.)
    pub decoder_device_bytes: u64,
    /// The most pinned plus device memory nvJPEG held at once so far, as
    /// the sum of the decoder pool's peak and the other decoders' peak (so
    /// never below the true peak).
    pub decoder_peak_bytes: u64,
    /// Of `decoder_device_bytes`, the scan kernels' lanes' buffers for
    /// their calls' files, coefficients and samples: at most
    /// [`kernel_memory_limit`](crate::PipelineBuilder::kernel_memory_limit).
    /// (Their descriptors and page-locked staging count in the decoder
    /// fields alone.)
    pub kernel_device_bytes: u64,
    /// Host memory of the readers' buffers: compressed bytes of the samples
    /// in flight and the spare buffers of the pool. About the window
    /// (`prefetch × batch` samples, plus the samples decoding on the
    /// nvJPEG route) times the files' size, each buffer no larger than 19
    /// files in 20 need once 256 files have been read (a larger file has a
    /// buffer of its own until it is decoded). A buffer a reader is
    /// filling at the moment is not counted (one per reader at most).
    pub read_buffer_bytes: u64,
    /// The page-locked part of the read buffers, wherever they are: on the
    /// hardware engine's route the readers read into page-locked blocks,
    /// made once 256 files were read (sized for 19 files in 20) and kept,
    /// at most one per buffer that can be out at once (the window's and
    /// the decoding groups') and 256 MiB in all. 0 on the other routes.
    pub read_buffer_pinned_bytes: u64,
    /// Host memory of the CPU workers' scratch: each worker's decoded
    /// image, resampler rows and orientation scratch. They are grown at
    /// once to the largest image met so far, so that they stop growing
    /// within the first epoch (issue 7), but kept no larger than the
    /// images that make up 19 decoded bytes in 20: a rarer larger image
    /// allocates its own while it is decoded. The CPU decoders' own tables
    /// and the samples being augmented are not counted.
    pub worker_scratch_bytes: u64,
}

impl Memory {
    /// The fixed pools alone, which never change after `build()`: this
    /// with the decoder and host counts set to zero.
    pub fn pools(&self) -> Memory {
        Memory {
            pinned_bytes: self.pinned_bytes,
            device_bytes: self.device_bytes,
            slots: self.slots,
            ..Memory::default()
        }
    }
}

/// Where a batch's slot goes back on drop, counting the slots that batches
/// hold (queued for the trainer or held by it).
#[derive(Debug, Clone)]
pub(crate) struct SlotHome {
    pub(crate) tx: Sender<Slot>,
    pub(crate) in_batches: Arc<AtomicUsize>,
}

impl SlotHome {
    /// Return the slot of a batch. A pipeline already gone frees it here.
    pub(crate) fn give_back(&self, slot: Slot) {
        self.in_batches.fetch_sub(1, Ordering::AcqRel);
        let _ = self.tx.try_send(slot);
    }
}
