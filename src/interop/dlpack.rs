//! DLPack export of a batch's tensors, without a copy (issue 17, item 2):
//! the one door to PyTorch (`torch.from_dlpack`), JAX, CuPy and NumPy.
//!
//! The ABI is DLPack 1.0's (`dlpack.h`, v1.0): [`DLManagedTensorVersioned`],
//! and the older [`DLManagedTensor`] that NumPy before 2.1 and other
//! pre-1.0 consumers take. The structs are written out here and their
//! sizes and offsets checked against the header's (64-bit) at compile
//! time, rather than taken from a crate.
//!
//! Ownership: every exported tensor holds an `Arc` of the [`Batch`]; the
//! batch, and with it its buffer or device slot, goes back to the pipeline
//! when the last tensor's deleter has run and the caller's own handles are
//! dropped, never earlier. Holding tensors past the pipeline's drop is
//! safe: host buffers and device slots are owned by the batch, and a
//! device slot keeps its CUDA context alive.
//!
//! Ordering: an export of a CUDA batch waits (host side, blocking sync) for
//! the batch's event, so the consumer may read it on any stream.
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use crate::augment::DType;
use crate::error::{Error, Result};
use crate::pipeline::{Batch, Tensor};
use cudarc::driver::{DevicePtr, DeviceSlice};

/// `DLPackVersion`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DLPackVersion {
    /// Major version (1).
    pub major: u32,
    /// Minor version (0).
    pub minor: u32,
}

/// `DLDevice`: `device_type` is `kDLCPU` (1) or `kDLCUDA` (2).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DLDevice {
    /// `DLDeviceType`.
    pub device_type: i32,
    /// The device ordinal (0 on the CPU).
    pub device_id: i32,
}

/// `DLDataType`: type code (`kDLUInt` 1, `kDLFloat` 2, `kDLBfloat` 4), bits,
/// lanes.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DLDataType {
    /// `DLDataTypeCode`.
    pub code: u8,
    /// Bits per lane.
    pub bits: u8,
    /// Lanes (1).
    pub lanes: u16,
}

/// `DLTensor`.
#[repr(C)]
#[derive(Debug)]
pub struct DLTensor {
    /// First element (host or device address).
    pub data: *mut c_void,
    /// Where `data` is.
    pub device: DLDevice,
    /// Number of dimensions.
    pub ndim: i32,
    /// Element type.
    pub dtype: DLDataType,
    /// `ndim` sizes.
    pub shape: *mut i64,
    /// `ndim` strides, in elements (always given here).
    pub strides: *mut i64,
    /// Bytes from `data` to the first element (0).
    pub byte_offset: u64,
}

/// `DLManagedTensorVersioned` (DLPack 1.0).
#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensorVersioned {
    /// The DLPack version this struct follows.
    pub version: DLPackVersion,
    /// The producer's context (the batch and the shape).
    pub manager_ctx: *mut c_void,
    /// Called once by the consumer when it is done with the tensor.
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    /// `DLPACK_FLAG_BITMASK_*`: 0 here (writable, not a copy).
    pub flags: u64,
    /// The tensor.
    pub dl_tensor: DLTensor,
}

/// `DLManagedTensor` (DLPack before 1.0).
#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensor {
    /// The tensor.
    pub dl_tensor: DLTensor,
    /// The producer's context.
    pub manager_ctx: *mut c_void,
    /// Called once by the consumer when it is done with the tensor.
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

// The layouts of dlpack.h v1.0 on a 64-bit target: a mismatch is a build
// error, not a consumer reading the wrong field.
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<DLDevice>() == 8);
    assert!(size_of::<DLDataType>() == 4);
    assert!(size_of::<DLTensor>() == 48);
    assert!(offset_of!(DLTensor, ndim) == 16);
    assert!(offset_of!(DLTensor, shape) == 24);
    assert!(offset_of!(DLTensor, byte_offset) == 40);
    assert!(size_of::<DLManagedTensorVersioned>() == 80);
    assert!(offset_of!(DLManagedTensorVersioned, deleter) == 16);
    assert!(offset_of!(DLManagedTensorVersioned, dl_tensor) == 32);
    assert!(size_of::<DLManagedTensor>() == 64);
    assert!(offset_of!(DLManagedTensor, deleter) == 56);
};

/// A batch shared by the tensors exported from it: it goes back to the
/// pipeline when the last of them, and this handle, are dropped.
#[derive(Debug, Clone)]
pub struct SharedBatch(Arc<Mutex<Batch>>);

// `Dlpack` is `Send` because what it shares is `Send + Sync`.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<SharedBatch>();
};

