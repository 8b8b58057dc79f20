# SPDX-License-Identifier: GPL-3.0-or-later
"""optscope-cli as a torchrun or srun job (issue 32), on this machine:

    python3 job_test.py OPTSCOPE_CLI TEST_DATA WORKDIR [TORCH_PYTHON [PART]]

PART runs one part (CMake makes a test of each, so that ctest runs them beside each other and the other tests; one
test of all took 6 to 12 minutes, the longest of CI): "matrix" (reshard, gather, verify; PyTorch loads the output),
"pairs" (diff, check), "faults" (faults, torchrun's agent store, S3). Without it, all three.

Every run of several processes is started by launch.sh with exactly the variables `torchrun --no-python` or `srun`
sets; fault cases start the processes from here with the same variables and one changed. Checks:
  - diff of pairs of every kind (torch.save steps, DCP against its conversion, Trainer folders, --ranks, a
    tolerance) by 3 processes: rank 0's report byte-identical, every process exiting alike;
  - gather into one torch.save file by 2 and 3 processes: the file byte-identical to one process's;
  - check of fixtures with and without findings, and of damaged copies (a flipped tensor byte, a rank file cut
    short), by 2 and 3 processes: rank 0's report byte-identical, every process exiting alike;
  - reshard and verify over fixtures of every format with 2 and 3 processes (torchrun and Slurm variables): the files
    byte-identical to one process's, rank 0's --json/--csv byte-identical, the others silent, the same exit status;
  - the P=3 output loaded by real PyTorch (DCP's own loader) equal to the source (TORCH_PYTHON);
  - faults: a worker that fails at start, is killed mid-write (seen at once, not after the timeout), or whose disk
    is full (RLIMIT_FSIZE), a rank that
    never comes, a wrong port, another command line, an output folder one process cannot see (a private mount): every
    process exits non-zero within a bounded time, the message names the rank, and nothing is left at the output; a
    worker killed after its share: the others exit 0 at once, the output published;
  - real srun: a one-node Slurm cluster (munged, slurmctld, slurmd from Debian, on private ports and folders, started
    here as root) runs reshard and gather as `srun -n 3` jobs: the outputs byte-identical to one process's;
  - OPTSCOPE_JOB_TEST_QUICK=1 (the sanitizer build): every kind of case, on fewer fixtures, one output format (--json)
    and one process count per command where the full run tries several;
  - a reshard to S3 (moto_server) by 2 processes: the objects byte-identical to one process's local files; a gather
    from S3 by 3 processes: the one-process file; check --no-data of it by 3 processes: only rank 0 reads; a gather
    to S3 by 2, 3 and 6 processes (each its share of one multipart upload; at 2, shares of two parts; at 6, runs
    shorter than S3's 5 MiB part joined to others'): the one-process file byte for byte, loaded by PyTorch equal to
    its own conversion; a process killed mid-upload: no object, no upload left; a reshard by 2 processes over a
    prefix that holds a checkpoint: refused, every object kept; a 2-process reshard racing another run into one
    prefix: the job stops, the other checkpoint stays whole.
Only failures are printed as they happen (ctest shows a failed test's first lines); every check goes to
WORK/checks.log, and to the output with OPTSCOPE_TEST_VERBOSE=1. A process still running past its limit is described
by its threads' stacks (gdb) before it is killed.
"""
import os
import resource
import shutil
import select
import signal
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "remote"))
import servers  # noqa: E402

CLI, DATA, WORK = (os.path.abspath(p) for p in sys.argv[1:4])
TORCH_PYTHON = sys.argv[4] if len(sys.argv) > 4 and sys.argv[4] else None
PART = sys.argv[5] if len(sys.argv) > 5 and sys.argv[5] else None
TIMEOUT = 5  # OPTSCOPE_JOB_TIMEOUT for the fault cases (seconds): rendezvous and silence, under load too
# the sanitizer build (OPTSCOPE_JOB_TEST_QUICK=1, set by CMake) runs every kind of case on fewer fixtures, in one output
# format and one process count where the normal build tries several (--csv and text are printed from the same merged
# report as --json): it looks for memory and threading errors in the job code, which the full matrix of the normal
# build does not add to, and each process under ASan costs about 2 s of CPU
QUICK = os.environ.get("OPTSCOPE_JOB_TEST_QUICK") == "1"
VERBOSE = os.environ.get("OPTSCOPE_TEST_VERBOSE") == "1"
failures, passed = [], []


def check(ok, what):
    """a failure is printed at once; every check goes to WORK/checks.log, and to the output with
    OPTSCOPE_TEST_VERBOSE=1: ctest shows a failed test's output, and CI shows its first lines, which must be the
    failures, not sixty lines of passed checks"""
    line = ("ok    " if ok else "FAIL  ") + what
    with open(os.path.join(WORK, "checks.log"), "a") as log:
        log.write(line + "\n")
    if not ok or VERBOSE:
        print(line, flush=True)
    if not ok:
        failures.append(what)
    else:
        passed.append(what)


def run1(args, env=None):
    """one process, as today"""
    p = subprocess.run([CLI] + args, capture_output=True, text=True, env=env, timeout=600)
    return p.returncode, p.stdout, p.stderr


def launch(style, n, args, logs, env=None):
    """launch.sh: n processes with torchrun's or srun's variables; [(rank exit, stdout, stderr)]"""
    shutil.rmtree(logs, ignore_errors=True)
    os.makedirs(logs)
    e = dict(os.environ if env is None else env)
    p = subprocess.run([os.path.join(HERE, "launch.sh"), style, str(n), str(servers.free_port()), logs, CLI] + args,
                       capture_output=True, text=True, env=e, timeout=600)
    codes = {int(l.split()[1]): int(l.split()[3]) for l in p.stdout.splitlines() if l.startswith("rank ")}
    out = []
    for r in range(n):
        with open(f"{logs}/rank{r}.out") as o, open(f"{logs}/rank{r}.err") as er:
            out.append((codes.get(r), o.read(), er.read()))
    return out


def files_of(folder):
    return sorted(os.path.relpath(os.path.join(d, f), folder) for d, _, fs in os.walk(folder) for f in fs)


def same_tree(a, b):
    fa, fb = files_of(a), files_of(b)
    if fa != fb or not fa:
        return False
    for f in fa:
        with open(os.path.join(a, f), "rb") as x, open(os.path.join(b, f), "rb") as y:
            if x.read() != y.read():
                return False
    return True


SOURCES = ["adamw_fqn.pt", "fsdp2_r3", "fsdp1_r2", "fsdp1_sharded_r3", "hf/checkpoint-3", "hf/sharded",
           "zero/stage3/ckpt", "zero/stage2/universal", "megatron/distopt_fully_reshardable",
           "megatron/sharded_torch_dist", "torchtitan/dcp", "megatron/synthetic_gpt_tp2_pp2_dp2_fully"]
SOURCES_QUICK = ["adamw_fqn.pt", "fsdp2_r3", "hf/sharded", "zero/stage3/ckpt", "megatron/distopt_fully_reshardable"]


def matrix():
    for src in (SOURCES_QUICK if QUICK else SOURCES):
        name = src.replace("/", "_")
        path = os.path.join(DATA, src)
        ref = os.path.join(WORK, "ref", name)
        for d in ("ref", "torchrun2", "slurm3"):
            os.makedirs(os.path.join(WORK, d), exist_ok=True)
        rc, out1, err = run1(["reshard", path, "--world-size", "5", "-o", ref, "--json"])
        check(rc == 0, f"{src}: reshard by one process ({err.strip()[-200:]})")
        for style, n in (("torchrun", 2), ("slurm", 3)):
            dest = os.path.join(WORK, f"{style}{n}", name)
            res = launch(style, n, ["reshard", path, "--world-size", "5", "-o", dest, "--json"],
                         os.path.join(WORK, "logs", f"{name}.{style}{n}"))
            check(all(c == 0 for c, _, _ in res), f"{src}: reshard by {n} processes ({style}) exits 0 "
                  f"({[c for c, _, _ in res]}; {res[0][2].strip()[-300:]})")
            check(same_tree(ref, dest), f"{src}: {n} processes write the same bytes as one (every file, .metadata)")
            check(res[0][1] == out1.replace(ref, dest) and all(o == "" for _, o, _ in res[1:]),
                  f"{src}: rank 0 prints what one process prints, the others nothing")
        # gather into one torch.save file: the records at their planned offsets, the file byte-identical
        os.makedirs(os.path.join(WORK, "gather1"), exist_ok=True)
        one = os.path.join(WORK, "gather1", name + ".pt")
        rc, g1, err = run1(["gather", path, "-o", one, "--json"])
        check(rc == 0, f"{src}: gather by one process ({err.strip()[-200:]})")
        for style, n in (("torchrun", 3),) if QUICK else (("slurm", 2), ("torchrun", 3)):
            dest = os.path.join(WORK, f"gather{n}", name + ".pt")
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            res = launch(style, n, ["gather", path, "-o", dest, "--json"],
                         os.path.join(WORK, "logs", f"{name}.gather{n}"))
            with open(one, "rb") as a, open(dest, "rb") as b:
                same = a.read() == b.read()
            check(all(c == 0 for c, _, _ in res) and same and res[0][1] == g1.replace(one, dest)
                  and all(o == "" for _, o, _ in res[1:])
                  and not any(f.startswith(".") for f in os.listdir(os.path.dirname(dest))),
                  f"{src}: gather by {n} processes ({style}) writes the one-process file byte for byte, rank 0 "
                  f"prints what one process prints, no temporary left ({[c for c, _, _ in res]}; "
                  f"{res[0][2].strip()[-300:]})")
        # verify: the report rank 0 prints is the one-process report, byte for byte; every process agrees on the
        # exit status
        for fmt in ("--json",) if QUICK else ("--json", "--csv"):
            rc, v1, err = run1(["verify", path, "--world-size", "3", fmt])
            res = launch("torchrun", 3, ["verify", path, "--world-size", "3", fmt],
                         os.path.join(WORK, "logs", f"{name}.verify"))
            check(rc == 0 and all(c == rc for c, _, _ in res) and res[0][1] == v1 and v1
                  and all(o == "" for _, o, _ in res[1:]),
                  f"{src}: verify {fmt} by 3 processes prints the one-process report ({[c for c, _, _ in res]}, "
                  f"{rc}; {res[0][2].strip()[-200:]})")


