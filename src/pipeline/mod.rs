//! The pipeline object: threads started at `build()`, epochs iterated by the
//! trainer.

mod assemble;
mod batch;
mod builder;
mod epoch;
mod host_memory;
mod monitor;
mod stats;
mod trace;
mod worker;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::thread::JoinHandle;

use crossbeam_channel::{Sender, bounded, unbounded};

pub use crate::stage::Memory;
pub(crate) use batch::TensorData;
pub use batch::{Batch, Tensor};
pub use builder::{Device, OnError, PipelineBuilder};
pub use epoch::Epoch;
pub use monitor::Monitor;
pub use stats::Stats;

use self::assemble::{Assembler, Start};
use self::builder::Config;
use self::stats::Counters;
use self::worker::{DECODED_STEP, Pools, ROWS_STEP, Shared, Task};
use crate::decode::CpuDecoder;
use crate::error::{Error, Result};
use crate::reader::BufferPool;
use crate::sampler::Sampler;
use crate::sizes::Sizes;
use crate::source::Source;
use crate::stage::{DeviceStage, Engine};

/// A running input pipeline. See the [crate docs](crate) for the flow.
///
/// Threads start in [`PipelineBuilder::build`] and live until the pipeline is
/// dropped; each call to [`Pipeline::epoch`] borrows the pipeline, so one
/// epoch runs at a time.
pub struct Pipeline {
    shared: Arc<Shared>,
    /// A copy of the batch thread's sampler, for the size queries.
    sampler: Sampler,
    /// Epochs for the batch thread; closing it ends every thread.
    starts: Option<Sender<Start>>,
    /// The device stage, when batches are produced on a GPU (shared with
    /// the batch thread, which runs it).
    stage: Option<Arc<DeviceStage>>,
    threads: Vec<JoinHandle<()>>,
    /// The epoch on the batch thread, if any.
    live: Option<epoch::LiveEpoch>,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("samples", &self.shared.source.len())
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl Pipeline {
    /// Start configuring a pipeline.
    pub fn builder() -> PipelineBuilder {
        PipelineBuilder::default()
    }

    fn start(
        source: Source,
        sampler: Sampler,
        config: Config,
        decoders: Vec<CpuDecoder>,
        engine: Option<Engine>,
        io: Option<Arc<dyn crate::reader::ReadBytes>>,
        began: std::time::Instant,
    ) -> Result<Pipeline> {
        let window = config.window();
        // The timeline starts with `build()`: its "build" track shows what
        // the build's time went to (issue 16: ~2 s on an H200, unexplained).
        let shared_trace = config.trace.then(|| Arc::new(trace::Trace::since(began)));
        if let (Some(t), Some(_)) = (&shared_trace, &engine) {
            let name = "device: context, augment kernels";
            t.span_on("build", name, began, std::time::Instant::now());
        }
        // Slots: the batch being assembled plus `prefetch` the trainer may
        // hold; all device memory is allocated here, none later.
        let stage = engine
            .map(|e| {
                let observe = shared_trace
                    .clone()
                    .map(|t| -> crate::cuda::lanes::Observe {
                        Arc::new(move |s: crate::cuda::timeline::Seen<'_>| match s.track {
                            None => t.span_to(s.name, s.start, s.end, trace::Arg::None),
                            Some(track) => t.span_on(track, s.name, s.start, s.end),
                        })
                    });
                DeviceStage::new(e, &config, config.prefetch + 1, observe).map(Arc::new)
            })
            .transpose()?;
        // One read buffer per task the window lets be in flight, made now
        // (empty): the pool never runs dry, so how many exist does not
        // depend on how far the threads happen to run ahead. An
        // nvJPEG-route sample keeps its buffer until its decode lands
        // (`reader::PooledBytes`): the readers make new ones meanwhile, and
        // those the full pool has no room for when they come back are
        // freed, so the buffers are the window's plus the decoding groups'
        // samples. The pool sizes them (`reader::BufferPool`).
        //
        // On the engine route the buffers are page-locked blocks (issue 16,
        // item 4: the engine's copies read them by DMA), enough for every
        // buffer that can be out at once: the window's and the decoding
        // groups'. Only the default reader fills them in place; local
        // sources only (remote readers copy from their requests' bytes).
        let pinning = stage
            .as_deref()
            .and_then(DeviceStage::read_pinning)
            .filter(|_| io.is_none() && !remote(&source))
            .map(|alloc| crate::reader::Pinning {
                alloc,
                blocks: window + config.in_flight * config.batch_size,
                bytes: PINNED_READS_BYTES,
            });
        let pools = Pools {
            bytes: BufferPool::new(window, pinning),
        };
        let shared = Arc::new(Shared {
            source,
            counters: Counters::default(),
            generation: AtomicU64::new(0),
            io,
            decoded: Sizes::weighted(DECODED_STEP),
            rows: Sizes::weighted(ROWS_STEP),
            scratch_bytes: AtomicU64::new(0),
            read_buffers: pools.bytes.held(),
            trace: shared_trace,
            region_limit: stage.as_deref().map(DeviceStage::region_limit),
            jpeg_limit: stage.as_deref().and_then(DeviceStage::jpeg_limit),
            worker_decode: stage.as_deref().and_then(DeviceStage::worker_decode),
            config,
        });
        let (task_tx, task_rx) = unbounded::<Task>();
        let (read_tx, read_rx) = unbounded();
        let (done_tx, done_rx) = unbounded();
        let mut threads = Vec::new();
        let spawn = |name: String, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name)
                .spawn(f)
                .map_err(|e| Error::Worker(format!("cannot start thread: {e}")))
        };
        for i in 0..shared.config.readers {
            let (s, p, t, r, d) = (
                shared.clone(),
                pools.clone(),
                task_rx.clone(),
                read_tx.clone(),
                done_tx.clone(),
            );
            threads.push(spawn(
                format!("gpufeed-read-{i}"),
                Box::new(move || worker::reader_loop(s, p, t, r, d)),
            )?);
        }
        drop(read_tx);
        for (i, dec) in decoders.into_iter().enumerate() {
            let (s, r, d) = (shared.clone(), read_rx.clone(), done_tx.clone());
            threads.push(spawn(
                format!("gpufeed-cpu-{i}"),
                Box::new(move || worker::worker_loop(s, r, d, dec)),
            )?);
        }
        drop(done_tx);
        // The batch thread holds the only task sender: when it exits, the
        // readers' queue closes, and the workers' after them.
        let (starts, starts_rx) = bounded(1);
        let batches = host_batches(&shared.config, stage.is_none())?;
        let assembler = Assembler {
            shared: shared.clone(),
            sampler: sampler.clone(),
            tasks: task_tx,
            done: done_rx,
            batches,
            stage: stage.clone(),
        };
        threads.push(spawn(
            "gpufeed-batch".into(),
            Box::new(move || assemble::assembler_loop(assembler, starts_rx)),
        )?);
        Ok(Pipeline {
            shared,
            sampler,
            starts: Some(starts),
            stage,
            threads,
            live: None,
        })
    }

    /// Iterate the batches of `epoch` (this rank's share, in order).
    pub fn epoch(&mut self, epoch: u64) -> Epoch<'_> {
        Epoch::new(self, epoch, 0)
    }

    /// Iterate the rest of `epoch` from `position` (a value returned by
    /// [`Batch::resume_position`]): exactly the samples that a full run of
    /// the epoch would have visited after that point, in the same batches.
    pub fn epoch_from(&mut self, epoch: u64, position: usize) -> Epoch<'_> {
        Epoch::new(self, epoch, position)
    }

    /// Positions this rank visits per epoch (before any sample is skipped).
    pub fn samples_per_epoch(&self) -> usize {
        self.sampler.len_for_rank()
    }

    /// Batches per epoch when no sample fails.
    pub fn batches_per_epoch(&self) -> usize {
        let n = self.samples_per_epoch();
        let b = self.shared.config.batch_size;
        if self.shared.config.drop_last {
            n / b
        } else {
            n.div_ceil(b)
        }
    }

    /// The dataset.
    pub fn source(&self) -> &Source {
        &self.shared.source
    }

    /// The sampler deciding the order.
    pub fn sampler(&self) -> &Sampler {
        &self.sampler
    }

    /// Memory the pipeline holds: pinned host and device pools, allocated
    /// at `build()`, which never grow ([`Memory::pools`], zero on the CPU
    /// backend); nvJPEG's decoders, which grow with the images they meet,
    /// the pool's part up to
    /// [`decoder_memory_limit`](PipelineBuilder::decoder_memory_limit); and
    /// the host buffers the threads reuse (read buffers, CPU workers'
    /// scratch), which stop growing once each has met the largest file or
    /// image (within the first epochs).
    pub fn memory(&self) -> Memory {
        self.shared.memory(self.stage.as_deref())
    }

    /// Where batches are produced: `"cpu"`, or the CUDA device and the
    /// architecture its kernels were compiled for.
    pub fn backend(&self) -> String {
        self.stage
            .as_deref()
            .map_or_else(|| "cpu".to_string(), DeviceStage::describe)
    }

    /// The CUDA context the batches live in (CUDA backend), for trainers
    /// that create their streams or buffers with cudarc on the same device.
    pub fn cuda_context(&self) -> Option<Arc<cudarc::driver::CudaContext>> {
        self.stage.as_ref()?.cuda_context().cloned()
    }

    /// The timeline so far as Chrome trace JSON (open it in Perfetto or
    /// `chrome://tracing`), when built with
    /// [`trace(true)`](PipelineBuilder::trace); `None` otherwise.
    pub fn trace_json(&self) -> Option<String> {
        self.shared.trace.as_ref().map(|t| t.to_json())
    }

    /// Counters since `build()`.
    pub fn stats(&self) -> Stats {
        self.shared.counters.snapshot(self.stage.as_deref())
    }

    /// A handle that reads [`stats`](Self::stats) and
    /// [`memory`](Self::memory) from any thread, also while an epoch
    /// borrows the pipeline.
    pub fn monitor(&self) -> Monitor {
        Monitor::new(&self.shared, self.stage.as_ref())
    }
}

