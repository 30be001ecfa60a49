"""Verifying a dataset version: the files on its store compared with the manifest, every difference listed.

Algorithm: per listed shard (remote shards 16 at a time), ``stat`` it: missing or of another
byte size is a difference. Then (local, or remote without a pinned layout) read its metadata and
compare the row count and the canonical schema with the pinned ones; a remote shard with a pinned
layout skips that read (its schema is checked when it is opened, each unit's row count when the
unit is first read: :mod:`.layout`). At level ``cached`` or ``content``: a version pinned by ETag
compares the store's ETag; a version with content hashes re-hashes the bytes (``cached``: only a
file state not verified before, and a remote shard whose ETag is the pinned one is trusted,
:mod:`.verified`), checking the layout's unit digests and metadata digest in the same read
(:mod:`.unit_digests`). A version of a discovered directory also lists it: a shard file the
manifest does not list is a difference.

Guarantee: :func:`verify_version` returns only when every shard matches at ``level``; otherwise it
raises one :class:`~resumable_data.DatasetIntegrityError` listing every difference and the fix. A
level the version cannot check (``content`` on a version without digests) or a version without a
root is a :class:`~resumable_data.ConfigError` naming it. A file whose bytes hashed to the pinned
hash is remembered as verified (:mod:`.verified`) only then.

Cost: ``size``: one ``stat`` and one metadata read per shard (remote with layouts: one HEAD);
``content``: also every byte read once; ``cached``: the bytes of the shards not verified in their
current state only. Nothing to restore: a verify keeps no state but the verified-files cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

from resumable_data._schema import coerce_enum
from resumable_data.errors import ConfigError, DatasetIntegrityError, describe
from resumable_data.sources import verified
from resumable_data.sources.files import canonical_schema, discover_shards, read_shard_meta
from resumable_data.sources.layout import ShardLayout
from resumable_data.sources.store import ShardStore, join
from resumable_data.sources.unit_digests import SpanHasher
from resumable_data.sources.version_modes import HashMode, Selection, VerifyLevel

__all__ = ["PinnedShard", "PinnedVersion", "verify_version"]

_REMOTE_WORKERS = 16  # concurrent requests when verifying remote shards


class PinnedShard(Protocol):
    """What a verify reads of a manifest's shard (:class:`~.version.ShardInfo`, whose module
    imports this one)."""

    @property
    def path(self) -> str: ...

    @property
    def size(self) -> int: ...

    @property
    def num_rows(self) -> int: ...

    @property
    def content_hash(self) -> str | None: ...

    @property
    def etag(self) -> str | None: ...

    @property
    def layout(self) -> ShardLayout | None: ...


class PinnedVersion(Protocol):
    """What a verify reads of a version (:class:`~.version.DatasetVersion`, whose module imports
    this one)."""

    @property
    def shards(self) -> Sequence[PinnedShard]: ...

    @property
    def schema(self) -> str: ...

    @property
    def hash(self) -> str: ...

    @property
    def hash_mode(self) -> HashMode: ...

    @property
    def selection(self) -> Selection: ...

    @property
    def root(self) -> Path | None: ...

    @property
    def store(self) -> ShardStore: ...


def verify_version(version: PinnedVersion, level: VerifyLevel | str = VerifyLevel.SIZE) -> None:
    """Compare the files under ``root`` with the manifest; one error lists every difference.

    ``size``: every listed shard exists with the pinned byte size, row count and schema, and
    (for a discovered directory) no unlisted shard file is present. ``content``: also the
    xxh3-128 of every shard's bytes (requires ``hash_mode="content"``).
    """
    level = coerce_enum(level, VerifyLevel, "level")
    if version.root is None:
        raise ConfigError(
            describe(
                "root",
                None,
                "the directory this version was loaded from",
                "use DatasetVersion.load(directory) or rd.pin(directory)",
            )
        )
    if level is VerifyLevel.CACHED and version.hash_mode is HashMode.SIZE:
        level = VerifyLevel.SIZE  # no digest to compare: sizes, rows and schema only
    if level is VerifyLevel.CONTENT and version.hash_mode is not HashMode.CONTENT:
        raise ConfigError(
            describe(
                "level",
                level.value,
                f"'size' or 'cached' for a version pinned with "
                f"hash={version.hash_mode.value!r} (it holds no digest of the bytes)",
                "verify(level='cached'), or re-pin with rd.pin(directory, hash='content')",
            )
        )
    store = version.store
    root = version.root.as_posix()
    check = lambda s: _check_shard(version, store, root, s, level)
    listing = version.selection is Selection.DIRECTORY
    if store.local:
        found = [check(s) for s in version.shards]
        present = discover_shards(root, store) if listing and store.is_dir(root) else []
    else:  # remote: every request waits on the network, so the shards (and the listing) run concurrently
        with ThreadPoolExecutor(max_workers=min(_REMOTE_WORKERS, len(version.shards) + 1)) as pool:
            listed_f = pool.submit(_present, store, root) if listing else None
            found = list(pool.map(check, version.shards))
            present = listed_f.result() if listed_f is not None else []
    problems = [p for ps in found for p in ps]
    listed = {s.path for s in version.shards}
    for extra in present:
        if extra not in listed:
            problems.append(f"shard {extra!r}: extra shard file not listed in the manifest")
    if problems:
        raise DatasetIntegrityError(
            f"dataset at {str(version.root)!r} (version {version.hash}) does not match its manifest "
            f"({len(problems)} difference(s), verify level={level.value!r}):\n  - "
            + "\n  - ".join(problems)
            + "\nfix: restore the original files, or re-pin deliberately with "
            "rd.pin(directory) (save='cache' keeps the folder untouched; a new version: resumed "
            "states will refuse it)"
        )


def _present(store: ShardStore, root: str) -> list[str]:
    """The shard files under ``root`` now (none when it is not a directory)."""
    try:
        return discover_shards(root, store)
    except ConfigError:
        return []


def _check_shard(version: PinnedVersion, store: ShardStore, root: str, s: PinnedShard, level: VerifyLevel) -> list[str]:
    """The differences between shard ``s`` on ``store`` and the manifest (empty: none).

    A remote shard with a pinned layout skips the metadata read: its schema is checked when it
    is opened and each unit's row count when the unit is first read (:mod:`.layout`)."""
    p = join(root, s.path)
    st = store.stat(p)
    if st is None:
        return [f"shard {s.path!r}: missing file"]
    if st.size != s.size:
        return [f"shard {s.path!r}: size {st.size} bytes on disk, pinned {s.size}"]
    problems = []
    if store.local or s.layout is None:
        try:
            meta = read_shard_meta(p, store)
        except ConfigError as exc:
            return [f"shard {s.path!r}: unreadable ({exc})"]
        if meta.num_rows != s.num_rows:
            problems.append(f"shard {s.path!r}: rows {meta.num_rows} on disk, pinned {s.num_rows}")
        got_schema = canonical_schema(meta.schema)
        if got_schema != version.schema:
            problems.append(
                f"shard {s.path!r}: schema differs from the pinned schema "
                f"(on disk: {got_schema!r}; pinned: {version.schema!r})"
            )
    if level is not VerifyLevel.SIZE and version.hash_mode is HashMode.ETAG:  # the store's word, no bytes read
        if st.etag != s.etag:
            problems.append(
                f"shard {s.path!r}: ETag {st.etag} on the store, pinned {s.etag} (the "
                "object was replaced, or copied to a store that gives other ETags)"
            )
    elif level is not VerifyLevel.SIZE and s.content_hash is not None:  # hash_mode='content' (a digest each)
        key = verified.file_key(store, p, None if store.local else st)  # before hashing (.verified)
        if level is VerifyLevel.CACHED and (
            verified.is_verified(key, s.content_hash) or (s.etag is not None and st.etag == s.etag)
        ):  # the ETag trust model (.verified)
            return problems
        digests = s.layout.digests if s.layout is not None else None  # checked in the same read
        if digests is not None and s.layout is not None and s.layout.meta_digest is not None:
            digests = (*digests, s.layout.meta_digest)  # the metadata span's digest, hashed last
        units = [(o, n) for o, n, _ in s.layout.units] if s.layout is not None else []
        if s.layout is not None and s.layout.meta_digest is not None and s.layout.meta_span is not None:
            units.append(s.layout.meta_span)
        spans = SpanHasher(units) if s.layout and digests is not None else None
        h = store.hash_file(p, chunks=spans.update if spans is not None else None)
        if h != s.content_hash:
            problems.append(f"shard {s.path!r}: content hash {h} on disk, pinned {s.content_hash}")
        elif spans is not None and digests is not None and spans.digests() != digests:
            # the bytes are the pinned ones: the manifest's unit digests are not theirs (edited)
            bad = [k for k, (a, b) in enumerate(zip(spans.digests(), digests)) if a != b]
            n_units = len(s.layout.units) if s.layout is not None else 0
            what = [f"record batches {[k for k in bad if k < n_units][:8]}"] if any(k < n_units for k in bad) else []
            what += ["its metadata span (meta)"] if bad[-1] >= n_units else []
            problems.append(
                f"shard {s.path!r}: the manifest's unit digests of {' and '.join(what)} are not those "
                "of the pinned bytes (the manifest's layout was edited; re-pin with rd.pin)"
            )
        else:
            verified.remember(key, h)
    return problems
