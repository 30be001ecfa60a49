"""``rd.prepare``: from raw text (or any records) to pinned token shards, deterministic and resumable.

Algorithm:

1. Open the input (:mod:`.inputs`) and its version; build the record function (:mod:`.functions`).
2. The lineage: input version, function fingerprint, filters, layout settings and the package
   version. It goes into the output manifest (``DatasetVersion.lineage``), so it is part of the
   dataset version hash: a loader state saved on shards of another lineage is refused at resume
   like any dataset change.
3. Plan the pieces from the input alone (``bytes_per_shard`` of input per piece); piece ``k``
   becomes ``shard-NNNNN.arrow`` (:mod:`.tasks`).
4. The output folder: empty or missing (a new run); holding this lineage's progress record
   (:mod:`.progress`: continue, keeping every completed shard whose bytes still match); or holding
   a finished manifest of this lineage (nothing to do). Anything else is refused: rd never writes
   into a folder holding other data.
5. Run the missing pieces on an engine (:mod:`.engines`), recording each finished piece
   atomically; then check that every shard has one schema (inferred types may differ between
   pieces: refused naming ``keep_columns`` or ``schema``), pin the folder (:func:`~resumable_data.pin` with the lineage) and delete the
   progress record.

Guarantee: the shards, their boundaries and bytes, and the version hash are a pure function of
(input version, function, filters, ``bytes_per_shard``): the same for 1 or 16 processes, for Ray,
and for a run killed at any point and re-run. A reader never sees a partial shard; the manifest
appears only when every shard is in place.

Cost: one read of the input (JSONL: two, the first hashes it), the function over every record,
one write of the output, and one read of the output to pin it. A restart re-hashes the completed
shards once.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from tqdm import tqdm

from resumable_data._schema import coerce_enum
from resumable_data._version import __version__
from resumable_data.errors import ConfigError, ConfigTypeError, DatasetIntegrityError, describe
from resumable_data.sources.files import MANIFEST_NAME
from resumable_data.sources.pin import pin
from resumable_data.sources.prepare.engines import Engine, run_jobs
from resumable_data.sources.prepare.functions import RecordFunction, Tokenize, record_function
from resumable_data.sources.prepare.inputs import open_input
from resumable_data.sources.prepare.progress import PROGRESS_NAME, Progress
from resumable_data.sources.prepare.tasks import (
    ROWS_PER_BATCH,
    TOKENS_PER_BATCH,
    Filters,
    PieceJob,
    PieceResult,
    schema_drift,
    shard_name,
    write_error,
)
from resumable_data.sources.store import ShardStore, join, store_for
from resumable_data.sources.version import DatasetVersion

__all__ = ["DEFAULT_BYTES_PER_SHARD", "LINEAGE_FORMAT", "PrepareResult", "prepare"]

#: Input bytes per output shard (a piece): 128 MiB of text is ~30M tokens, ~120 MB of int32 ids.
DEFAULT_BYTES_PER_SHARD = 128 << 20
LINEAGE_FORMAT = "resumable_data.prepare"
LINEAGE_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class PrepareResult:
    """What a prepare run produced (``version``) and what it did (counts of this call's work)."""

    version: DatasetVersion
    documents: int  # rows in the output
    #: input records (all pieces, including those an earlier run completed); None when a finished
    #: output of JSONL input is returned as is (the count was not kept)
    records_read: int | None
    tokens: int
    shards: int
    seconds: float
    reused_pieces: int  # pieces an earlier, interrupted run had completed
    #: True when ``out`` already held this lineage's finished output and nothing was done
    already_prepared: bool = False

    @property
    def dropped(self) -> int | None:
        """Input records the filters dropped (records read minus documents written); None when the
        input count was not kept."""
        return None if self.records_read is None else self.records_read - self.documents

    def summary(self) -> str:
        """One line for a log: documents, dropped, tokens, shards, time, throughput, reused pieces
        and the version hash."""
        dropped = "?" if self.dropped is None else f"{self.dropped:,}"
        if self.already_prepared:
            return (
                f"rd.prepare: already prepared, nothing done: {self.documents:,} documents ({dropped} dropped"
                + ("; not counted for JSONL input" if self.dropped is None else "")
                + f"), {self.tokens:,} tokens, {self.shards} shard(s) -> version {self.version.hash}"
            )
        rate = self.tokens / self.seconds if self.seconds > 0 else 0.0
        return (
            f"rd.prepare: {self.documents:,} documents ({dropped} dropped), {self.tokens:,} tokens, "
            f"{self.shards} shard(s) in {self.seconds:.1f} s ({rate / 1e6:.2f} M tokens/s"
            + (f"; {self.reused_pieces} piece(s) reused" if self.reused_pieces else "")
            + f") -> version {self.version.hash}"
        )


def _check_options(
    num_proc: Any, bytes_per_shard: Any, min_tokens: Any, max_tokens: Any, keep_columns: Any, text_column: Any
) -> None:
    if num_proc is not None and (type(num_proc) is not int or num_proc < 1):
        raise ConfigError(describe("num_proc", num_proc, "a positive integer or None (= the CPUs)", "pass num_proc=2"))
    if type(bytes_per_shard) is not int or bytes_per_shard < 1:
        raise ConfigError(
            describe(
                "bytes_per_shard",
                bytes_per_shard,
                "a positive integer (input bytes per shard)",
                f"pass bytes_per_shard={DEFAULT_BYTES_PER_SHARD}",
            )
        )
    for name, v in (("min_tokens", min_tokens), ("max_tokens", max_tokens)):
        if v is not None and (type(v) is not int or v < 0):
            raise ConfigError(describe(name, v, "None or an integer >= 0", f"pass {name}=None"))
    if min_tokens is not None and max_tokens is not None and min_tokens > max_tokens:
        raise ConfigError(describe("min_tokens", min_tokens, f"<= max_tokens ({max_tokens})", "swap them"))
    if not isinstance(text_column, str):
        raise ConfigTypeError(describe("text_column", text_column, "a column name", "pass text_column='text'"))
    if isinstance(keep_columns, str) or not all(isinstance(c, str) for c in keep_columns):
        raise ConfigTypeError(
            describe("keep_columns", keep_columns, "a list of column names", "pass keep_columns=['id']")
        )


def _lineage_diff(saved: dict[str, Any], current: dict[str, Any]) -> str:
    keys = sorted(k for k in set(saved) | set(current) if saved.get(k) != current.get(k))
    return "; ".join(f"{k}: {saved.get(k)!r} there, {current.get(k)!r} now" for k in keys)[:1500]


def _other_lineage(out: str, saved: dict[str, Any] | None, lineage: dict[str, Any]) -> ConfigError:
    return ConfigError(
        describe(
            "out",
            out,
            "an empty folder, or one holding shards prepared with this very lineage",
            f"pass another out folder, or delete {out!r} to prepare it again (differences: "
            f"{_lineage_diff(saved or {}, lineage) if saved else 'the folder holds data rd.prepare did not write'})",
        )
    )


def _listing(store: ShardStore, out: str) -> list[str]:
    return store.list_files(out) if store.is_dir(out) else []


def _killed_write(rel: str, *prefixes: str) -> bool:
    """Whether ``rel`` is the temporary file of an atomic write (``.<name>.<pid>.<random>.tmp``) of a
    file whose name starts with one of ``prefixes``."""
    return rel.endswith(".tmp") and "/" not in rel and any(rel.startswith(f".{p}") for p in prefixes)


def _remove(store: ShardStore, path: str) -> None:
    if store.filesystem is None:
        os.remove(path)
    else:
        store.filesystem.delete_file(path)


def _tokens(version: DatasetVersion) -> int:
    from resumable_data.sources.arrow_shards import ArrowShards

    src = ArrowShards(version)
    if "tokens" not in src.schema.names:
        return 0
    return int(src.column_lengths("tokens").sum())


def _same_schema(store: ShardStore, out: str, names: list[str], fn: RecordFunction) -> None:
    """Refuse shards whose schemas differ (inferred types: a piece saw other JSON types), before
    pinning, with the fix for the function used; reads each shard's footer."""
    first = None
    for name in names:
        with store.open_input_file(join(out, name)) as f:
            schema = pa.ipc.open_file(f).schema
        if first is None:
            first = (name, schema)
        elif not schema.equals(first[1]):
            raise schema_drift(fn, f"{first[0]} and {name}", f"{first[1]} vs {schema}".replace("\n", "; "))


def _cpus() -> int:
    return len(os.sched_getaffinity(0)) if sys.platform.startswith("linux") else (os.cpu_count() or 1)


class _Bar:
    """The progress bar: records (and their rate), tokens/s and input MB/s."""

    def __init__(self, total: int | None, initial: int, enabled: bool) -> None:
        self.t0 = time.perf_counter()
        self.tokens = self.nbytes = 0
        self.bar = tqdm(
            total=total,
            initial=initial,
            unit="rec",
            unit_scale=True,
            desc="rd.prepare",
            file=sys.stderr,
            disable=not enabled,
            dynamic_ncols=True,
        )

    def __call__(self, records: int, tokens: int, nbytes: int) -> None:
        self.tokens += tokens
        self.nbytes += nbytes
        dt = max(time.perf_counter() - self.t0, 1e-9)
        self.bar.set_postfix_str(
            f"{self.tokens / dt / 1e6:.2f} M tok/s, {self.nbytes / dt / 2**20:.1f} MiB/s", refresh=False
        )
        self.bar.update(records)

    def close(self) -> None:
        self.bar.close()


def prepare(
    source: Any,
    out: str | os.PathLike,
    *,
    tokenizer: Any = None,
    map_fn: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None,
    version: str | None = None,
    text_column: str = "text",
    keep_columns: tuple[str, ...] | list[str] = (),
    add_special_tokens: bool = False,
    schema: pa.Schema | None = None,
    drop_empty: bool = True,
    min_tokens: int | None = None,
    max_tokens: int | None = None,
    bytes_per_shard: int = DEFAULT_BYTES_PER_SHARD,
    engine: Engine | str = Engine.PROCESSES,
    num_proc: int | None = None,
    filesystem: Any = None,
    progress: bool = True,
) -> PrepareResult:
    """Turn ``source`` into pinned Arrow shards under ``out`` and return the result.

    ``source``: a folder, file or list of Arrow/Parquet shards or ``.jsonl`` files, an
    :class:`~resumable_data.ArrowShards`, a ``DatasetVersion`` or a ``datasets.Dataset``.
    Exactly one of ``tokenizer`` (a ``tokenizers.Tokenizer``, a ``transformers`` fast tokenizer,
    or the local path of a ``tokenizer.json`` or of a folder holding one: writes ``tokens:
    list<int32>`` from ``text_column``, plus ``keep_columns``) and ``map_fn`` (any picklable
    ``fn(record) -> dict | None``, with a ``version`` string you change whenever its output
    changes, and optionally the output ``schema``). Filters (on the ``tokens`` column):
    ``drop_empty``, ``min_tokens``, ``max_tokens``. ``bytes_per_shard``: input bytes per output
    shard. ``engine``: ``"processes"`` (``num_proc`` workers, default the CPUs) or ``"ray"``.
    ``filesystem``: a ``pyarrow.fs.FileSystem`` ``out`` lives on (e.g. S3). Re-running the same
    call continues an interrupted run, or returns at once when ``out`` is already complete.
    """
    t0 = time.perf_counter()
    eng = coerce_enum(engine, Engine, "engine")
    if not isinstance(out, (str, os.PathLike)):
        raise ConfigTypeError(describe("out", type(out).__name__, "a folder path", "pass out='tokens/'"))
    if isinstance(keep_columns, str) or not isinstance(keep_columns, (list, tuple)):
        raise ConfigTypeError(
            describe("keep_columns", keep_columns, "a list of column names", "pass keep_columns=['id'] (or [])")
        )
    keep = tuple(keep_columns)
    _check_options(num_proc, bytes_per_shard, min_tokens, max_tokens, keep, text_column)
    fn = record_function(
        tokenizer,
        map_fn,
        version=version,
        text_column=text_column,
        add_special_tokens=add_special_tokens,
        keep_columns=keep,
        schema=schema,
        picklable=eng is Engine.PROCESSES,
    )
    filters = Filters(bool(drop_empty), min_tokens, max_tokens)
    inp = open_input(source)
    inp.check(fn.input_columns, text_column if isinstance(fn, Tokenize) else None)
    pieces = inp.pieces(bytes_per_shard)
    lineage = {
        "format": LINEAGE_FORMAT,
        "schema_version": LINEAGE_SCHEMA_VERSION,
        "input": inp.version(),
        "function": fn.fingerprint(),
        "filters": filters.to_dict(),
        "layout": {
            "bytes_per_shard": bytes_per_shard,
            "rows_per_batch": ROWS_PER_BATCH,
            "tokens_per_batch": TOKENS_PER_BATCH,
            "format": "arrow_ipc_file",
        },
        "package_version": __version__,
    }
    store = store_for(filesystem)
    out_s = store.resolve(out)
    names = [shard_name(p.index, len(pieces)) for p in pieces]

    # a folder given as the input is listed again on a re-run, so shards written inside it would join
    # it; files named one by one (a .jsonl or .parquet file in the working directory) cannot grow
    named_files = (isinstance(source, (str, os.PathLike)) and Path(source).is_file()) or (
        isinstance(source, (list, tuple)) and all(isinstance(s, (str, os.PathLike)) for s in source)
    )
    inside = Path(out_s).resolve().is_relative_to(Path(inp.where).resolve())
    if store.filesystem is None and inside and not named_files:
        raise ConfigError(
            describe(
                "out",
                out_s,
                f"a folder outside the input folder {inp.where!r}",
                "pass an out folder beside the input, not inside it",
            )
        )
    if not store.is_dir(out_s) and store.stat(out_s) is not None:
        raise ConfigError(describe("out", out_s, "a folder (or a path where one can be made)", "pass a folder path"))
    prog = Progress.load(store, out_s) if store.is_dir(out_s) else None
    if prog is None:
        listing = _listing(store, out_s)
        if listing and all(_killed_write(rel, PROGRESS_NAME) for rel in listing):
            for rel in listing:  # killed while writing the first record: nothing else was written
                _remove(store, join(out_s, rel))
            listing = []
        if MANIFEST_NAME in listing:
            done = DatasetVersion.load(out_s, filesystem)
            if done.lineage != lineage:
                raise _other_lineage(out_s, done.lineage, lineage)
            done.verify("size")
            res = PrepareResult(
                done,
                done.num_records,
                inp.version().get("records"),
                _tokens(done),
                len(done.shards),
                time.perf_counter() - t0,
                len(pieces),
                already_prepared=True,
            )
            if progress:
                tqdm.write(res.summary(), file=sys.stderr)  # progress=True: beside its bar
            return res
        if listing:
            raise _other_lineage(out_s, None, lineage)
        if store.filesystem is None:
            try:
                os.makedirs(out_s, exist_ok=True)
            except OSError as exc:  # a file on the way, no space, read-only: a parameter error, not a crash
                raise write_error(out_s, exc) from None
        else:
            store.filesystem.create_dir(out_s, recursive=True)
        prog = Progress(lineage, len(pieces))
        prog.save(store, out_s)  # first: from now on the folder is recognisably this run's
    elif prog.lineage != lineage:
        raise _other_lineage(out_s, prog.lineage, lineage)
    else:
        expected = set(names) | {PROGRESS_NAME, MANIFEST_NAME}
        for rel in _listing(store, out_s):
            if _killed_write(rel, "shard-", PROGRESS_NAME, MANIFEST_NAME):
                _remove(store, join(out_s, rel))  # a temporary file of a killed write (shard, record, manifest)
            elif rel not in expected:
                raise ConfigError(
                    describe(
                        "out",
                        out_s,
                        f"only this run's files (found {rel!r})",
                        f"move {rel!r} out of the folder, then re-run",
                    )
                )
        prog.done = prog.verified(store, out_s)
        prog.save(store, out_s)
    reused = len(prog.done)

    known = inp.version().get("records")
    bar = _Bar(known, sum(r.records_in for r in prog.done.values()), progress)

    def on_done(result: PieceResult) -> None:
        prog.done[result.index] = result
        prog.save(store, out_s)

    jobs = [
        PieceJob(inp, fn, filters, p, out_s, names[p.index], store.filesystem)
        for p in pieces
        if p.index not in prog.done
    ]
    try:
        run_jobs(jobs, eng, num_proc or _cpus(), on_done, bar)
    finally:
        bar.close()

    results = [prog.done[i] for i in range(len(pieces))]
    written = [r for r in results if r.name is not None]
    if not written:
        raise ConfigError(
            describe(
                "min_tokens/max_tokens/drop_empty",
                filters.to_dict(),
                "filters that keep at least one document",
                "loosen the filters",
            )
        )
    _same_schema(store, out_s, [r.name for r in written if r.name is not None], fn)
    version_ = pin(out_s, lineage=lineage, filesystem=filesystem)
    got = [(s.path, s.content_hash) for s in version_.shards]
    want = [(r.name, r.content_hash) for r in written]
    if got != want:
        raise DatasetIntegrityError(
            describe(
                "out",
                out_s,
                f"exactly the shards this run wrote ({len(want)})",
                f"delete {out_s!r} and prepare again (pinned {len(got)} shard(s))",
            )
        )
    _remove(store, join(out_s, PROGRESS_NAME))
    res = PrepareResult(
        version_,
        version_.num_records,
        sum(r.records_in for r in results),
        sum(r.tokens for r in results),
        len(written),
        time.perf_counter() - t0,
        reused,
    )
    if progress:
        tqdm.write(res.summary(), file=sys.stderr)  # progress=True: beside its bar
    return res
