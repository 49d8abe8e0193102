//! Loading the augment kernels on a device and launching them.
//!
//! The pipeline's device stage (stage.rs) drives it once per batch; the GPU
//! tests use it directly to compare the device with the CPU reference.

use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, DeviceRepr, LaunchConfig,
    PushKernelArg, ValidAsZeroBits,
};
use cudarc::nvrtc::Ptx;

use super::desc::{GfLaunch, GfTile};
use super::{AUGMENT_KERNELS, MIX_KERNELS, PHOTO_KERNELS, devices, kernel_sources, nvrtc};
use crate::error::{Error, Result};

// SAFETY: GfTile and GfLaunch are #[repr(C)] plain data (integers and
// floats, no pointers the device would dereference as Rust references),
// with the layout of their C mirrors asserted in desc.rs; cudarc's
// DeviceRepr only requires that the bytes can be copied to the device and
// passed as kernel parameters (cuLaunchKernel copies parameter bytes).
unsafe impl DeviceRepr for GfTile {}
// SAFETY: as above.
unsafe impl DeviceRepr for GfLaunch {}
// SAFETY: as above (GfMix: integers and floats, layout asserted in desc.rs).
unsafe impl DeviceRepr for super::desc::GfMix {}

/// The progressive-file kernels.
#[derive(Clone)]
pub(crate) struct ProgressiveKernels {
    /// `gf_progressive`.
    pub(crate) scans: CudaFunction,
    /// `gf_split_guess`, `gf_split_round`, `gf_split_check`,
    /// `gf_split_write`.
    pub(crate) split: [CudaFunction; 4],
    /// `gf_idct`.
    pub(crate) idct: CudaFunction,
    /// `gf_color`.
    pub(crate) color: CudaFunction,
}

/// Threads per block: one thread per output pixel.
const BLOCK: u32 = 256;

/// Threads per block of the photometric kernels (`GF_PHOTO_THREADS`; one
/// block per draw).
const PHOTO_BLOCK: u32 = crate::augment::photo_cpu::LANES as u32;

/// The augment kernels loaded on one device; the photometric, mix and
/// scan kernels are loaded at their first launch, or at `prepare`, and
/// compiled then unless [`KernelNeeds`] had them compiled beside
/// `augment.cu`. NVRTC takes seconds over `photo.cu` (2.6 s of 3.3 s for
/// the three files on a 2-core VM, `gpufeed doctor`), which a pipeline
/// without photometric ops or mixup would otherwise pay in `build()`
/// whenever the kernel cache is cold, as in a fresh container (time to
/// first batch, issue 20).
pub(crate) struct AugmentKernels {
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
    funcs: Vec<CudaFunction>,
    photo: OnceLock<Vec<CudaFunction>>,
    mix: OnceLock<Vec<CudaFunction>>,
    /// Boxed: few pipelines use them, and the device engine enum holds
    /// this struct.
    progressive: OnceLock<Box<ProgressiveKernels>>,
    /// `sm_XY` the CUBIN was built for.
    pub(crate) arch: String,
    index: usize,
    /// Files of [`KernelNeeds`] compiled beside `augment.cu`, by file
    /// index, until their family is loaded. Boxed, as `progressive`.
    compiled: Box<Mutex<Vec<(usize, nvrtc::Cubin)>>>,
}

/// The kernel files a pipeline will load beside `augment.cu`, which
/// [`AugmentKernels::with`] compiles at once with it where the kernel
/// cache lacks them (`nvrtc::compile_cached_all`; time to first batch,
/// issue 20). Each family is still loaded where it was: at `prepare`, or
/// at its first use.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct KernelNeeds {
    /// `photo.cu`: a view with photometric ops.
    pub(crate) photo: bool,
    /// `mix.cu`: mixup or cutmix.
    pub(crate) mix: bool,
    /// `progressive.cu` and `pixels.cu`: the scan kernels' lanes.
    pub(crate) scans: bool,
}

thread_local! {
    /// Device 0's kernels for [`AugmentKernels::device0`], one set per
    /// thread.
    static DEVICE0: std::cell::RefCell<Option<std::rc::Rc<AugmentKernels>>> =
        const { std::cell::RefCell::new(None) };
}

/// The kernel files in `kernel_sources` order, with their entry points.
const AUGMENT_FILE: usize = 0;
const PHOTO_FILE: usize = 1;
const MIX_FILE: usize = 2;
const PROGRESSIVE_FILE: usize = 3;
const PIXELS_FILE: usize = 4;

