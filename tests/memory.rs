//! Flat memory (issue 7): 60 epochs over the sample set (another count with
//! `GPUFEED_EPOCHS`). Checked: the pinned/device pools never change after
//! `build()`; live heap bytes (counted by a wrapping global allocator) do
//! not grow after the pools fill; resident memory levels off; a few large
//! files do not make every read buffer large. Tests in their own binary,
//! one at a time, so that no other test allocates alongside.

mod common;
#[path = "common/proc.rs"]
mod proc_;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};

use gpufeed::{DType, Device, Pipeline, Source};

/// Counts live heap bytes, so a leak shows as live bytes that grow, apart
/// from RSS, which the allocator's own caching and fragmentation move too.
struct Counting;

static LIVE: AtomicI64 = AtomicI64::new(0);

// SAFETY: defers every call to the system allocator unchanged; the counter
// is only arithmetic on the sizes it is given.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as i64, Relaxed);
        // SAFETY: same layout contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as i64, Relaxed);
        // SAFETY: `p` came from System.alloc with layout `l`.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as i64 - l.size() as i64, Relaxed);
        // SAFETY: as for dealloc; `new` is the caller's valid size.
        unsafe { System.realloc(p, l, new) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as i64, Relaxed);
        // SAFETY: same layout contract as the caller's.
        unsafe { System.alloc_zeroed(l) }
    }
}

// The tests measure the whole process: the harness runs them one at a time.
common::serial_tests!(
    rss_and_pools_stay_flat_over_sixty_epochs,
    gpu_rss_and_pools_stay_flat_over_sixty_epochs,
    read_buffers_stay_near_the_mean_file_size,
    a_rare_large_image_leaves_no_worker_holding_it,
);

/// The backends that run without a GPU.
const HOST_DEVICES: &[Device] = &[
    Device::Cpu,
    #[cfg(feature = "kernel-emu")]
    Device::Emulated,
];

#[global_allocator]
static ALLOC: Counting = Counting;

/// The device's route in [`sixty_epochs`].
#[derive(Clone, Copy, PartialEq, Debug)]
enum Route {
    /// The defaults: on a device, the scan kernels' lanes at engine share 0.
    Default,
    /// The hardware engine's lanes alone (share 1, no scan kernels, 3 in
    /// flight): the default before session 52.
    Engine,
}

