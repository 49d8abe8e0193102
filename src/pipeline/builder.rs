//! `Pipeline::builder()`: every setting, its default, and validation.

use std::sync::{Arc, Once};

use super::Pipeline;
use crate::augment::{DType, Fma, Layout, Normalize, Transform, View};
pub(crate) use crate::config::Config;
pub use crate::config::OnError;
use crate::decode::{CpuBackend, CpuDecoder};
use crate::error::{Error, Result};
use crate::jpeg::DEFAULT_MAX_PIXELS;
use crate::reader::ReadBytes;
use crate::sampler::ShardMode;
use crate::source::Source;
use crate::stage::Engine;
use crate::stage::cuda::CudaEngine;

mod validate;

/// Where batches are produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[allow(clippy::manual_non_exhaustive)] // `Emulated` is hidden, not a placeholder.
pub enum Device {
    /// Decode and augment on CPU threads; batches in host memory.
    Cpu,
    /// The GPU when one is usable, otherwise the CPU with a one-line notice.
    #[default]
    Auto,
    /// CUDA device `i`; an error when it cannot be used.
    Cuda(usize),
    /// The CUDA stage on an emulated device: the kernel source compiled for
    /// the host, batches in host memory. For tests of the device stage on
    /// machines without a GPU (feature `kernel-emu`); slow.
    #[cfg(feature = "kernel-emu")]
    #[doc(hidden)]
    Emulated,
}

/// Share of the images the hardware JPEG engine supports that go to it.
/// 0 since session 52: with the sequential scan kernels on (the default)
/// the CUDA share decodes on gpufeed's own kernels, no longer with
/// Huffman decoding on the workers, and on an H200 (2026-11-30, 16
/// cores, `photos/imagenet-size`, batch 256, f16) share 0 with 6 batches
/// in flight ran 46,496 img/s at 0.172 CPU-ms per image (38,490 at 0.198
/// in a second call, at 50e26ac) against the engine's 15,046 at 0.236
/// (13,869 at 0.255) with 3 in flight, and `photos/full` 7,328 against
/// 7,269 (6,894 against 6,306): docs/BENCHMARKS.md. The rule that chose
/// it was written before those runs (docs/RELIABILITY.md, "The next
/// lease"). Before, on an H100 (2026-11-22, a304280), share 1 ran 5,833
/// img/s at 0.33 CPU-ms per image and share 0 with nvJPEG's CUDA route
/// 11,327 at 1.30, every mix slower than either end; DALI's 0.65
/// (`hw_decoder_load`) was tuned on A100s.
const DEFAULT_HARDWARE_SHARE: f32 = 0.0;

/// Configures and builds a [`Pipeline`].
#[derive(Debug, Clone)]
pub struct PipelineBuilder {
    source: Option<Source>,
    batch_size: usize,
    seed: u64,
    shuffle: bool,
    rank: usize,
    world_size: usize,
    shard_mode: ShardMode,
    drop_last: bool,
    readers: usize,
    workers: Option<usize>,
    prefetch: usize,
    device: Device,
    on_error: OnError,
    size: (usize, usize),
    transform: Transform,
    /// `None`: the transform's default (`Transform::default_flip_h`).
    flip_h: Option<f32>,
    flip_v: f32,
    views: Option<Vec<View>>,
    antialias: bool,
    dtype: DType,
    layout: Layout,
    normalize: Option<Normalize>,
    max_pixels: u64,
    max_file_bytes: u64,
    apply_orientation: bool,
    cpu_backend: CpuBackend,
    staging_bytes: Option<usize>,
    io: Option<Arc<dyn ReadBytes>>,
    gpu_decode: bool,
    hardware_share: f32,
    hardware_share_auto: bool,
    in_flight: usize,
    engine_call: usize,
    engine_context: bool,
    progressive: bool,
    sequential: bool,
    sequential_max_pixels: u64,
    decoder_memory: u64,
    kernel_memory: u64,
    trace: bool,
    stream_buffer: Option<usize>,
    mixup: Option<crate::augment::Mixup>,
}