DIFFS = [["diff/step3.pt", "diff/step4.pt"], ["diff/complex_step2.pt", "diff/complex_step4.pt"],
         ["fsdp2_r3", "fsdp2_r3_converted.pt"], ["hf/checkpoint-3", "hf/checkpoint-changed"],
         ["diff/step4.pt", "diff/step4_bf16.pt", "--rtol", "1e-2"], ["fsdp2_r3", "--ranks", "0,2"]]


def diffs():
    """diff by 3 processes: rank 0 prints the one-process report, byte for byte, every process exits alike"""
    for case in (DIFFS[::2] if QUICK else DIFFS):
        args = ["diff"] + [os.path.join(DATA, a) if "/" in a or a.endswith(".pt") or a == "fsdp2_r3" else a
                           for a in case]
        for fmt in ("--json",) if QUICK else ("--json", "--csv", None):
            full = args + ([fmt] if fmt else [])
            rc, out1, err = run1(full)
            res = launch("slurm", 3, full, os.path.join(WORK, "logs", "diff"))
            check(rc in (0, 1) and out1 and all(c == rc for c, _, _ in res) and res[0][1] == out1
                  and all(o == "" for _, o, _ in res[1:]),
                  f"diff {' '.join(case)} {fmt or '(text)'} by 3 processes prints the one-process report "
                  f"(exit {rc}, {[c for c, _, _ in res]}; {res[0][2].strip()[-200:]})")


CHECKS = ["fsdp2_r3", "fsdp1_sharded_r3", "adamw_fqn.pt", "zero/stage3/ckpt", "hf/checkpoint-3", "torchtitan/dcp",
          "megatron/distopt_fully_reshardable", "diag/dcp_gap", "diag/dcp_overlap", "nonfinite/nonfinite_dcp_r2",
          "hostile/dcp_dotdot", "adam_step_mismatch.pt", "sgd_momentum.pt"]
CHECKS_QUICK = ["fsdp2_r3", "adamw_fqn.pt", "diag/dcp_gap", "nonfinite/nonfinite_dcp_r2"]


def damaged_copies():
    """a torch.save file with one tensor byte flipped (its record's CRC-32 no longer matches) and a DCP folder with a
    rank file cut short (the reader's chunk-out-of-range findings, completed by the process that reads the chunk)"""
    import struct
    import zipfile
    bad = os.path.join(WORK, "damaged")
    shutil.rmtree(bad, ignore_errors=True)
    os.makedirs(bad)
    crc = os.path.join(bad, "crc.pt")
    shutil.copy(os.path.join(DATA, "adamw_fqn.pt"), crc)
    record = [i for i in zipfile.ZipFile(crc).infolist() if "/data/" in i.filename][3]
    with open(crc, "r+b") as f:
        f.seek(record.header_offset + 26)
        name, extra = struct.unpack("<HH", f.read(4))
        at = record.header_offset + 30 + name + extra + 1
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x40]))
    cut = os.path.join(bad, "cut")
    shutil.copytree(os.path.join(DATA, "fsdp2_r3"), cut)
    os.truncate(os.path.join(cut, "__1_0.distcp"), os.path.getsize(os.path.join(cut, "__1_0.distcp")) - 5000)
    return [crc, cut]


def checks():
    """check by 2 and 3 processes (tensors split by bytes, findings merged on rank 0): rank 0 prints the one-process
    report byte for byte, every process exits as one process does (findings: 1)"""
    for path in [os.path.join(DATA, c) for c in (CHECKS_QUICK if QUICK else CHECKS)] + damaged_copies():
        name = os.path.relpath(path, DATA) if path.startswith(DATA) else os.path.basename(path) + " (damaged)"
        # (--no-data: metadata only, read by rank 0 alone; every process must still exit as rank 0 does)
        variants = (("--json", "torchrun", 3), (None, "slurm", 2), ("--no-data", "torchrun", 2))
        for fmt, style, n in variants[::2] if QUICK else variants:
            args = ["check", path] + ([fmt] if fmt else [])
            rc, out1, err = run1(args)
            res = launch(style, n, args, os.path.join(WORK, "logs", "check"))
            check(rc in (0, 1) and out1 and all(c == rc for c, _, _ in res) and res[0][1] == out1
                  and all(o == "" for _, o, _ in res[1:]),
                  f"{name}: check {fmt or '(text)'} by {n} processes prints the one-process report (exit {rc}, "
                  f"{[c for c, _, _ in res]}; {res[0][2].strip()[-200:]})")


def torch_loads():
    if not TORCH_PYTHON:
        check(True, "PyTorch loads (skipped: no TORCH_PYTHON)")
        return
    # the chroot sees only its working folder: copy the sources and the outputs there
    # (torchtitan's BytesIO values compare by identity); the quick run reshards fsdp2_r3 only
    for src in ("fsdp2_r3",) if QUICK else ("fsdp2_r3", "fsdp1_r2"):
        name = src.replace("/", "_")
        here = os.path.join(WORK, "torch", name)
        shutil.rmtree(here, ignore_errors=True)
        shutil.copytree(os.path.join(DATA, src), os.path.join(here, "src"))
        shutil.copytree(os.path.join(WORK, "slurm3", name), os.path.join(here, "out"))
        rc, said = servers.torch_check(TORCH_PYTHON, here, "load-dcp", "out", "src")
        check(rc == 0 and "equal" in said, f"{src}: PyTorch's DCP loader reads the 3-process reshard, equal to the "
              f"source ({said})")
    # the 3-process gather, torch.load(weights_only=True) against PyTorch's own conversion of the same checkpoint
    here = os.path.join(WORK, "torch", "gather")
    shutil.rmtree(here, ignore_errors=True)
    os.makedirs(here)
    shutil.copy(os.path.join(WORK, "gather3", "fsdp2_r3.pt"), here)
    shutil.copy(os.path.join(DATA, "fsdp2_r3_converted.pt"), here)
    rc, said = servers.torch_check(TORCH_PYTHON, here, "load-pt", "fsdp2_r3.pt", "fsdp2_r3_converted.pt")
    check(rc == 0 and "equal" in said, f"fsdp2_r3: torch.load reads the 3-process gather, equal to PyTorch's "
          f"dcp_to_torch_save ({said})")


def agent_store():
    """torchrun >= 2.x: its agent serves the store (PyTorch 2.6's own TCPStore), the workers are all clients"""
    if not TORCH_PYTHON:
        check(True, "torchrun's agent store (skipped: no TORCH_PYTHON)")
        return
    here = os.path.join(WORK, "agent")
    os.makedirs(here, exist_ok=True)
    shutil.copy(os.path.join(HERE, "agent_store.py"), here)
    port = servers.free_port()
    server = subprocess.Popen([TORCH_PYTHON, "agent_store.py", str(port)], cwd=here, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        ready = server.stdout.readline().strip()
        src = os.path.join(DATA, "fsdp2_r3")
        dest = os.path.join(here, "out")
        procs = [subprocess.Popen([CLI, "reshard", src, "--world-size", "5", "-o", dest], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True,
                                  env=job_env(r, 3, port, TORCHELASTIC_USE_AGENT_STORE="True",
                                              TORCHELASTIC_RESTART_COUNT="0")) for r in range(3)]
        codes, errs, secs = finish(procs, 60)
        # Debian's libtorch 1.13 client predates the 2.x store protocol: then a clear error with the way out (on a
        # build against the agent's own libtorch the job runs on that store)
        worked = codes == [0, 0, 0] and same_tree(reference("fsdp2_r3"), dest)
        refused = all(c == 2 for c in codes) and all("TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in e for e in errs) \
            and not os.path.exists(dest)
        check(ready == "ready" and (worked or refused) and secs < 30,
              f"3 processes given the store torchrun's agent serves (PyTorch 2.6's TCPStore): "
              f"{'the one-process bytes' if worked else 'a clear error naming the way out'} in {secs:.1f} s "
              f"({codes}; {errs[0].strip()[-300:]})")
    finally:
        server.stdin.close()
        servers.stop([server])


def job_env(r, n, port, **extra):
    e = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r), WORLD_SIZE=str(n),
             LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(n), OPTSCOPE_JOB_TIMEOUT=str(TIMEOUT))
    e.update(extra)
    return e


