"""A hostile S3 front for the remote attack tests: ``benchmarks.s3_proxy.S3Proxy`` (the benchmarks'
latency proxy) with its ``hook`` set, which may rewrite every answer (status, headers, body) or cut the
connection mid-body. ``HostileProxy(upstream)`` forwards to the moto server at ``upstream`` with no
added latency; set ``proxy.hook = fn(request, answer) -> Answer | None``; ``proxy.log`` lists the latest requests
with the status sent (-1: closed without an answer). 127.0.0.1 only, stdlib only.
"""

from __future__ import annotations

from benchmarks.s3_proxy import Answer, Request
from benchmarks.s3_proxy import S3Proxy as HostileProxy

__all__ = ["Answer", "HostileProxy", "Request"]
