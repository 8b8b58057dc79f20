#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# zero_reshard_interop.sh TORCH_PYTHON OPTSCOPE_CLI DATA: the DeepSpeed ZeRO samples (stages 1-3, 2 ranks, written by
# DeepSpeed v0.19.5) resharded by optscope into FSDP2 DCP checkpoints for M = 1, 2, 3, 4 ranks, loaded by real
# PyTorch 2.6 into an FSDP2 model and AdamW with set_state_dict; the loaded weights must equal the parameters the
# training processes gathered (reference.pt), the moments DeepSpeed's own ds_to_universal output, bit for bit.
# Also `gather` of each stage against zero_to_fp32's pytorch_model.bin (weights) and reference.pt; and the synthetic
# variants (zero_synthetic_interop.py).
set -euo pipefail
torch_python=$1
cli=$2
data=$3
out=zero_out
rm -rf "$out"
mkdir -p "$out"
status=0
checks=() # what real PyTorch checks, all in one run of it at the end ("+" between its commands): a start costs seconds
for s in 1 2 3; do
    cp -r "$data/zero/stage$s" "$out/stage$s"
    "$cli" gather "$out/stage$s/ckpt" -o "$out/stage$s/gathered.pt"
    for m in 1 2 3 4; do
        "$cli" reshard "$out/stage$s/ckpt" --world-size "$m" --layout fsdp2 -o "$out/stage$s/rs_$m"
    done
    checks+=("$out/stage$s" 1 2 3 4 +)
    # across the formats: the universal form and the FSDP2 reshards are the same data; verify round-trips
    "$cli" diff "$out/stage$s/ckpt" "$out/stage$s/universal" || status=1
    "$cli" diff "$out/stage$s/ckpt" "$out/stage$s/rs_3" || status=1
    "$cli" verify "$out/stage$s/ckpt" --world-size 3 || status=1
    "$cli" verify "$out/stage$s/universal" --world-size 4 || status=1
done
# the variants the samples do not show (tests/data/zero/synthetic: bf16/fp16, frozen parameters, 1-4 ranks, SGD): each
# resharded to a world size other than its own, loaded by FSDP2; gather against the whole-tensor run; verify
for v in "$data"/zero/synthetic/*/; do
    v=$(basename "$v")
    cp -r "$data/zero/synthetic/$v" "$out/$v"
    "$cli" gather "$out/$v/ckpt" -o "$out/$v/gathered.pt"
    m=3
    [[ $v == *_w3* ]] && m=2
    "$cli" reshard "$out/$v/ckpt" --world-size "$m" --layout fsdp2 -o "$out/$v/rs_$m"
    checks+=(synthetic "$out/$v" "$m" +)
    "$cli" diff "$out/$v/ckpt" "$out/$v/rs_$m" || status=1
    "$cli" verify "$out/$v/ckpt" --world-size 4 || status=1
done
unset 'checks[-1]' # the last "+"
"$torch_python" zero_reshard_interop.py "${checks[@]}" || status=1
exit $status
