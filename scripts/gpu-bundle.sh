#!/usr/bin/env bash
# Build everything a CUDA machine without a Rust toolchain needs to run the
# GPU checks: the release test binaries, the CLI, and a runner script.
#
#   scripts/gpu-bundle.sh [OUT]        (default OUT: dist/gpu, git-ignored)
#   # copy OUT to the CUDA box (x86-64 Linux), then there:
#   OUT/run-gpu-tests.sh [DATA]        (DATA: a folder of JPEGs to bench)
#
# The runner sets GPUFEED_REQUIRE_GPU=1 (a skipped GPU test fails), runs the
# GPU tests, then the same tests under compute-sanitizer memcheck and
# racecheck when it is installed, then `gpufeed kernel-bench` (the fused
# kernel's bandwidth against device copy bandwidth, batch 256, 224x224 f16
# NCHW) and `gpufeed bench --device cuda:0` on DATA.
# Logs go to $OUT_LOGS (default: ./gpu-logs).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-dist/gpu}
rm -rf "$out"
mkdir -p "$out/bin"

cargo build --release --locked --bin gpufeed
cp target/release/gpufeed "$out/bin/"

# Test executables that hold GPU or NVRTC tests (the others are CPU-only and
# run in CI), found from cargo's JSON messages.
cargo test --release --locked --no-run --lib --test kernels --test nvjpeg --test device_stage --test nvjpeg_decode --test corpus --test shutdown --test memory --message-format=json 2>/dev/null |
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

# Symbols are dead weight on the CUDA box (the device tool carries 64 MiB).
strip "$out"/bin/* 2>/dev/null || true

cat > "$out/run-gpu-tests.sh" <<'RUNNER'
#!/usr/bin/env bash
# GPU checks for gpufeed (built by scripts/gpu-bundle.sh).
set -u
here=$(cd "$(dirname "$0")" && pwd)
logs=${OUT_LOGS:-$PWD/gpu-logs}
mkdir -p "$logs"
export GPUFEED_REQUIRE_GPU=1 GPUFEED_REQUIRE_NVRTC=1
export GPUFEED_KERNEL_CACHE=${GPUFEED_KERNEL_CACHE:-$logs/kernel-cache}
status=0
run() { # name, command...
  local name=$1; shift
  echo "== $name: $*" | tee -a "$logs/summary.txt"
  if "$@" >"$logs/$name.log" 2>&1; then echo "   ok" | tee -a "$logs/summary.txt"
  else echo "   FAILED (see $name.log)" | tee -a "$logs/summary.txt"; status=1; fi
  tail -3 "$logs/$name.log" | sed 's/^/   /'
}
nvidia-smi -L > "$logs/nvidia-smi.txt" 2>&1 || true
run unit-cuda "$here/bin/unit-gpufeed" cuda:: --test-threads=1
run kernels "$here/bin/test-kernels" --test-threads=1
GPUFEED_REQUIRE_NVJPEG=1 run nvjpeg "$here/bin/test-nvjpeg" --test-threads=1
# The pipeline's device stage against the CPU backend (needs data/sample
# under the current directory: run from a checkout of the repository).
run device-stage "$here/bin/test-device_stage" gpu_ --test-threads=1
# nvJPEG against the CPU decoder, and the reliability checks with the GPU
# backend included (they need the corpus: GPUFEED_CORPUS, default
# ../shared/testdata relative to the build tree, else set it).
GPUFEED_REQUIRE_NVJPEG=1 GPUFEED_REQUIRE_HW_JPEG=1 run nvjpeg-decode "$here/bin/test-nvjpeg_decode" --test-threads=1 --nocapture
run corpus "$here/bin/test-corpus" whole_corpus --nocapture
run shutdown "$here/bin/test-shutdown" --nocapture
run memory "$here/bin/test-memory" --nocapture
if command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck; do
    run "sanitizer-$tool" compute-sanitizer --tool "$tool" --error-exitcode 1 \
      "$here/bin/unit-gpufeed" cuda::kernel_tests::gpu --test-threads=1
    run "sanitizer-$tool-stage" compute-sanitizer --tool "$tool" --error-exitcode 1 \
      "$here/bin/test-device_stage" gpu_rrc_f32 gpu_small_staging gpu_nvjpeg_route --test-threads=1
  done
else
  echo "compute-sanitizer not found: sanitizer runs skipped" | tee -a "$logs/summary.txt"
fi
data=${1:-data/sample}
if [ -d "$data" ]; then
  run kernel-bench "$here/bin/gpufeed" kernel-bench "$data" --batch 256 --size 224
fi
if [ $# -ge 1 ]; then
  # Issue 5: nvJPEG alone at hardware share 0, the default and 1, with the
  # CPU time per image.
  run decode-bench "$here/bin/gpufeed" decode-bench "$1" --batch 256 --iters 20 \
    --hardware-share 0,0.65,1
  # Issue 6's setting: batch 256, 224x224 f16 NCHW, RRC + flip, all cores.
  run bench-cuda "$here/bin/gpufeed" bench "$1" --device cuda:0 --batch 256 --dtype f16 \
    --epochs 5 --json
  run bench-cuda-routes "$here/bin/gpufeed" bench "$1" --device cuda:0 --batch 256 \
    --dtype f16 --epochs 3 --sweep hardware-share=0,0.65,1 --sweep cpu-decode=false,true \
    --out "$logs/routes"
  run bench-cuda-readers "$here/bin/gpufeed" bench "$1" --device cuda:0 --batch 256 \
    --dtype f16 --epochs 3 --sweep readers=1,2,4,8 --out "$logs/readers"
  run bench-cpu "$here/bin/gpufeed" bench "$1" --device cpu --json
  # Peers side by side (torchvision GPU, DALI when installed): needs the
  # repository checkout for benches/peers.
  if [ -f benches/peers/compare.sh ]; then
    run peers bash benches/peers/compare.sh "$1" 3 "$logs/peers"
  fi
fi
echo "logs: $logs"
exit $status
RUNNER
chmod +x "$out/run-gpu-tests.sh"
du -sh "$out"
