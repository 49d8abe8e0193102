//! WebDataset tar shards on the local file system (issue 18, first part).
//!
//! A sample is the group of consecutive members sharing a key (the member
//! path up to the first dot of its file name, WebDataset's convention):
//! the image is the `jpg`/`jpeg`/`png`/`webp` member, the label the `cls`
//! member (a decimal integer). The shards' member headers are read once,
//! at listing, seeking past the data (`tar` crate); readers then fetch
//! each image with one positioned read of its byte range. A sample without
//! an image is left out and counted in [`LeftOut`]; one without a label,
//! or with two images, fails when read, under the pipeline's `OnError`,
//! named `SHARD/KEY.EXT`.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::{LeftOut, Sample, Source};
use crate::error::{Error, Result};

/// Image members, by extension.
const IMAGE_EXTENSIONS: &[&str] = &["jpg", "jpeg", "png", "webp"];

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

/// Split a member path into (key, extension): the key is everything up to
/// the first dot of the file name.
fn key_and_extension(path: &str) -> (&str, &str) {
    let name_start = path.rfind('/').map_or(0, |i| i + 1);
    match path[name_start..].find('.') {
        Some(dot) => (&path[..name_start + dot], &path[name_start + dot + 1..]),
        None => (path, ""),
    }
}

/// One key's members while scanning.
#[derive(Default)]
struct Group {
    key: String,
    image: Option<(String, u64, u64)>,
    images: usize,
    label: Option<u32>,
    bad_label: bool,
}

fn finish(
    g: Group,
    shard_index: u32,
    shard: &Path,
    samples: &mut Vec<Sample>,
    members: &mut Vec<Member>,
    left_out: &mut LeftOut,
) {
    if g.key.is_empty() {
        return;
    }
    let Some((ext, offset, len)) = g.image else {
        left_out.extension(&shard.join(&g.key));
        return;
    };
    let problem = if g.images > 1 {
        Some("two image members share this key")
    } else if g.bad_label {
        Some("the cls member is not a non-negative integer")
    } else if g.label.is_none() {
        Some("no cls member (label) for this key")
    } else {
        None
    };
    samples.push(Sample {
        path: shard.join(format!("{}.{ext}", g.key)),
        label: g.label.unwrap_or(0),
    });
    members.push(Member {
        shard: shard_index,
        offset,
        len,
        problem,
    });
}

pub(super) fn list(shards: &[PathBuf]) -> Result<Source> {
    let mut samples = Vec::new();
    let mut members = Vec::new();
    let mut left_out = LeftOut::default();
    for (si, shard) in shards.iter().enumerate() {
        let io = |source| Error::Io {
            path: shard.clone(),
            source,
        };
        let file = File::open(shard).map_err(io)?;
        let mut archive = tar::Archive::new(file);
        let mut group = Group::default();
        for entry in archive.entries_with_seek().map_err(io)? {
            let mut entry = entry.map_err(io)?;
            if !entry.header().entry_type().is_file() {
                continue;
            }
            let path = entry.path().map_err(io)?.to_string_lossy().into_owned();
            let (key, ext) = key_and_extension(&path);
            let (key, ext) = (key.to_string(), ext.to_ascii_lowercase());
            if key != group.key {
                let done = std::mem::take(&mut group);
                finish(
                    done,
                    si as u32,
                    shard,
                    &mut samples,
                    &mut members,
                    &mut left_out,
                );
                group.key = key;
            }
            if IMAGE_EXTENSIONS.contains(&ext.as_str()) {
                group.images += 1;
                group.image = Some((ext, entry.raw_file_position(), entry.size()));
            } else if ext == "cls" {
                let mut text = String::new();
                let ok = entry.by_ref().take(64).read_to_string(&mut text).is_ok();
                match text.trim().parse() {
                    Ok(l) if ok => group.label = Some(l),
                    _ => group.bad_label = true,
                }
            }
        }
        finish(
            group,
            si as u32,
            shard,
            &mut samples,
            &mut members,
            &mut left_out,
        );
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
        shards: shards.to_vec(),
        members,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn braces_and_keys() {
        assert_eq!(
            expand_braces("a/s-{000008..000010}.tar"),
            ["a/s-000008.tar", "a/s-000009.tar", "a/s-000010.tar"]
        );
        assert_eq!(expand_braces("plain.tar"), ["plain.tar"]);
        assert_eq!(
            key_and_extension("d/n01.x/abc.seg.png"),
            ("d/n01.x/abc", "seg.png")
        );
        assert_eq!(key_and_extension("abc"), ("abc", ""));
    }
}
