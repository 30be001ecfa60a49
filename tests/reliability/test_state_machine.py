"""A Hypothesis state machine over the loader's life: next, commit(applied), state_dict, load
into fresh loaders (repeat/skip), a new pass (``break``), skip_steps, worker count changes (0 vs 1,
sparingly), elastic reshards (world 1 <-> 2 at the same global batch, ranks simulated in this
process) and crashes (loaders dropped unsaved; resume from the last saved state).

The oracle is the plan itself: the batch of step ``s`` on rank ``r`` holds
``plan.records(plan.local_positions(s, sharding))``, in order; the cursor, the skipped ranges and
every counter are checked after every rule against :class:`CursorModel`, which is kept apart from
the loader. Fixed seeds (``derandomize=True``)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import resumable_data as rd
from tests.reliability._counts import SCALE, count
from tests.reliability._harness import Config, CursorModel, Ranks, plan_oracle

CONFIGS = [
    Config("global", "none", "explicit", "repeat", 2, (1, 2), (0, 1), "wrap"),
    Config("window8", "none", "auto", "repeat", 1, (1, 2), (0, 1), "drop"),
    Config("sequential", "none", "explicit", "skip", 3, (1, 2), (0, 1), "wrap"),
    Config("window32", "none", "explicit", "repeat", 1, (1, 2), (0, 1), "drop"),
    Config("global", "none", "auto", "repeat", 2, (1, 2), (0, 1), "wrap"),
]
WORKER_LOADS_PER_CLASS = 6  # worker start-up costs ~0.4 s: a few per run


#: The world sizes the machine moves between (same global batch): 1 <-> 2.
OTHER_WORLD = {1: 2, 2: 1}

class LoaderMachine(RuleBasedStateMachine):
    source: rd.ArrowShards = None  # set by the test
    worker_loads = 0

    @initialize(config=st.sampled_from(CONFIGS))
    def start(self, config):
        self.config = config
        self.ranks = Ranks(config, self.source, 1, 0)
        self.model = CursorModel()
        self.per_step = plan_oracle(self.ranks.lead.plan, self.source.column_lengths("tokens").astype(np.int64))
        self.saved = None
        self.resumes = 0

    # -- the training loop ----------------------------------------------------------------------
    @rule(n=st.integers(1, 8))
    def next_batches(self, n):
        for _ in range(n):
            self._next_batch()

    def _next_batch(self):
        if not self.config.explicit and self.model.pending:
            self.model.commit(self.per_step, None)
        step, batches = self.ranks.next()
        self.model.deliver(step)
        for loader, batch in zip(self.ranks.loaders, batches):
            plan = loader.plan
            expected = plan.records(plan.local_positions(step, loader.sharding))
            assert batch["id"].tolist() == expected.tolist()
        if self.ranks.world == 1:
            assert int(batches[0]["tokens_lengths"].sum()) == self.per_step(step)[1]
        count("state_machine_batches")

    @precondition(lambda self: self.config.explicit and self.model.pending)
    @rule(applied=st.booleans())
    def commit(self, applied):
        self.ranks.commit(applied)
        self.model.commit(self.per_step, applied)

    @precondition(lambda self: self.config.explicit and not self.model.pending)
    @rule()
    def commit_without_batches_is_refused(self):
        with pytest.raises(rd.ResumableDataError, match="commit"):
            self.ranks.lead.commit()

    @rule()
    def new_pass(self):
        self.ranks.close()  # a ``break`` out of the loop: the next iter() continues at the cursor

    @precondition(lambda self: self.ranks.workers == 0)  # with workers: see test_skip_steps_during_a_prefetching_pass
    @rule(offset=st.integers(0, 3), length=st.integers(1, 4))
    def skip_ahead(self, offset, length):
        start = self.model.delivered + offset
        for loader in self.ranks.loaders:
            loader.skip_steps(start, start + length, "bad data region")
        self.model.skipped.append((start, start + length))
        count("state_machine_skips")

    # -- saving and resuming --------------------------------------------------------------------
    def _save(self):
        state = self.ranks.state()
        if not self.config.explicit:
            self.model.commit(self.per_step, None)
        self.model.check(self.ranks.lead)
        self.saved = (state, self.model.snapshot(), self.ranks.world)
        return state

    @rule()
    def save(self):
        self._save()

    def _restore(self, world, workers, choice):
        state, snap, saved_world = self.saved
        self.ranks.close()
        self.ranks = Ranks(self.config, self.source, world, workers)
        self.model = snap.snapshot()
        uncommitted = state["cursor"]["delivered"] > state["cursor"]["committed"]
        if uncommitted:
            with pytest.raises(rd.ResumeError, match=r"on_uncommitted='repeat'.*on_uncommitted='skip'"):
                self.ranks.lead.load_state_dict(state)
        self.ranks.load(state, choice if uncommitted else None)
        self.model.resume(choice if uncommitted else None)
        label = rd.RecoveryLabel.ELASTIC_RESHARD if world != saved_world else rd.RecoveryLabel.FAITHFUL_CONTINUATION
        assert self.ranks.lead.recovery_label is label
        self.resumes += 1
        count("state_machine_resumes")

    @rule(choice=st.sampled_from(["repeat", "skip"]))
    def resume_in_fresh_loaders(self, choice):
        self._save()
        self._restore(self.ranks.world, self.ranks.workers, choice)

    @rule(choice=st.sampled_from(["repeat", "skip"]), other_world=st.booleans())
    def crash(self, choice, other_world):
        """Drop the loaders without saving: the job restarts from the last saved state (or from the
        start if nothing was saved) on the world size it ran on, or on the other one (1 <-> 2)."""
        world = OTHER_WORLD[self.ranks.world] if other_world else self.ranks.world
        if self.saved is None:
            self.ranks.close()
            self.ranks = Ranks(self.config, self.source, world, self.ranks.workers)
            self.model = CursorModel()
            return
        self._restore(world, self.ranks.workers, choice)

    @rule(choice=st.sampled_from(["repeat", "skip"]))
    def reshard(self, choice):
        self._save()
        self._restore(OTHER_WORLD[self.ranks.world], self.ranks.workers, choice)

    @precondition(lambda self: type(self).worker_loads < WORKER_LOADS_PER_CLASS)
    @rule(choice=st.sampled_from(["repeat", "skip"]))
    def change_workers(self, choice):
        type(self).worker_loads += 1
        count("state_machine_worker_changes")
        self._save()
        self._restore(self.ranks.world, 1 - self.ranks.workers, choice)

    @invariant()
    def cursor_and_counters_match_the_model(self):
        if hasattr(self, "model"):
            self.model.check(self.ranks.lead)

    def teardown(self):
        if hasattr(self, "ranks"):
            self.ranks.close()


def _run(corpus, examples, steps):
    class Machine(LoaderMachine):
        source = corpus
        worker_loads = 0

    Machine.TestCase.settings = settings(derandomize=True, max_examples=examples, stateful_step_count=steps,
                                         deadline=None, suppress_health_check=list(HealthCheck))
    Machine.TestCase().runTest()


def test_loader_state_machine(corpus):
    _run(corpus, 60, 40)
    print("state machine: " + ", ".join(f"{k}={count(k, 0)}" for k in
                                        ["state_machine_batches", "state_machine_resumes", "state_machine_skips",
                                         "state_machine_worker_changes"]))


@pytest.mark.slow
def test_loader_state_machine_nightly(corpus):
    # 20 * SCALE examples of 60 steps (200 by default): the long runs' extra coverage at a cost
    # (about 75 s on one core) that keeps `make test` well under 15 minutes
    _run(corpus, 20 * SCALE, 60)
