# SPDX-License-Identifier: GPL-3.0-or-later
"""Interop for `optscope-cli fix`: real PyTorch loads each fixed file into the target model's optimizer without error,
and the loaded state equals the original's (by position: same parameters, same numbers).

    torch-python fix_interop.py CASE FIXED ORIGINAL [+ CASE FIXED ORIGINAL ...]

(several cases in one run, separated by "+": make_fixtures.run_commands)
"""
import os
import sys

import torch
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import run_commands  # noqa: E402


def mlp():
    return nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))


def stepped(opt_cls, params, model):
    opt = opt_cls(params, lr=1e-3)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()  # state exists, with other values than the checkpoint's
    return opt


def states_by_position(osd):
    ids = [p for g in osd["param_groups"] for p in g["params"]]
    return [osd["state"].get(i, {}) for i in ids]


def same_state(a, b):
    assert len(a) == len(b), f"{len(a)} != {len(b)} parameters"
    for i, (x, y) in enumerate(zip(a, b)):
        assert set(x) == set(y), f"parameter {i}: state names {sorted(x)} != {sorted(y)}"
        for k in x:
            vx, vy = torch.as_tensor(x[k]).float(), torch.as_tensor(y[k]).float()
            assert torch.equal(vx, vy), f"parameter {i} {k} differs"


def main(args):
    case, fixed_path, original_path = args
    fixed = torch.load(fixed_path, weights_only=True)
    original = torch.load(original_path, weights_only=True)
    model = mlp()
    if case in ("ids", "prefix_fqn", "flattened"):
        # FQN-keyed results load through DSD, which checks every name against the model
        opt = stepped(torch.optim.Adam, model.parameters(), model)
        osd = fixed["optim"] if "optim" in fixed else fixed
        set_optimizer_state_dict(model, opt, optim_state_dict=osd)
        src = original["optim"] if "optim" in original else original
        if case == "flattened":
            # the original is flattened too: compare with DSD's own reading of it
            from torch.distributed.checkpoint.state_dict import StateDictOptions

            ref_model = mlp()
            ref_opt = stepped(torch.optim.Adam, ref_model.parameters(), ref_model)
            set_optimizer_state_dict(ref_model, ref_opt, optim_state_dict=src,
                                     options=StateDictOptions(flatten_optimizer_state_dict=True))
            same_state(states_by_position(opt.state_dict()), states_by_position(ref_opt.state_dict()))
        else:
            loaded = states_by_position(opt.state_dict())
            if all(isinstance(k, int) for k in src["state"]):
                same_state(loaded, states_by_position(src))
            else:
                names = [n for g in src["param_groups"] for n in g["params"]]
                same_state(loaded, [src["state"].get(n, {}) for n in names])
    elif case in ("param_names", "steps"):
        # id-keyed results load through the optimizer itself, into an optimizer built over the model's parameters
        named = case == "param_names"
        opt = stepped(torch.optim.Adam, model.named_parameters() if named else model.parameters(), model)
        opt.load_state_dict(fixed)
        if named:
            assert opt.state_dict()["param_groups"][0]["param_names"] == [n for n, _ in model.named_parameters()]
        loaded = opt.state_dict()
        for st in loaded["state"].values():
            assert isinstance(st["step"], torch.Tensor) and st["step"].dtype == torch.float32, "step is not float32"
        same_state(states_by_position(loaded), states_by_position(original))
    else:
        raise SystemExit(f"unknown case {case}")
    print(f"fix/{case}: loaded into the target optimizer, state equals the original")
    return 0


if __name__ == "__main__":
    sys.exit(run_commands(main))
