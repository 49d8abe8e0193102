//! Live counters, cheap enough to leave on: relaxed atomic adds per sample.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use crate::error::ErrorKind;

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) samples: AtomicU64,
    pub(crate) batches: AtomicU64,
    pub(crate) bytes_read: AtomicU64,
    pub(crate) read_ns: AtomicU64,
    pub(crate) parse_ns: AtomicU64,
    pub(crate) decode_ns: AtomicU64,
    pub(crate) augment_ns: AtomicU64,
    pub(crate) wait_ns: AtomicU64,
    pub(crate) launches: AtomicU64,
    pub(crate) host_augmented: AtomicU64,
    pub(crate) decoded_hardware: AtomicU64,
    pub(crate) decoded_cuda: AtomicU64,
    pub(crate) decoded_cuda_batch_thread: AtomicU64,
    pub(crate) decoded_cpu_fallback: AtomicU64,
    pub(crate) decoded_cpu_window: AtomicU64,
    pub(crate) decoded_progressive: AtomicU64,
    pub(crate) queue_depth_sum: AtomicU64,
    pub(crate) queue_depth_polls: AtomicU64,
    pub(crate) errors: [AtomicU64; ErrorKind::ALL.len()],
    pub(crate) requests: AtomicU64,
    pub(crate) retries: AtomicU64,
}

impl Counters {
    pub(crate) fn add(counter: &AtomicU64, v: u64) {
        counter.fetch_add(v, Relaxed);
    }

    pub(crate) fn add_time(counter: &AtomicU64, d: Duration) {
        counter.fetch_add(d.as_nanos() as u64, Relaxed);
    }

    /// The counters, and the device stage's engine time when there is one.
    pub(crate) fn snapshot(&self, stage: Option<&crate::stage::DeviceStage>) -> Stats {
        let ns = |c: &AtomicU64| Duration::from_nanos(c.load(Relaxed));
        Stats {
            engine_busy: stage.map(|s| s.engine_busy()).unwrap_or_default(),
            progressive_busy: stage.map(|s| s.progressive_busy()).unwrap_or_default(),
            lanes_stopped: stage.map_or(0, |s| s.lanes_stopped()),
            decoder_allocations: stage.map_or(0, |s| s.decoder_allocations()),
            decoder_pinned_wait: stage.map(|s| s.pinned_wait()).unwrap_or_default(),
            samples: self.samples.load(Relaxed),
            batches: self.batches.load(Relaxed),
            bytes_read: self.bytes_read.load(Relaxed),
            read: ns(&self.read_ns),
            parse: ns(&self.parse_ns),
            decode: ns(&self.decode_ns),
            augment: ns(&self.augment_ns),
            wait: ns(&self.wait_ns),
            launches: self.launches.load(Relaxed),
            host_augmented: self.host_augmented.load(Relaxed),
            decoded_hardware: self.decoded_hardware.load(Relaxed),
            decoded_cuda: self.decoded_cuda.load(Relaxed),
            decoded_cuda_batch_thread: self.decoded_cuda_batch_thread.load(Relaxed),
            decoded_cpu_fallback: self.decoded_cpu_fallback.load(Relaxed),
            decoded_cpu_window: self.decoded_cpu_window.load(Relaxed),
            decoded_progressive: self.decoded_progressive.load(Relaxed),
            queue_depth_sum: self.queue_depth_sum.load(Relaxed),
            queue_depth_polls: self.queue_depth_polls.load(Relaxed),
            errors: std::array::from_fn(|i| self.errors[i].load(Relaxed)),
            requests: self.requests.load(Relaxed),
            retries: self.retries.load(Relaxed),
        }
    }
}

