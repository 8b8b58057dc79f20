#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Builds the libFuzzer harnesses (tests/fuzz) with clang-14 under ASan + UBSan in build-fuzz/ and runs each one.
#
#   scripts/run-fuzzers.sh [SECONDS_PER_HARNESS] [JOBS] [HARNESS...]
#
#   SECONDS_PER_HARNESS  fuzzing time for each harness (default 60); 0 only replays the seeds and regressions
#   JOBS                 parallel fuzzing processes per harness (libFuzzer -fork=JOBS; default 1)
#   HARNESS              pickle zip torch_save dcp safetensors s3_listing block_map (default: all)
#
# The harnesses run beside each other, as many at once as the machine has cores divided by JOBS (each gets its
# SECONDS all the same; on CI's 2 cores the 7 harnesses take 4 slots of 30 s instead of 7).
#
# Seeds are made from the fixtures (tests/fuzz/make_seeds.py tests/data) on every run; what the fuzzer finds beyond
# them accumulates in build-fuzz/fuzz/corpus/<harness>. Crashes, leaks, timeouts and OOMs are written to
# build-fuzz/fuzz/artifacts/<harness>/ and make the script fail: minimize one with
#   build-fuzz/tests/fuzz/fuzz_<harness> -minimize_crash=1 -runs=10000 FILE
# fix the core, and commit the input to tests/fuzz/regressions/<harness>/ (replayed by every build's tests).
# Logs: build-fuzz/fuzz/logs/<harness>.log. Environment: OPTSCOPE_FUZZ_BUILD (default build-fuzz),
# OPTSCOPE_FUZZ_ARGS (extra libFuzzer flags).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
jobs=${2:-1}
shift $(($# > 2 ? 2 : $#))
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=(pickle zip torch_save dcp safetensors s3_listing block_map)
build=${OPTSCOPE_FUZZ_BUILD:-build-fuzz}
cores=$(nproc) # before OMP_NUM_THREADS=1 below: nproc counts that, not the machine
build_jobs=$((cores < 2 ? cores : 2))

if [ ! -f "$build/build.ninja" ]; then
    CC=clang-14 CXX=clang++-14 cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DOPTSCOPE_BUILD_GUI=OFF -DOPTSCOPE_WITH_CUDA=OFF -DOPTSCOPE_BUILD_FUZZERS=ON >/dev/null
fi
cmake --build "$build" --target optscope_fuzzers -j "$build_jobs"

work=$build/fuzz
rm -rf "$work/seeds"
python3 tests/fuzz/make_seeds.py tests/data "$work/seeds"
mkdir -p "$work/logs"
rm -f "$work"/logs/*.summary

export OMP_NUM_THREADS=1
export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp"
export UBSAN_OPTIONS=print_stacktrace=1

fuzz_one() { # HARNESS: fuzzes it; its summary line in $work/logs/HARNESS.summary, non-zero when it found something
    local h=$1 bin corpus artifacts log before inputs args start rc elapsed after runs cov ft corpus_files rate line
    local failed=0
    bin=$build/tests/fuzz/fuzz_$h
    corpus=$work/corpus/$h
    artifacts=$work/artifacts/$h
    log=$work/logs/$h.log
    mkdir -p "$corpus" "$artifacts"
    before=$(find "$artifacts" -type f | wc -l)
    inputs=("$corpus" "$work/seeds/$h")
    # the committed findings first, once each (not part of the corpus: some are large, and -max_len follows it)
    if [ -d "tests/fuzz/regressions/$h" ] && ! "$bin" -runs=0 -timeout=30 -rss_limit_mb=2560 \
        "tests/fuzz/regressions/$h" >"$work/logs/$h.regressions.log" 2>&1; then
        echo "run-fuzzers: $h: a committed regression input fails again, see $work/logs/$h.regressions.log"
        failed=1
    fi
    args=(-timeout=10 -rss_limit_mb=2560 -print_final_stats=1 -artifact_prefix="$artifacts/")
    # DCP seeds made from the large fixtures are up to 235 KB and their executions 10x slower than the few-KB
    # tests/data/fuzz ones: mutate at most 64 KB (longer seeds keep their .metadata and the start of a data file)
    [ "$h" = dcp ] && args+=(-max_len=65536)
    if [ "$seconds" -eq 0 ]; then
        args+=(-runs=0)
    else
        args+=(-max_total_time="$seconds")
        [ "$jobs" -gt 1 ] && args+=(-fork="$jobs")
    fi
    echo "run-fuzzers: $h: ${seconds}s, $jobs job(s)"
    start=$(date +%s)
    rc=0
    # shellcheck disable=SC2086
    "$bin" "${args[@]}" ${OPTSCOPE_FUZZ_ARGS:-} "${inputs[@]}" >"$log" 2>&1 || rc=$?
    elapsed=$(($(date +%s) - start))
    after=$(find "$artifacts" -type f | wc -l)
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    [ -n "$runs" ] || runs=$(grep -o '^#[0-9]*' "$log" | tail -1 | tr -d '#' || true)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2 || true)
    ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | cut -d' ' -f2 || true)
    corpus_files=$(find "$corpus" -type f | wc -l)
    rate=$((elapsed > 0 ? ${runs:-0} / elapsed : 0))
    line="$h: runs ${runs:-?} in ${elapsed}s (${rate}/s), cov ${cov:-?}, ft ${ft:-?}, corpus $corpus_files, findings $((after - before))"
    if [ "$rc" -ne 0 ] || [ "$after" -gt "$before" ]; then
        failed=1
        line="$line  FAILED (rc $rc, see $log)"
        grep -E 'ERROR: |SUMMARY: |runtime error|Test unit written' "$log" | head -8 || true
    fi
    echo "$line" >"$work/logs/$h.summary"
    return $failed
}

slots=$((cores / jobs))
[ "$slots" -ge 1 ] || slots=1
status=0
running=0
for h in "${harnesses[@]}"; do
    if [ "$running" -ge "$slots" ]; then
        wait -n || status=1
        running=$((running - 1))
    fi
    fuzz_one "$h" &
    running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
    wait -n || status=1
    running=$((running - 1))
done
for h in "${harnesses[@]}"; do
    echo "run-fuzzers: $(cat "$work/logs/$h.summary" 2>/dev/null || echo "$h: no summary (the script failed)")"
done
exit $status
