"""A fault-injecting HTTP proxy between boto3 and the moto S3 server (issue 18, section 1).

boto3 talks to the proxy (``endpoint_url=proxy.endpoint``); the proxy forwards each request to
moto over real HTTP and, per request kind and with set probabilities (seeded RNG), misbehaves
instead. Request kinds: ``GET`` (an object), ``LIST`` (a bucket GET), ``PUT``, ``CPUT`` (a PUT
with ``If-None-Match``: the conditional create), ``HEAD``, ``DELETE`` and ``POST`` (DeleteObjects).

Faults:

- ``503`` (SlowDown), ``500`` (InternalError), ``429`` (SlowDown with status 429): an S3 XML
  error answer; the request never reaches moto.
- ``reset_before``: the connection is reset (RST) before the request reaches moto.
- ``reset_after``: the request is applied by moto, then the connection is reset before the
  answer (the ambiguous case: the client cannot know that it was applied).
- ``short_body``: moto's answer is sent with its full Content-Length but only half of the body,
  then the connection is closed (for answers with an empty body, the same as ``reset_after``).
- ``delay``: the request is applied, then no answer comes for ``delay_seconds`` (set it past the
  client's read timeout), then the connection is closed.
- ``delete_errors`` (POST only): the first key of a DeleteObjects request is taken out before
  it reaches moto, and the answer reports an InternalError for it in its per-key ``Errors``.

``proxy.set_rates({"GET": {"reset_before": 0.1}, "*": {...}})`` sets probabilities (a kind's own
entry replaces ``"*"``); ``proxy.force("GET", "500", "500")`` makes the next requests of a kind
fail in that order, whatever the rates; ``proxy.down()`` refuses every connection (the listening
socket is closed) until ``proxy.up()``. ``proxy.log`` is a list of ``(kind, method, path, fault)``
for each request; ``proxy.counts()`` sums it up, and ``proxy.sent`` counts the body bytes
answered per kind.

A network, for benchmarks: ``latency_seconds`` delays every answer (a round trip's
first-byte latency) and ``bytes_per_second`` paces each answer's body (one connection's
bandwidth); both 0 by default.
"""
from __future__ import annotations

import collections
import http.client
import random
import re
import socket
import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

KINDS = ("GET", "LIST", "PUT", "CPUT", "HEAD", "DELETE", "POST")
FAULTS = ("503", "500", "429", "reset_before", "reset_after", "short_body", "delay", "delete_errors")

_ERRORS = {
    "503": (503, "SlowDown", "Please reduce your request rate."),
    "500": (500, "InternalError", "We encountered an internal error. Please try again."),
    "429": (429, "SlowDown", "Too many requests."),
}
_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "upgrade", "trailer"}


class _Abort(Exception):
    """Stop serving this connection (it was reset or closed on purpose)."""


