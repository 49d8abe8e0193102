//! What the process costs, from /proc (Linux; zeros elsewhere): CPU time,
//! in all and by thread kind (issue 16, item 4: CPU time per image by
//! thread kind), and resident memory.

use std::collections::BTreeMap;

/// Clock ticks per second of /proc's time fields (`USER_HZ`, 100 on
/// Linux).
const TICKS: f64 = 100.0;

/// User + system ticks of a `stat` line (fields 14 and 15; the command
/// name may hold spaces, so fields restart after its ')').
fn stat_ticks(stat: &str) -> f64 {
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    f.get(11).copied().unwrap_or(0.0) + f.get(12).copied().unwrap_or(0.0)
}

/// CPU time of this process (user + system), seconds.
pub(crate) fn cpu_seconds() -> f64 {
    stat_ticks(&std::fs::read_to_string("/proc/self/stat").unwrap_or_default()) / TICKS
}

/// The kinds a thread's CPU time is counted under, in report order.
pub(crate) const KINDS: [&str; 7] = [
    "readers",
    "workers",
    "batch thread",
    "engine lanes",
    "progressive lanes",
    "consumer",
    "other",
];

/// The kind of a thread, by the name the pipeline gave it (`comm` keeps
/// 15 bytes) or, for the process's first thread, the consumer (the
/// benchmark's training loop). "other": the CUDA driver's and nvJPEG's
/// threads, and threads gone since the last look.
fn kind(comm: &str, main: bool) -> &'static str {
    if main {
        return "consumer";
    }
    match comm {
        c if c.starts_with("gpufeed-read") => "readers",
        c if c.starts_with("gpufeed-cpu") => "workers",
        c if c.starts_with("gpufeed-batch") => "batch thread",
        c if c.starts_with("gpufeed-engine") || c.starts_with("gpufeed-emu-en") => "engine lanes",
        // The emulated lanes' `gpufeed-emu-progressive-N` keeps its first
        // 15 bytes.
        c if c.starts_with("gpufeed-progre") || c.starts_with("gpufeed-emu-pro") => {
            "progressive lanes"
        }
        _ => "other",
    }
}

/// CPU seconds so far per thread kind; "other" is the rest of the
/// process's time, so the kinds add up to [`cpu_seconds`].
pub(crate) fn cpu_by_kind() -> BTreeMap<&'static str, f64> {
    let mut out: BTreeMap<&'static str, f64> = KINDS.iter().map(|&k| (k, 0.0)).collect();
    let pid = std::process::id().to_string();
    let total = cpu_seconds();
    let mut named = 0.0;
    for task in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        let dir = task.path();
        let tid = task.file_name();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        let Ok(stat) = std::fs::read_to_string(dir.join("stat")) else {
            continue;
        };
        let k = kind(comm.trim_end(), tid.to_str() == Some(pid.as_str()));
        if k != "other" {
            let s = stat_ticks(&stat) / TICKS;
            *out.entry(k).or_default() += s;
            named += s;
        }
    }
    out.insert("other", (total - named).max(0.0));
    out
}

/// A field of /proc/self/status in KiB (VmHWM, VmRSS).
pub(crate) fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Reset the peak-RSS mark (Linux: writing 5 to clear_refs), so that each
/// configuration of a sweep reports its own peak.
pub(crate) fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

#[cfg(test)]
mod tests {
    #[test]
    fn threads_are_told_apart_by_name() {
        assert_eq!(super::kind("gpufeed-read-3", false), "readers");
        assert_eq!(super::kind("gpufeed-cpu-12", false), "workers");
        assert_eq!(super::kind("gpufeed-batch", false), "batch thread");
        assert_eq!(super::kind("gpufeed-engine-", false), "engine lanes");
        assert_eq!(super::kind("gpufeed-emu-eng", false), "engine lanes");
        assert_eq!(super::kind("gpufeed-progres", false), "progressive lanes");
        assert_eq!(super::kind("gpufeed-emu-pro", false), "progressive lanes");
        assert_eq!(super::kind("gpufeed", true), "consumer");
        assert_eq!(super::kind("cuda-EvtHandlr", false), "other");
    }

    #[test]
    fn ticks_skip_a_command_name_with_spaces() {
        let stat = "42 (a b) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0";
        assert_eq!(super::stat_ticks(stat), 300.0);
    }
}
