"""A declared weight change (``data_change``) of a packed ``rd.Mixture``, by where it lands.

At a loader-epoch start: A declared weight change (data_change) on a packed mixture at a loader-epoch start (each source
continues from its consumed count; resumed bit-exact at random points with 2 workers; per-source
multiset checks over the documents).

Inside an epoch: A weight change (data_change) INSIDE a packed mixture epoch: effective at the first packing-window
boundary at or after the committed step. Every delivered batch, in order, equals a reference built
from that definition alone (the documents are the old plan's before the boundary and the rebased
plan's after it; each epoch's windows packed by a plain concat packer), across chained changes,
faithful resumes (2 workers) and a second change in the same epoch, with per-source multiset checks.

Review findings (issue 14): a skipping change across an epoch end, forged
sections of a packed weight schedule, the bound on earlier runs (a loader never writes a state it
refuses), earlier runs dropped once their epoch is passed, and the errors named for a batch change,
an earlier run without weights and an unpacked state with earlier runs. Every resume compares every
remaining batch, in order, with the reference.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import resumable_data as rd
from resumable_data.plan.mixture import Rebase
from tests.loader.conftest import canon
from resumable_data.plan.mixture.section import MAX_EARLIER
from tests.loader.mixture.test_mixture_resume import W2, W3, check_source_epochs, loader_for, resume_points, without_fetched
from tests.loader.mixture.test_mixture_resume import continue_from as resume_continue_from
from tests.loader.mixture.test_mixture_resume import run as resume_run
from tests.mixture_data import WEIGHTS, open_sources, source_of, write_sources

SPEC = rd.Packing(16, window=16, eos_id=0)
#: the epoch-start tests' packing (whole-document windows of the default size)
EPOCH_START_SPEC = rd.Packing(16)
G = 4


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return write_sources(tmp_path_factory.mktemp("mixpackchange"))


def mixture(dirs, weights):
    return rd.Mixture(open_sources(dirs), weights=weights, block_size=16)


def make(dirs, weights, **kw):
    return rd.DataLoader(mixture(dirs, weights), batch_size=G, seed=11, packing=SPEC, **kw)


def run(loader, steps):
    batches, states = [], [json.loads(json.dumps(loader.state_dict()))]
    while len(batches) < steps:
        for b in loader:
            batches.append(canon(b))
            states.append(json.loads(json.dumps(loader.state_dict())))
            if len(batches) == steps:
                break
    return batches, states


def continue_from(loader, state, steps, **kw):
    loader.load_state_dict(state, **kw)
    return run(loader, steps)


def rows(batch):
    return tuple(np.frombuffer(batch[k][3], dtype=np.int64).reshape(batch[k][2]).tolist()
                 for k in ("document_ids", "position_ids"))


class Reference:
    """The stream by definition: runs (start position, sampler) of the mixed stream, each epoch's
    documents packed window by window (concat, an EOS after each document), batches of G sequences."""

    def __init__(self, dirs):
        self.dirs = dirs
        mix = mixture(dirs, WEIGHTS)
        self.n = len(mix)
        self.tokens = [len(t) for t in mix.take(np.arange(self.n)).column("tokens").to_pylist()]
        self.runs = [(0, mix.sampler(11, G, packed=True))]

    def ids(self, positions):
        positions = np.asarray(positions, dtype=np.int64)
        starts = np.array([s for s, _ in self.runs])
        which = np.searchsorted(starts, positions, side="right") - 1
        out = np.empty_like(positions)
        for k in np.unique(which):
            out[which == k] = self.runs[k][1].at_positions(positions[which == k])
        return out

    def counts_at(self, position):
        start, sampler = [r for r in self.runs if r[0] <= position][-1]
        return tuple(int(x) for x in sampler.plan.counts_before(position))

    def windows(self, epoch):
        """Per window of the epoch: its rows (document_ids, position_ids), concat-packed."""
        out = []
        docs = self.ids(epoch * self.n + np.arange(self.n))
        for w in range(0, self.n, SPEC.window):
            doc, pos = [], []
            for d in docs[w:w + SPEC.window].tolist():
                doc += [d] * (self.tokens[d] + 1)
                pos += list(range(self.tokens[d] + 1))
            k = -(-len(doc) // SPEC.seq_len)
            doc += [-1] * (k * SPEC.seq_len - len(doc))
            pos += [0] * (k * SPEC.seq_len - len(pos))
            out.append([(doc[i * 16:(i + 1) * 16], pos[i * 16:(i + 1) * 16]) for i in range(k)])
        return out

    def change(self, weights, epoch, first, step):
        """Declare new weights at ``step`` of ``epoch`` (which began at ``first``): effective at the
        first window boundary at or after the step's first sequence; returns that position."""
        counts = np.cumsum([0] + [len(w) for w in self.windows(epoch)])
        j = (step - first) * G
        w = int(np.searchsorted(counts, j, side="right")) - 1
        boundary = w if j == counts[w] else w + 1
        position = epoch * self.n + min(boundary * SPEC.window, self.n)
        sampler = mixture(self.dirs, weights).sampler(11, G, packed=True)
        sampler.rebase(Rebase(position, self.counts_at(position)))
        self.runs = [r for r in self.runs if r[0] < position] + [(position, sampler)]
        return position

    def batches(self, epochs):
        out, firsts = [], []
        for e in range(epochs):
            seqs = [s for w in self.windows(e) for s in w]
            firsts.append(len(out))
            out += [(tuple(s[0] for s in seqs[i:i + G]), tuple(s[1] for s in seqs[i:i + G]))
                    for i in range(0, len(seqs), G)]
        return out, firsts

    def documents(self, epochs):
        return self.ids(np.arange(epochs * self.n))


