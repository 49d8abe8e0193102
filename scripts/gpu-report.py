#!/usr/bin/env python3
"""Digest a GPU run's logs (run-gpu-tests.sh's OUT_LOGS, or its logs.tgz
unpacked) into one screen per part: the steps' verdicts, every bench run
and sweep with the columns issue 16 reads (img/s, CPU-ms per image by
thread, nvJPEG's driver allocations and pinned-buffer waits in the steady
epochs, the limit), issue 16's targets as those rows read them (best and
default img/s, CPU-ms at share 1, the mixes against the faster end, the
ratios to torchvision), the CUPTI summaries' thread groups, and
nvidia-smi's load of the hardware JPEG engine, and each timeline's spans
summed (benches/trace/trace_summary.py).

    scripts/gpu-report.py LOGS
    scripts/gpu-report.py --table LOGS   # issue 20's table, as Markdown
    scripts/gpu-report.py --skip-ran LOGS
        # the steps that ran to their end, for a second call's GPU_SKIP;
        # the calls' logs unpacked side by side under one LOGS then give
        # one table (a step's best verdict)
"""
import glob
import json
import os
import subprocess
import sys

THREADS = ["readers", "workers", "engine lanes", "progressive lanes", "batch thread", "consumer", "other"]


def runs_in(path):
    """The bench results in a file: a sweep's list (--out FILE.json), or the
    one object `bench --json` prints after its log lines."""
    text = open(path, errors="replace").read()
    if path.endswith(".json"):
        try:
            data = json.loads(text)
        except ValueError:
            return []
        return data if isinstance(data, list) else []
    start = text.find("\n{")
    if start < 0:
        start = 0 if text.startswith("{") else -1
    if start < 0:
        return []
    try:
        obj, _ = json.JSONDecoder().raw_decode(text[start:].lstrip())
    except ValueError:
        return []
    return [obj] if isinstance(obj, dict) and "img_per_s" in obj else []


def row(name, r):
    by = r.get("cpu_ms_per_image_by_thread", {})
    threads = " ".join(f"{by.get(k, 0):.3f}" for k in THREADS)
    allocs = r.get("decoder_allocations_steady", "")
    wait = r.get("decoder_pinned_wait_s", "")
    wait = f"{wait:.2f}" if isinstance(wait, float) else wait
    # The engine's part of the images decoded on the GPU: a run where the
    # engine took none (a backend nvJPEG refused) shows 0 %.
    hw, cuda = r.get("decoded_hardware", 0), r.get("decoded_cuda", 0)
    engine = f"{100 * hw / (hw + cuda):.0f}%" if hw + cuda else ""
    prog = r.get("decoded_progressive", 0) or ""
    # CUDA-route images whose host phase ran on the batch thread (session 35).
    own = r.get("decoded_cuda_batch_thread", "")
    return (f"  {name:<44.44} {r['img_per_s']:>9.0f} {r.get('cpu_s_per_1000_images', 0):>6.3f}"
            f"  {threads:<35} {allocs!s:>6} {wait!s:>6} {engine:>5} {prog!s:>6} {own!s:>6}"
            f"  {r.get('limit', '')}")


