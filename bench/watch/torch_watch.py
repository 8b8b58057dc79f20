# SPDX-License-Identifier: GPL-3.0-or-later
"""The PyTorch way of following a run, for the side-by-side rows of bench/watch/run_watch_bench.sh: what a user
scripts without optscope.

    scripts/torch-python bench/watch/torch_watch.py RUN_FOLDER

Reads RUN_FOLDER/step_<i>.pt in step order with torch.load(weights_only=True) and compares each with the one before,
key by key over the nested dicts: for every tensor, max |a - b| and how many elements differ. Timed in the process
after `import torch`. Prints "steps<TAB>seconds of the first read<TAB>seconds per later step (read and compare)<TAB>
peak RSS KiB above the RSS after import torch<TAB>keys per step<TAB>the key with the largest max |a - b| at the
last step<TAB>the whole process's peak RSS KiB".
"""
import os
import re
import resource
import sys
import time

import torch


def leaves(value, prefix, out):
    if isinstance(value, dict):
        for k, v in value.items():
            leaves(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(value, (list, tuple)) and any(isinstance(x, (dict, torch.Tensor)) for x in value):
        for i, v in enumerate(value):
            leaves(v, f"{prefix}.{i}", out)
    else:
        out[prefix] = value
    return out


def main():
    folder = sys.argv[1]
    steps = sorted((f for f in os.listdir(folder) if re.fullmatch(r"step_\d+\.pt", f)),
                   key=lambda f: int(re.findall(r"\d+", f)[-1]))
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    previous = None
    first = None
    top = None
    for name in steps:
        current = leaves(torch.load(os.path.join(folder, name), weights_only=True), "", {})
        if previous is None:
            first = time.perf_counter() - start
        else:
            best = (-1.0, None)
            for key, a in current.items():
                b = previous.get(key)
                if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape:
                    d = (a.double() - b.double()).abs()
                    m = d.max().item() if d.numel() else 0.0
                    int((d != 0).sum())
                    if m > best[0] and not key.endswith(".step"):
                        best = (m, key)
            top = best[1]
        previous = current
    wall = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    per_step = (wall - first) / (len(steps) - 1) if len(steps) > 1 else 0.0
    print(f"{len(steps)}\t{first:.4f}\t{per_step:.4f}\t{peak - base}\t{len(previous)}\t{top}\t{peak}")


if __name__ == "__main__":
    main()
