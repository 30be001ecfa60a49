"""Exactly-once accounting over many epochs with interrupts, reshards and skips: per epoch, the
multiset (``collections.Counter``) of delivered records is the epoch's, and so is the sequence.

* unpacked: every record once per epoch (``partial``), minus the dropped tail (``drop``), plus
  the wrapped first records (``wrap``); the sequence is the plan's order for the epoch.
* packed: every token of every document once per epoch as a real input, each document's tokens
  in document order.
* ``skip`` (an uncommitted range skipped at resume, or ``skip_steps``): exactly the records of the
  skipped steps are missing, and no step is ever delivered twice.
"""

from __future__ import annotations

import collections
import json
import random
import zlib

import numpy as np
import pytest

import resumable_data as rd
from tests.reliability._counts import SCALE, count
from tests.reliability._harness import Config, Ranks
from tests.reliability.conftest import N_RECORDS

EPOCHS = 12

UNPACKED = [
    Config("global", "none", "explicit", "repeat", 2, (1,), (0,), "partial"),
    Config("window8", "none", "explicit", "skip", 3, (1, 2), (0,), "wrap"),
    Config("sequential", "none", "auto", "repeat", 1, (1, 2), (0,), "drop"),
    Config("window32", "none", "explicit", "repeat", 3, (1, 2), (0,), "wrap"),
]


def cid(c):
    return f"{c.order}-{c.commit}-{c.on_uncommitted}-acc{c.accumulation}-world{''.join(map(str, c.worlds))}-{c.tail}"