def start(r, n, port, args, preexec=None, cwd=None, **extra):
    return subprocess.Popen([CLI] + args, env=job_env(r, n, port, **extra), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=preexec, cwd=cwd)


def finish(procs, limit):
    """waits for every process; (exit codes, stderrs, seconds); a process still running after limit is a failure"""
    t0 = time.monotonic()
    codes, errs = [], []
    for p in procs:
        try:
            _, err = p.communicate(timeout=max(1, limit - (time.monotonic() - t0)))
        except subprocess.TimeoutExpired:
            where = threads_of(p.pid)
            p.kill()
            _, err = p.communicate()
            err = f"STILL RUNNING after the limit ({where}); " + err
        codes.append(p.returncode)
        errs.append(err)
    return codes, errs, time.monotonic() - t0


def threads_of(pid):
    """where a process that hangs is: each thread's stack (gdb, when this machine has it), else each thread's name,
    state and kernel wait channel"""
    if shutil.which("gdb"):
        try:
            p = subprocess.run(["gdb", "-p", str(pid), "-batch", "-nx", "-ex", "thread apply all bt 12"],
                               capture_output=True, text=True, timeout=60)
            frames = [ln for ln in p.stdout.splitlines() if ln.startswith(("#", "Thread "))]
            if frames:
                return " / ".join(frames)
        except subprocess.TimeoutExpired:
            pass
    found = []
    for t in sorted(os.listdir(f"/proc/{pid}/task")):
        try:
            with open(f"/proc/{pid}/task/{t}/stat") as f:
                stat = f.read()
            with open(f"/proc/{pid}/task/{t}/wchan") as f:
                wchan = f.read().strip()
            found.append(f"{stat[stat.index('(') + 1:stat.rindex(')')]} {stat[stat.rindex(')') + 2]} {wchan}")
        except OSError:
            pass
    return "; ".join(found)


def paused_at(fifo, proc, limit=120):
    """the pause point @p proc says it reached (its line on FIFO.out), or why it said none: it exited first, or
    the limit passed (a blocking open of the FIFO waited for ever when the process exited before its pause point)"""
    fd = os.open(fifo + ".out", os.O_RDONLY | os.O_NONBLOCK)
    try:
        said, deadline = b"", time.monotonic() + limit
        while b"\n" not in said:
            exited = proc.poll() is not None  # (asked before the read: what it wrote before it exited is read)
            ready, _, _ = select.select([fd], [], [], 0.1)
            chunk = os.read(fd, 256) if ready else b""
            said += chunk
            if b"\n" in said:
                break
            if exited:
                return f"(exited with {proc.returncode} before a pause point)"
            if time.monotonic() > deadline:
                return f"(no pause point in {limit} s)"
            if not chunk:
                time.sleep(0.05)  # no writer yet: the FIFO reads as at its end at once
        return said.split(b"\n")[0].decode()
    finally:
        os.close(fd)


def pause_fifos(name):
    """fresh FIFOs NAME.in and NAME.out under WORK for OPTSCOPE_PAUSE_FIFO (a process paused at a pause point); their
    common path"""
    fifo = os.path.join(WORK, name)
    for s in (".in", ".out"):
        if os.path.exists(fifo + s):
            os.unlink(fifo + s)
        os.mkfifo(fifo + s)
    return fifo


def nothing_left(parent):
    return os.listdir(parent) == []


