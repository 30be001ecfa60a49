"""A 3-source mixture (0.5/0.3/0.2, the smallest upsampled) resumes bit-exactly through
rd.DataLoader with 2 workers: packed, at >= 200 random points, and unpacked across chained
weight changes declared as data_change, with per-source multiset checks."""

from __future__ import annotations

import json

import numpy as np
import pytest

import resumable_data as rd
from tests.loader.conftest import canon
from tests.mixture_data import BASE, SIZES, WEIGHTS, open_sources, source_of, write_sources

W2 = {"web": 0.2, "code": 0.2, "math": 0.6}
W3 = {"web": 0.6, "code": 0.4, "math": 0.0}
H = 4  # batches compared after each resume


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return write_sources(tmp_path_factory.mktemp("mixres"))


def loader_for(dirs, weights, *, packing=None, **kw):
    mix = rd.Mixture(open_sources(dirs), weights=weights, block_size=16)
    extra = {"packing": packing} if packing is not None else {"token_column": "tokens"}
    return rd.DataLoader(mix, **{"batch_size": 4, **kw}, seed=11, **extra)


def run(loader, steps):
    """``steps`` batches across epochs, and the state after each (``states[k]``: k batches in)."""
    batches, states = [], [loader.state_dict()]
    while len(batches) < steps:
        for b in loader:
            batches.append(canon(b))
            states.append(loader.state_dict())
            if len(batches) == steps:
                break
    return batches, states


def continue_from(loader, state, n, **kw):
    loader.load_state_dict(state, **kw)
    return run(loader, n)


