# SPDX-License-Identifier: GPL-3.0-or-later
"""What a waiting job costs its store (issue 32: the heartbeat's O(ranks) load), measured with real processes:

    python3 bench/job/heartbeat_load.py [--cli build/app/optscope-cli] [--ranks 8,32,96] [--seconds 10]

P processes of `gather` start with torchrun's variables (as tests/job/launch.sh sets them); rank 0, which serves the
job's store (c10d TCPStore) in its own process, is held at its "opened" pause point, so every other rank waits for it
for the layout it broadcasts, beating (every 250 ms, 2 ms per process from 125 on) and watching rank 0 and its neighbours. Over SECONDS the CPU time
of rank 0 (its store thread answering all of them, and its own beat) and of the waiting ranks is read from /proc.
Writes bench/results/job_store_load.md.
"""
import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ap = argparse.ArgumentParser()
ap.add_argument("--cli", default=os.path.join(ROOT, "build/app/optscope-cli"))
ap.add_argument("--ranks", default="8,32,128")
ap.add_argument("--seconds", type=float, default=10.0)
ap.add_argument("--out", default=os.path.join(ROOT, "bench/results/job_store_load.md"))
ap.add_argument("--ckpt", default=os.path.join(ROOT, "tests/data/fsdp2_r2"))
a = ap.parse_args()


def cpu_seconds(pid):
    """time on a CPU of all the process's threads, in ns (schedstat) rather than clock ticks (10 ms)"""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:
            pass  # a thread that ended
    return total / 1e9


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def settle(procs, window=2.0, limit=180):
    """waits until every rank has started and is only waiting: starting hundreds of processes (each loads libtorch
    and opens the checkpoint) takes both cores for tens of seconds here, which would be counted as the wait's cost"""
    deadline = time.time() + limit
    last = None
    while time.time() < deadline:
        before = sum(cpu_seconds(p.pid) for p in procs)
        time.sleep(window)
        rate = (sum(cpu_seconds(p.pid) for p in procs) - before) / window
        if last is not None and rate < 1.0 and abs(rate - last) <= 0.25 * max(last, 0.02):
            return True
        last = rate
    return False


def measure(n):
    work = tempfile.mkdtemp(prefix="hb")
    fifo = os.path.join(work, "pause")
    os.mkfifo(fifo + ".in")
    port = free_port()
    procs = []
    for r in range(n):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r), WORLD_SIZE=str(n),
                   LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(n), OPTSCOPE_JOB_TIMEOUT="600")
        if r == 0:
            env.update(OPTSCOPE_PAUSE_AT="opened", OPTSCOPE_PAUSE_FIFO=fifo)
        procs.append(subprocess.Popen([a.cli, "gather", a.ckpt, "-o", os.path.join(work, "out.pt")], env=env,
                                      stdout=subprocess.DEVNULL,
                                      stderr=open(os.path.join(work, f"rank{r}.err"), "w")))
    deadline = time.time() + 60
    while not os.path.exists(fifo + ".out") and time.time() < deadline:
        time.sleep(0.1)
    if not settle(procs):
        for p in procs:
            p.kill()
            p.wait()
        print(f"P={n}: the waiting ranks did not settle below one core in 180 s", flush=True)
        return None, None
    before = [cpu_seconds(p.pid) for p in procs]
    t0 = time.time()
    time.sleep(a.seconds)
    after = [cpu_seconds(p.pid) for p in procs]
    wall = time.time() - t0
    with open(fifo + ".in", "w") as f:
        f.write("go\n")
    codes = [p.wait(timeout=120) for p in procs]
    if any(codes):
        sys.exit(f"P={n}: exit codes {codes}; see {work}")
    rank0 = (after[0] - before[0]) / wall
    others = sum(after[r] - before[r] for r in range(1, n)) / wall
    return rank0, others


rows = []
for n in [int(x) for x in a.ranks.split(",")]:
    rank0, others = measure(n)
    if rank0 is None:
        rows.append((n, None, None))
        continue
    rows.append((n, rank0, others))
    print(f"P={n}: rank 0 {100 * rank0:.2f}% of a core, the {n - 1} waiting ranks {100 * others:.2f}% together "
          f"({100 * others / (n - 1):.3f}% each)", flush=True)
with open(a.out, "w") as f:
    f.write("# What a waiting job costs its store\n\n`python3 bench/job/heartbeat_load.py --ranks "
            f"{a.ranks} --seconds {a.seconds:g}`: P processes of gather, rank 0 held before it broadcasts the "
            "layout, every other rank waiting for it; CPU time over the window (schedstat, all threads), per second "
            "of wall time. Rank 0 serves the store (c10d TCPStore, one thread) besides its own beat.\n\n"
            "| P | rank 0 (store) | all waiting ranks | each waiting rank |\n|---:|---:|---:|---:|\n")
    for n, rank0, others in rows:
        if rank0 is None:
            f.write(f"| {n} | more than a core together, never settled | | |\n")
            continue
        f.write(f"| {n} | {100 * rank0:.2f}% | {100 * others:.2f}% | {100 * others / (n - 1):.3f}% |\n")
