"""Hugging Face ``datasets`` adapter: :meth:`rd.ArrowShards.from_hf(dataset) <ArrowShards.from_hf>`.

Algorithm: a ``datasets.Dataset`` that is backed by files is a concatenation of memory-mapped Arrow
IPC *stream* files (``dataset.cache_files``), which :class:`~resumable_data.ArrowShards` reads
natively. The adapter checks that the dataset's rows are exactly those files' rows, in order,
untransformed, then pins the files (an explicit file list, content-hashed by default) with the
manifest kept **in memory**: Hugging Face cache directories are shared between datasets and
transforms (one directory holds the builder's files and every ``map``'s ``cache-*.arrow``) and may
be read-only, so writing a manifest there could clash with another dataset's manifest.
The version is recomputed from the bytes whenever a process opens the source (pickled sources,
i.e. DataLoader workers, carry the manifest and only re-check sizes).

An in-memory dataset (``Dataset.from_dict``/``from_list``/``from_pandas``, any ``select`` /
``shuffle`` / edit of one: ``dataset.cache_files`` is empty) has no files to map, so its rows are
written **once** as Arrow IPC file shards (``shard-00000.arrow``, ...; chunks recombined to fixed
record batches and the schema metadata dropped, so the bytes depend only on the rows and the Arrow
types) into ``cache_dir`` and pinned there with ``.rd-manifest.json`` (content hash, via
:func:`~resumable_data.sources.pin.pin`). ``cache_dir=None`` (default) uses the content-addressed
``$RD_CACHE_DIR/hf-in-memory/<version hash>`` (``$RD_CACHE_DIR`` defaults to
``~/.cache/resumable_data``). The shards are written to a temporary sibling directory and renamed
into place, so concurrent callers (every rank of a job) are safe. A ``cache_dir`` that already holds
the same version is re-used; one holding another version, or other files without a manifest, is
refused (nothing is overwritten).

Version by rows (``version_of="rows"``, what ``ResumableTrainer`` uses): ``datasets`` names a
``map``'s output file after its cache fingerprint and stamps the fingerprint into the file's schema
metadata; the fingerprint follows the mapped function's code, so a comment added to a script
gives another file and, by files, another version for the same rows. With ``version_of="rows"``
a file-backed dataset is written once as canonical shards, exactly as an in-memory one is: the
version follows the rows and Arrow types only (tested: two ``map`` functions that differ by a
comment give one version), at the cost of one copy of the rows in ``cache_dir`` (re-used, not
rewritten, while the rows are the same: later calls only hash them).

Refused, with the fix in the message: an indices mapping over cache files (from
``select``/``shuffle``/``filter``/``sort``/``train_test_split``: ``dataset.flatten_indices()`` writes
the selected rows as a new cache file); a file-backed dataset whose table differs from its files
(in-place ``rename_column``/``remove_columns``/``cast``, ``add_column``, partly in-memory
concatenations: ``flatten_indices()`` writes it out too); ``hash="size"`` for an in-memory dataset
(two datasets of the same shape would share a cache directory); a ``DatasetDict`` (pick a split)
and an ``IterableDataset`` (not map-style).

Guarantee: the record ids are ``dataset``'s row indices (``src[i]`` is ``dataset[i]``'s row in
Arrow form, no ``set_format`` applied). The version hash depends on the files' bytes, shard order
and file names (relative to their common directory), not on where the cache lives: the same data
built in two cache directories gets the same version, changed data gets another.

Cost: one streamed read of every byte to hash (``hash="size"``: metadata only, weaker). An
in-memory dataset: one copy of each shard's rows (``_ROWS_PER_SHARD``) in memory while writing, one
write and one hash of the bytes the first time; later calls serialize the shards into a hashing
sink (no disk) to predict the version, then re-use the cache directory that holds it.
"""

from __future__ import annotations

import enum
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import xxhash

from resumable_data._cache import cache_dir
from resumable_data._schema import coerce_enum
from resumable_data.errors import ConfigError, describe
from resumable_data.sources.files import MANIFEST_NAME, canonical_schema, resolve_files
from resumable_data.sources.pin import pin
from resumable_data.sources.version import DatasetVersion, HashMode, Selection, ShardInfo

__all__ = ["HFVersion", "hf_shards"]

_ROWS_PER_SHARD = 1 << 20  # rows per written shard of an in-memory dataset
_ROWS_PER_BATCH = 8192  # rows per record batch in those shards (fixed: the bytes follow the rows)
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


