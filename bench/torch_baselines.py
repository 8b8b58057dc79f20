# SPDX-License-Identifier: GPL-3.0-or-later
"""The PyTorch way of doing what optscope benchmarks, timed inside one Python process (import excluded, printed).

    scripts/torch-python bench/torch_baselines.py dcp_to_torch_save CKPT OUT.pt
    scripts/torch-python bench/torch_baselines.py diff A.pt B.pt      torch.load(mmap=True) of both + per-tensor max|a-b|
"""
import sys
import time

t_import = time.time()
import torch  # noqa: E402

t0 = time.time()
what = sys.argv[1]
if what == "dcp_to_torch_save":
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    dcp_to_torch_save(sys.argv[2], sys.argv[3])
elif what == "diff":
    from torch.distributed.checkpoint._nested_dict import flatten_state_dict

    a = torch.load(sys.argv[2], mmap=True, weights_only=True)
    b = torch.load(sys.argv[3], mmap=True, weights_only=True)
    fa, _ = flatten_state_dict(a)
    fb, _ = flatten_state_dict(b)
    worst = 0.0
    for k, v in fa.items():
        if isinstance(v, torch.Tensor) and v.numel():
            worst = max(worst, float((v - fb[k]).abs().max()))
    print("max |a-b| over all tensors", worst)
else:
    sys.exit("unknown baseline " + what)
print(f"torch import {t0 - t_import:.2f}s, work {time.time() - t0:.2f}s", flush=True)
