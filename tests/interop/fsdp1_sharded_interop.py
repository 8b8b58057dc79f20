# SPDX-License-Identifier: GPL-3.0-or-later
"""torch-python fsdp1_sharded_interop.py OUTDIR: OUTDIR/gathered.pt (optscope-cli gather of FSDP1 SHARDED_STATE_DICT
rank files) loads with torch.load(weights_only=True) and equals OUTDIR/full.pt (PyTorch's FULL_STATE_DICT of the same
run, FSDP.optim_state_dict included): the same nesting and key order, bit-identical tensors of the same dtype and
shape, equal plain values; and its model part loads into the Linear(3, 4) it came from."""
import sys

import torch

from fabric_interop import equal  # bit-for-bit, same key order: one comparison for the interop checks


def main(out):
    ref = torch.load(f"{out}/full.pt", weights_only=True)
    got = torch.load(f"{out}/gathered.pt", weights_only=True)
    equal(ref, got, "state")
    assert got["model"]["weight"].shape == (4, 3), got["model"]["weight"].shape
    torch.nn.Linear(3, 4).load_state_dict(got["model"])
    print("fsdp1_sharded_r3: the gathered rank files equal PyTorch's FULL_STATE_DICT")


if __name__ == "__main__":
    main(sys.argv[1])
