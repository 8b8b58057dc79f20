#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Watch benchmark: the GUI following a training run of 133k-key torch.save checkpoints (bench/watch/make_run.py,
# real PyTorch AdamW steps), side by side with the PyTorch way (bench/watch/torch_watch.py: torch.load each step and
# compare it with the one before). For each run length K: the GUI offscreen, `optscope --watch RUN --screenshot`,
# which reads every step, compares it with the one before and shows the newest; its peak RSS (GNU time) must not grow
# with K. Results to bench/results/watch.md.
#
#   bench/watch/run_watch_bench.sh                       # STEPS="2 4 8"; OPTSCOPE_GUI=build/app/optscope
# Needs a GUI build, GNU time, python3 and scripts/torch-python (root). About 300 MB of disk.
set -euo pipefail
cd "$(dirname "$0")/../.."
steps=${STEPS:-2 4 8}
gui=${OPTSCOPE_GUI:-build/app/optscope}
out=bench/out/watch
max=0
for k in $steps; do [ "$k" -gt "$max" ] && max=$k; done
scripts/torch-python bench/watch/make_run.py "$out/run" "$max" 2>/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rows=()
for k in $steps; do
    run=$out/k$k
    rm -rf "$run" && mkdir -p "$run"
    for i in $(seq "$k"); do ln -f "$out/run/step_$i.pt" "$run/"; done
    QT_QPA_PLATFORM=offscreen /usr/bin/time -v -o "$tmp/time" "$gui" --watch "$run" --screenshot "$tmp/watch.png" \
        2>"$tmp/err" >/dev/null
    rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$tmp/time")
    # "optscope: step I of K, NAME, read after T s: read (N entries)" per step
    read -r first per keys < <(python3 - "$tmp/err" "$k" <<'PY'
import re, sys
times, keys = [], "?"
for line in open(sys.argv[1]):
    m = re.match(r"optscope: step \d+ of \d+, .*, read after ([0-9.]+) s: (.*)", line)
    if m:
        times.append(float(m.group(1)))
        e = re.search(r"read \((\d+) entries\)", m.group(2))
        keys = e.group(1) if e else keys
k = int(sys.argv[2])
assert len(times) == k, (times, k)
print(f"{times[0]:.2f}", f"{(times[-1] - times[0]) / (k - 1):.2f}" if k > 1 else "-", keys)
PY
)
    read -r tsteps tfirst tper trss tkeys ttop tpeak < <(scripts/torch-python bench/watch/torch_watch.py "$run" 2>/dev/null)
    echo "run_watch_bench: K=$k: optscope first step ${first}s, then ${per}s per step, peak ${rss} KB; PyTorch first ${tfirst}s, then ${tper}s per step, peak +${trss} KB"
    rows+=("| $k | $keys | $per s | $((rss / 1024)) MiB | $tper s | $((trss / 1024)) MiB above the import, $((tpeak / 1024)) MiB in all | $(python3 -c "print(f'{float(\"$tper\") / float(\"$per\"):.1f}x')") |")
done
{
    echo "# Watch: following a run of 133k-key checkpoints"
    echo
    echo "Measured $(date -u +%Y-%m-%d) on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, by"
    echo "\`bench/watch/run_watch_bench.sh\` (STEPS=\"$steps\"). The run: \`bench/watch/make_run.py\`, 33,334 parameters of 8"
    echo "floats trained with AdamW by real PyTorch, \`torch.save({\"model\", \"optim\"})\` after each step (133,347 keys, 37 MB"
    echo "per file)."
    echo
    echo "- optscope: \`optscope --watch RUN --screenshot\` offscreen: Watch reads every step, compares it with the one before"
    echo "  (the Diff panel's options) and shows the newest with its comparison (Follow). Per step:"
    echo "  from the first step read to the last, divided by K - 1 (the first step waits one poll, 1.5 s, to know it is"
    echo "  complete). Peak RSS of the whole app."
    echo "- PyTorch: \`bench/watch/torch_watch.py\`: \`torch.load(weights_only=True)\` of each step and, per tensor, max |a - b|"
    echo "  and the count of differing elements against the step before; timed after \`import torch\`; RSS above the"
    echo "  import and of the whole process."
    echo
    echo "| steps K | keys per step | optscope per step | optscope peak RSS | PyTorch per step | PyTorch peak RSS | faster |"
    echo "|---:|---:|---:|---:|---:|---:|---:|"
    printf '%s\n' "${rows[@]}"
} >bench/results/watch.md
cat bench/results/watch.md
