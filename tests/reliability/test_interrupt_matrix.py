"""Random interrupt points across the configuration matrix, compared in order with an
uninterrupted reference computed once per configuration.

Matrix: orders (sequential, global, window 8, window 32) x packing (none, concat, best_fit) x
commit (auto, explicit + repeat, explicit + skip) x accumulation (1, 3) x world sizes ({1},
{1, 2} with reshards between them at a fixed global batch), all with ``num_workers=0``, plus a
few configurations that alternate 0 and 1 or 0 and 2 workers (packing and a 1 <-> 2 reshard with 2
workers among them; each such run is made to include a resume onto every worker count and world
size it lists). At each interrupt point the job either saves
(through JSON) and resumes in freshly built loaders, possibly on another world size or worker
count, or crashes (the loaders are dropped unsaved) and resumes from the last saved state; some
points only save and go on (a checkpoint), so a later crash has something to go back to.

Every delivered batch is compared, in order, with the reference batch of the same step on the
same world size; unpacked batches are also compared with the plan itself
(``plan.records(plan.local_positions(step, sharding))``); the step sequence, the cursor and every
counter are checked against :class:`CursorModel`. The number of interrupt points checked is
counted (``tests/reliability/.last_run.json``) and printed.
"""

from __future__ import annotations

import random
import zlib

import numpy as np
import pytest

import resumable_data as rd
from tests.reliability._harness import Config, CursorModel, Ranks, canon, plan_oracle
from tests.reliability._counts import SCALE, count

TOTAL = 36          # steps per run
INTERRUPTS = 10     # random interrupt points per configuration (CI)


def _tail(worlds, order):
    if worlds == (1,):
        return "partial"
    return "drop" if order == "window32" else "wrap"


MATRIX = [
    Config(order, packing, commit, choice, acc, worlds, (0,), _tail(worlds, order))
    for order in ["sequential", "global", "window8", "window32"]
    for packing in ["none", "concat", "best_fit"]
    for commit, choice in [("auto", "repeat"), ("explicit", "repeat"), ("explicit", "skip")]
    for acc in [1, 3]
    for worlds in [(1,), (1, 2)]
]
WITH_WORKERS = [
    Config("global", "none", "explicit", "repeat", 3, (1, 2), (0, 1), "wrap"),
    Config("window8", "concat", "explicit", "skip", 2, (1, 2), (0, 1), "wrap"),
    Config("sequential", "best_fit", "auto", "repeat", 1, (1,), (1, 0), "partial"),
    Config("global", "concat", "explicit", "repeat", 2, (1, 2), (0, 2), "wrap"),
    Config("window8", "best_fit", "auto", "repeat", 1, (2, 1), (2, 0), "wrap"),
    Config("sequential", "none", "explicit", "skip", 3, (1, 2), (2, 0), "wrap"),
]


def cid(c: Config) -> str:
    w = "".join(map(str, c.worlds))
    k = "".join(map(str, c.workers))
    commit = c.commit if c.commit == "auto" else f"{c.commit}-{c.on_uncommitted}"
    return f"{c.order}-{c.packing}-{commit}-acc{c.accumulation}-world{w}-workers{k}-{c.tail}"


def applied_for(update: int) -> bool:
    return update % 4 != 2  # every fourth update is an AMP-skipped one


def step_loop(ranks: Ranks, model: CursorModel, per_step, config: Config, on_batch) -> None:
    """Deliver one step on every rank like a training loop (explicit commits per window)."""
    if not config.explicit and model.pending:
        model.commit(per_step, None)  # auto: asking for the next batch commits the last one
    step, batches = ranks.next()
    model.deliver(step)
    on_batch(step, batches)
    if config.explicit:
        assert ranks.lead.microstep_is_last == (len(model.pending) >= config.accumulation)
        if len(model.pending) >= config.accumulation:
            applied = applied_for(model.attempted)
            ranks.commit(applied)
            model.commit(per_step, applied)


def reference(config: Config, source, world: int, total: int):
    """The uninterrupted run: canonical batches per step, and per-step (samples, tokens)."""
    ranks = Ranks(config, source, world, 0)
    model = CursorModel()
    out, per = {}, {}

    def record(step, batches):
        out[step] = [canon(b) for b in batches]
        if config.packing == "none":
            per[step] = None
        else:
            rows = sum(int(b["input_ids"].shape[0]) for b in batches)
            per[step] = (rows, sum(int((b["document_ids"] >= 0).sum()) for b in batches))

    per_step = (plan_oracle(ranks.lead.plan, source.column_lengths("tokens").astype(np.int64))
                if config.packing == "none" else per.__getitem__)
    while model.delivered < total:
        step_loop(ranks, model, per_step, config, record)
    model.check(ranks.lead)
    ranks.close()
    return out, per_step


def check_against_plan(ranks: Ranks, step: int, batches) -> None:
    for loader, batch in zip(ranks.loaders, batches):
        plan = loader.plan
        expected = plan.records(plan.local_positions(step, loader.sharding))
        assert batch["id"].tolist() == expected.tolist(), f"step {step} rank {loader.sharding.rank}"


