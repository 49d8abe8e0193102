#!/usr/bin/env bash
# NVIDIA DALI for the GPU box, which has no network (issue 16, item 8): the
# wheels DALI needs that the box's image lacks, for its Python 3.12, in
# parts that each fit one 64 MiB transfer beside the working tree.
#
#   scripts/dali-parts.sh [OUT]     # here, where pip reaches the index;
#                                   # OUT defaults to dist/dali (ignored)
#
# Then, while the GPU machine stays warm (it keeps ignored paths between
# calls), carry one part per call (`carry: ["dist/dali/part-aa",
# "dist/dali/sums"]`, then `["dist/dali/part-ab"]` and so on, with a
# command as short as `true`): a carried path replaces that path there, so
# each part arrives beside the ones before. In the last call:
#
#   scripts/dali-parts.sh --install   # joins, checks, pip installs into
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
  cat part-?? > dali.tar
  sha256sum -c sums
  rm -rf wheels && mkdir wheels && tar xf dali.tar -C wheels
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site wheels/*.whl
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
# Wheels are zip files already; tar keeps them whole, split cuts the tar.
tar cf "$out/dali.tar" -C "$wheels" .
(cd "$out" && sha256sum dali.tar > sums && split -b 56M dali.tar part- && rm dali.tar)
rm -rf "$wheels"
ls -l "$out"
