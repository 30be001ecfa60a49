"""Bit-exact resume: every remaining batch compared in order, at many interrupt points."""

import json
import random
import zlib

import pytest

import resumable_data as rd
from tests.loader.conftest import Augmented, canon

BATCH = 8
STEPS_PER_EPOCH = 20  # 157 records, batch 8, short last batch
TOTAL = 2 * STEPS_PER_EPOCH + 9

ORDERS = {
    "sequential": dict(),
    "global": dict(shuffle=True, seed=11),
    "window": dict(shuffle=True, seed=11, shuffle_window=24),
}


def make_loader(source, order, num_workers, commit, accumulation):
    workers = dict(num_workers=num_workers, persistent_workers=True) if num_workers else {}
    return rd.DataLoader(source, batch_size=BATCH, commit=commit, accumulation_steps=accumulation,
                         **workers, **ORDERS[order])


def run(loader, n, explicit):
    """Deliver ``n`` batches like a training loop; returns them and the loader."""
    out = []
    while len(out) < n:
        for batch in loader:
            out.append(canon(batch))
            if explicit and loader.microstep_is_last:
                loader.commit(applied=True)
            if len(out) == n:
                break
    return out


def interrupted(make, points, workers, explicit, choice):
    """Run to each interrupt point, save (through JSON), resume in a fresh loader with another
    worker count, and stitch together what the training loop would have seen."""
    stream, loader, done = [], make(workers[0]), 0
    for i, point in enumerate(points + [TOTAL]):
        got = run(loader, point - done, explicit)
        if point == TOTAL:
            return stream + got
        state = json.loads(json.dumps(loader.state_dict()))
        cursor = state["cursor"]
        kept = cursor["committed"] if choice == "repeat" else cursor["delivered"]
        stream = stream + got
        del stream[kept:]
        loader = make(workers[(i + 1) % len(workers)])
        loader.load_state_dict(state, on_uncommitted=choice, allow_unpinned=True)
        assert loader.recovery_label is rd.RecoveryLabel.FAITHFUL_CONTINUATION
        done = kept


def interrupt_points(seed):
    rng = random.Random(seed)
    fixed = [STEPS_PER_EPOCH, 2 * STEPS_PER_EPOCH]  # epoch boundaries
    return sorted(set(rng.sample(range(1, TOTAL), 3) + [rng.choice(fixed)]))


MATRIX = [
    (order, workers, commit, acc)
    for order in ORDERS
    for workers in [(0, 0), (0, 1), (3, 0)]
    for commit in ["auto", "explicit-repeat", "explicit-skip"]
    for acc in [1, 4]
]


@pytest.mark.parametrize("order, workers, commit, accumulation", MATRIX)
@pytest.mark.parametrize("dataset", ["arrow", "augmented"])
def test_bit_exact_resume(order, workers, commit, accumulation, dataset, shards, request):
    source = shards if dataset == "arrow" else Augmented()
    mode, _, choice = commit.partition("-")
    explicit = mode == "explicit"
    make = lambda w: make_loader(source, order, w, mode, accumulation)  # noqa: E731
    reference = run(make(0), TOTAL, explicit)
    seed = zlib.crc32(repr((order, workers, commit, accumulation, dataset)).encode())
    for chain_seed in [seed, seed + 1]:
        points = interrupt_points(chain_seed)  # a chained second, third and fourth resume
        got = interrupted(make, points, workers, explicit, choice or "repeat")
        assert len(got) == len(reference)
        assert got == reference, f"diverged with interrupts at {points}"


def test_explicit_skip_really_skips_the_uncommitted_batches(shards):
    loader = make_loader(shards, "global", 0, "explicit", 4)
    reference = run(make_loader(shards, "global", 0, "explicit", 4), 12, True)
    run(loader, 6, True)  # commits after 4; 2 uncommitted
    state = loader.state_dict()
    assert state["cursor"]["committed"] == 4 and state["cursor"]["delivered"] == 6
    resumed = make_loader(shards, "global", 0, "explicit", 4)
    resumed.load_state_dict(state, on_uncommitted="skip")
    assert run(resumed, 6, True) == reference[6:12]
    assert resumed.state_dict()["skipped"] == [[4, 6, "uncommitted at resume (on_uncommitted='skip')"]]
    assert resumed.counters.microbatches == 4 + 4 and resumed.counters.skipped_steps == 2


def test_prefetched_batches_are_fetched_again(shards):
    loader = rd.DataLoader(shards, batch_size=BATCH, num_workers=2, prefetch_factor=4, shuffle=True, seed=3)
    it = iter(loader)
    first = [canon(next(it)) for _ in range(3)]
    state = loader.state_dict()
    assert state["cursor"]["delivered"] == 3 and state["cursor"]["fetched"] > 3  # prefetch ran ahead
    resumed = rd.DataLoader(shards, batch_size=BATCH, shuffle=True, seed=3)
    resumed.load_state_dict(state)
    reference = [canon(b) for b in rd.DataLoader(shards, batch_size=BATCH, shuffle=True, seed=3)]
    assert first + [canon(b) for b in resumed] == reference


class Counting(Augmented):
    def __init__(self):
        super().__init__(10**9)  # a billion records
        self.calls = 0

    def __getitem__(self, i):
        self.calls += 1
        return {"record": i}


def test_resume_is_a_seek_not_a_replay():
    """Restoring at step ten million fetches exactly one batch: nothing is replayed."""
    source = Counting()
    far = rd.DataLoader(source, batch_size=BATCH, shuffle=True, seed=1, dataset_version="feedbeef")
    state = far.state_dict()
    state["cursor"] = {"committed": 10**7, "delivered": 10**7, "fetched": 10**7}
    far.load_state_dict(state)
    batch = next(iter(far))
    assert source.calls == BATCH
    plan = far.plan
    assert batch["record"].tolist() == plan.records(plan.local_positions(10**7, far.sharding)).tolist()
