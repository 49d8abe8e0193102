//! `gpufeed` for Python (issue 17, item 4): a pipeline object whose epochs
//! yield `(images, labels)` as DLPack-capable tensors, so that
//! `torch.from_dlpack`, `numpy.from_dlpack`, JAX and CuPy take them without
//! a copy, on the CPU and on CUDA.
//!
//! The pipeline lives on a thread of its own: an epoch borrows the Rust
//! pipeline for as long as it runs, which a Python iterator object cannot
//! hold, so the thread iterates and hands each batch over a channel. It
//! asks the Rust epoch for a batch only when Python's `__next__` asks for
//! one, as a Rust trainer would: a thread that ran one batch ahead held a
//! device slot more than the trainer sees, and a trainer that kept one
//! batch (`prefetch=2`: three slots) found them all lent while it held
//! two (`Error::SlotsHeld`). Dropping the Python epoch (or breaking out of
//! the loop, or starting the next epoch) closes the channels, and the
//! thread drops the Rust epoch, which cancels its work.

use std::ffi::{CStr, c_void};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crossbeam_channel::{Receiver, Sender, bounded};
use gpufeed::interop::dlpack::{Dlpack, Part, SharedBatch};
use gpufeed::{DType, Device, Layout, Source, Transform};
use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

pyo3::create_exception!(
    _gpufeed,
    Error,
    pyo3::exceptions::PyRuntimeError,
    "A gpufeed error; the message names the file or setting."
);

fn err(e: gpufeed::Error) -> PyErr {
    Error::new_err(e.to_string())
}

/// What the pipeline thread is asked to do.
enum Command {
    /// Run an epoch from a position: for each message on the first
    /// channel, the next batch (or the error) on the second.
    Epoch(
        u64,
        usize,
        Receiver<()>,
        Sender<gpufeed::Result<gpufeed::Batch>>,
    ),
}

/// Python's ends of a running epoch's channels: asking for a batch, and
/// receiving it. Dropped, they end the epoch on the pipeline thread.
struct Channels {
    asks: Sender<()>,
    batches: Receiver<gpufeed::Result<gpufeed::Batch>>,
}

/// An epoch's channels, shared by its Python object and the pipeline,
/// which closes them when the next epoch starts.
type EpochChannels = Arc<Mutex<Option<Channels>>>;

/// A running gpufeed pipeline.
#[pyclass(module = "gpufeed._gpufeed")]
struct Pipeline {
    commands: Mutex<Option<Sender<Command>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// The latest epoch's channels: an epoch still open when the next one
    /// starts would keep the thread waiting on it.
    current: Mutex<Option<EpochChannels>>,
    batches_per_epoch: usize,
    samples: usize,
    /// Reads the counters without the pipeline's thread, which is busy
    /// with an epoch while one runs.
    monitor: gpufeed::pipeline::Monitor,
}

fn parse_device(s: &str) -> PyResult<Device> {
    Ok(match s {
        "cpu" => Device::Cpu,
        "auto" => Device::Auto,
        "cuda" => Device::Cuda(0),
        #[cfg(feature = "kernel-emu")]
        "emulated" => Device::Emulated,
        _ => match s.strip_prefix("cuda:").and_then(|n| n.parse().ok()) {
            Some(n) => Device::Cuda(n),
            None => {
                return Err(PyValueError::new_err(format!(
                    "device {s:?}: expected cpu, auto, cuda or cuda:N"
                )));
            }
        },
    })
}

fn parse_dtype(s: &str) -> PyResult<DType> {
    Ok(match s {
        "uint8" | "u8" => DType::U8,
        "float16" | "f16" => DType::F16,
        "bfloat16" | "bf16" => DType::BF16,
        "float32" | "f32" => DType::F32,
        _ => {
            return Err(PyValueError::new_err(format!(
                "dtype {s:?}: expected uint8, float16, bfloat16 or float32"
            )));
        }
    })
}

/// `hardware_decode_share=`: a number, or a name (`"auto"`).
#[derive(FromPyObject)]
enum ShareArg {
    Fixed(f32),
    Named(String),
}

