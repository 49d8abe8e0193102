//! Where samples come from: a list of `(file, label)` built once, before the
//! first epoch.
//!
//! Listing never calls `stat` on a regular file: directory entries carry
//! their type (`d_type` on Linux), so a 1.3 M-file ImageNet tree is listed
//! with one `getdents` pass per folder. Only symbolic links are followed
//! with a `stat`, to learn what they point at.

mod filelist;
mod folder;
pub(crate) mod index;
#[cfg(feature = "object-store")]
mod remote;
pub(crate) mod walk;
mod webdataset;

pub(crate) use webdataset::Member;

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// File extensions listed by default (compared case-insensitively).
pub(crate) const JPEG_EXTENSIONS: &[&str] = &["jpg", "jpeg", "jpe", "jfif"];

/// One sample: a file and its class label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// Path of the file, as opened by the readers.
    pub path: PathBuf,
    /// Class index.
    pub label: u32,
}

/// A listed dataset: samples in a fixed order, and class names when known.
///
/// The order is the dataset's canonical order (sorted for ImageFolder, file
/// order for a list); the sampler permutes indices into it.
#[derive(Debug, Clone)]
pub struct Source {
    root: PathBuf,
    samples: Vec<Sample>,
    classes: Vec<String>,
    left_out: LeftOut,
    /// WebDataset shards (`None` for files).
    shards: Option<std::sync::Arc<Shards>>,
}

/// A WebDataset source's shards.
#[derive(Debug, Clone)]
pub(crate) struct Shards {
    /// Local paths or URLs.
    paths: Vec<PathBuf>,
    /// Per sample, where its image lies in `paths`.
    members: Vec<Member>,
    /// The client for shards in object storage (`None`: local files).
    #[cfg(feature = "object-store")]
    store: Option<std::sync::Arc<remote::Store>>,
}

/// How WebDataset shards in object storage are read
/// ([`Source::webdataset_with`]; needs the `object-store` feature).
/// Credentials and endpoints come from the standard environment
/// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`,
/// `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`; `GOOGLE_*`; `AZURE_*`) as the
/// `object_store` crate reads them, and never appear in errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreOptions {
    /// Further attempts after a request fails (a timeout, a 5xx answer, a
    /// reset connection, a body shorter than asked). A missing object is
    /// not retried. Default 5.
    pub retries: u32,
    /// Wait before the first retry, doubled for each next one (up to
    /// 10 s). Default 100 ms.
    pub backoff: std::time::Duration,
    /// Time limit of one request, its body included. Default 60 s.
    pub timeout: std::time::Duration,
    /// Samples one reader thread fetches together: their byte ranges go
    /// out at once, neighbours in a shard merged into one request. Reader
    /// threads times this bounds the requests in flight. Default 16.
    pub requests_per_reader: usize,
    /// Where shard indexes built on first open are cached (a shard with
    /// a `SHARD.idx` beside it, from `gpufeed index` or `gpufeed pack`,
    /// needs none). Default `$GPUFEED_CACHE`, else
    /// `$XDG_CACHE_HOME/gpufeed`, else `~/.cache/gpufeed`; `None`: no
    /// cache, every open downloads each unindexed shard once.
    pub index_cache: Option<PathBuf>,
    /// Settings for the store's client beside the environment, as
    /// `object_store` names them (`aws_endpoint`, `aws_allow_http`,
    /// `timeout`, ...). Default none.
    pub config: Vec<(String, String)>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        let cache = {
            let env = |k| {
                std::env::var_os(k)
                    .filter(|v| !v.is_empty())
                    .map(PathBuf::from)
            };
            env("GPUFEED_CACHE")
                .or_else(|| env("XDG_CACHE_HOME").map(|p| p.join("gpufeed")))
                .or_else(|| env("HOME").map(|p| p.join(".cache/gpufeed")))
        };
        StoreOptions {
            retries: 5,
            backoff: std::time::Duration::from_millis(100),
            timeout: std::time::Duration::from_secs(60),
            requests_per_reader: 16,
            index_cache: cache,
            config: Vec::new(),
        }
    }
}

/// Write `SHARD.idx` beside each shard (local paths, brace or `*`
/// patterns, or URLs with the `object-store` feature): the index that
/// lets a shard in object storage be opened without downloading it
/// (`gpufeed index`). Returns each shard and its member count.
pub fn index_shards<S: AsRef<str>>(
    shards: impl IntoIterator<Item = S>,
    opts: &StoreOptions,
) -> Result<Vec<(String, usize)>> {
    let names = webdataset::expand_all(shards)?;
    if names.iter().any(|n| webdataset::is_url(n)) {
        #[cfg(feature = "object-store")]
        return remote::write_indexes(&names, opts);
        #[cfg(not(feature = "object-store"))]
        return Err(webdataset::needs_feature(&names));
    }
    let _ = opts;
    names
        .iter()
        .map(|n| {
            let path = Path::new(n);
            let io = |source| Error::Io {
                path: path.to_path_buf(),
                source,
            };
            let ix = walk::scan_file(path).map_err(io)?;
            let text = ix.file_text(path)?;
            crate::files::write_atomic(&index::beside(path), text.as_bytes()).map_err(io)?;
            Ok((n.clone(), ix.entries.len()))
        })
        .collect()
}

