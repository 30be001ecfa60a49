"""Streams: how global steps map to epochs and which positions a step covers.

* :class:`RecordStream`: a position is a record; epochs in closed form from the plan
  (``epoch = step // steps_per_epoch`` for a fixed batch; under a batch schedule, the
  ``continuous`` tail or a batch origin, the epoch of the step's first position, see
  :class:`~resumable_data.plan.Plan`).
* :class:`PackedStream`: a position is a packed sequence; an epoch's sequence count comes from
  its packing index (:mod:`resumable_data.plan.packing`), which differs between epochs when
  the order shuffles documents across windows. The loader keeps a ledger of epoch start steps
  (seeded from the state), so locating a step costs one index build (cached in memory and on
  disk, keyed by everything it depends on), never a replay.

Both give the in-epoch positions of a step: ``[k*G, (k+1)*G)`` in the epoch's position space,
with the epoch tail dropped, wrapped or short as the plan's :class:`~resumable_data.Tail` says.
"""

from __future__ import annotations

import enum
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import xxhash

from resumable_data import _io
from resumable_data._cache import cache_dir
from resumable_data.errors import ConfigError, UsageError, describe
from resumable_data.loader.ledger import EpochStream
from resumable_data.loader.order import DocumentOrder
from resumable_data.loader.state import LoaderState
from resumable_data.plan import HasReadUnits, Plan, ReadUnits, Sharding, Tail, WindowBlocks
from resumable_data.plan.packing import Packing, window_counts

__all__ = [
    "PackedIndex",
    "PackedStream",
    "RecordStream",
    "StepInfo",
    "StepUnit",
    "cache_dir",
    "describe_step",
    "make_stream",
    "stream_from_state",
]

_INDEX_CHUNK = 1 << 20  # documents per chunk when building an index (bounds transient memory)


def _steps(count: int, g: int, tail: Tail) -> int:
    return count // g if tail is Tail.DROP else -(-count // g)