impl Default for PipelineBuilder {
    fn default() -> Self {
        PipelineBuilder {
            source: None,
            batch_size: 256,
            seed: 0,
            shuffle: true,
            rank: 0,
            world_size: 1,
            shard_mode: ShardMode::Pad,
            drop_last: false,
            readers: 2,
            workers: None,
            prefetch: 2,
            device: Device::Auto,
            on_error: OnError::Skip,
            size: (224, 224),
            transform: Transform::RANDOM_RESIZED_CROP,
            flip_h: None,
            flip_v: 0.0,
            views: None,
            antialias: true,
            dtype: DType::F32,
            layout: Layout::Nchw,
            normalize: Some(Normalize::IMAGENET),
            max_pixels: DEFAULT_MAX_PIXELS,
            max_file_bytes: 256 << 20,
            apply_orientation: true,
            cpu_backend: CpuBackend::Zune,
            staging_bytes: None,
            io: None,
            gpu_decode: true,
            hardware_share: DEFAULT_HARDWARE_SHARE,
            hardware_share_auto: false,
            in_flight: DEFAULT_IN_FLIGHT,
            engine_call: 0,
            engine_context: false,
            progressive: std::env::var("GPUFEED_PROGRESSIVE_GPU").as_deref() == Ok("1"),
            sequential: std::env::var("GPUFEED_SEQUENTIAL_GPU").as_deref() != Ok("0"),
            sequential_max_pixels: std::env::var("GPUFEED_SEQUENTIAL_MAX_PIXELS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(u64::MAX),
            decoder_memory: DEFAULT_DECODER_MEMORY,
            kernel_memory: u64::MAX,
            trace: false,
            stream_buffer: None,
            mixup: None,
        }
    }
}

impl PipelineBuilder {
    /// The dataset. Required.
    pub fn source(mut self, source: Source) -> Self {
        self.source = Some(source);
        self
    }

    /// Images per batch. Default 256.
    pub fn batch_size(mut self, n: usize) -> Self {
        self.batch_size = n;
        self
    }

    /// Seed of the epoch permutations and of per-sample randomness.
    /// Default 0.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Shuffle the samples each epoch. Default true.
    pub fn shuffle(mut self, yes: bool) -> Self {
        self.shuffle = yes;
        self
    }

    /// This process is `rank` of `world_size` data-parallel ranks.
    /// Default `(0, 1)`.
    pub fn shard(mut self, rank: usize, world_size: usize) -> Self {
        self.rank = rank;
        self.world_size = world_size;
        self
    }

    /// How an uneven dataset is shared among ranks. Default
    /// [`ShardMode::Pad`] (PyTorch `DistributedSampler`'s default).
    pub fn shard_mode(mut self, mode: ShardMode) -> Self {
        self.shard_mode = mode;
        self
    }

    /// Stream WebDataset shards instead of reading samples in a random
    /// order: each rank reads its own shards (`rank, rank + world, ...`)
    /// front to back, in an order shuffled per epoch, and samples pass
    /// through a shuffle buffer of `buffer` samples, like WebDataset's
    /// `shardshuffle=True` + `.shuffle(buffer)`
    /// ([`Sampler::stream_shards`](crate::sampler::Sampler::stream_shards)).
    /// Shards in object storage are then fetched in large sequential
    /// ranges (8 MiB chunks, two fetched ahead, kept while the buffer
    /// needs them, at most about 1 GiB) instead of a request per sample. Needs a [`Source::webdataset`] source with
    /// at least as many shards as ranks. Default off: every sample
    /// reachable in any order (a full-epoch shuffle).
    pub fn stream_shards(mut self, buffer: usize) -> Self {
        self.stream_buffer = Some(buffer);
        self
    }

    /// Drop the last batch of an epoch when it is smaller than the batch
    /// size. Default false.
    pub fn drop_last(mut self, yes: bool) -> Self {
        self.drop_last = yes;
        self
    }

    /// I/O threads that read file bytes. Default 2.
    pub fn readers(mut self, n: usize) -> Self {
        self.readers = n;
        self
    }

