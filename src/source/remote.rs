//! WebDataset shards in object storage (issue 18): `s3://`, `gs://`,
//! `az://`, `http(s)://` and `file://` URLs through the `object_store`
//! crate, which speaks each store's protocol; nothing here does HTTP.
//!
//! The store's client is async; gpufeed's readers are plain threads. A
//! small tokio runtime owned by the [`Store`] runs the requests, and the
//! reader threads (never inside a runtime) wait on them with `block_on`.
//! Each reader takes the tasks already queued behind its first (up to
//! [`StoreOptions::requests_per_reader`]), asks for all their byte ranges
//! at once, and `get_ranges` merges neighbours in a shard into one
//! request: sequential reads coalesce, shuffled reads run concurrently.
//!
//! Every request has a time limit and is retried with doubling backoff
//! ([`StoreOptions::retries`]); an answer shorter than asked is a failed
//! attempt. What still fails is the sample's [`SampleError`], named by
//! the pipeline as `SHARD/KEY.EXT`; a missing object is not retried.
//! Credentials come from the standard environment (`AWS_*`,
//! `GOOGLE_*`, `AZURE_*`) and are cut out of every error message.

use std::future::Future;
use std::io::{self, Read};
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, ObjectStoreScheme, PutPayload};

use super::index::{Index, Listing};
use super::webdataset::matching;
use super::{LeftOut, Shards, Source, StoreOptions};
use crate::error::{Error, Result, SampleError};

/// Shards in object storage, and the runtime their requests run on.
pub(crate) struct Store {
    rt: tokio::runtime::Runtime,
    /// Per shard: its store and its object.
    objects: Vec<(Arc<dyn ObjectStore>, ObjectPath)>,
    urls: Vec<String>,
    opts: StoreOptions,
    secrets: Vec<String>,
    /// Per shard, its size in bytes (from its index).
    sizes: Vec<u64>,
    /// Chunks of shards read in the streaming order.
    pub(crate) chunks: std::sync::OnceLock<super::chunks::Chunks>,
}

impl Store {
    /// Shard `shard`'s size in bytes.
    pub(crate) fn size(&self, shard: u32) -> u64 {
        self.sizes.get(shard as usize).copied().unwrap_or(0)
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("shards", &self.urls.len())
            .finish_non_exhaustive()
    }
}

/// Values that must never appear in an error: the secrets of the
/// environment and of the options.
fn secrets(opts: &StoreOptions) -> Vec<String> {
    let secret = |k: &str| {
        let k = k.to_ascii_uppercase();
        [
            "SECRET",
            "TOKEN",
            "PASSWORD",
            "ACCOUNT_KEY",
            "SAS",
            "SERVICE_ACCOUNT_KEY",
        ]
        .iter()
        .any(|s| k.contains(s))
    };
    let env = std::env::vars().filter(|(k, _)| secret(k));
    let given = opts.config.iter().filter(|(k, _)| secret(k)).cloned();
    env.chain(given)
        .map(|(_, v)| v)
        .filter(|v| v.len() >= 4)
        .collect()
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("gpufeed-store")
        .enable_all()
        .build()
        .map_err(|e| Error::Worker(format!("cannot start the object store's runtime: {e}")))
}

/// Settings every store gets: our own retries replace the client's, so
/// there is one policy and one count; the time limit covers the body.
fn base_config(opts: &StoreOptions) -> Vec<(String, String)> {
    let t = opts.timeout.as_millis();
    let mut c = vec![
        ("timeout".to_string(), format!("{t}ms")),
        (
            "connect_timeout".to_string(),
            format!("{}ms", t.min(10_000)),
        ),
    ];
    c.extend(opts.config.iter().cloned());
    c
}

macro_rules! build_store {
    ($builder:expr, $config:expr, $what:expr) => {{
        let mut b = $builder.with_retry(object_store::RetryConfig {
            max_retries: 0,
            ..Default::default()
        });
        for (k, v) in $config {
            let key = k.to_ascii_lowercase().parse().map_err(|_| {
                Error::Config(format!("unknown object store setting `{k}` for {}", $what))
            })?;
            b = b.with_config(key, v.clone());
        }
        Arc::new(
            b.build()
                .map_err(|e| Error::Config(format!("{}: {e}", $what)))?,
        ) as Arc<dyn ObjectStore>
    }};
}

