# SPDX-License-Identifier: GPL-3.0-or-later
"""Make a big FSDP2 AdamW DCP checkpoint with real PyTorch, for the inspect benchmark.

    scripts/torch-python bench/make_big_checkpoint.py [OUT] [--world 4] [--dim 4099] [--hidden 5001] [--pairs 4]

OUT defaults to bench/out/fsdp2_4rank_2gb (keep it under the current folder: torch-python runs in a chroot that
only sees the current folder). The defaults give about 168M float32 parameters: parameters + exp_avg + exp_avg_sq
come to about 2.0 GB (1.88 GiB) in the .distcp files, 4 ranks; 87 keys: 19 parameters, 19 x (exp_avg, exp_avg_sq,
step) and the param_groups values. About 35 s and 1 GB peak RSS per rank on a 2-core machine.

The model is a stack of Linear layers (d -> h -> d, `pairs` times, then a head d -> 1001) with a LayerNorm(d);
4099, 5001 and 1001 do not divide by 4, so FSDP2's dim-0 shards are uneven (4099 rows: 1025/1025/1025/1024).

Fast and memory-safe on a small machine: the model is built on the meta device, sharded with fully_shard (gloo,
CPU), then only each rank's local shard is materialised and filled; gradients are set by hand on the local
shards (FSDP2 cannot run backward on CPU in torch 2.6), one AdamW step, get_state_dict, dcp.save. Each rank
holds about 4x its shard (param, grad, exp_avg, exp_avg_sq: ~0.7 GB at the defaults) plus AdamW's temporaries,
and uses one thread.
"""
import argparse
import os
import shutil
import sys
import time
import warnings

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import get_state_dict

SEED = 1234


class Big(nn.Module):
    def __init__(self, dim, hidden, pairs, head):
        super().__init__()
        self.blocks = nn.ModuleList()
        for _ in range(pairs):
            self.blocks.append(nn.Sequential(nn.Linear(dim, hidden), nn.Linear(hidden, dim)))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, head, bias=False)


def _worker(rank, world, port, out, dim, hidden, pairs, head):
    warnings.filterwarnings("ignore", message="TypedStorage is deprecated")
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from torch.distributed.fsdp import fully_shard

    t0 = time.time()
    with torch.device("meta"):
        model = Big(dim, hidden, pairs, head)
    for b in model.blocks:
        fully_shard(b)
    fully_shard(model)
    model.to_empty(device="cpu")  # materialises only the local shards

    # deterministic values per rank, filled shard by shard (no full tensor is ever built)
    g = torch.Generator().manual_seed(SEED + rank)
    with torch.no_grad():
        for p in model.parameters():
            loc = p.to_local()
            if loc.numel():
                loc.uniform_(-0.02, 0.02, generator=g)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    for p in model.parameters():
        grad = torch.empty_like(p)  # a DTensor with the parameter's layout
        loc = grad.to_local()
        if loc.numel():
            loc.normal_(generator=g)
        p.grad = grad
    t1 = time.time()
    opt.step()
    opt.zero_grad(set_to_none=True)
    t2 = time.time()
    msd, osd = get_state_dict(model, opt)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=out)
    dist.barrier()
    t3 = time.time()
    if rank == 0:
        n = sum(p.numel() for p in model.parameters())
        print(f"params {n:,} ({n * 12 / 1e9:.2f} GB with exp_avg and exp_avg_sq in float32); "
              f"init {t1 - t0:.1f}s, step {t2 - t1:.1f}s, save {t3 - t2:.1f}s", flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", default="bench/out/fsdp2_4rank_2gb")
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--dim", type=int, default=4099)
    ap.add_argument("--hidden", type=int, default=5001)
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--head", type=int, default=1001)
    ap.add_argument("--force", action="store_true", help="replace OUT if it exists")
    a = ap.parse_args()
    if os.path.exists(a.out):
        if not a.force:
            sys.exit(f"{a.out} exists (give --force to replace it)")
        shutil.rmtree(a.out)
    tmp = a.out.rstrip("/") + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    port = 29400 + (os.getpid() % 500)
    t = time.time()
    mp.spawn(_worker, args=(a.world, port, tmp, a.dim, a.hidden, a.pairs, a.head), nprocs=a.world, join=True)
    os.rename(tmp, a.out)  # only a complete checkpoint gets the final name
    size = sum(os.path.getsize(os.path.join(a.out, f)) for f in os.listdir(a.out))
    print(f"wrote {a.out}: {len(os.listdir(a.out))} files, {size:,} bytes, {time.time() - t:.1f}s")


if __name__ == "__main__":
    main()
