"""Holes left open by ``test_forgery``: a file swapped between its hash and its parse (the loader
opened each file twice), the safetensors format tag, scheduler values torch's schedulers never
produce, and the DCP layout's per-rank fields. Every refusal changes nothing (``refused``)."""

from __future__ import annotations

import json
import math
import os
import random
import shutil

import numpy as np
import pytest
import torch

import resumable_data as rd
from resumable_data.checkpoint import files, tensor_file
from resumable_data.checkpoint.digest import flatten
from resumable_data.checkpoint.store import CHECKPOINT_FORMAT, read_checkpoint
from tests.checkpoint.test_forgery import at, base, forge, fresh, refused  # noqa: F401 (base: fixture)


def _same(a, b) -> bool:
    fa, fb = flatten("", a, []), flatten("", b, [])
    if [k for k, _ in fa] != [k for k, _ in fb]:
        return False
    for (_, x), (_, y) in zip(fa, fb):
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and torch.equal(x, y)):
                return False
        elif not (x == y or (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y))):
            return False
    return True


# -- a file swapped between its hash and its parse -------------------------------------------------
@pytest.mark.parametrize("name", ["state.json", "tensors.safetensors", "inventory.json"])
def test_a_file_swapped_after_it_is_opened_is_read_as_hashed(base, tmp_path, monkeypatch, name):  # noqa: F811
    """The loader hashed each file, then opened it again to parse it: a file renamed over the
    original in between (same marker, not re-hashed) was parsed unchecked. The swap happens right
    after the loader's first open of the file; what is read must be what was hashed."""
    tree = read_checkpoint(base["six"]).tree
    ckpt = tmp_path / "c" / base["six"].name
    shutil.copytree(base["six"], ckpt)
    forged_tree = read_checkpoint(base["six"]).tree
    forged_tree["model"][next(iter(forged_tree["model"]))].add_(1.0)
    forged_tree["scaler"]["scale"] = 4096.0
    forged_tree["loader"]["note"] = "forged"
    forged = forge(base["six"], tmp_path / "forged" / base["six"].name, forged_tree)
    inv = json.loads((ckpt / "inventory.json").read_text())
    (forged / "inventory.json").write_text(json.dumps({**inv, "entries": []}))
    real_open, swapped = files.open_checked, []

    def open_then_swap(path, limit=None):
        got = real_open(path, limit)
        if path.name == name and path.parent == ckpt and not swapped:
            shutil.copy(forged / name, ckpt / f".{name}.swap")
            os.replace(ckpt / f".{name}.swap", ckpt / name)  # a new inode at the same path
            swapped.append(path)
        return got

    monkeypatch.setattr(files, "open_checked", open_then_swap)
    monkeypatch.setattr(tensor_file, "open_checked", open_then_swap)  # the tensor file's streaming reader
    try:
        raw = read_checkpoint(ckpt)
    except rd.ResumableDataError:
        pass  # refused: as good as read as hashed
    else:
        assert _same(raw.tree, tree), f"{name} swapped after its hash was parsed"
        assert raw.inventory == inv
    assert swapped, "the hook never ran"


# -- the safetensors format tag --------------------------------------------------------------------
@pytest.mark.parametrize(
    "metadata",
    [
        None,
        {"format": "something.else"},
        {"format": CHECKPOINT_FORMAT + " "},
        {"format": CHECKPOINT_FORMAT, "schema_version": "3"},
        {"format": CHECKPOINT_FORMAT, "schema_version": "2.0"},
        {"format": CHECKPOINT_FORMAT, "schema_version": "2", "extra": "x"},
        {"format": CHECKPOINT_FORMAT, "schema_version": "1"},  # a version 1 tag in a version 2 checkpoint
        {"format": CHECKPOINT_FORMAT},  # the first saves' tag: version 1 only
    ],
    ids=["none", "other-format", "trailing-space", "version-3", "version-2.0", "extra-key", "version-1", "bare"],
)
def test_the_safetensors_format_tag_is_enforced(base, tmp_path, metadata):  # noqa: F811
    from safetensors.torch import load_file, save_file

    o = fresh(base, tmp_path)
    ckpt = forge(base["six"], tmp_path / "c" / base["six"].name)
    save_file(load_file(str(ckpt / "tensors.safetensors")), str(ckpt / "tensors.safetensors"), metadata=metadata)
    from tests.checkpoint.test_forgery import rehash

    rehash(ckpt)
    refused(o, ckpt, "__metadata__")


