"""A hostile S3 front for the remote attack tests: ``benchmarks.s3_proxy.S3Proxy``'s forwarding, with
a hook that may rewrite every answer (status, headers, body) or cut the connection mid-body.

``HostileProxy(upstream)`` forwards each request to the moto server at ``upstream`` and passes the
answer to ``proxy.hook(request, answer)`` (when set): the hook returns the answer to send (an
:class:`Answer`, possibly changed) or None to close the connection without a word. ``Answer.cut``
sends the headers and only that many body bytes, then closes (a connection reset mid-body).
127.0.0.1 only, stdlib only.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from benchmarks.s3_proxy import _HOP, _read_chunked

__all__ = ["Answer", "HostileProxy", "Request"]


@dataclass
class Request:
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
    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes
    cut: int | None = None  # send only this many body bytes, then close
    extra: dict = field(default_factory=dict)

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)

    def set_header(self, name: str, value: str) -> None:
        self.headers = [(k, v) for k, v in self.headers if k.lower() != name.lower()] + [(name, value)]

    def drop_header(self, name: str) -> None:
        self.headers = [(k, v) for k, v in self.headers if k.lower() != name.lower()]


Hook = Callable[[Request, Answer], "Answer | None"]


class HostileProxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.hook: Hook | None = None
        self.log: list[tuple[str, str, int]] = []
        self._local = threading.local()
        self._lock = threading.Lock()
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
        self.endpoint = f"127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _upstream(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            host, port = self.upstream.rsplit(":", 1)
            conn = self._local.conn = http.client.HTTPConnection(host, int(port), timeout=60)
        return conn

    def fetch(self, method: str, path: str, headers: dict[str, str], body: bytes | None = None) -> Answer:
        """One request to the upstream server (also for hooks that answer with another object)."""
        for attempt in range(2):
            conn = self._upstream()
            try:
                conn.request(method, path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                return Answer(resp.status, resp.reason, list(resp.getheaders()), data)
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
        headers = {k: v for k, v in h.headers.items() if k.lower() not in _HOP | {"expect", "content-length"}}
        if body is not None:
            headers["Content-Length"] = str(len(body))
        try:
            ans: Answer | None = self.fetch(h.command, h.path, headers, body)
        except (OSError, http.client.HTTPException):
            ans = None
        req = Request(h.command, h.path, dict(h.headers.items()))
        if ans is not None and self.hook is not None:
            ans = self.hook(req, ans)
        with self._lock:
            self.log.append((h.command, h.path, -1 if ans is None else ans.status))
        if ans is None:
            h.close_connection = True
            h.connection.close()
            return
        h.send_response(ans.status, ans.reason)
        head = h.command == "HEAD"
        for k, v in ans.headers:
            if k.lower() not in _HOP and (head or k.lower() != "content-length"):
                h.send_header(k, v)
        if not head:
            h.send_header("Content-Length", str(len(ans.body)))
        h.end_headers()
        if head:
            return
        if ans.cut is not None:
            h.wfile.write(ans.body[: ans.cut])
            h.wfile.flush()
            h.close_connection = True
            h.connection.close()
            return
        h.wfile.write(ans.body)
