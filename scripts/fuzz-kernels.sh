#!/usr/bin/env bash
# Coverage-guided fuzzing of the progressive kernels (kernels/progressive.cu
# with entropy.cuh, kernels/pixels.cu) compiled for the host, under ASan
# and UBSan (undefined behaviour traps: what is undefined in C++ is
# undefined in CUDA C++, and
# nvcc may optimise on it as clang does): the `progressive`
# cargo-fuzz target with the kernels built by clang with libFuzzer's
# coverage instrumentation, so that libFuzzer is guided by the kernels'
# branches (Huffman decoding, refinement, sampling), not only by the Rust
# planner's. g++ has no such instrumentation; the flags reach the kernels
# alone through GPUFEED_EMU_CXXFLAGS (build.rs), never libFuzzer's own
# sources.
#
#   scripts/fuzz-kernels.sh [SECONDS]    (default 600)
#
# GPUFEED_SPLIT_ROUNDS=0 leaves the split kernels no round: their check
# then decodes again every subsequence whose guess was wrong (at the
# default 16 rounds the fuzzer's small files rarely leave it any).
#
# Needs a nightly toolchain, cargo-fuzz and clang (Debian: clang-19). The
# corpus grows in fuzz/corpus/progressive (ignored by git), seeded from
# ../shared/testdata/fuzz; crashes land in fuzz/artifacts/progressive.
# At the end it prints the kernels' functions with their edges covered.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-600}
cxx=$(command -v clang++-19 || command -v clang++ || true)
if [[ -z $cxx ]]; then
    echo "clang++ not found (apt-get install clang-19)" >&2
    exit 1
fi
cc=${cxx/clang++/clang}
export CXX=$cxx CC=$cc
# UBSan traps (no runtime to link; a trap is a crash to libFuzzer).
export GPUFEED_EMU_CXXFLAGS="-fsanitize=address,undefined,fuzzer-no-link -fsanitize-trap=undefined -fno-omit-frame-pointer"
cargo +nightly fuzz build -O --features kernel-emu progressive
bin=fuzz/target/x86_64-unknown-linux-gnu/release/progressive
mkdir -p fuzz/corpus/progressive fuzz/artifacts/progressive
"$bin" -max_total_time="$secs" -timeout=20 -rss_limit_mb=4096 \
    -artifact_prefix=fuzz/artifacts/progressive/ \
    fuzz/corpus/progressive ../shared/testdata/fuzz
# Edges covered per kernel function over the corpus reached (the whole
# report in fuzz/artifacts/progressive/coverage.txt).
report=fuzz/artifacts/progressive/coverage.txt
"$bin" -runs=0 -print_coverage=1 fuzz/corpus/progressive > "$report" 2>&1
grep -E '^(UN)?COVERED_FUNC' "$report" | grep -E 'kernels/|tests/emu/' |
    sed -E 's# /[^ ]*/(kernels|tests/emu)/# \1/#'
