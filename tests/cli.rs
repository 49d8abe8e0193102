//! The `gpufeed` binary: bench and scan, exit codes and messages.

mod common;

use common::Outcome;

common::tests!(
    bench_prints_a_table_and_json,
    bench_reports_bad_input_clearly,
    scan_good_folder_exits_0,
    scan_lists_bad_files_and_exits_1,
    scan_tricky_corpus_exits_1,
    scan_takes_a_file_several_files_and_folders,
    preview_writes_a_labelled_contact_sheet,
    kernel_bench_needs_a_gpu_and_says_so,
    decode_bench_needs_a_gpu_and_says_so,
    bench_sweeps_settings_and_writes_json_and_csv,
);

use std::process::Command;

fn gpufeed(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpufeed"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn bench_prints_a_table_and_json() {
    let sample = common::sample_dir();
    let sample = sample.to_str().unwrap();
    let (code, out, err) = gpufeed(&[
        "bench", sample, "--device", "cpu", "--epochs", "2", "--batch", "8",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("img/s") && out.contains("decode") && out.contains("28 files"),
        "{out}"
    );

    let (code, out, err) = gpufeed(&[
        "bench", sample, "--device", "cpu", "--epochs", "1", "--json", "--size", "64",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["files"], 28);
    assert_eq!(v["epochs"][0]["images"], 28);
    assert!(v["img_per_s"].as_f64().unwrap() > 0.0);
    assert_eq!(v["errors"]["corrupt"], 0);
}

fn bench_reports_bad_input_clearly() {
    let (code, _, err) = gpufeed(&["bench", "/nonexistent/data", "--device", "cpu"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("/nonexistent/data") && err.contains("does not exist"),
        "{err}"
    );

    let empty = tempfile::tempdir().unwrap();
    let (code, _, err) = gpufeed(&["bench", empty.path().to_str().unwrap(), "--device", "cpu"]);
    assert_eq!(code, 2);
    assert!(err.contains("no files"), "{err}");

    let (code, _, err) = gpufeed(&["bench", "--batch", "many"]);
    assert_eq!(code, 2);
    assert!(err.contains("--batch"), "{err}");

    let (code, _, err) = gpufeed(&["bench", "--device", "tpu"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown device"), "{err}");

    let (code, _, err) = gpufeed(&["bench", "--device", "cuda:0"]);
    assert_eq!(code, 2);
    assert!(err.contains("cuda:0"), "{err}");
}

fn scan_good_folder_exits_0() {
    let (code, out, err) = gpufeed(&["scan", common::sample_dir().to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("28 files: 28 decoded, 0 typed errors, 0 timeouts"),
        "{out}"
    );
}

fn scan_lists_bad_files_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        common::sample_dir().join("cat/cat-300572_1280.jpg"),
        dir.path().join("good.jpg"),
    )
    .unwrap();
    std::fs::write(dir.path().join("bad.jpg"), b"GIF89a").unwrap();
    let (code, out, _) = gpufeed(&["scan", dir.path().to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("BAD") && out.contains("bad.jpg") && out.contains("not a JPEG"),
        "{out}"
    );
    assert!(!out.contains("good.jpg:"), "{out}");
    assert!(out.contains("2 files: 1 decoded, 1 typed errors"), "{out}");

    let (code, out, _) = gpufeed(&["scan", dir.path().to_str().unwrap(), "--json"]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["bad"].as_array().unwrap().len(), 1);
}

fn scan_tricky_corpus_exits_1() -> Outcome {
    let corpus = common::corpus()?;
    let (code, out, _) = gpufeed(&["scan", corpus.join("tricky").to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(out.contains("BAD") && out.contains("large.jpg"), "{out}");
    println!("{}", out.lines().last().unwrap());
    Ok(())
}

fn preview_writes_a_labelled_contact_sheet() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("grid.png");
    let sample = common::sample_dir();
    let (code, stdout, err) = gpufeed(&[
        "preview",
        sample.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--batch",
        "9",
        "--size",
        "64",
        "--seed",
        "4",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(stdout.contains("9 images"), "{stdout}");
    let dec = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&out).unwrap()));
    let info = dec.read_info().unwrap();
    // 3x3 tiles of 64 px + 4 px padding, 20 px of text under each.
    assert_eq!(info.info().width, 3 * 68 + 4);
    assert_eq!(info.info().height, 3 * (64 + 20 + 4) + 4);
}

/// The device benchmarks run on a GPU and say so, with exit code 2,
/// anywhere else.
fn needs_a_gpu(args: &[&str], ok_marker: &str) {
    let (code, out, err) = gpufeed(args);
    match gpufeed::cuda::devices() {
        Err(_) => {
            assert_eq!(code, 2, "{out}{err}");
            assert!(err.contains("device unavailable"), "{err}");
        }
        Ok(_) => {
            assert_eq!(code, 0, "{err}");
            assert!(out.contains(ok_marker), "{out}");
        }
    }
}

fn kernel_bench_needs_a_gpu_and_says_so() {
    needs_a_gpu(&["kernel-bench", "--batch", "8", "--iters", "2"], "GB/s");
}

/// On a GPU: one line per share with img/s and CPU time per image.
fn decode_bench_needs_a_gpu_and_says_so() {
    needs_a_gpu(
        &[
            "decode-bench",
            "--batch",
            "8",
            "--iters",
            "2",
            "--hardware-share",
            "0,1",
        ],
        "CPU-ms per image",
    );
}

fn bench_sweeps_settings_and_writes_json_and_csv() {
    let sample = common::sample_dir();
    let out = tempfile::tempdir().unwrap();
    let prefix = out.path().join("sweep");
    let (code, stdout, err) = gpufeed(&[
        "bench",
        sample.to_str().unwrap(),
        "--device",
        "cpu",
        "--epochs",
        "2",
        "--batch",
        "8",
        "--size",
        "32",
        "--sweep",
        "readers=1,2",
        "--sweep",
        "consumer-ms=0,5",
        "--json",
        "--out",
        prefix.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&stdout).unwrap();
    let configs: Vec<&str> = rows.iter().map(|r| r["config"].as_str().unwrap()).collect();
    assert_eq!(
        configs,
        [
            "readers=1 consumer-ms=0",
            "readers=1 consumer-ms=5",
            "readers=2 consumer-ms=0",
            "readers=2 consumer-ms=5"
        ]
    );
    for r in &rows {
        assert!(r["img_per_s"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["cpu_s_per_1000_images"].as_f64().is_some(), "{r}");
        assert!(r["limit"].as_str().unwrap().contains("busy"), "{r}");
    }
    let csv = std::fs::read_to_string(prefix.with_extension("csv")).unwrap();
    assert_eq!(csv.lines().count(), 5, "{csv}");
    assert!(csv.starts_with("config,device,img_per_s"));
    let json: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(prefix.with_extension("json")).unwrap())
            .unwrap();
    assert_eq!(json.len(), 4);

    let (code, _, err) = gpufeed(&["bench", "--sweep", "colour=red"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown --sweep key"), "{err}");
}

/// Issue 15: `scan` takes a file, several files, a folder or a mix, and an
/// OS error names its path once.
fn scan_takes_a_file_several_files_and_folders() {
    let sample = common::sample_dir();
    let cat = sample.join("cat/cat-300572_1280.jpg");
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.jpeg");
    std::fs::write(&bad, b"GIF89a").unwrap();
    let s = |p: &std::path::Path| p.to_str().unwrap().to_string();

    let (code, out, err) = gpufeed(&["scan", &s(&cat)]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("1 files: 1 decoded, 0 typed errors"), "{out}");

    let (code, out, _) = gpufeed(&["scan", &s(&cat), &s(&bad)]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("2 files: 1 decoded, 1 typed errors"), "{out}");
    assert!(out.contains(&format!("BAD {}", bad.display())), "{out}");

    // A folder and a file inside another: 28 + 1.
    let (code, out, _) = gpufeed(&["scan", &s(&sample), &s(&bad)]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("29 files: 28 decoded, 1 typed errors"),
        "{out}"
    );

    // A file named as if it were a folder: the OS error, once, with the path.
    let missing = cat.join("nope.jpg");
    let (code, _, err) = gpufeed(&["scan", &s(&missing)]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&s(&missing)), "{err}");
    assert_eq!(err.matches("Not a directory").count(), 1, "{err}");
}