/// Files a listing found and did not take, and why: counts by extension,
/// files at an ImageFolder's root (outside any class folder), and the
/// first few paths; and WebDataset shards cut short or damaged, whose
/// members after the damage are lost. A dataset with PNGs among its JPEGs
/// loses them here, so `gpufeed bench` and `scan` print it as a warning
/// (issue 15).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeftOut {
    /// Files without a listed extension, by lowercase extension (`""` for
    /// none).
    pub by_extension: std::collections::BTreeMap<String, usize>,
    /// Files directly under an ImageFolder's root, which have no class.
    pub at_root: usize,
    /// The first [`LeftOut::EXAMPLES`] paths left out.
    pub examples: Vec<PathBuf>,
    /// WebDataset shards whose tar archive ends early (cut short by a
    /// crash or a full disk while written or copied) or has a damaged
    /// header, and where: their samples before that point are listed, a
    /// sample with a member cut through fails when read, and the members
    /// after it are unknown.
    pub damaged_shards: Vec<(PathBuf, String)>,
}

impl LeftOut {
    /// How many paths [`LeftOut::examples`] keeps.
    pub const EXAMPLES: usize = 10;

    /// Files left out in all.
    pub fn total(&self) -> usize {
        self.by_extension.values().sum::<usize>() + self.at_root
    }

    /// Whether the listing took everything: no file left out, no shard
    /// damaged.
    pub fn is_empty(&self) -> bool {
        self.total() == 0 && self.damaged_shards.is_empty()
    }

    fn note(&mut self, path: &Path) {
        if self.examples.len() < Self::EXAMPLES {
            self.examples.push(path.to_path_buf());
        }
    }

    pub(crate) fn extension(&mut self, path: &Path) {
        let ext = path
            .extension()
            .map_or(String::new(), |e| e.to_string_lossy().to_lowercase());
        *self.by_extension.entry(ext).or_default() += 1;
        self.note(path);
    }

    pub(crate) fn root(&mut self, path: &Path) {
        self.at_root += 1;
        self.note(path);
    }

    pub(crate) fn damaged(&mut self, shard: &Path, why: &str) {
        self.damaged_shards
            .push((shard.to_path_buf(), why.to_string()));
    }
}

impl std::fmt::Display for LeftOut {
    /// `3 files left out: 2 .png (not a JPEG extension), 1 at the root (no
    /// class folder); e.g. a/x.png, ...`, then each damaged shard:
    /// `; s/shard-000003.tar: cut short: ...`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts: Vec<String> = self
            .by_extension
            .iter()
            .map(|(e, n)| match e.as_str() {
                "" => format!("{n} without an extension"),
                e => format!("{n} .{e}"),
            })
            .collect();
        if !parts.is_empty() {
            let last = parts.len() - 1;
            parts[last] += " (not a JPEG extension)";
        }
        if self.at_root > 0 {
            parts.push(format!("{} at the root (no class folder)", self.at_root));
        }
        let examples: Vec<String> = self
            .examples
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        let n = self.total();
        let mut out = Vec::new();
        if n > 0 {
            out.push(format!(
                "{n} file{} left out: {}; e.g. {}",
                if n == 1 { "" } else { "s" },
                parts.join(", "),
                examples.join(", ")
            ));
        }
        for (shard, why) in self.damaged_shards.iter().take(Self::EXAMPLES) {
            out.push(format!("{}: {why}", shard.display()));
        }
        let more = self.damaged_shards.len().saturating_sub(Self::EXAMPLES);
        if more > 0 {
            out.push(format!("{more} more damaged shards"));
        }
        write!(f, "{}", out.join("; "))
    }
}

impl Source {
    /// A torchvision-style ImageFolder: each sub-folder of `root` is a class,
    /// labelled `0..n` in sorted name order; its files (recursively) with a
    /// JPEG extension are the samples, sorted by path.
    pub fn image_folder(root: impl AsRef<Path>) -> Result<Source> {
        folder::list(root.as_ref(), JPEG_EXTENSIONS)
    }

    /// Like [`Source::image_folder`], listing files whose extension is one
    /// of `extensions` (without the dot, compared case-insensitively).
    pub fn image_folder_with_extensions(
        root: impl AsRef<Path>,
        extensions: &[&str],
    ) -> Result<Source> {
        folder::list(root.as_ref(), extensions)
    }

