#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# fabric_interop.sh TORCH_PYTHON OPTSCOPE_CLI DATA: a Lightning Fabric FSDP checkpoint (DATA/fabric/fsdp_sharded: DCP
# + meta.pt). inspect shows meta.pt's keys at the top level; gather writes them there, as Fabric's consolidation does;
# reshard (3 ranks FSDP2 layout, 2 ranks FSDP1 layout) copies meta.pt byte for byte, and Fabric's way of loading a
# sharded checkpoint reads every output (fabric_interop.py); verify stays identical; the input is left as it was.
set -euo pipefail
torch_python=$1
cli=$2
data=$3/fabric/fsdp_sharded
out=fabric_out
rm -rf "$out"
mkdir -p "$out"
cp -r "$data" "$out/src" # the chroot sees only this folder
before=$(cd "$data" && sha256sum .metadata ./*.distcp meta.pt)
keys=$("$cli" inspect --json "$data" | python3 -c "import json, sys; print(' '.join(e['key'] for e in json.load(sys.stdin)['entries']))")
for k in iteration hparams.name scheduler.last_epoch best_loss; do
    [[ " $keys " == *" $k "* ]] || { echo "FAIL: inspect does not list meta.pt's key $k" >&2; exit 1; }
done
"$cli" gather "$data" -o "$out/gathered.pt"
"$cli" reshard "$data" --world-size 3 -o "$out/rs3"
"$cli" reshard "$data" --world-size 2 --layout fsdp1 -o "$out/rs2_fsdp1"
"$cli" verify "$data" --world-size 3 | grep -q IDENTICAL
"$torch_python" fabric_interop.py "$out" rs3:3 rs2_fsdp1:2
after=$(cd "$data" && sha256sum .metadata ./*.distcp meta.pt)
[[ $before == "$after" ]] || { echo "FAIL: the input changed" >&2; exit 1; }
