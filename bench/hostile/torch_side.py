# SPDX-License-Identifier: GPL-3.0-or-later
"""The PyTorch way for each hostile cost case (bench/hostile/run_hostile_bench.py runs it beside optscope-cli):

    scripts/torch-python bench/hostile/torch_side.py CASE INPUT OUT
CASE: load_save (torch.load(weights_only=True) + torch.save: what gather does for a torch.save input),
      st_load (safetensors.torch.load_file), st_load_save (load_file + torch.save),
      dcp_load_hash (dcp.load of every tensor into a plain tensor, then SHA-256 of its bytes: inspect --hash),
      load (torch.load(weights_only=True) alone), load_hash (torch.load(weights_only=True), then SHA-256 of every
      tensor's bytes: inspect --hash of a torch.save file),
      diff (INPUT and OUT are two files of one tensor each, loaded with mmap=True: the elements that differ and the
      max |a - b|, integers widened to int32),
      dcp_diff (INPUT and OUT are two DCP folders: dcp.load of each into plain tensors, then the same comparison per
      tensor),
      dcp_roundtrip (what verify does, the PyTorch way: torch.load, dcp.save into the folder OUT, load it back whole
      with dcp_to_torch_save, compare with ==; stopped with exit 124 after DEADLINE seconds, the fourth argument)
"""
import hashlib
import sys

import torch

case, inp = sys.argv[1], sys.argv[2]
out = sys.argv[3] if len(sys.argv) > 3 else None
if case == "json_load":
    # what the Trainer does with trainer_state.json (TrainerState.load_from_json)
    import json
    import os
    with open(os.path.join(inp, "trainer_state.json")) as f:
        print(len(json.load(f)["log_history"]))
elif case in ("load_save", "load"):
    obj = torch.load(inp, weights_only=True)
    if case == "load_save":
        torch.save(obj, out)
elif case == "load_hash":
    for t in torch.load(inp, weights_only=True).values():
        hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()
elif case in ("st_load", "st_load_save"):
    from safetensors.torch import load_file
    obj = load_file(inp)
    if case == "st_load_save":
        torch.save(obj, out)
elif case == "dcp_load_hash":
    import torch.distributed.checkpoint as dcp
    md = dcp.FileSystemReader(inp).read_metadata()
    sd = {k: torch.empty(v.size, dtype=v.properties.dtype) for k, v in md.state_dict_metadata.items()
          if hasattr(v, "size")}
    dcp.load(sd, checkpoint_id=inp)
    for t in sd.values():
        hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()
elif case == "dcp_diff":
    import torch.distributed.checkpoint as dcp

    def load(path):
        md = dcp.FileSystemReader(path).read_metadata()
        sd = {k: torch.empty(v.size, dtype=v.properties.dtype) for k, v in md.state_dict_metadata.items()
              if hasattr(v, "size")}
        dcp.load(sd, checkpoint_id=path)
        return sd
    sa, sb = load(inp), load(out)
    for k in sa:
        print(k, int((sa[k] != sb[k]).sum()), (sa[k] - sb[k]).abs().max().item())
elif case == "diff":
    (a,), (b,) = (torch.load(p, weights_only=True, mmap=True).values() for p in (inp, out))
    if not a.is_floating_point():
        a, b = a.to(torch.int32), b.to(torch.int32)
    print(int((a != b).sum()), (a - b).abs().max().item())
elif case == "dcp_roundtrip":
    import os
    import shutil
    import signal

    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    signal.signal(signal.SIGALRM, lambda *_: os._exit(124))
    signal.alarm(int(sys.argv[4]))
    shutil.rmtree(out, ignore_errors=True)
    obj = torch.load(inp, weights_only=True)
    dcp.save(obj, storage_writer=dcp.FileSystemWriter(out))
    dcp_to_torch_save(out, out + ".pt")
    assert torch.load(out + ".pt", weights_only=True) == obj
    shutil.rmtree(out)
    os.unlink(out + ".pt")
elif case == "values_diff":
    # every key of two torch.save'd dicts of values compared, as diff does
    a, b = torch.load(inp, weights_only=True), torch.load(out, weights_only=True)
    print(sum(1 for k in a.keys() | b.keys() if a.get(k) != b.get(k)))
else:
    sys.exit(f"unknown case {case}")
