# SPDX-License-Identifier: GPL-3.0-or-later
"""Interop for Megatron-Core dist_checkpointing folders: what optscope makes of them, loaded by real PyTorch.

    torch-python megatron_reshard_interop.py OUTDIR M...

OUTDIR holds the Megatron-Core core_v0.16.1 DistributedOptimizer samples (distopt_fully_reshardable,
distopt_dp_reshardable: iter_0000002/ and reference.pt with the parameters after the last step), and for each
variant V and world size M, V.rs_M (`optscope-cli reshard V --world-size M --layout fsdp2`) and V.gathered.pt.
The moments expected are those real PyTorch reads from the fully_reshardable (model-space) DCP items; the
dp_reshardable buckets must map back to the same numbers (both runs end with the same parameters).
1. V.gathered.pt: torch.load(weights_only=True) reads it; weights equal reference.pt, moments the expected ones.
2. For each M: M ranks (gloo, CPU) build the sample's model (Linear(5,7), Linear(7,3)) with FSDP2 and a torch Adam
   over Megatron's two default groups (weights / biases, other hyperparameters), give it optimizer state with other
   values, dcp.load V.rs_M into get_state_dict's state, set_state_dict, and gather the full state: weights, moments,
   step and hyperparameters must be the checkpoint's, bit for bit.
"""
import io
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.metadata import TensorStorageMetadata
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict, StateDictOptions
from make_fixtures import spawn  # noqa: E402

PARAMS = ["inp.weight", "inp.bias", "out.weight", "out.bias"]


class Sample(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(5, 7)
        self.out = nn.Linear(7, 3)


def groups(model):
    named = dict(model.named_parameters())
    return [{"params": [named["inp.weight"], named["out.weight"]], "lr": 0.5, "weight_decay": 0.3},
            {"params": [named["inp.bias"], named["out.bias"]], "lr": 0.25, "weight_decay": 0.0}]


def _worker(rank, world, port, ckpt, out):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(1234)
    model = Sample()
    for m in (model.inp, model.out):
        fully_shard(m)
    fully_shard(model)
    opt = torch.optim.Adam(groups(model), betas=(0.5, 0.6), eps=1e-3)
    g = torch.Generator().manual_seed(99)
    for _ in range(3):  # state with other values
        for p in model.parameters():
            p.grad = torch.distributed.tensor.distribute_tensor(
                torch.randn(p.shape, generator=g), p.device_mesh, p.placements)
        opt.step()
        opt.zero_grad()
    msd, osd = get_state_dict(model, opt)
    state = {"model": msd, "optim": osd}
    dcp.load(state, checkpoint_id=ckpt)
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    full_msd, full_osd = get_state_dict(model, opt, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    groups_seen = [{k: v for k, v in pg.items() if k != "params"} for pg in opt.param_groups]
    if rank == 0:
        torch.save({"model": full_msd, "optim": full_osd, "groups": groups_seen}, out)
    dist.barrier()
    dist.destroy_process_group()


def bits_equal(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(-1).view(torch.int32), b.view(-1).view(torch.int32))


def dcp_items(d):
    """every tensor item of a DCP folder, read with torch.load as FileSystemReader does (planner_data is None in
    Megatron's folders, so dcp.load with an empty planner cannot read them)"""
    md = FileSystemReader(d).read_metadata()
    out = {}
    for idx, si in md.storage_data.items():
        with open(os.path.join(d, si.relative_path), "rb") as f:
            f.seek(si.offset)
            v = torch.load(io.BytesIO(f.read(si.length)), weights_only=False)
        if torch.is_tensor(v):
            full = out.setdefault(idx.fqn, torch.zeros(md.state_dict_metadata[idx.fqn].size, dtype=v.dtype))
            full[tuple(slice(o, o + s) for o, s in zip(idx.offset, v.shape))] = v
    return out


def check(label, model, state, want, errors):
    for p in PARAMS:
        if not bits_equal(model[p].float(), want[("model", p)]):
            errors.append(f"{label}: weight {p} differs")
        for name in ("exp_avg", "exp_avg_sq", "step"):
            got = state[p][name]
            if not torch.is_tensor(got):
                got = torch.tensor(float(got))
            if not bits_equal(got, want[("state", p, name)].to(got.dtype)):
                errors.append(f"{label}: {p}.{name} differs ({got.flatten()[:3]} vs {want[('state', p, name)].flatten()[:3]})")


def main(out_dir, worlds):
    errors = []
    moments = dcp_items(os.path.join(out_dir, "distopt_fully_reshardable", "iter_0000002"))
    for variant in ("distopt_fully_reshardable", "distopt_dp_reshardable"):
        ref = torch.load(os.path.join(out_dir, variant, "reference.pt"), weights_only=False)
        want = {}
        for p in PARAMS:
            want[("model", p)] = ref["params"][p]
            for name in ("exp_avg", "exp_avg_sq"):
                want[("state", p, name)] = moments[f"optimizer.state.{name}.model.{p}"]
            want[("state", p, "step")] = torch.tensor(2.0)
        gathered = torch.load(os.path.join(out_dir, f"{variant}.gathered.pt"), weights_only=True)
        check(f"{variant} gather", gathered["model"], gathered["optim"]["state"], want, errors)
        names = [pg["params"] for pg in gathered["optim"]["param_groups"]]
        if names != [["inp.weight", "out.weight"], ["inp.bias", "out.bias"]]:
            errors.append(f"{variant} gather: param_groups list {names}")
        for m in worlds:
            out = os.path.join(out_dir, f"{variant}.rs_{m}.loaded.pt")
            spawn(_worker, m, os.path.join(out_dir, f"{variant}.rs_{m}"), out)
            got = torch.load(out, weights_only=True)
            label = f"{variant} FSDP2 M={m}"
            n = len(errors)
            # Megatron counts steps per param group (a Python number); the conversion writes what PyTorch's Adam saves,
            # a 0-dim float32 tensor per parameter, not a pickled number
            md = FileSystemReader(os.path.join(out_dir, f"{variant}.rs_{m}")).read_metadata()
            for p in PARAMS:
                sm = md.state_dict_metadata.get(f"optim.state.{p}.step")
                if not isinstance(sm, TensorStorageMetadata) or list(sm.size) != [] \
                        or sm.properties.dtype != torch.float32:
                    errors.append(f"{label}: step of {p} is stored as {sm}, not a 0-dim float32 tensor")
            check(label, got["model"], got["optim"]["state"], want, errors)
            for g in got["groups"]:
                if g["lr"] != 0.01 or g["weight_decay"] != 0.1 or tuple(g["betas"]) != (0.9, 0.999) or g["eps"] != 1e-8:
                    errors.append(f"{label}: hyperparameters not loaded: {g}")
            print(f"{label}: {'weights, moments, step and hyperparameters equal to Megatron-Core' if len(errors) == n else 'DIFFERENT'}")
    for e in errors[:30]:
        print("   ", e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], [int(x) for x in sys.argv[2:]]))
