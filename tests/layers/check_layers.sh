#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# check_layers.sh CXX LAYER_ROOTS LAYER...: the build refuses an upward include. For every layer (in order, lowest
# first), a translation unit compiled as that layer's sources are (its include root, LAYER_ROOTS/<layer>) must compile
# when it includes a header of its own layer or of any layer below, and must fail with the header not found (gcc:
# "No such file", clang: "file not found") when it includes a header of any layer above. A layer left out of the roots, or a root that sees too much, fails the test.
set -uo pipefail
cxx=$1
roots=$2
shift 2
layers=("$@")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
probe() { # layer header -> compiler's exit status, its messages in $work/out
    printf '#include "%s"\nint main() { return 0; }\n' "$2" >"$work/probe.cpp"
    "$cxx" -std=c++17 -E -o /dev/null -I "$roots/$1" "$work/probe.cpp" >"$work/out" 2>&1
}
for ((i = 0; i < ${#layers[@]}; ++i)); do
    layer=${layers[$i]}
    for ((j = 0; j < ${#layers[@]}; ++j)); do
        other=${layers[$j]}
        header=$(find "$roots/all/optscope/$other" -maxdepth 1 -name '*.h' | sort | head -1)
        [ -n "$header" ] || { echo "FAIL: layer $other has no header" >&2; status=1; continue; }
        name="optscope/$other/$(basename "$header")"
        if ((j <= i)); then
            if ! probe "$layer" "$name"; then
                echo "FAIL: $layer cannot include $name (a layer below or its own):" >&2
                head -5 "$work/out" >&2
                status=1
            fi
        else
            if probe "$layer" "$name"; then
                echo "FAIL: $layer includes $name from the layer above it, and it compiled" >&2
                status=1
            elif ! grep -qF -e "$name: No such file" -e "'$name' file not found" "$work/out"; then
                echo "FAIL: $layer including $name failed for another reason than the layering:" >&2
                head -5 "$work/out" >&2
                status=1
            else
                echo "ok: $layer refuses $name"
            fi
        fi
    done
done
exit $status
