#!/usr/bin/env python3
"""Peer (c) of issue 6: NVIDIA DALI's standard ImageNet training pipeline,
the same job as `gpufeed bench --device cuda`: file reader ->
decoders.image_random_crop (device "mixed": nvJPEG, hardware engine where
present) -> resize 224 -> crop_mirror_normalize (flip with p 0.5, ImageNet
mean/std, f16, CHW), batches of BATCH on NUM_THREADS CPU threads.

Requirements: nvidia-dali-cuda120 (or -cuda130). Prints one JSON object.
"""
import json
import sys
import time

from jpegs import gpu_peer_args, list_jpegs

try:
    from nvidia.dali import fn, pipeline_def, types
except ImportError:
    sys.exit("dali_pipeline: nvidia.dali is not installed")


def main():
    a = gpu_peer_args()
    files = list_jpegs(a.data)

    @pipeline_def(batch_size=a.batch, num_threads=a.threads, device_id=0, seed=0)
    def pipe():
        jpegs, labels = fn.readers.file(files=files, random_shuffle=True, name="reader")
        images = fn.decoders.image_random_crop(jpegs, device="mixed", output_type=types.RGB)
        images = fn.resize(images, resize_x=a.size, resize_y=a.size)
        images = fn.crop_mirror_normalize(
            images,
            dtype=types.FLOAT16,
            output_layout="CHW",
            mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
            std=[0.229 * 255, 0.224 * 255, 0.225 * 255],
            mirror=fn.random.coin_flip(probability=0.5),
        )
        return images, labels

    p = pipe()
    p.build()
    per_epoch = (len(files) + a.batch - 1) // a.batch
    cpu0 = time.process_time()
    epochs = []
    for e in range(a.epochs):
        if e == 1:
            cpu0 = time.process_time()
        t0 = time.perf_counter()
        n = 0
        for _ in range(per_epoch):
            images, _ = p.run()
            images.as_tensor()  # waits for the batch
            n += len(images)
        epochs.append((n, time.perf_counter() - t0))
    steady = epochs[1:] or epochs
    images = sum(n for n, _ in steady)
    print(json.dumps({
        "loader": "DALI", "threads": a.threads, "batch": a.batch, "files": len(files),
        "epochs": [{"images": n, "seconds": t} for n, t in epochs],
        "img_per_s": images / sum(t for _, t in steady),
        "cpu_s_per_1000_images": (time.process_time() - cpu0) * 1000 / max(images, 1),
    }))


if __name__ == "__main__":
    main()
