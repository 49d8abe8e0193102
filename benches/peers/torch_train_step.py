#!/usr/bin/env python3
"""gpufeed and the torch DataLoader through the same tiny model step
(issue 17): the comparison includes the hand-off to the framework
(torch.from_dlpack for gpufeed; pinned host batches copied to the device
for the DataLoader), not only the loader.

    python3 benches/peers/torch_train_step.py DATA [--device cuda|cpu]
        [--batch 256] [--epochs 3] [--workers N] [--size 224]

Needs torch and torchvision, and the gpufeed wheel (`maturin build` in
python/, then pip install it). Prints one JSON line per loader: img/s over
the epochs after the first, and the final loss.
"""
import argparse
import json
import os
import time

import torch
import torch.nn as nn


def model(classes, dev):
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, classes),
    ).to(dev)


def run(name, batches, classes, dev, epochs, dtype):
    net = model(classes, dev)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    rates, loss = [], float("nan")
    for epoch in range(epochs):
        t0, n = time.perf_counter(), 0
        for x, y in batches(epoch):
            with torch.autocast(dev.type, dtype=dtype, enabled=dev.type == "cuda"):
                out = net(x)
                l = nn.functional.cross_entropy(out.float(), y)
            opt.zero_grad(set_to_none=True)
            l.backward()
            opt.step()
            n += len(y)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        loss = float(l)
        rates.append(n / (time.perf_counter() - t0))
    steady = rates[1:] or rates
    print(json.dumps({"loader": name, "img_per_s": sum(steady) / len(steady),
                      "epochs_img_per_s": rates, "final_loss": loss}), flush=True)


def main():
    a = argparse.ArgumentParser()
    a.add_argument("data")
    a.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a.add_argument("--batch", type=int, default=256)
    a.add_argument("--epochs", type=int, default=3)
    a.add_argument("--workers", type=int, default=os.cpu_count())
    a.add_argument("--size", type=int, default=224)
    args = a.parse_args()
    dev = torch.device(args.device)
    half = dev.type == "cuda"

    import gpufeed
    p = gpufeed.Pipeline(args.data, batch_size=args.batch, size=args.size,
                         dtype="float16" if half else "float32", workers=args.workers,
                         device="cuda:0" if half else "cpu")
    classes = len([d for d in os.scandir(args.data) if d.is_dir()]) or 1

    def gpufeed_batches(epoch):
        for images, labels in p.epoch(epoch):
            yield torch.from_dlpack(images), torch.from_dlpack(labels).long().to(dev)

    run("gpufeed", gpufeed_batches, classes, dev, args.epochs, torch.float16)
    p.close()

    from torchvision import datasets
    from torchvision.transforms import v2
    tf = v2.Compose([
        v2.ToImage(), v2.RandomResizedCrop(args.size, antialias=True),
        v2.RandomHorizontalFlip(), v2.ToDtype(torch.float32, scale=True),
        v2.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
    ])
    loader = torch.utils.data.DataLoader(
        datasets.ImageFolder(args.data, transform=tf), batch_size=args.batch,
        shuffle=True, num_workers=args.workers, pin_memory=half,
        persistent_workers=args.workers > 0)

    def torch_batches(epoch):
        for x, y in loader:
            yield x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)

    run("torch DataLoader", torch_batches, classes, dev, args.epochs, torch.float16)


if __name__ == "__main__":
    main()
