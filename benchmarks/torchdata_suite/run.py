"""Run torchdata's own ``StatefulDataLoader`` tests against ``StatefulDataLoader`` and against ``rd.DataLoader``.

``python benchmarks/torchdata_suite/run.py [--modes torchdata,rd,rd-unpinned,rd-seeded] [--timeout 60] [-k SUBSTR]``

The test file is third-party input and is not committed: put pytorch/data's
``test/stateful_dataloader/test_state_dict.py`` (commit e2b35aa8, 67,324 characters,
BSD-3-Clause; see ``benchmarks/torchdata_suite/README.md``) at
``benchmarks/torchdata_suite/upstream/test_state_dict.py``. The runner checks its SHA-256 so a
count is always of the same suite. It needs ``torchdata`` (0.11.0), ``parameterized`` and
``expecttest`` (the ``bench`` extra).

Modes, each in its own processes:

* ``torchdata``: the file as it is;
* ``rd``: the module's ``StatefulDataLoader`` is ``rd.DataLoader``; datasets, samplers,
  ``Stateful``, ``torch.utils.data.DataLoader`` (one test compares with it) and the rest stay
  torchdata's and torch's. The rebinding is installed by an import hook, so processes the tests
  spawn get it too;
* ``rd-unpinned``: as ``rd``, and ``load_state_dict`` is called with ``allow_unpinned=True``
  (the tests' datasets are plain torch datasets, which rd marks unpinned and refuses to resume
  without it). It runs only the tests that pass with torchdata and fail with ``rd`` (the others
  keep their ``rd`` outcome); it shows which failures are only that refusal;
* ``rd-seeded``: as ``rd-unpinned``, and a loader that shuffles or samples at random with
  neither ``generator=`` nor ``seed=`` gets ``seed=1234``, the fix rd's refusal names (a seed
  drawn per loader, as ``benchmarks/torch_suite`` does, would differ between a saved loader and
  the one that resumes it, which rd refuses; StatefulDataLoader's state carries its sampler's
  generator instead). It runs only the tests that pass with torchdata and fail with
  ``rd-unpinned``; it shows which failures are only rd's refusal to shuffle without a known seed.

Per-test limits, the retry of a test that timed out, the cause table and the results writer are
``benchmarks/suite_runner.py``'s (shared with ``benchmarks/torch_suite``). Results:
``benchmarks/results/torchdata_suite.md`` and ``.json`` (the table in ``docs/dropin.md``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import suite_runner  # noqa: E402  (benchmarks/suite_runner.py; this file runs as a script)

UPSTREAM = HERE / "upstream" / "test_state_dict.py"
MODE_ENV = "RD_TORCHDATA_SUITE_MODE"
MODES = ("torchdata", "rd", "rd-unpinned", "rd-seeded")

#: (cause, deliberate, regex on "test id" + newline + "ExceptionType: message"); first match wins.
#: The deliberate ones are the documented differences of docs/dropin.md.
CAUSES: list[tuple[str, bool, str]] = [
    ("IterableDataset refused", True, r"not a torch IterableDataset|DataLoader with IterableDataset"),
    ("shuffle or random sampler without seed= or generator= refused", True, r"seed=None: expected an integer seed"),
    ("sampler whose order is drawn as it goes refused", True, r"sampler='\w+': expected None, a torch SequentialSampler"),
    ("in_order=False refused", True, r"in_order=False"),
    ("resuming with another num_workers is allowed (StatefulDataLoader raises AssertionError)", True,
     r"test_num_workers_mismatch\nException: Expected AssertionError"),
    ("state of an unpinned dataset refused without allow_unpinned=True", True, r"dataset is not pinned"),
    ("the test reads StatefulDataLoader's own state keys (_snapshot, _worker_snapshots, fetcher_state, ...)", True,
     r"KeyError: '(_snapshot|_worker_snapshots|dataset_state|fetcher_state)"),
    ("timeout", False, r"\nTimeout"),
    ("process crashed", False, r"\nCrash"),
]


def _patch(module, mode: str) -> None:
    """``rd``/``rd-seeded``: the module's ``StatefulDataLoader`` is ``rd.DataLoader``."""
    if mode == "torchdata":
        return
    module.StatefulDataLoader = suite_runner.rd_loader_class(
        seed_for=suite_runner.fixed_seed_when_random(1234) if mode == "rd-seeded" else None,
        allow_unpinned=mode in ("rd-unpinned", "rd-seeded"))


SUITE = suite_runner.Suite(
    name="torchdata_suite", script=Path(__file__).resolve(), upstream=UPSTREAM, module="test_state_dict",
    sha256="8bdc8e83cb30e184ea8a024b8b5932643fb50607f7eca9373da6ec8cb4d495d7",
    commit="e2b35aa8c495430b8664ee316cb47bb37b2a56ee", repo="pytorch/data",
    title="torchdata `test/stateful_dataloader/test_state_dict.py`", mode_env=MODE_ENV, modes=MODES,
    patch=_patch, causes=CAUSES, derived={"rd-unpinned": "rd", "rd-seeded": "rd-unpinned"},
    loader_attr="StatefulDataLoader",
    readme="benchmarks/torchdata_suite/README.md",
)

if os.environ.get(MODE_ENV):
    suite_runner.install(SUITE)


if __name__ == "__main__":
    suite_runner.main(SUITE, description=__doc__.splitlines()[0])
