#!/usr/bin/env bash
# NVIDIA DALI for the GPU box, which has no network (issue 16, item 8): the
# wheels DALI needs that the box's image lacks, for its Python 3.12,
# unpacked as `pip install --target` would, trimmed to what Python 3.12
# loads, compressed with xz and cut into parts that each fit one 64 MiB
# transfer beside the working tree.
#
#   scripts/dali-parts.sh [OUT]     # here, where pip reaches the index;
#                                   # OUT defaults to dist/dali (ignored)
#
# 2.4.0 (2026-11-28): 246 MiB of wheels as they come (5 parts); trimmed
# and xz'd, 166 MiB in 3 parts of at most 57 MiB. The trimmed tree
# imports and runs a CPU pipeline (decoders.image_random_crop,
# crop_mirror_normalize) under Python 3.12 without a GPU.
#
# Then, while the GPU machine stays warm (it keeps ignored paths between
# calls), carry one part per call (`carry: ["dist/dali/part-aa",
# "dist/dali/sums"]`, then `["dist/dali/part-ab"]`, then
# `["dist/dali/part-ac"]`): a carried path replaces that path there, so
# each part arrives beside the ones before. Then the call that carries
# the GPU bundle runs `run-gpu-tests.sh dali lease`, which installs them
# first (docs/RELIABILITY.md, "GPU checks still unrun"):
#
#   scripts/dali-parts.sh --install   # joins, checks, unpacks into
#                                     # /tmp/site; export PYTHONPATH=/tmp/site
#
# benches/peers/compare.sh runs the DALI peer whenever `nvidia.dali`
# imports. Which wheels: `nvidia-dali-cuda130` and what its metadata
# requires beyond the box's package list (.library device KINDS.md):
# nvimgcodec with its nvJPEG extension (JPEG 2000 and TIFF left out: the
# peer decodes JPEGs), nvCOMP, and small pure-Python or cp312 helpers.
set -euo pipefail
cd "$(dirname "$0")/.."
out=dist/dali
install=
for a in "$@"; do
  case $a in
    --install) install=1 ;;
    *) out=$a ;;
  esac
done

if [ -n "$install" ]; then
  cd "$out"
  cat part-?? > dali.tar.xz
  sha256sum -c sums
  rm -rf /tmp/site && mkdir -p /tmp/site
  xz -dc dali.tar.xz | tar xf - -C /tmp/site
  rm dali.tar.xz
  PYTHONPATH=/tmp/site python3 -c "import nvidia.dali as d; print('DALI', d.__version__)"
  exit
fi

wheels=$out/wheels
rm -rf "$out"
mkdir -p "$wheels"
fetch() {
  python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$wheels" "$@"
}
fetch nvidia-dali-cuda130==2.4.0 "nvidia-nvimgcodec-cu13>=0.9,<0.10" \
  nvidia-libnvcomp-cu13==5.3.0.16 nvidia-nvjpeg==13.0.1.86 \
  "astunparse>=1.6,<=1.6.3" "gast>=0.3.3,<=0.7.0" optree nvtx makefun "libcst~=1.8"
# Unpacked as `pip install --target` lays them out (no scripts to
# generate here), then trimmed: the other Pythons' extension modules,
# headers, nvCOMP's command-line tools and libcst's tests.
site=$out/site
mkdir -p "$site"
for w in "$wheels"/*.whl; do
  python3 -m zipfile -e "$w" "$site"
done
find "$site" -name '*.cpython-3*-x86_64-linux-gnu.so' ! -name '*.cpython-312-*' -delete
rm -rf "$site"/nvidia/libnvcomp/bin "$site"/nvidia/libnvcomp/include \
  "$site"/nvidia/nvimgcodec/include "$site"/libcst/tests "$site"/libcst/*/tests
tar cf - -C "$site" . | xz -T0 -6 > "$out/dali.tar.xz"
(cd "$out" && sha256sum dali.tar.xz > sums &&
  split -b 57M dali.tar.xz part- && rm dali.tar.xz)
rm -rf "$wheels" "$site"
ls -l "$out"
