#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# unflatten_interop.sh TORCH_PYTHON OPTSCOPE_CLI: raw FSDP1 optimizer shards on 2, 3 and 4 ranks (use_orig_params
# False and True), unflattened by optscope, compared in real PyTorch with get_state_dict(full_state_dict=True) of the
# same run. PyTorch runs twice, each time for every case ("+" between its commands): a start of it costs seconds.
set -euo pipefail
torch_python=$1
cli=$2
out=unflatten_out
rm -rf "$out"
cases=(w2 w2_orig w3 w3_orig w4 w4_orig w3_tied)
make=() compare=()
for c in "${cases[@]}"; do
    make+=(${make[0]+"+"} make "$out" "$c")
    compare+=(${compare[0]+"+"} compare "$out" "$c")
done
# each case is a real FSDP1 run of W gloo processes (make_fixtures.spawn runs them once more if one aborts inside
# PyTorch, seen now and then on a small machine)
"$torch_python" unflatten_interop.py "${make[@]}"
for c in "${cases[@]}"; do
    d="$out/$c"
    # use_orig_params=True files need no --units; giving them must not matter
    # a tied model: its plain torch.save'd state dict as the model (both tied names on one storage)
    model="$d/model"
    [[ $c == *_tied ]] && model="$d/plain_model.pt"
    "$cli" unflatten "$d"/optim_rank*.pt --model "$model" --units blocks.0,blocks.1 -o "$d/ours.pt"
done
"$torch_python" unflatten_interop.py "${compare[@]}"