def suspended_job(args, out, parent, bound):
    """the whole job suspended for longer than its timeout and the store watchdog's, then resumed, as Slurm's
    `scontrol suspend` and `resume` do (SIGSTOP to every process, then SIGCONT, one after the other). A process
    that did not run itself says nothing of the store's or the others' silence over that time: the job completes.
    Before, (a) with rank 0 (which serves the store) stopped first and woken last, the others timed their calls in
    flight to it from before the suspension and ended themselves ("the job's store did not answer"); (b) with rank 1
    stopped first and woken last, rank 0 woke, found rank 1's beat unmoved for longer than the timeout and declared
    it gone ("stopped answering"), though it had not run itself for most of that time"""
    for first in (0, 1):
        port = servers.free_port()
        fifo = pause_fifos("suspend")
        procs = [start(0, 3, port, args, OPTSCOPE_JOB_TIMEOUT="3")]
        procs.append(start(1, 3, port, args, OPTSCOPE_JOB_TIMEOUT="3", OPTSCOPE_PAUSE_AT="writing",
                           OPTSCOPE_PAUSE_FIFO=fifo))
        procs.append(start(2, 3, port, args, OPTSCOPE_JOB_TIMEOUT="3"))
        paused_at(fifo, procs[1])
        time.sleep(1)  # ranks 0 and 2 are done with their shares and wait for rank 1
        rest = [p for r, p in enumerate(procs) if r != first]
        procs[first].send_signal(signal.SIGSTOP)
        time.sleep(1.5)  # (a) the others' next beats are sent to the stopped store; (b) rank 0 reads rank 1's last
        for p in rest:
            p.send_signal(signal.SIGSTOP)
        time.sleep(10)  # over the timeout (3 s) and the store watchdog's (the timeout and 5 s)
        for p in rest:
            p.send_signal(signal.SIGCONT)
        time.sleep(1.5)  # under the timeout: the others' watchdogs and waits look (every second)
        procs[first].send_signal(signal.SIGCONT)
        while procs[1].poll() is None:  # rank 1 released, unless it has ended (a blocking open would wait for ever)
            try:
                fd = os.open(fifo + ".in", os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # ENXIO: not reading it (yet)
                time.sleep(0.05)
                continue
            os.write(fd, b"go\n")
            os.close(fd)
            break
        codes, errs, secs = finish(procs, bound + 10)
        check(codes == [0, 0, 0] and os.path.isdir(out) and len(os.listdir(parent)) == 1,
              f"the whole job suspended for 10 s (its timeout 3 s), rank {first} first, and resumed, rank {first} "
              f"last: it completes ({codes}; {max(errs, key=len).strip()[-200:]})")
        shutil.rmtree(out, ignore_errors=True)


def faults():
    src = os.path.join(DATA, "hf/checkpoint-3")
    parent = os.path.join(WORK, "faults")
    shutil.rmtree(parent, ignore_errors=True)
    os.makedirs(parent)
    out = os.path.join(parent, "out")
    args = ["reshard", src, "--world-size", "7", "-o", out]
    bound = 2 * TIMEOUT + 10  # the job's timeout, start-up and clean-up (under load and ASan)
    for command in (args, ["gather", os.path.join(DATA, "fsdp2_r3"), "-o", os.path.join(parent, "one.pt")]):
        worker_faults(command, parent, bound)

    # a worker that fails at start (a rank outside the world): the others hear it never joined
    port = servers.free_port()
    procs = [start(0, 3, port, args), start(1, 3, port, args), start(2, 3, port, args, RANK="3")]
    codes, errs, secs = finish(procs, bound)
    check(all(c not in (0, None) for c in codes) and "rank 2 never joined" in errs[0] and nothing_left(parent)
          and secs < bound, f"a worker that fails at start: all exit non-zero in {secs:.1f} s, rank 0 names it "
          f"({codes}; {errs[0].strip()[-200:]})")

    # --help in a job: rank 0 prints it, the others stay quiet; none waits for the others (here rank 0 is not even
    # started; each printed it, the command's after a rendezvous)
    # ('--json --help': help after a flag that takes no value; it joined the job and printed on every rank)
    for helped in (["--help"], ["reshard", "--help"], ["check", "-h"], ["gather", "--json", "--help"],
                   ["diff", "--all", "-h", "x"], ["check", "--remote-stats", "x", "--help"]):
        port = servers.free_port()
        procs = [start(1, 3, port, helped), start(2, 3, port, helped)]
        outs = [p.communicate(timeout=bound) for p in procs]
        zero = subprocess.run([CLI] + helped, env=job_env(0, 3, port), capture_output=True, text=True, timeout=bound)
        check(all(p.returncode == 0 and o == ("", "") for p, o in zip(procs, outs)) and zero.returncode == 0
              and "usage" in zero.stdout.lower(), f"{' '.join(helped)} in a job: only rank 0 prints it, at once "
              f"({[p.returncode for p in procs]}, {outs}, rank 0: {zero.returncode} {zero.stdout[:80]!r})")

    # an output named -h ('-o -h') is no help: the job runs and writes it (the help check reads the command's options)
    port = servers.free_port()
    hargs = ["gather", os.path.join(DATA, "fsdp2_r3"), "-o", "-h"]
    codes, errs, secs = finish([start(r, 2, port, hargs, cwd=parent) for r in range(2)], bound)
    check(codes == [0, 0] and os.path.isfile(os.path.join(parent, "-h")),
          f"'-o -h' in a job is an output, not help ({codes}; {errs[0].strip()[-200:]})")
    os.remove(os.path.join(parent, "-h"))

    # a usage error in a job (verify --against compares as one process): every process says it and exits 2, the
    # usage text comes once, from rank 0 (every process printed it)
    port = servers.free_port()
    vargs = ["verify", os.path.join(DATA, "fsdp2_r3"), "--against", os.path.join(DATA, "fsdp2_r2")]
    codes, errs, secs = finish([start(r, 3, port, vargs) for r in range(3)], bound)
    check(codes == [2, 2, 2] and all("--against runs as one process" in e for e in errs)
          and "usage: optscope-cli verify" in errs[0] and not any("usage:" in e for e in errs[1:]),
          f"a usage error in a job: every process says it, the usage text from rank 0 only ({codes}; "
          f"{[e.strip()[-160:] for e in errs]})")

    not_shared(parent, bound)
    self_connect(bound)

    # verify with rank 0 killed while the scratch copy is written: its scratch folder (rank 0's, which only rank 0
    # removed) is removed by the others once rank 0 is dead; it was left behind, a whole resharded copy when killed
    # later (found by a hunt)
    scratch = os.path.join(parent, "tmp")
    os.makedirs(scratch)
    port = servers.free_port()
    fifo = pause_fifos("pausev")
    vargs = ["verify", os.path.join(DATA, "fsdp2_r3"), "--world-size", "3"]
    procs = [start(0, 3, port, vargs, OPTSCOPE_PAUSE_AT="writing", OPTSCOPE_PAUSE_FIFO=fifo, TMPDIR=scratch),
             start(1, 3, port, vargs, TMPDIR=scratch), start(2, 3, port, vargs, TMPDIR=scratch)]
    said = paused_at(fifo, procs[0])
    left_while_paused = os.listdir(scratch)
    time.sleep(2)
    procs[0].kill()
    codes, errs, secs = finish(procs, bound)
    check(said == "writing" and len(left_while_paused) == 1 and codes[1] not in (0, None)
          and codes[2] not in (0, None) and os.listdir(scratch) == [] and secs < bound,
          f"verify, rank 0 killed mid-write: the others exit non-zero in {secs:.1f} s and remove its scratch folder "
          f"({codes}; scratch while paused {left_while_paused}, after {os.listdir(scratch)}; "
          f"{errs[1].strip()[-160:]})")
    shutil.rmtree(scratch)

    # a rank that never comes: the rendezvous ends with an error, not a hang, and every process that came names it
    # (rank 0 exited at once after saying so, and in about 2 runs of 5 the others only said that they lost rank 0's
    # store: three runs, as the race needs)
    for attempt in range(3):
        port = servers.free_port()
        procs = [start(0, 4, port, args), start(1, 4, port, args), start(3, 4, port, args)]
        codes, errs, secs = finish(procs, bound)
        check(all(c not in (0, None) for c in codes) and all("rank 2 never joined" in e for e in errs)
              and secs < bound and nothing_left(parent), f"a rank that never comes ({attempt + 1} of 3): all exit "
              f"non-zero in {secs:.1f} s, each naming it ({codes}; "
              + "; ".join(e.strip()[-160:] for e in errs) + ")")

    # a MASTER_ADDR that does not resolve: said so, not a socket timeout after the whole timeout (found by a hunt)
    procs = [start(1, 2, servers.free_port(), args, MASTER_ADDR="no-such-host.invalid")]
    codes, errs, secs = finish(procs, bound)
    check(codes == [2] and "'no-such-host.invalid' does not resolve" in errs[0] and secs < bound,
          f"an unresolvable MASTER_ADDR: exit 2 in {secs:.1f} s, saying so ({codes}; {errs[0].strip()[-200:]})")

    # a wrong port on one process
    port = servers.free_port()
    procs = [start(0, 2, port, args), start(1, 2, servers.free_port(), args)]
    codes, errs, secs = finish(procs, bound)
    check(all(c not in (0, None) for c in codes) and "did not meet" in errs[1] and secs < bound
          and nothing_left(parent), f"a wrong MASTER_PORT: both exit non-zero in {secs:.1f} s "
          f"({codes}; {errs[1].strip()[-200:]})")

    # another command line on one process
    port = servers.free_port()
    other = ["reshard", src, "--world-size", "6", "-o", out]
    procs = [start(0, 2, port, args), start(1, 2, port, other)]
    codes, errs, secs = finish(procs, bound)
    check(all(c == 2 for c in codes) and "another command line" in errs[0] and nothing_left(parent),
          f"another command line on rank 1: both exit 2 ({codes}; {errs[0].strip()[-200:]})")

    # processes that do not agree on the job (found by hunt 11): each was a wrong output or a hang before
    # - one told another job size: a reshard was published without that rank's files, exit 0
    port = servers.free_port()
    procs = [start(0, 3, port, args), start(1, 3, port, args), start(2, 3, port, args, WORLD_SIZE="4")]
    codes, errs, secs = finish(procs, bound)
    check(all(c not in (0, None) for c in codes) and "rank 2 was told the job has 4 processes" in errs[0]
          and nothing_left(parent) and secs < bound, f"a process told another WORLD_SIZE: all exit non-zero in "
          f"{secs:.1f} s, rank 0 names it ({codes}; {errs[0].strip()[-200:]})")
    # - two processes that say the same rank (and no rank 2): every process waited without a bound
    port = servers.free_port()
    procs = [start(0, 3, port, args), start(1, 3, port, args), start(1, 3, port, args)]
    codes, errs, secs = finish(procs, bound)
    check(all(c not in (0, None) for c in codes) and any("two processes say they are rank 1" in e for e in errs)
          and nothing_left(parent) and secs < bound, f"RANK given twice: all exit non-zero in {secs:.1f} s, naming "
          f"it ({codes}; {' | '.join(e.strip()[-120:] for e in errs)})")
    # - command lines that differ in a URL's query (each process presigned its own URL): refused, and the token of
    #   neither is shown (rank 0 printed rank 1's whole command line)
    port = servers.free_port()
    url = "http://127.0.0.1:9/ckpt/x.pt?X-Amz-Signature="
    procs = [start(r, 2, port, ["gather", url + secret, "--against=" + url + secret, "-o", "one.pt"], cwd=parent)
             for r, secret in ((0, "rank0SECRETsig"), (1, "rank1SECRETsig"))]
    codes, errs, secs = finish(procs, bound)
    check(codes == [2, 2] and "queries differ; not shown" in errs[0] and not any("SECRET" in e for e in errs)
          and nothing_left(parent), f"command lines that differ in a URL's query: refused, no token shown ({codes}; "
          f"{errs[0].strip()[:200]})")
    # - the same relative path run from two folders is two checkpoints: they were mixed into one output, exit 0
    for folder, fixture in (("cwd_a", "fsdp2_r3"), ("cwd_b", "fsdp2_r2")):
        shutil.rmtree(os.path.join(WORK, folder), ignore_errors=True)
        shutil.copytree(os.path.join(DATA, fixture), os.path.join(WORK, folder, "ck"))
    port = servers.free_port()
    one = os.path.join(parent, "one.pt")
    rel = ["gather", "ck", "-o", one]
    procs = [start(0, 2, port, rel, cwd=os.path.join(WORK, "cwd_a")), start(1, 2, port, rel, cwd=os.path.join(WORK, "cwd_b"))]
    codes, errs, secs = finish(procs, bound)
    check(codes == [2, 2] and "rank 1 resolves the paths of the command line to" in errs[0]
          and os.path.join(WORK, "cwd_b", "ck") in errs[0] and nothing_left(parent),
          f"one relative path in two folders: both exit 2, naming both ({codes}; {errs[0].strip()[-220:]})")
    # - an output given as --output=REL, run from two folders: two outputs (the '=' form was not resolved: the ranks
    #   waited for a temporary the other could not see and blamed the file system)
    port = servers.free_port()
    rel = ["gather", os.path.join(DATA, "fsdp2_r3"), "--output=g.pt"]
    procs = [start(0, 2, port, rel, cwd=os.path.join(WORK, "cwd_a")), start(1, 2, port, rel, cwd=os.path.join(WORK, "cwd_b"))]
    codes, errs, secs = finish(procs, bound)
    check(codes == [2, 2] and "rank 1 resolves the paths of the command line to" in errs[0]
          and os.path.join(WORK, "cwd_b", "g.pt") in errs[0]
          and not any(os.path.exists(os.path.join(WORK, d, "g.pt")) for d in ("cwd_a", "cwd_b")),
          f"--output=REL in two folders: both exit 2, naming both ({codes}; {errs[0].strip()[-220:]})")
    # - a global option on one process only: --allow-outside-reads on rank 0 gave a report that matched no one-process
    #   run (rank 1's share of the chunks skipped, "clean"); now another command line (found by a hunt)
    port = servers.free_port()
    line = ["check", os.path.join(DATA, "fsdp2_r3"), "--json"]
    procs = [start(0, 2, port, ["--allow-outside-reads"] + line), start(1, 2, port, line)]
    codes, errs, secs = finish(procs, bound)
    check(codes == [2, 2] and "another command line" in errs[0] and "--allow-outside-reads" in errs[0],
          f"--allow-outside-reads on rank 0 only: both exit 2 ({codes}; {errs[0].strip()[-200:]})")
    # - SIGTERM while waiting for a rank that never comes: each stops at once (before: at the timeout, later still
    #   with the default 60 s), with 128 + 15 and nothing left
    port = servers.free_port()
    procs = [start(0, 3, port, args, OPTSCOPE_JOB_TIMEOUT="60"), start(1, 3, port, args, OPTSCOPE_JOB_TIMEOUT="60")]
    time.sleep(1.5)
    t0 = time.monotonic()
    for p in procs:
        p.send_signal(signal.SIGTERM)
    codes, errs, _ = finish(procs, 30)
    secs = time.monotonic() - t0
    check(codes == [143, 143] and secs < 10 and nothing_left(parent),
          f"SIGTERM while the job waits: both exit 143 in {secs:.1f} s ({codes}; {errs[0].strip()[-160:]})")

    # - a store that accepts connections and never answers (another program on MASTER_PORT): the processes waited
    #   for ever in libtorch's client; now each stops once a call has had no answer for the timeout and 5 s
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held = []
    threading.Thread(target=lambda: [held.append(listener.accept()) for _ in range(8)], daemon=True).start()
    port = listener.getsockname()[1]
    procs = [start(1, 3, port, args), start(2, 3, port, args)]
    codes, errs, secs = finish(procs, bound)
    listener.close()
    check(codes == [2, 2] and all("did not answer" in e for e in errs) and secs < bound and nothing_left(parent),
          f"a port whose listener never answers: both exit 2 in {secs:.1f} s ({codes}; {errs[0].strip()[-200:]})")
    # - rank 0 given the smaller job size: its gather waited for exactly size-1 answers and got more: a hang
    port = servers.free_port()
    procs = [start(0, 2, port, args), start(1, 3, port, args), start(2, 3, port, args)]
    codes, errs, secs = finish(procs, bound)
    check(all(c not in (0, None) for c in codes) and secs < bound and nothing_left(parent),
          f"rank 0 given the smaller WORLD_SIZE: all exit non-zero in {secs:.1f} s ({codes}; {errs[0].strip()[-200:]})")
    # - rank 0 stopped (SIGSTOP) mid-write: the others waited about five timeouts; now the timeout and 5 s. Without
    #   fsync: the others' own writes must not count (an fsync on a disk busy with CI's other tests took 7 s)
    port = servers.free_port()
    fifo = pause_fifos("stop0")
    quick = args + ["--no-fsync"]
    procs = [start(0, 3, port, quick, OPTSCOPE_JOB_TIMEOUT="3", OPTSCOPE_PAUSE_AT="writing",
                   OPTSCOPE_PAUSE_FIFO=fifo)]
    procs += [start(r, 3, port, quick, OPTSCOPE_JOB_TIMEOUT="3") for r in (1, 2)]
    paused_at(fifo, procs[0])
    procs[0].send_signal(signal.SIGSTOP)
    t0 = time.monotonic()
    codes, errs, _ = finish(procs[1:], bound)
    secs = time.monotonic() - t0
    procs[0].kill()
    procs[0].wait()
    # (two ways out, both bounded: the watchdog after the timeout and 5 s, about 9 s; or, seen on both this
    # session's and the previous CLI, libtorch's own "Socket Timeout" at about 15.5 s)
    check(all(c not in (0, None) for c in codes) and secs < 3 + 5 + 10,
          f"rank 0 stopped (SIGSTOP): the others exit non-zero in {secs:.1f} s ({codes}; {errs[0].strip()[-160:]})")
    for leftover in os.listdir(parent):  # rank 0's temporary, if it had made one: it never ran again to remove it
        shutil.rmtree(os.path.join(parent, leftover), ignore_errors=True)
    suspended_job(quick, out, parent, bound)

    # - a worker whose main thread hangs (paused at its first output bytes: blocked opening a FIFO, as on a read
    #   from a hung file system) while its heartbeat thread beats on: the others waited for ever; now they declare
    #   it hung after OPTSCOPE_JOB_STALL_TIMEOUT, and it ends itself once the job has failed (srun would keep it)
    port = servers.free_port()
    fifo = pause_fifos("hang1")
    stall = dict(OPTSCOPE_JOB_STALL_TIMEOUT=str(TIMEOUT))
    procs = [start(0, 3, port, quick, **stall),
             start(1, 3, port, quick, OPTSCOPE_PAUSE_AT="writing", OPTSCOPE_PAUSE_FIFO=fifo, **stall),
             start(2, 3, port, quick, **stall)]
    said = paused_at(fifo, procs[1])
    codes, errs, secs = finish(procs, bound + TIMEOUT)
    check(said == "writing" and codes == [2, 2, 2] and "rank 1 is alive but its work has not moved" in errs[0]
          and "exiting now" in errs[1] and secs < bound + TIMEOUT and nothing_left(parent),
          f"a worker whose main thread hangs, heartbeat alive: all exit 2 in {secs:.1f} s, rank 0 names it, it ends "
          f"itself, nothing left ({codes}; {errs[0].strip()[-160:]}; {errs[1].strip()[-120:]}; {os.listdir(parent)})")
    # - rank 0 hangs so: it leaves its temporary (nothing can remove it while its thread is stuck), as it says, and
    #   the next run to that output removes it
    port = servers.free_port()
    fifo = pause_fifos("hang0")
    procs = [start(0, 3, port, quick, OPTSCOPE_PAUSE_AT="writing", OPTSCOPE_PAUSE_FIFO=fifo, **stall),
             start(1, 3, port, quick, **stall), start(2, 3, port, quick, **stall)]
    said = paused_at(fifo, procs[0])
    codes, errs, secs = finish(procs, bound + TIMEOUT)
    rc, _, err = run1(quick)
    check(said == "writing" and codes == [2, 2, 2] and "rank 0 is alive but its work has not moved" in errs[1]
          and "a temporary next to the output may remain" in errs[0] and rc == 0 and os.listdir(parent) == ["out"],
          f"rank 0's main thread hangs: all exit 2 in {secs:.1f} s naming it; the next run removes its temporary "
          f"({codes}; {errs[1].strip()[-120:]}; {rc} {err.strip()[-120:]}; {os.listdir(parent)})")
    shutil.rmtree(out, ignore_errors=True)
    # - and the same stall timeout on a job that works: no process is taken for hung
    port = servers.free_port()
    codes, errs, secs = finish([start(r, 3, port, quick, **stall) for r in range(3)], bound)
    check(codes == [0, 0, 0], f"the same stall timeout on a job that works: all exit 0 ({codes}; "
          f"{' | '.join(e.strip()[-120:] for e in errs)})")
    shutil.rmtree(out, ignore_errors=True)

    # the output exists already: rank 0 refuses, every process exits non-zero, the folder untouched
    os.makedirs(out)
    with open(os.path.join(out, "keep"), "w") as f:
        f.write("mine")
    port = servers.free_port()
    procs = [start(0, 2, port, args), start(1, 2, port, args)]
    codes, errs, secs = finish(procs, bound)
    check(all(c == 2 for c in codes) and "already exists" in errs[1] and os.listdir(parent) == ["out"]
          and os.listdir(out) == ["keep"], f"an output that exists: both exit 2, it stays as it was ({codes}; "
          f"{errs[1].strip()[-200:]})")
    shutil.rmtree(out)

    # commands that do not split their work refuse to run as a job, rather than all doing it
    port = servers.free_port()
    p = start(1, 2, port, ["fix", src, "-o", os.path.join(parent, "f.pt")])
    codes, errs, _ = finish([p], bound)
    check(codes == [2] and "runs as one process" in errs[0] and nothing_left(parent),
          f"fix in a job refuses at once ({errs[0].strip()[-160:]})")

    # a world of one is one process, as today (no store, no MASTER_ADDR needed)
    e = dict(os.environ, RANK="0", WORLD_SIZE="1")
    e.pop("MASTER_ADDR", None)
    rc, _, err = run1(args, env=e)
    check(rc == 0 and os.path.exists(os.path.join(out, ".metadata")),
          f"WORLD_SIZE=1 runs as one process ({err.strip()[-160:]})")
    shutil.rmtree(out, ignore_errors=True)
    # ... but a rank beyond it is refused (found by a hunt: RANK=2 WORLD_SIZE=1 ran alone and published its output
    # while the job it belonged to failed)
    rc, _, err = run1(args, env=dict(e, RANK="2"))
    check(rc == 2 and "rank 2 is not below the job's size 1" in err and nothing_left(parent),
          f"RANK=2 WORLD_SIZE=1 is refused, nothing written ({rc}: {err.strip()[-160:]})")

    # another program on MASTER_PORT (a web server that answers anything with HTTP 400 and keeps the connection): not
    # taken for a store, nor its bytes for a duplicate rank (found by a hunt)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    stop = threading.Event()

    def answer_http():
        conns = []
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                c, _ = listener.accept()
            except OSError:
                continue
            c.settimeout(0.2)
            conns.append(c)
            try:
                c.recv(4096)
                c.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 11\r\n\r\nbad request" * 4)
            except OSError:
                pass
        for c in conns:
            c.close()

    server = threading.Thread(target=answer_http, daemon=True)
    server.start()
    procs = [start(1, 3, port, args), start(2, 3, port, args)]
    codes, errs, secs = finish(procs, bound)
    stop.set()
    server.join()
    listener.close()
    check(all(c not in (0, None) for c in codes) and all("is not this job's store" in e for e in errs)
          and not any("two processes say" in e for e in errs) and nothing_left(parent) and secs < bound,
          f"another program on MASTER_PORT: named as such in {secs:.1f} s ({codes}; "
          f"{' | '.join(e.strip()[-160:] for e in errs)})")


def worker_faults(command, parent, bound):
    """a worker killed while it writes, or whose disk is full: every process exits non-zero, rank 0 names it, nothing
    is left in the output's folder"""
    # killed mid-write: paused at its first output bytes, then SIGKILL. Its process is seen ended on this machine,
    # so the others stop at once, not after the job's timeout (30 s here: before, they took all of it)
    def rank1_killed_at(point):
        """3 processes with a 30 s timeout, rank 1 killed once it reaches the pause point; (procs, what it said)"""
        port = servers.free_port()
        fifo = pause_fifos(point)
        env = dict(OPTSCOPE_JOB_TIMEOUT="30")
        procs = [start(0, 3, port, command, **env),
                 start(1, 3, port, command, OPTSCOPE_PAUSE_AT=point, OPTSCOPE_PAUSE_FIFO=fifo, **env),
                 start(2, 3, port, command, **env)]
        said = paused_at(fifo, procs[1])
        procs[1].kill()
        return procs, said

    procs, said = rank1_killed_at("writing")
    codes, errs, secs = finish(procs, bound + 30)
    check(said == "writing" and codes[0] not in (0, None) and codes[2] not in (0, None)
          and "rank 1 ended before the job was done" in errs[0] and nothing_left(parent) and secs < bound,
          f"{command[0]}: a worker killed mid-write: the others exit non-zero in {secs:.1f} s (its timeout 30 s) "
          f"naming rank 1, no output, no temporary ({codes}; {errs[0].strip()[-200:]}; {os.listdir(parent)})")

    # killed after its share (paused as it leaves, then SIGKILL): the job's output is whole and published; rank 0,
    # which serves the store, waited the whole timeout for it to say it left
    procs, said = rank1_killed_at("leaving")
    codes, errs, secs = finish(procs, bound + 30)
    made = os.listdir(parent)
    check(said == "leaving" and codes == [0, -9, 0] and len(made) == 1 and secs < 10,
          f"{command[0]}: a worker killed after its share: the others exit 0 in {secs:.1f} s (its timeout 30 s), "
          f"the output published ({codes}; {errs[0].strip()[-200:]}; {made})")
    for leftover in made:
        p = os.path.join(parent, leftover)
        shutil.rmtree(p) if os.path.isdir(p) else os.unlink(p)

    # rank 0 killed mid-write (the OOM killer): the others remove the temporary it made beside the output, which
    # no process was left to remove (found by hunt 11)
    port = servers.free_port()
    fifo = pause_fifos("pause0")
    procs = [start(0, 3, port, command, OPTSCOPE_PAUSE_AT="writing", OPTSCOPE_PAUSE_FIFO=fifo),
             start(1, 3, port, command), start(2, 3, port, command)]
    said = paused_at(fifo, procs[0])
    time.sleep(2)  # the others have their own shares written by then, and wait for rank 0
    procs[0].kill()
    codes, errs, secs = finish(procs, bound)
    check(said == "writing" and codes[1] not in (0, None) and codes[2] not in (0, None) and nothing_left(parent)
          and secs < bound, f"{command[0]}: rank 0 killed mid-write: the others exit non-zero in {secs:.1f} s, no "
          f"output, no temporary ({codes}; {errs[1].strip()[-200:]}; {os.listdir(parent)})")

    # a full disk on one worker (RLIMIT_FSIZE: its writes fail as on a full disk; SIGXFSZ ignored)
    def small_disk():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))
    port = servers.free_port()
    procs = [start(0, 3, port, command), start(1, 3, port, command, preexec=small_disk), start(2, 3, port, command)]
    codes, errs, secs = finish(procs, bound)
    check(all(c not in (0, None) for c in codes) and "rank 1:" in errs[0] and "File too large" in errs[0]
          and nothing_left(parent) and secs < bound,
          f"{command[0]}: a worker whose disk is full: all exit non-zero in {secs:.1f} s, rank 0 names rank 1 and "
          f"its error, no output ({codes}; {errs[0].strip()[-200:]})")

    # a full disk on rank 0: it removes the temporary it made, and the others fail on what is gone; each names rank 0's
    # error as the cause (each named its own 'No such file or directory', every time, found by a hunt)
    port = servers.free_port()
    procs = [start(0, 3, port, command, preexec=small_disk), start(1, 3, port, command), start(2, 3, port, command)]
    codes, errs, secs = finish(procs, bound)
    check(all(c not in (0, None) for c in codes) and all("rank 0" in e and "File too large" in e for e in errs)
          and all(e.find("File too large") < e.find("No such file") or "No such file" not in e for e in errs)
          and nothing_left(parent) and secs < bound,
          f"{command[0]}: rank 0's disk is full: all exit non-zero in {secs:.1f} s, every process names rank 0's "
          f"error first, no output ({codes}; {[e.strip()[-200:] for e in errs]})")


