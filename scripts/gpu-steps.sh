# The GPU runner's steps (scripts/run-gpu-tests.sh sources this file, and
# scripts/gpu-bundle.sh copies it beside the runner): `step`, which runs
# one command with its time limit and logs it, and the steps and helpers
# that more than one phase uses. They read the runner's variables (bin,
# logs, data, here) and set its status.
# shellcheck shell=bash
status=0
ran=" "
# step NAME LIMIT_S COMMAND...: run with a time limit, log to NAME.log.
# A step that already ran in an earlier phase of this call is not rerun
# (`quick tests` runs each shared step once).
step() {
  local name=$1 limit=$2
  shift 2
  case " ${GPU_SKIP:-} " in *" $name "*)
    echo "-- $name: skipped (GPU_SKIP)" | tee -a "$logs/summary.txt"
    return ;;
  esac
  case $ran in *" $name "*) return ;; esac
  ran="$ran$name "
  if [ -n "${GPU_DEADLINE:-}" ]; then
    local left=$((GPU_DEADLINE - SECONDS))
    if [ "$left" -lt 10 ]; then
      echo "-- $name: skipped (deadline)" | tee -a "$logs/summary.txt"
      status=1
      return
    fi
    [ "$limit" -gt "$left" ] && limit=$left
  fi
  local t0=$SECONDS
  timeout -k 5 "$limit" "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  local verdict=ok
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then verdict="TIMED OUT after ${limit}s"
  elif [ $rc -ne 0 ]; then verdict="FAILED (rc $rc)"; fi
  [ $rc -ne 0 ] && status=1
  printf -- '-- %-22s %-24s %4ds\n' "$name" "$verdict" $((SECONDS - t0)) | tee -a "$logs/summary.txt"
  grep -E "^test result|panicked at|\.\.\. (ignored|FAILED|not run)" "$logs/$name.log" | head -6 | sed 's/^/     /'
}

# Folders holding CUDA 13's libcublas/libcurand (the toolkit's, or the
# nvidia-* wheels PyTorch installs), colon-terminated.
cuda_libs() {
  local d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
    $(python3 -c 'import glob, nvidia; p = list(nvidia.__path__)[0]; print(" ".join(glob.glob(p + "/*/lib")))' 2>/dev/null); do
    [ -e "$d/libcublas.so.13" ] || [ -e "$d/libcurand.so.10" ] || [ -e "$d/libnvrtc.so.13" ] && printf '%s:' "$d"
  done
}