def targets(named):
    """Issue 16's targets read off this run's bench rows: a quick verdict,
    not the issue's evidence (its numbers need 5,000+ files, one run each
    here)."""
    runs = dict(named)
    out = []
    # imagenet-size runs: not photos/full's, not the peers', not those
    # with a diagnostic on (their own rows). The scan kernels' runs count
    # (`GPUFEED_SEQUENTIAL_GPU=1` chose a route, the default since
    # session 52): at aeb05d5 this line named the engine's run the best.
    plain = {n: r for n, r in runs.items()
             if n.startswith(("shares ", "shares-base ", "in-flight-engine ", "engine-call ",
                              "sequential-in-flight ", "best "))
             or n in ("bench-cuda", "bench-cuda-beside-dali", "bench-cuda-sequential",
                      "bench-cuda-sequential-beside-dali")}
    if plain:
        best = max(plain, key=lambda n: plain[n]["img_per_s"])
        b = plain[best]["img_per_s"]
        out.append(f"  best img/s {b:,.0f} ({best}); 25,000: {'met' if b >= 25000 else 'not met'}")
        if "bench-cuda" in runs:
            d = runs["bench-cuda"]["img_per_s"]
            out.append(f"  default {d:,.0f} (bench-cuda), {100 * d / b:.0f} % of the best: "
                  f"{'within' if d >= 0.9 * b else 'not within'} 10 %")
    # The shares sweeps (`lease`'s shares-base, `quick`'s shares, which
    # also sweeps in-flight, `numbers`' best): each share's best row.
    share = {}
    for n, r in runs.items():
        if n.startswith(("shares ", "shares-base ", "best ")):
            cfg = dict(kv.split("=", 1) for kv in n.split()[1:] if "=" in kv)
            k = cfg.get("hardware-share")
            if k and (k not in share or r["img_per_s"] > share[k]["img_per_s"]):
                share[k] = r
    if "1" in share:
        c = share["1"].get("cpu_s_per_1000_images", 0)
        out.append(f"  CPU-ms per image at share 1 (shares sweep): {c:.3f}; 0.1: {'met' if c <= 0.1 else 'not met'}")
    if "0" in share and "1" in share:
        top = max(share["0"]["img_per_s"], share["1"]["img_per_s"])
        for k, r in sorted(share.items()):
            if k not in ("0", "1"):
                v = r["img_per_s"]
                out.append(f"  share {k}: {v:,.0f} against the faster end's {top:,.0f}: "
                      f"{'not slower' if v >= top else 'slower'}")
    # The engine lanes in a context of their own (`numbers`'
    # engine-context, session 61), against the same shares' best rows.
    for n, r in sorted(runs.items()):
        if n.startswith("engine-context ") and "0" in share and "1" in share:
            cfg = dict(kv.split("=", 1) for kv in n.split()[1:] if "=" in kv)
            k = cfg.get("hardware-share")
            top = max(share["0"]["img_per_s"], share["1"]["img_per_s"])
            was = f", {share[k]['img_per_s']:,.0f} in the pipeline's context" if k in share else ""
            v = r["img_per_s"]
            out.append(f"  share {k}, the engine in its own context: {v:,.0f}{was}; against the "
                       f"faster end's {top:,.0f}: {'not slower' if v >= top else 'slower'}")
    for ours, peer, what in (("bench-cuda", "peer-torchvision", "imagenet-size"),
                             ("bench-cuda-full", "peer-torchvision-full", "photos/full")):
        if ours in runs and peer in runs and runs[peer]["img_per_s"] > 0:
            x = runs[ours]["img_per_s"] / runs[peer]["img_per_s"]
            out.append(f"  torchvision's GPU pipeline, {what}: {x:.2f}x; 3x: {'met' if x >= 3 else 'not met'}")
    if out:
        print("\n== issue 16's targets, as this run's rows read")
        print("\n".join(out))


def verdicts(logs):
    """Each step's verdict from the runner's summary.txt files: `ok`,
    `FAILED (rc N)`, `TIMED OUT after Ns` or `skipped (why)`."""
    return {name: verdict for name, verdict, _, _ in steps(logs)}


# The candidate default's GPU tests (docs/RELIABILITY.md, "The next
# lease"), and its runs against the default's.
RULE_TESTS = ("progressive", "kernel-routes", "device-stage-sequential")
RULE_RUNS = ("bench-cuda", "bench-cuda-sequential", "bench-cuda-full",
             "bench-cuda-full-sequential-SPLIT_ROUNDS-16")
RULE_FALLBACK = "bench-cuda-full-sequential-SEQUENTIAL_MAX_PIXELS-1000000"


def default_rule(runs, verdict):
    """The rule written before the lease (docs/RELIABILITY.md, "The next
    lease") applied to this call's rows: which default the numbers
    choose. Lines to print."""
    missing = [n for n in RULE_RUNS if n not in runs]
    if missing:
        return [f"  undecided: no run {', '.join(missing)}"]
    img = {n: runs[n]["img_per_s"] for n in RULE_RUNS}
    fast = img["bench-cuda-sequential"] >= 1.1 * img["bench-cuda"]
    full = img["bench-cuda-full-sequential-SPLIT_ROUNDS-16"] >= 0.9 * img["bench-cuda-full"]
    fallback = runs.get(RULE_FALLBACK)
    full_fb = fallback is not None and fallback["img_per_s"] >= 0.9 * img["bench-cuda-full"]
    tests = {t: verdict.get(t, "not run") for t in RULE_TESTS}
    out = [
        f"  imagenet-size: candidate {img['bench-cuda-sequential']:,.0f} against the default's "
        f"{img['bench-cuda']:,.0f} ({img['bench-cuda-sequential'] / max(img['bench-cuda'], 1e-9):.2f}x; "
        f"1.1x: {'met' if fast else 'not met'})",
        f"  photos/full: candidate {img['bench-cuda-full-sequential-SPLIT_ROUNDS-16']:,.0f}, with the 1 MP "
        f"fallback {fallback['img_per_s'] if fallback else float('nan'):,.0f}, against the default's "
        f"{img['bench-cuda-full']:,.0f} (0.9x: {'met' if full else 'not met'}, with the fallback "
        f"{'met' if full_fb else 'not met'})",
        "  tests: " + ", ".join(f"{t} {v}" for t, v in tests.items()),
    ]
    if any(v != "ok" for v in tests.values()):
        out.append("  => the engine's route stays the default (a candidate test did not pass)")
    elif fast and full:
        out.append("  => the candidate becomes the default (sequential_kernels, share 0, 6 in flight)")
    elif fast and full_fb:
        out.append("  => the candidate with sequential_kernels_max_pixels 1,000,000 becomes the default")
    else:
        out.append("  => the engine's route stays the default")
    return out


