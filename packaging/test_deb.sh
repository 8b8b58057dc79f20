#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# CTest "packaging_deb" (label packaging): builds the .deb from a build tree with CPack and checks it.
#
#   packaging/test_deb.sh BUILD_DIR VERSION SOURCE_DIR
#
# Checks: file name and control fields (Package, Version, Architecture, Depends with the Qt 6, QCustomPlot, libtorch,
# OpenSSL, zlib and libstdc++ packages and nothing from CUDA), that every shared library the two binaries link
# directly belongs to a package named in Depends, the contents (binaries, .desktop entry, icons, demo checkpoint,
# copyright), and, from the package extracted with dpkg-deb -x, that optscope-cli runs (--version, inspect of a
# fixture and of the installed demo) and optscope answers --version (offscreen).
set -euo pipefail
build=$1
version=$2
source=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
    echo "FAIL: $*" >&2
    exit 1
}

(cd "$build" && cpack -G DEB -B "$work/out") >"$work/cpack.log" 2>&1 || {
    cat "$work/cpack.log"
    fail "cpack -G DEB failed"
}
arch=$(dpkg --print-architecture)
deb=$work/out/optscope_${version}_${arch}.deb
[ -f "$deb" ] || fail "no $(basename "$deb") in: $(ls "$work/out")"
echo "package: $(basename "$deb"), $(du -h "$deb" | cut -f1)"

# --- control fields -------------------------------------------------------------------------------------------
dpkg-deb -I "$deb" >/dev/null || fail "dpkg-deb -I cannot read the package"
[ "$(dpkg-deb -f "$deb" Package)" = optscope ] || fail "Package is '$(dpkg-deb -f "$deb" Package)'"
[ "$(dpkg-deb -f "$deb" Version)" = "$version" ] || fail "Version is '$(dpkg-deb -f "$deb" Version)'"
[ "$(dpkg-deb -f "$deb" Architecture)" = "$arch" ] || fail "Architecture is '$(dpkg-deb -f "$deb" Architecture)'"
[ -n "$(dpkg-deb -f "$deb" Maintainer)" ] || fail "no Maintainer"
[ -n "$(dpkg-deb -f "$deb" Description)" ] || fail "no Description"
depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
# the package names of a Depends line, one per line (versions and alternatives dropped)
depends_names=$(tr ',|' '\n\n' <<<"$depends" | sed -e 's/(.*)//' -e 's/^ *//' -e 's/ *$//' -e 's/:any$//' | sort -u)
for pkg in libqt6widgets6 libqt6printsupport6 libqcustomplot2.1-qt6 libtorch1.13 libssl3 zlib1g libstdc++6; do
    grep -qx "$pkg" <<<"$depends_names" || fail "Depends lacks $pkg"
done
if grep -Eqi 'cuda|nccl|cudnn|cublas' <<<"$depends"; then
    fail "Depends names a CUDA package (the CUDA runtime is static and NCCL is dlopen'ed)"
fi

# --- contents -------------------------------------------------------------------------------------------------
dpkg-deb -c "$deb" >"$work/contents"
paths=$(awk '{print $6}' "$work/contents" | sed 's|^\./|/|')
for f in /usr/bin/optscope /usr/bin/optscope-cli /usr/share/applications/optscope.desktop \
    /usr/share/icons/hicolor/scalable/apps/optscope.svg /usr/share/icons/hicolor/256x256/apps/optscope.png \
    /usr/share/optscope/demo/checkpoint/.metadata /usr/share/doc/optscope/copyright \
    /usr/lib/optscope/liboptscope_aten.so; do
    grep -qx "$f" <<<"$paths" || fail "the package lacks $f"
done
for f in /usr/bin/optscope /usr/bin/optscope-cli; do
    grep -Eq "^-rwxr-xr-x .* \.$f\$" "$work/contents" || fail "$f is not an executable file (rwxr-xr-x)"
done
if grep -Eq '/(build|tests|\.git)/' <<<"$paths"; then
    fail "build or test files in the package"
fi
# exactly what `cmake --install` installs (so that nothing an installed binary loads at run time is missing)
cmake --install "$build" --prefix "$work/stage" >/dev/null || fail "cmake --install"
(cd "$work/stage" && find . -type f -o -type l | sed 's|^\.|/usr|' | sort) >"$work/installed"
grep -v '/$' <<<"$paths" | grep -vx '/usr/share/doc/optscope/changelog.gz' | sort >"$work/packaged"
comm -3 "$work/installed" "$work/packaged" >"$work/differ"
[ ! -s "$work/differ" ] || fail "the package and cmake --install differ: $(tr '\n' ' ' <"$work/differ")"

