"""The fetcher's content check of whole shards read ahead (``rd.ReadUnit.SHARD``): an object replaced
between a read's HEAD and its GET never reaches the cache (moto's S3 server behind
``tests.sources._hostile_store.HostileProxy``)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import resumable_data as rd

pytest.importorskip("moto.server")
from tests.sources.conftest import s3_client  # noqa: E402


def test_a_shard_replaced_between_head_and_get_never_reaches_the_cache(endpoint, tmp_path):
    """Read ahead whole (``SHARD``), an object replaced after the read's HEAD and before its GET was
    written to the cache and delivered (the ETag check cannot see it): its bytes must hash to the
    pinned content hash first, and the step's own read then finds the new ETag."""
    import io

    from tests.sources._hostile_store import HostileProxy

    def encode(values):
        sink = io.BytesIO()
        with pa.ipc.new_file(sink, pa.schema([("x", pa.int64())])) as w:
            for i in range(0, len(values), 100):
                w.write_batch(pa.record_batch([pa.array(values[i : i + 100])], names=["x"]))
        return sink.getvalue()

    fs = s3_client(endpoint)
    fs.create_dir("ahead-window")
    good = np.arange(2000, dtype=np.int64)
    for j in range(2):
        with fs.open_output_stream(f"ahead-window/data/part-{j}.arrow") as f:
            f.write(encode(good[j * 1000 : (j + 1) * 1000]))
    rd.pin("ahead-window/data", filesystem=fs)
    proxy = HostileProxy(endpoint)
    swapped = []

    def replace_before_get(req, ans):
        if req.method == "GET" and req.range is not None and "part-1" in req.path and not swapped:
            swapped.append(1)
            with fs.open_output_stream("ahead-window/data/part-1.arrow") as f:
                f.write(encode(good[1000:][::-1].copy()))  # the same size, other values
            return proxy.fetch("GET", req.path, {k: v for k, v in req.headers.items() if k.lower() != "host"})
        return ans

    try:
        src = rd.ArrowShards("ahead-window/data", filesystem=s3_client(proxy.endpoint))
        proxy.hook = replace_before_get
        ahead = rd.ReadAhead(unit=rd.ReadUnit.SHARD, cache_dir=tmp_path)
        loader = rd.DataLoader(src, batch_size=100, num_workers=0, read_ahead=ahead)
        got = []
        with pytest.raises(rd.DatasetIntegrityError, match="changed after this source opened it"):
            for b in loader:
                got += b["x"].tolist()
        assert swapped and got == good[: len(got)].tolist() and len(got) <= 1000  # never a value of the new object
        loader.read_ahead.close()
    finally:
        proxy.close()
