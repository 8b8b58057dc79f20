#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# fix_interop.sh TORCH_PYTHON OPTSCOPE_CLI DATA: `optscope-cli fix` on real fixtures, then real PyTorch loads each result.
set -euo pipefail
torch_python=$1
cli=$2
data=$3
out=fix_out
rm -rf "$out"
mkdir -p "$out"
status=0
run() { # case optim model [target optimizer]
    local case=$1 optim=$2 model=$3 target=${4:-}
    cp "$data/$optim" "$out/$case.orig.pt"
    "$cli" fix "$data/$optim" ${model:+--model "$data/$model"} ${target:+--target-optim "$data/$target"} \
        -o "$out/$case.fixed.pt"
    checks+=("$case" "$out/$case.fixed.pt" "$out/$case.orig.pt" +)
}
checks=() # what real PyTorch checks, in one run of it at the end ("+" between its commands): a start costs seconds
run ids adam_int.pt diag/model.pt                       # integer ids -> FQNs
run prefix_fqn diag/compiled_fqn.pt diag/model.pt       # _orig_mod. stripped from FQN keys
run param_names diag/compiled_param_names.pt diag/model.pt  # _orig_mod. stripped from param_names
run flattened diag/flattened.pt "" diag/one_group.pt    # DSD flattened -> nested, grouped as the target
run steps diag/step_int.pt ""                           # Python int steps -> float32 tensors
unset 'checks[-1]' # the last "+"
"$torch_python" fix_interop.py "${checks[@]}" || status=1
exit $status
