#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Frontier scale, side by side with PyTorch in one run: optscope-cli inspect/check of a DCP .metadata of R ranks
# (bench/scale/make_scale_metadata.py: PyTorch's own DCP classes, 70B Llama shapes) against PyTorch's
# FileSystemReader.read_metadata, for each R in RANKS. Writes bench/results/scale.md (or $OUT_MD).
#
#   bench/scale/run_scale_bench.sh                       # RANKS="64 256 1024 2048", RUNS=3
#   RANKS="32 128" RUNS=1 OUT_MD=/tmp/s.md CHECK=1 bench/scale/run_scale_bench.sh   # CI's small version
#
# CHECK=1 fails (exit 1) unless optscope takes less CPU time and memory than PyTorch at every size and its cost grows
# linearly (CPU time slope <= 1.3 between the two largest sizes).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cli=${OPTSCOPE_CLI:-$root/build/app/optscope-cli}
tp=${OPTSCOPE_TORCH_PYTHON:-$root/scripts/torch-python}
ranks=${RANKS:-64 256 1024 2048}
layers=${LAYERS:-80}
runs=${RUNS:-3}
out_md=${OUT_MD:-$root/bench/results/scale.md}
work=${WORK:-$here/out}
mkdir -p "$work"
cp "$here/make_scale_metadata.py" "$here/read_metadata.py" "$work/"

median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
max() { sort -n | tail -1; }

rows=()
for r in $ranks; do
  d="r${r}_l${layers}"
  if [[ ! -f $work/$d/.metadata ]]; then
    (cd "$work" && "$tp" make_scale_metadata.py "$d" "$r" "$layers" >&2)
  fi
  mb=$(du -m "$work/$d/.metadata" | cut -f1)
  declare -A t=() m=() c=()
  for cmd in inspect check; do
    ts=(); ms=(); cs=()
    for ((i = 0; i < runs; i++)); do
      /usr/bin/time -f "%e %M %U %S" -o "$work/time.txt" "$cli" $cmd "$work/$d" >/dev/null 2>&1 || true
      read -r s k u y < <(tail -1 "$work/time.txt")
      ts+=("$s"); ms+=("$k"); cs+=("$(echo "$u + $y" | bc)")
    done
    t[$cmd]=$(printf '%s\n' "${ts[@]}" | median); m[$cmd]=$(printf '%s\n' "${ms[@]}" | max)
    c[$cmd]=$(printf '%s\n' "${cs[@]}" | median)
  done
  ts=(); ms=(); cs=(); chunks=0
  for ((i = 0; i < runs; i++)); do
    line=$(cd "$work" && "$tp" read_metadata.py "$d" 2>/dev/null | tail -1)
    read -r _ chunks s k u <<<"$line"
    ts+=("$s"); ms+=("$k"); cs+=("$u")
  done
  tt=$(printf '%s\n' "${ts[@]}" | median); tm=$(printf '%s\n' "${ms[@]}" | max); tc=$(printf '%s\n' "${cs[@]}" | median)
  rows+=("$r $chunks $mb ${t[inspect]} ${m[inspect]} ${t[check]} ${m[check]} $tt $tm ${c[inspect]} ${c[check]} $tc")
  echo "r$r: $chunks chunks, $mb MB: inspect ${t[inspect]} s (cpu ${c[inspect]}) ${m[inspect]} KiB, check ${t[check]} s (cpu ${c[check]}), torch $tt s (cpu $tc) $tm KiB" >&2
done

python3 - "$out_md" "${CHECK:-0}" "$runs" "${rows[@]}" <<'PY'
import math, platform, subprocess, sys
out, check, runs, rows = sys.argv[1], sys.argv[2] == "1", sys.argv[3], [r.split() for r in sys.argv[4:]]
cpu = subprocess.run("lscpu | sed -n 's/^Model name: *//p' | head -1", shell=True, capture_output=True, text=True).stdout.strip()
lines = [
    "# Frontier scale: DCP .metadata of 64 to 2,048 ranks",
    "",
    f"Measured by `bench/scale/run_scale_bench.sh` on {cpu or platform.machine()}, {runs} run(s) each (median wall "
    "time, largest peak RSS). Inputs: `bench/scale/make_scale_metadata.py` (PyTorch 2.6's own DCP classes, a 70B "
    "Llama-shaped model sharded on dim 0 over R ranks, weights and AdamW moments). PyTorch: "
    "`FileSystemReader(path).read_metadata()` timed inside Python after `import torch` (its peak RSS includes torch).",
    "",
    "Wall seconds are the user's wait; CPU seconds (user + system) are what the slopes use, as they hold when the "
    "machine is shared. Speed-up and memory ratio: PyTorch over optscope `inspect`.",
    "",
    "| ranks | chunks | .metadata MB | inspect s (CPU s) | inspect MiB | check s (CPU s) | check MiB | torch s (CPU s) | torch MiB | speed-up wall (CPU) | memory ratio |",
    "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
]
bad = []
for r, ch, mb, it, im, ct, cm, tt, tm, ic, cc, tc in rows:
    it, im, ct, cm, tt, tm = float(it), float(im) / 1024, float(ct), float(cm) / 1024, float(tt), float(tm) / 1024
    ic, cc, tc = float(ic), float(cc), float(tc)
    lines.append(f"| {int(r):,} | {int(ch):,} | {mb} | {it:.2f} ({ic:.2f}) | {im:.0f} | {ct:.2f} ({cc:.2f}) | {cm:.0f} | "
                 f"{tt:.2f} ({tc:.2f}) | {tm:.0f} | {tt / max(it, 1e-3):.1f}x ({tc / max(ic, 1e-3):.1f}x) | "
                 f"{tm / max(im, 1e-3):.1f}x |")
    if ic >= tc or im >= tm:
        bad.append(f"r{r}: inspect {ic:.2f} CPU s / {im:.0f} MiB is not below torch's {tc:.2f} CPU s / {tm:.0f} MiB")
lines += ["", "Slopes between consecutive sizes (log(cost ratio) / log(chunk ratio) of CPU seconds and peak RSS; "
          "1 = linear; small inputs are dominated by start-up, so their slopes read below 1):", "",
          "| from | to | inspect CPU | inspect memory | check CPU | torch CPU |", "|---:|---:|---:|---:|---:|---:|"]
for a, b in zip(rows, rows[1:]):
    n = math.log(float(b[1]) / float(a[1]))
    sl = lambda i: math.log(max(float(b[i]), 1e-3) / max(float(a[i]), 1e-3)) / n
    lines.append(f"| {int(a[0]):,} | {int(b[0]):,} | {sl(9):.2f} | {sl(4):.2f} | {sl(10):.2f} | {sl(11):.2f} |")
    if b is rows[-1] and sl(9) > 1.3 and float(a[9]) >= 0.1:  # below 0.1 s the 10 ms clock decides
        bad.append(f"inspect CPU slope {sl(9):.2f} from r{a[0]} to r{b[0]}")
if rows:
    r, ch = rows[-1][0], float(rows[-1][1])
    lines += ["", f"Per chunk at {int(r):,} ranks: inspect {float(rows[-1][4]) * 1024 / ch:.0f} bytes of peak RSS, "
              f"PyTorch {float(rows[-1][8]) * 1024 / ch:.0f} bytes."]
open(out, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
if check and bad:
    print("FAIL:\n  " + "\n  ".join(bad), file=sys.stderr)
    sys.exit(1)
PY
