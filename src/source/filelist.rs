//! `path<TAB>label` / `path,label` list files.

use std::fs;
use std::path::Path;

use super::{Sample, Source};
use crate::error::{Error, Result};

pub(super) fn read(list: &Path) -> Result<Source> {
    let text = fs::read_to_string(list).map_err(|source| Error::Io {
        path: list.to_path_buf(),
        source,
    })?;
    let base = list.parent().unwrap_or(Path::new("."));
    let mut samples = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        // The label is after the last separator so that paths may contain
        // commas when the list is tab-separated.
        let split = line.rfind('\t').or_else(|| line.rfind(','));
        let bad = |msg: &str| Error::Dataset {
            path: list.to_path_buf(),
            msg: format!("line {}: {msg}: {line:?}", i + 1),
        };
        let Some(at) = split else {
            return Err(bad("expected `path<TAB>label` or `path,label`"));
        };
        let (path, label) = (&line[..at], line[at + 1..].trim());
        let label: u32 = label
            .parse()
            .map_err(|_| bad("label is not a non-negative integer"))?;
        if path.is_empty() {
            return Err(bad("empty path"));
        }
        samples.push(Sample {
            path: base.join(path),
            label,
        });
    }
    if samples.is_empty() {
        return Err(Error::Dataset {
            path: list.to_path_buf(),
            msg: "list has no samples".into(),
        });
    }
    Ok(Source {
        root: list.to_path_buf(),
        samples,
        classes: Vec::new(),
    })
}
