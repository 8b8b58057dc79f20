# SPDX-License-Identifier: GPL-3.0-or-later
"""torchtitan's flattened optimizer with per-parameter param groups (tests/data/torchtitan/flat, made by
make_fixtures.py torchtitan_flat): `optscope-cli fix --target-optim` converts it to the nested format with the
target's groups, and real PyTorch loads every result both ways: optimizer.load_state_dict (after dcp_to_torch_save,
which a flattened original cannot do) and set_optimizer_state_dict, each into the training script's own optimizer
(titan_groups_model). Each must equal DSD's reading of the original: the same hyperparameters in every group, the
same state per parameter, and a step that runs (a group left without 'betas' raises KeyError there).

    torch-python titan_flat_interop.py OUTDIR CASE...   (each CASE: OUTDIR/CASE.fixed is fix's output of
                                                         OUTDIR/CASE.orig, a copy of the original DCP folder)
"""
import copy
import os
import sys
import tempfile

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

from make_fixtures import _titan_flat_state, fake_steps, titan_groups_model


def reference(orig):
    """DSD's reading of the flattened original into the training script's optimizer"""
    loaded = _titan_flat_state(*titan_groups_model())
    dcp.load({"optimizer": loaded["optimizer"]}, checkpoint_id=orig)
    model, opt = titan_groups_model()
    set_optimizer_state_dict(model, opt, loaded["optimizer"])
    return opt.state_dict()


def same(a, b, what):
    if len(a["param_groups"]) != len(b["param_groups"]):
        raise SystemExit(f"{what}: {len(a['param_groups'])} param groups, the original loads into "
                         f"{len(b['param_groups'])}")
    for i, (ga, gb) in enumerate(zip(a["param_groups"], b["param_groups"])):
        for k in gb:
            if k != "params" and ga.get(k) != gb[k]:
                raise SystemExit(f"{what}: group {i} has {k}={ga.get(k)!r}, the original {gb[k]!r}")
    for pid, st in b["state"].items():
        for name, v in st.items():
            w = a["state"][pid][name]
            if not torch.equal(w, v):
                raise SystemExit(f"{what}: state {pid}.{name} differs")


def check(out, case):
    orig, fixed = os.path.join(out, case + ".orig"), os.path.join(out, case + ".fixed")
    ref = reference(orig)
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        full = os.path.join(tmp, "full.pt")
        dcp_to_torch_save(fixed, full)
        osd = torch.load(full, weights_only=False)["optimizer"]
    model, opt = titan_groups_model()
    # load_state_dict keeps the step tensors it is given, and a step then increments them: each load gets a copy
    opt.load_state_dict(copy.deepcopy(osd))  # the nested format; raises on another group count
    same(opt.state_dict(), ref, f"{case}: optimizer.load_state_dict")
    fake_steps(model, opt, steps=1)
    model, opt = titan_groups_model()
    set_optimizer_state_dict(model, opt, osd)
    same(opt.state_dict(), ref, f"{case}: set_optimizer_state_dict")
    fake_steps(model, opt, steps=1)
    print(f"titan_flat/{case}: loads both ways into the script's {len(ref['param_groups'])} groups, equal to the "
          "original, and steps")


if __name__ == "__main__":
    for c in sys.argv[2:]:
        check(sys.argv[1], c)