dpkg-deb -x "$deb" "$work/root"
root=$work/root
cmp -s "$root/usr/share/doc/optscope/copyright" "$source/LICENSE" || fail "copyright is not LICENSE"
grep -q "GNU GENERAL PUBLIC LICENSE" "$root/usr/share/doc/optscope/copyright" || fail "copyright is not the GPL"
diff -r "$source/resources/demo/checkpoint" "$root/usr/share/optscope/demo/checkpoint" >/dev/null \
    || fail "the installed demo checkpoint differs from resources/demo/checkpoint"
desktop=$root/usr/share/applications/optscope.desktop
grep -qx 'Exec=optscope %f' "$desktop" || fail ".desktop Exec is not the installed binary"
grep -qx 'Icon=optscope' "$desktop" || fail ".desktop Icon does not name the installed icon"
grep -qx 'Type=Application' "$desktop" || fail ".desktop has no Type=Application"
if command -v desktop-file-validate >/dev/null; then
    desktop-file-validate "$desktop" || fail "desktop-file-validate"
fi

# --- every directly linked shared library comes from a package in Depends -------------------------------------
owner() { # package owning a library path (dpkg knows /lib and /usr/lib paths apart on merged-/usr systems)
    local p=$1 o
    for cand in "$p" "$(readlink -f "$p")" "${p#/usr}" "/usr${p#/usr}"; do
        o=$(dpkg -S "$cand" 2>/dev/null | head -1 | cut -d: -f1) && [ -n "$o" ] && {
            echo "$o"
            return
        }
    done
}
elfs=$(cd "$root" && find . -type f \( -path './usr/bin/*' -o -name '*.so*' \) | sed 's|^\./||')
for bin in $elfs; do
    ldd "$root/$bin" >"$work/ldd" || fail "ldd $bin"
    if grep -q "not found" "$work/ldd"; then
        fail "$bin: unresolved libraries: $(grep 'not found' "$work/ldd" | tr '\n' ' ')"
    fi
    for lib in $(objdump -p "$root/$bin" | awk '/NEEDED/ {print $2}'); do
        # "libX.so => /path (0x...)", or "/lib64/ld-linux-x86-64.so.2 (0x...)" for the dynamic loader
        path=$(awk -v l="$lib" '$1 == l {print $3; exit} substr($1, length($1) - length(l)) == "/" l {print $1; exit}' "$work/ldd")
        [ -n "$path" ] || fail "$bin: ldd does not resolve $lib"
        pkg=$(owner "$path")
        [ -n "$pkg" ] || fail "$bin: no package owns $lib ($path)"
        grep -qx "$pkg" <<<"$depends_names" || fail "$bin needs $lib from $pkg, which Depends does not name"
    done
done

# --- the packaged binaries run -----------------------------------------------------------------------------------
cli=$root/usr/bin/optscope-cli
out=$("$cli" --version)
[[ $out == *"$version"* ]] || fail "optscope-cli --version printed '$out'"
"$cli" inspect --json "$source/tests/data/adam_fp64.pt" >"$work/inspect.json" || fail "optscope-cli inspect of a fixture"
python3 - "$work/inspect.json" <<'EOF' || fail "inspect --json of a fixture"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["format"] == "torch_save", j["format"]
assert j["summary"]["tensors"] > 0 and j["summary"]["entries"] == len(j["entries"]), j["summary"]
EOF
# tensor hashes that need ATen (transposed, offset and expanded views), against the ones PyTorch computed
"$cli" inspect --json --hash "$source/tests/data/dtypes.pt" >"$work/dtypes.json" || fail "inspect --hash of a fixture"
python3 - "$work/dtypes.json" "$source/tests/data/manifest.json" <<'EOF' || fail "inspect --hash of dtypes.pt"
import json, sys
got = {e["key"]: e for e in json.load(open(sys.argv[1]))["entries"]}
want = [e for e in json.load(open(sys.argv[2]))["dtypes.pt"]["entries"] if "sha256" in e]
assert any(e["key"] == "layouts.transposed" for e in want)
for e in want:
    assert got[e["key"]].get("sha256") == e["sha256"], (e["key"], got[e["key"]].get("sha256"), e["sha256"])
print(f"{len(want)} tensor hashes equal to PyTorch's")
EOF
"$cli" inspect "$root/usr/share/optscope/demo/checkpoint" >"$work/demo.txt" || fail "optscope-cli inspect of the demo"
grep -Eq '^[0-9]+ entries: .*; dcp \(DCP' "$work/demo.txt" || fail "inspect of the demo: $(tail -1 "$work/demo.txt")"
out=$(QT_QPA_PLATFORM=offscreen "$root/usr/bin/optscope" --version 2>&1) || fail "optscope --version: $out"
[[ $out == *"$version"* ]] || fail "optscope --version printed '$out'"
echo "packaging: OK ($(grep -c . <<<"$paths") paths)"