    /// CPU threads that decode (and, on the CPU backend, augment). Default:
    /// the number of available cores.
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = Some(n);
        self
    }

    /// Batches prepared ahead of the consumer. Default 2. A thread of the
    /// pipeline assembles them (and on the CUDA backend enqueues their
    /// decodes, copies and kernels) while the trainer works, from the moment
    /// an epoch is created; [`Epoch::ready`](crate::Epoch::ready) says how
    /// many wait. The CPU backend allocates `prefetch + 2` batch buffers at
    /// `build()`; the CUDA backend owns `prefetch + 1` device batch slots,
    /// and a trainer that holds all of them and asks for another batch gets
    /// an error instead of a deadlock.
    pub fn prefetch(mut self, n: usize) -> Self {
        self.prefetch = n;
        self
    }

    /// Where to decode and augment. Default [`Device::Auto`].
    pub fn device(mut self, device: Device) -> Self {
        self.device = device;
        self
    }

    /// Policy for samples that fail. Default [`OnError::Skip`].
    pub fn on_error(mut self, policy: OnError) -> Self {
        self.on_error = policy;
        self
    }

    /// Output image size `(height, width)`. Default `(224, 224)`.
    pub fn output_size(mut self, height: usize, width: usize) -> Self {
        self.size = (height, width);
        self
    }

    /// Geometry of the output. Default [`Transform::RANDOM_RESIZED_CROP`]
    /// (torchvision's defaults); [`Transform::CenterCrop`] for evaluation.
    /// Unless [`flip_h`](Self::flip_h) is set, the flip follows the
    /// transform: 0.5 for RandomResizedCrop, none for CenterCrop and Resize,
    /// as in torchvision's and DALI's training and evaluation pipelines.
    pub fn transform(mut self, transform: Transform) -> Self {
        self.transform = transform;
        self
    }

    /// Probability of mirroring a sample left-right. Default: the
    /// transform's ([`Transform::default_flip_h`]): 0.5 for
    /// RandomResizedCrop, 0 for CenterCrop and Resize.
    pub fn flip_h(mut self, p: f32) -> Self {
        self.flip_h = Some(p);
        self
    }

    /// Probability of mirroring a sample top-bottom. Default 0.
    pub fn flip_v(mut self, p: f32) -> Self {
        self.flip_v = p;
        self
    }

    /// Several views per sample (multi-crop self-supervised recipes). Each
    /// [`View`] gives one tensor per batch, of shape `[n * count, 3, h, w]`
    /// (NCHW) with sample `i`'s draws at rows `i * count .. (i + 1) * count`,
    /// so it reshapes to `[n, count, 3, h, w]`. Replaces `output_size`,
    /// `transform` and the flips. Default: one view built from those.
    pub fn views(mut self, views: Vec<View>) -> Self {
        self.views = Some(views);
        self
    }

    /// A known recipe ([`crate::augment::Recipe`]: ImageNet train/eval,
    /// SimCLR, BYOL, DINO): sets [`views`](Self::views) and
    /// [`normalize`](Self::normalize) from it. Later calls override either.
    pub fn recipe(self, recipe: crate::augment::Recipe) -> Self {
        self.views(recipe.views).normalize(recipe.normalize)
    }

    /// Mixup and CutMix on every batch, with timm's `Mixup` semantics
    /// (`mode="batch"`): images mixed with the batch flipped, and
    /// [`Batch::soft_labels`](crate::Batch::soft_labels) of `[batch,
    /// num_classes]`. One view of one draw only. Default: none.
    pub fn mixup(mut self, mixup: crate::augment::Mixup) -> Self {
        self.mixup = Some(mixup);
        self
    }

    /// Antialias when shrinking: a triangle filter over the source
    /// footprint, like torchvision v2's `antialias=True` (the default of
    /// `RandomResizedCrop` and `Resize` since torchvision 0.17), PIL and
    /// DALI. Default true; false gives plain bilinear interpolation
    /// (torchvision's `antialias=False`).
    pub fn antialias(mut self, yes: bool) -> Self {
        self.antialias = yes;
        self
    }