def check_against(ref, got, epochs):
    want, _ = ref.batches(epochs)
    assert len(got) <= len(want)
    for k, b in enumerate(got):
        d, p = rows(b)
        assert (tuple(map(tuple, d)), tuple(map(tuple, p))) == (tuple(map(tuple, want[k][0])), tuple(map(tuple, want[k][1]))), k


def test_chained_changes_inside_packed_epochs_follow_the_definition(dirs):
    ref = Reference(dirs)
    _, firsts = ref.batches(3)
    e1 = 1
    s1 = firsts[e1] + 5  # inside epoch 1, not at a window boundary (checked below)
    a_batches, a_states = run(make(dirs, WEIGHTS), s1)
    assert a_states[s1]["epoch_base"] == [e1, firsts[e1]]
    p1 = ref.change(W2, e1, firsts[e1], s1)
    assert e1 * ref.n < p1 < (e1 + 1) * ref.n and (p1 - e1 * ref.n) % SPEC.window == 0
    b_loader = make(dirs, W2)
    b_batches, b_states = continue_from(b_loader, a_states[s1], 8, label="data_change")
    assert b_loader.recovery_label is rd.RecoveryLabel.DATA_CHANGE
    section = b_states[0]["mixture"]
    assert section["rebase"] == [p1, list(ref.counts_at(p1))] and section["schema_version"] == 3
    assert section["earlier"] == [[0, [0, 0, 0], [0.5, 0.3, 0.2]]]
    # a second change in the same epoch, 8 steps later, through a faithful resume with 2 workers first
    s2 = s1 + 8
    mid, _ = continue_from(make(dirs, W2, num_workers=2, persistent_workers=True), b_states[3], 5)
    assert mid == b_batches[3:8]
    assert b_states[8]["epoch_base"] == [e1, firsts[e1]]
    p2 = ref.change(W3, e1, firsts[e1], s2)
    assert p1 < p2 < (e1 + 1) * ref.n
    c_loader = make(dirs, W3)
    c_batches, c_states = continue_from(c_loader, b_states[8], 70, label="data_change")
    earlier = c_states[0]["mixture"]["earlier"]
    assert earlier == [[0, [0, 0, 0], [0.5, 0.3, 0.2]], [p1, list(ref.counts_at(p1)), [0.2, 0.2, 0.6]]]
    got = a_batches + b_batches + c_batches
    check_against(ref, got, 6)
    assert c_states[-1]["epoch_base"][0] >= 4  # several epochs after the changes
    check_source_epochs(mixture(dirs, WEIGHTS).take(ref.documents(c_states[-1]["epoch_base"][0])).column("id").to_numpy())
    # every later state resumes faithfully, bit-exact (2 workers at some), from the saved runs alone
    for j in (0, 1, 3, 9, 30, 60):
        kw = {"num_workers": 2} if j % 2 else {}
        again, again_states = continue_from(make(dirs, W3, **kw), c_states[j], 4)
        assert again == c_batches[j:j + 4], j
        assert without_fetched(again_states[-1]) == without_fetched(c_states[j + 4]), j
    # random points of the changed run, resumed faithfully with 2 persistent workers, bit-exact
    mk = lambda: make(dirs, W3, num_workers=2, persistent_workers=True)  # noqa: E731
    assert resume_points(c_states, c_batches, mk, 50, np.random.default_rng(14)) == 50
    # the packed progress and token counts follow the piecewise plan
    loader = make(dirs, W3)
    loader.load_state_dict(c_states[2])
    prog = loader.mixture_progress()
    assert sum(prog.tokens.values()) == c_states[2]["counters"]["tokens"]
    docs = [np.array(rows(b)[0]).reshape(-1) for b in got[:s2 + 2]]
    flat = np.concatenate(docs)
    src = np.searchsorted(mixture(dirs, WEIGHTS).offsets, flat[flat >= 0], side="right") - 1
    assert list(prog.tokens.values()) == np.bincount(src, minlength=3).tolist()


