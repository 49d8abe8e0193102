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
/// be read or written, or a cached file cut short, only costs a recompile.
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
        && whole_elf(&image)
    {
        let log = String::from("(from cache)");
        return Ok(Cubin { image, log });
    }
    let cubin = compile(name, src, arch)?;
    if let Some(p) = &path {
        if let Some(dir) = p.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        // A failure to write costs the next open a compile, nothing else.
        let _ = crate::files::write_atomic(p, &cubin.image);
    }
    Ok(cubin)
}

/// Whether `image` is a whole 64-bit ELF file as far as its headers tell:
/// the magic, both header tables, and every section with contents inside
/// the file. A cached CUBIN that fails this (cut short by a full disk, or
/// written by an older gpufeed's racing threads) is compiled again rather
/// than handed to the driver, which would refuse it for as long as the
/// file stays. ptxas writes the program headers last, after the section
/// headers (NVRTC 13.0, every kernel file for sm_80 and sm_90). Fields
/// per the System V ABI, "ELF Header" and "Sections", little-endian as
/// CUDA's ELFCLASS64 images are: `e_phoff` at byte 32, `e_shoff` at 40,
/// `e_phentsize`, `e_phnum`, `e_shentsize`, `e_shnum` at 54 to 60; a
/// section's `sh_type` at 4, `sh_offset` at 24, `sh_size` at 32.
fn whole_elf(image: &[u8]) -> bool {
    const NOBITS: u32 = 8;
    let int = |at: usize, n: usize| {
        let b = image.get(at..at.checked_add(n)?)?;
        Some(b.iter().rev().fold(0u64, |v, &x| v << 8 | u64::from(x)))
    };
    let within = |at: u64, len: u64| {
        at.checked_add(len)
            .is_some_and(|end| end <= image.len() as u64)
    };
    let table = |off: usize, entsize: usize, num: usize| {
        let (off, entsize, num) = (int(off, 8)?, int(entsize, 2)?, int(num, 2)?);
        within(off, entsize * num).then_some((off, entsize, num))
    };
    if !image.starts_with(b"\x7fELF\x02\x01") || table(32, 54, 56).is_none() {
        return false;
    }
    let Some((shoff, shentsize, shnum)) = table(40, 58, 60) else {
        return false;
    };
    shnum > 0
        && shentsize >= 40
        && (0..shnum).all(|i| {
            let at = (shoff + i * shentsize) as usize;
            let (Some(kind), Some(off), Some(size)) =
                (int(at + 4, 4), int(at + 24, 8), int(at + 32, 8))
            else {
                return false;
            };
            kind == u64::from(NOBITS) || within(off, size)
        })
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

    /// An ELF64 file of `len` bytes: `count` section headers of 64 bytes
    /// at `shoff`, each a section of 16 bytes at 64, and 2 program headers
    /// of 56 bytes at `phoff`.
    fn elf(shoff: u64, count: u16, phoff: u64, len: usize) -> Vec<u8> {
        let mut f = vec![0u8; 4096];
        f[..6].copy_from_slice(b"\x7fELF\x02\x01");
        f[32..40].copy_from_slice(&phoff.to_le_bytes());
        f[40..48].copy_from_slice(&shoff.to_le_bytes());
        f[54..56].copy_from_slice(&56u16.to_le_bytes());
        f[56..58].copy_from_slice(&2u16.to_le_bytes());
        f[58..60].copy_from_slice(&64u16.to_le_bytes());
        f[60..62].copy_from_slice(&count.to_le_bytes());
        for i in 0..count as usize {
            let at = (shoff as usize).saturating_add(i * 64);
            if at.saturating_add(40) <= f.len() {
                f[at + 24..at + 32].copy_from_slice(&64u64.to_le_bytes());
                f[at + 32..at + 40].copy_from_slice(&16u64.to_le_bytes());
            }
        }
        f.truncate(len);
        f
    }

    #[test]
    fn a_cubin_is_whole_when_its_headers_and_sections_are_in_the_file() {
        // ptxas's layout: sections, section headers, program headers.
        assert!(whole_elf(&elf(1000, 3, 1192, 1304)));
        assert!(!whole_elf(&elf(1000, 3, 1192, 1303)), "program headers cut");
        assert!(!whole_elf(&elf(1000, 3, 1192, 1191)), "section headers cut");
        assert!(!whole_elf(&elf(1000, 0, 1192, 1304)), "no sections");
        assert!(!whole_elf(&elf(u64::MAX, 3, 1192, 1304)));
        assert!(!whole_elf(&elf(1000, 3, u64::MAX - 8, 1304)));
        assert!(!whole_elf(&elf(1000, 3, 1192, 50)));
        assert!(!whole_elf(b""));
        let mut past = elf(1000, 3, 1192, 1304);
        past[1000 + 64 + 32..1000 + 64 + 40].copy_from_slice(&4096u64.to_le_bytes());
        assert!(!whole_elf(&past), "a section past the end");
        past[1000 + 64 + 4] = 8;
        assert!(whole_elf(&past), "NOBITS takes no room in the file");
        let mut narrow = elf(1000, 3, 1192, 1304);
        narrow[4] = 1;
        assert!(!whole_elf(&narrow), "a 32-bit ELF");
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