    /// Output element type. Default [`DType::F32`].
    pub fn dtype(mut self, dtype: DType) -> Self {
        self.dtype = dtype;
        self
    }

    /// Output layout. Default [`Layout::Nchw`].
    pub fn layout(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self
    }

    /// Normalization, or `None` for raw 0..=255 values. Default
    /// [`Normalize::IMAGENET`]. Must be `None` for [`DType::U8`].
    pub fn normalize(mut self, normalize: Option<Normalize>) -> Self {
        self.normalize = normalize;
        self
    }

    /// Images with more pixels are refused before decoding. Default
    /// 100 000 000.
    pub fn max_pixels(mut self, n: u64) -> Self {
        self.max_pixels = n;
        self
    }

    /// Files larger than this are refused before reading. Default 256 MiB.
    pub fn max_file_bytes(mut self, n: u64) -> Self {
        self.max_file_bytes = n;
        self
    }

    /// Apply EXIF orientation before any geometry. Default true.
    pub fn apply_exif_orientation(mut self, yes: bool) -> Self {
        self.apply_orientation = yes;
        self
    }

    /// The library that decodes on CPU threads (the CPU backend, and the
    /// GPU backend's fallback route). Default [`CpuBackend::Zune`].
    /// [`CpuBackend::TurboJpeg`] decodes only the columns an image's crops
    /// read, from their top row down (sequential JPEGs that need no EXIF
    /// rotation; the pixels are a full decode's): about 8 % less decode
    /// time for random-resized crops of ImageNet-sized photos
    /// (docs/BENCHMARKS.md).
    pub fn cpu_backend(mut self, backend: CpuBackend) -> Self {
        self.cpu_backend = backend;
        self
    }

    /// Pinned host staging per device batch slot, for decoded pixels on
    /// their way to the augment kernel (CUDA backend). A batch whose crops
    /// need more is launched in several parts; one image whose crop needs
    /// more is augmented on the CPU. Default 256 KiB × `batch_size` (the
    /// crop of an ImageNet-size photo is ~150 KiB on average).
    pub fn staging_bytes(mut self, bytes: usize) -> Self {
        self.staging_bytes = Some(bytes);
        self
    }

    /// Decode JPEGs on the GPU on the CUDA backend: sequential ones with
    /// gpufeed's scan kernels (see
    /// [`sequential_kernels`](Self::sequential_kernels)), the rest with
    /// nvJPEG, and the hardware engine's share (see
    /// [`hardware_decode_share`](Self::hardware_decode_share)) on the
    /// engine; what none of them takes, and images that need EXIF
    /// rotation, are decoded on CPU threads. Default true; false decodes
    /// everything on CPU threads. Ignored on the CPU backend.
    pub fn gpu_decode(mut self, yes: bool) -> Self {
        self.gpu_decode = yes;
        self
    }

    /// Share (0..=1) of the images the hardware JPEG engine supports that
    /// are sent to it; the rest decode on the CUDA route (gpufeed's scan
    /// kernels, see [`sequential_kernels`](Self::sequential_kernels), else
    /// nvJPEG with Huffman decoding on the worker threads). Default 0: on
    /// an H200 the scan kernels at share 0 ran 2.8 to 3.1 times the
    /// engine's img/s at share 1, at less CPU time per image
    /// (2026-11-30, docs/BENCHMARKS.md); 1 leaves the SMs to training,
    /// at about a third of the speed. Measure with `gpufeed bench --sweep
    /// hardware-share=0,1`. Which
    /// images go is drawn from `(seed, epoch, sample)`, like the crops, so
    /// an epoch's pixels do not depend on what else shares its batches.
    /// [`hardware_decode_share_auto`](Self::hardware_decode_share_auto)
    /// steers it instead, starting here. At 0 (not steered) the engine is
    /// not set up at all: setting it up took 1.8 s of `build()` on an H200
    /// with 6 batches in flight (4bbffad, 2026-11-27).
    pub fn hardware_decode_share(mut self, share: f32) -> Self {
        self.hardware_share = share;
        self
    }

