"""Datasets whose ``__getitem__`` is known library code that draws no random numbers.

Why. Per-sample seeding (the default, ``rd.SampleSeeding.EAGER``) writes the three global
generators' states before every sample so that whatever user code runs draws from the sample's
key. When no user code runs per sample, because the dataset is one of torch's own containers of
tensors or a Python sequence, nothing can draw, read or keep a generator state, so seeding
changes nothing anybody can observe: skipping it is exact, not an approximation, and saves the
~1 us a sample that computing and writing the states costs.

Rule (:func:`draws_nothing`, pure, decided once when the loader is built). Exact types only, so
a subclass (which may override ``__getitem__``) is never taken for its base:

* a ``list``, ``tuple``, ``range``, ``numpy.ndarray`` or ``torch.Tensor``: indexing returns an
  element;
* ``torch.utils.data.TensorDataset`` whose tensors are all plain ``torch.Tensor`` (a tensor
  subclass may index through Python code);
* ``torch.utils.data.Subset`` and ``ConcatDataset`` whose every child is one of these (nested up
  to :data:`MAX_DEPTH` levels; deeper is treated as user code).

Anything else (every user class, HF ``datasets.Dataset``, whose formatting runs user transforms)
is user code and seeded as before. ``transform=`` and ``collate_fn=`` are user code whatever the
dataset: the fetcher asks this rule only for the dataset itself. Cost: one walk over the
dataset's wrappers at construction; nothing per batch. A restore is unaffected (the loader's
state records the seeding mode, which does not change). Torch-free like the resolver that calls
it: torch's types are looked up among the imported modules (a dataset of a torch type means torch
is imported).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

__all__ = ["MAX_DEPTH", "draws_nothing"]

#: Wrapper levels (``Subset`` / ``ConcatDataset``) walked before a dataset counts as user code.
MAX_DEPTH = 8

_SEQUENCES = (list, tuple, range, np.ndarray)


def draws_nothing(dataset: Any, depth: int = 0) -> bool:
    """Whether fetching ``dataset[i]`` runs only library code known to draw no random numbers."""
    kind = type(dataset)
    if kind in _SEQUENCES:
        return True
    torch = sys.modules.get("torch")
    data = sys.modules.get("torch.utils.data")
    if torch is None or data is None:  # not imported: the dataset is no torch type
        return False
    if kind is torch.Tensor:
        return True
    if kind is data.TensorDataset:
        return all(type(t) is torch.Tensor for t in dataset.tensors)
    if depth >= MAX_DEPTH:
        return False
    if kind is data.Subset:
        return draws_nothing(dataset.dataset, depth + 1)
    if kind is data.ConcatDataset:
        return all(draws_nothing(d, depth + 1) for d in dataset.datasets)
    return False
