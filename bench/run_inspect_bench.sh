#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The "inspect" benchmark: optscope-cli inspect (--json, and --hash --json) on a ~2 GB 4-rank FSDP2 AdamW DCP
# checkpoint, side by side with sha256sum over the same .distcp files, with a warm page cache.
#
#   bench/run_inspect_bench.sh [CKPT]                 (run from anywhere; paths are relative to the repo root)
#
# CKPT defaults to bench/out/fsdp2_4rank_2gb and is made with real PyTorch (scripts/torch-python
# bench/make_big_checkpoint.py) when it is missing; it must lie under the repo (torch-python's chroot sees only it).
# Environment:
#   OPTSCOPE_CLI=PATH   take this optscope-cli instead of building one in $BUILD_DIR
#   OPTSCOPE_CLI_REV=S  how the report names that binary's source (e.g. a commit); default: the repo's HEAD
#   BUILD_DIR=DIR       build dir for optscope-cli (default build-bench; Release, no GUI, no CUDA, no tests)
#   RUNS=N              timed runs of the fast commands (default 20); RUNS_HASH=N for the hashing ones (default 5)
#   TORCH=0             skip the PyTorch read_metadata row (it needs scripts/torch-python)
#   OUT_MD=FILE         where the report goes (default bench/results/inspect.md)
# Needs hyperfine, GNU time (/usr/bin/time), python3, sha256sum, openssl; installs hyperfine and time with
# apt-get when missing and run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

CKPT=${1:-bench/out/fsdp2_4rank_2gb}
CKPT=${CKPT%/}
BUILD_DIR=${BUILD_DIR:-build-bench}
RUNS=${RUNS:-20}
RUNS_HASH=${RUNS_HASH:-5}
TORCH=${TORCH:-1}
OUT_MD=${OUT_MD:-bench/results/inspect.md}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/optscope-bench.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

say() { printf '\n== %s\n' "$*" >&2; }

# how many cores other processes kept busy over one second (0.00 on a quiet machine)
busy_cores() {
    local a b
    a=($(head -1 /proc/stat)); sleep 1; b=($(head -1 /proc/stat))
    awk -v u1="${a[1]}" -v n1="${a[2]}" -v s1="${a[3]}" -v i1="${a[4]}" -v w1="${a[5]}" -v q1="${a[6]}" -v sq1="${a[7]}" \
        -v u2="${b[1]}" -v n2="${b[2]}" -v s2="${b[3]}" -v i2="${b[4]}" -v w2="${b[5]}" -v q2="${b[6]}" -v sq2="${b[7]}" \
        -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", ((u2+n2+s2+q2+sq2) - (u1+n1+s1+q1+sq1)) / hz }'
}

