"""rd's cache of shard layouts, for manifests pinned before layouts existed (schema 1).

Algorithm: the :class:`~.layout.ShardLayout` a shard's first open on a machine built (the manifest
has none) is kept in ``cache_dir()/layouts/<xxh3-128 of key>.json`` as a :class:`LayoutCacheEntry`
(``key``: the shard's pinned content hash, so the entry is content-addressed: the bytes it was
built from are the bytes the hash names; it is written only after the open verified them). An
entry is typed state with a format name, a ``schema_version`` and a ``check`` (the xxh3-128 of its
other fields), loaded all or nothing (:meth:`LayoutCacheEntry.from_dict`): the key and size must
be the ones asked for, the layout valid for that size, the check right.

The cache is rd's own directory, never the user's data folder, so an entry that is not what rd
wrote is a cache problem, not a damaged dataset:

* an entry that fails to load (damaged, truncated, not JSON, another format or schema version,
  another key, a check that does not match) is removed with a warning naming the file and the
  reason (an entry written by an rd before this format: at debug level), and the layout is built
  again from the store (:func:`cached_layout` returns None);
* an entry that loads but does not describe the bytes (edited, its check recomputed) is caught
  where the bytes are read: at open (a remote Parquet shard's layout must equal the one its footer
  gives; an IPC shard's schema message is read at the entry's range), where :mod:`.opening`
  removes it (:func:`drop_layout`, a warning naming it) and builds the layout from the store, the
  open going on; or at the first read of a unit whose span or rows it got wrong, where the read's
  :class:`~resumable_data.DatasetIntegrityError` names the entry, which is removed then, so the
  fix it gives (open the dataset again) works: the next open builds the layout from the store.
  No forged entry ever delivers other rows than the shard's (:mod:`.layout`: every unit read by
  range is checked to be the record batch its layout claims).

Guarantee: a layout from this cache is used only for the content hash it was built for; a bad
entry costs one rebuild (the metadata reads of :mod:`.layout`) or, caught at a read, one failed
open and a rebuild; it never fails every open.

Cost: one small JSON read per shard without a pinned layout, at open; a write after a rebuild.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import xxhash

from resumable_data import _io
from resumable_data._cache import cache_dir
from resumable_data.errors import NotRegularFileError
from resumable_data.sources.layout import LayoutMismatch, ShardLayout

__all__ = [
    "ENTRY_FORMAT",
    "ENTRY_SCHEMA_VERSION",
    "LayoutCacheEntry",
    "cached_layout",
    "drop_layout",
    "entry_path",
    "remember_layout",
]

_log = logging.getLogger(__name__)

ENTRY_FORMAT = "resumable_data.layout_cache_entry"
ENTRY_SCHEMA_VERSION = 1
#: The most bytes an entry may hold (a layout is about 30 bytes per unit); a larger file is not rd's.
ENTRY_MAX_BYTES = 64 << 20

K_FORMAT = "format"
K_SCHEMA_VERSION = "schema_version"
K_KEY = "key"
K_SIZE = "size"
K_LAYOUT = "layout"
K_CHECK = "check"
_KEYS = frozenset({K_FORMAT, K_SCHEMA_VERSION, K_KEY, K_SIZE, K_LAYOUT, K_CHECK})
_OLD_KEYS = frozenset({"format", "schema", "units"})  # what rd wrote before entries had a format


class EntryRefused(ValueError):
    """An entry that is not what rd writes (internal: the cache removes it and rebuilds)."""


def _check(body: dict[str, Any]) -> str:
    text = json.dumps({k: v for k, v in body.items() if k != K_CHECK}, sort_keys=True, separators=(",", ":"))
    return xxhash.xxh3_128_hexdigest(text.encode("utf-8"))


@dataclass(frozen=True)
class LayoutCacheEntry:
    """One cached layout: the content hash ``key`` and byte ``size`` of the shard it was built
    from, and the layout (never with unit digests: those come only from a pin)."""

    key: str
    size: int
    layout: ShardLayout

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            K_FORMAT: ENTRY_FORMAT,
            K_SCHEMA_VERSION: ENTRY_SCHEMA_VERSION,
            K_KEY: self.key,
            K_SIZE: self.size,
            K_LAYOUT: self.layout.to_dict(digests=False),
        }
        body[K_CHECK] = _check(body)
        return body

    @classmethod
    def from_dict(cls, d: Any, key: str, size: int) -> LayoutCacheEntry:
        """The entry ``d`` for the shard with content hash ``key`` and ``size`` bytes, all or
        nothing; raises :class:`EntryRefused` naming what is wrong."""
        if not isinstance(d, dict):
            raise EntryRefused(f"a JSON object (got {type(d).__name__})")
        if set(d) == _OLD_KEYS:
            raise EntryRefused("an entry of an earlier rd (a bare layout, no format)")
        if set(d) != _KEYS:
            raise EntryRefused(f"keys {sorted(_KEYS)} (got {sorted(map(str, d))})")
        if d[K_FORMAT] != ENTRY_FORMAT or d[K_SCHEMA_VERSION] != ENTRY_SCHEMA_VERSION:
            raise EntryRefused(
                f"format {ENTRY_FORMAT!r} schema_version {ENTRY_SCHEMA_VERSION} "
                f"(got {d[K_FORMAT]!r} {d[K_SCHEMA_VERSION]!r})"
            )
        if d[K_KEY] != key or d[K_SIZE] != size or type(d[K_SIZE]) is not int:
            raise EntryRefused(f"the entry of content hash {key} and {size} bytes (got {d[K_KEY]!r}, {d[K_SIZE]!r})")
        if d[K_CHECK] != _check(d):
            raise EntryRefused("a check equal to the xxh3-128 of its fields (the file was changed after rd wrote it)")
        try:
            layout = ShardLayout.from_dict(d[K_LAYOUT], size)
        except LayoutMismatch as exc:
            raise EntryRefused(f"a valid layout ({exc})") from None
        return cls(key, size, layout)


def _read(path: Path) -> bytes:
    """The entry's bytes; ``FileNotFoundError`` when absent, ``OSError`` for anything that is not a
    small regular file rd may read (a FIFO is refused before any blocking open)."""
    try:
        fd = _io.open_regular(path)
    except NotRegularFileError as exc:
        raise OSError(str(exc)) from None
    with open(fd, "rb") as f:
        data = f.read(ENTRY_MAX_BYTES + 1)
    if len(data) > ENTRY_MAX_BYTES:
        raise OSError(f"larger than {ENTRY_MAX_BYTES} bytes")
    return data


def entry_path(key: str) -> Path:
    """Where the entry of content hash ``key`` lives (it may not exist)."""
    return cache_dir() / "layouts" / f"{xxhash.xxh3_128_hexdigest(key.encode())}.json"


def _remove(path: Path, why: str, level: int = logging.WARNING) -> None:
    _log.log(
        level,
        "resumable_data: layout cache entry %s %s; removed (rd's own cache, not your data: the layout is "
        "built again from the store's bytes)",
        path,
        why,
    )
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:  # a directory, no permission: said, then left (it keeps being refused, never used)
        _log.warning("resumable_data: could not remove %s (%s); remove it by hand", path, exc)


def cached_layout(key: str | None, size: int) -> ShardLayout | None:
    """The layout remembered for content hash ``key`` and ``size`` bytes; None when there is none
    or the entry is not rd's (then removed, with a warning naming it and why: module docstring)."""
    if key is None:
        return None
    path = entry_path(key)
    try:
        data = _read(path)
    except FileNotFoundError:
        return None
    except OSError as exc:  # a directory, a FIFO, no permission, larger than any layout
        _remove(path, f"cannot be read as a layout ({exc})")
        return None
    try:
        d = json.loads(data.decode("utf-8"))
        return LayoutCacheEntry.from_dict(d, key, size).layout
    except EntryRefused as exc:
        old = str(exc).startswith("an entry of an earlier rd")
        _remove(path, f"is not {exc}" if not old else f"is {exc}", logging.DEBUG if old else logging.WARNING)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        _remove(path, f"is not a JSON layout entry ({type(exc).__name__}: {str(exc)[:200]})")
    return None


def remember_layout(key: str | None, size: int, layout: ShardLayout | None) -> None:
    """Remember ``layout`` (without digests) for content hash ``key`` (best effort: a read-only
    cache only costs a rebuild at the next open)."""
    if key is None or layout is None or layout.digests is not None:
        return
    path = entry_path(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(LayoutCacheEntry(key, size, layout).to_dict(), sort_keys=True)
        _io.atomic_write(path, text.encode("utf-8"), durable=False)
    except OSError:
        pass


def drop_layout(key: str | None, size: int, layout: ShardLayout | None, why: str) -> Path | None:
    """Remove the entry of ``key`` if it holds ``layout`` (the one that did not match the bytes:
    ``why``), with a warning naming it; its path, or None when the layout is not the cache's (a
    pinned one, or an entry since rebuilt)."""
    if key is None or layout is None or layout.digests is not None:
        return None
    path = entry_path(key)
    try:
        d = json.loads(_read(path).decode("utf-8"))
        found = LayoutCacheEntry.from_dict(d, key, size).layout
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    if (found.format, found.schema, found.units) != (layout.format, layout.schema, layout.units):
        return None
    _remove(path, f"does not describe the shard's bytes ({why})")
    return path