def rank(verdict):
    """How far a step got: 2 ran to its end (`ok`, `FAILED`), 1 was cut
    (`TIMED OUT`), 0 did not run (`skipped`)."""
    if verdict == "ok" or verdict.startswith("FAILED"):
        return 2
    return 1 if verdict.startswith("TIMED OUT") else 0


def steps(logs):
    """Each step the runner logged, in order, once: (name, verdict,
    seconds, the folder of its log). A phase run in halves copies its
    halves' summaries into the top one, in place; the step's log is in
    the half's folder. Calls unpacked side by side under LOGS (issue 20's
    table over two calls at one commit, the second skipping what the
    first ran: `--skip-ran`) merge: a step that ran to its end wins over
    one cut or skipped, then one whose log is there, then the later
    folder."""
    best = {}
    paths = sorted(glob.glob(os.path.join(logs, "**", "summary.txt"), recursive=True),
                   key=lambda p: (p.count(os.sep), p))
    for path in paths:
        for line in open(path, errors="replace"):
            if not line.startswith("-- "):
                continue
            rest = line[3:].strip()
            if ": skipped" in rest:
                name, why = rest.split(":", 1)
                name, verdict, secs = name.strip(), why.strip(), ""
            else:
                parts = rest.split()
                if len(parts) < 3 or not parts[-1].endswith("s"):
                    continue
                name, verdict, secs = parts[0], " ".join(parts[1:-1]), parts[-1]
            folder = os.path.dirname(path)
            key = (rank(verdict), os.path.exists(os.path.join(folder, name + ".log")))
            if name not in best or key >= best[name][0]:
                # Dicts keep the first insertion's place: run order.
                best[name] = (key, (verdict, secs, folder))
    return [(n, *v) for n, (_, v) in best.items()]


def commits(logs):
    """The bundles' commits of the calls under LOGS, each once."""
    found = []
    for path in sorted(glob.glob(os.path.join(logs, "**", "COMMIT"), recursive=True)):
        c = open(path).read().strip()
        if c not in found:
            found.append(c)
    return found


def step_counts(log):
    """A step's log read for the table: its tests' counts summed over the
    binaries it ran ("N passed, M failed, K ignored") and the sanitizer's
    summary lines, or "" where it has neither."""
    if not os.path.exists(log):
        return "", ""
    counts = [0, 0, 0]
    seen = False
    tool = []
    for line in open(log, errors="replace"):
        if line.startswith("test result:"):
            seen = True
            words = line.replace(";", " ").replace(".", " ").split()
            for i, w in enumerate(words[:-1]):
                for k, key in enumerate(("passed", "failed", "ignored")):
                    if words[i + 1] == key and w.isdigit():
                        counts[k] += int(w)
        elif "SUMMARY:" in line and line.startswith("="):
            text = line.strip("= \n")
            if text not in tool:
                tool.append(text)
    tests = f"{counts[0]} passed, {counts[1]} failed, {counts[2]} ignored" if seen else ""
    return tests, "; ".join(tool)


