# SPDX-License-Identifier: GPL-3.0-or-later
"""Checkpoints read in place from remote storage, against real servers this test starts itself:

- nginx (Debian) serving tests/data over HTTP and over HTTPS with a self-signed certificate made here;
- a fault proxy (this file) in front of nginx that answers 503 with Retry-After, resets the connection, sends a body
  shorter than its Content-Length and answers S3's SlowDown, before it lets a request through;
- moto_server (Debian trixie's python3-moto, in the PyTorch chroot) as the S3 API, the fixtures uploaded with boto3,
  behind sigv4_proxy.py, which checks every request's signature with botocore's signer (moto checks none); a second
  moto_server with its IAM checks on, for credentials the store refuses;
- OddServerProxy (this file) in front of nginx: a server that answers legally but unusually (a shifted 206, a HEAD
  without Content-Length or refused, a redirect with a body, weak ETags).

Every read is compared with the same command on the local copy (--json output, hashes included); the faults must be
retried and never used; errors name the URL and exit 2; the credentials never appear in any output.

    python3 remote_storage.py OPTSCOPE_CLI TEST_DATA WORKDIR [TORCH_PYTHON [REPORT.md [OPTSCOPE_APP]]]
Without TORCH_PYTHON (no chroot) the S3 cases are skipped and say so; without OPTSCOPE_APP (a build without the GUI)
the app's case is.
"""
import email.utils
import filecmp
import gzip
import http.client
import json
import os
import re
import shutil
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
import http.server
import urllib.parse
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from servers import (FOLDER_TOKEN, free_port, most_in_flight, requests_in_log, s3_put, start_moto,  # noqa: E402
                     start_nginx, start_sigv4_front, stop, torch_check, wait_port)

CLI, DATA, WORK = sys.argv[1], os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3])
TORCH_PYTHON = sys.argv[4] if len(sys.argv) > 4 and sys.argv[4] else None
# the sanitizer build (OPTSCOPE_REMOTE_TEST_QUICK=1, set by CMake): every kind of case, on fewer fixtures
QUICK = os.environ.get("OPTSCOPE_REMOTE_TEST_QUICK") == "1"
REPORT = sys.argv[5] if len(sys.argv) > 5 and sys.argv[5] else os.path.join(WORK, "remote.md")
APP = sys.argv[6] if len(sys.argv) > 6 and sys.argv[6] else None
SECRET = "OptScopeTestSecret+KEY/never-printed-4b1d"
SIGNATURE = "X-Amz-Signature=deadbeefSIGNATUREnever-printed"
PASSWORD = "OptScopePassword-never-printed"  # in a URL's user info
results = []  # (case, outcome, ok)
outputs = []  # every stdout/stderr the CLI printed: the secret must be in none
procs = []


def deflate_again(path):
    """@p path, a torch.save archive, zipped again in place with every record deflated (Python's zipfile), as
    tests/fixtures/make_fixtures.py's make_deflated does"""
    with zipfile.ZipFile(path) as zin:
        records = [(info.filename, zin.read(info.filename)) for info in zin.infolist()]
    with zipfile.ZipFile(path, "w") as zout:
        for name, data in records:
            zout.writestr(name, data, compress_type=zipfile.ZIP_DEFLATED)


def cli(args, env=None, check=None):
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([CLI] + args, capture_output=True, text=True, env=e, timeout=600)
    outputs.append(p.stdout + p.stderr)
    if check is not None and p.returncode != check:
        raise AssertionError(f"{' '.join(args)}: exit {p.returncode}, expected {check}\n{p.stderr}")
    return p


def record(case, outcome, ok):
    results.append((case, outcome, ok))
    print(("ok   " if ok else "FAIL ") + case + ": " + outcome, flush=True)


def same_as_local(case, url, local, env=None, extra=()):
    """`inspect --json --hash` of the URL equals that of the local copy, the location aside"""
    r = cli(["inspect", "--json", "--hash", *extra, url], env)
    l = cli(["inspect", "--json", "--hash", *extra, local])
    if r.returncode != 0:
        record(case, f"exit {r.returncode}: {r.stderr.strip()}", False)
        return
    rj, lj = json.loads(r.stdout), json.loads(l.stdout)
    rj.pop("path", None), lj.pop("path", None)
    text = json.dumps(rj, sort_keys=True).replace(url.split("?")[0].rstrip("/"), local)
    ok = json.loads(text) == lj
    record(case, f"{len(lj.get('entries', lj.get('keys', [])))} entries, same --json as the local copy" if ok
           else "differs from the local copy", ok)


def expect_error(case, args, needles, env=None):
    p = cli(args, env)
    ok = p.returncode == 2 and all(n in p.stderr for n in needles)
    record(case, f"exit {p.returncode}: {p.stderr.strip()[:200]}", ok)


def remote_stats(p):
    for line in p.stderr.splitlines():
        if line.startswith("remote: "):
            w = line.split()
            return int(w[1]), int(w[3]), int(w[6])
    return None


# ---- servers --------------------------------------------------------------------------------------------------------

class FaultProxy(http.server.BaseHTTPRequestHandler):
    """forwards to nginx; the ranged GETs meet, in turn: 503 + Retry-After, a reset, a short body, SlowDown"""
    upstream = 0
    faults = []
    lock = threading.Lock()
    injected = []

    def log_message(self, *a):
        pass

    def do_HEAD(self):
        self.forward(head=True)

    def do_GET(self):
        fault = None
        if "Range" in self.headers:
            with FaultProxy.lock:
                if FaultProxy.faults:
                    fault = FaultProxy.faults.pop(0)
                    FaultProxy.injected.append(fault)
        if fault == "503":
            self.send_response(503)
            self.send_header("Retry-After", "1")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if fault == "slowdown":
            body = b"<?xml version='1.0'?><Error><Code>SlowDown</Code><Message>Reduce your request rate</Message></Error>"
            self.send_response(503)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if fault == "reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            self.connection.close()
            return
        self.forward(head=False, short=fault == "short")

    def forward(self, head, short=False):
        c = http.client.HTTPConnection("127.0.0.1", self.upstream, timeout=30)
        headers = {k: v for k, v in self.headers.items() if k.lower() in ("range", "if-match")}
        c.request("HEAD" if head else "GET", self.path, headers=headers)
        r = c.getresponse()
        body = r.read()
        self.send_response(r.status)
        for k, v in r.getheaders():
            if k.lower() in ("content-length", "content-range", "etag", "content-type", "accept-ranges",
                             "last-modified"):
                self.send_header(k, v)
        self.end_headers()
        if not head:
            self.wfile.write(body[: len(body) // 2] if short else body)
            if short:
                self.wfile.flush()
                self.close_connection = True


class OddServerProxy(FaultProxy):
    """forwards to nginx, answering as a legal but unusual server would, by the first path segment (then dropped):
    shift: a ranged GET gets the range one byte earlier, labelled so in its Content-Range;
    nolen: a HEAD without Content-Length (HTTP allows it);
    redir: a 302 with Content-Type text/html and a body, to the object served without Content-Type;
    weak: a weak ETag (W/"..."), and If-Match compared strongly (RFC 9110): a weak tag never matches, 412;
    presign: HEAD refused with 403, as S3 answers a presigned URL signed for GET;
    newer: If-Match ignored, and every GET answered with another ETag than the HEAD's (replaced since);
    weaknewer: weak ETags, and every GET's another than the HEAD's (a replaced file, read unpinned by If-Match);
    noetag: no ETag, only Last-Modified; datenewer: the same, every GET's Last-Modified another than the HEAD's;
    lmfmt: no ETag, and each GET's Last-Modified the same date in RFC 850's form (another legal HTTP-date);
    lmnow: no ETag, and Last-Modified the time of each answer (as some dynamic servers date theirs);
    nopin: neither ETag nor Last-Modified (a dynamic answer): nothing to hold the reads to, which must be said;
    gzip: every GET's body gzipped with Content-Encoding: gzip, though none was asked for;
    cap: a ranged GET answered with at most 1 MiB, labelled truthfully (as servers that cap each answer do)"""

    def do_HEAD(self):
        self.odd(head=True)

    def do_GET(self):
        self.odd(head=False)

    def odd(self, head):
        mode, _, rest = self.path.lstrip("/").partition("/")
        path = "/" + rest
        if mode == "presign" and head:
            return self.reply(403, [], b"")
        if mode == "redir":
            return self.reply(302, [("Location", "/plain" + path), ("Content-Type", "text/html")], b"<html>moved" * 40,
                              head)
        headers = {k: v for k, v in self.headers.items() if k.lower() in ("range", "if-match")}
        if mode in ("weak", "weaknewer") and "If-Match" in self.headers:
            return self.reply(412, [], b"", head)  # a weak tag never matches strongly
        if mode == "newer":
            headers.pop("If-Match", None)
        if mode == "shift" and "Range" in self.headers:
            a, b = (int(x) for x in self.headers["Range"].split("=")[1].split("-"))
            if a > 0:
                headers["Range"] = f"bytes={a - 1}-{b - 1}"
        if mode == "cap" and "Range" in self.headers:
            a, b = (int(x) for x in self.headers["Range"].split("=")[1].split("-"))
            headers["Range"] = f"bytes={a}-{min(b, a + (1 << 20) - 1)}"
        c = http.client.HTTPConnection("127.0.0.1", self.upstream, timeout=30)
        c.request("HEAD" if head else "GET", path, headers=headers)
        r = c.getresponse()
        body = r.read()
        out = []
        for k, v in r.getheaders():
            if k.lower() == "etag" and mode in ("weak", "weaknewer"):
                v = "W/" + v
            if k.lower() == "etag" and mode in ("newer", "weaknewer") and not head:
                v = v[:-1] + '-2"'
            if k.lower() == "etag" and mode in ("noetag", "datenewer", "lmfmt", "lmnow", "nopin"):
                continue
            if k.lower() == "last-modified" and mode == "nopin":
                continue
            if k.lower() == "last-modified" and mode == "datenewer" and not head:
                v = "Thu, 01 Jan 2015 00:00:00 GMT"
            if k.lower() == "last-modified" and mode == "lmfmt" and not head:
                v = email.utils.parsedate_to_datetime(v).strftime("%A, %d-%b-%y %H:%M:%S GMT")
            if k.lower() == "last-modified" and mode == "lmnow":
                v = email.utils.formatdate(usegmt=True)
            if k.lower() == "content-length" and mode == "nolen" and head:
                continue
            if k.lower() == "content-type" and mode == "plain":
                continue
            if k.lower() in ("content-length", "content-range", "etag", "content-type", "accept-ranges",
                             "last-modified"):
                out.append((k, v))
        if mode == "gzip" and not head:
            body = gzip.compress(body)
            out = [(k, str(len(body)) if k.lower() == "content-length" else v) for k, v in out]
            out.append(("Content-Encoding", "gzip"))
        self.reply(r.status, out, body, head, length_given=True)

    def reply(self, status, headers, body, head=False, length_given=False):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        if not length_given:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)


class HttpLatencyProxy(FaultProxy):
    """forwards to nginx, each request 100 ms late (a distant server's round trip), and counts how many HEADs and
    how many GETs are waited for at once"""
    lock = threading.Lock()
    now = {"HEAD": 0, "GET": 0}
    most = {"HEAD": 0, "GET": 0}

    def delayed(self, method):
        cls = HttpLatencyProxy
        with cls.lock:
            cls.now[method] += 1
            cls.most[method] = max(cls.most[method], cls.now[method])
        try:
            time.sleep(0.1)
            self.forward(head=method == "HEAD")
        finally:
            with cls.lock:
                cls.now[method] -= 1

    def do_HEAD(self):
        self.delayed("HEAD")

    def do_GET(self):
        self.delayed("GET")

    @classmethod
    def reset(cls):
        with cls.lock:
            cls.now, cls.most = {"HEAD": 0, "GET": 0}, {"HEAD": 0, "GET": 0}


class StallProxy(FaultProxy):
    """forwards to nginx, but never answers a ranged GET of a .distcp (a server that stalls mid-job): the metadata
    arrives, the data never does"""
    stalled = threading.Event()  # a request is being stalled

    def do_GET(self):
        if "Range" in self.headers and self.path.endswith(".distcp"):
            StallProxy.stalled.set()
            time.sleep(600)
            return
        self.forward(head=False)


class DataFailProxy(FaultProxy):
    """forwards to nginx, but answers every ranged GET of a .distcp with 500 (a store that fails on the data, after
    the metadata read fine)"""

    def do_GET(self):
        if "Range" in self.headers and self.path.endswith(".distcp"):
            body = b"<?xml version='1.0'?><Error><Code>InternalError</Code></Error>"
            self.send_response(500)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.forward(head=False)


class OverlongProxy(FaultProxy):
    """forwards to nginx over kept-alive connections (HTTP/1.1), but follows the first ranged GET's body with 7 bytes
    more than its Content-Length: the next request on that connection reads them as its answer's first line"""
    protocol_version = "HTTP/1.1"
    spoiled = []

    def do_GET(self):
        c = http.client.HTTPConnection("127.0.0.1", self.upstream, timeout=30)
        c.request("GET", self.path, headers={k: v for k, v in self.headers.items() if k.lower() in ("range", "if-match")})
        r = c.getresponse()
        body = r.read()
        self.send_response(r.status)
        for k, v in r.getheaders():
            if k.lower() in ("content-length", "content-range", "etag", "content-type", "accept-ranges"):
                self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)
        with FaultProxy.lock:
            spoil = "Range" in self.headers and not OverlongProxy.spoiled
            if spoil:
                OverlongProxy.spoiled.append(self.path)
        if spoil:
            self.wfile.write(b"garbage")
        self.wfile.flush()


class TrickleProxy(FaultProxy):
    """forwards to nginx, but sends the body of every ranged GET a byte every 0.2 s (a server that never stalls, and
    never finishes)"""

    def do_GET(self):
        if "Range" not in self.headers:
            return self.forward(head=False)
        c = http.client.HTTPConnection("127.0.0.1", self.upstream, timeout=30)
        c.request("GET", self.path, headers={k: v for k, v in self.headers.items() if k.lower() == "range"})
        r = c.getresponse()
        body = r.read()
        self.send_response(r.status)
        for k, v in r.getheaders():
            if k.lower() in ("content-length", "content-range", "etag", "content-type"):
                self.send_header(k, v)
        self.end_headers()
        try:
            for i in range(len(body)):
                self.wfile.write(body[i:i + 1])
                self.wfile.flush()
                time.sleep(0.2)
        except OSError:
            pass  # the client gave up