/// A snapshot of a pipeline's counters since it was built.
///
/// Stage times are summed over the threads doing that stage, so with several
/// threads they can exceed wall-clock time; `wait` is the time the consumer
/// spent blocked in the epoch iterator waiting for a sample.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Samples delivered in batches.
    pub samples: u64,
    /// Batches delivered.
    pub batches: u64,
    /// Compressed bytes read.
    pub bytes_read: u64,
    /// Time in file reads.
    pub read: Duration,
    /// Time in header parsing.
    pub parse: Duration,
    /// Time in decoding (including EXIF orientation).
    pub decode: Duration,
    /// Time in crop/resize/normalize/cast.
    pub augment: Duration,
    /// Time the consumer waited for data.
    pub wait: Duration,
    /// Augment kernel launches (device stage): one per view spec per batch,
    /// more when a batch's crops overflowed the staging.
    pub launches: u64,
    /// Samples the device stage received already augmented on the CPU
    /// (a crop larger than the whole staging).
    pub host_augmented: u64,
    /// Images decoded by nvJPEG on the hardware JPEG engine.
    pub decoded_hardware: u64,
    /// Images decoded by nvJPEG with CUDA.
    pub decoded_cuda: u64,
    /// Of `decoded_cuda`, the images whose host phase (parsing, CPU
    /// Huffman decoding) ran on the device stage's own thread rather than
    /// a worker: those the engine refused, and those no worker decoder
    /// was free for. A large share means that thread does the workers'
    /// work (issue 16, item 4).
    pub decoded_cuda_batch_thread: u64,
    /// nvJPEG-route images that nvJPEG refused, decoded on the CPU: by the
    /// worker whose host phase failed, or by the device stage and uploaded
    /// (the emulated device counts its batch thread's decodes here and
    /// what its workers decoded as CUDA). The CUDA route refuses files
    /// that are not [complete](crate::jpeg::complete) before nvJPEG sees
    /// them; they count here too.
    pub decoded_cpu_fallback: u64,
    /// JPEGs the CPU decoder decoded only part of: the columns the draws
    /// read, with an MCU to spare, from their top row down (libjpeg-turbo
    /// only, on sequential images that need no EXIF rotation).
    pub decoded_cpu_window: u64,
    /// JPEGs decoded on the device by gpufeed's own kernels at the
    /// progressive lanes: progressive ones
    /// (`PipelineBuilder::progressive_kernels`) and, with
    /// `sequential_kernels`, the CUDA share's sequential ones; not counted
    /// in `decoded_cuda`.
    pub decoded_progressive: u64,
    /// Sum over the consumer's batch requests of the samples that were
    /// finished and waiting at that moment (see
    /// [`mean_queue_depth`](Self::mean_queue_depth)).
    pub queue_depth_sum: u64,
    /// Batch requests counted in `queue_depth_sum`.
    pub queue_depth_polls: u64,
    /// Failed samples per kind, in the order of [`ErrorKind::ALL`].
    pub errors: [u64; ErrorKind::ALL.len()],
    /// Requests to object storage (shards read by URL; 0 for local
    /// files), neighbouring members merged into one; retries not counted.
    pub requests: u64,
    /// Requests to object storage sent again after a failure.
    pub retries: u64,
    /// Wall time during which at least one hardware JPEG engine call was
    /// in flight (the union of the engine lanes' calls, not their sum;
    /// the emulated device's lanes too): over the run's time, how busy the
    /// engine route was (`gpufeed bench` names it as the limit when it is
    /// the busiest stage; issue 16).
    pub engine_busy: Duration,
    /// Wall time during which at least one progressive lane call was in
    /// flight (the scan kernels' route, `GPUFEED_PROGRESSIVE_GPU=1`; the
    /// emulated device's too), as [`engine_busy`](Self::engine_busy) for
    /// the engine: `gpufeed bench` names these lanes as the limit when
    /// they are the busiest stage. Zero without them.
    pub progressive_busy: Duration,
    /// Decode lanes (engine or scan kernels) that stopped after a panic, a
    /// gpufeed bug to report. Their calls' files were decoded on the other
    /// routes (CUDA, then the CPU) and the other lanes took their turns,
    /// so no file was lost to it; with every lane of a kind stopped, the
    /// workers keep its files on nvJPEG's CUDA route, as without those
    /// lanes.
    pub lanes_stopped: u64,
    /// Buffers nvJPEG's decoders took from the CUDA driver (on the
    /// emulated device, buffers its engine lanes grew). Each allocation,
    /// and the free of the buffer it replaces, is a synchronizing driver
    /// call that waits for the device: a count still rising after the
    /// first epoch means decoders still meeting larger images than before
    /// (issue 16). 0 on the CPU backend.
    pub decoder_allocations: u64,
    /// Time the workers' nvJPEG host phases (the CUDA route) waited, summed
    /// over the workers, for their decoder's previous image to be copied
    /// to the device before they could reuse its pinned buffer: time a
    /// worker neither decoded nor took the next sample (issue 16). Zero on
    /// the CPU backend and the emulated device.
    pub decoder_pinned_wait: Duration,
}

impl Stats {
    /// Failed samples of one kind.
    pub fn errors_of(&self, kind: ErrorKind) -> u64 {
        self.errors[kind.index()]
    }

    /// Samples finished and waiting when the consumer asked for a batch,
    /// on average: near the prefetch window when the loader is ahead, near
    /// zero when the consumer waits.
    pub fn mean_queue_depth(&self) -> f64 {
        self.queue_depth_sum as f64 / self.queue_depth_polls.max(1) as f64
    }

    /// Failed samples of all kinds.
    pub fn total_errors(&self) -> u64 {
        self.errors.iter().sum()
    }
}
