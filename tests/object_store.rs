//! WebDataset shards in object storage (issue 18) against a real
//! S3-compatible server, `s3s-fs` (installed by `.ci/run`), started by
//! each test on 127.0.0.1; faults come from a TCP proxy between the
//! client and the server that delays, drops, truncates and stalls
//! answers. Not a mock of the client: requests go through `object_store`
//! and HTTP as they would to S3.
//!
//! Without `s3s-fs` on the PATH (or in `~/.cargo/bin`) the tests are not
//! run; `GPUFEED_REQUIRE_S3=1` (CI) makes that a failure. The tests run
//! one at a time: one of them counts the process's threads.

mod common;
#[path = "common/proc.rs"]
mod proc_;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::shards::{builder, same_batches};
use common::{NotRun, Outcome};
use gpufeed::source::StoreOptions;
use gpufeed::{Error, Pipeline, Source, sampler::ShardMode};
use object_store::ObjectStoreExt;

common::serial_tests!(
    sample_set_through_s3_gives_the_folder_s_batches,
    imagenet_size_through_s3_without_an_index,
    ranks_over_s3_split_like_the_folder,
    faults_through_a_proxy_deliver_or_name_every_sample,
    a_server_stopped_mid_epoch_ends_the_epoch,
    a_vanished_shard_costs_its_samples_only,
    a_shard_cut_short_in_the_store_keeps_the_samples_before_the_cut,
    a_damaged_header_in_the_store_loses_only_its_sample,
    an_index_beside_a_shard_packed_again_is_not_trusted,
    credentials_never_appear_in_errors,
    pack_bench_and_scan_take_s3_urls,
    streaming_from_s3_reads_whole_chunks,
);

const BUCKET: &str = "gpufeed-test";
const ACCESS: &str = "gpufeed-access";
const SECRET: &str = "gpufeed-secret-Zq81x";

/// An `s3s-fs` server on a free port of 127.0.0.1, serving a temporary
/// folder with one bucket; killed on drop.
struct Server {
    child: Child,
    port: u16,
    _root: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn s3s_fs() -> Result<PathBuf, NotRun> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("s3s-fs"))
            .find(|p| p.is_file())
    });
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    on_path
        .or_else(|| {
            cargo_home
                .map(|c| c.join("bin/s3s-fs"))
                .filter(|p| p.is_file())
        })
        .ok_or_else(|| {
            common::not_run(
                "GPUFEED_REQUIRE_S3",
                "s3s-fs not found: cargo install s3s-fs@0.14.1 --locked --features binary",
            )
        })
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait_for_port(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "nothing listens on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Server {
    fn start() -> Result<Server, NotRun> {
        let exe = s3s_fs()?;
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join(BUCKET)).unwrap();
        let port = free_port();
        let child = Command::new(exe)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--access-key", ACCESS, "--secret-key", SECRET])
            .arg(root.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_for_port(port);
        Ok(Server {
            child,
            port,
            _root: root,
        })
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// A client of the bucket, for uploads and deletes.
    fn client(&self) -> object_store::aws::AmazonS3 {
        object_store::aws::AmazonS3Builder::new()
            .with_bucket_name(BUCKET)
            .with_endpoint(self.endpoint())
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_access_key_id(ACCESS)
            .with_secret_access_key(SECRET)
            .build()
            .unwrap()
    }

    /// Upload `files` under `prefix/` with PutObject.
    fn upload(&self, prefix: &str, files: &[PathBuf]) {
        let client = self.client();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        for f in files {
            let name = f.file_name().unwrap().to_string_lossy();
            let path = object_store::path::Path::from(format!("{prefix}/{name}"));
            let bytes = std::fs::read(f).unwrap();
            rt.block_on(client.put(&path, bytes.into())).unwrap();
        }
    }

    fn delete(&self, key: &str) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(self.client().delete(&key.into())).unwrap();
    }
}

/// Reading options for an endpoint: the credentials given as settings (the
/// tests share one process, so not through its environment).
fn options(endpoint: &str) -> StoreOptions {
    let set = |k: &str, v: &str| (k.to_string(), v.to_string());
    StoreOptions {
        index_cache: None,
        config: vec![
            set("aws_endpoint", endpoint),
            set("aws_allow_http", "true"),
            set("aws_region", "us-east-1"),
            set("aws_access_key_id", ACCESS),
            set("aws_secret_access_key", SECRET),
        ],
        ..StoreOptions::default()
    }
}

