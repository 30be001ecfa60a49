"""``rd.prepare``: raw text (or any records) to pinned token shards, deterministic and resumable.

Modules, one concept each: :mod:`.inputs` (what is read, its version, the planned pieces),
:mod:`.functions` (the tokenizer or ``map_fn`` and its fingerprint), :mod:`.tasks` (one piece:
transform, filter, write one shard atomically), :mod:`.progress` (the restart record),
:mod:`.engines` (process pool or Ray), :mod:`.api` (:func:`prepare`: lineage, the output
folder's states, pinning). The guide: docs/prepare.md.
"""

from resumable_data.sources.prepare.api import DEFAULT_BYTES_PER_SHARD, PrepareResult, prepare
from resumable_data.sources.prepare.engines import Engine
from resumable_data.sources.prepare.functions import TOKENS

__all__ = ["DEFAULT_BYTES_PER_SHARD", "TOKENS", "Engine", "PrepareResult", "prepare"]
