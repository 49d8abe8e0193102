"""What every peer script reads: the JPEGs under a folder, sorted, the same
set `gpufeed bench` reads."""
import os


def list_jpegs(root):
    return sorted(
        os.path.join(d, f)
        for d, _, fs in os.walk(root)
        for f in fs
        if f.lower().endswith((".jpg", ".jpeg"))
    )
