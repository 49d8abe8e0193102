//! Where samples come from: a list of `(file, label)` built once, before the
//! first epoch.
//!
//! Listing never calls `stat` on a regular file: directory entries carry
//! their type (`d_type` on Linux), so a 1.3 M-file ImageNet tree is listed
//! with one `getdents` pass per folder. Only symbolic links are followed
//! with a `stat`, to learn what they point at.

mod filelist;
mod folder;

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

    /// A text file with one sample per line: `path<TAB>label` or
    /// `path,label`. Relative paths are taken from the list file's folder.
    /// Empty lines and lines starting with `#` are ignored.
    pub fn file_list(list: impl AsRef<Path>) -> Result<Source> {
        filelist::read(list.as_ref())
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
        })
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
