# SPDX-License-Identifier: GPL-3.0-or-later
"""The safety issue's cost cases, side by side with the PyTorch way in one run: wall time (median of RUNS) and peak
RSS (GNU time), as ratios; writes bench/results/hostile.md.

    python3 bench/hostile/run_hostile_bench.py OPTSCOPE_CLI [RUNS] [ONLY]
ONLY: measure only the cases whose name holds it, and replace their rows in the table as it is.
Inputs come from bench/hostile/make_inputs.py (real PyTorch, scripts/torch-python) into bench/out/hostile.
"""
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CLI = os.path.abspath(sys.argv[1])
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
ONLY = sys.argv[3] if len(sys.argv) > 3 else None
OUT = os.path.join(ROOT, "bench/out/hostile")
TP = os.path.join(ROOT, "scripts/torch-python")
SIDE = os.path.join(ROOT, "bench/hostile/torch_side.py")


def time_ratio(theirs, ours):
    """theirs / ours; GNU time counts hundredths, so a run it shows as 0.00 s is at least '>= theirs / 0.01'"""
    return f">= {theirs / 0.01:.0f}x" if ours < 0.01 else f"{theirs / ours:.1f}x"


DEADLINE = 600  # seconds the PyTorch side of a case may take before it is stopped (torch_side.py's dcp_roundtrip)


def measure(cmd, cwd=OUT, must_pass=False):
    walls, rss = [], []
    for _ in range(RUNS):
        with tempfile.NamedTemporaryFile("r") as t:
            r = subprocess.run(["/usr/bin/time", "-f", "%e %M", "-o", t.name] + cmd, cwd=cwd,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=900)
            if must_pass and r.returncode == 124:  # stopped at its deadline: once is enough to say so
                return float(DEADLINE), 0.0, 124
            if must_pass and r.returncode != 0:
                sys.exit(f"{' '.join(cmd)} failed: {r.stderr.decode()[-2000:]}")
            wall, kb = t.read().split()[-2:]
        walls.append(float(wall))
        rss.append(int(kb))
        for f in ("o.pt", "t.pt"):
            if os.path.exists(os.path.join(OUT, f)):
                os.unlink(os.path.join(OUT, f))
            if os.path.exists(os.path.join(ROOT, f)):
                os.unlink(os.path.join(ROOT, f))
    return statistics.median(walls), max(rss) / 1024, r.returncode


