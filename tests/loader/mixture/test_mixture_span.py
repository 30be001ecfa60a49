"""Resume of an unpacked mixture served by runs of upcoming positions (a span of blocks computed
in one call, the sources' counts at its end kept for the next span): a resumed loader at a
random step equals the uninterrupted one batch for batch, across block boundaries, source
epoch boundaries and the boundary of a run of positions, with and without token counts, from a
fresh loader and from the same loader seeking back and forth (no cached span may leak)."""

from __future__ import annotations

import numpy as np
import pytest

import resumable_data as rd
from resumable_data.loader.mixture.order import MIXTURE_RUN
from resumable_data.plan.record_runs import RUN  # a mixture's first run of positions; MIXTURE_RUN the later ones
from tests.loader.conftest import canon
from tests.mixture_data import SIZES, WEIGHTS, open_sources, source_of, write_sources

BATCH = 12
STEPS = (RUN + MIXTURE_RUN) // BATCH + 40  # past the first two runs of positions (~100 loader epochs of 191 positions)
H = 3


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return write_sources(tmp_path_factory.mktemp("mixspan"))


def make(dirs, block, tokens):
    mix = rd.Mixture(open_sources(dirs), weights=WEIGHTS, block_size=block)
    return rd.DataLoader(mix, batch_size=BATCH, seed=5, **({"token_column": "tokens"} if tokens else {}))


def run(loader, steps, ids=None):
    batches, states = [], [loader.state_dict()]
    while len(batches) < steps:
        for b in loader:
            batches.append(canon(b))
            if ids is not None:
                ids.append(b["id"].numpy().copy())
            states.append(loader.state_dict())
            if len(batches) == steps:
                break
    return batches, states


@pytest.mark.parametrize("tokens", [False, True], ids=["ids", "tokens"])
@pytest.mark.parametrize("block", [7, 16, 1024, 5000])  # unaligned to a run, aligned, 4 per run, larger than a run
def test_resume_at_random_steps_equals_the_uninterrupted_stream(dirs, block, tokens):
    ids = []
    batches, states = run(make(dirs, block, tokens), STEPS, ids)
    src = source_of(np.concatenate(ids))
    assert np.bincount(src, minlength=3)[2] > 3 * SIZES["math"]  # the small source ran through many epochs
    assert ("tokens" in states[-1]["mixture"]) is tokens and (states[-1]["counters"]["tokens"] > 0) is tokens
    rng = np.random.default_rng(block + tokens)
    ends = (RUN, MIXTURE_RUN, RUN + MIXTURE_RUN)  # run ends of the uninterrupted loader and of resumed ones
    near_run_end = [e // BATCH + d for e in ends for d in (-1, 0, 1)]  # the batches that cross them
    points = near_run_end + rng.choice(STEPS - H, size=7, replace=False).tolist()
    same = make(dirs, block, tokens)  # one loader seeking back and forth: its caches must not leak
    run(same, 2)
    for k in points:
        for loader in (make(dirs, block, tokens), same):
            loader.load_state_dict(states[k])
            got, got_states = run(loader, H)
            assert got == batches[k:k + H], f"resume at step {k}"
            assert got_states[-1]["counters"] == states[k + H]["counters"]
            assert got_states[-1].get("mixture") == states[k + H].get("mixture")


def test_a_span_starts_where_the_last_one_left_the_sources(dirs):
    """Spans in order, a span after a seek and a span on a fresh plan give the same records."""
    mix = rd.Mixture(open_sources(dirs), weights=WEIGHTS, block_size=16)
    plan = mix.sampler(5, BATCH).plan
    spans = [(0, RUN), (RUN, 2 * RUN), (7 * RUN + 3, 8 * RUN), (RUN, 2 * RUN), (2 * RUN, 3 * RUN)]
    for lo, hi in spans:
        fresh = mix.sampler(5, BATCH).plan
        want = np.concatenate([fresh.concatenated_ids(np.arange(p, min(p + 16, hi))) for p in range(lo, hi, 16)])
        assert plan.concatenated_ids(np.arange(lo, hi)).tolist() == want.tolist()  # span path vs one block at a time


@pytest.mark.parametrize("block", [16, 1000])
def test_a_query_longer_than_a_span_call_is_cut_into_chunks_with_the_same_records(dirs, block):
    """A query of many runs' worth of positions (starting mid-block, ending mid-block) goes
    through the span path chunk by chunk: the same records as one block at a time, and the
    round keys the plan keeps afterwards cover one chunk, not the whole query."""
    from resumable_data.plan.mixture.plan import _SPAN_POSITIONS

    mix = rd.Mixture(open_sources(dirs), weights=WEIGHTS, block_size=block)
    plan = mix.sampler(5, BATCH).plan
    lo, hi = 5, 5 * _SPAN_POSITIONS + 3 * block + 7
    fresh = mix.sampler(5, BATCH).plan
    first = lo - lo % block
    want = np.concatenate([fresh.concatenated_ids(np.arange(max(p, lo), min(p + block, hi)))
                           for p in range(first, hi, block)])
    assert plan.concatenated_ids(np.arange(lo, hi)).tolist() == want.tolist()
    chunk = max(1, _SPAN_POSITIONS // block) * block  # positions per compiled call
    rows = plan._keys.keys.shape[0]  # one per source epoch the last chunk touches, not the whole query's
    whole = sum((hi - lo) * WEIGHTS[k] / n for k, n in SIZES.items())  # the whole query's epochs
    assert rows <= sum(chunk * WEIGHTS[k] / n + 3 for k, n in SIZES.items()) < whole / 2, rows
