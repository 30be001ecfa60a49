"""Read-ahead for remote shards: the units the coming steps need, fetched before they are needed.

Modules: :mod:`.config` (:class:`ReadAhead`, the knobs), :mod:`.cache` (:class:`UnitCache`, the
shared cache directory every process of a rank reads units from), :mod:`.fetcher`
(:class:`Prefetcher`: one per rank, in the main process, plans from
:mod:`resumable_data.plan.reads` and fills the cache with a pool of ranged requests under a byte
budget, evicting by Belady's rule; the cache directories of killed processes are swept by
:func:`.cache.sweep_abandoned`), :mod:`.unit_choice` (:func:`choose_unit`: what
``rd.ReadUnit.AUTO`` resolves to, whole shards or record batches). ``docs/object-storage.md#reading-ahead``
has the design and the measured figures.
"""

from resumable_data.sources.read_ahead.cache import UnitCache
from resumable_data.sources.read_ahead.config import ReadAhead, ReadUnit
from resumable_data.sources.read_ahead.fetcher import Prefetcher, ReadAheadSource
from resumable_data.sources.read_ahead.unit_choice import UnitChoice, choose_unit

__all__ = ["Prefetcher", "ReadAhead", "ReadAheadSource", "ReadUnit", "UnitCache", "UnitChoice", "choose_unit"]
