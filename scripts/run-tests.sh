#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Builds everything and runs every test:
#   0. scripts/check-format.sh: every C++/CUDA source as clang-format makes it (.clang-format)
#   1. build/       GUI, CLI, core (+ CUDA backend compiled when nvcc exists); all tests, interop tests against real
#                   PyTorch 2.6 through scripts/torch-python (first use builds a chroot: ~3 min, needs root + network
#                   to Debian's mirror; set OPTSCOPE_NO_INTEROP=1 to skip)
#   2. build-asan/  core, CLI and the libFuzzer harnesses (tests/fuzz) in one clang-14 -O1 build under
#                   AddressSanitizer + UndefinedBehaviorSanitizer (and libFuzzer's coverage instrumentation): the core
#                   tests again (but the job matrix and faults and the remote suite: see below), then
#   3.              from the same build, the committed regression inputs and each harness for OPTSCOPE_FUZZ_SECONDS
#                   seconds (default 20) from seeds made of the fixtures (scripts/run-fuzzers.sh;
#                   OPTSCOPE_FUZZ_SECONDS=0 replays regressions and seeds only). One sanitizer build instead of a gcc
#                   one and a clang one saves a whole build of the core: CI must stay under 45 minutes on 2 cores.
# Each stage's time is printed ("run-tests: ... took N s").
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
    export CUDACXX=/usr/local/cuda/bin/nvcc
fi
scripts/check-format.sh
torch_python="$PWD/scripts/torch-python"
[ "${OPTSCOPE_NO_INTEROP:-0}" = 1 ] && torch_python=""

stage_start=$(date +%s)
stage() { # stage NAME: the time since the last stage
    local now
    now=$(date +%s)
    echo "run-tests: $1 took $((now - stage_start)) s"
    stage_start=$now
}

# debug info as line tables only (-g1, clang's -gline-tables-only): backtraces and sanitizer reports keep their
# file:line, and a build takes about a third less time than with full -g (CI must stay under 45 minutes)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOPTSCOPE_TORCH_PYTHON="$torch_python" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG"
cmake --build build -j "$jobs"
stage "the main build"
ctest --test-dir build --output-on-failure -j "$jobs"
stage "the main tests"

# the core's tests under the sanitizers, with the CLI's fault, safety and diagnose suites and the job tests' pairs
# (diff and check by three processes over c10d's store: the store, the reduction, the job's threads). The job tests'
# matrix and faults and the remote suite (S3 through moto_server, nginx, the fault proxies) ran here too, QUICK: 1,020
# of this stage's 1,660 test-seconds, which put CI at 50 minutes; they run in full in the main tests above, and
# under the sanitizers by hand after touching their code: ctest --test-dir build-asan -R 'job|remote' (with the
# options below), or scripts/run-tsan.sh
cmake -S . -B build-asan -G Ninja -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
    -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS=-O1 -DCMAKE_CXX_FLAGS=-O1 -DCMAKE_C_FLAGS_DEBUG=-gline-tables-only \
    -DCMAKE_CXX_FLAGS_DEBUG=-gline-tables-only -DOPTSCOPE_BUILD_GUI=OFF \
    -DOPTSCOPE_WITH_CUDA=OFF -DOPTSCOPE_SANITIZE=address,undefined -DOPTSCOPE_BUILD_FUZZERS=ON \
    -DOPTSCOPE_TORCH_PYTHON="$torch_python"
cmake --build build-asan -j "$jobs"
stage "the sanitizer build"
asan_ctest() {
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        LSAN_OPTIONS=suppressions="$PWD/tests/lsan.supp" \
        ctest --test-dir build-asan -L core -E '^(job\.matrix|job\.faults|remote\.storage)$' --output-on-failure \
        -j "$jobs" "$@"
}
asan_rc=0
asan_ctest 2>&1 | tee build-asan/asan-ctest.log || asan_rc=${PIPESTATUS[0]}
if [ "$asan_rc" -ne 0 ]; then
    # LeakSanitizer's own stop-the-world tracer sometimes segfaults at exit after a test has passed ("Tracer caught
    # signal 11", google/sanitizers#1353): that is not a finding about our code. The failed tests run once more; a
    # real leak, ASan/UBSan report or failed expectation is deterministic and fails again.
    grep -q "LeakSanitizer has encountered a fatal error" build-asan/asan-ctest.log || exit "$asan_rc"
    echo "run-tests: LeakSanitizer's tracer crashed (google/sanitizers#1353); running the failed tests once more"
    asan_ctest --rerun-failed
fi

stage "the sanitizer tests"

OPTSCOPE_FUZZ_BUILD=build-asan scripts/run-fuzzers.sh "${OPTSCOPE_FUZZ_SECONDS:-20}" 1
stage "fuzzing"