    /// Steer the hardware engine's share while the pipeline runs, starting
    /// at [`hardware_decode_share`](Self::hardware_decode_share) (issue 16,
    /// item 3). Once a batch, the batch thread measures what each route
    /// costs per image (the engine's busy time; the workers' time in CUDA
    /// host phases and in everything else) and sets the share at which
    /// both routes finish a batch together
    /// (`decode::nvjpeg` `Costs::balance` has the formula). Until both
    /// routes have been measured the share stays within 1/16 of 0 and 1,
    /// and after that at most 1 − 1/64, so that the CUDA route stays
    /// measured.
    /// When the trainer, not the pipeline, sets the pace, it goes further
    /// toward the engine, as far as the engine keeps up with 20 % to
    /// spare (`Costs::share`): each image the engine takes instead of CUDA
    /// saves a worker its Huffman decoding (issue 16, item 4).
    ///
    /// Default false. The crops, flips and every other draw stay functions
    /// of `(seed, epoch, sample)`, but which nvJPEG decoder produces an
    /// image's pixels then depends on timing, and the two round
    /// differently (about 50 dB apart), so batches are not bit-identical
    /// from run to run. Ignored without a hardware engine. With the scan
    /// kernels on (the default) they are the CUDA share's side: the share
    /// at which the engine lanes and the kernels' lanes are busy alike,
    /// each priced by its lanes' busy time per image (session 61,
    /// `Costs::balance`; unmeasured on a GPU, where on the pipeline's
    /// context every engine share between 0 and 1 ran slower than share
    /// 0, see the hidden `engine_context`).
    pub fn hardware_decode_share_auto(mut self, yes: bool) -> Self {
        self.hardware_share_auto = yes;
        self
    }

    /// Batches whose JPEGs decode on the device at once (nvJPEG route,
    /// CUDA backend): while the scan kernels or the hardware engine decode
    /// the next batch, the augment kernel and the trainer work on the one
    /// before. Each costs a decode arena of 4 × `staging_bytes` of device
    /// memory, a scan-kernel lane and, at an engine share above 0, an
    /// engine lane (a thread with its own nvJPEG state and stream). 1
    /// decodes one batch at a time. Default 6: on an H200 (2026-11-30,
    /// aeb05d5, the scan kernels at share 0) 4, 6 and 8 ran 43,837, 46,853
    /// and 44,997 img/s (docs/BENCHMARKS.md); at share 1 (243e3c9) past 3
    /// the engine was the limit. Ignored by the CPU backend and by
    /// `gpu_decode(false)`.
    pub fn batches_in_flight(mut self, n: usize) -> Self {
        self.in_flight = n;
        self
    }

    /// Images per hardware-engine call (nvJPEG route, CUDA backend): a
    /// batch's engine share goes to the engine lanes in calls of this many
    /// as the batch fills, instead of in one call once it is full, so the
    /// engine starts on a batch sooner and its calls can be sized to its
    /// engines × cores (`gpufeed decode-bench` prints them). Default 0:
    /// one call per batch. Unmeasured, so hidden until a GPU run picks a
    /// default (`gpufeed bench --sweep engine-call=0,32,64`); the batches
    /// are the same either way.
    #[doc(hidden)]
    pub fn engine_call_images(mut self, n: usize) -> Self {
        self.engine_call = n;
        self
    }

    /// Run the hardware engine's lanes in a CUDA context of their own
    /// (nvJPEG route, CUDA backend, engine share above 0), their images
    /// copied into the decode arena after each call. nvJPEG's hardware
    /// call frees memory, and a free waits for every stream of its
    /// context: on the pipeline's context each engine call waited for the
    /// scan kernels in flight (about 280 ms a call beside them, 18–30 ms
    /// alone, on an H200 at 0d15f52, 2026-11-27), the likely reason every
    /// engine share between 0 and 1 ran slower than both ends (issue 16,
    /// item 3). The lanes' own context blocks in its waits instead of
    /// spinning, nvJPEG's own included (issue 16, item 4: the lanes spent
    /// 0.136 CPU-ms per image at share 1 on an H200, 0de8cfd,
    /// 2026-11-30), which on the pipeline's context would change the
    /// trainer's waits too. Default false.
    /// Unmeasured, so hidden until a GPU run says whether it helps
    /// (`gpufeed bench --sweep engine-context=0,1`); the batches are the
    /// same either way. The readers' page-locked blocks are made for
    /// every context, so the engine reads them as before. Ignored by the
    /// CPU backend and the emulated device, which have no contexts.
    #[doc(hidden)]
    pub fn engine_context(mut self, yes: bool) -> Self {
        self.engine_context = yes;
        self
    }

