"""Packed mixtures, review findings of issue 14: a skipping change across an epoch end, forged
sections of a packed weight schedule, the bound on earlier runs (a loader never writes a state it
refuses), earlier runs dropped once their epoch is passed, and the errors named for a batch change,
an earlier run without weights and an unpacked state with earlier runs. Every resume compares every
remaining batch, in order, with the reference of tests/loader/test_mixture_pack_change.py."""

from __future__ import annotations

import json

import pytest

import resumable_data as rd
from resumable_data.plan.mixture.section import MAX_EARLIER
from tests.loader.conftest import canon
from tests.loader.test_mixture_pack_change import G, SPEC, Reference, check_against, continue_from, make, mixture, \
    rows, run
from tests.loader.test_mixture_resume import W2, W3, without_fetched
from tests.mixture_data import WEIGHTS, write_sources


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return write_sources(tmp_path_factory.mktemp("mixpackfix"))


def digest(loader):
    return json.dumps(loader.state_dict(), sort_keys=True)


def refused(loader, state, match, **kw):
    """``state`` is refused with an rd error matching ``match`` and the loader is left unchanged."""
    before = digest(loader)
    with pytest.raises(rd.ResumableDataError, match=match):
        loader.load_state_dict(state, **kw)
    assert digest(loader) == before


def test_a_skipped_first_step_of_the_next_epoch_with_a_change(dirs):
    """Epoch 1's last step delivered, not committed: resumed with on_uncommitted='skip' and new
    weights, the change is declared at the first undelivered step, epoch 2's first (so the restored
    loader, located in epoch 1, keeps that epoch's runs), and every later batch is the reference's."""
    ref = Reference(dirs)
    _, firsts = ref.batches(3)
    committed = firsts[2] - 1  # every step but epoch 1's last committed
    a = make(dirs, WEIGHTS, commit="explicit")
    a_batches = []
    while len(a_batches) < committed + 1:
        for b in a:
            a_batches.append(canon(b))
            if len(a_batches) <= committed:
                a.commit()
            if len(a_batches) == committed + 1:
                break
    state = json.loads(json.dumps(a.state_dict()))
    assert state["cursor"]["committed"] == committed and state["cursor"]["delivered"] == committed + 1
    assert state["epoch_base"] == [1, firsts[1]]  # the committed cursor is still located in epoch 1
    ref.change(W2, 2, firsts[2], firsts[2])
    b_batches, b_states = continue_from(make(dirs, W2), state, 30, on_uncommitted="skip", label="data_change")
    assert b_states[0]["skipped"][0][:2] == [committed, committed + 1]
    want, _ = ref.batches(4)
    for k, b in enumerate(a_batches):
        assert rows(b) == tuple(list(map(list, x)) for x in want[k]), k
    for k, b in enumerate(b_batches):
        assert rows(b) == tuple(list(map(list, x)) for x in want[committed + 1 + k]), k
    for j in (0, 3, 25):  # the states written after it resume faithfully, bit-exact
        again, again_states = continue_from(make(dirs, W2), b_states[j], 4)
        assert again == b_batches[j:j + 4], j
        assert without_fetched(again_states[-1]) == without_fetched(b_states[j + 4]), j


def test_earlier_runs_are_dropped_once_their_epoch_is_passed(dirs):
    """A change inside epoch 1 writes its earlier run while the cursor is in epoch 1; from epoch 2
    on the state holds the rebase alone (schema 2), which resumes bit-exact."""
    ref = Reference(dirs)
    _, firsts = ref.batches(4)
    s1 = firsts[1] + 5
    a_batches, a_states = run(make(dirs, WEIGHTS), s1)
    ref.change(W2, 1, firsts[1], s1)
    b_batches, b_states = continue_from(make(dirs, W2), a_states[s1], 2 * (firsts[2] - firsts[1]), label="data_change")
    check_against(ref, a_batches + b_batches, 4)
    in_epoch_1 = [st for st in b_states if st["epoch_base"][0] == 1]
    later = [j for j, st in enumerate(b_states) if st["epoch_base"][0] >= 2]
    assert in_epoch_1 and later
    assert all(st["mixture"]["schema_version"] == 3 and len(st["mixture"]["earlier"]) == 1 for st in in_epoch_1)
    for j in later:
        m = b_states[j]["mixture"]
        assert "earlier" not in m and m["schema_version"] == 2 and m["rebase"] == b_states[0]["mixture"]["rebase"], j
    for j in (later[0], later[0] + 1, later[-1] - 4):
        again, again_states = continue_from(make(dirs, W2), b_states[j], 4)
        assert again == b_batches[j:j + 4], j
        assert without_fetched(again_states[-1]) == without_fetched(b_states[j + 4]), j
    # a further change from such a state keeps no run that ended before the epoch
    c_batches, c_states = continue_from(make(dirs, W3), b_states[later[0] + 3], 3, label="data_change")
    assert len(c_states[0]["mixture"].get("earlier", [])) <= 1
    ref.change(W3, *b_states[later[0] + 3]["epoch_base"], s1 + later[0] + 3)
    check_against(ref, a_batches + b_batches[:later[0] + 3] + c_batches, 4)


