//! WebDataset tar shards (issue 18): names and patterns, and listing
//! shards on the local file system. Shards in object storage are listed
//! by `remote.rs` from the same index (`index.rs`).
//!
//! A sample is the group of consecutive members sharing a key (the member
//! path up to the first dot of its file name, WebDataset's convention):
//! the image is the `jpg`/`jpeg`/`png`/`webp` member, the label the `cls`
//! member (a decimal integer). Readers fetch each image with one
//! positioned read of its byte range. A sample without an image is left
//! out and counted in [`LeftOut`]; one without a label, or with two
//! images, fails when read, under the pipeline's `OnError`, named
//! `SHARD/KEY.EXT`.

use std::path::{Path, PathBuf};

use super::index::{self, Index, Listing};
use super::{LeftOut, Shards, Source};
use crate::error::{Error, Result};

/// Where a sample's image lies in its shard, or why it cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Member {
    /// Index into the source's shard list.
    pub(crate) shard: u32,
    /// Byte offset of the image's data in the shard.
    pub(crate) offset: u64,
    /// Bytes of image data.
    pub(crate) len: u64,
    /// A defect found at listing that fails the sample when it is read.
    pub(crate) problem: Option<&'static str>,
}

/// Whether a shard name is a URL (`s3://...`) rather than a local path.
pub(crate) fn is_url(s: &str) -> bool {
    s.split_once("://").is_some_and(|(scheme, _)| {
        !scheme.is_empty() && scheme.chars().all(|c| c.is_ascii_alphanumeric())
    })
}

/// The error for URLs in a build without object storage.
#[cfg(not(feature = "object-store"))]
pub(crate) fn needs_feature(names: &[String]) -> Error {
    let url = names
        .iter()
        .find(|n| is_url(n))
        .cloned()
        .unwrap_or_default();
    Error::Config(format!(
        "{url}: reading shards from object storage needs gpufeed built with the \
         `object-store` feature"
    ))
}

/// `shard-{000000..000003}.tar` → the four names; other text unchanged.
/// One range per pattern; the width of the first bound is kept.
pub(crate) fn expand_braces(pattern: &str) -> Vec<String> {
    let parsed = (|| {
        let open = pattern.find('{')?;
        let close = open + pattern[open..].find('}')?;
        let (a, b) = pattern[open + 1..close].split_once("..")?;
        let (lo, hi): (u64, u64) = (a.parse().ok()?, b.parse().ok()?);
        Some((open, close, a.len(), lo, hi))
    })();
    let Some((open, close, width, lo, hi)) = parsed else {
        return vec![pattern.to_string()];
    };
    (lo..=hi)
        .map(|i| format!("{}{i:0width$}{}", &pattern[..open], &pattern[close + 1..]))
        .collect()
}

/// `*` matches any run of characters but `/`, `?` one such character.
pub(crate) fn wildcard(pattern: &[u8], name: &[u8]) -> bool {
    match (pattern.first(), name.first()) {
        (None, None) => true,
        (Some(b'*'), _) => {
            wildcard(&pattern[1..], name)
                || (name.first().is_some_and(|&c| c != b'/') && wildcard(pattern, &name[1..]))
        }
        (Some(b'?'), Some(&c)) if c != b'/' => wildcard(&pattern[1..], &name[1..]),
        (Some(p), Some(c)) if p == c => wildcard(&pattern[1..], &name[1..]),
        _ => false,
    }
}

/// A local pattern with `*` or `?` in its file name: the matching files
/// of its folder, in name order.
fn glob_local(pattern: &str) -> Result<Vec<String>> {
    let path = Path::new(pattern);
    let (dir, name) = match (path.parent(), path.file_name()) {
        (Some(d), Some(n)) => (d, n.to_string_lossy().into_owned()),
        _ => (Path::new("."), pattern.to_string()),
    };
    if dir.to_string_lossy().contains(['*', '?']) {
        return Err(Error::Config(format!(
            "{pattern}: wildcards are taken in the file name only, not in folders"
        )));
    }
    let listed = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let entries = std::fs::read_dir(listed).map_err(|source| Error::Io {
        path: listed.to_path_buf(),
        source,
    })?;
    let files = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| !t.is_dir()))
        .map(|e| e.file_name().to_string_lossy().into_owned());
    matching(pattern, &name, files, |n| {
        dir.join(n).to_string_lossy().into_owned()
    })
}

