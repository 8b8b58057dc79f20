#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# titan_flat_interop.sh TORCH_PYTHON OPTSCOPE_CLI DATA: torchtitan's flattened optimizer with per-parameter groups
# (DATA/torchtitan/flat). Without the target optimizer, `fix` refuses to convert (the format stores no grouping;
# a guessed one does not load) and writes nothing; with it, by position or by name, from 1 and 2 ranks, PyTorch loads
# the result into the training script's optimizer both ways (titan_flat_interop.py).
set -euo pipefail
torch_python=$1
cli=$2
data=$3/torchtitan/flat
out=titan_flat_out
rm -rf "$out"
mkdir -p "$out"
status=0
if "$cli" fix "$data/groups_1rank" -o "$out/guessed" 2>"$out/guessed.err"; then
    echo "FAIL: fix converted the flattened optimizer without knowing its param groups" >&2
    status=1
fi
grep -q -- "--target-optim" "$out/guessed.err" || { echo "FAIL: the refusal does not say what to give" >&2; status=1; }
[ ! -e "$out/guessed" ] || { echo "FAIL: the refused fix left $out/guessed" >&2; status=1; }
cases=()
run() { # case source target
    cp -r "$data/$2" "$out/$1.orig"
    "$cli" fix "$data/$2" --target-optim "$data/$3" -o "$out/$1.fixed" --no-fsync
    cases+=("$1")
}
run by_position groups_1rank target_optim.pt
run by_name groups_1rank target_optim_names.pt
run two_ranks groups_2rank target_optim.pt
"$torch_python" titan_flat_interop.py "$out" "${cases[@]}" || status=1
exit $status