def self_connect(bound):
    """MASTER_PORT inside Linux's ephemeral port range, the ranks on one host: a rank waiting for rank 0's store
    connected from that very port to itself (TCP's simultaneous open) and held it, so that rank 0 could not bind it
    ("Address already in use") and the job never met (found by a hunt, 3 in about 300 runs on even ports from 34000).
    Made certain in a network namespace of its own whose ephemeral range is 32 ports around MASTER_PORT."""
    script = ('ip link set lo up && sysctl -qw net.ipv4.ip_local_port_range="40000 40031" || exit 99\n'
              'RANK=1 LOCAL_RANK=1 "$@" >/dev/null 2>"$TMPDIR/r1.err" & p1=$!\n'
              'sleep 1.5\n'  # rank 1 waits for the store, probing every 10 ms
              'RANK=0 LOCAL_RANK=0 "$@" >/dev/null 2>"$TMPDIR/r0.err"; e0=$?\n'
              'wait $p1; echo "$e0 $?"; cat "$TMPDIR/r0.err" "$TMPDIR/r1.err" >&2\n')
    tmp = os.path.join(WORK, "self_connect")
    os.makedirs(tmp, exist_ok=True)
    env = job_env(0, 2, 40000, TMPDIR=tmp)
    try:
        p = subprocess.run(["unshare", "-n", "sh", "-c", script, "sh", CLI, "check", os.path.join(DATA, "fsdp2_r3")],
                           env=env, capture_output=True, text=True, timeout=bound)
    except (OSError, subprocess.TimeoutExpired) as e:
        check(False, f"MASTER_PORT in the ephemeral range: {e}")
        return
    if p.returncode == 99 or "unshare" in p.stderr[:200]:
        check(True, f"MASTER_PORT in the ephemeral range: skipped, no network namespace here ({p.stderr.strip()[:120]})")
        return
    check(p.stdout.split() == ["0", "0"], f"MASTER_PORT in the ephemeral range, ranks probing it: both exit 0 "
          f"({p.stdout.strip()}; {p.stderr.strip()[-200:]})")


