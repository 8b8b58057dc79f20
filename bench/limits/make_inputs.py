# SPDX-License-Identifier: GPL-3.0-or-later
"""Inputs for the limits benchmark, written by real PyTorch (run from the repository root, the only folder the
torch-python chroot sees):

    scripts/torch-python bench/limits/make_inputs.py OUT KIND [N ...]

KIND
  keys    for each N: OUT/keys_N.pt (torch.save) and OUT/keys_N_dcp (DCP, one process, one file): an Adam-like
          optimizer state with N entries (N/3 parameters x step, exp_avg, exp_avg_sq; 8-element tensors, so that the
          per-key costs dominate) plus its param_groups
  files   for each N: OUT/files_N_dcp: N tensors of 1024 float32 each, written by DCP with
          single_file_per_rank=False, which gives every tensor its own __0_<i>.distcp file
  big     OUT/big.pt: torch.save of {"big": 4.5 GiB uint8 tensor, "after": a small tensor stored after it, so that
          its record starts past 4 GiB (ZIP64 sizes and offsets)}

Existing outputs are kept (delete them to rebuild).
"""
import os
import sys

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemWriter


def adam_like(n_keys):
    params = max(1, n_keys // 3)
    state = {}
    for i in range(params):
        state[i] = {"step": torch.tensor(float(i % 7 + 1)), "exp_avg": torch.full((8,), i * 1e-3),
                    "exp_avg_sq": torch.full((8,), i * 1e-6)}
    groups = [{"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01, "amsgrad": False,
               "params": list(range(params))}]
    return {"optim": {"state": state, "param_groups": groups}}


def make_keys(out, n):
    sd = adam_like(n)
    pt = os.path.join(out, f"keys_{n}.pt")
    if not os.path.exists(pt):
        torch.save(sd, pt)
    d = os.path.join(out, f"keys_{n}_dcp")
    if not os.path.exists(os.path.join(d, ".metadata")):
        dcp.save(sd, storage_writer=FileSystemWriter(d))


def make_files(out, n):
    d = os.path.join(out, f"files_{n}_dcp")
    if os.path.exists(os.path.join(d, ".metadata")):
        return
    sd = {"tensors": {f"t{i}": torch.full((1024,), float(i)) for i in range(n)}}
    dcp.save(sd, storage_writer=FileSystemWriter(d, single_file_per_rank=False))
    files = [f for f in os.listdir(d) if f.endswith(".distcp")]
    assert len(files) >= n, (d, len(files))


def make_big(out):
    path = os.path.join(out, "big.pt")
    if os.path.exists(path):
        return
    big = torch.zeros(4608 << 20, dtype=torch.uint8)  # 4.5 GiB
    big[::1 << 20] = torch.arange(4608, dtype=torch.int64).remainder(251).to(torch.uint8) + 1
    torch.save({"big": big, "after": torch.arange(16, dtype=torch.float32)}, path)


def main():
    out, kind = sys.argv[1], sys.argv[2]
    counts = [int(a) for a in sys.argv[3:]]
    os.makedirs(out, exist_ok=True)
    for n in counts:
        {"keys": make_keys, "files": make_files}[kind](out, n)
    if kind == "big":
        make_big(out)


if __name__ == "__main__":
    main()
