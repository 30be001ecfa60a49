"""Per-source progress of a packed rd.Mixture loader (loader.mixture_progress()) and its per-source
token counts on every tail (partial, drop, wrap), each checked at every step against a brute-force
count over the delivered batches (every batch in order), across windows, epochs and resumes."""

from __future__ import annotations

import numpy as np
import pytest

import resumable_data as rd
from tests.loader.conftest import canon
from tests.loader.mixture.test_mixture_resume import W2, continue_from, resume_points, run, without_fetched
from tests.mixture_data import SIZES, WEIGHTS, open_sources, write_sources

NAMES = list(SIZES)
SPECS = {
    "concat-w16-eos": rd.Packing(16, window=16, eos_id=0),
    "best_fit-w8": rd.Packing(16, mode="best_fit", window=8),
    "concat-1window": rd.Packing(16),
}


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return write_sources(tmp_path_factory.mktemp("mixpackprog"))


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RD_CACHE_DIR", str(tmp_path / "cache"))


def mixture(dirs, weights=WEIGHTS):
    return rd.Mixture(open_sources(dirs), weights=weights, block_size=16)


def make(dirs, spec, weights=WEIGHTS, **kw):
    return rd.DataLoader(mixture(dirs, weights), batch_size=4, seed=11, packing=spec, **kw)


def arrays(batch):
    return {k: np.frombuffer(batch[k][3], dtype=np.int64).reshape(batch[k][2]) for k in ("document_ids", "position_ids")}


def source(ids, offsets):
    return np.searchsorted(offsets, ids, side="right") - 1


def tokens_of(batch, offsets):
    doc = arrays(batch)["document_ids"].reshape(-1)
    return np.bincount(source(doc[doc >= 0], offsets), minlength=3)


def begun_of(batch, offsets, rows=None):
    """Documents whose first token (position 0) lies in the batch's ``rows`` (default: all)."""
    a = arrays(batch)
    doc, pos = a["document_ids"], a["position_ids"]
    if rows is not None:
        doc, pos = doc[rows], pos[rows]
    first = (doc >= 0) & (pos == 0)
    return np.bincount(source(doc[first], offsets), minlength=3)


def occurrences_of(batch, offsets):
    """Documents with input tokens in the batch, each occurrence once (a run of one document's
    consecutive positions in the flattened rows; no document here is longer than a sequence)."""
    a = arrays(batch)
    doc, pos = a["document_ids"].reshape(-1), a["position_ids"].reshape(-1)
    new = (doc >= 0) & np.concatenate([[True], (doc[1:] != doc[:-1]) | (pos[1:] != pos[:-1] + 1)])
    return np.bincount(source(doc[new], offsets), minlength=3)


def epoch_documents(dirs, weights, epoch, n, rebase=None):
    """Each source's documents in loader epoch ``epoch`` of the plan (all of them)."""
    sampler = mixture(dirs, weights).sampler(11, 4, packed=True)
    if rebase is not None:
        sampler.rebase(rebase)
    ids = sampler.indices(epoch, np.arange(n))
    return np.bincount(source(ids, mixture(dirs).offsets), minlength=3)


def expected_progress(dirs, batches, states, counts, weights=WEIGHTS):
    """Brute force at every step k: tokens delivered per source; documents consumed (every document
    of the earlier epochs, and in the cursor's epoch the documents begun in its delivered sequences,
    a wrapped head not counted twice); the next step's documents per source."""
    offsets = mixture(dirs).offsets
    n = states[0]["plan"]["num_records"]
    out = []
    tokens = np.zeros(3, dtype=np.int64)
    for k in range(len(batches)):
        epoch, first = states[k]["epoch_base"]
        docs = sum((epoch_documents(dirs, weights, e, n) for e in range(epoch)), np.zeros(3, dtype=np.int64))
        for i in range(first, k):
            start = (i - first) * 4
            rows = np.arange(4)[start + np.arange(4) < counts[epoch]]  # not the wrapped head
            docs = docs + begun_of(batches[i], offsets, rows)
        out.append((tokens.copy(), docs, occurrences_of(batches[k], offsets)))
        tokens += tokens_of(batches[k], offsets)
    return out


def epoch_counts(loader, epochs):
    return [loader._stream.index(e).num_sequences for e in range(epochs)]