/// A store for `url`'s bucket (or host), configured from the environment
/// and `opts`, and the object's path in it.
fn open(url: &url::Url, opts: &StoreOptions) -> Result<(Arc<dyn ObjectStore>, ObjectPath)> {
    let bad = |m: String| Error::Config(format!("{url}: {m}"));
    let (scheme, path) = ObjectStoreScheme::parse(url).map_err(|e| bad(e.to_string()))?;
    let config = base_config(opts);
    let what = &url[..url::Position::BeforePath];
    let store = match scheme {
        ObjectStoreScheme::Local => {
            Arc::new(object_store::local::LocalFileSystem::new()) as Arc<dyn ObjectStore>
        }
        ObjectStoreScheme::AmazonS3 => build_store!(
            object_store::aws::AmazonS3Builder::from_env().with_url(url.as_str()),
            &config,
            what
        ),
        ObjectStoreScheme::GoogleCloudStorage => build_store!(
            object_store::gcp::GoogleCloudStorageBuilder::from_env().with_url(url.as_str()),
            &config,
            what
        ),
        ObjectStoreScheme::MicrosoftAzure => build_store!(
            object_store::azure::MicrosoftAzureBuilder::from_env().with_url(url.as_str()),
            &config,
            what
        ),
        ObjectStoreScheme::Http => {
            // A URL that says `http://` asks for plain HTTP.
            let mut config = config;
            if url.scheme() == "http" {
                config.insert(0, ("allow_http".into(), "true".into()));
            }
            build_store!(
                object_store::http::HttpBuilder::new().with_url(what),
                &config,
                what
            )
        }
        other => return Err(bad(format!("{other:?} is not a store gpufeed reads"))),
    };
    Ok((store, path))
}

/// Whether an error is worth another attempt: not for what a retry
/// cannot change (a missing object, refused credentials, a bad path).
fn transient(e: &object_store::Error) -> bool {
    use object_store::Error as E;
    !matches!(
        e,
        E::NotFound { .. }
            | E::PermissionDenied { .. }
            | E::Unauthenticated { .. }
            | E::InvalidPath { .. }
            | E::NotSupported { .. }
            | E::NotImplemented { .. }
    )
}

/// A failed attempt: the store's error, or an answer that is not what
/// was asked.
enum Failure {
    Store(object_store::Error),
    TimedOut,
    Short(String),
}

impl Store {
    fn redact(&self, msg: String) -> String {
        redact_with(&self.secrets, msg)
    }

    /// Run `f` on the store's runtime from a plain thread. A caller that
    /// is itself inside a tokio runtime (an async trainer calling
    /// [`Source::read`]) gets a helper thread, since a runtime cannot
    /// block inside another.
    pub(crate) fn block_on<F: Future + Send>(&self, f: F) -> F::Output
    where
        F::Output: Send,
    {
        if tokio::runtime::Handle::try_current().is_ok() {
            std::thread::scope(|s| s.spawn(|| self.rt.block_on(f)).join())
                .unwrap_or_else(|p| std::panic::resume_unwind(p))
        } else {
            self.rt.block_on(f)
        }
    }

