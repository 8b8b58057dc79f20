# SPDX-License-Identifier: GPL-3.0-or-later
# The PyTorch side of the host -> device benchmark (scripts/device-check.sh; results in bench/results/gpu.md).
#   make OUT GB: a checkpoint of about GB gigabytes (16 fp32 tensors of random values, made on the GPU when there
#                is one) as OUT/big.pt (torch.save) and OUT/big_dcp (dcp.save, one process)
#   time OUT DEVICE REPEAT: the best of REPEAT runs of torch.load(OUT/big.pt, map_location=DEVICE) and of dcp.load
#                of OUT/big_dcp into tensors already on DEVICE (the page cache warm), printed as JSON
import json
import os
import sys
import time

import torch
import torch.distributed.checkpoint as dcp


def make(out, gb):
    os.makedirs(out, exist_ok=True)
    n = int(gb * 1e9 / 4 / 16)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator(device=dev).manual_seed(0)
    sd = {f"layers.{i}.weight": torch.randn(n, generator=g, device=dev).cpu() for i in range(16)}
    torch.save(sd, os.path.join(out, "big.pt"))
    dcp.save(sd, checkpoint_id=os.path.join(out, "big_dcp"))
    print(json.dumps({"made": out, "bytes": sum(t.numel() * 4 for t in sd.values())}))


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def best(repeat, device, f):
    b = 1e30
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        sync(device)
        b = min(b, time.perf_counter() - t0)
    return b


def timed(out, device, repeat):
    path = os.path.join(out, "big.pt")
    nbytes = 0

    def load_pt():
        nonlocal nbytes
        sd = torch.load(path, map_location=device, weights_only=True)
        nbytes = sum(t.numel() * t.element_size() for t in sd.values())

    t_pt = best(repeat, device, load_pt)
    meta = dcp.FileSystemReader(os.path.join(out, "big_dcp")).read_metadata()
    target = {k: torch.empty(m.size, dtype=m.properties.dtype, device=device) for k, m in meta.state_dict_metadata.items()}
    t_dcp = best(repeat, device, lambda: dcp.load(target, checkpoint_id=os.path.join(out, "big_dcp")))
    gb = nbytes / 1e9
    print(json.dumps({
        "torch": torch.__version__, "device": device, "bytes": nbytes,
        "torch_load_map_location": {"seconds": t_pt, "GB_per_s": gb / t_pt},
        "dcp_load_into_device_tensors": {"seconds": t_dcp, "GB_per_s": gb / t_dcp},
    }, indent=2))


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], float(sys.argv[3]))
    else:
        timed(sys.argv[2], sys.argv[3], int(sys.argv[4]))