fn sixty_epochs(device: Device, route: Route) {
    one_malloc_arena();
    let mut b = Pipeline::builder()
        .source(Source::image_folder(common::sample_dir()).unwrap())
        .device(device)
        .batch_size(8)
        .workers(2)
        .output_size(64, 64)
        .dtype(DType::F16);
    if route == Route::Engine {
        b = b
            .hardware_decode_share(1.0)
            .sequential_kernels(false)
            .batches_in_flight(3);
    }
    let mut p = b.build().unwrap();
    let pools = p.memory().pools();
    let (mut rss, mut raw, mut live, mut dec) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut kernels = Vec::new();
    let mut allocs = Vec::new();
    let (mut host, mut pinned) = (Vec::new(), Vec::new());
    let epochs: u64 = std::env::var("GPUFEED_EPOCHS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    for epoch in 0..epochs {
        let n: usize = p.epoch(epoch).map(|b| b.unwrap().len()).sum();
        assert_eq!(n, 28);
        raw.push(proc_::status("RssAnon"));
        rss.push(trimmed_rss_anon());
        live.push(LIVE.load(Relaxed) / 1024);
        let m = p.memory();
        assert_eq!(m.pools(), pools, "pools are fixed at build()");
        dec.push((m.decoder_pinned_bytes + m.decoder_device_bytes) / 1024);
        kernels.push(m.kernel_device_bytes / 1024);
        allocs.push(p.stats().decoder_allocations);
        host.push((m.read_buffer_bytes, m.worker_scratch_bytes));
        pinned.push(m.read_buffer_pinned_bytes);
    }
    let n = rss.len();
    println!(
        "memory {device:?}, {route:?}: live heap KiB after epoch 1/2/{n}: {}/{}/{}; RssAnon KiB after \
         epoch 1/2/{}/{n}: {}/{}/{}/{}; pools {} B pinned, {} B device\n  live per epoch: \
         {live:?}\n  RssAnon per epoch, after malloc_trim: {rss:?}\n  RssAnon per epoch, \
         untrimmed: {raw:?}\n  decoder KiB per epoch: {dec:?}\n  of which the scan kernels' \
         lanes' buffers for the files: {kernels:?}\n  decoder buffers allocated by the end of \
         each epoch: {allocs:?}",
        live[0],
        live[1],
        live[n - 1],
        n / 2,
        rss[0],
        rss[1],
        rss[n / 2 - 1],
        rss[n - 1],
        pools.pinned_bytes,
        pools.device_bytes
    );
    // The emulated engine lanes' buffers grow to the largest image by the
    // first call after it was met (the second epoch at the latest), then
    // never again. (nvJPEG's pooled decoders are grown to the largest
    // buffer of the pool before their next host phase, `fit.rs`; one lent
    // for the first time late grows then, so on a GPU the counts are
    // printed above, not asserted.)
    //
    // The scan kernels' lanes grow their buffers to twice the largest call
    // any of them has met (`prog_batch::Marks`), and an idle lane grows to
    // those as soon as another lane's call raised them
    // (`cuda::lanes::Tend`), so they settle in the first calls: flat from
    // the first epoch, on CUDA too (issue 16, item 5). Before session 60
    // each lane grew at its own next call, and marks that grew to a call
    // alone the first time doubled at a later record: here (4 calls an
    // epoch on 6 lanes) they grew until epoch 5 of 60 in session 52 and
    // epoch 9 in session 56, and on an H200 in session 59 the decoders'
    // memory went from 41 MB after epoch 1 to 121.6 MB by epoch 9.
    if route == Route::Default && device != Device::Cpu {
        assert!(
            kernels.iter().all(|&k| k == kernels[0]),
            "the kernel lanes' buffers grew after epoch 1: {kernels:?} KiB"
        );
    }
    #[cfg(feature = "kernel-emu")]
    if device == Device::Emulated && route == Route::Default {
        assert!(dec[0] > 0, "the kernel lanes' buffers are counted");
        assert!(kernels[0] > 0, "the kernel lanes took calls");
        assert!(
            dec.iter().all(|&d| d == dec[0]),
            "decoder memory grew after epoch 1: {dec:?} KiB"
        );
    }
    #[cfg(feature = "kernel-emu")]
    if device == Device::Emulated && route == Route::Engine {
        assert!(dec[0] > 0, "the engine lanes' buffers are counted");
        assert!(
            dec[1..].iter().all(|&d| d == dec[1]),
            "decoder memory grew after epoch 2: {dec:?} KiB"
        );
        assert!(allocs[0] > 0, "the lanes' buffers are counted as allocated");
        assert!(
            allocs[1..].iter().all(|&a| a == allocs[1]),
            "decoder buffers allocated after epoch 2: {allocs:?}"
        );
    }
    // The read buffers reach their size by the second epoch (every buffer
    // of the window has held the largest file by then) and never change
    // after it; on a device's routes (the engine's and the scan kernels')
    // they change once more, when the pool
    // trades them for page-locked blocks, all made at once after the
    // 256th file (`reader::BufferPool`): 28 files an epoch here, so in the
    // tenth epoch. On the CPU backend both workers decode from the first
    // epoch, their scratch grows to the largest image by the second, and
    // after that only the resampler's taps grow, with the widest crop
    // drawn so far (3.5 KiB at epoch 3 here). On a device the workers
    // decode only what nvJPEG does not take (on a GPU perhaps nothing;
    // nvJPEG's host phase has buffers of its own), and a worker grows its
    // scratch when it next decodes, maybe epochs later: there the bound is
    // two workers' scratch for these photos (1.6 MB each on the CPU).
    let cpu = device == Device::Cpu;
    assert!(host[0].0 > 0, "read buffers counted: {host:?}");
    assert!(!cpu || host[0].1 > 0, "workers' scratch counted: {host:?}");
    let pin_at = pinned.iter().position(|&b| b > 0);
    #[cfg(feature = "kernel-emu")]
    if device == Device::Emulated && n > 10 {
        assert_eq!(pin_at, Some(9), "page-locked read buffers: {pinned:?}");
    }
    if cpu {
        assert_eq!(
            pin_at, None,
            "page-locked read buffers on the CPU: {pinned:?}"
        );
    }
    let settled_at = pin_at.unwrap_or(1).max(1);
    assert!(
        pinned[settled_at..]
            .iter()
            .all(|&b| b == pinned[settled_at]),
        "page-locked read buffers made more than once: {pinned:?}"
    );
    assert!(
        host[settled_at + 1..]
            .iter()
            .all(|&h| h.0 == host[settled_at].0),
        "read buffers changed after epoch {}: {host:?}",
        settled_at + 1
    );
    assert!(
        host[2..]
            .iter()
            .all(|&h| h.0 <= host[1].0.max(pinned[n - 1])
                && h.1 <= 8 << 20
                && (!cpu || h.1 <= host[1].1 + (64 << 10))),
        "host buffers grew after epoch 2: {host:?}"
    );
    // A leak of even one 64x64 f16 sample per epoch (24 KiB) shows here:
    // 720 KiB over the second half. Live bytes settle once the recycling
    // pools have filled (epoch 2), then wobble (on an H100, 2026-11-22,
    // by up to 230 KiB: which compressed files sit in the recycled read
    // buffers at an epoch's end depends on timing), so the second half's
    // peak is held to the first half's.
    let settled = live[1];
    // What may still grow in epoch 2, as `memory()` reports it: the host
    // buffers, and the emulated engine lanes' buffers, which are on this
    // heap (nvJPEG's, on a GPU, are not) and reach the largest image at
    // the first call after it was met. Without this the check below failed
    // about one run in eight on the emulated device (2026-11-25: +1122 KiB
    // live, of which the lanes' buffers +614 KiB).
    #[cfg(feature = "kernel-emu")]
    let lanes_on_heap = device == Device::Emulated;
    #[cfg(not(feature = "kernel-emu"))]
    let lanes_on_heap = false;
    let told = |i: usize| {
        let (read, scratch) = host[i];
        (read + scratch) as i64 / 1024 + if lanes_on_heap { dec[i] as i64 } else { 0 }
    };
    let told_growth = (told(1) - told(0)).max(0);
    let peak = |l: &[i64]| l.iter().copied().max().unwrap_or(0);
    let half = (n / 2).max(2).min(n);
    assert!(
        peak(&live[half..]) <= peak(&live[1.min(n)..half]) + 16,
        "live heap grew after epoch 2: {live:?} KiB"
    );
    assert!(
        settled <= live[0] + 1024 + told_growth,
        "live heap {live:?} KiB; memory() grew {told_growth} KiB"
    );
    // RSS (after malloc_trim, see `trimmed_rss_anon`) also counts what the
    // Rust allocator does not see: C libraries' own mallocs and mmaps. It
    // must level off, not climb like a leak: over the second half (30
    // epochs), 20 KiB per epoch taken from the system allocator behind the
    // counter's back and touched fails it (+632 to +744 KiB in 3 runs).
    // Medians of 10 epochs, not single epochs: on the emulated device RSS
    // wobbles by up to 800 KiB from epoch to epoch; the last epoch against
    // the 30th moved by -364 to +432 KiB in 16 runs (once +664 KiB, which
    // failed, on a loaded machine), the medians by -228 to +106 in 12
    // (2026-11-25, both devices).
    let w = (n / 4).clamp(1, 10);
    let median = |l: &[u64]| {
        let mut l = l.to_vec();
        l.sort_unstable();
        l[l.len() / 2]
    };
    assert!(
        median(&rss[n - w..]) <= median(&rss[n / 2 - w..n / 2]) + 512,
        "RssAnon still climbing: {rss:?} KiB"
    );
}

