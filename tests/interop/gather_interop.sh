#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# gather_interop.sh TORCH_PYTHON OPTSCOPE_CLI: make DCP checkpoints + dcp_to_torch_save references with real PyTorch,
# gather each with optscope-cli, then compare in real PyTorch (weights_only loads of both).
set -euo pipefail
torch_python=$1
cli=$2
out=gather_out
"$torch_python" gather_interop.py make "$out"
for name in $(python3 -c "import json; print(' '.join(json.load(open('$out/names.json'))))"); do
    "$cli" gather "$out/$name" -o "$out/$name.optscope.pt"
done
"$torch_python" gather_interop.py compare "$out"