def run_interrupted(config: Config, source, interrupts: int, total: int, seed: int, seen: dict | None = None) -> int:
    """Returns the number of resumes checked; ``seen`` collects the (world, workers) pairs resumed
    onto and the number of world-size changes."""
    refs = {w: reference(config, source, w, total) for w in config.worlds}
    if config.packing != "none" and len(config.worlds) > 1:  # the global stream is the same at every world size
        keys = ["input_ids", "labels", "position_ids", "document_ids", "loss_mask"]
        for step in range(total):
            one = refs[1][0][step][0]
            for k in keys:
                two = b"".join(refs[2][0][step][r][k][3] for r in range(2))
                assert two == one[k][3], f"world 2 differs from world 1 at step {step}, key {k}"
    rng = random.Random(seed)
    points = sorted(rng.sample(range(1, total), min(interrupts, total - 1)))
    seen = {} if seen is None else seen
    seen.update(resumed_onto=set(), reshards=0)
    per_step = refs[config.worlds[0]][1]
    world, workers = config.worlds[0], config.workers[0]
    ranks = Ranks(config, source, world, workers)
    model = CursorModel()
    saved = None  # (state, model snapshot, world it was saved on)
    checked = 0

    def on_batch(step, batches):
        expected = refs[ranks.world][0][step]
        got = [canon(b) for b in batches]
        assert got == expected, f"{cid(config)}: step {step} on world {ranks.world} differs from the reference"
        if config.packing == "none":
            check_against_plan(ranks, step, batches)

    for point in points + [total]:
        while model.delivered < point:
            step_loop(ranks, model, per_step, config, on_batch)
        if point == total:
            break
        kind = rng.choices(["resume", "crash", "checkpoint"], weights=[6, 2, 2])[0]
        onto = seen["resumed_onto"]
        missing = ((len(config.worlds) > 1 and not seen["reshards"]) or set(config.worlds) - {x for x, _ in onto}
                   or set(config.workers[1:]) - {y for _, y in onto})
        if point == points[-1] and missing:
            kind = "resume"  # the last interrupt point resumes where no resume has gone yet
        if kind == "checkpoint" or (kind == "crash" and saved is None):
            state = ranks.state()
            if not config.explicit:
                model.commit(per_step, None)  # state_dict() commits in auto mode
            model.check(ranks.lead)
            saved = (state, model.snapshot(), ranks.world)
            continue
        if kind == "resume":
            state = ranks.state()
            if not config.explicit:
                model.commit(per_step, None)
            model.check(ranks.lead)
            saved = (state, model.snapshot(), ranks.world)
        ranks.close()  # a crash drops the loaders without saving
        del ranks
        state, snap, saved_world = saved
        model = snap.snapshot()
        world, workers = rng.choice(config.worlds), rng.choice(config.workers)
        if point == points[-1] and missing:
            worlds_left = [w for w in config.worlds if w not in {x for x, _ in onto}]
            workers_left = [k for k in config.workers[1:] if k not in {y for _, y in onto}]
            if len(config.worlds) > 1 and not seen["reshards"]:
                world = next(w for w in config.worlds if w != saved_world)
            elif worlds_left:
                world = worlds_left[0]
            if workers_left:
                workers = workers_left[0]
        seen["resumed_onto"].add((world, workers))
        seen["reshards"] += world != saved_world
        ranks = Ranks(config, source, world, workers)
        uncommitted = state["cursor"]["delivered"] > state["cursor"]["committed"]
        if uncommitted:
            with pytest.raises(rd.ResumeError, match="on_uncommitted"):
                ranks.lead.load_state_dict(state)  # no silent default
        choice = config.on_uncommitted if uncommitted else None
        ranks.load(state, choice)
        model.resume(choice)
        label = rd.RecoveryLabel.ELASTIC_RESHARD if world != saved_world else rd.RecoveryLabel.FAITHFUL_CONTINUATION
        assert ranks.lead.recovery_label is label
        model.check(ranks.lead)
        checked += 1
    model.check(ranks.lead) if config.explicit else None
    ranks.close()
    return checked


@pytest.mark.parametrize("config", MATRIX + WITH_WORKERS, ids=cid)
def test_random_interrupt_points(config, corpus):
    n = INTERRUPTS if config.workers == (0,) else 3
    seen: dict = {}
    checked = run_interrupted(config, corpus, n, TOTAL, zlib.crc32(cid(config).encode()), seen)
    assert checked >= 1
    if 2 in config.workers:  # the CI-sized two-worker runs: every worker count and a reshard 1 <-> 2 are met
        assert {k for _, k in seen["resumed_onto"]} >= set(config.workers) - {config.workers[0]}, seen
        assert seen["reshards"] >= (len(config.worlds) > 1), seen
    total = count("interrupt_points", checked)
    print(f"{cid(config)}: {checked} interrupt points (session total {total})")


@pytest.mark.slow
@pytest.mark.parametrize("config", MATRIX + WITH_WORKERS, ids=cid)
def test_random_interrupt_points_nightly(config, corpus):
    """``RD_RELIABILITY_SCALE`` (default 10) times the CI's interrupt points, over longer runs."""
    n = (INTERRUPTS if config.workers == (0,) else 3) * SCALE
    checked = run_interrupted(config, corpus, n, max(TOTAL, 2 * n), zlib.crc32(cid(config).encode()) + 1)
    total = count("interrupt_points_nightly", checked)
    print(f"{cid(config)}: {checked} interrupt points (session total {total})")
