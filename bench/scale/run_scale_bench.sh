#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Frontier scale, side by side with PyTorch in one run: optscope-cli inspect/check of a DCP .metadata of R ranks
# (bench/scale/make_scale_metadata.py: PyTorch's own DCP classes, 70B Llama shapes) against PyTorch's
# FileSystemReader.read_metadata, for each R in RANKS. Writes bench/results/scale.md (or $OUT_MD).
#
#   bench/scale/run_scale_bench.sh                       # RANKS="64 256 1024 2048", RUNS=3
#   RANKS="16 64" LAYERS=8 RUNS=1 OUT_MD=/tmp/s.md CHECK=1 bench/scale/run_scale_bench.sh   # CI's small version
#
# CHECK=1 fails (exit 1) unless optscope is faster and leaner than PyTorch at every size and its cost grows
# linearly (time slope <= 1.3 between the two largest sizes).
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
  declare -A t=() m=()
  for cmd in inspect check; do
    ts=(); ms=()
    for ((i = 0; i < runs; i++)); do
      /usr/bin/time -f "%e %M" -o "$work/time.txt" "$cli" $cmd "$work/$d" >/dev/null 2>&1 || true
      read -r s k < <(tail -1 "$work/time.txt")
      ts+=("$s"); ms+=("$k")
    done
    t[$cmd]=$(printf '%s\n' "${ts[@]}" | median); m[$cmd]=$(printf '%s\n' "${ms[@]}" | max)
  done
  ts=(); ms=(); chunks=0
  for ((i = 0; i < runs; i++)); do
    line=$(cd "$work" && "$tp" read_metadata.py "$d" 2>/dev/null | tail -1)
    read -r _ chunks s k <<<"$line"
    ts+=("$s"); ms+=("$k")
  done
  tt=$(printf '%s\n' "${ts[@]}" | median); tm=$(printf '%s\n' "${ms[@]}" | max)
  rows+=("$r $chunks $mb ${t[inspect]} ${m[inspect]} ${t[check]} ${m[check]} $tt $tm")
  echo "r$r: $chunks chunks, $mb MB: inspect ${t[inspect]} s ${m[inspect]} KiB, check ${t[check]} s, torch $tt s $tm KiB" >&2
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
    "| ranks | chunks | .metadata MB | inspect s | inspect MiB | check s | check MiB | torch s | torch MiB | speed-up | memory ratio |",
    "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
]
bad = []
for r, ch, mb, it, im, ct, cm, tt, tm in rows:
    it, im, ct, cm, tt, tm = float(it), float(im) / 1024, float(ct), float(cm) / 1024, float(tt), float(tm) / 1024
    lines.append(f"| {int(r):,} | {int(ch):,} | {mb} | {it:.2f} | {im:.0f} | {ct:.2f} | {cm:.0f} | {tt:.2f} | {tm:.0f} | "
                 f"{tt / max(it, 1e-3):.1f}x | {tm / max(im, 1e-3):.1f}x |")
    if it >= tt or im >= tm:
        bad.append(f"r{r}: inspect {it:.2f} s / {im:.0f} MiB is not below torch's {tt:.2f} s / {tm:.0f} MiB")
lines += ["", "Slopes between consecutive sizes (log(cost ratio) / log(chunk ratio); 1 = linear):", "",
          "| from | to | inspect time | inspect memory | check time | torch time |", "|---:|---:|---:|---:|---:|---:|"]
for a, b in zip(rows, rows[1:]):
    n = math.log(float(b[1]) / float(a[1]))
    sl = lambda i: math.log(float(b[i]) / float(a[i])) / n
    lines.append(f"| {int(a[0]):,} | {int(b[0]):,} | {sl(3):.2f} | {sl(4):.2f} | {sl(5):.2f} | {sl(7):.2f} |")
    if b is rows[-1] and sl(3) > 1.3:
        bad.append(f"inspect time slope {sl(3):.2f} from r{a[0]} to r{b[0]}")
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
