"""A crash at every boundary of a save that first recovers an earlier interrupted re-save.

The folder holds what a re-save of step 2 killed between its two renames leaves: ``step-1``, the
new copy of step 2 as a complete ``.tmp-step-2-*`` and the previous one as ``.aside-step-2-*``,
no ``step-2``, and ``latest`` naming it. The next save (step 3) recovers the newer copy first;
it is crashed at each file-system operation in turn (``test_store_hostile._patch``: mkdir,
rename, replace, fsync, unlink, rmdir, rmtree, the tensor write). After every crash the folder
must load a complete checkpoint holding what was saved (never a mix), steps 1 and 2 must load,
and the save after that must keep every complete copy and leave no leftovers."""

from __future__ import annotations

import os
import shutil

import pytest

import resumable_data as rd
from resumable_data.checkpoint import list_checkpoints
from tests.checkpoint.test_store_hostile import Crash, _patch, _quiet, _state, _value

S2 = "step-000000000002"


def _interrupted(root):
    rd.save_checkpoint(root, _state(1.0), step=1, keep_last=None)
    old = rd.save_checkpoint(root, _state(2.0), step=2, keep_last=None)
    new = rd.save_checkpoint(root.parent / (root.name + "-new"), _state(5.0), step=2, keep_last=None)
    os.rename(old, root / f".aside-{S2}-0a0b0c0d")
    shutil.copytree(new, root / f".tmp-{S2}-4242-01020304")
    assert not (root / S2).exists() and (root / "latest").read_text().strip() == S2


def test_a_crash_at_every_boundary_of_a_recovering_save(tmp_path, monkeypatch):
    probe = tmp_path / "probe"
    _interrupted(probe)
    ops: list = []
    with monkeypatch.context() as m:
        _patch(m, None, ops)
        rd.save_checkpoint(probe, _state(9.0), step=3, keep_last=None)
    assert ops.count("os.rename") >= 2, ops  # the recovery rename, then the new step's
    for k, op in enumerate(ops):
        root = tmp_path / f"k{k}"
        _interrupted(root)
        with monkeypatch.context() as m:
            _patch(m, k, [])
            with pytest.raises(Crash):
                rd.save_checkpoint(root, _state(9.0), step=3, keep_last=None)
        expect = {1: {1.0}, 2: {5.0}, 3: {9.0}}  # step 2: the newer copy, always
        t = _state(-1.0)
        with _quiet():
            info = rd.load_checkpoint(root, t)
        assert info.step in (2, 3) and _value(t) in expect[info.step], (k, op, info.step, _value(t))
        for step in (1, 2):
            t = _state(-1.0)
            with _quiet():
                rd.load_checkpoint(root, t, step=step)
            assert _value(t) in expect[step], (k, op, step, _value(t))
        rd.save_checkpoint(root, _state(7.0), step=4, keep_last=None)
        names = {p.name for p in list_checkpoints(root)}
        assert {"step-000000000001", S2, "step-000000000004"} <= names, (k, op, names)
        assert not [n for n in os.listdir(root) if n.startswith((".tmp-", ".aside-", ".trash-"))], (k, op)
        t = _state(-1.0)
        rd.load_checkpoint(root, t, step=2)
        assert _value(t) == 5.0, (k, op)
