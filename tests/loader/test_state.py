"""The loader state: size, JSON round trip, and every rejection with its message."""

import copy
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import resumable_data as rd
from tests.loader.conftest import N_RECORDS, json_paths


def loader(source, **kw):
    args = dict(batch_size=8, shuffle=True, seed=5)
    args.update(kw)
    return rd.DataLoader(source, **args)


@pytest.fixture
def saved(shards):
    ld = loader(shards, commit="explicit", accumulation_steps=2)
    it = iter(ld)
    for _ in range(5):
        next(it)
        if ld.microstep_is_last:
            ld.commit()
    ld.skip_steps(100, 104, "bad region")
    return ld.state_dict()


def test_state_is_small_json_with_a_version(saved):
    text = json.dumps(saved)
    assert len(text.encode()) < 1024
    assert saved["format"] == "resumable_data.loader" and saved["schema_version"] == 5
    assert "sample_seeding" not in saved and "batch_origin" not in saved  # schema 5 omits the defaults
    assert json.loads(text) == saved
    assert saved["cursor"] == {"committed": 4, "delivered": 5, "fetched": 5}
    assert saved["skipped"] == [[100, 104, "bad region"]]


def test_uncommitted_batches_demand_a_choice(shards, saved):
    with pytest.raises(rd.ResumeError, match=r"steps \[4, 5\).*'repeat'.*'skip'"):
        loader(shards, commit="explicit", accumulation_steps=2).load_state_dict(saved)
    with pytest.raises(rd.ConfigError, match="on_uncommitted"):
        loader(shards, commit="explicit", accumulation_steps=2).load_state_dict(saved, on_uncommitted="maybe")


@pytest.mark.parametrize("change, expected", [
    (dict(seed=6), r"seed: saved 5 vs current 6"),
    (dict(shuffle_window=16), r"order: saved .*'global'.* vs current .*'window'"),
    (dict(batch_size=4), r"global batch size: saved 8 vs current 4.*batch_size=8"),
    (dict(accumulation_steps=4), r"accumulation_steps: saved 2 vs current 4"),
    (dict(drop_last=True), r"tail: saved 'partial' vs current 'drop'"),
])
def test_each_difference_is_rejected_with_saved_vs_current(shards, saved, change, expected):
    kw = dict(commit="explicit", accumulation_steps=2)
    kw.update(change)
    with pytest.raises(rd.ResumeError, match=expected):
        loader(shards, **kw).load_state_dict(saved, on_uncommitted="repeat")


def test_one_error_lists_every_difference(shards, saved):
    with pytest.raises(rd.ResumeError) as e:
        loader(shards, seed=6, batch_size=4, commit="explicit", accumulation_steps=2).load_state_dict(saved)
    msg = str(e.value)
    assert "seed" in msg and "global batch size" in msg and "uncommitted" in msg
    assert msg.count("\n  - ") == 3


def test_another_dataset_version_is_refused(tmp_path, saved):
    import numpy as np
    import pyarrow as pa

    table = pa.table({"id": np.arange(N_RECORDS, dtype=np.int64) + 1})
    rd.write_arrow_shards(table, tmp_path, num_shards=1)
    other = rd.ArrowShards(tmp_path, unpinned="pin")
    with pytest.raises(rd.ResumeError, match="dataset_version: saved '[0-9a-f]+' vs current"):
        loader(other, commit="explicit", accumulation_steps=2).load_state_dict(saved, on_uncommitted="repeat")


def test_unpinned_needs_an_explicit_allowance():
    data = list(range(50))
    state = loader(data).state_dict()
    assert state["pinned"] is False
    with pytest.raises(rd.ResumeError, match="allow_unpinned=True"):
        loader(data).load_state_dict(state)
    loader(data).load_state_dict(state, allow_unpinned=True)
    pinned = loader(data, dataset_version="abc123").state_dict()
    loader(data, dataset_version="abc123").load_state_dict(pinned)


def test_world_size_change_is_elastic_only_when_allowed(shards):
    saved = loader(shards, batch_size=4, sharding=rd.Sharding(2, 0), tail="wrap").state_dict()
    one = loader(shards, batch_size=8, tail="wrap")
    one.load_state_dict(saved)
    assert one.recovery_label is rd.RecoveryLabel.ELASTIC_RESHARD
    rigid = loader(shards, batch_size=8, tail="wrap", elastic=False)
    with pytest.raises(rd.ResumeError, match="non-elastic"):
        rigid.load_state_dict(saved)
    with pytest.raises(rd.ResumeError, match="global batch size: saved 8 vs current 12"):
        loader(shards, batch_size=4, sharding=rd.Sharding(3, 0), tail="wrap").load_state_dict(saved)