/// `gpufeed pack DATA -o OUT --shard-size SIZE`: the shards and their
/// indexes.
fn pack(data: &Path, out: &Path, shard_size: &str) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let status = Command::new(env!("CARGO_BIN_EXE_gpufeed"))
        .arg("pack")
        .arg(data)
        .arg("-o")
        .arg(out)
        .args(["--shard-size", shard_size])
        .stdout(Stdio::null())
        // Its one warning: data/sample's README, left out.
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let mut files: Vec<PathBuf> = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let (tars, idx) = files
        .into_iter()
        .partition(|p| p.extension().is_some_and(|e| e == "tar"));
    (tars, idx)
}

/// Each delivered sample's augmented pixels, by sample index.
type Pixels = BTreeMap<u32, Vec<u8>>;

/// Per sample index, its augmented pixels in `epoch`, and the errors
/// (skipped samples) by path.
fn run_epoch(p: &mut Pipeline, epoch: u64) -> (Pixels, Vec<(PathBuf, String)>) {
    let (mut pixels, mut failed) = (BTreeMap::new(), Vec::new());
    for b in p.epoch(epoch) {
        let b = b.unwrap();
        let bytes = b.images().as_bytes().expect("CPU backend: host pixels");
        let per = bytes.len() / b.indices().len().max(1);
        for (i, &ix) in b.indices().iter().enumerate() {
            let old = pixels.insert(ix, bytes[i * per..(i + 1) * per].to_vec());
            assert!(old.is_none(), "sample {ix} delivered twice");
        }
        for e in b.skipped() {
            match e {
                Error::Sample { path, source } => failed.push((path.clone(), source.to_string())),
                other => panic!("not a sample's error: {other}"),
            }
        }
    }
    (pixels, failed)
}

/// The sample set packed into shards of ~300 kB (several per class) and
/// uploaded with their indexes.
fn sample_shards(server: &Server) -> (tempfile::TempDir, usize) {
    let dir = tempfile::tempdir().unwrap();
    let (tars, idx) = pack(&common::sample_dir(), dir.path(), "300kB");
    assert!(
        tars.len() >= 3 && idx.len() == tars.len(),
        "{tars:?} {idx:?}"
    );
    server.upload("sample", &tars);
    server.upload("sample", &idx);
    (dir, tars.len())
}

fn sample_set_through_s3_gives_the_folder_s_batches() -> Outcome {
    let server = Server::start()?;
    let (_dir, n) = sample_shards(&server);
    let pattern = format!("s3://{BUCKET}/sample/shard-{{000000..{:06}}}.tar", n - 1);
    let wds = Source::webdataset_with([&pattern], &options(&server.endpoint())).unwrap();
    assert!(
        wds.samples()[0]
            .path
            .starts_with(format!("s3://{BUCKET}/sample/shard-000000.tar")),
        "{:?}",
        wds.samples()[0].path
    );
    let stats = same_batches(Source::image_folder(common::sample_dir()).unwrap(), wds);
    assert!(stats.requests > 0 && stats.retries == 0, "{stats:?}");
    Ok(())
}

/// No `.idx` uploaded: the first open downloads each shard once and walks
/// its headers, and keeps the index in the cache; a `*` pattern is listed
/// from the bucket.
fn imagenet_size_through_s3_without_an_index() -> Outcome {
    let corpus = common::corpus()?;
    let server = Server::start()?;
    let photos = corpus.join("photos/imagenet-size");
    let dir = tempfile::tempdir().unwrap();
    let (tars, _) = pack(&photos, dir.path(), "4MB");
    assert!(tars.len() >= 3, "{tars:?}");
    server.upload("inet", &tars);
    let cache = tempfile::tempdir().unwrap();
    let opts = StoreOptions {
        index_cache: Some(cache.path().to_path_buf()),
        ..options(&server.endpoint())
    };
    let url = format!("s3://{BUCKET}/inet/shard-*.tar");
    let wds = Source::webdataset_with([&url], &opts).unwrap();
    let cached = std::fs::read_dir(cache.path().join("wds-index"))
        .unwrap()
        .count();
    assert_eq!(cached, tars.len(), "one cached index per shard");
    // The second open reads the cached indexes: the same listing.
    let again = Source::webdataset_with([&url], &opts).unwrap();
    assert_eq!(again.samples(), wds.samples());
    same_batches(Source::recursive(&photos).unwrap(), wds);
    Ok(())
}