def test_a_change_in_the_last_window_of_an_epoch(dirs):
    ref = Reference(dirs)
    wins = ref.windows(1)
    _, firsts = ref.batches(3)
    last_window_first_seq = sum(len(w) for w in wins[:-1])
    s = firsts[1] + last_window_first_seq // G + 1  # a step whose sequences lie in the epoch's last window
    assert (s - firsts[1]) * G > last_window_first_seq and s < firsts[2]
    a_batches, a_states = run(make(dirs, WEIGHTS), s)
    p = ref.change(W2, 1, firsts[1], s)
    assert p == 2 * ref.n  # the next boundary is the next epoch's first document
    b_batches, b_states = continue_from(make(dirs, W2), a_states[s], 40, label="data_change")
    assert b_states[0]["mixture"]["rebase"][0] == p and b_states[0]["mixture"]["earlier"] == [[0, [0, 0, 0], [0.5, 0.3, 0.2]]]
    check_against(ref, a_batches + b_batches, 5)
    check_source_epochs(mixture(dirs, WEIGHTS).take(ref.documents(3)).column("id").to_numpy())
    # once the cursor passed the change, a further change at an epoch start carries no earlier runs
    k = next(j for j, st in enumerate(b_states) if st["epoch_base"] == [3, s + j])
    c_batches, c_states = continue_from(make(dirs, WEIGHTS), b_states[k], 3, label="data_change")
    assert "earlier" not in c_states[0]["mixture"] and c_states[0]["mixture"]["schema_version"] == 2
    ref.change(WEIGHTS, 3, s + k, s + k)
    check_against(ref, a_batches + b_batches[:k] + c_batches, 5)


def test_a_forged_earlier_run_is_refused_naming_the_field(dirs):
    ref = Reference(dirs)
    _, firsts = ref.batches(2)
    a_batches, a_states = run(make(dirs, WEIGHTS), firsts[1] + 5)
    _, b_states = continue_from(make(dirs, W2), a_states[-1], 2, label="data_change")
    st = b_states[-1]
    m = st["mixture"]
    late = m["rebase"][0] + 48
    for bad, match in (({**m, "earlier": []}, r"state.mixture.earlier=\[\]: expected 1 to 64 runs"),
                       ({**m, "earlier": [[0, [0, 0, 1], [0.5, 0.3, 0.2]]]}, r"state.mixture.earlier\[0\]=.*counts "
                                                                             "summing to the position"),
                       ({**m, "earlier": [[0, [0, 0, 0], [0.5, "x", 0.2]]]}, r"state.mixture.earlier\[0\]\[2\]\[1\]"),
                       ({**m, "schema_version": 2}, r"unexpected"),
                       ({**m, "rebase": [m["rebase"][0], [m["rebase"][1][0] + 1, m["rebase"][1][1] - 1,
                                                          m["rebase"][1][2]]]},
                        r"state.mixture.rebase=.*expected the counts the run before leaves at position"),
                       ({k: v for k, v in m.items() if k != "earlier"}, r"keys missing"),
                       ({**m, "rebase": [m["rebase"][0] + 16 * 7, m["rebase"][1]]}, r"state.mixture.rebase=.*counts "
                                                                                     "summing to the position"),
                       ({**m, "rebase": [m["rebase"][0] + 3, [m["rebase"][1][0] + 3] + m["rebase"][1][1:]]},
                        r"state.mixture.rebase=.*a packing-window start \(a multiple of window=16"),
                       ({**m, "rebase": [late, list(ref.counts_at(late))]},  # consistent, but past the cursor's window
                        r"state.mixture.rebase=.*expected a position <= \d+, the first packing-window boundary at or "
                        r"after the committed cursor; fix: pass an unmodified state")):
        loader = make(dirs, W2)
        with pytest.raises(rd.ResumeError, match=match):
            loader.load_state_dict({**st, "mixture": bad})
        assert loader.cursor.committed == 0
    loader = make(dirs, W2)
    loader.load_state_dict(st)
    assert {**loader.state_dict(), "recovery_label": None} == {**st, "recovery_label": None}
    assert m["rebase"][0] + 48 < 2 * ref.n  # the forged rebase above stayed inside the epoch


