//! Every embedded kernel compiles with NVRTC for sm_80 and sm_90, and
//! ptxas reports no local-memory spills. Needs only libnvrtc (CI installs
//! the `nvidia-cuda-nvrtc` wheel), no GPU. Without NVRTC the tests show as
//! ignored; with `GPUFEED_REQUIRE_NVRTC=1` they fail instead.

mod common;

use common::Outcome;
use gpufeed::cuda::{
    AUGMENT_KERNELS, MIX_KERNELS, PHOTO_KERNELS, PIXELS_KERNELS, PROGRESSIVE_KERNELS,
    kernel_sources, nvrtc,
};

common::tests!(
    kernels_compile_for_sm80_and_sm90_without_spills,
    a_broken_kernel_fails_to_compile,
    the_cache_returns_the_same_cubin,
    a_cut_cached_cubin_is_compiled_again,
    threads_compiling_one_file_leave_one_whole_cubin,
    files_compiled_at_once_equal_those_compiled_in_turn,
    no_device_is_an_error_not_a_panic,
);

fn need_nvrtc() -> Outcome {
    if nvrtc::available() {
        return Ok(());
    }
    Err(common::not_run(
        "GPUFEED_REQUIRE_NVRTC",
        "libnvrtc cannot be loaded (LD_LIBRARY_PATH?)",
    ))
}

fn kernels_compile_for_sm80_and_sm90_without_spills() -> Outcome {
    need_nvrtc()?;
    println!("NVRTC {:?}", nvrtc::version().unwrap());
    // Through a cache of its own: each CUBIN must be taken back from it
    // (its ELF headers tell a whole file).
    let dir = tempfile::tempdir().unwrap();
    for arch in ["sm_80", "sm_90"] {
        for (name, src) in kernel_sources() {
            let cubin = nvrtc::compile_cached_in(Some(dir.path()), name, &src, arch)
                .unwrap_or_else(|e| panic!("{e}"));
            assert!(cubin.image.len() > 1000, "{name} {arch}: tiny CUBIN");
            // An ELF image, not PTX text.
            assert_eq!(&cubin.image[..4], b"\x7fELF", "{name} {arch}: not a CUBIN");
            let cached = nvrtc::compile_cached_in(Some(dir.path()), name, &src, arch).unwrap();
            assert_eq!(cached.log, "(from cache)", "{name} {arch}: compiled again");
            // Seen on an H100 box (2026-11-22, its CUDA 13.0 toolkit's
            // NVRTC): an empty log for sm_90 after the sm_80 compile. The
            // CUBIN is checked above; the spill check needs the report,
            // which CI's NVRTC wheel always gives.
            if cubin.log.trim().is_empty() {
                println!("{name} {arch}: NVRTC gave no ptxas report; spills unchecked here");
                continue;
            }
            let entries: &[&str] = match name {
                "photo.cu" => &PHOTO_KERNELS,
                "mix.cu" => &MIX_KERNELS,
                "progressive.cu" => &PROGRESSIVE_KERNELS,
                "pixels.cu" => &PIXELS_KERNELS,
                _ => &AUGMENT_KERNELS,
            };
            for k in entries {
                assert!(
                    cubin
                        .log
                        .contains(&format!("Compiling entry function '{k}'")),
                    "{name} {arch}: no ptxas report for {k}:\n{}",
                    cubin.log
                );
            }
            assert!(
                cubin.spills().is_empty(),
                "{name} {arch} spills: {:?}",
                cubin.spills()
            );
            let regs: Vec<&str> = cubin
                .log
                .lines()
                .filter(|l| l.contains("registers"))
                .collect();
            println!(
                "{name} {arch}: {} bytes\n  {}",
                cubin.image.len(),
                regs.join("\n  ")
            );
        }
    }
    Ok(())
}

fn a_broken_kernel_fails_to_compile() -> Outcome {
    need_nvrtc()?;
    // One deleted semicolon in kernel code must fail the build.
    let (name, src) = &kernel_sources()[0];
    assert!(src.contains("return t;"));
    let broken = src.replacen("return t;", "return t", 1);
    match nvrtc::compile(name, &broken, "sm_80") {
        Ok(_) => panic!("a kernel without a semicolon compiled"),
        Err(e) => assert!(e.to_string().contains("NVRTC failed"), "{e}"),
    }
    Ok(())
}