/// 26 samples (the sample set less two) over 4 ranks: Uneven gives each
/// sample once, Pad repeats 2 so every rank has 7, like
/// DistributedSampler; the same per rank as the folder.
fn ranks_over_s3_split_like_the_folder() -> Outcome {
    let server = Server::start()?;
    let data = tempfile::tempdir().unwrap();
    let mut copied = 0;
    for class in std::fs::read_dir(common::sample_dir()).unwrap() {
        let class = class.unwrap().path();
        if !class.is_dir() {
            continue;
        }
        let to = data.path().join(class.file_name().unwrap());
        std::fs::create_dir(&to).unwrap();
        let mut files: Vec<PathBuf> = std::fs::read_dir(&class)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        // One file fewer in the first two classes.
        let keep = if copied < 2 {
            files.len() - 1
        } else {
            files.len()
        };
        for f in &files[..keep] {
            std::fs::copy(f, to.join(f.file_name().unwrap())).unwrap();
        }
        copied += 1;
    }
    let folder = Source::image_folder(data.path()).unwrap();
    assert_eq!(folder.len(), 26);
    let shards = tempfile::tempdir().unwrap();
    let (tars, idx) = pack(data.path(), shards.path(), "300kB");
    server.upload("ranks", &tars);
    server.upload("ranks", &idx);
    let url = format!("s3://{BUCKET}/ranks/shard-*.tar");
    let wds = Source::webdataset_with([&url], &options(&server.endpoint())).unwrap();
    for mode in [ShardMode::Uneven, ShardMode::Pad] {
        let mut seen = Vec::new();
        for rank in 0..4 {
            let ranked = |s: Source| builder(s).shard(rank, 4).shard_mode(mode).build().unwrap();
            let order = |mut p: Pipeline| -> Vec<u32> {
                p.epoch(3)
                    .flat_map(|x| x.unwrap().indices().to_vec())
                    .collect()
            };
            let (a, b) = (order(ranked(folder.clone())), order(ranked(wds.clone())));
            assert_eq!(a, b, "{mode:?} rank {rank}");
            seen.extend(b);
        }
        seen.sort();
        let all = seen.len();
        seen.dedup();
        assert_eq!(
            seen,
            (0..26).collect::<Vec<u32>>(),
            "{mode:?}: every sample"
        );
        match mode {
            ShardMode::Uneven => assert_eq!(all, 26, "exactly once"),
            _ => assert_eq!(all, 28, "padded like DistributedSampler"),
        }
    }
    Ok(())
}

/// What the proxy does to a connection.
#[derive(Debug, Clone, Copy)]
enum Fault {
    Clean,
    /// Answer after a wait shorter than the request time limit.
    Delay,
    /// Close at once, before any answer.
    Drop,
    /// Pass this many bytes of the answer, then close.
    Truncate(usize),
    /// Hold the connection past the time limit, answering nothing.
    Stall,
}

/// A TCP proxy to `upstream`; while `faulty` is set, connection `n`
/// suffers `plan(n)`.
struct Proxy {
    port: u16,
    faulty: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    connections: Arc<AtomicUsize>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn pipe(mut from: TcpStream, mut to: TcpStream, fault: Fault) {
    let mut buf = [0u8; 16 * 1024];
    let mut passed = 0usize;
    let mut first = true;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if first {
            first = false;
            if let Fault::Delay = fault {
                std::thread::sleep(Duration::from_millis(150));
            }
        }
        let n = match fault {
            Fault::Truncate(limit) => n.min(limit - passed),
            _ => n,
        };
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
        passed += n;
        if matches!(fault, Fault::Truncate(limit) if passed >= limit) {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}

impl Proxy {
    fn start(upstream: u16, plan: fn(usize) -> Fault) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let (faulty, stop) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let connections = Arc::new(AtomicUsize::new(0));
        let (f, s, c) = (faulty.clone(), stop.clone(), connections.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                let client = match listener.accept() {
                    Ok((c, _)) => c,
                    Err(_) => {
                        std::thread::sleep(Duration::from_millis(2));
                        continue;
                    }
                };
                client.set_nonblocking(false).unwrap();
                let n = c.fetch_add(1, Ordering::SeqCst);
                let fault = if f.load(Ordering::SeqCst) {
                    plan(n)
                } else {
                    Fault::Clean
                };
                std::thread::spawn(move || match fault {
                    Fault::Drop => drop(client),
                    Fault::Stall => {
                        std::thread::sleep(Duration::from_secs(3));
                        drop(client)
                    }
                    _ => {
                        let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                            return;
                        };
                        let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                        std::thread::spawn(move || pipe(c2, s2, Fault::Clean));
                        pipe(server, client, fault);
                    }
                });
            }
        });
        Proxy {
            port,
            faulty,
            stop,
            connections,
        }
    }
}