/// The `names` that `glob` matches, each made whole by `whole`, sorted;
/// an error naming `pattern` when none does (a local folder's files, or
/// a bucket's objects).
pub(crate) fn matching(
    pattern: &str,
    glob: &str,
    names: impl IntoIterator<Item = String>,
    whole: impl Fn(&str) -> String,
) -> Result<Vec<String>> {
    let mut out: Vec<String> = names
        .into_iter()
        .filter(|n| wildcard(glob.as_bytes(), n.as_bytes()))
        .map(|n| whole(&n))
        .collect();
    out.sort();
    if out.is_empty() {
        return Err(Error::Dataset {
            path: pattern.into(),
            msg: "nothing matches this pattern".into(),
        });
    }
    Ok(out)
}

/// Shard names with brace ranges and local wildcards expanded (URL
/// wildcards are listed from the store by `remote.rs`).
pub(crate) fn expand_all<S: AsRef<str>>(
    shards: impl IntoIterator<Item = S>,
) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for name in shards.into_iter().flat_map(|s| expand_braces(s.as_ref())) {
        if !is_url(&name) && name.contains(['*', '?']) {
            out.extend(glob_local(&name)?);
        } else {
            out.push(name);
        }
    }
    if out.is_empty() {
        return Err(Error::Config("no shards given".into()));
    }
    Ok(out)
}

/// A local shard's index: `SHARD.idx` when it fits the shard and its
/// probes' headers confirm it (`Index::probes`), else its tar headers (a
/// seek per member).
fn local_index(shard: &Path) -> std::io::Result<Index> {
    let size = std::fs::metadata(shard)?.len();
    if let Some(ix) = std::fs::read_to_string(index::beside(shard))
        .ok()
        .and_then(|t| Index::parse(&t))
        .filter(|ix| ix.fits(size) && confirmed(shard, ix))
    {
        return Ok(ix);
    }
    super::walk::scan_file(shard)
}

/// Whether the tar header before each of `ix`'s probes is that member's
/// (three reads of 512 bytes). A read that fails leaves the index
/// unconfirmed: the walk then meets the failure and names it.
fn confirmed(shard: &Path, ix: &Index) -> bool {
    use std::os::unix::fs::FileExt;
    let Ok(file) = std::fs::File::open(shard) else {
        return false;
    };
    let mut block = [0u8; super::walk::BLOCK as usize];
    ix.probes().iter().all(|e| {
        e.offset >= super::walk::BLOCK
            && file
                .read_exact_at(&mut block, e.offset - super::walk::BLOCK)
                .is_ok()
            && super::walk::heads(&block, e)
    })
}

pub(super) fn list(shards: &[PathBuf]) -> Result<Source> {
    let mut samples = Vec::new();
    let mut members = Vec::new();
    let mut left_out = LeftOut::default();
    let mut listing = Listing {
        samples: &mut samples,
        members: &mut members,
        left_out: &mut left_out,
    };
    for (si, shard) in shards.iter().enumerate() {
        let ix = local_index(shard).map_err(|source| Error::Io {
            path: shard.clone(),
            source,
        })?;
        listing.add(&ix, si as u32, shard);
    }
    if samples.is_empty() {
        return Err(Error::Dataset {
            path: shards.first().cloned().unwrap_or_default(),
            msg: format!("no samples with an image in {} shard(s)", shards.len()),
        });
    }
    Ok(Source {
        root: shards[0].clone(),
        samples,
        classes: Vec::new(),
        left_out,
        shards: Some(std::sync::Arc::new(Shards {
            paths: shards.to_vec(),
            members,
            #[cfg(feature = "object-store")]
            store: None,
        })),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn braces_wildcards_and_urls() {
        assert_eq!(
            expand_braces("a/s-{000008..000010}.tar"),
            ["a/s-000008.tar", "a/s-000009.tar", "a/s-000010.tar"]
        );
        assert_eq!(expand_braces("plain.tar"), ["plain.tar"]);
        assert!(wildcard(b"shard-*.tar", b"shard-000001.tar"));
        assert!(wildcard(b"s?.tar", b"s1.tar"));
        assert!(!wildcard(b"s?.tar", b"s12.tar"));
        assert!(!wildcard(b"*.tar", b"a/b.tar"));
        assert!(!wildcard(b"shard-*.tar", b"shard-000001.tar.idx"));
        assert!(is_url("s3://bucket/a.tar") && is_url("file:///x.tar"));
        assert!(!is_url("data/a.tar") && !is_url("a{0..1}://"));
    }
}
