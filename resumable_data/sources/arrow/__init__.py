"""The concepts :class:`~resumable_data.sources.arrow_shards.ArrowShards` is built from, one module each.

- :mod:`.resolve`: what a path, a file list, a URI or a ``DatasetVersion`` names (store, version,
  root, shard paths), and what happens to shards without a manifest (:class:`~.resolve.UnpinnedPolicy`).
- :mod:`.record_ids`: record ids checked against ``[0, N)`` and located in the unit index.
- :mod:`.pickled`: the JSON-shaped state a pickled source carries (no Arrow data).

The class itself (the unit index, validation once, identity checks around reads, the concatenated
view) stays in :mod:`resumable_data.sources.arrow_shards`; the units decoded when read, their ranged
reads and the read-ahead hooks are :mod:`resumable_data.sources.unit_reads`.
"""
