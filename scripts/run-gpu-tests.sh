#!/usr/bin/env bash
# GPU checks for gpufeed, from a bundle built by scripts/gpu-bundle.sh.
# Run from a checkout of the repository (data/sample, benches/peers):
#
#   BUNDLE/run-gpu-tests.sh [PHASE...] [-- DATA]
#
# PHASE: quick, lease, unrun, tests, sanitize, bench, checks, numbers,
# peers, dali, or all (the default: tests sanitize bench). quick is the first call of a
# short lease (15 minutes of device time in all, start-up included) after
# GPU code changed: the device stage's tests, the headline benches beside
# torchvision's GPU pipeline, decode-bench, the nvJPEG tests and one
# sanitizer run, most telling first, so that GPU_DEADLINE cuts what
# matters least (steps a call already ran are not rerun in it; GPU_SKIP
# names steps to leave out). lease: one call of a 15-minute lease for
# code no GPU has run yet (see the phase). unrun: what the last full run left out (see
# the phase). checks then numbers, one call each, are issue 20's table
# in one short lease, once a commit's GPU code is final: checks runs
# tests and sanitize at once (two runners sharing the GPU, in
# OUT_LOGS/tests and OUT_LOGS/sanitize; neither is timed), then the one
# test that steers by timing alone; numbers runs issue 20's benchmarks
# (time to first batch, the default and best settings and torchvision's
# pipeline on both photo sets, decode-only, the kernels and DINO). dali:
# DALI's pipeline beside gpufeed's, after its wheels came in parts (see
# the phase).
# DATA: a folder of JPEGs to bench (default: the bundle's corpus
# photos/imagenet-size, else data/sample).
#
# Environment:
#   GPUFEED_CORPUS   the shared test corpus (default: BUNDLE/corpus when
#                    gpu-bundle.sh copied one, else ../shared/testdata)
#   OUT_LOGS         log folder (default ./gpu-logs)
#   GPU_DEADLINE     seconds this script may run; each step's time limit is
#                    cut to what is left and later steps are skipped, so a
#                    lease with a per-call limit still returns every log
#   LOGS_TAR         also pack the logs into this .tgz at the end
#   GPU_SKIP         step names to skip (space-separated), e.g. "shutdown"
#   BENCH_IMAGES     the end-to-end benches read at least this many files
#                    (default 20000): a smaller DATA is repeated through
#                    links, so that an epoch outlasts start-up (at 5000 on
#                    an H200, 2026-11-26, steady epochs lasted 0.4 s and
#                    two of one run differed by 45 %)
#   FULL_IMAGES      the same for photos/full (default 5000)
#
# Every step has its own time limit (a hang costs that step, not the run);
# summary.txt lists each step's exit status and time. Back on the build
# machine, scripts/gpu-report.py LOGS digests the logs into one screen.
# `step` and the steps several phases share are in gpu-steps.sh (beside
# this file in the bundle). scripts/gpu-dry-run.sh (in CI) runs every
# phase over stub binaries.
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin=$here/bin
logs=${OUT_LOGS:-$PWD/gpu-logs}
mkdir -p "$logs"
# The bundle's commit (gpu-bundle.sh), for the reports.
[ -f "$here/COMMIT" ] && cp "$here/COMMIT" "$logs/COMMIT"
export GPUFEED_REQUIRE_GPU=1 GPUFEED_REQUIRE_NVRTC=1
export GPUFEED_KERNEL_CACHE=${GPUFEED_KERNEL_CACHE:-$logs/kernel-cache}
# The corpus's parts carried beside the bundle (gpu-bundle.sh --parts):
# tricky/ and fuzz/ for `checks`, photos/full for `numbers`, merged into
# its corpus (a carried folder replaces the machine's copy, so each call
# merges what it carried). Once: `checks` runs this script twice at once
# after merging, and neither may rewrite files the other reads.
merged=
if [ -f "$here/corpus/MANIFEST.tsv" ]; then
  if [ -f "$here-robust/corpus-extra.tar.xz" ] && [ ! -f "$here/corpus/.robust-merged" ] \
    && tar xJf "$here-robust/corpus-extra.tar.xz" -C "$here/corpus"; then
    : >"$here/corpus/.robust-merged"
    merged="$merged tricky/ fuzz/"
  fi
  if [ -d "$here-full/photos/full" ] && [ ! -d "$here/corpus/photos/full" ] \
    && cp -r "$here-full/photos/full" "$here/corpus/photos/"; then
    merged="$merged photos/full"
  fi
fi
if [ -z "${GPUFEED_CORPUS:-}" ] && [ -f "$here/corpus/MANIFEST.tsv" ]; then
  export GPUFEED_CORPUS=$here/corpus
fi

phases=()
data=
while [ $# -gt 0 ]; do
  case $1 in
    --) shift; data=${1:-}; break ;;
    quick | lease | unrun | tests | sanitize | bench | checks | numbers | peers | dali) phases+=("$1") ;;
    all) phases+=(tests sanitize bench) ;;
    *) data=$1 ;;
  esac
  shift
