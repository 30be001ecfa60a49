"""Which files are a dataset's shards: discovery in a folder, Hugging Face folders, hive folders, file lists.

Every function takes the :class:`~resumable_data.sources.store.ShardStore` the files live on
(default: the local store), so local and remote shards share one code path.

Algorithm: a directory is listed recursively; every file whose suffix is one of
:data:`SHARD_SUFFIXES` (and whose name does not start with ``.``) is a shard, ordered by its
relative POSIX path (byte-wise string sort), so the order is the same on every OS and store.
A Hugging Face folder is read as HF defines it (:func:`hf_dataset_files`): the data files its
``state.json`` lists, never HF's ``cache-*.arrow`` files written beside them. A folder laid out
as hive partitions (``key=value`` directories) is refused (:func:`refuse_hive_partitions`). An
explicit list of files (:func:`resolve_files`) keeps its order; its root is the files' deepest
common directory.

Guarantee: the same folder gives the same shards in the same order on every OS and store; a file
HF's ``state.json`` lists but the folder lacks, a file listed twice, a hive folder or an empty or
mistyped file list is a :class:`~resumable_data.ConfigError` (or ``ConfigTypeError``) naming the
path and the fix, never a silently different dataset.

Cost: one listing (plus one small read of ``state.json`` per folder holding one); nothing of a
shard is read. A restore costs the same listing (or none: a pinned manifest lists the shards).
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Sequence
from typing import Any

from resumable_data.errors import ConfigError, ConfigTypeError, describe
from resumable_data.sources.store import LOCAL, ShardStore

__all__ = [
    "HF_INFO",
    "HF_STATE",
    "LEGACY_MANIFEST_NAME",
    "MANIFEST_NAME",
    "SHARD_SUFFIXES",
    "discover_shards",
    "file_list",
    "hf_dataset_files",
    "refuse_hive_partitions",
    "resolve_files",
]

#: The manifest ``rd.pin(folder)`` writes (hidden: other readers skip it, see :mod:`.manifests`).
MANIFEST_NAME = ".rd-manifest.json"
#: The name earlier versions wrote; still read, never written.
LEGACY_MANIFEST_NAME = "rd-manifest.json"
SHARD_SUFFIXES = (".arrow", ".ipc", ".feather", ".parquet")


def discover_shards(root: Any, store: ShardStore = LOCAL) -> list[str]:
    """Relative POSIX paths of every shard file under ``root``, sorted (remote: one listing; a
    prefix holding nothing is not a directory)."""
    if not store.local:
        try:
            listed = store.list_files(root)
        except (FileNotFoundError, NotADirectoryError):
            listed = []
        if listed:  # a Hugging Face folder is read as HF defines it here too (its cache files left out)
            found = [r for r in listed if r.endswith(SHARD_SUFFIXES) and not posixpath.basename(r).startswith(".")]
            return hf_dataset_files(root, store, listed, found)
    if not store.is_dir(root):
        raise ConfigError(
            describe(
                "path",
                str(root),
                "an existing directory (or prefix) of shard files",
                "pass the directory that holds the .arrow/.ipc/.feather/.parquet shards "
                "(and, for remote data, the right filesystem and bucket/prefix)",
            )
        )
    listed = store.list_files(root)
    found = [r for r in listed if r.endswith(SHARD_SUFFIXES) and not posixpath.basename(r).startswith(".")]
    return hf_dataset_files(root, store, listed, found)


HF_STATE = "state.json"  # datasets' save_to_disk: lists the folder's data files
HF_INFO = "dataset_info.json"  # datasets' folders (save_to_disk and load_dataset's cache)
_HF_CACHE_FILE = re.compile(r"cache-[0-9a-f]{16}(_\d{5}_of_\d{5})?\.arrow")
_HF_STATE_MAX_BYTES = 1 << 20


def hf_dataset_files(root: Any, store: ShardStore, listed: list[str], found: list[str]) -> list[str]:
    """``found`` without the files Hugging Face ``datasets`` writes beside a dataset's own data.

    A folder holding HF's ``state.json`` (written by ``save_to_disk``) is read as HF defines the
    dataset: its shards are exactly the ``_data_files`` that ``state.json`` lists (a listed file
    that is missing is an error); anything else there (``cache-*.arrow`` written by ``.shuffle()``,
    ``.select()``, ``.flatten_indices()``, ``.map()`` on a ``load_from_disk`` dataset) is not part
    of it. A folder holding only ``dataset_info.json`` (``load_dataset``'s cache) leaves out the
    files named like HF's cache files (``cache-<16 hex digits>[_NNNNN_of_NNNNN].arrow``).
    ``state.json`` that is not HF's shape (no ``_data_files`` list of ``{"filename": ...}``) changes
    nothing. The JSON files are never shards (their suffix is not a shard suffix).
    """
    names = set(listed)
    dirs = {posixpath.dirname(r) for r in found}
    keep: dict[str, set[str] | None] = {}  # dir -> the only shard names kept (None: HF cache names out)
    for d in dirs:
        state_rel = posixpath.join(d, HF_STATE) if d else HF_STATE
        info_rel = posixpath.join(d, HF_INFO) if d else HF_INFO
        files = _hf_state_files(store, posixpath.join(str(root), state_rel)) if state_rel in names else None
        if files is not None:
            missing = [f for f in files if (posixpath.join(d, f) if d else f) not in names]
            if missing:
                raise ConfigError(
                    describe(
                        "path",
                        str(root),
                        f"every data file {state_rel!r} (Hugging Face save_to_disk) lists",
                        f"{missing} missing: restore them, or save the dataset again with save_to_disk",
                    )
                )
            twice = sorted({f for f in files if files.count(f) > 1})
            if twice:  # HF would read such a file twice; a set of names would silently read it once
                raise ConfigError(
                    describe(
                        "path",
                        str(root),
                        f"each data file listed once in {state_rel!r} (Hugging Face save_to_disk)",
                        f"{twice} listed more than once (a damaged or hand-edited file): save the dataset again "
                        "with save_to_disk, or restore state.json",
                    )
                )
            keep[d] = set(files)
        elif info_rel in names:
            keep[d] = None
    if not keep:
        return found
    out = []
    for r in found:
        d, name = posixpath.split(r)
        if d not in keep:
            out.append(r)
        else:
            kept = keep[d]
            if kept is None:
                if not _HF_CACHE_FILE.fullmatch(name):
                    out.append(r)
            elif name in kept:
                out.append(r)
    return out


def _hf_state_files(store: ShardStore, path: str) -> list[str] | None:
    """The ``_data_files`` names of HF's ``state.json`` at ``path``, or None if not HF's shape."""
    import json

    raw = store.read_small(path, _HF_STATE_MAX_BYTES)
    try:
        state = json.loads(raw) if raw is not None else None
    except ValueError:
        return None
    files = state.get("_data_files") if isinstance(state, dict) else None
    if not isinstance(files, list) or not files:
        return None
    names = [f.get("filename") if isinstance(f, dict) else None for f in files]
    if not all(isinstance(n, str) and n and "/" not in n and n.endswith(SHARD_SUFFIXES) for n in names):
        return None
    return [n for n in names if isinstance(n, str)]  # every one is (checked above)


def refuse_hive_partitions(root: Any, rel_paths: list[str]) -> None:
    """Shards under ``key=value`` directories carry columns in their paths, which rd does not read.

    pyarrow, pandas and Spark add those partition columns to every row; reading the files alone
    would make them vanish without a word, so a directory laid out that way is refused."""
    keys = sorted(
        {
            part.split("=", 1)[0]
            for r in rel_paths
            for part in r.split("/")[:-1]
            if "=" in part and not part.startswith("=")
        }
    )
    if keys:
        example = next(r for r in rel_paths if "=" in r.rsplit("/", 1)[0])
        raise ConfigError(
            describe(
                "path",
                str(root),
                f"shard files whose paths hold no data, but {example!r} is in a hive-style partition "
                f"directory: its partition column(s) {keys} live in the directory names, which rd does not "
                "read, so they would vanish from every row",
                f"write the columns into the files once: rd.write_arrow_shards(pyarrow.dataset.dataset("
                f"{str(root)!r}, partitioning='hive').to_table(), NEW_DIR, rows_per_batch=1024) and pass NEW_DIR; "
                "or, to read the files without those columns, pass the list of files instead of the directory",
            )
        )


def file_list(files: Any) -> list[str | os.PathLike]:
    """``files`` (anything but a path: a list, tuple or other iterable of shard paths) as a list, or
    :class:`ConfigTypeError` when it is not an iterable of ``str`` / ``os.PathLike`` (``None``, a number,
    bytes, a tensor: a dataset path mistyped)."""
    try:
        out = None if isinstance(files, (bytes, bytearray)) else list(files)
    except TypeError:
        out = None
    if out is None or not all(isinstance(f, (str, os.PathLike)) for f in out):
        raise ConfigTypeError(
            describe(
                "path",
                files,
                "a directory or shard file (str or os.PathLike), or a list of shard files",
                "pass the dataset's folder, e.g. 'data/' or pathlib.Path('data')",
            )
        )
    return out


def resolve_files(files: Sequence[str | os.PathLike], store: ShardStore = LOCAL) -> tuple[str, list[str]]:
    """(root, relative POSIX paths) for an explicit list of shard files, order kept; the root is
    their deepest common directory."""
    if len(files) == 0:
        raise ConfigError(
            describe(
                "path",
                list(files),
                "a non-empty list of shard files",
                "pass at least one .arrow/.ipc/.feather/.parquet file",
            )
        )
    paths = []
    for f in files:
        p = store.resolve(f)
        if not p.endswith(SHARD_SUFFIXES) or store.stat(p) is None:
            raise ConfigError(
                describe(
                    "path",
                    str(f),
                    f"an existing shard file ({', '.join(SHARD_SUFFIXES)})",
                    "check the file list (and the filesystem)",
                )
            )
        paths.append(p)
    root = posixpath.commonpath([posixpath.dirname(p) for p in paths])
    rel = [posixpath.relpath(p, root) if root else p for p in paths]
    if len(set(rel)) != len(rel):
        raise ConfigError(describe("path", rel, "each shard file listed once", "remove the duplicates"))
    return root, rel