# ---------------------------------------------------------------------------------------------------- tools
missing=()
command -v hyperfine >/dev/null || missing+=(hyperfine)
[[ -x /usr/bin/time ]] || missing+=(time)
if ((${#missing[@]})); then
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
        say "installing ${missing[*]} with apt-get"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    else
        echo "run_inspect_bench: please install: ${missing[*]}" >&2
        exit 1
    fi
fi
for t in python3 sha256sum openssl; do
    command -v "$t" >/dev/null || { echo "run_inspect_bench: $t is needed" >&2; exit 1; }
done

# ---------------------------------------------------------------------------------------------------- optscope-cli
if [[ -n ${OPTSCOPE_CLI:-} ]]; then
    CLI=$OPTSCOPE_CLI
else
    if [[ ! -f $BUILD_DIR/build.ninja ]]; then
        say "configuring $BUILD_DIR"
        cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DOPTSCOPE_BUILD_GUI=OFF \
            -DOPTSCOPE_WITH_CUDA=OFF -DOPTSCOPE_BUILD_TESTS=OFF >&2
    fi
    say "building optscope-cli in $BUILD_DIR"
    ninja -j"$(nproc)" -C "$BUILD_DIR" optscope-cli >&2
    CLI=$BUILD_DIR/app/optscope-cli
fi
[[ -x $CLI ]] || { echo "run_inspect_bench: $CLI is not an executable" >&2; exit 1; }

# ---------------------------------------------------------------------------------------------------- checkpoint
if [[ ! -f $CKPT/.metadata ]]; then
    say "making $CKPT with real PyTorch (under a minute on 2 cores)"
    scripts/torch-python bench/make_big_checkpoint.py "$CKPT" >&2
fi
shopt -s nullglob
FILES=("$CKPT"/*.distcp)
shopt -u nullglob
((${#FILES[@]})) || { echo "run_inspect_bench: no .distcp files in $CKPT" >&2; exit 1; }
FILES_Q=$(printf '%q ' "${FILES[@]}")
CLI_Q=$(printf '%q' "$CLI")
CKPT_Q=$(printf '%q' "$CKPT")

CMD_HELP="$CLI_Q --help"
CMD_INSPECT="$CLI_Q inspect $CKPT_Q --json"
CMD_HASH="$CLI_Q inspect $CKPT_Q --hash --json"
CMD_HASH1="$CLI_Q inspect $CKPT_Q --hash --json --threads 1"
CMD_SHA="sha256sum $FILES_Q"
CMD_OSSL="openssl dgst -sha256 $FILES_Q"
CMD_TORCH="scripts/torch-python bench/torch_read_metadata.py $CKPT_Q"

# the commands must work before they are timed
"$CLI" inspect "$CKPT" --json >"$WORK/inspect.json"
"$CLI" inspect "$CKPT" --hash --json >"$WORK/hash.json"

# ---------------------------------------------------------------------------------------------------- warm-up
say "warming the page cache: reading every .distcp once, then running each command once (not timed)"
cat "${FILES[@]}" >/dev/null
for c in "$CMD_HELP" "$CMD_INSPECT" "$CMD_HASH" "$CMD_HASH1" "$CMD_SHA" "$CMD_OSSL"; do
    eval "$c" >/dev/null
done

# ---------------------------------------------------------------------------------------------------- timings
BUSY_BEFORE=$(busy_cores)
if awk -v b="$BUSY_BEFORE" 'BEGIN { exit !(b > 0.2) }'; then
    say "WARNING: other processes keep $BUSY_BEFORE cores busy; the timings will be off (see uptime, top)"
fi
# hyperfine -N: no intermediate shell; --warmup 1: one more untimed run of each right before its timed runs
say "timing (hyperfine, $RUNS runs each): start-up and inspect --json"
hyperfine -N --style basic --warmup 1 --runs "$RUNS" --export-json "$WORK/fast.json" \
    -n help "$CMD_HELP" -n inspect "$CMD_INSPECT" >&2

say "timing (hyperfine, $RUNS_HASH runs each): inspect --hash --json vs sha256sum (and openssl dgst) over the same files"
hyperfine -N --style basic --warmup 1 --runs "$RUNS_HASH" --export-json "$WORK/hash_t.json" \
    -n hash "$CMD_HASH" -n sha256sum "$CMD_SHA" -n openssl "$CMD_OSSL" -n hash1 "$CMD_HASH1" >&2

if [[ $TORCH == 1 ]]; then
    say "timing (hyperfine, 3 runs): PyTorch FileSystemReader(...).read_metadata() in scripts/torch-python"
    eval "$CMD_TORCH" >"$WORK/torch_inner.txt" 2>/dev/null || TORCH=0
fi
if [[ $TORCH == 1 ]]; then
    hyperfine -N --style basic --warmup 1 --runs 3 --export-json "$WORK/torch.json" -n torch "$CMD_TORCH" >&2
    for i in 1 2; do eval "$CMD_TORCH" >>"$WORK/torch_inner.txt" 2>/dev/null; done
fi

BUSY_AFTER=$(busy_cores)

# ---------------------------------------------------------------------------------------------------- memory
say "peak RSS (/usr/bin/time -v, one warm run each) and its anonymous/file-backed split"
names=(help inspect hash hash1 sha256sum openssl)
cmds=("$CMD_HELP" "$CMD_INSPECT" "$CMD_HASH" "$CMD_HASH1" "$CMD_SHA" "$CMD_OSSL")
if [[ $TORCH == 1 ]]; then names+=(torch); cmds+=("$CMD_TORCH"); fi
for i in "${!names[@]}"; do
    n=${names[$i]}
    eval "/usr/bin/time -v -o $WORK/rss_$n.txt ${cmds[$i]}" >/dev/null 2>&1
    if [[ $n != torch ]]; then
        eval "python3 bench/peak_mem.py ${cmds[$i]}" >"$WORK/split_$n.json"
    fi
done

# ---------------------------------------------------------------------------------------------------- report
{
    echo "date_utc=$(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)"
    echo "cores=$(nproc)"
    echo "mem=$(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
    echo "kernel=$(uname -r)"
    echo "fs=$(df -T "$CKPT" | awk 'NR==2 {print $2}')"
    if [[ -n ${OPTSCOPE_CLI:-} ]]; then
        echo "git=${OPTSCOPE_CLI_REV:-unknown revision (OPTSCOPE_CLI given; OPTSCOPE_CLI_REV=... describes it)}"
    else
        echo "git=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- core app CMakeLists.txt 2>/dev/null || echo ' with local changes to core/app')"
    fi
    echo "hyperfine=$(hyperfine --version)"
    echo "sha256sum=$(sha256sum --version | head -1)"
    echo "openssl=$(openssl version)"
    echo "cli=$CLI"
    echo "ckpt=$CKPT"
    echo "distcp_bytes=$(cat "${FILES[@]}" | wc -c)"
    echo "distcp_files=${#FILES[@]}"
    echo "runs=$RUNS"
    echo "busy=$BUSY_BEFORE $BUSY_AFTER"
    echo "runs_hash=$RUNS_HASH"
    echo "torch=$TORCH"
} >"$WORK/env.txt"
printf '%s\t%s\n' help "$CMD_HELP" inspect "$CMD_INSPECT" hash "$CMD_HASH" hash1 "$CMD_HASH1" sha256sum "$CMD_SHA" \
    openssl "$CMD_OSSL" torch "$CMD_TORCH" >"$WORK/cmds.tsv"
python3 bench/report_inspect.py "$WORK" "$OUT_MD"
# keep the raw results (hyperfine JSON, time -v output) next to the checkpoint, to re-make the report:
#   python3 bench/report_inspect.py bench/out/inspect_raw bench/results/inspect.md
rm -rf bench/out/inspect_raw && mkdir -p bench/out && cp -r "$WORK" bench/out/inspect_raw
echo "written: $OUT_MD" >&2
