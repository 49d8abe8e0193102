//! A timeline of the pipeline's work that a person can open: Chrome's
//! trace format (Perfetto, `chrome://tracing`), one track per thread
//! (issue 16, item 6: a GPU machine may lack Nsight Systems).
//!
//! Spans are timed on the host with `Instant`: reads, header parses,
//! decodes (or the nvJPEG host phase) and augments on the reader and
//! worker threads; the device stage's calls on the batch thread (putting
//! JPEGs into decode groups, waiting to collect a group, copies and
//! launches); each engine call on its lane's track (support queries, the
//! call and the wait for its completion, so the engine's real time); the
//! trainer's wait for each batch and how long it held it.
//! On the CUDA backend, GPU spans timed with CUDA events sit on tracks of
//! their own (`GPU: ...`; `cuda/timeline.rs` places them on the host's
//! clock): each engine call on its lane's stream, and each flush of a
//! slot's copies and kernels on the stage's stream. The emulated device
//! puts its host-run kernels on such a track too.

use std::cell::Cell;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Spans kept; later ones are counted and dropped, so a long run cannot
/// grow memory without bound (about 48 bytes each).
pub(crate) const MAX_SPANS: usize = 1 << 20;

/// What a span was about, shown as its arguments.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Arg {
    None,
    /// An index into the source's samples.
    Sample(u32),
    /// A batch's number within its epoch.
    Batch(u64),
}

#[derive(Debug)]
struct Span {
    name: &'static str,
    tid: u32,
    start: Instant,
    end: Instant,
    arg: Arg,
}

/// The timeline of one pipeline.
#[derive(Debug)]
pub(crate) struct Trace {
    /// Tells this trace's tracks from another's in the thread-local cache.
    id: u64,
    origin: Instant,
    spans: Mutex<Vec<Span>>,
    dropped: AtomicU64,
    /// Thread names by track id.
    threads: Mutex<Vec<String>>,
}

thread_local! {
    /// This thread's track: (the trace it belongs to, its id).
    static TRACK: Cell<Option<(u64, u32)>> = const { Cell::new(None) };
}

impl Trace {
    /// A timeline whose time 0 is `origin`.
    pub(crate) fn since(origin: Instant) -> Trace {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Trace {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            origin,
            spans: Mutex::new(Vec::new()),
            dropped: AtomicU64::new(0),
            threads: Mutex::new(Vec::new()),
        }
    }

    /// This thread's track id in this trace, named after the thread.
    fn tid(&self) -> u32 {
        let me = self.id;
        if let Some((owner, tid)) = TRACK.with(Cell::get)
            && owner == me
        {
            return tid;
        }
        let mut threads = self.threads.lock().unwrap_or_else(|e| e.into_inner());
        let name = std::thread::current()
            .name()
            .unwrap_or("trainer")
            .to_string();
        threads.push(name);
        let tid = threads.len() as u32;
        TRACK.with(|t| t.set(Some((me, tid))));
        tid
    }

    /// The id of the track called `name`, not a thread's (a GPU stream's).
    fn named(&self, name: &str) -> u32 {
        let mut threads = self.threads.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = threads.iter().position(|t| t == name) {
            return i as u32 + 1;
        }
        threads.push(name.to_string());
        threads.len() as u32
    }

    /// Record `name` from `start` to `end` on the track called `track`.
    pub(crate) fn span_on(&self, track: &str, name: &'static str, start: Instant, end: Instant) {
        let tid = self.named(track);
        self.push(Span {
            name,
            tid,
            start,
            end,
            arg: Arg::None,
        });
    }

    /// Record `name` from `start` to now on this thread's track.
    pub(crate) fn span(&self, name: &'static str, start: Instant, arg: Arg) {
        self.span_to(name, start, Instant::now(), arg);
    }

    /// Record `name` from `start` to `end` on this thread's track.
    pub(crate) fn span_to(&self, name: &'static str, start: Instant, end: Instant, arg: Arg) {
        let tid = self.tid();
        self.push(Span {
            name,
            tid,
            start,
            end,
            arg,
        });
    }

