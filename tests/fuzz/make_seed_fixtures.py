# SPDX-License-Identifier: GPL-3.0-or-later
"""Small checkpoints written by real PyTorch, as fuzzing seeds (run from the repository root):

    scripts/torch-python tests/fuzz/make_seed_fixtures.py tests/data/fuzz

The other fixtures are tens to hundreds of KiB; a fuzzer's executions per second fall with the size of its
inputs, so these few-KiB checkpoints cover the same code (DTensor chunks, BYTE_IO values, views, the legacy format)
with inputs the fuzzer can mutate quickly:
  tiny_dcp/       one process: a model (float32, bfloat16), an optimizer state, plain values (BYTE_IO items)
  tiny_dcp_r2/    two ranks (gloo), FSDP2 over Linear(3, 5) with AdamW: uneven dim-0 chunks (3 + 2 rows)
  tiny.pt         torch.save: a transposed view (non-contiguous strides), a slice with a storage offset, a shared
                  storage, int64 and bool tensors, nested values
  tiny_legacy.pt  the same in the legacy format (_use_new_zipfile_serialization=False)
"""
import os
import shutil
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp


def tiny_state():
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    return {
        "model": {"w": base.t(), "row": base[1], "same": base, "b": torch.zeros(2, dtype=torch.bfloat16)},
        "optim": {"state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.full((2,), 0.5)}},
                  "param_groups": [{"lr": 0.1, "betas": (0.9, 0.999), "params": [0]}]},
        "extra": {"epoch": 3, "name": "tiny", "ids": torch.tensor([1, 2, 3]), "mask": torch.tensor([True, False])},
    }


def _r2_worker(rank, world, port, out):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from torch.distributed.checkpoint.state_dict import get_state_dict
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 5)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    opt.step()
    msd, osd = get_state_dict(model, opt)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=out)
    dist.barrier()
    dist.destroy_process_group()


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    sd = tiny_state()
    torch.save(sd, os.path.join(out, "tiny.pt"))
    torch.save(sd, os.path.join(out, "tiny_legacy.pt"), _use_new_zipfile_serialization=False)
    path = os.path.join(out, "tiny_dcp")
    shutil.rmtree(path, ignore_errors=True)
    dense = {k: ({kk: (vv.contiguous() if isinstance(vv, torch.Tensor) else vv) for kk, vv in v.items()}
                 if isinstance(v, dict) else v) for k, v in sd.items()}
    dcp.save(dense, checkpoint_id=path)
    path = os.path.join(out, "tiny_dcp_r2")
    shutil.rmtree(path, ignore_errors=True)
    mp.spawn(_r2_worker, args=(2, 29700 + os.getpid() % 200, path), nprocs=2, join=True)
    for root, _, files in os.walk(out):
        for f in sorted(files):
            p = os.path.join(root, f)
            print(f"{p}: {os.path.getsize(p)} bytes")


if __name__ == "__main__":
    main()
