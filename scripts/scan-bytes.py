#!/usr/bin/env python3
"""Where a progressive photo's entropy-coded bytes lie, scan by scan.

    python3 scripts/scan-bytes.py DIR [DIR ...]

For each folder, over its progressive JPEGs (SOF2): how many there are,
in how many the longest scan is an AC refinement scan (Ah > 0), that
scan's share of the file's scan bytes, and the AC refinement scans' share
in all. The scan kernels decode a component's AC scans as one chain, its
scans in a pipeline (kernels/progressive.cu), so a chain lasts about its
longest scan; split decoding (one thread per 256 bytes) needs to know
which block a guessed bit position is in for a refinement scan, whose
symbols' meaning depends on the block's earlier coefficients (T.81
G.1.2.3). docs/BENCHMARKS.md, "Progressive photos' scans", quotes this.
Standard library only.
"""

import os
import statistics
import struct
import sys


def scans(data):
    """(SOF marker, [(ss, se, ah, al, bytes)]) of the file's scans."""
    i, out, sof = 2, [], None
    while i + 4 <= len(data):
        if data[i] != 0xFF:
            return sof, out
        m = data[i + 1]
        if m == 0xFF:
            i += 1
            continue
        if m in (0xD8, 0x01) or 0xD0 <= m <= 0xD7:
            i += 2
            continue
        if m == 0xD9:
            break
        length = struct.unpack(">H", data[i + 2 : i + 4])[0]
        if 0xC0 <= m <= 0xCF and m not in (0xC4, 0xC8, 0xCC):
            sof = m
        if m != 0xDA:
            i += 2 + length
            continue
        ns = data[i + 4]
        ss, se, a = data[i + 5 + 2 * ns : i + 8 + 2 * ns]
        start = k = i + 2 + length
        # The segment ends at the first marker other than a stuffed 0 or RSTn.
        while k + 1 < len(data) and not (
            data[k] == 0xFF and data[k + 1] != 0 and not 0xD0 <= data[k + 1] <= 0xD7
        ):
            k += 1
        out.append((ss, se, a >> 4, a & 15, k - start))
        i = k
    return sof, out


def main(dirs):
    for d in dirs:
        longest_refine, share, refine = 0, [], []
        for name in sorted(os.listdir(d)):
            with open(os.path.join(d, name), "rb") as f:
                sof, sc = scans(f.read())
            total = sum(s[-1] for s in sc)
            if sof != 0xC2 or total == 0:
                continue
            big = max(sc, key=lambda s: s[-1])
            longest_refine += big[0] > 0 and big[2] > 0
            share.append(big[-1] / total)
            refine.append(sum(s[-1] for s in sc if s[0] > 0 and s[2] > 0) / total)
        if not share:
            print(f"{d}: no progressive files")
            continue
        print(
            f"{d}: {len(share)} progressive files; the longest scan an AC refinement in "
            f"{longest_refine}; its share of the scan bytes median {statistics.median(share):.2f} "
            f"(min {min(share):.2f}, max {max(share):.2f}); AC refinement scans' share median "
            f"{statistics.median(refine):.2f}"
        )


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
