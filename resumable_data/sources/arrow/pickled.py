"""The state a pickled :class:`~resumable_data.sources.arrow_shards.ArrowShards` carries: paths, never Arrow data.

Algorithm: ``__getstate__`` writes a JSON-shaped dict with ``format`` and an integer
``schema_version``: the root, the relative shard paths, the manifest dict (or None), every
shard's file identity (:mod:`..identity`), for a remote store the ``pyarrow.fs.FileSystem``
(which pickles its own configuration) and the retries, and the read-ahead cache directory when
one is attached. ``__setstate__`` checks the header, rebuilds the store and the version, and the
process opens its own files, refusing a shard whose identity differs from the pickled one.

Guarantee: a state of another format or schema version is a :class:`~resumable_data.ConfigError`
before anything is opened; a source never pickles record data, so a worker never reads stale bytes.
Schema versions: 2 added the files' identities, 3 the remote store's retries, 4 the decoded-unit
budget the source asked for (``decoded_cache_bytes``, None for the default), 5 the process id of
the read-ahead cache's fetcher (a worker stops waiting for units a dead fetcher promised).

Cost: the state is the size of the manifest; a restore (unpickling, in every loader worker) opens
each shard again (see :mod:`..files`) and compares its identity: one ``stat`` per local shard.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from resumable_data.errors import ConfigError, describe
from resumable_data.sources.identity import FileIdentity
from resumable_data.sources.retry import DEFAULT_RETRIES, Retries
from resumable_data.sources.store import FileSystemStore, ShardStore, store_for
from resumable_data.sources.version import DatasetVersion

__all__ = ["STATE_FORMAT", "STATE_SCHEMA_VERSION", "SourceState", "read_state", "source_state"]

STATE_FORMAT = "resumable_data.arrow_shards"
STATE_SCHEMA_VERSION = 5  # 2: identities; 3: the store's retries; 4: decoded_cache_bytes; 5: read_ahead_owner
K_RETRIES = "retries"
K_FORMAT = "format"
K_SCHEMA_VERSION = "schema_version"
K_ROOT = "root"
K_FILES = "files"
K_VERSION = "version"
K_FILESYSTEM = "filesystem"
K_IDENTITIES = "identities"
K_READ_AHEAD = "read_ahead"
K_READ_AHEAD_OWNER = "read_ahead_owner"
K_DECODED_BYTES = "decoded_cache_bytes"


@dataclass(frozen=True)
class SourceState:
    """A pickled source's state, read back: what ``_init`` opens and checks."""

    root: str
    files: list[str]
    version: DatasetVersion | None
    store: ShardStore
    expected: list[FileIdentity | None]
    read_ahead: str | None
    read_ahead_owner: int | None
    decoded_bytes: int | None


def source_state(
    root: Path,
    rel: list[str],
    version: DatasetVersion | None,
    identities: list[FileIdentity | None],
    store: ShardStore,
    read_ahead: tuple[str, int] | None,
    decoded_bytes: int | None,
) -> dict[str, Any]:
    """The pickled state of a source (``read_ahead``: the attached cache's root and its fetcher's
    process id, or None;
    ``decoded_bytes``: its ``decoded_cache_bytes``)."""
    state: dict[str, Any] = {
        K_FORMAT: STATE_FORMAT,
        K_SCHEMA_VERSION: STATE_SCHEMA_VERSION,
        K_ROOT: str(root),
        K_FILES: list(rel),
        K_VERSION: version.to_dict() if version is not None else None,
        K_IDENTITIES: [i.to_dict() if i is not None else None for i in identities],
        K_DECODED_BYTES: decoded_bytes,
    }
    if store.filesystem is not None:
        state[K_FILESYSTEM] = store.filesystem  # pyarrow filesystems pickle their configuration
        retries = store.retries if isinstance(store, FileSystemStore) else DEFAULT_RETRIES
        state[K_RETRIES] = retries.to_dict()
    if read_ahead is not None:
        # a worker reads the units its rank's fetcher wrote
        state[K_READ_AHEAD], state[K_READ_AHEAD_OWNER] = read_ahead
    return state


def read_state(state: dict[str, Any]) -> SourceState:
    """``state`` (from :func:`source_state`) read back; a ConfigError for another format/version."""
    if state.get(K_FORMAT) != STATE_FORMAT or state.get(K_SCHEMA_VERSION) != STATE_SCHEMA_VERSION:
        raise ConfigError(
            describe(
                "state",
                {k: state.get(k) for k in (K_FORMAT, K_SCHEMA_VERSION)},
                f"format {STATE_FORMAT!r} schema_version {STATE_SCHEMA_VERSION}",
                "pickle and unpickle with the same resumable_data version",
            )
        )
    retries = Retries.from_dict(state[K_RETRIES]) if K_RETRIES in state else DEFAULT_RETRIES
    store = store_for(state.get(K_FILESYSTEM), retries)
    version = None
    if state[K_VERSION] is not None:
        version = DatasetVersion.from_dict(state[K_VERSION], root=state[K_ROOT])
        if store.filesystem is not None:
            version = replace(version, filesystem=store.filesystem)
    root = Path(state[K_ROOT]).as_posix()
    expected = [FileIdentity.from_dict(d) if d is not None else None for d in state[K_IDENTITIES]]
    return SourceState(
        root,
        list(state[K_FILES]),
        version,
        store,
        expected,
        state.get(K_READ_AHEAD),
        state.get(K_READ_AHEAD_OWNER),
        state[K_DECODED_BYTES],
    )
