#!/usr/bin/env python3
"""Sum a gpufeed timeline (`gpufeed bench --trace FILE.json`) by thread
kind and span name: count, total, median and 90th percentile, over the
last part of the trace (steady state), so that a lease's traces are read
in seconds rather than by hand (issue 16, item 6).

    trace_summary.py TRACE.json [--from S]

--from: seconds from the trace's first span where the sum starts
(default: the second half of the trace). Threads of one kind (the
workers gpufeed-cpu-N, the readers, the engine lanes, GPU tracks of one
kind) are summed together; the "in flight" column is a span name's total
over the window's length: how many such spans were open on average.
"""
import argparse
import json
import re
import statistics


def kind(thread):
    """The thread's kind: its name without a trailing number."""
    return re.sub(r"[-_ ]?\d+$", "", thread)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--from", dest="t_from", type=float)
    args = ap.parse_args()
    with open(args.trace) as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    names = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[(e["pid"], e["tid"])] = e["args"]["name"]
    spans = [e for e in events if e.get("ph") == "X"]
    if not spans:
        raise SystemExit("no spans in the trace")
    t0 = min(e["ts"] for e in spans)
    t1 = max(e["ts"] + e.get("dur", 0) for e in spans)
    start = t0 + args.t_from * 1e6 if args.t_from is not None else (t0 + t1) / 2
    window = max(t1 - start, 1.0)
    rows = {}
    for e in spans:
        if e["ts"] < start:
            continue
        thread = names.get((e["pid"], e["tid"]), f"{e['pid']}/{e['tid']}")
        rows.setdefault((kind(thread), e["name"]), []).append(e.get("dur", 0))
    print(
        f"{args.trace}: {(t1 - start) / 1e6:.3f} s from {(start - t0) / 1e6:.3f} s "
        f"(of {(t1 - t0) / 1e6:.3f} s)"
    )
    print(
        f"{'thread kind':<28} {'span':<34} {'count':>7} {'total ms':>10} "
        f"{'median us':>10} {'p90 us':>9} {'in flight':>9}"
    )
    for (k, name), durs in sorted(rows.items(), key=lambda r: -sum(r[1])):
        durs.sort()
        p90 = durs[min(len(durs) - 1, int(0.9 * len(durs)))]
        print(
            f"{k[:28]:<28} {name[:34]:<34} {len(durs):>7} {sum(durs) / 1e3:>10.1f} "
            f"{statistics.median(durs):>10.0f} {p90:>9.0f} {sum(durs) / window:>9.2f}"
        )


if __name__ == "__main__":
    main()