    /// Every file under `root` (recursively, sorted by path) with a JPEG
    /// extension, all with label 0: for unlabelled data (self-supervised or
    /// generative training) and for checking a folder with `gpufeed scan`.
    pub fn recursive(root: impl AsRef<Path>) -> Result<Source> {
        folder::list_flat(root.as_ref(), JPEG_EXTENSIONS)
    }

    /// A text file with one sample per line: `path<TAB>label`,
    /// `path,label` or `path label` (Caffe/ImageNet `train.txt`). Paths are
    /// relative to the list file's folder, and an entry that leaves it
    /// (absolute, or through `..`) is refused: a list from elsewhere must
    /// not read arbitrary files; [`Source::file_list_anywhere`] allows it.
    /// Empty lines, lines starting with `#` and a header line are ignored.
    pub fn file_list(list: impl AsRef<Path>) -> Result<Source> {
        filelist::read(list.as_ref(), false)
    }

    /// Like [`Source::file_list`], accepting absolute paths and paths
    /// outside the list's folder.
    pub fn file_list_anywhere(list: impl AsRef<Path>) -> Result<Source> {
        filelist::read(list.as_ref(), true)
    }

    /// Samples given directly (no class names).
    pub fn from_samples(root: impl Into<PathBuf>, samples: Vec<Sample>) -> Result<Source> {
        let root = root.into();
        if samples.is_empty() {
            return Err(Error::Dataset {
                path: root,
                msg: "no samples".into(),
            });
        }
        Ok(Source {
            root,
            samples,
            classes: Vec::new(),
            left_out: LeftOut::default(),
            shards: None,
        })
    }

    /// WebDataset tar shards: local paths, patterns with one brace range
    /// (`data/shard-{000000..000127}.tar`) or `*` and `?` in the file
    /// name, and with the `object-store` feature URLs (`s3://`, `gs://`,
    /// `az://`, `http(s)://`, `file://`; `*` patterns too) read with
    /// [`StoreOptions::default`]. A sample is the members sharing a key:
    /// its `jpg`/`jpeg` (or `png`, `webp`) image and its `cls` label, in
    /// shard order, so shards written from a folder with `gpufeed pack`
    /// list the folder's samples in the folder's order (the same
    /// `(seed, epoch)` gives the same batches). Sample paths read
    /// `SHARD/KEY.EXT`. A key without an image is left out
    /// ([`Source::left_out`]); one without a label fails when read.
    ///
    /// Each shard's member offsets come from its index (`SHARD.idx`, see
    /// [`index_shards`]) when one fits it, else from its tar headers: a
    /// seek per member for a local file, one download of the shard for
    /// a remote one (then cached, [`StoreOptions::index_cache`]).
    pub fn webdataset<S: AsRef<str>>(shards: impl IntoIterator<Item = S>) -> Result<Source> {
        Source::webdataset_with(shards, &StoreOptions::default())
    }

    /// [`Source::webdataset`] with settings for shards in object storage.
    pub fn webdataset_with<S: AsRef<str>>(
        shards: impl IntoIterator<Item = S>,
        opts: &StoreOptions,
    ) -> Result<Source> {
        let names = webdataset::expand_all(shards)?;
        let remote = names.iter().filter(|n| webdataset::is_url(n)).count();
        if remote == 0 {
            let _ = opts;
            let paths: Vec<PathBuf> = names.into_iter().map(PathBuf::from).collect();
            return webdataset::list(&paths);
        }
        if remote < names.len() {
            return Err(Error::Config(
                "shards must be all local paths or all URLs, not a mix".into(),
            ));
        }
        #[cfg(feature = "object-store")]
        return remote::list(&names, opts);
        #[cfg(not(feature = "object-store"))]
        Err(webdataset::needs_feature(&names))
    }

    /// Read sample `index`'s bytes (a file, or a member of a shard) into
    /// `buf`, refusing more than `max_bytes`: what the pipeline's readers
    /// do with the default [`FileReader`](crate::reader::FileReader), or
    /// with the object store for remote shards.
    pub fn read(
        &self,
        index: usize,
        buf: &mut Vec<u8>,
        max_bytes: u64,
    ) -> std::result::Result<(), crate::error::SampleError> {
        self.read_with(None, index, buf, max_bytes)
    }

