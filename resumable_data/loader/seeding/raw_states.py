"""The global generators' states saved, restored and watched through their probed memory
(:class:`.raw_memory.Layout`): around a batch, and around user code that lazy seeding leaves
unseeded.

Algorithm. :class:`PyNpStates` saves Python's and numpy's states with their cached Gaussians as
the bytes of their probed views and writes them back (one slice assignment each);
:func:`save_torch` / :func:`restore_torch` do the same with torch's region. :class:`UnseededStates`
(Python's and numpy's: states saved, cached Gaussians cleared so that a draw of a cached value
moves the state too) and :class:`TorchWatch` (torch's whole region: seed, engine, both cached
normals) tell afterwards whether user code drew from (or reseeded, or swapped) the generators by
comparing the whole states, and put them back.

Guarantee. The bytes written back are only bytes read from the same place earlier, so no write
creates a state the generator could not reach through its own API; a generator whose view the
probe did not find is saved and restored through ``getstate``/``get_state`` and their setters,
identical in results.

Cost. A save and restore around a batch: one read and one write per generator.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

from resumable_data.errors import UsageError, describe
from resumable_data.loader.seeding.raw_memory import Gauss, Layout, python_random

__all__ = ["PyNpStates", "TorchWatch", "UnseededStates", "restore_torch", "save_torch"]


class PyNpStates:
    """The states of Python's and numpy's global generators with their cached Gaussians: saved
    (:meth:`save`) and written back (:meth:`restore`) through the probed memory, or through
    ``getstate``/``get_state`` where the probe failed."""

    __slots__ = ("_lay", "_np", "_npg", "_py", "_pyg")
    _lay: Layout
    #: Python's state: the view's bytes (probed), or ``random.getstate()``; its cached Gaussian
    _py: bytes | tuple[Any, ...]
    _pyg: float | None
    #: numpy's state: the view's bytes (probed), or ``np.random.get_state()``; its cache's 16 bytes
    _np: bytes | dict[str, Any] | tuple[Any, ...]
    _npg: bytes

    def save(self, lay: Layout) -> None:
        """Save both states (and caches) of the generators ``lay`` was probed on."""
        self._lay = lay
        if lay.py is not None:
            self._py = lay.py.tobytes()
            self._pyg = python_random().gauss_next
        else:
            self._py = random.getstate()
        if lay.np is not None and lay.gauss_bytes is not None:  # (np is None without the cache's view)
            self._np = lay.np.tobytes()
            self._npg = lay.gauss_bytes.tobytes()  # has_gauss, padding, gauss
        else:
            self._np = np.random.get_state(legacy=True)

    @property
    def layout(self) -> Layout:
        """The probed layout the states were saved through."""
        return self._lay

    @property
    def fast(self) -> bool:
        """Whether the states were saved through the probed memory (lazy seeding can start from them)."""
        return self._lay.fast

    def restore(self) -> None:
        """Write the saved states (and caches) back."""
        lay = self._lay
        if isinstance(self._py, tuple):  # saved by getstate (no probed view)
            random.setstate(self._py)
        elif lay.py_mv is not None:
            lay.py_mv[:] = self._py  # writing 2.5 KB back is cheaper than comparing them first
            lay.py_owner.gauss_next = self._pyg
        if not isinstance(self._np, bytes):  # saved by get_state (no probed view)
            np.random.set_state(self._np)
        elif lay.np_mv is not None and lay.gauss_bytes is not None:
            lay.np_mv[:] = self._np
            lay.gauss_bytes[:] = self._npg


class UnseededStates(PyNpStates):
    """Python's ``random`` and numpy's global generator left unseeded while user code runs, and
    watched: on construction their states are saved (or taken from ``saved``, states saved just
    before with nothing run since) and their cached Gaussians cleared (so that a draw of a cached
    value moves the state too); :meth:`finish` says whether anything drew from (or reseeded)
    either since, comparing the whole states and the caches, and puts states and caches back as
    they were. Needs ``lay.fast``."""

    __slots__ = ()

    def __init__(self, lay: Layout, saved: PyNpStates | None = None) -> None:
        if saved is None:
            self.save(lay)
        else:
            self._lay, self._py, self._pyg, self._np, self._npg = (
                saved._lay,
                saved._py,
                saved._pyg,
                saved._np,
                saved._npg,
            )
        lay = self._lay
        _, _, gauss, _ = _fast_views(lay)
        lay.py_owner.gauss_next = None
        gauss.has_gauss = 0

    def finish(self) -> bool:
        """Whether user code drew since construction; either way the saved states are back."""
        lay = self._lay
        py, npv, gauss, gauss_bytes = _fast_views(lay)
        drew = (
            not lay.current()  # a generator was swapped meanwhile: assume the worst
            or lay.py_owner.gauss_next is not None
            or gauss.has_gauss != 0
            or py.tobytes() != self._py
            or npv.tobytes() != self._np
        )
        if drew:
            self.restore()
        else:  # the states are untouched: only the cleared caches go back
            lay.py_owner.gauss_next = self._pyg
            gauss_bytes[:] = self._npg
        return drew


def _fast_views(lay: Layout) -> tuple[np.ndarray, np.ndarray, Gauss, memoryview]:
    """Python's and numpy's state views and numpy's cache (its structure and bytes), which watching needs."""
    if lay.py is None or lay.np is None or lay.gauss is None or lay.gauss_bytes is None:
        raise UsageError(
            describe(
                "Layout.fast",
                False,
                "True: Python's and numpy's generators reached through their memory (lazy seeding watches them)",
                "check lazy_seeding_available() before watching the generators",
            )
        )
    return lay.py, lay.np, lay.gauss, lay.gauss_bytes


def save_torch(lay: Layout) -> bytes | torch.Tensor:
    """torch's default generator's state: its region's bytes, or ``get_state()`` without a layout."""
    tlay = lay.torch
    return torch.random.default_generator.get_state() if tlay is None else tlay.view.tobytes()


def restore_torch(lay: Layout, saved: bytes | torch.Tensor) -> None:
    """Write :func:`save_torch`'s ``saved`` back (one slice assignment, or ``set_state``)."""
    if isinstance(saved, torch.Tensor):  # saved by get_state (no probed region)
        torch.random.default_generator.set_state(saved)
    elif lay.torch_mv is not None:
        lay.torch_mv[:] = saved


class TorchWatch:
    """torch's default generator left unseeded while user code runs, and watched: its state is
    saved on construction (or taken from ``saved``, :func:`save_torch`'s bytes taken just before
    with nothing run since); :meth:`finish` says whether anything drew from (or reseeded, or
    swapped) it since, comparing the whole region (seed, engine, both cached normals: a draw of a
    cached normal clears its flag, so it shows too), and writes the saved state back if so."""

    __slots__ = ("_lay", "_saved")

    def __init__(self, lay: Layout, saved: bytes | torch.Tensor | None = None) -> None:
        self._lay = lay
        self._saved = save_torch(lay) if saved is None else saved

    def finish(self) -> bool:
        """Whether user code drew since construction; either way the saved state is back."""
        lay, saved, tlay = self._lay, self._saved, self._lay.torch
        if isinstance(saved, torch.Tensor):  # saved by get_state (no probed region)
            drew = not torch.equal(torch.random.default_generator.get_state(), saved)
        else:
            drew = tlay is None or not tlay.current() or tlay.view.tobytes() != saved
        if drew:
            restore_torch(lay, self._saved)
        return drew
