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
