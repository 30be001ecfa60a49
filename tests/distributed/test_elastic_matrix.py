"""Elastic resharding with simulated ranks in one process (one rd.DataLoader per rank, explicit
rd.Sharding): for every divisor world size of several global batch sizes, the ranks' batches put
together are the single-process global stream, in order and as multisets, with the same
per-sample randomness; chained reshapes lose and duplicate nothing."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

import resumable_data as rd

N = 100  # not a multiple of any G below: every epoch has a wrapped tail
EPOCHS = 3
VERSION = "keyed-dataset-v1"  # a map-style dataset pinned by name


class Keyed:
    """Map-style dataset whose samples draw from the per-sample generator."""

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int):
        return (int(i), float(rd.sample_context().rng.random()))


ORDERS = {"global": dict(shuffle=True), "window": dict(shuffle=True, shuffle_window=16),
          "sequential": dict(shuffle=False)}


def make(world, rank, g, policy, order, seed=1234):
    return rd.DataLoader(Keyed(), batch_size=g // world, seed=seed, tail="wrap", collate_fn=list,
                         seed_per_sample=False, dataset_version=VERSION, sharding=rd.Sharding(world, rank, policy), **ORDERS[order])


def forever(loader):
    while True:
        got = False
        for b in loader:
            got = True
            yield b
        assert got


def global_steps(loaders, policy, steps):
    """Assemble the ranks' batches of ``steps`` steps into global batches."""
    its = [forever(ld) for ld in loaders]
    w = len(loaders)
    out = []
    for _ in range(steps):
        parts = [next(it) for it in its]
        if policy == "contiguous":
            out.append([x for p in parts for x in p])
        else:
            g = [None] * sum(len(p) for p in parts)
            for r, p in enumerate(parts):
                g[r::w] = p
            out.append(g)
    return out


def reference(g, order, steps, seed=1234):
    ld = rd.DataLoader(Keyed(), batch_size=g, seed=seed, tail="wrap", collate_fn=list, seed_per_sample=False,
                       dataset_version=VERSION, sharding=rd.Sharding(1, 0), **ORDERS[order])
    return global_steps([ld], "contiguous", steps)


def divisors(g):
    return [w for w in range(1, g + 1) if g % w == 0]


def per_epoch_counters(steps, spe):
    return [Counter(rec for batch in steps[e * spe:(e + 1) * spe] for rec, _ in batch)
            for e in range(len(steps) // spe)]


def check_epochs(got, g):
    spe = -(-N // g)
    for c in per_epoch_counters(got, spe):
        assert set(c) == set(range(N)), "a record was lost"
        assert sum(c.values()) == spe * g and sum(v - 1 for v in c.values()) == spe * g - N, \
            "a record was duplicated beyond the epoch's wrapped tail"


@pytest.mark.parametrize("policy", ["contiguous", "strided"])
@pytest.mark.parametrize("order", ["global", "window", "sequential"])
@pytest.mark.parametrize("g", [12, 24])
def test_every_divisor_world_size_gives_the_global_stream(g, order, policy):
    steps = EPOCHS * -(-N // g)
    ref = reference(g, order, steps)
    check_epochs(ref, g)
    for w in divisors(g):
        got = global_steps([make(w, r, g, policy, order) for r in range(w)], policy, steps)
        assert got == ref, f"world_size={w}"  # records, order and per-sample randomness


def reshard(loaders, world, g, policy, order):
    states = [ld.state_dict() for ld in loaders]
    assert all(s == states[0] for s in states), "the state must be rank-invariant"
    state = json.loads(json.dumps(states[0]))
    new = [make(world, r, g, policy, order) for r in range(world)]
    for ld in new:
        ld.load_state_dict(state)
    want = "elastic_reshard" if world != len(loaders) else "faithful_continuation"
    assert all(ld.recovery_label.value == want for ld in new)
    return new


@pytest.mark.parametrize("policy", ["contiguous", "strided"])
@pytest.mark.parametrize("order", ["global", "window"])
def test_chained_reshapes_8_6_12_1_lose_and_duplicate_nothing(order, policy):
    g = 24
    spe = -(-N // g)
    total = EPOCHS * spe
    ref = reference(g, order, total)
    chain = [(8, 3), (6, 4), (12, 2), (1, total - 9)]  # (world size, steps run there): crosses epochs
    got = []
    loaders = None
    for world, n in chain:
        loaders = ([make(world, r, g, policy, order) for r in range(world)] if loaders is None
                   else reshard(loaders, world, g, policy, order))
        got += global_steps(loaders, policy, n)
    assert got == ref  # in order, with the same per-sample randomness
    assert per_epoch_counters(got, spe) == per_epoch_counters(ref, spe)  # as multisets
    assert Counter(got_s for b in got for got_s in b) == Counter(x for b in ref for x in b)
    check_epochs(got, g)
    loaders[0].state_dict()  # commit='auto': the last delivered batch counts once the state is taken
    assert loaders[0].counters.samples == total * g


def listed_world_sizes(message):
    m = re.search(r"world sizes that divide (\d+): \[([\d, ]+)\], with batch_size = \1 / world_size", message)
    assert m, message
    return int(m.group(1)), [int(w) for w in m.group(2).split(", ")]


@pytest.mark.parametrize("world, batch_size, here", [
    (5, 24 // 5, r"no integer batch_size does at world_size 5 \(24 / 5 = 4\.8\):"),  # 5 does not divide 24
    (4, 5, r"at world_size 4 pass batch_size=6, or"),  # same world size, another batch_size
    (3, 4, r"at world_size 3 pass batch_size=8, or"),
])
def test_a_changed_global_batch_is_refused_with_the_world_sizes_that_keep_it(world, batch_size, here):
    state = make(4, 0, 24, "contiguous", "global").state_dict()
    ld = rd.DataLoader(Keyed(), batch_size=batch_size, seed=1234, tail="wrap", collate_fn=list, seed_per_sample=False,
                       dataset_version=VERSION, sharding=rd.Sharding(world, 0), shuffle=True)
    with pytest.raises(rd.ResumeError, match="global batch size: saved 24 vs current") as info:
        ld.load_state_dict(state)
    msg = str(info.value)
    assert re.search(here, msg), msg
    g, listed = listed_world_sizes(msg)
    assert g == 24 and listed == [1, 2, 3, 4, 6, 8, 12, 24] == divisors(24)
    # the advice works: every listed world size, with batch_size = 24 / world_size, resumes the state
    for w in listed:
        resumed = make(w, w - 1, 24, "contiguous", "global")
        resumed.load_state_dict(state)
        assert resumed.recovery_label.value == ("faithful_continuation" if w == 4 else "elastic_reshard")
