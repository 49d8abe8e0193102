//! WebDataset shards in object storage (issue 18): `s3://`, `gs://`,
//! `az://`, `http(s)://` and `file://` URLs through the `object_store`
//! crate, which speaks each store's protocol; nothing here does HTTP.
//!
//! The store's client is async; gpufeed's readers are plain threads. A
//! small tokio runtime owned by the [`Store`] runs the requests, and the
//! reader threads (never inside a runtime) wait on them with `block_on`.
//! Each reader takes the tasks already queued behind its first (up to
//! [`StoreOptions::requests_per_reader`]) and asks for all their byte
//! ranges at once, neighbours in a shard within [`GAP`] merged into one
//! request: sequential reads coalesce, shuffled reads run concurrently.
//! Opening shards (names, indexes, the listing) is `listing.rs`.
//!
//! Every request has a time limit and is retried with doubling backoff
//! ([`StoreOptions::retries`]); an answer shorter than asked is a failed
//! attempt. What still fails is the sample's [`SampleError`], named by
//! the pipeline as `SHARD/KEY.EXT`; a missing object is not retried.
//! Credentials come from the standard environment (`AWS_*`,
//! `GOOGLE_*`, `AZURE_*`) and are cut out of every error message.

use std::future::Future;
use std::io;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, ObjectStoreScheme};

use super::StoreOptions;
use crate::error::{Error, Result, SampleError};

pub(crate) mod chunks;
mod listing;

pub(crate) use listing::{list, write_indexes};

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
    pub(crate) chunks: std::sync::OnceLock<chunks::Chunks>,
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
    /// [`Source::read`](crate::Source::read)) gets a helper thread, since a runtime cannot
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

fn redact_with(secrets: &[String], mut msg: String) -> String {
    for s in secrets {
        msg = msg.replace(s.as_str(), "***");
    }
    msg
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