    fn push(&self, span: Span) {
        let mut spans = self.spans.lock().unwrap_or_else(|e| e.into_inner());
        if spans.len() >= MAX_SPANS {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        spans.push(span);
    }

    /// The timeline so far, as Chrome trace JSON (`{"traceEvents": [...]}`;
    /// times in microseconds since the pipeline was built).
    pub(crate) fn to_json(&self) -> String {
        let us = |t: Instant| t.saturating_duration_since(self.origin).as_secs_f64() * 1e6;
        let mut out = String::from("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
        let threads = self.threads.lock().unwrap_or_else(|e| e.into_inner());
        let mut first = true;
        let mut sep = |out: &mut String| {
            if !std::mem::take(&mut first) {
                out.push_str(",\n");
            }
        };
        for (i, name) in threads.iter().enumerate() {
            sep(&mut out);
            let _ = write!(
                out,
                "{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":{},\"args\":{{\"name\":\"{}\"}}}}",
                i + 1,
                escape(name)
            );
        }
        drop(threads);
        let spans = self.spans.lock().unwrap_or_else(|e| e.into_inner());
        for s in spans.iter() {
            sep(&mut out);
            let args = match s.arg {
                Arg::None => String::new(),
                Arg::Sample(i) => format!(",\"args\":{{\"sample\":{i}}}"),
                Arg::Batch(b) => format!(",\"args\":{{\"batch\":{b}}}"),
            };
            let _ = write!(
                out,
                "{{\"name\":\"{}\",\"ph\":\"X\",\"pid\":1,\"tid\":{},\"ts\":{:.1},\"dur\":{:.1}{args}}}",
                s.name,
                s.tid,
                us(s.start),
                (us(s.end) - us(s.start)).max(0.0),
            );
        }
        let _ = write!(
            out,
            "\n],\"otherData\":{{\"dropped_spans\":{}}}}}\n",
            self.dropped.load(Ordering::Relaxed)
        );
        out
    }
}

/// A thread name as a JSON string body.
fn escape(s: &str) -> String {
    s.chars()
        .flat_map(|c| match c {
            '"' | '\\' => vec!['\\', c],
            c if c.is_control() => vec!['?'],
            c => vec![c],
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_and_thread_names() {
        let t = Trace::since(Instant::now());
        let t0 = Instant::now();
        t.span("read", t0, Arg::Sample(3));
        std::thread::scope(|s| {
            std::thread::Builder::new()
                .name("w\"1".into())
                .spawn_scoped(s, || t.span("decode", Instant::now(), Arg::Batch(2)))
                .unwrap();
        });
        let json = t.to_json();
        assert!(
            json.contains(r#""name":"read","ph":"X","pid":1,"tid":1"#),
            "{json}"
        );
        assert!(json.contains(r#""args":{"sample":3}"#), "{json}");
        assert!(json.contains(r#""tid":2,"args":{"name":"w\"1"}"#), "{json}");
        assert!(
            json.contains(r#""name":"decode","ph":"X","pid":1,"tid":2"#),
            "{json}"
        );
        assert!(json.contains(r#""dropped_spans":0"#), "{json}");
    }

    #[test]
    fn named_tracks_are_shared_by_name() {
        let t = Trace::since(Instant::now());
        let t0 = Instant::now();
        t.span_on("GPU: s", "k", t0, t0);
        t.span("read", t0, Arg::None);
        t.span_on("GPU: s", "k", t0, t0);
        let json = t.to_json();
        assert!(
            json.contains(r#""tid":1,"args":{"name":"GPU: s"}"#),
            "{json}"
        );
        assert_eq!(
            json.matches(r#""name":"k","ph":"X","pid":1,"tid":1"#)
                .count(),
            2,
            "{json}"
        );
        assert!(
            json.contains(r#""name":"read","ph":"X","pid":1,"tid":2"#),
            "{json}"
        );
    }
}
