# SPDX-License-Identifier: GPL-3.0-or-later
"""Fault injection for optscope-cli: files that shrink, are replaced or vanish while a command reads them; outputs on
a full disk, a read-only folder or a missing parent; a process killed mid-write and the run after it. Each case
asserts the exit code, the message (which file, what happened), that the inputs are unchanged where the test did not
damage them, and that no partial output exists. Timing is synchronised through the CLI's pause points
(OPTSCOPE_PAUSE_AT / OPTSCOPE_PAUSE_FIFO, core/src/io/fault_injection.h), never by sleeping.

    python3 faults.py OPTSCOPE_CLI TEST_DATA WORKDIR [REPORT.md]
"""
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time

CLI, DATA, WORK = sys.argv[1], sys.argv[2], os.path.abspath(sys.argv[3])
REPORT = sys.argv[4] if len(sys.argv) > 4 else None
results = []  # (fault, command, outcome, ok)


def sha(path):
    if os.path.isdir(path):
        h = hashlib.sha256()
        for name in sorted(os.listdir(path)):
            h.update(name.encode() + sha(os.path.join(path, name)).encode())
        return h.hexdigest()
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def fresh(name):
    d = os.path.join(WORK, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def damage_file(victim, fault):
    """what happens to an input while it is read: truncated, rewritten in place (same size, same inode, other bytes),
    replaced (a new file of the same size, other bytes: a rewrite, not a shrink) or removed"""
    size = os.path.getsize(victim)
    if fault == "truncated":
        os.truncate(victim, size // 3)
    elif fault == "rewritten in place":
        with open(victim, "r+b") as f:
            f.seek(size // 2)
            f.write(b"\xff" * 64)
    elif fault == "replaced":
        shutil.copy(victim, victim + ".new")
        damage_file(victim + ".new", "rewritten in place")
        os.replace(victim + ".new", victim)
    else:
        os.unlink(victim)


def leftovers(d, output):
    """the output and any temporary named after it"""
    base = os.path.basename(output)
    return [n for n in os.listdir(d) if n == base or n.startswith("." + base + ".tmp-")]


def paused_run(args, cwd, at, damage):
    """runs the CLI until it reaches pause point `at`, applies damage(proc), lets it go on; returns (rc, stderr)"""
    fifo = os.path.join(cwd, "pause")
    for s in (".out", ".in"):
        if os.path.exists(fifo + s):
            os.unlink(fifo + s)
        os.mkfifo(fifo + s)
    env = dict(os.environ, OPTSCOPE_PAUSE_AT=at, OPTSCOPE_PAUSE_FIFO=fifo)
    p = subprocess.Popen([CLI] + args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # (not a blocking open: a run that fails before its pause point would leave the test waiting for ever)
    fd, said = os.open(fifo + ".out", os.O_RDONLY | os.O_NONBLOCK), b""
    while b"\n" not in said:
        if p.poll() is not None:
            os.close(fd)
            raise AssertionError(f"{' '.join(args)}: exit {p.returncode} before pause point {at}: {p.stderr.read()}")
        try:
            chunk = os.read(fd, 256)
        except BlockingIOError:
            chunk = b""
        said += chunk
        if not chunk:
            time.sleep(0.01)
    os.close(fd)
    reached = said.decode().strip()
    assert reached == at, f"paused at {reached!r}"
    kill = damage(p)
    if not kill:
        with open(fifo + ".in", "w") as f:
            f.write("go\n")
    out, err = p.communicate(timeout=300)
    return p.returncode, err.strip()


def record(fault, command, ok, outcome):
    results.append((fault, command, outcome, ok))
    print(("ok   " if ok else "FAIL ") + f"{fault} / {command}: {outcome}")


# inputs: a torch.save file (written by OptScope's own gather from a fixture made by PyTorch) and a DCP folder
SRC_FILE = os.path.join(DATA, "fsdp2_r3_converted.pt")
SRC_DCP = os.path.join(DATA, "fsdp2_r3")

COMMANDS = [
    ("inspect --hash", lambda i, o: ["inspect", i, "--hash"]),
    ("check", lambda i, o: ["check", i]),
    ("diff", lambda i, o: ["diff", i, "reference"]),
    ("gather", lambda i, o: ["gather", i, "-o", o, "--no-fsync"]),
    ("reshard", lambda i, o: ["reshard", i, "--world-size", "2", "-o", o, "--no-fsync"]),
    ("verify", lambda i, o: ["verify", i, "--world-size", "2"]),
]


def input_faults():
    for kind, src in (("torch.save", SRC_FILE), ("DCP", SRC_DCP)):
        for fault in ("truncated", "replaced", "removed"):
            for name, cmd in COMMANDS:
                d = fresh("in")
                inp = os.path.join(d, "input")
                (shutil.copytree if os.path.isdir(src) else shutil.copy)(src, os.path.join(d, "reference"))
                if os.path.isdir(src):
                    shutil.copytree(src, inp)
                    victim = os.path.join(inp, "__1_0.distcp")
                else:
                    shutil.copy(src, inp)
                    victim = inp
                out = os.path.join(d, "out")

                def damage(p, victim=victim, fault=fault):
                    damage_file(victim, fault)
                    return False

                rc, err = paused_run(cmd("input", "out"), d, "opened", damage)
                what = {"truncated": "changed while being read", "replaced": "while being read",
                        "removed": "while being read"}[fault]
                # a DCP file no command has mapped yet is caught when it is opened ("changed"/"missing"),
                # one already mapped when it is read or checked
                ok = rc == 2 and os.path.basename(victim) in err and (what in err or "missing" in err
                                                                     or "cannot open" in err)
                ok = ok and not leftovers(d, out)
                record(f"{kind} input {fault} after open", name, ok, f"exit {rc}: {err.splitlines()[-1] if err else ''}")


def unflatten_faults():
    """unflatten (FSDP1 flat rank files into one file) with a rank file damaged while the output is written: nothing
    published (before: no check at all, a rank file rewritten in place gave a corrupt output with exit 0; found by a
    hunt)"""
    for fault in ("truncated", "rewritten in place", "replaced", "removed"):
        d = fresh("unflatten")
        ranks = os.path.join(d, "raw")
        shutil.copytree(os.path.join(DATA, "fsdp1_raw_r2"), ranks)
        victim = os.path.join(ranks, "optim_rank1.pt")
        out = os.path.join(d, "out.pt")

        def damage(p, victim=victim, fault=fault):
            damage_file(victim, fault)
            return False

        rc, err = paused_run(["unflatten", os.path.join(ranks, "optim_rank0.pt"), victim, "--model",
                              os.path.join(DATA, "fsdp1_r2"), "--units", "blocks.0,blocks.1", "-o", out, "--no-fsync"],
                             d, "writing", damage)
        ok = rc == 2 and "optim_rank1.pt" in err and "while being read" in err and not leftovers(d, out)
        record(f"FSDP1 rank file {fault} while the output is written", "unflatten", ok,
               f"exit {rc}: {err.splitlines()[-1] if err else ''}")


def output_faults():
    can_mount = os.geteuid() == 0 and subprocess.run(["unshare", "-m", "true"]).returncode == 0
    d = fresh("out")
    inp = os.path.join(d, "input.pt")
    shutil.copy(SRC_FILE, inp)
    before = sha(inp)
    # a missing parent folder
    for name, cmd in (("gather", ["gather", inp, "-o", os.path.join(d, "no/such/dir/out.pt")]),
                      ("reshard", ["reshard", inp, "--world-size", "2", "-o", os.path.join(d, "no/such/out")])):
        r = subprocess.run([CLI] + cmd, capture_output=True, text=True)
        ok = r.returncode == 2 and "no/such" in r.stderr and not os.path.exists(os.path.join(d, "no"))
        record("output parent missing", name, ok, f"exit {r.returncode}: {r.stderr.strip()}")
    # verify's scratch folder where TMPDIR names nothing (before: "internal error: filesystem error: ...")
    r = subprocess.run([CLI, "verify", SRC_DCP, "--world-size", "2"], capture_output=True, text=True,
                       env=dict(os.environ, TMPDIR=os.path.join(d, "no-such-tmp")))
    record("TMPDIR names no folder", "verify", r.returncode == 2 and "no-such-tmp" in r.stderr and "TMPDIR" in r.stderr
           and "internal error" not in r.stderr, f"exit {r.returncode}: {r.stderr.strip()}")
    # an empty output folder the finished output cannot be renamed onto: refused before the work (before: found at
    # the rename, after writing everything next to it; found by a hunt)
    empty = os.path.join(d, "empty_cwd")
    os.makedirs(empty, exist_ok=True)
    r = subprocess.run([CLI, "reshard", inp, "--world-size", "2", "-o", "."], cwd=empty, capture_output=True,
                       text=True)
    record("output is the current folder", "reshard", r.returncode == 2 and "is the current folder" in r.stderr
           and not os.listdir(empty) and not [n for n in os.listdir(d) if n.startswith(".empty_cwd")],
           f"exit {r.returncode}: {r.stderr.strip()}")
    if can_mount:
        script = (f"mkdir -p /mnt/t && mount -t tmpfs -o size=64k tmpfs /mnt/t && "
                  f"{CLI} reshard {inp} --world-size 2 -o /mnt/t; rc=$?; ls -A /mnt/t; exit $rc")
        r = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True)
        record("output is an empty mount point", "reshard", r.returncode == 2 and "is a mount point" in r.stderr
               and r.stdout.strip() == "", f"exit {r.returncode}: {r.stderr.strip()}")
    if not can_mount:
        record("full disk / read-only folder", "all", True, "skipped: needs root and a mount namespace")
    else:
        for fault, opts in (("full disk (ENOSPC, 4 KiB tmpfs)", "size=4k"), ("read-only folder", "ro")):
            for name, args in (("gather", ["gather", inp, "-o", "/mnt/t/out.pt"]),
                               ("reshard", ["reshard", inp, "--world-size", "2", "-o", "/mnt/t/out"]),
                               ("fix", ["fix", os.path.join(DATA, "load_cases/compiled/optim.pt"), "--model",
                                        os.path.join(DATA, "load_cases/compiled/model.pt"), "-o", "/mnt/t/out.pt"])):
                script = (f"mkdir -p /mnt/t && mount -t tmpfs -o {opts} tmpfs /mnt/t && "
                          f"{CLI} {' '.join(args)}; rc=$?; ls -A /mnt/t; exit $rc")
                r = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True)
                reason = "No space left on device" if "ENOSPC" in fault else "Read-only file system"
                ok = r.returncode == 2 and "/mnt/t/out" in r.stderr and reason in r.stderr and r.stdout.strip() == ""
                record(fault, name, ok, f"exit {r.returncode}: {r.stderr.strip()}"
                       + (f"; left: {r.stdout.strip()}" if r.stdout.strip() else "; nothing left"))
    # a deflated torch.save (zipped again) is inflated into TMPDIR: with room, read and nothing left there; without,
    # refused before a byte is written, naming the file and what to do
    if can_mount:
        deflated = os.path.join(DATA, "deflated", "adam_int.pt")
        for fault, opts, want in (("deflated input, TMPDIR with room (64 KiB tmpfs)", "size=64k", 0),
                                  ("deflated input, TMPDIR too small (4 KiB tmpfs)", "size=4k", 2)):
            script = (f"mkdir -p /mnt/t && mount -t tmpfs -o {opts} tmpfs /mnt/t && "
                      f"TMPDIR=/mnt/t {CLI} inspect --hash {deflated} >/dev/null; rc=$?; ls -A /mnt/t; exit $rc")
            r = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True)
            ok = r.returncode == want and r.stdout.strip() == "" and (
                want == 0 or (deflated in r.stderr and "bytes free" in r.stderr and "TMPDIR" in r.stderr))
            record(fault, "inspect", ok, f"exit {r.returncode}: {r.stderr.strip()[-200:]}"
                   + (f"; left: {r.stdout.strip()}" if r.stdout.strip() else "; nothing left"))
    # SIGKILL while the output is being written, then a rerun
    for name, args in (("gather", lambda o: ["gather", "input.pt", "-o", o, "--no-fsync"]),
                       ("reshard", lambda o: ["reshard", "input.pt", "--world-size", "3", "-o", o, "--no-fsync"]),
                       ("fix", lambda o: ["fix", os.path.join(DATA, "diag/compiled_fqn.pt"), "--model",
                                          os.path.join(DATA, "diag/model.pt"), "-o", o, "--no-fsync"])):
        out = os.path.join(d, "killed_" + name)

        def kill(p):
            p.send_signal(signal.SIGKILL)
            return True

        rc, err = paused_run(args(out), d, "writing", kill)
        temps = [n for n in os.listdir(d) if n.startswith("." + os.path.basename(out) + ".tmp-")]
        ok = rc == -signal.SIGKILL and not os.path.exists(out) and len(temps) == 1
        record("SIGKILL mid-write", name, ok, f"killed; output absent: {not os.path.exists(out)}; temporary {temps}")
        r = subprocess.run([CLI] + args(out), cwd=d, capture_output=True, text=True)
        temps = [n for n in os.listdir(d) if n.startswith("." + os.path.basename(out) + ".tmp-")]
        ok = r.returncode == 0 and os.path.exists(out) and not temps
        record("SIGKILL mid-write, then a rerun", name, ok,
               f"exit {r.returncode}; output written; stale temporary removed: {not temps}")
    record("inputs unchanged", "all output faults", sha(inp) == before, "input.pt byte-identical after every case")


def missing_file_map():
    """map of a DCP with one data file missing: the same table (the file held tensors only), or exit 2 naming it
    (it held the values the map reads); it printed a table of ungrouped parameters and exit 0 (found by a hunt)"""
    intact = subprocess.run([CLI, "map", SRC_DCP], capture_output=True, text=True)
    names = sorted(n for n in os.listdir(SRC_DCP) if n.endswith(".distcp"))
    refused = 0
    for name in names:
        d = fresh("map")
        inp = os.path.join(d, "input")
        shutil.copytree(SRC_DCP, inp)
        os.remove(os.path.join(inp, name))
        r = subprocess.run([CLI, "map", "input"], cwd=d, capture_output=True, text=True)
        same = r.returncode == 0 and r.stdout == intact.stdout
        named = r.returncode == 2 and name in r.stderr and "incomplete" in r.stderr
        refused += named
        record(f"DCP data file {name} missing", "map", same or named,
               f"exit {r.returncode}: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else 'nothing on stderr'}")
    record("a DCP data file holding values missing", "map", intact.returncode == 0 and refused >= 1,
           f"{refused} of {len(names)} missing files refused (the one holding param_groups among them)")


input_faults()
missing_file_map()
unflatten_faults()
output_faults()
failed = sum(1 for r in results if not r[3])
if REPORT:
    with open(REPORT, "w") as f:
        f.write("| fault | command | outcome | ok |\n|---|---|---|---|\n")
        for fault, cmd, outcome, ok in results:
            f.write(f"| {fault} | {cmd} | {outcome.replace('|', '/')} | {'yes' if ok else 'NO'} |\n")
print(f"{len(results) - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
