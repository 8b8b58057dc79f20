# SPDX-License-Identifier: GPL-3.0-or-later
"""Make the demo checkpoint the OptScope app opens when it is started without a path, with real PyTorch.

    scripts/torch-python resources/demo/make_demo.py resources/demo/checkpoint

A tiny transformer-like model (token embedding, one pre-norm block with attention projections and an MLP, final norm,
a 4-class head) is sharded with FSDP2 (fully_shard) over 3 gloo ranks on CPU and trained for a few AdamW steps with
gradients set by hand (FSDP2 cannot run backward on CPU here). get_state_dict + dcp.save write {"model", "optim"}.

Dims are uneven on purpose, so the Shard layout view has something to show: 47 embedding rows on 3 ranks are chunks
of 16/16/15 rows, and the 4-row head on 3 ranks is 2/2/0 rows: rank 2 holds an empty chunk.

Written next to OUT as well (all small, well under 600 KB together):
  OUT-step2/             the same run one step earlier: something to compare in the Diff view
  compiled_fqns.txt      the parameter names of the same model after torch.compile (`_orig_mod.` prefix): a
                         reference for the Diagnose view that shows the prefix-mismatch finding and its fix
"""
import os
import shutil
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import get_state_dict

SEED = 20240611
VOCAB, DIM, HIDDEN, CLASSES = 47, 16, 36, 4


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.out = nn.Linear(DIM, DIM)


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(DIM, HIDDEN)
        self.down = nn.Linear(HIDDEN, DIM)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_norm = nn.LayerNorm(DIM)
        self.attn = Attention()
        self.mlp_norm = nn.LayerNorm(DIM)
        self.mlp = Mlp()


class TinyTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList([Block()])
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, CLASSES)


def step(model, opt, g):
    """One AdamW step with hand-made gradients: larger for the head, sparse rows for the embedding."""
    from torch.distributed.tensor import distribute_tensor

    for name, p in model.named_parameters():
        scale = 0.5 if name.startswith("head") else 0.05
        grad = torch.randn(p.shape, generator=g) * scale
        if name == "embed.weight":  # only the tokens seen in this batch get a gradient
            grad[torch.randperm(VOCAB, generator=g)[: VOCAB // 2]] = 0
        p.grad = distribute_tensor(grad, p.device_mesh, p.placements)
    opt.step()
    opt.zero_grad(set_to_none=True)


def worker(rank, world, port, out):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(SEED)
    model = TinyTransformer()
    for block in model.layers:
        fully_shard(block)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    g = torch.Generator().manual_seed(SEED)  # the same gradients on every rank, distributed as DTensors
    for _ in range(2):
        step(model, opt, g)
    msd, osd = get_state_dict(model, opt)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=out + "-step2")
    step(model, opt, g)
    msd, osd = get_state_dict(model, opt)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=out)
    dist.barrier()
    dist.destroy_process_group()


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "resources/demo/checkpoint"
    out = out.rstrip("/")
    for path in (out, out + "-step2"):
        shutil.rmtree(path, ignore_errors=True)
    port = 29400 + (os.getpid() % 200)
    mp.spawn(worker, args=(3, port, out), nprocs=3, join=True)

    # the names the same parameters get under torch.compile (compilation itself is lazy, never triggered)
    compiled = torch.compile(TinyTransformer())
    with open(os.path.join(os.path.dirname(out) or ".", "compiled_fqns.txt"), "w") as f:
        f.write("# parameters of torch.compile(TinyTransformer()), from named_parameters(): FQN and shape\n")
        for name, p in compiled.named_parameters():
            f.write(f"{name} {','.join(str(d) for d in p.shape)}\n")
    print("demo checkpoint written to", out, "and", out + "-step2")


if __name__ == "__main__":
    main()
