# SPDX-License-Identifier: GPL-3.0-or-later
"""Engine benchmarks, side by side in one run, written up as ratios (bench/results/engine.md):

  gather   optscope-cli gather of the ~2 GB 4-rank FSDP2 checkpoint  vs  PyTorch's dcp_to_torch_save, and vs copying
           the same bytes (cat of the .distcp files into one file on the same file system: the I/O floor)
  verify   optscope-cli verify --world-size 3 (CPU)                   vs  gather of the same checkpoint
  diff     optscope-cli diff of two ~2 GB checkpoints one AdamW step apart  vs  torch.load(mmap=True) of both +
           per-tensor max |a - b|

    python3 bench/run_engine_bench.py [--cli PATH] [--runs N] [--torch-runs N] [--skip-torch]

Makes the checkpoints with real PyTorch when missing (bench/make_big_checkpoint.py, bench/make_step_pair.py; through
scripts/torch-python, whose chroot only sees the repository). Warm page cache for everyone: every input is read once
before timing. Wall time and peak RSS come from GNU time; the median of the runs is reported, with min-max.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCH = os.path.join(ROOT, "scripts", "torch-python")


def sh(cmd, **kw):
    return subprocess.run(cmd, shell=True, check=True, cwd=ROOT, **kw)


def busy_cores():
    def read():
        with open("/proc/stat") as f:
            v = list(map(int, f.readline().split()[1:8]))
        return v[0] + v[1] + v[2] + v[5] + v[6]
    a = read()
    time.sleep(1)
    return (read() - a) / os.sysconf("SC_CLK_TCK")


def timed(cmd, runs, cleanup=None):
    """median wall s, min, max, mean cpu s, max peak RSS MiB, last stdout"""
    walls, cpus, rss, out = [], [], [], ""
    for _ in range(runs):
        if cleanup:
            cleanup()
        r = subprocess.run(["/usr/bin/time", "-f", "TIME %e %U %S %M", "bash", "-c", cmd], cwd=ROOT,
                           capture_output=True, text=True)
        if r.returncode not in (0, 1):
            raise SystemExit(f"failed ({r.returncode}): {cmd}\n{r.stderr[-2000:]}")
        line = [l for l in r.stderr.splitlines() if l.startswith("TIME ")][-1].split()
        walls.append(float(line[1]))
        cpus.append(float(line[2]) + float(line[3]))
        rss.append(int(line[4]) / 1024)
        out = r.stdout + r.stderr
    if cleanup:
        cleanup()
    return {"median": statistics.median(walls), "min": min(walls), "max": max(walls),
            "cpu": statistics.mean(cpus), "rss": max(rss), "out": out}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default=os.path.join(ROOT, "build-bench", "app", "optscope-cli"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--torch-runs", type=int, default=3)
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "engine.md"))
    a = ap.parse_args()

    if not os.path.exists(a.cli):
        sh("cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DOPTSCOPE_BUILD_GUI=OFF "
           "-DOPTSCOPE_WITH_CUDA=OFF -DOPTSCOPE_BUILD_TESTS=OFF > /dev/null && ninja -C build-bench optscope-cli")
    ckpt = "bench/out/fsdp2_4rank_2gb"
    pair = "bench/out/step_pair"
    if not os.path.isdir(ckpt):
        sh(f"{TORCH} bench/make_big_checkpoint.py {ckpt}")
    if not os.path.exists(f"{pair}/step2.pt"):
        sh(f"{TORCH} bench/make_step_pair.py {pair}")
    work = "bench/out/work"
    os.makedirs(work, exist_ok=True)
    cli = a.cli
    distcp = " ".join(f"{ckpt}/{f}" for f in sorted(os.listdir(os.path.join(ROOT, ckpt))) if f.endswith(".distcp"))
    nbytes = sum(os.path.getsize(os.path.join(ROOT, ckpt, f)) for f in os.listdir(os.path.join(ROOT, ckpt)))
    pair_bytes = sum(os.path.getsize(os.path.join(ROOT, pair, f)) for f in ("step1.pt", "step2.pt"))

    def rm(*paths):
        def f():
            for p in paths:
                p = os.path.join(ROOT, p)
                if os.path.isdir(p):
                    shutil.rmtree(p)
                elif os.path.exists(p):
                    os.remove(p)
        return f

    # warm the page cache for every input
    sh(f"cat {ckpt}/* {pair}/step1.pt {pair}/step2.pt > /dev/null")
    busy_before = busy_cores()
    R = {}
    R["gather"] = timed(f"{cli} gather {ckpt} -o {work}/g.pt --no-fsync", a.runs, rm(f"{work}/g.pt"))
    R["gather_fsync"] = timed(f"{cli} gather {ckpt} -o {work}/g.pt", a.runs, rm(f"{work}/g.pt"))
    R["cat"] = timed(f"cat {distcp} > {work}/cp.bin", a.runs, rm(f"{work}/cp.bin"))
    R["cat_sync"] = timed(f"cat {distcp} > {work}/cp.bin && sync {work}/cp.bin", a.runs, rm(f"{work}/cp.bin"))
    R["verify"] = timed(f"{cli} verify {ckpt} --world-size 3", a.runs)
    R["diff"] = timed(f"{cli} diff {pair}/step1.pt {pair}/step2.pt --json > {work}/diff.json", a.runs)
    if not a.skip_torch:
        R["torch_gather"] = timed(f"{TORCH} bench/torch_baselines.py dcp_to_torch_save {ckpt} {work}/t.pt",
                                  a.torch_runs, rm(f"{work}/t.pt"))
        R["torch_diff"] = timed(f"{TORCH} bench/torch_baselines.py diff {pair}/step1.pt {pair}/step2.pt", a.torch_runs)
    busy_after = busy_cores()
    # the raw timings first, so that nothing measured is lost if the write-up below fails
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "engine_raw.json"), "w") as f:
        json.dump({"busy_before": busy_before, "busy_after": busy_after, "results": R}, f, indent=1)

    # optscope's diff numbers against PyTorch's for the same pair (max |a-b| per key)
    sh(f"{cli} diff {pair}/step1.pt {pair}/step2.pt --json > {work}/diff.json || true")
    mine = {e["key"]: e["max_abs_diff"] for e in json.load(open(os.path.join(ROOT, work, "diff.json")))["entries"]
            if "max_abs_diff" in e}  # tensors only
    theirs = json.load(open(os.path.join(ROOT, pair, "torch_diff.json")))
    mismatch = [k for k, v in theirs.items() if abs(mine.get(k, -1) - v) > 1e-7 * max(1.0, abs(v))]

    def row(name, r, ratio=""):
        return (f"| {name} | {r['median']:.3f} | {r['min']:.3f}-{r['max']:.3f} | {r['cpu']:.2f} | {r['rss']:.0f} | "
                f"{ratio} |")

    g = R["gather"]["median"]
    lines = [
        "# Engine benchmarks: gather, verify, diff",
        "",
        f"Made by `bench/run_engine_bench.py` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        f"- Machine: {os.cpu_count()} cores, {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.1f} GiB; "
        f"other processes kept {busy_before:.2f} cores busy just before the timings and {busy_after:.2f} just after"
        + (" (a busy machine: treat the absolute times with care; the ratios were measured under the same load)"
           if max(busy_before, busy_after) > 0.3 else ""),
        f"- optscope-cli: `{os.path.relpath(cli, ROOT)}` ({subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=ROOT, capture_output=True, text=True).stdout.strip()})",
        f"- gather/verify input: `{ckpt}`, 4-rank FSDP2 AdamW DCP, {nbytes:,} bytes; diff inputs: `{pair}/step1.pt`, "
        f"`step2.pt`, one AdamW step apart, {pair_bytes:,} bytes together",
        f"- warm page cache (every input read once before timing); {a.runs} runs of optscope and the copies, "
        f"{a.torch_runs} of PyTorch; the median wall time is the figure to quote; cpu s = user + system (mean); peak RSS "
        "from GNU time (includes mapped pages of the inputs that a process touched)",
        "",
        "| measurement | median wall s | min-max s | cpu s | peak RSS MiB | ratio |",
        "|---|---|---|---|---|---|",
    ]
    tg = R.get("torch_gather")
    lines.append(row("optscope-cli gather --no-fsync", R["gather"],
                     f"{tg['median'] / g:.2f}x faster than dcp_to_torch_save; {g / R['cat']['median']:.2f}x of cat"
                     if tg else f"{g / R['cat']['median']:.2f}x of cat"))
    lines.append(row("optscope-cli gather (fsync before rename)", R["gather_fsync"],
                     f"{R['gather_fsync']['median'] / R['cat_sync']['median']:.2f}x of cat + sync"))
    lines.append(row("cat of the .distcp files into one file (the I/O floor)", R["cat"], "1.00x"))
    lines.append(row("cat + sync of that file", R["cat_sync"], ""))
    if tg:
        lines.append(row("PyTorch dcp_to_torch_save (whole torch-python process)", tg, "1.00x (baseline)"))
    lines.append(row("optscope-cli verify --world-size 3 (CPU)", R["verify"], f"{R['verify']['median'] / g:.2f}x of gather"))
    td = R.get("torch_diff")
    lines.append(row("optscope-cli diff (bit-identical comparison, all statistics)", R["diff"],
                     f"{td['median'] / R['diff']['median']:.2f}x faster than PyTorch" if td else ""))
    if td:
        lines.append(row("PyTorch: torch.load(mmap=True) x2 + per-tensor max|a-b| (whole process)", td, "1.00x (baseline)"))
    lines += ["", "PyTorch's own timings inside the process (import excluded):", ""]
    for k in ("torch_gather", "torch_diff"):
        if k in R:
            inner = [l for l in R[k]["out"].splitlines() if l.startswith("torch import")]
            lines.append(f"- {k}: {inner[-1] if inner else '?'}")
    lines += ["", f"optscope's max |a-b| per key equals PyTorch's for {len(theirs) - len(mismatch)} of {len(theirs)} keys"
              + (f" (different: {mismatch[:5]})" if mismatch else "") + ".", ""]
    text = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        f.write(text)
    print(text)
    shutil.rmtree(os.path.join(ROOT, work), ignore_errors=True)


if __name__ == "__main__":
    main()
