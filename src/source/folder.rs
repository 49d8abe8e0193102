//! ImageFolder listing.

use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::{LeftOut, Sample, Source, has_extension};
use crate::error::{Error, Result};

/// Entry kinds as the directory listing reports them; `stat` is called only
/// for symbolic links.
enum Kind {
    Dir,
    File,
    Other,
}

fn kind_of(entry: &fs::DirEntry) -> Kind {
    let Ok(t) = entry.file_type() else {
        return Kind::Other;
    };
    let t = if t.is_symlink() {
        match fs::metadata(entry.path()) {
            Ok(m) => m.file_type(),
            // A dangling link is listed as a file so that the reader reports
            // it by name instead of it vanishing silently.
            Err(_) => return Kind::File,
        }
    } else {
        t
    };
    if t.is_dir() {
        Kind::Dir
    } else if t.is_file() {
        Kind::File
    } else {
        Kind::Other
    }
}

fn read_dir(dir: &Path) -> Result<fs::ReadDir> {
    fs::read_dir(dir).map_err(|source| Error::Io {
        path: dir.to_path_buf(),
        source,
    })
}

pub(super) fn list(root: &Path, extensions: &[&str]) -> Result<Source> {
    let mut classes = Vec::new();
    let mut left_out = LeftOut::default();
    for entry in read_dir(root)? {
        let entry = entry.map_err(|source| Error::Io {
            path: root.to_path_buf(),
            source,
        })?;
        match kind_of(&entry) {
            Kind::Dir => classes.push(entry.file_name()),
            Kind::File => left_out.root(&entry.path()),
            Kind::Other => {}
        }
    }
    if classes.is_empty() {
        return Err(Error::Dataset {
            path: root.to_path_buf(),
            msg: "no class sub-folders (ImageFolder expects ROOT/CLASS/IMAGE); for a flat \
                  folder of images use Source::recursive"
                .into(),
        });
    }
    classes.sort();
    let mut samples = Vec::new();
    for (label, class) in classes.iter().enumerate() {
        let start = samples.len();
        walk(
            &root.join(class),
            extensions,
            label as u32,
            &mut samples,
            &mut left_out,
        )?;
        samples[start..].sort_unstable_by(|a: &Sample, b| a.path.cmp(&b.path));
    }
    if samples.is_empty() {
        return Err(Error::Dataset {
            path: root.to_path_buf(),
            msg: format!(
                "no files with extension {} in any class folder",
                extensions.join("/")
            ),
        });
    }
    let classes = classes
        .into_iter()
        .map(|c| c.to_string_lossy().into_owned())
        .collect();
    Ok(Source {
        root: root.to_path_buf(),
        samples,
        classes,
        left_out,
        shards: None,
    })
}

pub(super) fn list_flat(root: &Path, extensions: &[&str]) -> Result<Source> {
    let mut samples = Vec::new();
    let mut left_out = LeftOut::default();
    walk(root, extensions, 0, &mut samples, &mut left_out)?;
    samples.sort_unstable_by(|a, b| a.path.cmp(&b.path));
    if samples.is_empty() {
        return Err(Error::Dataset {
            path: root.to_path_buf(),
            msg: format!("no files with extension {}", extensions.join("/")),
        });
    }
    Ok(Source {
        root: root.to_path_buf(),
        samples,
        classes: Vec::new(),
        left_out,
        shards: None,
    })
}

/// Depth-first walk of one class folder. Directories are identified by
/// `(device, inode)` so that a symlink loop is listed once, not forever.
fn walk(
    dir: &Path,
    extensions: &[&str],
    label: u32,
    out: &mut Vec<Sample>,
    left_out: &mut LeftOut,
) -> Result<()> {
    let mut seen = HashSet::new();
    let mut stack: Vec<PathBuf> = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let meta = fs::metadata(&dir).map_err(|source| Error::Io {
            path: dir.clone(),
            source,
        })?;
        if !seen.insert((meta.dev(), meta.ino())) {
            continue;
        }
        for entry in read_dir(&dir)? {
            let entry = entry.map_err(|source| Error::Io {
                path: dir.clone(),
                source,
            })?;
            match kind_of(&entry) {
                Kind::Dir => stack.push(entry.path()),
                Kind::File if has_extension(&entry.file_name(), extensions) => {
                    out.push(Sample {
                        path: entry.path(),
                        label,
                    });
                }
                Kind::File => left_out.extension(&entry.path()),
                Kind::Other => {}
            }
        }
    }
    Ok(())
}
