# SPDX-License-Identifier: GPL-3.0-or-later
"""inspect of the 1,024-rank DCP checkpoint through s3:// against the usual way, same machine, same run, same local S3
server (moto_server): issue 29's target "one GET for .metadata plus at most two other requests, bytes fetched <= 1.01x
the .metadata size, wall time <= 1.2x (local inspect + curl of .metadata)".

    python3 bench/remote/run_scale_remote.py [--cli build/app/optscope-cli] [--ranks 1024] [--runs 3]
                                             [--out bench/results/remote_scale.md]

Run from the repository root. The checkpoint is bench/scale/make_scale_checkpoint.py's (data files and .metadata,
written by PyTorch's own FileSystemWriter; made when missing, about 9 minutes and 2.8 GB at 1,024 ranks, in
bench/scale/out/cR), uploaded with boto3. Each command runs --runs times; the table gives the median wall time, the
largest peak RSS, and the requests and bytes OptScope's --remote-stats counted.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "remote"))
from servers import s3_put, start_moto, stop  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import remote_stats, timed, write_results  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--cli", default=os.path.join(ROOT, "build/app/optscope-cli"))
ap.add_argument("--ranks", type=int, default=1024)
ap.add_argument("--runs", type=int, default=3)
ap.add_argument("--out", default=os.path.join(ROOT, "bench/results/remote_scale.md"))
a = ap.parse_args()
TORCH_PYTHON = os.path.join(ROOT, "scripts/torch-python")
work = os.path.join(ROOT, "bench/scale/out")  # torch-python sees only its working folder: the checkpoint lies in it
name = f"c{a.ranks}"
ckpt = os.path.join(work, name)
os.makedirs(work, exist_ok=True)
for f in ("make_scale_metadata.py", "make_scale_checkpoint.py"):
    shutil.copy(os.path.join(ROOT, "bench/scale", f), work)
if not os.path.isfile(os.path.join(ckpt, ".metadata")):
    subprocess.run([TORCH_PYTHON, "-W", "ignore", "make_scale_checkpoint.py", name, str(a.ranks)], cwd=work,
                   check=True)


def runs(cmd, env=None):
    """(median seconds, largest peak RSS MB, last stderr) over --runs runs"""
    got = [timed(cmd, env) for _ in range(a.runs)]
    return statistics.median(g[0] for g in got), max(g[1] for g in got), got[-1][2]


procs = []
try:
    port = start_moto(TORCH_PYTHON, work, procs)
    t0 = time.monotonic()
    s3_put(TORCH_PYTHON, work, port, name, name)
    upload = time.monotonic() - t0
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
           "AWS_REGION": "us-east-1"}
    files = os.listdir(ckpt)
    size = sum(os.path.getsize(os.path.join(ckpt, n)) for n in files)
    meta = os.path.getsize(os.path.join(ckpt, ".metadata"))
    rows = []
    for label, args in (("inspect", []), ("inspect --json", ["--json"])):
        t_local, rss_local, _ = runs([a.cli, "inspect", *args, ckpt])
        t_curl, _, _ = runs(["curl", "-sf", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user", "bench:bench", "-o",
                             "/dev/null", f"http://127.0.0.1:{port}/ckpt/{name}/.metadata"])
        # boto3's transfer manager (ranged GETs of 8 MiB, 10 threads, as OptScope fetches): the seconds of the
        # download alone, not the interpreter's start
        t_boto3 = statistics.median(
            float(s3_put(TORCH_PYTHON, work, port, "--get", f"{name}/.metadata", "metadata.tmp").split()[-1])
            for _ in range(a.runs))
        os.unlink(os.path.join(work, "metadata.tmp"))
        t_remote, rss, err = runs([a.cli, "--remote-stats", "inspect", *args, f"s3://ckpt/{name}"], env)
        req, fetched = remote_stats(err)
        for tool, t_tool in (("curl (one GET)", t_curl), ("boto3 download_file", t_boto3)):
            base = t_local + t_tool
            rows.append((label, f"{t_remote:.2f} s", f"{base:.2f} s (local inspect {t_local:.2f} + {tool} of the "
                         f".metadata {t_tool:.2f})", f"{t_remote / base:.2f}x (target <= 1.2x)",
                         f"{req} requests (target <= 3), {fetched} bytes = {fetched / meta:.4f}x the .metadata "
                         f"(target <= 1.01x); peak RSS {rss:.0f} MB (local {rss_local:.0f} MB)"))
finally:
    stop(procs)

write_results(a.out, f"inspect of a {a.ranks}-rank DCP checkpoint through s3:// (moto_server on loopback)",
              f"Checkpoint: `bench/scale/make_scale_checkpoint.py {name} {a.ranks}` (PyTorch's FileSystemWriter; "
              f"{len(files)} objects, {size} bytes, .metadata {meta} bytes); upload with boto3 took {upload:.0f} s. "
              f"Machine: {os.cpu_count()} cores; {time.strftime('%Y-%m-%d')}. Median of {a.runs} runs.", rows)
