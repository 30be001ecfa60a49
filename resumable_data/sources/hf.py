"""Hugging Face ``datasets`` adapter: :meth:`rd.ArrowShards.from_hf(dataset) <ArrowShards.from_hf>`.

Algorithm: a ``datasets.Dataset`` that is backed by files is a concatenation of memory-mapped Arrow
IPC *stream* files (``dataset.cache_files``), which :class:`~resumable_data.ArrowShards` reads
natively. The adapter checks that the dataset's rows are exactly those files' rows, in order,
untransformed, then pins the files (an explicit file list, content-hashed by default) with the
manifest kept **in memory**: Hugging Face cache directories are shared between datasets and
transforms (one directory holds the builder's files and every ``map``'s ``cache-*.arrow``) and may
be read-only, so writing ``rd-manifest.json`` there could clash with another dataset's manifest.
The version is recomputed from the bytes whenever a process opens the source (pickled sources,
i.e. DataLoader workers, carry the manifest and only re-check sizes).

Refused, with the fix in the message: an in-memory dataset (``Dataset.from_dict``/``from_pandas``
without a cache file: ``save_to_disk`` then ``load_from_disk``); an indices mapping (from
``select``/``shuffle``/``filter``/``sort``/``train_test_split``: ``dataset.flatten_indices()`` writes
the selected rows as a new cache file); a dataset whose table differs from its files (in-place
``rename_column``/``remove_columns``/``cast``, ``add_column``, partly in-memory concatenations:
``flatten_indices()`` writes it out too); a ``DatasetDict`` (pick a split) and an
``IterableDataset`` (not map-style).

Guarantee: the record ids are ``dataset``'s row indices (``src[i]`` is ``dataset[i]``'s row in
Arrow form, no ``set_format`` applied). The version hash depends on the files' bytes, shard order
and file names (relative to their common directory), not on where the cache lives: the same data
built in two cache directories gets the same version, changed data gets another.

Cost: one streamed read of every byte to hash (``hash="size"``: metadata only, weaker).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from resumable_data.errors import ConfigError, describe
from resumable_data.sources.files import canonical_schema
from resumable_data.sources.pin import pin, resolve_files
from resumable_data.sources.version import DatasetVersion

__all__ = ["hf_shards"]

_FIX_IN_MEMORY = ("write it to files first: dataset.save_to_disk(directory); "
                  "dataset = datasets.load_from_disk(directory)")
# In-memory operations datasets re-applies to a memory-mapped file that leave its rows and column
# values unchanged (the schema metadata is not part of the version: see files.canonical_schema).
_HARMLESS_REPLAYS = frozenset({"replace_schema_metadata", "combine_chunks"})
_FIX_FLATTEN = "dataset = dataset.flatten_indices() (writes the rows as a new Arrow cache file)"


def _blocks(table: Any) -> list[Any]:
    """The tables a ``datasets.table.Table`` is made of, row-major; raises on side-by-side blocks."""
    from datasets.table import ConcatenationTable

    if isinstance(table, ConcatenationTable):
        out = []
        for row in table.blocks:
            if len(row) != 1:
                raise ValueError("columns concatenated side by side")
            out.append(row[0])
        return out
    return [table]


def hf_shards(dataset: Any, *, hash: str = "content") -> tuple[Path, list[str], DatasetVersion]:
    """(root, relative file paths, in-memory DatasetVersion) of a ``datasets.Dataset``'s files."""
    try:
        import datasets
    except ImportError as exc:  # pragma: no cover - datasets is a dependency
        raise ConfigError(describe("dataset", type(dataset).__name__, "a datasets.Dataset",
                                   "pip install datasets")) from exc
    from datasets.table import MemoryMappedTable

    if isinstance(dataset, (datasets.DatasetDict, datasets.IterableDatasetDict)):
        raise ConfigError(describe("dataset", f"DatasetDict with splits {list(dataset)}",
                                   "one datasets.Dataset", "pick a split, e.g. dataset['train']"))
    if isinstance(dataset, datasets.IterableDataset):
        raise ConfigError(describe("dataset", "IterableDataset", "a map-style datasets.Dataset",
                                   "load without streaming=True (a map-style dataset with cache files)"))
    if not isinstance(dataset, datasets.Dataset):
        raise ConfigError(describe("dataset", type(dataset).__name__, "a datasets.Dataset",
                                   "pass a Hugging Face datasets.Dataset (or use rd.ArrowShards(path))"))
    if dataset._indices is not None:
        raise ConfigError(describe(
            "dataset", f"{dataset!r}".replace("\n", " "),
            "a dataset without an indices mapping (select/shuffle/filter/sort made one: its rows are "
            "a view of the cache files, not the files)", _FIX_FLATTEN))
    files = [f["filename"] for f in dataset.cache_files]
    if not files:
        raise ConfigError(describe("dataset", f"in-memory Dataset ({dataset.num_rows} rows)",
                                   "a dataset backed by Arrow cache files (dataset.cache_files is empty)",
                                   _FIX_IN_MEMORY))
    try:
        blocks = _blocks(dataset.data)
        problem = None
        if not all(isinstance(b, MemoryMappedTable) for b in blocks):
            problem = "part of the table is held in memory, not in a cache file"
        elif any(name not in _HARMLESS_REPLAYS for b in blocks for name, *_ in (b.replays or [])):
            problem = ("the table was changed in memory after loading (select of a range, "
                       "rename/remove/cast columns): its files hold other rows or columns")
        elif [str(Path(b.path).resolve()) for b in blocks] != [str(Path(f).resolve()) for f in files]:
            problem = "the table's blocks are not its cache files in order"
    except ValueError as exc:
        problem = str(exc)
    if problem is not None:
        raise ConfigError(describe("dataset", f"{dataset!r}".replace("\n", " "),
                                   f"rows that are exactly its cache files' rows ({problem})",
                                   _FIX_FLATTEN))
    try:
        root, rel = resolve_files(files)
    except ConfigError as exc:
        raise ConfigError(f"{exc}; (a dataset that lists one cache file twice, e.g. "
                          f"concatenate_datasets([d, d])): fix: {_FIX_FLATTEN}") from None
    version = pin([root / r for r in rel], hash=hash, save=False)
    if version.num_records != dataset.num_rows:
        raise ConfigError(describe("dataset", f"{dataset.num_rows} rows",
                                   f"the {version.num_records} rows of its cache files", _FIX_FLATTEN))
    own = canonical_schema(dataset.data.schema)
    if own != version.schema:
        raise ConfigError(describe("dataset", own, f"the schema of its cache files ({version.schema})",
                                   _FIX_FLATTEN))
    return root, rel, version
