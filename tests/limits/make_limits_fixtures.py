# SPDX-License-Identifier: GPL-3.0-or-later
"""Fixtures for tests/limits, written by real PyTorch (run from the repository root):

    scripts/torch-python tests/limits/make_limits_fixtures.py tests/data/limits

writes
  zero_size.pt     torch.save of a model and its Adam state with zero-size parameters ([0], [0, 4], [3, 0]), an
                   empty view into a non-empty storage (t[2:2]), an empty bfloat16 tensor and a 0-d tensor
  zero_size_dcp/   the same state dict saved with torch.distributed.checkpoint (one process)
  shared.pt        one state dict saved under two keys ({"model": sd, "ema": sd}: the pickle memo shares it) and
                   three entries holding objects that reduce to one global (os.system, pickled once, then memo
                   references): each entry must be expanded / warned about
  expected.json    {fixture: {key: {"shape", "dtype", "numel", "sha256"}}} as torch computes them (sha256 of the
                   tensor's bytes in row-major order)
"""
import hashlib
import json
import os
import shutil
import sys

import torch
import torch.distributed.checkpoint as dcp


class ZeroSizeNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.empty = torch.nn.Parameter(torch.zeros(0))
        self.no_rows = torch.nn.Parameter(torch.zeros(0, 4))
        self.no_cols = torch.nn.Parameter(torch.zeros(3, 0))
        self.dense = torch.nn.Parameter(torch.arange(6, dtype=torch.float32).reshape(2, 3))


def state():
    torch.manual_seed(0)
    model = ZeroSizeNet()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(2):
        for p in model.parameters():
            p.grad = torch.ones_like(p)
        opt.step()
    base = torch.arange(10, dtype=torch.float32)
    extras = {
        "empty_view": base[2:2],  # zero elements, storage offset 2 into a 10-element storage
        "empty_bf16": torch.empty(0, dtype=torch.bfloat16),
        "scalar": torch.tensor(1.5),
        "empty_list": [],
        "empty_dict": {},
    }
    return {"model": model.state_dict(), "optim": opt.state_dict(), "extras": extras}


class Evil:
    """unpickling this with plain pickle would run a shell command: OptScope must keep it inert"""

    def __reduce__(self):
        return (os.system, ("echo pwned-by-optscope-fixture",))


def shared():
    sd = {"w": torch.arange(4, dtype=torch.float32), "b": torch.zeros(2)}
    return {"model": sd, "ema": sd, "hooks": {"a": Evil(), "b": Evil()}, "more": [Evil()]}


def flatten(obj, prefix=""):
    out = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}{k}."))
    elif isinstance(obj, (list, tuple)) and any(isinstance(v, (torch.Tensor, dict)) for v in obj):
        for i, v in enumerate(obj):
            out.update(flatten(v, f"{prefix}{i}."))
    elif isinstance(obj, torch.Tensor):
        out[prefix[:-1]] = obj
    return out


def describe(sd):
    out = {}
    for key, t in flatten(sd).items():
        data = t.detach().contiguous()
        raw = data.reshape(-1).view(torch.uint8).numpy().tobytes() if data.numel() else b""
        out[key] = {"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""), "numel": t.numel(),
                    "sha256": hashlib.sha256(raw).hexdigest()}
    return out


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    sd = state()
    expected = {}
    torch.save(sd, os.path.join(out, "zero_size.pt"))
    expected["zero_size.pt"] = describe(torch.load(os.path.join(out, "zero_size.pt"), weights_only=True))
    path = os.path.join(out, "zero_size_dcp")
    shutil.rmtree(path, ignore_errors=True)
    # DCP flattens the optimizer state as saved; keys as its flatten_state_dict forms them
    dcp.save(sd, checkpoint_id=path)
    expected["zero_size_dcp"] = describe(sd)
    torch.save(shared(), os.path.join(out, "shared.pt"))
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")
    print(json.dumps(expected, indent=1))


if __name__ == "__main__":
    main()