def test_a_change_that_would_exceed_the_earlier_runs_bound_is_refused(dirs):
    """Window 1, batch 1: a change per step inside one epoch. The loader writes at most MAX_EARLIER
    earlier runs; each such state loads back faithfully; the change that would leave one more is
    refused (naming label and the bound) and changes nothing."""
    spec = rd.Packing(16, window=1, eos_id=0)

    def mk(weights):
        return rd.DataLoader(mixture(dirs, weights), batch_size=1, seed=11, packing=spec)

    ws = [WEIGHTS, W2]
    _, states = run(mk(WEIGHTS), 2)
    state = states[-1]
    for i in range(MAX_EARLIER):
        _, states = continue_from(mk(ws[(i + 1) % 2]), state, 1, label="data_change")
        state = states[-1]
        assert state["epoch_base"][0] == 0 and len(state["mixture"]["earlier"]) == i + 1
    assert len(state["mixture"]["earlier"]) == MAX_EARLIER
    own = mk(ws[MAX_EARLIER % 2])
    again, _ = continue_from(own, state, 2)  # the loader's own state with MAX_EARLIER runs loads
    check = mk(ws[MAX_EARLIER % 2])
    want, _ = continue_from(check, state, 2)
    assert again == want
    refused(mk(ws[(MAX_EARLIER + 1) % 2]), state, rf"label='data_change': expected a weight change that leaves at "
            rf"most {MAX_EARLIER} earlier runs.*fix: resume with the saved weights", label="data_change")


SCHEDULE_STEPS = (26, 40)


def test_a_forged_packed_schedule_section_is_refused_by_name(dirs):
    """A packed weight schedule's section is validated before its schedule is compared: every forged
    variant raises an rd error naming the field and leaves the loader unchanged."""
    schedule = rd.WeightSchedule([(0, WEIGHTS), (SCHEDULE_STEPS[0], W2), (SCHEDULE_STEPS[1], W3)])
    batches, states = run(make(dirs, schedule), 33)
    st = states[30]
    m = st["mixture"]
    assert m["schema_version"] == 2 and "tokens" in m
    earlier = [[0, [0, 0, 0], [0.5, 0.3, 0.2]]]
    for bad, match in (({**m, "earlier": "garbage"}, r"state.mixture=.*unexpected \['earlier'\]"),
                       ({**m, "schema_version": 99}, r"state.mixture=.*unexpected \['tokens'\]"),
                       ({**m, "schema_version": 1}, r"state.mixture=.*unexpected \['tokens'\]"),
                       ({**m, "zzz": 1}, r"unexpected \['zzz'\]"),
                       ({**m, "tokens": "x"}, r"state.mixture.tokens='x': expected one token count per source"),
                       ({**m, "tokens": [[1], 2, 3]}, r"state.mixture.tokens\[0\]=\[1\]: expected an integer"),
                       ({**m, "tokens": None}, r"state.mixture.tokens=None"),
                       ({**m, "schema_version": 3, "rebase": [16, [8, 5, 3]], "earlier": earlier},
                        r"state.mixture.earlier=.*absent in a state of a packed weight schedule"),
                       ({**m, "rebase": [16, [8, 5, 3]]}, r"state.mixture.rebase=.*null in a state of a packed weight "
                                                          "schedule")):
        refused(make(dirs, schedule), {**st, "mixture": bad}, match)
    loader = make(dirs, schedule)
    again, _ = continue_from(loader, st, 3)
    assert again == batches[30:33]


def test_a_batch_change_after_a_packed_change_names_the_batch(dirs):
    ref = Reference(dirs)
    _, firsts = ref.batches(2)
    _, a_states = run(make(dirs, WEIGHTS), firsts[1] + 5)
    _, b_states = continue_from(make(dirs, W2), a_states[-1], 3, label="data_change")
    other = rd.DataLoader(mixture(dirs, W2), batch_size=G // 2, seed=11, packing=SPEC)
    refused(other, b_states[2], r"global batch change \(on_batch_change='continue'\) of a packed stream",
            on_batch_change="continue")


def test_an_earlier_run_without_weights_is_refused_by_name(dirs):
    ref = Reference(dirs)
    _, firsts = ref.batches(2)
    _, a_states = run(make(dirs, WEIGHTS), firsts[1] + 5)
    _, b_states = continue_from(make(dirs, W2), a_states[-1], 3, label="data_change")
    st = b_states[2]
    e0 = st["mixture"]["earlier"][0]
    zero = {**st["mixture"], "earlier": [[e0[0], e0[1], [0, 0, 0]]]}
    for w, kw in ((W2, {}), (W3, {"label": "data_change"})):
        refused(make(dirs, w), {**st, "mixture": zero}, r"state.mixture.earlier\[0\]\[2\]=\[0, 0, 0\]: expected "
                "weights with at least one > 0", **kw)


def test_an_unpacked_state_with_earlier_runs_is_refused_by_name(dirs):
    def unpacked(weights):
        return rd.DataLoader(mixture(dirs, weights), batch_size=G, seed=11)

    _, u_states = run(unpacked(WEIGHTS), 10)
    v_batches, v_states = continue_from(unpacked(W2), u_states[10], 3, label="data_change")
    m = v_states[2]["mixture"]
    assert m["rebase"] is not None
    forged = {**m, "schema_version": 3, "earlier": [[0, [0, 0, 0], [0.5, 0.3, 0.2]]]}
    refused(unpacked(W2), {**v_states[2], "mixture": forged}, r"state.mixture.earlier=.*absent in a state of an "
            "unpacked mixture")
    again, _ = continue_from(unpacked(W2), v_states[2], 1)  # the unforged state loads
    assert again == v_batches[2:3]