class S3FaultProxy(http.server.BaseHTTPRequestHandler):
    """forwards every request to moto_server; refuses the PUT of any key ending in /.metadata (403 AccessDenied), so
    that a DCP output's data objects are written and its last object fails, and the PUT of any upload's part 2, so
    that a multipart upload fails after a part was sent"""
    upstream = 0
    refuse = True  # the PUTs above; a subclass that only forwards sets False

    def log_message(self, *a):
        pass

    def handle_any(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
        if self.refuse and self.command == "PUT" and (self.path.split("?")[0].endswith("/.metadata")
                                                      or "partNumber=2&" in self.path):
            err = b"<?xml version='1.0'?><Error><Code>AccessDenied</Code><Message>denied</Message></Error>"
            self.send_response(403)
            self.send_header("Content-Length", str(len(err)))
            self.end_headers()
            self.wfile.write(err)
            return
        c = http.client.HTTPConnection("127.0.0.1", self.upstream, timeout=60)
        c.request(self.command, self.path, body=body or None, headers=dict(self.headers.items()))
        r = c.getresponse()
        data = r.read()
        self.send_response(r.status)
        for k, v in r.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_any


class S3HostRecordingProxy(S3FaultProxy):
    """forwards every request to moto_server, Host header and all, and records each request's Host and path: which
    addressing the client used (moto serves both)"""
    refuse = False
    seen = []

    def handle_any(self):
        S3HostRecordingProxy.seen.append((self.headers.get("Host", ""), self.path))
        S3FaultProxy.handle_any(self)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_any


class S3LostAnswerProxy(S3FaultProxy):
    """forwards every request to moto_server; the first PUT of each object and the first completion of each
    multipart upload reach it, but their answers are lost (the connection closes with none): the writer asks again,
    and the object is there already"""
    seen = set()
    refuse = False

    def handle_any(self):
        first = (self.command == "PUT" and "partNumber=" not in self.path) or \
            (self.command == "POST" and "uploadId=" in self.path)
        if not first or self.path in S3LostAnswerProxy.seen:
            return S3FaultProxy.handle_any(self)
        S3LostAnswerProxy.seen.add(self.path)
        body = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
        c = http.client.HTTPConnection("127.0.0.1", self.upstream, timeout=60)
        c.request(self.command, self.path, body=body or None, headers=dict(self.headers.items()))
        c.getresponse().read()
        self.close_connection = True  # no answer

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_any


class S3NoConditionsProxy(S3FaultProxy):
    """forwards every request to moto_server but those that ask to create an object only where none is: 501
    NotImplemented, as an S3-compatible store without conditional writes answers"""
    refuse = False

    def handle_any(self):
        if not self.headers.get("If-None-Match"):
            return S3FaultProxy.handle_any(self)
        self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
        err = (b"<?xml version='1.0'?><Error><Code>NotImplemented</Code><Message>A header you provided implies "
               b"functionality that is not implemented</Message><Header>If-None-Match</Header></Error>")
        self.send_response(501)
        self.send_header("Content-Length", str(len(err)))
        self.end_headers()
        self.wfile.write(err)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_any


class S3CutStreamProxy(S3FaultProxy):
    """forwards every request to moto_server; the first ranged GET of more than 8 MiB (a stream: a read by ranges asks
    for 8 MiB at most) gets its headers and half its body, then the connection closes"""
    cut = []

    def handle_any(self):
        rng = self.headers.get("Range", "")
        if self.command != "GET" or not rng.startswith("bytes=") or S3CutStreamProxy.cut:
            return S3FaultProxy.handle_any(self)
        first, last = map(int, rng[len("bytes="):].split("-"))
        if last - first + 1 <= 8 << 20:
            return S3FaultProxy.handle_any(self)
        S3CutStreamProxy.cut.append(rng)
        c = http.client.HTTPConnection("127.0.0.1", self.upstream, timeout=60)
        c.request("GET", self.path, headers=dict(self.headers.items()))
        r = c.getresponse()
        data = r.read()
        self.send_response(r.status)
        for k, v in r.getheaders():
            if k.lower() not in ("transfer-encoding", "connection"):
                self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data[: len(data) // 2])
        self.wfile.flush()
        self.close_connection = True

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_any


class S3LatencyProxy(S3FaultProxy):
    """forwards every request to moto_server, each ranged GET 100 ms late (a distant store's time to first byte), and
    counts how many ranged GETs are waited for at once"""
    lock = threading.Lock()
    now = most = ranged = 0

    def handle_any(self):
        cls = S3LatencyProxy
        ranged = self.command == "GET" and "Range" in self.headers
        if ranged:
            with cls.lock:
                cls.now += 1
                cls.ranged += 1
                cls.most = max(cls.most, cls.now)
            time.sleep(0.1)
        try:
            S3FaultProxy.handle_any(self)
        finally:
            if ranged:
                with cls.lock:
                    cls.now -= 1

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_any

    @classmethod
    def reset(cls):
        with cls.lock:
            cls.now = cls.most = cls.ranged = 0


class S3StallProxy(S3FaultProxy):
    """forwards every request to moto_server, but never answers the PUT of an upload's part 2 (a store that stalls
    while an output is written)"""
    stalled = threading.Event()
    listings = False  # also never answer a listing (ListObjectsV2)
    deletes = False  # also never answer a DELETE (the abort of an upload: the whole store stalls)

    def handle_any(self):
        if S3StallProxy.deletes and self.command == "DELETE":
            time.sleep(600)
            return
        if S3StallProxy.listings and self.command == "GET" and "list-type=2" in self.path:
            S3StallProxy.stalled.set()
            time.sleep(600)
            return
        if self.command == "PUT" and "partNumber=2&" in self.path:
            self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
            S3StallProxy.stalled.set()
            time.sleep(600)
            return
        S3FaultProxy.handle_any(self)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_any


class S3DeniedProxy(S3FaultProxy):
    """forwards every request to moto_server, but answers with `status` (403 AccessDenied: a bucket policy that hides a
    folder or an object; 500: a store failing) each listing (ListObjectsV2) of the keys under a prefix that ends in
    `listing`, and each GET of an object whose key ends in `get`"""
    listing = "/global_step2/"
    get = None
    status = 403

    def handle_any(self):
        cls = S3DeniedProxy
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        listed = "list-type" in query and cls.listing and query.get("prefix", [""])[0].endswith(cls.listing)
        got = "list-type" not in query and cls.get and url.path.endswith(cls.get)
        if self.command == "GET" and (listed or got):
            code = b"AccessDenied" if cls.status == 403 else b"InternalError"
            err = b"<?xml version='1.0'?><Error><Code>" + code + b"</Code><Message>no</Message></Error>"
            self.send_response(cls.status)
            self.send_header("Content-Length", str(len(err)))
            self.end_headers()
            self.wfile.write(err)
            return
        S3FaultProxy.handle_any(self)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_any


def interrupted(args, env, stalled):
    """runs the CLI until @p stalled is set (it waits on a stalled server), then sends SIGINT: (exit, seconds from
    the signal to the exit, stderr)"""
    stalled.clear()
    p = subprocess.Popen([CLI] + args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, **env))
    if not stalled.wait(60):
        p.kill()
        return None, 0.0, "never reached the stalled request"
    time.sleep(0.5)
    t0 = time.monotonic()
    p.send_signal(signal.SIGINT)
    try:
        err = p.communicate(timeout=120)[1]
    except subprocess.TimeoutExpired:
        p.kill()
        err = p.communicate()[1]
    outputs.append(err)
    return p.returncode, time.monotonic() - t0, err


class S3RedirectProxy(http.server.BaseHTTPRequestHandler):
    """answers every request with a redirect of the same path and query to `target`, as S3 answers a request for a
    bucket another endpoint serves (307 TemporaryRedirect, the bucket's region in x-amz-bucket-region); records each
    request"""
    target = ""
    region = "us-east-1"
    seen = []

    def log_message(self, *a):
        pass

    def handle_any(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
        S3RedirectProxy.seen.append((self.command, self.path))
        body = b"" if self.command == "HEAD" else (
            b"<?xml version='1.0'?><Error><Code>TemporaryRedirect</Code><Message>Please re-send this request to the "
            b"specified temporary endpoint.</Message></Error>")
        self.send_response(307)
        self.send_header("Location", self.target + self.path)
        self.send_header("x-amz-bucket-region", self.region)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_any


def start_proxy(upstream, handler=None):
    handler = handler or FaultProxy
    handler.upstream = upstream

    class Server(socketserver.ThreadingTCPServer):
        # many connections opened at once (a client's requests in flight together): with socketserver's backlog of 5
        # the rest wait for the kernel's SYN retry, a second late, which looked like a client that asks in turn
        request_queue_size = 256

    server = Server(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_address[1]


# ---- the cases ------------------------------------------------------------------------------------------------------

def http_cases(http_port, https_port, cert):
    base = f"http://127.0.0.1:{http_port}"
    for rel in ("adam_int.pt", "adam_int_legacy.pt", "fsdp2_r2", "fsdp2_r2/.metadata", "hf/single/model.safetensors",
                "hf/sharded", "hf/sharded/model.safetensors.index.json", "fsdp2_r3", "fsdp1_sharded_r3"):
        same_as_local(f"HTTP: inspect {rel}", f"{base}/{rel}", os.path.join(DATA, rel))
    # DeepSpeed ZeRO over plain HTTP (no listing): the rank files found by DeepSpeed's names (before: "holds no
    # DeepSpeed model or optim states files"); ZeRO-2, ZeRO-3, bf16 names, 4 ranks, a tag folder given directly; a
    # universal checkpoint's states by torch.optim's state names (before: only fp32.pt, 7 of 28 tensors, silently)
    zero = ("zero/stage2/ckpt", "zero/stage3/ckpt", "zero/synthetic/bf16_z2_w2/ckpt", "zero/synthetic/z2_frozen_w4/ckpt",
            "zero/stage2/ckpt/global_step2", "zero/stage1", "zero/stage3/universal")
    for rel in ("zero/synthetic/bf16_z2_w2/ckpt", "zero/stage3/universal") if QUICK else zero:
        same_as_local(f"HTTP: inspect {rel}", f"{base}/{rel}", os.path.join(DATA, rel))
    same_as_local("HTTP: a presigned URL's query is kept off every output", f"{base}/adam_int.pt?{SIGNATURE}",
                  os.path.join(DATA, "adam_int.pt"))
    p = cli(["diff", f"{base}/fsdp2_r2", os.path.join(DATA, "fsdp2_r2")])
    record("HTTP: diff URL against the local copy", f"exit {p.returncode}", p.returncode == 0)
    # values that hold tensors (a sparse COO and a quantized tensor; LBFGS-like lists; a value 301 lists deep): read,
    # compared and gathered from a URL as from the local file, the tensors' bytes inside them too
    for rel in ("weights_only_values/values.pt", "hostile/deep_lists_a.pt"):
        same_as_local(f"HTTP: inspect {rel} (values holding tensors)", f"{base}/{rel}", os.path.join(DATA, rel))
        p = cli(["diff", f"{base}/{rel}", os.path.join(DATA, rel)])
        record(f"HTTP: diff of {rel} (values holding tensors) against the local copy: EQUAL, wholly compared",
               f"exit {p.returncode}: {p.stdout.strip()[-160:]}",
               p.returncode == 0 and "EQUAL" in p.stdout and "in part" not in p.stdout)
        outs = [os.path.join(WORK, "values_gather", side) for side in ("remote", "local")]
        for d in outs:
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
        p = cli(["gather", f"{base}/{rel}", "-o", os.path.join(outs[0], "g.pt")])
        l = cli(["gather", os.path.join(DATA, rel), "-o", os.path.join(outs[1], "g.pt")])
        record(f"HTTP: gather of {rel} (values holding tensors) is byte-identical to the local gather",
               f"exit {p.returncode} (local {l.returncode}): {p.stderr.strip()[-160:]}",
               p.returncode == 0 and l.returncode == 0
               and filecmp.cmp(os.path.join(outs[0], "g.pt"), os.path.join(outs[1], "g.pt"), shallow=False))
    # torch.save archives zipped again with deflate (tests/data/deflated/, read by torch.load): inflated from the URL
    # into a local copy as a local file is, and nothing of it left in TMPDIR (before: refused, "download it")
    tmp = os.path.join(WORK, "deflated_tmp")
    os.makedirs(tmp, exist_ok=True)
    for rel in ("deflated/adam_int.pt", "deflated/adam_int_mixed.pt"):
        same_as_local(f"HTTP: inspect {rel} (records deflated by another tool)", f"{base}/{rel}",
                      os.path.join(DATA, rel), {"TMPDIR": tmp})
        p = cli(["diff", f"{base}/{rel}", os.path.join(DATA, "adam_int.pt")], {"TMPDIR": tmp})
        record(f"HTTP: diff of {rel} against adam_int.pt before it was zipped again: EQUAL",
               f"exit {p.returncode}: {(p.stdout + p.stderr).strip()[-160:]}", p.returncode == 0 and "EQUAL" in p.stdout)
        outs = [os.path.join(WORK, "deflated_gather", side) for side in ("remote", "local")]
        for d in outs:
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
        p = cli(["gather", f"{base}/{rel}", "-o", os.path.join(outs[0], "g.pt")], {"TMPDIR": tmp})
        l = cli(["gather", os.path.join(DATA, rel), "-o", os.path.join(outs[1], "g.pt")])
        record(f"HTTP: gather of {rel} is byte-identical to the local gather; TMPDIR left empty",
               f"exit {p.returncode} (local {l.returncode}): {p.stderr.strip()[-160:]}; TMPDIR holds {os.listdir(tmp)}",
               p.returncode == 0 and l.returncode == 0 and not os.listdir(tmp)
               and filecmp.cmp(os.path.join(outs[0], "g.pt"), os.path.join(outs[1], "g.pt"), shallow=False))
    expect_error("HTTP: a deflated archive with TMPDIR unusable is refused, naming the URL and what to do",
                 ["inspect", f"{base}/deflated/adam_int.pt"],
                 [f"{base}/deflated/adam_int.pt", "point TMPDIR at a folder with room"],
                 {"TMPDIR": os.path.join(WORK, "no_such_tmp")})
    # a password in a folder URL (user info, sent as HTTP basic auth): never shown (before: inspect's JSON path, check's
    # and diagnose's summaries printed it for a folder; found by a hunt)
    with_password = base.replace("://", f"://optscope:{PASSWORD}@", 1)
    for verb in (["inspect", "--json"], ["check"], ["diagnose"]):
        p = cli(verb + [f"{with_password}/fsdp2_r2"])
        l = cli(verb + [os.path.join(DATA, "fsdp2_r2")])
        shown = p.stdout + p.stderr
        record(f"HTTP: {verb[0]} of a folder URL with a password: the local exit status, no password shown",
               f"exit {p.returncode} (local {l.returncode}){'; SHOWN' if PASSWORD in shown else ''}",
               p.returncode == l.returncode and PASSWORD not in shown and f"{base}/fsdp2_r2" in shown)
    # a folder URL with a token query (an Azure SAS, a gateway's token): every object under it is asked for with the
    # token (before: "is no object (HTTP 403), nor a folder": the readers joined names after the query)
    token = f"sig={FOLDER_TOKEN}"
    for rel in ("fsdp2_r2", "hf/sharded", "zero/stage2/ckpt", "zero/stage3/universal", "megatron/sharded_torch_dist"):
        if os.path.exists(os.path.join(DATA, rel)):
            same_as_local(f"HTTP: the folder URL {rel}?TOKEN: its objects are asked for with the token",
                          f"{base}/signed/{rel}?{token}", os.path.join(DATA, rel))
    same_as_local("HTTP: a file URL with a token query, a DCP .metadata: its data files carry the token too",
                  f"{base}/signed/fsdp2_r2/.metadata?{token}", os.path.join(DATA, "fsdp2_r2"))
    expect_error("HTTP: the same folder without its token is refused, naming the URL",
                 ["inspect", f"{base}/signed/fsdp2_r2/.metadata"], [f"{base}/signed/fsdp2_r2/.metadata", "HTTP 403"])
    # a ZeRO `latest` naming a tag that is not there, as the local folder says it (before, over HTTP: "holds no
    # DeepSpeed model or optim states files", as every name is a folder there)
    served = os.path.join(WORK, "served", "zero_badtag")
    shutil.copytree(os.path.join(DATA, "zero", "stage2", "ckpt"), served)
    with open(os.path.join(served, "latest"), "w") as f:
        f.write("global_step99")
    expect_error("HTTP: a ZeRO `latest` naming a missing tag says so",
                 ["inspect", f"{base}/served/zero_badtag"], ["names tag 'global_step99', but there is no folder"])
    # a .metadata signed for itself alone: its data files are refused, and that is what is said (before: "is missing")
    p = cli(["check", f"{base}/perobject/fsdp2_r2/.metadata?{token}"])
    record("HTTP: data files the server refuses are said to be refused (HTTP 403), not missing",
           f"exit {p.returncode}: {p.stdout.strip()[:160]}",
           p.returncode == 1 and "'__0_0.distcp' named by .metadata cannot be read: HTTP 403" in p.stdout)
    p = cli(["diff", f"{base}/signed/fsdp2_r2?{token}", f"{base}/fsdp2_r2"])
    record("HTTP: diff of a token-query folder against the plain one", f"exit {p.returncode}", p.returncode == 0)
    out, local_out = os.path.join(WORK, "signed", "g.pt"), os.path.join(WORK, "signed_local", "g.pt")
    [os.makedirs(os.path.dirname(o), exist_ok=True) for o in (out, local_out)]
    p = cli(["gather", f"{base}/signed/fsdp2_r2?{token}", "-o", out])
    l = cli(["gather", os.path.join(DATA, "fsdp2_r2"), "-o", local_out])
    same = p.returncode == 0 and l.returncode == 0 and open(out, "rb").read() == open(local_out, "rb").read()
    record("HTTP: gather of a token-query folder writes the local gather's bytes", f"exit {p.returncode}", same)
    # two versions of one object, told apart by their queries: two locations (a query taken for a folder's token
    # would have read one of them twice: EQUAL)
    p = cli(["diff", f"{base}/versioned.pt?v=1", f"{base}/versioned.pt?v=2"])
    l = cli(["diff", os.path.join(DATA, "adam_fp16.pt"), os.path.join(DATA, "adam_bf16.pt")])
    record("HTTP: two versions of one object picked by their queries are two checkpoints",
           f"exit {p.returncode} (local copies: {l.returncode})", p.returncode == 1 and l.returncode == 1)
    same_as_local("HTTP: a file URL with a token query reads with it", f"{base}/signed/adam_int.pt?{token}",
                  os.path.join(DATA, "adam_int.pt"))
    # a name that the URL percent-encodes is shown decoded, as the local file's name is (before: "odd%20name%2B1.pt")
    p = cli(["inspect", "--json", f"{base}/odd%20name%2B1.pt"])
    files = set(re.findall(r'"file": "([^"]*)"', p.stdout))
    record("HTTP: a percent-encoded file name is shown decoded", f"exit {p.returncode}, files {sorted(files)}",
           p.returncode == 0 and files == {"odd name+1.pt"})
    expect_error("HTTP 404 names the URL", ["inspect", f"{base}/no_such.pt"], [f"{base}/no_such.pt", "HTTP 404"])
    # watch lists the run's folder at every look (before: nothing printed and exit 0, also for a server not there)
    expect_error("HTTP: watch refuses a folder it cannot list", ["watch", "--once", f"{base}/fsdp2_r2"],
                 ["cannot be listed over HTTP", f"{base}/fsdp2_r2"])
    expect_error("watch --once of a local folder that is not there says so",
                 ["watch", "--once", os.path.join(WORK, "no_such_run")], ["no such folder"])
    expect_error("HTTP: a folder no format's file names is refused, saying HTTP cannot list",
                 ["inspect", f"{base}/torchtitan"], ["cannot be listed over HTTP"])
    same_as_local("HTTPS with the server's CA (CURL_CA_BUNDLE)", f"https://127.0.0.1:{https_port}/fsdp2_r2",
                  os.path.join(DATA, "fsdp2_r2"), env={"CURL_CA_BUNDLE": cert})
    expect_error("HTTPS: an untrusted certificate is refused and says what to do",
                 ["inspect", f"https://127.0.0.1:{https_port}/adam_int.pt"], ["CURL_CA_BUNDLE", "https://127.0.0.1"],
                 env={"CURL_CA_BUNDLE": "", "SSL_CERT_FILE": ""})


def http_edge_cases():
    """a server that ignores Range (Python's http.server answers 200 with the whole object), and names an index gives
    that need percent-encoding in a URL"""
    port = free_port()
    plain_log = os.path.join(WORK, "plain_http.log")
    plain = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"], cwd=DATA,
                             stdout=subprocess.DEVNULL, stderr=open(plain_log, "w"))
    procs.append(plain)
    wait_port(port, "python3 -m http.server", plain)
    # a small object is fetched whole once and kept (before: refused, "does not serve byte ranges"): every command
    # reads the DCP folder as the local copy, each data file asked for at most three times (the Range request that
    # found the whole object, and a read-ahead's, both cut short; then one whole GET)
    same_as_local("HTTP: a server that ignores Range: a small .metadata is read whole",
                  f"http://127.0.0.1:{port}/fsdp2_r2/.metadata", os.path.join(DATA, "fsdp2_r2", ".metadata"))
    for command in (["check"], ["inspect", "--hash", "--json"], ["diff", "--json"]):
        before = open(plain_log).read().count("__1_0.distcp")
        second = [os.path.join(DATA, "fsdp2_r2")] if command[0] == "diff" else []
        p = cli([*command, f"http://127.0.0.1:{port}/fsdp2_r2", *second])
        l = cli([*command, os.path.join(DATA, "fsdp2_r2"), *second])
        gets = open(plain_log).read().count("__1_0.distcp") - before
        shown = lambda out: out.replace(f"http://127.0.0.1:{port}/fsdp2_r2", "CKPT").replace(
            os.path.join(DATA, "fsdp2_r2"), "CKPT")
        record(f"HTTP: {' '.join(command)} of a DCP folder on a server that ignores Range reads each data file with one "
               "whole GET, as the local copy", f"exit {p.returncode} (local {l.returncode}), __1_0.distcp asked {gets} "
               f"times: {p.stderr.strip()[-160:]}",
               p.returncode == l.returncode and shown(p.stdout) == shown(l.stdout) and 0 < gets <= 3)
    local_out, remote_out = os.path.join(WORK, "norange_local"), os.path.join(WORK, "norange_remote")
    for d in (local_out, remote_out):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    p = cli(["gather", f"http://127.0.0.1:{port}/fsdp2_r2", "-o", os.path.join(remote_out, "g.pt")])
    l = cli(["gather", os.path.join(DATA, "fsdp2_r2"), "-o", os.path.join(local_out, "g.pt")])
    same = p.returncode == 0 and l.returncode == 0 and filecmp.cmp(
        os.path.join(remote_out, "g.pt"), os.path.join(local_out, "g.pt"), shallow=False)
    record("HTTP: gather from a server that ignores Range is byte-identical to the local gather",
           f"exit {p.returncode}: {p.stderr.strip()[-160:]}", same)
    # past what may be held whole (half the remote cache: 512 KiB here), a 1 MB data file is refused at once, named
    # with what to do, and counted as one failed read, not retried per item
    t0 = time.monotonic()
    before = open(plain_log).read().count("__0_0.distcp")
    p = cli(["check", f"http://127.0.0.1:{port}/gpu/fsdp2_bf16mp_fused_adamw/ckpt"],
            env={"OPTSCOPE_REMOTE_CACHE_MB": "1"})
    took = time.monotonic() - t0
    gets = open(plain_log).read().count("__0_0.distcp") - before
    record("HTTP: a server that ignores Range: an object larger than may be held whole is refused at once",
           f"exit {p.returncode} in {took:.1f} s, __0_0.distcp asked {gets} times: {p.stderr.strip()[-200:]}",
           p.returncode == 2 and "does not serve byte ranges" in p.stderr and "OPTSCOPE_REMOTE_CACHE_MB" in p.stderr
           and "larger than what is read whole" in p.stderr and took < 30 and 0 < gets <= 3
           and "given up after retries" not in p.stderr)
    # its page of a folder's entries (200, text/html) is a folder, whose files the formats look for (before: "is not a
    # torch.save file ... starts with bytes 3c 21 44 4f"); a file small enough for one whole GET needs no Range
    same_as_local("HTTP: a server's HTML page of a folder is the folder", f"http://127.0.0.1:{port}/hf/single",
                  os.path.join(DATA, "hf", "single"))
    # shard names with a space, '+', '#', '?', '%' and a non-ASCII letter (before: "URL using bad/illegal format", the
    # name cut at '#')
    root = os.path.join(WORK, "odd_http")
    odd = os.path.join(root, "hf_odd")
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(os.path.join(DATA, "hf", "sharded"), odd)
    index = json.load(open(os.path.join(odd, "model.safetensors.index.json")))
    names = {"model-00001-of-00002.safetensors": "sh+ard 1 \u00fc.safetensors",
             "model-00002-of-00002.safetensors": "sh%20ard#2?.safetensors"}
    for old, new in names.items():
        os.rename(os.path.join(odd, old), os.path.join(odd, new))
    index["weight_map"] = {k: names[v] for k, v in index["weight_map"].items()}
    json.dump(index, open(os.path.join(odd, "model.safetensors.index.json"), "w"))
    odd_port, _, _ = start_nginx(root, os.path.join(WORK, "odd_nginx"), procs)
    same_as_local("HTTP: shard names that need percent-encoding are encoded in their URLs",
                  f"http://127.0.0.1:{odd_port}/hf_odd", odd)


def odd_server_cases(http_port):
    """servers that answer legally but unusually (OddServerProxy, in front of nginx); a torch.save file over 16 MiB and
    its DCP folder (larger than one request, so that ranges are asked for). Found by a hunt: a shifted 206 was used as the
    bytes asked for (a good checkpoint reported corrupt, or worse); a HEAD without Content-Length read as empty; a
    redirect's Content-Type and length taken for the object's; a weak ETag pinned with If-Match (every read "changed
    while being read"); a presigned URL (HEAD refused) taken for a folder; a file replaced while read, weakly tagged or
    dated only (read unpinned), silently mixed from both versions; a server capping each answer at 1 MiB refused"""
    big = os.path.join(WORK, "served", "odd")
    os.makedirs(big, exist_ok=True)
    if not TORCH_PYTHON:
        record("HTTP: unusual servers", "skipped: no PyTorch chroot to make the checkpoint over 16 MiB", True)
        return
    if not os.path.exists(os.path.join(big, "big.pt")):
        rc, said = torch_check(TORCH_PYTHON, WORK, "make-big", "served/odd/big.pt")
        assert rc == 0, said
        cli(["reshard", os.path.join(big, "big.pt"), "--world-size", "2", "-o", os.path.join(big, "dcp")], check=0)
    # dated an hour ago: a Last-Modified within a second of the answer's Date is no version (a server dating every
    # answer now), and the files were made just now
    for folder, _, files in os.walk(big):
        for f in files:
            os.utime(os.path.join(folder, f), (time.time() - 3600, time.time() - 3600))
    port = start_proxy(http_port, OddServerProxy)
    for mode, expect in (("nolen", "same"), ("redir", "same"), ("weak", "same"), ("presign", "same"),
                         ("shift", "the server answered a request for bytes"), ("newer", "changed while being read"),
                         ("weaknewer", "changed while being read"), ("noetag", "same"),
                         ("datenewer", "changed while being read"), ("lmfmt", "same"), ("lmnow", "same"),
                         ("nopin", "same"), ("gzip", "content-encoded (Content-Encoding: gzip)"), ("cap", "same")):
        for rel in ("big.pt", "dcp"):
            url = f"http://127.0.0.1:{port}/{mode}/served/odd/{rel}"
            local = cli(["check", "--json", os.path.join(big, rel)])
            p = cli(["check", "--json", url])
            if expect == "same":
                # read as the local copy; where nothing could hold the reads to one version (no ETag, no usable
                # Last-Modified), that is said, naming an object, and nowhere else
                unpinned = mode in ("nopin", "lmnow")
                said = "read without a version to hold the reads to" in p.stderr and url in p.stderr
                ok = p.returncode == local.returncode == 0 and p.stdout.replace(url, os.path.join(big, rel)) == \
                    local.stdout and said == unpinned
                outcome = f"exit {p.returncode}: {p.stderr.strip()[-220:]}"
            else:
                ok = p.returncode != 0 and expect in p.stdout + p.stderr
                outcome = f"exit {p.returncode}: {(p.stdout + p.stderr).strip()[-200:]}"
            record(f"HTTP ({mode}): check --json {rel} " + ("as the local copy" if expect == "same" else
                   f"says '{expect}'") + (", and that it read unpinned" if mode in ("nopin", "lmnow") else ""),
                   outcome, ok)


def fault_cases(http_port):
    proxy = start_proxy(http_port)
    FaultProxy.faults = ["503", "reset", "short", "slowdown"]
    url = f"http://127.0.0.1:{proxy}/fsdp2_r2"
    r = cli(["--remote-stats", "inspect", "--json", "--hash", url])
    l = cli(["inspect", "--json", "--hash", os.path.join(DATA, "fsdp2_r2")])
    stats = remote_stats(r)
    same = r.returncode == 0 and json.loads(r.stdout.replace(url, os.path.join(DATA, "fsdp2_r2"))).get("entries") \
        == json.loads(l.stdout).get("entries")
    record("faults: 503 + Retry-After, reset, short body, SlowDown are retried, never used",
           f"injected {FaultProxy.injected}; {stats[2] if stats else '?'} retries; output same as local: {same}",
           same and stats is not None and stats[2] >= 4 and not FaultProxy.faults)
    FaultProxy.faults = ["503"] * 20
    p = cli(["inspect", "--hash", f"http://127.0.0.1:{proxy}/adam_int.pt"])
    ok = p.returncode == 2 and "HTTP 503" in p.stderr and f"127.0.0.1:{proxy}/adam_int.pt" in p.stderr
    record("faults: a server that keeps failing gives exit 2 naming the URL after the retries",
           f"exit {p.returncode}: {p.stderr.strip()[:160]}", ok)
    FaultProxy.faults = []
    # a server 100 ms away, over plain HTTP (no listing): the names every format's probe looks for are asked for
    # together (before: 13 HEADs one after the other, 1.3 s), then the data files' sizes (HEADs) together, and the
    # shards' headers (before: one round trip after the other, per rank file or shard)
    latency = start_proxy(http_port, HttpLatencyProxy)
    for rel in ("fsdp2_r3", "hf/sharded"):
        HttpLatencyProxy.reset()
        url = f"http://127.0.0.1:{latency}/{rel}"
        t0 = time.monotonic()
        r = cli(["inspect", "--json", url])
        took = time.monotonic() - t0
        l = cli(["inspect", "--json", os.path.join(DATA, rel)])
        same = r.returncode == 0 and json.loads(r.stdout.replace(url, os.path.join(DATA, rel))).get("entries") \
            == json.loads(l.stdout).get("entries")
        most = dict(HttpLatencyProxy.most)
        record(f"HTTP 100 ms away: inspect {rel} asks for the formats' names, its files' sizes and first bytes "
               "together",
               f"at most {most['HEAD']} HEADs and {most['GET']} GETs at once; {took:.2f} s; same as local: {same}",
               same and most["HEAD"] >= 10 and most["GET"] >= 2)


def app_exit_case(http_port):
    """the app closes while its threads still wait on a stalled server: the exit gives their requests up instead of
    waiting them out (before: the stall timeout, retried, for every thread: here 5 minutes and more)"""
    if not APP:
        record("app: exit with remote reads in flight", "skipped: no GUI in this build", True)
        return
    url = f"http://127.0.0.1:{start_proxy(http_port, StallProxy)}/fsdp2_r2"
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", OPTSCOPE_REMOTE_STALL_SECONDS="300")
    # the screenshot waits for the statistics of the key it selects, whose data never comes: it gives up after 5 s
    t0 = time.monotonic()
    try:
        p = subprocess.run([APP, url, "--screenshot", os.path.join(WORK, "stalled.png"), "--timeout", "5"],
                           capture_output=True, text=True, env=env, timeout=120)
        took, rc, err = time.monotonic() - t0, p.returncode, p.stderr
    except subprocess.TimeoutExpired as e:
        took, rc, err = time.monotonic() - t0, None, (e.stderr or b"").decode(errors="replace")
    outputs.append(err)
    record("app: closing while reads wait on a stalled server ends at once, not when the requests time out",
           f"exit {rc} after {took:.1f} s: {err.strip().splitlines()[-1][:120] if err.strip() else ''}",
           rc == 2 and "timed out" in err and took < 30)


def overlong_case(http_port):
    """an answer longer than its Content-Length on a kept connection: the next request there meets the extra bytes
    ("Received HTTP/0.9 when not allowed"), a malformed answer that is retried on a new connection like a reset (it
    was fatal at once, found by a hunt)"""
    url = f"http://127.0.0.1:{start_proxy(http_port, OverlongProxy)}/fsdp2_r2"
    same_as_local("HTTP: a kept connection spoiled by an overlong answer is retried, not fatal", url,
                  os.path.join(DATA, "fsdp2_r2"))
    record("HTTP: the overlong answer was sent", str(OverlongProxy.spoiled), len(OverlongProxy.spoiled) == 1)


def store_failure_cases(http_port):
    """a store that fails on the data after the retries: check, diff and diagnose exit 2 saying so, not 1 (the
    checkpoint damaged, the checkpoints different), found by a hunt"""
    url = f"http://127.0.0.1:{start_proxy(http_port, DataFailProxy)}/fsdp2_r2"
    for args in (["check", url], ["diff", url, os.path.join(DATA, "fsdp2_r2")], ["diagnose", url]):
        p = cli(args)
        record(f"HTTP: {args[0]} over a store failing on the data exits 2, naming the store's failure",
               f"exit {p.returncode}: {p.stderr.strip()[-200:]}",
               p.returncode == 2 and "reading from storage failed" in p.stderr and "HTTP 500" in p.stderr)


def trickle_case(http_port):
    """a server that sends a byte at a time, never stalling: given up as too slow (under 1 KiB/s over the stall time)
    and retried, then exit 2 naming the URL (before: curl's floor of 1 byte a second let a read run for ever)"""
    url = f"http://127.0.0.1:{start_proxy(http_port, TrickleProxy)}/adam_int.pt"
    t0 = time.monotonic()
    try:
        p = subprocess.run([CLI, "check", url], capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, OPTSCOPE_REMOTE_STALL_SECONDS="2"))
        rc, err = p.returncode, p.stderr + p.stdout
    except subprocess.TimeoutExpired:
        rc, err = None, "still reading after 120 s"
    took = time.monotonic() - t0
    record("HTTP: a server that trickles bytes is given up as too slow, exit 2 naming the URL",
           f"exit {rc} after {took:.1f} s: {err.strip()[-200:]}",
           rc in (1, 2) and "adam_int.pt" in err and "slow" in err.lower() and took < 100)


def interrupt_case(http_port):
    """Ctrl+C while a read waits on a stalled server stops the command at once (before: the first signal was seen
    only once the request timed out, every retry of it: here 6 x 300 s)"""
    url = f"http://127.0.0.1:{start_proxy(http_port, StallProxy)}/fsdp2_r2"
    rc, took, err = interrupted(["inspect", "--hash", url], {"OPTSCOPE_REMOTE_STALL_SECONDS": "300"},
                                StallProxy.stalled)
    record("HTTP: SIGINT while inspect --hash waits on a stalled server stops it within seconds",
           f"exit {rc} {took:.1f} s after the signal: {err.strip().splitlines()[-1][:120] if err.strip() else ''}",
           rc == 128 + signal.SIGINT and "stopped by SIGINT" in err and took < 10)


def s3_cases():
    if not TORCH_PYTHON:
        record("S3 (moto_server)", "skipped: no PyTorch chroot (TORCH_PYTHON) to run moto_server and boto3", True)
        return
    port = start_moto(TORCH_PYTHON, WORK, procs)
    up = os.path.join(WORK, "up")
    shutil.rmtree(up, ignore_errors=True)
    for rel in ("adam_int.pt", "fsdp2_r2", "hf/sharded", "hf/checkpoint-3", "megatron/synthetic_pp2_dp2",
                "fsdp2_r3", "torchtitan/flat/groups_2rank", "zero/stage2/ckpt", "zero/stage3/ckpt", "zero/stage1",
                "fsdp1_sharded_r3"):
        src, dst = os.path.join(DATA, rel), os.path.join(up, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        (shutil.copytree if os.path.isdir(src) else shutil.copy)(src, dst)
    # a training run's folder for watch: two torch.save steps and a DCP step (a folder, listed two levels down)
    run = os.path.join(up, "run")
    os.makedirs(run, exist_ok=True)
    shutil.copy(os.path.join(DATA, "diff", "step3.pt"), os.path.join(run, "ckpt_3.pt"))
    shutil.copy(os.path.join(DATA, "diff", "step4.pt"), os.path.join(run, "ckpt_4.pt"))
    shutil.copytree(os.path.join(DATA, "fsdp2_r2"), os.path.join(run, "global_step5"))
    # a run folder of many entries that are no checkpoint (20 notes) beside two steps: watch asks the store about each
    # entry from the folder's listing, not once per entry at every look (watch_cases)
    run_many = os.path.join(up, "run_many")
    os.makedirs(run_many, exist_ok=True)
    shutil.copy(os.path.join(DATA, "diff", "step3.pt"), os.path.join(run_many, "ckpt_3.pt"))
    shutil.copy(os.path.join(DATA, "diff", "step4.pt"), os.path.join(run_many, "ckpt_4.pt"))
    for i in range(1, 21):
        with open(os.path.join(run_many, f"note_{i:02d}.txt"), "w") as f:
            f.write("x\n")
    # a run whose second step is first uploaded broken, then re-uploaded whole with the same size (watch_reupload_case)
    run_etag = os.path.join(up, "run_etag")
    os.makedirs(run_etag, exist_ok=True)
    shutil.copy(os.path.join(DATA, "diff", "step3.pt"), os.path.join(run_etag, "ckpt_3.pt"))
    whole = open(os.path.join(DATA, "diff", "step4.pt"), "rb").read()
    with open(os.path.join(run_etag, "ckpt_4.pt"), "wb") as f:
        f.write(whole[:-22] + bytes(22))  # the zip's end record zeroed: does not open
    # a .metadata of 128 ranks written with PyTorch's own classes (bench/scale's generator): 10 MB, more than one
    # ranged GET asks for
    shutil.copy(os.path.join(DATA, "..", "..", "bench", "scale", "make_scale_metadata.py"), WORK)
    subprocess.run([TORCH_PYTHON, "-W", "ignore", "make_scale_metadata.py", os.path.join("up", "m128"), "128", "20"],
                   cwd=WORK, check=True, capture_output=True)
    # checkpoints of many torch.save files, each zipped again with deflate as tests/data/deflated/ is: a per-rank set, a
    # Trainer folder (optimizer.pt, scheduler.pt), a ZeRO-2 folder; read from S3 as from the same folder on disk
    for rel in ("fsdp1_sharded_r3", "hf/checkpoint-3", "zero/stage2/ckpt"):
        src, dst = os.path.join(DATA, rel), os.path.join(up, "deflated", rel)
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src, dst)
        for folder, _, names in os.walk(dst):
            for n in names:
                if n.endswith((".pt", ".pth")) and zipfile.is_zipfile(os.path.join(folder, n)):
                    deflate_again(os.path.join(folder, n))
    # a key with '#', '?' and a space: s3:// keys hold them as any other character
    os.makedirs(os.path.join(up, "odd"), exist_ok=True)
    shutil.copy(os.path.join(DATA, "adam_int.pt"), os.path.join(up, "odd", "a#b ?c.pt"))
    s3_put(TORCH_PYTHON, WORK, port, "up")
    # every request of the cases that use env passes botocore's signature check first (moto checks none): curl 7.88
    # signed queries in the order written and PUTs with an "expect" header it did not send, which S3 refuses
    front, front_log = start_sigv4_front(TORCH_PYTHON, WORK, procs, port, "AKIAOPTSCOPETEST", SECRET)
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{front}", "AWS_ACCESS_KEY_ID": "AKIAOPTSCOPETEST",
           "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_REGION": "us-east-1", "AWS_PROFILE": "", "HOME": WORK}
    # credentials that cannot be used as given stop the command, as boto3 does (before: a missing profile sent
    # anonymous requests and a key without its secret signed with none; found by a hunt); no secret is shown
    home = os.path.join(WORK, "credhome")
    os.makedirs(os.path.join(home, ".aws"), exist_ok=True)
    with open(os.path.join(home, ".aws", "credentials"), "w") as f:
        f.write(f"[default]\naws_access_key_id = AKIADEFAULT\naws_secret_access_key = {SECRET}\n"
                "[half]\naws_access_key_id = AKIAHALF\n")
    bare = {k: v for k, v in env.items() if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    for case, extra, needle in (
            ("AWS_PROFILE naming a profile no file holds", {"AWS_PROFILE": "nosuch"}, "'nosuch' (AWS_PROFILE) is in neither"),
            ("AWS_DEFAULT_PROFILE naming one", {"AWS_DEFAULT_PROFILE": "nosuch"}, "(AWS_DEFAULT_PROFILE) is in neither"),
            ("a profile with a key and no secret", {"AWS_PROFILE": "half"}, "has an aws_access_key_id but no"),
            ("AWS_ACCESS_KEY_ID without AWS_SECRET_ACCESS_KEY", {"AWS_ACCESS_KEY_ID": "AKIAONLY"},
             "AWS_SECRET_ACCESS_KEY is not")):
        expect_error(f"S3: {case} stops the command, naming it", ["inspect", "s3://ckpt/adam_int.pt"],
                     [needle], dict(bare, HOME=home, **extra))
    tmp = os.path.join(WORK, "deflated_tmp_s3")
    os.makedirs(tmp, exist_ok=True)
    for rel in ("fsdp1_sharded_r3",) if QUICK else ("fsdp1_sharded_r3", "hf/checkpoint-3", "zero/stage2/ckpt"):
        same_as_local(f"S3: inspect {rel} with every torch.save file zipped again (deflate)", f"s3://ckpt/deflated/{rel}",
                      os.path.join(up, "deflated", rel), dict(env, TMPDIR=tmp))
        p = cli(["diff", f"s3://ckpt/deflated/{rel}", os.path.join(DATA, rel)], dict(env, TMPDIR=tmp))
        record(f"S3: diff of deflated {rel} against the folder before it was zipped again: EQUAL; TMPDIR left empty",
               f"exit {p.returncode}: {(p.stdout + p.stderr).strip()[-160:]}; TMPDIR holds {os.listdir(tmp)}",
               p.returncode == 0 and "EQUAL" in p.stdout and not os.listdir(tmp))
    inspected = ("adam_int.pt", "fsdp2_r2", "hf/sharded", "hf/checkpoint-3", "megatron/synthetic_pp2_dp2",
                 "torchtitan/flat/groups_2rank", "zero/stage2/ckpt", "zero/stage3/ckpt", "zero/stage1", "fsdp1_sharded_r3")
    for rel in inspected[::2] if QUICK else inspected:
        same_as_local(f"S3: inspect {rel}", f"s3://ckpt/{rel}", os.path.join(DATA, rel), env)
    # a folder URL ending in '/', as `aws s3 ls` prints prefixes, is the folder (before: "s3://ckpt/fsdp2_r2//.metadata:
    # no such object" for DCP, safetensors, Trainer and Megatron folders, and "holds none" for ZeRO's with two)
    for rel in ("fsdp2_r2/", "hf/sharded/") if QUICK else ("fsdp2_r2/", "hf/sharded/", "hf/checkpoint-3/",
                                                            "megatron/synthetic_pp2_dp2/", "zero/stage2/ckpt//"):
        same_as_local(f"S3: a folder URL ending in '/' is the folder: {rel}", f"s3://ckpt/{rel}",
                      os.path.join(DATA, rel.rstrip("/")), env)
    odd = "s3://ckpt/odd/a#b ?c.pt"
    p = cli(["check", "--json", odd], env)
    shown = json.loads(p.stdout).get("path") if p.returncode == 0 else None
    record("S3: a key with '#', '?' and a space is read, and named whole (before: 's3://ckpt/odd/a')",
           f"exit {p.returncode}, named {shown!r}", shown == odd)
    # a store 100 ms from here: a checkpoint of many files asks for the next files' first bytes while it reads one
    # (before: one round trip after the other, file by file, which at 1,024 ranks is minutes)
    latency = dict(env, AWS_ENDPOINT_URL=f"http://127.0.0.1:{start_proxy(port, S3LatencyProxy)}")
    for rel in ("fsdp2_r3",) if QUICK else ("zero/stage3/ckpt", "fsdp1_sharded_r3", "fsdp2_r3"):
        S3LatencyProxy.reset()
        t0 = time.monotonic()
        p = cli(["inspect", "--json", f"s3://ckpt/{rel}"], latency)
        took = time.monotonic() - t0
        record(f"S3 100 ms away: inspect {rel} has the files' reads in flight together",
               f"exit {p.returncode}{': ' + p.stderr.strip()[:160] if p.returncode else ''}; "
               f"{S3LatencyProxy.ranged} ranged GETs, at most {S3LatencyProxy.most} at once; {took:.2f} s",
               p.returncode == 0 and S3LatencyProxy.most >= 2)
    # a DCP checkpoint: one listing (sizes and ETags come with it; its first page also says the name is a folder:
    # before, a listing of the name itself came first), one GET per object read, no byte twice
    p = cli(["--remote-stats", "inspect", "s3://ckpt/fsdp2_r3"], env)
    stats = remote_stats(p)
    folder = os.path.join(DATA, "fsdp2_r3")
    total = sum(os.path.getsize(os.path.join(folder, n)) for n in os.listdir(folder))
    ok = p.returncode == 0 and stats is not None and stats[0] <= 1 + len(os.listdir(folder)) and stats[1] <= total
    record("S3: inspect of a 3-rank DCP: 1 listing, a GET per object, each byte once",
           f"{stats[0] if stats else '?'} requests, {stats[1] if stats else '?'} bytes fetched (the folder holds "
           f"{len(os.listdir(folder))} objects, {total} bytes)", ok)
    # gather from S3 to a local file: byte-identical with the local gather
    # the same file name in two folders: the zip's record prefix is the output's name
    g_remote, g_local = os.path.join(WORK, "from_s3", "g.pt"), os.path.join(WORK, "from_disk", "g.pt")
    for f in (g_remote, g_local):
        os.makedirs(os.path.dirname(f), exist_ok=True)
        if os.path.exists(f):
            os.unlink(f)
    a = cli(["gather", "s3://ckpt/fsdp2_r2", "-o", g_remote], env)
    b = cli(["gather", os.path.join(DATA, "fsdp2_r2"), "-o", g_local])
    same = a.returncode == 0 and b.returncode == 0 and open(g_remote, "rb").read() == open(g_local, "rb").read()
    record("S3: gather to a local .pt is byte-identical with the local gather", f"exit {a.returncode}", same)
    p = cli(["diff", "s3://ckpt/fsdp2_r2", os.path.join(DATA, "fsdp2_r2")], env)
    record("S3: diff against the local copy", f"exit {p.returncode}", p.returncode == 0)
    p = cli(["check", "s3://ckpt/hf/checkpoint-3"], env)
    l = cli(["check", os.path.join(DATA, "hf/checkpoint-3")])
    record("S3: check gives the local exit status", f"exit {p.returncode} (local {l.returncode})",
           p.returncode == l.returncode)
    expect_error("S3: no such key names the URL", ["inspect", "s3://ckpt/no_such.pt"], ["s3://ckpt/no_such.pt"], env)
    expect_error("S3: no such bucket names the URL and the endpoint it was asked at", ["inspect",
                 "s3://no-such-bucket/x.pt"], ["s3://no-such-bucket", "NoSuchBucket",
                 f"at http://127.0.0.1:{front} (AWS_ENDPOINT_URL)"], env)
    # a bucket in another region than the one the requests are signed for: AWS answers so, and says which
    expect_error("S3: a bucket in another region names it and what to set", ["inspect", "s3://ckpt/adam_int.pt"],
                 ["AuthorizationHeaderMalformed", "the bucket is in region us-east-1, the requests were signed for "
                  "eu-west-1: set AWS_REGION=us-east-1"], dict(env, AWS_REGION="eu-west-1"))
    stream_cases(port, env)
    addressing_cases(port, env)
    redirect_cases(front, env)
    denied_cases(port, env)
    gs_cases(front, env)
    refused_credentials_cases()
    watch_cases(env)
    watch_reupload_case(port, env)
    output_cases(port, env)
    # an object replaced between the listing and the read: pinned to its ETag, the read is refused
    fifo = os.path.join(WORK, "pause")
    for s in (".out", ".in"):
        if os.path.exists(fifo + s):
            os.unlink(fifo + s)
        os.mkfifo(fifo + s)
    out = os.path.join(WORK, "g_changed.pt")
    if os.path.exists(out):
        os.unlink(out)
    e = dict(os.environ, **env, OPTSCOPE_PAUSE_AT="opened", OPTSCOPE_PAUSE_FIFO=fifo)
    proc = subprocess.Popen([CLI, "gather", "s3://ckpt/fsdp2_r2", "-o", out], env=e, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    with open(fifo + ".out") as f:
        f.readline()
    s3_put(TORCH_PYTHON, WORK, port, "--replace", "fsdp2_r2/__0_0.distcp")
    with open(fifo + ".in", "w") as f:
        f.write("go\n")
    so, se = proc.communicate(timeout=300)
    outputs.append(so + se)
    ok = proc.returncode == 2 and "changed while being read" in se and "s3://ckpt/fsdp2_r2/__0_0.distcp" in se \
        and not os.path.exists(out)
    record("S3: an object replaced while read gives 'changed while being read', no output",
           f"exit {proc.returncode}: {se.strip()[:160]}", ok)
    with open(front_log) as f:
        verdicts = f.read().splitlines()
    refused = [v for v in verdicts if v.startswith("refused ")]
    record("S3 and GCS: every signed request of the cases above has the signature botocore computes (S3SigV4Auth)",
           f"{len(verdicts) - len(refused)} requests checked{'; refused: ' + refused[0][:300] if refused else ''}",
           len(verdicts) > 100 and not refused)


def refused_credentials_cases():
    """credentials the store refuses: a moto_server with its IAM checks on (after the set-up's three requests) gives
    S3's own answers; each is named with what to do, and neither the secret nor the token is shown"""
    port = start_moto(TORCH_PYTHON, WORK, procs, free_requests=3)
    shutil.copy(os.path.join(DATA, "adam_int.pt"), WORK)
    role = json.loads(s3_put(TORCH_PYTHON, WORK, port, "--assume-role", "adam_int.pt"))
    base = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_REGION": "us-east-1", "AWS_PROFILE": "",
            "HOME": WORK}
    for case, key, secret, token, needles in (
            ("a session token it does not know", role["key"], role["secret"], "FQoG" + role["token"][4:][::-1],
             ["HTTP 400 InvalidToken", "renew the temporary credentials (AWS_SESSION_TOKEN"]),
            ("an access key id it does not know", "AKIANOSUCHKEY", role["secret"], None,
             ["HTTP 403 InvalidAccessKeyId", "AWS_ACCESS_KEY_ID"]),
            ("a secret key that is not the access key id's", role["key"], role["secret"][::-1], role["token"],
             ["HTTP 403 SignatureDoesNotMatch", "the secret key (AWS_SECRET_ACCESS_KEY"])):
        e = dict(base, AWS_ACCESS_KEY_ID=key, AWS_SECRET_ACCESS_KEY=secret)
        if token:
            e["AWS_SESSION_TOKEN"] = token
        p = cli(["inspect", "s3://ckpt/adam_int.pt"], e)
        err = p.stderr.strip()
        record(f"S3 (IAM checks on): {case} is named, with what to do; no secret shown",
               f"exit {p.returncode}: {err[-220:]}",
               p.returncode == 2 and "s3://ckpt/adam_int.pt" in err and all(n in err for n in needles)
               and role["secret"] not in err and role["secret"][::-1] not in err and role["token"][8:] not in err)


def addressing_cases(port, env):
    """the profile's `s3 = addressing_style = virtual | path` (as the AWS CLI reads it): virtual names the bucket in
    the host (ckpt.localhost, which curl resolves to the loopback), for stores that serve buckets only so; path in
    the path; reads, a listing and an upload alike. Before: always path-style on an endpoint of one's own"""
    proxy = start_proxy(port, S3HostRecordingProxy)
    conf = os.path.join(WORK, "addressing.conf")
    with open(conf, "w") as f:
        f.write("[profile virt]\ns3 =\n    addressing_style = virtual\n"
                "[profile pathy]\ns3 =\n    addressing_style = path\n"
                "[profile odd]\ns3 =\n    addressing_style = sideways\n")
    base = dict(env, AWS_ENDPOINT_URL=f"http://localhost:{proxy}", AWS_CONFIG_FILE=conf)
    os.makedirs(os.path.join(WORK, "addressing"), exist_ok=True)
    for profile, host in (("virt", f"ckpt.localhost:{proxy}"), ("pathy", f"localhost:{proxy}")):
        e = dict(base, AWS_PROFILE=profile)
        local_out = os.path.join(WORK, "addressing", f"{profile}.pt")  # the same name: the zip's folder comes from it
        cli(["gather", os.path.join(DATA, "fsdp2_r2"), "-o", local_out, "--no-fsync"])
        S3HostRecordingProxy.seen = []
        same_as_local(f"S3 addressing_style = {profile}: inspect fsdp2_r2", "s3://ckpt/fsdp2_r2",
                      os.path.join(DATA, "fsdp2_r2"), e)
        out = f"s3://ckpt/addressing/{profile}.pt"
        g = cli(["gather", "s3://ckpt/fsdp2_r2", "-o", out], e)
        same_as_local(f"S3 addressing_style = {profile}: gather to s3:// writes what the local gather writes", out,
                      local_out, e)
        seen = list(S3HostRecordingProxy.seen)
        in_path = [p for _, p in seen if p.startswith("/ckpt/") or p.startswith("/ckpt?")]
        ok = g.returncode == 0 and len(seen) > 5 and all(h == host for h, _ in seen) and \
            (not in_path if profile == "virt" else len(in_path) == len(seen))
        record(f"S3 addressing_style = {profile}: every request (listing, reads, upload) is addressed so",
               f"gather exit {g.returncode}; {len(seen)} requests, hosts {sorted(set(h for h, _ in seen))}, "
               f"{len(in_path)} with the bucket in the path", ok)
    expect_error("S3: an addressing_style the AWS CLI does not take stops the command, naming it",
                 ["inspect", "s3://ckpt/adam_int.pt"], ["addressing_style", "'sideways'", "auto, path or virtual"],
                 dict(base, AWS_PROFILE="odd"))


def redirect_cases(front, env):
    """a bucket S3 redirects (307 TemporaryRedirect with Location and x-amz-bucket-region) is asked where it says,
    signed for the region it says (the SigV4 front behind checks, for us-east-1 only), and the bucket's next requests
    go there at once; a redirect to another host is not followed (the signed request would go where the user never
    said), and said. Before: "HTTP 307 TemporaryRedirect" and exit 2"""
    redir = start_proxy(0, S3RedirectProxy)
    S3RedirectProxy.target = f"http://127.0.0.1:{front}"
    e = dict(env, AWS_ENDPOINT_URL=f"http://127.0.0.1:{redir}", AWS_REGION="eu-west-1")
    S3RedirectProxy.seen = []
    same_as_local("S3: a bucket redirected (307, another region) is read where S3 says", "s3://ckpt/fsdp2_r2",
                  os.path.join(DATA, "fsdp2_r2"), e)
    first = list(S3RedirectProxy.seen)
    S3RedirectProxy.seen = []
    out = "s3://ckpt/redirected/g.pt"
    g = cli(["gather", "s3://ckpt/fsdp2_r2", "-o", out], e)
    local_out = os.path.join(WORK, "redirected", "g.pt")
    os.makedirs(os.path.dirname(local_out), exist_ok=True)
    cli(["gather", os.path.join(DATA, "fsdp2_r2"), "-o", local_out, "--no-fsync"])
    written = list(S3RedirectProxy.seen)
    same_as_local("S3: a gather to a redirected bucket writes what the local gather writes", out, local_out, env)
    # the first request of each process is redirected, and those sent beside it; none after
    record("S3: after the first redirect, the bucket's requests go where S3 said at once",
           f"gather exit {g.returncode}; redirected: {len(first)} requests of the inspect, {len(written)} of the "
           f"gather", g.returncode == 0 and 1 <= len(first) <= 3 and 1 <= len(written) <= 3)
    S3RedirectProxy.target = "http://elsewhere.invalid:1"
    expect_error("S3: a redirect to another host is not followed, and said",
                 ["inspect", "s3://ckpt/adam_int.pt"],
                 ["s3://ckpt/adam_int.pt", "HTTP 307 TemporaryRedirect",
                  "redirected the request to http://elsewhere.invalid:1/ckpt", "not followed"], e)


def stream_cases(port, env):
    """a .metadata larger than one ranged GET (8 MiB) comes with one GET, parsed as it arrives (before: 8 MiB ranges
    in parallel, which a server that reads its object for each range, as moto does, serves ten times slower); a
    stream cut short leaves the rest to ranged GETs, and the output is the same"""
    local = os.path.join(WORK, "up", "m128")
    url = "s3://ckpt/m128"
    l = cli(["inspect", "--json", local])

    def same(p):
        if not p.stdout.strip():
            return False
        rj, lj = json.loads(p.stdout.replace(url, local)), json.loads(l.stdout)
        return p.returncode == l.returncode and rj == lj

    p = cli(["--remote-stats", "inspect", "--json", url], env)
    stats = remote_stats(p)
    size = os.path.getsize(os.path.join(local, ".metadata"))
    # the folder's listing and the .metadata's GET: the data files are not there (the metadata alone)
    record(f"S3: a {size / 1e6:.1f} MB .metadata is read with one GET as it streams in",
           f"exit {p.returncode} (local {l.returncode}); {stats[0] if stats else '?'} requests, "
           f"{stats[1] if stats else '?'} bytes; same --json as local: {same(p)}",
           same(p) and stats is not None and stats[0] == 2 and stats[1] == size)
    S3CutStreamProxy.cut = []
    cut_env = dict(env, AWS_ENDPOINT_URL=f"http://127.0.0.1:{start_proxy(port, S3CutStreamProxy)}")
    p = cli(["--remote-stats", "inspect", "--json", url], cut_env)
    stats = remote_stats(p)
    record("S3: a .metadata stream cut short: what arrived is kept, the rest read by ranged GETs, the same output",
           f"cut {S3CutStreamProxy.cut}; exit {p.returncode}; {stats[0] if stats else '?'} requests, "
           f"{stats[1] if stats else '?'} bytes of {size}, {stats[2] if stats else '?'} retries; same --json as "
           f"local: {same(p)}",
           same(p) and len(S3CutStreamProxy.cut) == 1 and stats is not None and stats[0] >= 3 and stats[2] >= 1
           and stats[1] <= size + (64 << 10))  # what arrived is kept: only its last partial block comes again


def denied_cases(port, env):
    """a folder inside a checkpoint that the store refuses to list, or a file in it that it refuses to give, is an error
    naming it and the store's answer, never an empty folder or "not this format" (a ZeRO checkpoint whose step folder
    looked empty was "not a checkpoint"; rank files whose first one could not be read, "none of the formats")"""
    denied = dict(env, AWS_ENDPOINT_URL=f"http://127.0.0.1:{start_proxy(port, S3DeniedProxy)}")
    cases = [("zero/stage2/ckpt", "/global_step2/", None, "s3://ckpt/zero/stage2/ckpt/global_step2",
              "step folder's listing"),
             ("zero/stage2/ckpt", None, "/ckpt/latest", "s3://ckpt/zero/stage2/ckpt/latest", "`latest`"),
             ("zero/stage1", None, "/stage1/latest_universal", "s3://ckpt/zero/stage1/latest_universal",
              "`latest_universal`"),
             ("fsdp1_sharded_r3", None, "/rank0.pt", "s3://ckpt/fsdp1_sharded_r3/rank0.pt", "first rank file")]
    try:
        for i, (rel, listing, get, named, what) in enumerate(cases):
            S3DeniedProxy.listing, S3DeniedProxy.get = listing, get
            # a 500 is retried (six tries, about 3 s of backoff) before it is reported: one case shows it, the others
            # would only add that wait
            for status, needle in ((403, "AccessDenied"), (500, "InternalError"))[: 2 if i == 0 else 1]:
                S3DeniedProxy.status = status
                for verb in ("inspect", "check"):
                    p = cli([verb, f"s3://ckpt/{rel}"], denied)
                    err = p.stderr.strip()
                    record(f"S3: {verb} of {rel} whose {what} gets {status} names it and the store's answer",
                           f"exit {p.returncode}: {err.splitlines()[-1][:200] if err else ''}",
                           p.returncode == 2 and named in err and needle in err)
    finally:
        S3DeniedProxy.listing, S3DeniedProxy.get = "/global_step2/", None


def watch_cases(env):
    """watch follows a run folder on object storage as it does a local one: the same steps, reads and changes"""
    args = ["watch", "--once", "--json", "--interval", "0.05"]
    r = cli(args + ["s3://ckpt/run"], env)
    l = cli(args + [os.path.join(WORK, "up", "run")])
    def lines(p, root):
        out = []
        for line in p.stdout.splitlines():  # (the root in a reason too: "RUN/note_01.txt: is not a torch.save file")
            out.append(json.loads(line.replace(json.dumps(root)[1:-1], "RUN")))
        return out
    got, want = lines(r, "s3://ckpt/run"), lines(l, os.path.join(WORK, "up", "run"))
    ok = r.returncode == 0 and len(want) == 3 and got == want
    record("S3: watch --once of a run folder (2 torch.save steps, a DCP step) gives the local folder's lines",
           f"exit {r.returncode}: {[(j.get('step'), j.get('status')) for j in got]}" if ok
           else f"exit {r.returncode}: {r.stderr.strip()[:160]} {got} != {want}", ok)
    # 22 entries (the last note waited for: 21 lines), each note taking two looks: about 40 looks of one listing
    # each, plus the reads (it was a listing per entry at every look, 800 and more; 1,952 requests for 30 entries in
    # the hunt that found it)
    r = cli(["--remote-stats"] + args + ["s3://ckpt/run_many"], env)
    l = cli(args + [os.path.join(WORK, "up", "run_many")])
    got, want = lines(r, "s3://ckpt/run_many"), lines(l, os.path.join(WORK, "up", "run_many"))
    stats = remote_stats(r)
    requests = stats[0] if stats else -1
    ok = r.returncode == 0 and len(want) == 21 and got == want and 0 < requests < 200
    record("S3: watch --once of a run folder of 22 entries: the local folder's lines, a listing per look",
           f"exit {r.returncode}, {len(got)} lines, {requests} requests" if ok
           else f"exit {r.returncode}, {requests} requests: {r.stderr.strip()[-160:]} {got} != {want}", ok)
    if not APP:
        record("app: --watch s3://", "skipped: no GUI in this build", True)
        return
    # the app's Watch on the same folder: every step read, the newest opened (before: "--watch s3://ckpt/run: not a
    # folder", a QFileInfo's answer)
    shot = os.path.join(WORK, "watch_s3.png")
    e = dict(os.environ, **env, QT_QPA_PLATFORM="offscreen")
    try:
        p = subprocess.run([APP, "--watch", "s3://ckpt/run", "--screenshot", shot, "--timeout", "120"],
                           capture_output=True, text=True, env=e, timeout=300)
        rc, err = p.returncode, p.stderr
    except subprocess.TimeoutExpired as t:
        rc, err = None, (t.stderr or b"").decode(errors="replace")
    outputs.append(err)
    read = re.findall(r"step (\d+) of (\d+)", err)
    record("app: --watch s3:// reads every step of the run folder and opens the newest",
           f"exit {rc}; {len(read)} steps read: {err.strip().splitlines()[-1][:120] if err.strip() else ''}",
           rc == 0 and read and read[-1] == ("3", "3") and os.path.isfile(shot))


def watch_reupload_case(port, env):
    """a step that does not open is waited for; re-uploaded whole with the same size (only its ETag tells), watch
    reads it (a signature of names and sizes alone waited forever)"""
    import time
    log = os.path.join(WORK, "watch_reupload")
    e = dict(os.environ, **env)
    with open(log + ".out", "w") as so, open(log + ".err", "w") as se:
        proc = subprocess.Popen([CLI, "watch", "--json", "--interval", "0.05", "s3://ckpt/run_etag"], env=e, stdout=so,
                                stderr=se, start_new_session=True)
    def wait_for(path, needle, seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end and proc.poll() is None:
            if needle in open(path).read():
                return True
            time.sleep(0.05)
        return False
    waited = wait_for(log + ".err", "ckpt_4.pt does not open yet", 60)
    fixed = os.path.join(WORK, "reupload")
    shutil.rmtree(fixed, ignore_errors=True)
    os.makedirs(fixed)
    shutil.copy(os.path.join(DATA, "diff", "step4.pt"), os.path.join(fixed, "ckpt_4.pt"))
    s3_put(TORCH_PYTHON, WORK, port, "reupload", "run_etag")
    read = waited and wait_for(log + ".out", '"step":4', 60)
    stop([proc])
    out, err = open(log + ".out").read(), open(log + ".err").read()
    outputs.append(out + err)
    steps = [json.loads(line).get("step") for line in out.splitlines() if line.strip()]
    record("S3: watch reads a step re-uploaded whole with the same size (its ETag changed) after waiting on it",
           f"steps read {steps}; waited on the broken one: {waited}" if read
           else f"steps read {steps}; stderr: {err.strip()[-200:]}", read and steps == [3, 4])


def gs_cases(port, env):
    """gs:// through the S3-compatible XML API, sent to the local server by STORAGE_EMULATOR_HOST (host:port, as
    Google's client libraries take it): moto plays storage.googleapis.com; the requests are signed for region
    "auto" as GCS's HMAC keys want. The bucket and objects are the S3 cases' own."""
    g = dict(env, STORAGE_EMULATOR_HOST=f"127.0.0.1:{port}")
    g.pop("AWS_ENDPOINT_URL")  # the gs:// endpoint comes from its own variable, not from S3's
    for rel in ("fsdp2_r2", "hf/sharded", "adam_int.pt"):
        same_as_local(f"GCS: inspect {rel}", f"gs://ckpt/{rel}", os.path.join(DATA, rel), g)
    out, ref = os.path.join(WORK, "from_gs", "g.pt"), os.path.join(WORK, "from_disk", "g.pt")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    if os.path.exists(out):
        os.unlink(out)
    a = cli(["gather", "gs://ckpt/fsdp2_r2", "-o", out], g)
    same = a.returncode == 0 and os.path.exists(ref) and open(out, "rb").read() == open(ref, "rb").read()
    record("GCS: gather to a local .pt is byte-identical with the local gather", f"exit {a.returncode}", same)
    p = cli(["reshard", "gs://ckpt/fsdp2_r2", "--world-size", "3", "-o", "gs://ckpt/gs_out/rs3"], g)
    back = cli(["verify", "gs://ckpt/fsdp2_r2", "--against", "gs://ckpt/gs_out/rs3"], g)
    record("GCS: reshard to gs:// (data objects, .metadata last) verifies against its source",
           f"exit {p.returncode}, verify exit {back.returncode}", p.returncode == 0 and back.returncode == 0)
    expect_error("GCS: no such key names the gs:// URL", ["inspect", "gs://ckpt/no_such.pt"], ["gs://ckpt/no_such.pt"],
                 g)


def output_cases(port, env):
    """outputs to S3: gather (one PUT, and a multipart upload over 16 MiB), reshard (data objects, .metadata last),
    each downloaded with boto3 and loaded by real PyTorch; refusals; a failed DCP upload leaves nothing"""
    # one file's output named like a folder (before: an object "x/gdir/" holding the .pt, exit 0)
    expect_error("S3: gather -o a prefix ending in '/' is refused", ["gather", os.path.join(DATA, "adam_int.pt"), "-o",
                 "s3://ckpt/x/gdir/"], ["names a folder", "s3://ckpt/x/gdir/out.pt"], env)
    expect_error("gather -o an existing local folder is refused as a folder", ["gather",
                 os.path.join(DATA, "adam_int.pt"), "-o", WORK], ["names a folder"])
    out = os.path.join(WORK, "out")
    shutil.rmtree(out, ignore_errors=True)
    for d in ("s3", "local", "rs_local"):
        os.makedirs(os.path.join(out, d))
    # gather from S3 to S3: the same bytes as a local gather of the local copy
    a = cli(["gather", "s3://ckpt/fsdp2_r2", "-o", "s3://ckpt/written/g.pt"], env)
    cli(["gather", os.path.join(DATA, "fsdp2_r2"), "-o", os.path.join(out, "local", "g.pt")], check=0)
    s3_put(TORCH_PYTHON, WORK, port, "--get", "written/g.pt", "out/s3/g.pt")
    same = a.returncode == 0 and open(os.path.join(out, "s3", "g.pt"), "rb").read() == \
        open(os.path.join(out, "local", "g.pt"), "rb").read()
    rc, said = torch_check(TORCH_PYTHON, WORK, "load-pt", "out/s3/g.pt", "out/local/g.pt")
    record("S3 output: gather -o s3:// (one PUT) is byte-identical with the local gather; PyTorch loads it",
           f"exit {a.returncode}; torch.load: {said}", same and rc == 0)
    # a key is literal: 'x/../fsdp2_r2/.metadata' is an object of its own, as boto3 and S3 take it (libcurl removed
    # the dot segments: the gather replaced the input's .metadata, exit 0; found by a hunt)
    a = cli(["gather", "s3://ckpt/fsdp2_r2", "-o", "s3://ckpt/x/../fsdp2_r2/.metadata"], env)
    keys = s3_put(TORCH_PYTHON, WORK, port, "--list", "x/").split()
    back = cli(["diff", "s3://ckpt/fsdp2_r2", os.path.join(DATA, "fsdp2_r2")], env)
    record("S3 output: a key with '..' is written as named, and the input it would collapse to stays whole",
           f"exit {a.returncode}; keys {keys}; input against the local copy: exit {back.returncode}",
           a.returncode == 0 and keys == ["x/../fsdp2_r2/.metadata"] and back.returncode == 0)
    # a folder named with '//' at its end is the folder (its objects were 'dslash//.metadata', which no URL read)
    a = cli(["reshard", os.path.join(DATA, "fsdp2_r2"), "--world-size", "2", "-o", "s3://ckpt/dslash//"], env)
    keys = s3_put(TORCH_PYTHON, WORK, port, "--list", "dslash").split()
    back = cli(["diff", "s3://ckpt/dslash", os.path.join(DATA, "fsdp2_r2")], env)
    record("S3 output: reshard -o a prefix ending in '//' writes the folder that reads back at that URL",
           f"exit {a.returncode}; keys {keys}; read back: exit {back.returncode}",
           a.returncode == 0 and sorted(keys) == ["dslash/.metadata", "dslash/__0_0.distcp", "dslash/__1_0.distcp"]
           and back.returncode == 0)
    # over 16 MiB: a multipart upload
    rc, said = torch_check(TORCH_PYTHON, WORK, "make-big", "out/big.pt")
    assert rc == 0, said
    # streamed: TMPDIR names no folder, and nothing is staged on the local disk (before: the whole object was)
    no_tmp = dict(env, TMPDIR=os.path.join(WORK, "no-such-folder"))
    a = cli(["--remote-stats", "gather", os.path.join(out, "big.pt"), "-o", "s3://ckpt/written/big/g.pt"], no_tmp)
    os.makedirs(os.path.join(out, "big_local"))
    cli(["gather", os.path.join(out, "big.pt"), "-o", os.path.join(out, "big_local", "g.pt")], check=0)
    s3_put(TORCH_PYTHON, WORK, port, "--get", "written/big/g.pt", "out/s3/big_g.pt")
    size = os.path.getsize(os.path.join(out, "big_local", "g.pt"))
    same = a.returncode == 0 and open(os.path.join(out, "s3", "big_g.pt"), "rb").read() == \
        open(os.path.join(out, "big_local", "g.pt"), "rb").read()
    rc, said = torch_check(TORCH_PYTHON, WORK, "load-pt", "out/s3/big_g.pt", "out/big_local/g.pt")
    stats = remote_stats(a)
    record("S3 output: a multipart upload (over 16 MiB), streamed with no local temporary, is byte-identical; "
           "PyTorch loads it",
           f"{size} bytes in {stats[0] if stats else '?'} requests; torch.load: {said}",
           same and rc == 0 and stats is not None and stats[0] >= 4)
    # a reshard that splits every source chunk reads each byte once: the source items (about 5 MiB, over the size a
    # remote item is fetched whole) are located from their headers, and only the rows each target box takes are
    # fetched, read-ahead kept inside the box (before: 2.7x the size for 4 -> 8 ranks)
    cli(["reshard", os.path.join(out, "big.pt"), "--world-size", "2", "-o", os.path.join(out, "big_dcp")], check=0)
    s3_put(TORCH_PYTHON, WORK, port, "out/big_dcp", "bigdcp/")
    a = cli(["--remote-stats", "reshard", "s3://ckpt/bigdcp", "--world-size", "5", "--no-fsync", "-o",
             os.path.join(out, "big5_s3")], env)
    cli(["reshard", os.path.join(out, "big_dcp"), "--world-size", "5", "-o", os.path.join(out, "big5_local")], check=0)
    total = sum(os.path.getsize(os.path.join(out, "big_dcp", f)) for f in os.listdir(os.path.join(out, "big_dcp")))
    stats = remote_stats(a)
    same = a.returncode == 0 and all(
        open(os.path.join(out, "big5_s3", f), "rb").read() == open(os.path.join(out, "big5_local", f), "rb").read()
        for f in os.listdir(os.path.join(out, "big5_local")))
    record("S3: a reshard 2 -> 5 ranks fetches each source byte once (every chunk split across target boxes)",
           f"{stats[1] if stats else '?'} bytes fetched for {total}; same files as the local reshard: {same}",
           same and stats is not None and total <= stats[1] <= total * 1.03)
    # diagnose and check of a checkpoint of many objects 100 ms away ask for the next reads while they make one
    # (diagnose: each data file's first chunk; check: the next tensors' chunks), not one round trip after the other;
    # diagnose fetches the sampled items' headers only (before: each item whole, 40% of this checkpoint), check each
    # byte once (before: a 64 KiB block of tensor bytes again per item, for its zip's end record)
    s3_put(TORCH_PYTHON, WORK, port, "out/big5_local", "big5/")
    latency = dict(env, AWS_ENDPOINT_URL=f"http://127.0.0.1:{start_proxy(port, S3LatencyProxy)}")
    big5 = os.path.join(out, "big5_local")
    total5 = sum(os.path.getsize(os.path.join(big5, f)) for f in os.listdir(big5))
    for cmd, most_bytes in (("diagnose", total5 // 10), ("check", total5 * 1.002)):
        S3LatencyProxy.reset()
        t0 = time.monotonic()
        p = cli(["--remote-stats", cmd, "s3://ckpt/big5"], latency)
        took = time.monotonic() - t0
        l = cli([cmd, big5])
        stats = remote_stats(p)
        record(f"S3 100 ms away: {cmd} of a 5-object DCP has its reads in flight together, fetching what it reads once",
               f"exit {p.returncode} (local {l.returncode}); {S3LatencyProxy.ranged} ranged GETs, at most "
               f"{S3LatencyProxy.most} at once; {stats[1] if stats else '?'} bytes fetched of {total5}; {took:.2f} s",
               p.returncode == l.returncode and S3LatencyProxy.most >= 3 and stats is not None
               and stats[1] <= most_bytes)
    # a DCP of many small items (a ~1.2 KB archive per chunk, as PyTorch's writer makes them) shares each 64 KiB
    # block among many items: check gives a block back when its last item is done (before: none until the end, so a
    # check of a 1,024-rank DCP held all 2.8 GB); the scans' read-ahead held to 1 MiB for a checkpoint this small.
    # SGD state: Adam's steps are read again by the optimizer checks at the end, which fetches their blocks again
    rc, said = torch_check(TORCH_PYTHON, WORK, "make-many", "out/many.pt")
    assert rc == 0, said
    many = os.path.join(out, "many_dcp")
    cli(["reshard", os.path.join(out, "many.pt"), "--world-size", "2", "-o", many], check=0)
    s3_put(TORCH_PYTHON, WORK, port, "out/many_dcp", "manydcp/")
    meta_many = os.path.getsize(os.path.join(many, ".metadata"))  # held while the checkpoint is open
    data_many = sum(os.path.getsize(os.path.join(many, f)) for f in os.listdir(many)) - meta_many
    p = cli(["--remote-stats", "check", "s3://ckpt/manydcp"], dict(env, OPTSCOPE_REMOTE_READ_AHEAD_MB="1"))
    l = cli(["check", many])
    held = re.search(r"at most (\d+) bytes held", p.stderr)
    record("S3: check of a DCP of many small items holds a fraction of it at once (blocks given back as items end)",
           f"exit {p.returncode} (local {l.returncode}); at most {held.group(1) if held else '?'} bytes held: the "
           f"{meta_many}-byte .metadata and part of the {data_many} bytes of data files",
           p.returncode == l.returncode and held is not None and int(held.group(1)) - meta_many <= data_many // 3)
    # PyTorch's writer puts a rank file's items largest first, far from the keys' order, so a block's small items
    # belong to tensors read at very different times. The blocks held are bounded (OPTSCOPE_REMOTE_CACHE_MB, here
    # 2 MiB for a 6.3 MB data file): beyond it the least lately used go, fetched again if read again (before: a check
    # of a 1,024-rank DCP held 1.56 GB); a gather finishes each item it read (before: it held them all, pinned)
    rc, said = torch_check(TORCH_PYTHON, WORK, "make-sorted-dcp", "out/sorted_dcp")
    assert rc == 0, said
    ordered = os.path.join(out, "sorted_dcp")
    s3_put(TORCH_PYTHON, WORK, port, "out/sorted_dcp", "sorteddcp/")
    total_sorted = sum(os.path.getsize(os.path.join(ordered, f)) for f in os.listdir(ordered))
    small_cache = dict(env, OPTSCOPE_REMOTE_CACHE_MB="2")
    for d in ("sorted_g_s3", "sorted_g_local"):  # one output name in two folders: the name is the zip's record prefix
        os.makedirs(os.path.join(out, d), exist_ok=True)
    # inspect --hash reads the tensors largest first, not in the file's order: each block's 50 items are read at
    # very different times, so under 2 MiB most blocks are evicted and fetched again (about 20x the bytes: the
    # price of a cache smaller than what is read across); the bound holds, the hashes are the local ones
    for what, args, local_args in (
            ("inspect --hash --json", ["inspect", "--hash", "--json", "--threads", "1", "s3://ckpt/sorteddcp"],
             ["inspect", "--hash", "--json", "--threads", "1", ordered]),
            ("check --json", ["check", "--json", "s3://ckpt/sorteddcp"], ["check", "--json", ordered]),
            ("gather", ["gather", "s3://ckpt/sorteddcp", "-o", os.path.join(out, "sorted_g_s3", "g.pt")],
             ["gather", ordered, "-o", os.path.join(out, "sorted_g_local", "g.pt")])):
        p = cli(["--remote-stats"] + args, small_cache)
        l = cli(local_args)
        if what == "gather":
            same = p.returncode == l.returncode == 0 and open(os.path.join(out, "sorted_g_s3", "g.pt"), "rb").read() \
                == open(os.path.join(out, "sorted_g_local", "g.pt"), "rb").read()
        else:
            def report(text):  # what was found, not where
                j = json.loads(text)
                j.pop("path", None)
                return j
            same = p.returncode == l.returncode and report(p.stdout) == report(l.stdout)
        held = re.search(r"at most (\d+) bytes held", p.stderr)
        stats = remote_stats(p)
        record(f"S3: {what} of a DCP whose items are in size order, not key order, keeps under a 2 MiB cache; same "
               "result as the local copy", f"exit {p.returncode} (local {l.returncode}); at most "
               f"{held.group(1) if held else '?'} bytes held; {stats[1] if stats else '?'} bytes fetched of "
               f"{total_sorted}", same and held is not None and int(held.group(1)) <= (3 << 20)
               and stats is not None and (what.startswith("inspect") or stats[1] <= total_sorted * 1.2))
    # check reads every byte (CRCs, NaN counts) once: a record's CRC is summed from the chunk's own copy (before: the
    # chunk was fetched again for it, and those bytes kept until the end: 2x the size fetched, the size in memory)
    a = cli(["--remote-stats", "check", "s3://ckpt/bigdcp"], env)
    stats = remote_stats(a)
    record("S3: check of a DCP fetches each byte once",
           f"exit {a.returncode}; {stats[1] if stats else '?'} bytes fetched for {total}",
           a.returncode == 0 and stats is not None and total <= stats[1] <= total * 1.03)
    # from a store that serves each connection slowly (4 MB/s) only requests in flight together are fast: a gather
    # asks for a tensor's chunks in every rank file, and the next tensor's, at once (before: one object at a time,
    # at most two requests); the requests reuse their connections (before: a TCP connect each)
    slow_work = os.path.join(WORK, "slow")
    slow_port, _, _ = start_nginx(out, slow_work, procs, limit_rate="4m")
    for d in ("big_slow", "big_slow_local"): # one output name in two folders: the name is the zip's record prefix
        os.makedirs(os.path.join(out, d))
    a = cli(["--remote-stats", "gather", f"http://127.0.0.1:{slow_port}/big_dcp", "-o",
             os.path.join(out, "big_slow", "g.pt")])
    cli(["gather", os.path.join(out, "big_dcp"), "-o", os.path.join(out, "big_slow_local", "g.pt")], check=0)
    same = a.returncode == 0 and open(os.path.join(out, "big_slow", "g.pt"), "rb").read() == \
        open(os.path.join(out, "big_slow_local", "g.pt"), "rb").read()
    rows = [r for r in requests_in_log(slow_work) if r[3] in (200, 206)]
    connections = len({r[0] for r in rows})
    record("HTTP: a gather from a slow server has requests in flight together, over reused connections; "
           "byte-identical with the local gather",
           f"exit {a.returncode}; {len(rows)} requests, at most {most_in_flight(rows)} at once, over {connections} "
           f"connections; same: {same}",
           same and most_in_flight(rows) >= 4 and connections < len(rows))
    # a reshard that splits every source chunk: the boxes after the one being written ask for their rows ahead
    # (before: one box at a time, at most two requests), still each source byte once
    seen = len(requests_in_log(slow_work))
    a = cli(["--remote-stats", "reshard", f"http://127.0.0.1:{slow_port}/big_dcp", "--world-size", "5", "--no-fsync",
             "-o", os.path.join(out, "big5_slow")])
    same = a.returncode == 0 and all(
        open(os.path.join(out, "big5_slow", f), "rb").read() == open(os.path.join(out, "big5_local", f), "rb").read()
        for f in os.listdir(os.path.join(out, "big5_local")))
    rows = [r for r in requests_in_log(slow_work)[seen:] if r[3] in (200, 206)]
    stats = remote_stats(a)
    record("HTTP: a reshard 2 -> 5 from a slow server has requests in flight together, each source byte once; "
           "the same files as the local reshard",
           f"exit {a.returncode}; {len(rows)} requests, at most {most_in_flight(rows)} at once; "
           f"{stats[1] if stats else '?'} bytes fetched for {total}; same: {same}",
           same and most_in_flight(rows) >= 4 and stats is not None and total <= stats[1] <= total * 1.03)
    # reshard from S3 to S3; PyTorch's DCP loader reads what was written, equal to the local reshard
    a = cli(["reshard", "s3://ckpt/fsdp2_r2", "--world-size", "3", "-o", "s3://ckpt/written/rs"], no_tmp)
    cli(["reshard", os.path.join(DATA, "fsdp2_r2"), "--world-size", "3", "-o", os.path.join(out, "rs_local", "rs")],
        check=0)
    s3_put(TORCH_PYTHON, WORK, port, "--download", "written/rs", "out/s3/rs")
    rc, said = torch_check(TORCH_PYTHON, WORK, "load-dcp", "out/s3/rs", "out/rs_local/rs")
    record("S3 output: reshard -o s3:// (data objects streamed, no local temporary, .metadata last) loads in PyTorch, "
           "equal to the local reshard",
           f"exit {a.returncode}; dcp_to_torch_save: {said}", a.returncode == 0 and rc == 0)
    expect_error("S3 output: a prefix that holds objects is refused",
                 ["reshard", "s3://ckpt/fsdp2_r2", "--world-size", "2", "-o", "s3://ckpt/written/rs"],
                 ["already holds objects"], env)
    # data objects and no .metadata: what a DCP output whose run was killed leaves; said so, with what to do
    left = os.path.join(WORK, "unfinished")
    shutil.rmtree(left, ignore_errors=True)
    os.makedirs(left)
    for n in ("__0_0.distcp", "__1_0.distcp"):
        shutil.copy(os.path.join(DATA, "fsdp2_r2", n), os.path.join(left, n))
    s3_put(TORCH_PYTHON, WORK, port, "unfinished", "written/unfinished")
    expect_error("S3 output: a prefix holding only an unfinished DCP output's data objects is refused, saying so",
                 ["reshard", "s3://ckpt/fsdp2_r2", "--world-size", "2", "-o", "s3://ckpt/written/unfinished"],
                 ["already holds 2 DCP data object(s) (__0_0.distcp, ...) and no .metadata: an unfinished output"],
                 env)
    killed_run_cases(port, env, os.path.join(WORK, "out", "big.pt"))
    # "rs" is now a checkpoint folder: an object "rs" beside it is one no reader opens (it opens the folder)
    expect_error("S3 output: a single-file output naming a folder is refused, as a local folder is",
                 ["gather", "s3://ckpt/fsdp2_r2", "-o", "s3://ckpt/written/rs"], ["names a folder"], env)
    expect_error("S3 output: inside the input is refused",
                 ["gather", "s3://ckpt/fsdp2_r2", "-o", "s3://ckpt/fsdp2_r2/g.pt"], ["inside the input"], env)
    expect_error("HTTP output is refused", ["gather", "s3://ckpt/fsdp2_r2", "-o", "http://127.0.0.1:1/g.pt"],
                 ["plain HTTP"], env)
    # the .metadata PUT refused: the data objects already written are removed, nothing is left under the prefix
    proxy = start_proxy(port, S3FaultProxy)
    e = dict(env, AWS_ENDPOINT_URL=f"http://127.0.0.1:{proxy}")
    p = cli(["reshard", "s3://ckpt/fsdp2_r2", "--world-size", "2", "-o", "s3://ckpt/written/failed"], e)
    left = s3_put(TORCH_PYTHON, WORK, port, "--list", "written/failed").split()
    record("S3 output: a DCP upload whose .metadata fails leaves no object",
           f"exit {p.returncode}: {p.stderr.strip()[:140]}; left: {left}",
           p.returncode == 2 and "HTTP 403" in p.stderr and not left)
    # a multipart upload whose second part is refused: the upload is aborted, no object and no upload left open
    p = cli(["gather", os.path.join(out, "big.pt"), "-o", "s3://ckpt/written/aborted/g.pt"], e)
    left = s3_put(TORCH_PYTHON, WORK, port, "--list", "written/aborted").split()
    open_uploads = s3_put(TORCH_PYTHON, WORK, port, "--uploads", "written/aborted").split()
    record("S3 output: a multipart upload whose part 2 fails is aborted: no object, no upload left open",
           f"exit {p.returncode}: {p.stderr.strip()[:140]}; objects: {left}; open uploads: {open_uploads}",
           p.returncode == 2 and "HTTP 403" in p.stderr and "s3://ckpt/written/aborted/g.pt" in p.stderr
           and not left and not open_uploads)
    # Ctrl+C while an upload's part waits on a stalled store: the command stops within seconds, and the upload is
    # still aborted (the requests that undo a cancelled output are not cancelled with it)
    stall = dict(env, AWS_ENDPOINT_URL=f"http://127.0.0.1:{start_proxy(port, S3StallProxy)}",
                 OPTSCOPE_REMOTE_STALL_SECONDS="300")
    rc, took, err = interrupted(["gather", os.path.join(out, "big.pt"), "-o", "s3://ckpt/written/stopped/g.pt"],
                                stall, S3StallProxy.stalled)
    left = s3_put(TORCH_PYTHON, WORK, port, "--list", "written/stopped").split()
    open_uploads = s3_put(TORCH_PYTHON, WORK, port, "--uploads", "written/stopped").split()
    record("S3 output: SIGINT while a part's PUT waits on a stalled store stops the gather within seconds; the "
           "upload is aborted, no object left",
           f"exit {rc} {took:.1f} s after the signal; objects: {left}; open uploads: {open_uploads}",
           rc == 128 + signal.SIGINT and "stopped by SIGINT" in err and took < 10 and not left and not open_uploads)
    # the same with the abort stalled too (the whole store stops answering): the undo is given up after 20 s, and the
    # open upload is said, with its id (before: 3 minutes of the abort's retries, then "no output was left behind")
    S3StallProxy.deletes = True
    try:
        rc, took, err = interrupted(["gather", os.path.join(out, "big.pt"), "-o", "s3://ckpt/written/stalled/g.pt"],
                                    stall, S3StallProxy.stalled)
    finally:
        S3StallProxy.deletes = False
    record("S3 output: SIGINT while the whole store stalls, its abort too: stops within the undo's 20 s and says the "
           "incomplete upload it leaves, with its id",
           f"exit {rc} {took:.1f} s after the signal: {err.strip()[-220:]}",
           rc == 128 + signal.SIGINT and took < 35 and "left behind: s3://ckpt/written/stalled/g.pt: an incomplete "
           "multipart upload (upload id " in err and "no output was left behind" not in err)
    # Ctrl+C is how a watch ends, also while a look waits on a stalled listing: exit 0 at once (not 130, nor after
    # the listing's timeouts)
    S3StallProxy.listings = True
    try:
        rc, took, err = interrupted(["watch", "s3://ckpt/run"], stall, S3StallProxy.stalled)
    finally:
        S3StallProxy.listings = False
    record("S3: SIGINT while watch waits on a stalled listing ends the watch within seconds, exit 0",
           f"exit {rc} {took:.1f} s after the signal: {err.strip().splitlines()[-1][:120] if err.strip() else ''}",
           rc == 0 and took < 10)
    conflict_cases(port, env, out)


def killed_run_cases(port, env, big):
    """A run killed (SIGKILL: it can undo nothing) with its output unfinished on S3 leaves an open multipart upload
    (gather over 16 MiB) or a DCP output's first data object without .metadata (reshard). The next run on this machine
    that writes to object storage undoes it from the killed run's journal and says so, and the killed reshard's output
    can then be written again (before: the upload stayed open, unseen and billed, for ever; the prefix was refused as
    "an unfinished output" until removed by hand)"""
    state = os.path.join(WORK, "killed_state")
    shutil.rmtree(state, ignore_errors=True)
    e = dict(env, XDG_STATE_HOME=state)
    journals = os.path.join(state, "optscope", "outputs")
    fifo = os.path.join(WORK, "pause_killed")
    runs = (("gather", ["gather", big, "-o", "s3://ckpt/killed/one/g.pt"], "uploading", "killed/one/",
             "s3://ckpt/killed/one/g.pt: a run killed on this machine left its upload open (upload id "),
            ("reshard", ["reshard", "s3://ckpt/fsdp2_r2", "--world-size", "2", "-o", "s3://ckpt/killed/dcp"], "uploaded",
             "killed/dcp/", "s3://ckpt/killed/dcp: a run killed on this machine left this DCP output unfinished: its "
                            "objects are removed"))
    for i, (name, command, at, prefix, said_after) in enumerate(runs):
        for suffix in (".out", ".in"):
            if os.path.exists(fifo + suffix):
                os.unlink(fifo + suffix)
            os.mkfifo(fifo + suffix)
        proc = subprocess.Popen([CLI] + command, env=dict(os.environ, **e, OPTSCOPE_PAUSE_AT=at,
                                                           OPTSCOPE_PAUSE_FIFO=fifo),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(fifo + ".out") as f:
            said = f.readline().strip()
        proc.kill()
        proc.wait()

        def left():
            return s3_put(TORCH_PYTHON, WORK, port, "--list", prefix).split() + \
                s3_put(TORCH_PYTHON, WORK, port, "--uploads", prefix).split()
        before = left()
        record(f"S3 output: a {name} killed at '{at}' leaves its output unfinished, and its journal",
               f"paused at {said!r}; left: {before}; journals: {os.listdir(journals) if os.path.isdir(journals) else []}",
               said == at and before and os.path.isdir(journals) and os.listdir(journals))
        p = cli(["gather", os.path.join(DATA, "adam_int.pt"), "-o", f"s3://ckpt/killed/after{i}.pt"], e)
        after = left()
        record(f"S3 output: the next run undoes what the killed {name} left, saying so; no journal is left",
               f"exit {p.returncode}: {p.stderr.strip()[-300:]}; left: {after}; journals: {os.listdir(journals)}",
               p.returncode == 0 and not after and not os.listdir(journals) and said_after in p.stderr)
    p = cli(["reshard", "s3://ckpt/fsdp2_r2", "--world-size", "2", "-o", "s3://ckpt/killed/dcp"], e)
    back = cli(["verify", "s3://ckpt/fsdp2_r2", "--against", "s3://ckpt/killed/dcp"], e)
    record("S3 output: the killed reshard's output is then written whole and verifies",
           f"exit {p.returncode}, verify exit {back.returncode}: {(p.stderr + back.stderr).strip()[-200:]}",
           p.returncode == 0 and back.returncode == 0 and "note:" not in p.stderr)


def prefix_holds(port, prefix, folder):
    """the keys under s3://ckpt/PREFIX/, and whether they are the files of @p folder, byte for byte"""
    keys = s3_put(TORCH_PYTHON, WORK, port, "--list", prefix + "/").split()
    same = sorted(k[len(prefix) + 1:] for k in keys) == sorted(os.listdir(folder))
    for k in keys if same else []:
        s3_put(TORCH_PYTHON, WORK, port, "--get", k, "got")
        with open(os.path.join(WORK, "got"), "rb") as g, open(os.path.join(folder, k[len(prefix) + 1:]), "rb") as f:
            same = same and g.read() == f.read()
    return keys, same


def conflict_cases(port, env, out):
    """two runs write one DCP prefix at once: run A checks that the prefix is empty and pauses before its first
    object; run B writes its whole checkpoint there; A goes on. A's objects are created only where none is (If-None-
    Match: *): it stops at its first object, naming it, and removes nothing of B's, which stays whole. Before, both
    exited 0 and the prefix held A's files over B's. A's rank files under 16 MiB (one PUT each), and over it (a
    multipart upload, refused at its completion and aborted)"""
    # the answer to an object's creation lost, and asked again: the object there is this run's own (its tag), not
    # another writer's
    lost = dict(env, AWS_ENDPOINT_URL=f"http://127.0.0.1:{start_proxy(port, S3LostAnswerProxy)}")
    for what, src, name in (("one PUT", os.path.join(DATA, "fsdp2_r2"), "lost_small"),
                            ("a multipart upload", os.path.join(out, "big.pt"), "lost_big")):
        p = cli(["reshard", src, "--world-size", "2", "-o", f"s3://ckpt/{name}"], lost)
        local = os.path.join(out, name + "_local")
        shutil.rmtree(local, ignore_errors=True)
        cli(["reshard", src, "--world-size", "2", "-o", local], check=0)
        keys, whole = prefix_holds(port, name, local)
        record(f"S3 output: the answer to each object's creation lost ({what}): asked again, the object there is the "
               "run's own, and the reshard completes", f"exit {p.returncode}: {p.stderr.strip()[-160:]}; {keys}",
               p.returncode == 0 and whole)
    # a store without conditional writes (501 NotImplemented to If-None-Match): asked again without it, the output
    # is written (it was found empty when the run started)
    plain = dict(env, AWS_ENDPOINT_URL=f"http://127.0.0.1:{start_proxy(port, S3NoConditionsProxy)}")
    p = cli(["reshard", os.path.join(out, "big.pt"), "--world-size", "2", "-o", "s3://ckpt/plain"], plain)
    keys, whole = prefix_holds(port, "plain", os.path.join(out, "lost_big_local"))
    record("S3 output: a store that does not implement conditional writes (501) gets the DCP output without them",
           f"exit {p.returncode}: {p.stderr.strip()[-160:]}; {keys}", p.returncode == 0 and whole)
    for what, src, small in (("one PUT", os.path.join(DATA, "fsdp2_r2"), True),
                             ("a multipart upload", os.path.join(out, "big.pt"), False)):
        prefix = "race_small" if small else "race_big"
        fifo = os.path.join(WORK, "pause-" + prefix)
        for s in (".out", ".in"):
            if os.path.exists(fifo + s):
                os.unlink(fifo + s)
            os.mkfifo(fifo + s)
        e = dict(os.environ, **env, OPTSCOPE_PAUSE_AT="writing", OPTSCOPE_PAUSE_FIFO=fifo)
        a = subprocess.Popen([CLI, "reshard", src, "--world-size", "3", "-o", f"s3://ckpt/{prefix}"], env=e,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        with open(fifo + ".out") as f:
            f.readline()
        b = cli(["reshard", src, "--world-size", "2", "-o", f"s3://ckpt/{prefix}"], env)
        with open(fifo + ".in", "w") as f:
            f.write("go\n")
        so, se = a.communicate(timeout=300)
        outputs.append(so + se)
        # B's checkpoint, byte for byte as a local reshard writes it
        local = os.path.join(out, prefix + "_local")
        shutil.rmtree(local, ignore_errors=True)
        cli(["reshard", src, "--world-size", "2", "-o", local], check=0)
        keys, whole = prefix_holds(port, prefix, local)
        open_uploads = s3_put(TORCH_PYTHON, WORK, port, "--uploads", prefix + "/").split()
        record(f"S3 output: two reshards into one prefix at once ({what}): the second to write stops naming the "
               "object the other created, and that checkpoint stays whole",
               f"B exit {b.returncode}, A exit {a.returncode}: {se.strip()[-200:]}; objects {keys}; open uploads "
               f"{open_uploads}",
               b.returncode == 0 and a.returncode == 2 and "another writer created this object" in se
               and f"s3://ckpt/{prefix}/__" in se and whole and not open_uploads)


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    try:
        http_port, https_port, cert = start_nginx(DATA, WORK, procs)
        http_cases(http_port, https_port, cert)
        fault_cases(http_port)
        odd_server_cases(http_port)
        http_edge_cases()
        app_exit_case(http_port)
        interrupt_case(http_port)
        trickle_case(http_port)
        store_failure_cases(http_port)
        overlong_case(http_port)
        s3_cases()
    finally:
        stop(procs)
    leaked = [o for o in outputs if SECRET in o or "SIGNATUREnever-printed" in o or PASSWORD in o]
    for o in leaked:
        print("LEAKED:", o[:600])
    record("no credential (secret key, presigned signature, password) in any output", f"{len(outputs)} outputs searched",
           not leaked)
    with open(REPORT, "w") as f:
        f.write("| case | outcome | ok |\n|---|---|---|\n")
        for case, outcome, ok in results:
            f.write(f"| {case} | {outcome.replace('|', '/')} | {'yes' if ok else 'NO'} |\n")
    failed = [c for c, _, ok in results if not ok]
    print(f"{len(results) - len(failed)} of {len(results)} remote cases ok; report: {REPORT}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