def test_saves_write_the_format_tag_with_its_version_and_older_tags_still_load(base, tmp_path):  # noqa: F811
    from safetensors import safe_open

    with safe_open(str(base["six"] / "tensors.safetensors"), "pt") as f:
        assert f.metadata() == {"format": CHECKPOINT_FORMAT, "schema_version": "2"}
    o = fresh(base, tmp_path)
    rd.load_checkpoint(
        forge(base["six"], tmp_path / "c" / base["six"].name, read_checkpoint(base["six"]).tree), o.state
    )
    for tag in ({"format": CHECKPOINT_FORMAT}, {"format": CHECKPOINT_FORMAT, "schema_version": "1"}):
        old = _version_1_copy(base["six"], tmp_path / str(len(tag)) / base["six"].name, tag)
        (tmp_path / f"o{len(tag)}").mkdir()
        rd.load_checkpoint(old, fresh(base, tmp_path / f"o{len(tag)}").state)


def _as_version_1(x):
    """What a version 1 save wrote: an OrderedDict (an EMA's state_dict()) or Counter as a dict."""
    if isinstance(x, dict):
        return {k: _as_version_1(v) for k, v in x.items()}
    return [_as_version_1(v) for v in x] if isinstance(x, list) else x


def _version_1_copy(src, dest, tag=None):
    """A copy of the step ``src`` as a version 1 save wrote it (marker, tensor file tag, state)."""
    from safetensors.torch import load_file, save_file

    from tests.checkpoint.test_forgery import rehash

    old = forge(src, dest, _as_version_1(read_checkpoint(src).tree))
    tag = tag or {"format": CHECKPOINT_FORMAT, "schema_version": "1"}
    save_file(load_file(str(old / "tensors.safetensors")), str(old / "tensors.safetensors"), metadata=tag)
    marker = json.loads((old / "COMMITTED").read_text())
    (old / "COMMITTED").write_text(json.dumps({**marker, "schema_version": 1}))
    rehash(old)
    return old


def _edit_state_json(step, edit):
    """``edit`` applied to the step's state.json (the JSON as saved, tags included), re-hashed."""
    from tests.checkpoint.test_forgery import rehash

    j = json.loads((step / "state.json").read_text())
    edit(j)
    (step / "state.json").write_text(json.dumps(j))
    rehash(step)
    return step


def _set_callback(node):
    return lambda j: j["callbacks"]["counter"].__setitem__("n", node)


def _flag_model_tensor(key, value):
    def edit(j):
        ref = next(iter(j["model"].values()))
        assert "__tensor__" in ref
        ref[key] = value

    return edit


FORGED_TAGS = {
    "size of floats": _set_callback({"__size__": [1.5]}),
    "size of bools": _set_callback({"__size__": [True, 2]}),
    "odict of a list": _set_callback({"__odict__": [["a", 1]]}),
    "odict of a tensor": _set_callback({"__odict__": {"__tensor__": "model.fc1.weight"}}),
    "counter with a key beside": _set_callback({"__counter__": {}, "x": 1}),
    "bytes not base64": _set_callback({"__bytes__": "!!"}),
    "bytes not canonical": _set_callback({"__bytes__": "YQ"}),
    "complex of ints": _set_callback({"__complex__": [1, 2]}),
    "complex of one": _set_callback({"__complex__": [1.0]}),
    "requires_grad 1": _flag_model_tensor("requires_grad", 1),
    "parameter false": _flag_model_tensor("parameter", False),
    "unknown tensor key": _flag_model_tensor("grad_fn", "x"),
}


@pytest.mark.parametrize("case", list(FORGED_TAGS))
def test_a_forged_codec_tag_is_refused_and_changes_nothing(base, tmp_path, case):  # noqa: F811
    """A re-hashed state.json holding a tag no save writes: an rd.CheckpointError before anything
    is restored (every training object and the folder unchanged), never a raw TypeError / KeyError /
    ValueError, and never a plain dict with a tag key handed to the callback."""
    o = fresh(base, tmp_path)
    ckpt = tmp_path / "c" / base["six"].name
    shutil.copytree(base["six"], ckpt)
    e = refused(o, _edit_state_json(ckpt, FORGED_TAGS[case]))
    assert isinstance(e, rd.CheckpointError), repr(e)
    flag = FORGED_TAGS[case].__name__ == "edit"  # a tensor reference's keys (_flag_model_tensor)
    where = "tensor reference=" if flag else "callbacks.counter.n="
    assert str(e).startswith(where), str(e)  # the codec's refusal, before any oracle is compared


