"""RecordRuns serves Plan.records from a run of upcoming positions: same ids, whatever was asked before."""

import functools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from resumable_data.plan import OrderSpec, Plan, sample_keys
from resumable_data.plan.record_runs import RUN, RecordRuns

PLANS = [Plan(10_007, 16, "runs-v1", seed=3, order=OrderSpec("global"), tail="partial"),
         Plan(5_000, 12, "runs-v1", seed=4, order=OrderSpec("window", 64, 8), tail="wrap"),
         Plan(300, 7, "runs-v1", seed=5, order=OrderSpec("global"), tail="drop")]


@settings(derandomize=True, max_examples=60, deadline=None)
@given(st.sampled_from(range(len(PLANS))),
       st.lists(st.tuples(st.integers(0, 5 * RUN), st.integers(0, RUN // 2)), min_size=1, max_size=30))
def test_spans_equal_plan_records_in_any_order(which, spans):
    """Spans inside a run, across a run's end, across epochs, backwards (a seek) and longer than
    RUN // 4 (computed directly) all give Plan.records of the same positions."""
    plan = PLANS[which]
    runs = RecordRuns(plan.records)
    for start, size in spans:
        got = runs.span(start, start + size)
        assert got.dtype == np.int64
        assert got.tolist() == plan.records(np.arange(start, start + size, dtype=np.int64)).tolist()


def test_sample_key_runs_equal_sample_keys():
    fn = functools.partial(sample_keys, "runs-v1", 9)
    runs = RecordRuns(fn)
    for start, stop in ((0, 16), (16, 32), (RUN - 5, RUN + 11), (3, 7), (10 * RUN, 10 * RUN + 2000)):
        assert runs.span(start, stop).tolist() == sample_keys("runs-v1", 9, np.arange(start, stop)).tolist()


def test_a_returned_span_is_a_copy_and_clear_drops_the_run():
    plan = PLANS[0]
    runs = RecordRuns(plan.records)
    first = runs.span(0, 16)
    first[:] = -1  # a caller changing its array must not reach the held run
    assert runs.span(0, 16).tolist() == plan.records(np.arange(16)).tolist()
    runs.clear()
    assert runs.span(RUN - 8, RUN + 8).tolist() == plan.records(np.arange(RUN - 8, RUN + 8)).tolist()


@settings(derandomize=True, max_examples=40, deadline=None)
@given(st.sampled_from([64, 1000, 4 * RUN]),
       st.lists(st.tuples(st.integers(0, 20 * RUN), st.integers(0, RUN)), min_size=1, max_size=20))
def test_a_ranged_function_and_another_run_length_give_the_same_spans(run, spans):
    """``ranged(start, stop)`` stands in for ``fn(arange(start, stop))`` and runs of ``run``
    positions in place of ``RUN``: the spans are ``fn`` of the same positions."""
    plan = PLANS[0]
    asked = []

    def ranged(start, stop):
        asked.append((start, stop))
        return plan.records(np.arange(start, stop, dtype=np.int64))

    runs = RecordRuns(plan.records, ranged=ranged, run=run)
    held = None  # the run the RecordRuns holds, as this test follows it
    for start, size in spans:
        before = len(asked)
        assert runs.span(start, start + size).tolist() == plan.records(np.arange(start, start + size)).tolist()
        if held is not None and held[0] <= start and start + size <= held[1]:
            assert len(asked) == before  # served from the held run
        elif size > run // 4:
            assert asked[before:] == [(start, start + size)]  # computed directly, the held run kept
        else:
            (a, b), = asked[before:]
            going_on = held is not None and held[0] <= start <= held[1]
            assert (a, b) == ((start, max(start + run, start + size)) if going_on else
                              (start - start % RUN, max(start - start % RUN + RUN, start + size)))
            held = (a, b)


def test_the_first_run_is_short_and_the_stream_going_on_gets_long_runs():
    plan = PLANS[0]
    asked = []
    runs = RecordRuns(plan.records, ranged=lambda a, b: asked.append((a, b)) or plan.records(np.arange(a, b)),
                      run=4 * RUN)
    for k in range(0, 6 * RUN, 256):
        runs.span(k, k + 256)
    assert asked == [(0, RUN), (RUN, 5 * RUN), (5 * RUN, 9 * RUN)]
