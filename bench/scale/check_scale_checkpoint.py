# SPDX-License-Identifier: GPL-3.0-or-later
"""Checks a checkpoint of make_scale_checkpoint.py against its deterministic values, with PyTorch.

    torch-python check_scale_checkpoint.py load OUT [KEY...] [--seed KEY=N]...
        torch.distributed.checkpoint.load (no process group: no_dist) into a state dict of full-size tensors of
        the right shapes (from make_scale_checkpoint's layout: --layers N --shrink S, default 80 and 64; the
        .metadata is read once, by dcp.load) for KEY... (default: a few keys, incl. ones with empty chunks, steps
        and param_groups.0.lr), then compares each with value_chunk(); prints the seconds of the load itself.
    torch-python check_scale_checkpoint.py pt FILE.pt [KEY...] [--seed KEY=N]...
        torch.load(FILE, weights_only=True) (optscope-cli gather's output or dcp_to_torch_save's) and compares
        KEY... (default: every tensor in it) with value_chunk().
    torch-python check_scale_checkpoint.py to_torch_save OUT FILE.pt
        torch.distributed.checkpoint.format_utils.dcp_to_torch_save(OUT, FILE).
Exit status 0 when every value is equal (bit-identical), 1 otherwise.
"""
import os
import sys
import time

import torch
import torch.distributed.checkpoint as dcp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_scale_checkpoint import PARAM_GROUP, STEP, full_value, shrunk_params  # noqa: E402

DEFAULT_KEYS = ["model.model.embed_tokens.weight", "optim.state.model.embed_tokens.weight.exp_avg",
                "optim.state.model.embed_tokens.weight.exp_avg_sq", "model.model.layers.0.self_attn.k_proj.weight",
                "optim.state.model.layers.0.self_attn.v_proj.weight.exp_avg_sq", "model.model.norm.weight",
                "model.lm_head.weight", "optim.state.lm_head.weight.step", "optim.param_groups.0.lr"]


def path_of(key):
    """The nested path of a flattened key (as flatten_state_dict made them: model.<fqn>, optim.state.<fqn>.<k>)."""
    if key.startswith("model."):
        return ("model", key[len("model."):])
    if key.startswith("optim.state."):
        fqn, _, k = key[len("optim.state."):].rpartition(".")
        return ("optim", "state", fqn, k)
    if key.startswith("optim.param_groups."):
        _, _, i, k = key.split(".", 3)
        return ("optim", "param_groups", int(i), k)
    raise KeyError(key)


def put(d, path, v):
    for p, nxt in zip(path, path[1:]):
        if isinstance(d, list):
            while len(d) <= p:
                d.append({})
            d = d[p]
        else:
            d = d.setdefault(p, [] if isinstance(nxt, int) else {})
    d[path[-1]] = v


def get(d, path):
    for p in path:
        d = d[p]
    return d


def compare(key, got, seeds):
    if key.startswith("optim.param_groups."):
        want = PARAM_GROUP[key.rsplit(".", 1)[1]]
        ok = got == want
    else:
        want = full_value(key, tuple(got.shape), seeds.get(key, 0))
        ok = got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)
    print(f"{'ok  ' if ok else 'DIFF'} {key} {tuple(got.shape) if hasattr(got, 'shape') else got!r}")
    return ok


def main():
    t_start = time.time()
    args, seeds, layers, shrink = [], {}, 80, 64
    it = iter(sys.argv[1:])
    for a in it:
        if a == "--seed":
            k, _, n = next(it).rpartition("=")
            seeds[k] = int(n)
        elif a == "--layers":
            layers = int(next(it))
        elif a == "--shrink":
            shrink = int(next(it))
        else:
            args.append(a)
    mode = args[0]
    ok = True
    if mode == "load":
        out, keys = args[1], args[2:] or DEFAULT_KEYS
        shapes = dict(shrunk_params(layers, shrink))
        sd = {}
        for key in keys:
            path = path_of(key)
            if path[1] == "param_groups":
                v = None
            elif path[0] == "optim" and path[-1] == "step":
                v = torch.zeros(())
            else:
                v = torch.zeros(shapes[path[-2] if path[0] == "optim" else path[1]])
            put(sd, path, v)
        t2 = time.time()
        dcp.load(sd, checkpoint_id=out)
        t3 = time.time()
        for key in keys:
            ok &= compare(key, get(sd, path_of(key)), seeds)
        print(f"state dict built in {t2 - t_start:.2f} s, dcp.load {t3 - t2:.2f} s ({len(keys)} keys)")
    elif mode == "pt":
        sd = torch.load(args[1], weights_only=True)
        keys = args[2:]
        if not keys:
            keys = [f"model.{k}" for k in sd.get("model", {})] + [
                f"optim.state.{f}.{k}" for f, st in sd.get("optim", {}).get("state", {}).items() for k in st]
        for key in keys:
            ok &= compare(key, get(sd, path_of(key)), seeds)
        print(f"{len(keys)} keys compared")
    elif mode == "to_torch_save":
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
        t0 = time.time()
        dcp_to_torch_save(args[1], args[2])
        print(f"dcp_to_torch_save {time.time() - t0:.2f} s, {os.path.getsize(args[2]) / 1e6:.1f} MB")
    else:
        raise SystemExit(__doc__)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
