"""A seeding row's bytes copied into the global generators: the fast route of per-sample seeding.

Algorithm. :func:`seed_function` gives ``seed(j)``: the globals seeded from ``keys[j]`` by
copying row ``j`` of a :class:`~.seed_copy.RowBuffer` (``mt19937.fill_rows``: exactly the bytes
each generator holds after the seeding version's public route,
:func:`.seed_copy.seed_globals_reference`) into the views of :class:`.raw_memory.Layout`, one
slice assignment per generator, Python's ``gauss_next`` reset, numpy's cached Gaussian cleared
only when set. With every generator's memory found the function is made once per row buffer and
reused; a generator whose memory was not found (or, versions 1-2, a key below 2**32 for Python)
takes the reference route of :mod:`.seed_copy`.

Guarantee. Every route gives the reference route's states (the seeding tests compare them).
Before each per-sample write, :func:`seed_function`'s closures check that numpy's bit generator
and torch's default generator are still the probed objects (user code may swap them), and send
the call through the public route when not.

Cost. A seeding: one ~2.5 KB slice assignment per generator (0.1 us each on the development
machine).
"""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np
import torch

from resumable_data.errors import UsageError, describe
from resumable_data.loader.seeding.raw_memory import Layout, python_random
from resumable_data.loader.seeding.sample_seeding import HASHED_VERSIONS
from resumable_data.loader.seeding.seed_copy import (
    RowBuffer,
    check_numpy_generator,
    reference_numpy,
    reference_python,
    reference_route,
    reference_torch,
)
from resumable_data.loader.seeding.torch_state import check_state_layout

__all__ = ["seed_function"]


def seed_function(
    lay: Layout, buf: RowBuffer | None, keys: np.ndarray, torch_only: bool, small: int, version: int
) -> Callable[[int], None]:
    """``seed(j)``: the globals seeded from ``keys[j]`` as seeding ``version`` does, from ``buf``'s
    row ``j`` (filled by ``fill_rows`` for these keys, this layout and ``version``). ``lay``: the
    probed layout (``global_rng``'s); ``torch_only``: torch's generator only; ``small``: how many
    keys are below 2**32."""
    if buf is not None and (torch_only or not small):
        fn = buf.fns.get((torch_only, version))  # made for this buffer before (every generator through its memory)
        if fn is not None:
            buf.keys = keys
            return fn
    py_mv, np_mv = (None, None) if torch_only else (lay.py_mv, lay.np_mv)
    tlay, t_mv = lay.torch, lay.torch_mv
    pys, nps, ts = (buf.py, buf.np, buf.torch) if buf is not None else ((), (), ())
    if t_mv is not None and buf is not None and (torch_only or (py_mv is not None and np_mv is not None and not small)):
        buf.keys = keys  # every generator through its memory: the function made once for this buffer, reused
        fn = buf.fns[torch_only, version] = _copy_function(lay, buf, torch_only, version)
        return fn
    if lay.torch is None and version in HASHED_VERSIONS:
        check_state_layout()  # torch's reference route writes its serialized state: refused before any seeding
    if not torch_only and lay.np is None:
        check_numpy_generator()
    key_list = keys.tolist()  # for the functions' routes
    inst = python_random()
    gw, gauss = lay.gauss_words, lay.gauss
    rmod, mtrand, trand = random, np.random.mtrand, torch.random
    py_owner, rs_owner, np_owner = lay.py_owner, lay.rs_owner, lay.np_owner
    t_owner = None if tlay is None else tlay.owner

    def by_functions(j: int) -> None:  # a generator was swapped during this batch
        reference_route(int(keys[j]), torch_only, version)

    def seed_torch(j: int) -> None:
        if t_mv is not None:
            if trand.default_generator is not t_owner:
                return by_functions(j)
            t_mv[:] = ts[j]
        else:
            reference_torch(key_list[j], version)

    if torch_only:
        return seed_torch

    def seed_each(j: int) -> None:  # a generator whose memory was not found, or a key < 2**32
        if (
            rmod._inst is not py_owner
            or mtrand._rand is not rs_owner
            or rs_owner._bit_generator is not np_owner
            or (t_owner is not None and trand.default_generator is not t_owner)
        ):
            return by_functions(j)
        key = key_list[j]
        if py_mv is not None and (key >> 32 or version in HASHED_VERSIONS):
            py_mv[:] = pys[j]
            inst.gauss_next = None
        else:  # versions 1-2: a key below 2**32 is one word for Python: its own route (one key in 2**32)
            reference_python(key, version)
        if np_mv is not None:
            np_mv[:] = nps[j]
            if gw[0] or gw[1]:
                gauss.has_gauss = 0
                gauss.gauss = 0.0
        else:
            reference_numpy(key, version)
        seed_torch(j)

    return seed_each


def _unprobed(which: str) -> UsageError:
    return UsageError(
        describe(
            "Layout",
            f"{which} generator memory not found",
            "every generator's memory probed (the copy route writes through it)",
            "take seed_function's route, which checks the layout first",
        )
    )


def _copy_function(lay: Layout, buf: RowBuffer, torch_only: bool, version: int) -> Callable[[int], None]:
    """``seed(j)`` through the generators' memory from ``buf``'s row ``j`` (every generator's layout
    found; versions 1-2: no key below 2**32), the keys read from ``buf.keys``; a generator swapped
    meanwhile sends the call through the reference route."""
    py_mv, np_mv, t_mv, tlay = lay.py_mv, lay.np_mv, lay.torch_mv, lay.torch
    pys, nps, ts = buf.py, buf.np, buf.torch
    inst = lay.py_owner  # the probed instance: the one random's module functions are bound to
    gw, gauss = lay.gauss_words, lay.gauss
    trand = torch.random
    if t_mv is None or tlay is None:
        raise _unprobed("torch")
    rs_owner, np_owner, t_owner = lay.rs_owner, lay.np_owner, tlay.owner

    def by_functions(j: int) -> None:  # a generator was swapped during this batch
        keys = buf.keys  # this batch's (seed_function sets them before each batch)
        if keys is None:
            raise UsageError(describe("RowBuffer.keys", None, "the batch's keys", "call seed_function first"))
        reference_route(int(keys[j]), torch_only, version)

    if torch_only:

        def seed_torch(j: int) -> None:
            if trand.default_generator is not t_owner:
                return by_functions(j)
            t_mv[:] = ts[j]

        return seed_torch
    if py_mv is None or np_mv is None or gw is None or gauss is None:
        raise _unprobed("Python's and numpy's")

    def seed_all(j: int) -> None:  # the usual case: every generator through its memory
        # what user code can swap in the middle of a batch and draw from: numpy's bit generator
        # (np.random.set_bit_generator) and torch's default (torch.manual_seed follows the name);
        # rebinding random._inst or mtrand._rand redirects no module function (they are bound at import)
        if rs_owner._bit_generator is not np_owner or trand.default_generator is not t_owner:
            return by_functions(j)
        py_mv[:] = pys[j]
        inst.gauss_next = None
        np_mv[:] = nps[j]
        if gw[0] or gw[1]:  # what np.random.seed resets besides the state: the cached Gaussian
            gauss.has_gauss = 0
            gauss.gauss = 0.0
        t_mv[:] = ts[j]

    return seed_all
