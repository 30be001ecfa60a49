"""resumable_data.sources.arrow.unit_validation: every zero-copy record batch validated once, before its first use."""

from __future__ import annotations

import threading

import numpy as np
import pyarrow as pa
import pytest

import resumable_data as rd
import resumable_data.sources.arrow.unit_validation as module
from resumable_data.sources.arrow.unit_validation import UnitValidation


def _table(n: int) -> pa.Table:
    return pa.table({"x": pa.array(np.arange(n, dtype=np.int64)), "s": pa.array([f"row{i}" for i in range(n)])})


def test_units_validate_each_unit_once_and_only_the_ones_asked():
    calls: list[int] = []
    v = UnitValidation(np.array([False, True, False, False]), calls.append)
    assert not v.all_valid
    v.units(np.array([2, 0, 2, 1], dtype=np.int64))
    v.units(np.array([0, 2], dtype=np.int64))
    v.ensure(2)
    assert calls == [0, 2] and v.valid.tolist() == [True, True, True, False] and not v.all_valid
    v.ensure(3)
    assert calls == [0, 2, 3] and v.all_valid


def test_a_failing_unit_stays_not_valid():
    def refuse(k: int) -> None:
        raise rd.DatasetIntegrityError(f"unit {k} is damaged")

    v = UnitValidation(np.array([False]), refuse)
    for _ in range(2):  # raised again at the next read
        with pytest.raises(rd.DatasetIntegrityError, match="unit 0"):
            v.units(np.array([0], dtype=np.int64))
    assert not v.valid[0] and not v.all_valid


def test_joined_starts_from_what_its_members_validated_and_has_the_member_validate():
    calls: list[tuple[str, int]] = []
    a = UnitValidation(np.array([True, False]), lambda k: calls.append(("a", k)))
    b = UnitValidation(np.array([False, False]), lambda k: calls.append(("b", k)))
    v = UnitValidation.joined([a, b])
    assert v.valid.tolist() == [True, False, False, False]
    v.units(np.array([3, 1], dtype=np.int64))
    assert sorted(calls) == [("a", 1), ("b", 1)] and a.valid[1] and b.valid[1] and not b.valid[0]
    b.ensure(0)  # validated by the member: the view asks it, which validated it already
    v.ensure(2)
    assert calls.count(("b", 0)) == 1 and v.all_valid


def test_two_threads_validating_one_unit_never_mark_another_validated(tmp_path, monkeypatch):
    """Two threads that both find unit 0 unvalidated both validate it; before, each also counted it,
    so the count of units left reached 0 with unit 1 never validated, and every later read skipped
    validation (a damaged unit 1 would be gathered by raw offsets)."""
    t = _table(20)
    with pa.OSFile(str(tmp_path / "a.arrow"), "wb") as f, pa.ipc.new_file(f, t.schema) as w:
        for b in t.to_batches(max_chunksize=10):
            w.write_batch(b)
    src = rd.ArrowShards(tmp_path, unpinned="allow")
    assert len(src._units) == 2 and not src._reads.loaded

    barrier = threading.Barrier(2, timeout=10)
    real = module.validate_batch

    def both_inside(batch, name, index):
        barrier.wait()  # both threads validate unit 0 at once
        return real(batch, name, index)

    monkeypatch.setattr(module, "validate_batch", both_inside)
    threads = [threading.Thread(target=src.take, args=([1, 2],)) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    monkeypatch.setattr(module, "validate_batch", real)
    assert bool(src._validation.valid[0]) and not src._validation.valid[1]
    assert not src._validation.all_valid  # unit 1 is still validated before its first use
