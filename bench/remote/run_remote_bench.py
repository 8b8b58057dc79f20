# SPDX-License-Identifier: GPL-3.0-or-later
"""Remote reads against the usual tools, same machine, same run, same local S3 server (moto_server):

    python3 bench/remote/run_remote_bench.py [--cli build/app/optscope-cli] [--ckpt bench/out/fsdp2_4rank_2gb]
                                             [--out bench/results/remote.md]

Run from the repository root (scripts/torch-python only sees the current folder). Makes the checkpoint with
bench/make_big_checkpoint.py when it is missing, uploads it with boto3, then times:
  - inspect through s3:// against local inspect + curl of the .metadata (requests, bytes fetched);
  - gather from s3:// to a local .pt against boto3's transfer manager downloading the folder + a local gather;
  - the same gather over plain HTTP from nginx (a C server that is not the bottleneck) against curl downloading the
    folder + a local gather: what the engine does when the server keeps up;
  - the same from nginx serving each connection at 20 MB/s, as object stores serve a connection, against curl
    --parallel downloading every file at once + a local gather: what requests in flight together buy;
  - gather and reshard to s3:// (streamed: nothing staged on the local disk) against the local command + boto3's
    upload_file of what it wrote;
  - peak RSS (GNU time) of each OptScope run.
moto_server is a Python server: its own speed bounds both S3 sides, so the ratios are what to read.
"""
import argparse
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "remote"))
from servers import s3_put, start_moto, start_nginx, stop  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import remote_stats as stats, timed, write_results  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--cli", default=os.path.join(ROOT, "build/app/optscope-cli"))
ap.add_argument("--ckpt", default="bench/out/fsdp2_4rank_2gb")
ap.add_argument("--out", default=os.path.join(ROOT, "bench/results/remote.md"))
a = ap.parse_args()
TORCH_PYTHON = os.path.join(ROOT, "scripts/torch-python")
work = os.path.join(ROOT, "bench/out")
ckpt = os.path.relpath(os.path.abspath(a.ckpt), work)
if not os.path.isdir(a.ckpt):
    subprocess.run([TORCH_PYTHON, "bench/make_big_checkpoint.py", a.ckpt], cwd=ROOT, check=True)


