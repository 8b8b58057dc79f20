#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# fsdp1_sharded_interop.sh TORCH_PYTHON OPTSCOPE_CLI DATA: the FSDP1 SHARDED_STATE_DICT rank files of
# DATA/fsdp1_sharded_r3 (3 ranks; rank 2 holds no row of the 4-row tensors) gather with no tensor-without-data
# warning, and real PyTorch loads the output (weights_only=True) and finds it equal to its own FULL_STATE_DICT of
# the same run (DATA/fsdp1_sharded_r3_full.pt).
set -euo pipefail
torch_python=$1
cli=$2
data=$3
out=fsdp1_sharded_out
rm -rf "$out"
mkdir -p "$out"
cp "$data/fsdp1_sharded_r3_full.pt" "$out/full.pt" # the chroot sees only this folder
"$cli" inspect "$data/fsdp1_sharded_r3" >/dev/null 2>"$out/inspect.err"
"$cli" gather "$data/fsdp1_sharded_r3" -o "$out/gathered.pt" 2>"$out/gather.err"
if grep -h tensor-without-data "$out/inspect.err" "$out/gather.err"; then
    echo "FAIL: tensor-without-data for a rank that holds no rows" >&2
    exit 1
fi
"$torch_python" fsdp1_sharded_interop.py "$out"
