# SPDX-License-Identifier: GPL-3.0-or-later
"""Two ~2 GB torch.save optimizer checkpoints one AdamW step apart, with real PyTorch, for the diff benchmark.

    scripts/torch-python bench/make_step_pair.py [OUTDIR] [--dim 4099] [--hidden 5001] [--pairs 4]

Writes OUTDIR/step1.pt and OUTDIR/step2.pt ({"model": state_dict, "optim": optimizer.state_dict()}), and
OUTDIR/torch_diff.json: the per-tensor max |a - b| that PyTorch computes for the pair (the benchmark's baseline
work, and a check of optscope's numbers). OUTDIR defaults to bench/out/step_pair (under the repo: torch-python's chroot
sees only the current folder). About 168M parameters: 2.0 GB per file, ~4 GB of RAM while running.
"""
import argparse
import json
import os
import time

import torch
import torch.nn as nn


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?", default="bench/out/step_pair")
    ap.add_argument("--dim", type=int, default=4099)
    ap.add_argument("--hidden", type=int, default=5001)
    ap.add_argument("--pairs", type=int, default=4)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(1234)
    layers = []
    for _ in range(a.pairs):
        layers += [nn.Linear(a.dim, a.hidden), nn.Linear(a.hidden, a.dim)]
    model = nn.Sequential(*layers, nn.LayerNorm(a.dim), nn.Linear(a.dim, 1001, bias=False))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    g = torch.Generator().manual_seed(1234)
    t0 = time.time()
    for step in (1, 2):
        for p in model.parameters():
            p.grad = torch.randn(p.shape, generator=g)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.save({"model": model.state_dict(), "optim": opt.state_dict()}, os.path.join(a.out, f"step{step}.pt"))
    print(f"two checkpoints in {time.time() - t0:.1f}s", flush=True)
    # PyTorch's own numbers for the pair, by key (the baseline the benchmark times)
    x = torch.load(os.path.join(a.out, "step1.pt"), mmap=True, weights_only=True)
    y = torch.load(os.path.join(a.out, "step2.pt"), mmap=True, weights_only=True)
    from torch.distributed.checkpoint._nested_dict import flatten_state_dict

    fx, _ = flatten_state_dict(x)
    fy, _ = flatten_state_dict(y)
    out = {k: float((v - fy[k]).abs().max()) for k, v in fx.items() if isinstance(v, torch.Tensor) and v.numel()}
    with open(os.path.join(a.out, "torch_diff.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
