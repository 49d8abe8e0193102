//! Opening shards in object storage (issue 18): their names (`*`
//! patterns listed from the bucket), their indexes (`SHARD.idx` beside
//! the shard, the cache, or a walk of the whole shard as it streams), the
//! source listed from them, and `gpufeed index`'s writing of indexes.

use std::io::{self, Read};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use super::{Failure, Store, open, redact_with, runtime, secrets};
use crate::error::{Error, Result, SampleError};
use crate::source::index::{Index, Listing};
use crate::source::walk::{BLOCK, heads};
use crate::source::webdataset::matching;
use crate::source::{LeftOut, Shards, Source, StoreOptions};

/// A response body read as a `Read`, for the tar walker: each chunk is
/// awaited on the runtime from the (plain) listing thread.
struct Body<'a> {
    rt: &'a tokio::runtime::Handle,
    stream: BoxStream<'static, object_store::Result<Bytes>>,
    chunk: Bytes,
    /// The stream failed (a reset, a timeout): the walk is worth another
    /// try, unlike one that read the whole object and found it damaged.
    failed: bool,
    /// Bytes delivered, and whether the stream ended: one that ended
    /// short of the object's size failed too.
    read: u64,
    ended: bool,
}

impl Read for Body<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.chunk.is_empty() {
            match self.rt.block_on(self.stream.next()) {
                None => {
                    self.ended = true;
                    return Ok(0);
                }
                Some(Ok(b)) => self.chunk = b,
                Some(Err(e)) => {
                    self.failed = true;
                    return Err(io::Error::other(e));
                }
            }
        }
        let n = buf.len().min(self.chunk.len());
        buf[..n].copy_from_slice(&self.chunk[..n]);
        self.chunk = self.chunk.slice(n..);
        self.read += n as u64;
        Ok(n)
    }
}

/// FNV-1a: a stable name for a cached index (not a security boundary:
/// a cached index is checked against the shard before use).
fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

impl Store {
    /// Shard `i`'s index: `SHARD.idx` beside it in the store, else the
    /// cache folder's copy, else a walk of the whole shard (then cached).
    /// Each is used only if it fits the shard's present size and, unless
    /// it is the cache's copy for the shard's present ETag, if the tar
    /// headers of its probes confirm it (`Index::probes`).
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
            .filter(|ix| ix.fits(meta.size) && self.confirmed(i, ix))
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
            .filter(|ix| ix.fits(meta.size) && (meta.e_tag.is_some() || self.confirmed(i, ix)))
        {
            return Ok(ix);
        }
        let ix = self.walk(i, meta.size)?;
        // A damaged shard's index is not kept: it would hide the damage.
        if let Some(file) = cached.filter(|_| ix.damage.is_none()) {
            // The cache is an optimisation: failing to write it costs the
            // next open a walk, nothing else.
            let _ = write_atomic(&file, ix.to_text().as_bytes());
        }
        Ok(ix)
    }

    /// Whether the tar header before each of `ix`'s probes is that
    /// member's: a ranged request of 512 bytes each, all at once. A
    /// request that fails leaves the index unconfirmed (the walk retries).
    fn confirmed(&self, i: usize, ix: &Index) -> bool {
        let probes = ix.probes();
        let retries = AtomicU64::new(0);
        let reads = probes.iter().map(|e| {
            let header = e.offset.saturating_sub(BLOCK)..e.offset;
            self.fetch(i as u32, header, &retries)
        });
        let got = self.block_on(futures_util::future::join_all(reads));
        probes
            .iter()
            .zip(got)
            .all(|(e, b)| b.is_ok_and(|b| heads(&b, e)))
    }

    /// Download shard `i` once, walking its tar headers as it streams. A
    /// download that fails is tried again; an object cut short or damaged
    /// is indexed up to the damage (`Walk::index`).
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
            let (walk, body) = crate::source::walk::walk_stream(Body {
                rt: self.rt.handle(),
                stream: body.into_stream(),
                chunk: Bytes::new(),
                failed: false,
                read: 0,
                ended: false,
            });
            let short = body.ended && body.read < size;
            if !body.failed && !short {
                return Ok(walk.index(size));
            }
            if tries > self.opts.retries {
                let e = walk.error.unwrap_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("the download ended at byte {} of {size}", body.read),
                    )
                });
                let msg = self.redact(format!("reading its tar headers: {e}"));
                return Err(SampleError::Read(io::Error::new(e.kind(), msg)));
            }
            std::thread::sleep(self.opts.backoff * tries);
        }
    }
}

fn write_atomic(file: &std::path::Path, bytes: &[u8]) -> io::Result<()> {
    std::fs::create_dir_all(file.parent().unwrap_or(std::path::Path::new(".")))?;
    crate::files::write_atomic(file, bytes)
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
        listing.add(ix, i as u32, &paths[i]);
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
        let text = ix.file_text(std::path::Path::new(url))?;
        let beside = ObjectPath::from(format!("{path}.idx"));
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