/// Every fault, through a proxy that opens a connection per request: each
/// epoch delivers every sample with the folder's pixels, or names it as
/// failed; none is lost or given twice.
fn faults_through_a_proxy_deliver_or_name_every_sample() -> Outcome {
    let server = Server::start()?;
    let (_dir, _) = sample_shards(&server);
    let proxy = Proxy::start(server.port, |n| match n % 6 {
        1 => Fault::Delay,
        2 => Fault::Drop,
        3 => Fault::Truncate(200 + (n * 997) % 3000),
        4 => Fault::Stall,
        _ => Fault::Clean,
    });
    let endpoint = format!("http://127.0.0.1:{}", proxy.port);
    let mut opts = options(&endpoint);
    opts.retries = 8;
    opts.backoff = Duration::from_millis(5);
    opts.timeout = Duration::from_secs(1);
    opts.requests_per_reader = 4;
    // A new connection per request, so that faults keep coming.
    opts.config
        .push(("pool_max_idle_per_host".into(), "0".into()));
    let url = format!("s3://{BUCKET}/sample/shard-*.tar");
    let wds = Source::webdataset_with([&url], &opts).unwrap();
    let folder = Source::image_folder(common::sample_dir()).unwrap();
    let mut reference = builder(folder).build().unwrap();
    let mut p = builder(wds.clone()).readers(3).build().unwrap();
    proxy.faulty.store(true, Ordering::SeqCst);
    let (mut delivered, mut failed) = (0, 0);
    for epoch in 0..3 {
        let (want, _) = run_epoch(&mut reference, epoch);
        let (got, errors) = run_epoch(&mut p, epoch);
        for (ix, px) in &got {
            assert!(want[ix] == *px, "epoch {epoch}: sample {ix}'s pixels");
        }
        for (path, why) in &errors {
            assert!(
                path.to_string_lossy()
                    .starts_with(&format!("s3://{BUCKET}/sample/shard-")),
                "{path:?}"
            );
            assert!(!why.contains(SECRET), "{why}");
        }
        assert_eq!(got.len() + errors.len(), 28, "epoch {epoch}: {errors:?}");
        delivered += got.len();
        failed += errors.len();
    }
    let stats = p.stats();
    println!(
        "faults: {delivered} delivered, {failed} named as failed over 3 epochs; {} requests, {} \
         retries, {} connections",
        stats.requests,
        stats.retries,
        proxy.connections.load(Ordering::SeqCst)
    );
    assert!(stats.retries > 0, "the proxy's faults were met: {stats:?}");
    assert!(delivered >= 3 * 28 * 3 / 4, "retries recover most faults");
    // The streaming order (whole chunks, fetched ahead) through the same
    // faults: every sample delivered with its pixels, or named.
    let mut streamed = builder(wds).stream_shards(8).build().unwrap();
    for epoch in 0..2 {
        let (want, _) = run_epoch(&mut reference, epoch);
        let (got, errors) = run_epoch(&mut streamed, epoch);
        for (ix, px) in &got {
            assert!(
                want[ix] == *px,
                "streamed epoch {epoch}: sample {ix}'s pixels"
            );
        }
        assert_eq!(
            got.len() + errors.len(),
            28,
            "streamed epoch {epoch}: {errors:?}"
        );
    }
    Ok(())
}