    /// Decode progressive JPEGs on the device with gpufeed's own kernels
    /// (`kernels/progressive.cu`, `pixels.cu`; nvJPEG route, CUDA backend):
    /// no engine decodes them, and their Huffman decoding on the workers
    /// was about 0.1 CPU-ms of every image's cost on photos/imagenet-size
    /// (issue 16). The workers pass them on compressed; lanes of their own
    /// decode each batch's into its decode arena, equal to libjpeg-turbo
    /// byte for byte (tests/progressive.rs, tests/kernel_routes.rs); what
    /// they refuse (incomplete
    /// progressions, CMYK, damaged scans) decodes as the engine's
    /// refusals do. Default false, or true where the environment sets
    /// `GPUFEED_PROGRESSIVE_GPU=1`. Hidden: correct on an H200
    /// (2026-11-27) but slow there, since one GPU thread decodes each
    /// chain of scans and a lane waits for its batch's slowest image
    /// (~70 ms), so the pipeline ran at a quarter of its speed
    /// (docs/BENCHMARKS.md). The emulated device runs it with the kernels
    /// compiled for the host.
    #[doc(hidden)]
    pub fn progressive_kernels(mut self, yes: bool) -> Self {
        self.progressive = yes;
        self
    }

    /// Decode the CUDA route's sequential JPEGs (the share the hardware
    /// engine does not take) with gpufeed's scan kernels
    /// (`kernels/progressive.cu`), at lanes of their own, instead of
    /// nvJPEG, whose host phase costs the workers about 1 CPU-ms of
    /// Huffman decoding per image (issue 16, item 3c). The kernels split
    /// each scan into subsequences of 256 bytes, one GPU thread each,
    /// resynchronised in 16 rounds and a check. Progressive files stay on
    /// the workers (see `progressive_kernels`).
    ///
    /// Default true, or false where the environment sets
    /// `GPUFEED_SEQUENTIAL_GPU=0`. On an H200 (2026-11-30, 16 cores,
    /// batch 256, f16, 6 batches in flight, share 0) it ran
    /// `photos/imagenet-size` at 46,496 img/s and 0.172 CPU-ms per image
    /// (38,490 and 0.198 in a second call), against 15,046 (13,869) for
    /// the hardware engine alone, and `photos/full` at 7,328 (6,894)
    /// against 7,269 (6,306): docs/BENCHMARKS.md. It holds more device
    /// memory than the engine: 1.9 GiB of arenas and 3.1 GiB of
    /// coefficient and sample buffers there (`Pipeline::memory`); the
    /// latter are bounded by
    /// [`kernel_memory_limit`](Self::kernel_memory_limit).
    ///
    /// Equal to libjpeg-turbo byte for byte on the emulated device
    /// (tests/progressive.rs, tests/kernel_routes.rs); what the kernels
    /// refuse (12-bit, incomplete progressions, damaged scans) decodes on
    /// nvJPEG's route or the CPU, as the engine's refusals do. The
    /// automatic share
    /// ([`hardware_decode_share_auto`](Self::hardware_decode_share_auto))
    /// prices this side by the kernels' lanes' busy time per image (since
    /// session 61; before, by the workers' host phases, which these
    /// images skip, so it stayed at 1/16).
    pub fn sequential_kernels(mut self, yes: bool) -> Self {
        self.sequential = yes;
        self
    }

