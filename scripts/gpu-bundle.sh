#!/usr/bin/env bash
# Build everything a CUDA machine without a Rust toolchain needs to run the
# GPU checks: the release test binaries, the CLI, and a runner script.
#
#   scripts/gpu-bundle.sh [OUT] [--corpus DIR [--fuzz] [--full] [--no-tricky] [--parts]]
#                         [--pack] [--candle] [--wheel]
#   (default OUT: dist/gpu, git-ignored)
#   # copy OUT to the CUDA box (x86-64 Linux), then there, from a checkout:
#   OUT/run-gpu-tests.sh [tests|sanitize|bench|peers|all] [-- DATA]
#
# --corpus copies a trimmed shared corpus (DIR: ../shared/testdata) into
# OUT/corpus, which the runner then uses; --fuzz adds its fuzz/ folder
# (26 MB), --full photos/full (29 MB, issue 20's second bench set);
# --no-tricky leaves tricky/ out (23 MB; the runner's unrun phase needs
# none of it).
# --parts splits the corpus so that each of issue 20's two calls carries
# what it needs within 64 MiB: OUT/corpus holds photos/imagenet-size
# only; OUT-robust/corpus-extra.tar.xz tricky/ (trimmed as below) and
# fuzz/ (23 MB packed: the fuzz seeds compress); OUT-full/photos/full
# (29 MB). The runner merges the parts it finds beside the bundle into
# OUT/corpus, so `checks` carries OUT and OUT-robust (the whole corpus
# through the routes, which the bundle without --parts could not hold
# beside photos/full), `numbers` OUT and OUT-full. It implies --fuzz and
# --full, and keeps tricky/.
# --pack leaves the binaries as OUT/bin.tar.xz (a third of their size), to
# unpack there with `tar xJf OUT/bin.tar.xz -C OUT`. The device tool
# carries 64 MiB: the corpus with fuzz/ fits only so (56 MB on
# 2026-11-26), and --full goes without --fuzz (with --candle, --wheel
# and --no-tricky: 57 MB).
# --candle adds the candle CUDA tests and the training example (issue
# 17; candle's CUDA kernels take more than 10 minutes to compile on a
# fresh 2-core checkout: build without it first when a lease waits),
# built with a toolkit of NVIDIA's wheels (scripts/cuda-root.sh, in
# target/cuda-root) and linked against stubs (scripts/cuda-link-stubs.sh);
# on the GPU box they load the toolkit's real libcublas, libcurand and the
# driver (88 MB stripped; with --pack, 15 MB in all on 2026-11-26).
# --wheel builds the Python wheel (release) into OUT/wheel, for the
# runner's torch steps (issue 17). The runner (scripts/run-gpu-tests.sh)
# sets GPUFEED_REQUIRE_GPU=1 (a skipped GPU test fails) and gives every
# step a time limit; see its header.
set -euo pipefail
cd "$(dirname "$0")/.."
out=dist/gpu
corpus=
fuzz=
pack=
candle=
full=
wheel=
tricky=1
parts=
while [ $# -gt 0 ]; do
  case $1 in
    --corpus) corpus=$(cd "$2" && pwd); shift ;;
    --fuzz) fuzz=1 ;;
    --pack) pack=1 ;;
    --candle) candle=1 ;;
    --full) full=1 ;;
    --wheel) wheel=1 ;;
    --no-tricky) tricky= ;;
    --parts) parts=1 ;;
    *) out=$1 ;;
  esac
  shift
done
# What the binaries are built from: HEAD and the built files' changes
# against it, read again at the end (COMMIT below).
built=(src kernels tests examples benches/cupti build.rs Cargo.toml Cargo.lock python/src python/Cargo.toml)
source_state() { git rev-parse HEAD; git diff HEAD -- "${built[@]}" | sha256sum; }
state0=$(source_state)
# What a fresh checkout lacks (session 37 lost a build to it): cmake and
# nasm for the turbojpeg build of the progressive test, maturin for the
# wheel; installed as CI installs them (.ci/run).
need=()
command -v cmake >/dev/null || need+=(cmake)
command -v nasm >/dev/null || need+=(nasm)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && apt-get install -y -qq "${need[@]}" >/dev/null
fi
if [ -n "$wheel" ] && ! command -v maturin >/dev/null; then
  python3 -m pip install --quiet --disable-pip-version-check maturin==1.16.0
fi
rm -rf "$out"
mkdir -p "$out/bin"

cargo build --release --locked --bin gpufeed
cp target/release/gpufeed "$out/bin/"

# Copy the test executable NAME, found in cargo's JSON messages on stdin,
# to DEST.
copy_test() {
  python3 -c '
import json, sys, shutil
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == sys.argv[1]:
        shutil.copy(m["executable"], sys.argv[2])
' "$1" "$2"
}

# Test executables that hold GPU or NVRTC tests (the others are CPU-only and
# run in CI), found from cargo's JSON messages.
cargo test --release --locked --no-run --lib --test kernels --test kernel_device --test nvjpeg --test device_stage --test auto_share --test nvjpeg_decode --test corpus --test shutdown --test memory --test interop --test faults --message-format=json 2>/dev/null |
  python3 -c '
import json, sys, shutil, os
out = sys.argv[1]
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        name = m["target"]["name"]
        kind = m["target"]["kind"][0]
        dst = os.path.join(out, "bin", ("unit-" if kind == "lib" else "test-") + name)
        shutil.copy(m["executable"], dst)
        print(dst)