class RecordStream:
    """Unpacked: positions are records; closed-form epochs."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan

    def steps_in_epoch(self, epoch: int) -> int:
        return self.plan.steps_in_epoch(epoch)

    def locate(self, step: int, ledger: dict[int, int]) -> tuple[int, int]:
        epoch = self.plan.epoch_of_step(step)
        return epoch, self.plan.epoch_first_step(epoch)

    def span(self, step: int) -> tuple[int, int]:
        return self.plan.step_span(step)

    def with_plan(self, plan: Plan) -> RecordStream:
        return self if plan == self.plan else RecordStream(plan)

    def forget(self) -> None:
        """Nothing to drop: a record stream memoizes nothing that depends on the order."""


class PackedIndex:
    """One epoch's packing index: the cumulative sequence count of its windows."""

    def __init__(self, cumulative: np.ndarray) -> None:
        self.cumulative = cumulative  # int64, len = windows + 1

    @property
    def num_sequences(self) -> int:
        return int(self.cumulative[-1])

    def locate(self, sequences: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(window, sequence within the window) of in-epoch sequence ids."""
        w = np.searchsorted(self.cumulative, sequences, side="right") - 1
        return w, sequences - self.cumulative[w]


class PackedStream:
    """Packed: positions are sequences; epochs differ in length; indexes cached per epoch."""

    def __init__(
        self,
        plan: Plan,
        spec: Packing,
        lengths: np.ndarray,
        *,
        pinned: bool,
        progress: bool = True,
        order: DocumentOrder | None = None,
    ) -> None:
        self.plan = plan
        #: What orders the documents instead of the plan (an rd.Mixture's sampler:
        #: :meth:`~.order.StreamOrder.document_order`), or None.
        self.order = order
        self.spec = spec
        self.lengths = lengths
        self.pinned = pinned
        self.progress = progress
        self._memo: OrderedDict[int, PackedIndex] = OrderedDict()
        self._windows: OrderedDict[tuple[int, int], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        d = dict(self.__dict__)
        d["_memo"] = OrderedDict()
        d["_windows"] = OrderedDict()
        del d["_lock"]
        return d

    def __setstate__(self, d: dict) -> None:
        self.__dict__.update(d)
        self._lock = threading.Lock()

    # -- the epoch index ----------------------------------------------------------------------------
    def _key(self, epoch: int) -> str:
        parts = [
            self.plan.version_hash,
            str(self.plan.seed),
            repr(sorted(self.plan.order.to_dict().items())),
            repr(sorted(self.spec.to_dict().items())),
            str(self.plan.num_records),
            str(epoch),
            "packidx/1",
        ]
        if self.order is not None:  # a packed mixture: its section, or its schedule's runs
            parts += [self.order.fingerprint(), self.order.index_key()]
        return xxhash.xxh3_128_hexdigest("|".join(parts).encode())

    def window_docs(self, epoch: int, window: int) -> np.ndarray:
        """Record ids of the documents of ``window`` in ``epoch``, in plan order (memoized: a
        window serves many consecutive batches)."""
        key = (epoch, window)
        hit = self._windows.get(key)
        if hit is None:
            w = self.spec.window
            stop = min((window + 1) * w, self.plan.num_records)
            offsets = np.arange(window * w, stop, dtype=np.int64)
            hit = self._records(epoch, offsets)
            self._windows[key] = hit
            while len(self._windows) > 8:
                self._windows.popitem(last=False)
        return hit

    def _records(self, epoch: int, offsets: np.ndarray) -> np.ndarray:
        if self.order is not None:
            return np.asarray(self.order.indices(epoch, offsets), dtype=np.int64)
        return self.plan.epoch_records(epoch, offsets)

    def _build(self, epoch: int) -> np.ndarray:
        n, w = self.plan.num_records, self.spec.window
        chunk = max(w, (_INDEX_CHUNK // w) * w)
        counts = []
        bar = None
        if self.progress:
            from tqdm.auto import tqdm

            bar = tqdm(
                total=n, unit="doc", desc=f"packing index, epoch {epoch}", delay=1.0, leave=False, disable=None
            )  # None: no bar when stderr is not a terminal (logs)
        for start in range(0, n, chunk):
            offsets = np.arange(start, min(start + chunk, n), dtype=np.int64)
            records = self._records(epoch, offsets)
            counts.append(window_counts(self.spec.doc_lengths(self.lengths[records]), self.spec))
            if bar is not None:
                bar.update(len(offsets))
        if bar is not None:
            bar.close()
        return np.concatenate([[0], np.cumsum(np.concatenate(counts))]).astype(np.int64)

    def index(self, epoch: int) -> PackedIndex:
        with self._lock:
            hit = self._memo.get(epoch)
            if hit is not None:
                self._memo.move_to_end(epoch)
                return hit
        path = cache_dir() / "packing" / f"{self._key(epoch)}.npy" if self.pinned else None
        cumulative = None
        if path is not None and path.exists():
            try:  # a regular file only (a FIFO would block): anything else is rebuilt and replaced
                with os.fdopen(_io.open_regular(path), "rb") as f:
                    cumulative = np.load(f, allow_pickle=False)
            except (OSError, ValueError):  # NotRegularFileError is a ValueError (rd.ConfigError)
                cumulative = None
            if cumulative is not None and (cumulative.ndim != 1 or cumulative.dtype != np.int64):
                cumulative = None
        if cumulative is None:
            cumulative = self._build(epoch)
            if path is not None:
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    tmp = path.with_suffix(f".tmp{os.getpid()}.npy")
                    np.save(tmp, cumulative, allow_pickle=False)
                    os.replace(tmp, path)
                except OSError:
                    pass  # a read-only cache only costs a rebuild
        idx = PackedIndex(cumulative)
        with self._lock:
            self._memo[epoch] = idx
            while len(self._memo) > 4:
                self._memo.popitem(last=False)
        return idx

    # -- steps --------------------------------------------------------------------------------------
    def span(self, step: int) -> None:
        return None  # packed steps are located in their epoch's index (epoch_positions)

    def with_order(self, order: DocumentOrder | None) -> PackedStream:
        """This stream ordered by ``order`` (an ``rd.Mixture`` sampler after a rebase): same
        documents and spec, its own (empty) index memo."""
        if order is self.order:
            return self
        return PackedStream(self.plan, self.spec, self.lengths, pinned=self.pinned, progress=self.progress, order=order)

    def forget(self) -> None:
        """Drop the memoized indexes and windows (the order changed under this stream)."""
        with self._lock:
            self._memo.clear()
            self._windows.clear()

    def with_plan(self, plan: Plan) -> PackedStream:
        if plan != self.plan:
            raise ConfigError(
                describe(
                    "plan",
                    plan.to_dict(),
                    f"the packed stream's own plan {self.plan.to_dict()} (a packed stream takes no batch origin)",
                    "resume with the saved batch",
                )
            )
        return self

    def steps_in_epoch(self, epoch: int) -> int:
        count = self.index(epoch).num_sequences
        steps = _steps(count, self.plan.global_batch, self.plan.tail)
        if steps == 0:
            raise ConfigError(
                describe(
                    "batch_size",
                    self.plan.global_batch,
                    f"at most the {count} packed sequences of epoch {epoch}",
                    "use a smaller batch_size, drop_last=False, a smaller seq_len or more data",
                )
            )
        return steps

    def locate(self, step: int, ledger: dict[int, int]) -> tuple[int, int]:
        known = [e for e, first in ledger.items() if first <= step]
        epoch = max(known)
        first = ledger[epoch]
        while True:
            n = self.steps_in_epoch(epoch)
            if step < first + n:
                return epoch, first
            first += n
            epoch += 1
            ledger[epoch] = first

    def epoch_positions(self, epoch: int, k: int) -> tuple[int, int, int]:
        """In-epoch sequence span ``[start, stop)`` of the epoch's step ``k``, and the epoch's count."""
        count = self.index(epoch).num_sequences
        g = self.plan.global_batch
        start = k * g
        stop = start + g if self.plan.tail is not Tail.PARTIAL else min(start + g, count)
        return start, stop, count


def make_stream(
    plan: Plan, packing: Packing | None, lengths: np.ndarray | None, *, pinned: bool, order: DocumentOrder | None = None
) -> RecordStream | PackedStream:
    """A loader's stream: packed sequences when ``packing`` is given (``lengths``: every document's
    token length; ``order``: what orders the documents, None for the plan), else records."""
    if packing is None:
        return RecordStream(plan)
    if lengths is None:
        raise UsageError(
            describe("lengths", None, "every document's token length when packing", "pass LoaderConfig.lengths")
        )
    return PackedStream(plan, packing, lengths, pinned=pinned, order=order)


class StepUnit(str, enum.Enum):
    """What a step's positions are: records, or packed sequences (of documents)."""

    RECORD = "record"
    PACKED_SEQUENCE = "packed sequence"


