# SPDX-License-Identifier: GPL-3.0-or-later
"""Interop for the ZeRO variants the real samples do not show (tests/data/zero/synthetic: bf16 and fp16 runs, frozen
parameters, 1 to 4 ranks, ZeRO-1/2/3, SGD with momentum; written by tests/fixtures/make_zero_synthetic.py in
DeepSpeed v0.19.5's layout): what optscope converts them to, loaded by real PyTorch.

    torch-python zero_synthetic_interop.py VARIANTDIR M...

VARIANTDIR holds ckpt/, reference.pt (the parameters and optimizer state of the same steps run on whole tensors),
gathered.pt (`optscope-cli gather ckpt`) and rs_M (`optscope-cli reshard ckpt --world-size M --layout fsdp2`).
1. gathered.pt loads with weights_only=True and equals reference.pt: every parameter (frozen ones in the model's
   dtype, as DeepSpeed keeps them), every optimizer state tensor, the param groups' FQNs and hyperparameters.
2. For each M: M gloo ranks build the model with FSDP2, frozen parameters with requires_grad=False, and the
   reference's optimizer (AdamW or SGD) over its param groups of trainable parameters with other hyperparameters and
   other state; dcp.load rs_M, set_state_dict, gather the full state: weights, optimizer state and hyperparameters
   must be the checkpoint's, bit for bit (a frozen bf16 weight loaded into the fp32 model: its value).
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict, StateDictOptions
from make_fixtures import spawn  # noqa: E402

HYPER = ("lr", "weight_decay", "momentum", "dampening", "betas", "eps")


class Sample(nn.Module):
    """The samples' model (tests/data/zero/README.md)."""

    def __init__(self):
        super().__init__()
        self.emb_scale = nn.Parameter(torch.ones(3))
        self.inp = nn.Linear(5, 7)
        self.hid = nn.Linear(7, 7)
        self.out = nn.Linear(7, 3)


def make_optimizer(kind, groups, model):
    """@p kind over @p groups (lists of FQNs), with other hyperparameters: the load must bring the saved ones"""
    named = dict(model.named_parameters())
    groups = [{"params": [named[n] for n in g], "lr": 0.123, "weight_decay": 0.0456} for g in groups]
    if kind == "torch.optim.SGD":
        return torch.optim.SGD(groups, momentum=0.3, dampening=0.0)
    return torch.optim.AdamW(groups, betas=(0.5, 0.6), eps=1e-3)


def load_worker(rank, world, port, rs_dir, out, kind, groups, frozen):
    """one of @p world ranks: FSDP2 over Sample (@p frozen without gradients) and a @p kind optimizer over @p groups
    with state of other values; dcp.load @p rs_dir, set_state_dict, rank 0 saves the full state to @p out"""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import distribute_tensor

    torch.manual_seed(1234)
    model = Sample()
    for n, p in model.named_parameters():
        p.requires_grad_(n not in frozen)
    for m in (model.inp, model.hid, model.out):
        fully_shard(m)
    fully_shard(model)
    opt = make_optimizer(kind, groups, model)
    g = torch.Generator().manual_seed(99)
    for _ in range(3):  # state with other values
        for p in model.parameters():
            if p.requires_grad:
                p.grad = distribute_tensor(torch.randn(p.shape, generator=g), p.device_mesh, p.placements)
        opt.step()
        opt.zero_grad()
    msd, osd = get_state_dict(model, opt)
    state = {"model": msd, "optim": osd}
    dcp.load(state, checkpoint_id=rs_dir)
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    full_msd, full_osd = get_state_dict(model, opt, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    groups_seen = [{k: v for k, v in pg.items() if k != "params"} for pg in opt.param_groups]
    if rank == 0:
        torch.save({"model": full_msd, "optim": full_osd, "groups": groups_seen}, out)
    dist.barrier()
    dist.destroy_process_group()


def same(a, b):
    """bit for bit (NaN-safe): dtype, shape, bytes"""
    a, b = torch.as_tensor(a), torch.as_tensor(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.contiguous().view(-1).view(torch.uint8), b.contiguous().view(-1).view(torch.uint8))


def check(label, model, state, ref, errors, model_dtype_of_frozen=True):
    for n, want in ref["params"].items():
        got = model.get(n)
        if got is None:
            errors.append(f"{label}: no weight {n}")
            continue
        if not model_dtype_of_frozen:  # loaded into an fp32 model: a frozen bf16/fp16 weight keeps its value
            want = want.float()
        if not same(got, want):
            errors.append(f"{label}: weight {n} differs ({got.dtype} {got.flatten()[:3]} vs {want.dtype} "
                          f"{want.flatten()[:3]})")
    for n, names in ref["state"].items():
        for k, want in names.items():
            got = state.get(n, {}).get(k)
            if got is None:
                errors.append(f"{label}: no state {n}.{k}")
            elif not same(got, want):
                errors.append(f"{label}: {n}.{k} differs ({got.flatten()[:3]} vs {want.flatten()[:3]})")
    for n in ref["frozen"]:
        if state.get(n):
            errors.append(f"{label}: frozen {n} has optimizer state {sorted(state[n])}")


def check_groups(label, groups, ref, errors):
    if len(groups) != len(ref["param_groups"]):
        errors.append(f"{label}: {len(groups)} param groups, want {len(ref['param_groups'])}")
    for i, (got, want) in enumerate(zip(groups, ref["param_groups"])):
        for h in HYPER:
            if h in want and (tuple(got[h]) if h == "betas" else got[h]) != (
                    tuple(want[h]) if h == "betas" else want[h]):
                errors.append(f"{label}: group {i} {h} = {got.get(h)}, want {want[h]}")


def main(vdir, worlds):
    errors = []
    ref = torch.load(os.path.join(vdir, "reference.pt"), weights_only=False)
    name = os.path.basename(vdir.rstrip("/"))

    gathered = torch.load(os.path.join(vdir, "gathered.pt"), weights_only=True)
    check(f"{name} gather", gathered["model"], gathered["optim"]["state"], ref, errors)
    check_groups(f"{name} gather", gathered["optim"]["param_groups"], ref, errors)
    fqns = [pg["params"] for pg in gathered["optim"]["param_groups"]]
    if fqns != [list(g["params"]) for g in ref["param_groups"]]:
        errors.append(f"{name} gather: param_groups list {fqns}")

    for m in worlds:
        out = os.path.join(vdir, f"rs_{m}.loaded.pt")
        groups = [list(g["params"]) for g in ref["param_groups"]]
        spawn(load_worker, m, os.path.join(vdir, f"rs_{m}"), out, ref["optimizer"], groups, list(ref["frozen"]))
        got = torch.load(out, weights_only=True)
        label = f"{name} FSDP2 M={m}"
        before = len(errors)
        check(label, got["model"], got["optim"]["state"], ref, errors, model_dtype_of_frozen=False)
        check_groups(label, got["groups"], ref, errors)
        print(f"{label}: {'weights, optimizer state and hyperparameters equal to the reference' if len(errors) == before else 'DIFFERENT'}")
    for e in errors[:40]:
        print("   ", e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], [int(x) for x in sys.argv[2:]]))
