"""Trust at the edges: structural validation of record batches and one error for damaged shards.

Algorithm: every record batch (an IPC record batch, a Parquet row group as pyarrow returns it) is
checked with ``RecordBatch.validate(full=True)`` (offsets monotone and inside their buffers,
lengths, child arrays, UTF-8 where the type is ``string``/``large_string``, dictionary indices)
before any of its values is used. :class:`~resumable_data.sources.arrow_shards.ArrowShards`
validates lazily, once per record batch, and remembers it (one boolean per batch): ``take``
and ``src[i]`` validate exactly the batches they touch the first time they touch them, so opening
a large dataset stays metadata-only. Every exception pyarrow, thrift (Parquet footers raise
``OSError``) or a decoder raises while a shard is opened or read is wrapped by :func:`guard` /
:func:`integrity_error` into one :class:`~resumable_data.DatasetIntegrityError` naming the shard,
the record batch and the fix (re-download or restore the file, then re-pin).

Guarantee: no record of a batch that fails structural validation is ever returned; a damaged
shard raises :class:`~resumable_data.DatasetIntegrityError`, never a raw ``ArrowInvalid``,
``OSError``, ``UnicodeDecodeError``, a segmentation fault or a hang
(``tests/sources/test_byte_flips.py`` flips every byte of an IPC file, an IPC stream and a
Parquet shard). Structural validation cannot see a change that keeps the file well-formed (a
flipped integer value): that is what the content hash is for (the default ``verify="cached"``
of :class:`~resumable_data.sources.version.VerifyLevel`: the xxh3-128 of every shard verified
once and remembered, see :mod:`.verified`).

Cost: one pass over a batch's offsets and, for string columns, its character bytes (UTF-8
validation runs at several GB/s); fixed-width columns cost O(1). Measured in
``benchmarks/bench_validation.py`` (``benchmarks/results/validation.md``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pyarrow as pa

from resumable_data.errors import DamagedShardError, DatasetIntegrityError, ResumableDataError

__all__ = ["FIX", "DamagedShardError", "guard", "integrity_error", "validate_batch"]

T = TypeVar("T")

#: The one fix for a damaged shard.
FIX = (
    "re-download or restore the file (rd.DatasetVersion.verify(level='content') lists every "
    "damaged shard), then re-pin deliberately with rd.pin(directory) if the change is intended"
)


def integrity_error(shard: str, where: str, exc: BaseException) -> DatasetIntegrityError:
    """The error for a shard that cannot be read: names the shard, the place and the cause."""
    cause = f"{type(exc).__name__}: {exc}"
    if len(cause) > 300:
        cause = cause[:297] + "..."
    return DamagedShardError(f"shard {shard!r}, {where}: damaged or not a valid shard ({cause}); fix: {FIX}")


def guard(shard: str, where: str, fn: Callable[[], T]) -> T:
    """``fn()``, with every non-rd exception raised as :func:`integrity_error`."""
    try:
        return fn()
    except ResumableDataError:
        raise
    except (Exception, RecursionError) as exc:  # pyarrow, thrift (OSError), decoders, struct
        raise integrity_error(shard, where, exc) from exc


def validate_batch(batch: pa.RecordBatch, shard: str, index: int) -> pa.RecordBatch:
    """``batch`` after ``validate(full=True)``; raises DatasetIntegrityError naming the batch."""
    guard(shard, f"record batch {index}", lambda: batch.validate(full=True))
    return batch
