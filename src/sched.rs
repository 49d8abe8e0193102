//! Scheduling priority of the pipeline's own threads (issue 16, item 3).
//!
//! On an H200 (2026-11-27) the hardware engine's calls took about twice as
//! long per image when 16 workers decoded the CUDA share beside them, and
//! the engine alone lost 18-22 % beside 8 busy CPUs: its lanes do ~0.1
//! CPU-ms of nvJPEG host work per image on the engine's critical path.
//! `GPUFEED_WORKER_NICE=N` (1-19) runs the decode workers at nice `N`, so
//! that the lanes and the batch thread win a contended CPU: a diagnostic
//! until a GPU run says whether it pays (the runner's shares sweep with
//! it); unset, nothing changes.

#![allow(unsafe_code)]

/// The nice value `GPUFEED_WORKER_NICE` asks for, when valid.
fn worker_nice() -> Option<i32> {
    static NICE: std::sync::OnceLock<Option<i32>> = std::sync::OnceLock::new();
    *NICE.get_or_init(|| {
        std::env::var("GPUFEED_WORKER_NICE")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|n| (1..=19).contains(n))
    })
}

/// Lower the calling thread's priority to `GPUFEED_WORKER_NICE`'s, where
/// set; a failure is printed once per thread (a diagnostic's own report).
pub(crate) fn lower_worker_priority() {
    let Some(nice) = worker_nice() else { return };
    if let Err(e) = set_thread_nice(nice) {
        eprintln!("gpufeed: GPUFEED_WORKER_NICE: {e}");
    }
}

/// Set the calling thread's nice value. Raising it needs no privilege.
#[cfg(target_os = "linux")]
fn set_thread_nice(nice: i32) -> std::io::Result<()> {
    // SAFETY: gettid takes no arguments and cannot fail (gettid(2)).
    let tid = unsafe { libc::gettid() };
    // SAFETY: on Linux, PRIO_PROCESS with a thread id sets that thread's
    // nice value alone (setpriority(2), "BUGS": threads do not share it);
    // the arguments are plain integers.
    let r = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
fn set_thread_nice(_nice: i32) -> std::io::Result<()> {
    Err(std::io::Error::other("per-thread nice values are Linux's"))
}

#[cfg(test)]
mod tests {
    /// The calling thread's nice value, read back from the kernel.
    #[cfg(target_os = "linux")]
    fn nice_of_this_thread() -> i32 {
        // SAFETY: as in `set_thread_nice`.
        let tid = unsafe { libc::gettid() };
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
        // Field 19 (nice), counted after the parenthesised command name.
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        after.split(' ').nth(16).unwrap().parse().unwrap()
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn a_thread_nice_value_is_its_own() {
        let main = nice_of_this_thread();
        let (inside, after) = std::thread::spawn(move || {
            super::set_thread_nice(main + 5).unwrap();
            nice_of_this_thread()
        })
        .join()
        .map(|n| (n, nice_of_this_thread()))
        .unwrap();
        assert_eq!(inside, (main + 5).min(19));
        assert_eq!(after, main, "another thread's nice value changed");
    }
}
