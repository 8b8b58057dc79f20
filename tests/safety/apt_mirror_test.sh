#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# scripts/apt-mirror.sh reads the mirror from apt's sources (deb822 and one-line), never from a name in the repo.
set -euo pipefail
script=$1
etc=$(mktemp -d)
trap 'rm -rf "$etc"' EXIT
mkdir -p "$etc/sources.list.d"
fail() { echo "FAIL: $*"; echo "0 passed, 1 failed"; exit 1; }
cat >"$etc/sources.list.d/debian.sources" <<'S'
Types: deb-src
URIs: http://src.example/debian
Suites: bookworm

Types: deb
# a comment
URIs: http://mirror.example/debian/
Suites: bookworm bookworm-updates
Components: main

Types: deb
URIs: http://sec.example/debian-security
Suites: bookworm-security
S
[ "$(OPTSCOPE_APT_ETC=$etc "$script")" = http://mirror.example/debian ] || fail "deb822 archive"
[ "$(OPTSCOPE_APT_ETC=$etc "$script" security)" = http://sec.example/debian-security ] || fail "deb822 security"
rm "$etc/sources.list.d/debian.sources"
echo "deb [arch=amd64 signed-by=/k.gpg] http://one.example/debian bookworm main" >"$etc/sources.list"
[ "$(OPTSCOPE_APT_ETC=$etc "$script")" = http://one.example/debian ] || fail "one-line with options"
[ "$(OPTSCOPE_APT_ETC=$etc OPTSCOPE_DEBIAN_MIRROR=http://o.example/debian "$script")" = http://o.example/debian ] \
    || fail "override"
: >"$etc/sources.list"
if OPTSCOPE_APT_ETC=$etc "$script" 2>/dev/null; then fail "no mirror must be an error"; fi
echo "5 passed, 0 failed"
