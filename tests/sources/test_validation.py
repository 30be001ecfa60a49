"""Structural validation (sources/validate.py): a damaged record batch is refused before any of
its records is used, with an rd error naming the shard, the batch and the fix (issue 13)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import resumable_data as rd


def _strings(path, fmt: str) -> None:
    t = pa.table({"text": [f"row-{i:03d}" for i in range(30)], "id": list(range(30))})
    if fmt == "parquet":
        pq.write_table(t, path, row_group_size=10, compression="none", use_dictionary=False)
        return
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_stream(f, t.schema) as w:
        for k in range(3):  # each batch with its own buffers (a slice may carry the whole buffer)
            w.write_batch(pa.record_batch({"text": t["text"].to_pylist()[10 * k:10 * k + 10],
                                           "id": list(range(10 * k, 10 * k + 10))}, schema=t.schema))


def _break_utf8(path, needle: bytes) -> None:
    data = path.read_bytes()
    at = data.find(needle)
    assert at > 0 and data.count(needle) == 1
    path.write_bytes(data[:at] + b"\xff" + data[at + 1:])  # same size: only UTF-8 breaks


@pytest.mark.parametrize("fmt", ["ipc_stream", "parquet"])
def test_a_damaged_batch_is_refused_when_first_touched(tmp_path, fmt):
    d = tmp_path / "d"
    d.mkdir()
    p = d / ("s.parquet" if fmt == "parquet" else "s.arrow")
    _strings(p, fmt)
    rd.pin(d)
    _break_utf8(p, b"row-015")  # in record batch / row group 1
    with pytest.raises(rd.DatasetIntegrityError, match="content hash"):
        rd.ArrowShards(d)  # the default: the changed file is re-hashed
    src = rd.ArrowShards(d, verify="size")  # structure only: the same-size edit passes the stat
    assert src.take([0, 9, 25]).column("id").to_pylist() == [0, 9, 25]  # clean batches 0 and 2
    for read in (lambda: src.take([3, 12]), lambda: src[15], lambda: src.__getitems__([11])):
        with pytest.raises(rd.DatasetIntegrityError,
                           match=r"shard 's\.(arrow|parquet)', record batch 1: .*fix: re-download"):
            read()


def test_damaged_metadata_is_an_rd_error_naming_the_shard(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    _strings(d / "s.parquet", "parquet")
    data = bytearray((d / "s.parquet").read_bytes())
    data[-12:-8] = b"\xff\xff\xff\x7f"  # footer length: far past the file
    (d / "s.parquet").write_bytes(bytes(data))
    with pytest.raises(rd.ResumableDataError, match="s.parquet"):
        rd.ArrowShards(d, unpinned="allow")