def test_elastic_reshard_continues_the_global_stream(shards):
    """Saved at 4 ranks, resumed at 2 and at 1: the global stream goes on unchanged."""
    g = 8
    single = [b["id"].tolist() for b in loader(shards, batch_size=g, tail="wrap")]
    ranks4 = [loader(shards, batch_size=2, sharding=rd.Sharding(4, r), tail="wrap") for r in range(4)]
    its = [iter(ld) for ld in ranks4]
    for _ in range(5):
        for it in its:
            next(it)
    states = [ld.state_dict() for ld in ranks4]
    for world in (2, 1):
        resumed = [loader(shards, batch_size=g // world, sharding=rd.Sharding(world, r), tail="wrap") for r in range(world)]
        for r, ld in enumerate(resumed):
            ld.load_state_dict(states[r])
            assert ld.recovery_label is rd.RecoveryLabel.ELASTIC_RESHARD
        for step, parts in enumerate(zip(*resumed), start=5):
            assert sum((p["id"].tolist() for p in parts), []) == single[step]


@pytest.mark.parametrize("mutate, expected", [
    (lambda s: s.update(schema_version=6), r"schema_version.*saved 6 vs current 5"),
    (lambda s: s.update(format="torchdata"), r"format"),
    (lambda s: s.pop("cursor"), r"missing \['cursor'\]"),
    (lambda s: s.update(extra=1), r"unexpected \['extra'\]"),
    (lambda s: s["cursor"].update(committed=-1), r"cursor.committed"),
    (lambda s: s["layout"].update(world_size=0), r"layout.world_size"),
    (lambda s: s["cursor"].update(delivered=10**30), r"cursor.delivered"),
    (lambda s: s["cursor"].update(committed=9), r"committed <= delivered <= fetched"),
    (lambda s: s["plan"].update(seed="5"), r"plan.seed"),
    (lambda s: s["counters"].update(applied_updates=7), r"applied_updates \+ skipped_updates"),
    (lambda s: s.update(skipped=[[5, 3, "x"]]), r"skipped\[0\]\[1\]"),
    (lambda s: s.update(skipped=[[0, 1, "x"]] * 20000), r"at most 10000"),
    (lambda s: s.update(recovery_label="hopeful"), r"recovery_label"),
])
def test_malformed_states_raise_resume_error(shards, saved, mutate, expected):
    bad = copy.deepcopy(saved)
    mutate(bad)
    with pytest.raises(rd.ResumeError, match=expected):
        loader(shards, commit="explicit", accumulation_steps=2).load_state_dict(bad, on_uncommitted="repeat")


@pytest.mark.parametrize("bad", [None, [], "state", b"\x80\x04K\x01.", {"format": "resumable_data.loader"}])
def test_non_states_raise_resume_error(shards, bad):
    with pytest.raises(rd.ResumeError):
        loader(shards).load_state_dict(bad)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids, max_size=3),
    max_leaves=8,
)


@settings(derandomize=True, max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzzed_states_only_ever_raise_rd_errors(shards, saved, data):
    bad = copy.deepcopy(saved)
    paths = [p for p in json_paths(bad) if p]
    path = data.draw(st.sampled_from(paths))
    target = bad
    for k in path[:-1]:
        target = target[k]
    target[path[-1]] = data.draw(JSON)
    ld = loader(shards, commit="explicit", accumulation_steps=2)
    try:
        ld.load_state_dict(bad, on_uncommitted="repeat")
    except rd.ResumableDataError:
        pass


def test_state_is_identical_on_every_rank(shards):
    """No rank in the state and global token counts: DCP may keep one copy for all ranks."""
    ranks = [loader(shards, batch_size=4, sharding=rd.Sharding(2, r), tail="wrap", token_column="tokens") for r in range(2)]
    for ld in ranks:
        it = iter(ld)
        for _ in range(3):
            next(it)
    states = [ld.state_dict() for ld in ranks]
    assert states[0] == states[1]
    whole = loader(shards, batch_size=8, tail="wrap", token_column="tokens")
    it = iter(whole)
    expected = sum(int(next(it)["tokens_lengths"].sum()) for _ in range(3))
    assert states[0]["counters"]["tokens"] == expected > 0


def test_refusal_texts_name_a_fix_that_exists(shards):
    """The tail fix names tail= (drop_last alone cannot express 'wrap'); the unpinned refusal says
    which side is unpinned instead of 'saved False vs current False'."""
    a = rd.DataLoader(shards, batch_size=4, sharding=rd.Sharding(2, 0), tail="wrap")
    b = rd.DataLoader(shards, batch_size=4, sharding=rd.Sharding(2, 0), drop_last=True)
    with pytest.raises(rd.ResumeError, match=r"tail: saved 'wrap' vs current 'drop'; fix: pass tail='wrap'"):
        b.load_state_dict(a.state_dict())
    unpinned = rd.DataLoader(list(range(10)), batch_size=2)
    with pytest.raises(rd.ResumeError, match=r"pinned: the saved run's dataset is not pinned"):
        rd.DataLoader(list(range(10)), batch_size=2).load_state_dict(unpinned.state_dict())
    rd.DataLoader(list(range(10)), batch_size=2).load_state_dict(unpinned.state_dict(), allow_unpinned=True)
