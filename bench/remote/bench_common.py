# SPDX-License-Identifier: GPL-3.0-or-later
"""What the remote benchmarks share: a timed run under GNU time and OptScope's --remote-stats line."""
import os
import subprocess


def timed(cmd, env=None, cwd=None):
    """(seconds, peak RSS in MB, stderr) of one run under GNU time; exits naming the command when it fails"""
    e = dict(os.environ, **(env or {}))
    p = subprocess.run(["/usr/bin/time", "-f", "TIME %e %M", *cmd], capture_output=True, text=True, env=e, cwd=cwd)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stderr}")
    line = [l for l in p.stderr.splitlines() if l.startswith("TIME ")][-1].split()
    return float(line[1]), int(line[2]) / 1024, p.stderr


def remote_stats(stderr):
    """(requests, bytes fetched) from the `remote: N requests, M bytes fetched, ...` line --remote-stats prints"""
    for l in stderr.splitlines():
        if l.startswith("remote: "):
            w = l.split()
            return int(w[1]), int(w[3])
    return 0, 0


def write_results(path, title, intro, rows):
    """the results file: a title, a paragraph, then one table row per (command, OptScope, the usual way, ratio, cost);
    printed too"""
    lines = [f"# {title}", "", intro, "", "| command | OptScope on s3:// | the usual way | ratio | cost |",
             "|---|---|---|---|---|"]
    lines += [f"| {' | '.join(r)} |" for r in rows]
    open(path, "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))