def main():
    subprocess.run([TP, os.path.join(ROOT, "bench/hostile/make_inputs.py"), OUT, "100000", "100000", "10000",
                    "1000000"],
                   check=True, stderr=subprocess.DEVNULL)
    cases = [
        ("gather of a dict of 100k ints (1.8 MB)", ["gather", "ints_100000.pt", "-o", "o.pt", "--no-fsync"],
         ["load_save", "ints_100000.pt", "t.pt"], "torch.load + torch.save"),
        ("inspect of 100k safetensors tensors", ["inspect", "st_100000.safetensors"],
         ["st_load", "st_100000.safetensors"], "safetensors load_file"),
        ("gather of 100k safetensors tensors", ["gather", "st_100000.safetensors", "-o", "o.pt", "--no-fsync"],
         ["st_load_save", "st_100000.safetensors", "t.pt"], "load_file + torch.save"),
        ("inspect --hash of one tensor in 10k chunks", ["inspect", "chunks_10000", "--hash"],
         ["dcp_load_hash", "chunks_10000"], "dcp.load + sha256"),
        ("diff of one tensor in 10k chunks with itself", ["diff", "chunks_10000", "chunks_10000"],
         ["dcp_diff", "chunks_10000", "chunks_10000"], "dcp.load of each + (a != b).sum(), max |a - b|"),
        ("check of 2,000 listings of one region", ["check", "overlap_2000"], None, "none (target < 1 s)"),
        ("gather of z = [z, z] x 64 (1.7 KB)", ["gather", os.path.join(ROOT, "tests/data/hostile/shared_strings.pt"),
                                               "-o", "o.pt", "--no-fsync"],
         ["load_save", os.path.join(ROOT, "tests/data/hostile/shared_strings.pt"), "t.pt"],
         "torch.load + torch.save"),
        ("inspect --hash of expand(2^30, 2^30) (1.2 KB)", ["inspect", "expanded.pt", "--hash"],
         ["load", "expanded.pt"], "torch.load"),
        ("diff of a 1 GiB broadcast view and its dense copy", ["diff", "view_1g.pt", "dense_1g.pt"],
         ["diff", "view_1g.pt", "dense_1g.pt"], "torch.load(mmap) + (a != b).sum(), max |a - b|"),
        ("diff of two 256 MiB uint8 tensors", ["diff", "u8_a.pt", "u8_b.pt"], ["diff", "u8_a.pt", "u8_b.pt"],
         "torch.load(mmap) + (a != b).sum(), max |a - b|"),
        ("inspect of 1M values (15 MB)", ["inspect", "values_1000000.pt"], ["load", "values_1000000.pt"],
         "torch.load"),
        ("inspect --hash of a 240 MB torch.save zipped again with deflate", ["inspect", "deflated_240m.pt", "--hash"],
         ["load_hash", "deflated_240m.pt"], "torch.load + sha256"),
        ("inspect --json of 1M values (15 MB)", ["inspect", "values_1000000.pt", "--json"],
         ["load", "values_1000000.pt"], "torch.load"),
        ("gather of 1M values (15 MB)", ["gather", "values_1000000.pt", "-o", "o.pt", "--no-fsync"],
         ["load_save", "values_1000000.pt", "t.pt"], "torch.load + torch.save"),
        ("inspect of a Trainer folder with a 53 MB trainer_state.json", ["inspect", "trainer_log"],
         ["json_load", "trainer_log"], "json.load, as the Trainer reads it"),
        ("verify of one list shared 5,000 times (22 KB; 5M leaves)",
         ["verify", os.path.join(ROOT, "tests/data/hostile/shared_subtree.pt"), "--world-size", "1"],
         ["dcp_roundtrip", os.path.join(ROOT, "tests/data/hostile/shared_subtree.pt"), "bench/out/hostile/rt",
          str(DEADLINE)],
         "torch.load + dcp.save + dcp_to_torch_save + =="),
        ("diff of 1M values with themselves (15 MB)", ["diff", "values_1000000.pt", "values_1000000.pt"],
         ["values_diff", "values_1000000.pt", "values_1000000.pt"], "torch.load of each + compare every key"),
    ]
    rows = []
    cases = [c for c in cases if ONLY is None or ONLY in c[0]]
    for name, ours, theirs, what in cases:
        w, m, rc = measure([CLI] + ours)
        if theirs:
            # the chroot sees the current folder only: run from the repository root with relative paths
            case, inp = theirs[0], os.path.relpath(os.path.join(OUT, theirs[1]), ROOT)
            rel = [case, inp] + [os.path.relpath(os.path.join(OUT, t), ROOT) if case.endswith("diff") else t
                                 for t in theirs[2:]]  # an output, "t.pt", lands in the repository root and is removed
            tw, tm, trc = measure([TP, os.path.relpath(SIDE, ROOT)] + rel, cwd=ROOT, must_pass=True)
            if trc == 124:
                rows.append(f"| {name} | {w:.2f} s, {m:.0f} MiB (exit {rc}) | {what}: not done after {DEADLINE} s "
                            f"(stopped) | >= {DEADLINE / max(w, 0.01):.0f}x | - |")
                print(rows[-1], flush=True)
                continue
            rows.append(f"| {name} | {w:.2f} s, {m:.0f} MiB (exit {rc}) | {what}: {tw:.2f} s, {tm:.0f} MiB | "
                        f"{time_ratio(tw, w)} | {tm / max(m, 1e-3):.1f}x |")
        else:
            rows.append(f"| {name} | {w:.2f} s, {m:.0f} MiB (exit {rc}) | {what} | - | - |")
        print(rows[-1], flush=True)
    table = os.path.join(ROOT, "bench/results/hostile.md")
    if ONLY is not None:
        with open(table) as f:
            lines = f.read().splitlines()
        for (name, *_), row in zip(cases, rows):
            lines = [row if line.startswith(f"| {name} |") else line for line in lines]
        with open(table, "w") as f:
            f.write("\n".join(lines) + "\n")
        return
    with open(table, "w") as f:
        f.write("# Hostile but valid inputs: cost against the PyTorch way\n\n")
        f.write(f"`python3 bench/hostile/run_hostile_bench.py {os.path.relpath(CLI, ROOT)} {RUNS}` (median of "
                f"{RUNS} runs, peak RSS; PyTorch 2.6 through scripts/torch-python, whose start-up of about 1 s is "
                "in its times). Ratios: PyTorch / optscope (above 1: optscope is faster / leaner).\n\n")
        f.write("| case | optscope-cli | the PyTorch way | time ratio | memory ratio |\n|---|---|---|---:|---:|\n")
        f.write("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