    /// `attempt` until it succeeds, a failure is permanent, or the
    /// retries are spent; each attempt within the time limit.
    async fn retry<T, Fut>(
        &self,
        what: &str,
        retries: &AtomicU64,
        attempt: impl Fn() -> Fut,
    ) -> std::result::Result<T, SampleError>
    where
        Fut: Future<Output = std::result::Result<T, Failure>>,
    {
        let mut wait = self.opts.backoff;
        let mut tries = 0u32;
        loop {
            tries += 1;
            if tries > 1 {
                retries.fetch_add(1, Ordering::Relaxed);
            }
            let failure = match tokio::time::timeout(self.opts.timeout, attempt()).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(f)) => f,
                Err(_) => Failure::TimedOut,
            };
            let permanent = matches!(&failure, Failure::Store(e) if !transient(e));
            if permanent || tries > self.opts.retries {
                let (kind, text) = match failure {
                    Failure::Store(object_store::Error::NotFound { .. }) => {
                        (io::ErrorKind::NotFound, "not found".to_string())
                    }
                    Failure::Store(e) => (io::ErrorKind::Other, e.to_string()),
                    Failure::TimedOut => (
                        io::ErrorKind::TimedOut,
                        format!("no answer within {:?}", self.opts.timeout),
                    ),
                    Failure::Short(m) => (io::ErrorKind::UnexpectedEof, m),
                };
                let after = if permanent {
                    String::new()
                } else {
                    format!(" (after {tries} attempts)")
                };
                let msg = self.redact(format!("{what}: {text}{after}"));
                return Err(SampleError::Read(io::Error::new(kind, msg)));
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_secs(10));
        }
    }

    /// How many tasks one reader thread fetches together.
    pub(crate) fn per_reader(&self) -> usize {
        self.opts.requests_per_reader.max(1)
    }

    /// One byte range of a shard, retried as [`StoreOptions`] says; an
    /// answer of another length is a failed attempt.
    pub(crate) async fn fetch(
        &self,
        shard: u32,
        range: Range<u64>,
        retries: &AtomicU64,
    ) -> std::result::Result<Bytes, SampleError> {
        let (store, path) = &self.objects[shard as usize];
        let what = format!(
            "{} bytes {}..{}",
            self.urls[shard as usize], range.start, range.end
        );
        self.retry(&what, retries, || async {
            let got = store
                .get_range(path, range.clone())
                .await
                .map_err(Failure::Store)?;
            if got.len() as u64 != range.end - range.start {
                return Err(Failure::Short(format!(
                    "asked for {} bytes, got {}",
                    range.end - range.start,
                    got.len()
                )));
            }
            Ok(got)
        })
        .await
    }

    /// Fetch one byte range of a shard in the background (one attempt
    /// within the time limit, no retry: a reader that then needs it
    /// fetches it with retries), and hand the bytes, or `None`, to `done`.
    pub(crate) fn spawn_fetch(
        &self,
        shard: u32,
        range: Range<u64>,
        done: impl FnOnce(Option<Bytes>) + Send + 'static,
    ) {
        let (store, path) = self.objects[shard as usize].clone();
        let limit = self.opts.timeout;
        self.rt.spawn(async move {
            let want = range.end - range.start;
            let got = tokio::time::timeout(limit, store.get_range(&path, range)).await;
            done(match got {
                Ok(Ok(b)) if b.len() as u64 == want => Some(b),
                _ => None,
            });
        });
    }

    /// Fetch byte ranges of shards, `(shard, offset, len)` each: ranges of
    /// a shard closer than [`GAP`] are merged into one request (up to
    /// [`MERGED`] bytes), and all requests run concurrently. One result per
    /// range, in order.
    pub(crate) fn read_many(&self, reqs: &[(u32, u64, u64)]) -> Fetched {
        let merged = coalesce(reqs);
        let retries = AtomicU64::new(0);
        let fetches = merged
            .iter()
            .map(|m| self.fetch(m.shard, m.range.clone(), &retries));
        let answers = self.block_on(futures_util::future::join_all(fetches));
        let mut results: Vec<Option<std::result::Result<Bytes, SampleError>>> =
            (0..reqs.len()).map(|_| None).collect();
        for (m, answer) in merged.iter().zip(answers) {
            for &i in &m.parts {
                let (_, offset, len) = reqs[i];
                let start = (offset - m.range.start) as usize;
                results[i] = Some(match &answer {
                    Ok(b) => Ok(b.slice(start..start + len as usize)),
                    Err(e) => Err(copy_error(e)),
                });
            }
        }
        Fetched {
            results: results
                .into_iter()
                .map(|r| r.unwrap_or_else(|| Err(SampleError::Corrupt("no answer".into()))))
                .collect(),
            requests: merged.len() as u64,
            retries: retries.into_inner(),
        }
    }
}

/// What [`Store::read_many`] got: one result per range asked, and the
/// requests it took.
pub(crate) struct Fetched {
    pub(crate) results: Vec<std::result::Result<Bytes, SampleError>>,
    /// Requests sent, not counting retries.
    pub(crate) requests: u64,
    /// Further attempts after failures.
    pub(crate) retries: u64,
}

/// Ranges of one shard this close are fetched in one request: the bytes
/// between cost less than another request's latency (a few ms at a
/// store's ~100 MB/s per connection).
const GAP: u64 = 256 * 1024;

/// A merged request's largest size.
const MERGED: u64 = 64 * 1024 * 1024;

/// One request: a shard's byte range covering the asked ranges `parts`.
#[derive(Debug, PartialEq, Eq)]
struct Merged {
    shard: u32,
    range: Range<u64>,
    parts: Vec<usize>,
}