#: A state written after two changes inside packed epoch 1 (W1 -> W2 at step 26, W2 -> W3 at step 34),
#: two steps into W3: mixture schema 3 with its earlier runs, and the next batch's document_ids.
GOLDEN = {"mixture": {"schema_version": 3, "sources": ["web", "code", "math"], "sizes": [120, 60, 11],
                      "schedule": [[0, [0.6, 0.4, 0.0]]], "block": 16, "shuffle": True, "rebase": [319, [136, 89, 94]],
                      "earlier": [[0, [0, 0, 0], [0.5, 0.3, 0.2]], [239, [120, 73, 46], [0.2, 0.2, 0.6]]],
                      "tokens": [994, 561, 556]},
          "cursor": {"committed": 36, "delivered": 36, "fetched": 36}, "epoch_base": [1, 21],
          "counters": {"attempted_updates": 0, "applied_updates": 0, "skipped_updates": 0, "samples": 143, "tokens": 2111}}
GOLDEN_NEXT = [[44, 44, 44, 44, 44, 44, 152, 152, 3, 3, 3, 3, 3, 3, 3, 3],
               [151, 151, 151, 151, 151, 151, 173, 173, 173, 173, 173, 5, 5, 5, 5, 5],
               [5, 5, 148, 148, 148, 148, 148, 63, 63, 63, 63, 63, 165, 165, 165, 165],
               [165, 165, 165, 165, 165, 165, 165, 11, 11, 11, 11, -1, -1, -1, -1, -1]]


def test_golden_packed_state_with_earlier_runs(dirs):
    """The schema-3 section loads (faithfully, into the W3 loader), gives the pinned next batch and
    is written back unchanged; the same state at schema 2 (no 'earlier') is refused by name."""
    loader = make(dirs, W3)
    state = {**loader.state_dict(), **GOLDEN, "recovery_label": "data_change"}
    loader.load_state_dict(state)
    assert loader.state_dict() == {**state, "recovery_label": "faithful_continuation"}
    assert rows(canon(next(iter(loader))))[0] == GOLDEN_NEXT
    with pytest.raises(rd.ResumeError, match=r"state.mixture.*unexpected"):
        make(dirs, W3).load_state_dict({**state, "mixture": {**GOLDEN["mixture"], "schema_version": 2}})


def test_a_skipping_change_inside_an_epoch_takes_effect_after_the_skipped_steps(dirs):
    """commit='explicit', two batches delivered but not committed, resumed with on_uncommitted='skip'
    and new weights: the change is declared at the first undelivered step (its window boundary), the
    skipped steps' sequences are never delivered, and every later batch is the reference's."""
    ref = Reference(dirs)
    _, firsts = ref.batches(2)
    committed = firsts[1] + 3
    a = make(dirs, WEIGHTS, commit="explicit")
    a_batches = []
    while len(a_batches) < committed + 2:  # across the epoch end (one iter() is one epoch)
        for b in a:
            a_batches.append(canon(b))
            if len(a_batches) <= committed:
                a.commit()
            if len(a_batches) == committed + 2:
                break
    state = json.loads(json.dumps(a.state_dict()))
    assert state["cursor"]["committed"] == committed and state["cursor"]["delivered"] == committed + 2
    ref.change(W2, 1, firsts[1], committed + 2)
    b_batches, b_states = continue_from(make(dirs, W2), state, 30, on_uncommitted="skip", label="data_change")
    assert b_states[0]["skipped"][0][:2] == [committed, committed + 2], b_states[0]["skipped"]
    want, _ = ref.batches(4)
    for k, b in enumerate(a_batches):
        assert rows(b) == tuple(list(map(list, x)) for x in want[k]), k
    for k, b in enumerate(b_batches):
        assert rows(b) == tuple(list(map(list, x)) for x in want[committed + 2 + k]), k


