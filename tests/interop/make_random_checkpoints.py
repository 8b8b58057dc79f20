# SPDX-License-Identifier: GPL-3.0-or-later
"""Interop: fresh checkpoints with random shapes, made by real PyTorch on every run, plus torch's own view of them.

    torch-python make_random_checkpoints.py OUTDIR [SEED]

Writes OUTDIR/<name> checkpoints and OUTDIR/manifest.json (same schema as tests/data/manifest.json). The seed is
random unless given, and printed, so a failure can be replayed.
"""
import os
import random
import shutil
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import get_state_dict, StateDictOptions

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import dcp_manifest, fake_steps, manifest_of, spawn  # noqa: E402  (copied next to this file)


def random_model(rng, depth=None):
    depth = depth or rng.randint(2, 4)
    dims = [rng.randint(1, 13) for _ in range(depth + 1)]
    layers = []
    for i in range(depth):
        layers.append(nn.Linear(dims[i], dims[i + 1], bias=rng.random() < 0.7))
        if rng.random() < 0.3:
            layers.append(nn.LayerNorm(dims[i + 1]))
    return nn.Sequential(*layers)


def _fsdp2(rank, world, port, out, seed, flatten_optim):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from torch.distributed.fsdp import fully_shard

    rng = random.Random(seed)
    torch.manual_seed(seed)
    model = random_model(rng, depth=3)
    for m in model:
        if isinstance(m, nn.Linear) and rng.random() < 0.5:
            fully_shard(m)
    fully_shard(model)
    opt_cls = rng.choice([torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD])
    kwargs = {"lr": 0.01, "momentum": 0.9} if opt_cls is torch.optim.SGD else {"lr": 1e-3}
    opt = opt_cls(model.parameters(), **kwargs)
    fake_steps(model, opt, steps=rng.randint(1, 3), seed=seed)
    options = StateDictOptions(flatten_optimizer_state_dict=flatten_optim)
    msd, osd = get_state_dict(model, opt, options=options)
    dcp.save({"model": msd, "optim": osd, "extra": {"epoch": rng.randint(0, 99)}}, checkpoint_id=out)
    dist.barrier()
    dist.destroy_process_group()


def main():
    out = sys.argv[1]
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else random.SystemRandom().randint(0, 2**31)
    print("interop seed", seed, flush=True)
    rng = random.Random(seed)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    manifest = {"torch_version": torch.__version__, "seed": seed}

    # plain torch.save of an optimizer with random dtypes and nesting
    for i in range(3):
        torch.manual_seed(seed + i)
        dtype = rng.choice([torch.float32, torch.bfloat16, torch.float16, torch.float64])
        model = random_model(rng).to(dtype)
        opt = rng.choice([torch.optim.Adam, torch.optim.AdamW, torch.optim.RMSprop, torch.optim.Adagrad])(
            model.parameters(), lr=1e-3)
        fake_steps(model, opt, steps=rng.randint(1, 3), seed=seed + i)
        sd = {"optim": opt.state_dict(), "step": rng.randint(0, 10**6), "tags": ["a", "b"],
              "nested": {"x": [torch.randn(rng.randint(0, 5), 3).to(dtype), {"y": torch.tensor(rng.random())}]}}
        name = f"plain_{i}.pt"
        torch.save(sd, os.path.join(out, name), pickle_protocol=rng.choice([2, 4]))
        manifest[name] = manifest_of(sd, "torch_save")

    # single-process DCP of a random state dict (no process group: DCP's no_dist path)
    torch.manual_seed(seed)
    model = random_model(rng)
    opt = torch.optim.Adam(model.parameters())
    fake_steps(model, opt, seed=seed)
    msd, osd = get_state_dict(model, opt)
    name = "single_dcp"
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=os.path.join(out, name))
    manifest[name] = dcp_manifest(os.path.join(out, name))

    # FSDP2 on a random world size, sometimes with the flattened optimizer format
    for j, world in enumerate(rng.sample([2, 3, 4], 2)):
        name = f"fsdp2_w{world}"
        spawn(_fsdp2, world, os.path.join(out, name), seed + j, rng.random() < 0.5)
        manifest[name] = dcp_manifest(os.path.join(out, name))

    import json

    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print("interop checkpoints written to", out)


if __name__ == "__main__":
    main()
