# SPDX-License-Identifier: GPL-3.0-or-later
"""The PyTorch way of listing a DCP checkpoint's keys, for comparison with `optscope-cli inspect`.

    scripts/torch-python bench/torch_read_metadata.py CKPT

Prints the time of `import torch.distributed.checkpoint` and of FileSystemReader(CKPT).read_metadata() (which
unpickles .metadata, i.e. runs a pickle) plus the number of keys; the whole process also pays interpreter start-up.
"""
import sys
import time

t0 = time.perf_counter()
import torch.distributed.checkpoint as dcp  # noqa: E402

t1 = time.perf_counter()
md = dcp.FileSystemReader(sys.argv[1]).read_metadata()
keys = sorted(md.state_dict_metadata)
t2 = time.perf_counter()
print(f"import {t1 - t0:.3f} s, read_metadata {t2 - t1:.4f} s, {len(keys)} keys")