impl AugmentKernels {
    /// Compile (or fetch from the cache) and load the kernels on device
    /// `index`. Errors, never panics, when there is no driver or device.
    pub(crate) fn new(index: usize) -> Result<AugmentKernels> {
        Self::with(index, KernelNeeds::default())
    }

    /// [`new`](Self::new), with the files of `needs` compiled at the same
    /// time as `augment.cu` (loaded later, as without them). A file that
    /// fails here is compiled again where its family is loaded, which
    /// reports the error.
    pub(crate) fn with(index: usize, needs: KernelNeeds) -> Result<AugmentKernels> {
        let devs = devices()?;
        let dev = devs
            .get(index)
            .ok_or_else(|| Error::Device(format!("cuda:{index}: only {} device(s)", devs.len())))?;
        let (major, minor) = dev.compute_capability;
        let arch = format!("sm_{major}{minor}");
        let ctx = super::context(index)?;
        let mut files = vec![AUGMENT_FILE];
        files.extend(needs.photo.then_some(PHOTO_FILE));
        files.extend(needs.mix.then_some(MIX_FILE));
        if needs.scans {
            files.extend([PROGRESSIVE_FILE, PIXELS_FILE]);
        }
        let sources = kernel_sources();
        let named: Vec<(&str, &str)> = files
            .iter()
            .map(|&f| (sources[f].0, sources[f].1.as_str()))
            .collect();
        let dir = nvrtc::kernel_cache_dir();
        let mut cubins = nvrtc::compile_cached_all(dir.as_deref(), &named, &arch).into_iter();
        let augment = cubins
            .next()
            .ok_or_else(|| Error::Device("NVRTC: augment.cu not compiled".into()))??;
        let funcs = load(
            &ctx,
            index,
            &arch,
            AUGMENT_FILE,
            &AUGMENT_KERNELS,
            Some(augment),
        )?;
        let compiled = (files[1..].iter().zip(cubins))
            .filter_map(|(&f, c)| Some((f, c.ok()?)))
            .collect();
        let stream = ctx.new_stream().map_err(Error::cuda("stream"))?;
        Ok(AugmentKernels {
            ctx,
            stream,
            funcs,
            photo: OnceLock::new(),
            mix: OnceLock::new(),
            progressive: OnceLock::new(),
            arch,
            index,
            compiled: Box::new(Mutex::new(compiled)),
        })
    }

    /// File `file`'s kernels `entries`, from its CUBIN compiled in
    /// [`with`](Self::with) or else compiled (or fetched from the cache)
    /// now.
    fn load(&self, file: usize, entries: &[&str]) -> Result<Vec<CudaFunction>> {
        let pre = {
            let mut c = self.compiled.lock().unwrap_or_else(|p| p.into_inner());
            c.iter()
                .position(|(f, _)| *f == file)
                .map(|at| c.swap_remove(at).1)
        };
        load(&self.ctx, self.index, &self.arch, file, entries, pre)
    }

    /// Device 0's kernels, made once per thread and kept: the tests'
    /// one-file helpers (`gpu_rgb`, `gpu_coefficients`) run per file over
    /// the corpus's ~900 progressive files, and making the set each time
    /// (devices listed, modules loaded, a stream) would cost the GPU
    /// runner's time-limited steps seconds per hundred files.
    pub(crate) fn device0() -> Result<std::rc::Rc<AugmentKernels>> {
        if let Some(k) = DEVICE0.with(|d| d.borrow().clone()) {
            return Ok(k);
        }
        let k = std::rc::Rc::new(AugmentKernels::new(0)?);
        DEVICE0.with(|d| *d.borrow_mut() = Some(k.clone()));
        Ok(k)
    }

    /// Load the photometric and/or mix kernels now, for a pipeline that
    /// will launch them: a failure to compile them is then an error of
    /// `build()`, not of the first batch.
    pub(crate) fn prepare(&self, photo: bool, mix: bool) -> Result<()> {
        if photo {
            self.family(&self.photo, PHOTO_FILE, &PHOTO_KERNELS)?;
        }
        if mix {
            self.family(&self.mix, MIX_FILE, &MIX_KERNELS)?;
        }
        Ok(())
    }

    /// The progressive-file kernels, loaded at their first use: the scan
    /// decoder (`kernels/progressive.cu`), then the IDCT and the colour
    /// conversion (`kernels/pixels.cu`).
    pub(crate) fn progressive(&self) -> Result<ProgressiveKernels> {
        if let Some(k) = self.progressive.get() {
            return Ok((**k).clone());
        }
        let mut scan = self.load(PROGRESSIVE_FILE, &super::PROGRESSIVE_KERNELS)?;
        let mut px = self.load(PIXELS_FILE, &super::PIXELS_KERNELS)?;
        let split = [
            scan.remove(1),
            scan.remove(1),
            scan.remove(1),
            scan.remove(1),
        ];
        let k = ProgressiveKernels {
            scans: scan.remove(0),
            split,
            idct: px.remove(0),
            color: px.remove(0),
        };
        // Another thread may have loaded them meanwhile: either will do.
        Ok((**self.progressive.get_or_init(|| Box::new(k))).clone())
    }