#[pymethods]
impl Pipeline {
    /// `Pipeline(root, *, list=None, shards=None, stream_shards=None,
    /// batch_size=256, size=224, transform="train", eval_resize=None,
    /// dtype="float32", layout="nchw", normalize=True, antialias=True,
    /// seed=0, shuffle=True, rank=0, world_size=1, drop_last=False,
    /// readers=2, workers=None, prefetch=2, device="auto", gpu_decode=True,
    /// hardware_decode_share=None, batches_in_flight=None,
    /// decoder_memory_limit=None, kernel_memory_limit=None, ...)`: the
    /// builder's settings, with the builder's defaults (`None`: the
    /// library's); `hardware_decode_share="auto"` steers the share while
    /// running (`hardware_decode_share_auto`). `shards` is a list of
    /// WebDataset tar shards (paths or patterns such as
    /// `"data/shard-{000000..000127}.tar"`); `stream_shards=N` streams them
    /// through a shuffle buffer of N samples.
    #[new]
    #[pyo3(signature = (root=None, *, list=None, shards=None, stream_shards=None, batch_size=256,
        size=224, transform="train", eval_resize=None, dtype="float32", layout="nchw",
        normalize=true, antialias=true, seed=0, shuffle=true, rank=0, world_size=1,
        drop_last=false, readers=2, workers=None, prefetch=2, device="auto", recipe=None,
        mixup=None, mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.1, gpu_decode=true,
        hardware_decode_share=None, batches_in_flight=None, decoder_memory_limit=None,
        kernel_memory_limit=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        root: Option<PathBuf>,
        list: Option<PathBuf>,
        shards: Option<Vec<String>>,
        stream_shards: Option<usize>,
        batch_size: usize,
        size: usize,
        transform: &str,
        eval_resize: Option<u32>,
        dtype: &str,
        layout: &str,
        normalize: bool,
        antialias: bool,
        seed: u64,
        shuffle: bool,
        rank: usize,
        world_size: usize,
        drop_last: bool,
        readers: usize,
        workers: Option<usize>,
        prefetch: usize,
        device: &str,
        recipe: Option<&str>,
        mixup: Option<usize>,
        mixup_alpha: f32,
        cutmix_alpha: f32,
        label_smoothing: f32,
        gpu_decode: bool,
        hardware_decode_share: Option<ShareArg>,
        batches_in_flight: Option<usize>,
        decoder_memory_limit: Option<u64>,
        kernel_memory_limit: Option<u64>,
    ) -> PyResult<Pipeline> {
        let source = match (root, list, shards) {
            (Some(r), None, None) => Source::image_folder(r).map_err(err)?,
            (None, Some(l), None) => Source::file_list(l).map_err(err)?,
            (None, None, Some(s)) => Source::webdataset(&s).map_err(err)?,
            _ => {
                return Err(PyValueError::new_err(
                    "give one of root (an ImageFolder), list= (a list file) or shards= \
                     (WebDataset tar shards)",
                ));
            }
        };
        let transform = match transform {
            "train" => Transform::RANDOM_RESIZED_CROP,
            "eval" => Transform::CenterCrop {
                resize: eval_resize.unwrap_or((size * 8 / 7) as u32),
            },
            "resize" => Transform::Resize,
            t => {
                return Err(PyValueError::new_err(format!(
                    "transform {t:?}: expected train, eval or resize"
                )));
            }
        };
        let layout = match layout {
            "nchw" => Layout::Nchw,
            "nhwc" => Layout::Nhwc,
            l => return Err(PyValueError::new_err(format!("layout {l:?}: nchw or nhwc"))),
        };
        let dtype = parse_dtype(dtype)?;
        let mut b = gpufeed::Pipeline::builder()
            .source(source)
            .batch_size(batch_size)
            .output_size(size, size)
            .transform(transform)
            .dtype(dtype)
            .layout(layout)
            .normalize(normalize.then_some(gpufeed::augment::Normalize::IMAGENET))
            .antialias(antialias)
            .seed(seed)
            .shuffle(shuffle)
            .shard(rank, world_size)
            .drop_last(drop_last)
            .readers(readers)
            .prefetch(prefetch)
            .device(parse_device(device)?)
            .gpu_decode(gpu_decode);
        match hardware_decode_share {
            Some(ShareArg::Fixed(share)) => b = b.hardware_decode_share(share),
            Some(ShareArg::Named(name)) if name == "auto" => b = b.hardware_decode_share_auto(true),
            Some(ShareArg::Named(name)) => {
                return Err(PyValueError::new_err(format!(
                    "hardware_decode_share={name:?}: a number in 0..=1 or \"auto\""
                )));
            }
            None => {}
        }
        if let Some(n) = batches_in_flight {
            b = b.batches_in_flight(n);
        }
        if let Some(bytes) = decoder_memory_limit {
            b = b.decoder_memory_limit(bytes);
        }
        if let Some(bytes) = kernel_memory_limit {
            b = b.kernel_memory_limit(bytes);
        }
        if let Some(w) = workers {
            b = b.workers(w);
        }
        if let Some(buffer) = stream_shards {
            b = b.stream_shards(buffer);
        }
        if let Some(name) = recipe {
            let r = gpufeed::augment::Recipe::by_name(name).ok_or_else(|| {
                PyValueError::new_err(format!(
                    "recipe {name:?}: one of {:?}",
                    gpufeed::augment::Recipe::NAMES
                ))
            })?;
            let norm = r.normalize.filter(|_| normalize);
            b = b.recipe(r).normalize(norm);
        }
        if let Some(num_classes) = mixup {
            b = b.mixup(gpufeed::augment::Mixup {
                mixup_alpha,
                cutmix_alpha,
                label_smoothing,
                ..gpufeed::augment::Mixup::deit(num_classes)
            });
        }
        let mut p = py.detach(|| b.build()).map_err(err)?;
        let (batches_per_epoch, samples) = (p.batches_per_epoch(), p.samples_per_epoch());
        let (tx, rx) = bounded::<Command>(0);
        let monitor = p.monitor();
        let thread = std::thread::Builder::new()
            .name("gpufeed-python".into())
            .spawn(move || {
                while let Ok(Command::Epoch(e, pos, asks, out)) = rx.recv() {
                    let mut batches = p.epoch_from(e, pos);
                    while asks.recv().is_ok() {
                        // The end of the epoch drops `out`: Python's
                        // receive then ends the iteration.
                        let Some(b) = batches.next() else { break };
                        if out.send(b).is_err() {
                            break;
                        }
                    }
                }
            })
            .map_err(|e| Error::new_err(format!("cannot start the pipeline thread: {e}")))?;
        Ok(Pipeline {
            commands: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
            current: Mutex::new(None),
            batches_per_epoch,
            samples,
            monitor,
        })
    }

    /// The batches of `epoch` (from `position`, a value of a batch's
    /// `resume_position`): an iterator of `(images, labels)`. Starting an
    /// epoch ends the previous one, if it is still open: its iterator then
    /// ends early.
    #[pyo3(signature = (epoch, position=0))]
    fn epoch(&self, py: Python<'_>, epoch: u64, position: usize) -> PyResult<Epoch> {
        let (asks, asked) = bounded(1);
        let (tx, rx) = bounded(1);
        let guard = self.commands.lock().unwrap_or_else(|e| e.into_inner());
        let commands = guard
            .as_ref()
            .ok_or_else(|| Error::new_err("the pipeline is closed"))?;
        let channels = Arc::new(Mutex::new(Some(Channels { asks, batches: rx })));
        let previous = self
            .current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(channels.clone());
        py.detach(|| {
            // Without the GIL: another Python thread may be in the previous
            // epoch's `__next__`, which holds its lock until its batch comes.
            if let Some(c) = previous {
                c.lock().unwrap_or_else(|e| e.into_inner()).take();
            }
            commands.send(Command::Epoch(epoch, position, asked, tx))
        })
        .map_err(|_| Error::new_err("the pipeline thread has exited"))?;
        Ok(Epoch { channels })
    }

    /// Batches per epoch when no sample fails.
    fn __len__(&self) -> usize {
        self.batches_per_epoch
    }

    /// Positions this rank visits per epoch.
    #[getter]
    fn samples_per_epoch(&self) -> usize {
        self.samples
    }

    /// Counters since the pipeline was built, as a dict (samples, batches,
    /// bytes_read, errors by kind, seconds spent per stage and with a
    /// hardware engine call in flight (`engine_busy_s`), with a
    /// progressive lane call in flight (`progressive_busy_s`), with the CUDA
    /// route's host phases waiting for a pinned buffer
    /// (`decoder_pinned_wait_s`), buffers nvJPEG took from the CUDA driver
    /// (`decoder_allocations`), decode lanes stopped after a panic
    /// (`lanes_stopped`), and `memory`:
    /// pinned and device pools, slots, what nvJPEG holds, and the host
    /// buffers: read buffers and CPU workers' scratch).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let closed = || Error::new_err("the pipeline is closed");
        let s = self.monitor.stats().ok_or_else(closed)?;
        let m = self.monitor.memory().ok_or_else(closed)?;
        let d = PyDict::new(py);
        d.set_item("samples", s.samples)?;
        d.set_item("batches", s.batches)?;
        d.set_item("bytes_read", s.bytes_read)?;
        let errors = PyDict::new(py);
        for k in gpufeed::error::ErrorKind::ALL {
            errors.set_item(k.name(), s.errors_of(k))?;
        }
        d.set_item("errors", errors)?;
        d.set_item("decoder_allocations", s.decoder_allocations)?;
        d.set_item("lanes_stopped", s.lanes_stopped)?;
        for (name, t) in [
            ("read_s", s.read),
            ("parse_s", s.parse),
            ("decode_s", s.decode),
            ("augment_s", s.augment),
            ("wait_s", s.wait),
            ("engine_busy_s", s.engine_busy),
            ("progressive_busy_s", s.progressive_busy),
            ("decoder_pinned_wait_s", s.decoder_pinned_wait),
        ] {
            d.set_item(name, t.as_secs_f64())?;
        }
        let memory = PyDict::new(py);
        for (name, v) in [
            ("pinned_bytes", m.pinned_bytes),
            ("device_bytes", m.device_bytes),
            ("slots", m.slots as u64),
            ("decoder_pinned_bytes", m.decoder_pinned_bytes),
            ("decoder_device_bytes", m.decoder_device_bytes),
            ("decoder_peak_bytes", m.decoder_peak_bytes),
            ("kernel_device_bytes", m.kernel_device_bytes),
            ("read_buffer_bytes", m.read_buffer_bytes),
            ("read_buffer_pinned_bytes", m.read_buffer_pinned_bytes),
            ("worker_scratch_bytes", m.worker_scratch_bytes),
        ] {
            memory.set_item(name, v)?;
        }
        d.set_item("memory", memory)?;
        Ok(d)
    }

    /// Stop the pipeline's threads now (also done when it is collected).
    fn close(&self, py: Python<'_>) {
        self.commands
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let open = self
            .current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let t = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        py.detach(|| {
            // An open epoch keeps the thread waiting for its next ask:
            // end it, or the join would wait for ever.
            if let Some(c) = open {
                c.lock().unwrap_or_else(|e| e.into_inner()).take();
            }
            if let Some(t) = t {
                let _ = t.join();
            }
        });
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        // Closing the command channel ends the thread, which drops the
        // Rust pipeline; not joined here (no GIL to release in a drop).
        self.commands
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
    }
}

