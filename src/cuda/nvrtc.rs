//! Run-time compilation of the embedded kernels with NVRTC, to a CUBIN for
//! one `sm_XY` (not PTX: a PTX from a newer NVRTC is refused by an older
//! driver), cached on disk by source hash, architecture and NVRTC version.

use std::ffi::{CStr, CString, c_char};
use std::path::PathBuf;

use cudarc::nvrtc::{result, sys};

use crate::error::{Error, Result};

/// Options every kernel is compiled with. `--fmad=false` keeps `a * b + c`
/// as a rounded multiply then a rounded add, as the CPU reference computes
/// it, so GPU and CPU results agree bit for bit where the formulas do.
const OPTIONS: [&str; 3] = ["--fmad=false", "--std=c++17", "--ptxas-options=-v"];

/// A compiled kernel file.
#[derive(Debug, Clone)]
pub struct Cubin {
    /// The CUBIN image.
    pub image: Vec<u8>,
    /// NVRTC's log, including ptxas's resource report per kernel.
    pub log: String,
}

impl Cubin {
    /// Kernels whose ptxas report shows spill stores or loads, with the
    /// count: `(kernel, bytes)`. Empty is what we want.
    pub fn spills(&self) -> Vec<(String, u64)> {
        let mut current = String::new();
        let mut out = Vec::new();
        for line in self.log.lines() {
            if let Some(at) = line.find("Compiling entry function '") {
                let rest = &line[at + "Compiling entry function '".len()..];
                current = rest.split('\'').next().unwrap_or("").to_string();
            }
            for key in ["bytes spill stores", "bytes spill loads"] {
                if let Some(at) = line.find(key) {
                    let n: String = line[..at]
                        .trim_end()
                        .chars()
                        .rev()
                        .take_while(|c| c.is_ascii_digit())
                        .collect::<Vec<_>>()
                        .into_iter()
                        .rev()
                        .collect();
                    if let Ok(n) = n.parse::<u64>()
                        && n > 0
                    {
                        out.push((current.clone(), n));
                    }
                }
            }
        }
        out
    }
}

/// Whether `libnvrtc` can be loaded.
pub fn available() -> bool {
    // With `candle-cuda`, libnvrtc is linked at build time (candle's
    // cudarc `dynamic-linking`): present if the process started.
    #[cfg(feature = "candle-cuda")]
    return true;
    // SAFETY: only tries to dlopen the library by its candidate names.
    #[cfg(not(feature = "candle-cuda"))]
    unsafe {
        sys::is_culib_present()
    }
}

/// NVRTC's `(major, minor)` version.
pub fn version() -> Result<(i32, i32)> {
    if !available() {
        return Err(Error::Device("libnvrtc not found".into()));
    }
    let (mut major, mut minor) = (0, 0);
    // SAFETY: the library is present (checked above); nvrtcVersion writes
    // two ints through valid pointers.
    let status = unsafe { sys::nvrtcVersion(&mut major, &mut minor) };
    status
        .result()
        .map_err(|e| Error::Device(format!("nvrtcVersion: {e:?}")))?;
    Ok((major, minor))
}

/// Compile `src` (named `name` in messages) for `arch` such as `"sm_90"`.
pub fn compile(name: &str, src: &str, arch: &str) -> Result<Cubin> {
    if !available() {
        return Err(Error::Device(
            "libnvrtc not found: cannot compile kernels".into(),
        ));
    }
    let csrc = CString::new(src).map_err(|_| Error::Config(format!("{name}: NUL in source")))?;
    let cname = CString::new(name).map_err(|_| Error::Config(format!("{name}: NUL in name")))?;
    let prog = result::create_program(&csrc, Some(&cname))
        .map_err(|e| Error::Device(format!("nvrtcCreateProgram({name}): {e:?}")))?;
    let program = Program(prog);
    let mut options: Vec<String> = OPTIONS.iter().map(|s| s.to_string()).collect();
    options.push(format!("--gpu-architecture={arch}"));
    // SAFETY: `program.0` was created above and is destroyed only by Drop.
    let compiled = unsafe { result::compile_program(program.0, &options) };
    let log = program.log();
    if let Err(e) = compiled {
        return Err(Error::Device(format!(
            "NVRTC failed on {name} for {arch}: {e:?}\n{log}"
        )));
    }
    let mut size = 0usize;
    // SAFETY: the program compiled successfully; the size is written
    // through a valid pointer (NVRTC API, nvrtcGetCUBINSize).
    unsafe { sys::nvrtcGetCUBINSize(program.0, &mut size) }
        .result()
        .map_err(|e| Error::Device(format!("nvrtcGetCUBINSize({name}): {e:?}")))?;
    let mut image = vec![0u8; size];
    // SAFETY: `image` holds exactly the `size` bytes NVRTC reported.
    unsafe { sys::nvrtcGetCUBIN(program.0, image.as_mut_ptr() as *mut c_char) }
        .result()
        .map_err(|e| Error::Device(format!("nvrtcGetCUBIN({name}): {e:?}")))?;
    Ok(Cubin { image, log })
}

/// Compile through the disk cache: `$GPUFEED_KERNEL_CACHE`, else
/// `$XDG_CACHE_HOME/gpufeed`, else `~/.cache/gpufeed`. A cache that cannot
/// be read or written only costs a recompile.
pub fn compile_cached(name: &str, src: &str, arch: &str) -> Result<Cubin> {
    compile_cached_in(kernel_cache_dir().as_deref(), name, src, arch)
}