fn the_cache_returns_the_same_cubin() -> Outcome {
    need_nvrtc()?;
    let dir = tempfile::tempdir().unwrap();
    let (name, src) = &kernel_sources()[0];
    let a = nvrtc::compile_cached_in(Some(dir.path()), name, src, "sm_80").unwrap();
    let b = nvrtc::compile_cached_in(Some(dir.path()), name, src, "sm_80").unwrap();
    assert_eq!(a.image, b.image);
    assert_eq!(b.log, "(from cache)");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    Ok(())
}

/// A cached CUBIN cut short (a full disk, or an older gpufeed's racing
/// threads) is compiled again and rewritten, not handed to the driver.
fn a_cut_cached_cubin_is_compiled_again() -> Outcome {
    need_nvrtc()?;
    let dir = tempfile::tempdir().unwrap();
    let (name, src) = &kernel_sources()[4];
    let whole = nvrtc::compile_cached_in(Some(dir.path()), name, src, "sm_80").unwrap();
    let file = std::fs::read_dir(dir.path())
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    assert_eq!(std::fs::read(&file).unwrap(), whole.image);
    for keep in [whole.image.len() - 1, whole.image.len() / 2, 60, 3, 0] {
        std::fs::write(&file, &whole.image[..keep]).unwrap();
        let again = nvrtc::compile_cached_in(Some(dir.path()), name, src, "sm_80").unwrap();
        assert_ne!(
            again.log,
            "(from cache)",
            "{keep} bytes of {}",
            whole.image.len()
        );
        assert_eq!(again.image, whole.image);
        assert_eq!(std::fs::read(&file).unwrap(), whole.image, "not rewritten");
    }
    let cached = nvrtc::compile_cached_in(Some(dir.path()), name, src, "sm_80").unwrap();
    assert_eq!(cached.log, "(from cache)");
    Ok(())
}

/// Threads compiling one file into a cold cache at once (`cargo test`'s
/// GPU tests build pipelines on parallel threads) each get the CUBIN, and the cache
/// ends with that one file and no temporaries. Each thread's temporary has
/// a name of its own: with one per process, a rename could publish a file
/// that another thread was still writing. That window is too narrow for
/// this test to hit reliably (6 runs with the old name passed on 2 cores);
/// a reader of such a file now compiles again
/// (`a_cut_cached_cubin_is_compiled_again`).
fn threads_compiling_one_file_leave_one_whole_cubin() -> Outcome {
    need_nvrtc()?;
    let dir = tempfile::tempdir().unwrap();
    let (name, src) = &kernel_sources()[4];
    let alone = nvrtc::compile(name, src, "sm_80").unwrap();
    let files = vec![(*name, src.as_str()); 4];
    for got in nvrtc::compile_cached_all(Some(dir.path()), &files, "sm_80") {
        assert!(got.unwrap().image == alone.image, "another CUBIN");
    }
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(std::fs::read(&left[0]).unwrap() == alone.image);
    Ok(())
}

/// `compile_cached_all` (a pipeline's build() with a cold cache): each
/// file's CUBIN as compiled alone, in the files' order, each cached, and
/// a file that fails fails alone, named.
fn files_compiled_at_once_equal_those_compiled_in_turn() -> Outcome {
    need_nvrtc()?;
    let dir = tempfile::tempdir().unwrap();
    let sources = kernel_sources();
    let pick = |n: &str| sources.iter().find(|(name, _)| *name == n).unwrap();
    let (augment, pixels) = (pick("augment.cu"), pick("pixels.cu"));
    let broken = augment.1.replacen("return t;", "return t", 1);
    let files = [
        ("pixels.cu", pixels.1.as_str()),
        ("broken.cu", broken.as_str()),
        ("augment.cu", augment.1.as_str()),
    ];
    let got = nvrtc::compile_cached_all(Some(dir.path()), &files, "sm_80");
    assert_eq!(got.len(), 3);
    match &got[1] {
        Ok(_) => panic!("a kernel without a semicolon compiled"),
        Err(e) => assert!(e.to_string().contains("NVRTC failed on broken.cu"), "{e}"),
    }
    for i in [0, 2] {
        let (name, src) = files[i];
        let alone = nvrtc::compile(name, src, "sm_80").unwrap();
        let at_once = got[i].as_ref().unwrap();
        assert!(at_once.image == alone.image, "{name}: another CUBIN");
        let cached = nvrtc::compile_cached_in(Some(dir.path()), name, src, "sm_80").unwrap();
        assert_eq!(
            (cached.log.as_str(), &cached.image),
            ("(from cache)", &alone.image)
        );
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    Ok(())
}

fn no_device_is_an_error_not_a_panic() {
    match gpufeed::cuda::devices() {
        Ok(devs) => println!("devices: {devs:?}"),
        Err(e) => println!("no device: {e}"),
    }
}