impl SharedBatch {
    /// Share `batch` for export.
    pub fn new(batch: Batch) -> SharedBatch {
        SharedBatch(Arc::new(Mutex::new(batch)))
    }

    /// Export one of its tensors; see [`export`].
    pub fn export(&self, part: Part) -> Result<Dlpack> {
        export(self, part)
    }
}

/// Which tensor of a batch to export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The images of view `i` (0 for single-view pipelines).
    View(usize),
    /// The labels, `u32`, from host memory.
    Labels,
    /// Mixup's soft labels, `f32` `[n, classes]`, where the images are:
    /// device memory for a CUDA batch (the copy uploaded with the images),
    /// host memory otherwise (issue 19; an error without mixup).
    SoftLabels,
}

/// What the deleter frees: the batch reference and the shape and strides
/// the tensor points into.
struct Ctx {
    _batch: SharedBatch,
    dims: [i64; 8],
}

/// An exported tensor not yet handed to a consumer; dropping it runs the
/// deleter. [`into_raw`](Self::into_raw) hands it over.
#[derive(Debug)]
pub struct Dlpack(NonNull<DLManagedTensorVersioned>);

// SAFETY: the struct and its context are heap data owned by this handle
// alone; the batch inside is `Send + Sync` behind its `Arc` (DLPack places
// no thread affinity on a managed tensor: dlpack.h, "the deleter can be
// called from any thread").
unsafe impl Send for Dlpack {}

impl Dlpack {
    /// The tensor, for reading its fields.
    pub fn tensor(&self) -> &DLTensor {
        // SAFETY: the pointer came from Box::into_raw in `export` and is
        // owned by this handle until into_raw or drop.
        unsafe { &self.0.as_ref().dl_tensor }
    }

    /// Shape, as the consumer will see it.
    pub fn shape(&self) -> &[i64] {
        let t = self.tensor();
        // SAFETY: `shape` points at `ndim` values inside the context, which
        // lives as long as the managed tensor.
        unsafe { std::slice::from_raw_parts(t.shape, t.ndim as usize) }
    }

    /// Hand the tensor to a consumer (a `dltensor_versioned` capsule, say):
    /// from here on it must call the deleter exactly once.
    pub fn into_raw(self) -> *mut DLManagedTensorVersioned {
        let p = self.0.as_ptr();
        std::mem::forget(self);
        p
    }

    /// The same tensor as a pre-1.0 `DLManagedTensor` (NumPy before 2.1,
    /// PyTorch before 2.3's versioned path), for consumers that ask for a
    /// `dltensor` capsule; the consumer must call its deleter once.
    pub fn into_raw_legacy(self) -> *mut DLManagedTensor {
        let v = self.into_raw();
        // SAFETY: `v` is ours (just released from the handle); its fields
        // move into a legacy struct and the versioned shell is freed, the
        // context staying owned by the new struct.
        unsafe {
            let v = Box::from_raw(v);
            let v = *v;
            Box::into_raw(Box::new(DLManagedTensor {
                dl_tensor: v.dl_tensor,
                manager_ctx: v.manager_ctx,
                deleter: Some(delete_legacy),
            }))
        }
    }
}

impl Drop for Dlpack {
    fn drop(&mut self) {
        // SAFETY: the handle still owns the managed tensor (into_raw
        // forgets the handle), and the deleter is ours.
        unsafe { delete_versioned(self.0.as_ptr()) }
    }
}

/// Free a context; a panic in a drop must not unwind into C.
fn free_ctx(ctx: *mut c_void) {
    if ctx.is_null() {
        return;
    }
    // SAFETY: every context is a Box<Ctx> made by `export` and freed once,
    // by the one deleter the consumer calls.
    let ctx = unsafe { Box::from_raw(ctx.cast::<Ctx>()) };
    let _ = crate::contain::contained(move || drop(ctx));
}

unsafe extern "C" fn delete_versioned(p: *mut DLManagedTensorVersioned) {
    if p.is_null() {
        return;
    }
    // SAFETY: `p` is a Box<DLManagedTensorVersioned> from `export`, and the
    // DLPack contract has the consumer call the deleter once.
    let m = unsafe { Box::from_raw(p) };
    free_ctx(m.manager_ctx);
}

unsafe extern "C" fn delete_legacy(p: *mut DLManagedTensor) {
    if p.is_null() {
        return;
    }
    // SAFETY: `p` is a Box<DLManagedTensor> from `into_raw_legacy`, deleted
    // once per the DLPack contract.
    let m = unsafe { Box::from_raw(p) };
    free_ctx(m.manager_ctx);
}

