#!/usr/bin/env python3
"""Combine the peers' JSON lines (NAME<TAB>JSON on stdin) into OUT/peers.json
and print the table with the ratios issue 6 asks for.

    table.py CORES OUT < results
"""
import json
import sys


def main():
    cores, out = int(sys.argv[1]), sys.argv[2]
    rows = []
    for line in sys.stdin:
        if not line.strip():
            continue
        name, js = line.rstrip("\n").split("\t", 1)
        r = json.loads(js)
        rows.append({
            "name": name,
            "img_per_s": r["img_per_s"],
            "img_per_s_per_core": r["img_per_s"] / cores,
            "cpu_s_per_1000_images": r.get("cpu_s_per_1000_images"),
        })
    with open(out + "/peers.json", "w") as f:
        json.dump({"cores": cores, "loaders": rows}, f, indent=1)
    print(f"{'loader':<26}{'img/s':>10}{'img/s/core':>12}{'CPU-s/1k img':>14}")
    for r in rows:
        c = r["cpu_s_per_1000_images"]
        cell = f"{c:>14.2f}" if c is not None else f"{'-':>14}"
        print(f"{r['name']:<26}{r['img_per_s']:>10.1f}{r['img_per_s_per_core']:>12.1f}{cell}")
    by = {r["name"]: r["img_per_s"] for r in rows}
    for a, b in [("gpufeed cpu", "pillow-cpu"), ("gpufeed cuda", "torchvision gpu"),
                 ("gpufeed cuda", "dali")]:
        if a in by and b in by:
            print(f"{a} / {b}: {by[a] / by[b]:.2f}x on {cores} cores")


if __name__ == "__main__":
    main()
