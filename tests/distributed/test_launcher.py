"""The test launcher of spawned gloo ranks (``_workers.launch``): a rank killed by a signal with no
Python error (a C++ ``std::terminate``: SIGABRT) runs the world once more with a warning; a second
death fails the launch, naming the ranks that had finished."""

from __future__ import annotations

import pytest

import _workers as W

dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)


def test_an_abort_once_runs_the_world_again_with_a_warning(tmp_path):
    marker = tmp_path / "aborted-once"
    with pytest.warns(RuntimeWarning, match=r"once: process 1 terminated with signal SIGABRT .*running the world again"):
        out = W.launch(2, [("r", "abort", {"marker": str(marker)})], tmp_path, "once")
    assert marker.exists() and [o["r"] for o in out] == [0, 1]


def test_an_abort_every_time_fails_the_launch(tmp_path):
    with pytest.warns(RuntimeWarning), pytest.raises(AssertionError, match=r"SIGABRT .*of 2\), twice"):
        W.launch(2, [("r", "abort", {"marker": str(tmp_path / "m"), "always": True})], tmp_path, "always")
