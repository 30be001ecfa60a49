"""The modes of a dataset version: what its hash covers, how hard a verify looks, where its shards came from.

Algorithm: :class:`HashMode` names what each shard's ``content_hash`` is (the xxh3-128 of its
bytes, nothing, or :func:`etag_digest` of the store's ETag); :class:`VerifyLevel` how
:meth:`~resumable_data.sources.version.DatasetVersion.verify` compares files with the manifest
(:mod:`.version_verify`); :class:`Selection` whether the shard list was discovered in a directory
or given as files. Their values are the strings a manifest holds (``hash_mode``, ``selection``)
and the arguments users pass (``verify=``, ``hash=``).

Guarantee: a value is one of the members (options are enums, never bare strings; the callers
coerce arguments with :func:`~resumable_data._schema.coerce_enum`, which names the parameter);
the same ETag always gives the same :func:`etag_digest`.

Cost: none (an ETag digest is one xxh3 of a short string); no state to restore.
"""

from __future__ import annotations

import enum

import xxhash

__all__ = ["HashMode", "Selection", "VerifyLevel", "etag_digest"]


class HashMode(str, enum.Enum):
    """What the version hash covers: file ``content`` (xxh3-128 of bytes), only ``size``, or
    ``etag``: the object store's ETag of each shard (pinned with metadata requests only, no byte
    read; the store is trusted to give other bytes another ETag, see :mod:`.verified`; a version
    tied to those objects: a copy elsewhere has other or no ETags)."""

    CONTENT = "content"
    SIZE = "size"
    ETAG = "etag"


def etag_digest(etag: str) -> str:
    """The ``content_hash`` a shard pinned with ``hash="etag"`` records: xxh3-128 of its ETag."""
    return xxhash.xxh3_128_hexdigest(b"etag\0" + etag.encode("utf-8"))


class VerifyLevel(str, enum.Enum):
    """How hard :meth:`DatasetVersion.verify` looks: ``size`` (stat + metadata), ``cached`` (also
    the content hash, verified once per file state and remembered: :mod:`.verified`; the default
    of :class:`~resumable_data.ArrowShards`) or ``content`` (re-hash every byte every time)."""

    SIZE = "size"
    CACHED = "cached"
    CONTENT = "content"


class Selection(str, enum.Enum):
    """Where the shard list came from: a discovered ``directory`` or an explicit ``files`` list.

    Only a discovered directory can have "extra" shard files: with an explicit list, other shard
    files next to the listed ones are not part of the dataset.
    """

    DIRECTORY = "directory"
    FILES = "files"