@pytest.mark.parametrize(
    "node", [{"__size__": [2]}, {"__odict__": {}}, {"__counter__": {}}, {"__bytes__": ""}, {"__complex__": [1.0, 2.0]},
             {"__numpy__": ["int8", 1]}], ids=repr
)
def test_a_version_1_checkpoint_holding_a_version_2_tag_is_refused(base, tmp_path, node):  # noqa: F811
    """Version 2 added the tags; an old-version marker over a state that holds one was edited (it
    decoded as version 2). The same checkpoint without the tag loads (the test above)."""
    o = fresh(base, tmp_path)
    old = _version_1_copy(base["six"], tmp_path / "c" / base["six"].name)
    e = refused(o, _edit_state_json(old, _set_callback(node)), "schema version 1 checkpoint")
    assert isinstance(e, rd.CheckpointError) and "callbacks.counter.n" in str(e)


# -- scheduler values torch's schedulers never hold ------------------------------------------------
SCHEDULER_CASES = [
    (("base_lrs", 0), float("nan")),
    (("base_lrs", 1), float("inf")),
    (("base_lrs", 0), -0.1),
    (("last_epoch",), -2),
    (("last_epoch",), float("nan")),
    (("last_epoch",), float("-inf")),
    (("_step_count",), -1),
]


@pytest.mark.parametrize("path,value", SCHEDULER_CASES, ids=[f"{p[0]}={v!r}" for p, v in SCHEDULER_CASES])
@pytest.mark.parametrize("layout", ["file", "dcp"])
def test_scheduler_values_torchs_schedulers_never_hold_are_refused(base, tmp_path, path, value, layout):  # noqa: F811
    """A NaN base LR loaded (LambdaLR multiplies it: every later LR NaN), as did a negative step count."""
    from tests.checkpoint import _train as T
    from tests.checkpoint.test_forgery import _dcp
    from tests.checkpoint.test_restore import digest, objects

    o = fresh(base, tmp_path)
    field = f"scheduler.{path[0]}" + (f"[{path[1]}]" if len(path) > 1 else "")
    if layout == "file":
        tree = at(read_checkpoint(base["six"]).tree, ("scheduler", *path), value)
        refused(o, forge(base["six"], tmp_path / "c" / base["six"].name, tree, oracles_of=o.state), field)
    else:
        saved = objects(base["data"], tmp_path, "dcp-saved")
        T.train(saved, total=6)
        forged = _dcp(saved, lambda t: at(t, ("scheduler", *path), value))
        before = digest(o)
        with pytest.raises(rd.CheckpointError, match=field.replace("[", r"\[").replace("]", r"\]")):
            o.state.load_state_dict(forged)
        assert digest(o) == before


def _half(epoch: int) -> float:
    return 0.5


class OwnLambdaLR(torch.optim.lr_scheduler.LambdaLR):
    """A user's scheduler class (a subclass of torch's): its state is the user's to define."""


def test_a_users_scheduler_state_is_not_held_to_torchs_ranges(tmp_path):
    def state(value: float):
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 2)
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(value)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        return rd.TrainingState(model=model, optimizer=opt, scheduler=OwnLambdaLR(opt, _half), run_id="own")

    s = state(1.0)
    s.scheduler._step_count = -3  # the user's class, the user's meaning
    s.scheduler.last_epoch = -7
    rd.save_checkpoint(tmp_path, s, step=1)
    t = state(0.0)
    rd.load_checkpoint(tmp_path, t)
    assert t.scheduler._step_count == -3 and t.scheduler.last_epoch == -7
    assert all(float(p.detach().flatten()[0]) == 1.0 for p in t.model.parameters())


# -- the DCP layout's rank table: no field ignored -------------------------------------------------
def _entry(t, key, value):
    t["ranks"]["entries"][0][key] = value


def _two_ranks(t, change):
    """A table of two saved ranks (rank 1 a copy of rank 0), then ``change`` applied to it."""
    e = json.loads(json.dumps(t["ranks"]["entries"][0]))
    t["ranks"] = {"world_size": 2, "entries": [t["ranks"]["entries"][0], {**e, "rank": 1}]}
    change(t["ranks"]["entries"][1])


DCP_CASES = [
    ("rank-1", lambda t: _entry(t, "rank", 1), "entries[0].rank"),
    ("rank-string", lambda t: _entry(t, "rank", "0"), "entries[0].rank"),
    ("rank-true", lambda t: _entry(t, "rank", False), "entries[0].rank"),
    ("gradients-other", lambda t: _entry(t, "gradients", "0123456789abcdef"), "entries[0].gradients"),
    ("gradients-number", lambda t: _entry(t, "gradients", 5), "entries[0].gradients"),
    ("entry-extra-key", lambda t: _entry(t, "zz", 1), "entries[0]"),
    ("entry-missing-key", lambda t: t["ranks"]["entries"][0].pop("gradients"), "entries[0]"),
    ("oracle-unknown", lambda t: t["ranks"]["entries"][0]["oracles"].update(model="0"), "entries[0].oracles"),
    ("oracle-number", lambda t: t["ranks"]["entries"][0]["oracles"].update(next_batch=3), "entries[0].oracles"),
    ("ranks-extra-key", lambda t: t["ranks"].update(zz=1), "state.json.ranks"),
    ("top-level-rng", lambda t: t.update(rng=t["ranks"]["entries"][0]["rng"]), "state.json.rng"),
    ("other-rank-rank", lambda t: _two_ranks(t, lambda e: e.update(rank=0)), "entries[1].rank"),
    (
        "other-rank-rng",
        lambda t: _two_ranks(t, lambda e: e["rng"]["numpy"].update(pos=10**6)),
        "entries[1].rng",
    ),
]


@pytest.mark.parametrize("name,change,field", DCP_CASES, ids=[c[0] for c in DCP_CASES])
def test_dcp_rank_table_fields_are_checked_not_ignored(base, tmp_path, name, change, field):  # noqa: F811
    """``rank``, each entry's ``gradients`` and the top-level ``rng`` were ignored at load (any value
    loaded); another rank's generators were read only on that rank (the other ranks loaded)."""
    from tests.checkpoint import _train as T
    from tests.checkpoint.test_forgery import _dcp
    from tests.checkpoint.test_restore import digest, objects

    saved = objects(base["data"], tmp_path, "dcp-saved")
    T.train(saved, total=6)  # mid-window: gradients saved
    assert json.loads(saved.state.state_dict()["json"])["accumulation"]["gradients"]
    forged = _dcp(saved, change)
    o = fresh(base, tmp_path)
    before = digest(o)
    with pytest.raises(rd.CheckpointError) as e:
        o.state.load_state_dict(forged)
    assert field in str(e.value), str(e.value)
    assert digest(o) == before
    o.state.load_state_dict(_dcp(saved, lambda t: None))  # the unforged state loads


def _sequential(value: float):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(value)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.SequentialLR(
        opt,
        [torch.optim.lr_scheduler.ConstantLR(opt, factor=0.5, total_iters=2), torch.optim.lr_scheduler.StepLR(opt, 3)],
        milestones=[2],
    )
    return rd.TrainingState(model=model, optimizer=opt, scheduler=sched, run_id="seq")


@pytest.mark.parametrize(
    "path,value,field",
    [
        ((0, "base_lrs", 0), float("nan"), "scheduler._schedulers[0].base_lrs[0]"),
        ((1, "last_epoch"), -5, "scheduler._schedulers[1].last_epoch"),
        ((1, "_step_count"), -1, "scheduler._schedulers[1]._step_count"),
    ],
)
def test_sub_scheduler_values_are_checked_too(tmp_path, path, value, field):
    """SequentialLR's own get_lr() is not probed (a load changes its sub-schedulers in place): a NaN
    base LR in a sub-scheduler loaded."""
    from tests.checkpoint.test_forgery import forge

    s = _sequential(1.0)
    s.scheduler.step()
    step = rd.save_checkpoint(tmp_path / "saved", s, step=1)
    tree = at(read_checkpoint(step).tree, ("scheduler", "_schedulers", *path), value)
    t = _sequential(0.0)
    tree["oracles"] = t._oracles(tree, None)  # recomputed from the forged tree
    ckpt = forge(step, tmp_path / "c" / step.name, tree)
    before = ([p.detach().clone() for p in t.model.parameters()], json.dumps(t.scheduler.state_dict(), default=repr))
    with pytest.raises(rd.CheckpointError) as e:
        rd.load_checkpoint(ckpt, t)
    assert field.replace("[", "").replace("]", "") in str(e.value).replace("[", "").replace("]", ""), str(e.value)
    assert all(torch.equal(a, b) for a, b in zip(before[0], t.model.parameters()))
    assert json.dumps(t.scheduler.state_dict(), default=repr) == before[1]
    rd.load_checkpoint(step, t)  # the unforged checkpoint loads