fn dtype_of(d: DType) -> DLDataType {
    let (code, bits) = match d {
        DType::U8 => (1, 8),
        DType::F16 => (2, 16),
        DType::BF16 => (4, 16),
        DType::F32 => (2, 32),
    };
    DLDataType {
        code,
        bits,
        lanes: 1,
    }
}

/// Export one tensor of a shared batch (shared, so that images and labels
/// can both be exported and outlive the caller's handle). For a CUDA batch this
/// waits for the batch's event first.
pub fn export(shared: &SharedBatch, part: Part) -> Result<Dlpack> {
    // The lock only serializes exports; the pointers stay valid after it,
    // since nothing moves or writes a batch's buffers while it is shared.
    let batch = shared.0.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(ev) = batch.event() {
        ev.synchronize()
            .map_err(Error::cuda("waiting for the batch"))?;
    }
    let mut dims = [0i64; 8];
    let (data, device, dtype, ndim) = match part {
        Part::Labels => {
            let n = batch.labels().len();
            dims[0] = n as i64;
            dims[4] = 1;
            let ptr = batch.labels().as_ptr() as *mut c_void;
            let cpu = DLDevice {
                device_type: 1,
                device_id: 0,
            };
            let u32_ = DLDataType {
                code: 1,
                bits: 32,
                lanes: 1,
            };
            (ptr, cpu, u32_, 1)
        }
        Part::SoftLabels => {
            let soft = batch
                .soft_labels()
                .ok_or_else(|| Error::Config("the batch has no soft labels (no mixup)".into()))?;
            let n = batch.labels().len();
            let classes = soft.len() / n.max(1);
            dims[0] = n as i64;
            dims[1] = classes as i64;
            dims[4] = classes as i64;
            dims[5] = 1;
            let (ptr, device) = match batch.soft_labels_cuda() {
                Some(view) => {
                    let ordinal = batch.views().first().and_then(Tensor::device_ordinal);
                    // The event waited for above ordered the upload; the
                    // view's own record is not needed past this point.
                    let (addr, _record) = view.device_ptr(view.stream());
                    (
                        addr as *mut c_void,
                        DLDevice {
                            device_type: 2,
                            device_id: ordinal.unwrap_or(0) as i32,
                        },
                    )
                }
                None => (
                    soft.as_ptr() as *mut c_void,
                    DLDevice {
                        device_type: 1,
                        device_id: 0,
                    },
                ),
            };
            (ptr, device, dtype_of(DType::F32), 2)
        }
        Part::View(i) => {
            let t: &Tensor = batch.views().get(i).ok_or_else(|| {
                Error::Config(format!("view {i}: the batch has {}", batch.views().len()))
            })?;
            let shape = t.shape();
            for (d, s) in dims.iter_mut().zip(shape) {
                *d = s as i64;
            }
            // Row-major strides in elements, given explicitly.
            let mut stride = 1i64;
            for k in (0..4).rev() {
                dims[4 + k] = stride;
                stride *= dims[k];
            }
            let (ptr, device) = match (t.as_bytes(), t.device_ptr()) {
                (Some(b), _) => (
                    b.as_ptr() as *mut c_void,
                    DLDevice {
                        device_type: 1,
                        device_id: 0,
                    },
                ),
                (None, Some(addr)) => (
                    addr as *mut c_void,
                    DLDevice {
                        device_type: 2,
                        device_id: t.device_ordinal().unwrap_or(0) as i32,
                    },
                ),
                (None, None) => return Err(Error::Config("a tensor without storage".into())),
            };
            (ptr, device, dtype_of(t.dtype()), 4)
        }
    };
    let ctx = Box::into_raw(Box::new(Ctx {
        _batch: shared.clone(),
        dims,
    }));
    // SAFETY: `ctx` is a live allocation owned by the managed tensor made
    // below; `dims` holds 8 values: the shape first, the strides from index
    // 4 (a 1-d tensor's one stride too).
    let (shape, strides) = unsafe {
        let shape = std::ptr::addr_of_mut!((*ctx).dims).cast::<i64>();
        (shape, shape.add(4))
    };
    let managed = Box::new(DLManagedTensorVersioned {
        version: DLPackVersion { major: 1, minor: 0 },
        manager_ctx: ctx.cast(),
        deleter: Some(delete_versioned),
        flags: 0,
        dl_tensor: DLTensor {
            data,
            device,
            ndim,
            dtype,
            shape,
            strides,
            byte_offset: 0,
        },
    });
    Ok(Dlpack(NonNull::from(Box::leak(managed))))
}
