"""Shards behind a ``pyarrow.fs.FileSystem`` (S3, GCS, HDFS, Azure, ...): the names this module
used to define, kept for imports.

There is no separate remote code path any more: discovery, metadata, pinning, verifying, manifests
and reading are written once over :class:`~resumable_data.sources.store.ShardStore`, and a
filesystem is just another store (:class:`~resumable_data.sources.store.FileSystemStore`, picked by
:func:`~resumable_data.sources.store.store_for`). How remote shards are read and what that costs
(the pinned unit layout, ranged reads, Parquet footers, on-demand bodies) is in :mod:`.files` and
:mod:`.layout`; retries of transient failures in :mod:`.retry`.
"""

from __future__ import annotations

from typing import Any

import pyarrow.fs as pafs

from resumable_data.sources.files import ipc_file_batch_rows
from resumable_data.sources.store import FileSystemStore, store_for

__all__ = ["FileSystemStore", "file_size", "ipc_file_batch_rows", "normalize_filesystem"]


def normalize_filesystem(filesystem: Any) -> pafs.FileSystem | None:
    """``None`` for the local filesystem (memory-mapped code path), else the filesystem."""
    return store_for(filesystem).filesystem


def file_size(fs: pafs.FileSystem | None, path: Any) -> int | None:
    """Byte size of a file on ``fs`` (None: local), or None when it does not exist."""
    st = store_for(fs).stat(path)
    return None if st is None else st.size
