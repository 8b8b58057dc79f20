#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# many_files_interop.sh TORCH_PYTHON OPTSCOPE_CLI BENCH_SCALE_DIR: a DCP of more rank files than the process may open
# (200 ranks under `ulimit -n 64`, as 4,096 ranks under the usual 1,024). Every file was kept open and mapped: gather,
# reshard, verify and inspect --hash failed with "Too many open files" and check reported every chunk unreadable.
# Now the least recently read files are closed: every command works, and gather's output is byte-identical to one
# made without the limit, with the values the generator wrote (check_scale_checkpoint.py). The checkpoint is written
# by bench/scale/make_scale_checkpoint.py with PyTorch's own DCP writer, one rank's plan after another (no 200-rank
# run is possible here).
set -euo pipefail
torch_python=$1
cli=$2
scale=$3
out=many_files_out
rm -rf "$out"
mkdir -p "$out"
cp "$scale"/make_scale_metadata.py "$scale"/make_scale_checkpoint.py "$scale"/check_scale_checkpoint.py "$out"/
cd "$out"
"$torch_python" -W ignore make_scale_checkpoint.py c200 200 1
"$torch_python" -W ignore make_scale_checkpoint.py c200b 200 1 --seed model.model.layers.0.self_attn.q_proj.weight=5
[[ $(ls c200 | wc -l) == 200 ]]
mkdir unlimited limited
"$cli" gather c200 -o unlimited/g.pt --no-fsync
(
    ulimit -n 64
    "$cli" check c200 | grep "^clean" > /dev/null
    "$cli" inspect --hash c200 > inspect.txt
    "$cli" gather c200 -o limited/g.pt --no-fsync
    "$cli" reshard c200 --world-size 3 -o rs3 --no-fsync
    "$cli" verify c200 --world-size 5 | grep "^IDENTICAL" > /dev/null
    "$cli" diff c200 rs3 | grep "^EQUAL" > /dev/null
    # two checkpoints of 200 files each: diff held a raw pointer into a file the budget closed (a segfault)
    "$cli" diff c200 c200b --json > diff.json || [[ $? == 1 ]]
    # a watched run: the step read first is held open only as far as the budget goes (it took every descriptor, and
    # the next step did not open)
    mkdir run
    ln -s ../c200 run/step_100
    ln -s ../c200b run/step_200
    "$cli" watch run --once > watch.txt
    grep "^step 200 .*1 of 59 keys changed" watch.txt > /dev/null
)
(
    ulimit -n 24 # a budget of the least: 4 files
    "$cli" diff c200 c200b > /dev/null || [[ $? == 1 ]]
    "$cli" gather c200 -o small.pt --no-fsync
)
python3 - <<'PY'
import json
d = json.load(open("diff.json"))
changed = [e["key"] for e in d["entries"] if e["status"] != "equal"]
assert changed == ["model.model.layers.0.self_attn.q_proj.weight"], changed
PY
cmp unlimited/g.pt limited/g.pt
"$torch_python" -W ignore check_scale_checkpoint.py --layers 1 pt limited/g.pt
echo "200 rank files under ulimit -n 64 (and 24): check, inspect --hash, gather, reshard, verify, diff and watch work"