class FaultProxy:
    def __init__(self, upstream: str, seed: int = 0, delay_seconds: float = 2.0) -> None:
        u = urlsplit(upstream)
        self.upstream = (u.hostname, u.port)
        self.rng = random.Random(seed)
        self.delay_seconds = delay_seconds
        self.latency_seconds = 0.0
        self.bytes_per_second = 0.0
        self.sent: collections.Counter = collections.Counter()
        self.rates: dict = {}
        self.forced: dict = collections.defaultdict(collections.deque)
        self.log: list = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._server = None
        self._thread = None
        self._conns: set = set()
        self.port = 0
        self.up()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- control --------------------------------------------------------------------------
    def set_rates(self, rates: dict) -> None:
        with self._lock:
            self.rates = {k: dict(v) for k, v in rates.items()}

    def uniform(self, p: float, faults=("503", "500", "429", "reset_before", "reset_after",
                                         "short_body", "delay")) -> None:
        """Fault each request with probability ``p``, spread evenly over ``faults``."""
        self.set_rates({"*": {f: p / len(faults) for f in faults}})

    def force(self, kind: str, *faults: str) -> None:
        with self._lock:
            self.forced[kind].extend(faults)

    def clear(self) -> None:
        with self._lock:
            self.rates = {}
            self.forced.clear()

    def up(self) -> None:
        if self._server is not None:
            return
        proxy = self

        class Handler(_Handler):
            pass
        Handler.proxy = proxy
        ThreadingHTTPServer.allow_reuse_address = True
        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True, name="s3-fault-proxy")
        self._thread.start()

    def down(self) -> None:
        """Refuse every connection (and reset open ones) until ``up()``."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            _reset(c)

    def close(self) -> None:
        self._stop.set()
        self.down()

    # -- bookkeeping ----------------------------------------------------------------------
    def _choose(self, kind: str) -> str | None:
        with self._lock:
            if self.forced.get(kind):
                return self.forced[kind].popleft()
            rates = self.rates.get(kind, self.rates.get("*", {}))
            r = self.rng.random()
            for fault, p in sorted(rates.items()):
                if fault == "delete_errors" and kind != "POST":
                    continue
                if r < p:
                    return fault
                r -= p
            return None

    def counts(self) -> dict:
        with self._lock:
            log = list(self.log)
        requests = collections.Counter(k for k, _, _, _ in log)
        faults = collections.Counter(f for _, _, _, f in log if f)
        by_kind = collections.Counter(f"{k}:{f}" for k, _, _, f in log if f)
        return {"requests": len(log), "by_kind": dict(sorted(requests.items())),
                "faults": dict(sorted(faults.items())), "faults_by_kind": dict(sorted(by_kind.items()))}

    def faults(self, kind: str | None = None) -> list:
        with self._lock:
            return [f for k, _, _, f in self.log if f and (kind is None or k == kind)]


def _reset(sock) -> None:
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


def _kind(method: str, path: str, headers) -> str:
    u = urlsplit(path)
    parts = [p for p in u.path.split("/") if p]
    if method == "GET":
        return "LIST" if len(parts) <= 1 else "GET"
    if method == "PUT":
        return "CPUT" if headers.get("If-None-Match") else "PUT"
    return method if method in KINDS else "OTHER"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    proxy: FaultProxy

    def log_message(self, *args):   # quiet
        pass

    def setup(self):
        super().setup()
        with self.proxy._lock:
            self.proxy._conns.add(self.connection)

    def finish(self):
        try:
            super().finish()
        except OSError:
            pass
        with self.proxy._lock:
            self.proxy._conns.discard(self.connection)

    def handle(self):
        try:
            super().handle()
        except (_Abort, OSError):
            self.close_connection = True

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _reset(self):
        _reset(self.connection)
        raise _Abort()

    def _serve(self):
        p = self.proxy
        body = self._body()
        if p._server is None:                      # went down while this connection was open
            self._reset()
        kind = _kind(self.command, self.path, self.headers)
        fault = p._choose(kind)
        with p._lock:
            p.log.append((kind, self.command, self.path, fault))
        if fault in _ERRORS:
            status, code, message = _ERRORS[fault]
            resource = urlsplit(self.path).path
            xml = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
                   f'<Message>{message}</Message><Resource>{resource}</Resource>'
                   f'<RequestId>fault-proxy</RequestId></Error>').encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(xml)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(xml)
            self.wfile.flush()
            return
        if fault == "reset_before":
            self._reset()
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
        dropped = None
        if fault == "delete_errors":
            m = re.search(rb"<Object>\s*<Key>(.*?)</Key>.*?</Object>", body, re.S)
            if m:
                dropped = m.group(1).decode()
                body = body[:m.start()] + body[m.end():]
                headers = {k: v for k, v in headers.items()
                           if k.lower() != "content-md5" and not k.lower().startswith("x-amz-checksum")
                           and k.lower() != "x-amz-sdk-checksum-algorithm"}
        headers["Content-Length"] = str(len(body))
        if dropped is not None and b"<Object>" not in body:      # nothing left to forward
            status, reason, rheaders = 200, "OK", [("Content-Type", "application/xml")]
            data = (b'<?xml version="1.0" encoding="UTF-8"?>\n<DeleteResult '
                    b'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"></DeleteResult>')
        else:
            conn = http.client.HTTPConnection(*p.upstream, timeout=30)
            try:
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                status, reason, rheaders = resp.status, resp.reason, resp.getheaders()
            finally:
                conn.close()
        if fault == "reset_after" or (fault == "short_body" and not data):
            self._reset()
        if fault == "delay":
            p._stop.wait(p.delay_seconds)
            self._reset()
        if dropped is not None and status == 200:
            err = (f"<Error><Key>{dropped}</Key><Code>InternalError</Code>"
                   f"<Message>injected by the fault proxy</Message></Error>").encode()
            if b"</DeleteResult>" in data:
                data = data.replace(b"</DeleteResult>", err + b"</DeleteResult>")
            else:
                data = re.sub(rb"<DeleteResult([^>]*)/>",
                              lambda m: b"<DeleteResult" + m.group(1) + b">" + err + b"</DeleteResult>", data)
            rheaders = [(k, v) for k, v in rheaders if k.lower() not in ("content-md5", "etag")
                        and not k.lower().startswith("x-amz-checksum")]
        self.send_response_only(status, reason)
        for k, v in rheaders:
            if k.lower() not in _HOP and k.lower() not in ("content-length", "date", "server"):
                self.send_header(k, v)
        length = dict((k.lower(), v) for k, v in rheaders).get("content-length", "0")
        self.send_header("Content-Length", length if self.command == "HEAD" else str(len(data)))
        self.end_headers()
        if self.command == "HEAD":
            self.wfile.flush()
            return
        if fault == "short_body":
            self.wfile.write(data[:len(data) // 2])
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.connection.close()
            raise _Abort()
        if p.latency_seconds or p.bytes_per_second:
            p._stop.wait(p.latency_seconds + (len(data) / p.bytes_per_second if p.bytes_per_second else 0))
        with p._lock:
            p.sent[kind] += len(data)
        self.wfile.write(data)
        self.wfile.flush()

    do_GET = do_PUT = do_HEAD = do_DELETE = do_POST = _serve