/// Group ranges into requests: by shard, in offset order, neighbours
/// within [`GAP`] merged while the request stays under [`MERGED`].
fn coalesce(reqs: &[(u32, u64, u64)]) -> Vec<Merged> {
    let mut order: Vec<usize> = (0..reqs.len()).collect();
    order.sort_by_key(|&i| (reqs[i].0, reqs[i].1));
    let mut out: Vec<Merged> = Vec::new();
    for i in order {
        let (shard, offset, len) = reqs[i];
        let end = offset + len;
        match out.last_mut() {
            Some(m)
                if m.shard == shard
                    && offset <= m.range.end + GAP
                    && end.max(m.range.end) - m.range.start <= MERGED =>
            {
                m.range.end = m.range.end.max(end);
                m.parts.push(i);
            }
            _ => out.push(Merged {
                shard,
                range: offset..end,
                parts: vec![i],
            }),
        }
    }
    out
}

/// One failure, given to every sample of a failed request.
fn copy_error(e: &SampleError) -> SampleError {
    match e {
        SampleError::Read(io) => SampleError::Read(io::Error::new(io.kind(), io.to_string())),
        other => SampleError::Corrupt(other.to_string()),
    }
}

/// A response body read as a `Read`, for the tar walker: each chunk is
/// awaited on the runtime from the (plain) listing thread.
struct Body<'a> {
    rt: &'a tokio::runtime::Handle,
    stream: BoxStream<'static, object_store::Result<Bytes>>,
    chunk: Bytes,
}

impl Read for Body<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.chunk.is_empty() {
            match self.rt.block_on(self.stream.next()) {
                None => return Ok(0),
                Some(Ok(b)) => self.chunk = b,
                Some(Err(e)) => return Err(io::Error::other(e)),
            }
        }
        let n = buf.len().min(self.chunk.len());
        buf[..n].copy_from_slice(&self.chunk[..n]);
        self.chunk = self.chunk.slice(n..);
        Ok(n)
    }
}

/// FNV-1a: a stable name for a cached index (not a security boundary:
/// a cached index is checked against the shard's size before use).
fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

impl Store {
    /// Shard `i`'s index: `SHARD.idx` beside it in the store, else the
    /// cache folder's copy, else a walk of the whole shard (then cached).
    /// Each is used only if it fits the shard's present size.
    fn index(&self, i: usize) -> std::result::Result<Index, SampleError> {
        let (store, path) = &self.objects[i];
        let url = &self.urls[i];
        let meta = self.block_on(self.retry("asking its size", &AtomicU64::new(0), || async {
            store.head(path).await.map_err(Failure::Store)
        }))?;
        let beside = ObjectPath::from(format!("{path}.idx"));
        let found = self.block_on(async {
            let r = store.get(&beside).await.ok()?;
            r.bytes().await.ok()
        });
        if let Some(ix) = found
            .and_then(|b| String::from_utf8(b.to_vec()).ok())
            .and_then(|t| Index::parse(&t))
            .filter(|ix| ix.fits(meta.size))
        {
            return Ok(ix);
        }
        let cached = self.opts.index_cache.as_ref().map(|dir| {
            let tag = meta.e_tag.as_deref().unwrap_or("");
            dir.join("wds-index").join(format!(
                "{:016x}.idx",
                fnv(&format!("{url}\n{}\n{tag}", meta.size))
            ))
        });
        if let Some(ix) = cached
            .as_ref()
            .and_then(|f| std::fs::read_to_string(f).ok())
            .and_then(|t| Index::parse(&t))
            .filter(|ix| ix.fits(meta.size))
        {
            return Ok(ix);
        }
        let ix = self.walk(i, meta.size)?;
        if let Some(file) = cached {
            // The cache is an optimisation: failing to write it costs the
            // next open a walk, nothing else.
            let _ = write_atomic(&file, ix.to_text().as_bytes());
        }
        Ok(ix)
    }

    /// Download shard `i` once, walking its tar headers as it streams.
    fn walk(&self, i: usize, size: u64) -> std::result::Result<Index, SampleError> {
        let (store, path) = &self.objects[i];
        let mut tries = 0;
        loop {
            tries += 1;
            let body = self.block_on(self.retry(
                "downloading it to index it",
                &AtomicU64::new(0),
                || async { store.get(path).await.map_err(Failure::Store) },
            ))?;
            let mut archive = tar::Archive::new(Body {
                rt: self.rt.handle(),
                stream: body.into_stream(),
                chunk: Bytes::new(),
            });
            let walked = archive.entries().and_then(super::index::scan);
            match walked {
                Ok(entries) => {
                    return Ok(Index {
                        shard_bytes: size,
                        entries,
                    });
                }
                Err(e) if tries > self.opts.retries => {
                    let msg = self.redact(format!("reading its tar headers: {e}"));
                    return Err(SampleError::Read(io::Error::new(e.kind(), msg)));
                }
                Err(_) => std::thread::sleep(self.opts.backoff * tries),
            }
        }
    }
}

