# SPDX-License-Identifier: GPL-3.0-or-later
"""Interop for `optscope-cli reshard`: real PyTorch loads our resharded DCP into FSDP2 on M ranks.

    torch-python reshard_interop.py make OUTDIR        a 3-rank FSDP2 AdamW checkpoint (OUTDIR/src) and its full
                                                       state as PyTorch gathers it (OUTDIR/src.ref.pt)
    (optscope-cli reshard OUTDIR/src --world-size M -o OUTDIR/rs_M)
    torch-python reshard_interop.py load_fsdp1 OUTDIR M  the same with FSDP1 loading a --layout fsdp1 reshard of a
                                                       2-rank FSDP1 checkpoint (OUTDIR/src_fsdp1)
    torch-python reshard_interop.py load OUTDIR M      M ranks: fresh FSDP2 model + optimizer, get_state_dict,
                                                       dcp.load from rs_M, set_state_dict, then the full state
                                                       (full_state_dict=True) must equal src.ref.pt bit for bit
    torch-python reshard_interop.py load_ranks OUTDIR M  the same from rs_ranks_M, the reshard of OUTDIR/src_ranks:
                                                       the source's state as per-rank torch.save files (DTensors)
Several commands in one run: separated by "+" (make_fixtures.run_commands).
"""
import os
import random
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict, StateDictOptions

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import Net, fake_steps, run_commands, spawn  # noqa: E402
from gather_interop import WideBlock, WideNet, same  # noqa: E402


def _setup(rank, world, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)


def _fsdp1_model_and_optimizer(seed):
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    torch.manual_seed(seed)
    model = FSDP(WideNet(), auto_wrap_policy=ModuleWrapPolicy({WideBlock}), device_id=torch.device("cpu"))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(seed))
    model(x).sum().backward()
    opt.step()
    opt.zero_grad()
    return model, opt


def _make_fsdp1_worker(rank, world, port, out, seed):
    _setup(rank, world, port)
    model, opt = _fsdp1_model_and_optimizer(seed)
    msd, osd = get_state_dict(model, opt)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=os.path.join(out, "src_fsdp1"))
    dist.barrier()
    dist.destroy_process_group()


def _load_fsdp1_worker(rank, world, port, out, m):
    _setup(rank, world, port)
    model, opt = _fsdp1_model_and_optimizer(seed=999)
    msd, osd = get_state_dict(model, opt)
    state = {"model": msd, "optim": osd}
    dcp.load(state, checkpoint_id=os.path.join(out, f"rs1_{m}"))
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    full_msd, full_osd = get_state_dict(model, opt, options=StateDictOptions(full_state_dict=True))
    if rank == 0:
        torch.save({"model": full_msd, "optim": full_osd}, os.path.join(out, f"rs1_{m}.loaded.pt"))
    dist.barrier()
    dist.destroy_process_group()


def _model_and_optimizer(seed):
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(seed)
    model = Net()
    for b in model.blocks:
        fully_shard(b)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.02)
    return model, opt


def _make_worker(rank, world, port, out, seed):
    _setup(rank, world, port)
    model, opt = _model_and_optimizer(seed)
    fake_steps(model, opt, steps=3, seed=seed)
    msd, osd = get_state_dict(model, opt)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=os.path.join(out, "src"))
    # the same state as users save it without DCP: each rank torch.saves its DTensor state dicts
    os.makedirs(os.path.join(out, "src_ranks"), exist_ok=True)
    torch.save({"model": msd, "optim": osd}, os.path.join(out, "src_ranks", f"rank{rank}.pt"))
    dist.barrier()
    dist.destroy_process_group()


def _load_worker(rank, world, port, out, m, name):
    _setup(rank, world, port)
    # a different seed: every value must come from the checkpoint
    model, opt = _model_and_optimizer(seed=999)
    fake_steps(model, opt, steps=1, seed=999)  # optimizer state exists, with other values
    msd, osd = get_state_dict(model, opt)
    state = {"model": msd, "optim": osd}
    dcp.load(state, checkpoint_id=os.path.join(out, f"{name}_{m}"))
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    full_msd, full_osd = get_state_dict(model, opt, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if rank == 0:
        torch.save({"model": full_msd, "optim": full_osd}, os.path.join(out, f"{name}_{m}.loaded.pt"))
    dist.barrier()
    dist.destroy_process_group()


def make(out):
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    os.makedirs(out, exist_ok=True)
    seed = random.SystemRandom().randint(0, 10**6)
    print("seed", seed)
    spawn(_make_worker, 3, out, seed)
    dcp_to_torch_save(os.path.join(out, "src"), os.path.join(out, "src.ref.pt"))
    spawn(_make_fsdp1_worker, 2, out, seed)
    dcp_to_torch_save(os.path.join(out, "src_fsdp1"), os.path.join(out, "src_fsdp1.ref.pt"))


def load_fsdp1(out, m):
    spawn(_load_fsdp1_worker, m, out, m)
    ref = torch.load(os.path.join(out, "src_fsdp1.ref.pt"), weights_only=True)
    got = torch.load(os.path.join(out, f"rs1_{m}.loaded.pt"), weights_only=True)
    errors = []
    same(ref, got, f"FSDP1 M={m}", errors, ordered=False)
    print(f"FSDP1 on {m} ranks loaded the --layout fsdp1 reshard of a 2-rank checkpoint: "
          f"{'equal to the source' if not errors else 'DIFFERENT'}")
    for e in errors[:20]:
        print("   ", e)
    return 1 if errors else 0


def load(out, m, name="rs"):
    spawn(_load_worker, m, out, m, name)
    ref = torch.load(os.path.join(out, "src.ref.pt"), weights_only=True)
    got = torch.load(os.path.join(out, f"{name}_{m}.loaded.pt"), weights_only=True)
    errors = []
    same(ref, got, f"M={m}", errors, ordered=False)
    print(f"FSDP2 on {m} ranks loaded the reshard ({name}): {'equal to the source' if not errors else 'DIFFERENT'}")
    for e in errors[:20]:
        print("   ", e)
    return 1 if errors else 0


def main(args):
    if args[0] == "make":
        make(args[1])
        return 0
    if args[0] == "load_fsdp1":
        return load_fsdp1(args[1], int(args[2]))
    if args[0] == "load_ranks":
        return load(args[1], int(args[2]), "rs_ranks")
    return load(args[1], int(args[2]))


if __name__ == "__main__":
    sys.exit(run_commands(main))
