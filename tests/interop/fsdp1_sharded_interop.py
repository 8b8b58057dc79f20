# SPDX-License-Identifier: GPL-3.0-or-later
"""torch-python fsdp1_sharded_interop.py OUTDIR: OUTDIR/gathered.pt (optscope-cli gather of FSDP1 SHARDED_STATE_DICT
rank files) loads with torch.load(weights_only=True) and equals OUTDIR/full.pt (PyTorch's FULL_STATE_DICT of the same
run, FSDP.optim_state_dict included): the same nesting and key order, bit-identical tensors of the same dtype and
shape, equal plain values; and its model part loads into the Linear(3, 4) it came from."""
import sys

import torch


def equal(a, b, path):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), f"{path}: tensor vs {type(b).__name__}"
        assert a.dtype == b.dtype and a.shape == b.shape, f"{path}: {a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)}"
        if a.numel():  # the bytes, so that NaNs and -0.0 count too
            assert torch.equal(a.reshape(-1).contiguous().view(torch.uint8),
                               b.reshape(-1).contiguous().view(torch.uint8)), f"{path}: bytes differ"
    elif isinstance(a, dict):
        assert isinstance(b, dict), f"{path}: dict vs {type(b).__name__}"
        assert list(a.keys()) == list(b.keys()), f"{path}: keys {list(a.keys())} vs {list(b.keys())}"
        for k in a:
            equal(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), f"{path}: {type(a).__name__}/{len(a)} vs {b!r}"
        for i, (x, y) in enumerate(zip(a, b)):
            equal(x, y, f"{path}.{i}")
    else:
        assert type(a) is type(b) and a == b, f"{path}: {a!r} vs {b!r}"


def main(out):
    ref = torch.load(f"{out}/full.pt", weights_only=True)
    got = torch.load(f"{out}/gathered.pt", weights_only=True)
    equal(ref, got, "state")
    assert got["model"]["weight"].shape == (4, 3), got["model"]["weight"].shape
    torch.nn.Linear(3, 4).load_state_dict(got["model"])
    print("fsdp1_sharded_r3: the gathered rank files equal PyTorch's FULL_STATE_DICT")


if __name__ == "__main__":
    main(sys.argv[1])
