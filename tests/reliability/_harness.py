"""Shared pieces of the reliability suite: loader configurations, simulated ranks, an exact
batch form, and an independent model of the cursor and counters (the oracle's bookkeeping)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

import resumable_data as rd
from tests.loader.conftest import canon  # noqa: F401  (re-exported for the reliability tests)

ORDERS = {
    "sequential": dict(),
    "global": dict(shuffle=True, seed=11),
    "window8": dict(shuffle=True, seed=11, shuffle_window=8),
    "window32": dict(shuffle=True, seed=11, shuffle_window=32),
}
PACKINGS = {
    "none": None,
    "concat": dict(seq_len=16, mode="concat", window=16, eos_id=1000),
    "best_fit": dict(seq_len=16, mode="best_fit", window=16),
}


@dataclass(frozen=True)
class Config:
    """One point of the configuration matrix. ``global_batch`` stays fixed across world sizes."""

    order: str = "global"
    packing: str = "none"
    commit: str = "auto"           # auto | explicit
    on_uncommitted: str = "repeat"  # repeat | skip (explicit only)
    accumulation: int = 1
    worlds: tuple[int, ...] = (1,)
    workers: tuple[int, ...] = (0,)
    tail: str = "partial"
    global_batch: int = 6

    @property
    def explicit(self) -> bool:
        return self.commit == "explicit"

    def make(self, source, world: int, rank: int, workers: int) -> rd.DataLoader:
        extra = dict(num_workers=workers, persistent_workers=True, prefetch_factor=2) if workers else {}
        packing = PACKINGS[self.packing]
        if packing is not None:
            extra["packing"] = rd.Packing(**packing)
        else:
            extra["token_column"] = "tokens"
        return rd.DataLoader(source, batch_size=self.global_batch // world, sharding=rd.Sharding(world, rank),
                             tail=self.tail, commit=self.commit, accumulation_steps=self.accumulation,
                             **ORDERS[self.order], **extra)


class Ranks:
    """``world`` loaders of one job simulated in this process (rank r gets ``Sharding(world, r)``),
    each with its own iterator; ``next()`` delivers one global step on every rank."""

    def __init__(self, config: Config, source, world: int, workers: int) -> None:
        self.config = config
        self.world = world
        self.workers = workers
        self.loaders = [config.make(source, world, r, workers) for r in range(world)]
        self.iters = [None] * world

    def next(self) -> tuple[int, list]:
        batches, steps = [], []
        for r, loader in enumerate(self.loaders):
            for _ in range(4):  # an epoch whose remaining steps are all skipped yields nothing
                if self.iters[r] is None:
                    self.iters[r] = iter(loader)
                try:
                    batch = next(self.iters[r])
                    break
                except StopIteration:
                    self.iters[r] = None
            else:
                raise AssertionError("four passes in a row delivered nothing")
            batches.append(batch)
            steps.append(loader.cursor.delivered - 1)
        assert len(set(steps)) == 1, f"ranks delivered different steps {steps}"
        return steps[0], batches

    def commit(self, applied: bool) -> None:
        for loader in self.loaders:
            loader.commit(applied=applied)

    @property
    def lead(self) -> rd.DataLoader:
        return self.loaders[0]

    def state(self) -> dict:
        """The state through JSON; every rank's state must be the same document."""
        states = [json.loads(json.dumps(ld.state_dict())) for ld in self.loaders]
        for s in states[1:]:
            assert s == states[0], "ranks saved different states"
        return states[0]

    def load(self, state: dict, choice: str | None) -> None:
        for loader in self.loaders:
            loader.load_state_dict(state, on_uncommitted=choice)

    def close(self) -> None:
        for it in self.iters:
            if it is not None:
                it.close()
        self.iters = [None] * self.world


@dataclass
class CursorModel:
    """The cursor and counters as the commit protocol defines them, kept independently of the
    loader: committed/delivered steps, skipped ranges, update counts, and per-step sample and
    token counts supplied by the oracle."""

    committed: int = 0
    delivered: int = 0
    skipped: list = field(default_factory=list)  # [start, stop) pairs
    attempted: int = 0
    applied: int = 0
    samples: int = 0
    tokens: int = 0
    pending: list = field(default_factory=list)  # delivered, not yet committed steps

    def is_skipped(self, step: int) -> bool:
        return any(a <= step < b for a, b in self.skipped)

    def next_step(self) -> int:
        s = self.delivered
        while self.is_skipped(s):
            s += 1
        return s

    def deliver(self, step: int) -> None:
        assert step == self.next_step(), f"delivered step {step}, the model expected {self.next_step()}"
        self.delivered = step + 1
        self.pending.append(step)

    def commit(self, per_step, applied: bool | None) -> None:
        """Commit every delivered step (``applied`` None: an auto commit, no update counted)."""
        for s in self.pending:
            samples, tokens = per_step(s)
            self.samples += samples
            self.tokens += tokens
        self.pending = []
        self.committed = self.delivered
        if applied is not None:
            self.attempted += 1
            self.applied += int(applied)

    def resume(self, choice: str | None) -> None:
        """What a load of the state saved at this model's committed point (plus its uncommitted
        range) leaves: repeat goes back to committed; skip records the range as skipped."""
        if self.delivered > self.committed and choice == "skip":
            self.skipped.append((self.committed, self.delivered))
            self.committed = self.delivered
        self.delivered = self.committed
        self.pending = []

    def skipped_before(self, step: int) -> int:
        """Distinct skipped steps below ``step`` (ranges may overlap: each step counts once)."""
        return len({s for a, b in self.skipped for s in range(a, min(b, step))})

    def check(self, loader: rd.DataLoader) -> None:
        c = loader.cursor
        assert (c.committed, c.delivered) == (self.committed, self.delivered), (c, self)
        assert c.fetched >= c.delivered
        k = loader.counters
        expected = dict(attempted_updates=self.attempted, applied_updates=self.applied,
                        skipped_updates=self.attempted - self.applied,
                        microbatches=self.committed - self.skipped_before(self.committed),
                        samples=self.samples, tokens=self.tokens,
                        skipped_steps=self.skipped_before(self.committed))
        assert vars(k) == expected, f"counters {vars(k)} != model {expected}"

    def snapshot(self) -> CursorModel:
        return CursorModel(self.committed, self.delivered, list(self.skipped), self.attempted, self.applied,
                           self.samples, self.tokens, list(self.pending))


def plan_oracle(plan: rd.Plan, lengths: np.ndarray):
    """Per-step (samples, tokens) of the whole global batch, from the plan alone."""
    def per_step(step: int) -> tuple[int, int]:
        start, stop = plan.step_span(step)
        records = plan.records(np.arange(start, stop, dtype=np.int64))
        return stop - start, int(lengths[records].sum())
    return per_step