/// The server dies after the first batch: the epoch still ends, each
/// sample delivered or named as failed, and dropping the pipeline leaves
/// no thread behind.
fn a_server_stopped_mid_epoch_ends_the_epoch() -> Outcome {
    let mut server = Server::start()?;
    let (_dir, _) = sample_shards(&server);
    let mut opts = options(&server.endpoint());
    opts.retries = 2;
    opts.backoff = Duration::from_millis(5);
    opts.timeout = Duration::from_secs(2);
    opts.requests_per_reader = 1;
    let threads_before = proc_::threads();
    {
        let wds =
            Source::webdataset_with([format!("s3://{BUCKET}/sample/shard-*.tar")], &opts).unwrap();
        let mut p = builder(wds)
            .batch_size(4)
            .prefetch(1)
            .readers(1)
            .workers(1)
            .build()
            .unwrap();
        let mut epoch = p.epoch(0);
        let first = epoch.next().unwrap().unwrap();
        let _ = server.child.kill();
        let _ = server.child.wait();
        let (mut delivered, mut failed) = (first.len(), first.skipped().len());
        for b in epoch {
            let b = b.unwrap();
            delivered += b.len();
            failed += b.skipped().len();
            for e in b.skipped() {
                assert!(
                    e.to_string().contains(".tar/"),
                    "named by shard and key: {e}"
                );
            }
        }
        assert_eq!(delivered + failed, 28);
        assert!(failed > 0, "the server was gone for most of the epoch");
    }
    let threads_after = proc_::threads_settled(threads_before);
    assert!(
        threads_after <= threads_before,
        "threads {threads_before} -> {threads_after}"
    );
    Ok(())
}

fn a_vanished_shard_costs_its_samples_only() -> Outcome {
    let server = Server::start()?;
    let (_dir, _) = sample_shards(&server);
    let wds = Source::webdataset_with(
        [format!("s3://{BUCKET}/sample/shard-*.tar")],
        &options(&server.endpoint()),
    )
    .unwrap();
    let in_shard_1 = wds
        .samples()
        .iter()
        .filter(|s| s.path.to_string_lossy().contains("shard-000001.tar/"))
        .count();
    assert!(in_shard_1 > 0);
    let mut p = builder(wds).build().unwrap();
    server.delete("sample/shard-000001.tar");
    let (got, errors) = run_epoch(&mut p, 0);
    assert_eq!(errors.len(), in_shard_1, "{errors:?}");
    assert_eq!(got.len(), 28 - in_shard_1);
    for (path, why) in &errors {
        assert!(path.to_string_lossy().contains("shard-000001.tar/"));
        assert!(why.contains("not found"), "{why}");
    }
    Ok(())
}

/// A shard uploaded cut short (a copy killed mid-way), its old `.idx`
/// beside it: the stale index is passed over, the object walked once
/// (not retried: it is the object that ends, not the download), and its
/// samples before the cut listed; the sample cut through fails, named, and
/// the shard is named in `left_out`. Neither the index cache nor `gpufeed
/// index` keeps an index that would hide the cut.
fn a_shard_cut_short_in_the_store_keeps_the_samples_before_the_cut() -> Outcome {
    let server = Server::start()?;
    let (dir, _) = sample_shards(&server);
    let whole = std::fs::read(dir.path().join("shard-000001.tar")).unwrap();
    let cut = dir.path().join("cut/shard-000001.tar");
    std::fs::create_dir(cut.parent().unwrap()).unwrap();
    std::fs::write(&cut, &whole[..whole.len() * 2 / 3]).unwrap();
    server.upload("sample", &[cut]);
    let cache = tempfile::tempdir().unwrap();
    let opts = StoreOptions {
        index_cache: Some(cache.path().to_path_buf()),
        ..options(&server.endpoint())
    };
    let url = format!("s3://{BUCKET}/sample/shard-000001.tar");
    let wds =
        Source::webdataset_with([format!("s3://{BUCKET}/sample/shard-*.tar")], &opts).unwrap();
    let damaged = &wds.left_out().damaged_shards;
    assert_eq!(damaged.len(), 1, "{damaged:?}");
    assert_eq!(damaged[0].0, PathBuf::from(&url));
    assert!(damaged[0].1.contains("cut short"), "{damaged:?}");
    let in_cut = wds
        .samples()
        .iter()
        .filter(|s| s.path.starts_with(&url))
        .count();
    assert!(in_cut > 1, "the samples before the cut are listed");
    assert!(
        !cache.path().join("wds-index").exists(),
        "no index of the cut shard cached"
    );
    let mut p = builder(wds).build().unwrap();
    let (got, errors) = run_epoch(&mut p, 0);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].0.starts_with(&url) && errors[0].1.contains("cut short"));
    assert!(got.len() > 28 - 8 && got.len() < 28 - 1, "{}", got.len());
    let e = gpufeed::source::index_shards([&url], &opts).unwrap_err();
    assert!(e.to_string().contains("shard-000001.tar") && e.to_string().contains("cut short"));
    Ok(())
}

