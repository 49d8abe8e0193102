#!/usr/bin/env python3
"""Peer (b) of issue 6: torchvision's batched GPU JPEG decode followed by
torchvision v2 transforms on the GPU, the same job as `gpufeed bench
--device cuda`: RandomResizedCrop 224 + horizontal flip + normalize to f16
NCHW, batches of BATCH.

Reading: a thread pool reads file bytes (torchvision.io.read_file) PREFETCH
batches ahead (default 2), so that the reads of the next batches overlap
the decoding of this one, as a DataLoader of compressed bytes with workers
and prefetching would (issue 16, item 8; 0: read each batch when it is
due); decode: torchvision.io.decode_jpeg(list, device="cuda") (nvJPEG
batched); augment: v2.RandomResizedCrop per image (sizes differ), stack,
v2.Normalize, cast. The step synchronizes the CUDA stream per batch, like
a consumer would.

Requirements: torch and torchvision with CUDA. Prints one JSON object.
"""
import json
import sys
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import torch
import torchvision
from torchvision.io import decode_jpeg, read_file
from torchvision.transforms import v2

from jpegs import gpu_peer_args, list_jpegs


def read_ahead(pool, files, chunks, depth):
    """Each chunk's file bytes, in order, while the next `depth` chunks are
    being read on `pool` (0: a chunk is read when it is due)."""
    chunks = iter(chunks)
    pending = deque()

    def submit():
        chunk = next(chunks, None)
        if chunk is not None:
            pending.append([pool.submit(read_file, files[j]) for j in chunk])

    for _ in range(depth):
        submit()
    while True:
        submit()
        if not pending:
            return
        reads = pending.popleft()
        yield [r.result() for r in reads]


def main():
    a = gpu_peer_args(prefetch=True)
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
            chunks = [order[i:i + a.batch] for i in range(0, len(order), a.batch)]
            for data in read_ahead(pool, files, chunks, a.prefetch):
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
        "threads": a.threads, "batch": a.batch, "prefetch": a.prefetch, "files": len(files),
        "device": torch.cuda.get_device_name(0),
        "epochs": [{"images": n, "seconds": t} for n, t in epochs],
        "img_per_s": images / sum(t for _, t in steady),
        "cpu_s_per_1000_images": (time.process_time() - cpu0) * 1000 / max(images, 1),
    }))


if __name__ == "__main__":
    main()
