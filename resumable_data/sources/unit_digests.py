"""Per-unit content digests: what a unit's bytes must hash to before they are decoded.

Algorithm: a unit's digest is the xxh3-128 hex digest (:func:`unit_digest`) of exactly the bytes a
ranged read of it fetches: its span ``[offset, offset + length)`` in the shard's
:class:`~.layout.ShardLayout` (an IPC record batch's message, a Parquet row group's column chunks).
``rd.pin`` records them where it hashes every byte anyway (``hash="content"``, :mod:`.pin`): one
streamed read of the shard feeds the whole-file hasher and a :class:`SpanHasher`, which hands each
chunk's overlap with every unit's span to that unit's hasher (spans in any order, overlapping or
not), so no byte is read twice. ``DatasetVersion.verify("content")`` re-hashes the same way and
compares both. They are kept in the manifest's layout (schema 3, :mod:`.version`), covered by its
``derived_hash`` like the spans (never by the version's identity hash: a re-pin of the same bytes
keeps the version).

Guarantee: a unit read by range whose layout has a digest is decoded only from bytes that hash to
it (:meth:`.unit_reads.UnitReads.fetch_unit`, the read-ahead fetcher's reads and the read-ahead
cache's hits alike), so an object replaced after the open, whatever its size or ETag, and however
close to the read (the window between a HEAD and its GET that pyarrow leaves open), yields an rd
error (:func:`digest_error`: :class:`~resumable_data.DatasetIntegrityError` naming the shard, the
unit and the fix), never a sample of other bytes. The bytes outside the units that a remote open
reads (an IPC schema message, a Parquet footer: the layout's ``meta_span``) are pinned the same way
(manifest schema 4, ``meta_digest``) and checked by :func:`check_meta` before the open parses them
(:func:`meta_digest_error`), so an object replaced between the pin and the open, or between the
open's HEAD and its GET, fails the open before any record is read, at no extra request. A whole
shard read ahead (``rd.ReadUnit.SHARD``) is checked against the shard's content hash instead
(:func:`shard_digest_error`, one GET, no HEAD). What it does not cover: layouts without digests
(pinned with ``hash="size"`` or ``"etag"``, by a version before schema 3 (4 for the metadata), or
built at open): those reads keep the HEAD check of :mod:`.store`, and their opens trust the metadata
they read. A digest proves the bytes
are the pinned ones only as far as the manifest is trusted: a manifest whose digests were edited
(and its ``derived_hash`` recomputed) makes every read of the edited unit fail, never accept other
bytes than those the edited digest names.

Cost: pinning and ``verify("content")``: one more xxh3-128 pass over each unit's bytes (and the
metadata span) in memory (xxh3 runs at tens of GB/s: far below the disk or network read), 32 hex
characters plus JSON per unit (and per shard) in the manifest. A read: one xxh3-128 of the unit's
bytes (about 50 us per MiB); an open: one of the metadata it reads (hundreds of bytes to KBs).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import xxhash

from resumable_data.errors import DatasetIntegrityError, describe


class PinnedMeta(Protocol):
    """What :func:`check_meta` reads of a shard's layout (:class:`~.layout.ShardLayout`, which
    imports this module): the metadata span an open reads and its pinned digest."""

    @property
    def meta_span(self) -> tuple[int, int] | None: ...

    @property
    def meta_digest(self) -> str | None: ...


__all__ = [
    "DIGEST_CHARS",
    "PinnedMeta",
    "SpanHasher",
    "check_meta",
    "digest_error",
    "is_digest",
    "meta_digest_error",
    "shard_digest_error",
    "unit_digest",
]

#: Hex characters of a unit digest (an xxh3-128).
DIGEST_CHARS = 32
_HEX = frozenset("0123456789abcdef")


def unit_digest(data: bytes | bytearray | memoryview) -> str:
    """The digest of a unit whose span holds ``data``: xxh3-128, hex."""
    return xxhash.xxh3_128_hexdigest(data)


def is_digest(value: object) -> bool:
    """Whether ``value`` is a unit digest as a manifest stores it (32 lowercase hex characters)."""
    return isinstance(value, str) and len(value) == DIGEST_CHARS and _HEX.issuperset(value)


class SpanHasher:
    """The digests of ``spans`` (``(offset, length)`` each) of one file, fed its bytes in order.

    :meth:`update` takes each chunk with the offset it starts at; a chunk at offset 0 starts over
    (a retried read restarts from the first byte), any other offset must follow the previous chunk
    (``ValueError`` otherwise: a digest of bytes skipped or read twice is never produced).
    :meth:`digests` is valid once every span was covered (``ValueError`` otherwise)."""

    def __init__(self, spans: Sequence[tuple[int, int]]) -> None:
        self._spans = [(int(o), int(n)) for o, n in spans]
        self._order = sorted(range(len(self._spans)), key=lambda i: self._spans[i][0])
        self._starts = [self._spans[i][0] for i in self._order]
        self.reset()

    def reset(self) -> None:
        """Forget every byte fed so far."""
        self._hashers = [xxhash.xxh3_128() for _ in self._spans]
        self._pos = 0
        self._next = 0  # spans (in start order) not yet reached
        self._active: list[int] = []  # spans reached and not yet ended

    def update(self, offset: int, chunk: bytes | bytearray | memoryview) -> None:
        """Feed the file's bytes ``[offset, offset + len(chunk))``."""
        if offset == 0:
            self.reset()
        elif offset != self._pos:
            raise ValueError(f"chunk at offset {offset}, expected the next at {self._pos}")
        end = offset + len(chunk)
        view = memoryview(chunk)
        while self._next < len(self._order) and self._starts[self._next] < end:
            self._active.append(self._order[self._next])
            self._next += 1
        keep = []
        for i in self._active:  # each overlap fed in file order; O(spans + chunks x spans open at once)
            start, length = self._spans[i]
            lo, hi = max(start, offset), min(start + length, end)
            if lo < hi:
                self._hashers[i].update(view[lo - offset : hi - offset])
            if start + length > end:
                keep.append(i)
        self._active = keep
        self._pos = end

    def digests(self) -> tuple[str, ...]:
        """Every span's digest, in the order the spans were given."""
        short = [s for s in self._spans if s[0] + s[1] > self._pos]
        if short:
            raise ValueError(f"span {short[0]} runs past the {self._pos} bytes hashed")
        return tuple(h.hexdigest() for h in self._hashers)


