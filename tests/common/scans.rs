//! What the scan kernels' tests share: `tests/progressive.rs` (the
//! kernels against libjpeg-turbo, a file or a batch at a time) and
//! `tests/kernel_routes.rs` (their routes through a pipeline). The
//! corpus's files of each coding process, the two instances' RGB8
//! decoders of one file, and libjpeg-turbo's coefficients and pixels, the
//! reference. Both tests need the `turbojpeg` feature.
#![allow(dead_code)]

use std::path::Path;

use gpufeed::cuda::pixels::Rgb;

/// The corpus's files of each coding process (its manifest's `sof`).
pub(crate) const PROGRESSIVE: Kind = Kind {
    sequential: false,
    sofs: &["progressive"],
    skip: None,
};
pub(crate) const SEQUENTIAL: Kind = Kind {
    sequential: true,
    sofs: &["baseline", "ext-seq"],
    skip: None,
};
/// The route on a GPU, without `photos/full` (as the route test leaves
/// it out on every device: minutes emulated). The coefficient and pixel
/// tests take them: split into
/// subsequences (progressive.cu's "Split decoding"), a multi-megapixel
/// photo is no longer one GPU thread's seconds of work.
pub(crate) const SEQUENTIAL_GPU: Kind = Kind {
    skip: Some("photos/full/"),
    ..SEQUENTIAL
};

#[derive(Clone, Copy)]
pub(crate) struct Kind {
    pub(crate) sequential: bool,
    sofs: &'static [&'static str],
    /// Files under this folder are left out.
    skip: Option<&'static str>,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        if self.sequential {
            "sequential"
        } else {
            "progressive"
        }
    }
}

/// Files over this many pixels are left out (the corpus's decompression
/// bombs); the photos are under 1.3 MP.
pub(crate) const MAX_PIXELS: u64 = 16_000_000;

// The two instances' RGB8 decoders of one file.
#[cfg(feature = "kernel-emu")]
pub(crate) fn emu_rgb(p: &Path, d: &[u8]) -> gpufeed::Result<Rgb> {
    gpufeed::cuda::pixels::emu_rgb(p, d, MAX_PIXELS)
}
pub(crate) fn gpu_rgb(p: &Path, d: &[u8]) -> gpufeed::Result<Rgb> {
    gpufeed::cuda::prog_batch::gpu_rgb(p, d, MAX_PIXELS)
}

pub(crate) type DecodeRgb<'a> = &'a dyn Fn(&Path, &[u8]) -> gpufeed::Result<Rgb>;

/// The corpus's files of `kind` under [`MAX_PIXELS`] that are there (a
/// partial copy, as the GPU bundle's, has photos/ only): manifest name,
/// path, bytes.
///
/// `GPUFEED_TEST_MAX_FILES=N` keeps the first N photos (`photos/`) where
/// `capped` (the comparisons, not the routes): for the sanitizer runs of
/// the GPU instances, where every launch is instrumented and the whole
/// set outlasts its step (memcheck over `gpu_pixels` ran past 150 s on an
/// H200, 2026-11-27).
pub(crate) fn files(
    root: &Path,
    kind: Kind,
    capped: bool,
) -> impl Iterator<Item = (String, std::path::PathBuf, Vec<u8>)> {
    let manifest = std::fs::read_to_string(root.join("MANIFEST.tsv")).unwrap();
    let most = max_files().filter(|_| capped).unwrap_or(usize::MAX);
    let root = root.to_path_buf();
    let rows: Vec<String> = manifest.lines().skip(1).map(str::to_string).collect();
    rows.into_iter()
        .filter_map(move |row| {
            let f: Vec<&str> = row.split('\t').collect();
            if f.len() < 5 || !kind.sofs.contains(&f[4]) {
                return None;
            }
            let sampled = most < usize::MAX;
            if kind.skip.is_some_and(|d| f[0].starts_with(d))
                || (sampled && !f[0].starts_with("photos/"))
            {
                return None;
            }
            let (w, h): (u64, u64) = (f[2].parse().unwrap_or(0), f[3].parse().unwrap_or(0));
            if w * h > MAX_PIXELS {
                return None;
            }
            let path = root.join(f[0]);
            let data = std::fs::read(&path).ok()?;
            Some((f[0].to_string(), path, data))
        })
        .take(most)
}