/// An epoch's batches.
#[pyclass(module = "gpufeed._gpufeed")]
struct Epoch {
    channels: EpochChannels,
}

#[pymethods]
impl Epoch {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// `(images, labels)`: images one tensor, or a tuple of one per view
    /// for multi-view recipes; labels the class indices, or mixup's soft
    /// labels `[batch, classes]`.
    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<(Bound<'py, PyAny>, Tensor)>> {
        let channels = &self.channels;
        let batch = py.detach(|| {
            let mut guard = channels.lock().unwrap_or_else(|e| e.into_inner());
            let batch = guard.as_ref().and_then(|c| {
                c.asks.send(()).ok()?;
                c.batches.recv().ok()
            });
            // The epoch is over, a later one started, or an error ends it.
            if !matches!(batch, Some(Ok(_))) {
                guard.take();
            }
            batch
        });
        let Some(batch) = batch else {
            return Ok(None);
        };
        let batch = batch.map_err(err)?;
        let cuda = batch.images().is_cuda();
        let views = batch.views().len();
        let labels = if batch.soft_labels().is_some() {
            Part::SoftLabels
        } else {
            Part::Labels
        };
        let shared = SharedBatch::new(batch);
        let mut images = Vec::with_capacity(views);
        for v in 0..views {
            let t = py.detach(|| shared.export(Part::View(v))).map_err(err)?;
            images.push(Tensor::new(t, cuda));
        }
        let labels = Tensor::new(shared.export(labels).map_err(err)?, false);
        let images = if views == 1 {
            Bound::new(py, images.pop().expect("one view"))?.into_any()
        } else {
            pyo3::types::PyTuple::new(py, images)?.into_any()
        };
        Ok(Some((images, labels)))
    }
}

