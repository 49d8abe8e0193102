#!/usr/bin/env bash
# Link stubs for the CUDA libraries candle's CUDA backend links (feature
# `candle-cuda`): libcuda, libcudart, libnvrtc, libcublas, libcublasLt and
# libcurand, so that its binaries (tests/candle_cuda.rs) link on a machine
# without a CUDA driver or toolkit, as NVIDIA's own toolkit ships
# lib64/stubs/libcuda.so for building without a driver.
#
#   scripts/cuda-link-stubs.sh CUDA_ROOT TARGET_DIR
#
# writes CUDA_ROOT/lib64/stubs, one of the folders cudarc's build script
# gives the linker, so no RUSTFLAGS change (and no rebuild) is needed. The
# symbols are what the already-built rlibs in TARGET_DIR (cudarc,
# candle-core, gpufeed; `cargo build --keep-going --features candle-cuda
# --test candle_cuda` makes them, its links failing until the stubs exist)
# leave undefined, assigned to libraries by prefix;
# each stub library has the real one's SONAME, so a binary linked against
# the stubs runs against the real libraries where they are (a GPU machine's
# driver and toolkit).
#
# Where the real libraries are missing, a binary can still start with
# CUDA_ROOT/lib64/stubs at the END of LD_LIBRARY_PATH: every driver call
# returns CUDA_ERROR_NO_DEVICE and every library call a "not initialized"
# status, so its GPU tests report "no GPU" and show as ignored. The stubs
# must never come before real libraries on a GPU machine.
set -euo pipefail
root=${1:?usage: scripts/cuda-link-stubs.sh CUDA_ROOT TARGET_DIR}
target=${2:?usage: scripts/cuda-link-stubs.sh CUDA_ROOT TARGET_DIR}
out="$root/lib64/stubs"
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

shopt -s nullglob
# candle-kernels' nvcc-built static libraries (libmoe.a) call the runtime
# API too.
rlibs=("$target"/*/deps/libcudarc-*.rlib "$target"/*/deps/libcandle_core-*.rlib
  "$target"/*/deps/libgpufeed-*.rlib "$target"/*/build/candle-kernels-*/out/*.a)
if [ ${#rlibs[@]} -eq 0 ]; then
  echo "no cudarc/candle rlibs under $target: build them first" >&2
  exit 1
fi
nm -u "${rlibs[@]}" 2>/dev/null | awk '$1 == "U" { print $2 }' |
  grep -E '^(cu|nvrtc|__cuda)' | sort -u >"$tmp/syms"

# name SONAME symbol-regex failure-status
stub() {
  local name=$1 soname=$2 pattern=$3 status=$4
  {
    echo "/* Link stub for $soname (scripts/cuda-link-stubs.sh); never the real library. */"
    echo "static const char msg[] = \"gpufeed link stub: no $name on this machine\";"
    { grep -E "$pattern" "$tmp/syms" || true; } | while read -r s; do
      case $s in
        # Calls that return a string or a version, not a status.
        *GetErrorString | *GetStatusString | *GetStatusName | nvrtcGetErrorString)
          echo "const char *$s(void) { return msg; }" ;;
        *GetVersion | *GetCudartVersion | cublasLtGetProperty)
          echo "unsigned long $s(void) { return 0; }" ;;
        *) echo "int $s(void) { return $status; }" ;;
      esac
    done
  } >"$tmp/$name.c"
  gcc -shared -fPIC -w -o "$out/lib$name.so.${soname##*.so.}" \
    -Wl,-soname,"$soname" "$tmp/$name.c"
  ln -sf "lib$name.so.${soname##*.so.}" "$out/lib$name.so"
}

# CUDA_ERROR_NO_DEVICE (100); CUBLAS_STATUS_NOT_INITIALIZED (1);
# CURAND_STATUS_NOT_INITIALIZED (201); NVRTC_ERROR_OUT_OF_MEMORY (1).
stub cublasLt libcublasLt.so.13 '^cublasLt' 1
stub cublas libcublas.so.13 '^cublas([^L]|L[^t]|$)' 1
stub curand libcurand.so.10 '^curand' 201
stub nvrtc libnvrtc.so.13 '^nvrtc' 1
# The runtime is real where scripts/cuda-root.sh put NVIDIA's wheel (its
# static parts, the fat-binary registration nvcc emits, have no status to
# return); a stub otherwise.
if [ -e "$root/lib64/libcudart.so.13" ]; then
  ln -sf ../libcudart.so.13 "$out/libcudart.so"
else
  stub cudart libcudart.so.13 '^(cuda|__cuda)' 100
fi
# The driver API's names go on with a capital (cuInit, cuMemAlloc_v2).
stub cuda libcuda.so.1 '^cu[A-Z]' 100
echo "stubs in $out: $(wc -l <"$tmp/syms") symbols"