/// `GPUFEED_TEST_MAX_FILES`, when set (see [`files`]).
pub(crate) fn max_files() -> Option<usize> {
    std::env::var("GPUFEED_TEST_MAX_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
}

/// The files a comparison must have found equal: 40 (photos/ alone has 50
/// progressive files, the whole corpus 87, and 288 sequential ones); 30
/// where the corpus lacks `photos/full`, which holds 41 of the progressive
/// files (the GPU bundle's `checks` call carries `tricky/` and `fuzz/`
/// beside `photos/imagenet-size` but not `photos/full`, over the device
/// tool's 64 MiB: 34 progressive files compared there on an H200, session
/// 59); or all of a `GPUFEED_TEST_MAX_FILES` sample of photos.
pub(crate) fn enough() -> usize {
    let whole = crate::common::corpus().is_ok_and(|c| c.join("photos/full").is_dir());
    let bar = if whole { 40 } else { 30 };
    max_files().map_or(bar, |n| n.clamp(1, bar))
}

/// The first scan of `data`: its entropy-coded bytes, from after its SOS
/// segment (the segments before it walked by their lengths) to the next
/// marker other than a stuffed 0xFF, a fill byte or a restart marker
/// (T.81 B.1.1.2, B.1.1.5), and where its restart markers are (the 0xFF
/// of each 0xFF 0xD0-0xD7). None without an SOS segment.
pub(crate) fn first_scan(data: &[u8]) -> Option<(std::ops::Range<usize>, Vec<usize>)> {
    let len_at = |at: usize| usize::from(u16::from_be_bytes([data[at + 2], data[at + 3]]));
    let mut at = 2;
    while at + 4 <= data.len() && data[at] == 0xFF && data[at + 1] != 0xDA {
        at += 2 + len_at(at);
    }
    if at + 4 > data.len() {
        return None;
    }
    at += 2 + len_at(at);
    let start = at;
    let mut restarts = Vec::new();
    while at + 1 < data.len() {
        if data[at] == 0xFF {
            match data[at + 1] {
                0x00 => {}
                0xD0..=0xD7 => restarts.push(at),
                0xFF => {
                    at += 1;
                    continue;
                }
                _ => break,
            }
            at += 2;
        } else {
            at += 1;
        }
    }
    Some((start.min(data.len())..at.min(data.len()), restarts))
}

pub(crate) mod libjpeg {
    use std::ffi::{c_int, c_short, c_void};

    use turbojpeg::raw;

    /// Per component, per block row, the coefficients of its blocks (64
    /// each, natural order); and whether libjpeg-turbo warned.
    pub(crate) type Rows = Vec<Vec<Vec<i16>>>;

    unsafe extern "C" fn keep(
        coeffs: *mut c_short,
        array: raw::tjregion,
        _plane: raw::tjregion,
        component: c_int,
        _transform: c_int,
        t: *mut raw::tjtransform,
    ) -> c_int {
        // SAFETY: `data` is the `Rows` that `coefficients` passed, alive
        // for the tj3Transform call that runs this filter; libjpeg-turbo
        // hands one row of `array.w / 8` blocks of 64 coefficients
        // (turbojpeg.c, the customFilter loop).
        unsafe {
            let rows = &mut *((*t).data as *mut Rows);
            let c = component as usize;
            if rows.len() <= c {
                rows.resize(c + 1, Vec::new());
            }
            let n = (array.w / 8) as usize * 64;
            rows[c].push(std::slice::from_raw_parts(coeffs, n).to_vec());
        }
        0
    }

    type SizedRgb = Result<(Vec<u8>, (c_int, c_int), bool), String>;

    /// libjpeg-turbo's RGB8 decode with TurboJPEG's defaults, and whether
    /// it warned.
    pub(crate) fn rgb(data: &[u8], max_pixels: u64) -> Result<(Vec<u8>, bool), String> {
        sized_rgb(data, max_pixels).map(|(out, _, warned)| (out, warned))
    }

    /// [`rgb`] with the image's width and height.
    fn sized_rgb(data: &[u8], max_pixels: u64) -> SizedRgb {
        // SAFETY: a plain TurboJPEG session: the handle is checked and
        // destroyed here; the output holds width * height * 3 bytes, as
        // the header read first says, and `data` is a live slice.
        unsafe {
            let h = raw::tj3Init(raw::TJINIT_TJINIT_DECOMPRESS as c_int);
            if h.is_null() {
                return Err("tj3Init failed".into());
            }
            raw::tj3Set(
                h,
                raw::TJPARAM_TJPARAM_MAXPIXELS as c_int,
                max_pixels as c_int,
            );
            let len = data.len() as raw::size_t;
            if raw::tj3DecompressHeader(h, data.as_ptr(), len) != 0 {
                raw::tj3Destroy(h);
                return Err("header".into());
            }
            let w = raw::tj3Get(h, raw::TJPARAM_TJPARAM_JPEGWIDTH as c_int);
            let ht = raw::tj3Get(h, raw::TJPARAM_TJPARAM_JPEGHEIGHT as c_int);
            let mut out = vec![0u8; w.max(0) as usize * ht.max(0) as usize * 3];
            let pf = raw::TJPF_TJPF_RGB as c_int;
            let r = raw::tj3Decompress8(h, data.as_ptr(), len, out.as_mut_ptr(), w * 3, pf);
            let warning = raw::tj3GetErrorCode(h) == raw::TJERR_TJERR_WARNING as c_int;
            raw::tj3Destroy(h);
            match r {
                0 => Ok((out, (w, ht), false)),
                _ if warning => Ok((out, (w, ht), true)),
                _ => Err("libjpeg-turbo refused it".into()),
            }
        }
    }

    /// How [`with_restarts`] places the markers: every `n` MCUs, or every
    /// `n` rows of MCUs.
    #[derive(Clone, Copy, Debug)]
    pub(crate) enum Restarts {
        Mcus(u16),
        Rows(u16),
    }

    /// `data` transcoded losslessly (`tj3Transform`, no operation: the same
    /// coefficients, Huffman-coded again) with restart markers placed as
    /// `every` says, for the split kernels' restart intervals: the corpus's
    /// photos have none. Markers other than the frame's are dropped.
    pub(crate) fn with_restarts(data: &[u8], every: Restarts) -> Result<Vec<u8>, String> {
        let (param, n) = match every {
            Restarts::Mcus(n) => (raw::TJPARAM_TJPARAM_RESTARTBLOCKS, n),
            Restarts::Rows(n) => (raw::TJPARAM_TJPARAM_RESTARTROWS, n),
        };
        // SAFETY: a plain TurboJPEG session: the handle is checked and
        // destroyed here, the buffer libjpeg-turbo allocates is copied out
        // and freed with tj3Free, and `data` is a live slice.
        unsafe {
            let h = raw::tj3Init(raw::TJINIT_TJINIT_TRANSFORM as c_int);
            if h.is_null() {
                return Err("tj3Init failed".into());
            }
            raw::tj3Set(h, param as c_int, c_int::from(n));
            let mut t: raw::tjtransform = std::mem::zeroed();
            t.op = raw::TJXOP_TJXOP_NONE as c_int;
            t.options = raw::TJXOPT_COPYNONE as c_int;
            let mut buf: *mut u8 = std::ptr::null_mut();
            let mut size: raw::size_t = 0;
            let len = data.len() as raw::size_t;
            let r = raw::tj3Transform(h, data.as_ptr(), len, 1, &mut buf, &mut size, &t);
            // A warning (a damaged seed's) still writes the whole file.
            let warned = raw::tj3GetErrorCode(h) == raw::TJERR_TJERR_WARNING as c_int;
            raw::tj3Destroy(h);
            let out = (!buf.is_null() && size > 0)
                .then(|| std::slice::from_raw_parts(buf, size as usize).to_vec());
            raw::tj3Free(buf.cast::<c_void>());
            match out {
                Some(out) if r == 0 || warned => Ok(out),
                _ => Err("libjpeg-turbo could not transcode it".into()),
            }
        }
    }

    /// `data` decoded (TurboJPEG's RGB8) and encoded again RGB-coded:
    /// colour space RGB (Adobe transform 0), 4:4:4, quality 90. libjpeg
    /// gives every component of such a file Huffman tables 0 (jcparam.c,
    /// `jpeg_set_colorspace`), the split kernels' "One table for every
    /// block" (kernels/progressive.cu); the corpus has a few such files,
    /// `tricky/jpeg-js/truecolor.jpg` among them.
    pub(crate) fn rgb_coded(data: &[u8], max_pixels: u64) -> Result<Vec<u8>, String> {
        let (pixels, (w, ht), _) = sized_rgb(data, max_pixels)?;
        // SAFETY: a plain TurboJPEG session: the handle is checked and
        // destroyed here, `pixels` holds w * ht * 3 bytes (`sized_rgb`),
        // and the buffer libjpeg-turbo allocates is copied out and freed
        // with tj3Free.
        unsafe {
            let h = raw::tj3Init(raw::TJINIT_TJINIT_COMPRESS as c_int);
            if h.is_null() {
                return Err("tj3Init failed".into());
            }
            for (param, value) in [
                (raw::TJPARAM_TJPARAM_COLORSPACE, raw::TJCS_TJCS_RGB as c_int),
                (
                    raw::TJPARAM_TJPARAM_SUBSAMP,
                    raw::TJSAMP_TJSAMP_444 as c_int,
                ),
                (raw::TJPARAM_TJPARAM_QUALITY, 90),
            ] {
                raw::tj3Set(h, param as c_int, value);
            }
            let mut buf: *mut u8 = std::ptr::null_mut();
            let mut size: raw::size_t = 0;
            let pf = raw::TJPF_TJPF_RGB as c_int;
            let r = raw::tj3Compress8(h, pixels.as_ptr(), w, w * 3, ht, pf, &mut buf, &mut size);
            raw::tj3Destroy(h);
            let out = (r == 0 && !buf.is_null() && size > 0)
                .then(|| std::slice::from_raw_parts(buf, size as usize).to_vec());
            raw::tj3Free(buf.cast::<c_void>());
            out.ok_or_else(|| "libjpeg-turbo could not encode it".into())
        }
    }

    pub(crate) fn coefficients(data: &[u8], max_pixels: u64) -> Result<(Rows, bool), String> {
        let mut rows: Rows = Vec::new();
        // SAFETY: a plain TurboJPEG session: the handle is checked and
        // destroyed here; the transform struct, the (unused) destination
        // arrays and `rows` outlive the call; `data` is a live slice.
        unsafe {
            let h = raw::tj3Init(raw::TJINIT_TJINIT_TRANSFORM as c_int);
            if h.is_null() {
                return Err("tj3Init failed".into());
            }
            raw::tj3Set(
                h,
                raw::TJPARAM_TJPARAM_MAXPIXELS as c_int,
                max_pixels as c_int,
            );
            let mut t: raw::tjtransform = std::mem::zeroed();
            t.op = raw::TJXOP_TJXOP_NONE as c_int;
            t.options = (raw::TJXOPT_NOOUTPUT | raw::TJXOPT_COPYNONE) as c_int;
            t.customFilter = Some(keep);
            t.data = (&mut rows as *mut Rows).cast::<c_void>();
            let mut buf: *mut u8 = std::ptr::null_mut();
            let mut size: raw::size_t = 0;
            let len = data.len() as raw::size_t;
            let r = raw::tj3Transform(h, data.as_ptr(), len, 1, &mut buf, &mut size, &t);
            raw::tj3Destroy(h);
            // A fatal error longjmps out before the filter runs (after
            // jpeg_read_coefficients); a warning leaves r = -1 with the
            // filter run (STOPONWARNING is off).
            if rows.is_empty() {
                Err("libjpeg-turbo refused it".into())
            } else {
                Ok((rows, r != 0))
            }
        }
    }
}
