"""Opening a pinned dataset on S3: requests, bytes and seconds to ``rd.ArrowShards(prefix)``.

Run: ``.venv/bin/python -m benchmarks.bench_remote_open [--quick] [--baseline COMMIT]``.
A moto S3 server on 127.0.0.1 behind :class:`benchmarks.s3_proxy.S3Proxy`, which adds
``--latency-ms`` (default 30) to every request and counts requests and bytes. The data is the
layout of issue 26's measurement, with shorter rows: 32 shards x 16 record batches (row groups)
of 1,024 rows (524,288 rows; ``tokens: list<int32>`` of 16..32 values, ``id: int64``), written
as Arrow IPC files, as Parquet and by ``datasets.Dataset.save_to_disk`` (IPC *stream* files).
The row length does not change what opening reads (metadata only), except for the old code's
stream path, which downloads every byte (so its bytes column is small here).

Rows, per format, measured in one run (all opens at the same latency):

* ``before``: the package at ``--baseline`` (default: the commit this branch started from), in a
  subprocess: its own ``rd.pin`` (schema-1 manifest), then an open on the same machine (its
  verification markers present), ``verify="cached"``.
* ``cold``: this code, a schema-1 manifest (no layouts, no ETags; the manifest of ``rd.pin``
  with those fields removed), content verified on this machine, no layout cached yet: the
  layouts are built during the open.
* ``cached layout``: the same again (layouts now in ``cache_dir()/layouts``).
* ``pinned layout``: this code's ``rd.pin`` (schema 2: layouts and ETags in the manifest).
* ``new machine``: the schema-2 manifest opened with an empty cache directory (no verification
  markers: the pinned ETags are trusted, nothing is re-hashed or downloaded).
* ``pin, hash=content`` / ``pin, hash=etag``: ``rd.pin`` at the same latency: every byte hashed
  (16 objects at a time) / the objects' ETags recorded, no body read.

Writes ``benchmarks/results/remote_open.json`` and ``remote_open.md``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from benchmarks._common import write_results
from benchmarks.s3_proxy import S3Proxy

ROOT = Path(__file__).resolve().parents[1]
SHARDS, BATCHES, ROWS = 32, 16, 1024
FORMATS = ("ipc_file", "parquet", "save_to_disk")

_CHILD = r"""
import json, sys, time
import pyarrow.fs as pafs
import resumable_data as rd
assert rd.__file__.startswith(sys.argv[5]), rd.__file__
mode, endpoint, prefix = sys.argv[1:4]
fs = pafs.S3FileSystem(endpoint_override=endpoint, scheme="http", access_key="testing",
                       secret_key="testing", region="us-east-1")
t0 = time.perf_counter()
if mode == "pin":
    rd.pin(prefix, filesystem=fs)
else:
    src = rd.ArrowShards(prefix, filesystem=fs)
    assert len(src) == int(sys.argv[4])
