#!/usr/bin/env bash
# The core's tests, the CLI's fault tests and the job tests under ThreadSanitizer (clang, GUI off): not part of CI,
# whose 45 minutes on 2 cores do not hold a third build; run it after touching threads (io/remote_object.cpp, job.cpp,
# the assemblers, diff). Usage: scripts/run-tsan.sh [BUILD_DIR] [ctest args...]; about 25 min to build and 20 to run
# on 2 cores. libtorch (liboptscope_aten.so's OpenMP) is not instrumented: the tests that run ATen ops may report
# its threads; tests/tsan.supp holds the suppressions we decided are not bugs, each with why.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build-tsan}"
shift || true
torch_python="$PWD/scripts/torch-python"
cmake -S . -B "$build" -G Ninja -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
    -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS=-O1 -DCMAKE_CXX_FLAGS=-O1 -DCMAKE_C_FLAGS_DEBUG=-gline-tables-only \
    -DCMAKE_CXX_FLAGS_DEBUG=-gline-tables-only -DOPTSCOPE_BUILD_GUI=OFF -DOPTSCOPE_WITH_CUDA=OFF \
    -DOPTSCOPE_SANITIZE=thread -DOPTSCOPE_TORCH_PYTHON="$torch_python"
cmake --build "$build" -j "$(nproc)"
TSAN_OPTIONS="halt_on_error=0 report_signal_unsafe=0 suppressions=$PWD/tests/tsan.supp" \
    ctest --test-dir "$build" -L core --output-on-failure --timeout 900 "$@"