class HFVersion(str, enum.Enum):
    """What the version of a ``datasets.Dataset`` source follows."""

    #: The dataset's own cache files (zero copy): their bytes and names. ``datasets`` names and
    #: stamps a ``map`` output by its cache fingerprint, which follows the mapped function's code,
    #: so editing the script (a comment line) gives another version for the same rows.
    FILES = "files"
    #: The rows: they are written once as canonical shards (as an in-memory dataset's are) into
    #: ``cache_dir``, so identical rows give the same version whatever produced them.
    ROWS = "rows"


def hf_shards(
    dataset: Any,
    *,
    hash: str = "content",
    cache_dir: str | os.PathLike | None = None,
    version_of: HFVersion | str = HFVersion.FILES,
) -> tuple[Path, list[str], DatasetVersion]:
    """(root, relative file paths, DatasetVersion) of a ``datasets.Dataset``'s files.

    File-backed: the dataset's own cache files, manifest in memory (``cache_dir`` unused). In
    memory, or with ``version_of="rows"``: the rows written and pinned in ``cache_dir`` (see the
    module docstring)."""
    version_of = coerce_enum(version_of, HFVersion, "version_of")
    try:
        import datasets
    except ImportError as exc:  # pragma: no cover - datasets is a dependency
        raise ConfigError(
            describe("dataset", type(dataset).__name__, "a datasets.Dataset", "pip install datasets")
        ) from exc
    from datasets.table import MemoryMappedTable

    if isinstance(dataset, (datasets.DatasetDict, datasets.IterableDatasetDict)):
        raise ConfigError(
            describe(
                "dataset",
                f"DatasetDict with splits {list(dataset)}",
                "one datasets.Dataset",
                "pick a split, e.g. dataset['train']",
            )
        )
    if isinstance(dataset, datasets.IterableDataset):
        raise ConfigError(
            describe(
                "dataset",
                "IterableDataset",
                "a map-style datasets.Dataset",
                "load without streaming=True (a map-style dataset with cache files)",
            )
        )
    if not isinstance(dataset, datasets.Dataset):
        raise ConfigError(
            describe(
                "dataset",
                type(dataset).__name__,
                "a datasets.Dataset",
                "pass a Hugging Face datasets.Dataset (or use rd.ArrowShards(path))",
            )
        )
    _refuse_format(dataset)
    files = [f["filename"] for f in dataset.cache_files]
    if not files or version_of is HFVersion.ROWS:
        return _in_memory_shards(dataset, hash, cache_dir)
    if dataset._indices is not None:
        raise ConfigError(
            describe(
                "dataset",
                f"{dataset!r}".replace("\n", " "),
                "a dataset without an indices mapping (select/shuffle/filter/sort made one: its rows are "
                "a view of the cache files, not the files)",
                _FIX_FLATTEN,
            )
        )
    try:
        blocks = _blocks(dataset.data)
        problem = None
        if not all(isinstance(b, MemoryMappedTable) for b in blocks):
            problem = "part of the table is held in memory, not in a cache file"
        elif any(not _harmless(replay) for b in blocks for replay in (b.replays or [])):
            problem = (
                "the table was changed in memory after loading (select of a range, "
                "rename/remove/cast columns): its files hold other rows or columns"
            )
        elif [str(Path(b.path).resolve()) for b in blocks] != [str(Path(f).resolve()) for f in files]:
            problem = "the table's blocks are not its cache files in order"
    except ValueError as exc:
        problem = str(exc)
    if problem is not None:
        raise ConfigError(
            describe(
                "dataset",
                f"{dataset!r}".replace("\n", " "),
                f"rows that are exactly its cache files' rows ({problem})",
                _FIX_FLATTEN,
            )
        )
    try:
        root_s, rel = resolve_files(files)
    except ConfigError as exc:
        raise ConfigError(
            f"{exc}; (a dataset that lists one cache file twice, e.g. "
            f"concatenate_datasets([d, d])): fix: {_FIX_FLATTEN}"
        ) from None
    root = Path(root_s)
    version = pin([root / r for r in rel], hash=hash, save=False)
    if version.num_records != dataset.num_rows:
        raise ConfigError(
            describe(
                "dataset",
                f"{dataset.num_rows} rows",
                f"the {version.num_records} rows of its cache files",
                _FIX_FLATTEN,
            )
        )
    own = canonical_schema(dataset.data.schema)
    if own != version.schema:
        raise ConfigError(describe("dataset", own, f"the schema of its cache files ({version.schema})", _FIX_FLATTEN))
    return root, rel, version


def _harmless(replay: Any) -> bool:
    """Whether an in-memory operation datasets replays on a memory-mapped file leaves its rows and
    column values as the file holds them: schema metadata, rechunking, and dropping no column
    (``remove_columns([])``, which the Trainer calls when every column is used)."""
    name = replay[0]
    args: Sequence[Any] = replay[1] if len(replay) > 1 else ()
    if name in _HARMLESS_REPLAYS:
        return True
    return name == "drop" and len(args) == 1 and not args[0]


