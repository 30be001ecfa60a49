"""Version-1 per-sample seeding continuation: a state written by rd before seeding version 2
(``tests/golden/seeding_v1.json``, made by ``tests/golden/seeding_v1_gen.py`` on 1bfe46b) must
deliver exactly the batches that rd delivered after it, at 0 and 2 workers (every batch, in order)."""

from __future__ import annotations

import json

import pytest

from tests.golden import seeding_v1_gen as g


@pytest.mark.parametrize("workers", [0, 2])
def test_version1_state_continues_bit_exact(workers):
    golden = json.loads(g.PATH.read_text())
    assert golden["state"].get("schema_version") in (1, 2, 3) and len(golden["batches"]) == g.AFTER
    dl = g.loader(workers)
    dl.load_state_dict(golden["state"])
    it = iter(dl)
    got = json.loads(json.dumps([next(it) for _ in range(g.AFTER)]))
    assert got == golden["batches"]
