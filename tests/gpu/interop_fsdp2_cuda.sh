#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# interop_fsdp2_cuda.sh PYTHON OPTSCOPE_CLI OUT [cuda|cpu] [FIXTURE]: PyTorch's FSDP2 trains on the GPU and saves
# with DCP (interop_fsdp2_cuda.py make), or FIXTURE/ckpt and FIXTURE/ref.pt are such a run's output (the one
# tests/data/gpu keeps, made on an H100 by PyTorch 2.11); OptScope reshards it to 4 ranks on the GPU (byte-identical
# to the CPU's reshard), verifies the original and the result by loading them on the GPU at 4 and 3 ranks, gathers the 4-rank result on the GPU and on the CPU (byte-identical), and PyTorch
# loads both outputs and finds every tensor equal to its own full state. cpu: the same steps on the CPU, to test the
# scripts on a machine without a GPU.
set -euo pipefail
py=$1 cli=$2 out=$3 dev=${4:-cuda} fixture=${5:-}
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$out" && mkdir -p "$out"
if [ -n "$fixture" ]; then
    cp -r "$fixture/ckpt" "$fixture/ref.pt" "$out/"
else
    "$py" "$here/interop_fsdp2_cuda.py" make "$out" "$dev"
fi
"$cli" check "$out/ckpt" | tee "$out/check.txt"
grep -q "^clean" "$out/check.txt"
"$cli" reshard "$out/ckpt" --world-size 4 -o "$out/rs4" --device "$dev"
mkdir -p "$out/cpu_ref"
"$cli" reshard "$out/ckpt" --world-size 4 -o "$out/cpu_ref/rs4" --device cpu --no-fsync
for f in "$out"/cpu_ref/rs4/*; do cmp "$f" "$out/rs4/$(basename "$f")"; done
[ "$(ls "$out/rs4" | wc -l)" = "$(ls "$out/cpu_ref/rs4" | wc -l)" ]
echo "interop: reshard --device $dev to 4 ranks is byte-identical to the CPU's"
"$cli" verify "$out/ckpt" --world-size 4 --device "$dev" | tee "$out/verify_ckpt_4.txt"
"$cli" verify "$out/rs4" --world-size 3 --device "$dev" | tee "$out/verify_rs4_3.txt"
grep -q IDENTICAL "$out/verify_ckpt_4.txt"
grep -q IDENTICAL "$out/verify_rs4_3.txt"
# the archive's folder name comes from the file name (as torch.save's does): same name, two folders
mkdir -p "$out/on_$dev" "$out/on_cpu_ref"
"$cli" gather "$out/rs4" -o "$out/on_$dev/gathered.pt" --device "$dev"
"$cli" gather "$out/rs4" -o "$out/on_cpu_ref/gathered.pt" --device cpu
cmp "$out/on_$dev/gathered.pt" "$out/on_cpu_ref/gathered.pt"
echo "interop: gather --device $dev of the 4-rank reshard is byte-identical to the CPU's"
"$py" "$here/interop_fsdp2_cuda.py" load "$out" "$out/rs4" "$out/on_$dev/gathered.pt" "$dev"
echo "interop: PASSED ($dev)"
