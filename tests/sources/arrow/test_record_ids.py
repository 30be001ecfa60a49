"""resumable_data.sources.arrow.record_ids: ids checked against [0, N) and located in the unit index."""

from __future__ import annotations

import numpy as np
import pytest

import resumable_data as rd
from resumable_data.sources.arrow.record_ids import RecordIdError, locate, record_index


@pytest.mark.parametrize(("index", "n", "want"), [(0, 5, 0), (4, 5, 4), (-1, 5, 4), (-5, 5, 0), (np.int64(3), 5, 3)])
def test_record_index_counts_negative_ids_from_the_end(index, n, want):
    assert record_index(index, n) == want


@pytest.mark.parametrize("index", [5, -6, 100])
def test_record_index_out_of_range_is_an_rd_index_error(index):
    with pytest.raises(RecordIdError) as exc:
        record_index(index, 5)
    assert isinstance(exc.value, IndexError) and isinstance(exc.value, rd.ResumableDataError)
    assert str(index) in str(exc.value)


@pytest.mark.parametrize("index", [1.5, "3", None])
def test_record_index_of_a_non_integer_is_an_rd_type_error(index):
    with pytest.raises(rd.ConfigTypeError):
        record_index(index, 5)


def test_locate_gives_the_unit_and_the_row_in_it():
    starts = np.array([0, 3, 3, 7], dtype=np.int64)  # unit 1 holds no rows in this toy index
    unit, row = locate(starts, np.array([0, 2, 3, 6, 7, 9], dtype=np.int64))
    assert unit.tolist() == [0, 0, 2, 2, 3, 3]
    assert row.tolist() == [0, 2, 0, 3, 0, 2]
