"""rd.Mixture as a source: concatenated ids, take order, versions, refusals."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import resumable_data as rd
from tests.mixture_data import SIZES, WEIGHTS, open_sources, write_sources


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return write_sources(tmp_path_factory.mktemp("mix"))


def test_take_returns_records_in_the_requested_order(dirs):
    mix = rd.Mixture(open_sources(dirs), weights=WEIGHTS)
    assert len(mix) == sum(SIZES.values())
    ids = np.array([0, 185, 120, 5, 180, 121, 0])
    got = mix.take(ids).column("id").to_pylist()
    assert got == [1000, 3005, 2000, 1005, 3000, 2001, 1000]
    assert mix[181]["id"] == 3001
    lengths = mix.column_lengths("tokens")
    assert lengths.shape == (len(mix),)
    assert lengths[ids].tolist() == [len(t) for t in mix.take(ids).column("tokens").to_pylist()]


def test_version_covers_sources_and_block_not_weights(dirs):
    a = rd.Mixture(open_sources(dirs), weights=WEIGHTS, block_size=64)
    b = rd.Mixture(open_sources(dirs), weights={"web": 1, "code": 1, "math": 1}, block_size=64)
    c = rd.Mixture(open_sources(dirs), weights=WEIGHTS, block_size=65)
    srcs = open_sources(dirs)
    d = rd.Mixture({"web": srcs["web"], "code": srcs["math"], "math": srcs["code"]}, weights=WEIGHTS, block_size=64)
    assert a.version.hash == b.version.hash
    assert len({a.version.hash, c.version.hash, d.version.hash}) == 3
    assert a.pinned


def test_refusals_name_the_fix(dirs, tmp_path):
    srcs = open_sources(dirs)
    with pytest.raises(rd.ConfigError, match="rd.ArrowShards.from_hf"):
        rd.Mixture({"web": srcs["web"], "list": [1, 2, 3]}, weights={"web": 1, "list": 1})
    other = tmp_path / "other"
    rd.write_arrow_shards(pa.table({"x": pa.array([1, 2], pa.int32())}), other)
    with pytest.raises(rd.ConfigError, match="same columns"):
        rd.Mixture({"web": srcs["web"], "x": rd.ArrowShards(other, unpinned="allow")}, weights={"web": 1, "x": 1})
    with pytest.raises(rd.ConfigError, match="one weight for each source"):
        rd.Mixture(srcs, weights={"web": 1})
    with pytest.raises(rd.ConfigError, match="block_size"):
        rd.Mixture(srcs, weights=WEIGHTS, block_size=0)
    mix = rd.Mixture(srcs, weights=WEIGHTS)
    with pytest.raises(rd.ConfigError, match="drop shuffle="):
        rd.DataLoader(mix, batch_size=4, shuffle=True, seed=0)
    with pytest.raises(rd.ConfigError, match="drop sampler="):
        rd.DataLoader(mix, batch_size=4, sampler=range(10), seed=0)
    with pytest.raises(rd.ConfigError, match="seed"):
        rd.DataLoader(mix, batch_size=4)
    sched = rd.WeightSchedule([(0, WEIGHTS), (5, {"web": 1, "code": 0, "math": 0})])
    # a schedule with packing is accepted (its segments start at packing-window boundaries)
    packed = rd.DataLoader(rd.Mixture(srcs, weights=sched), batch_size=2, seed=0, packing=rd.Packing(16))
    assert packed.state_dict()["mixture"]["schedule"][1][0] == 5


def test_loader_proportions_and_len(dirs):
    mix = rd.Mixture(open_sources(dirs), weights=WEIGHTS, block_size=20)
    loader = rd.DataLoader(mix, batch_size=10, seed=3)
    assert len(loader) == 20  # 191 positions rounded up to whole global batches of 10
    ids = np.concatenate([b["id"].numpy() for b in loader])
    assert ids.size == 200
    for j in range(10):  # every aligned block of 20 positions: 10 / 6 / 4
        c = np.bincount(ids[20 * j:20 * (j + 1)] // 1000 - 1, minlength=3)
        assert c.tolist() == [10, 6, 4]


def test_state_stays_small_for_64_sources(tmp_path):
    srcs = {}
    for i in range(64):
        d = tmp_path / f"s{i}"
        rd.write_arrow_shards(pa.table({"id": pa.array(np.arange(20) + 1000 * i, pa.int64())}), d)
        srcs[f"source_{i:02d}"] = rd.ArrowShards(d, unpinned="allow")
    mix = rd.Mixture(srcs, weights={k: 1 + i % 7 for i, k in enumerate(srcs)}, block_size=256)
    loader = rd.DataLoader(mix, batch_size=32, seed=0)
    ids = np.concatenate([b["id"].numpy() for _, b in zip(range(8), loader)])
    assert np.bincount(ids // 1000, minlength=64).min() >= 1
    import json

    assert len(json.dumps(loader.state_dict())) < 4096


def test_a_hugging_face_source_mixes(dirs, tmp_path):
    datasets = pytest.importorskip("datasets")
    srcs = open_sources(dirs)
    hf = datasets.Dataset.from_dict({"id": list(range(5000, 5030)), "tokens": [[1, 2]] * 30})
    hf = hf.cast(datasets.Features({"id": datasets.Value("int64"), "tokens": datasets.Sequence(datasets.Value("int64"))}))
    srcs["hf"] = rd.ArrowShards.from_hf(hf, cache_dir=tmp_path / "hf")
    mix = rd.Mixture(srcs, weights={**WEIGHTS, "hf": 0.25}, block_size=20)
    ids = np.concatenate([b["id"].numpy() for _, b in zip(range(10), rd.DataLoader(mix, batch_size=10, seed=1))])
    assert ((ids >= 5000) & (ids < 5030)).sum() == 20  # 0.25 / 1.25 of 100 positions


def test_loader_batches_equal_the_definition_and_the_arrow_path(dirs):
    """Every batch (7 positions, straddling blocks of 16, across loader epochs) holds the records
    the per-position definition names, with the arrays the Arrow path (``take``) would build."""
    from resumable_data.loader.collate import arrow_to_numpy
    from tests.plan.mixture.test_mixture_blocks import reference

    mix = rd.Mixture(open_sources(dirs), weights=WEIGHTS, block_size=16)
    loader = rd.DataLoader(mix, batch_size=7, seed=5)
    plan = mix.sampler(5, 7).plan
    step = 0
    for _ in range(2):
        for batch in loader:
            ids = np.array([reference(plan, p)[3] for p in range(7 * step, 7 * step + 7)])
            want = arrow_to_numpy(mix.take(ids))
            assert sorted(batch) == sorted(want)
            for k, v in want.items():
                assert batch[k].numpy().dtype == v.dtype and batch[k].numpy().tolist() == v.tolist(), (step, k)
            step += 1
    assert step == 2 * len(loader) == 2 * 28  # 191 positions rounded up to 196
    cols = mix.take_numpy(np.array([190, 0, 5, 190]))
    assert cols[0].tolist() == [3010, 1000, 1005, 3010]
    with pytest.raises(rd.ConfigError, match="record ids in"):
        mix.take_numpy(np.array([191]))


def test_an_arrow_and_a_parquet_source_with_list_columns_mix(tmp_path):
    """Arrow IPC names a list's child ``item``, Parquet ``element``: the mixture accepts the two
    (their schemas are equal to Arrow) and gathers each source apart, every record equal to the
    concatenated table's, in the requested order, with the first source's schema."""
    rng = np.random.default_rng(4)
    tables = [pa.table({"tok": pa.array([rng.integers(0, 9, rng.integers(0, 5)).tolist() for _ in range(n)]),
                        "id": pa.array(np.arange(n, dtype=np.int64))}) for n in (700, 500)]
    for t, fmt, d in zip(tables, ("arrow", "parquet"), ("a", "p")):
        rd.write_arrow_shards(t, tmp_path / d, num_shards=2, rows_per_batch=100, format=fmt)
    a, p = rd.ArrowShards(tmp_path / "a"), rd.ArrowShards(tmp_path / "p")
    m = rd.Mixture({"a": a, "p": p}, weights={"a": 0.5, "p": 0.5})
    whole = pa.concat_tables([tables[0], tables[1].cast(tables[0].schema)])
    for ids in ([0, 1], [1199, 3, 700, 699, 700], rng.permutation(1200)[:300].tolist()):
        got = m.take(ids)
        assert got.schema == a.schema
        assert got.equals(whole.take(pa.array(ids, type=pa.int64())))
    loader = rd.DataLoader(m, batch_size=64, seed=0)
    batch = next(iter(loader))
    assert len(batch["id"]) == 64


def test_a_schema_refusal_names_the_differing_column_and_a_cast_that_works(tmp_path):
    # docs/mixtures.md mixes rd.ArrowShards folders with rd.ArrowShards.from_hf(hf_math); a Hugging
    # Face dataset built from Python lists holds list<int64> where rd.prepare wrote list<int32>, and
    # the message printed both whole schemas (the second cut at 120 characters) with no column named
    datasets = pytest.importorskip("datasets")
    table = pa.table({"id": pa.array(range(8), pa.int64()),
                      "tokens": pa.array([[3 + i] * (1 + i) for i in range(8)], pa.list_(pa.int32()))})
    rd.write_arrow_shards(table, tmp_path / "web")  # what rd.prepare writes: list<int32>
    web = rd.ArrowShards(tmp_path / "web", unpinned="allow")
    hf_math = datasets.Dataset.from_dict(table.slice(0, 6).to_pydict())  # tokens inferred as list<int64>
    with pytest.raises(rd.ConfigError) as info:
        rd.Mixture({"web": web, "math": rd.ArrowShards.from_hf(hf_math, cache_dir=tmp_path / "a")},
                   weights={"web": 1, "math": 1})
    text = str(info.value)
    assert "'tokens' is list<item: int64> here, list<item: int32> in 'web'" in text
    assert "same columns" in text and "datasets.Features.from_arrow_schema(sources['web'].schema)" in text
    # the fix, as the message gives it
    fixed = hf_math.cast(datasets.Features.from_arrow_schema(web.schema))
    mix = rd.Mixture({"web": web, "math": rd.ArrowShards.from_hf(fixed, cache_dir=tmp_path / "b")},
                     weights={"web": 1, "math": 1})
    assert len(mix) == len(web) + 6
    other = tmp_path / "other"  # a missing and an extra column are named too
    rd.write_arrow_shards(pa.table({"id": pa.array([1, 2], pa.int64()), "x": [1, 2]}), other)
    with pytest.raises(rd.ConfigError, match=r"missing \['tokens'\]; not in 'web': \['x'\]"):
        rd.Mixture({"web": web, "x": rd.ArrowShards(other, unpinned="allow")}, weights={"web": 1, "x": 1})
