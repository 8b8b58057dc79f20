# SPDX-License-Identifier: GPL-3.0-or-later
"""Valid inputs that are cheap for PyTorch and were costly for OptScope (the safety issue's cost cases), written by
real PyTorch and its own classes:

    scripts/torch-python bench/hostile/make_inputs.py OUT [N_INTS] [N_SAFETENSORS] [N_CHUNKS] [N_VALUES]

- ints_N.pt: torch.save of a dict of N Python ints (gather was quadratic in N)
- st_N.safetensors: safetensors.torch.save_file of N one-element tensors
- chunks_N/: a DCP folder whose one tensor of N rows is stored in N one-row chunks (dcp.save of a ShardedTensor-free
  state dict cannot make that many chunks on one process, so the .metadata is built with PyTorch's own
  Metadata / ChunkStorageMetadata classes and the data file written by torch.save-free raw bytes as DCP's
  FileSystemWriter lays them out: one torch.save archive per chunk)
- overlap_N/: the same N chunks all covering row 0 (N^2 overlapping pairs)
- expanded.pt: torch.zeros(1).expand(2**30, 2**30) (a stride-0 view)
- view_1g.pt, dense_1g.pt: arange(4).view(4, 1).expand(4, 2**26) (float32, a 1 GiB view over 16 bytes) and the same
  values stored dense (1 GiB): diff reads the view expanded, bounded by the dense side
- u8_a.pt, u8_b.pt: 2^28 random uint8 (256 MiB; quantized weights are stored so), every 1000th changed
- values_N.pt: an optimizer state of N plain values ({"optim": {"state": {i: {"step": i, "lr": 0.1}}}} for N / 2
  ids): memory per value entry
"""
import io
import os
import sys

import torch
from torch.distributed.checkpoint.metadata import (ChunkStorageMetadata, Metadata, MetadataIndex,
                                                   TensorProperties, TensorStorageMetadata)
from torch.distributed.checkpoint.filesystem import _StorageInfo
import pickle


def ints(out, n):
    torch.save({str(i): i for i in range(n)}, os.path.join(out, f"ints_{n}.pt"))


def many_safetensors(out, n):
    from safetensors.torch import save_file
    save_file({f"t{i}": torch.full((1,), float(i)) for i in range(n)}, os.path.join(out, f"st_{n}.safetensors"))


def chunked(out, n, overlap):
    d = os.path.join(out, f"{'overlap' if overlap else 'chunks'}_{n}")
    os.makedirs(d, exist_ok=True)
    chunks, storage = [], {}
    data = io.BytesIO()
    for i in range(n):
        row = 0 if overlap else i
        t = torch.full((1, 4), float(i))
        buf = io.BytesIO()
        torch.save(t, buf)  # DCP's FileSystemWriter stores each tensor item as a torch.save archive
        off = data.tell()
        data.write(buf.getvalue())
        chunks.append(ChunkStorageMetadata(offsets=torch.Size([row, 0]), sizes=torch.Size([1, 4])))
        storage[MetadataIndex("w", torch.Size([row, 0]), i)] = _StorageInfo("__0_0.distcp", off, len(buf.getvalue()))
    md = Metadata(state_dict_metadata={"w": TensorStorageMetadata(
        properties=TensorProperties(dtype=torch.float32), size=torch.Size([1 if overlap else n, 4]), chunks=chunks)},
        storage_data=storage)
    with open(os.path.join(d, ".metadata"), "wb") as f:
        pickle.dump(md, f)
    with open(os.path.join(d, "__0_0.distcp"), "wb") as f:
        f.write(data.getvalue())


def expanded(out):
    torch.save({"big": torch.zeros(1).expand(2**30, 2**30)}, os.path.join(out, "expanded.pt"))


def views_and_ints(out):
    v = torch.arange(4.0).view(4, 1).expand(4, 2**26)
    torch.save({"b": v}, os.path.join(out, "view_1g.pt"))
    torch.save({"b": v.clone()}, os.path.join(out, "dense_1g.pt"))
    g = torch.Generator().manual_seed(0)
    a = torch.randint(0, 255, (2**28,), dtype=torch.uint8, generator=g)
    b = a.clone()
    b[::1000] += 1
    torch.save({"q": a}, os.path.join(out, "u8_a.pt"))
    torch.save({"q": b}, os.path.join(out, "u8_b.pt"))


def values(out, n):
    torch.save({"optim": {"state": {i: {"step": i, "lr": 0.1} for i in range(n // 2)}}},
               os.path.join(out, f"values_{n}.pt"))


def trainer_state(out, n=300000):
    """a Hugging Face Trainer folder (the test fixture's, real PyTorch files) whose trainer_state.json holds a
    log_history of n steps, written as the Trainer writes it (json.dumps, indent 2): about 53 MB for 300k"""
    import json
    import random
    import shutil
    folder = os.path.join(out, "trainer_log")
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data", "hf",
                                 "checkpoint-3"), folder)
    path = os.path.join(folder, "trainer_state.json")
    with open(path) as f:
        state = json.load(f)
    rng = random.Random(0)
    state["log_history"] = [{"epoch": i / 1000, "grad_norm": rng.random() * 3, "learning_rate": 1e-4 * rng.random(),
                             "loss": rng.random() * 4, "step": i} for i in range(n)]
    with open(path, "w") as f:
        f.write(json.dumps(state, indent=2, sort_keys=True) + "\n")


def deflated(out):
    """a 240 MB torch.save file (50M random floats, 10M zeros) zipped again with deflate, as `zip -r` or Python's
    zipfile would: 185 MB. torch.load reads it; OptScope inflates it into TMPDIR once"""
    import zipfile
    torch.manual_seed(0)
    stored = os.path.join(out, "to_deflate_240m.pt")
    torch.save({"w": torch.randn(50_000_000), "b": torch.zeros(10_000_000)}, stored)
    with zipfile.ZipFile(stored) as zin, zipfile.ZipFile(os.path.join(out, "deflated_240m.pt"), "w",
                                                         zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info.filename))
    os.unlink(stored)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    n_ints = int(sys.argv[2]) if len(sys.argv) > 2 else 100000
    n_st = int(sys.argv[3]) if len(sys.argv) > 3 else 100000
    n_chunks = int(sys.argv[4]) if len(sys.argv) > 4 else 10000
    ints(out, n_ints)
    many_safetensors(out, n_st)
    chunked(out, n_chunks, False)
    chunked(out, min(n_chunks, 2000), True)
    expanded(out)
    views_and_ints(out)
    values(out, int(sys.argv[5]) if len(sys.argv) > 5 else 1000000)
    trainer_state(out)
    deflated(out)


if __name__ == "__main__":
    main()
