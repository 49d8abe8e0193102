//! A pipeline's settings after validation (`PipelineBuilder::build`): what
//! the pipeline's threads and the device stage read. Below both.

use crate::augment::{DType, Fma, Layout, View};
use crate::decode::CpuBackend;

/// What happens to a sample that cannot be read or decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnError {
    /// Leave it out: the batch is filled with the following samples, the
    /// error is counted in [`Stats`](crate::pipeline::Stats) and attached to the batch
    /// ([`Batch::skipped`](crate::Batch::skipped)) with the file name.
    #[default]
    Skip,
    /// End the epoch: the iterator yields the error (naming the file) and
    /// then nothing more.
    Fail,
}

/// Settings after validation.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) batch_size: usize,
    pub(crate) drop_last: bool,
    pub(crate) readers: usize,
    pub(crate) prefetch: usize,
    pub(crate) on_error: OnError,
    pub(crate) seed: u64,
    pub(crate) views: Vec<View>,
    pub(crate) antialias: bool,
    pub(crate) dtype: DType,
    pub(crate) layout: Layout,
    pub(crate) max_pixels: u64,
    pub(crate) max_file_bytes: u64,
    /// Normalization folded to `x * scale + shift`.
    pub(crate) fma: Fma,
    /// Pinned staging bytes per batch slot (device stage).
    pub(crate) staging_bytes: usize,
    pub(crate) gpu_decode: bool,
    pub(crate) hardware_share: f32,
    /// Steer the share from measured costs, starting at `hardware_share`
    /// (issue 16, item 3).
    pub(crate) hardware_share_auto: bool,
    /// Worker threads (parse, decode, the CUDA route's host phases).
    pub(crate) workers: usize,
    /// Batches decoding at once on the nvJPEG route (issue 16, item 1).
    pub(crate) in_flight: usize,
    /// Images per engine call as a decode group fills; 0: one call per
    /// group (issue 16, item 2).
    pub(crate) engine_call: usize,
    /// The engine lanes in a CUDA context of their own (issue 16, item 3).
    pub(crate) engine_context: bool,
    /// Progressive JPEGs decode with gpufeed's own kernels (issue 16).
    pub(crate) progressive: bool,
    /// So do the CUDA share's sequential JPEGs under 1 MP (issue 16, item
    /// 3c).
    pub(crate) sequential: bool,
    /// Sequential JPEGs of more pixels skip those kernels: to the engine
    /// where it takes them, whatever the share, else nvJPEG's CUDA route
    /// (`u64::MAX`: none does).
    pub(crate) sequential_max_pixels: u64,
    /// Limit on nvJPEG's memory for the CUDA route's decoder pool
    /// (issue 16, item 5).
    pub(crate) decoder_memory: u64,
    /// Limit on the scan kernels' lanes' device buffers for their files,
    /// coefficients and samples, all lanes together (`u64::MAX`: none).
    pub(crate) kernel_memory: u64,
    pub(crate) cpu_backend: CpuBackend,
    pub(crate) apply_orientation: bool,
    pub(crate) trace: bool,
    /// Shards are streamed through a shuffle buffer of this many samples
    /// (`PipelineBuilder::stream_shards`): the sampler orders them; the
    /// readers of shards in object storage read whole chunks.
    #[cfg_attr(not(feature = "object-store"), allow(dead_code))]
    pub(crate) stream_buffer: Option<usize>,
    /// Mixup / CutMix per batch (issue 19).
    pub(crate) mixup: Option<crate::augment::Mixup>,
}

impl Config {
    /// Samples allowed in flight (read, decoding or waiting to be batched):
    /// bounds every pool.
    pub(crate) fn window(&self) -> usize {
        self.prefetch * self.batch_size
    }
}
