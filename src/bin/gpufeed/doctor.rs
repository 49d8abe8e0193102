//! `gpufeed doctor`: what this machine gives gpufeed, before a run. The
//! CUDA driver and its devices, NVRTC and whether the kernels compile,
//! nvJPEG and the hardware JPEG engine; for each part that is missing,
//! why, and which backend `Device::Auto` will take. On a machine whose
//! libraries come from NVIDIA's Python wheels, it says whether the library
//! path finds them.

use std::process::ExitCode;
use std::time::Instant;

use gpufeed::cuda::{self, nvrtc};
use gpufeed::decode::nvjpeg;
use serde_json::{Value, json};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Exit with 1 unless a CUDA device, NVRTC and nvJPEG are all usable
    /// (for scripts that must not fall back to the CPU).
    #[arg(long)]
    require_gpu: bool,
}

/// One part's finding: what was found, or why not.
fn part(found: Result<String, String>) -> (bool, String) {
    match found {
        Ok(s) => (true, s),
        Err(s) => (false, s),
    }
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let devices = cuda::devices();
    let (driver_ok, driver) = part(match &devices {
        Ok(d) => Ok(d
            .iter()
            .map(|d| {
                let (ma, mi) = d.compute_capability;
                format!("cuda:{} {} (compute {ma}.{mi})", d.index, d.name)
            })
            .collect::<Vec<_>>()
            .join("; ")),
        Err(e) => Err(e.to_string()),
    });
    // The kernels for device 0's architecture, or the H100's without one:
    // NVRTC compiles without a GPU (no cache, so this is a real compile).
    let arch = match &devices {
        Ok(d) => {
            let (ma, mi) = d[0].compute_capability;
            format!("sm_{ma}{mi}")
        }
        Err(_) => "sm_90".to_string(),
    };
    let (nvrtc_ok, nvrtc) = part(nvrtc::version().map_err(|e| e.to_string()).and_then(
        |(ma, mi)| {
            let mut took = Vec::new();
            let sources = cuda::kernel_sources();
            for (name, src) in &sources {
                let t0 = Instant::now();
                nvrtc::compile(name, src, &arch).map_err(|e| format!("{ma}.{mi}, but {e}"))?;
                took.push(format!("{name} {:.0} ms", t0.elapsed().as_secs_f64() * 1e3));
            }
            // Then all at once, as a pipeline's build() compiles the files
            // it needs into a cold cache (a thread each).
            let named: Vec<(&str, &str)> = sources.iter().map(|(n, s)| (*n, s.as_str())).collect();
            let t0 = Instant::now();
            for c in nvrtc::compile_cached_all(None, &named, &arch) {
                c.map_err(|e| format!("{ma}.{mi}, but {e}"))?;
            }
            Ok(format!(
                "{ma}.{mi}; the kernels compile for {arch} ({}; all at once {:.0} ms)",
                took.join(", "),
                t0.elapsed().as_secs_f64() * 1e3
            ))
        },
    ));
    let (nvjpeg_ok, nvjpeg) = part(
        nvjpeg::version()
            .map(|(a, b, c)| format!("{a}.{b}.{c}"))
            .map_err(|e| e.to_string()),
    );
    let (_, engine) = part(match (driver_ok, nvjpeg::hardware_decoder_info()) {
        (true, Ok((e, c))) if e > 0 => Ok(format!("{e} engines x {c} cores")),
        (true, Ok(_)) => Err("none on this GPU".into()),
        (true, Err(e)) => Err(format!("none ({e})")),
        (false, _) => Err("no GPU".into()),
    });
    // What `Device::Auto` needs: a device and its kernels (without nvJPEG
    // the workers decode on the CPU).
    let auto = if driver_ok && nvrtc_ok {
        "cuda:0"
    } else {
        "cpu"
    };
    let cache = nvrtc::kernel_cache_dir().map(|d| d.display().to_string());
    let library_path = std::env::var("LD_LIBRARY_PATH").unwrap_or_default();
    if args.json {
        let v: Value = json!({
            "version": env!("CARGO_PKG_VERSION"),
            "build": super::bench::BUILD,
            "cpu_cores": cores,
            "cuda_driver": {"ok": driver_ok, "detail": driver},
            "nvrtc": {"ok": nvrtc_ok, "detail": nvrtc},
            "nvjpeg": {"ok": nvjpeg_ok, "detail": nvjpeg},
            "hardware_jpeg_decoder": engine,
            "kernel_cache": cache,
            "auto_device": auto,
            "ld_library_path": library_path,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        let mark = |ok: bool| if ok { "ok  " } else { "--  " };
        println!(
            "gpufeed {} ({} build), {cores} CPU cores",
            env!("CARGO_PKG_VERSION"),
            super::bench::BUILD
        );
        println!("  {}CUDA driver: {driver}", mark(driver_ok));
        println!("  {}NVRTC: {nvrtc}", mark(nvrtc_ok));
        println!("  {}nvJPEG: {nvjpeg}", mark(nvjpeg_ok));
        println!("      hardware JPEG decoder: {engine}");
        println!(
            "      kernel cache: {}",
            cache
                .as_deref()
                .unwrap_or("none (no GPUFEED_KERNEL_CACHE, XDG_CACHE_HOME or HOME)")
        );
        println!(
            "  Device::Auto uses {}",
            if auto == "cpu" { "the CPU" } else { auto }
        );
        if !(nvrtc_ok && nvjpeg_ok) {
            println!(
                "  NVRTC and nvJPEG are loaded by name (libnvrtc.so.13, libnvjpeg.so.13): from \
                 the CUDA toolkit, or from NVIDIA's wheels (pip install nvidia-cuda-nvrtc \
                 nvidia-nvjpeg nvidia-cuda-runtime) with their lib folder on LD_LIBRARY_PATH{}",
                if library_path.is_empty() {
                    " (unset here)".to_string()
                } else {
                    format!(" (here: {library_path})")
                }
            );
        }
    }
    let complete = driver_ok && nvrtc_ok && nvjpeg_ok;
    Ok(if args.require_gpu && !complete {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
