#!/usr/bin/env bash
# gpufeed's CPU backend and the Pillow pipeline on the same folder with the
# same number of cores, one after the other; prints both and the ratio.
#   benches/peers/compare_cpu.sh [DATA] [EPOCHS]
# Needs: pip install pillow numpy (torch/torchvision used if present).
set -euo pipefail
cd "$(dirname "$0")/../.."
data=${1:-../shared/testdata/photos/imagenet-size}
epochs=${2:-5}
cores=$(nproc)
cargo build --release --locked --bin gpufeed >/dev/null
# --antialias: Pillow's resize with a box antialiases too, so both filter alike.
g=$(target/release/gpufeed bench "$data" --device cpu --epochs "$epochs" --batch 64 --antialias \
      --workers "$cores" --json 2>/dev/null)
p=$(python3 benches/peers/pillow_pipeline.py "$data" --workers "$cores" --batch 64 --epochs "$epochs")
python3 - "$g" "$p" "$cores" <<'PY'
import json, sys
g, p, cores = json.loads(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3])
print(f"{'loader':<28}{'img/s':>10}{'img/s/core':>12}")
print(f"{'gpufeed cpu (zune, aa)':<28}{g['img_per_s']:>10.1f}{g['img_per_s']/cores:>12.1f}")
print(f"{p['loader'] + ' (' + str(p['workers']) + ' proc)':<28}{p['img_per_s']:>10.1f}{p['img_per_s']/cores:>12.1f}")
print(f"ratio gpufeed / {p['loader']}: {g['img_per_s'] / p['img_per_s']:.2f}x on {cores} cores")
PY
