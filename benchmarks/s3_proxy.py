"""A small HTTP proxy in front of a local S3 endpoint (moto): added latency, request counts, injected
faults and rewritten answers, for the remote benchmarks and the fault and attack tests (127.0.0.1
only, stdlib only).

``S3Proxy(upstream)`` forwards every request to ``upstream`` (``host:port``) after sleeping
``latency_s`` (per request, as a far-away object store would), counts requests by method, answers
the next ``fail_next`` requests with an S3 ``503 SlowDown`` error (throttling), and while ``down``
is set closes every connection without an answer (a server that went away). A ``hook`` (the attack
tests' hostile store: ``tests/sources/_hostile_store.py``) sees every upstream answer and returns the
:class:`Answer` to send, possibly changed, or None to close the connection without a word;
``Answer.cut`` sends the headers and only that many body bytes, then closes (a reset mid-body);
``Answer.trickle`` sends the body a byte at a time, that many seconds apart (a slow body).
"""

from __future__ import annotations

import http.client
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["Answer", "Request", "S3Proxy"]

_SLOW_DOWN = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
              b"<Message>Please reduce your request rate.</Message></Error>")
_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade", "te", "trailer"}


def _read_chunked(rfile) -> bytes:
    """The body of a ``Transfer-Encoding: chunked`` request (what the AWS SDK sends on PUT)."""
    out = bytearray()
    while True:
        size = int(rfile.readline().split(b";")[0].strip() or b"0", 16)
        if size == 0:
            while rfile.readline() not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return bytes(out)
        out += rfile.read(size)
        rfile.readline()


@dataclass
class Request:
    """A request as the hook sees it."""

    method: str
    path: str
    headers: dict[str, str]

    @property
    def range(self) -> tuple[int, int] | None:
        """(first, last) byte of a ``Range: bytes=a-b`` request, else None."""
        r = self.headers.get("range") or self.headers.get("Range")
        if not r or not r.startswith("bytes="):
            return None
        a, _, b = r[6:].partition("-")
        return int(a), int(b) if b else -1


@dataclass
class Answer:
    """An upstream answer, which a hook may change before it is sent."""

    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes
    cut: int | None = None  # send only this many body bytes, then close
    trickle: float | None = None  # send the body a byte at a time, this many seconds apart (a slow body)
    extra: dict = field(default_factory=dict)

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)

    def set_header(self, name: str, value: str) -> None:
        self.headers = [(k, v) for k, v in self.headers if k.lower() != name.lower()] + [(name, value)]

    def drop_header(self, name: str) -> None:
        self.headers = [(k, v) for k, v in self.headers if k.lower() != name.lower()]


Hook = Callable[[Request, Answer], "Answer | None"]


class S3Proxy:
    """Forward 127.0.0.1:``port`` to ``upstream`` with latency, counts and faults (see module)."""

    def __init__(self, upstream: str, latency_s: float = 0.0) -> None:
        self.upstream = upstream
        self.latency_s = latency_s
        self.fail_next = 0
        self.down = False
        self.counts: Counter[str] = Counter()
        self.bytes_out = 0  # response body bytes sent to the client
        self.failed = 0
        self.hook: Hook | None = None
        #: (method, path, status sent or -1: closed without an answer) of the latest requests
        self.log: deque[tuple[str, str, int]] = deque(maxlen=100_000)
        self._lock = threading.Lock()
        self._closed = False
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _any(self) -> None:
                proxy._handle(self)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _any

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.endpoint = f"127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self._local = threading.local()

    @property
    def requests(self) -> int:
        return sum(self.counts.values())

    def reset(self) -> None:
        with self._lock:
            self.counts.clear()
            self.bytes_out = 0
            self.failed = 0

    def close(self) -> None:
        self._closed = True  # a trickling answer stops
        self._server.shutdown()
        self._server.server_close()

    def _upstream(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            host, port = self.upstream.rsplit(":", 1)
            conn = self._local.conn = http.client.HTTPConnection(host, int(port), timeout=60)
        return conn

    def fetch(self, method: str, path: str, headers: dict[str, str], body: bytes | None = None) -> Answer:
        """One request to the upstream server (a kept-alive connection that went stale is retried once;
        also for hooks that answer with another object)."""
        for attempt in range(2):
            conn = self._upstream()
            try:
                conn.request(method, path, body=body, headers=headers)
                resp = conn.getresponse()
                return Answer(resp.status, resp.reason, list(resp.getheaders()), resp.read())
            except (OSError, http.client.HTTPException):
                conn.close()
                self._local.conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        if h.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = _read_chunked(h.rfile)
        else:
            length = int(h.headers.get("Content-Length") or 0)
            body = h.rfile.read(length) if length else None
        if self.down:
            h.close_connection = True
            h.connection.close()  # no answer at all: the client sees a dropped connection
            return
        with self._lock:
            self.counts["LIST" if h.command == "GET" and "prefix=" in h.path else h.command] += 1
            throttle = self.fail_next > 0
            if throttle:
                self.fail_next -= 1
                self.failed += 1
        if self.latency_s:
            time.sleep(self.latency_s)
        head = h.command == "HEAD"  # a HEAD answer keeps the object's Content-Length
        if throttle:
            h.send_response(503)
            h.send_header("Content-Type", "application/xml")
            h.send_header("Content-Length", str(len(_SLOW_DOWN)))
            h.end_headers()
            if not head:
                h.wfile.write(_SLOW_DOWN)
            return
        headers = {k: v for k, v in h.headers.items() if k.lower() not in _HOP | {"expect", "content-length"}}
        if body is not None:
            headers["Content-Length"] = str(len(body))
        try:
            ans: Answer | None = self.fetch(h.command, h.path, headers, body)
        except (OSError, http.client.HTTPException):
            ans = None
        hook = self.hook
        if hook is not None and ans is not None:
            ans = hook(Request(h.command, h.path, dict(h.headers.items())), ans)
        self.log.append((h.command, h.path, -1 if ans is None else ans.status))
        if ans is None:
            h.close_connection = True
            h.connection.close()
            return
        h.send_response(ans.status, ans.reason)
        for k, v in ans.headers:
            if k.lower() not in _HOP and (head or k.lower() != "content-length"):
                h.send_header(k, v)
        if not head:
            h.send_header("Content-Length", str(len(ans.body)))
        h.end_headers()
        if head:
            return
        if ans.trickle is not None:
            for i in range(len(ans.body)):
                if self._closed:
                    break
                h.wfile.write(ans.body[i : i + 1])
                h.wfile.flush()
                time.sleep(ans.trickle)
            h.close_connection = True
            return
        if ans.cut is not None:
            h.wfile.write(ans.body[: ans.cut])
            h.wfile.flush()
            h.close_connection = True
            h.connection.close()
            return
        h.wfile.write(ans.body)
        with self._lock:
            self.bytes_out += len(ans.body)
