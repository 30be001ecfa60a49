"""rd.prepare writes its shards, progress record and manifest to an object store through pyarrow.fs
(a moto S3 server on 127.0.0.1): the same bytes and version as a local output."""

from __future__ import annotations

import numpy as np
import pyarrow.fs as pafs

import resumable_data as rd
from tests.sources.prepare.conftest import shard_bytes


def test_output_on_s3_matches_local_output(tmp_path, corpus, tokenizer, s3_fs):
    s3_fs.create_dir("prep")
    local = rd.prepare(corpus, tmp_path / "local", tokenizer=tokenizer, bytes_per_shard=60_000, num_proc=2,
                       progress=False)
    remote = rd.prepare(corpus, "prep/tokens", tokenizer=tokenizer, bytes_per_shard=60_000, num_proc=2,
                        progress=False, filesystem=s3_fs)
    assert remote.version.hash == local.version.hash
    want = shard_bytes(tmp_path / "local")
    got = {}
    for name in want:
        with s3_fs.open_input_stream(f"prep/tokens/{name}") as f:
            got[name] = f.read()
    assert got == want
    names = sorted(i.base_name for i in s3_fs.get_file_info(pafs.FileSelector("prep/tokens")))
    assert names == sorted([*want, rd.sources.MANIFEST_NAME])  # no progress record, no temporary object left
    src = rd.ArrowShards("prep/tokens", filesystem=s3_fs)
    assert src.version.hash == local.version.hash and src.version.lineage == local.version.lineage
    n = len(src)
    assert src.take(np.arange(n)).column("tokens").to_pylist() == \
        rd.ArrowShards(tmp_path / "local").take(np.arange(n)).column("tokens").to_pylist()
    again = rd.prepare(corpus, "prep/tokens", tokenizer=tokenizer, bytes_per_shard=60_000, progress=False,
                       filesystem=s3_fs)
    assert again.version.hash == local.version.hash  # a finished remote output: nothing to do
