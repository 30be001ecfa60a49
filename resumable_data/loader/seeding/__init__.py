"""Per-sample seeding of the global generators (``random``, ``numpy.random``, torch's CPU one).

Modules, bottom first: :mod:`.sample_seeding` (the ``seed_per_sample`` modes, the seeding
versions and their saved record; torch-free), :mod:`.mt19937` (every key's seeded generator
states in one compiled call), :mod:`.torch_rng_memory` (torch's generator reached through its
probed memory), :mod:`.seed_copy` (a sample's precomputed bytes copied into the generators) and
:mod:`.global_rng` (the seeder and the save/restore guard the fetch loop uses). The sample context
users call is :mod:`resumable_data.loader.context`.
"""
