#!/usr/bin/env bash
# One command: gpufeed and every peer available on this machine, on the same
# folder and cores, one after the other (issue 6). Writes OUT/peers.json,
# prints the table, and draws OUT/peers.png.
#
#   benches/peers/compare.sh [DATA] [EPOCHS] [OUT]
#
# Always: gpufeed's CPU backend and the Pillow/torchvision CPU pipeline
# (DataLoader-style worker processes), batch 64, antialiased resize.
# With a CUDA GPU: gpufeed --device cuda, torchvision's GPU decode + v2
# transforms (needs torch+torchvision with CUDA), and DALI when nvidia.dali
# imports; all at batch 256, 224x224, f16 NCHW, RandomResizedCrop + flip.
# Needs: python3 with pillow and numpy.
set -euo pipefail
cd "$(dirname "$0")/../.."
data=${1:-../shared/testdata/photos/imagenet-size}
epochs=${2:-5}
out=${3:-target/peers}
mkdir -p "$out"
cores=$(nproc)
# DALI carried in parts and installed there (scripts/dali-parts.sh --install).
if [ -d /tmp/site/nvidia/dali ]; then export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}; fi
if [ -x dist/gpu/bin/gpufeed ] && ! command -v cargo >/dev/null; then
  gpufeed=dist/gpu/bin/gpufeed   # the GPU bundle on a machine without Rust
else
  cargo build --release --locked --bin gpufeed >/dev/null
  gpufeed=target/release/gpufeed
fi
results=()
run() { # name, command... (JSON on stdout); a peer that fails is reported and skipped
  local name=$1; shift
  local log="$out/${name// /-}.err"
  echo "== $name" >&2
  if r=$("$@" 2>"$log"); then results+=("$name	${r//$'\n'/ }")
  else echo "   skipped: $(tail -1 "$log")" >&2; fi
}
# gpufeed antialiases by default; Pillow's resize with a box antialiases too,
# so both filter alike.
run "gpufeed cpu" "$gpufeed" bench "$data" --device cpu --epochs "$epochs" --batch 64 \
  --workers "$cores" --json
run "pillow-cpu" python3 benches/peers/pillow_pipeline.py "$data" \
  --workers "$cores" --batch 64 --epochs "$epochs"
if nvidia-smi -L >/dev/null 2>&1; then
  run "gpufeed cuda" "$gpufeed" bench "$data" --device cuda:0 --epochs "$epochs" --batch 256 \
    --dtype f16 --workers "$cores" --json
  run "torchvision gpu" python3 benches/peers/torchvision_gpu.py "$data" --batch 256 \
    --epochs "$epochs" --threads "$cores"
  run "dali" python3 benches/peers/dali_pipeline.py "$data" --batch 256 --epochs "$epochs" \
    --threads "$cores"
fi
printf '%s\n' "${results[@]}" | python3 benches/peers/table.py "$cores" "$out"
python3 benches/peers/chart.py "$out/peers.json" "$out/peers.png" && echo "chart: $out/peers.png"
