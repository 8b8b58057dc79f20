#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# unflatten_interop.sh TORCH_PYTHON OPTSCOPE_CLI: raw FSDP1 optimizer shards on 2, 3 and 4 ranks (use_orig_params
# False and True), unflattened by optscope, compared in real PyTorch with get_state_dict(full_state_dict=True) of the
# same run.
set -euo pipefail
torch_python=$1
cli=$2
out=unflatten_out
rm -rf "$out"
status=0
for w in 2 3 4; do
    for orig in "" orig; do
        d="$out/w$w${orig:+_orig}"
        # the fixture is a real FSDP1 run of $w gloo processes on a small machine: a worker that aborts inside
        # PyTorch (seen once in CI: "terminate called without an active exception") gets one more try; optscope has
        # not run yet
        "$torch_python" unflatten_interop.py make "$out" "$w" $orig || {
            echo "unflatten_interop: PyTorch's run on $w ranks failed; running it once more"
            rm -rf "${d:?}"
            "$torch_python" unflatten_interop.py make "$out" "$w" $orig
        }
        # use_orig_params=True files need no --units; giving them must not matter
        "$cli" unflatten "$d"/optim_rank*.pt --model "$d/model" --units blocks.0,blocks.1 -o "$d/ours.pt"
        "$torch_python" unflatten_interop.py compare "$out" "$w" $orig || status=1
    done
done
exit $status
