"""One peer's side of ``benchmarks/bench_remote_peers.py``, run by the peer's own venv's python.

``write``: the same rows as :func:`benchmarks.bench_remote.build_table` (numpy only: record ``i`` is
``{"id": i, "tokens": int32[256..512]}``, drawn from ``default_rng(0)`` in the same order), written
with the peer's own writer into objects of about the size of rd's shards, then uploaded to the
S3 server directly (no latency). ``read``: one epoch through the latency proxy with the peer's own
dataset and loader (batch ``--batch``, ``--workers`` workers, the peer's own shuffle when
``--shuffle``), a fresh local cache each run; prints one JSON line: the first batch's seconds,
samples/s over the batches after it, and the number of samples seen.

Each peer is given a collate that returns the list of samples as they come (no padding, no
tensors), cheaper than rd's default collate: the comparison does not favour rd.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time

import numpy as np

CHUNK_BYTES = 12 << 20  # rd's shards in this benchmark: 8,192 rows of ~384 int32 tokens, ~12.6 MB


def rows(n: int):
    rng = np.random.default_rng(0)
    lens = rng.integers(256, 513, n)
    off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=off[1:])
    tokens = rng.integers(0, 50_000, off[-1]).astype(np.int32)
    for i in range(n):
        yield {"id": i, "tokens": tokens[off[i] : off[i + 1]]}


def client(endpoint: str):
    import boto3

    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing",
                        aws_secret_access_key="testing", region_name="us-east-1")


def upload(local: str, endpoint: str, bucket: str, prefix: str) -> int:
    s3 = client(endpoint)
    n = 0
    for root, _, files in os.walk(local):
        for f in files:
            path = os.path.join(root, f)
            key = f"{prefix}/{os.path.relpath(path, local)}"
            s3.upload_file(path, bucket, key)
            n += 1
    return n


def write(tool: str, n: int, endpoint: str, bucket: str, prefix: str) -> dict:
    local = tempfile.mkdtemp(prefix=f"rd-peer-{tool}-")
    out = os.path.join(local, "data")
    if tool == "litdata":
        from litdata.streaming.writer import BinaryWriter

        w = BinaryWriter(out, chunk_bytes=CHUNK_BYTES)
        for i, r in enumerate(rows(n)):
            w[i] = r
        w.done()
        w.merge()
    else:
        stub_torchvision()
        from streaming import MDSWriter

        with MDSWriter(out=out, columns={"id": "int64", "tokens": "ndarray:int32"}, size_limit=CHUNK_BYTES) as w:
            for r in rows(n):
                w.write(r)
    objects = upload(out, endpoint, bucket, prefix)
    shutil.rmtree(local)
    return {"objects": objects}


def stub_torchvision() -> None:
    """Streaming's ``__init__`` imports its vision datasets, hence torchvision; the only torchvision
    wheel on PyPI for torch 2.13 is linked against CUDA torch and fails to load beside the CPU build.
    This benchmark never uses Streaming's vision datasets, so it gives them empty stand-ins."""
    import importlib.machinery
    import sys
    import types

    import torch

    names = ("torchvision", "torchvision.datasets", "torchvision.transforms", "torchvision.transforms.functional")
    mods = {n: types.ModuleType(n) for n in names}
    for n, m in mods.items():
        m.__spec__ = importlib.machinery.ModuleSpec(n, None)
    mods["torchvision.datasets"].VisionDataset = torch.utils.data.Dataset  # type: ignore[attr-defined]
    mods["torchvision.datasets"].CIFAR10 = torch.utils.data.Dataset  # type: ignore[attr-defined]
    mods["torchvision.transforms.functional"].to_tensor = torch.as_tensor  # type: ignore[attr-defined]
    sys.modules.update(mods)


def as_list(batch):
    return batch


def read(tool: str, endpoint: str, bucket: str, prefix: str, workers: int, shuffle: bool, batch: int) -> dict:
    import torch

    cache = tempfile.mkdtemp(prefix=f"rd-peer-{tool}-cache-")
    url = f"s3://{bucket}/{prefix}"
    if tool == "litdata":
        from litdata import StreamingDataLoader, StreamingDataset
        from litdata.streaming import downloader

        # its async (obstore) path refuses plain http, which the local server speaks; real S3 is https
        downloader._OBSTORE_CLIENT_OPTIONS["allow_http"] = "true"
        ds = StreamingDataset(url, cache_dir=cache, shuffle=shuffle, seed=1,
                              storage_options={"endpoint_url": endpoint, "aws_access_key_id": "testing",
                                               "aws_secret_access_key": "testing", "region_name": "us-east-1"})
        ld = StreamingDataLoader(ds, batch_size=batch, num_workers=workers, collate_fn=as_list)
    else:
        os.environ.update(S3_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
                          AWS_DEFAULT_REGION="us-east-1")
        stub_torchvision()
        from streaming import StreamingDataset
        from streaming.base.util import clean_stale_shared_memory

        clean_stale_shared_memory()
        ds = StreamingDataset(remote=url, local=cache, shuffle=shuffle, shuffle_seed=1, batch_size=batch)
        ld = torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=workers, collate_fn=as_list)
    it = iter(ld)
    t0 = time.perf_counter()
    b = next(it)
    first = time.perf_counter() - t0
    seen = [int(s["id"]) for s in b]
    t1 = time.perf_counter()
    after = 0
    for b in it:
        seen.extend(int(s["id"]) for s in b)
        after += len(b)
    t = time.perf_counter() - t1
    del it, ld, ds
    shutil.rmtree(cache, ignore_errors=True)
    return {"first_s": first, "samples_s": after / t, "samples": len(seen), "distinct": len(set(seen))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=["write", "read"])
    ap.add_argument("--tool", choices=["litdata", "streaming"], required=True)
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--bucket", required=True)
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--rows", type=int, default=65_536)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--shuffle", action="store_true")
    ap.add_argument("--batch", type=int, default=256)
    a = ap.parse_args()
    if a.action == "write":
        res = write(a.tool, a.rows, a.endpoint, a.bucket, a.prefix)
    else:
        res = read(a.tool, a.endpoint, a.bucket, a.prefix, a.workers, a.shuffle, a.batch)
    print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
