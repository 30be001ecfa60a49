"""The commit protocol: cursor, counters, accumulation windows and skipped ranges."""

import pytest

import resumable_data as rd
from tests.loader.conftest import N_RECORDS, canon


def test_auto_commit_commits_when_the_next_batch_is_asked_for(shards):
    ld = rd.DataLoader(shards, batch_size=8)
    it = iter(ld)
    next(it)
    assert ld.cursor.delivered == 1 and ld.cursor.committed == 0
    next(it)
    assert ld.cursor.committed == 1
    ld.state_dict()
    assert ld.cursor.committed == 2


def test_explicit_counters_diverge_on_amp_skips(shards):
    ld = rd.DataLoader(shards, batch_size=8, commit="explicit", accumulation_steps=4, token_column="tokens")
    applied = [True, False, True, True, False]
    flags, tokens = [], 0
    for batch in ld:
        tokens += int(batch["tokens_lengths"].sum())
        flags.append(ld.microstep_is_last)
        if ld.microstep_is_last:
            ld.commit(applied=applied.pop(0))
            if not applied:
                break
    assert flags == [False, False, False, True] * 5
    c = ld.counters
    assert (c.attempted_updates, c.applied_updates, c.skipped_updates) == (5, 3, 2)
    assert c.microbatches == 20 and c.samples == 20 * 8 - (8 - N_RECORDS % 8)  # the epoch's short last batch
    assert c.tokens == tokens and c.skipped_steps == 0


def test_commit_without_a_delivered_batch_is_an_error(shards):
    ld = rd.DataLoader(shards, batch_size=8, commit="explicit")
    with pytest.raises(rd.ResumableDataError, match="commit"):
        ld.commit()
    with pytest.raises(rd.ConfigError, match="applied"):
        next(iter(ld)) and ld.commit(applied="yes")


def test_operator_skips_a_future_range_and_it_survives_resume(shards):
    ref = [canon(b) for b in rd.DataLoader(shards, batch_size=8, shuffle=True, seed=2)]
    ld = rd.DataLoader(shards, batch_size=8, shuffle=True, seed=2)
    ld.skip_steps(3, 6, "corrupt region, ticket 42")
    it = iter(ld)
    got = [canon(next(it)) for _ in range(4)]
    assert got == ref[:3] + [ref[6]]
    state = ld.state_dict()
    resumed = rd.DataLoader(shards, batch_size=8, shuffle=True, seed=2)
    resumed.load_state_dict(state)
    assert [canon(b) for b in resumed] == ref[7:]
    assert resumed.counters.skipped_steps == 3 and resumed.counters.microbatches == len(ref) - 3
    with pytest.raises(rd.ConfigError, match="start"):
        resumed.skip_steps(0, 2, "the past")
    with pytest.raises(rd.ConfigError, match="reason"):
        resumed.skip_steps(100, 101, "")


def test_superseded_iterators_refuse_to_continue(shards):
    ld = rd.DataLoader(shards, batch_size=8)
    it = iter(ld)
    next(it)
    ld.reset()
    with pytest.raises(rd.ResumableDataError, match="superseded"):
        next(it)
    assert ld.cursor == rd.Cursor(0, 0, 0)


def test_len_is_steps_per_epoch(shards):
    assert len(rd.DataLoader(shards, batch_size=8)) == -(-N_RECORDS // 8)
    assert len(rd.DataLoader(shards, batch_size=8, drop_last=True)) == N_RECORDS // 8


# -- the batch in hand under commit="auto" (docs/how-it-works.md, the example and its table) -----------
def _watched(shards):
    import torch

    ld = rd.DataLoader(shards, batch_size=8, shuffle=True, seed=3)
    model = torch.nn.Linear(1, 1)
    ld.watch(model)
    return ld, model


def _forward(model):
    import torch

    return model(torch.zeros(1, 1)).sum()


def _first_after_resume(shards, state):
    ld = rd.DataLoader(shards, batch_size=8, shuffle=True, seed=3)
    ld.load_state_dict(state)
    return canon(next(iter(ld)))


@pytest.mark.parametrize("watched", [True, False])
def test_the_fetch_ahead_loop_of_the_docs_saves_the_cursor_its_table_states(shards, watched):
    ld, model = _watched(shards) if watched else (rd.DataLoader(shards, batch_size=8, shuffle=True, seed=3), None)
    reference = [canon(b) for b in rd.DataLoader(shards, batch_size=8, shuffle=True, seed=3)][:6]
    it = iter(ld)
    x = next(it)
    saves = {}
    for k in range(5):
        if k in (0, 3):
            saves[k] = ld.state_dict()
        if model is not None:
            _forward(model)
        assert canon(x) == reference[k]
        x = next(it)
    for k, state in saves.items():
        want = k if watched else k + 1  # unwatched, the batch in hand counts: step k would be lost
        assert state["cursor"]["committed"] == state["cursor"]["delivered"] == want
        assert _first_after_resume(shards, state) == reference[want]


def test_the_plain_loop_counts_the_batch_it_trained_on_and_a_break_commits_nothing(shards):
    ld, model = _watched(shards)
    reference = [canon(b) for b in rd.DataLoader(shards, batch_size=8, shuffle=True, seed=3)][:6]
    for k, x in enumerate(ld):
        _forward(model)  # the forward (and, in a real loop, the update) of step k
        if k == 3:
            break
    assert (ld.cursor.committed, ld.cursor.delivered) == (3, 4)  # a break commits nothing: step 3 in hand
    state = ld.state_dict()  # trained: counted
    assert state["cursor"]["committed"] == 4 and _first_after_resume(shards, state) == reference[4]
    it = iter(ld)
    assert canon(next(it)) == reference[4]  # a new iterator continues: nothing repeated
    assert (ld.cursor.committed, ld.cursor.delivered) == (4, 5)  # step 4 in hand, not trained
    assert ld.state_dict()["cursor"]["committed"] == 4  # left out of a state
    next(it)
    assert ld.cursor.committed == 5  # the next next() commits it, trained or not (rule 1)