done
[ ${#phases[@]} -eq 0 ] && phases=(tests sanitize bench)
if [ -z "$data" ]; then
  if [ -d "${GPUFEED_CORPUS:-/nonexistent}/photos/imagenet-size" ]; then
    data=$GPUFEED_CORPUS/photos/imagenet-size
  else
    data=data/sample
  fi
fi

# The steps and their helpers.
. "$here/gpu-steps.sh" || exit 1

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,utilization.gpu \
  --format=csv >"$logs/nvidia-smi.txt" 2>&1 || true
cat "$logs/nvidia-smi.txt"
# Cores against hardware threads: the routes share them (issue 16).
lscpu >"$logs/lscpu.txt" 2>&1 || true
grep -E "^(Model name|CPU\(s\)|Thread\(s\) per core|Core\(s\) per socket|Socket\(s\))" \
  "$logs/lscpu.txt" || true
echo "corpus: ${GPUFEED_CORPUS:-none}${merged:+ (merged from the parts:$merged)}; data: $data" \
  | tee -a "$logs/summary.txt"

# The logs packed every 20 s while the phases run, without the traces,
# so that a call cut at the device tool's limit still brings back what
# ran (session 52's `checks` call, killed at 190 s, brought back nothing).
pack_logs() {
  local part=$LOGS_TAR.${part_suffix:-part}
  tar czf "$part" --exclude bench-data --exclude bench-data-full --exclude py \
    --exclude train-data --exclude kernel-cache "$@" -C "$(dirname "$logs")" \
    "$(basename "$logs")" 2>/dev/null && mv -f "$part" "$LOGS_TAR"
}
packer=
if [ -n "${LOGS_TAR:-}" ]; then
  (part_suffix=tick; while sleep 20; do pack_logs --exclude '*.json' --exclude '*.png'; done) &
  packer=$!
fi

for phase in "${phases[@]}"; do
  case $phase in
    quick)
      # Most telling first; GPU_DEADLINE cuts the tail: the device stage
      # against the CPU backend first, then issue 16's numbers with
      # torchvision's pipeline on the same files, then the decoder pool's
      # changes of session 26 (fit.rs, pool.rs) against the pool as at
      # 243e3c9, then the nvJPEG routes' tests and memcheck over them.
      step doctor 30 "$bin/gpufeed" doctor --require-gpu
      step device-stage 150 "$bin/test-device_stage" gpu_ --test-threads=1 --nocapture
      grow_data
      step bench-cuda 90 "$bin/gpufeed" bench "$bench_data" --device cuda:0 --batch 256 \
        --dtype f16 --epochs 3 --json
      # 2 epochs: it ran 2,010 img/s on an H200, 10 s an epoch at 20,000.
      step peer-torchvision 120 python3 benches/peers/torchvision_gpu.py "$bench_data" \
        --batch 256 --epochs 2 --threads "$(nproc)"
      # Both routes at once (issue 16, item 3): the engine alone ran near
      # its ceiling on an H200, so 25,000 img/s needs a mix. `allocs`:
      # nvJPEG's driver allocations in the steady epochs.
      GPUFEED_SHARE_LOG=1 step bench-cuda-shares 150 "$bin/gpufeed" bench "$bench_data" \
        --device cuda:0 --batch 256 --dtype f16 --epochs 2 --sweep hardware-share=0,0.5,auto,1 \
        --sweep in-flight=3,4 --out "$logs/shares"
      # The pool as at 243e3c9: on 2026-11-26 each pooled decoder grew
      # its buffers, a synchronizing free and allocation each, whenever it
      # met a larger image, for epochs (fit.rs grows them ahead), and a
      # worker was lent the decoder whose copy the batch thread had queued
      # last, whose pinned buffer it then waited for (pool.rs now lends a
      # ready one; the JSON's decoder_pinned_wait_s). Against the sweep
      # above: whether they are what slowed the mix.
      pool_sweep old-pool GPUFEED_NVJPEG_FIT=0 GPUFEED_NVJPEG_READY_FIRST=0
      # The engine's bitstreams in device memory (NVJPEG_BACKEND_HARDWARE_DEVICE,
      # src/decode/nvjpeg/device_input.rs; never run): whether the engine
      # lanes' 0.086 CPU-ms per image inside nvJPEG's batched call (issue
      # 16, item 4) is its handling of host bitstreams. Read the lanes'
      # column and the hardware count against the sweep above; stderr says
      # if nvJPEG refused the backend.
      pool_sweep device-input GPUFEED_NVJPEG_DEVICE_INPUT=1
      # Why, from the driver's side: CUPTI's record (benches/cupti) of each
      # host thread's CUDA calls and each stream's work over 1 s of the
      # steady state (epoch 3 of 4), per share. A thread waiting in
      # cuMemFreeHost or a synchronize, copies from pageable memory, work
      # on a blocking stream: each shows in cupti-share-*.txt.
      # The tracer has never met a real driver: one that fails or hangs
      # costs one step, not three.
      cupti_run 0.5 && cupti_run 1 && cupti_run 0
      GPUFEED_REQUIRE_NVJPEG=1 GPUFEED_REQUIRE_HW_JPEG=1 \
        step nvjpeg-decode 180 "$bin/test-nvjpeg_decode" --test-threads=1 --nocapture
      if command -v compute-sanitizer >/dev/null; then
        step sanitizer-memcheck-stage 180 compute-sanitizer --tool memcheck --error-exitcode 1 \
          "$bin/test-device_stage" gpu_rrc_f32 gpu_small_staging gpu_nvjpeg_route --test-threads=1
      fi
      # Each of the pool's two changes alone.
      pool_sweep nofit GPUFEED_NVJPEG_FIT=0
      pool_sweep stack GPUFEED_NVJPEG_READY_FIRST=0
      # The ceiling: nvJPEG alone, the engine's cores reported.
      GPUFEED_SHARE_LOG=1 step decode-bench 90 "$bin/gpufeed" decode-bench "$data" \
        --batch 256 --iters 10 --hardware-share 0,auto,1 --sequential-kernels=false
      step bench-cuda-trace 60 "$bin/gpufeed" bench "$bench_data" --device cuda:0 --batch 256 \
        --dtype f16 --epochs 2 --trace "$logs/trace-default.json"
      # Issue 16, item 1: batches decoding at once, on the engine route.
      # On an H200 (2026-11-26) 3 in flight kept two engine calls running
      # (the third arena fills): whether 4 gives the engine a third.
      step bench-cuda-in-flight-engine 120 "$bin/gpufeed" bench "$bench_data" --device cuda:0 \
        --batch 256 --dtype f16 --epochs 3 --hardware-share 1 --sweep in-flight=1,2,3,4 \
        --out "$logs/in-flight-engine"
      # The engine lanes' 0.1 CPU-ms per image (issue 16, item 4): the
      # same as share 1 above with the context's waits blocking, nvJPEG's
      # own included (`cpu_ms_per_image_by_thread` in the JSON).
      GPUFEED_CUDA_BLOCKING_SYNC=1 step bench-cuda-blocking-sync 60 "$bin/gpufeed" bench \
        "$bench_data" --device cuda:0 --batch 256 --dtype f16 --epochs 3 --hardware-share 1 --json
      step kernel-device 60 "$bin/test-kernel_device" gpu_ --test-threads=1
      ;;
    lease)
      # One call of a 15-minute lease (session 38): the questions 4bbffad's
      # lease left (docs/BENCHMARKS.md), most telling first, then the
      # suite's unrun parts as the deadline allows. There the sequential
      # route without the progressive lanes (GPUFEED_SEQUENTIAL_GPU=1,
      # share 0, split by 256 bytes, 6 in flight) ran 26,300-30,000
      # img/s on imagenet-size, but photos/full 756 against the
      # default's 5,860; 6ca532a then made the split kernels' defaults
      # 256 bytes and 16 rounds (8 rounds left 8 of the 288 photos to one
      # thread on the emulated device).
      step doctor 30 "$bin/gpufeed" doctor --require-gpu
      # The new defaults must still equal libjpeg-turbo on a GPU.
      step progressive 180 "$bin/test-progressive" gpu_ --nocapture
      step kernel-routes 180 "$bin/test-kernel_routes" gpu_ --nocapture
      grow_data
      # The call's baseline: the default (the engine's route).
      step bench-cuda 90 "$bin/gpufeed" bench "$bench_data" --device cuda:0 --batch 256 \
        --dtype f16 --epochs 3 --json
      # The candidate default, same call.
      step bench-cuda-sequential 90 env GPUFEED_SEQUENTIAL_GPU=1 "$bin/gpufeed" bench \
        "$bench_data" --device cuda:0 --batch 256 --dtype f16 --epochs 3 --hardware-share 0 \
        --batches-in-flight 6 --json
      # Session 39 (60f9a21): on the engine route the readers read into
      # page-locked blocks, so nvJPEG's copies are DMA, not the driver's
      # pageable staging on the engine lanes (issue 16, item 4). The
      # engine's pixels from them, then the default without them (the
      # engine lanes' CPU-ms per image is the number to compare).
      step device-stage-pinned 90 "$bin/test-device_stage" page_locked --nocapture
      step bench-cuda-pageable 90 env GPUFEED_PINNED_READS=0 "$bin/gpufeed" bench "$bench_data" \
        --device cuda:0 --batch 256 --dtype f16 --epochs 3 --json
      # Session 42: the scan kernels' lanes copy the files read into those
      # blocks from there instead of packing them on the lane's thread;
      # the candidate without the blocks (its lanes' CPU-ms per image
      # against bench-cuda-sequential's).
      step bench-cuda-sequential-pageable 90 env GPUFEED_PINNED_READS=0 GPUFEED_SEQUENTIAL_GPU=1 \
        "$bin/gpufeed" bench "$bench_data" --device cuda:0 --batch 256 --dtype f16 --epochs 3 \
        --hardware-share 0 --batches-in-flight 6 --json
      # photos/full: the default, then the candidate at 16 rounds (the new
      # default); with photos over 1 MP sent to the engine instead
      # (session 40's fallback, `sequential_kernels_max_pixels`); split by
      # 1 KB (every photo synchronised there at 8 rounds on the emulated
      # device); 8 rounds, 4bbffad's 756 img/s, where 8 photos fell to one
      # thread on the emulated device: since session 48 the check mends
      # what the rounds leave out of step (at most 12 subsequences a photo
      # there), so 8 rounds should run as 16 do.
      if grow_full; then
        step bench-cuda-full 90 "$bin/gpufeed" bench "$full_data" --device cuda:0 --batch 256 \
          --dtype f16 --epochs 3 --json
        for v in GPUFEED_SPLIT_ROUNDS=16 GPUFEED_SEQUENTIAL_MAX_PIXELS=1000000 \
          GPUFEED_SCAN_SPLIT=1024 GPUFEED_SPLIT_ROUNDS=8; do
          v_tag=${v#GPUFEED_}
          step "bench-cuda-full-sequential-${v_tag/=/-}" 90 env GPUFEED_SEQUENTIAL_GPU=1 "$v" \
            "$bin/gpufeed" bench "$full_data" --device cuda:0 --batch 256 --dtype f16 \
            --epochs 3 --hardware-share 0 --batches-in-flight 6 --json
        done
      fi
      # Peers, same call: the ratio to the default and the candidate (at
      # 4bbffad the lease's deadline cut it before it ran).
      step peer-torchvision 120 python3 benches/peers/torchvision_gpu.py "$bench_data" \
        --batch 256 --epochs 2 --threads "$(nproc)"
      # 4bbffad's CUPTI window again (share 1 beside the progressive
      # lanes, 12 s in), now with the tracer's memory callbacks (session
      # 40): what nvJPEG's ~18 cuMemFree calls a hardware call free, and
      # from where (the summary's "memory calls" and call stacks).
      CUPTI_FROM_S=12 cupti_run 1 memory GPUFEED_PROGRESSIVE_GPU=1
      # The scan kernels alone at the new defaults, both sets.
      scan_bench imagenet-size --sequential
      scan_bench full --sequential
      # Decode-only on the kernel route (issue 16's ceiling, for the
      # candidate default): the sequential files on the scan kernels, the
      # engine's share beside them, new in session 38.
      GPUFEED_SHARE_LOG=1 step decode-bench-kernels 120 "$bin/gpufeed" decode-bench "$data" \
        --batch 256 --iters 20 --hardware-share 0,auto,1 --sequential-kernels --in-flight 1,3,6
      # In flight, and the engine's shares beside the kernels.
      step bench-cuda-sequential-sweep 150 env GPUFEED_SEQUENTIAL_GPU=1 "$bin/gpufeed" bench \
        "$bench_data" --device cuda:0 --batch 256 --dtype f16 --epochs 2 --hardware-share 0 \
        --sweep in-flight=4,6,8 --out "$logs/sequential-in-flight"
      # At 4bbffad two lanes answered the kernels' calls, and a call
      # lasted a median 19 ms, ~10 ms of it the lane thread's CPU
      # (planning, packing, waiting): 2 x 256 images / 19 ms is ~27,000
      # img/s, where the route stopped. Since session 41 there is a lane
      # per batch in flight (the sweep above); two lanes, as before:
      step bench-cuda-sequential-lanes2 150 env GPUFEED_SEQUENTIAL_GPU=1 \
        GPUFEED_PROGRESSIVE_LANES=2 "$bin/gpufeed" bench "$bench_data" --device cuda:0 --batch 256 \
        --dtype f16 --epochs 2 --hardware-share 0 --sweep in-flight=6,8 \
        --out "$logs/sequential-lanes2"
      # Every Huffman decode on the GPU (issue 16's 0.1 CPU-ms per image):
      # both kernel routes, which at 0d15f52 ran 5,500 img/s at 0.085
      # CPU-ms, each call waiting for its batch's progressive photos (~70
      # ms, one thread per chain). Since session 38 the two kinds of file
      # have lanes of their own (stage::KernelLanes), since session 41 one
      # per batch in flight: enough batches in flight to cover the
      # progressive calls' latency, (K - 1) x 256 / 70 ms by the emulated
      # model.
      step bench-cuda-both-kernels 150 env GPUFEED_SEQUENTIAL_GPU=1 GPUFEED_PROGRESSIVE_GPU=1 \
        "$bin/gpufeed" bench "$bench_data" --device cuda:0 --batch 256 \
        --dtype f16 --epochs 2 --hardware-share 0 --sweep in-flight=8,12,16 \
        --out "$logs/both-kernels"
      # Session 38 moved the kernels' planning (~16 us an image) from the
      # lanes to the workers; the lanes planning, as at 4bbffad:
      step bench-cuda-sequential-lane-plans 90 env GPUFEED_SEQUENTIAL_GPU=1 \
        GPUFEED_PLAN_ON_WORKERS=0 "$bin/gpufeed" bench "$bench_data" --device cuda:0 --batch 256 \
        --dtype f16 --epochs 3 --hardware-share 0 --batches-in-flight 6 --json
      step bench-cuda-sequential-trace 60 env GPUFEED_SEQUENTIAL_GPU=1 "$bin/gpufeed" bench \
        "$bench_data" --device cuda:0 --batch 256 --dtype f16 --epochs 2 --hardware-share 0 \
        --batches-in-flight 6 --trace "$logs/trace-sequential.json"
      # The default's timeline and its picture (issue 16, item 6), with
      # the build track split since session 39: the engine's handle, each
      # lane, the batch thread's CUDA decoder (making the lanes took 1.8 s
      # at 4bbffad, in handles or states unknown).
      step bench-cuda-trace 60 "$bin/gpufeed" bench "$bench_data" --device cuda:0 --batch 256 \
        --dtype f16 --epochs 2 --trace "$logs/trace-default.json"
      step trace-png-default 60 python3 benches/trace/trace_png.py "$logs/trace-default.json" \
        "$logs/trace-default.png" --title "gpufeed default, $(cut -c1-7 "$logs/COMMIT" 2>/dev/null)"
      # The same pipeline tests on the candidate route.
      GPUFEED_SEQUENTIAL_GPU=1 step device-stage-sequential 150 "$bin/test-device_stage" gpu_ \
        --test-threads=1 --nocapture
      # CUPTI at 4bbffad: nvJPEG's hardware call makes ~18 cuMemFree calls
      # (no allocation), each a wait for the whole device, so the engine
      # waits for every stream's kernels (issue 16, item 3). Whether its
      # flags change that: no pipelining (1), its memory pools (2), each
      # beside interpolated upsampling (32, gpufeed's flag). Then share
      # 0.5 in its steady state (the window at 5 s fell in epoch 1).
      CUPTI_FROM_S=12 cupti_run 1 nopipe GPUFEED_PROGRESSIVE_GPU=1 GPUFEED_NVJPEG_FLAGS=33 &&
        CUPTI_FROM_S=12 cupti_run 1 pools GPUFEED_PROGRESSIVE_GPU=1 GPUFEED_NVJPEG_FLAGS=34 &&
        CUPTI_FROM_S=9 cupti_run 0.5 steady
      # The suite's parts no GPU has run at this commit.
      step device-stage 150 "$bin/test-device_stage" gpu_ --test-threads=1 --nocapture
      GPUFEED_REQUIRE_NVJPEG=1 step nvjpeg 60 "$bin/test-nvjpeg" --test-threads=1 --nocapture
      if command -v compute-sanitizer >/dev/null; then
        GPUFEED_TEST_MAX_FILES=24 step sanitizer-memcheck-split 150 compute-sanitizer \
          --tool memcheck --error-exitcode 1 "$bin/test-progressive" gpu_sequential_scans
        # It died at exit (signal 11) after passing, twice (0d15f52,
        # 4bbffad). Not where device 0's per-thread kernels (launch.rs,
        # DEVICE0) are dropped: libtest runs each test on a thread of its
        # own even with --test-threads=1 and joins it, thread-local
        # destructors included, before exiting (checked in session 47).
        # Whether it depends on how much ran: one photo, one launch of
        # each kernel, then exit.
        GPUFEED_TEST_MAX_FILES=1 step sanitizer-memcheck-split-1file 150 compute-sanitizer \
          --tool memcheck --error-exitcode 1 "$bin/test-progressive" gpu_sequential_scans
      fi
      if unpack_wheel; then
        step python-torch-cuda 180 env PYTHONPATH="$py" python3 python/tests/test_torch_cuda.py
      fi
      ;;
    unrun)
      # What docs/RELIABILITY.md lists as unrun at 243e3c9 (whose quick,
      # tests, sanitize and most of bench ran on an H200 on 2026-11-26);
      # GPU code changed since (the decoder pool of session 26), so run
      # `quick` before it. Most telling first.
      step doctor 30 "$bin/gpufeed" doctor --require-gpu
      # Session 30: the progressive-scan decoder (kernels/progressive.cu)
      # against libjpeg-turbo's coefficients and pixels, and (session 31)
      # its route through a pipeline (memcheck over it comes after the
      # route's numbers below: ~2,700 launches instrumented take long).
      # (session 33: sequential files too, photos/full's left out)
      step progressive 180 "$bin/test-progressive" gpu_ --nocapture
      step kernel-routes 180 "$bin/test-kernel_routes" gpu_ --nocapture
      # Its speed: one launch of each kernel per batch of 256 progressive
      # photos (imagenet-size has 9, full 41), against the ~1.8 CPU-ms each
      # costs the workers' Huffman decoding today.
      scan_bench imagenet-size
      scan_bench full
      # The same kernels on imagenet-size's 160 sequential photos (session
      # 33; one thread per image): whether they could take the CUDA
      # route's Huffman work, ~1 CPU-ms per image on the workers, off the
      # CPU (issue 16, item 3c) at a rate worth a route.
      scan_bench imagenet-size --sequential
      step device-stage 150 "$bin/test-device_stage" gpu_ --test-threads=1 --nocapture
      trainers
      grow_data
      # The progressive lanes in the pipeline (GPUFEED_PROGRESSIVE_GPU=1,
      # src/stage/cuda/prog_route.rs; never run): the device stage's tests
      # with them (data/sample has 2 progressive photos), the shares sweep
      # (the workers' CPU column should lose the ~0.1 CPU-ms per image
      # that the progressive photos' Huffman decoding costs: issue 16's
      # 0.1 CPU-ms), and the whole corpus through them.
      GPUFEED_PROGRESSIVE_GPU=1 step device-stage-progressive-gpu 150 "$bin/test-device_stage" \
        gpu_ --test-threads=1 --nocapture
      pool_sweep progressive-gpu GPUFEED_PROGRESSIVE_GPU=1
      # Session 33: the CUDA share's sequential files under 1 MP at the
      # same lanes (GPUFEED_SEQUENTIAL_GPU=1, never run): at share 0 every
      # image's Huffman decoding leaves the workers (~0.77 CPU-ms per
      # image there on 2026-11-26); whether img/s holds is the question.
      pool_sweep sequential-gpu GPUFEED_PROGRESSIVE_GPU=1 GPUFEED_SEQUENTIAL_GPU=1
      GPUFEED_PROGRESSIVE_GPU=1 step corpus-progressive-gpu 180 "$bin/test-corpus" whole_corpus \
        --nocapture
      # Memcheck over the pixels test, which runs all three progressive
      # kernels on each progressive photo: the first 12 (the whole set ran
      # past 150 s at 2406cce).
      if command -v compute-sanitizer >/dev/null; then
        GPUFEED_TEST_MAX_FILES=12 step sanitizer-memcheck-progressive 150 compute-sanitizer \
          --tool memcheck --error-exitcode 1 "$bin/test-progressive" gpu_pixels
      fi
      # Issue 16, item 3: both routes at once ran slower than either alone
      # (share 0.5: 13,700-14,000 img/s; 0: 16,900-17,300; 1: 15,600-16,800),
      # with the engine 96 % busy on half the images. A timeline of it, and
      # whether fewer CPU workers give the engine its pace back (CPU
      # contention: the engine lanes spend ~0.09 CPU-ms per image inside
      # nvJPEG) or not (contention on the GPU or inside nvJPEG).
      step bench-cuda-trace-mix 60 "$bin/gpufeed" bench "$bench_data" --device cuda:0 \
        --batch 256 --dtype f16 --epochs 2 --hardware-share 0.5 --trace "$logs/trace-share-0.5.json"
      step bench-cuda-workers 150 "$bin/gpufeed" bench "$bench_data" --device cuda:0 --batch 256 \
        --dtype f16 --epochs 2 --sweep workers=4,8,16 --sweep hardware-share=0.5,1 \
        --out "$logs/workers"
      # The same question without the CUDA route: the engine alone (share
      # 1) beside 8 busy processes, about the CPU the workers' Huffman took
      # at share 0.5; once looping in registers, once streaming memory.
      # Slower than share 1 above: the engine route starves for CPU (or
      # memory bandwidth); as fast: the routes meet inside nvJPEG or on
      # the GPU.
      for load in cpu mem; do
        step "bench-cuda-engine-$load-load" 60 bash -c 'with_load "$@"' _ "$load" 8 \
          "$bin/gpufeed" bench "$bench_data" --device cuda:0 --batch 256 --dtype f16 --epochs 2 \
          --hardware-share 1 --json
      done
      # Issue 20: photos/full at the default, beside torchvision's pipeline.
      full_steps
      # photos/full at share 0 (session 35): its baseline photos of >= 1 MP
      # go to nvJPEG's GPU Huffman, whose later phases run on the batch
      # thread (their cost there unmeasured); with GPU Huffman off, the
      # workers Huffman-decode them. The batch thread's CPU-ms per image
      # and img/s say which pays.
      if grow_full; then
        step bench-cuda-full-share0 90 "$bin/gpufeed" bench "$full_data" --device cuda:0 \
          --batch 256 --dtype f16 --epochs 2 --hardware-share 0 --json
        GPUFEED_NVJPEG_GPU_HUFFMAN=0 step bench-cuda-full-share0-cpu-huffman 90 "$bin/gpufeed" \
          bench "$full_data" --device cuda:0 --batch 256 --dtype f16 --epochs 2 \
          --hardware-share 0 --json
      fi
      # At 243e3c9 these ran under compute-sanitizer only (passed).
      step kernel-device 60 "$bin/test-kernel_device" gpu_ --test-threads=1
      if command -v compute-sanitizer >/dev/null; then
        step sanitizer-racecheck-photo 240 compute-sanitizer --tool racecheck --error-exitcode 1 \
          "$bin/test-device_stage" gpu_photometric_ops gpu_mixup_and_cutmix --test-threads=1
      fi
      step bench-cuda-engine-call 150 "$bin/gpufeed" bench "$bench_data" --device cuda:0 --batch 256 \
        --dtype f16 --epochs 3 --sweep engine-call=0,16,32,64 --sweep hardware-share=0.5,1 \
        --out "$logs/engine-call"
      ;;
    tests)
      # What the box gives gpufeed, in one screen.
      step doctor 30 "$bin/gpufeed" doctor --require-gpu
      step unit-cuda 60 "$bin/unit-gpufeed" cuda:: --test-threads=1
      step kernels 60 "$bin/test-kernels" --test-threads=1 --nocapture
      # The augment kernels against the CPU reference.
      step kernel-device 60 "$bin/test-kernel_device" gpu_ --test-threads=1
      # The progressive-scan decoder against libjpeg-turbo, and its route.
      # (session 33: sequential files too, photos/full's left out)
      step progressive 180 "$bin/test-progressive" gpu_ --nocapture
      step kernel-routes 180 "$bin/test-kernel_routes" gpu_ --nocapture
      GPUFEED_REQUIRE_NVJPEG=1 step nvjpeg 60 "$bin/test-nvjpeg" --test-threads=1 --nocapture
      # The device stage against the CPU backend (needs data/sample).
      step device-stage 120 "$bin/test-device_stage" gpu_ --test-threads=1 --nocapture
      step interop 60 "$bin/test-interop" gpu_ --nocapture
      # The automatic share with a slow trainer ends on the engine.
      GPUFEED_SHARE_LOG=1 step auto-share 60 "$bin/test-auto_share" gpu_ --nocapture
      # nvJPEG against the CPU decoder, crop windows, the mixed epoch.
      # Each damaged file named before it decodes: in session 59 the
      # windows of one corrupted nvJPEG's heap, and an abort names the
      # last file tried.
      GPUFEED_REQUIRE_NVJPEG=1 GPUFEED_REQUIRE_HW_JPEG=1 GPUFEED_TEST_NAME_FILES=1 \
        step nvjpeg-decode 240 "$bin/test-nvjpeg_decode" --test-threads=1 --nocapture
      step corpus 180 "$bin/test-corpus" whole_corpus --nocapture
      # Again with every nvJPEG image on CUDA: the workers' host phases.
      GPUFEED_TEST_HARDWARE_SHARE=0 step corpus-share0 180 "$bin/test-corpus" whole_corpus --nocapture
      step memory 120 "$bin/test-memory" --nocapture
      step shutdown 240 "$bin/test-shutdown" --nocapture
      # Session 53: every decode lane panics in its first call, its work
      # queued; each call's files must be decoded again on the other
      # routes, none lost (the test runs itself with the fault set).
      step lane-panics 90 "$bin/test-faults" gpu_ --nocapture
      trainers
      # Issue 16, item 3c: is GPU Huffman safe at every size? The fuzz
      # corpus through the decoupled route with it on for all images (a
      # diagnostic: the default sends only images of 1 MP or more there).
      # Each file is named before it decodes: on 2026-11-26 this timed out
      # (120 s) on an H200, on a file the log did not name. Last, so that
      # a hang costs none of the suite's steps their time.
      GPUFEED_NVJPEG_GPU_HUFFMAN_MIN_PIXELS=0 GPUFEED_REQUIRE_NVJPEG=1 GPUFEED_TEST_NAME_FILES=1 \
        step nvjpeg-fuzz-gpu-huffman 90 "$bin/test-nvjpeg_decode" fuzz --nocapture
      ;;
    sanitize)
      if command -v compute-sanitizer >/dev/null; then
        for tool in memcheck racecheck; do
          step "sanitizer-$tool" 180 compute-sanitizer --tool "$tool" --error-exitcode 1 \
            "$bin/test-kernel_device" gpu_ --test-threads=1
          # The progressive kernels on the first 3 progressive photos:
          # the whole set under memcheck ran past 150 s (2406cce), the
          # first 12 past the 56 s left to them (0d15f52), so this step
          # never finished; 3 run every kernel and the scans' pipeline
          # (its waits on shared counts: racecheck's and synccheck's
          # concern) on photos of several scans each.
          GPUFEED_TEST_MAX_FILES=3 step "sanitizer-$tool-progressive" 150 compute-sanitizer \
            --tool "$tool" --error-exitcode 1 "$bin/test-progressive" gpu_pixels
          # Racecheck over nvJPEG's own kernels did not finish one route
          # test in 199 s on an H200 (2026-11-26): our kernels only.
          local_stage="gpu_rrc_f32 gpu_small_staging"
          [ "$tool" = memcheck ] && local_stage="gpu_"
          # shellcheck disable=SC2086
          step "sanitizer-$tool-stage" 240 compute-sanitizer --tool "$tool" --error-exitcode 1 \
            "$bin/test-device_stage" $local_stage --test-threads=1
          # The photometric kernel (block barriers, shared lanes) and the
          # mix kernel (pairs written by one thread), issue 19.
          step "sanitizer-$tool-photo" 240 compute-sanitizer --tool "$tool" --error-exitcode 1 \
            "$bin/test-device_stage" gpu_photometric_ops gpu_mixup_and_cutmix --test-threads=1
        done
        step sanitizer-synccheck-photo 240 compute-sanitizer --tool synccheck --error-exitcode 1 \
          "$bin/test-device_stage" gpu_photometric_ops --test-threads=1
        GPUFEED_TEST_MAX_FILES=3 step sanitizer-synccheck-progressive 150 compute-sanitizer \
          --tool synccheck --error-exitcode 1 "$bin/test-progressive" gpu_pixels
        # nvJPEG's routes, windows and the mixed epoch (issue 20): never
        # run under the sanitizer so far.
        GPUFEED_REQUIRE_NVJPEG=1 step sanitizer-memcheck-nvjpeg 300 compute-sanitizer \
          --tool memcheck --error-exitcode 1 "$bin/test-nvjpeg_decode" --test-threads=1
      else
        echo "-- compute-sanitizer not found: sanitizer runs skipped" | tee -a "$logs/summary.txt"
      fi
      ;;
    bench)
      first_batch_steps
      kernel_bench_steps
      # Decoding alone on the default's routes over a range of hardware
      # shares (the default among them), with the CPU time per image
      # (issue 5), one batch at a time and six at once.
      # `auto`: the steered share (issue 16, item 3), starting at 1.
      GPUFEED_SHARE_LOG=1 step decode-bench 150 "$bin/gpufeed" decode-bench "$data" \
        --batch 256 --iters 20 --hardware-share 0,0.5,auto,1 --in-flight 1,6
      # The engine alone, its share of a batch split into 1, 2 or 4 calls
      # in flight at once on their own streams (issue 16, item 2): whether
      # several calls raise its rate.
      step decode-bench-engine-calls 90 "$bin/gpufeed" decode-bench "$data" \
        --batch 256 --iters 20 --hardware-share 1 --engine-calls 1,2,4
      # The CUDA route with its host phases on the decoding thread alone.
      step decode-bench-1thread 60 "$bin/gpufeed" decode-bench "$data" --batch 256 --iters 5 \
        --hardware-share 0 --threads 0 --sequential-kernels=false
      grow_data
      # Issue 6's setting: batch 256, 224x224 f16 NCHW, RRC + flip, all cores.
      step bench-cuda 90 "$bin/gpufeed" bench "$bench_data" --device cuda:0 --batch 256 --dtype f16 \
        --epochs 5 --json
      step bench-cuda-routes 180 "$bin/gpufeed" bench "$bench_data" --device cuda:0 --batch 256 \
        --dtype f16 --epochs 3 --sweep hardware-share=0,0.5,1 --sweep cpu-decode=false,true \
        --out "$logs/routes"
      # The steered share against the fixed ones above; each move is
      # printed (GPUFEED_SHARE_LOG) with the costs it was set from.
      GPUFEED_SHARE_LOG=1 step bench-cuda-auto-share 120 "$bin/gpufeed" bench "$bench_data" \
        --device cuda:0 --batch 256 --dtype f16 --epochs 3 --sweep hardware-share=auto,1 \
        --sweep in-flight=2,3 --out "$logs/auto-share"
      # With a trainer step of 40 ms per batch (6,400 img/s) the pipeline
      # is not the bottleneck: auto should lean to the engine and cost the
      # CPU-ms per image of share 1, not of the balance.
      GPUFEED_SHARE_LOG=1 step bench-cuda-auto-share-trainer 120 "$bin/gpufeed" bench "$bench_data" \
        --device cuda:0 --batch 256 --dtype f16 --epochs 3 --consumer-ms 40 \
        --sweep hardware-share=auto,0.5,1 --out "$logs/auto-share-trainer"
      # Issue 16: batches decoding at once (the default, 3, is unmeasured)
      # against the share, and one timeline to open in Perfetto.
      step bench-cuda-in-flight 240 "$bin/gpufeed" bench "$bench_data" --device cuda:0 --batch 256 \
        --dtype f16 --epochs 3 --sweep in-flight=1,2,3,4 --sweep hardware-share=0,0.5,1 \
        --out "$logs/in-flight"
      # Issue 16, item 3c: GPU Huffman decoding for the whole CUDA share
      # (nvJPEG's GPU_HYBRID decoder at every size, not only from 1 MP): its
      # img/s and CPU ms per image against the default, on the fuzzed files'
      # safety see nvjpeg-decode.
      GPUFEED_NVJPEG_GPU_HUFFMAN_MIN_PIXELS=0 step bench-cuda-gpu-huffman 90 "$bin/gpufeed" \
        bench "$bench_data" --device cuda:0 --batch 256 --dtype f16 --epochs 3 --hardware-share 0
      # The same at share 1: the workers' CPU time there is mostly the
      # progressive photos' CPU Huffman (3-5 ms each on an H200,
      # 2026-11-26), which the engine never takes (issue 16, item 4).
      GPUFEED_NVJPEG_GPU_HUFFMAN_MIN_PIXELS=0 step bench-cuda-gpu-huffman-engine 90 "$bin/gpufeed" \
        bench "$bench_data" --device cuda:0 --batch 256 --dtype f16 --epochs 3 --hardware-share 1
      # Engine calls sent as a batch fills, sized near engines x cores
      # (decode-bench prints them), against one call per batch (0).
      step bench-cuda-engine-call 150 "$bin/gpufeed" bench "$bench_data" --device cuda:0 --batch 256 \
        --dtype f16 --epochs 3 --sweep engine-call=0,16,32,64 --sweep hardware-share=0.5,1 \
        --out "$logs/engine-call"
      step bench-cuda-trace 90 "$bin/gpufeed" bench "$bench_data" --device cuda:0 --batch 256 \
        --dtype f16 --epochs 2 --hardware-share 0.5 --trace "$logs/trace-share-0.5.json"
      step bench-cuda-readers 120 "$bin/gpufeed" bench "$bench_data" --device cuda:0 --batch 256 \
        --dtype f16 --epochs 3 --sweep readers=1,2,4,8 --out "$logs/readers"
      step bench-cpu 90 "$bin/gpufeed" bench "$bench_data" --device cpu --json
      ;;
    checks)
      # Issue 20's table: this runner twice at once (the deadline left
      # passed on), then the automatic share's test, which steers by each
      # route's measured pace, alone.
      left=$((${GPU_DEADLINE:-100000} - SECONDS))
      GPU_DEADLINE=$left GPU_SKIP="${GPU_SKIP:-} auto-share" OUT_LOGS=$logs/tests LOGS_TAR= \
        "$0" tests -- "$data" >"$logs/checks-tests.out" 2>&1 &
      tests_pid=$!
      GPU_DEADLINE=$left OUT_LOGS=$logs/sanitize LOGS_TAR= \
        "$0" sanitize -- "$data" >"$logs/checks-sanitize.out" 2>&1 &
      sanitize_pid=$!
      wait "$tests_pid" || status=1
      wait "$sanitize_pid" || status=1
      for half in tests sanitize; do
        echo "== $half (OUT_LOGS/$half)" >>"$logs/summary.txt"
        cat "$logs/$half/summary.txt" >>"$logs/summary.txt" 2>/dev/null
      done
      cat "$logs/summary.txt"
      GPUFEED_SHARE_LOG=1 step auto-share 60 "$bin/test-auto_share" gpu_ --nocapture
      ;;
    numbers)
      # Issue 20's benchmarks, most asked-for first.
      first_batch_steps
      grow_data
      step bench-cuda 90 "$bin/gpufeed" bench "$bench_data" --device cuda:0 --batch 256 --dtype f16 \
        --epochs 5 --json
      step peer-torchvision 120 python3 benches/peers/torchvision_gpu.py "$bench_data" \
        --batch 256 --epochs 2 --threads "$(nproc)"
      # The best setting and the engine's shares between the ends (issue
      # 16: none slower than the faster end), at the default's 6 in
      # flight and the scan kernels (the default since session 52); auto
      # prices the kernels since session 61 (its moves in the log).
      GPUFEED_SHARE_LOG=1 step bench-cuda-best 180 "$bin/gpufeed" bench "$bench_data" --device cuda:0 --batch 256 \
        --dtype f16 --epochs 3 --sweep hardware-share=0,0.25,0.5,auto,1 --sweep in-flight=6 \
        --out "$logs/best"
      # The same shares with the engine lanes in a CUDA context of their
      # own (session 61, never run; the hidden `engine_context`): nvJPEG's
      # hardware call frees memory, a free waits for its context's work,
      # and at share 0.25 beside the scan kernels the engine ran a quarter
      # of its share-1 rate. Against `best`'s rows of the same shares; and
      # the automatic share, which since session 61 prices the scan
      # kernels by their lanes' busy time (its moves in the step's log).
      GPUFEED_SHARE_LOG=1 step bench-cuda-engine-context 180 "$bin/gpufeed" bench "$bench_data" \
        --device cuda:0 --batch 256 --dtype f16 --epochs 3 --sweep engine-context=1 \
        --sweep hardware-share=0.25,0.5,auto,1 --sweep in-flight=6 --out "$logs/engine-context"
      # Issue 16's 0.1 CPU-ms per image at the engine-dominant setting: at
      # share 1 most of the workers' 0.12 is the progressive photos' CPU Huffman
      # (nvJPEG's CUDA route; the engine takes baseline files only), so
      # with them on the progressive kernels and the engine's waits
      # blocking in its own context, what is left on the CPU.
      GPUFEED_PROGRESSIVE_GPU=1 step bench-cuda-engine-context-progressive 90 "$bin/gpufeed" \
        bench "$bench_data" --device cuda:0 --batch 256 --dtype f16 --epochs 3 --engine-context \
        --hardware-share 1 --batches-in-flight 8 --json
      full_steps
      # Decode only on the default's route (the scan kernels beside the
      # engine's share), one batch at a time and six at once as the
      # pipeline keeps them: issue 16's ceiling.
      GPUFEED_SHARE_LOG=1 step decode-bench 150 "$bin/gpufeed" decode-bench "$data" \
        --batch 256 --iters 20 --hardware-share 0,auto,1 --in-flight 1,6
      kernel_bench_steps
      # The one test that needs photos/full, which `checks` does not carry:
      # nvJPEG's GPU Huffman takes baseline files only, on a progressive
      # photo of 1 MP or more (not run in session 59's `checks` call).
      if [ -d "${GPUFEED_CORPUS:-/nonexistent}/photos/full" ]; then
        GPUFEED_REQUIRE_NVJPEG=1 step nvjpeg-decode-full 60 "$bin/test-nvjpeg_decode" \
          gpu_huffman_takes --nocapture
      fi
      ;;
    dali)
      # DALI beside gpufeed, same call and files (issue 16, item 8). It
      # comes in parts (scripts/dali-parts.sh: 3 parts of <= 57 MiB at
      # 2.4.0), one carried per warm call into dist/dali; this phase, in
      # the call after (carrying the bundle: `dali lease`), joins and
      # unpacks them into /tmp/site, then runs DALI, gpufeed's default and
      # the candidate default (the sequential route) on the bench data.
      if [ ! -d /tmp/site/nvidia/dali ]; then
        step dali-install 120 bash scripts/dali-parts.sh --install
      fi
      grow_data
      step peer-dali 180 env PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} python3 \
        benches/peers/dali_pipeline.py "$bench_data" --batch 256 --epochs 2 --threads "$(nproc)"
      step bench-cuda-beside-dali 90 "$bin/gpufeed" bench "$bench_data" --device cuda:0 \
        --batch 256 --dtype f16 --epochs 3 --json
      step bench-cuda-sequential-beside-dali 90 env GPUFEED_SEQUENTIAL_GPU=1 "$bin/gpufeed" bench \
        "$bench_data" --device cuda:0 --batch 256 --dtype f16 --epochs 3 --hardware-share 0 \
        --batches-in-flight 6 --json
      ;;
    peers)
      # torchvision GPU and DALI (when installed) side by side.
      if [ -f benches/peers/compare.sh ]; then
        grow_data
        step peers 300 bash benches/peers/compare.sh "$bench_data" 3 "$logs/peers"
      fi
      ;;
  esac
done
echo "logs: $logs"
if [ -n "${LOGS_TAR:-}" ]; then
  kill "$packer" 2>/dev/null
  wait "$packer" 2>/dev/null
  pack_logs
  # The device tool brings back files of at most 16 MiB: past that, the
  # traces (Chrome JSON; their pictures stay) are left out.
  if [ "$(stat -c %s "$LOGS_TAR")" -gt 15000000 ]; then
    echo "logs over 15 MB packed: traces (*.json but the bench tables) left out" | tee -a "$logs/summary.txt"
    pack_logs --exclude 'cupti-share-*.json' --exclude 'trace-*.json'
  fi
fi
exit $status