/// A header damaged in the middle of a shard in the store, with no index
/// beside it: the download is walked as a stream, which reads on to the
/// next valid header as a local shard's walk does. Only the sample whose
/// header it is goes; the others are read whole, with their labels.
fn a_damaged_header_in_the_store_loses_only_its_sample() -> Outcome {
    let server = Server::start()?;
    let (dir, _) = sample_shards(&server);
    let local = dir.path().join("shard-000001.tar");
    let whole = std::fs::read(&local).unwrap();
    let headers: Vec<u64> = tar::Archive::new(&whole[..])
        .entries()
        .unwrap()
        .map(|e| e.unwrap().raw_file_position() - 512)
        .collect();
    // A bit flipped in sample 1's image header, and the same header zeroed
    // (which reads as the tar's end).
    for (n, zeroed) in [(0, false), (1, true)] {
        let mut bytes = whole.clone();
        let at = headers[2] as usize;
        if zeroed {
            bytes[at..at + 512].fill(0);
        } else {
            bytes[at + 1] ^= 0x10;
        }
        let damaged = dir.path().join(format!("damaged{n}/shard-000001.tar"));
        std::fs::create_dir(damaged.parent().unwrap()).unwrap();
        std::fs::write(&damaged, &bytes).unwrap();
        server.upload(&format!("damaged{n}"), &[damaged]);
        let url = format!("s3://{BUCKET}/damaged{n}/shard-000001.tar");
        let wds = Source::webdataset_with([&url], &options(&server.endpoint())).unwrap();
        let why = &wds.left_out().damaged_shards[0].1;
        let (damage, next) = if zeroed {
            (
                format!("zero block at byte {at}, which ends a tar archive"),
                format!("header after it at byte {}", headers[3]),
            )
        } else {
            (
                format!("damaged tar header at byte {at}:"),
                format!("next header, at byte {}", headers[3]),
            )
        };
        assert!(why.contains(&damage) && why.contains(&next), "{why}");
        let whole = Source::webdataset([local.to_str().unwrap()]).unwrap();
        assert_eq!(wds.len(), whole.len() - 1);
        let (mut got, mut want) = (Vec::new(), Vec::new());
        for (i, s) in wds.samples().iter().enumerate() {
            let j = whole
                .samples()
                .iter()
                .position(|w| w.path.file_name() == s.path.file_name())
                .unwrap();
            assert_ne!(j, 1, "the damaged header's sample is not listed");
            wds.read(i, &mut got, u64::MAX).unwrap();
            whole.read(j, &mut want, u64::MAX).unwrap();
            assert_eq!((got.len(), s.label), (want.len(), whole.samples()[j].label));
            assert!(got == want, "{:?}", s.path);
        }
    }
    Ok(())
}

/// A shard uploaded again with its members in another order, beside its
/// old `SHARD.idx`: same size, so the index fitted, and each sample read
/// another member's bytes. The index's probes are checked against their
/// tar headers with ranged requests, and the shard is walked instead.
fn an_index_beside_a_shard_packed_again_is_not_trusted() -> Outcome {
    let server = Server::start()?;
    let (dir, _) = sample_shards(&server);
    let local = dir.path().join("shard-000001.tar");
    let mut members: Vec<(String, Vec<u8>)> =
        tar::Archive::new(std::fs::File::open(&local).unwrap())
            .entries()
            .unwrap()
            .map(|e| {
                let mut e = e.unwrap();
                let mut data = Vec::new();
                e.read_to_end(&mut data).unwrap();
                (e.path().unwrap().display().to_string(), data)
            })
            .collect();
    members.reverse();
    let again = dir.path().join("again/shard-000001.tar");
    std::fs::create_dir(again.parent().unwrap()).unwrap();
    let mut b = tar::Builder::new(Vec::new());
    for (name, data) in &members {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        b.append_data(&mut h, name, &data[..]).unwrap();
    }
    let bytes = b.into_inner().unwrap();
    assert_eq!(bytes.len() as u64, std::fs::metadata(&local).unwrap().len());
    std::fs::write(&again, &bytes).unwrap();
    server.upload("sample", &[again]);
    let url = format!("s3://{BUCKET}/sample/shard-000001.tar");
    let wds = Source::webdataset_with([&url], &options(&server.endpoint())).unwrap();
    let mut got = Vec::new();
    for (i, s) in wds.samples().iter().enumerate() {
        let key = s.path.file_name().unwrap().to_str().unwrap();
        let want = &members.iter().find(|m| m.0 == key).expect(key).1;
        wds.read(i, &mut got, u64::MAX).unwrap();
        assert!(got == *want, "{key}");
        let cls = key.replace(".jpg", ".cls");
        let label = &members.iter().find(|m| m.0 == cls).expect(key).1;
        assert_eq!(s.label.to_string().as_bytes(), &label[..], "{key}");
    }
    assert_eq!(wds.len() * 2, members.len());
    Ok(())
}

