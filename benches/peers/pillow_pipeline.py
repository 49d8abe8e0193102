#!/usr/bin/env python3
"""The classic PyTorch-style CPU input pipeline, as a peer baseline for
`gpufeed bench --device cpu` (issue 6).

Per image, in N worker processes: Pillow decode -> RGB -> RandomResizedCrop
(torchvision's sampling: scale (0.08, 1), ratio (3/4, 4/3), 10 attempts,
centre-crop fallback) -> resize to SIZE (Pillow BILINEAR, which antialiases
like torchvision's PIL path) -> random horizontal flip -> ToTensor (/255,
HWC -> CHW float32) -> Normalize (ImageNet mean/std); batches are stacked in
the parent like DataLoader's default collate. torchvision is used when it is
installed (its RandomResizedCrop/ToTensor/Normalize), otherwise the same
operations in Pillow + NumPy.

Requirements: pillow, numpy (and optionally torch + torchvision).
Prints one JSON object: img/s over the epochs after the first.
"""
import argparse
import json
import math
import os
import random
import resource
import sys
import time
from multiprocessing import Pool

import numpy as np
from PIL import Image

from jpegs import list_jpegs

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32).reshape(3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32).reshape(3, 1, 1)

try:  # pragma: no cover - depends on the machine
    import torch  # noqa: F401
    from torchvision import transforms as T

    TV = T.Compose([
        T.RandomResizedCrop(224),
        T.RandomHorizontalFlip(),
        T.ToTensor(),
        T.Normalize(MEAN.reshape(3).tolist(), STD.reshape(3).tolist()),
    ])
except Exception:
    TV = None

SIZE = 224


def rrc_params(w, h, rng, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    area = w * h
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target = area * rng.uniform(*scale)
        aspect = math.exp(rng.uniform(*log_ratio))
        cw = int(round(math.sqrt(target * aspect)))
        ch = int(round(math.sqrt(target / aspect)))
        if 0 < cw <= w and 0 < ch <= h:
            return rng.randint(0, w - cw), rng.randint(0, h - ch), cw, ch
    in_ratio = w / h
    if in_ratio < min(ratio):
        cw, ch = w, int(round(w / min(ratio)))
    elif in_ratio > max(ratio):
        cw, ch = int(round(h * max(ratio))), h
    else:
        cw, ch = w, h
    return (w - cw) // 2, (h - ch) // 2, cw, ch


def load(args):
    path, seed = args
    img = Image.open(path).convert("RGB")
    if TV is not None:
        return TV(img).numpy()
    rng = random.Random(seed)
    x, y, cw, ch = rrc_params(img.width, img.height, rng)
    img = img.resize((SIZE, SIZE), Image.BILINEAR, box=(x, y, x + cw, y + ch))
    if rng.random() < 0.5:
        img = img.transpose(Image.FLIP_LEFT_RIGHT)
    a = np.asarray(img, dtype=np.float32).transpose(2, 0, 1) / 255.0
    return (a - MEAN) / STD


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=3)
    a = ap.parse_args()
    files = list_jpegs(a.data)
    if not files:
        sys.exit(f"no JPEGs under {a.data}")
    epochs = []
    with Pool(a.workers) as pool:
        for e in range(a.epochs):
            order = list(range(len(files)))
            random.Random(e).shuffle(order)
            t0 = time.perf_counter()
            n = 0
            for i in range(0, len(order), a.batch):
                chunk = [(files[j], e * 1_000_003 + j) for j in order[i:i + a.batch]]
                batch = np.stack(pool.map(load, chunk, chunksize=4))
                n += batch.shape[0]
            epochs.append((n, time.perf_counter() - t0))
    steady = epochs[1:] or epochs
    img_s = sum(n for n, _ in steady) / sum(t for _, t in steady)
    # Worker processes are counted once they have exited (the pool is
    # closed here), so this covers every epoch, warm-up included.
    cpu = sum(
        u.ru_utime + u.ru_stime
        for u in (resource.getrusage(resource.RUSAGE_SELF),
                  resource.getrusage(resource.RUSAGE_CHILDREN))
    )
    print(json.dumps({
        "loader": "torchvision" if TV is not None else "pillow+numpy",
        "workers": a.workers, "batch": a.batch, "files": len(files),
        "epochs": [{"images": n, "seconds": t} for n, t in epochs],
        "img_per_s": img_s,
        "cpu_s_per_1000_images": cpu * 1000 / sum(n for n, _ in epochs),
    }))


if __name__ == "__main__":
    main()