print(json.dumps({"seconds": time.perf_counter() - t0}))
"""


def s3(endpoint: str) -> pafs.S3FileSystem:
    return pafs.S3FileSystem(endpoint_override=endpoint, scheme="http", access_key="testing",
                             secret_key="testing", region="us-east-1", allow_bucket_creation=True)


def build_table(n: int) -> pa.Table:
    rng = np.random.default_rng(0)
    lens = rng.integers(16, 33, n)
    off = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lens, out=off[1:])
    tokens = pa.ListArray.from_arrays(pa.array(off), pa.array(rng.integers(0, 50_000, off[-1]).astype(np.int32)))
    return pa.table({"id": pa.array(np.arange(n, dtype=np.int64)), "tokens": tokens})


def write_local(fmt: str, table: pa.Table, out: Path) -> None:
    import resumable_data as rd
    if fmt == "ipc_file":
        rd.write_arrow_shards(table, out, num_shards=SHARDS, rows_per_batch=ROWS, format="arrow")
    elif fmt == "parquet":
        rd.write_arrow_shards(table, out, num_shards=SHARDS, rows_per_batch=ROWS, format="parquet")
    else:
        import datasets
        datasets.disable_progress_bars()
        ds = datasets.Dataset(table)
        ds.save_to_disk(str(out), num_shards=SHARDS)


def upload(fs: pafs.FileSystem, local: Path, prefix: str) -> None:
    fs.create_dir(prefix.split("/")[0])
    for p in sorted(local.rglob("*")):
        if p.is_file():
            with fs.open_output_stream(f"{prefix}/{p.relative_to(local).as_posix()}") as f:
                f.write(p.read_bytes())


def downgrade_manifest(fs: pafs.FileSystem, prefix: str) -> None:
    """Rewrite the schema-2 manifest as schema 1 wrote it (no layouts, no ETags)."""
    from resumable_data.sources.files import MANIFEST_NAME
    path = f"{prefix}/{MANIFEST_NAME}"
    with fs.open_input_stream(path) as f:
        d = json.loads(f.read())
    d["schema_version"] = 1
    d.pop("derived_hash")
    for s in d["shards"]:
        s.pop("layout")
        s.pop("etag")
    with fs.open_output_stream(path) as f:
        f.write(json.dumps(d).encode())


def measure(proxy: S3Proxy, fn) -> dict:
    proxy.reset()
    t0 = time.perf_counter()
    extra = fn() or {}
    seconds = time.perf_counter() - t0
    return {"seconds": extra.get("seconds", seconds), "requests": proxy.requests,
            "by_method": dict(proxy.counts), "bytes": proxy.bytes_out}


def child(python: str, pythonpath: str, cache: Path, mode: str, endpoint: str, prefix: str, n: int) -> dict:
    env = {**os.environ, "PYTHONPATH": pythonpath, "RD_CACHE_DIR": str(cache)}
    # cwd: not this checkout (``python -c`` puts the working directory first on sys.path)
    out = subprocess.run([python, "-c", _CHILD, mode, endpoint, prefix, str(n), pythonpath], env=env, cwd=cache.parent,
                         capture_output=True, text=True, check=True, timeout=1800)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="4 shards, no baseline (writes results/quick/)")
    ap.add_argument("--latency-ms", type=float, default=30.0)
    ap.add_argument("--baseline", default="0a3c4b4", help="git commit of the 'before' row ('' to skip)")
    ap.add_argument("--formats", default=",".join(FORMATS))
    args = ap.parse_args(argv)
    global SHARDS
    if args.quick:
        SHARDS = 4
        args.baseline = ""
    from moto.server import ThreadedMotoServer

    import resumable_data as rd

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    work = Path(tempfile.mkdtemp(prefix="rd-bench-open-"))
    baseline_src = None
    if args.baseline:
        baseline_src = work / "baseline"
        baseline_src.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.baseline, "resumable_data"],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(baseline_src)], input=archive, check=True)
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    upstream = f"127.0.0.1:{port}"
    proxy = S3Proxy(upstream)
    direct, fs = s3(upstream), s3(proxy.endpoint)
    table = build_table(SHARDS * BATCHES * ROWS)
    n = table.num_rows
    latency = args.latency_ms / 1e3
    results: dict[str, dict] = {}
    old_env = os.environ.get("RD_CACHE_DIR")
    try:
        for fmt in args.formats.split(","):
            local = work / fmt
            write_local(fmt, table, local)
            prefix = f"bench-{fmt.replace('_', '-')}/data"
            upload(direct, local, prefix)
            rows: dict[str, dict] = {}
            if baseline_src is not None:
                cache = work / f"cache-old-{fmt}"
                proxy.latency_s = 0.0
                child(sys.executable, str(baseline_src), cache, "pin", proxy.endpoint, prefix, n)
                proxy.latency_s = latency
                rows["before"] = measure(proxy, lambda: child(sys.executable, str(baseline_src), cache, "open",
                                                               proxy.endpoint, prefix, n))
                direct.delete_file(f"{prefix}/{rd.sources.MANIFEST_NAME}")
            cache = work / f"cache-new-{fmt}"
            os.environ["RD_CACHE_DIR"] = str(cache)
            proxy.latency_s = latency

            def pin_(mode: str) -> None:
                rd.pin(prefix, filesystem=fs, hash=mode)

            rows["pin, hash=etag"] = measure(proxy, lambda: pin_("etag"))
            rows["pin, hash=content"] = measure(proxy, lambda: pin_("content"))  # the manifest opened below

            def open_() -> None:
                src = rd.ArrowShards(prefix, filesystem=fs)
                assert len(src) == n

            rows["pinned layout"] = measure(proxy, open_)
            os.environ["RD_CACHE_DIR"] = str(work / f"cache-fresh-{fmt}")
            rows["new machine"] = measure(proxy, open_)
            os.environ["RD_CACHE_DIR"] = str(cache)
            downgrade_manifest(direct, prefix)
            rows["cold"] = measure(proxy, open_)
            rows["cached layout"] = measure(proxy, open_)
            results[fmt] = rows
            print(fmt, json.dumps(rows), flush=True)
    finally:
        if old_env is None:
            os.environ.pop("RD_CACHE_DIR", None)
        else:
            os.environ["RD_CACHE_DIR"] = old_env
        proxy.close()
        server.stop()
    size_mb = {fmt: sum(p.stat().st_size for p in (work / fmt).rglob("*.arrow")) / 1e6
               + sum(p.stat().st_size for p in (work / fmt).rglob("*.parquet")) / 1e6 for fmt in results}
    order = ["before", "cold", "cached layout", "pinned layout", "new machine", "pin, hash=content",
             "pin, hash=etag"]
    lines = [f"# Opening {SHARDS} shards on S3 at {args.latency_ms:g} ms per request",
             "",
             f"`rd.ArrowShards(prefix, filesystem=s3)` (default `verify=\"cached\"`), {SHARDS} shards x "
             f"{BATCHES} units of {ROWS} rows, moto behind a latency proxy on 127.0.0.1 "
             "(`benchmarks/bench_remote_open.py`; rows explained in its docstring). "
             "`before` is commit " + (args.baseline or "(skipped)") + ".",
             "",
             "| format | data MB | open | seconds | requests | GET / HEAD / LIST | MB downloaded |",
             "|---|---:|---|---:|---:|---|---:|"]
    for fmt, rows in results.items():
        for name in order:
            if name not in rows:
                continue
            r = rows[name]
            m = r["by_method"]
            lines.append(f"| {fmt} | {size_mb[fmt]:.0f} | {name} | {r['seconds']:.2f} | {r['requests']:,} | "
                         f"{m.get('GET', 0)} / {m.get('HEAD', 0)} / {m.get('LIST', 0)} | {r['bytes'] / 1e6:.2f} |")
    md = "\n".join(lines)
    print(md)
    write_results("remote_open", {"latency_ms": args.latency_ms, "shards": SHARDS, "results": results}, md)
    return results


if __name__ == "__main__":
    main()
