#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Limits benchmark: wall time and peak RSS (GNU time -v) of optscope-cli on inputs written by real PyTorch
# (bench/limits/make_inputs.py, through scripts/torch-python):
#   keys   Adam-like optimizer states with 10k, 30k, 100k entries, as torch.save files and as DCP folders
#   files  DCP folders with 100, 1000, 3000 data files (single_file_per_rank=False)
#   big    a torch.save file with a 4.5 GiB tensor and a record after it (ZIP64 sizes and offsets)
# Each command runs RUNS times (median wall time, largest peak RSS); results go to bench/out/limits/results.tsv and,
# as a table with growth ratios and log-log slopes, to bench/results/limits.md (bench/limits/report.py).
#
#   bench/limits/run_limits_bench.sh                        # builds build-limits/ (Release, CLI only)
#   OPTSCOPE_CLI=build/app/optscope-cli bench/limits/run_limits_bench.sh
#   KEYS="10000 30000 100000" FILES="100 1000 3000" BIG=1 RUNS=3 bench/limits/run_limits_bench.sh
#   BIG=0 skips the 4.5 GiB input; KEEP_BIG=1 keeps it afterwards (it is deleted by default).
# Needs about 5 GB of free disk for BIG=1 (checked), GNU time, python3 and scripts/torch-python (root).
set -euo pipefail
cd "$(dirname "$0")/../.."
keys=${KEYS:-10000 30000 100000}
files=${FILES:-100 1000 3000}
big=${BIG:-1}
runs=${RUNS:-3}
out=bench/out/limits
mkdir -p "$out"

cli=${OPTSCOPE_CLI:-}
if [ -z "$cli" ]; then
    if [ ! -f build-limits/build.ninja ]; then
        cmake -S . -B build-limits -G Ninja -DCMAKE_BUILD_TYPE=Release -DOPTSCOPE_BUILD_GUI=OFF \
            -DOPTSCOPE_WITH_CUDA=OFF -DOPTSCOPE_BUILD_TESTS=OFF >/dev/null
    fi
    cmake --build build-limits --target optscope-cli -j 2
    cli=build-limits/app/optscope-cli
fi
[ -x /usr/bin/time ] || { echo "run_limits_bench: needs GNU time (apt-get install time)" >&2; exit 1; }

# shellcheck disable=SC2086
scripts/torch-python bench/limits/make_inputs.py "$out" keys $keys 2>/dev/null
# shellcheck disable=SC2086
scripts/torch-python bench/limits/make_inputs.py "$out" files $files 2>/dev/null
if [ "$big" = 1 ] && [ ! -f "$out/big.pt" ]; then
    avail_kb=$(df -Pk "$out" | awk 'NR == 2 {print $4}')
    if [ "$avail_kb" -lt $((6 * 1024 * 1024)) ]; then
        echo "run_limits_bench: less than 6 GB free on $(df -P "$out" | awk 'NR == 2 {print $6}'); BIG=0" >&2
        big=0
    else
        scripts/torch-python bench/limits/make_inputs.py "$out" big 2>/dev/null
    fi
fi

# as on a desktop session: a soft limit of 1024 open files (MappedFile raises it to the hard limit when it needs to)
ulimit -Sn 1024

tsv=$out/results.tsv
printf 'case\tn\trun\twall_s\tmax_rss_kb\tentries\n' >"$tsv"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# wall seconds since START (an $EPOCHREALTIME; GNU time's own wall clock has only 10 ms steps)
elapsed() {
    python3 -c 'import sys; print(f"{float(sys.argv[2]) - float(sys.argv[1]):.4f}")' "$1" "$EPOCHREALTIME"
}

# timed_runs CASE N ENTRIES CMD...: RUNS timed runs of CMD (output discarded), one TSV row each
timed_runs() {
    local name=$1 n=$2 entries=$3
    shift 3
    for r in $(seq "$runs"); do
        local start=$EPOCHREALTIME wall rss
        /usr/bin/time -v -o "$tmp/time" "$@" >/dev/null
        wall=$(elapsed "$start")
        rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$tmp/time")
        printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$n" "$r" "$wall" "$rss" "$entries" >>"$tsv"
    done
    echo "run_limits_bench: $name n=$n: $entries entries, $(awk -F'\t' -v c="$name" -v n="$n" '$1 == c && $2 == n {printf "%ss/%skB ", $4, $5}' "$tsv")"
}

