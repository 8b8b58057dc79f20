#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Installs the .deb with apt into a fresh Debian bookworm root and runs what it installed there: the check that
# the package's Depends are complete on a machine that has never seen our build tree, Qt's -dev packages or
# libtorch-dev. CTest "packaging_install_bookworm" (label packaging) runs it on the build tree; it needs root
# (debootstrap, chroot, mounts; exit 77 = skipped without) and the Debian mirror apt uses here (about 400 MB of
# packages; scripts/apt-mirror.sh):
#
#   packaging/install_in_bookworm.sh DEB|BUILD_DIR
#
# BUILD_DIR: a configured GUI build tree; the .deb is made from it with cpack first. The minbase root is made once
# with debootstrap and kept in OPTSCOPE_BOOKWORM_BASE (default /var/tmp/optscope-bookworm); every run installs
# into a fresh copy of it, which is removed afterwards (OPTSCOPE_INSTALL_KEEP=DIR keeps the screenshot and logs).
#
# Checks, inside the chroot: `apt-get install --no-install-recommends ./optscope.deb` resolves every dependency from
# bookworm alone; optscope-cli --version, inspect --hash of the installed demo checkpoint (ATen from
# /usr/lib/optscope), gather of the demo and verify at 3 ranks; the GUI renders the demo offscreen (--screenshot
# with no path opens the bundled demo) into a non-empty PNG; `apt-get purge` removes every file it installed.
set -euo pipefail
[ $# -eq 1 ] || {
    sed -n '3,18p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
}
if [ "$(id -u)" -ne 0 ] || ! command -v debootstrap >/dev/null; then
    echo "install_in_bookworm: skipped: needs root and debootstrap (scripts/install-deps.sh)" >&2
    exit 77
fi
# a private mount namespace: the chroot's /proc and /dev mounts vanish with this process, even if it is killed
if [ -z "${OPTSCOPE_IN_PRIVATE_MOUNTS:-}" ]; then
    if ! unshare --mount --propagation private true 2>/dev/null; then
        echo "install_in_bookworm: skipped: cannot make a mount namespace here (unshare --mount)" >&2
        exit 77
    fi
    OPTSCOPE_IN_PRIVATE_MOUNTS=1 exec unshare --mount --propagation private "$0" "$@"
fi
fail() {
    echo "FAIL: $*" >&2
    exit 1
}
base=${OPTSCOPE_BOOKWORM_BASE:-/var/tmp/optscope-bookworm}
here_dir=$(dirname "$(readlink -f "$0")")
mirror=$("$here_dir/../scripts/apt-mirror.sh") || fail "no Debian mirror in apt's sources"
security_mirror=$("$here_dir/../scripts/apt-mirror.sh" security) || fail "no Debian security mirror in apt's sources"
work=$(mktemp -d /var/tmp/optscope-install.XXXXXX)
root=$work/root
cleanup() {
    for m in "$root/proc" "$root/dev/pts" "$root/dev"; do
        mountpoint -q "$m" 2>/dev/null && umount -l "$m"
    done
    # never into a bind-mounted /dev, should an unmount have failed
    rm -rf --one-file-system "$work"
}
trap cleanup EXIT

deb=$1
if [ -d "$deb" ]; then
    (cd "$deb" && cpack -G DEB -B "$work/out") >"$work/cpack.log" 2>&1 || {
        cat "$work/cpack.log"
        fail "cpack -G DEB in $deb"
    }
    deb=$(ls "$work"/out/optscope_*.deb)
fi
[ -f "$deb" ] || fail "no package at $deb"
version=$(dpkg-deb -f "$deb" Version)

if [ ! -x "$base/usr/bin/apt-get" ]; then
    echo "install_in_bookworm: debootstrap --variant=minbase bookworm $base"
    rm -rf --one-file-system "$base" "$base.tmp"
    mkdir -p "$(dirname "$base")"
    debootstrap --variant=minbase bookworm "$base.tmp" "$mirror" >"$work/debootstrap.log" 2>&1 || {
        tail -20 "$work/debootstrap.log"
        fail "debootstrap --variant=minbase bookworm from $mirror"
    }
    mv "$base.tmp" "$base"
fi
echo "install_in_bookworm: fresh copy of $base"
cp -a "$base" "$root"
cat >"$root/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb $security_mirror bookworm-security main
EOF
cp /etc/resolv.conf "$root/etc/resolv.conf"
mount -t proc proc "$root/proc"
mount --bind /dev "$root/dev"
mount --bind /dev/pts "$root/dev/pts"
in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@"; }

