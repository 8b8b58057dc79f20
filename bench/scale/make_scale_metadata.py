# SPDX-License-Identifier: GPL-3.0-or-later
"""A DCP .metadata of a large FSDP2 run, written with PyTorch's own classes (Metadata, TensorStorageMetadata,
ChunkStorageMetadata, TensorProperties, MetadataIndex, _StorageInfo, planner_data) and pickled as FileSystemWriter
does. No 1,024-rank run is possible here, so the layout is built, not trained: the shapes of a 70B Llama-style model
(80 layers: q/k/v/o, gate/up/down, two norms; embeddings and head), each parameter and its AdamW exp_avg/exp_avg_sq
sharded on dim 0 over R ranks (FSDP2 Shard(0): torch.chunk rows, empty chunks past the end), `step` once per
parameter. No data files are written (the metadata alone is what inspect and check read first).

    torch-python make_scale_metadata.py OUT_DIR RANKS [LAYERS]
"""
import os
import pickle
import sys

import torch
from torch.distributed.checkpoint.metadata import (ChunkStorageMetadata, Metadata, MetadataIndex,
                                                   TensorProperties, TensorStorageMetadata)
from torch.distributed.checkpoint.filesystem import _StorageInfo


def params(layers):
    d, ff, vocab, kv = 8192, 28672, 128256, 1024
    yield "model.embed_tokens.weight", (vocab, d)
    for i in range(layers):
        p = f"model.layers.{i}."
        yield p + "self_attn.q_proj.weight", (d, d)
        yield p + "self_attn.k_proj.weight", (kv, d)
        yield p + "self_attn.v_proj.weight", (kv, d)
        yield p + "self_attn.o_proj.weight", (d, d)
        yield p + "mlp.gate_proj.weight", (ff, d)
        yield p + "mlp.up_proj.weight", (ff, d)
        yield p + "mlp.down_proj.weight", (d, ff)
        yield p + "input_layernorm.weight", (d,)
        yield p + "post_attention_layernorm.weight", (d,)
    yield "model.norm.weight", (d,)
    yield "lm_head.weight", (vocab, d)


def main():
    out, ranks = sys.argv[1], int(sys.argv[2])
    layers = int(sys.argv[3]) if len(sys.argv) > 3 else 80
    os.makedirs(out, exist_ok=True)
    sdm, storage, planner = {}, {}, {}
    file_offset = [0] * ranks
    props = TensorProperties(dtype=torch.float32)
    n_chunks = 0
    for fqn, shape in params(layers):
        rows = shape[0]
        per = -(-rows // ranks)
        for key, path in ((f"model.{fqn}", ("model", fqn)), (f"optim.state.{fqn}.exp_avg", ("optim", "state", fqn, "exp_avg")),
                          (f"optim.state.{fqn}.exp_avg_sq", ("optim", "state", fqn, "exp_avg_sq"))):
            chunks = []
            for r in range(ranks):
                start = min(rows, r * per)
                size = max(0, min(rows, start + per) - start)
                offsets = torch.Size([start] + [0] * (len(shape) - 1))
                sizes = torch.Size([size] + list(shape[1:]))
                chunks.append(ChunkStorageMetadata(offsets=offsets, sizes=sizes))
                nbytes = 4 * size * (shape[1] if len(shape) > 1 else 1)
                storage[MetadataIndex(fqn=key, offset=offsets, index=len(chunks) - 1)] = _StorageInfo(
                    relative_path=f"__{r}_0.distcp", offset=file_offset[r], length=nbytes)
                file_offset[r] += nbytes
            sdm[key] = TensorStorageMetadata(properties=props, size=torch.Size(shape), chunks=chunks)
            planner[key] = path
            n_chunks += len(chunks)
        key = f"optim.state.{fqn}.step"
        sdm[key] = TensorStorageMetadata(properties=props, size=torch.Size([]),
                                         chunks=[ChunkStorageMetadata(offsets=torch.Size([]), sizes=torch.Size([]))])
        storage[MetadataIndex(fqn=key, offset=torch.Size([]), index=0)] = _StorageInfo(
            relative_path="__0_0.distcp", offset=file_offset[0], length=4)
        file_offset[0] += 4
        planner[key] = ("optim", "state", fqn, "step")
        n_chunks += 1
    md = Metadata(state_dict_metadata=sdm, planner_data=planner, storage_data=storage)
    with open(os.path.join(out, ".metadata"), "wb") as f:
        pickle.dump(md, f)
    print(f"{out}: {ranks} ranks, {len(sdm)} tensors, {n_chunks} chunks, "
          f"{os.path.getsize(os.path.join(out, '.metadata')) / 1e6:.1f} MB .metadata")


if __name__ == "__main__":
    main()