fn write_atomic(file: &std::path::Path, bytes: &[u8]) -> io::Result<()> {
    let dir = file.parent().unwrap_or(std::path::Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = file.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, file)
}

/// A URL's objects: itself, or those its `*` pattern matches (listed
/// under the pattern's fixed prefix), in name order. (`?` begins a URL's
/// query, so it is no wildcard here.)
fn expand(url: &str, opts: &StoreOptions, rt: &tokio::runtime::Runtime) -> Result<Vec<String>> {
    if !url.contains('*') {
        return Ok(vec![url.to_string()]);
    }
    let parsed = parse_url(url)?;
    let (store, path) = open(&parsed, opts)?;
    let pattern = path.as_ref().to_string();
    let Some(base) = url.strip_suffix(pattern.as_str()) else {
        return Err(Error::Config(format!(
            "{url}: a pattern's special characters must be written plainly, not %-escaped"
        )));
    };
    let fixed = pattern[..pattern.find('*').unwrap_or(pattern.len())]
        .rsplit_once('/')
        .map_or("", |(dir, _)| dir)
        .to_string();
    let prefix = (!fixed.is_empty()).then(|| ObjectPath::from(fixed.as_str()));
    let listed: Vec<String> = rt
        .block_on(async {
            let mut names = Vec::new();
            let mut s = store.list(prefix.as_ref());
            while let Some(m) = s.next().await {
                names.push(m?.location.as_ref().to_string());
            }
            Ok::<_, object_store::Error>(names)
        })
        .map_err(|e| Error::Dataset {
            path: url.into(),
            msg: redact_with(&secrets(opts), format!("listing the store: {e}")),
        })?;
    matching(url, &pattern, listed, |n| format!("{base}{n}"))
}

fn redact_with(secrets: &[String], mut msg: String) -> String {
    for s in secrets {
        msg = msg.replace(s.as_str(), "***");
    }
    msg
}

fn parse_url(url: &str) -> Result<url::Url> {
    url::Url::parse(url).map_err(|e| Error::Config(format!("{url}: not a URL: {e}")))
}

/// Open shards in object storage (patterns already brace-expanded),
/// read or build their indexes, and list their samples.
pub(crate) fn list(urls: &[String], opts: &StoreOptions) -> Result<Source> {
    let rt = runtime()?;
    let mut names = Vec::new();
    for u in urls {
        names.extend(expand(u, opts, &rt)?);
    }
    let mut objects = Vec::with_capacity(names.len());
    let mut stores: Vec<(String, Arc<dyn ObjectStore>)> = Vec::new();
    for n in &names {
        let url = parse_url(n)?;
        let (store, path) = open(&url, opts)?;
        // One client per bucket or host: connections are pooled per client.
        let base = url[..url::Position::BeforePath].to_string();
        let store = match stores.iter().find(|(b, _)| *b == base) {
            Some((_, s)) => s.clone(),
            None => {
                stores.push((base, store.clone()));
                store
            }
        };
        objects.push((store, path));
    }
    let mut store = Store {
        rt,
        objects,
        urls: names.clone(),
        opts: opts.clone(),
        secrets: secrets(opts),
        sizes: Vec::new(),
        chunks: std::sync::OnceLock::new(),
    };
    let indexes = index_all(&store)?;
    store.sizes = indexes.iter().map(|ix| ix.shard_bytes).collect();
    let (mut samples, mut members, mut left_out) = (Vec::new(), Vec::new(), LeftOut::default());
    let paths: Vec<PathBuf> = names.iter().map(PathBuf::from).collect();
    let mut listing = Listing {
        samples: &mut samples,
        members: &mut members,
        left_out: &mut left_out,
    };
    for (i, ix) in indexes.iter().enumerate() {
        listing.add(&ix.entries, i as u32, &paths[i]);
    }
    if samples.is_empty() {
        return Err(Error::Dataset {
            path: paths[0].clone(),
            msg: format!("no samples with an image in {} shard(s)", paths.len()),
        });
    }
    Ok(Source {
        root: paths[0].clone(),
        samples,
        classes: Vec::new(),
        left_out,
        shards: Some(Arc::new(Shards {
            paths,
            members,
            store: Some(Arc::new(store)),
        })),
    })
}