# measure CASE N INPUT [ARGS...]: RUNS timed runs of optscope-cli inspect INPUT --json ARGS, after one warm-up
measure() {
    local name=$1 n=$2 input=$3
    shift 3
    "$cli" inspect "$input" --json "$@" >"$tmp/out.json"
    local entries
    entries=$(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert all("error" not in e for e in j["entries"]); print(j["summary"]["entries"])' "$tmp/out.json")
    timed_runs "$name" "$n" "$entries" "$cli" inspect "$input" --json "$@"
}

# measure_open CASE N INPUT: the open alone, as a user sees it: optscope-cli inspect INPUT (the text table)
measure_open() {
    local name=$1 n=$2 input=$3
    local entries
    entries=$("$cli" inspect "$input" | awk '/ entries: / {print $1}' | tail -1)
    timed_runs "$name" "$n" "$entries" "$cli" inspect "$input"
}

# measure_torch_load CASE N INPUT: PyTorch's own open of the same file, torch.load (weights_only, as 2.6 defaults),
# timed in the process after `import torch`; the RSS column is the peak above the RSS after the import
measure_torch_load() {
    local name=$1 n=$2 input=$3
    for r in $(seq "$runs"); do
        scripts/torch-python bench/limits/torch_load.py "$input" >"$tmp/load" 2>/dev/null
        IFS=$'\t' read -r wall rss entries <"$tmp/load"
        printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$n" "$r" "$wall" "$rss" "$entries" >>"$tsv"
    done
    echo "run_limits_bench: $name n=$n: $(awk -F'\t' -v c="$name" -v n="$n" '$1 == c && $2 == n {printf "%ss/%skB ", $4, $5}' "$tsv")"
}

# measure_command CASE N INPUT CMD...: optscope-cli CMD... (its exit status 0 or 1 is the answer, not a failure), after
# one warm-up; the entry count is the open's
measure_command() {
    local name=$1 n=$2 input=$3
    shift 3
    local entries
    entries=$("$cli" inspect "$input" | awk '/ entries: / {print $1}' | tail -1)
    "$cli" "$@" >/dev/null || [ $? -le 1 ]
    timed_runs "$name" "$n" "$entries" sh -c '"$0" "$@" >/dev/null; [ $? -le 1 ]' "$cli" "$@"
}

# process start-up alone, the floor under every row
for r in $(seq "$runs"); do
    start=$EPOCHREALTIME
    /usr/bin/time -v -o "$tmp/time" "$cli" --version >/dev/null
    wall=$(elapsed "$start")
    rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$tmp/time")
    printf 'startup\t0\t%s\t%s\t%s\t0\n' "$r" "$wall" "$rss" >>"$tsv"
done

for n in $keys; do
    measure_open torch_save_open "$n" "$out/keys_$n.pt"
    measure_torch_load torch_load "$n" "$out/keys_$n.pt"
    measure torch_save_keys "$n" "$out/keys_$n.pt"
    # every parameter's state looked up by id: a scan per lookup made these quadratic (100k keys: 8 s)
    measure_command torch_save_check "$n" "$out/keys_$n.pt" check "$out/keys_$n.pt"
    measure_command torch_save_diff "$n" "$out/keys_$n.pt" diff "$out/keys_$n.pt" "$out/keys_$n.pt"
    measure torch_save_keys_hash "$n" "$out/keys_$n.pt" --hash --threads 1
    measure dcp_keys "$n" "$out/keys_${n}_dcp"
    measure dcp_keys_hash "$n" "$out/keys_${n}_dcp" --hash --threads 1
done
for n in $files; do
    measure dcp_files "$n" "$out/files_${n}_dcp"
    measure dcp_files_hash "$n" "$out/files_${n}_dcp" --hash --threads 1
done
if [ "$big" = 1 ] && [ -f "$out/big.pt" ]; then
    measure big_tensor 4608 "$out/big.pt"
    measure big_tensor_hash 4608 "$out/big.pt" --hash --threads 1
    # $tmp/out.json is the --hash listing: check it against Python's own reading of the zip (ZIP64) records
    python3 - "$tmp/out.json" "$out/big.pt" >"$out/big_check.txt" <<'EOF'
import hashlib, json, sys, zipfile
j = json.load(open(sys.argv[1]))
e = {x["key"]: x for x in j["entries"]}
assert e["big"]["shape"] == [4608 << 20] and e["big"]["bytes"] == 4608 << 20, e["big"]
z = zipfile.ZipFile(sys.argv[2])
info = {i.filename.split("/", 1)[1]: i for i in z.infolist()}
h = hashlib.sha256()
with z.open(info["data/0"]) as f:
    for block in iter(lambda: f.read(1 << 24), b""):
        h.update(block)
assert h.hexdigest() == e["big"]["sha256"], (h.hexdigest(), e["big"]["sha256"])
after = info["data/1"]
assert after.header_offset > 1 << 32
assert hashlib.sha256(z.read(after)).hexdigest() == e["after"]["sha256"]
print(f"big: {e['big']['bytes']} bytes, sha256 {e['big']['sha256'][:16]}... equal to Python zipfile's; "
      f"record data/1 at byte {after.header_offset} (past 4 GiB), its sha256 equal too")
EOF
    cat "$out/big_check.txt"
    if [ "${KEEP_BIG:-0}" != 1 ]; then
        rm -f "$out/big.pt"
    fi
fi

python3 bench/limits/report.py "$tsv" "$cli" ${OUT_MD:-bench/results/limits.md}