# The end-to-end benches read at least BENCH_IMAGES files: a smaller DATA
# is repeated through links (into bench_data; DATA itself stays as it is
# for decode-bench and kernel-bench, which time batches, not epochs).
# grow DIR WANT LINKS: prints DIR, or LINKS made to repeat it to at least
# WANT files.
grow() {
  local dir=$1 want=$2 big=$3 n r
  n=$(find -L "$dir" -type f | wc -l)
  if [ "$n" -gt 0 ] && [ "$n" -lt "$want" ]; then
    rm -rf "$big"
    mkdir -p "$big"
    # One process for every link: an `ln` each cost about 2 ms on the
    # GPU box, some 50 s of a lease call for both photo sets (session 52).
    python3 -c '
import os, sys
src, want, big = os.path.abspath(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
files = [os.path.join(d, f) for d, _, names in os.walk(src, followlinks=True) for f in names]
files = [f for f in files if os.path.isfile(f)]
for r in range(1, -(-want // len(files)) + 1):
    for f in files:
        os.symlink(f, os.path.join(big, f"{r}-{os.path.basename(f)}"))
' "$dir" "$want" "$big"
    echo "bench data: $dir repeated to $(find -L "$big" -type f | wc -l) files" \
      | tee -a "$logs/summary.txt" >&2
    echo "$big"
  else
    echo "$dir"
  fi
}
bench_data=
grow_data() {
  [ -n "$bench_data" ] || bench_data=$(grow "$data" "${BENCH_IMAGES:-20000}" "$logs/bench-data")
}
# photos/full (issue 20's second set; gpu-bundle.sh --full), repeated to
# FULL_IMAGES (default 5,000) files: larger photos, so fewer make an epoch
# that outlasts start-up.
full_data=
grow_full() {
  local dir=${GPUFEED_CORPUS:-/nonexistent}/photos/full
  [ -d "$dir" ] || return 1
  [ -n "$full_data" ] || full_data=$(grow "$dir" "${FULL_IMAGES:-5000}" "$logs/bench-data-full")
}
# The Python wheel (gpu-bundle.sh --wheel), unzipped onto PYTHONPATH: the
# GPU box has no package index to install from.
py=
unpack_wheel() {
  local whl
  whl=$(ls "$here"/wheel/*.whl 2>/dev/null | head -1)
  [ -n "$whl" ] || return 1
  [ -n "$py" ] && return 0
  py=$logs/py
  rm -rf "$py"
  python3 -m zipfile -e "$whl" "$py"
  # torchvision's ImageFolder wants a class folder.
  grow_data
  mkdir -p "$logs/train-data"
  ln -sfn "$(cd "$bench_data" && pwd)" "$logs/train-data/photos"
}
# with_load KIND N COMMAND...: COMMAND beside N processes that keep a CPU
# busy: KIND cpu loops in registers; mem streams 64 MiB buffers through
# memory (dd from /dev/zero), loading memory bandwidth as well.
with_load() {
  local kind=$1 n=$2 pids=() i rc
  shift 2
  for i in $(seq 1 "$n"); do
    if [ "$kind" = mem ]; then
      dd if=/dev/zero of=/dev/null bs=64M count=100000000 2>/dev/null &
    else
      sh -c 'while :; do :; done' &
    fi
    pids+=($!)
  done
  "$@"
  rc=$?
  kill "${pids[@]}" 2>/dev/null
  wait "${pids[@]}" 2>/dev/null
  return $rc
}
export -f with_load  # `step` runs commands through timeout, not functions
# Issue 17 on the CUDA backend: candle tensors and the training example
# (gpu-bundle.sh --candle); torch.from_dlpack, and a model step fed by
# gpufeed beside the torch DataLoader (--wheel). candle links the CUDA
# toolkit's cuBLAS and cuRAND, found where the toolkit or PyTorch's wheels
# keep them.
# pool_sweep NAME VAR=VALUE...: engine shares 0, 0.5 and 1 with the decoder
# pool's settings VAR (issue 16; docs/BENCHMARKS.md), logged as
# bench-cuda-shares-NAME, the table in shares-NAME.{json,csv}.
pool_sweep() {
  local name=$1
  shift
  step "bench-cuda-shares-$name" 120 env "$@" "$bin/gpufeed" bench "$bench_data" \
    --device cuda:0 --batch 256 --dtype f16 --epochs 2 --sweep hardware-share=0,0.5,1 \
    --out "$logs/shares-$name"
}

# cupti_run SHARE [TAG [VAR=VALUE...]]: the default bench at engine share
# SHARE (with the settings VAR) with the CUPTI tracer loaded (gpu-bundle.sh
# builds it), its window CUPTI_FROM_S (default 5) to 1 s later after
# cuInit: logs cupti-share-SHARE[-TAG].{txt,json}. Beside it, nvidia-smi's
# utilization each second (dmon-share-SHARE[-TAG].txt): its jpg column is
# the hardware engine's own load, which CUPTI cannot see, against the
# lanes' calls in flight that Stats::engine_busy counts.
cupti_run() {
  [ -f "$bin/libgpufeed_cupti.so" ] || return 0
  local share=$1 tag=${2:-} dmon=
  shift
  [ $# -gt 0 ] && shift
  local name=share-$share${tag:+-$tag}
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi dmon -s u -d 1 -o T >"$logs/dmon-$name.txt" 2>&1 &
    dmon=$!
  fi
  step "cupti-$name" 60 env CUDA_INJECTION64_PATH="$bin/libgpufeed_cupti.so" \
    GPUFEED_CUPTI_OUT="$logs/cupti-$name" GPUFEED_CUPTI_FROM_S="${CUPTI_FROM_S:-5}" \
    GPUFEED_CUPTI_FOR_S=1 "$@" "$bin/gpufeed" bench "$bench_data" --device cuda:0 --batch 256 \
    --dtype f16 --epochs 4 --hardware-share "$share" --json
  if [ -n "$dmon" ]; then
    kill "$dmon" 2>/dev/null
    wait "$dmon" 2>/dev/null
  fi
  # No summary: the tracer failed (the step's log says how); 1 tells
  # the caller to run no more of it.
  [ -f "$logs/cupti-$name.txt" ] || return 1
  # The trace's first 60 ms as a picture, to read without Perfetto.
  step "cupti-png-$name" 60 python3 benches/trace/trace_png.py \
    "$logs/cupti-$name.json" "$logs/cupti-$name.png" --from 0 --to 0.06 \
    --title "CUPTI, engine share $share${tag:+ ($tag)}, 60 ms of the steady state"
  return 0
}

# Issue 20's steps that more than one phase runs (a call runs each once).
# Time to first batch: build() with NVRTC compiling the kernels into an
# empty cache, then again loading them from it. With a timeline, whose
# build track gpu-report.py prints: at 0de8cfd the cold build() took
# 1,000 ms, although `doctor` had compiled progressive.cu alone in 2,997
# ms in the call before (docs/BENCHMARKS.md), and the tracks say which
# part of build() the compilation falls in. Only the build track is
# kept, in the step's log: whole timelines could push the packed logs
# past what the device tool brings back.
first_batch_steps() {
  rm -rf "$logs/first-batch-cache"
  local cache trace
  for cache in cold warm; do
    trace=$logs/first-batch-$cache.json
    GPUFEED_KERNEL_CACHE=$logs/first-batch-cache step "first-batch-$cache" 60 "$bin/gpufeed" \
      bench "$data" --device cuda:0 --batch 256 --dtype f16 --epochs 1 --trace "$trace"
    python3 scripts/gpu-report.py --build-track "$trace" >>"$logs/first-batch-$cache.log" 2>&1
    rm -f "$trace"
  done
}
# photos/full at the default, beside torchvision's pipeline.
full_steps() {
  grow_full || return 0
  step bench-cuda-full 90 "$bin/gpufeed" bench "$full_data" --device cuda:0 --batch 256 \
    --dtype f16 --epochs 3 --json
  step peer-torchvision-full 150 python3 benches/peers/torchvision_gpu.py "$full_data" \
    --batch 256 --epochs 2 --threads "$(nproc)"
}
# The fused kernel against device copy bandwidth (issue 4), and the whole
# DINO recipe's device work per batch (issue 19).
kernel_bench_steps() {
  step kernel-bench 60 "$bin/gpufeed" kernel-bench "$data" --batch 256 --size 224
  step kernel-bench-dino 60 "$bin/gpufeed" kernel-bench "$data" --batch 256 --recipe dino
}

# scan_bench SET [--sequential]: gpufeed's scan kernels on the corpus's
# photos/SET (progressive-bench: one launch of each per batch of 256),
# logged as progressive-bench-SET or, sequential, sequential-bench-SET.
scan_bench() {
  local set=$1 kind=progressive
  shift
  [ "${1:-}" = --sequential ] && kind=sequential
  [ -d "${GPUFEED_CORPUS:-/nonexistent}/photos/$set" ] || return 0
  step "$kind-bench-$set" 60 "$bin/gpufeed" progressive-bench "$GPUFEED_CORPUS/photos/$set" \
    "$@" --batch 256 --iters 20
}

trainers() {
  if [ -x "$bin/test-candle_cuda" ]; then
    step candle-cuda 120 env LD_LIBRARY_PATH="$(cuda_libs)${LD_LIBRARY_PATH:-}" \
      "$bin/test-candle_cuda" --test-threads=1 --nocapture
    step train-candle-cuda 180 env LD_LIBRARY_PATH="$(cuda_libs)${LD_LIBRARY_PATH:-}" \
      "$bin/train_candle" data/sample --device cuda:0 --epochs 10
  fi
  if unpack_wheel; then
    step python-torch-cuda 180 env PYTHONPATH="$py" python3 python/tests/test_torch_cuda.py
    step torch-train-step 240 env PYTHONPATH="$py" python3 benches/peers/torch_train_step.py \
      "$logs/train-data" --device cuda --epochs 2
  fi
}
