"""Per-source token counts of an rd.Mixture loader: in the state (mixture schema 2), in
loader.mixture_progress() and in `inspect`, equal at every step to the tokens of the records each
source delivered, summing to counters.tokens, across resumes (2 workers) and data_change rebases."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

import resumable_data as rd
from resumable_data.loader.state import LoaderState
from tests.loader.conftest import canon
from tests.loader.mixture.test_mixture_resume import W2, continue_from, ids_of, loader_for, resume_points, run
from tests.mixture_data import BASE, SIZES, WEIGHTS, open_sources, source_of, write_sources


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return write_sources(tmp_path_factory.mktemp("mixtok"))


def delivered_tokens(dirs, ids):
    """Per source, the token lengths of the delivered records (read from the sources' columns)."""
    lengths = {name: rd.ArrowShards(dirs[name]).column_lengths("tokens") for name in SIZES}
    src = source_of(ids)
    return [int(lengths[name][ids[src == s] - BASE[name]].sum()) for s, name in enumerate(SIZES)]


def test_tokens_per_source_match_the_delivered_records_at_every_step(dirs):
    batches, states = run(loader_for(dirs, WEIGHTS), 40)  # 160 positions: the 11-record source 6 times over
    ids = ids_of(batches)
    for k in range(len(batches) + 1):
        want = delivered_tokens(dirs, ids[:4 * k])
        section = states[k]["mixture"]
        assert section["schema_version"] == 2 and section["tokens"] == want, k
        assert sum(want) == states[k]["counters"]["tokens"], k
    loader = loader_for(dirs, WEIGHTS, num_workers=2)
    loader.load_state_dict(states[23])
    prog = loader.mixture_progress()
    assert prog.tokens == dict(zip(SIZES, delivered_tokens(dirs, ids[:4 * 23])))
    assert prog.to_dict()["sources"]["math"]["tokens"] == prog.tokens["math"]
    # resumed anywhere with 2 workers: every later batch and state (tokens included) as the run's
    make = lambda: loader_for(dirs, WEIGHTS, num_workers=2, persistent_workers=True)  # noqa: E731
    assert resume_points(states, batches, make, 12, np.random.default_rng(5)) == 12


def test_tokens_continue_across_a_data_change(dirs):
    a_batches, a_states = run(loader_for(dirs, WEIGHTS), 9)
    b_batches, b_states = continue_from(loader_for(dirs, W2), a_states[9], 12, label="data_change")
    ids = np.concatenate([ids_of(a_batches), ids_of(b_batches)])
    assert b_states[-1]["mixture"]["tokens"] == delivered_tokens(dirs, ids)
    assert b_states[-1]["mixture"]["rebase"][0] == 36
    again = loader_for(dirs, W2)
    again.load_state_dict(b_states[-1])  # the saved rebase is adopted: same tokens from the position
    assert again.mixture_progress().tokens == dict(zip(SIZES, delivered_tokens(dirs, ids)))


def test_inspect_shows_tokens_per_source_from_the_state_alone(dirs, tmp_path, capsys):
    from resumable_data.cli import main

    batches, states = run(loader_for(dirs, WEIGHTS), 17)
    path = tmp_path / "state.json"
    path.write_text(json.dumps(states[17]))
    assert main(["inspect", str(path)]) == 0
    text = capsys.readouterr().out
    for name, tokens in zip(SIZES, delivered_tokens(dirs, ids_of(batches))):
        assert f"({tokens} tokens)" in text.split(f"  {name}:")[1].splitlines()[0], name


def test_token_counts_are_progress_not_identity(dirs):
    """A checkpoint's fingerprint holds the plain section; malformed counts are resume errors."""
    _, states = run(loader_for(dirs, WEIGHTS), 5)
    st = states[5]
    fp = LoaderState.from_dict(st).fingerprint_dict()["mixture"]
    assert "tokens" not in fp and fp["schema_version"] == 1
    assert fp == loader_for(dirs, WEIGHTS).snapshot().fingerprint_dict()["mixture"]
    loader = loader_for(dirs, WEIGHTS)
    m = st["mixture"]
    for bad, match in (({**m, "tokens": [1, 2]}, r"state.mixture.tokens="), ({**m, "tokens": [1, -2, 3]}, r"tokens\[1\]"),
                       ({**m, "tokens": [1, 2, "3"]}, r"tokens\[2\]"),
                       ({k: v for k, v in m.items() if k != "tokens"}, "keys missing"),
                       ({**m, "schema_version": 1}, "unexpected"), ({**m, "schema_version": 3}, "schema_version")):
        with pytest.raises(rd.ResumeError, match=match):
            loader.load_state_dict({**st, "mixture": bad})
    assert loader.cursor.committed == 0
    # counts outside what the consumed records can hold (checked against the sources' totals)
    with pytest.raises(rd.ResumeError, match=r"state.mixture.tokens is inconsistent with the sources: tokens\[0\]"):
        loader.load_state_dict({**st, "mixture": {**m, "tokens": [10**9, 0, 0]}})
    assert loader.cursor.committed == 0 and loader.state_dict()["mixture"]["tokens"] == [0, 0, 0]
    # a state written without token counting (mixture schema 1) still loads into a counting loader
    plain = rd.DataLoader(rd.Mixture(open_sources(dirs), weights=WEIGHTS, block_size=16), batch_size=4, seed=11)
    _, p_states = run(plain, 5)
    assert "tokens" not in p_states[5]["mixture"] and p_states[5]["mixture"]["schema_version"] == 1
    loader.load_state_dict(p_states[5])
    assert loader.state_dict()["mixture"]["tokens"] == st["mixture"]["tokens"]


# schema 4 omits the default seeding record and a null batch_origin: 3 sources stay under 1 KB
@pytest.mark.parametrize("sources, limit", [(3, 1024), (64, 4096)])
def test_state_size_with_token_counts(tmp_path, sources, limit):
    srcs = {}
    for i in range(sources):
        d = tmp_path / f"s{i}"
        toks = [[1] * (1 + (j % 7)) for j in range(20 + i)]
        rd.write_arrow_shards(pa.table({"tokens": pa.array(toks, pa.list_(pa.int64()))}), d, num_shards=1)
        rd.pin(d)
        srcs[f"source_{i:02d}"] = rd.ArrowShards(d)
    mix = rd.Mixture(srcs, weights={n: 1 + i % 5 for i, n in enumerate(srcs)})
    loader = rd.DataLoader(mix, batch_size=256, seed=0, token_column="tokens")
    for k, _ in enumerate(loader):
        if k == 3:
            break
    state = loader.state_dict()
    assert len(state["mixture"]["tokens"]) == sources and sum(state["mixture"]["tokens"]) == state["counters"]["tokens"]
    assert len(json.dumps(state)) < limit


@pytest.mark.parametrize("spec", [rd.Packing(16), rd.Packing(16, mode="best_fit"), rd.Packing(16, eos_id=0, window=16),
                                  rd.Packing(8, mode="best_fit", window=8, eos_id=1)],
                         ids=["concat", "best_fit", "concat-eos-window16", "best_fit-eos-window8"])
def test_packed_tokens_per_source_match_the_delivered_sequences(dirs, spec, tmp_path, capsys):
    """Packed (partial tail): each source's input tokens in the delivered sequences, counted from
    the batches' document_ids, equal the state's at every step, summing to counters.tokens."""
    batches, states = run(loader_for(dirs, WEIGHTS, packing=spec), 60)
    offsets = rd.Mixture(open_sources(dirs), weights=WEIGHTS).offsets
    seen = np.zeros(3, dtype=np.int64)
    for k in range(len(batches) + 1):
        assert states[k]["mixture"]["tokens"] == seen.tolist(), k
        assert sum(seen) == states[k]["counters"]["tokens"], k
        if k < len(batches):
            b = batches[k]["document_ids"]
            doc = np.frombuffer(b[3], dtype=np.int64)
            doc = doc[doc >= 0]  # the non-padding input tokens
            seen += np.bincount(np.searchsorted(offsets, doc, side="right") - 1, minlength=3)
    assert seen.min() > 0 and len(states[60]["mixture"]["tokens"]) == 3
    if spec.mode is rd.PackMode.CONCAT and spec.eos_id is None:  # inspect shows them from the state alone
        from resumable_data.cli import main

        path = tmp_path / "packed-state.json"
        path.write_text(json.dumps(states[60]))
        assert main(["inspect", str(path)]) == 0
        assert "web={}, code={}, math={}".format(*seen.tolist()) in capsys.readouterr().out
    make = lambda: loader_for(dirs, WEIGHTS, packing=spec, num_workers=2, persistent_workers=True)  # noqa: E731
    assert resume_points(states, batches, make, 10, np.random.default_rng(11)) == 10


def test_a_skipping_data_change_seeds_the_token_counter_from_the_saved_plan(dirs):
    """on_uncommitted='skip' rebases at the first undelivered step, after the committed cursor;
    the saved counts are still the start (a source's tokens do not depend on the weights): the
    skipped records count once passed, every later batch is the non-counting loader's."""
    a = loader_for(dirs, WEIGHTS, commit="explicit")
    it, a_batches = iter(a), []
    for k in range(6):
        a_batches.append(canon(next(it)))
        if k < 3:
            a.commit()
    st = a.state_dict()
    assert st["cursor"]["committed"] == 3 and st["cursor"]["delivered"] == 6
    counting = loader_for(dirs, W2, commit="explicit")
    counting.validate_state_dict(st, label="data_change", on_uncommitted="skip")
    counting.load_state_dict(st, label="data_change", on_uncommitted="skip")
    assert counting.state_dict()["mixture"]["rebase"][0] == 24
    plain = rd.DataLoader(rd.Mixture(open_sources(dirs), weights=W2, block_size=16), batch_size=4, seed=11,
                          commit="explicit")
    plain.load_state_dict(st, label="data_change", on_uncommitted="skip")
    got, want = run_committing(counting, 9), run_committing(plain, 9)
    assert len(got[0]) == 9 and got[0] == want[0]  # every later batch, in order
    ids = np.concatenate([ids_of(a_batches), ids_of(got[0])])
    assert got[1][-1]["mixture"]["tokens"] == delivered_tokens(dirs, ids)
    again = loader_for(dirs, W2, commit="explicit")
    again.load_state_dict(got[1][-1])  # skipped steps: the sum check is off, the bounds check passes
    assert again.state_dict()["mixture"]["tokens"] == delivered_tokens(dirs, ids)


def run_committing(loader, steps):
    batches, states = [], []
    for b, _ in zip(loader, range(steps)):
        loader.commit()
        batches.append(canon(b))
        states.append(loader.state_dict())
    return batches, states


def test_validate_state_dict_refuses_what_load_refuses_before_a_training_state_changes(dirs):
    """The token checks run in validate_state_dict, so rd.TrainingState's validate phase refuses a
    bad count before the model (or anything) is loaded."""
    import torch

    _, states = run(loader_for(dirs, WEIGHTS), 6)
    bad = {**states[6], "mixture": {**states[6]["mixture"], "tokens": [10**9, 0, 0]}}
    loader = loader_for(dirs, WEIGHTS)
    with pytest.raises(rd.ResumeError, match=r"state.mixture.tokens is inconsistent with the sources: tokens\[0\]"):
        loader.validate_state_dict(bad)

    def training_state(value):
        model = torch.nn.Linear(1, 1)
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(value)
        return rd.TrainingState(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                                loader=loader_for(dirs, WEIGHTS))

    src = training_state(1.0)
    for _, batch in zip(range(6), src.loader):
        src.loader.commit()
    tree = src.state_dict()
    saved = json.loads(tree["json"])
    saved["loader"]["mixture"]["tokens"] = [10**9, 0, 0]
    dst = training_state(0.0)
    calls = []
    original = dst.model.load_state_dict
    dst.model.load_state_dict = lambda *a, **k: (calls.append(1), original(*a, **k))[1]
    with pytest.raises(rd.ResumeError, match=r"state.mixture.tokens"):
        dst.load_state_dict({**tree, "json": json.dumps(saved)})
    assert calls == [] and dst.loader.cursor.committed == 0
    assert all(float(p.detach().abs().sum()) == 0 for p in dst.model.parameters())


def test_forged_counts_within_the_bounds_are_refused_by_their_sum(dirs):
    _, states = run(loader_for(dirs, WEIGHTS), 10)
    st = states[10]
    tokens = list(st["mixture"]["tokens"])
    tokens[0] += 7  # still within source 0's epoch bounds
    loader = loader_for(dirs, WEIGHTS)
    with pytest.raises(rd.ResumeError, match=r"state.mixture.tokens=\{'web': %d.*counters.tokens=%d \(they sum to %d"
                       % (tokens[0], st["counters"]["tokens"], sum(tokens))):
        loader.load_state_dict({**st, "mixture": {**st["mixture"], "tokens": tokens}})
    assert loader.cursor.committed == 0
    loader.load_state_dict(st)
    assert loader.state_dict()["mixture"]["tokens"] == st["mixture"]["tokens"]


def test_a_cursor_whose_token_counts_overflow_int64_is_refused_at_restore(dirs):
    plain = rd.DataLoader(rd.Mixture(open_sources(dirs), weights=WEIGHTS, block_size=16), batch_size=4, seed=11)
    _, states = run(plain, 3)
    st = json.loads(json.dumps(states[3]))  # schema 1: no counts to bound-check
    plan = LoaderState.from_dict(st).plan
    c = (2**62) // 4 - 8  # positions within 2**62, tokens beyond it
    st["cursor"] = {"committed": c, "delivered": c, "fetched": c}
    st["epoch_base"] = [plan.epoch_of_step(c), plan.epoch_first_step(plan.epoch_of_step(c))]
    plain.load_state_dict(st)  # not counting: accepted
    loader = loader_for(dirs, WEIGHTS)
    for call in (loader.validate_state_dict, loader.load_state_dict):
        with pytest.raises(rd.ResumeError, match=r"state.cursor=.*per-source token counts fit int64.*counts\[0\]"):
            call(st)
    assert loader.cursor.committed == 0 and loader.state_dict()["mixture"]["tokens"] == [0, 0, 0]


def test_packed_per_source_tokens_are_checked_by_their_sum(dirs):
    spec = rd.Packing(16)
    _, states = run(loader_for(dirs, WEIGHTS, packing=spec), 10)
    st = states[10]
    loader = loader_for(dirs, WEIGHTS, packing=spec)
    for forged in ([2**62, 0, 12345], [t + d for t, d in zip(st["mixture"]["tokens"], (1, 0, 0))]):
        with pytest.raises(rd.ResumeError, match=r"state.mixture.tokens=.*summing to counters.tokens=%d"
                           % st["counters"]["tokens"]):
            loader.load_state_dict({**st, "mixture": {**st["mixture"], "tokens": forged}})
    assert loader.cursor.committed == 0
    loader.load_state_dict(st)
    assert loader.state_dict() == st


@pytest.fixture(scope="module")
def two_columns(tmp_path_factory):
    root, srcs = tmp_path_factory.mktemp("twocol"), {}
    for i, (name, n) in enumerate((("x", 50), ("y", 30))):
        rng = np.random.default_rng(i)
        a = [[1] * int(k) for k in rng.integers(1, 9, n)]
        b = [[1] * int(k) for k in rng.integers(20, 40, n)]
        d = root / name
        rd.write_arrow_shards(pa.table({"id": pa.array(np.arange(n) + 1000 * (i + 1)), "a": pa.array(a, pa.list_(pa.int64())),
                                        "b": pa.array(b, pa.list_(pa.int64()))}), d, num_shards=1)
        rd.pin(d)
        srcs[name] = str(d)
    return srcs


def test_the_counted_column_is_part_of_the_token_state(two_columns):
    def make(column):
        mix = rd.Mixture({k: rd.ArrowShards(v) for k, v in two_columns.items()}, weights={"x": 0.6, "y": 0.4},
                         block_size=8)
        return rd.DataLoader(mix, batch_size=4, seed=3, **({"token_column": column} if column else {}))

    _, on_a = run(make("a"), 6)
    assert on_a[6]["mixture"]["token_column"] == "a" and "tokens_base" not in on_a[6]["mixture"]
    assert "token_column" not in LoaderState.from_dict(on_a[6]).fingerprint_dict()["mixture"]
    counting_b = make("b")
    with pytest.raises(rd.ResumeError, match=r"state.mixture.token_column='a': expected the current loader's "
                                             r"token_column='b'.*fix: build the loader with token_column='a'"):
        counting_b.load_state_dict(on_a[6])
    assert counting_b.cursor.committed == 0
    # a state written without counting (schema 1): the counts are computed, the difference to
    # counters.tokens (0: nothing was counted) is recorded, and its later states load again
    _, plain = run(make(None), 6)
    assert plain[6]["mixture"]["schema_version"] == 1 and plain[6]["counters"]["tokens"] == 0
    late = make("a")
    late.load_state_dict(plain[6])
    first = late.state_dict()
    assert first["mixture"]["tokens"] == on_a[6]["mixture"]["tokens"]
    assert first["mixture"]["tokens_base"] == sum(on_a[6]["mixture"]["tokens"]) and first["counters"]["tokens"] == 0
    late_batches, late_states = run(late, 4)
    _, reference = run(make("a"), 10)
    last = late_states[-1]
    assert last["mixture"]["tokens"] == reference[10]["mixture"]["tokens"]
    assert sum(last["mixture"]["tokens"]) == last["counters"]["tokens"] + last["mixture"]["tokens_base"]
    again = make("a")
    again.load_state_dict(last)
    assert again.state_dict() == last
    forged = {**last, "mixture": {**last["mixture"], "tokens_base": last["mixture"]["tokens_base"] + 1}}
    with pytest.raises(rd.ResumeError, match=r"state.mixture.tokens=.*\+ tokens_base="):
        make("a").load_state_dict(forged)
