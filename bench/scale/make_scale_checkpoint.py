# SPDX-License-Identifier: GPL-3.0-or-later
"""A complete DCP checkpoint (data files and .metadata) of an R-rank FSDP2 run, written by PyTorch's own writer.

The layout is make_scale_metadata.py's (its params(): a 70B Llama-style model, 80 layers), with every dimension
divided by SHRINK (default 64: d 128, ff 448, vocab 2004, kv 16): 207 MB of values; at 256 ranks 0.9 GB on disk,
most of it torch.save's per-chunk archive overhead (~1.2 KB for each of the 556k chunks). Each parameter
and its AdamW exp_avg/exp_avg_sq is sharded on dim 0 over R ranks as FSDP2's Shard(0) does (torch.chunk rows, the
size and offset from PyTorch's own Shard._local_shard_size_on_dim: empty chunks past the end, at offset = rows);
`step` is a 0-dim float32 tensor per parameter, and optim.param_groups.0.* (lr, betas, ..., params: the FQNs) are
non-tensor (BYTE_IO) items as flatten_state_dict makes them, all on rank 0 (a real run's dedup_save_plans spreads
such replicated items over the ranks; readers must not care which rank holds them).

No R-rank run is possible here (one machine, 2 cores), so the ranks' save plans are executed one after another in
one process with PyTorch's own writer:
  - per rank r a SavePlan of WriteItems (MetadataIndex, TensorWriteData(ChunkStorageMetadata, TensorProperties,
    size)), as _create_write_items_for_dtensor makes them for a DTensor, BYTE_IO for param_groups on rank 0;
  - create_default_global_save_plan (PyTorch's) builds the Metadata and rewrites the index hints, the planner_data
    is the mapping of PyTorch's flatten_state_dict (merged as DefaultSavePlanner.create_global_plan does), and
    FileSystemWriter.prepare_global_plan gives each plan its storage_data=_StoragePrefix(f"__{r}_");
  - FileSystemWriter(single_file_per_rank=True, thread_count=1).write_data(plan, planner) writes __r_0.distcp
    (torch.save per chunk, as in a real run), with a planner whose resolve_data computes the chunk;
  - writer.finish(metadata, results) pickles .metadata with the storage_data from the WriteResults.
sync_files=False (no fsync per rank file: the generator's speed; the bytes are the same).
_validate_global_plan is skipped above 16 ranks (it compares every chunk pair of a tensor: quadratic in R).

Values are deterministic: value_chunk(key, shape, start, stop, seed) is a hash of (key, seed, flat index), so a
chunk can be computed alone and a reader can rebuild any full tensor; exp_avg_sq is non-negative.

    torch-python make_scale_checkpoint.py OUT RANKS [LAYERS] [SHRINK] [--seed KEY=N]...
    (torch-python sees only its working directory: run it in bench/scale/out/ with make_scale_metadata.py copied
    beside it, as run_scale_data.sh does)

--seed KEY=N changes the seed of one key (e.g. --seed model.model.norm.weight=1), for a diff of two generations.
"""
import dataclasses
import io
import os
import sys
import time
import zlib
from collections import ChainMap

import torch
from torch.distributed.checkpoint._nested_dict import flatten_state_dict
from torch.distributed.checkpoint.default_planner import (DefaultSavePlanner, _validate_global_plan,
                                                          create_default_global_save_plan)
from torch.distributed.checkpoint.filesystem import FileSystemWriter
from torch.distributed.checkpoint.metadata import (ChunkStorageMetadata, MetadataIndex, TensorProperties)
from torch.distributed.checkpoint.planner import SavePlan, TensorWriteData, WriteItem, WriteItemType
from torch.distributed.tensor import Shard

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_scale_metadata import params  # noqa: E402  (the layout: one definition for both generators)

STEP = 100.0
PARAM_GROUP = {"lr": 3e-4, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1, "amsgrad": False,
               "foreach": None, "maximize": False, "capturable": False, "differentiable": False, "fused": None}


