"""The loader's :class:`StreamOrder` implementations (``loader/order.py``, ``loader/mixture/order.py``).

Every order answers the three record questions alike: ``records(positions)`` for any positions,
``span_records(start, stop)`` for the consecutive positions (served from runs: what a read
planner asks for future steps) and ``batch_records`` for one rank's share; these tests check the
three against each other and against the definition (the plan, the sampler, the mixture's
concatenated ids), across seeks, epochs and a mixture's rebase, and that a pickled order (what a
worker gets) answers the same without the caller's runs or counters.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import resumable_data as rd
from resumable_data.loader.order import PlanOrder, SamplerOrder, StreamOrder
from resumable_data.loader.samplers import PositionalRandomSampler
from resumable_data.plan import OrderSpec, Plan, Sharding, ShardingPolicy, Tail
from resumable_data.plan.mixture import Rebase
from tests.mixture_data import WEIGHTS, open_sources, write_sources

SPANS = [(0, 6), (6, 66), (5000, 5012), (13, 14), (4090, 4102), (20_000, 20_300), (0, 3)]  # seeks, a run edge, epochs


def plan_order() -> PlanOrder:
    return PlanOrder(Plan(157, 8, "v" * 32, 3, OrderSpec("global"), Tail.PARTIAL))


def sampler_order() -> SamplerOrder:
    return SamplerOrder(PositionalRandomSampler(157, 200, replacement=True).with_seed(5), 200)


@pytest.fixture(scope="module")
def mixture_loader(tmp_path_factory):
    mix = rd.Mixture(open_sources(write_sources(tmp_path_factory.mktemp("order"))), weights=WEIGHTS, block_size=16)
    return rd.DataLoader(mix, batch_size=4, seed=11)


def check_spans(order: StreamOrder, definition) -> None:
    for start, stop in SPANS:
        positions = np.arange(start, stop, dtype=np.int64)
        want = definition(positions)
        assert np.array_equal(order.span_records(start, stop), want), (start, stop)
        assert np.array_equal(order.records(positions), want)
        for world in (w for w in (2, 3) if (stop - start) % w == 0):  # a global batch splits evenly
            for rank in range(world):
                local = Sharding(world, rank, ShardingPolicy.STRIDED).local_positions(start, stop)
                assert np.array_equal(order.batch_records(start, stop, local), want[local - start]), (world, rank)
        again = pickle.loads(pickle.dumps(order))  # a worker's copy: its own runs, the same answers
        assert np.array_equal(again.span_records(start, stop), want)


def test_the_plan_order_is_the_plans_records():
    order = plan_order()
    check_spans(order, order.plan.records)
    assert order.fingerprint() is None and order.state_section() is None and order.document_order() is None


def test_a_sampler_order_is_the_samplers_indices_per_epoch():
    order = sampler_order()
    sampler = order.sampler

    def definition(positions):
        return np.array([int(sampler.indices(int(p) // 200, np.array([int(p) % 200]))[0]) for p in positions])

    check_spans(order, definition)
    assert order.fingerprint() == sampler.fingerprint() and order.state_section() is None
    assert order.document_order() is order and order.index_key() == "{}"


def test_the_mixture_order_is_the_mixtures_concatenated_ids_before_and_after_a_rebase(mixture_loader):
    order = mixture_loader.config.order
    plan = order.sampler.plan
    check_spans(order, plan.concatenated_ids)
    assert order.state_section() == plan.section() and order.state_section().to_dict() == plan.to_dict() and order.fingerprint().startswith("rd.Mixture(")
    rebase = Rebase(4100, tuple(int(c) for c in plan.counts_before(4100)))
    order.move_to(rebase)
    try:
        assert order.point() == rebase and order.state_section().rebase == rebase
        moved = order.sampler.plan
        assert moved is not plan
        # at or after the rebase: the plan's direct path (a run would start before it) and the runs' path
        for start, stop in ((4100, 4200), (5000, 5013), (20_000, 20_300), (4100, 4101)):
            want = moved.concatenated_ids(np.arange(start, stop, dtype=np.int64))
            assert np.array_equal(order.span_records(start, stop), want), (start, stop)
            assert np.array_equal(pickle.loads(pickle.dumps(order)).span_records(start, stop), want)
    finally:
        order.move_to(None)
    assert order.point() is None and order.sampler.plan.rebase is None
    check_spans(order, order.sampler.plan.concatenated_ids)


@pytest.mark.parametrize("make", [plan_order, sampler_order])
def test_plain_orders_have_no_point_no_section_and_no_progress(make):
    order = make()
    assert order.point() is None
    order.move_to(None)
    with pytest.raises(rd.ConfigError, match="point"):
        order.move_to(("not", "a", "rebase"))
    with pytest.raises(rd.ConfigError, match="rd.Mixture"):
        order.progress(None, None, {})


def test_a_plan_order_over_read_units_answers_with_the_plans_units():
    """PlanOrder.epoch_records called the order function without the plan's units: a window
    shuffle over read units raised rd.UsageError there (and a pickled order must keep them)."""
    from resumable_data.plan import ReadUnits, WindowBlocks

    units = ReadUnits.of([0, 20, 40, 45, 60, 100, 120, 140], 157)
    plan = Plan(157, 8, "v" * 32, 3, OrderSpec("window", 40, blocks=WindowBlocks.READ_UNITS), units=units)
    offsets = np.arange(157, dtype=np.int64)
    for order in (PlanOrder(plan), pickle.loads(pickle.dumps(PlanOrder(plan)))):
        assert np.array_equal(order.epoch_records(2, offsets), plan.epoch_records(2, offsets))
        assert np.array_equal(order.records(offsets + 2 * 157), plan.epoch_records(2, offsets))