/// A tensor of a batch that a framework takes through DLPack
/// (`torch.from_dlpack(t)`, `numpy.from_dlpack(t)`), once.
#[pyclass(module = "gpufeed._gpufeed")]
struct Tensor {
    dl: Mutex<Option<Dlpack>>,
    shape: Vec<i64>,
    device: (i32, i32),
    data_ptr: usize,
}

impl Tensor {
    fn new(dl: Dlpack, _cuda: bool) -> Tensor {
        let t = dl.tensor();
        let device = (t.device.device_type, t.device.device_id);
        Tensor {
            shape: dl.shape().to_vec(),
            device,
            data_ptr: t.data as usize + t.byte_offset as usize,
            dl: Mutex::new(Some(dl)),
        }
    }
}

const VERSIONED: &CStr = c"dltensor_versioned";
const LEGACY: &CStr = c"dltensor";

/// A capsule nobody consumed still owns its tensor: run its deleter. A
/// consumer renames the capsule (`used_dltensor...`) when it takes it.
unsafe extern "C" fn capsule_destructor(capsule: *mut pyo3::ffi::PyObject) {
    // SAFETY: called by Python with a capsule made in `__dlpack__`; the
    // pointer it holds is the managed tensor named by the capsule's name,
    // still ours when that name is unchanged.
    unsafe {
        if pyo3::ffi::PyCapsule_IsValid(capsule, VERSIONED.as_ptr()) == 1 {
            let p = pyo3::ffi::PyCapsule_GetPointer(capsule, VERSIONED.as_ptr())
                .cast::<gpufeed::interop::dlpack::DLManagedTensorVersioned>();
            if let Some(d) = (*p).deleter {
                d(p);
            }
        } else if pyo3::ffi::PyCapsule_IsValid(capsule, LEGACY.as_ptr()) == 1 {
            let p = pyo3::ffi::PyCapsule_GetPointer(capsule, LEGACY.as_ptr())
                .cast::<gpufeed::interop::dlpack::DLManagedTensor>();
            if let Some(d) = (*p).deleter {
                d(p);
            }
        }
    }
}

