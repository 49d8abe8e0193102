//! Process facts from /proc for the shutdown and memory tests.
#![allow(dead_code)]

/// A field of /proc/self/status (`Threads`, `VmRSS`...), as its number.
pub(crate) fn status(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("{field} missing from /proc/self/status"))
}

/// Threads of this process.
pub(crate) fn threads() -> u64 {
    status("Threads")
}

/// Resident set size in KiB.
pub(crate) fn rss_kib() -> u64 {
    status("VmRSS")
}

/// Threads of this process once they have fallen to `before`, or after 5 s
/// of waiting: a joined thread leaves the kernel's count a moment after
/// `join()` returns (the tid is cleared before the task is released), so
/// the count gets a few seconds to settle; a leaked thread never would.
pub(crate) fn threads_settled(before: u64) -> u64 {
    let mut now = threads();
    for _ in 0..50 {
        if now <= before {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        now = threads();
    }
    now
}
