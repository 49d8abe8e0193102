#!/usr/bin/env bash
# Build the CUPTI tracer (inject.c, sum.c) against CUDA 13.0's CUPTI from
# NVIDIA's wheels, with libcupti.so.13 beside it (the tracer finds it
# through its RUNPATH, $ORIGIN), into OUT (default target/cupti/out).
#
#   benches/cupti/build.sh [OUT] [--check]
#
# --check also runs what needs no GPU: sum.c's test (under AddressSanitizer,
# its trace read back as JSON) and the tracer loaded as the driver would
# load it, its CUPTI calls failing for want of a driver, its files written
# anyway, at the window's close and at exit. CI runs this.
#
# On a CUDA machine (run-gpu-tests.sh does this in its quick phase):
#   CUDA_INJECTION64_PATH=OUT/libgpufeed_cupti.so GPUFEED_CUPTI_OUT=run \
#     GPUFEED_CUPTI_FROM_S=5 GPUFEED_CUPTI_FOR_S=1 gpufeed bench ...
# then read run.txt; open run.json in Perfetto.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=target/cupti/out
check=
for a in "$@"; do
  case $a in
    --check) check=1 ;;
    *) out=$a ;;
  esac
done
root=target/cupti/root
if [ ! -f "$root/include/cupti_activity.h" ] || [ ! -f "$root/include/crt/host_defines.h" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  # CUPTI's headers include cuda.h (the runtime wheel) and, through it,
  # crt/host_defines.h (the crt wheel).
  python3 -m pip download --quiet --disable-pip-version-check --no-deps -d "$tmp/wheels" \
    nvidia-cuda-cupti==13.0.85 nvidia-cuda-runtime==13.0.96 nvidia-cuda-crt==13.0.88
  mkdir -p "$root" "$tmp/x"
  for w in "$tmp"/wheels/*.whl; do
    python3 -m zipfile -e "$w" "$tmp/x"
  done
  cp -r "$tmp"/x/nvidia/cu13/. "$root"/
fi
src=benches/cupti
flags=(-std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -O2)
mkdir -p "$out"
gcc "${flags[@]}" -fPIC -shared -I"$root/include" -o "$out/libgpufeed_cupti.so" \
  "$src/inject.c" "$src/sum.c" -L"$root/lib" -l:libcupti.so.13 -Wl,-rpath,'$ORIGIN' -lpthread
cp "$root/lib/libcupti.so.13" "$out/"
echo "built $out/libgpufeed_cupti.so"

if [ -n "$check" ]; then
  t=target/cupti/check
  rm -rf "$t"
  mkdir -p "$t"
  gcc "${flags[@]}" -fsanitize=address,undefined -fno-sanitize-recover=all -o "$t/test_sum" "$src/test_sum.c" "$src/sum.c"
  "$t/test_sum" "$t/sum"
  python3 -m json.tool "$t/sum.json" >/dev/null
  # The memory callback, fed made-up calls; -rdynamic so that the stack
  # walk can name the test's own frame.
  gcc "${flags[@]}" -rdynamic -I"$root/include" -o "$t/test_inject" "$src/test_inject.c" \
    "$src/sum.c" -L"$root/lib" -l:libcupti.so.13 -Wl,-rpath,"$PWD/$root/lib" -lpthread -ldl
  "$t/test_inject" "$t/inject"
  gcc "${flags[@]}" -o "$t/smoke" "$src/smoke.c" -ldl
  # The window opens and closes while the process runs...
  GPUFEED_CUPTI_OUT=$t/closed GPUFEED_CUPTI_FROM_S=0.1 GPUFEED_CUPTI_FOR_S=0.1 \
    "$t/smoke" "$out/libgpufeed_cupti.so" 800 2>"$t/closed.err"
  grep -q "written as the window closed" "$t/closed.txt"
  grep -q "CUPTI error" "$t/closed.txt"
  python3 -m json.tool "$t/closed.json" >/dev/null
  # ...or the process ends in the window...
  GPUFEED_CUPTI_OUT=$t/mid GPUFEED_CUPTI_FROM_S=0.1 GPUFEED_CUPTI_FOR_S=5 \
    "$t/smoke" "$out/libgpufeed_cupti.so" 400 2>"$t/mid.err"
  grep -q "written at exit" "$t/mid.txt"
  grep -q "window: 0.100 s to 5.100 s" "$t/mid.txt"
  python3 -m json.tool "$t/mid.json" >/dev/null
  # ...or before it.
  GPUFEED_CUPTI_OUT=$t/early GPUFEED_CUPTI_FROM_S=30 \
    "$t/smoke" "$out/libgpufeed_cupti.so" 2>"$t/early.err"
  grep -q "ended before the window opened" "$t/early.txt"
  python3 -m json.tool "$t/early.json" >/dev/null
  echo "cupti tracer checks: ok"
fi
