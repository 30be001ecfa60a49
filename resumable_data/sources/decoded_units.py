"""Decoded units kept per process: a least-recently-used map bounded by bytes.

What. A unit that is not memory-mapped (a Parquet row group; a record batch read from a remote
store or from the read-ahead cache) is decoded into an Arrow record batch when a batch first
needs it. A batch of a shuffled stream needs many units at once: a window shuffle of 10,000
records over 1,024-row units touches about 10 of them per batch (22 when its blocks are records,
not units). A cache of a fixed number of units smaller than that decodes every unit again for
every batch (Parquet with the window shuffle ran at 1.5-3k samples/s with 8 units kept); this
one keeps the units of the last batches up to a byte budget instead.

Algorithm. An ordered map from ``(shard, unit index)`` to the decoded batch; a hit moves the
entry to the end; an insert adds the batch's buffer bytes and evicts from the front until the
total fits ``budget`` (the newest entry is always kept, whatever its size).

Guarantee. Only decoding is saved: a batch here is the decode of bytes whose identity was checked
when they were read, and the map is per process (never shared, never written to disk).

Cost. O(1) per lookup and insert; memory at most ``budget`` plus one unit per process.
"""

from __future__ import annotations

from collections import OrderedDict

import pyarrow as pa

__all__ = ["DEFAULT_DECODED_BYTES", "DecodedUnits"]

#: Decoded bytes kept per process (local Parquet, remote units, units read ahead). The same with
#: read-ahead: its shared cache holds the fetched bytes, but decoding a Parquet row group again
#: costs as much as without it (a global shuffle over 64 row groups kept in 64 MiB: 953 samples/s).
DEFAULT_DECODED_BYTES = 256 << 20


class DecodedUnits:
    """The per-process map of decoded units, bounded by ``budget`` bytes."""

    def __init__(self, budget: int = DEFAULT_DECODED_BYTES) -> None:
        self.budget = budget
        self.nbytes = 0
        self._map: OrderedDict[tuple[int, int], tuple[pa.RecordBatch, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._map)

    def get(self, key: tuple[int, int]) -> pa.RecordBatch | None:
        hit = self._map.get(key)
        if hit is None:
            return None
        self._map.move_to_end(key)
        return hit[0]

    def put(self, key: tuple[int, int], batch: pa.RecordBatch) -> None:
        size = batch.get_total_buffer_size()
        old = self._map.pop(key, None)
        if old is not None:
            self.nbytes -= old[1]
        self._map[key] = (batch, size)
        self.nbytes += size
        while self.nbytes > self.budget and len(self._map) > 1:
            _, (_, freed) = self._map.popitem(last=False)
            self.nbytes -= freed

    def clear(self, budget: int | None = None) -> None:
        """Drop every unit (and set a new ``budget`` if given)."""
        self._map.clear()
        self.nbytes = 0
        if budget is not None:
            self.budget = budget
