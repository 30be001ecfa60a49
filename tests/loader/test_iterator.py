"""The loader's iterator (loader/iterator.py): workers that cannot start because what they receive
does not pickle (spawn and forkserver pickle the dataset and the functions) are an rd.ConfigError
naming the start method and the fixes; with the fix followed the same loader runs. A generator
suspended in ``yield from loader`` at interpreter exit closes the iterator without a traceback."""

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


_ENDLESS = """
import resumable_data as rd
loader = rd.DataLoader(list(range(32)), batch_size=8, seed=0, shuffle=True, num_workers={workers})

def batches():  # docs/schedules.md: endless, each new iter(loader) continues the stream
    while True:
        yield from loader

it = batches()
next(it)
print("exit")
"""


@pytest.mark.parametrize("workers", [0, 2])
def test_a_generator_left_in_yield_from_loader_at_exit_prints_no_traceback(workers, tmp_path):
    # Python closes the suspended generator at shutdown, which closes the loader's iterator
    # (yield from), after this package's module globals were cleared: close() raised
    # AttributeError ('NoneType' object has no attribute 'worker_processes'), printed as
    # "Exception ignored in: <generator object batches ...>" at the end of every such script
    import subprocess
    import sys

    script = tmp_path / "endless.py"
    script.write_text(_ENDLESS.format(workers=workers))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "exit"
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr
