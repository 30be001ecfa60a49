"""Real process groups (gloo on CPU, ranks spawned here, a free port per launch): per-rank slices
of the global stream on 2 and 4 ranks; DDP training interrupted on 4 ranks and resumed on 2 through
torch.distributed.checkpoint, bit-identical to uninterrupted runs at the same global batch; DCP
round trips of the loader on 1, 2 and 4 ranks.

Launches are module-scoped (one per world size, several tasks each) to keep the spawn cost low."""

from __future__ import annotations

import pytest

import resumable_data.distributed  # noqa: F401

import _workers as W

dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return W.write_data(tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("dist")


@pytest.fixture(scope="module")
def reference(data):
    """Uninterrupted single-process run (no process group, no DDP) at the same global batch."""
    model, opt = W.make_model()
    loader = W.train_loader(data[1], 1)
    assert loader.sharding.world_size == 1
    seen = W.train(model, opt, loader, W.STEPS, 1)
    return {"params": W.params(model), "seen": seen}


@pytest.fixture(scope="module")
def world4(data, workdir):
    slice_dir, train_dir = data
    return W.launch(4, [
        ("slices", "slices", dict(slice_dir=slice_dir)),
        ("full", "ddp", dict(train_dir=train_dir, stop=W.STEPS)),
        ("head", "ddp", dict(train_dir=train_dir, stop=4, save=str(workdir / "ckpt-4ranks"))),
        ("dcp", "dcp", dict(slice_dir=slice_dir, ckpt_dir=str(workdir / "dcp4"))),
    ], workdir, "w4")


@pytest.fixture(scope="module")
def world2(data, workdir, world4):
    slice_dir, train_dir = data
    return W.launch(2, [
        ("slices", "slices", dict(slice_dir=slice_dir)),
        ("full", "ddp", dict(train_dir=train_dir, stop=W.STEPS)),
        ("tail", "ddp", dict(train_dir=train_dir, stop=W.STEPS, load=str(workdir / "ckpt-4ranks"))),
        ("dcp", "dcp", dict(slice_dir=slice_dir, ckpt_dir=str(workdir / "dcp2"))),
    ], workdir, "w2")


@pytest.mark.parametrize("world", [2, 4])
def test_each_rank_gets_its_slice_of_the_global_stream(world, request):
    res = request.getfixturevalue(f"world{world}")
    for r in res:
        assert r["slices"]["contiguous"] == r["slices"]["strided"] == 14


def test_ddp_interrupted_on_4_ranks_resumed_on_2_is_bit_identical(reference, world4, world2):
    ref = reference["params"]
    assert ref != bytes(len(ref)), "the reference run must have moved the parameters"
    for res in (world4, world2):
        assert all(r["full"]["params"] == ref for r in res), "uninterrupted DDP run differs from 1 process"
    for r in world2:
        assert r["tail"]["label"] == "elastic_reshard"
        assert r["tail"]["start"] == 4
        assert r["tail"]["params"] == ref
        assert r["tail"]["state"]["layout"]["world_size"] == 2
        assert r["tail"]["state"]["recovery_label"] == "elastic_reshard"
    # the records the ranks trained on, put together, are the single-process stream
    for world, res, key, start in ((4, world4, "head", 0), (2, world2, "tail", 4)):
        steps = len(res[0][key]["seen"])
        for s in range(steps):
            assert [i for r in res for i in r[key]["seen"][s]] == reference["seen"][start + s]


@pytest.mark.parametrize("world", [1, 2, 4])
@pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")
def test_dcp_round_trip_of_the_loader(world, data, tmp_path, request):
    if world == 1:  # DCP without a process group: the single-process path
        res = [W.task_dcp(0, 1, data[0], str(tmp_path))]
    else:
        res = [r["dcp"] for r in request.getfixturevalue(f"world{world}")]
    assert all(r["auto"] == res[0]["auto"] for r in res), "rank-invariant state"
    assert [x[:2] for x in res[0]["auto"]["skipped"]] == [[6, 8], [20, 21]]
    assert res[0]["auto"]["layout"]["world_size"] == world
    for r in res:
        assert "rd.distributed.LoaderStateful(loader, on_uncommitted=" in r["explicit_refusal"]  # the fix that works under dcp.load
