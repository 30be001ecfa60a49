"""The loader's iterator (loader/iterator.py): workers that cannot start because what they receive
does not pickle (spawn and forkserver pickle the dataset and the functions) are an rd.ConfigError
naming the start method and the fixes; with the fix followed the same loader runs."""

from __future__ import annotations

import threading

import pytest
import torch

import resumable_data as rd


class _Items(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 32

    def __getitem__(self, i: int) -> int:
        return i


class _Locked(_Items):
    def __init__(self) -> None:
        self.lock = threading.Lock()  # an open handle: "cannot pickle '_thread.lock' object"


def _as_list(batch):
    return batch


@pytest.mark.parametrize("what", ["lambda collate_fn", "a lock in the dataset"])
def test_an_unpicklable_spawn_worker_argument_is_a_config_error_whose_fix_works(what):
    dataset, collate = (_Items(), lambda b: b) if what == "lambda collate_fn" else (_Locked(), _as_list)
    loader = rd.DataLoader(dataset, batch_size=8, seed=0, num_workers=1, multiprocessing_context="spawn",
                           collate_fn=collate)
    with pytest.warns(UserWarning, match="pickle"), pytest.raises(rd.ConfigError) as info:  # torch's own warning
        next(iter(loader))
    text = str(info.value)
    assert "multiprocessing_context='spawn'" in text and "pickle" in text and "fix:" in text
    assert "module level" in text and "multiprocessing_context='fork'" in text
    fixed = rd.DataLoader(_Items(), batch_size=8, seed=0, num_workers=1, multiprocessing_context="spawn",
                          collate_fn=_as_list)  # the fix followed: module-level functions, no handles
    assert [list(b) for b in fixed] == [list(b) for b in rd.DataLoader(_Items(), batch_size=8, seed=0, collate_fn=_as_list)]