def shrunk_params(layers, shrink):
    for fqn, shape in params(layers):
        yield fqn, tuple(max(1, s // shrink) for s in shape)


def keys_of(fqn):
    """The flattened DCP keys of one parameter: model weight, exp_avg, exp_avg_sq (all sharded)."""
    return (f"model.{fqn}", f"optim.state.{fqn}.exp_avg", f"optim.state.{fqn}.exp_avg_sq")


def value_chunk(key, shape, start, stop, seed=0):
    """Rows [start, stop) of the deterministic full tensor `key` of `shape` (float32)."""
    cols = 1
    for s in shape[1:]:
        cols *= s
    k = (zlib.crc32(key.encode()) * 0x9E3779B1 + seed * 0x85EBCA6B) & 0xFFFFFFFF
    h = torch.arange(start * cols, stop * cols, dtype=torch.int64)
    h = ((h + k) * 0x9E3779B1) & 0xFFFFFFFF
    h = h ^ (h >> 16)
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h = h ^ (h >> 13)
    v = (h.to(torch.float64) / 2.0**32 - 0.5).to(torch.float32)
    if key.endswith(".exp_avg_sq"):
        v = v.abs() * 1e-3
    return v.reshape((stop - start,) + tuple(shape[1:]))


def full_value(key, shape, seed=0):
    if len(shape) == 0:
        return torch.tensor(STEP)
    return value_chunk(key, shape, 0, shape[0], seed)


def param_groups(layers, shrink):
    return [dict(PARAM_GROUP, params=[fqn for fqn, _ in shrunk_params(layers, shrink)])]


class ChunkPlanner(DefaultSavePlanner):
    """resolve_data computes the chunk of a WriteItem (no state dict is held: the values are a function of the key)."""

    def __init__(self, flat, seeds):
        super().__init__()
        self.flat, self.seeds = flat, seeds

    def resolve_data(self, write_item):
        key = write_item.index.fqn
        if write_item.type == WriteItemType.BYTE_IO:
            buf = io.BytesIO()
            torch.save(self.flat[key], buf)  # as DefaultSavePlanner.transform_object
            return buf
        td = write_item.tensor_data
        if len(td.size) == 0:
            return torch.tensor(STEP)
        start, rows = td.chunk.offsets[0], td.chunk.sizes[0]
        return value_chunk(key, td.size, start, start + rows, self.seeds.get(key, 0))


def main():
    args, seeds = [], {}
    it = iter(sys.argv[1:])
    for a in it:
        if a == "--seed":
            k, _, n = next(it).rpartition("=")
            seeds[k] = int(n)
        else:
            args.append(a)
    out, ranks = args[0], int(args[1])
    layers = int(args[2]) if len(args) > 2 else 80
    shrink = int(args[3]) if len(args) > 3 else 64
    t0 = time.time()
    props = TensorProperties(dtype=torch.float32)
    shapes = list(shrunk_params(layers, shrink))
    groups = param_groups(layers, shrink)

    # planner_data: the mapping of PyTorch's flatten_state_dict over the state dict's structure (tensors stand in)
    skeleton = {"model": {fqn: torch.empty(0) for fqn, _ in shapes},
                "optim": {"state": {fqn: {"exp_avg": torch.empty(0), "exp_avg_sq": torch.empty(0),
                                          "step": torch.empty(0)} for fqn, _ in shapes},
                          "param_groups": groups}}
    flat, mappings = flatten_state_dict(skeleton)

    plans = []
    for r in range(ranks):
        items = []
        for fqn, shape in shapes:
            rows = shape[0]
            size, start = Shard._local_shard_size_on_dim(rows, ranks, r, return_offset=True)
            offsets = torch.Size([start] + [0] * (len(shape) - 1))
            chunk = ChunkStorageMetadata(offsets=offsets, sizes=torch.Size([size] + list(shape[1:])))
            for key in keys_of(fqn):
                items.append(WriteItem(index=MetadataIndex(key, offsets), type=WriteItemType.SHARD,
                                       tensor_data=TensorWriteData(chunk=chunk, properties=props,
                                                                   size=torch.Size(shape))))
        if r == 0:
            for fqn, _ in shapes:
                key = f"optim.state.{fqn}.step"
                items.append(WriteItem(index=MetadataIndex(key, torch.Size([])), type=WriteItemType.TENSOR,
                                       tensor_data=TensorWriteData(
                                           chunk=ChunkStorageMetadata(offsets=torch.Size([]), sizes=torch.Size([])),
                                           properties=props, size=torch.Size([]))))
            for key, v in flat.items():
                if not isinstance(v, torch.Tensor):
                    items.append(WriteItem(index=MetadataIndex(key), type=WriteItemType.BYTE_IO))
        plans.append(SavePlan(items, planner_data=mappings if r == 0 else {}))

    plans, md = create_default_global_save_plan(plans)
    md = dataclasses.replace(md, planner_data=dict(ChainMap(*[p.planner_data for p in plans])))
    if ranks <= 16 and not _validate_global_plan(plans, md):
        raise SystemExit("PyTorch's _validate_global_plan rejects the plan")
    t1 = time.time()

    writer = FileSystemWriter(out, single_file_per_rank=True, sync_files=False, thread_count=1)
    writer.set_up_storage_writer(True)
    plans = [writer.prepare_local_plan(p) for p in plans]
    plans = writer.prepare_global_plan(plans)
    planner = ChunkPlanner(flat, seeds)
    results = []
    for plan in plans:
        results.append(writer.write_data(plan, planner).wait())
    writer.finish(md, results)
    t2 = time.time()
    n_chunks = sum(len(p.items) for p in plans)
    total = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    print(f"{out}: {ranks} ranks, {len(md.state_dict_metadata)} keys, {n_chunks} items, "
          f"{os.path.getsize(os.path.join(out, '.metadata')) / 1e6:.1f} MB .metadata, {total / 1e6:.0f} MB in all; "
          f"plan {t1 - t0:.1f} s, write {t2 - t1:.1f} s")


if __name__ == "__main__":
    main()
