# SPDX-License-Identifier: GPL-3.0-or-later
"""A front for moto_server that checks every signed request's AWS Signature Version 4 as S3 does, with botocore's own
signer (the AWS SDK's S3SigV4Auth), before it forwards the request; runs in the PyTorch chroot (botocore).

    sigv4_proxy.py LISTEN_PORT UPSTREAM_PORT ACCESS_KEY SECRET LOG [REGION]

moto_server checks no signature unless its IAM emulation is on, and then rebuilds the request from a decoded URL
(it refuses boto3's own listings with a delimiter), so a client that signs wrongly passed every test. This front
recomputes the signature from the request exactly as it arrived (path and query as sent, the headers SignedHeaders
names, the payload hash x-amz-content-sha256 gives, checked against the body) and refuses a mismatch with 403
SignatureDoesNotMatch, an x-amz-* header left unsigned, a body whose hash is not the one signed, or another access
key. With REGION, the buckets are in that region: a request signed for another (but "auto", GCS's) gets AWS's answer,
400 AuthorizationHeaderMalformed naming the region in <Region>. Anonymous requests pass. Each request's verdict is appended to LOG: "ok METHOD PATH" or "refused WHY ..." with
the canonical request botocore computed, so a refusal can be read.
"""
import hashlib
import http.client
import http.server
import sys
import threading

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

listen, upstream, access_key, secret, log_path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], \
    sys.argv[5]
bucket_region = sys.argv[6] if len(sys.argv) > 6 else None
log_lock = threading.Lock()


def log(line):
    with log_lock, open(log_path, "a") as f:
        f.write(line + "\n")


def between(s, first, second):
    return s.partition(first)[2].partition(second)[0]


def refusal(headers, body, method, path):
    """why S3 would refuse this request's signature, or None"""
    auth = headers.get("Authorization")
    if not auth:
        return None
    credential = between(auth, "Credential=", ",").split("/")
    if len(credential) != 5 or credential[0] != access_key:
        return "InvalidAccessKeyId " + credential[0]
    signed = between(auth, "SignedHeaders=", ",").split(";")
    unsigned = [k for k in headers.keys() if k.lower().startswith("x-amz-") and k.lower() not in signed]
    if unsigned or "host" not in signed:
        return f"headers present that are not signed: {unsigned or 'host'}"
    declared = headers.get("x-amz-content-sha256", "")
    if declared != "UNSIGNED-PAYLOAD" and declared != hashlib.sha256(body).hexdigest():
        return f"XAmzContentSHA256Mismatch (declared {declared!r})"
    request = AWSRequest(method=method, url=path, data=body,
                         headers={k: v for k, v in headers.items() if k.lower() in signed})
    request.context["timestamp"] = headers["X-Amz-Date"]
    signer = S3SigV4Auth(Credentials(access_key, secret), credential[3], credential[2])
    canonical = signer.canonical_request(request)
    expected = signer.signature(signer.string_to_sign(request, canonical), request)
    if expected != between(auth + ",", "Signature=", ","):
        return "SignatureDoesNotMatch; botocore's canonical request: " + repr(canonical)
    return None


class Front(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, and 100-continue answered at once (curl waits a second otherwise)

    def log_message(self, *a):
        pass

    def answer(self, status, headers, data, head):
        self.send_response(status)
        for k, v in headers:
            if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(dict((k.lower(), v) for k, v in headers).get("content-length", 0)
                                               if head else len(data)))
        self.end_headers()
        if not head:
            self.wfile.write(data)

    def handle_any(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
        auth = self.headers.get("Authorization", "")
        signed_for = between(auth, "Credential=", ",").split("/")[2:3]
        if bucket_region and signed_for and signed_for[0] not in (bucket_region, "auto"):
            log(f"region {signed_for[0]} {self.command} {self.path}")
            err = ("<?xml version='1.0'?><Error><Code>AuthorizationHeaderMalformed</Code><Message>The authorization "
                   f"header is malformed; the region '{signed_for[0]}' is wrong; expecting '{bucket_region}'</Message>"
                   f"<Region>{bucket_region}</Region></Error>").encode()
            return self.answer(400, [("Content-Type", "application/xml")], err, False)
        why = refusal(self.headers, body, self.command, self.path)
        log(f"{'refused ' + why if why else 'ok'} {self.command} {self.path}")
        if why:
            code = why.split()[0] if why.split()[0] in ("InvalidAccessKeyId", "XAmzContentSHA256Mismatch") \
                else "SignatureDoesNotMatch"
            err = (f"<?xml version='1.0'?><Error><Code>{code}</Code><Message>refused by the SigV4 check"
                   "</Message></Error>").encode()
            return self.answer(403, [("Content-Type", "application/xml")], err, False)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("expect", "connection")}
        c = http.client.HTTPConnection("127.0.0.1", upstream, timeout=120)
        c.request(self.command, self.path, body=body or None, headers=headers)
        r = c.getresponse()
        data = r.read()
        c.close()
        self.answer(r.status, r.getheaders(), data, self.command == "HEAD")

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_any


class Server(http.server.ThreadingHTTPServer):
    request_queue_size = 256
    daemon_threads = True


Server(("127.0.0.1", listen), Front).serve_forever()
