# SPDX-License-Identifier: GPL-3.0-or-later
"""optscope-cli as a job of P processes against one process, same machine, same run (issue 32):

    python3 bench/job/run_job_bench.py [--cli build/app/optscope-cli] [--ckpt bench/out/fsdp2_4rank_2gb]
                                       [--out bench/results/job.md]

Run from the repository root. The processes are started by tests/job/launch.sh with torchrun's variables.
  - reshard (--world-size 8, --no-fsync), gather (--no-fsync), verify (--world-size 8) and check of the 1.9 GB 4-rank checkpoint, page-cached,
    P = 1 and 2: wall time (the best of two runs);
  - each source byte read once: the checkpoint served by nginx, reshard from http:// with --remote-stats for
    P = 1, 2, 4: the bytes all processes fetched, against the folder's size;
  - rendezvous and planning: reshard --dry-run of a 1,024-rank .metadata (bench/scale/make_scale_metadata.py,
    PyTorch's own classes), P = 1 and 2;
  - the projection for a 5.7 TB checkpoint on 8 nodes x 8 processes from the measured per-process throughput.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "remote"))
from servers import free_port, start_nginx, stop  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--cli", default=os.path.join(ROOT, "build/app/optscope-cli"))
ap.add_argument("--ckpt", default="bench/out/fsdp2_4rank_2gb")
ap.add_argument("--out", default=os.path.join(ROOT, "bench/results/job.md"))
a = ap.parse_args()
TORCH_PYTHON = os.path.join(ROOT, "scripts/torch-python")
WORK = os.path.join(ROOT, "bench/out/job")
LAUNCH = os.path.join(ROOT, "tests/job/launch.sh")
ckpt = os.path.abspath(a.ckpt)
if not os.path.isdir(ckpt):
    subprocess.run([TORCH_PYTHON, "bench/make_big_checkpoint.py", a.ckpt], cwd=ROOT, check=True)
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
env = dict(os.environ, TMPDIR=WORK)  # verify's scratch copy on the same disk as the outputs


def run(p, args, logs="logs"):
    """P processes of optscope-cli ARGS (P = 1: a plain run); (seconds, [stderr of each rank])"""
    t0 = time.monotonic()
    if p == 1:
        r = subprocess.run([a.cli] + args, capture_output=True, text=True, env=env)
        secs = time.monotonic() - t0
        if r.returncode not in (0, 1):
            sys.exit(f"failed: {args}: {r.stderr}")
        return secs, [r.stderr]
    d = os.path.join(WORK, logs)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    r = subprocess.run([LAUNCH, "torchrun", str(p), str(free_port()), d, a.cli] + args, capture_output=True, text=True,
                       env=env)
    secs = time.monotonic() - t0
    errs = [open(os.path.join(d, f"rank{i}.err")).read() for i in range(p)]
    if any(not l.endswith(" exit 0") and not l.endswith(" exit 1") for l in r.stdout.splitlines()):
        sys.exit(f"failed: {args}: {r.stdout} {errs}")
    return secs, errs


def best(p, args, reps=2, clean=None):
    times = []
    for _ in range(reps):
        if clean and os.path.isfile(clean):
            os.unlink(clean)
        elif clean:
            shutil.rmtree(clean, ignore_errors=True)
        # the previous run's output removed and written back first: otherwise the kernel throttles this run's
        # writes at its dirty-page limit (and discards the removed file's blocks), and whichever run comes later
        # looks slower
        subprocess.run(["sync"])
        times.append(run(p, args)[0])
    if clean and os.path.isfile(clean):
        os.unlink(clean)
    elif clean:
        shutil.rmtree(clean, ignore_errors=True)
    return min(times)


size = sum(os.path.getsize(os.path.join(ckpt, f)) for f in os.listdir(ckpt))
subprocess.run(["cat"] + [os.path.join(ckpt, f) for f in os.listdir(ckpt)], stdout=subprocess.DEVNULL)  # cached
rows = []
out = os.path.join(WORK, "resharded")
r1 = best(1, ["reshard", ckpt, "--world-size", "8", "--no-fsync", "-o", out], clean=out)
r2 = best(2, ["reshard", ckpt, "--world-size", "8", "--no-fsync", "-o", out], clean=out)
v1 = best(1, ["verify", ckpt, "--world-size", "8", "--json"])
v2 = best(2, ["verify", ckpt, "--world-size", "8", "--json"])
g1 = best(1, ["gather", ckpt, "--no-fsync", "-o", out + ".pt"], clean=out + ".pt")
g2 = best(2, ["gather", ckpt, "--no-fsync", "-o", out + ".pt"], clean=out + ".pt")
c1 = best(1, ["check", ckpt, "--json"])
c2 = best(2, ["check", ckpt, "--json"])
rows.append(("reshard 4 -> 8 ranks (--no-fsync)", r1, r2))
rows.append(("gather -o one.pt (--no-fsync)", g1, g2))
rows.append(("verify --world-size 8", v1, v2))
rows.append(("check (every byte read, CRC-32s)", c1, c2))

# each byte once: bytes fetched over HTTP by all processes together
procs = []
fetched = {}
try:
    port = start_nginx(os.path.dirname(ckpt), WORK, procs)[0]
    url = f"http://127.0.0.1:{port}/{os.path.basename(ckpt)}"
    for p in (1, 2, 4):
        shutil.rmtree(out, ignore_errors=True)
        _, errs = run(p, ["--remote-stats", "reshard", url, "--world-size", "8", "--no-fsync", "-o", out])
        per = [int(m.group(1)) for e in errs for m in [re.search(r"remote: \d+ requests, (\d+) bytes fetched", e)] if m]
        fetched[p] = per
    shutil.rmtree(out, ignore_errors=True)
finally:
    stop(procs)
meta = os.path.getsize(os.path.join(ckpt, ".metadata"))

# rendezvous and planning on a 1,024-rank .metadata
scale = os.path.join(ROOT, "bench/out/scale_1024_l8")
if not os.path.exists(os.path.join(scale, ".metadata")):
    subprocess.run([TORCH_PYTHON, "bench/scale/make_scale_metadata.py", os.path.relpath(scale, ROOT), "1024", "8"],
                   cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
d1 = best(1, ["reshard", scale, "--world-size", "2048", "--dry-run"], reps=3)
d2 = best(2, ["reshard", scale, "--world-size", "2048", "--dry-run"], reps=3)

gb = size / 1e9
per_proc = gb / r1  # GB/s of one process, reshard (read + write of every byte)
tb = 5.7e3
procs64 = 64
storage = 100.0  # GB/s, an assumed parallel file system or object store serving the 8 nodes
compute_bound = tb / (procs64 * per_proc)
storage_bound = 2 * tb / storage  # every byte read once and written once
lines = [
    "# optscope-cli as a job of P processes (issue 32)",
    "",
    f"`python3 bench/job/run_job_bench.py` on {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}; the processes "
    "started by `tests/job/launch.sh` with torchrun's variables; checkpoint "
    f"`{os.path.relpath(ckpt, ROOT)}` ({gb:.2f} GB, 4-rank FSDP2 DCP, page-cached); best of two runs.",
    "",
    "| command | P = 1 (s) | P = 2 (s) | speed-up |",
    "|---|---:|---:|---:|",
]
for name, t1, t2 in rows:
    lines.append(f"| {name} | {t1:.2f} | {t2:.2f} | {t1 / t2:.2f}x |")
lines += [
    "",
    "Each source byte read once (the checkpoint served by nginx, `--remote-stats` of every process: bytes fetched):",
    "",
    "| P | bytes fetched per process | sum | checkpoint size | sum / size |",
    "|---:|---|---:|---:|---:|",
]
for p, per in fetched.items():
    lines.append(f"| {p} | {', '.join(f'{b:,}' for b in per)} | {sum(per):,} | {size:,} | {sum(per) / size:.4f} |")
lines += [
    "",
    f"The excess over the size: every process reads the {meta:,}-byte `.metadata` to plan, and remote reads come "
    "in 64 KiB blocks: the blocks that hold an item's headers, and the block where one process's rows end and "
    "another's begin, are fetched by each process that needs them (about 64 KiB per item and process).",
    "",
    "Reading the table: on this 2-core machine a page-cached reshard or gather is a kernel copy at about "
    f"{gb / r1:.1f} GB/s that one process already runs with the CRC-32 on the second core (check and verify "
    "likewise keep both cores busy), and each further process first pays libtorch's start-up (about 0.45 s of CPU: "
    "c10d's TCPStore lives in libtorch_cpu, whose operator registry loads with it) and the plan. P = 2 does not pay "
    "off here, and the issue's 1.6x target is not met on this machine. The split itself is even (the bytes per "
    "process above); what scales is the number of cores, machines and disks behind the job, which this machine "
    "cannot show.",
    "",
    f"Rendezvous and planning, `reshard --dry-run --world-size 2048` of a 1,024-rank, 8-layer `.metadata` "
    f"({os.path.getsize(os.path.join(scale, '.metadata')):,} bytes, PyTorch's own classes): P = 1 {d1:.2f} s, "
    f"P = 2 {d2:.2f} s: {d2 - d1:+.2f} s for the rendezvous (libtorch's c10d loaded, TCPStore, the command lines "
    "compared).",
    "",
    "## Projection: 5.7 TB (405B parameters with Adam state) on 8 nodes x 8 processes",
    "",
    f"One process reshards at {per_proc:.2f} GB/s here (page-cached source, {gb:.2f} GB in {r1:.2f} s). 64 processes "
    f"at that rate: {compute_bound / 60:.1f} min; reading and writing every byte once through an assumed "
    f"{storage:.0f} GB/s of shared storage: {storage_bound / 60:.1f} min. The job takes the larger, about "
    f"{max(compute_bound, storage_bound) / 60:.0f} min (one process: {tb / per_proc / 3600:.1f} h at the same "
    "rate, if the storage kept up).",
]
with open(a.out, "w") as f:
    f.write("\n".join(lines) + "\n")
print("\n".join(lines))