/// Untrimmed, RssAnon also holds the free chunks glibc keeps cached, and
/// with one malloc arena per thread (glibc's default, up to 8 per core) it
/// creeps up for 30 or more epochs with live heap bytes flat: the threads
/// free each other's buffers into arenas that fragment. In a CI run of
/// e20b440 that creep alone passed the old bound (+1.1 MiB between epochs
/// 10 and 20). Measured here, emulated device, RssAnon growth over epochs
/// 30 to 60: +300 to +380 KiB untrimmed or trimmed with per-thread arenas;
/// +8 to +60 KiB trimmed with one arena. A leak does not care how many
/// arenas there are, so the test takes one and trims: what is left is
/// what the process holds. (The per-arena creep is glibc's, and levels
/// off: docs/RELIABILITY.md, "Memory over 20 epochs".)
fn one_malloc_arena() {
    #[cfg(target_env = "gnu")]
    {
        const M_ARENA_MAX: std::ffi::c_int = -8;
        unsafe extern "C" {
            fn mallopt(param: std::ffi::c_int, value: std::ffi::c_int) -> std::ffi::c_int;
        }
        // SAFETY: mallopt(3) takes no pointers; M_ARENA_MAX only caps how
        // many arenas glibc makes from now on (the pipeline's threads are
        // not started yet).
        unsafe { mallopt(M_ARENA_MAX, 1) };
    }
}