def table(logs):
    """Issue 20's table for docs/RELIABILITY.md: every step of the run,
    its verdict, its tests' counts and the sanitizer's summary, as
    Markdown, under the commit the bundle was built from."""
    found = commits(logs)
    if len(found) > 1:
        # Issue 20 asks for one commit: say so where it shows.
        print(f"**Not one commit**: bundles built from {', '.join(found)}.\n")
    at = found[0] if len(found) == 1 else "unknown commit" if not found else "several commits"
    print(f"Steps of this run, bundle built from {at}:\n")
    print("| step | verdict | tests | sanitizer | s |")
    print("| --- | --- | --- | --- | --- |")
    for name, verdict, secs, folder in steps(logs):
        tests, tool = step_counts(os.path.join(folder, name + ".log"))
        print(f"| `{name}` | {verdict} | {tests} | {tool} | {secs.rstrip('s')} |")


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--table":
        table(sys.argv[2])
        return
    if len(sys.argv) > 2 and sys.argv[1] == "--skip-ran":
        # GPU_SKIP for a second call at the same commit: what ran to its end.
        print(" ".join(n for n, verdict, _, _ in steps(sys.argv[2]) if rank(verdict) == 2))
        return
    if len(sys.argv) > 2 and sys.argv[1] == "--build-track":
        # The runner's first-batch steps: what build() spent its time on,
        # kept in the step's log in place of the whole timeline.
        for name, ms in build_track(sys.argv[2]):
            print(f"build track: {name} {ms:.0f} ms")
        return
    logs = sys.argv[1] if len(sys.argv) > 1 else "gpu-logs"
    commit = os.path.join(logs, "COMMIT")
    if os.path.exists(commit):
        print("== bundle built from " + open(commit).read().strip())
    summaries = sorted(glob.glob(os.path.join(logs, "**", "summary.txt"), recursive=True))
    for s in summaries:
        print(f"== {os.path.relpath(s, logs)}")
        print(open(s, errors="replace").read().rstrip())
    print("\n== bench runs: img/s, CPU-ms per image (all threads, then "
          + ", ".join(THREADS) + "), allocs, pinned wait s, engine's part, files on the scan kernels, "
          "CUDA-route host phases on the batch thread, limit")
    files = sorted(glob.glob(os.path.join(logs, "*.json")) + glob.glob(os.path.join(logs, "*.log")))
    named = []
    for f in files:
        base = os.path.basename(f)
        if base.startswith(("cupti-", "trace-")):
            continue
        for r in runs_in(f):
            name = f"{os.path.splitext(base)[0]} {r.get('config', '')}".strip()
            named.append((name, r))
            print(row(name, r))
    targets(named)
    if any(n in dict(named) for n in RULE_RUNS[1:]):
        print("\n== the default, by the rule written before the lease")
        print("\n".join(default_rule(dict(named), verdicts(logs))))
    for f in sorted(glob.glob(os.path.join(logs, "cupti-share-*.txt"))):
        print(f"\n== {os.path.basename(f)}: each thread group's share in CUDA calls, top 5 calls")
        left = 0
        memory = False
        for line in open(f, errors="replace").read().splitlines():
            # The memory calls' rows (benches/cupti: what each free freed,
            # who had allocated it); their call stacks stay in the file.
            if line.startswith("== memory calls"):
                memory = True
                print("  " + line.strip())
                continue
            if memory:
                if line.startswith("  ") and not line.startswith("   ") and "call stack" not in line:
                    print("    " + line.strip())
                elif line.startswith("trace events"):
                    memory = False
                continue
            if " threads): " in line:
                print("  " + line.strip())
                left = 5
            elif line.startswith(("any work", "CUPTI", "window:")):
                print("  " + line.strip())
            elif not line.strip():
                left = 0
            elif left and line.startswith("  ") and not line.strip().startswith("call "):
                print("    " + line.strip())
                left -= 1
    for f in sorted(glob.glob(os.path.join(logs, "dmon-share-*.txt"))):
        cols, jpg, sm = None, [], []
        for line in open(f, errors="replace"):
            parts = line.split()
            if line.startswith("#") and "jpg" in parts:
                cols = parts[1:]
            elif cols and parts and not line.startswith("#") and len(parts) >= len(cols):
                # -o T puts the time first, then the columns of the header.
                vals = dict(zip(cols, parts[len(parts) - len(cols):]))
                for key, out in (("jpg", jpg), ("sm", sm)):
                    if vals.get(key, "-").isdigit():
                        out.append(int(vals[key]))
        if jpg:
            print(f"\n== {os.path.basename(f)}: jpg % each second {jpg}; sm % {sm}")


    # The timelines, summed by thread kind and span (trace_summary.py).
    summary = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benches", "trace",
                           "trace_summary.py")
    for f in sorted(glob.glob(os.path.join(logs, "trace-*.json"))):
        print()
        sys.stdout.flush()
        subprocess.run([sys.executable, summary, f], check=False)
        build = build_track(f)
        if build:
            print(f"  build track ({os.path.basename(f)}): " +
                  "; ".join(f"{name} {ms:.0f} ms" for name, ms in build))


def build_track(path):
    """The spans of a timeline's "build" track in order, (name, ms): what
    `build()` spent its time on (trace_summary.py sums a steady-state
    window, which leaves them out)."""
    try:
        data = json.load(open(path))
    except (OSError, ValueError):
        return []
    events = data.get("traceEvents", []) if isinstance(data, dict) else data
    tracks = {(e.get("pid"), e.get("tid")) for e in events
              if e.get("ph") == "M" and e.get("name") == "thread_name"
              and e.get("args", {}).get("name") == "build"}
    spans = [e for e in events if e.get("ph") == "X" and (e.get("pid"), e.get("tid")) in tracks]
    return [(e.get("name", "?"), e.get("dur", 0) / 1000) for e in sorted(spans, key=lambda e: e["ts"])]


if __name__ == "__main__":
    main()
