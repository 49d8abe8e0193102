//! gpufeed feeds decoded, augmented image batches to a training loop.
//!
//! The data flows one way:
//!
//! ```text
//! Source ─► Sampler ─► readers ─► header parse ─► decode ─► augment ─► Batch
//! (files)   (epoch     (threads,  (dims, EXIF,    (CPU      (crop,     (images,
//!            order,     bytes      pixel limit)    threads;  resize,    labels,
//!            shards)    only)                      or on     flip,      keys)
//!                                                  the GPU:  normalize,
//!                                                  scan      cast: CUDA
//!                                                  kernels,  kernel or CPU)
//!                                                  nvJPEG)
//! ```
//!
//! On the CUDA backend ([`Device::Cuda`], or [`Device::Auto`] with a usable
//! GPU) JPEGs decode on the GPU: sequential ones with gpufeed's own scan
//! kernels ([`PipelineBuilder::sequential_kernels`], on by default),
//! progressive ones with nvJPEG (their Huffman decoding on the worker
//! threads, on the GPU from 1 MP), and a share of them on the hardware
//! JPEG engine where the GPU has one
//! ([`PipelineBuilder::hardware_decode_share`], default 0), which decodes
//! only the crop window. The crops of images decoded on CPU threads (what
//! no GPU route takes) are staged in pinned memory, and one kernel launch
//! per view spec produces the batch in device memory, `prefetch` batches
//! ahead of the trainer ([`Epoch::ready`]): the trainer gets a zero-copy
//! view ([`Tensor::cuda_f16`] and friends, or [`Tensor::device_ptr`]) and
//! an event to wait on ([`Batch::event`]). Dropping the [`Batch`] gives
//! its buffers back to the pipeline.
//!
//! A [`Source`] lists `(file, label)` pairs; a [`Pipeline`] built from it runs
//! reader and decode threads and yields [`Batch`]es per epoch. Every random
//! choice is a pure function of `(seed, epoch, sample)`, so an epoch's
//! batches do not depend on thread counts or timing, and a run can resume
//! mid-epoch from [`Batch::resume_position`].
//!
//! ```no_run
//! use gpufeed::{DType, Device, Pipeline, Source, Transform};
//!
//! # fn main() -> gpufeed::Result<()> {
//! let mut pipeline = Pipeline::builder()
//!     .source(Source::image_folder("data/imagenet/train")?)
//!     .batch_size(256)
//!     .output_size(224, 224)
//!     .transform(Transform::RANDOM_RESIZED_CROP) // torchvision's defaults
//!     .flip_h(0.5)
//!     .dtype(DType::F16)
//!     .seed(42)
//!     .shard(0, 1)
//!     .device(Device::Cpu)
//!     .build()?;
//! for epoch in 0..90 {
//!     for batch in pipeline.epoch(epoch) {
//!         let batch = batch?;
//!         let images = batch.images(); // [256, 3, 224, 224] f16, NCHW
//!         let labels = batch.labels();
//!         # let _ = (images, labels);
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! Other frameworks take a batch without a copy through DLPack
//! ([`interop::dlpack`]: PyTorch, JAX, CuPy, NumPy), candle on the CPU
//! (feature `candle`), and Python through the bindings in `python/`.
//!
//! Samples that cannot be read or decoded never end an epoch by accident:
//! under [`OnError::Skip`](pipeline::OnError::Skip) (the default) they are left out, counted in
//! [`Pipeline::stats`] and listed with their file in [`Batch::skipped`].

#![deny(unsafe_op_in_unsafe_fn)]
// `unsafe` is allowed only in the FFI modules (src/cuda/, src/decode/nvjpeg/,
// the turbojpeg and DLPack bindings), the device stage's CUDA backend
// (src/stage/cuda.rs) and the thread priority call (src/sched.rs), each
// block with a SAFETY comment.
#![deny(unsafe_code)]

pub mod augment;
mod config;
mod contain;
pub mod cuda;
pub mod decode;
pub mod error;
mod files;
#[doc(hidden)]
pub mod fuzz;
pub mod interop;
pub mod jpeg;
pub mod pipeline;
pub mod reader;
pub mod sampler;
mod sched;
mod sizes;
pub mod source;
// The device stage; public only for the CLI's decode benchmark.
#[doc(hidden)]
pub mod stage;
mod tensor;

// The types of the read → decode → augment → batch flow; the rest lives in
// the modules (`pipeline::{OnError, Stats, Memory}`, `augment::{Normalize,
// View}`, `error::SampleError`, `source::Sample`, `sampler::ShardMode`,
// `reader::ReadBytes`, ...).
pub use augment::{DType, Layout, Transform};
pub use error::{Error, Result};
pub use pipeline::{Batch, Device, Epoch, Pipeline, PipelineBuilder, Tensor};
pub use source::Source;

// The element types of the tensors (`half::f16`, `half::bf16`) and the CUDA
// types of the device views (`cudarc::driver::CudaView`), at the versions
// gpufeed is built with, so a trainer can name them without a second,
// possibly different, version in its own Cargo.toml.
pub use cudarc;
pub use half;

// The README's code is compiled and its example type-checked with the
// crate's doctests (issue 15: the example must build as written).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
