#!/usr/bin/env python3
"""Golden outputs for the CPU augment reference (src/augment/cpu.rs tests).

Computed independently of gpufeed:
  * antialiased shrink: Pillow's Image.resize(..., BILINEAR) with
    reducing_gap=None, which is the triangle filter torchvision's
    antialias=True reproduces (uint8, PIL rounds between its two passes);
  * bilinear (no antialias): a NumPy transcription of PyTorch's
    upsample_bilinear2d(align_corners=False) index arithmetic;
  * a crop then resize: torchvision's RandomResizedCrop output for a fixed
    window = crop with NumPy slicing, then the same two resizes.

Input: a 13x9 RGB image, pixel (x, y, c) = (x*37 + y*91 + c*53 + x*y*7) % 256,
chosen to be far from smooth so that any difference in taps or weights shows.

Run: pip install pillow numpy && python3 make_golden.py > resize.json
"""
import json

import numpy as np
from PIL import Image

W, H = 13, 9
img = np.array(
    [[[(x * 37 + y * 91 + c * 53 + x * y * 7) % 256 for c in range(3)] for x in range(W)]
     for y in range(H)],
    dtype=np.uint8,
)


def bilinear(src, out_w, out_h):
    """PyTorch upsample_bilinear2d, align_corners=False, float math."""
    h, w = src.shape[:2]
    src = src.astype(np.float64)

    def taps(out, n):
        scale = n / out
        res = []
        for o in range(out):
            s = max((o + 0.5) * scale - 0.5, 0.0)
            i0 = min(int(np.floor(s)), n - 1)
            i1 = min(i0 + 1, n - 1)
            res.append((i0, i1, s - i0))
        return res

    out = np.zeros((out_h, out_w, 3))
    for oy, (y0, y1, fy) in enumerate(taps(out_h, h)):
        for ox, (x0, x1, fx) in enumerate(taps(out_w, w)):
            top = src[y0, x0] * (1 - fx) + src[y0, x1] * fx
            bot = src[y1, x0] * (1 - fx) + src[y1, x1] * fx
            out[oy, ox] = top * (1 - fy) + bot * fy
    return out


def pil_aa(src, out_w, out_h):
    return np.asarray(
        Image.fromarray(src).resize((out_w, out_h), Image.BILINEAR, reducing_gap=None)
    ).astype(np.float64)


crop = (2, 1, 10, 7)  # x, y, w, h
cx, cy, cw, ch = crop
cropped = np.ascontiguousarray(img[cy:cy + ch, cx:cx + cw])

cases = [
    {"name": "aa_shrink_13x9_to_5x4", "crop": [0, 0, W, H], "out": [5, 4], "antialias": True,
     "tolerance": 1.0, "expected": pil_aa(img, 5, 4)},
    {"name": "aa_shrink_13x9_to_3x7", "crop": [0, 0, W, H], "out": [3, 7], "antialias": True,
     "tolerance": 1.0, "expected": pil_aa(img, 3, 7)},
    {"name": "bilinear_13x9_to_20x15", "crop": [0, 0, W, H], "out": [20, 15], "antialias": False,
     "tolerance": 1e-3, "expected": bilinear(img, 20, 15)},
    {"name": "bilinear_13x9_to_4x3", "crop": [0, 0, W, H], "out": [4, 3], "antialias": False,
     "tolerance": 1e-3, "expected": bilinear(img, 4, 3)},
    {"name": "crop_then_bilinear_to_8x8", "crop": list(crop), "out": [8, 8], "antialias": False,
     "tolerance": 1e-3, "expected": bilinear(cropped, 8, 8)},
    {"name": "crop_then_aa_to_4x3", "crop": list(crop), "out": [4, 3], "antialias": True,
     "tolerance": 1.0, "expected": pil_aa(cropped, 4, 3)},
]
for case in cases:
    case["expected"] = [round(float(v), 4) for v in case["expected"].reshape(-1)]  # HWC
print(json.dumps({"width": W, "height": H, "pixels": img.reshape(-1).tolist(), "cases": cases}))