def test_a_stepped_sequential_lr_resumes_and_continues_its_schedule(tmp_path):
    """Its sub-schedulers' progress (``_step_count``, ``last_epoch``) was compared as configuration:
    every checkpoint of a SequentialLR that had stepped was refused ('build the scheduler as saved')."""
    s = _sequential(1.0)
    for _ in range(3):
        s.optimizer.step()
        s.scheduler.step()
    step = rd.save_checkpoint(tmp_path, s, step=3)
    t = _sequential(0.0)
    rd.load_checkpoint(step, t)
    lrs = []
    for sched in (s, t):
        seq = []
        for _ in range(5):
            sched.optimizer.step()
            sched.scheduler.step()
            seq.append(sched.optimizer.param_groups[0]["lr"])
        lrs.append(seq)
    assert lrs[0] == lrs[1] and len(set(lrs[0])) > 1, lrs


def test_nan_and_negative_model_values_are_legitimate_state(tmp_path):
    """Value checks stop at what torch's objects can never hold: a model's NaN, infinite or negative
    weights are a (diverged, or simply signed) training state, saved and restored bit for bit."""
    s = _sequential(-2.0)
    with torch.no_grad():
        s.model.weight[0, 0] = float("nan")
        s.model.weight[1, 1] = float("-inf")
    rd.save_checkpoint(tmp_path, s, step=1)
    t = _sequential(0.0)
    rd.load_checkpoint(tmp_path, t)
    for a, b in zip(s.model.parameters(), t.model.parameters()):
        assert torch.equal(a.detach().view(torch.int32), b.detach().view(torch.int32))


# -- value-level fields: rng null, a DCP rank's gradients oracle when none were saved ----------------
def test_rng_null_is_refused_where_the_state_captures_generators(base, tmp_path):  # noqa: F811
    """``rng: null`` (oracles recomputed) restored no generator under a faithful label: the resumed run
    drew from the fresh process's streams. Refused, with the fix for a run saved with
    capture_rng=False (the metadata does not record it), which then loads."""
    import copy as copy_mod

    o = fresh(base, tmp_path)
    tree = copy_mod.deepcopy(base["tree"])
    tree["rng"] = None
    ckpt = forge(base["six"], tmp_path / "c" / base["six"].name, tree, oracles_of=o.state)
    err = refused(o, ckpt, "rng=None")
    assert "capture_rng=False" in str(err) and "label='warm_start'" in str(err)
    o2 = fresh(base, tmp_path, "no-rng")
    o2.state.capture_rng = False  # as built with rd.TrainingState(capture_rng=False)
    before = (torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate())
    rd.load_checkpoint(ckpt, o2.state)
    after = (torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate())
    assert torch.equal(before[0], after[0]) and (before[1] == after[1]).all() and before[2] == after[2]
    rd.load_checkpoint(ckpt, fresh(base, tmp_path, "warm").state, label="warm_start")  # restores no generator


@pytest.mark.parametrize("layout_case", ["rng-null", "gradients-not-none"])
def test_dcp_value_level_rank_fields(base, tmp_path, layout_case):  # noqa: F811
    """A rank's ``rng: null`` (as rng null above), and its ``gradients`` oracle where the accumulation
    record lists no saved gradients: every rank computes ``"none"`` then (it was only type-checked:
    any string loaded)."""
    from tests.checkpoint import _train as T
    from tests.checkpoint.test_forgery import _dcp
    from tests.checkpoint.test_restore import digest, objects

    saved = objects(base["data"], tmp_path, "dcp-saved")
    T.train(saved, total=8)  # a window boundary: no gradients saved
    tree = json.loads(saved.state.state_dict()["json"])
    assert tree["accumulation"]["gradients"] == [] and tree["ranks"]["entries"][0]["gradients"] == "none"
    change, field = {
        "rng-null": (lambda t: _entry(t, "rng", None), "entries[0].rng"),
        "gradients-not-none": (lambda t: _entry(t, "gradients", "0123456789abcdef"), "entries[0].gradients"),
    }[layout_case]
    o = fresh(base, tmp_path)
    before = digest(o)
    with pytest.raises(rd.CheckpointError) as e:
        o.state.load_state_dict(_dcp(saved, change))
    assert field in str(e.value), str(e.value)
    assert digest(o) == before
    if layout_case == "rng-null":
        o.state.capture_rng = False  # a run saved with capture_rng=False: its entries are null
        o.state.load_state_dict(_dcp(saved, change))
    else:
        o.state.load_state_dict(_dcp(saved, lambda t: None))  # the unforged state loads
