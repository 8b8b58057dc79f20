#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Prints the Debian mirror this machine's apt is set up with, so that no script names a mirror's host:
#
#   scripts/apt-mirror.sh            the archive's URI (for debootstrap and a chroot's sources)
#   scripts/apt-mirror.sh security   the security archive's URI (the one whose suites end in -security)
#
# Reads /etc/apt/sources.list.d/*.sources (deb822: URIs/Suites fields) and /etc/apt/sources.list(.d/*.list)
# (one-line "deb URI SUITE ..."), type deb only, and takes the first URI that serves Debian (a path ending in
# /debian or /debian-security). OPTSCOPE_DEBIAN_MIRROR / OPTSCOPE_DEBIAN_SECURITY_MIRROR override. Exit 1 with a
# message when apt names no Debian mirror.
set -euo pipefail
kind=${1:-archive}
etc=${OPTSCOPE_APT_ETC:-/etc/apt} # tests point this at a folder of their own
case $kind in
archive) override=${OPTSCOPE_DEBIAN_MIRROR:-} ;;
security) override=${OPTSCOPE_DEBIAN_SECURITY_MIRROR:-} ;;
*)
    echo "usage: $0 [security]" >&2
    exit 2
    ;;
esac
if [ -n "$override" ]; then
    printf '%s\n' "$override"
    exit 0
fi
# One "URI SUITE" line per source, from both syntaxes.
sources() {
    local f
    for f in "$etc"/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        # deb822 stanzas are separated by blank lines; a stanza may list several URIs and suites
        awk 'function flush() { if (deb && uris != "") { n = split(uris, u, " "); m = split(suites, s, " ");
                                   for (i = 1; i <= n; i++) for (j = 1; j <= m; j++) print u[i], s[j] }
                                 deb = 0; uris = ""; suites = "" }
             /^[ \t]*$/ { flush(); next }
             /^#/ { next }
             tolower($1) == "types:" { deb = ($0 ~ /(^|[ \t])deb([ \t]|$)/) && !($0 ~ /Enabled:[ \t]*no/) }
             tolower($1) == "uris:" { $1 = ""; uris = $0 }
             tolower($1) == "suites:" { $1 = ""; suites = $0 }
             tolower($1) == "enabled:" && tolower($2) == "no" { deb = 0; uris = "" }
             END { flush() }' "$f"
    done
    for f in "$etc"/sources.list "$etc"/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        # "deb [options] URI SUITE COMPONENTS..."
        awk '$1 == "deb" { i = 2; if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ } print $i, $(i + 1) }' "$f"
    done
}
while read -r uri suite; do
    uri=${uri%/}
    case $kind in
    archive) [[ $suite != *-security && $uri == */debian ]] && found=$uri ;;
    security) [[ $suite == *-security && $uri == */debian-security ]] && found=$uri ;;
    esac
    if [ -n "${found:-}" ]; then
        printf '%s\n' "$found"
        exit 0
    fi
done < <(sources)
echo "apt-mirror: apt names no Debian ${kind} mirror in $etc/sources.list*; set OPTSCOPE_DEBIAN_MIRROR" >&2
exit 1
