# SPDX-License-Identifier: GPL-3.0-or-later
"""Interop for `optscope-cli unflatten`: raw FSDP1 optimizer shards, one file per rank, must unflatten to exactly what
get_state_dict(..., full_state_dict=True) gives. With "orig" the run uses use_orig_params=True (one id per
parameter, each rank's state its slice of it) and writes to OUTDIR/w<W>_orig; with "tied" a model whose input
projection and head share a weight, stepped by RMSprop (centered, momentum), its --model a plain torch.save'd
state dict.

    torch-python unflatten_interop.py make OUTDIR w<W>[_orig]  OUTDIR/w<W>/optim_rank<r>.pt (raw, {"optim": osd}),
                                                        OUTDIR/w<W>/model (DCP of get_state_dict), and
                                                        OUTDIR/w<W>/full.pt ({"optim": full osd}, the reference)
    (optscope-cli unflatten OUTDIR/w<W>/optim_rank*.pt --model OUTDIR/w<W>/model --units ... -o .../ours.pt)
    torch-python unflatten_interop.py compare OUTDIR w<W>[_orig]  torch.load both (weights_only) and compare: same
                                                        nesting, key order, bit-identical tensors, equal values
Several commands in one run: separated by "+" (make_fixtures.run_commands).
"""
import os
import random
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, StateDictOptions

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import run_commands, spawn  # noqa: E402
from gather_interop import WideBlock, WideNet, same  # noqa: E402


class TiedNet(WideNet):
    """WideNet whose input projection and output head share one weight (as a language model ties its embedding and
    head): FSDP1 flattens the shared parameter once, and a plain model.state_dict() saved with torch.save keeps both
    names on one storage"""

    def __init__(self):
        super().__init__()
        self.inp = torch.nn.Linear(10, 6, bias=False)
        self.blocks = torch.nn.ModuleList([WideBlock(6), WideBlock(10)])
        self.out = torch.nn.Linear(10, 6, bias=False)
        self.out.weight = self.inp.weight  # [6, 10] both

    def forward(self, x):
        x = self.inp(x)
        for b in self.blocks:
            x = b(x)
        return self.out(x)


def _worker(rank, world, port, out, seed, orig, tied=False):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    torch.manual_seed(seed)
    net = TiedNet() if tied else WideNet()
    if tied and rank == 0:  # the unwrapped model's state dict: --model for unflatten, its tied names on one storage
        torch.save(net.state_dict(), os.path.join(out, "plain_model.pt"))
    model = FSDP(net, auto_wrap_policy=ModuleWrapPolicy({WideBlock}), device_id=torch.device("cpu"),
                 use_orig_params=orig)
    # the tied case steps RMSprop: its state names (step, square_avg, momentum_buffer, grad_avg) are not in the
    # sorted order FSDP gives them back in, as AdamW's are
    opt = torch.optim.RMSprop(model.parameters(), lr=1e-3, momentum=0.9, centered=True) if tied else \
        torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    x = torch.randn(4, 10 if tied else 6, generator=torch.Generator().manual_seed(seed))
    for _ in range(3):
        model(x).pow(2).sum().backward()
        opt.step()
        opt.zero_grad()
    msd, osd = get_state_dict(model, opt)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=os.path.join(out, "model"))
    torch.save({"optim": opt.state_dict()}, os.path.join(out, f"optim_rank{rank}.pt"))
    _, full = get_state_dict(model, opt, options=StateDictOptions(full_state_dict=True))
    if rank == 0:
        torch.save({"optim": full}, os.path.join(out, "full.pt"))
    dist.barrier()
    dist.destroy_process_group()


def main(args):
    mode, out, name = args  # name: w<W>, or w<W>_orig for use_orig_params=True, w<W>_tied for TiedNet
    world, orig, tied = int(name[1:].split("_")[0]), name.endswith("_orig"), name.endswith("_tied")
    d = os.path.join(out, name)
    if mode == "make":
        os.makedirs(d, exist_ok=True)
        seed = random.SystemRandom().randint(0, 10**6)
        print(name, "seed", seed)
        spawn(_worker, world, d, seed, orig, tied)
        return 0
    ref = torch.load(os.path.join(d, "full.pt"), weights_only=True)
    ours = torch.load(os.path.join(d, "ours.pt"), weights_only=True)
    errors = []
    # use_orig_params=True: PyTorch's full state lists the parameters in an order that varies from run to run
    # (seen: model order, and sorted by name), so only its dicts' key sets are compared; lists (param_groups'
    # params) keep their order
    same(ref, ours, f"W={world}", errors, ordered=not orig)
    what = "use_orig_params=True" if orig else "use_orig_params=False"
    print(f"unflatten of {world} raw FSDP1 ranks ({what}): {'equal to get_state_dict(full_state_dict=True)' if not errors else 'DIFFERENT'}")
    for e in errors[:20]:
        print("   ", e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(run_commands(main))
