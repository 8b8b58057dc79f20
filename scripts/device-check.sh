#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The GPU checks of issue 31 as one prepared command.
#
#   scripts/device-check.sh pack   (here, on the CPU build machine) builds build-gpu/: core, CLI, tests and
#          bench/gpu/gpu_bench with CUDA for sm_90 (H100/H200), no GUI; then packs what the GPU machine needs into
#          build-device/pack.tar.gz: the stripped binaries and ctest files at their build-gpu paths, the runtime
#          libraries its image may lack (curl, libxml2, OpenSSL and theirs; not glibc or libstdc++), and nlohmann's
#          headers. build-device/ is git-ignored: the device tool takes it along with carry=["build-device"].
#   scripts/device-check.sh run    (on the GPU machine, $OUT set) in about 5 minutes:
#          1. the machine: nvidia-smi, nvcc, the Python's torch, what libraries and headers the image has;
#          2. liboptscope_aten.so and liboptscope_c10d.so (the only torch-linked parts) built there against the
#             libtorch inside that Python's PyTorch (the pack's binaries load them at run time);
#          3. ctest -L cuda (tests/gpu: GPU gather, verify, copy lanes and compare against the CPU, bit for bit),
#             then every core test (ctest -L core, minus the two that need the trixie chroot, moto and nginx);
#          4. the interop: tests/gpu/interop_fsdp2_cuda.sh (FSDP2 on the GPU, fused AdamW, dcp.save, OptScope's
#             reshard, verify and gather --device cuda, PyTorch loads the results); then the README's
#             `torchrun --no-python` line with that PyTorch's own torchrun (2 processes, byte for byte against one);
#          5. the benchmark: a 2 GB checkpoint host -> device by gpu_bench (OptScope's copy lanes, a pinned
#             cudaMemcpy, a pageable one, the device compare) and by PyTorch (torch.load(map_location="cuda"), DCP
#             load), and gather/reshard/verify --device cuda against --device cpu;
#          and writes summary.md, bench.json and the logs under $OUT (at most 8 files: the device tool's limit).
#          CTEST_ONLY=REGEX runs steps 1-2 and only those tests (a rerun after a fix); JOB_ONLY_GB=N only the job bench.
#   scripts/device-check.sh run-build  (on the GPU machine, $OUT set) the full build there instead of the pack's
#          binaries: CMake configures core, CLI and tests (CUDA sm_90, no GUI) against the image's gcc, CUDA and the
#          PyTorch in its Python (find_package(Torch) from that wheel), with the pack's curl/libxml2/ICU headers and
#          the image's own libraries; builds; runs ctest -L cuda and ctest -L core; about 7 minutes.
# The binaries were built with absolute paths under /work/main (test data, the aten library's build path), so the
# run links /work/main to the repository copy it runs in when that is elsewhere.
set -uo pipefail
mode=${1:-}
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

pack() {
    set -e
    local b=build-gpu
    # the tests that run Python scripts take /usr/bin/python3 (the GPU machine has one; a pyenv shim here would not be)
    cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOPTSCOPE_BUILD_GUI=OFF -DOPTSCOPE_WITH_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 -DPython3_EXECUTABLE=/usr/bin/python3 >/dev/null
    ninja -C $b
    rm -rf build-device && mkdir -p build-device/stage/build-device/lib build-device/stage/build-device/include
    local stage=build-device/stage
    # executables and test discovery files at their build-gpu paths; the aten include root (links into core/)
    (cd $b && find . -name CTestTestfile.cmake -o -name '*_tests*.cmake' -o -name '*_include.cmake') |
        while read -r f; do mkdir -p "$stage/$b/$(dirname "$f")" && cp "$b/$f" "$stage/$b/$f"; done
    for f in app/optscope-cli bench/gpu/gpu_bench $(cd $b && find tests -type f -executable -name 'optscope_*'); do
        mkdir -p "$stage/$b/$(dirname "$f")"
        strip -o "$stage/$b/$f" "$b/$f"
    done
    mkdir -p "$stage/$b/core"
    cp -a $b/core/layers "$stage/$b/core/layers"
    # runtime libraries beside glibc and the C++ runtime (the image is newer than bookworm: those it has)
    ldd $b/app/optscope-cli $b/tests/core/optscope_core_tests | awk '$3 ~ /^\// {print $3}' | sort -u |
        grep -Ev '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' |
        while read -r l; do cp -L "$l" $stage/build-device/lib/; done
    cp -a /usr/include/nlohmann $stage/build-device/include/
    # for run-build: the development headers the GPU image lacks (its libcurl.so and libxml2.so.2 are there);
    # libxml2's encoding.h includes ICU's
    cp -a /usr/include/x86_64-linux-gnu/curl /usr/include/libxml2 /usr/include/unicode $stage/build-device/include/
    tar -C $stage -czf build-device/pack.tar.gz .
    rm -rf $stage
    du -h build-device/pack.tar.gz
}

