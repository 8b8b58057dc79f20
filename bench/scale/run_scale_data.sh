#!/bin/bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Times optscope-cli inspect / check / gather --only KEY against PyTorch's dcp.load of the same KEY, on a complete
# checkpoint written by make_scale_checkpoint.py (data files and .metadata, PyTorch's own writer), and checks the
# values on both sides against the generator's deterministic values. Prints a markdown table (wall, CPU, peak RSS
# from /usr/bin/time; PyTorch's rows include the interpreter start and `import torch`, and dcp.load's own seconds
# are given beside them).
#
#   bench/scale/run_scale_data.sh [RANKS] [KEY]      (default 256, model.model.embed_tokens.weight)
#   RUNS=3 CLI=build/app/optscope-cli bench/scale/run_scale_data.sh 256
set -euo pipefail
cd "$(dirname "$0")"
here=$(pwd -P)
ranks=${1:-256}
key=${2:-model.model.embed_tokens.weight}
runs=${RUNS:-1}
cli=$(realpath "${CLI:-../../build/app/optscope-cli}")
tp=$(realpath ../../scripts/torch-python)
mkdir -p out
cp make_scale_metadata.py make_scale_checkpoint.py check_scale_checkpoint.py out/
cd out   # torch-python sees only its working directory
ck=c$ranks
[[ -f $ck/.metadata ]] || "$tp" -W ignore make_scale_checkpoint.py "$ck" "$ranks" >&2

row() {  # name, command...
  local name=$1; shift
  local best="" line
  for ((i = 0; i < runs; i++)); do
    /usr/bin/time -f "%e %U %S %M" -o t.txt "$@" > cmd.log 2>&1 || { echo "FAILED: $*" >&2; cat cmd.log >&2; exit 1; }
    line=$(tail -1 t.txt)
    if [[ -z $best ]] || awk -v a="$line" -v b="$best" 'BEGIN{split(a,x," ");split(b,y," ");exit !(x[1]<y[1])}'; then
      best=$line; extra=$(grep -o 'dcp.load [0-9.]* s' cmd.log || true)
    fi
  done
  read -r wall user sys rss <<< "$best"
  printf '| %s | %.2f | %.2f | %.0f | %s |\n' "$name" "$wall" "$(awk -v u="$user" -v s="$sys" 'BEGIN{print u+s}')" "$((rss / 1024))" "$extra"
}

echo "| $ranks ranks ($(du -sh "$ck" | cut -f1), $(du -h "$ck/.metadata" | cut -f1) .metadata) | wall s | CPU s | peak RSS MB | note |"
echo "|---|---|---|---|---|"
row "optscope-cli inspect" "$cli" inspect "$ck"
row "optscope-cli check" "$cli" check "$ck"
row "optscope-cli gather --only $key" "$cli" gather "$ck" -o g.pt --only "$key"
row "PyTorch dcp.load of $key (torch-python)" "$tp" -W ignore check_scale_checkpoint.py load "$ck" "$key"
row "PyTorch import torch only (torch-python)" "$tp" -c "import torch.distributed.checkpoint"
"$tp" -W ignore check_scale_checkpoint.py pt g.pt "$key" >&2   # optscope's gathered values = the generator's
