# SPDX-License-Identifier: GPL-3.0-or-later
"""Turn the raw results of bench/run_inspect_bench.sh (a work folder) into a table and bench/results/inspect.md.

    python3 bench/report_inspect.py WORKDIR OUT_MD
"""
import json
import os
import re
import sys

INSPECT_GOAL_S = 1.0  # "inspect --json well under 1 s"
HASH_GOAL_RATIO = 1.5  # "--hash within 1.5x of sha256sum over the same bytes"


def load(work, name):
    p = os.path.join(work, name)
    return json.load(open(p)) if os.path.exists(p) else None


def timings(work):
    out = {}
    for f in ("fast.json", "hash_t.json", "torch.json"):
        d = load(work, f)
        for r in (d or {}).get("results", []):
            times = sorted(r["times"])
            out[r["command"]] = {"median": r["median"], "mean": r["mean"], "sd": r.get("stddev") or 0.0,
                                 "min": times[0], "max": times[-1], "cpu": r["user"] + r["system"],
                                 "runs": len(times)}
    return out


def rss(work, name):
    p = os.path.join(work, f"rss_{name}.txt")
    if not os.path.exists(p):
        return None
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", open(p).read())
    return int(m.group(1)) if m else None


def main():
    work, out_md = sys.argv[1], sys.argv[2]
    env = dict(line.rstrip("\n").split("=", 1) for line in open(os.path.join(work, "env.txt")) if "=" in line)
    cmds = dict(line.rstrip("\n").split("\t", 1) for line in open(os.path.join(work, "cmds.tsv")))
    t = timings(work)
    summary = load(work, "inspect.json")["summary"]
    hashed = sum(1 for e in load(work, "hash.json")["entries"] if "sha256" in e)
    nbytes = int(env["distcp_bytes"])

    def med(n):
        return t[n]["median"] if n in t else None

    def mem(n):
        r = rss(n_work := work, n)
        split = load(n_work, f"split_{n}.json")
        if r is None:
            return "n/a"
        s = f"{r / 1024:.0f}"
        if split and split.get("peak_rss_anon_kb") is not None:
            s += f" ({split['peak_rss_anon_kb'] / 1024:.0f} anon / {split['peak_rss_file_kb'] / 1024:.0f} file)"
        return s

    def ratio(a, b):
        return f"{med(a) / med(b):.2f}x" if med(a) and med(b) else "n/a"

    labels = {
        "help": "optscope-cli --help (start-up only)",
        "inspect": "optscope-cli inspect --json",
        "hash": "optscope-cli inspect --hash --json",
        "sha256sum": "sha256sum over the .distcp files",
        "openssl": "openssl dgst -sha256 over the .distcp files",
        "hash1": "optscope-cli inspect --hash --json --threads 1",
        "torch": "PyTorch read_metadata (whole torch-python process)",
    }
    notes = {
        "help": "floor of every optscope-cli run",
        "inspect": f"{med('inspect') / INSPECT_GOAL_S:.3f}x of the 1 s goal" if med("inspect") else "",
        "hash": f"{ratio('hash', 'sha256sum')} of sha256sum (goal <= {HASH_GOAL_RATIO}x)",
        "sha256sum": "1.00x (yardstick)",
        "openssl": f"{ratio('openssl', 'sha256sum')} of sha256sum",
        "hash1": f"{ratio('hash1', 'openssl')} of openssl dgst",
        "torch": f"{ratio('torch', 'inspect')} of inspect --json",
    }
    rows = []
    for n in ("help", "inspect", "hash", "sha256sum", "openssl", "hash1", "torch"):
        if n not in t:
            continue
        r = t[n]
        rows.append([labels[n], f"{r['median']:.3f}", f"{r['min']:.3f}-{r['max']:.3f}", f"{r['cpu']:.3f}",
                     mem(n), notes[n]])
    head = ["measurement", "median wall s", "min-max s", "cpu s (mean)", "peak RSS MiB (anon / file)", "ratio"]

    # derived figures
    derived = []
    if med("inspect") and med("help"):
        own = med("inspect") - med("help")
        if own > 0.002:
            derived.append(f"inspect --json minus process start-up (--help): {1000 * own:.0f} ms "
                           f"(start-up is {100 * med('help') / med('inspect'):.0f}% of inspect --json)")
        else:
            derived.append(f"inspect --json and --help differ by {1000 * own:.1f} ms, within the noise: the "
                           "listing's own work is a few ms")
    for n, what in (("hash", "inspect --hash"), ("hash1", "inspect --hash --threads 1"), ("sha256sum", "sha256sum"),
                    ("openssl", "openssl dgst")):
        if med(n):
            line = f"{what}: {nbytes / med(n) / 1e9:.2f} GB/s over the whole process"
            if n.startswith("hash") and med("help"):
                line += f", {nbytes / (med(n) - med('help')) / 1e9:.2f} GB/s without start-up"
            derived.append(line)
    torch_inner = os.path.join(work, "torch_inner.txt")
    if env.get("torch") == "1" and os.path.exists(torch_inner):
        lines = [x.strip() for x in open(torch_inner) if x.startswith("import")]
        if lines:
            derived.append("inside torch-python: " + "; ".join(lines))
    if "hash" in t and "sha256sum" in t:
        derived.append(f"cpu time (user + sys), which another process on the machine disturbs far less than wall "
                       f"time: inspect --hash {t['hash']['cpu']:.2f} s = {t['hash']['cpu'] / t['sha256sum']['cpu']:.2f}x "
                       f"of sha256sum's {t['sha256sum']['cpu']:.2f} s; inspect --json {t['inspect']['cpu']:.3f} s"
                       if "inspect" in t else "")
    derived = [d for d in derived if d]
    goal_inspect = med("inspect") is not None and med("inspect") < INSPECT_GOAL_S
    hr = med("hash") / med("sha256sum") if med("hash") and med("sha256sum") else None
    goal_hash = hr is not None and hr <= HASH_GOAL_RATIO

    def table(fmt_md):
        w = [max(len(str(x[i])) for x in rows + [head]) for i in range(len(head))]
        if fmt_md:
            out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
            out += ["| " + " | ".join(r) + " |" for r in rows]
        else:
            out = ["  ".join(str(c).ljust(w[i]) for i, c in enumerate(head))]
            out += ["  ".join(str(c).ljust(w[i]) for i, c in enumerate(r)) for r in rows]
        return "\n".join(out)

    verdicts = [
        f"inspect --json: {med('inspect'):.3f} s, goal well under {INSPECT_GOAL_S:.0f} s: "
        f"{'met' if goal_inspect else 'NOT met'}",
        f"inspect --hash --json: {hr:.2f}x of sha256sum, goal <= {HASH_GOAL_RATIO}x: "
        f"{'met' if goal_hash else 'NOT met'}" if hr is not None else "inspect --hash: n/a",
    ]

    busy = [float(x) for x in env.get("busy", "0 0").split()]
    if max(busy) > 0.2:
        verdicts.append(f"WARNING: the machine was busy (other processes used {busy[0]:.2f} cores just before "
                        f"the timings and {busy[1]:.2f} just after): the timings are not trustworthy")
    else:
        verdicts.append(f"machine quiet before and after the timings ({busy[0]:.2f} and {busy[1]:.2f} cores busy "
                        "with other processes)")

    print()
    print(table(False))
    print()
    for d in derived + verdicts:
        print("- " + d)

    md = [
        "# inspect benchmark",
        "",
        f"Made by `bench/run_inspect_bench.sh` on {env['date_utc']}; see bench/README.md.",
        "",
        "## Machine",
        "",
        f"- {env['cores']} cores ({env['cpu']}), {env['mem']} memory, Linux {env['kernel']}, checkpoint on {env['fs']}",
        f"- optscope at {env['git']}, `{env['cli']}` (Release, no GUI, no CUDA)",
        f"- {env['hyperfine']}; {env['sha256sum']}; {env['openssl']}",
        "",
        "## Checkpoint",
        "",
        f"`{env['ckpt']}`: 4-rank FSDP2 AdamW DCP checkpoint made with real PyTorch by bench/make_big_checkpoint.py: "
        f"{env['distcp_files']} .distcp files, {nbytes:,} bytes; {summary['entries']} entries, {summary['tensors']} "
        f"tensors ({summary['tensor_bytes']:,} tensor bytes), {summary['values']} values; --hash gave {hashed} "
        "SHA-256s.",
        "",
        "## Results",
        "",
        f"Warm page cache: every .distcp file was read once and every command run once before timing, and hyperfine "
        f"ran one more untimed warm-up of each. {env['runs']} timed runs of the fast commands, {env['runs_hash']} of "
        "the hashing ones, 3 of PyTorch; the median is the figure to quote. cpu s = user + system (mean). Peak RSS is "
        "/usr/bin/time -v's maximum resident set size of one warm run; in brackets the peaks of RssAnon (memory the "
        "process allocated) and RssFile (mapped files: shared libraries and, for optscope-cli, the memory-mapped "
        "checkpoint pages, which are page cache, not allocations) sampled by bench/peak_mem.py.",
        "",
        table(True),
        "",
    ]
    md += ["- " + d for d in derived + verdicts]
    md += ["", "## Commands", "", "```"]
    md += [f"{n:10s} {c}" for n, c in cmds.items() if n in t]
    md += ["```", ""]
    extra = os.path.join(os.path.dirname(out_md), "inspect_notes.md")
    if os.path.exists(extra):
        md += [f"Where the time goes: see {os.path.basename(extra)}.", ""]
    os.makedirs(os.path.dirname(out_md) or ".", exist_ok=True)
    with open(out_md, "w") as f:
        f.write("\n".join(md))


if __name__ == "__main__":
    main()
