"""Per-sample seeding of the global generators (``random``, ``numpy.random``, torch's CPU one).

Modules, bottom first: :mod:`.draw_free` (datasets that draw nothing: not seeded), :mod:`.sample_seeding` (the ``seed_per_sample`` modes, the seeding
versions and their saved record; torch-free), :mod:`.mt19937` (every key's seeded generator
states in one compiled call), :mod:`.torch_state` (torch's serialized generator state),
:mod:`.seed_copy` (the reference route and the row buffers), :mod:`.raw_memory` (the one module
that reads and writes the generators' memory: the probes, the per-sample copies, save/restore)
and :mod:`.global_rng` (the seeder and the save/restore guard the fetch loop uses). The sample context
users call is :mod:`resumable_data.loader.context`.
"""