procs = []
rows = []
try:
    port = start_moto(TORCH_PYTHON, work, procs)
    t0 = time.monotonic()
    s3_put(TORCH_PYTHON, work, port, ckpt, "big")
    upload = time.monotonic() - t0
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
           "AWS_REGION": "us-east-1"}
    size = sum(os.path.getsize(os.path.join(a.ckpt, n)) for n in os.listdir(a.ckpt))
    meta = os.path.getsize(os.path.join(a.ckpt, ".metadata"))
    # inspect: remote against local + curl of the .metadata
    t_local, _, _ = timed([a.cli, "inspect", "--json", a.ckpt])
    t_curl, _, _ = timed(["curl", "-sf", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user", "bench:bench", "-o",
                          "/dev/null", f"http://127.0.0.1:{port}/ckpt/big/.metadata"])
    t_remote, rss_i, err = timed([a.cli, "--remote-stats", "inspect", "--json", "s3://ckpt/big"], env)
    req_i, bytes_i = stats(err)
    rows.append(("inspect --json", f"{t_remote:.2f} s", f"{t_local + t_curl:.2f} s (local inspect {t_local:.2f} + "
                 f"curl .metadata {t_curl:.2f})", f"{t_remote / (t_local + t_curl):.2f}x",
                 f"{req_i} requests, {bytes_i} bytes (.metadata {meta}); peak RSS {rss_i:.0f} MB"))
    # gather: remote against download + local gather
    dl = os.path.join(work, "big_download")

    def gather_row(label, url, env, download, tool):
        """gather from url against download(dl) (seconds) + a local gather of dl; one output name in two folders
        (the zip's record prefix is the output's name)"""
        for d in ("remote_gather", "local_gather", "big_download"):
            shutil.rmtree(os.path.join(work, d), ignore_errors=True)
            os.makedirs(os.path.join(work, d))
        t_remote, rss, err = timed([a.cli, "--remote-stats", "gather", url, "-o",
                                    os.path.join(work, "remote_gather", "g.pt")], env)
        req, fetched = stats(err)
        t_download = download(dl)
        t_local, _, _ = timed([a.cli, "gather", dl, "-o", os.path.join(work, "local_gather", "g.pt")])
        same = open(os.path.join(work, "remote_gather", "g.pt"), "rb").read() == \
            open(os.path.join(work, "local_gather", "g.pt"), "rb").read()
        shutil.rmtree(dl, ignore_errors=True)
        base = t_download + t_local
        rows.append((label, f"{t_remote:.2f} s", f"{base:.2f} s ({tool} download {t_download:.2f} + local gather "
                     f"{t_local:.2f})", f"{base / t_remote:.2f}x faster",
                     f"{req} requests, {fetched} bytes of {size} ({fetched / size:.3f}x); peak RSS {rss:.0f} MB; "
                     f"outputs byte-identical: {same}"))

    def boto3_download(out):
        p = subprocess.run([TORCH_PYTHON, "s3_put.py", f"http://127.0.0.1:{port}", "ckpt", "--download", "big",
                            os.path.relpath(out, work)], cwd=work, capture_output=True, text=True, check=True)
        return float(p.stdout.strip().splitlines()[-1])

    gather_row("gather -o local.pt", "s3://ckpt/big", env, boto3_download, "boto3")
    # the same over HTTP from nginx, a server that keeps up
    http_port, _, _ = start_nginx(work, work, procs)
    url = f"http://127.0.0.1:{http_port}/{ckpt}"
    names = sorted(os.listdir(a.ckpt))

    def curl_download(out):
        return timed(["curl", "-sf", *[x for n in names for x in (f"{url}/{n}", "-o", os.path.join(out, n))]])[0]

    gather_row("gather -o local.pt, http:// (nginx)", url, None, curl_download, "curl")
    # a torch.save zipped again with deflate (bench/hostile's make_inputs.deflated: 240 MB stored, 185 MB deflated) from
    # nginx: inflated from the URL into an unlinked local copy, each byte fetched once, against curl downloading it and
    # torch.load + SHA-256 of every tensor (bench/hostile/torch_side.py load_hash), as inspect --hash hashes them
    defl = os.path.join(work, "hostile", "deflated_240m.pt")
    if not os.path.isfile(defl):
        os.makedirs(os.path.dirname(defl), exist_ok=True)
        subprocess.run([TORCH_PYTHON, "-c", "import sys; sys.path.insert(0, 'bench/hostile'); import make_inputs; "
                        f"make_inputs.deflated({os.path.relpath(os.path.dirname(defl), ROOT)!r})"], cwd=ROOT, check=True)
    t_remote, rss, err = timed([a.cli, "--remote-stats", "inspect", "--hash",
                                f"http://127.0.0.1:{http_port}/{os.path.relpath(defl, work)}"])
    req, fetched = stats(err)
    got = os.path.join(work, "deflated_download.pt")
    t_curl = timed(["curl", "-sf", f"http://127.0.0.1:{http_port}/{os.path.relpath(defl, work)}", "-o", got])[0]
    t_torch = timed([TORCH_PYTHON, "bench/hostile/torch_side.py", "load_hash", os.path.relpath(got, ROOT)], cwd=ROOT)[0]
    os.unlink(got)
    rows.append(("inspect --hash of a torch.save zipped again (deflate), http:// (nginx)", f"{t_remote:.2f} s",
                 f"{t_curl + t_torch:.2f} s (curl download {t_curl:.2f} + torch.load and SHA-256 {t_torch:.2f})",
                 f"{(t_curl + t_torch) / t_remote:.2f}x faster",
                 f"{req} requests, {fetched} bytes of {os.path.getsize(defl)}; peak RSS {rss:.0f} MB"))
    # a server that serves each connection at 20 MB/s (nginx limit_rate), as an object store does (S3: about 90 MB/s
    # a connection): only requests in flight together are fast. The usual way: curl downloading every file at once
    slow_port, _, _ = start_nginx(work, os.path.join(work, "slow"), procs, limit_rate="20m")
    slow_url = f"http://127.0.0.1:{slow_port}/{ckpt}"

    def curl_parallel_download(out):
        return timed(["curl", "-sf", "--parallel", "--parallel-max", "16",
                      *[x for n in names for x in (f"{slow_url}/{n}", "-o", os.path.join(out, n))]])[0]

    gather_row("gather -o local.pt, http:// at 20 MB/s a connection", slow_url, None, curl_parallel_download,
               "curl --parallel")

    # outputs to s3://, streamed (nothing staged on the local disk), against the local command + boto3's upload_file
    # of what it wrote (its transfer manager: multipart, 10 threads)
    def output_row(label, args, prefix):
        for d in ("remote_out", "local_out"):
            shutil.rmtree(os.path.join(work, d), ignore_errors=True)
            os.makedirs(os.path.join(work, d))
        local = os.path.join(work, "local_out", "out")
        t_remote, rss, err = timed([a.cli, "--remote-stats", *args, "-o", f"s3://ckpt/{prefix}/out"], env)
        req, _ = stats(err)
        t_local, _, _ = timed([a.cli, *args, "-o", local])
        said = s3_put(TORCH_PYTHON, work, port, "local_out", f"{prefix}_boto3")
        t_up = float(said.split(" in ")[-1].split()[0])
        same = ""
        if os.path.isfile(local):
            s3_put(TORCH_PYTHON, work, port, "--get", f"{prefix}/out", "remote_out/out")
            same = f"; byte-identical: {open(local, 'rb').read() == open(os.path.join(work, 'remote_out', 'out'), 'rb').read()}"
        written = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(os.path.join(work, "local_out"))
                      for f in fs)
        base = t_local + t_up
        rows.append((label, f"{t_remote:.2f} s", f"{base:.2f} s (local {t_local:.2f} + boto3 upload {t_up:.2f})",
                     f"{base / t_remote:.2f}x faster", f"{written} bytes written in {req} requests; peak RSS "
                     f"{rss:.0f} MB{same}"))
        shutil.rmtree(os.path.join(work, "local_out"), ignore_errors=True)
        shutil.rmtree(os.path.join(work, "remote_out"), ignore_errors=True)

    output_row("gather -o s3://…/out (one .pt)", ["gather", a.ckpt], "gathered")
    output_row("reshard --world-size 8 -o s3://…/out", ["reshard", a.ckpt, "--world-size", "8", "--no-fsync"],
               "resharded")
finally:
    stop(procs)

write_results(a.out, "Remote reads and writes (s3:// through moto_server on loopback)",
              f"Checkpoint: `{a.ckpt}` ({size} bytes); upload with boto3 took {upload:.1f} s. Machine: "
              f"{os.cpu_count()} cores; {time.strftime('%Y-%m-%d')}. Each figure is one run.", rows)