    /// With [`sequential_kernels`](Self::sequential_kernels), sequential
    /// JPEGs of more than `pixels` pixels skip the scan kernels: they go
    /// to the hardware engine where it takes them, whatever
    /// [`hardware_decode_share`](Self::hardware_decode_share) says (the
    /// engine lanes are then made even at a share of 0), and otherwise to
    /// nvJPEG's CUDA route (its GPU Huffman from 1 MP). A fallback for
    /// multi-megapixel photos, which ran at 756 img/s on the kernels
    /// against 5,860 on the engine (`photos/full`, H200, 4bbffad,
    /// docs/BENCHMARKS.md), should more rounds of resynchronisation not
    /// close that gap. Default: no limit, or
    /// `GPUFEED_SEQUENTIAL_MAX_PIXELS` where the environment sets it.
    #[doc(hidden)]
    pub fn sequential_kernels_max_pixels(mut self, pixels: u64) -> Self {
        self.sequential_max_pixels = pixels;
        self
    }

    /// Bytes of pinned plus device memory nvJPEG may hold for the CUDA
    /// route's pooled decoders (CUDA backend). Each decoder's buffers grow
    /// to the largest image it decoded, and there is one decoder per
    /// sample in flight; below 3/8 of this limit, buffers are grown ahead
    /// to the pool's largest (each growth waits for the device); past 3/4,
    /// decoders are freed as they come back (and made afresh), and an
    /// allocation past the limit is refused, so that image decodes on the
    /// worker's CPU decoder instead: a low limit costs speed, not samples.
    /// [`Pipeline::memory`](crate::Pipeline::memory) reports what nvJPEG
    /// holds. Default 4 GiB (on photos/imagenet-size the pool took about
    /// 0.8 GiB; docs/BENCHMARKS.md). Ignored by the CPU backend and by
    /// `gpu_decode(false)`.
    pub fn decoder_memory_limit(mut self, bytes: u64) -> Self {
        self.decoder_memory = bytes;
        self
    }

    /// Bytes of device memory the scan kernels' lanes (see
    /// [`sequential_kernels`](Self::sequential_kernels)) may hold for their
    /// calls' files, coefficients and samples, all lanes together (CUDA
    /// backend). Every lane's buffers grow to twice the largest call met
    /// by any lane where the limit allows (else to that call), from the
    /// first calls on, and stay; with a limit,
    /// each lane has `bytes / lanes`, a call larger than that decodes in
    /// parts one after another, and a file larger alone decodes as the
    /// kernels' refusals do (nvJPEG, else the CPU): a low limit costs
    /// speed, not samples.
    /// [`Pipeline::memory`](crate::Pipeline::memory) reports what they
    /// hold (`kernel_device_bytes`). Default: a quarter of the device's
    /// memory (`u64::MAX` asks for the default). On an H200 with 6
    /// batches in flight they held 3.1 GiB on `photos/imagenet-size` at
    /// batch 256 (2026-11-30, docs/BENCHMARKS.md), far under it; without
    /// a bound, 256 photos of 12 MP a call would have the lanes ask for
    /// more than an H100 has. At least 1 MiB; ignored by the CPU backend,
    /// the emulated device (no bound) and without the scan kernels.
    pub fn kernel_memory_limit(mut self, bytes: u64) -> Self {
        self.kernel_memory = bytes;
        self
    }

    /// Record a timeline of the pipeline's work (reads, parses, decodes,
    /// augments, the device stage's calls, the trainer's waits), read with
    /// [`Pipeline::trace_json`](crate::Pipeline::trace_json). Default
    /// false. Keeps at most about a million spans (~50 MB).
    pub fn trace(mut self, yes: bool) -> Self {
        self.trace = yes;
        self
    }

    /// Where the reader threads get bytes. Default
    /// [`FileReader`](crate::reader::FileReader) (the local file system),
    /// whose reads go straight into the readers' buffers, page-locked ones
    /// where the hardware JPEG engine decodes (its copies to the device
    /// then read them without a CPU copy); another reader fills heap
    /// buffers.
    pub fn read_bytes(mut self, io: impl ReadBytes + 'static) -> Self {
        self.io = Some(Arc::new(io));
        self
    }