def check_source_epochs(ids_in_order):
    """Per source: consecutive chunks of n_s records are permutations of its records (the last,
    partial chunk has no duplicate): no record lost or duplicated within a source epoch."""
    ids = np.asarray(ids_in_order)
    src = source_of(ids)
    for s, name in enumerate(SIZES):
        mine = ids[src == s] - BASE[name]
        n = SIZES[name]
        for e in range(0, len(mine), n):
            chunk = mine[e:e + n]
            times = np.bincount(chunk, minlength=n)  # how often each record of the source appears
            assert times.max(initial=0) <= 1, (name, e // n)  # no record twice within an epoch
            if len(chunk) == n:
                assert (times == 1).all(), (name, e // n)  # a whole epoch: every record exactly once


def resume_points(states, batches, make, points, rng):
    loader = make()
    ks = rng.choice(len(batches) - H + 1, size=points, replace=points > len(batches) - H + 1)
    for k in ks.tolist():
        got, got_states = continue_from(loader, states[k], H)
        assert got == batches[k:k + H], f"resume at step {k}"
        assert without_fetched(got_states[-1]) == without_fetched(states[k + H])
    return len(ks)


def without_fetched(state):
    """A state without the prefetch count (audit only: it depends on the worker count) and the
    label (it names the latest resume: a faithful one here)."""
    return {**state, "cursor": {k: v for k, v in state["cursor"].items() if k != "fetched"}, "recovery_label": None}


def test_packed_mixture_resumes_bit_exact_at_200_points(dirs):
    spec = rd.Packing(16)
    batches, states = run(loader_for(dirs, WEIGHTS, packing=spec), 120)
    mix = rd.Mixture(open_sources(dirs), weights=WEIGHTS, block_size=16)
    # the delivered documents are the mixture's positions in order: whole source epochs
    docs = np.concatenate([np.frombuffer(b["document_ids"][3], dtype=np.int64) for b in batches])
    docs = docs[docs >= 0]
    stream = docs[np.concatenate([[True], docs[1:] != docs[:-1]])]
    sampler = mix.sampler(11, 4, packed=True)
    expected = np.concatenate([sampler.indices(e, np.arange(len(sampler))) for e in range(20)])
    expected = expected[np.concatenate([[True], expected[1:] != expected[:-1]])]
    assert stream.tolist() == expected[:len(stream)].tolist()
    assert len(stream) > 5 * len(sampler)  # several loader epochs: the small source seen many times
    check_source_epochs(mix.take(expected[:len(stream)]).column("id").to_numpy())
    rng = np.random.default_rng(0)
    make = lambda: loader_for(dirs, WEIGHTS, packing=spec, num_workers=2, persistent_workers=True)  # noqa: E731
    assert resume_points(states, batches, make, 200, rng) == 200


def ids_of(batches):
    return np.concatenate([np.frombuffer(b["id"][3], dtype=np.int64) for b in batches])


def test_weight_change_is_refused_unless_declared(dirs):
    _, states = run(loader_for(dirs, WEIGHTS), 7)
    other = loader_for(dirs, W2)
    with pytest.raises(rd.ResumeError, match=r"mixture weights: saved from step 0: web=0.5, code=0.3, math=0.2 vs "
                                             r"current from step 0: web=0.2.*label='data_change'"):
        other.load_state_dict(states[7])
    assert other.cursor.committed == 0  # a refused state changes nothing
    other.load_state_dict(states[7], label="data_change")
    assert other.recovery_label is rd.RecoveryLabel.DATA_CHANGE
    with pytest.raises(rd.ConfigError, match="label"):
        other.load_state_dict(states[7], label="warm_start")


def test_chained_weight_changes_resume_exactly_and_keep_source_epochs(dirs):
    a_batches, a_states = run(loader_for(dirs, WEIGHTS), 30)
    b_batches, b_states = continue_from(loader_for(dirs, W2), a_states[30], 30, label="data_change")
    c_batches, c_states = continue_from(loader_for(dirs, W3), b_states[-1], 30, label="data_change")
    stream = np.concatenate([ids_of(a_batches), ids_of(b_batches), ids_of(c_batches)])
    check_source_epochs(stream)
    src = source_of(ids_of(b_batches))
    assert abs((src == 2).mean() - 0.6) < 0.05 and (source_of(ids_of(c_batches)) != 2).all()
    # each state's per-source progress is what was delivered
    final = loader_for(dirs, W3)
    final.load_state_dict(c_states[-1])
    prog = final.mixture_progress()
    counts = np.bincount(source_of(stream), minlength=3)
    assert [p.consumed for p in prog.sources] == counts.tolist()
    assert [p.epoch for p in prog.sources] == [c // n for c, n in zip(counts.tolist(), SIZES.values())]
    assert sum(prog.next_step.values()) == 4 and prog.next_step["math"] == 0
    assert len(json.dumps(c_states[-1])) < 1024  # < 1 KB for 3 sources (docs/mixtures.md)
    # bit-exact resumes inside each phase, into fresh loaders with the phase's weights
    rng = np.random.default_rng(1)
    points = 0
    for weights, batches, states in ((WEIGHTS, a_batches, a_states), (W2, b_batches, b_states), (W3, c_batches, c_states)):
        make = lambda w=weights: loader_for(dirs, w, num_workers=2, persistent_workers=True)  # noqa: E731
        points += resume_points(states, batches, make, 20, rng)
    assert points == 60


def test_schedule_through_the_loader(dirs):
    sched = rd.WeightSchedule([(0, WEIGHTS), (9, W2), (17, W3)])
    batches, states = run(loader_for(dirs, sched), 30)
    ids = ids_of(batches)
    check_source_epochs(ids)
    assert (source_of(ids[17 * 4:]) != 2).all()
    assert abs((source_of(ids[9 * 4:17 * 4]) == 2).mean() - 0.6) <= 0.13
    make = lambda: loader_for(dirs, sched, num_workers=2, persistent_workers=True)  # noqa: E731
    resume_points(states, batches, make, 15, np.random.default_rng(2))
    with pytest.raises(rd.ResumeError, match="mixture weights"):
        loader_for(dirs, WEIGHTS).load_state_dict(states[12])


@pytest.mark.slow
def test_packed_mixture_resumes_at_1000_points(dirs):
    spec = rd.Packing(16, mode="best_fit")
    batches, states = run(loader_for(dirs, WEIGHTS, packing=spec), 400)
    make = lambda: loader_for(dirs, WEIGHTS, packing=spec, num_workers=2, persistent_workers=True)  # noqa: E731
    assert resume_points(states, batches, make, 1000, np.random.default_rng(3)) == 1000


def test_inspect_shows_per_source_progress(dirs, tmp_path, capsys):
    from resumable_data.cli import main

    loader = loader_for(dirs, WEIGHTS)
    batches, states = run(loader, 25)
    path = tmp_path / "state.json"
    path.write_text(json.dumps(states[25]))
    assert main(["inspect", str(path)]) == 0
    text = capsys.readouterr().out
    prog = loader.mixture_progress()
    counts = np.bincount(source_of(ids_of(batches)), minlength=3)
    assert [p.consumed for p in prog.sources] == counts.tolist()
    for p in prog.sources:
        assert f"consumed {p.consumed} records ({prog.tokens[p.name]} tokens), epoch {p.epoch}, position " \
               f"{p.position} of {p.size}" in text
    assert "web=0.5, code=0.3, math=0.2" in text and "next step" in text


def test_check_resume_accepts_a_mixture_loader(dirs):
    from resumable_data.testing import check_resume

    def make_loader(**kw):
        return loader_for(dirs, WEIGHTS, packing=rd.Packing(16), **kw)

    report = check_resume(make_loader, steps=30, interrupts=3, num_workers=(0, 2))
    assert report.ok, report


def test_forged_mixture_sections_are_refused(dirs):
    _, states = run(loader_for(dirs, WEIGHTS), 3)
    loader = loader_for(dirs, W2)
    for bad in ({**states[3]["mixture"], "rebase": [12, [1, 2]]}, {**states[3]["mixture"], "sizes": [1, 2, -3]},
                {**states[3]["mixture"], "extra": 1}, "nope"):
        with pytest.raises(rd.ResumeError):
            loader.load_state_dict({**states[3], "mixture": bad}, label="data_change")
    other = {**states[3]["mixture"], "sizes": [120, 60, 12]}
    with pytest.raises(rd.ResumeError, match="mixture sizes: saved"):
        loader.load_state_dict({**states[3], "mixture": other})
    plain = {k: v for k, v in states[3].items() if k != "mixture"}
    with pytest.raises(rd.ResumeError, match="not an rd.Mixture loader"):
        loader.load_state_dict(plain)
    assert loader.cursor.committed == 0


def test_a_rebase_under_running_persistent_workers_starts_a_new_pool(dirs):
    _, states = run(loader_for(dirs, WEIGHTS), 5)
    expected, _ = continue_from(loader_for(dirs, W2), states[5], H, label="data_change")
    loader = loader_for(dirs, W2, num_workers=2, persistent_workers=True)
    next(iter(loader))  # the pool now holds the unrebased stream
    got, _ = continue_from(loader, states[5], H, label="data_change")
    assert loader.recovery_label is rd.RecoveryLabel.DATA_CHANGE
    assert got == expected


def test_reset_after_a_rebase_under_persistent_workers_is_a_fresh_start(dirs):
    _, states = run(loader_for(dirs, WEIGHTS), 5)
    fresh, _ = run(loader_for(dirs, W2), H)
    loader = loader_for(dirs, W2, num_workers=1, persistent_workers=True)
    loader.load_state_dict(states[5], label="data_change")
    run(loader, 2)  # the pool runs on the rebased plan
    loader.reset()
    assert loader.config.order.point() is None and loader.config.order.sampler.plan.rebase is None
    assert run(loader, H)[0] == fresh


@pytest.mark.parametrize("workers", [0, 2])
def test_undo_point_rolls_back_a_mixture_rebase(dirs, workers):
    _, a_states = run(loader_for(dirs, WEIGHTS), 5)
    loader = loader_for(dirs, W2, num_workers=workers, persistent_workers=workers > 0)
    _, b_states = run(loader, 3)
    before = loader.state_dict()
    undo = loader.undo_point()
    loader.load_state_dict(a_states[5], label="data_change")
    assert loader.state_dict()["mixture"]["rebase"] is not None
    undo()
    assert loader.config.order.point() is None and loader.config.order.sampler.plan.rebase is None
    assert loader.state_dict() == before
    expected, _ = continue_from(loader_for(dirs, W2), b_states[3], H)
    assert run(loader, H)[0] == expected


RAMP = rd.BatchRamp(2, 2, 24, 6)  # per rank: 2 -> 4 -> 6 samples a step over the first 48 samples


def test_mixture_under_a_batch_ramp_then_weight_and_batch_changes_keeps_every_source_epoch(dirs):
    """The issue's chain: a mixture over a ramping batch (2 workers resume bit-exact at random
    points), then a declared weight change (data_change), then a declared global-batch change
    (on_batch_change='continue'): per source, no record lost or duplicated within its epochs
    across the whole chain, and the ramp's steps follow the schedule."""
    a_batches, a_states = run(loader_for(dirs, WEIGHTS, batch_size=RAMP), 24)
    assert [len(np.frombuffer(b["id"][3], dtype=np.int64)) for b in a_batches[:8]] == [2] * 6 + [4, 4]
    make = lambda: loader_for(dirs, WEIGHTS, batch_size=RAMP, num_workers=2, persistent_workers=True)  # noqa: E731
    assert resume_points(a_states, a_batches, make, 12, np.random.default_rng(3)) == 12
    # a weight change at step 24, declared; the ramp continues
    b_batches, b_states = continue_from(loader_for(dirs, W2, batch_size=RAMP), a_states[24], 20, label="data_change")
    # then a fixed batch of 5 on the ramp's continuous stream, declared; the weights stay W2
    c_batches, _ = continue_from(loader_for(dirs, W2, batch_size=5, tail="continuous"), b_states[-1], 20,
                                 label="data_change", on_batch_change="continue")
    assert all(len(np.frombuffer(b["id"][3], dtype=np.int64)) == 5 for b in c_batches)
    stream = np.concatenate([ids_of(a_batches), ids_of(b_batches), ids_of(c_batches)])
    check_source_epochs(stream)
    assert abs((source_of(ids_of(c_batches)) == 2).mean() - 0.6) < 0.1
    # a resume inside the last phase is bit-exact
    again, _ = continue_from(loader_for(dirs, W2, batch_size=5, tail="continuous"), b_states[-1], 20,
                             label="data_change", on_batch_change="continue")
    assert again == c_batches


def test_a_weight_schedule_with_a_batch_change_is_refused_naming_the_fix(dirs):
    sched = rd.WeightSchedule([(0, WEIGHTS), (9, W2)])
    _, states = run(loader_for(dirs, sched), 5)
    other = loader_for(dirs, sched, batch_size=6)
    before = other.state_dict()
    with pytest.raises(rd.ResumeError, match="weight schedule with a global batch change.*fix: resume with the saved"):
        other.load_state_dict(states[5], on_batch_change="continue")
    assert other.state_dict() == before


def test_forged_rebases_and_unvalidated_sections_are_resume_errors(dirs):
    _, states = run(loader_for(dirs, WEIGHTS, tail="continuous"), 5)  # cursor 5: position 20
    st = states[5]
    loader = loader_for(dirs, WEIGHTS, tail="continuous")
    for rebase, match in (([10**6, [10**6, 0, 0]], r"state.mixture.rebase=.*a position <= 20"),
                          ([24, [24, 0, 0]], r"state.mixture.rebase=.*a position <= 20"),
                          ([0, [2**62 + 1, 2**62, 2**62]], r"state.mixture.rebase\[1\]\[0\]"),
                          ([0, [-1, 1, 0]], r"state.mixture.rebase\[1\]\[0\]"),
                          ([12, [1, 2, 3]], r"state.mixture.rebase=.*summing to the position")):
        with pytest.raises(rd.ResumeError, match=match):
            loader.load_state_dict({**st, "mixture": {**st["mixture"], "rebase": rebase}})
    ok = {**st, "mixture": {**st["mixture"], "rebase": [20, [10, 6, 4]]}}  # at the cursor: a valid rebase
    loader.load_state_dict(ok)
    assert loader.state_dict()["mixture"]["rebase"] == [20, [10, 6, 4]]
    wider = loader_for(dirs, WEIGHTS, batch_size=8, tail="continuous")
    for bad in ({}, {**st["mixture"], "schedule": 5}):
        with pytest.raises(rd.ResumeError, match="state.mixture"):
            wider.load_state_dict({**st, "mixture": bad}, on_batch_change="continue")
    c = loader_for(dirs, W2, tail="continuous")
    for sched in ([[0, [1, 1, 1]], [2**62, [1, 2, 1]]], [[0, [True, 1, 1]]]):
        with pytest.raises(rd.ResumeError, match="state.mixture"):
            c.load_state_dict({**st, "mixture": {**st["mixture"], "schedule": sched}}, label="data_change")
    assert c.cursor.committed == 0 and wider.cursor.committed == 0


def test_a_data_change_after_a_batch_change(dirs):
    """A batch change writes an origin (step 3): the saved plan still counts from position 0, so
    progress and a data_change work; a weight schedule there is refused, naming the fix."""
    from resumable_data.loader.mixture.state import mixture_progress
    from resumable_data.loader.state import LoaderState

    _, a_states = run(loader_for(dirs, WEIGHTS, tail="continuous"), 3)
    wide = lambda w: loader_for(dirs, w, batch_size=8, tail="continuous")  # noqa: E731
    b_batches, b_states = continue_from(wide(WEIGHTS), a_states[3], 2, on_batch_change="continue")
    assert b_states[-1]["batch_origin"]["step"] == 3
    prog = mixture_progress(LoaderState.from_dict(b_states[-1]))
    assert prog.position == 12 + 2 * 8
    ids = np.concatenate([ids_of(run(loader_for(dirs, WEIGHTS, tail="continuous"), 3)[0]), ids_of(b_batches)])
    assert [p.consumed for p in prog.sources] == np.bincount(source_of(ids), minlength=3).tolist()
    c_batches, _ = continue_from(wide(W2), b_states[-1], H, label="data_change")
    again, _ = continue_from(wide(W2), b_states[-1], H, label="data_change")
    assert c_batches == again
    check_source_epochs(np.concatenate([ids, ids_of(c_batches)]))
    sched = rd.WeightSchedule([(0, WEIGHTS), (9, W2)])
    with pytest.raises(rd.ResumeError, match="weight schedule with a global batch change.*fix: resume with the saved"):
        wide(sched).load_state_dict(b_states[-1], label="data_change")


@pytest.mark.parametrize("packed", [False, True])
def test_a_mixture_sampler_pickles(dirs, packed):
    import pickle

    mix = rd.Mixture(open_sources(dirs), weights=WEIGHTS, block_size=16)
    sampler = mix.sampler(1, 4, packed=packed)
    expected = sampler.at_positions(np.arange(64))
    back = pickle.loads(pickle.dumps(sampler))
    assert back.at_positions(np.arange(64)).tolist() == expected.tolist()
    assert back.state_section() == sampler.state_section()


@pytest.mark.parametrize("case", ["same", "data_change", "packed_same", "packed_data_change"])
def test_a_restore_validates_the_saved_section_once(dirs, monkeypatch, case):
    """Every restore path parses the saved mixture section exactly once (on load, into the typed
    ``LoaderState.mixture``) and passes the typed section on: the saved plan, the packed change and
    the token check do not parse it again; the resumed batches are the uninterrupted (or the changed) loader's."""
    from resumable_data.plan.mixture import plan as plan_mixture
    from resumable_data.plan.mixture import section as mixture_section

    packing = rd.Packing(16) if case.startswith("packed") else None
    weights = W2 if case.endswith("data_change") else WEIGHTS
    batches, states = run(loader_for(dirs, WEIGHTS, packing=packing), 12)
    expected, _ = continue_from(loader_for(dirs, weights, packing=packing), states[5], H,
                                **({"label": "data_change"} if weights is W2 else {}))
    calls = []
    parse = mixture_section.parse_section

    def counted(d, where="state.mixture"):
        calls.append(where)
        return parse(d, where)

    for module in (mixture_section, plan_mixture):
        monkeypatch.setattr(module, "parse_section", counted)
    loader = loader_for(dirs, weights, packing=packing)
    loader.load_state_dict(states[5], **({"label": "data_change"} if weights is W2 else {}))
    assert calls == ["state.mixture"]
    monkeypatch.undo()
    got, _ = run(loader, H)
    assert got == expected
    if weights is WEIGHTS:
        assert got == batches[5:5 + H]


@pytest.mark.parametrize("packed", [False, True])
def test_a_forged_end_of_pass_inside_an_epoch_is_refused(dirs, packed):
    """``end_of_pass`` says the state was taken right after an epoch's last batch. Set on a state in
    the middle of an epoch it was accepted: ``loader.epoch`` became -1 and the next ``iter()`` an
    empty pass. It is refused naming the field, the loader unchanged; a genuine end-of-pass state
    still resumes into an empty pass, then the next epoch, batch for batch."""
    packing = rd.Packing(16, tokens="tokens", window=8) if packed else None
    make = lambda: loader_for(dirs, WEIGHTS, packing=packing)  # noqa: E731
    first = make()
    n = len(first)
    batches, states = run(first, n + 3)
    forged = json.loads(json.dumps(states[5]))
    forged["end_of_pass"] = True
    loader, twin = make(), make()
    with pytest.raises(rd.ResumeError, match=r"state\.end_of_pass=True: expected .*fix: "):
        loader.load_state_dict(forged)
    assert loader.epoch == 0
    assert run(loader, 4)[0] == run(twin, 4)[0]
    assert states[n]["end_of_pass"] is True
    resumed = make()
    resumed.load_state_dict(states[n])
    assert resumed.epoch == 0
    assert [canon(b) for b in resumed] == []
    assert resumed.epoch == 1
    assert run(resumed, 3)[0] == batches[n : n + 3]
