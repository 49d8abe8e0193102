#!/usr/bin/env python3
"""Render a window of a gpufeed timeline (`gpufeed bench --trace FILE.json`,
Chrome trace format) to a PNG: one row per thread or GPU track, one bar per
span, coloured by span name (issue 16, item 6: a picture of what overlaps).

    trace_png.py TRACE.json OUT.png [--from S] [--to S] [--title TEXT]

--from/--to: seconds from the trace's first span (default: 120 ms from
the start of the last tenth of the trace, a steady-state stretch when the
trace covers a warm-up epoch and a measured one). The workers'
(gpufeed-cpu-N) and the batch thread's spans shorter than 20 us are left
out of the picture (not of the trace), so that a row shows its long spans;
a span nested in another is drawn over it.
A trace from the CUPTI tracer (benches/cupti) renders the same way, its
host threads' CUDA calls coloured by kind (waits, memory, copies,
launches; calls under 5 us left out) above its GPU streams.
Needs matplotlib.
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLOURS = {
    "read": "#9ecae1",
    "parse": "#6baed6",
    "nvJPEG host phase": "#3182bd",
    "device: put JPEG": "#fdae6b",
    "device: collect decodes": "#e6550d",
    "device: copies and launches": "#a63603",
    "engine: decode call": "#74c476",
    "engine: support queries": "#c7e9c0",
    "engine: batched call (host)": "#006d2c",
    "engine decode": "#31a354",
    "copies and kernels": "#756bb1",
    "trainer waits": "#d9d9d9",
    "trainer holds batch": "#636363",
}


# CUPTI traces: a colour and a legend entry per kind of call or work.
CUPTI_KINDS = [
    ("wait (synchronize, query, wait)", "#e6550d", ("synchronize", "query", "wait")),
    ("memory (alloc, free, register)", "#fdae6b", ("alloc", "free", "register")),
    ("copy or memset call", "#9ecae1", ("memcpy", "memset")),
    ("launch", "#31a354", ("launch",)),
]


def cupti_kind(pid, name):
    """(legend label, colour) of a CUPTI trace's span."""
    if pid == 2:
        if name.startswith("memcpy"):
            return "GPU copy", "#3182bd"
        if name == "memset":
            return "GPU memset", "#17becf"
        return "GPU kernel", "#756bb1"
    low = name.lower()
    for label, colour, words in CUPTI_KINDS:
        if any(w in low for w in words):
            return label, colour
    return "other call", "#bbbbbb"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--from", dest="t_from", type=float)
    ap.add_argument("--to", dest="t_to", type=float)
    ap.add_argument("--title", default="")
    a = ap.parse_args()
    t = json.load(open(a.trace))
    events = t["traceEvents"] if isinstance(t, dict) else t
    # Rows are (pid, tid): the CUPTI tracer's pid 2 numbers streams.
    names = {(e.get("pid", 1), e["tid"]): e["args"]["name"]
             for e in events if e.get("ph") == "M" and "tid" in e}
    cupti = any(e.get("ph") == "M" and e.get("name") == "process_name"
                and e["args"]["name"].startswith("host threads (CUDA API)") for e in events)
    spans = [e for e in events if e.get("ph") == "X"]
    for e in spans:
        e["row"] = (e.get("pid", 1), e["tid"])
    t0 = min(e["ts"] for e in spans)
    t1 = max(e["ts"] + e["dur"] for e in spans)
    lo = a.t_from if a.t_from is not None else (t0 + 0.9 * (t1 - t0) - t0) / 1e6
    hi = a.t_to if a.t_to is not None else lo + 0.12
    lo_us, hi_us = t0 + lo * 1e6, t0 + hi * 1e6

    def order(tid):
        n = names.get(tid, str(tid))
        rank = (
            0 if n.startswith("gpufeed-read") else
            1 if n.startswith("gpufeed-cpu") else
            2 if n == "gpufeed-batch" else
            3 if n.startswith("gpufeed-engine") else
            4 if n.startswith(("GPU", "stream")) else 5
        )
        digits = "".join(c for c in n if c.isdigit())
        return (rank, int(digits) if digits else 0, n)

    tids = sorted({e["row"] for e in spans}, key=order)
    fig, ax = plt.subplots(figsize=(13, 0.32 * len(tids) + 1.6))
    seen = set()
    for row, tid in enumerate(tids):
        # Longest first, so that a span nested in another (a collect inside
        # a put that had to wait) is drawn over it.
        for e in sorted(spans, key=lambda e: -e["dur"]):
            if e["row"] != tid or e["ts"] + e["dur"] < lo_us or e["ts"] > hi_us:
                continue
            if cupti:
                if tid[0] == 1 and e["dur"] < 5:
                    continue
                kind, c = cupti_kind(tid[0], e["name"])
            else:
                if names.get(tid, "").startswith(("gpufeed-cpu", "gpufeed-batch")) and e["dur"] < 20:
                    continue
                kind, c = e["name"], COLOURS.get(e["name"], "#bbbbbb")
            s = max(e["ts"], lo_us)
            d = min(e["ts"] + e["dur"], hi_us) - s
            label = kind if kind not in seen else None
            seen.add(kind)
            ax.broken_barh([((s - t0) / 1e3, max(d, 1) / 1e3)], (row - 0.4, 0.8),
                           facecolors=c, edgecolors="none", label=label)
    ax.set_yticks(range(len(tids)))
    ax.set_yticklabels([names.get(t, str(t[1])) for t in tids], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(lo * 1e3, hi * 1e3)
    ax.set_xlabel("ms since the pipeline's first span")
    ax.set_title(a.title, fontsize=9)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=6, fontsize=7, frameon=False)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)


if __name__ == "__main__":
    main()
