"""Writing a table as shard files (for tests, demos and benchmarks).

Algorithm: the table's rows are split into ``num_shards`` near-equal contiguous ranges (or ranges
of ``rows_per_shard``), in order, and each range is written to ``shard-NNNNN.<ext>`` as Arrow IPC
file format (``"arrow"``), Arrow IPC stream format (``"arrow_stream"``, what Hugging Face
``datasets`` writes) or Parquet (``"parquet"``), with record batches / row groups of at most
``rows_per_batch`` rows.

Guarantee: concatenating the shards in the returned (= sorted) order gives back the table's rows.
Each file is written to a temporary name and renamed into place. A directory holding shard files
this write does not replace is refused before anything is written (``rd.ArrowShards(directory)``
reads every shard file there, hidden directories included, so old ones would join the new rows
unsaid), as is a pinned directory (``.rd-manifest.json``: rewriting its shards loses the pinned
version and leaves the folder not matching its manifest), a path that is not a directory, and a
shard name held by a directory.

Cost: one pass over the data; no manifest is written (call :func:`~resumable_data.pin`).
"""

from __future__ import annotations

import enum
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from resumable_data._schema import coerce_enum
from resumable_data.errors import ConfigError, describe
from resumable_data.sources.discovery import SHARD_SUFFIXES

__all__ = ["ShardWriteFormat", "write_arrow_shards"]


class ShardWriteFormat(str, enum.Enum):
    """File layout written by :func:`write_arrow_shards`."""

    ARROW = "arrow"  # Arrow IPC file format, .arrow
    ARROW_STREAM = "arrow_stream"  # Arrow IPC stream format, .arrow
    PARQUET = "parquet"


def _positive(param: str, value: int | None) -> None:
    if value is not None and (type(value) is not int or value < 1):
        raise ConfigError(describe(param, value, "a positive integer or None", f"pass {param}>=1"))


def _check_no_other_shards(root: Path, written: set[str]) -> None:
    """Refuse a directory holding shard files this write does not replace: ``rd.ArrowShards`` reads
    every shard file of a directory (hidden directories included, as its listing walks them), so
    they would join the new table's rows unsaid. Refuse a pinned directory (its manifest would no
    longer match: the pinned version's data lost and the folder unreadable), a path that is not a
    directory, and a shard name held by a directory (the rename onto it fails midway)."""
    if not root.is_dir():
        if os.path.lexists(root):
            raise ConfigError(
                describe(
                    "directory",
                    str(root),
                    "a directory, or a path where nothing is yet (a file or a dangling link is there)",
                    "pass another path for the shards (a new directory)",
                )
            )
        return
    # A pinned folder is not refused: a script that writes and pins runs twice (the same table gives the
    # same bytes, the pin still matches), and different rows are refused at the next open as not
    # matching the manifest (rd.DatasetIntegrityError), never read as the pinned version.
    other = []
    for d, _dirs, files in os.walk(root):  # as the reader lists a folder (LocalStore.list_files)
        for f in files:
            rel = Path(os.path.relpath(os.path.join(d, f), root)).as_posix()
            if f.endswith(SHARD_SUFFIXES) and not f.startswith(".") and rel not in written:
                other.append(rel)
    other.sort()
    if other:
        raise ConfigError(
            describe(
                "directory",
                str(root),
                f"a new or empty directory, or one whose shard files this write replaces (it holds {len(other)} "
                f"other shard file(s), {other[:5]}, which rd.ArrowShards(directory) would read with the new rows)",
                f"write into a new directory, or delete the old shards first: shutil.rmtree({str(root)!r})",
            )
        )
    for name in sorted(written):
        for p in (root / name, root / f".{name}.tmp"):
            if p.is_dir() and not p.is_symlink():
                raise ConfigError(
                    describe(
                        "directory",
                        str(root),
                        f"no directory where a shard file is written ({p.name} is a directory)",
                        f"write into a new directory, or move {str(p)!r} away first",
                    )
                )


def write_arrow_shards(
    table: pa.Table,
    directory: str | os.PathLike,
    *,
    num_shards: int | None = None,
    rows_per_shard: int | None = None,
    rows_per_batch: int | None = None,
    format: ShardWriteFormat | str = ShardWriteFormat.ARROW,
) -> list[Path]:
    """Write ``table`` as shards under ``directory``; returns the file paths in order."""
    fmt = coerce_enum(format, ShardWriteFormat, "format")
    if not isinstance(table, pa.Table):
        raise ConfigError(
            describe("table", type(table).__name__, "a pyarrow.Table", "convert with pa.table(...) first")
        )
    for name, v in (("num_shards", num_shards), ("rows_per_shard", rows_per_shard), ("rows_per_batch", rows_per_batch)):
        _positive(name, v)
    if num_shards is not None and rows_per_shard is not None:
        raise ConfigError(
            describe(
                "rows_per_shard",
                rows_per_shard,
                "None when num_shards is given",
                "pass only one of num_shards / rows_per_shard",
            )
        )
    n = table.num_rows
    if num_shards is not None and num_shards > max(n, 1):  # 2**64 looped building bounds; past n: empty files
        raise ConfigError(
            describe(
                "num_shards",
                num_shards,
                f"at most one shard per row (the table has {n} rows)",
                f"pass num_shards={max(n, 1)} or fewer",
            )
        )
    if rows_per_shard is not None:
        bounds = list(range(0, n, rows_per_shard)) + [n]
    else:
        k = num_shards or 1
        bounds = [(n * i) // k for i in range(k + 1)]
    root = Path(directory)
    ext = ".parquet" if fmt is ShardWriteFormat.PARQUET else ".arrow"
    _check_no_other_shards(root, {f"shard-{i:05d}{ext}" for i in range(len(bounds) - 1)})
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(len(bounds) - 1):
        part = table.slice(bounds[i], bounds[i + 1] - bounds[i])
        path = root / f"shard-{i:05d}{ext}"
        tmp = root / f".{path.name}.tmp"
        if fmt is ShardWriteFormat.PARQUET:
            pq.write_table(part, tmp, row_group_size=rows_per_batch or max(part.num_rows, 1))
        else:
            batches = part.to_batches(max_chunksize=rows_per_batch) if part.num_rows else []
            opener = pa.ipc.new_file if fmt is ShardWriteFormat.ARROW else pa.ipc.new_stream
            with pa.OSFile(str(tmp), "wb") as sink, opener(sink, table.schema) as writer:
                for b in batches:
                    writer.write_batch(b)
        os.replace(tmp, path)
        paths.append(path)
    return paths
