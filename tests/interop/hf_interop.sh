#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# hf_interop.sh TORCH_PYTHON OPTSCOPE_CLI HF_DATA: gather safetensors files and Hugging Face Trainer folders
# (tests/data/hf) with optscope-cli into torch.save files, then check them in real PyTorch: weights_only loads equal the
# safetensors tensors and optimizer.pt's state under the Trainer's names, and the gathered optimizer state resumes a
# fresh Trainer-built AdamW (set_optimizer_state_dict) to exactly the saved state; diagnose's verdict on the frozen
# folder is what the Trainer's own resume does.
set -euo pipefail
torch_python=$1
cli=$2
data=$3
out=hf_out
rm -rf "$out"
mkdir -p "$out"
cp -r "$data"/. "$out"/
"$cli" gather "$out/single/model.safetensors" -o "$out/single.optscope.pt"
"$cli" gather "$out/sharded" -o "$out/sharded.optscope.pt"
for c in checkpoint-3 checkpoint-tied checkpoint-frozen checkpoint-bin checkpoint-bin-sharded; do
    "$cli" gather "$out/$c" -o "$out/$c.optscope.pt"
done
rc=0
"$cli" diagnose "$out/checkpoint-frozen" --model "$out/checkpoint-frozen/model.safetensors" --json \
    > "$out/checkpoint-frozen.diagnose.json" || rc=$?
[[ $rc == 1 ]] # warnings
"$torch_python" hf_interop.py "$out"
