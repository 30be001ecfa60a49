"""The concepts :class:`~resumable_data.sources.arrow_shards.ArrowShards` is built from, one module each.

- :mod:`.resolve`: what a path, a file list, a URI or a ``DatasetVersion`` names (store, version,
  root, shard paths), and what happens to shards without a manifest (:class:`~.resolve.UnpinnedPolicy`).
- :mod:`.record_ids`: record ids (one, or a batch) checked against ``[0, N)`` and located in the
  unit index.
- :mod:`.pickled`: the JSON-shaped state a pickled source carries (no Arrow data).
- :mod:`.unit_table`: the units of the open shards and the arrays a read looks them up by (one
  source's, or several joined for ``rd.Mixture``'s view).
- :mod:`.unit_validation`: every zero-copy record batch validated once, before its first use.
- :mod:`.read_guard`: the identity checks of the mapped shards before and after every read.
- :mod:`.gathering`: which column plans serve a batch of located ids, and the per-unit fallback.

The class itself (construction, the closed state, the read paths over these parts, the
concatenated view) stays in :mod:`resumable_data.sources.arrow_shards`; the units decoded when
read, their ranged reads and the read-ahead hooks are :mod:`resumable_data.sources.unit_reads`.
"""
