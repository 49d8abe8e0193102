#!/usr/bin/env bash
# A CUDA toolkit (nvcc, NVVM, CCCL and runtime headers, libcudart) made of
# NVIDIA's pip wheels, for builds that compile CUDA sources ahead of time:
# candle's CUDA backend (feature `candle-cuda`) builds its kernels with
# nvcc. gpufeed's own kernels need none of this (NVRTC at run time).
#
#   scripts/cuda-root.sh DIR      # then:
#   PATH=DIR/bin:$PATH CUDA_ROOT=DIR CUDA_COMPUTE_CAP=90 cargo build --features candle-cuda
#
# CUDA_COMPUTE_CAP: the GPU's compute capability (90 for H100/H200); the
# build machine needs no GPU.
set -euo pipefail
dir=${1:?usage: scripts/cuda-root.sh DIR}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --disable-pip-version-check --no-deps -d "$tmp/wheels" \
  nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88 \
  nvidia-cuda-cccl==13.0.85 nvidia-cuda-runtime==13.0.96
mkdir -p "$dir" "$tmp/x"
for w in "$tmp"/wheels/*.whl; do
  python3 -m zipfile -e "$w" "$tmp/x"
done
cp -r "$tmp"/x/nvidia/cu13/. "$dir"/
mkdir -p "$dir/lib64"
cp -r "$dir"/lib/. "$dir/lib64"/
# Made now, filled by scripts/cuda-link-stubs.sh once the rlibs are built:
# cudarc's build script only gives the linker folders that exist when it
# runs.
mkdir -p "$dir/lib64/stubs"
chmod +x "$dir"/bin/* "$dir"/nvvm/bin/* 2>/dev/null || true
"$dir/bin/nvcc" --version | tail -1