cp "$deb" "$root/tmp/optscope.deb"
in_root dpkg-query -W -f='${Package}\n' >"$work/before"
echo "install_in_bookworm: $(wc -l <"$work/before") packages in the fresh root; apt-get install ./optscope.deb"
in_root apt-get update -q >"$work/apt.log" 2>&1 || {
    tail "$work/apt.log"
    fail "apt-get update"
}
DEBIAN_FRONTEND=noninteractive in_root apt-get install -y -q --no-install-recommends /tmp/optscope.deb \
    >>"$work/apt.log" 2>&1 || {
    tail -30 "$work/apt.log"
    fail "apt-get install of $(basename "$deb") into a fresh bookworm"
}
[ "$(in_root dpkg-query -W -f='${Status} ${Version}' optscope)" = "install ok installed $version" ] \
    || fail "dpkg does not list optscope $version as installed"
in_root dpkg-query -W -f='${Package}\n' >"$work/after"
echo "install_in_bookworm: installed with $(($(wc -l <"$work/after") - $(wc -l <"$work/before") - 1)) dependencies" \
    "($(du -shx "$root" | cut -f1) root)"

# what it installed runs, with nothing but the root's own libraries
out=$(in_root optscope-cli --version) || fail "optscope-cli --version"
[[ $out == *"$version"* ]] || fail "optscope-cli --version printed '$out'"
demo=/usr/share/optscope/demo/checkpoint
in_root optscope-cli inspect --json --hash "$demo" >"$work/inspect.json" || fail "inspect --hash of the demo"
python3 - "$work/inspect.json" <<'EOF' || fail "inspect --json --hash of the demo"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["format"] == "dcp", j["format"]
hashed = [e for e in j["entries"] if e.get("sha256")]
assert hashed and len(hashed) == j["summary"]["tensors"], (len(hashed), j["summary"])
print(f"install_in_bookworm: inspect --hash of the demo: {len(hashed)} tensors hashed")
EOF
in_root optscope-cli check "$demo" >"$work/check.txt" || fail "check of the demo: $(cat "$work/check.txt")"
in_root optscope-cli gather "$demo" -o /tmp/gathered.pt >"$work/gather.txt" 2>&1 \
    || fail "gather of the demo: $(cat "$work/gather.txt")"
in_root optscope-cli inspect --json /tmp/gathered.pt >"$work/gathered.json" || fail "inspect of the gathered file"
in_root optscope-cli verify --world-size 3 "$demo" >"$work/verify.txt" 2>&1 \
    || fail "verify --world-size 3 of the demo: $(tail -3 "$work/verify.txt")"
echo "install_in_bookworm: check, gather, verify --world-size 3 of the demo: OK ($(tail -1 "$work/verify.txt"))"
in_root env QT_QPA_PLATFORM=offscreen optscope --screenshot /tmp/demo.png >"$work/gui.txt" 2>&1 \
    || fail "optscope --screenshot (offscreen, bundled demo): $(tail -3 "$work/gui.txt")"
[ "$(head -c 8 "$root/tmp/demo.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] \
    || fail "optscope --screenshot did not write a PNG"
[ "$(stat -c %s "$root/tmp/demo.png")" -gt 20000 ] || fail "the screenshot is suspiciously small"
echo "install_in_bookworm: the GUI rendered the bundled demo offscreen ($(stat -c %s "$root/tmp/demo.png") bytes PNG)"
if [ -n "${OPTSCOPE_INSTALL_KEEP:-}" ]; then
    mkdir -p "$OPTSCOPE_INSTALL_KEEP"
    cp "$root/tmp/demo.png" "$work"/*.log "$work"/*.txt "$OPTSCOPE_INSTALL_KEEP/"
fi

# and goes away cleanly
in_root dpkg -L optscope | grep -E '^/usr/(bin|lib|share)/.*\.' >"$work/files" || true
DEBIAN_FRONTEND=noninteractive in_root apt-get purge -y -q optscope >>"$work/apt.log" 2>&1 || fail "apt-get purge"
for f in /usr/bin/optscope /usr/bin/optscope-cli $(cat "$work/files"); do
    [ ! -e "$root$f" ] || fail "$f is left after apt-get purge"
done
echo "install_in_bookworm: OK: optscope $version installs with apt on a fresh bookworm, runs, and purges cleanly"