/// RssAnon in KiB after glibc has handed its free pages back to the kernel
/// (see `one_malloc_arena`).
fn trimmed_rss_anon() -> u64 {
    #[cfg(target_env = "gnu")]
    {
        unsafe extern "C" {
            fn malloc_trim(pad: usize) -> std::ffi::c_int;
        }
        // SAFETY: malloc_trim(3) takes no pointers and only returns free
        // memory to the kernel; glibc locks each arena while it trims.
        unsafe { malloc_trim(0) };
    }
    proc_::status("RssAnon")
}

fn rss_and_pools_stay_flat_over_sixty_epochs() {
    sixty_epochs(Device::Cpu, Route::Default);
    #[cfg(feature = "kernel-emu")]
    sixty_epochs(Device::Emulated, Route::Default);
    #[cfg(feature = "kernel-emu")]
    sixty_epochs(Device::Emulated, Route::Engine);
}

fn gpu_rss_and_pools_stay_flat_over_sixty_epochs() -> common::Outcome {
    common::need_gpu()?;
    sixty_epochs(Device::Cuda(0), Route::Default);
    sixty_epochs(Device::Cuda(0), Route::Engine);
    Ok(())
}

/// The read buffers' pool (`reader::BufferPool`) grows buffers to the
/// largest file but keeps none past the size 19 files in 20 fit in. Before
/// a bound every buffer of the window ended up as large as the largest
/// file, and a dataset with a few large files held window x largest file
/// (docs/BENCHMARKS.md, "Read buffers").
fn read_buffers_stay_near_the_mean_file_size() {
    // 280 of the sample's photos (10 copies of each, 60 KB on average)
    // and 4 of them with 4 MiB of padding after the image, which decoders
    // ignore.
    let dir = tempfile::tempdir().unwrap();
    let (files, _) = copy_sample(dir.path(), 10, |file, b| {
        if file < 4 {
            b.resize(b.len() + (4 << 20), 0);
        }
    });
    let source = Source::image_folder(dir.path()).unwrap();
    assert_eq!(source.len(), files);
    for &device in HOST_DEVICES {
        // Batch 32 and prefetch 2: 64 read buffers. At the largest file
        // that is 256 MiB; at four means (about 120 KB with the padded
        // files), 32 MiB; at the 64 KiB step that holds 19 files in 20
        // (192 KiB), 12 MiB.
        let mut p = Pipeline::builder()
            .source(source.clone())
            .device(device)
            .batch_size(32)
            .prefetch(2)
            .workers(2)
            .output_size(64, 64)
            .dtype(DType::F16)
            .build()
            .unwrap();
        let built = LIVE.load(Relaxed);
        let (mut grown, mut told) = (Vec::new(), Vec::new());
        for epoch in 0..3 {
            let n: usize = p.epoch(epoch).map(|b| b.unwrap().len()).sum();
            assert_eq!(n, files);
            let live = (LIVE.load(Relaxed) - built) as u64;
            let m = p.memory();
            let host = m.read_buffer_bytes + m.worker_scratch_bytes;
            // The host buffers were all allocated after build(), and between
            // epochs every read buffer is back in the pool: what
            // `memory()` reports is at most what the heap holds above
            // build(), and most of it (the rest: decoders' tables, the
            // batch slots' recycled tensors, channels).
            assert!(
                host <= live && host >= live / 2,
                "{device:?}, epoch {epoch}: memory() says {m:?}; live heap above build() {live} B"
            );
            grown.push(live >> 20);
            told.push((m.read_buffer_bytes >> 20, m.worker_scratch_bytes >> 20));
        }
        println!(
            "read buffers, {device:?}: live heap MiB above build() after each epoch: {grown:?}; \
             memory() MiB (read buffers, workers' scratch): {told:?}"
        );
        assert!(
            grown[2] < 96,
            "{device:?}: live heap grew {grown:?} MiB over 3 epochs of {files} files"
        );
    }
}

