#!/usr/bin/env python3
"""Peer (b) of issue 6: torchvision's batched GPU JPEG decode followed by
torchvision v2 transforms on the GPU, the same job as `gpufeed bench
--device cuda`: RandomResizedCrop 224 + horizontal flip + normalize to f16
NCHW, batches of BATCH.

Reading: a thread pool reads file bytes (torchvision.io.read_file); decode:
torchvision.io.decode_jpeg(list, device="cuda") (nvJPEG batched); augment:
v2.RandomResizedCrop per image (sizes differ), stack, v2.Normalize, cast.
The step synchronizes the CUDA stream per batch, like a consumer would.

Requirements: torch and torchvision with CUDA. Prints one JSON object.
"""
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import torch
import torchvision
from torchvision.io import decode_jpeg, read_file
from torchvision.transforms import v2

from jpegs import gpu_peer_args, list_jpegs


def main():
    a = gpu_peer_args()
    if not torch.cuda.is_available():
        sys.exit("torchvision_gpu: no CUDA device")
    files = list_jpegs(a.data)
    rrc = v2.Compose([v2.RandomResizedCrop(a.size, antialias=True), v2.RandomHorizontalFlip()])
    norm = v2.Normalize([0.485 * 255, 0.456 * 255, 0.406 * 255], [0.229 * 255, 0.224 * 255, 0.225 * 255])
    cpu0 = time.process_time()
    epochs = []
    with ThreadPoolExecutor(a.threads) as pool:
        for e in range(a.epochs):
            g = torch.Generator().manual_seed(e)
            order = torch.randperm(len(files), generator=g).tolist()
            t0 = time.perf_counter()
            if e == 1:
                cpu0 = time.process_time()
            n = 0
            for i in range(0, len(order), a.batch):
                data = list(pool.map(read_file, [files[j] for j in order[i:i + a.batch]]))
                imgs = decode_jpeg(data, device="cuda", mode=torchvision.io.ImageReadMode.RGB)
                batch = torch.stack([rrc(x) for x in imgs]).float()
                batch = norm(batch).half()
                torch.cuda.current_stream().synchronize()
                n += batch.shape[0]
            epochs.append((n, time.perf_counter() - t0))
    steady = epochs[1:] or epochs
    images = sum(n for n, _ in steady)
    print(json.dumps({
        "loader": "torchvision GPU decode + v2",
        "threads": a.threads, "batch": a.batch, "files": len(files),
        "device": torch.cuda.get_device_name(0),
        "epochs": [{"images": n, "seconds": t} for n, t in epochs],
        "img_per_s": images / sum(t for _, t in steady),
        "cpu_s_per_1000_images": (time.process_time() - cpu0) * 1000 / max(images, 1),
    }))


if __name__ == "__main__":
    main()