def check_progress(loader, states, expected, ks):
    for k in ks:
        loader.load_state_dict(states[k])
        prog = loader.mixture_progress()
        tokens, docs, nxt = expected[k]
        assert prog.step == k and prog.tokens == dict(zip(NAMES, tokens.tolist())), k
        assert sum(prog.tokens.values()) == states[k]["counters"]["tokens"], k
        assert states[k]["mixture"]["tokens"] == tokens.tolist(), k
        assert [p.consumed for p in prog.sources] == docs.tolist(), k
        assert [(p.epoch, p.position) for p in prog.sources] == [divmod(int(c), SIZES[n]) for c, n in zip(docs, NAMES)]
        assert prog.next_step == dict(zip(NAMES, nxt.tolist())), k


@pytest.mark.parametrize("spec", SPECS, ids=list(SPECS))
@pytest.mark.parametrize("tail", ["partial", "drop", "wrap"])
def test_packed_progress_and_tokens_match_the_delivered_batches_at_every_step(dirs, spec, tail):
    loader = make(dirs, SPECS[spec], tail=tail)
    batches, states = run(loader, 70)
    counts = epoch_counts(loader, states[-1]["epoch_base"][0] + 1)
    if tail == "drop":
        assert any(c % 4 for c in counts)  # some epoch drops its last sequences
    if tail == "wrap":
        assert any(c % 4 for c in counts)  # some epoch wraps to its first sequences
    assert states[-1]["epoch_base"][0] >= 3  # several epochs
    expected = expected_progress(dirs, batches, states, counts)
    # every step, on the running loader (its own memo) and on a fresh loader per state (the seed)
    live = make(dirs, SPECS[spec], tail=tail)
    for k, b in enumerate(batches):
        prog = live.mixture_progress()
        tokens, docs, nxt = expected[k]
        assert prog.tokens == dict(zip(NAMES, tokens.tolist())) and states[k]["mixture"]["tokens"] == tokens.tolist(), k
        assert [p.consumed for p in prog.sources] == docs.tolist(), k
        assert prog.next_step == dict(zip(NAMES, nxt.tolist())), k
        assert canon(next(iter(live))) == b, k
    ks = sorted({1, 5, 17, 33, 52, 69} | {st["epoch_base"][1] for st in states[1:]}
                | {st["epoch_base"][1] - 1 for st in states[2:]} | {st["epoch_base"][1] + 1 for st in states[:-2]})
    check_progress(make(dirs, SPECS[spec], tail=tail), states, expected, [k for k in ks if 0 <= k < len(batches)])
    if spec == "concat-w16-eos":  # window boundaries are among the steps (several windows an epoch)
        assert len(loader._stream.index(0).cumulative) > 10


def test_packed_progress_resumes_with_two_workers_and_counts_match(dirs):
    spec = SPECS["concat-w16-eos"]
    batches, states = run(make(dirs, spec, tail="drop"), 60)
    mk = lambda: make(dirs, spec, tail="drop", num_workers=2, persistent_workers=True)  # noqa: E731
    assert resume_points(states, batches, mk, 8, np.random.default_rng(2)) == 8


def test_packed_token_counts_are_checked_against_the_packing_on_a_restore(dirs):
    for tail, match in (("partial", "per source equal to"), ("drop", "per source at most"),
                        ("wrap", "per source at least")):
        loader = make(dirs, SPECS["concat-w16-eos"], tail=tail)
        _, states = run(loader, 40)
        k = next(j for j in range(len(states) - 1, 0, -1) if states[j]["epoch_base"][0] >= 1)
        st = states[k]
        t = st["mixture"]["tokens"]
        forged = [t[0] + t[1], 0, t[2]]  # the same sum (it passes that check), moved between sources
        fresh = make(dirs, SPECS["concat-w16-eos"], tail=tail)
        for call in (fresh.validate_state_dict, fresh.load_state_dict):
            with pytest.raises(rd.ResumeError, match=rf"state.mixture.tokens=.*{match} the tokens of the packed "
                                                     rf"sequences before the committed step on the {tail} tail.*fix: "
                                                     "pass an unmodified state"):
                call({**st, "mixture": {**st["mixture"], "tokens": forged}})
        assert fresh.cursor.committed == 0
        fresh.load_state_dict(st)
        assert fresh.state_dict() == st


def test_a_drop_state_without_counts_gets_them_computed(dirs):
    """A state written before the counts existed (mixture schema 1) on a drop tail: the counts are
    computed from the first epoch (no rebase), equal to those of the run that counted."""
    spec = SPECS["best_fit-w8"]
    ref = make(dirs, spec, tail="drop")
    batches, states = run(ref, 70)
    k = next(j for j in range(len(states) - 6, 0, -1) if states[j]["epoch_base"][0] >= 2)
    assert any(c % 4 for c in epoch_counts(ref, 2))  # an earlier epoch dropped sequences: a correction
    section = {key: v for key, v in states[k]["mixture"].items() if key != "tokens"}
    old = {**states[k], "mixture": {**section, "schema_version": 1}}
    loader = make(dirs, spec, tail="drop")
    got, got_states = continue_from(loader, old, 5)
    assert got == batches[k:k + 5] and got_states[-1]["mixture"]["tokens"] == states[k + 5]["mixture"]["tokens"]