# what run and run-build share: the summary under $OUT, timed steps, a fresh log folder (bash's dynamic scope:
# say and step read the caller's summary and t_start)
say() { echo "$*" | tee -a "$summary"; }
step() { say ""; say "## $1 (t=$((SECONDS - t_start)) s)"; }
begin() { # LOGS TITLE
    rm -rf "$1" && mkdir -p "$1"
    echo "# $2 $(date -u +%FT%TZ)" >"$summary"
}

# issue 32's job bench: COMMAND P=1,2,4,8 on CKPT, the best of two runs, into $OUT/job.json and the summary table
# (bash's dynamic scope: the caller's logs and summary). Also runs alone here: OUT=/tmp/o scripts/device-check.sh
# job-bench CKPT CLI PYTHON.
job_bench() { # CKPT CLI PYTHON
    local ckpt=$1 cli=$2 py=$3 t0 t1 what
    # The 2-core build machine cannot show a job's speed-up (bench/results/job.md); this one has 16 cores. The same
    # page-cached 2 GB DCP folder, --device cpu, the best of two runs; TMPDIR beside the outputs (verify's copy).
    local jb=/tmp/jobbench port=29611
    {
        echo '{'
        local firstj=1 p rep best secs
        for what in "reshard $ckpt --world-size 8 --no-fsync -o $jb/out" "gather $ckpt --no-fsync -o $jb/out.pt" \
            "verify $ckpt --world-size 8" "check $ckpt"; do
            for p in 1 2 4 8; do
                best=
                for rep in $(seq "${JOB_REPS:-2}"); do
                    rm -rf $jb && mkdir -p $jb/logs
                    t0=$(date +%s.%N)
                    if [ $p = 1 ]; then
                        TMPDIR=$jb "$cli" $what >$jb/logs/rank0.out 2>$jb/logs/rank0.err
                        echo "rank 0 exit $?" >$jb/exits
                    else
                        port=$((port + 1))
                        TMPDIR=$jb sh tests/job/launch.sh torchrun $p $port $jb/logs "$cli" $what >$jb/exits
                    fi
                    t1=$(date +%s.%N)
                    secs=$(awk "BEGIN {print $t1 - $t0}")
                    grep -qv ' exit [01]$' $jb/exits && {
                        echo "FAILED P=$p $what: $(cat $jb/exits) $(cat $jb/logs/*.err | head -5)" >>$logs/job.log
                        secs=null
                    }
                    if [ "$secs" != null ] && { [ -z "$best" ] || awk "BEGIN {exit !($secs < $best)}"; }; then
                        best=$secs
                    fi
                done
                [ $firstj = 1 ] || echo ","
                firstj=0
                echo "\"${what%% *} P=$p\": ${best:-null}"
            done
        done
        echo '}'
    } >$OUT/job.json 2>>$logs/job.log
    "$py" - "$OUT/job.json" <<'EOF' | tee -a "$summary"
import json, sys
try:
    j = json.load(open(sys.argv[1]))
except Exception as e:
    print("job.json unreadable:", e); sys.exit()
print("| command | P = 1 (s) | P = 2 | P = 4 | P = 8 | speed-up at 2 / 4 / 8 |\n|---|---:|---:|---:|---:|---|")
for c in ("reshard", "gather", "verify", "check"):
    t = [j.get(f"{c} P={p}") for p in (1, 2, 4, 8)]
    sp = " / ".join(f"{t[0] / x:.2f}x" if (t[0] and x) else "-" for x in t[1:])
    print(f"| {c} | " + " | ".join(f"{x:.2f}" if x else "failed" for x in t) + f" | {sp} |")
EOF

}

