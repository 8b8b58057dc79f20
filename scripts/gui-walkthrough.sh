#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The GUI as a user sees it: the app in a real X server (Xvfb) with a window manager (openbox), at 1280x720 and
# 1440x900, on the jobs users do (a diff opened older-first, a torch.compile optimizer diagnosed against its model,
# a 1,024-rank checkpoint, an unsharded file), one screenshot of the whole screen per job, to be looked at.
# Not part of CI (it shows, it does not assert: the GUI tests assert). Needs: xvfb openbox xdotool x11-apps netpbm,
# and for the 1,024-rank case a .metadata made by bench/scale/make_scale_metadata.py (path as the first argument).
#   scripts/gui-walkthrough.sh [R1024_DIR] [OUT_DIR]      (default OUT_DIR: walkthrough/)
set -euo pipefail
cd "$(dirname "$0")/.."
big=${1:-}
out=${2:-walkthrough}
mkdir -p "$out"
app=build/app/optscope
shot() { sleep "$2"; xwd -root -silent -display :99 | xwdtopnm 2>/dev/null | pnmtopng > "$out/$1.png"; }
job() { # NAME KEY WAIT ARGS...: start the app, press KEY (a panel's Alt+N), screenshot, close
    local name=$1 key=$2 wait=$3
    shift 3
    "$app" "$@" > /dev/null 2>&1 &
    local pid=$!
    sleep "$wait"
    [ -n "$key" ] && xdotool key "$key"
    shot "$name" 2
    kill "$pid"
    wait "$pid" 2> /dev/null || true
}
for size in 1280x720 1440x900; do
    Xvfb :99 -screen 0 "${size}x24" -nolisten tcp > /dev/null 2>&1 &
    xvfb=$!
    sleep 1
    DISPLAY=:99 openbox > /dev/null 2>&1 &
    wm=$!
    sleep 1
    export DISPLAY=:99 QT_QPA_PLATFORM=xcb
    job "diff-$size" alt+5 4 resources/demo/checkpoint-step2 resources/demo/checkpoint
    job "diagnose-$size" alt+6 4 tests/data/load_cases/compiled/optim.pt --reference tests/data/load_cases/compiled/model.pt
    job "unsharded-$size" "" 4 tests/data/adam_int.pt
    [ -n "$big" ] && job "r1024-$size" alt+3 6 "$big" --select optim.state.model.layers.0.self_attn.q_proj.weight.exp_avg
    kill "$wm" "$xvfb"
    wait 2> /dev/null || true
done
ls "$out"