def digest_error(shard: str, unit: int, expected: str, got: str) -> DatasetIntegrityError:
    """The error for unit ``unit`` of ``shard`` whose bytes do not hash to its pinned digest."""
    return DatasetIntegrityError(
        describe(
            "shard",
            shard,
            f"record batch {unit} as pinned: bytes whose xxh3-128 is its pinned unit digest {expected} "
            f"(the bytes the store sent hash to {got}; the object was replaced "
            "or changed in place since rd.pin, or the manifest's unit digests were edited; nothing of these "
            "bytes was delivered)",
            "restore the object as it was pinned (DatasetVersion.verify(level='content') lists every shard "
            "that differs), or, if the change is intended, re-pin deliberately with rd.pin(prefix, "
            "filesystem=...) (a new version: resumed states will refuse it unless the bytes are the same)",
        )
    )


def shard_digest_error(shard: str, expected: str, got: str) -> DatasetIntegrityError:
    """The error for a whole shard object read (``rd.ReadUnit.SHARD``) whose bytes do not hash to the
    shard's pinned content hash."""
    return DatasetIntegrityError(
        describe(
            "shard",
            shard,
            f"the object as pinned: bytes whose xxh3-128 is its pinned content hash {expected} (the bytes "
            f"the store sent hash to {got}; the object was replaced or changed in place since rd.pin, or the "
            "store sent a short body; nothing of these bytes was delivered)",
            "restore the object as it was pinned (DatasetVersion.verify(level='content') lists every shard "
            "that differs), or, if the change is intended, re-pin deliberately with rd.pin(prefix, "
            "filesystem=...) (a new version: resumed states will refuse it unless the bytes are the same)",
        )
    )


def check_meta(shard: str, layout: PinnedMeta, offset: int, data: bytes | bytearray | memoryview, what: str) -> None:
    """Refuse ``data``, the metadata a remote open of ``shard`` just read at ``offset`` (``what``:
    "its Parquet footer", "its IPC schema message"), unless it is the span and the bytes ``rd.pin``
    hashed (``layout.meta_digest``, manifest schema 4); no check where the layout has no such digest."""
    if layout.meta_digest is None:
        return
    got = unit_digest(data) if (offset, len(data)) == layout.meta_span else None
    if got != layout.meta_digest:
        raise meta_digest_error(shard, what, layout, offset, len(data), got)


def meta_digest_error(
    shard: str, what: str, layout: PinnedMeta, offset: int, length: int, got: str | None
) -> DatasetIntegrityError:
    """The error for a remote open whose metadata is not the bytes ``rd.pin`` hashed."""
    span = list(layout.meta_span) if layout.meta_span is not None else None
    found = (
        f"bytes hashing to {got}"
        if got is not None
        else f"{length} bytes at offset {offset} where the pin read {span[1] if span else '?'} at {span[0] if span else '?'}"
    )
    return DatasetIntegrityError(
        describe(
            "shard",
            shard,
            f"{what} as pinned: the bytes [{span[0] if span else '?'}, +{span[1] if span else '?'}) whose "
            f"xxh3-128 is its pinned metadata digest {layout.meta_digest} (the store sent {found}; the "
            "object was replaced or changed in place since rd.pin, or the manifest's layout was edited; "
            "refused before any record was read)",
            "restore the object as it was pinned (DatasetVersion.verify(level='content') lists every shard "
            "that differs), or, if the change is intended, re-pin deliberately with rd.pin(prefix, "
            "filesystem=...) (a new version: resumed states will refuse it unless the bytes are the same)",
        )
    )
