//! List files: one `path label` per line.
//!
//! Accepted, per line: `path<TAB>label`, `path,label` (CSV), or `path
//! label` separated by spaces (Caffe's and ImageNet's `train.txt`). The
//! label is after the last separator, so paths may hold commas when the
//! line has a tab, and spaces when it has a tab or a comma. Empty lines
//! and lines starting with `#` are ignored; a first line whose label is
//! not a number is a header (`path,label`) and ignored too.

use std::fs;
use std::path::{Component, Path};

use super::{Sample, Source};
use crate::error::{Error, Result};

pub(super) fn read(list: &Path, allow_outside: bool) -> Result<Source> {
    let text = fs::read_to_string(list).map_err(|source| Error::Io {
        path: list.to_path_buf(),
        source,
    })?;
    let base = list.parent().unwrap_or(Path::new("."));
    let mut samples = Vec::new();
    let mut first = true;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let header = std::mem::take(&mut first);
        let bad = |msg: &str| Error::Dataset {
            path: list.to_path_buf(),
            msg: format!("line {}: {msg}: {line:?}", i + 1),
        };
        let line_t = line.trim_end();
        let split = line_t
            .rfind('\t')
            .or_else(|| line_t.rfind(','))
            .or_else(|| line_t.rfind(' '));
        let Some(at) = split else {
            return Err(bad(
                "expected `path<TAB>label`, `path,label` or `path label`",
            ));
        };
        let (path, label) = (line_t[..at].trim_end(), line_t[at + 1..].trim());
        let Ok(label) = label.parse::<u32>() else {
            if header {
                continue;
            }
            return Err(bad("label is not a non-negative integer"));
        };
        if path.is_empty() {
            return Err(bad("empty path"));
        }
        if !allow_outside && escapes(Path::new(path)) {
            return Err(bad(
                "path is outside the list's folder (absolute or through ..); \
                 Source::file_list_anywhere allows it",
            ));
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
        left_out: Default::default(),
        shards: None,
    })
}

/// Whether a relative list entry leaves the list's folder: it is absolute,
/// or its `..` components climb above where it starts (checked on the
/// text, as the file may not exist yet).
fn escapes(path: &Path) -> bool {
    let mut depth = 0i64;
    for c in path.components() {
        match c {
            Component::Prefix(_) | Component::RootDir => return true,
            Component::ParentDir => {
                depth -= 1;
                if depth < 0 {
                    return true;
                }
            }
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::escapes;
    use std::path::Path;

    #[test]
    fn escaping_paths() {
        for p in ["a.jpg", "x/../a.jpg", "./a/b.jpg", "a/b/../../c.jpg"] {
            assert!(!escapes(Path::new(p)), "{p}");
        }
        for p in ["/etc/passwd", "../a.jpg", "a/../../b.jpg"] {
            assert!(escapes(Path::new(p)), "{p}");
        }
    }
}
