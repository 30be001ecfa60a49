"""What a refused loader state says (loader/restore.py): each difference names its setting, and the
fix it names works when followed."""

from __future__ import annotations

import pytest

import resumable_data as rd


def _saved(shards, **kw):
    loader = rd.DataLoader(shards, batch_size=4, shuffle=True, seed=0, **kw)
    it = iter(loader)
    for _ in range(3):
        next(it)
    return loader.state_dict()


def test_a_partial_tail_resumed_on_several_ranks_names_the_fix_that_works(shards):
    state = _saved(shards)  # one rank, no drop_last: tail='partial'
    on_two = rd.DataLoader(shards, batch_size=2, shuffle=True, seed=0, sharding=rd.Sharding(2, 0))
    with pytest.raises(rd.ResumeError) as e:
        on_two.load_state_dict(state)
    msg = str(e.value)
    assert "- tail: saved 'partial' vs current 'wrap'; fix:" in msg
    assert "pass tail='partial'" not in msg  # refused at construction on two ranks: not a fix
    with pytest.raises(rd.ConfigError, match="^tail='partial'"):
        rd.DataLoader(shards, batch_size=2, shuffle=True, seed=0, sharding=rd.Sharding(2, 0), tail="partial")
    assert "resume this state on world_size 1" in msg  # the fix, followed
    rd.DataLoader(shards, batch_size=4, shuffle=True, seed=0).load_state_dict(state)


def test_another_tail_on_the_same_ranks_names_the_saved_tail(shards):
    state = _saved(shards, drop_last=True)
    loader = rd.DataLoader(shards, batch_size=4, shuffle=True, seed=0)
    with pytest.raises(rd.ResumeError, match="tail: saved 'drop' vs current 'partial'; fix: pass tail='drop'"):
        loader.load_state_dict(state)
    rd.DataLoader(shards, batch_size=4, shuffle=True, seed=0, tail="drop").load_state_dict(state)


def test_a_changed_mixture_names_the_mixture_in_its_fixes_not_a_sampler_argument(tmp_path):
    from tests.mixture_data import WEIGHTS, open_sources, write_sources

    dirs = write_sources(tmp_path)

    def loader(block_size):
        return rd.DataLoader(rd.Mixture(open_sources(dirs), WEIGHTS, block_size=block_size), batch_size=4, seed=0)

    saved = loader(1024)
    next(iter(saved))
    state = saved.state_dict()
    with pytest.raises(rd.ResumeError) as e:
        loader(512).load_state_dict(state)
    msg = str(e.value)
    assert "positional sampler" not in msg and "rd.ArrowShards on the pinned directory" not in msg  # never passed
    assert "- sampler: saved 'rd.Mixture(" in msg and "fix: build the rd.Mixture as saved" in msg
    assert "- dataset_version: saved 'mix-" in msg and "fix: build the rd.Mixture over the sources" in msg
    loader(1024).load_state_dict(state)  # the fix, followed


def test_a_mixture_with_another_epoch_len_names_the_mixture_in_the_num_records_fix(tmp_path):
    from tests.mixture_data import WEIGHTS, open_sources, write_sources

    dirs = write_sources(tmp_path)

    def loader(epoch_len):
        return rd.DataLoader(rd.Mixture(open_sources(dirs), WEIGHTS, epoch_len=epoch_len), batch_size=4, seed=0)

    saved = loader(400)
    next(iter(saved))
    state = saved.state_dict()
    with pytest.raises(rd.ResumeError) as e:
        loader(300).load_state_dict(state)
    msg = str(e.value)
    assert "- num_records: saved 400 vs current 300; fix: build the rd.Mixture as saved (the same sources and epoch_len)" in msg
    assert "open the same dataset" not in msg
    loader(400).load_state_dict(state)  # the fix, followed


def test_a_mixture_without_a_seed_is_told_to_pass_one_to_the_loader(tmp_path):
    from tests.mixture_data import WEIGHTS, open_sources, write_sources

    mixture = rd.Mixture(open_sources(write_sources(tmp_path)), WEIGHTS)
    with pytest.raises(rd.ConfigError, match=r"^seed=None: .*an rd.Mixture, which shuffles by default.*fix: pass seed=1234 to the DataLoader"):
        rd.DataLoader(mixture, batch_size=4)
    next(iter(rd.DataLoader(mixture, batch_size=4, seed=1234)))  # the fix, followed
