# SPDX-License-Identifier: GPL-3.0-or-later
"""A training run's checkpoint folder for the Watch bench, written by real PyTorch (run from the repository root, the
only folder the torch-python chroot sees):

    scripts/torch-python bench/watch/make_run.py OUT STEPS [PARAMS]

A model of PARAMS (33,334 by default) small parameters (8 floats each, so that the per-key costs dominate) trained
with AdamW: gradients set by hand from a seeded generator, one optimizer.step() per saved step, and after each step
torch.save({"model": model.state_dict(), "optim": optimizer.state_dict()}) to OUT/step_<i>.pt, as trainers save:
PARAMS model keys and 3 x PARAMS optimizer keys (step, exp_avg, exp_avg_sq), 133,336 keys by default. Every file is
written under a temporary name and renamed, as a trainer's checkpoint callback does. Existing files are kept.
"""
import os
import sys

import torch
import torch.nn as nn


def main():
    out, steps = sys.argv[1], int(sys.argv[2])
    params = int(sys.argv[3]) if len(sys.argv) > 3 else 33334
    os.makedirs(out, exist_ok=True)
    if all(os.path.exists(os.path.join(out, f"step_{i}.pt")) for i in range(1, steps + 1)):
        return
    torch.manual_seed(0)
    model = nn.ParameterList(nn.Parameter(torch.randn(8)) for _ in range(params))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, foreach=True)
    gen = torch.Generator().manual_seed(1)
    for i in range(1, steps + 1):
        for p in model.parameters():
            p.grad = torch.randn(p.shape, generator=gen)
        opt.step()
        path = os.path.join(out, f"step_{i}.pt")
        torch.save({"model": model.state_dict(), "optim": opt.state_dict()}, path + ".tmp")
        os.replace(path + ".tmp", path)
        print(f"make_run: {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