def _refuse_format(dataset: Any) -> None:
    """A ``set_format``/``with_format``/``with_transform`` would be dropped silently: refuse it.

    rd reads the Arrow rows themselves (every column, no formatting), so a format set on the
    dataset would not reach the samples."""
    fmt = dataset.format
    kind, columns = fmt.get("type"), fmt.get("columns")
    if kind == "custom":
        raise ConfigError(
            describe(
                "dataset",
                f"a dataset with a transform ({fmt.get('format_kwargs', {}).get('transform')!r}, "
                "from with_transform/set_transform)",
                "a dataset without a transform (rd reads its Arrow rows and would skip the transform)",
                "pass dataset.with_format(None) and apply the function per sample in the loader: "
                "rd.DataLoader(src, transform=fn) calls fn(sample) on each row dict (datasets calls a transform on a batch), "
                "seeded by rd.sample_context() "
                "(or materialise it once with dataset.map(fn))",
            )
        )
    if kind is not None:
        raise ConfigError(
            describe(
                "dataset",
                f"a dataset formatted as {kind!r} (with_format/set_format)",
                "an unformatted dataset (rd reads its Arrow rows and collates them to torch tensors itself)",
                "pass dataset.with_format(None) (convert in collate_fn= or arrow_collate= if you need another form)",
            )
        )
    if columns is not None and list(columns) != list(dataset.column_names):
        raise ConfigError(
            describe(
                "dataset",
                f"a format restricted to columns {list(columns)}",
                f"every column ({list(dataset.column_names)}): rd reads whole rows",
                "pass dataset.with_format(None) and pick the columns in collate_fn= or arrow_collate=, or drop "
                "the others for good with dataset.remove_columns([...]).flatten_indices()",
            )
        )


def default_cache_root() -> Path:
    """Where in-memory datasets are written by default: ``$RD_CACHE_DIR/hf-in-memory``."""
    return cache_dir() / "hf-in-memory"


class _HashSink:
    """A write-only file that hashes (xxh3-128) and counts what an IPC writer sends it."""

    def __init__(self) -> None:
        self.h = xxhash.xxh3_128()
        self.size = 0
        self.closed = False

    def write(self, b) -> int:
        self.h.update(b)
        self.size += len(b)
        return len(b)

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def writable(self) -> bool:
        return True


def _shard_parts(table: pa.Table) -> Iterator[tuple[str, pa.Table, pa.Schema]]:
    """``(file name, rows as one chunk, schema)`` of each shard (same rows => same bytes)."""
    n = table.num_rows
    bounds = list(range(0, n, _ROWS_PER_SHARD)) + [n] if n else [0, 0]
    schema = table.schema.remove_metadata()
    for i in range(len(bounds) - 1):
        part = table.slice(bounds[i], bounds[i + 1] - bounds[i]).combine_chunks()
        yield f"shard-{i:05d}.arrow", part.replace_schema_metadata(None), schema


def _write_ipc(part: pa.Table, schema: pa.Schema, sink: Any) -> None:
    with pa.ipc.new_file(sink, schema) as writer:
        for b in part.to_batches(max_chunksize=_ROWS_PER_BATCH):
            writer.write_batch(b)


def _write_shards(table: pa.Table, directory: Path) -> None:
    """``table`` as IPC file shards with fixed record batches (same rows => same bytes)."""
    for name, part, schema in _shard_parts(table):
        with pa.OSFile(str(directory / name), "wb") as sink:
            _write_ipc(part, schema, sink)


def _predicted_version(table: pa.Table) -> DatasetVersion:
    """The version :func:`pin` would give the shards :func:`_write_shards` writes, computed by
    serializing them into a hashing sink: no disk, one pass over the bytes."""
    shards = []
    for name, part, part_schema in _shard_parts(table):
        sink = _HashSink()
        _write_ipc(part, part_schema, pa.PythonFile(sink, mode="w"))
        shards.append(ShardInfo(path=name, size=sink.size, num_rows=part.num_rows, content_hash=sink.h.hexdigest()))
    schema = canonical_schema(table.schema.remove_metadata())  # every part's (_shard_parts)
    return DatasetVersion.build(shards, schema, HashMode.CONTENT, Selection.DIRECTORY, None)


