#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# reshard_interop.sh TORCH_PYTHON OPTSCOPE_CLI: a 3-rank FSDP2 checkpoint, resharded by optscope to M = 2, 3, 4 and
# loaded by real FSDP2 on M ranks; the loaded full state must equal the source bit for bit. Also verify, on CPU.
set -euo pipefail
torch_python=$1
cli=$2
out=reshard_out
rm -rf "$out"
"$torch_python" reshard_interop.py make "$out"
status=0
for m in 2 3 4; do
    "$cli" reshard "$out/src" --world-size "$m" -o "$out/rs_$m"
    "$torch_python" reshard_interop.py load "$out" "$m" || status=1
done
exit $status
