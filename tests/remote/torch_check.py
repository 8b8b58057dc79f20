# SPDX-License-Identifier: GPL-3.0-or-later
"""What OptScope wrote to S3, loaded back by real PyTorch (run in the PyTorch chroot by remote_storage.py):

    torch_check.py make-big OUT.pt                 a torch.save file over 16 MiB (a multipart upload when written)
    torch_check.py make-many OUT.pt                SGD momentum of 3,000 small parameters (a DCP of many small items)
    torch_check.py make-sorted-dcp OUT_DIR         dcp.save of 2,000 small tensors of varied sizes: PyTorch's writer
                                                   puts them in its file largest first, far from the keys' order
    torch_check.py make-big-dcp OUT_DIR            dcp.save of AdamW's state of 8 parameters, 41 MB in all (a torch.save
                                                   file gathered from it by 2 processes: 2 shares of 2 parts each), and
                                                   OUT_DIR.converted.pt, PyTorch's dcp_to_torch_save of it
    torch_check.py load-pt A.pt B.pt               torch.load(weights_only=True) of both; equal tensors and values
    torch_check.py load-dcp DIR REFERENCE_DIR      DCP's own loader (dcp_to_torch_save) of both; equal
"""
import sys

import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save


def equal(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b))
    return a == b


cmd = sys.argv[1]
if cmd == "make-big":
    g = torch.Generator().manual_seed(7)
    torch.save({"state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.randn(2600, 1000, generator=g),
                              "exp_avg_sq": torch.rand(2600, 1000, generator=g)}},
                "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "params": [0]}]}, sys.argv[2])
elif cmd == "make-many":
    g = torch.Generator().manual_seed(11)
    n = 3000
    torch.save({"state": {i: {"momentum_buffer": torch.randn(64, generator=g)} for i in range(n)},
                "param_groups": [{"lr": 1e-2, "momentum": 0.9, "dampening": 0, "weight_decay": 0, "nesterov": False,
                                  "maximize": False, "foreach": None, "differentiable": False, "fused": None,
                                  "params": list(range(n))}]}, sys.argv[2])
elif cmd == "make-sorted-dcp":
    import torch.distributed.checkpoint as dcp
    g = torch.Generator().manual_seed(13)
    state = {f"layer{i}.weight": torch.randn(8 + i * 7919 % 997, generator=g) for i in range(2000)}
    dcp.save(state, checkpoint_id=sys.argv[2])  # no process group: one rank, FileSystemWriter's defaults
elif cmd == "make-big-dcp":
    import torch.distributed.checkpoint as dcp
    model = torch.nn.Sequential(*[torch.nn.Linear(400 + 40 * i, 800, bias=i % 2 == 0) for i in range(8)])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(17)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=g)
    opt.step()
    dcp.save({"model": model.state_dict(), "optim": opt.state_dict()}, checkpoint_id=sys.argv[2])
    dcp_to_torch_save(sys.argv[2], sys.argv[2] + ".converted.pt")
elif cmd == "load-pt":
    a, b = (torch.load(p, weights_only=True) for p in sys.argv[2:4])
    assert equal(a, b), "the files differ"
    print("equal")
elif cmd == "load-dcp":
    out = []
    for i, d in enumerate(sys.argv[2:4]):
        dcp_to_torch_save(d, f"{d}.loaded{i}.pt")
        out.append(torch.load(f"{d}.loaded{i}.pt", weights_only=False))
    assert equal(out[0], out[1]), "the checkpoints differ"
    print("equal")
