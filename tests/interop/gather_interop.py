# SPDX-License-Identifier: GPL-3.0-or-later
"""Interop for `optscope-cli gather`: it must write what dcp_to_torch_save writes.

    torch-python gather_interop.py make OUTDIR      FSDP1 and FSDP2 DCP checkpoints on 2, 3 and 4 ranks, and
                                                    dcp_to_torch_save's output for each (<name>.ref.pt)
    (optscope-cli gather OUTDIR/<name> -o OUTDIR/<name>.optscope.pt, for each)
    torch-python gather_interop.py compare OUTDIR   torch.load(weights_only=True) of both; same nesting, key order,
                                                    container types, bit-identical tensors, equal plain values
"""
import json
import os
import random
import shutil
import struct
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, StateDictOptions

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import Net, fake_steps, spawn  # noqa: E402


class WideBlock(torch.nn.Module):
    """FSDP1's sharded state dict cannot represent a rank without rows (PyTorch raises "Only single local shard is
    supported"), so its models use dim-0 sizes that torch.chunk splits over 2, 3 and 4 ranks without an empty
    piece, while staying uneven (7, 10, 11)."""

    def __init__(self, inp):
        super().__init__()
        self.qkv = torch.nn.Linear(inp, 11)
        self.proj = torch.nn.Linear(11, 7)
        self.norm = torch.nn.LayerNorm(7)
        self.head = torch.nn.Linear(7, 10, bias=False)

    def forward(self, x):
        return self.head(self.norm(self.proj(torch.relu(self.qkv(x)))))


class WideNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([WideBlock(6), WideBlock(10)])
        self.out = torch.nn.Linear(10, 7)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.out(x)


def _worker(rank, world, port, out, kind, seed):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(seed)
    model = Net()
    if kind == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        for b in model.blocks:
            fully_shard(b)
        fully_shard(model)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        fake_steps(model, opt, seed=seed)
    else:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        model = FSDP(WideNet(), auto_wrap_policy=ModuleWrapPolicy({WideBlock}), device_id=torch.device("cpu"),
                     use_orig_params=(kind == "fsdp1_orig"))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        x = torch.randn(3, 6, generator=torch.Generator().manual_seed(seed))
        for _ in range(2):
            model(x).sum().backward()
            opt.step()
            opt.zero_grad()
    msd, osd = get_state_dict(model, opt)
    dcp.save({"model": msd, "optim": osd, "meta": {"seed": seed, "kind": kind, "world": world}}, checkpoint_id=out)
    dist.barrier()
    dist.destroy_process_group()


def make(out):
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    names = []
    seed = random.SystemRandom().randint(0, 10**6)
    print("seed", seed)
    for kind in ("fsdp1", "fsdp1_orig", "fsdp2"):
        for world in (2, 3, 4):
            name = f"{kind}_w{world}"
            spawn(_worker, world, os.path.join(out, name), kind, seed + world)
            dcp_to_torch_save(os.path.join(out, name), os.path.join(out, name + ".ref.pt"))
            names.append(name)
    with open(os.path.join(out, "names.json"), "w") as f:
        json.dump(names, f)


def same(a, b, path, errors, ordered=True):
    """a is the reference. ordered=False compares dict keys as sets (two torch APIs may order them differently)."""
    if type(a) is not type(b):
        errors.append(f"{path}: type {type(b).__name__} != reference {type(a).__name__}")
        return
    if isinstance(a, torch.Tensor):
        if a.dtype != b.dtype or a.shape != b.shape:
            errors.append(f"{path}: {b.dtype}{list(b.shape)} != reference {a.dtype}{list(a.shape)}")
        elif a.numel() and not torch.equal(a.contiguous().reshape(-1).view(torch.uint8),
                                           b.contiguous().reshape(-1).view(torch.uint8)):
            errors.append(f"{path}: tensor bytes differ")
        elif a.requires_grad != b.requires_grad:
            errors.append(f"{path}: requires_grad differs")
    elif isinstance(a, dict):
        if (list(a.keys()) if ordered else set(a.keys())) != (list(b.keys()) if ordered else set(b.keys())):
            errors.append(f"{path}: keys {list(b.keys())[:8]} != reference {list(a.keys())[:8]}")
            return
        for k in a:
            same(a[k], b[k], f"{path}.{k}", errors, ordered)
    elif isinstance(a, (list, tuple)):
        if len(a) != len(b):
            errors.append(f"{path}: length {len(b)} != reference {len(a)}")
            return
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{path}.{i}", errors, ordered)
    elif isinstance(a, float):
        if struct.pack("<d", a) != struct.pack("<d", b):
            errors.append(f"{path}: {b!r} != reference {a!r}")
    elif a != b:
        errors.append(f"{path}: {b!r} != reference {a!r}")


def compare(out):
    names = json.load(open(os.path.join(out, "names.json")))
    failures = 0
    for name in names:
        ref = torch.load(os.path.join(out, name + ".ref.pt"), weights_only=True)
        ours = torch.load(os.path.join(out, name + ".optscope.pt"), weights_only=True)
        errors = []
        same(ref, ours, name, errors)
        print(f"{name}: {'OK' if not errors else 'DIFFERENT'}")
        for e in errors[:20]:
            print("   ", e)
        failures += bool(errors)
    return 1 if failures or not names else 0


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    else:
        sys.exit(compare(sys.argv[2]))
