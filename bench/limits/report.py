#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Turns bench/out/limits/results.tsv (bench/limits/run_limits_bench.sh) into bench/results/limits.md.

    bench/limits/report.py RESULTS_TSV CLI OUT_MD

For each family of inputs: median wall time and largest peak RSS per size N, the growth from one size to the next
(N ratio, time ratio, RSS ratio) and the log-log slope d log(time) / d log(N), computed on the time above the
process start-up (optscope-cli --version), which is a constant: a slope near 1 is linear growth, near 2 quadratic.
"""
import collections
import datetime
import math
import os
import platform
import statistics
import subprocess
import sys

FAMILIES = [
    ("torch_save_open", "torch.save, N keys: `inspect` (the open, text table)"),
    ("torch_load", "torch.save, N keys: PyTorch 2.6 `torch.load(weights_only=True)` (in the process after `import "
     "torch`; RSS: the peak above the RSS after the import)"),
    ("torch_save_keys", "torch.save, N keys: `inspect --json`"),
    ("torch_save_check", "torch.save, N keys: `check`"),
    ("torch_save_diff", "torch.save, N keys: `diff` of the file with itself (every key paired and compared)"),
    ("torch_save_keys_hash", "torch.save, N keys: `inspect --json --hash --threads 1`"),
    ("dcp_keys", "DCP (1 file), N keys: `inspect --json`"),
    ("dcp_keys_hash", "DCP (1 file), N keys: `inspect --json --hash --threads 1`"),
    ("dcp_files", "DCP, N data files (1 tensor each): `inspect --json`"),
    ("dcp_files_hash", "DCP, N data files: `inspect --json --hash --threads 1`"),
    ("big_tensor", "torch.save, one 4.5 GiB tensor (N = MiB): `inspect --json`"),
    ("big_tensor_hash", "torch.save, one 4.5 GiB tensor (N = MiB): `inspect --json --hash --threads 1`"),
]


def machine():
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "?"
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.0f} GiB"
    except OSError:
        pass
    return f"{os.cpu_count()} x {cpu}, {mem} RAM, {platform.system()} {platform.release()}"


def main():
    tsv, cli, out = sys.argv[1], sys.argv[2], sys.argv[3]
    rows = collections.defaultdict(list)
    with open(tsv) as f:
        next(f)
        for line in f:
            case, n, _run, wall, rss, entries = line.rstrip("\n").split("\t")
            rows[(case, int(n))].append((float(wall), int(rss), int(entries)))
    startup = statistics.median(w for w, _, _ in rows[("startup", 0)])
    startup_rss = max(r for _, r, _ in rows[("startup", 0)])
    try:
        version = subprocess.run([cli, "--version"], capture_output=True, text=True).stdout.strip()
    except OSError:
        version = "?"

    md = ["# Limits: time and memory against checkpoint size", ""]
    md += [f"Measured {datetime.date.today().isoformat()} on {machine()}, with `{cli}` ({version}), by "
           "`bench/limits/run_limits_bench.sh`; inputs written by real PyTorch 2.6 (`bench/limits/make_inputs.py`).",
           "Wall time is the median of the runs, peak RSS the largest (`/usr/bin/time -v`, maximum resident set size; "
           "for the memory-mapped inputs it includes file pages that are mapped at the time, which are shared and "
           "reclaimable). \"above start-up\" subtracts the start-up of the process "
           f"(`optscope-cli --version`: {startup:.3f} s, {startup_rss / 1024:.1f} MiB). "
           "Slope: log(time ratio) / log(N ratio) of the time above start-up; 1 is linear, 2 quadratic.", ""]
    verdicts = []
    for case, title in FAMILIES:
        sizes = sorted(n for (c, n) in rows if c == case)
        if not sizes:
            continue
        md += [f"## {title}", "",
               "| N | entries | wall (s) | above start-up (s) | peak RSS (MiB) | N ratio | time ratio | slope | "
               "RSS ratio |",
               "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        prev = None
        first = None
        for n in sizes:
            runs = rows[(case, n)]
            wall = statistics.median(w for w, _, _ in runs)
            rss = max(r for _, r, _ in runs) / 1024
            entries = runs[0][2]
            above = max(wall - startup, 1e-3)
            cells = [f"{n:,}", f"{entries:,}", f"{wall:.3f}", f"{above:.3f}", f"{rss:.1f}"]
            if prev:
                pn, pa, pr = prev
                slope = math.log(above / pa) / math.log(n / pn)
                cells += [f"{n / pn:.1f}", f"{above / pa:.2f}", f"{slope:.2f}", f"{rss / pr:.2f}"]
            else:
                cells += ["", "", "", ""]
            md.append("| " + " | ".join(cells) + " |")
            prev = (n, above, rss)
            first = first or (n, above, rss)
        if len(sizes) > 1:
            n0, a0, r0 = first
            n1, a1, r1 = prev
            slope = math.log(a1 / a0) / math.log(n1 / n0)
            md += ["", f"Over {n0:,} -> {n1:,} ({n1 / n0:.0f}x): time above start-up x{a1 / a0:.1f}, "
                   f"slope {slope:.2f}; peak RSS x{r1 / r0:.2f} ({r0:.0f} -> {r1:.0f} MiB)."]
            verdicts.append((title, slope, r1 / r0, n1 / n0))
        md.append("")
    pairs = sorted(n for (c, n) in rows if c == "torch_save_open" and ("torch_load", n) in rows)
    if pairs:
        md += ["## Side by side: opening a torch.save of N keys, optscope against `torch.load`", "",
               "optscope's column is the whole process (start-up included; its per-entry column leaves the start-up "
               "out); PyTorch's is `torch.load` alone, after `import torch`. The issue 13 target for 100k keys: under "
               "100 MiB peak (1 KiB per entry) and under 1 s.", "",
               "| N | optscope `inspect` | per entry | `torch.load` | per entry | faster | leaner |",
               "|---:|---|---:|---|---:|---:|---:|"]
        for n in pairs:
            ow = statistics.median(w for w, _, _ in rows[("torch_save_open", n)])
            orss = max(r for _, r, _ in rows[("torch_save_open", n)])
            tw = statistics.median(w for w, _, _ in rows[("torch_load", n)])
            trss = max(r for _, r, _ in rows[("torch_load", n)])
            entries = rows[("torch_save_open", n)][0][2] or n
            md.append(f"| {n:,} | {ow:.2f} s, {orss / 1024:.0f} MiB | {(orss - startup_rss) * 1024 / entries:,.0f} B | "
                      f"{tw:.2f} s, {trss / 1024:.0f} MiB | {trss * 1024 / entries:,.0f} B | {tw / ow:.1f}x | "
                      f"{trss / orss:.1f}x |")
        md.append("")
    if verdicts:
        md += ["## Summary", "", "| input | N range | slope (time) | RSS growth |", "|---|---:|---:|---:|"]
        for title, slope, rss_ratio, n_ratio in verdicts:
            md.append(f"| {title} | x{n_ratio:.0f} | {slope:.2f} | x{rss_ratio:.2f} |")
        md.append("")
    notes = os.path.join(os.path.dirname(os.path.abspath(__file__)), "notes.md")
    if os.path.exists(notes):
        md += open(notes).read().rstrip("\n").split("\n") + [""]
    with open(out, "w") as f:
        f.write("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