    /// A lazily loaded kernel family: loaded now if it was not.
    fn family<'a>(
        &self,
        cell: &'a OnceLock<Vec<CudaFunction>>,
        file: usize,
        entries: &[&str],
    ) -> Result<&'a [CudaFunction]> {
        if let Some(f) = cell.get() {
            return Ok(f);
        }
        let f = self.load(file, entries)?;
        // Another thread may have loaded it meanwhile: either will do.
        Ok(cell.get_or_init(|| f))
    }

    /// Launch kernel `which` (an index into [`AUGMENT_KERNELS`]) over
    /// `tiles` (already on the device), writing into `out`. Asynchronous on
    /// `self.stream`.
    ///
    /// # Safety
    ///
    /// Every tile's `src` must point to device memory holding at least
    /// `src_pitch * src_height` bytes that stays alive and unwritten until
    /// the launch completes, and `dst` plus the output size must stay inside
    /// `out`; the element type `T` must be the one kernel `which` writes.
    pub(crate) unsafe fn launch<T: DeviceRepr>(
        &self,
        which: usize,
        tiles: &CudaSlice<GfTile>,
        launch: GfLaunch,
        out: &mut CudaSlice<T>,
    ) -> Result<()> {
        let (ptr, _record) = tiles.device_ptr(&self.stream);
        // SAFETY: `tiles` holds the descriptors on the device and is
        // borrowed for the enqueue; the rest is the caller's contract.
        unsafe { self.launch_at(which, ptr, launch, out) }
    }

    /// Like [`launch`](Self::launch), with the tile list given by its
    /// device address (inside the pipeline's staging buffer).
    ///
    /// # Safety
    ///
    /// As for `launch`; `tiles` must address `launch.n_tiles` descriptors in
    /// device memory that stay unwritten until the launch completes.
    pub(crate) unsafe fn launch_at<T: DeviceRepr>(
        &self,
        which: usize,
        tiles: u64,
        launch: GfLaunch,
        out: &mut CudaSlice<T>,
    ) -> Result<()> {
        if launch.n_tiles == 0 {
            return Ok(());
        }
        let plane = launch.out_w * launch.out_h;
        let cfg = LaunchConfig {
            grid_dim: (plane.div_ceil(BLOCK), launch.n_tiles, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(&self.funcs[which]);
        b.arg(&tiles);
        b.arg(&launch);
        b.arg(out);
        // SAFETY: the kernel signature is (const GfTile*, GfLaunch, T*); a
        // u64 device address has the size and passing convention of the
        // pointer parameter. Memory validity is the caller's contract.
        unsafe { b.launch(cfg) }
            .map(|_| ())
            .map_err(Error::cuda("kernel launch"))
    }

    /// [`launch_at`](Self::launch_at) for [`LaunchKind::Augment`]; for
    /// [`LaunchKind::Photo`] kernel `which` of `PHOTO_KERNELS` over
    /// `launch.n_tiles` `GfPhoto` descriptors at `tiles`, one block of
    /// `GF_PHOTO_THREADS` per draw; for [`LaunchKind::Mix`] kernel `which`
    /// of `MIX_KERNELS` over the mix's `n` images of `out` (`tiles` and
    /// `launch` unused).
    ///
    /// # Safety
    ///
    /// As for `launch_at`; for `Photo`, every descriptor's `src` and `tmp`
    /// must address `3 * out_w * out_h` f32 of device memory each (written
    /// by earlier work on this stream), not shared with another draw of
    /// the launch; for `Mix`, `out` must hold `n` images of the mix's size.
    pub(crate) unsafe fn launch_any<T: DeviceRepr>(
        &self,
        kind: LaunchKind,
        which: usize,
        tiles: u64,
        launch: GfLaunch,
        out: &mut CudaSlice<T>,
    ) -> Result<()> {
        match kind {
            // SAFETY: the caller's contract.
            LaunchKind::Augment => return unsafe { self.launch_at(which, tiles, launch, out) },
            LaunchKind::Mix(m) => {
                let elems = 3 * m.out_w * m.out_h;
                let cfg = LaunchConfig {
                    grid_dim: (elems.div_ceil(BLOCK), m.n.div_ceil(2), 1),
                    block_dim: (BLOCK, 1, 1),
                    shared_mem_bytes: 0,
                };
                if m.n == 0 {
                    return Ok(());
                }
                let mix = self.family(&self.mix, MIX_FILE, &MIX_KERNELS)?;
                let mut b = self.stream.launch_builder(&mix[which]);
                b.arg(&m);
                b.arg(out);
                // SAFETY: the kernel signature is (GfMix, T*); it touches
                // the n images of `out` (the caller's contract).
                return unsafe { b.launch(cfg) }
                    .map(|_| ())
                    .map_err(Error::cuda("kernel launch"));
            }
            LaunchKind::Photo => {}
        }
        if launch.n_tiles == 0 {
            return Ok(());
        }
        let cfg = LaunchConfig {
            grid_dim: (launch.n_tiles, 1, 1),
            block_dim: (PHOTO_BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        let photo = self.family(&self.photo, PHOTO_FILE, &PHOTO_KERNELS)?;
        let mut b = self.stream.launch_builder(&photo[which]);
        b.arg(&tiles);
        b.arg(&launch);
        b.arg(out);
        // SAFETY: the kernel signature is (const GfPhoto*, GfLaunch, T*);
        // a u64 device address passes as the pointer. Memory validity is
        // the caller's contract.
        unsafe { b.launch(cfg) }
            .map(|_| ())
            .map_err(Error::cuda("kernel launch"))
    }

    /// Upload host bytes.
    pub(crate) fn upload<T: DeviceRepr>(&self, data: &[T]) -> Result<CudaSlice<T>> {
        self.stream.clone_htod(data).map_err(Error::cuda("upload"))
    }

    /// A zeroed device buffer.
    pub(crate) fn zeros<T: DeviceRepr + ValidAsZeroBits>(&self, n: usize) -> Result<CudaSlice<T>> {
        self.stream.alloc_zeros(n).map_err(Error::cuda("alloc"))
    }

    /// Download (waits for the stream).
    pub(crate) fn download<T: DeviceRepr + Default + Clone>(
        &self,
        data: &CudaSlice<T>,
    ) -> Result<Vec<T>> {
        self.stream
            .clone_dtoh(data)
            .map_err(Error::cuda("download"))
    }

    /// The raw device address of a buffer, for a descriptor.
    pub(crate) fn address<T>(&self, data: &CudaSlice<T>) -> u64 {
        let (ptr, _sync) = data.device_ptr(&self.stream);
        ptr
    }
}

/// Load kernel file `file`'s `entries` on `ctx` (device `index`, for
/// messages) from `cubin`, or else from the file compiled (or fetched
/// from the cache) for `arch` now.
fn load(
    ctx: &Arc<CudaContext>,
    index: usize,
    arch: &str,
    file: usize,
    entries: &[&str],
    cubin: Option<nvrtc::Cubin>,
) -> Result<Vec<CudaFunction>> {
    let cubin = match cubin {
        Some(c) => c,
        None => {
            let (name, src) = kernel_sources().swap_remove(file);
            nvrtc::compile_cached(name, &src, arch)?
        }
    };
    let module = ctx
        .load_module(Ptx::from_binary(cubin.image))
        .map_err(Error::cuda("load CUBIN"))?;
    entries
        .iter()
        .map(|k| {
            module
                .load_function(k)
                .map_err(|e| Error::Device(format!("cuda:{index}: {k}: {e:?}")))
        })
        .collect()
}

/// One kernel launch of a flush: `which` indexes the kind's kernel list
/// (`AUGMENT_KERNELS`, `PHOTO_KERNELS`, `MIX_KERNELS`), the descriptors
/// (`GfTile`s or `GfPhoto`s; none for a mix) start `tiles_at` bytes into
/// the staging buffer, and the output is view `out`, or the photometric
/// scratch planes when `None` (issue 19).
#[derive(Debug, Clone, Copy)]
pub(crate) struct StageLaunch {
    pub(crate) kind: LaunchKind,
    pub(crate) which: usize,
    pub(crate) tiles_at: usize,
    pub(crate) params: GfLaunch,
    pub(crate) out: Option<usize>,
}

/// The kernel family of a [`StageLaunch`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum LaunchKind {
    /// Crop, resize, flip, normalize, cast: `kernels/augment.cu`.
    Augment,
    /// Photometric ops from the scratch: `kernels/photo.cu`.
    Photo,
    /// Mixup / cutmix over the finished output: `kernels/mix.cu`.
    Mix(super::desc::GfMix),
}
