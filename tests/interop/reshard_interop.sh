#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# reshard_interop.sh TORCH_PYTHON OPTSCOPE_CLI: a 3-rank FSDP2 checkpoint, resharded by optscope to M = 2, 3, 4 and
# loaded by real FSDP2 on M ranks; the loaded full state must equal the source bit for bit. And a 2-rank FSDP1
# checkpoint resharded with --layout fsdp1 for 3 ranks, loaded by real FSDP1 on 3 ranks. The 3-rank state saved as
# per-rank torch.save files too, resharded to 2 ranks and loaded the same way. PyTorch runs twice, the loads in one
# run ("+" between its commands): a start of it costs seconds.
set -euo pipefail
torch_python=$1
cli=$2
out=reshard_out
rm -rf "$out"
"$torch_python" reshard_interop.py make "$out"
loads=()
for m in 2 3 4 5; do  # 5: several ranks past the last row of small tensors (one empty chunk each)
    "$cli" reshard "$out/src" --world-size "$m" -o "$out/rs_$m"
    loads+=(load "$out" "$m" +)
done
# the same 3-rank state saved as per-rank torch.save files (DTensors), read as one checkpoint
"$cli" reshard "$out/src_ranks" --world-size 2 -o "$out/rs_ranks_2"
"$cli" reshard "$out/src_fsdp1" --world-size 3 --layout fsdp1 -o "$out/rs1_3"
"$torch_python" reshard_interop.py "${loads[@]}" load_ranks "$out" 2 + load_fsdp1 "$out" 3