def _in_memory_shards(
    dataset: Any,
    hash: str,
    cache_dir: str | os.PathLike | None,
) -> tuple[Path, list[str], DatasetVersion]:
    """Write an in-memory dataset's rows once as pinned shards (module docstring) and open them."""
    if coerce_enum(hash, HashMode, "hash") is not HashMode.CONTENT:
        raise ConfigError(
            describe(
                "hash",
                hash,
                "'content' for an in-memory dataset (its rows are written to a cache "
                "directory; a size-only version would let two datasets of the same shape share it)",
                "drop hash= (or write the dataset to files first: dataset.save_to_disk(d); "
                "dataset = datasets.load_from_disk(d))",
            )
        )
    explicit = cache_dir is not None
    target = Path(cache_dir).expanduser().absolute() if cache_dir is not None else None
    parent = target.parent if target is not None else default_cache_root()
    shown = str(cache_dir) if explicit else f"None (default: {parent}/<version hash>)"
    # every row as Arrow, in the dataset's order (indices mapping and in-memory edits applied)
    table = dataset.with_format("arrow")[0 : dataset.num_rows]
    predicted = _predicted_version(table)
    cached = target if target is not None else parent / predicted.hash
    if (cached / MANIFEST_NAME).is_file():  # written before: compare, no write
        held = DatasetVersion.load(cached)
        if held.hash == predicted.hash:
            return cached, [sh.path for sh in held.shards], held
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".rd-hf-", dir=parent))
        umask = os.umask(0)
        os.umask(umask)
        tmp.chmod(0o777 & ~umask)  # mkdtemp makes it owner-only; the placed cache is shared like any directory
    except OSError as exc:
        raise ConfigError(
            describe(
                "cache_dir",
                shown,
                f"a writable directory ({exc.strerror})",
                "pass cache_dir= on writable storage, or set RD_CACHE_DIR",
            )
        ) from None
    try:
        try:
            _write_shards(table, tmp)
        except OSError as exc:  # no space, quota, a file-size limit
            raise ConfigError(
                describe(
                    "cache_dir",
                    shown,
                    f"a writable directory with room for the dataset's "
                    f"shards ({type(exc).__name__}: {exc.strerror or exc})",
                    f"free space on the disk holding {parent}, or pass cache_dir= (or set "
                    "RD_CACHE_DIR) on storage with free space",
                )
            ) from None
        fresh = pin(tmp, hash="content", save=True)
        if fresh.hash != predicted.hash:  # pragma: no cover - the hashing sink saw other bytes
            raise ConfigError(
                describe(
                    "dataset",
                    f"{dataset.num_rows} rows",
                    "the same version written and predicted",
                    "report this bug; pass cache_dir= to a fresh directory meanwhile",
                )
            )
        if target is None:
            target = parent / fresh.hash
        _place(tmp, target, fresh, shown)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    version = DatasetVersion.load(target)
    if version.num_records != dataset.num_rows:  # pragma: no cover - a broken writer
        raise ConfigError(describe("cache_dir", str(target), f"{dataset.num_rows} rows", f"delete {target} and retry"))
    return target, [s.path for s in version.shards], version


def _place(tmp: Path, target: Path, fresh: DatasetVersion, shown: str) -> None:
    """Move the pinned ``tmp`` to ``target``, or check that ``target`` already holds ``fresh``.

    Safe against concurrent callers: ``os.rename`` of a directory onto a missing or empty one is
    atomic and fails on a non-empty one, and a directory renamed into place already holds its
    manifest, so a target that turns out non-empty is looked at again before any verdict."""
    for _ in range(3):
        if (target / MANIFEST_NAME).is_file():
            held = DatasetVersion.load(target)
            if held.hash != fresh.hash:
                raise ConfigError(
                    describe(
                        "cache_dir",
                        shown,
                        f"a new or empty directory, or one holding this dataset's shards (version "
                        f"{fresh.hash}, {fresh.num_records} rows); {target} holds version {held.hash} "
                        f"({held.num_records} rows)",
                        "pass another cache_dir for this dataset, or delete that directory if its "
                        "version is no longer needed",
                    )
                )
            return
        try:
            os.rename(tmp, target)  # onto a missing or empty directory: atomic
            return
        except OSError:
            if (target / MANIFEST_NAME).is_file():
                continue  # another process placed it first: compare on the next pass
            if target.is_dir() and any(target.iterdir()):
                raise ConfigError(
                    describe(
                        "cache_dir",
                        shown,
                        f"a new or empty directory (or one written by from_hf); {target} "
                        f"holds other files and no {MANIFEST_NAME}",
                        "pass a new directory: nothing in it is overwritten",
                    )
                ) from None
    raise ConfigError(
        describe(
            "cache_dir",
            shown,
            f"a directory this process can create ({target})",
            "check permissions, or pass another cache_dir",
        )
    )