def not_shared(parent, bound):
    """two nodes without a shared file system: rank 1 sees its own empty mount of the output's folder (a private
    mount namespace); every process exits non-zero, rank 1 says what it cannot see, nothing is left"""
    if subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        check(True, "an output folder one process cannot see (skipped: no mount namespaces here)")
        return
    src = os.path.join(DATA, "fsdp2_r3")
    cases = [(["reshard", src, "--world-size", "5", "-o", os.path.join(parent, "out")], "not visible to this process"),
             (["gather", src, "-o", os.path.join(parent, "one.pt")], "every process must see the output's folder"),
             (["verify", src, "--world-size", "5"], "scratch folder for the resharded copy is not visible")]
    for args, says in cases:
        port = servers.free_port()
        tmp = dict(TMPDIR=parent)  # verify's scratch copy
        hidden = subprocess.Popen(["unshare", "-m", "sh", "-c", 'mount -t tmpfs none "$0" && exec "$@"', parent, CLI]
                                  + args, env=job_env(1, 2, port, **tmp), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        codes, errs, secs = finish([start(0, 2, port, args, **tmp), hidden], bound)
        check(all(c not in (0, None) for c in codes) and says in errs[1] and "rank 1" in errs[0]
              and nothing_left(parent) and secs < bound,
              f"{args[0]}: an output folder rank 1 cannot see: both exit non-zero in {secs:.1f} s, rank 1 says so, "
              f"nothing left ({codes}; {errs[1].strip()[-200:]}; {errs[0].strip()[-120:]}; {os.listdir(parent)})")


def objects_under(s3work, port, prefix, folder):
    """the keys under s3://ckpt/PREFIX, and whether they are the files of @p folder, byte for byte"""
    keys = servers.s3_put(TORCH_PYTHON, s3work, port, "--list", prefix).split()
    same = sorted(k[len(prefix):] for k in keys) == files_of(folder)
    for k in keys if same else []:
        servers.s3_put(TORCH_PYTHON, s3work, port, "--get", k, "got")
        with open(os.path.join(s3work, "got"), "rb") as a, open(os.path.join(folder, k[len(prefix):]), "rb") as b:
            same = same and a.read() == b.read()
    return keys, same


def s3():
    if not TORCH_PYTHON:
        check(True, "S3 output (skipped: no TORCH_PYTHON for moto_server)")
        return
    procs = []
    try:
        s3work = os.path.join(WORK, "s3")
        shutil.rmtree(s3work, ignore_errors=True)
        os.makedirs(os.path.join(s3work, "empty"))
        port = servers.start_moto(TORCH_PYTHON, s3work, procs)
        servers.s3_put(TORCH_PYTHON, s3work, port, "empty")  # creates the bucket
        env = dict(os.environ, AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}", AWS_ACCESS_KEY_ID="AKIAOPTSCOPETEST",
                   AWS_SECRET_ACCESS_KEY="optscope-test-secret", AWS_REGION="us-east-1", AWS_PROFILE="",
                   HOME=s3work)
        src = os.path.join(DATA, "fsdp2_r3")
        res = launch("torchrun", 2, ["reshard", src, "--world-size", "5", "-o", "s3://ckpt/job5"],
                     os.path.join(WORK, "logs", "s3"), env=env)
        check(all(c == 0 for c, _, _ in res), f"reshard to s3:// by 2 processes exits 0 ({res[0][2].strip()[-200:]})")
        ref = reference("fsdp2_r3")
        keys, same = objects_under(s3work, port, "job5/", ref)
        check(same, f"the objects 2 processes wrote are the one-process files, byte for byte ({keys})")
        # the same prefix again: rank 0 refuses to write over it, and no process removes what is there (before,
        # rank 0's clean-up after its own refusal deleted every object under the prefix: the user's checkpoint)
        res = launch("torchrun", 2, ["reshard", src, "--world-size", "3", "-o", "s3://ckpt/job5"],
                     os.path.join(WORK, "logs", "s3again"), env=env)
        again = servers.s3_put(TORCH_PYTHON, s3work, port, "--list", "job5/").split()
        check(all(c == 2 for c, _, _ in res) and "already holds objects" in res[0][2] and again == keys,
              f"reshard by 2 processes to a prefix that holds a checkpoint: refused, every object stays "
              f"({[c for c, _, _ in res]}; {res[0][2].strip()[-160:]}; {again})")
        # a job and one process write one prefix at once: the job found it empty, and its processes pause before
        # their first objects while the other run writes its checkpoint there. The job's objects are created only
        # where none is: it stops, and its clean-up removes only objects it wrote (their tag), so the other
        # checkpoint stays whole (before: both exited 0 over a mix of files; a clean-up removed every object there)
        job = {k: env[k] for k in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION",
                                   "AWS_PROFILE", "HOME")}
        fifos = [pause_fifos(f"race{r}") for r in range(2)]
        port2 = servers.free_port()
        command = ["reshard", src, "--world-size", "3", "-o", "s3://ckpt/race"]
        # (a list of their own: procs holds moto_server, which the finally below stops; rebinding it left that
        # server running after every run)
        racers = [start(r, 2, port2, command, OPTSCOPE_PAUSE_AT="writing", OPTSCOPE_PAUSE_FIFO=fifos[r], **job)
                  for r in range(2)]
        said = [paused_at(fifos[r], racers[r]) for r in range(2)]
        rc, _, err = run1(["reshard", src, "--world-size", "5", "-o", "s3://ckpt/race"], env=env)
        for f in fifos:
            with open(f + ".in", "w") as w:
                w.write("go\n")
        codes, errs, secs = finish(racers, 60)
        raced, whole = objects_under(s3work, port, "race/", ref)
        left = servers.s3_put(TORCH_PYTHON, s3work, port, "--uploads", "race/").split()
        check(said == ["writing", "writing"] and rc == 0 and all(c not in (0, None) for c in codes)
              and any("another writer created this object" in e for e in errs) and whole and left == [],
              f"a 2-process reshard and another run into one prefix at once: the job stops, the other checkpoint "
              f"stays whole ({said}; {rc}; {codes}; {' | '.join(e.strip()[-160:] for e in errs)}; {raced}; {left})")
        # reading from object storage: gather of what was just uploaded, by 3 processes into one local file (the
        # same file name as one process's: the archive's records are named after it)
        one, three = (os.path.join(s3work, d, "full.pt") for d in ("one", "three"))
        for f in (one, three):
            os.makedirs(os.path.dirname(f))
        rc, _, err = run1(["gather", "s3://ckpt/job5", "-o", one], env=env)
        res = launch("slurm", 3, ["gather", "s3://ckpt/job5", "-o", three], os.path.join(WORK, "logs", "s3r"), env=env)
        same = rc == 0 and all(c == 0 for c, _, _ in res) and open(one, "rb").read() == open(three, "rb").read()
        check(same, f"gather from s3:// by 3 processes: the one-process file, byte for byte ({err.strip()[-200:]}; "
              f"{res[0][2].strip()[-200:]})")
        # metadata only: rank 0 reads it alone, the others wait for its status (remote: 0 requests)
        rc, out1, _ = run1(["check", "s3://ckpt/job5", "--no-data"], env=env)
        res = launch("torchrun", 3, ["--remote-stats", "check", "s3://ckpt/job5", "--no-data"],
                     os.path.join(WORK, "logs", "s3c"), env=env)
        check(rc == 0 and all(c == rc for c, _, _ in res) and res[0][1] == out1
              and "remote: 0 requests" not in res[0][2] and all("remote: 0 requests," in e for _, _, e in res[1:]),
              f"check --no-data of s3:// by 3 processes: rank 0's report, only rank 0 reads the metadata "
              f"({[c for c, _, _ in res]}; {[e.strip()[-80:] for _, _, e in res]})")
        gather_to_s3(s3work, port, env)
    finally:
        servers.stop(procs)