    /// [`Source::read`] into `buf`, with local bytes from `io`, or straight
    /// from the file system where `io` is `None` (the default
    /// [`FileReader`](crate::reader::FileReader)'s reads, into any sink:
    /// the readers' page-locked blocks).
    pub(crate) fn read_with<S: crate::reader::Sink + ?Sized>(
        &self,
        io: Option<&dyn crate::reader::ReadBytes>,
        index: usize,
        buf: &mut S,
        max_bytes: u64,
    ) -> std::result::Result<(), crate::error::SampleError> {
        use crate::error::SampleError;
        match self.member(index) {
            Some((
                _,
                Member {
                    problem: Some(p), ..
                },
            )) => Err(SampleError::Corrupt((*p).to_string())),
            Some((shard, m)) => {
                #[cfg(feature = "object-store")]
                if let Some(store) = self.store() {
                    if m.len > max_bytes {
                        return Err(SampleError::FileTooLarge {
                            bytes: m.len,
                            limit: max_bytes,
                        });
                    }
                    let got = store.read_many(&[(m.shard, m.offset, m.len)]);
                    let bytes =
                        got.results.into_iter().next().ok_or_else(|| {
                            SampleError::Corrupt("the store gave no answer".into())
                        })??;
                    buf.with_len(bytes.len()).copy_from_slice(&bytes);
                    return Ok(());
                }
                match io {
                    Some(io) => io.read_range(shard, m.offset, m.len, buf.vec(), max_bytes),
                    None => crate::reader::read_range(shard, m.offset, m.len, buf, max_bytes),
                }
            }
            None => {
                let path = &self.samples[index].path;
                match io {
                    Some(io) => io.read(path, buf.vec(), max_bytes),
                    None => crate::reader::read_file(path, buf, max_bytes),
                }
            }
        }
    }

    /// Sample `index`'s shard and member, for a WebDataset source.
    pub(crate) fn member(&self, index: usize) -> Option<(&Path, &Member)> {
        let s = self.shards.as_deref()?;
        let m = s.members.get(index)?;
        Some((s.paths.get(m.shard as usize)?, m))
    }

    /// Samples per shard, in shard order, for a WebDataset source (a
    /// shard's samples follow each other).
    pub(crate) fn shard_sizes(&self) -> Option<Vec<u32>> {
        let s = self.shards.as_deref()?;
        let mut sizes = vec![0u32; s.paths.len()];
        for m in &s.members {
            sizes[m.shard as usize] += 1;
        }
        Some(sizes)
    }

    /// Mean bytes of a shard member's image (0 for files).
    #[cfg(feature = "object-store")]
    pub(crate) fn mean_member_bytes(&self) -> u64 {
        let Some(s) = self.shards.as_deref() else {
            return 0;
        };
        let total: u64 = s.members.iter().map(|m| m.len).sum();
        total / s.members.len().max(1) as u64
    }

    /// Chunks to keep when streaming shards from object storage with a
    /// shuffle buffer of `buffer` samples and `readers` reader threads.
    #[cfg(feature = "object-store")]
    pub(crate) fn stream_chunks(&self, buffer: usize, readers: usize) -> usize {
        remote::chunks::capacity(buffer, self.mean_member_bytes(), readers)
    }

    /// The object store client, for shards in object storage.
    #[cfg(feature = "object-store")]
    pub(crate) fn store(&self) -> Option<&remote::Store> {
        self.shards.as_deref()?.store.as_deref()
    }

    /// The same samples with labels from `f`, given each sample (its path
    /// and current label): a label table keyed by file name, a class
    /// folder's name mapped otherwise, or WebDataset keys mapped to
    /// labels where the shards carry no `cls` members. For shards, a
    /// missing or malformed `cls` member then no longer fails its sample.
    pub fn with_labels(mut self, mut f: impl FnMut(&Sample) -> u32) -> Source {
        for s in &mut self.samples {
            s.label = f(s);
        }
        if let Some(shards) = self.shards.as_mut() {
            for m in &mut std::sync::Arc::make_mut(shards).members {
                if m.problem.is_some_and(index::is_label_problem) {
                    m.problem = None;
                }
            }
        }
        self
    }

    /// Files the listing found and did not take (other extensions, files
    /// at an ImageFolder's root); empty for lists and given samples.
    pub fn left_out(&self) -> &LeftOut {
        &self.left_out
    }

    /// The folder or list file the samples were listed from.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The samples in canonical order.
    pub fn samples(&self) -> &[Sample] {
        &self.samples
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Always false: an empty dataset is refused when listed.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// Class names indexed by label (empty for a file list or
    /// [`Source::from_samples`]).
    pub fn classes(&self) -> &[String] {
        &self.classes
    }
}

fn has_extension(name: &std::ffi::OsStr, extensions: &[&str]) -> bool {
    let name = name.as_encoded_bytes();
    let Some(dot) = name.iter().rposition(|&b| b == b'.') else {
        return false;
    };
    let ext = &name[dot + 1..];
    extensions
        .iter()
        .any(|e| e.as_bytes().eq_ignore_ascii_case(ext))
}
