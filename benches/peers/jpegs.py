"""What every peer script reads: the JPEGs under a folder, sorted, the same
set `gpufeed bench` reads, and the command line they share."""
import argparse
import os


def gpu_peer_args(prefetch=False):
    """DATA, --batch, --epochs, --threads, --size of the GPU peers (and
    --prefetch, batches read ahead, where the peer reads for itself)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--size", type=int, default=224)
    if prefetch:
        ap.add_argument("--prefetch", type=int, default=2)
    return ap.parse_args()


def list_jpegs(root):
    return sorted(
        os.path.join(d, f)
        for d, _, fs in os.walk(root)
        for f in fs
        if f.lower().endswith((".jpg", ".jpeg"))
    )
