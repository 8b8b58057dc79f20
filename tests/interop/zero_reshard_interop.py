# SPDX-License-Identifier: GPL-3.0-or-later
"""Interop for DeepSpeed ZeRO checkpoints: what optscope makes of them, loaded by real PyTorch.

    torch-python zero_reshard_interop.py STAGEDIR M... [+ STAGEDIR M...] [+ synthetic VARIANTDIR M...]

(several commands in one run, separated by "+": make_fixtures.run_commands; "synthetic" is
zero_synthetic_interop.py's check)

STAGEDIR holds one DeepSpeed sample (tests/data/zero/stageN: ckpt/, fp32/pytorch_model.bin from zero_to_fp32,
universal/ from ds_to_universal, reference.pt with the parameters gathered in the training processes) plus
gathered.pt (`optscope-cli gather ckpt`) and rs_M (`optscope-cli reshard ckpt --world-size M --layout fsdp2`).
1. gathered.pt: torch.load(weights_only=True) reads it; its model equals zero_to_fp32's output and reference.pt, its
   exp_avg/exp_avg_sq equal ds_to_universal's files, every step equals the steps taken.
2. For each M: M ranks (gloo, CPU; zero_synthetic_interop.load_worker) build the sample's model with FSDP2 and an
   AdamW over the same two param groups (other hyperparameters, other values), give it optimizer state with steps set by hand (FSDP2 runs no
   backward on CPU), dcp.load rs_M into get_state_dict's state, set_state_dict, then gather the full state: weights,
   moments, step and hyperparameters must be the checkpoint's, bit for bit.
"""
import os
import sys

import torch
from make_fixtures import run_commands, spawn  # noqa: E402
import zero_synthetic_interop  # noqa: E402
from zero_synthetic_interop import load_worker  # noqa: E402

GROUPS = [["inp.weight", "hid.weight", "out.weight"], ["emb_scale", "inp.bias", "hid.bias", "out.bias"]]

PARAMS = ["emb_scale", "inp.weight", "inp.bias", "hid.weight", "hid.bias", "out.weight", "out.bias"]


def bits_equal(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(-1).view(torch.int32) if a.dtype == torch.float32 else a, b.view(-1).view(torch.int32) if b.dtype == torch.float32 else b)


def expected(stage_dir):
    """what DeepSpeed itself says the state is"""
    ref = torch.load(os.path.join(stage_dir, "reference.pt"), weights_only=False)
    z2f = torch.load(os.path.join(stage_dir, "fp32", "pytorch_model.bin"), weights_only=True)
    want = {}
    for p in PARAMS:
        assert bits_equal(ref["params"][p], z2f[p]), f"the samples disagree on {p}"
        want[("model", p)] = ref["params"][p]
        for name in ("exp_avg", "exp_avg_sq"):
            u = torch.load(os.path.join(stage_dir, "universal", "zero", p, f"{name}.pt"), weights_only=True)
            t = u["param"] if isinstance(u, dict) else u
            want[("state", p, name)] = t.reshape(ref["params"][p].shape)
        want[("state", p, "step")] = torch.tensor(float(ref["steps"]))
    return want


def check(label, model, state, want, errors):
    for p in PARAMS:
        if not bits_equal(model[p].float(), want[("model", p)]):
            errors.append(f"{label}: weight {p} differs")
        for name in ("exp_avg", "exp_avg_sq", "step"):
            got = state[p][name]
            if not bits_equal(got, want[("state", p, name)].to(got.dtype)):
                errors.append(f"{label}: {p}.{name} differs ({got.flatten()[:3]} vs {want[('state', p, name)].flatten()[:3]})")


def main(stage_dir, worlds):
    errors = []
    want = expected(stage_dir)
    ds_groups = [(0.01, 0.1), (0.005, 0.0)]  # the samples' (lr, weight_decay) per group

    gathered = torch.load(os.path.join(stage_dir, "gathered.pt"), weights_only=True)
    check("gather", gathered["model"], gathered["optim"]["state"], want, errors)
    names = [pg["params"] for pg in gathered["optim"]["param_groups"]]
    if names != GROUPS:
        errors.append(f"gather: param_groups list {names}")

    for m in worlds:
        out = os.path.join(stage_dir, f"rs_{m}.loaded.pt")
        spawn(load_worker, m, os.path.join(stage_dir, f"rs_{m}"), out, "torch.optim.AdamW", GROUPS, [])
        got = torch.load(out, weights_only=True)
        label = f"{os.path.basename(stage_dir)} FSDP2 M={m}"
        check(label, got["model"], got["optim"]["state"], want, errors)
        for g, (lr, wd) in zip(got["groups"], ds_groups):
            if g["lr"] != lr or g["weight_decay"] != wd or tuple(g["betas"]) != (0.9, 0.99) or g["eps"] != 1e-8:
                errors.append(f"{label}: hyperparameters not loaded: {g}")
        print(f"{label}: {'weights, moments, step and hyperparameters equal to DeepSpeed' if not errors else 'DIFFERENT'}")
    for e in errors[:30]:
        print("   ", e)
    return 1 if errors else 0


def command(args):
    """STAGEDIR M..., or synthetic VARIANTDIR M... (zero_synthetic_interop.py's check, in the same run)"""
    if args[0] == "synthetic":
        return zero_synthetic_interop.main(args[1], [int(x) for x in args[2:]])
    return main(args[0], [int(x) for x in args[1:]])


if __name__ == "__main__":
    sys.exit(run_commands(command))
