# SPDX-License-Identifier: GPL-3.0-or-later
# The GPU interop run (scripts/device-check.sh; DEVICE cuda, or cpu to test the script itself).
#   make OUT DEVICE: FSDP2 (fully_shard, one rank, NCCL) trains a small MLP on the GPU for three steps with real forward and
#             backward, bf16 parameters in compute (MixedPrecisionPolicy) over fp32 sharded parameters and fp32 AdamW
#             state, fused=True AdamW stepping on the device; dcp.save writes OUT/ckpt, and the full state (PyTorch's
#             own full_state_dict) goes to OUT/ref.pt as the reference. On the CPU FSDP2 cannot run backward: the
#             gradients are set by hand and AdamW is not fused.
#   load OUT RESHARDED GATHERED DEVICE: a fresh FSDP2 model and optimizer load RESHARDED (OptScope's reshard) with dcp.load
#             and set_state_dict; every model and optimizer tensor must equal the reference bit for bit, and so must
#             every tensor of GATHERED (OptScope's gather, a torch.save file, read with weights_only=True).
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard


def setup(device):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        # a port free now (a fixed one failed CI once, taken by another PyTorch run on the machine)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    cuda = device == "cuda"
    if cuda and not torch.cuda.is_available():
        sys.exit("interop: no CUDA device (the device argument cpu tests the script on the CPU)")
    if cuda:
        torch.cuda.set_device(0)
    dist.init_process_group("nccl" if cuda else "gloo", rank=0, world_size=1)
    return (torch.device("cuda", 0) if cuda else torch.device("cpu")), cuda


def build(dev, cuda):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 8)).to(dev)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model:
        if any(True for _ in layer.parameters()):
            fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, fused=cuda)
    return model, opt


def flat(prefix, obj, out):
    if isinstance(obj, dict):
        for k, v in obj.items():
            flat(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            flat(f"{prefix}.{i}", v, out)
    elif isinstance(obj, torch.Tensor):
        out[prefix] = obj
    return out


def full_state(model, opt):
    msd, osd = get_state_dict(model, opt, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return {"model": msd, "optim": osd}


def make(out, device):
    dev, cuda = setup(device)
    model, opt = build(dev, cuda)
    g = torch.Generator(device="cpu").manual_seed(1)
    for _ in range(3):
        x = torch.randn(32, 64, generator=g).to(dev)
        if cuda:
            loss = model(x).float().pow(2).mean()
            loss.backward()
        else:
            for p in model.parameters():
                p.grad = torch.distributed.tensor.distribute_tensor(
                    torch.randn(p.shape, generator=g), p.device_mesh, p.placements
                )
        opt.step()
        opt.zero_grad()
    for p in model.parameters():
        assert p.dtype == torch.float32, p.dtype
    for s in opt.state.values():
        assert s["exp_avg"].dtype == torch.float32
    msd, osd = get_state_dict(model, opt)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=os.path.join(out, "ckpt"))
    torch.save(full_state(model, opt), os.path.join(out, "ref.pt"))
    print(f"interop: trained on {dev} ({'fused AdamW, bf16 compute' if cuda else 'gradients set by hand'}), "
          f"saved {out}/ckpt")


def load(out, resharded, gathered, device):
    dev, cuda = setup(device)
    model, opt = build(dev, cuda)
    ref = flat("", torch.load(os.path.join(out, "ref.pt"), weights_only=True), {})
    msd, osd = get_state_dict(model, opt)
    state = {"model": msd, "optim": osd}
    dcp.load(state, checkpoint_id=resharded)
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    got = flat("", full_state(model, opt), {})
    bad = [k for k in ref if k not in got or not torch.equal(ref[k], got[k])]
    assert len(ref) >= 20, len(ref)
    assert not bad, f"dcp.load of {resharded} differs from the reference: {bad[:5]}"
    print(f"interop: PyTorch loaded {resharded} on {dev}: {len(ref)} tensors equal to the reference")
    gat = flat("", torch.load(gathered, weights_only=True), {})
    # the gathered file mirrors the DCP keys: model.<fqn>, optim.state.<fqn>.<name>, optim.param_groups...
    missing = [k for k in ref if isinstance(ref[k], torch.Tensor) and k not in gat]
    bad = [k for k in ref if k in gat and not torch.equal(ref[k], gat[k])]
    assert not missing, f"{gathered} lacks {missing[:5]} (has {list(gat)[:5]})"
    assert not bad, f"{gathered} differs from the reference: {bad[:5]}"
    print(f"interop: torch.load of {gathered}: {len(ref)} tensors equal to the reference")


if __name__ == "__main__":
    try:
        if sys.argv[1] == "make":
            make(sys.argv[2], sys.argv[3])
        else:
            load(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5])
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
