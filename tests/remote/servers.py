# SPDX-License-Identifier: GPL-3.0-or-later
"""Servers for the remote-storage tests and benchmarks: free ports, moto_server (the S3 API, from the PyTorch chroot's
python3-moto) and boto3 uploads (s3_put.py, run in the chroot). The chroot sees only its working folder: files to
upload are put under it first."""
import os
import shutil
import socket
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, what, proc=None, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"{what} exited with {proc.returncode} before it listened")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"{what} did not listen on port {port} in {timeout} s")


FOLDER_TOKEN = "folderSIGNATUREnever-printed"


def start_nginx(root, work, procs, limit_rate=None):
    """nginx serving root over HTTP, and over HTTPS with a self-signed certificate made here (for 127.0.0.1), its
    process appended to procs; returns (http_port, https_port, certificate file). limit_rate ("4m"): each connection
    is served at most that many bytes a second, as an object store serves one connection (about 90 MB/s from S3), so
    that only requests in flight together make a read fast. Its access log (work/nginx/access.log) says per request:
    connection serial, requests on it so far, end time, duration, status, Range (requests_in_log reads it)."""
    conf_dir = os.path.join(work, "nginx")
    os.makedirs(conf_dir, exist_ok=True)
    cert, key = os.path.join(conf_dir, "cert.pem"), os.path.join(conf_dir, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", cert],
                   check=True, capture_output=True)
    http_port, https_port = free_port(), free_port()
    # /signed/...: root's files again, for requests that carry ?sig=FOLDER_TOKEN only (as an Azure SAS or any token
    # that holds for a folder's objects); "/odd name+1.pt": a name that a URL percent-encodes
    guarded = (f'location /signed/ {{ if ($arg_sig != "{FOLDER_TOKEN}") {{ return 403; }} alias {root.rstrip("/")}/; }} '
               f'location = "/odd name+1.pt" {{ alias {root.rstrip("/")}/adam_int.pt; }} '
               # a signature for one object, as S3's presigned URLs: its siblings are refused
               # one object in two versions, picked by its query (as ?versionId= or an endpoint that picks a file)
               f'location = /versioned.pt {{ if ($arg_v = "2") {{ rewrite ^ /adam_bf16.pt last; }} '
               f'rewrite ^ /adam_fp16.pt last; }} '
               # files a test lays out as it runs (work/served)
               f'location /served/ {{ alias {work.rstrip("/")}/served/; }} '
               f'location /perobject/ {{ return 403; }} location = /perobject/fsdp2_r2/.metadata {{ '
               f'if ($arg_sig != "{FOLDER_TOKEN}") {{ return 403; }} alias {root.rstrip("/")}/fsdp2_r2/.metadata; }}')
    temp = "".join(f" {k}_temp_path {conf_dir}/{k};" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    with open(os.path.join(conf_dir, "nginx.conf"), "w") as f:
        f.write(f"""daemon off; pid {conf_dir}/nginx.pid; error_log {conf_dir}/error.log;
events {{}}
http {{ log_format timed '$connection $connection_requests $msec $request_time $status "$http_range"';
  access_log {conf_dir}/access.log timed; {temp} {f"limit_rate {limit_rate};" if limit_rate else ""}
  server {{ listen 127.0.0.1:{http_port}; root {root}; {guarded} }}
  server {{ listen 127.0.0.1:{https_port} ssl; ssl_certificate {cert}; ssl_certificate_key {key}; root {root}; }}
}}
""")
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    p = subprocess.Popen([nginx, "-c", os.path.join(conf_dir, "nginx.conf"), "-p", conf_dir],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    procs.append(p)
    wait_port(http_port, "nginx", p)
    wait_port(https_port, "nginx", p)
    return http_port, https_port, cert


def start_moto(torch_python, work, procs, free_requests=None):
    """moto_server on a free port, its process (a session of its own) appended to procs; returns the port. With
    free_requests, moto's IAM emulation is on after that many requests (the set-up's): from then on it checks access
    keys and session tokens and answers as S3 does (InvalidAccessKeyId, InvalidToken, SignatureDoesNotMatch)"""
    port = free_port()
    command = [torch_python, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    if free_requests is not None:  # the chroot starts with an empty environment: set in the process itself
        command = [torch_python, "-c", "import os, sys; os.environ['INITIAL_NO_AUTH_ACTION_COUNT'] = sys.argv[1]; "
                   "from moto.server import main; main(sys.argv[2:])", str(free_requests), "-H", "127.0.0.1", "-p",
                   str(port)]
    p = subprocess.Popen(command, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    procs.append(p)
    wait_port(port, "moto_server", p, timeout=120)
    return port


def requests_in_log(work):
    """the requests of start_nginx's access log under work: (connection, start, end, status) each"""
    rows = []
    with open(os.path.join(work, "nginx", "access.log")) as f:
        for line in f:
            w = line.split()
            end, took = float(w[2]), float(w[3])
            rows.append((int(w[0]), end - took, end, int(w[4])))
    return rows


def most_in_flight(rows):
    """the most requests that were being served at the same moment"""
    events = sorted([(start, 1) for _, start, _, _ in rows] + [(end, -1) for _, _, end, _ in rows],
                    key=lambda e: (e[0], e[1]))
    most = now = 0
    for _, d in events:
        now += d
        most = max(most, now)
    return most


def start_sigv4_front(torch_python, work, procs, upstream, access_key, secret):
    """tests/remote/sigv4_proxy.py in front of moto_server at upstream (botocore checks every request's signature;
    the buckets are in us-east-1); returns (its port, the path of its log of verdicts)"""
    shutil.copy(os.path.join(HERE, "sigv4_proxy.py"), os.path.join(work, "sigv4_proxy.py"))
    port, log = free_port(), os.path.join(work, "sigv4.log")
    if os.path.exists(log):
        os.unlink(log)
    p = subprocess.Popen([torch_python, "sigv4_proxy.py", str(port), str(upstream), access_key, secret, "sigv4.log",
                          "us-east-1"],
                         cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    procs.append(p)
    wait_port(port, "the SigV4 front", p, timeout=60)
    return port, log


def s3_put(torch_python, work, port, *args):
    """tests/remote/s3_put.py ENDPOINT ckpt ARGS..., in the chroot, from work"""
    shutil.copy(os.path.join(HERE, "s3_put.py"), os.path.join(work, "s3_put.py"))
    p = subprocess.run([torch_python, "s3_put.py", f"http://127.0.0.1:{port}", "ckpt", *args], cwd=work, check=True,
                       capture_output=True, text=True)
    return p.stdout


def torch_check(torch_python, work, *args):
    """tests/remote/torch_check.py ARGS..., in the chroot, from work; (exit status, output)"""
    shutil.copy(os.path.join(HERE, "torch_check.py"), os.path.join(work, "torch_check.py"))
    p = subprocess.run([torch_python, "torch_check.py", *args], cwd=work, capture_output=True, text=True)
    return p.returncode, (p.stdout + p.stderr).strip()[-300:]


def stop(procs):
    for p in procs:
        try:
            os.killpg(p.pid, 15)
        except (ProcessLookupError, PermissionError):
            p.terminate()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