' "$out"

# The scan kernels against libjpeg-turbo's coefficients and pixels, and
# their routes through a pipeline: these tests need the turbojpeg feature
# (libjpeg-turbo is built from source).
scan_tests=$(cargo test --release --locked --no-run --features turbojpeg --test progressive \
  --test kernel_routes --message-format=json 2>/dev/null)
copy_test progressive "$out/bin/test-progressive" <<<"$scan_tests"
copy_test kernel_routes "$out/bin/test-kernel_routes" <<<"$scan_tests"
# That build relinked target/release/gpufeed with the feature: link the
# plain CLI again, as the bundle's copy above is.
cargo build --release --locked --bin gpufeed

if [ -n "$candle" ]; then
  [ -x target/cuda-root/bin/nvcc ] || scripts/cuda-root.sh target/cuda-root
  (
    export PATH="$PWD/target/cuda-root/bin:$PATH" CUDA_ROOT="$PWD/target/cuda-root" CUDA_COMPUTE_CAP=90
    features=candle-cuda,candle-example
    # The rlibs for the test and the example (their dev-dependencies change
    # getrandom's features, and with them candle's: built for the library
    # alone, candle compiled twice); the links wait for the stubs.
    cargo build --release --locked --keep-going --features $features \
      --test candle_cuda --example train_candle >target/candle-cuda-rlibs.log 2>&1 ||
      echo "(links failed before the stubs, as expected: target/candle-cuda-rlibs.log)"
    scripts/cuda-link-stubs.sh target/cuda-root target
    cargo build --release --locked --features $features --example train_candle
    cp target/release/examples/train_candle "$out/bin/"
    cargo test --release --locked --no-run --features $features --test candle_cuda \
      --message-format=json 2>/dev/null | copy_test candle_cuda "$out/bin/test-candle_cuda"
  )
  # The candle test build relinked target/release/gpufeed with candle-cuda
  # (it then needs libcudart to start): link the plain CLI again, as the
  # bundle's copy above is.
  cargo build --release --locked --bin gpufeed
fi

# Symbols are dead weight on the CUDA box (the device tool carries 64 MiB).
strip "$out"/bin/* 2>/dev/null || true
# The CUPTI tracer (benches/cupti) for the runner's cupti steps, with
# libcupti beside it (1.5 MB packed).
benches/cupti/build.sh "$out/bin" >/dev/null

cp scripts/run-gpu-tests.sh "$out/"
cp scripts/gpu-steps.sh "$out/"
chmod +x "$out/run-gpu-tests.sh"
# The commit the binaries were built from, "+dirty" with uncommitted
# changes: the runner copies it into the logs, so that a result names
# the code that gave it (issue 20's table is per commit). A commit or an
# edit during the build (session 47 committed during one) leaves the
# binaries of no one commit: "+changed-during-build".
{
  git rev-parse HEAD
  git diff --quiet HEAD -- "${built[@]}" || echo "+dirty"
  [ "$(source_state)" = "$state0" ] || echo "+changed-during-build"
} | paste -sd' ' >"$out/COMMIT"
if grep -q changed-during-build "$out/COMMIT"; then
  echo "warning: the sources changed during the build; COMMIT says so" >&2
fi

# A corpus that fits a 64 MiB transfer beside the binaries (~34 MB):
# tricky/ without its reference PNGs, the 10 MB MPO and the 9 MB
# decompression bomb, plus photos/imagenet-size (and what --fuzz and
# --full add).
rm -rf "$out-robust" "$out-full"
if [ -n "$corpus" ]; then
  mkdir -p "$out/corpus/photos" "$out/corpus/fuzz"
  cp "$corpus/MANIFEST.tsv" "$out/corpus/"
  if [ -n "$tricky" ] || [ -n "$parts" ]; then
    cp -r "$corpus/tricky" "$out/corpus/"
    find "$out/corpus/tricky" -name '*.png' -delete
    rm -f "$out/corpus/tricky/pillow/fujifilm.mpo" "$out/corpus/tricky/gdk-pixbuf/large.jpg"
  fi
  cp -r "$corpus/photos/imagenet-size" "$out/corpus/photos/"
  [ -n "$fuzz$parts" ] && cp -r "$corpus/fuzz/." "$out/corpus/fuzz/"
  if [ -n "$parts" ]; then
    # The parts beside the bundle (see --parts above).
    mkdir -p "$out-robust" "$out-full/photos"
    tar cJf "$out-robust/corpus-extra.tar.xz" -C "$out/corpus" tricky fuzz
    rm -r "$out/corpus/tricky" "$out/corpus/fuzz"
    cp -r "$corpus/photos/full" "$out-full/photos/"
  elif [ -n "$full" ]; then
    cp -r "$corpus/photos/full" "$out/corpus/photos/"
  fi
fi
if [ -n "$wheel" ]; then
  # abi3: any CPython 3 there; the runner unzips it onto PYTHONPATH (no
  # pip, no network on the GPU box).
  wheels=$(cd "$out" && pwd)/wheel
  (cd python && maturin build --release --locked --quiet --out "$wheels")
fi
if [ -n "$pack" ]; then
  tar cJf "$out/bin.tar.xz" -C "$out" bin
  rm -r "$out/bin"
fi
du -sh "$out" "$out-robust" "$out-full" 2>/dev/null
