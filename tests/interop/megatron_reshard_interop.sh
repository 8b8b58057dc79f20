#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# megatron_reshard_interop.sh TORCH_PYTHON OPTSCOPE_CLI DATA: the Megatron-Core DistributedOptimizer samples
# (fully_reshardable and dp_reshardable, 2 ranks, written by Megatron-Core core_v0.16.1) gathered and resharded by
# optscope into FSDP2 DCP checkpoints for M = 1, 2, 3 ranks, loaded by real PyTorch 2.6 into an FSDP2 model and Adam
# with set_state_dict; weights must equal reference.pt, moments the model-space items, bit for bit. Also diff of the
# two sharding types (same run, same numbers) and verify.
set -euo pipefail
torch_python=$1
cli=$2
data=$3
out=megatron_out
rm -rf "$out"
mkdir -p "$out"
status=0
for v in distopt_fully_reshardable distopt_dp_reshardable; do
    cp -r "$data/megatron/$v" "$out/$v"
    "$cli" gather "$out/$v" -o "$out/$v.gathered.pt"
    for m in 1 2 3; do
        "$cli" reshard "$out/$v" --world-size "$m" --layout fsdp2 -o "$out/$v.rs_$m"
    done
    "$cli" verify "$out/$v" --world-size 3 || status=1
    "$cli" diff "$out/$v" "$out/$v.rs_3" || status=1
done
"$torch_python" megatron_reshard_interop.py "$out" 1 2 3 || status=1
# the two sharding types of the same run hold the same numbers: every tensor pairs and is bit-identical; only the
# sharding type in common.pt and dp_reshardable's per-bucket sizes differ
d=$("$cli" diff "$out/distopt_dp_reshardable" "$out/distopt_fully_reshardable" || true)
echo "$d" | tail -1
echo "$d" | tail -1 | grep -q "64 equal, 3 changed, 2 only in A, 0 only in B (bit-identical)" || status=1
# tensor parallel (synthetic TP2 x DP2, the same run saved in both sharding types): every weight and moment the
# dp_reshardable buckets map back to is bit-identical to the model-space state; nothing but the metadata differs
d=$("$cli" diff "$data/megatron/synthetic_tp2_dp2" "$data/megatron/synthetic_tp2_dp2_fully" || true)
echo "$d" | tail -1
if echo "$d" | grep -E "^(changed|only_b) +(model|optim|optimizer\.state)\." >/dev/null; then status=1; fi
all=$("$cli" diff "$data/megatron/synthetic_tp2_dp2" "$data/megatron/synthetic_tp2_dp2_fully" --all || true)
for k in model.fc1.weight optim.state.fc2.weight.exp_avg optim.state.fc2.bias.exp_avg_sq; do
    grep -qx "equal  $k" <<<"$all" || status=1
done
exit $status