/// The most page-locked memory the readers' blocks take: 1,280 blocks of
/// 128 KiB (ImageNet-sized files at batch 256, 2 batches prefetched and 3
/// decoding) are 160 MiB; multi-megapixel files get fewer blocks, and the
/// rest heap buffers, rather than gigabytes locked.
const PINNED_READS_BYTES: usize = 256 << 20;

/// Whether `source` reads its shards from an object store.
fn remote(source: &Source) -> bool {
    #[cfg(feature = "object-store")]
    return source.store().is_some();
    #[cfg(not(feature = "object-store"))]
    {
        let _ = source;
        false
    }
}

/// The CPU backend's batch buffers, allocated here so that memory is flat
/// from the first epoch: one per batch that can exist at once while the
/// trainer holds one (`prefetch` queued, one being filled, the trainer's).
/// A trainer keeping more makes more; the pool keeps this many.
fn host_batches(cfg: &Config, cpu: bool) -> Result<BatchPool> {
    let n = cfg.prefetch + 2;
    let pool = bounded(n);
    for _ in 0..n * usize::from(cpu) {
        let bufs = cfg
            .views
            .iter()
            .map(|v| TensorData::try_zeros(cfg.dtype, cfg.batch_size * v.count * v.sample_len()))
            .collect::<Result<Vec<_>>>()?;
        let _ = pool.0.try_send(bufs);
    }
    Ok(pool)
}

type BatchPool = (
    Sender<Vec<TensorData>>,
    crossbeam_channel::Receiver<Vec<TensorData>>,
);

impl Drop for Pipeline {
    fn drop(&mut self) {
        // Closing the epoch queue ends the batch thread, whose exit closes
        // the readers' queue, whose exit closes the workers'; every thread
        // then returns on its own, once a leaked epoch is let go.
        self.end_epoch();
        self.starts = None;
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
