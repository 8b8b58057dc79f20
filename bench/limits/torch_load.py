# SPDX-License-Identifier: GPL-3.0-or-later
"""PyTorch's own open of a torch.save file, for the side-by-side rows of bench/limits/run_limits_bench.sh.

    scripts/torch-python bench/limits/torch_load.py FILE

Prints "seconds<TAB>peak RSS KiB above the RSS after import torch<TAB>entries": torch.load with weights_only=True
(PyTorch 2.6's default), timed in the process, so the interpreter and the import are not counted.
"""
import resource
import sys
import time

import torch

base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
sd = torch.load(sys.argv[1], weights_only=True)
wall = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def leaves(v):
    if isinstance(v, dict):
        return sum(leaves(x) for x in v.values()) if v else 0
    if isinstance(v, (list, tuple)) and any(isinstance(x, (dict, torch.Tensor)) for x in v):
        return sum(leaves(x) for x in v)
    return 1


print(f"{wall:.4f}\t{peak - base}\t{leaves(sd)}")