def gather_to_s3(s3work, port, env):
    """gather into one object by several processes: each streams its run of records as its share of rank 0's
    multipart upload, which rank 0 completes"""
    big = os.path.join(s3work, "big")
    servers.torch_check(TORCH_PYTHON, s3work, "make-big-dcp", "big")  # and big.converted.pt, PyTorch's conversion
    # 2: shares of about 20 MB, two parts each (16 MiB parts and a 4 MiB rest: EntityTooSmall); 6: runs under 5 MiB
    # joined to others'
    # QUICK (ASan): the two-process case alone (shares of several parts each); six ASan processes cost CI a minute
    for style, n in (("torchrun", 2),) if QUICK else (("torchrun", 2), ("torchrun", 3), ("slurm", 6)):
        name = f"g{n}.pt"  # the archive's records are named after the file: the one-process file has the same name
        os.makedirs(os.path.join(s3work, "one"), exist_ok=True)
        rc, _, err = run1(["gather", big, "-o", os.path.join(s3work, "one", name)])
        res = launch(style, n, ["gather", big, "-o", f"s3://ckpt/gathered/{name}"], os.path.join(WORK, "logs", "s3g"),
                     env=env)
        try:
            servers.s3_put(TORCH_PYTHON, s3work, port, "--get", f"gathered/{name}", name)
        except subprocess.CalledProcessError:
            pass  # not there: the check below says so
        same = rc == 0 and all(c == 0 for c, _, _ in res) and all(o == "" for _, o, _ in res[1:]) \
            and os.path.isfile(os.path.join(s3work, name)) \
            and open(os.path.join(s3work, "one", name), "rb").read() == open(os.path.join(s3work, name), "rb").read()
        check(same, f"gather to s3:// by {n} processes: the one-process file, byte for byte ({err.strip()[-200:]}; "
              f"{[c for c, _, _ in res]}; {res[0][2].strip()[-200:]})")
        got, said = servers.torch_check(TORCH_PYTHON, s3work, "load-pt", name, "big.converted.pt")
        check(got == 0 and "equal" in said, f"torch.load reads the {n}-process upload, equal to PyTorch's "
              f"dcp_to_torch_save ({said})")
    # a process killed while it writes its share: rank 0 aborts the upload, nothing appears
    fifo = pause_fifos("pause-s3")
    port2 = servers.free_port()
    command = ["gather", big, "-o", "s3://ckpt/killed/g.pt"]
    job = {k: env[k] for k in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_PROFILE",
                               "HOME")}
    procs = [start(0, 3, port2, command, **job),
             start(1, 3, port2, command, OPTSCOPE_PAUSE_AT="writing", OPTSCOPE_PAUSE_FIFO=fifo, **job),
             start(2, 3, port2, command, **job)]
    said = paused_at(fifo, procs[1])
    procs[1].kill()
    codes, errs, secs = finish(procs, 60)
    left = servers.s3_put(TORCH_PYTHON, s3work, port, "--list", "killed/").split() \
        + servers.s3_put(TORCH_PYTHON, s3work, port, "--uploads", "killed/").split()
    check(said == "writing" and codes[0] not in (0, None) and codes[2] not in (0, None)
          and "rank 1 ended before the job was done" in errs[0] and left == [],
          f"gather to s3://: a process killed mid-upload: the others exit non-zero in {secs:.1f} s naming rank 1, no "
          f"object and no upload left ({codes}; {errs[0].strip()[-200:]}; {left})")
    # the upload a killed process started is found and aborted by the others: rank 0 of a gather, killed before it
    # told the others its id; rank 1 of a reshard, its own rank file's upload under the output prefix. Before, each
    # was left open, unseen, for ever (hunt 14)
    for killed, n, prefix, command in (
            (0, 3, "killed0", ["gather", big, "-o", "s3://ckpt/killed0/g.pt"]),
            (1, 2, "killed1", ["reshard", big, "--world-size", "2", "-o", "s3://ckpt/killed1/out"])):
        fifo = pause_fifos(f"pause-{prefix}")
        port2 = servers.free_port()
        at = "writing" if command[0] == "gather" else "uploading"
        procs = [start(r, n, port2, command, **job, **({"OPTSCOPE_PAUSE_AT": at, "OPTSCOPE_PAUSE_FIFO": fifo}
                                                        if r == killed else {})) for r in range(n)]
        said = paused_at(fifo, procs[killed])
        procs[killed].kill()
        codes, errs, secs = finish(procs, 60)
        left = servers.s3_put(TORCH_PYTHON, s3work, port, "--list", prefix + "/").split() \
            + servers.s3_put(TORCH_PYTHON, s3work, port, "--uploads", prefix + "/").split()
        others = [c for r, c in enumerate(codes) if r != killed]
        check(said == at and all(c not in (0, None) for c in others) and left == [],
              f"{command[0]} to s3://: rank {killed} killed mid-upload: the others exit non-zero in {secs:.1f} s, no "
              f"object and no upload left ({codes}; {left}; {' | '.join(e.strip()[-300:] for e in errs)})")


