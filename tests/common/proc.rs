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