@dataclass(frozen=True)
class StepInfo:
    """What a step delivers, for people (``inspect``) and oracles: where it sits and its records.

    ``span`` is the global batch's positions ``[start, stop)``: stream positions for records,
    in-epoch sequence ids for packed sequences. ``records`` are this rank's record ids in delivery
    order (for packed sequences: the documents they hold, each once); ``None`` when unknown.
    """

    step: int
    epoch: int | None
    step_in_epoch: int | None
    steps_in_epoch: int | None
    unit: StepUnit
    span: tuple[int, int] | None
    records: np.ndarray | None


def describe_step(stream: EpochStream, ledger: dict[int, int], sharding: Sharding, step: int) -> StepInfo:
    """The :class:`StepInfo` of ``step`` (pure: nothing is fetched but packed documents' lengths)."""
    if not isinstance(stream, (RecordStream, PackedStream)):
        raise UsageError(
            describe("stream", type(stream).__name__, "a RecordStream or a PackedStream", "pass make_stream's")
        )
    epoch, first = stream.locate(step, dict(ledger))
    steps = stream.steps_in_epoch(epoch)
    if isinstance(stream, RecordStream):
        start, stop = stream.plan.step_span(step)
        records = stream.plan.records(sharding.local_positions(start, stop))
        return StepInfo(step, epoch, step - first, steps, StepUnit.RECORD, (start, stop), records)
    from resumable_data.loader.packed import packed_documents  # packed.py imports this module's types

    start, stop, count = stream.epoch_positions(epoch, step - first)
    local = sharding.local_positions(start, stop) % count
    return StepInfo(
        step,
        epoch,
        step - first,
        steps,
        StepUnit.PACKED_SEQUENCE,
        (start, stop),
        packed_documents(stream, epoch, local),
    )


def stream_from_state(
    state: LoaderState, source: Any = None
) -> tuple[RecordStream | PackedStream | None, dict[int, int]]:
    """Rebuild the stream of a saved loader state (packed streams need the ``source``'s lengths, a
    window shuffle over read units its unit starts); returns ``(None, ledger)`` for such a state
    without a source."""
    epoch, first = state.epoch_base
    ledger = {0: 0, epoch: first}
    plan = state.plan
    if plan.order.blocks is WindowBlocks.READ_UNITS:
        if not isinstance(source, HasReadUnits):
            return None, ledger
        plan = replace(plan, units=ReadUnits.of(source.unit_starts(), plan.num_records))
    if state.packing is None:
        return RecordStream(plan), ledger
    if source is None:
        return None, ledger
    spec = state.packing
    return PackedStream(plan, spec, source.column_lengths(spec.tokens), pinned=state.pinned), ledger
