"""Sources: pinned Arrow shards (IPC memory-mapped, Parquet by row group), manifests, ``take``.

No torch here (nor any import of the loader or checkpoint layers). Modules: :mod:`.store` (the
one storage interface, :class:`ShardStore`: local files or a ``pyarrow.fs`` filesystem),
:mod:`.retry` (transient store failures retried), :mod:`.layout` (where each unit lies in a
shard's bytes), :mod:`.opening` (opening a version's shards, concurrently when remote),
:mod:`.identity` (a file's identity, recorded at open, checked around reads and by unpickled
sources), :mod:`.files` (discovery, formats, metadata, opening a shard), :mod:`.version`
(:class:`DatasetVersion`, manifest, verify), :mod:`.pin` (:func:`pin`), :mod:`.gather` (the
vectorized take engine), :mod:`.arrow_shards` (:class:`ArrowShards`), :mod:`.hf` (Hugging Face
datasets), :mod:`.writer` (:func:`write_arrow_shards`), :mod:`.read_ahead` (remote units fetched ahead of the steps that need them).
"""

from resumable_data.sources.arrow_shards import ArrowShards, RecordIdError, UnpinnedPolicy
from resumable_data.sources.files import MANIFEST_NAME
from resumable_data.sources.pin import PinSave, pin
from resumable_data.sources.read_ahead import ReadAhead, ReadUnit
from resumable_data.sources.retry import Retries
from resumable_data.sources.store import ShardStore
from resumable_data.sources.version import (
    DatasetVersion,
    HashMode,
    Selection,
    ShardInfo,
    VerifyLevel,
)
from resumable_data.sources.writer import ShardWriteFormat, write_arrow_shards

__all__ = [
    "MANIFEST_NAME",
    "ArrowShards",
    "DatasetVersion",
    "HashMode",
    "PinSave",
    "ReadAhead",
    "ReadUnit",
    "RecordIdError",
    "Retries",
    "Selection",
    "ShardInfo",
    "ShardStore",
    "ShardWriteFormat",
    "UnpinnedPolicy",
    "VerifyLevel",
    "pin",
    "write_arrow_shards",
]