/// [`compile_cached`] with an explicit cache folder (`None`: no cache).
pub fn compile_cached_in(
    dir: Option<&std::path::Path>,
    name: &str,
    src: &str,
    arch: &str,
) -> Result<Cubin> {
    let (major, minor) = version()?;
    let nvrtc = format!("{major}.{minor}");
    let key = fnv1a(&[src.as_bytes(), arch.as_bytes(), nvrtc.as_bytes()]);
    let path = dir.map(|d| d.join(format!("{name}-{arch}-{key:016x}.cubin")));
    if let Some(p) = &path
        && let Ok(image) = std::fs::read(p)
    {
        let log = String::from("(from cache)");
        return Ok(Cubin { image, log });
    }
    let cubin = compile(name, src, arch)?;
    if let Some(p) = &path {
        if let Some(dir) = p.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        // Write then rename, so a concurrent reader never sees half a file.
        let tmp = p.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, &cubin.image).is_ok() {
            let _ = std::fs::rename(&tmp, p);
        }
    }
    Ok(cubin)
}

/// [`compile_cached_in`] over several files at once, a thread each, the
/// results in `files`' order. NVRTC compiles distinct programs from
/// several threads (NVRTC User Guide, "Thread Safety": only calls on one
/// program must not race), so a cold cache costs about the slowest file
/// rather than the sum: a default pipeline's `augment.cu`,
/// `progressive.cu` and `pixels.cu` took 3.2 s one after another and 2.6
/// s at once on a 2-core VM (2026-12-01, docs/BENCHMARKS.md; time to
/// first batch, issue 20). A thread that cannot be started leaves its
/// file to this one.
pub fn compile_cached_all(
    dir: Option<&std::path::Path>,
    files: &[(&str, &str)],
    arch: &str,
) -> Vec<Result<Cubin>> {
    // NVVM's optimizer recurses over the kernels' code; the main thread's
    // 8 MiB rather than a spawned thread's default 2.
    const STACK: usize = 8 << 20;
    std::thread::scope(|s| {
        let started: Vec<_> = files
            .iter()
            .skip(1)
            .map(|&(name, src)| {
                std::thread::Builder::new()
                    .name("gpufeed-nvrtc".into())
                    .stack_size(STACK)
                    .spawn_scoped(s, move || compile_cached_in(dir, name, src, arch))
                    .map_err(|_| (name, src))
            })
            .collect();
        let first = files
            .first()
            .map(|&(name, src)| compile_cached_in(dir, name, src, arch));
        let rest = started.into_iter().map(|t| match t {
            Ok(h) => h.join().unwrap_or_else(|_| {
                Err(Error::Device("NVRTC: a compiling thread panicked".into()))
            }),
            Err((name, src)) => compile_cached_in(dir, name, src, arch),
        });
        first.into_iter().chain(rest).collect()
    })
}

/// The folder [`compile_cached`] keeps compiled kernels in (`None`: no
/// cache, when neither variable nor a home folder is set).
pub fn kernel_cache_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("GPUFEED_KERNEL_CACHE") {
        return Some(PathBuf::from(d));
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return Some(PathBuf::from(d).join("gpufeed"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/gpufeed"))
}

/// FNV-1a, 64 bit: a cache key that is stable across Rust versions (std's
/// hasher is not).
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for part in parts {
        for &b in *part {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Owns an `nvrtcProgram`; destroys it on drop.
struct Program(sys::nvrtcProgram);

impl Program {
    fn log(&self) -> String {
        // SAFETY: the program is live (owned by self).
        match unsafe { result::get_program_log(self.0) } {
            Ok(raw) if !raw.is_empty() => {
                // SAFETY: NVRTC's log is NUL-terminated within `raw`.
                unsafe { CStr::from_ptr(raw.as_ptr()) }
                    .to_string_lossy()
                    .into_owned()
            }
            _ => String::new(),
        }
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: created by nvrtcCreateProgram and destroyed only here.
        // A failure to destroy leaks the program; it must not panic.
        let _ = unsafe { result::destroy_program(self.0) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spill_report_is_parsed() {
        let c = Cubin {
            image: vec![],
            log: "ptxas info    : Compiling entry function 'k1' for 'sm_80'\n\
                  ptxas info    : Function properties for k1\n\
                  \x20   0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n\
                  ptxas info    : Compiling entry function 'k2' for 'sm_80'\n\
                  \x20   8 bytes stack frame, 12 bytes spill stores, 4 bytes spill loads\n"
                .into(),
        };
        assert_eq!(
            c.spills(),
            vec![("k2".to_string(), 12), ("k2".to_string(), 4)]
        );
    }

    #[test]
    fn cache_key_changes_with_each_part() {
        let k = fnv1a(&[b"src", b"sm_80", b"13.0"]);
        assert_ne!(k, fnv1a(&[b"src", b"sm_90", b"13.0"]));
        assert_ne!(k, fnv1a(&[b"src!", b"sm_80", b"13.0"]));
        assert_ne!(k, fnv1a(&[b"src", b"sm_80", b"13.1"]));
        assert_ne!(fnv1a(&[b"ab", b"c"]), fnv1a(&[b"a", b"bc"]));
    }
}