    /// Check the settings, pick the device and start the threads.
    pub fn build(mut self) -> Result<Pipeline> {
        let views = self.validate()?;
        let Some(source) = self.source.take() else {
            return Err(Error::Config("no source".into()));
        };
        let began = std::time::Instant::now();
        // The kernel files this pipeline will load, compiled at once.
        let needs = crate::cuda::launch::KernelNeeds {
            photo: views.iter().any(|v| v.photo.any()),
            mix: self.mixup.is_some(),
            scans: self.gpu_decode && (self.progressive || self.sequential),
        };
        let engine = match self.device {
            Device::Cpu => None,
            Device::Auto => match CudaEngine::new(0, needs) {
                Ok(e) => Some(Engine::Cuda(e)),
                Err(e) => {
                    static NOTICE: Once = Once::new();
                    NOTICE.call_once(|| eprintln!("gpufeed: no usable GPU ({e}); using the CPU"));
                    None
                }
            },
            Device::Cuda(i) => Some(Engine::Cuda(CudaEngine::new(i, needs).map_err(
                |e| match e {
                    Error::Device(m) if m.starts_with("cuda:") => Error::Device(m),
                    Error::Device(m) => Error::Device(format!("cuda:{i}: {m}")),
                    other => other,
                },
            )?)),
            #[cfg(feature = "kernel-emu")]
            Device::Emulated => Some(Engine::Emu(crate::stage::EmuDevice)),
        };
        let sampler = self.sampler(&source)?;
        let workers = self.workers.unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        });
        let decoders = (0..workers)
            .map(|_| CpuDecoder::with_backend(self.cpu_backend, self.apply_orientation))
            .collect::<Result<Vec<_>>>()?;
        let config = Config {
            batch_size: self.batch_size,
            drop_last: self.drop_last,
            readers: self.readers,
            prefetch: self.prefetch,
            on_error: self.on_error,
            seed: self.seed,
            views,
            antialias: self.antialias,
            dtype: self.dtype,
            layout: self.layout,
            max_pixels: self.max_pixels,
            max_file_bytes: self.max_file_bytes,
            fma: self.normalize.map_or(Fma::IDENTITY, |n| n.fold()),
            staging_bytes: self
                .staging_bytes
                .unwrap_or(self.batch_size.saturating_mul(256 << 10)),
            gpu_decode: self.gpu_decode,
            hardware_share: self.hardware_share,
            hardware_share_auto: self.hardware_share_auto,
            workers,
            in_flight: self.in_flight,
            engine_call: self.engine_call,
            engine_context: self.engine_context,
            progressive: self.progressive,
            sequential: self.sequential,
            sequential_max_pixels: self.sequential_max_pixels,
            decoder_memory: self.decoder_memory,
            kernel_memory: self.kernel_memory,
            cpu_backend: self.cpu_backend,
            apply_orientation: self.apply_orientation,
            trace: self.trace,
            stream_buffer: self.stream_buffer,
            mixup: self.mixup,
        };
        Pipeline::start(source, sampler, config, decoders, engine, self.io, began)
    }
}

/// Batches decoding at once by default. 6 with the scan kernels' lanes
/// (one call per batch, each waiting for its batch's slowest file): on an
/// H200 (2026-11-30, aeb05d5) 4, 6 and 8 ran 43,837, 46,853 and 44,997
/// img/s, 6 the best, at 0.5 GiB more device memory than 4
/// (docs/BENCHMARKS.md).
const DEFAULT_IN_FLIGHT: usize = 6;

/// `decoder_memory_limit`'s default (issue 16, item 5). On
/// photos/imagenet-size at batch 256 the pool added about 0.8 GiB of
/// pinned memory to peak RSS (H100, 2026-11-22); its device memory was not
/// measured then. 4 GiB is meant to leave both room, so that the measured
/// configurations never trim: to be confirmed on a GPU with the counts
/// `Pipeline::memory` now gives.
const DEFAULT_DECODER_MEMORY: u64 = 4 << 30;