@pytest.mark.parametrize("tail", ["drop", "wrap"])
@pytest.mark.parametrize("offset", [0, 3], ids=["epoch-start", "mid-epoch"])
def test_tokens_on_a_dropping_tail_continue_across_a_data_change(dirs, tail, offset):
    """A data_change at a loader-epoch start (or 3 steps into it: effective at the next window
    boundary) on a drop/wrap tail: the new loader seeds the earlier epochs' tail corrections from
    the saved counts (those epochs were packed under the old weights) and its counts stay the
    delivered tokens; a state without counts there writes none."""
    spec = SPECS["concat-w16-eos"]
    a_batches, a_states = run(make(dirs, spec, tail=tail), 50)
    k = next(j for j, st in enumerate(a_states) if st["epoch_base"] == [2, j]) + offset
    assert a_states[k]["epoch_base"][0] == 2
    b_loader = make(dirs, spec, W2, tail=tail)
    b_batches, b_states = continue_from(b_loader, a_states[k], 40, label="data_change")
    offsets = mixture(dirs).offsets
    seen = sum((tokens_of(b, offsets) for b in a_batches[:k]), np.zeros(3, dtype=np.int64))
    for j, b in enumerate(b_batches):
        assert b_states[j]["mixture"]["tokens"] == seen.tolist(), j
        seen = seen + tokens_of(b, offsets)
    assert b_states[-1]["mixture"]["tokens"] == seen.tolist()
    got, got_states = continue_from(make(dirs, spec, W2, tail=tail), b_states[25], 10)  # faithful: seeded again
    assert got == b_batches[25:35]
    assert [without_fetched(x) for x in got_states] == [without_fetched(x) for x in b_states[25:36]]
    # a mid-epoch change keeps the epoch's earlier run while the cursor is in that epoch, not after it
    assert "earlier" not in b_states[25]["mixture"] and b_states[25]["epoch_base"][0] == 3
    j = 5 if offset else 25
    assert b_states[j]["epoch_base"][0] == (2 if offset else 3)
    section = b_states[j]["mixture"]
    assert ("earlier" in section) == bool(offset)
    stripped = {**b_states[j], "mixture": {**{x: v for x, v in section.items() if x != "tokens"},
                                           "schema_version": 3 if offset else 1}}
    blind = make(dirs, spec, W2, tail=tail)
    got, got_states = continue_from(blind, stripped, 3)
    assert got == b_batches[j:j + 3]
    if offset:  # the earlier run starts at 0: the piecewise stream answers every position, counted cold
        assert got_states[-1]["mixture"]["tokens"] == b_states[j + 3]["mixture"]["tokens"]
    else:  # epochs before the rebase are not in the plan: no counts, as such states had none
        assert "tokens" not in got_states[-1]["mixture"]
        assert blind.mixture_progress().tokens is None and blind.mixture_progress().sources[0].consumed > 0


@pytest.mark.parametrize("tail", ["wrap", "drop"])
def test_two_ranks_write_the_global_per_source_tokens(dirs, tail):
    """Two ranks (each half of the global batch, the default wrap tail or drop): both states hold
    the same per-source counts, those of the global batch: the sum of what the two ranks delivered,
    at every step across several epochs, equal to counters.tokens."""
    spec = SPECS["concat-w16-eos"]
    ranks = [rd.DataLoader(mixture(dirs), batch_size=2, seed=11, packing=spec, sharding=rd.Sharding(2, r),
                           **({"tail": tail} if tail == "drop" else {})) for r in range(2)]
    offsets = mixture(dirs).offsets
    seen = np.zeros(3, dtype=np.int64)
    runs = [run(loader, 60) for loader in ranks]
    assert ranks[0].config.plan.tail.value == tail and runs[0][1][-1]["epoch_base"][0] >= 2
    for k in range(61):
        assert runs[0][1][k]["mixture"]["tokens"] == runs[1][1][k]["mixture"]["tokens"] == seen.tolist(), k
        assert sum(seen) == runs[0][1][k]["counters"]["tokens"], k
        if k < 60:
            seen = seen + tokens_of(runs[0][0][k], offsets) + tokens_of(runs[1][0][k], offsets)
