#!/usr/bin/env python3
"""Digest a GPU run's logs (run-gpu-tests.sh's OUT_LOGS, or its logs.tgz
unpacked) into one screen per part: the steps' verdicts, every bench run
and sweep with the columns issue 16 reads (img/s, CPU-ms per image by
thread, nvJPEG's driver allocations and pinned-buffer waits in the steady
epochs, the limit), the CUPTI summaries' thread groups, and nvidia-smi's
load of the hardware JPEG engine, and each timeline's spans summed
(benches/trace/trace_summary.py).

    scripts/gpu-report.py LOGS
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


def main():
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
    for f in files:
        base = os.path.basename(f)
        if base.startswith(("cupti-", "trace-")):
            continue
        for r in runs_in(f):
            print(row(f"{os.path.splitext(base)[0]} {r.get('config', '')}".strip(), r))
    for f in sorted(glob.glob(os.path.join(logs, "cupti-share-*.txt"))):
        print(f"\n== {os.path.basename(f)}: each thread group's share in CUDA calls, top 5 calls")
        left = 0
        for line in open(f, errors="replace").read().splitlines():
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


if __name__ == "__main__":
    main()