/// Each CPU worker's image buffer and resampler rows grow at once to the
/// largest image so far, but only up to the size of the images that make
/// up 19 decoded bytes in 20 (`Shared::decoded`, `Shared::rows`). Before
/// that bound every worker grew to the largest image met by any of them:
/// with one 12-megapixel photo among ImageNet-sized ones, 8 workers held
/// 357 MiB (docs/BENCHMARKS.md, "Workers' scratch").
fn a_rare_large_image_leaves_no_worker_holding_it() {
    // 560 sample photos (20 copies; 0.5 MB decoded on average, 286 MB an
    // epoch) and one image of 2000x1500 (9 MB decoded, 3 % of the bytes),
    // a PNG under a .jpg name so that every backend decodes it on the
    // workers.
    let dir = tempfile::tempdir().unwrap();
    let (mut files, class_dir) = copy_sample(dir.path(), 20, |_, _| {});
    let (w, h) = (2000u32, 1500u32);
    let pixels: Vec<u8> = (0..w * h)
        .flat_map(|i| [(i % w / 8) as u8, (i / w / 6) as u8, 128])
        .collect();
    let mut png_bytes = Vec::new();
    let mut e = png::Encoder::new(&mut png_bytes, w, h);
    e.set_color(png::ColorType::Rgb);
    e.set_depth(png::BitDepth::Eight);
    e.write_header().unwrap().write_image_data(&pixels).unwrap();
    std::fs::write(class_dir.join("large.jpg"), png_bytes).unwrap();
    files += 1;
    let source = Source::image_folder(dir.path()).unwrap();
    assert_eq!(source.len(), files);
    for &device in HOST_DEVICES {
        let workers = 4;
        let mut p = Pipeline::builder()
            .source(source.clone())
            .device(device)
            .batch_size(32)
            .workers(workers)
            .output_size(64, 64)
            .dtype(DType::F16)
            .build()
            .unwrap();
        let mut scratch = Vec::new();
        for epoch in 0..3 {
            let n: usize = p.epoch(epoch).map(|b| b.unwrap().len()).sum();
            assert_eq!(n, files, "every image, the large one included");
            scratch.push(p.memory().worker_scratch_bytes);
        }
        println!(
            "workers' scratch, {device:?}, {workers} workers, after each epoch: {scratch:?} B"
        );
        // Kept: the sample photos' image (at most 1.3 MB decoded) and rows
        // (64 wide, 1 KiB a row). Every worker grows its buffers to the
        // large image while the sizes are not yet trusted (the first 256
        // images), but none keeps it past an epoch's end; held at its size,
        // the large image alone would be 9 MB a worker.
        assert!(
            device != Device::Cpu || scratch[0] > 0,
            "scratch counted: {scratch:?}"
        );
        assert!(
            scratch.iter().all(|&s| s <= workers as u64 * (3 << 20)),
            "{device:?}: workers' scratch {scratch:?} B"
        );
    }
}

/// `copies` copies of each sample photo in `dir`, in the sample's class
/// folders, each passed to `edit` with its number first. Returns how many
/// files were written and the last class folder.
fn copy_sample(
    dir: &std::path::Path,
    copies: usize,
    mut edit: impl FnMut(usize, &mut Vec<u8>),
) -> (usize, std::path::PathBuf) {
    let (mut files, mut last) = (0, None);
    for entry in std::fs::read_dir(common::sample_dir()).unwrap() {
        let class = entry.unwrap().path();
        if !class.is_dir() {
            continue;
        }
        let to = dir.join(class.file_name().unwrap());
        std::fs::create_dir(&to).unwrap();
        for photo in std::fs::read_dir(&class).unwrap() {
            let photo = photo.unwrap().path();
            let bytes = std::fs::read(&photo).unwrap();
            for k in 0..copies {
                let name = format!("{k}-{}", photo.file_name().unwrap().to_string_lossy());
                let mut b = bytes.clone();
                edit(files, &mut b);
                std::fs::write(to.join(name), b).unwrap();
                files += 1;
            }
        }
        last = Some(to);
    }
    (files, last.expect("the sample has class folders"))
}