def drive(config, source, total, seed, on_step, operator_skip):
    """Run ``total`` delivered steps with an interrupt about once an epoch (save, JSON, fresh
    loaders on a random world size, resume); ``on_step(step, batches)`` sees every delivery.
    Returns the skipped ranges of the final state."""
    rng = random.Random(seed)
    ranks = Ranks(config, source, config.worlds[0], 0)
    pending = 0
    skip_at = rng.randrange(total // 4, total // 2) if operator_skip else None
    while ranks.lead.cursor.delivered < total:
        if skip_at is not None and ranks.lead.cursor.delivered >= skip_at:
            start = ranks.lead.cursor.delivered + 1
            for ld in ranks.loaders:
                ld.skip_steps(start, start + 3, "operator skip")
            skip_at = None
        step, batches = ranks.next()
        on_step(step, batches)
        pending += 1
        if config.explicit and pending == config.accumulation:
            ranks.commit(applied=True)
            pending = 0
        if rng.random() < 1 / 17:
            state = json.loads(json.dumps(ranks.state()))
            ranks.close()
            ranks = Ranks(config, source, rng.choice(config.worlds), 0)
            uncommitted = state["cursor"]["delivered"] > state["cursor"]["committed"]
            ranks.load(state, config.on_uncommitted if uncommitted else None)
            pending = 0
            count("exactly_once_resumes")
    state = ranks.state()
    ranks.close()
    return [tuple(r) for r in state["skipped"]]


@pytest.mark.parametrize("config", UNPACKED, ids=cid)
@pytest.mark.parametrize("epochs", [EPOCHS, pytest.param(EPOCHS * SCALE, marks=pytest.mark.slow)])
def test_records_exactly_once_per_epoch(config, epochs, corpus):
    operator_skip = config.on_uncommitted == "skip"
    plan = config.make(corpus, 1, 0, 0).plan
    total = epochs * plan.steps_per_epoch
    delivered: dict[int, list[int]] = {}
    times = collections.Counter()

    def on_step(step, batches):
        ids = [i for b in batches for i in b["id"].tolist()]  # contiguous: rank 0's part first
        if step in delivered:
            assert ids == delivered[step], f"step {step} redelivered with other records"
        delivered[step] = ids
        times[step] += 1

    skipped = drive(config, corpus, total, zlib.crc32(cid(config).encode()) + epochs, on_step, operator_skip)
    # operator skips are never delivered; an uncommitted range skipped at resume was delivered
    # once (and is treated as consumed): neither is ever delivered again
    skipped_steps = {s for a, b, why in skipped if why == "operator skip" for s in range(a, b)}
    at_resume = {s for a, b, why in skipped if why != "operator skip" for s in range(a, b)}
    assert not skipped_steps & set(delivered) and at_resume <= set(delivered)
    if config.on_uncommitted == "skip":
        assert max(times.values()) == 1, "a step was delivered twice under skip"
        assert skipped_steps and at_resume, "the run should have skipped both ways"
    for e in range(epochs):
        steps = range(e * plan.steps_per_epoch, (e + 1) * plan.steps_per_epoch)
        got = [r for s in steps if s in delivered for r in delivered[s]]
        full = plan.records(np.arange(e * plan.epoch_len, (e + 1) * plan.epoch_len, dtype=np.int64)).tolist()
        missing = [r for s in steps if s in skipped_steps
                   for r in plan.records(np.arange(*plan.step_span(s), dtype=np.int64)).tolist()]
        expected = collections.Counter(full) - collections.Counter(missing)
        assert collections.Counter(got) == expected, f"epoch {e}: records not exactly once"
        kept = [r for s in steps if s not in skipped_steps
                for r in plan.records(np.arange(*plan.step_span(s), dtype=np.int64)).tolist()]
        assert got == kept, f"epoch {e}: order differs from the plan"
        if config.tail == "partial" and not missing:
            assert collections.Counter(got) == collections.Counter(range(N_RECORDS))
        elif config.tail == "wrap" and not missing:
            assert collections.Counter(got) == collections.Counter(range(N_RECORDS)) + collections.Counter(full[N_RECORDS:])
    assert set(delivered) | skipped_steps >= set(range(total))
    count("exactly_once_epochs", epochs)


PACKED = [("concat", "global", "explicit", 2), ("best_fit", "window8", "auto", 1), ("concat", "sequential", "auto", 1),
          ("best_fit", "global", "explicit", 3)]


@pytest.mark.parametrize("mode, order, commit, accumulation", PACKED)
@pytest.mark.parametrize("epochs", [6, pytest.param(6 * SCALE, marks=pytest.mark.slow)])
def test_tokens_exactly_once_per_epoch_when_packing(mode, order, commit, accumulation, epochs, corpus, monkeypatch):
    from tests.reliability import _harness

    monkeypatch.setitem(_harness.PACKINGS, "plain_" + mode, dict(seq_len=16, mode=mode, window=16))
    config = Config(order, "plain_" + mode, commit, "repeat", accumulation, (1,), (0,), "partial", 4)
    # epoch boundaries from an uninterrupted pass per epoch (packed epochs differ in length)
    ref = config.make(corpus, 1, 0, 0)
    bounds = [0]
    for _ in range(epochs):
        for _ in ref:
            if config.explicit and ref.microstep_is_last:
                ref.commit()
        bounds.append(ref.cursor.delivered)
    for e in range(epochs):  # the bounds are the stream's own epoch boundaries, each epoch non-empty
        info = ref.step_info(bounds[e])
        assert (info.epoch, info.step_in_epoch) == (e, 0), (e, info)
        assert bounds[e + 1] - bounds[e] == info.steps_in_epoch > 0, (e, bounds, info)
    rows: dict[int, tuple] = {}

    def on_step(step, batches):
        b = batches[0]
        got = (b["document_ids"].numpy().copy(), b["input_ids"].numpy().copy())
        if step in rows:
            assert all((x == y).all() for x, y in zip(got, rows[step]))
        rows[step] = got

    drive(config, corpus, bounds[-1], zlib.crc32(f"{mode}{order}{commit}".encode()), on_step, False)
    tokens = corpus.take(np.arange(N_RECORDS)).column("tokens").to_pylist()
    truth = collections.Counter((d, t) for d, toks in enumerate(tokens) for t in toks)
    for e in range(epochs):
        per_doc = collections.defaultdict(list)
        for s in range(bounds[e], bounds[e + 1]):
            docs, ids = rows[s]
            for d, t in zip(docs.reshape(-1).tolist(), ids.reshape(-1).tolist()):
                if d >= 0:
                    per_doc[d].append(t)
        got = collections.Counter((d, t) for d, ts in per_doc.items() for t in ts)
        assert got == truth, f"epoch {e}: tokens not exactly once"
        for d, ts in per_doc.items():
            assert ts == tokens[d], f"epoch {e}: document {d} tokens out of order"
    count("exactly_once_epochs", epochs)


def test_skip_steps_during_a_prefetching_pass(corpus):
    """skip_steps(start >= delivered) must hold for batches already prefetched by a worker."""
    loader = rd.DataLoader(corpus, batch_size=6, shuffle=True, seed=1, num_workers=1, prefetch_factor=2)
    it = iter(loader)
    next(it), next(it)
    loader.skip_steps(3, 5, "bad data region")
    steps = []
    for _ in range(3):
        next(it)
        steps.append(loader.cursor.delivered - 1)
    it.close()
    assert steps == [2, 5, 6], f"delivered steps {steps} after skip_steps(3, 5)"

