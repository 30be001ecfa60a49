"""Run PyTorch's own ``test/test_dataloader.py`` against torch's DataLoader and against ``rd.DataLoader``.

``python benchmarks/torch_suite/run.py [--modes torch,rd,rd-seeded] [--timeout 60] [-k SUBSTR]``

The test file is third-party input and is not committed: put pytorch/pytorch's
``test/test_dataloader.py`` (commit 74436f90, 118,841 characters, BSD-3-Clause; see
``benchmarks/torch_suite/README.md``) at ``benchmarks/torch_suite/upstream/test_dataloader.py``.
The runner checks its SHA-256 so a count is always of the same suite.

Modes, each in its own processes:

* ``torch``: the file as it is;
* ``rd``: the module's global ``DataLoader`` and its ``torch.utils.data.DataLoader`` references
  are ``rd.DataLoader``; samplers, datasets, collation, ``get_worker_info`` stay torch's. The
  rebinding is installed by an import hook, so processes the tests spawn get it too;
* ``rd-seeded``: as ``rd``, and a loader built with neither ``generator=`` nor ``seed=`` gets
  ``seed=`` drawn from torch's global generator at construction (torch draws an unseeded shuffle
  or random sampler from that generator too, at every ``iter()``). It measures which failures
  are only rd's refusal to shuffle without a known seed; it runs only the tests that pass with
  torch and fail with ``rd`` (the others keep their ``rd`` outcome).

Per-test limits, the retry of a test that timed out, the cause table and the results writer are
``benchmarks/suite_runner.py``'s (shared with ``benchmarks/torchdata_suite``). The output is a
Markdown table: passing per mode, and the rd failures grouped by cause (:data:`CAUSES`, the
deliberate differences are marked), written to ``benchmarks/results/torch_suite.md`` and ``.json``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import suite_runner  # noqa: E402  (benchmarks/suite_runner.py; this file runs as a script)

UPSTREAM = HERE / "upstream" / "test_dataloader.py"
MODE_ENV = "RD_TORCH_SUITE_MODE"
MODES = ("torch", "rd", "rd-seeded")

#: (cause, deliberate, regex on "test id" + newline + "ExceptionType: message"); first match wins.
#: The deliberate ones are the documented differences of docs/dropin.md.
CAUSES: list[tuple[str, bool, str]] = [
    ("IterableDataset refused", True, r"not a torch IterableDataset|DataLoader with IterableDataset"),
    ("shuffle or random sampler without seed= or generator= refused", True, r"seed=None: expected an integer seed"),
    ("sampler whose order is drawn as it goes refused", True, r"sampler='\w+': expected None, a torch SequentialSampler"),
    ("batch_sampler with batches of different sizes refused", True, r"expected lists of one length"),
    ("dataset grew after the loader was built", True, r"test_growing_dataset"),
    ("seed_per_sample: worker_init_fn's seed does not reach __getitem__", True, r"test_worker_init_fn\n"),
    ("timeout", False, r"\nTimeout"),
    ("process crashed", False, r"\nCrash"),
]


def _patch(module, mode: str) -> None:
    """``rd``/``rd-seeded``: the module's ``DataLoader`` and its ``torch.utils.data.DataLoader``."""
    import torch

    if mode == "torch":
        return
    cls = suite_runner.rd_loader_class(seed_for=suite_runner.drawn_seed if mode == "rd-seeded" else None)
    data = suite_runner.AttributeView(torch.utils.data, {"DataLoader": cls})
    utils = suite_runner.AttributeView(torch.utils, {"data": data})
    module.DataLoader = cls
    module.torch = suite_runner.AttributeView(torch, {"utils": utils})


SUITE = suite_runner.Suite(
    name="torch_suite", script=Path(__file__).resolve(), upstream=UPSTREAM, module="test_dataloader",
    sha256="5184d2bf8bb8a88dd27a4a9c5d6df2a41dd28f38c2230f087bcbc48f9c9cf5eb",
    commit="74436f9025609987bbc69c617564f98635b67807", repo="pytorch/pytorch",
    title="PyTorch `test/test_dataloader.py`", mode_env=MODE_ENV, modes=MODES, patch=_patch, causes=CAUSES,
    derived={"rd-seeded": "rd"}, loader_attr="DataLoader", readme="benchmarks/torch_suite/README.md",
)

if os.environ.get(MODE_ENV):
    suite_runner.install(SUITE)


if __name__ == "__main__":
    suite_runner.main(SUITE, description=__doc__.splitlines()[0])