#[pymethods]
impl Tensor {
    /// The DLPack protocol (Python array API): a capsule of the tensor,
    /// versioned when the consumer asks for DLPack 1.0 or later. The batch
    /// is complete when this returns (CUDA batches are waited for), so
    /// `stream` needs no event.
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<Bound<'py, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _ = stream;
        if copy == Some(true) {
            return Err(PyBufferError::new_err(
                "gpufeed exports without a copy only",
            ));
        }
        if let Some(d) = dl_device
            && d != self.device
        {
            return Err(PyBufferError::new_err(format!(
                "the tensor is on device {:?}, not {d:?}",
                self.device
            )));
        }
        let dl = self
            .dl
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or_else(|| PyBufferError::new_err("this tensor was already exported"))?;
        let versioned = max_version.is_some_and(|(major, _)| major >= 1);
        let (ptr, name): (*mut c_void, &CStr) = if versioned {
            (dl.into_raw().cast(), VERSIONED)
        } else {
            (dl.into_raw_legacy().cast(), LEGACY)
        };
        // SAFETY: `ptr` is a managed tensor we own; the capsule takes it,
        // and its destructor runs the deleter unless a consumer renamed the
        // capsule, taking ownership (DLPack's Python specification).
        unsafe {
            let cap = pyo3::ffi::PyCapsule_New(ptr, name.as_ptr(), Some(capsule_destructor));
            Bound::from_owned_ptr_or_err(py, cap)
        }
    }

    /// `(device_type, device_id)`: `(1, 0)` for the CPU, `(2, i)` for CUDA
    /// device i.
    fn __dlpack_device__(&self) -> (i32, i32) {
        self.device
    }

    /// The tensor's shape.
    #[getter]
    fn shape(&self) -> Vec<i64> {
        self.shape.clone()
    }

    /// The address of the first element (a device address for CUDA
    /// batches): what a consumer that takes the tensor without a copy sees
    /// as its own (`torch.from_dlpack(t).data_ptr()`), which tests compare.
    #[getter]
    fn data_ptr(&self) -> usize {
        self.data_ptr
    }
}

#[pymodule]
fn _gpufeed(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Pipeline>()?;
    m.add_class::<Epoch>()?;
    m.add_class::<Tensor>()?;
    m.add("Error", m.py().get_type::<Error>())?;
    Ok(())
}
