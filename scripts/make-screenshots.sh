#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Redoes the README's screenshots with the app itself, offscreen, on the bundled demo checkpoint: the whole window
# at 1440x900 and 1280x720, and each panel at 1440x900. Paths are given relative to the repository root, so no
# absolute path of the machine that makes them shows in the images.
#   scripts/make-screenshots.sh [BUILD_DIR]     (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
app=${1:-build}/app/optscope
out=resources/screenshots
export QT_QPA_PLATFORM=offscreen
demo=resources/demo/checkpoint
shot() { "$app" --screenshot "$out/$1" "${@:2}" 2>&1 | grep -v "propagateSizeHints" || true; }
shot window.png --size 1440x900
shot window-1280x720.png --size 1280x720
shot state-keys.png --panel keys --size 1440x900 --select optim.state.layers.0.attn.qkv.weight.exp_avg
shot tensor-details.png --panel details --size 1440x900 --select optim.state.embed.weight.exp_avg
shot shard-layout.png --panel shards --size 1440x900 --select optim.state.head.weight.exp_avg
shot fqn-mapping.png --panel fqn --size 1440x900
shot diff.png --panel diff --size 1440x900 "$demo" resources/demo/checkpoint-step2
shot diagnose.png --panel diagnose --size 1440x900 --reference resources/demo/compiled_fqns.txt
shot reshard-verify.png --panel reshard --size 1440x900 --world-size 2
