# SPDX-License-Identifier: GPL-3.0-or-later
"""Checks optscope-cli gather outputs of tests/data/hf in real PyTorch (see hf_interop.sh)."""
import json
import os
import sys

import torch
from safetensors.torch import load_file
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict, set_optimizer_state_dict

import make_hf_fixtures as fx

out = sys.argv[1]
expected = json.load(open(os.path.join(out, "expected.json")))
failures = []


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.reshape(-1).view(torch.uint8),
                                                                     b.reshape(-1).view(torch.uint8)) \
        if a.numel() else a.dtype == b.dtype and a.shape == b.shape


def check(cond, what):
    if not cond:
        failures.append(what)


for name in ("single", "sharded"):
    g = torch.load(os.path.join(out, f"{name}.optscope.pt"), weights_only=True)
    ref = load_file(os.path.join(out, "single", "model.safetensors"))
    check(list(g) == [k for k in g] and set(g) == set(ref), f"{name}: keys {sorted(g)} vs {sorted(ref)}")
    for k, t in ref.items():
        check(k in g and same(g[k], t), f"{name}: {k}")

KWARGS = {"checkpoint-3": ({}, (), torch.float32), "checkpoint-tied": ({"tie": True, "wte_name": "wte"}, (), torch.bfloat16),
          "checkpoint-frozen": ({}, ("embed.", "head."), torch.float32),
          "checkpoint-bin": ({"split_qkv": True, "layers": 1}, (), torch.float32),
          "checkpoint-bin-sharded": ({"split_qkv": True, "layers": 1}, (), torch.float32)}


def torch_model_ref(folder):
    """pytorch_model.bin, or its shards through pytorch_model.bin.index.json, as transformers loads them"""
    index = os.path.join(folder, "pytorch_model.bin.index.json")
    if not os.path.exists(index):
        return torch.load(os.path.join(folder, "pytorch_model.bin"), weights_only=True)
    sd = {}
    for shard in sorted(set(json.load(open(index))["weight_map"].values())):
        sd.update(torch.load(os.path.join(folder, shard), weights_only=True))
    return sd



for name, (kwargs, freeze, dtype) in KWARGS.items():
    truth = expected["checkpoints"][name]
    g = torch.load(os.path.join(out, f"{name}.optscope.pt"), weights_only=True)
    st = os.path.join(out, name, "model.safetensors")
    model_ref = load_file(st) if os.path.exists(st) else torch_model_ref(os.path.join(out, name))
    osd = torch.load(os.path.join(out, name, "optimizer.pt"), weights_only=True)
    check(set(g["model"]) == set(model_ref), f"{name}: model keys")
    if not os.path.exists(st):  # a torch.save model keeps the state dict's order, shards too
        check(list(g["model"]) == list(model_ref), f"{name}: model key order")
    for k, t in model_ref.items():
        check(same(g["model"][k], t), f"{name}: model.{k}")
    stored = {n: truth["safetensors_metadata"].get(n, n) for n in truth["ids"].values()}
    for i, fqn in truth["ids"].items():
        st = g["optim"]["state"].get(stored[fqn])
        check(st is not None, f"{name}: no state for {stored[fqn]}")
        for s, t in osd["state"][int(i)].items():
            check(st is not None and same(st[s], t), f"{name}: state {fqn}.{s} (id {i})")
    for gi, group in enumerate(osd["param_groups"]):
        mine = g["optim"]["param_groups"][gi]
        check(mine["params"] == [stored[truth["ids"][str(p)]] for p in group["params"]], f"{name}: group {gi} params")
        for k, v in group.items():
            check(k == "params" or mine[k] == v, f"{name}: group {gi} {k}")
    check(g["trainer_state"]["global_step"] == truth["global_step"], f"{name}: trainer_state.global_step")

    # resume: a fresh model and the Trainer's AdamW, the gathered state loaded by name the way DSD loads it
    torch.manual_seed(fx.SEED)
    model = fx.TinyLM(**kwargs).to(dtype)
    for n, p in model.named_parameters():
        if any(n.startswith(f) for f in freeze):
            p.requires_grad_(False)
    groups, _ = fx.trainer_groups(model)
    opt = torch.optim.AdamW(groups, lr=5e-3)
    model.load_state_dict(g["model"], strict=not kwargs.get("tie"))
    optim_sd = g["optim"]
    if kwargs.get("tie"):  # the tied pair's state sits under the name safetensors kept; named_parameters() has the other
        alias = {v: k for k, v in truth["safetensors_metadata"].items() if k != "format"}
        optim_sd = {"state": {alias.get(k, k): v for k, v in optim_sd["state"].items()},
                    "param_groups": [dict(pg, params=[alias.get(p, p) for p in pg["params"]])
                                     for pg in optim_sd["param_groups"]]}
    set_optimizer_state_dict(model, opt, optim_sd)
    resumed = opt.state_dict()
    for i in truth["ids"]:
        for s, t in osd["state"][int(i)].items():
            check(same(resumed["state"][int(i)][s], t), f"{name}: resumed state id {i}.{s}")

# diagnose of the frozen Trainer folder against its model file (hf_interop.sh wrote the report): the Trainer's own
# resume, optimizer.load_state_dict into AdamW over its groups of the trainable parameters, loads every saved state,
# and so must the verdict say; Trainer groups over every parameter raise the ValueError the frozen-params warning names
report = json.load(open(os.path.join(out, "checkpoint-frozen.diagnose.json")))
osd = torch.load(os.path.join(out, "checkpoint-frozen", "optimizer.pt"), weights_only=True)
outcomes = []
for frozen in (("embed.", "head."), ()):
    model = fx.TinyLM()
    for n, p in model.named_parameters():
        p.requires_grad_(not n.startswith(frozen) if frozen else True)
    try:
        torch.optim.AdamW(fx.trainer_groups(model)[0]).load_state_dict(osd)
        outcomes.append("loads")
    except ValueError as e:
        outcomes.append(str(e))
v = report["verdicts"]["optimizer.load_state_dict"]
saved = sum(len(g["params"]) for g in osd["param_groups"])
check(outcomes[0] == "loads" and v["loads"] and v["params_with_state"] == v["params_total"] == saved,
      f"checkpoint-frozen: PyTorch's Trainer resume {outcomes[0]}, diagnose says {v}")
frozen_finding = [f for f in report["findings"] if f["code"] == "frozen-params"]
check(outcomes[1] != "loads" and frozen_finding and outcomes[1] in json.dumps(frozen_finding),
      f"checkpoint-frozen: over every parameter PyTorch says {outcomes[1]!r}; diagnose: {frozen_finding}")

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("hf interop: gathered safetensors and Trainer folders equal the originals; the state resumes exactly")