def slurm():
    """the same commands started by a real srun: a one-node cluster of Debian's Slurm, its own config, ports and
    folders under WORK, munge for its authentication, all run as root and stopped at the end"""
    tools = [shutil.which(t) for t in ("munged", "slurmctld", "slurmd", "srun")]
    if os.geteuid() != 0 or not all(tools):
        check(True, "srun (skipped: needs root and Debian's munge, slurmctld, slurmd, slurm-client)")
        return
    munged, slurmctld, slurmd, srun = tools
    import socket
    host = socket.gethostname().split(".")[0]
    here = os.path.join(WORK, "slurm")
    shutil.rmtree(here, ignore_errors=True)
    for d in ("state", "spool", "log", "run"):
        os.makedirs(os.path.join(here, d))
    os.chmod(here, 0o755)
    key = os.path.join(here, "munge.key")
    with open(key, "wb") as f:
        f.write(os.urandom(1024))
    os.chmod(key, 0o600)
    sock = os.path.join(here, "run", "munge.sock")
    conf = os.path.join(here, "slurm.conf")
    with open(conf, "w") as f:
        f.write(f"""ClusterName=optscope
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={servers.free_port()}
SlurmdPort={servers.free_port()}
AuthType=auth/munge
AuthInfo=socket={sock}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={here}/state
SlurmdSpoolDir={here}/spool
SlurmctldPidFile={here}/run/slurmctld.pid
SlurmdPidFile={here}/run/slurmd.pid
SlurmctldLogFile={here}/log/slurmctld.log
SlurmdLogFile={here}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
NodeName={host} NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN
PartitionName=optscope Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
""")
    env = dict(os.environ, SLURM_CONF=conf)
    env.pop("SLURM_JOB_ID", None)
    procs = []
    try:
        def daemon(*args):
            procs.append(subprocess.Popen(list(args), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          start_new_session=True))
        daemon(munged, "-F", "-f", f"--key-file={key}", f"--socket={sock}", f"--pid-file={here}/run/munged.pid",
               f"--seed-file={here}/run/seed", f"--log-file={here}/log/munged.log")
        deadline = time.monotonic() + 30
        while not os.path.exists(sock) and time.monotonic() < deadline:
            time.sleep(0.1)
        daemon(slurmctld, "-D", "-c", "-i")
        daemon(slurmd, "-D", "-c", "-N", host)
        ready = ""
        while time.monotonic() < deadline and "idle" not in ready:
            time.sleep(0.5)
            ready = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True).stdout
        if "idle" not in ready:
            logs = ""
            for name in ("slurmctld.log", "slurmd.log"):
                if os.path.exists(os.path.join(here, "log", name)):
                    logs += open(os.path.join(here, "log", name)).read()[-400:]
            check(False, f"srun: the one-node Slurm cluster did not come up ({ready.strip()}; {logs})")
            return
        src = os.path.join(DATA, "fsdp2_r3")
        job = dict(env, MASTER_ADDR="127.0.0.1", OPTSCOPE_JOB_TIMEOUT="60")
        for command, out, ref in (
                (["reshard", src, "--world-size", "5"], "reshard5", reference("fsdp2_r3")),
                (["gather", src], "fsdp2_r3.pt", None)):
            dest = os.path.join(here, "srun", out)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            if ref is None:  # the one-process gather, of the same file name (the archive's records are named so)
                ref = os.path.join(here, "one", out)
                os.makedirs(os.path.dirname(ref), exist_ok=True)
                run1(command + ["-o", ref])
            p = subprocess.run([srun, "-n", "3", "-O", "--kill-on-bad-exit=1", CLI] + command + ["-o", dest, "--json"],
                               env=dict(job, MASTER_PORT=str(servers.free_port())), capture_output=True, text=True,
                               timeout=300)
            same = p.returncode == 0 and (files_of(dest) == files_of(ref) and all(
                open(os.path.join(dest, f), "rb").read() == open(os.path.join(ref, f), "rb").read()
                for f in files_of(ref)) if os.path.isdir(ref) else open(dest, "rb").read() == open(ref, "rb").read())
            # one report: rank 0's (three processes each alone would each print theirs, and write the same files)
            check(same and p.stdout.count('"output"') == 1,
                  f"srun -n 3 {command[0]}: one job, the one-process output byte for byte (exit {p.returncode}; "
                  f"{p.stdout.count(chr(34) + 'output' + chr(34))} reports; {p.stderr.strip()[-300:]})")
        # srun -n 2 without MASTER_PORT: each task ran the whole gather alone, two copies racing on one output
        dest = os.path.join(here, "srun", "no-port.pt")
        alone = {k: v for k, v in job.items() if k != "MASTER_PORT"}
        p = subprocess.run([srun, "-n", "2", "-O", CLI, "gather", src, "-o", dest], env=alone, capture_output=True,
                           text=True, timeout=300)
        check(p.returncode != 0 and p.stderr.count("srun started this command as 2 tasks") == 2
              and not os.path.exists(dest), f"srun -n 2 without MASTER_PORT: refused by both tasks, nothing written "
              f"(exit {p.returncode}; {p.stderr.strip()[-300:]})")
    finally:
        servers.stop(procs)


def reference(src):
    """the one-process reshard of @p src to 5 ranks (made once; the matrix makes it for every source)"""
    ref = os.path.join(WORK, "ref", src.replace("/", "_"))
    if not os.path.isdir(ref):
        os.makedirs(os.path.dirname(ref), exist_ok=True)
        rc, _, err = run1(["reshard", os.path.join(DATA, src), "--world-size", "5", "-o", ref])
        check(rc == 0, f"{src}: reshard by one process ({err.strip()[-200:]})")
    return ref


PARTS = {"matrix": (matrix, torch_loads), "pairs": (diffs, checks), "faults": (agent_store, faults, s3, slurm)}


def main():
    if PART is not None and PART not in PARTS:
        sys.exit(f"job_test.py: no part {PART!r}; the parts: {', '.join(PARTS)}")
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    for name, steps in PARTS.items():
        if PART in (None, name):
            for step in steps:
                step()
    said = f"{len(passed)} checks passed (each: {os.path.join(WORK, 'checks.log')})"
    if failures:
        print(f"{len(failures)} FAILED, {said}:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print(f"all {said}")


if __name__ == "__main__":
    main()
