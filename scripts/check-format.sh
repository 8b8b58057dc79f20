#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Fails when a tracked C++/CUDA source differs from what clang-format (.clang-format) makes of it.
#   scripts/check-format.sh         report the files and the first lines that differ
#   scripts/check-format.sh --fix   reformat them in place
set -euo pipefail
cd "$(dirname "$0")/.."
fmt=${CLANG_FORMAT:-$(command -v clang-format-14 || command -v clang-format || true)}
if [ -z "$fmt" ]; then
    echo "check-format: clang-format not found (scripts/install-deps.sh installs clang-format-14)" >&2
    exit 2
fi
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh')
if [ "${1:-}" = --fix ]; then
    "$fmt" -i "${files[@]}"
    exit 0
fi
bad=()
for f in "${files[@]}"; do
    if ! "$fmt" "$f" | cmp -s "$f" -; then
        bad+=("$f")
        "$fmt" "$f" | diff -u --label "$f" --label "$f (clang-format)" "$f" - | head -12 || true
    fi
done
if [ ${#bad[@]} -gt 0 ]; then
    echo "check-format: ${#bad[@]} file(s) not formatted: ${bad[*]}" >&2
    echo "check-format: run scripts/check-format.sh --fix" >&2
    exit 1
fi
echo "check-format: ${#files[@]} files formatted"
