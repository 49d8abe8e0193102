//! Files gpufeed writes and later reads back as trusted: the kernel
//! cache's CUBINs (`cuda::nvrtc`) and WebDataset indexes (`source::index`).

use std::io;
use std::path::Path;

/// Write `bytes` to `file` through a temporary beside it and a rename, so
/// that a reader finds the old file or the whole new one. The temporary's
/// name is this call's alone: with the process's id only, two threads
/// writing one file (a kernel cache's CUBIN, a shard's index) shared one,
/// and a rename could publish it while the other thread was still
/// writing. A failed write leaves no temporary.
pub(crate) fn write_atomic(file: &Path, bytes: &[u8]) -> io::Result<()> {
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut tmp = file.as_os_str().to_owned();
    tmp.push(format!(".tmp{}-{call}", std::process::id()));
    let tmp = std::path::PathBuf::from(tmp);
    let written = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, file));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_writes_leave_the_whole_file_and_no_temporaries() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("shard.tar.idx");
        std::thread::scope(|s| {
            for t in 0..4u8 {
                let file = &file;
                s.spawn(move || {
                    for _ in 0..50 {
                        write_atomic(file, &[t; 4096]).unwrap();
                    }
                });
            }
        });
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "{left:?}");
        let bytes = std::fs::read(&file).unwrap();
        assert!(bytes.len() == 4096 && bytes.iter().all(|&b| b == bytes[0]));
        let missing = dir.path().join("no/such/folder/x.idx");
        assert!(write_atomic(&missing, b"x").is_err());
    }
}
