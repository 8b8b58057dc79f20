# SPDX-License-Identifier: GPL-3.0-or-later
"""Peak memory of one command, split into anonymous and file-backed resident memory.

    python3 bench/peak_mem.py CMD [ARG ...]      (the command's output is thrown away)

Prints one JSON line: the peaks of RssAnon and RssFile sampled from /proc/PID/status every 2 ms (for the peak RSS
itself use /usr/bin/time -v: ru_maxrss of a child forked from Python also counts Python's own pages before exec). A tool that memory-maps its input (optscope-cli
does) counts the mapped page-cache pages in its RSS: they are shared and reclaimable, not memory the tool allocated;
RssAnon is what it allocated.
"""
import json
import os
import subprocess
import sys
import time


def sample(pid, peaks):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("RssAnon", "RssFile", "RssShmem"):
                    peaks[k] = max(peaks.get(k, 0), int(v.split()[0]))
    except (FileNotFoundError, ProcessLookupError, ValueError):
        pass


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peaks = {}
    while True:
        pid, status, _ = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        sample(p.pid, peaks)
        time.sleep(0.002)
    print(json.dumps({"exit": os.waitstatus_to_exitcode(status), "peak_rss_anon_kb": peaks.get("RssAnon"), "peak_rss_file_kb": peaks.get("RssFile")}))


if __name__ == "__main__":
    main()