fn credentials_never_appear_in_errors() -> Outcome {
    let server = Server::start()?;
    let (_dir, _) = sample_shards(&server);
    let wrong = "wrong-secret-Kd02pQ";
    let mut opts = options(&server.endpoint());
    opts.config.retain(|(k, _)| k != "aws_secret_access_key");
    opts.config
        .push(("aws_secret_access_key".into(), wrong.into()));
    for url in [
        format!("s3://{BUCKET}/sample/shard-000000.tar"),
        format!("s3://{BUCKET}/sample/shard-*.tar"),
    ] {
        let e = Source::webdataset_with([&url], &opts).unwrap_err();
        let text = format!("{e} {e:?}");
        assert!(text.contains("403") || text.contains("Forbidden"), "{text}");
        assert!(!text.contains(wrong) && !text.contains(SECRET), "{text}");
    }
    Ok(())
}

/// The CLI with the standard AWS environment: `pack -o s3://` uploads
/// shards and indexes, `bench` reports requests, `scan` decodes every
/// member; the packed shards list the folder's samples and labels.
fn pack_bench_and_scan_take_s3_urls() -> Outcome {
    let server = Server::start()?;
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_gpufeed"))
            .args(args)
            .env("AWS_ENDPOINT_URL", server.endpoint())
            .env("AWS_ALLOW_HTTP", "true")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", ACCESS)
            .env("AWS_SECRET_ACCESS_KEY", SECRET)
            .env("GPUFEED_CACHE", server._root.path().join("cache"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {text}");
        assert!(!text.contains(SECRET), "{text}");
        text
    };
    let sample = common::sample_dir();
    let prefix = format!("s3://{BUCKET}/cli");
    let packed = run(&[
        "pack",
        sample.to_str().unwrap(),
        "-o",
        &prefix,
        "--shard-size",
        "500kB",
    ]);
    assert!(
        packed.contains(&format!("in {prefix}: {prefix}/shard-{{000000..")),
        "{packed}"
    );
    let url = format!("{prefix}/shard-*.tar");
    let wds = Source::webdataset_with([&url], &options(&server.endpoint())).unwrap();
    let folder = Source::image_folder(&sample).unwrap();
    let labels = |s: &Source| s.samples().iter().map(|x| x.label).collect::<Vec<_>>();
    assert_eq!(labels(&wds), labels(&folder));
    let bench = run(&[
        "bench", &url, "--epochs", "2", "--device", "cpu", "--batch", "8",
    ]);
    assert!(bench.contains("object storage:"), "{bench}");
    let scan = run(&["scan", &url]);
    assert!(scan.contains("28 files: 28 decoded"), "{scan}");
    Ok(())
}

/// `stream_shards` over shards in S3: every sample once with the folder
/// pipeline's pixels, from one request per shard (each shard fits one
/// 8 MiB chunk) instead of one per sample.
fn streaming_from_s3_reads_whole_chunks() -> Outcome {
    let server = Server::start()?;
    let (_dir, shards) = sample_shards(&server);
    let url = format!("s3://{BUCKET}/sample/shard-*.tar");
    let wds = Source::webdataset_with([&url], &options(&server.endpoint())).unwrap();
    let folder = Source::image_folder(common::sample_dir()).unwrap();
    let mut reference = builder(folder).build().unwrap();
    let mut p = builder(wds).stream_shards(8).build().unwrap();
    for epoch in 0..2 {
        let (want, _) = run_epoch(&mut reference, epoch);
        let (got, failed) = run_epoch(&mut p, epoch);
        assert!(failed.is_empty(), "{failed:?}");
        assert_eq!(got.len(), 28);
        for (ix, px) in &got {
            assert!(want[ix] == *px, "epoch {epoch}: sample {ix}");
        }
    }
    let stats = p.stats();
    assert!(
        stats.requests as usize <= 2 * shards,
        "one request per shard and epoch at most: {stats:?}"
    );
    Ok(())
}