run() {
    : "${OUT:?run is for the GPU machine (the device tool sets OUT)}"
    local t_start=$SECONDS logs=/tmp/device-check-logs summary=$OUT/summary.md
    begin $logs device-check

    # 0. paths: the binaries expect /work/main
    [ -x /usr/bin/python3 ] || ln -s "$(command -v python3)" /usr/bin/python3
    if [ ! -e /work/main ]; then
        mkdir -p /work && ln -s "$repo" /work/main
    elif [ "$(pwd -P)" != "$(cd /work/main && pwd -P)" ]; then
        say "/work/main exists and is not this repository: the pack's paths would not resolve"
        return 1
    fi
    tar -C "$repo" -xzf build-device/pack.tar.gz
    # the pack's libraries only where the image lacks that soname (its own are newer), and only for our binaries:
    # Python keeps its own
    local libs=$repo/build-device/uselib l
    mkdir -p "$libs"
    ldconfig -p >/tmp/ld-cache.txt
    for l in "$repo"/build-device/lib/*; do
        grep -q "^[[:space:]]*$(basename "$l") " /tmp/ld-cache.txt || ln -sf "$l" "$libs/"
    done
    local cli=/tmp/optscope-cli # the CLI with those libraries, for the scripts that call it
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$libs" "$repo/build-gpu/app/optscope-cli" >$cli
    chmod +x $cli
    withlibs() { LD_LIBRARY_PATH=$libs "$@"; }
    local py
    py=$(command -v python3)

    step "1. the machine"
    {
        nvidia-smi
        nvcc --version | tail -2
        uname -a
        grep PRETTY /etc/os-release
        nproc
        free -g
        "$py" -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "cxx11abi", torch._C._GLIBCXX_USE_CXX11_ABI, "nccl", torch.cuda.nccl.version())'
        echo "--- libraries the image has"
        ldconfig -p | grep -E 'libcurl|libxml2|libssl|libcrypto|libz\.|libgtest|libnccl|libicu' || true
        echo "--- headers"
        ls -d /usr/include/curl /usr/include/libxml2 /usr/include/openssl /usr/include/zlib.h /usr/include/gtest \
            /usr/include/nlohmann 2>&1
        command -v cmake ctest ninja g++ gcc clang++ 2>&1
        g++ --version | head -1
        df -h / /tmp
    } >$logs/machine.txt 2>&1
    grep -E "H100|H200|NVIDIA-SMI|torch" $logs/machine.txt | head -4 | tee -a "$summary"
    say "carried libraries used (the image lacks them): $(ls "$libs" | tr '\n' ' ')"
    "$cli" devices | tee -a "$summary"

    step "2. liboptscope_aten.so and liboptscope_c10d.so against this machine's libtorch"
    local tdir abi
    tdir=${TORCH_DIR:-$("$py" -c 'import torch, os; print(os.path.dirname(torch.__file__))')}
    abi=$("$py" -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))' 2>/dev/null || echo unknown)
    [ "$abi" = 1 ] || say "torch's _GLIBCXX_USE_CXX11_ABI is $abi; the pack was built with 1: expect link errors"
    build_torch_lib() { # NAME ROOT SOURCES...
        local name=$1 root=$2
        shift 2
        local std
        for std in c++17 c++20; do
            local objs=() ok=1 s
            for s in "$@"; do
                objs+=("/tmp/$name-$(basename "$s").o")
                g++ -std=$std -O2 -fPIC -fvisibility=hidden -fvisibility-inlines-hidden -D_GLIBCXX_USE_CXX11_ABI=1 \
                    -I"$repo/build-gpu/core/layers/$root" -I"$repo/build-device/include" -I"$tdir/include" \
                    -I"$tdir/include/torch/csrc/api/include" -c "$s" -o "/tmp/$name-$(basename "$s").o" &
            done
            for s in "$@"; do wait -n || ok=0; done
            if [ $ok = 1 ] && g++ -shared -o "$repo/build-gpu/core/lib$name.so" "${objs[@]}" -L"$tdir/lib" \
                -Wl,-rpath,"$tdir/lib" -ltorch -ltorch_cpu -lc10; then
                say "lib$name.so built (-std=$std) against $tdir"
                return 0
            fi
        done
        say "lib$name.so: FAILED to build against $tdir (log: build-torch-libs.log)"
        return 1
    }
    {
        build_torch_lib optscope_aten aten core/src/aten/aten_bridge.cpp core/src/aten/aten_diff.cpp \
            core/src/aten/aten_stats_kernels.cpp core/src/aten/aten_ops_table.cpp core/src/model/dtype.cpp \
            core/src/model/element_decoder.cpp
        build_torch_lib optscope_c10d c10d core/src/c10d/c10d_store.cpp
    } >$logs/build-torch-libs.log 2>&1 # say() puts the outcome in the summary too
    grep -E "^liboptscope" $logs/build-torch-libs.log

    if [ -n "${CTEST_ONLY:-}" ]; then # `CTEST_ONLY='^job\.' scripts/device-check.sh run`: those tests only (a rerun)
        step "3. ctest -R '$CTEST_ONLY'"
        withlibs ctest --test-dir build-gpu -R "$CTEST_ONLY" -j "$(nproc)" --timeout 300 --output-on-failure \
            >$logs/ctest-only.log 2>&1
        say "ctest -R '$CTEST_ONLY': exit $? — $(grep -E 'tests passed|tests failed' $logs/ctest-only.log)"
        grep -E "Passed|\*\*\*Failed|^FAIL|Timeout" $logs/ctest-only.log | sed 's/^ *//' | head -40 >>"$summary"
        step "done"
        tar -C $logs -czf $OUT/logs.tar.gz .
        return
    fi
    if [ -n "${JOB_ONLY_GB:-}" ]; then # `JOB_ONLY_GB=12 scripts/device-check.sh run`: only the job bench, larger
        step "6. issue 32: P = 1, 2, 4, 8 processes on a ${JOB_ONLY_GB} GB one-process DCP folder"
        "$py" bench/gpu/torch_h2d.py make /tmp/h2d "$JOB_ONLY_GB" >$logs/bench.log 2>&1 && rm -f /tmp/h2d/big.pt
        say "$(du -sh /tmp/h2d/big_dcp)"
        cat /tmp/h2d/big_dcp/* >/dev/null
        job_bench /tmp/h2d/big_dcp "$cli" "$py"
        step "done"
        tar -C $logs -czf $OUT/logs.tar.gz .
        return
    fi
    step "3. ctest -L cuda, then the core tests"
    withlibs ctest --test-dir build-gpu -L cuda --output-on-failure -j 4 >$logs/ctest-cuda.log 2>&1
    say "ctest -L cuda: exit $? — $(grep -E 'tests passed|tests failed' $logs/ctest-cuda.log)"
    grep -E "Passed|Failed|Skipped|Not Run" $logs/ctest-cuda.log | sed 's/^ *//' | head -40 >>"$summary"
    withlibs ctest --test-dir build-gpu -L core -E '^(diagnose|remote)\.' -j "$(nproc)" --timeout 300 --output-on-failure \
        >$logs/ctest-core.log 2>&1
    say "ctest -L core (without diagnose.verdicts_match_pytorch and remote.storage: they need the trixie chroot, moto and nginx): exit $? — $(grep -E 'tests passed|tests failed' $logs/ctest-core.log)"
    grep -E "\*\*\*Failed|Not Run|Timeout|SegFault|Exception" $logs/ctest-core.log | head -30 >>"$summary"

    step "4. interop: FSDP2 on the GPU -> dcp.save -> OptScope reshard / verify / gather --device cuda -> PyTorch loads"
    (cd "$repo" && timeout 240 bash tests/gpu/interop_fsdp2_cuda.sh "$py" "$cli" /tmp/interop cuda) \
        >$logs/interop.log 2>&1
    say "interop: exit $?"
    grep -E "^interop|IDENTICAL|DIFFERENT|wrote|Error|error" $logs/interop.log | head -20 >>"$summary"
    # the GPU-trained checkpoint and its reference come back as a fixture (about 2 MB)
    [ -d /tmp/interop/ckpt ] && tar -C /tmp/interop -czf $OUT/fsdp2_cuda_fixture.tar.gz ckpt ref.pt

    step "4b. the README's torchrun --no-python line, with this machine's own torchrun (PyTorch's launcher)"
    # reshard, gather and verify --json of a 3-rank FSDP2 checkpoint by 2 processes, against one process's output,
    # byte for byte: with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (rank 0 serves the store, as the README says for a
    # libtorch older than the torchrun) and without it (the agent's store; liboptscope_c10d.so was built above against
    # this PyTorch)
    local j=/tmp/job data=$repo/tests/data/fsdp2_r3 mode
    rm -rf $j && mkdir -p $j/one
    {
        "$cli" reshard "$data" --world-size 4 -o $j/one/rs && "$cli" gather "$data" -o $j/one/full.pt &&
            "$cli" verify "$data" --world-size 3 --json >$j/one/verify.json
        for mode in own_store agent_store; do
            mkdir -p $j/$mode
            local pre=()
            [ $mode = own_store ] && pre=(env TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1)
            local tr=("${pre[@]}" "$py" -m torch.distributed.run --no-python --standalone --nproc-per-node 2)
            echo "+ ${tr[*]} optscope-cli reshard|gather|verify ..."
            timeout 60 "${tr[@]}" "$cli" reshard "$data" --world-size 4 -o $j/$mode/rs &&
                diff -r $j/one/rs $j/$mode/rs && echo "RESULT $mode reshard: identical to one process"
            timeout 60 "${tr[@]}" "$cli" gather "$data" -o $j/$mode/full.pt &&
                cmp $j/one/full.pt $j/$mode/full.pt && echo "RESULT $mode gather: identical to one process"
            timeout 60 "${tr[@]}" "$cli" verify "$data" --world-size 3 --json >$j/$mode/verify.json &&
                cmp $j/one/verify.json $j/$mode/verify.json && echo "RESULT $mode verify --json: identical to one process"
        done
    } >$logs/torchrun.log 2>&1
    grep -E "^RESULT|^\+ " $logs/torchrun.log | tee -a "$summary"
    say "torchrun: $(grep -c '^RESULT' $logs/torchrun.log) of 6 identical to one process (log: torchrun.log)"

    step "5. benchmark: 2 GB host -> device"
    local h2d=/tmp/h2d
    "$py" bench/gpu/torch_h2d.py make $h2d 2 >$logs/bench.log 2>&1
    cat $h2d/big.pt $h2d/big_dcp/* >/dev/null # the page cache
    {
        echo '{"gpu_bench_torch_save":'
        withlibs build-gpu/bench/gpu/gpu_bench $h2d/big.pt --repeat 3 2>>$logs/bench.log || echo null
        echo ',"gpu_bench_dcp":'
        withlibs build-gpu/bench/gpu/gpu_bench $h2d/big_dcp --repeat 3 2>>$logs/bench.log || echo null
        echo ',"pytorch":'
        "$py" bench/gpu/torch_h2d.py time $h2d cuda 3 2>>$logs/bench.log || echo null
        echo ',"cli":{'
        local first=1 what dev t0 t1
        for what in "gather $h2d/big_dcp -o /tmp/g.pt" "reshard $h2d/big_dcp --world-size 4 --no-fsync -o /tmp/rs" \
            "verify $h2d/big_dcp --world-size 4"; do
            for dev in cpu cuda; do
                rm -rf /tmp/rs /tmp/g.pt
                t0=$(date +%s.%N)
                "$cli" $what --device $dev >>$logs/bench.log 2>&1
                local rc=$?
                t1=$(date +%s.%N)
                [ $first = 1 ] || echo ","
                first=0
                echo "\"${what%% *} --device $dev\": {\"rc\": $rc, \"seconds\": $(awk "BEGIN {print $t1 - $t0}")}"
            done
        done
        echo '}}'
    } >$OUT/bench.json
    "$py" - "$OUT/bench.json" <<'EOF' | tee -a "$summary"
import json, sys
try:
    b = json.load(open(sys.argv[1]))
except Exception as e:
    print("bench.json unreadable:", e); sys.exit()
for name in ("gpu_bench_torch_save", "gpu_bench_dcp"):
    g = b.get(name)
    if not g:
        print(f"{name}: failed (bench.log)"); continue
    print(f"\n{name}: {g['bytes']/1e9:.2f} GB in {g['chunks']} chunks, {g['device']}")
    print("| path | s | GB/s |\n| --- | --- | --- |")
    for l in g["optscope_lanes"]:
        print(f"| OptScope copy lanes x{l['lanes']}, {l['piece_MiB']} MiB pieces | {l['seconds']:.3f} | {l['GB_per_s']:.1f} |")
    d = g["optscope_default"]
    print(f"| OptScope default ({d['lanes']} lanes; pinning them once took {d['pinned_setup_s']:.3f} s) | {d['seconds']:.3f} | {d['GB_per_s']:.1f} |")
    for k in ("pinned_cudaMemcpy", "pageable_cudaMemcpy_per_chunk"):
        print(f"| {k} | {g[k]['seconds']:.3f} | {g[k]['GB_per_s']:.1f} |")
    c = g["device_compare"]
    print(f"| device compare (reads 2x) | {c['seconds']:.4f} | {c['read_TB_per_s']*1e3:.0f} (D2D copy {c['d2d_copy_read_plus_write_TB_per_s']*1e3:.0f}) |")
    print(f"open+locate {g['open_and_locate_s']:.3f} s, first 64 MiB verified: {g['first_64MiB_verified']}")
p = b.get("pytorch")
if p:
    print(f"\nPyTorch {p['torch']}: torch.load(map_location=cuda) {p['torch_load_map_location']['seconds']:.3f} s "
          f"({p['torch_load_map_location']['GB_per_s']:.1f} GB/s); dcp.load into cuda tensors "
          f"{p['dcp_load_into_device_tensors']['seconds']:.3f} s ({p['dcp_load_into_device_tensors']['GB_per_s']:.1f} GB/s)")
print("\nCLI:", json.dumps(b.get("cli")))
EOF

    step "6. issue 32 on this machine's cores: P = 1, 2, 4, 8 processes (tests/job/launch.sh, torchrun's variables)"
    job_bench $h2d/big_dcp "$cli" "$py"

    step "done"
    say "total $((SECONDS - t_start)) s"
    tar -C $logs -czf $OUT/logs.tar.gz .
    cp $logs/ctest-cuda.log $logs/interop.log $OUT/ 2>/dev/null
}

run_build() {
    : "${OUT:?run-build is for the GPU machine (the device tool sets OUT)}"
    local t_start=$SECONDS logs=/tmp/device-build-logs summary=$OUT/summary.md
    begin $logs "device-check run-build"
    finish() {
        step "done"
        tar -C $logs -czf $OUT/logs.tar.gz .
    }
    tar -C "$repo" -xzf build-device/pack.tar.gz # (its headers; the binaries are not used)
    local inc=$repo/build-device/include py tdir
    py=$(command -v python3)
    tdir=${TORCH_DIR:-$("$py" -c 'import torch, os; print(os.path.dirname(torch.__file__))')}
    step "1. configure: core, CLI, tests, CUDA sm_90, no GUI; this machine's gcc, CUDA and PyTorch ($tdir)"
    # -idirafter: the image's own headers first; the pack's only for what it lacks (curl, libxml2, ICU)
    cmake -S . -B build-native -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE=-O2 \
        -DOPTSCOPE_BUILD_GUI=OFF -DOPTSCOPE_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
        -DTorch_DIR="$tdir/share/cmake/Torch" -DPython3_EXECUTABLE="$py" \
        -DCURL_INCLUDE_DIR="$inc" -DCURL_LIBRARY=/lib/x86_64-linux-gnu/libcurl.so \
        -DLIBXML2_INCLUDE_DIR="$inc/libxml2" -DLIBXML2_LIBRARY=/lib/x86_64-linux-gnu/libxml2.so.2 \
        -DCMAKE_CXX_FLAGS="-idirafter $inc" >$logs/configure.log 2>&1
    local rc=$?
    say "configure: exit $rc"
    grep -E "CMake (Error|Warning)|Torch|CUDA" $logs/configure.log | head -12 >>"$summary"
    if [ $rc != 0 ]; then
        tail -30 $logs/configure.log >>"$summary"
        finish
        return 1
    fi
    step "2. build ($(nproc) cores)"
    timeout 270 ninja -C build-native >$logs/build.log 2>&1
    rc=$?
    say "ninja: exit $rc ($(grep -c '^\[' $logs/build.log) steps)"
    if [ $rc != 0 ]; then
        grep -E "error|Error|FAILED" $logs/build.log | head -20 >>"$summary"
        finish
        return 1
    fi
    step "3. ctest -L cuda, then the core tests, from this build"
    ctest --test-dir build-native -L cuda -j 4 --timeout 120 --output-on-failure >$logs/ctest-cuda.log 2>&1
    say "ctest -L cuda: exit $? — $(grep -E 'tests passed|tests failed' $logs/ctest-cuda.log)"
    grep -E "\*\*\*Failed|Not Run|Timeout|SegFault|Exception" $logs/ctest-cuda.log | head -20 >>"$summary"
    local left=$((440 - (SECONDS - t_start)))
    timeout $((left > 30 ? left : 30)) ctest --test-dir build-native -L core -E '^(diagnose|remote)\.' -j "$(nproc)" \
        --timeout 200 --output-on-failure >$logs/ctest-core.log 2>&1
    say "ctest -L core (without diagnose and remote: they need the trixie chroot, moto and nginx): exit $? — $(grep -E 'tests passed|tests failed' $logs/ctest-core.log || echo "cut off after $(grep -c ' Test *#' $logs/ctest-core.log) tests")"
    grep -E "\*\*\*Failed|Not Run|Timeout|SegFault|Exception" $logs/ctest-core.log | head -30 >>"$summary"
    finish
}

case $mode in
pack) pack ;;
run) run ;;
run-build) run_build ;;
job-bench)
    : "${OUT:?job-bench writes under OUT}"
    logs=$OUT summary=$OUT/summary.md job_bench "$2" "$3" "${4:-python3}"
    ;;
*)
    echo "usage: scripts/device-check.sh pack|run|run-build" >&2
    exit 2
    ;;
esac
