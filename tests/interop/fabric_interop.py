# SPDX-License-Identifier: GPL-3.0-or-later
"""Lightning Fabric's FSDP checkpoint (tests/data/fabric/fsdp_sharded: a DCP folder plus meta.pt, made by
make_fixtures.py fabric in Fabric's layout) against what optscope-cli writes from it (fabric_interop.sh):

- gathered.pt, loaded with torch.load(weights_only=True), equals Fabric's own consolidation of the source
  (make_fixtures.fabric_consolidate: the DCP part whole, then checkpoint.update(meta.pt)): the same keys in the same
  order, meta.pt's at the top level, bit-identical tensors, equal values;
- each resharded folder holds meta.pt byte for byte as the source does, consolidates as the source does, and loads
  the way Fabric's FSDPStrategy.load_checkpoint loads a sharded checkpoint (lightning 2.6,
  src/lightning/fabric/strategies/fsdp.py: _is_sharded_checkpoint, then under the SHARDED_STATE_DICT context
  dcp.load of the module's state dict, load_sharded_optimizer_state_dict + FSDP.optim_state_dict_to_load +
  optimizer.load_state_dict, and torch.load of meta.pt for the rest) on its own number of gloo ranks; what the ranks
  then save again, as Fabric would, consolidates to the source's state.

    torch-python fabric_interop.py OUTDIR RESHARDED:RANKS...   (OUTDIR/src: a copy of the source folder)
"""
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from make_fixtures import _init, fabric_consolidate, fabric_run, spawn


def equal(a, b, path, ordered=True):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), f"{path}: tensor vs {type(b).__name__}"
        assert a.dtype == b.dtype and a.shape == b.shape, f"{path}: {a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)}"
        if a.numel():  # the bytes, so that NaNs and -0.0 count too
            assert torch.equal(a.reshape(-1).contiguous().view(torch.uint8),
                               b.reshape(-1).contiguous().view(torch.uint8)), f"{path}: bytes differ"
    elif isinstance(a, dict):
        assert isinstance(b, dict), f"{path}: dict vs {type(b).__name__}"
        ka, kb = list(a.keys()), list(b.keys())
        assert ka == kb if ordered else sorted(map(str, ka)) == sorted(map(str, kb)), f"{path}: keys {ka} vs {kb}"
        for k in a:
            equal(a[k], b[k], f"{path}.{k}", ordered)
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), f"{path}: {type(a).__name__}/{len(a)} vs {b!r}"
        for i, (x, y) in enumerate(zip(a, b)):
            equal(x, y, f"{path}.{i}", ordered)
    else:
        assert type(a) is type(b) and a == b, f"{path}: {a!r} vs {b!r}"


def _fabric_load_worker(rank, world, port, path, again):
    """FSDPStrategy.load_checkpoint(path, state={"model", "optimizer", "scheduler", ...}) step by step, then
    save_checkpoint of what it loaded into `again` (the DCP part; rank 0 rewrites meta.pt from the loaded metadata)"""
    _init(rank, world, port)
    from torch.distributed.checkpoint.optimizer import load_sharded_optimizer_state_dict
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.api import ShardedOptimStateDictConfig, ShardedStateDictConfig, StateDictType

    if not os.path.isfile(os.path.join(path, "meta.pt")):  # _is_sharded_checkpoint; then _is_full_checkpoint fails
        raise ValueError(f"The path {path!r} does not point to a valid checkpoint. Make sure the path points to "
                         "either a directory with FSDP checkpoint shards, or a single file with a full checkpoint.")
    model, opt, sched = fabric_run()  # the same script; its own two steps are overwritten by the load
    ctx = (StateDictType.SHARDED_STATE_DICT, ShardedStateDictConfig(offload_to_cpu=True),
           ShardedOptimStateDictConfig(offload_to_cpu=True))
    with FSDP.state_dict_type(model, *ctx):
        module_state = {"model": model.state_dict()}
        dcp.load(module_state, checkpoint_id=path)
        model.load_state_dict(module_state["model"], strict=True)
        optim_state = load_sharded_optimizer_state_dict(model_state_dict=module_state["model"],
                                                        optimizer_key="optimizer",
                                                        storage_reader=dcp.FileSystemReader(path))
        opt.load_state_dict(FSDP.optim_state_dict_to_load(optim_state_dict=optim_state["optimizer"], model=model,
                                                          optim=opt))
    metadata = torch.load(os.path.join(path, "meta.pt"), weights_only=False)
    sched.load_state_dict(metadata.pop("scheduler"))
    assert set(metadata) == {"iteration", "hparams", "best_loss"}, f"meta.pt holds {sorted(metadata)}"
    with FSDP.state_dict_type(model, *ctx):
        converted = {"model": model.state_dict(), "optimizer": FSDP.optim_state_dict(model, opt)}
    dcp.save(converted, checkpoint_id=again)
    if rank == 0:
        with open(os.path.join(again, "meta.pt"), "wb") as f:
            torch.save({"scheduler": sched.state_dict(), **metadata}, f)
    dist.barrier()
    dist.destroy_process_group()


def main():
    out = sys.argv[1]
    src = os.path.join(out, "src")
    ref = fabric_consolidate(src)
    assert list(ref)[2:] == ["scheduler", "iteration", "hparams", "best_loss"], list(ref)

    equal(ref, torch.load(os.path.join(out, "gathered.pt"), weights_only=True), "gathered.pt")
    print("gathered.pt equals Fabric's consolidation (meta.pt's keys at the top level)")

    with open(os.path.join(src, "meta.pt"), "rb") as f:
        meta_bytes = f.read()
    for spec in sys.argv[2:]:
        name, ranks = spec.split(":")
        path = os.path.join(out, name)
        with open(os.path.join(path, "meta.pt"), "rb") as f:  # FileNotFoundError: reshard left it out
            assert f.read() == meta_bytes, f"{name}/meta.pt differs from the source's"
        equal(ref, fabric_consolidate(path), f"{name} consolidated")
        with tempfile.TemporaryDirectory(dir=out) as tmp:
            again = os.path.join(tmp, "again")
            spawn(_fabric_load_worker, int(ranks), path, again)
            # (a save from several ranks spreads the replicated values over them, so their order in .metadata
            # is not the optimizer's: the nesting is compared, not the order of keys within it)
            equal(ref, fabric_consolidate(again), f"{name} loaded by Fabric's way on {ranks} ranks and saved again",
                  ordered=False)
        print(f"{name}: meta.pt byte for byte, consolidates as the source, loads as Fabric loads on {ranks} ranks")


if __name__ == "__main__":
    main()