def test_a_best_fit_change_inside_an_epoch_keeps_every_source_epoch_and_resumes_exactly(dirs):
    """best_fit packs a window's documents into bins out of document order: per window the delivered
    documents are the reference plan's (a multiset per window, the bins' order being best_fit's), every
    source epoch holds each record once, and later states resume bit-exact with 2 workers."""
    spec = rd.Packing(16, mode="best_fit", window=8)

    def mk(weights, **kw):
        return rd.DataLoader(mixture(dirs, weights), batch_size=G, seed=11, packing=spec, **kw)

    a_batches, a_states = run(mk(WEIGHTS), 40)
    k = next(j for j in range(len(a_states)) if a_states[j]["epoch_base"][0] == 1 and a_states[j]["epoch_base"][1] < j)
    b_loader = mk(W2)
    b_batches, b_states = continue_from(b_loader, a_states[k], 60, label="data_change")
    rebase = b_states[0]["mixture"]["rebase"]
    n = a_states[0]["plan"]["num_records"]
    assert n < rebase[0] < 2 * n and (rebase[0] - n) % 8 == 0 and b_states[0]["mixture"]["earlier"]
    old = mixture(dirs, WEIGHTS).sampler(11, G, packed=True)
    new = mixture(dirs, W2).sampler(11, G, packed=True)
    new.rebase(Rebase(rebase[0], tuple(rebase[1])))
    end = b_states[-1]["epoch_base"][0] * n  # the documents of the whole epochs delivered
    planned = np.concatenate([old.at_positions(np.arange(rebase[0])), new.at_positions(np.arange(rebase[0], end))])
    docs = np.concatenate([np.array(rows(b)[0]).reshape(-1) for b in a_batches[:k] + b_batches])
    pos = np.concatenate([np.array(rows(b)[1]).reshape(-1) for b in a_batches[:k] + b_batches])
    begun = docs[(docs >= 0) & (pos == 0)][:end]  # each document once, at its first token
    windows = [w for e in range(end // n) for w in range(e * n, (e + 1) * n, 8)]
    for w in windows:  # per window (each epoch's from its first document): the planned documents
        stop = min(w + 8, (w // n + 1) * n)
        assert sorted(begun[w:stop].tolist()) == sorted(planned[w:stop].tolist()), w
    check_source_epochs(mixture(dirs, WEIGHTS).take(planned).column("id").to_numpy())
    for j in (2, 7, 21, 40):
        again, _ = continue_from(mk(W2, num_workers=2), b_states[j], 4)
        assert again == b_batches[j:j + 4], j


def test_a_packed_weight_schedule_equals_the_chained_changes_at_its_steps(dirs):
    """A declared schedule with packing: segment k (from step s_k) takes effect at the first window
    boundary at or after s_k under the runs before it, exactly as a data_change at s_k does: every
    batch, in order, equals the chained run's and the reference's; it resumes bit-exact with 2
    workers; a data_change against it is refused naming the fix."""
    ref = Reference(dirs)
    _, firsts = ref.batches(2)
    s1 = firsts[1] + 5
    s2 = s1 + 8
    a_batches, a_states = run(make(dirs, WEIGHTS), s1)
    b_batches, b_states = continue_from(make(dirs, W2), a_states[s1], 8, label="data_change")
    c_batches, _ = continue_from(make(dirs, W3), b_states[8], 50, label="data_change")
    chained = a_batches + b_batches + c_batches
    schedule = rd.WeightSchedule([(0, WEIGHTS), (s1, W2), (s2, W3)])
    loader = make(dirs, schedule)
    batches, states = run(loader, len(chained))
    assert batches == chained
    ref.change(W2, 1, firsts[1], s1)
    ref.change(W3, 1, firsts[1], s2)
    check_against(ref, batches, 6)
    assert states[5]["mixture"]["schedule"] == [[0, [0.5, 0.3, 0.2]], [s1, [0.2, 0.2, 0.6]], [s2, [0.6, 0.4, 0.0]]]
    assert states[5]["mixture"]["rebase"] is None and "earlier" not in states[5]["mixture"]
    assert sum(states[-1]["mixture"]["tokens"]) == states[-1]["counters"]["tokens"]
    mk = lambda: make(dirs, schedule, num_workers=2, persistent_workers=True)  # noqa: E731
    assert resume_points(states, batches, mk, 20, np.random.default_rng(4)) == 20
    for other, label in ((W2, "data_change"), (rd.WeightSchedule([(0, WEIGHTS), (s1 + 1, W2)]), "data_change"),
                         (rd.WeightSchedule([(0, WEIGHTS), (s1 + 1, W2)]), None)):
        target = make(dirs, other)
        with pytest.raises(rd.ResumeError, match=r"mixture weights with packing and a weight schedule: saved from step "
                                                 r"0: web=0.5.*fix: resume with the saved schedule"):
            target.load_state_dict(states[30], **({"label": label} if label else {}))
        assert target.cursor.committed == 0


# -- review findings (issue 14) -----------------------------------------------------------------
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


# -- a change at a loader-epoch start --------------------------------------------------------------
def documents(batches):
    """The delivered documents in order (a document split across sequences once)."""
    docs = np.concatenate([np.frombuffer(b["document_ids"][3], dtype=np.int64) for b in batches])
    docs = docs[docs >= 0]
    return docs[np.concatenate([[True], docs[1:] != docs[:-1]])]


def dedup(ids):
    return ids[np.concatenate([[True], ids[1:] != ids[:-1]])]


def test_a_weight_change_at_a_packed_epoch_start_continues_every_source(dirs):
    a_batches, a_states = resume_run(loader_for(dirs, WEIGHTS, packing=EPOCH_START_SPEC), 50)
    starts = [k for k, st in enumerate(a_states) if st["epoch_base"] == [2, k]]
    assert starts, [st["epoch_base"] for st in a_states]
    k = starts[0]  # the first step of loader epoch 2
    other = loader_for(dirs, W2, packing=EPOCH_START_SPEC)
    b_batches, b_states = resume_continue_from(other, a_states[k], 60, label="data_change")
    assert other.recovery_label is rd.RecoveryLabel.DATA_CHANGE
    mix_a = rd.Mixture(open_sources(dirs), weights=WEIGHTS, block_size=16)
    mix_b = rd.Mixture(open_sources(dirs), weights=W2, block_size=16)
    sampler_a = mix_a.sampler(11, 4, packed=True)
    n = len(sampler_a)
    before = np.concatenate([sampler_a.indices(e, np.arange(n)) for e in range(2)])
    rebase = b_states[0]["mixture"]["rebase"]
    counts = np.bincount(source_of(mix_a.take(before).column("id").to_numpy()), minlength=3).tolist()
    assert rebase == [2 * n, counts]  # the epoch's first document; each source's consumed count
    sampler_b = mix_b.sampler(11, 4, packed=True)
    sampler_b.rebase(Rebase(rebase[0], tuple(rebase[1])))
    after = np.concatenate([sampler_b.indices(e, np.arange(n)) for e in range(2, 9)])
    got = np.concatenate([documents(a_batches[:k]), documents(b_batches)])
    expected = dedup(np.concatenate([before, after]))
    assert got.tolist() == expected[:len(got)].tolist()
    assert len(documents(b_batches)) > 3 * n  # several loader epochs under the new weights
    ids_b = mix_b.take(after).column("id").to_numpy()
    assert abs((source_of(ids_b) == 2).mean() - 0.6) < 0.05
    check_source_epochs(mix_a.take(np.concatenate([before, after])).column("id").to_numpy())
    # the rebased stream resumes bit-exact anywhere (the saved rebase adopted), with 2 workers
    make = lambda: loader_for(dirs, W2, packing=EPOCH_START_SPEC, num_workers=2, persistent_workers=True)  # noqa: E731
    assert resume_points(b_states, b_batches, make, 40, np.random.default_rng(7)) == 40
    # a second change, at a later epoch start of the rebased run, chains
    later = [j for j, st in enumerate(b_states) if st["epoch_base"][1] == b_states[0]["cursor"]["committed"] + j
             and st["epoch_base"][0] > 3]
    c_batches, c_states = resume_continue_from(loader_for(dirs, WEIGHTS, packing=EPOCH_START_SPEC), b_states[later[0]], 10,
                                        label="data_change")
    again, _ = resume_continue_from(loader_for(dirs, WEIGHTS, packing=EPOCH_START_SPEC, num_workers=2), b_states[later[0]], 10,
                             label="data_change")
    assert again == c_batches and c_states[0]["mixture"]["rebase"][0] == b_states[later[0]]["epoch_base"][0] * n


def test_a_packed_rebase_past_its_epoch_start_is_refused(dirs):
    _, states = resume_run(loader_for(dirs, WEIGHTS, packing=EPOCH_START_SPEC), 30)
    k = next(j for j, st in enumerate(states) if st["epoch_base"] == [1, j])
    n = states[k]["plan"]["num_records"]
    st = states[k + 1]
    forged = {**st, "mixture": {**st["mixture"], "rebase": [n + 4, [2, 1, n + 1]]}}
    with pytest.raises(rd.ResumeError, match=r"state.mixture.rebase=.*a packing-window start \(a multiple of "
                                             r"window=1024 from an epoch's first document"):
        loader_for(dirs, WEIGHTS, packing=EPOCH_START_SPEC).load_state_dict(forged)


def test_every_state_of_a_rebased_packed_run_resumes_and_a_reused_loader_drops_its_old_indexes(dirs):
    """Each state's epoch is checked on the rebased order (the unrebased one has other epoch
    lengths); a loader whose indexes were built on the old order rebuilds them after the rebase."""
    a_batches, a_states = resume_run(loader_for(dirs, WEIGHTS, packing=EPOCH_START_SPEC), 40)
    k = next(j for j, st in enumerate(a_states) if st["epoch_base"] == [2, j])
    b_batches, b_states = resume_continue_from(loader_for(dirs, W2, packing=EPOCH_START_SPEC), a_states[k], 84, label="data_change")
    for j in range(len(b_batches) - 3):
        got, _ = resume_continue_from(loader_for(dirs, W2, packing=EPOCH_START_SPEC), b_states[j], 4)
        assert got == b_batches[j:j + 4], j
    w2_batches, w2_states = resume_run(loader_for(dirs, W2, packing=EPOCH_START_SPEC), 40)
    k2 = next(j for j, st in enumerate(w2_states) if st["epoch_base"] == [2, j])
    reused = loader_for(dirs, W2, packing=EPOCH_START_SPEC)
    assert resume_continue_from(reused, w2_states[k2], 3)[0] == w2_batches[k2:k2 + 3]  # epoch 2 indexed, unrebased
    assert resume_continue_from(reused, a_states[k], 8, label="data_change")[0] == b_batches[:8]


@pytest.mark.parametrize("epoch", [2**40, 2**62])
@pytest.mark.parametrize("label", [None, "data_change"])
def test_a_forged_packed_epoch_base_epoch_is_refused_naming_the_field(dirs, epoch, label):
    """A packed state's epoch_base epoch must not exceed its first step (each epoch holds a step)
    and its documents (epoch x num_records) must stay below 2**62: else a ResumeError, not an
    OverflowError or a state that counts 2**40 epochs of tokens."""
    _, states = resume_run(loader_for(dirs, WEIGHTS, packing=EPOCH_START_SPEC), 30)
    k = next(j for j, st in enumerate(states) if st["epoch_base"] == [1, j])
    forged = {**states[k], "epoch_base": [epoch, k]}
    loader = loader_for(dirs, W2 if label else WEIGHTS, packing=EPOCH_START_SPEC)
    for call in (loader.validate_state_dict, loader.load_state_dict):
        with pytest.raises(rd.ResumeError, match=rf"state.epoch_base\[0\]={epoch}: expected a packed epoch <= its "
                                                 rf"first step {k}.*fix: pass an unmodified state"):
            call(forged, **({"label": label} if label else {}))
    assert loader.cursor.committed == 0
    loader.load_state_dict(states[k], **({"label": label} if label else {}))
    assert loader.state_dict()["epoch_base"] == [1, k] and loader.cursor.committed == k


@pytest.mark.parametrize("window", [{"web": 32, "code": 8}, {"math": 4}], ids=["web32-code8", "math4"])
def test_packing_and_a_data_change_over_windowed_sources(dirs, window):
    """Windowed sources (shuffle windows per source) under packing, with a data_change at loader
    epoch 2's start: the delivered documents are the plans' (before: the saved weights' first two
    epochs; after: the rebased plan's), and every source's records come in per-source epochs."""
    def mix(weights):
        return rd.Mixture(open_sources(dirs), weights=weights, block_size=16, shuffle_window=window)

    def make(weights):
        return rd.DataLoader(mix(weights), batch_size=4, seed=11, packing=EPOCH_START_SPEC)

    a_batches, a_states = resume_run(make(WEIGHTS), 60)
    k = next(j for j, st in enumerate(a_states) if st["epoch_base"] == [2, j])
    b_batches, b_states = resume_continue_from(make(W2), a_states[k], 60, label="data_change")
    sampler_a = mix(WEIGHTS).sampler(11, 4, packed=True)
    n = len(sampler_a)
    before = np.concatenate([sampler_a.indices(e, np.arange(n)) for e in range(2)])
    rebase = b_states[0]["mixture"]["rebase"]
    assert rebase[0] == 2 * n
    sampler_b = mix(W2).sampler(11, 4, packed=True)
    sampler_b.rebase(Rebase(rebase[0], tuple(rebase[1])))
    after = np.concatenate([sampler_b.indices(e, np.arange(n)) for e in range(2, 9)])
    planned = np.concatenate([before, after])
    got = np.concatenate([documents(a_batches[:k]), documents(b_batches)])
    assert len(got) > 2 * n and got.tolist() == dedup(planned)[:len(got)].tolist()
    check_source_epochs(mix(WEIGHTS).take(planned).column("id").to_numpy())
    unchanged = np.concatenate([sampler_a.indices(e, np.arange(n)) for e in range(9)])
    check_source_epochs(mix(WEIGHTS).take(unchanged).column("id").to_numpy())
    assert not np.array_equal(np.sort(sampler_a.indices(0, np.arange(n))), sampler_a.indices(0, np.arange(n)))
    # a state after the change resumes exactly with 2 workers
    make2 = lambda: rd.DataLoader(mix(W2), batch_size=4, seed=11, packing=EPOCH_START_SPEC, num_workers=2)  # noqa: E731
    assert resume_points(b_states, b_batches, make2, 4, np.random.default_rng(3)) == 4


# -- attack findings (mixattack) -----------------------------------------------------------------
def _within(seconds, build):
    """``build()``, failing (instead of hanging the suite) when it runs longer than ``seconds``."""
    import signal

    def late(*_):
        raise TimeoutError(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, late)
    signal.alarm(seconds)
    try:
        return build()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("step", [2**62, 10**15])
def test_a_packed_schedule_segment_out_of_reach_is_refused_at_construction(dirs, step):
    """Placing a packed schedule walks one packing index per epoch up to each segment: a segment
    at step 2**62 (a step WeightSchedule accepts) walked forever, writing an index to the cache per
    epoch. It is refused at once, naming the segment, the bound and a fix."""
    schedule = rd.WeightSchedule([(0, WEIGHTS), (step, W2)])
    with pytest.raises(rd.ConfigError, match=rf"weights=.*step {step}.*fix: "):
        _within(60, lambda: make(dirs, schedule))


def test_a_packed_schedule_segment_beyond_the_placing_bound_is_refused(dirs, monkeypatch):
    """The walk itself is bounded: a segment whose epoch lies past ``MAX_SCHEDULE_EPOCHS`` loader
    epochs is refused (here with the bound lowered to 3), one within it is placed as before."""
    from resumable_data.loader.mixture import packed

    monkeypatch.setattr(packed, "MAX_SCHEDULE_EPOCHS", 3)
    ref = Reference(dirs)
    _, firsts = ref.batches(5)
    near = rd.WeightSchedule([(0, WEIGHTS), (firsts[2] + 1, W2)])
    make(dirs, near)  # epoch 2: placed
    far = rd.WeightSchedule([(0, WEIGHTS), (firsts[4] + 1, W2)])
    with pytest.raises(rd.ConfigError, match=rf"step {firsts[4] + 1}.*the first 3 loader epochs.*fix: "):
        _within(60, lambda: make(dirs, far))
