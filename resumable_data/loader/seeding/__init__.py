"""Per-sample seeding of the global generators (``random``, ``numpy.random``, torch's CPU one).

Modules, bottom first: :mod:`.draw_free` (datasets that draw nothing: not seeded), :mod:`.sample_seeding` (the ``seed_per_sample`` modes, the seeding
versions and their saved record; torch-free), :mod:`.mt19937` (every key's seeded generator
states in one compiled call), :mod:`.torch_state` (torch's serialized generator state),
:mod:`.seed_copy` (the reference route and the row buffers), :mod:`.raw_torch`, :mod:`.raw_memory`,
:mod:`.raw_states` and :mod:`.raw_seeding` (the only modules that read and write the generators'
memory: torch's region probed, the layout of all three, save/restore and the watches, the
per-sample copies)
and :mod:`.global_rng` (the seeder and the save/restore guard the fetch loop uses). The sample context
users call is :mod:`resumable_data.loader.context`.
"""
