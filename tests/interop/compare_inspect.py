# SPDX-License-Identifier: GPL-3.0-or-later
"""Interop: `optscope-cli inspect --json --hash` must agree with torch's own view (manifest.json) of every checkpoint.

    python3 compare_inspect.py OUTDIR OPTSCOPE_CLI

Runs with any python3 (no torch needed): the manifest was written by make_random_checkpoints.py under real PyTorch.
"""
import json
import subprocess
import sys


def main():
    out, cli = sys.argv[1], sys.argv[2]
    manifest = json.load(open(f"{out}/manifest.json"))
    print("torch", manifest["torch_version"], "seed", manifest.get("seed"))
    failures = []
    checked = 0
    for name, fx in manifest.items():
        if not isinstance(fx, dict) or "entries" not in fx:
            continue
        r = subprocess.run([cli, "inspect", f"{out}/{name}", "--json", "--hash"], capture_output=True, text=True)
        if r.returncode != 0:
            failures.append(f"{name}: exit {r.returncode}: {r.stderr.strip()[:500]}")
            continue
        report = json.loads(r.stdout)
        if report["format"] != fx["format"]:
            failures.append(f"{name}: format {report['format']} != {fx['format']}")
        got = {e["key"]: e for e in report["entries"]}
        want = {e["key"]: e for e in fx["entries"]}
        for key in sorted(set(want) - set(got)):
            failures.append(f"{name}: missing key {key}")
        for key in sorted(set(got) - set(want)):
            failures.append(f"{name}: extra key {key}")
        for key, e in want.items():
            g = got.get(key)
            if g is None:
                continue
            checked += 1
            if e["path"] != g["path"]:
                failures.append(f"{name}: {key}: path {g['path']} != {e['path']}")
            if e["type"] != g["type"]:
                failures.append(f"{name}: {key}: type {g['type']} != {e['type']}")
                continue
            fields = ("dtype", "shape", "sha256") if e["type"] == "tensor" else ("value",)
            for f in fields:
                if e[f] != g.get(f):
                    failures.append(f"{name}: {key}: {f} {g.get(f)!r} != torch {e[f]!r}")
            if "chunks" in e:
                gc = [{"offsets": c["offsets"], "sizes": c["sizes"]} for c in g["chunks"]]
                if gc != e["chunks"]:
                    failures.append(f"{name}: {key}: chunks {gc} != {e['chunks']}")
    print(f"checked {checked} entries in {sum(1 for v in manifest.values() if isinstance(v, dict))} checkpoints")
    for f in failures:
        print("FAIL", f)
    if checked == 0:
        print("FAIL nothing was checked")
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