/// Every shard's index, up to 32 shards at a time: opening a shard is two
/// requests of a store's latency (its size, its `.idx`), so 10,000
/// shards open in about 10,000 × 2 × 50 ms / 32 = 30 s; a shard without
/// an index is a walk of the whole shard. The first failure, by shard order, fails the
/// listing: a shard that cannot be listed is a typo or a missing
/// credential, which the user must hear about before training starts.
fn index_all(store: &Store) -> Result<Vec<Index>> {
    let n = store.urls.len();
    let next = AtomicUsize::new(0);
    type Found = Option<std::result::Result<Index, SampleError>>;
    let slots: Vec<std::sync::Mutex<Found>> = (0..n).map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..n.clamp(1, 32) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        return;
                    }
                    let r = store.index(i);
                    *slots[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
                }
            });
        }
    });
    slots
        .into_iter()
        .map(|s| s.into_inner().unwrap_or_else(|p| p.into_inner()))
        .zip(&store.urls)
        .map(|(r, url)| match r {
            Some(Ok(ix)) => Ok(ix),
            Some(Err(e)) => Err(Error::Dataset {
                path: url.into(),
                msg: e.to_string(),
            }),
            None => Err(Error::Worker(format!("{url}: not indexed"))),
        })
        .collect()
}

/// Write `SHARD.idx` beside each shard in its store (`gpufeed index`):
/// the number of members indexed per shard.
pub(crate) fn write_indexes(urls: &[String], opts: &StoreOptions) -> Result<Vec<(String, usize)>> {
    // No cached or stale index may stand in for a fresh walk.
    let opts = StoreOptions {
        index_cache: None,
        ..opts.clone()
    };
    let source_store = {
        let rt = runtime()?;
        let mut names = Vec::new();
        for u in urls {
            names.extend(expand(u, &opts, &rt)?);
        }
        let objects = names
            .iter()
            .map(|n| open(&parse_url(n)?, &opts))
            .collect::<Result<Vec<_>>>()?;
        Store {
            rt,
            objects,
            urls: names,
            opts: opts.clone(),
            secrets: secrets(&opts),
            sizes: Vec::new(),
            chunks: std::sync::OnceLock::new(),
        }
    };
    let s = &source_store;
    let mut out = Vec::new();
    for i in 0..s.urls.len() {
        let (store, path) = &s.objects[i];
        let url = &s.urls[i];
        let fail = |e: SampleError| Error::Dataset {
            path: url.into(),
            msg: e.to_string(),
        };
        let meta = s
            .block_on(s.retry("asking its size", &AtomicU64::new(0), || async {
                store.head(path).await.map_err(Failure::Store)
            }))
            .map_err(fail)?;
        let ix = s.walk(i, meta.size).map_err(fail)?;
        let beside = ObjectPath::from(format!("{path}.idx"));
        let text = ix.to_text();
        s.block_on(s.retry(
            "writing its index beside it",
            &AtomicU64::new(0),
            || async {
                store
                    .put(&beside, PutPayload::from(text.clone().into_bytes()))
                    .await
                    .map_err(Failure::Store)
            },
        ))
        .map_err(fail)?;
        out.push((url.clone(), ix.entries.len()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neighbours_merge_within_a_shard_only() {
        let reqs = [
            (0, 10_000, 100),
            (1, 0, 50),
            (0, 0, 5_000),
            (0, 10_100 + GAP + 1, 10),
            (0, 10_050, 10),
        ];
        let m = coalesce(&reqs);
        assert_eq!(
            m,
            [
                Merged {
                    shard: 0,
                    range: 0..10_100,
                    parts: vec![2, 0, 4]
                },
                Merged {
                    shard: 0,
                    range: 10_100 + GAP + 1..10_100 + GAP + 11,
                    parts: vec![3]
                },
                Merged {
                    shard: 1,
                    range: 0..50,
                    parts: vec![1]
                },
            ]
        );
        // A request never grows past MERGED.
        let big = [(0, 0, MERGED - 10), (0, MERGED, 100)];
        assert_eq!(coalesce(&big).len(), 2);
    }
}
