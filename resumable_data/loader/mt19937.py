"""MT19937 seeding states of a batch of 64-bit keys, in one compiled call.

Algorithm. Seeding a generator is a pure function of its key: Python's ``random.seed(key)`` (for
``key >= 2**32``) and numpy's legacy ``seed([lo, hi])`` both run MT19937's ``init_by_array`` over
the two 32-bit words ``lo, hi`` of the key; torch's ``manual_seed(s)`` runs ``init_genrand`` over
the low 32 bits of ``s`` (its ``mt19937`` engine). :func:`seed_rows` computes, for every key of a
batch in one call, the bytes each generator holds after seeding: ``[index, state[624]]`` of
CPython's ``RandomObject`` and ``[state[624], pos]`` of numpy's ``mt19937_state`` (they overlap:
``row[0:625]`` and ``row[1:626]``), and, given torch's probed layout (a byte *template* of the
generator's region right after ``manual_seed``, see ``torch_rng_memory.py``), torch's whole region
with the seed and the state filled in.

Speed. The keys advance in lockstep (every key updates the same word index at each step), so the
loops run over keys with the word index outside: the inner loop is contiguous and free of
dependency chains, and LLVM vectorises it (8 keys per AVX2 instruction); ``init_by_array``'s
alternation of the two key words is unrolled by two instead of branched on, and torch's
``init_genrand`` steps ride along in the same loop (independent chains for the out-of-order core).
The states are computed word-major (``[624, keys]``) and transposed into key-major rows at the
end (each row is then copied with one slice assignment per generator). Cost (16 keys, loaded
2-CPU machine): see :mod:`.global_rng`'s docstring.

Guarantee: :func:`mt_states` equals numpy's ``RandomState.seed([lo, hi])`` state word for word
and torch's rows equal its ``manual_seed`` (``tests/loader/test_global_rng.py``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["N", "PYNP_WORDS", "init_genrand", "mt_states", "seed_rows"]

N = 624
PYNP_WORDS = N + 2  # [624, state[624], 624]: CPython's (index, state) then numpy's (state, pos)


def init_genrand(s: int) -> np.ndarray:
    """MT19937's ``init_genrand(s)`` (``s`` below 2**32): the reference for both kernels."""
    mt = np.empty(N, dtype=np.uint32)
    mt[0] = s
    for i in range(1, N):
        prev = int(mt[i - 1])
        mt[i] = (1812433253 * (prev ^ (prev >> 30)) + i) & 0xFFFFFFFF
    return mt


_BASE = init_genrand(19650218)  # init_by_array's starting state (a constant)
_NO_TEMPLATE = np.zeros(0, dtype=np.uint32)


@njit(cache=True, nogil=True, boundscheck=False)
def _kernel(base, keys, out, pynp, tmpl, tcol, tseed, tstate):  # pragma: no cover - compiled
    """Rows of ``keys`` into ``out``: ``pynp``: columns ``[0, 626)``; ``tmpl.size``: torch's
    region from column ``tcol`` (the template, its seed at word ``tseed`` and init_genrand's state
    at word ``tstate`` of the region). Word-major scratch, lockstep over keys (see the module)."""
    nb = keys.shape[0]
    m32 = np.uint64(0xFFFFFFFF)
    lo = np.empty(nb, np.uint64)
    hi = np.empty(nb, np.uint64)
    for b in range(nb):
        lo[b] = keys[b] & m32
        hi[b] = keys[b] >> np.uint64(32)
    torch = tmpl.shape[0] > 0
    tt = np.empty((N, nb if torch else 0), np.uint32)
    if torch:
        for b in range(nb):
            tt[0, b] = lo[b]
    mt = np.empty((N, nb if pynp else 0), np.uint32)
    if pynp:
        for t in range(N):
            for b in range(nb):
                mt[t, b] = base[t]
    c1 = np.uint64(1664525)
    c2 = np.uint64(1566083941)
    ct = np.uint64(1812433253)
    s30 = np.uint64(30)
    one = np.uint64(1)
    # init_by_array, first loop: i = 1..623 with key word j = (i - 1) % 2 (+ j), then mt[0] = mt[623]
    # and one more step at i = 1 (j = 1); torch's init_genrand steps 1..623 alongside
    for i in range(1, N - 1, 2):
        if pynp:
            for b in range(nb):
                p = np.uint64(mt[i - 1, b])
                mt[i, b] = (np.uint64(mt[i, b]) ^ ((p ^ (p >> s30)) * c1)) + lo[b]
            for b in range(nb):
                p = np.uint64(mt[i, b])
                mt[i + 1, b] = (np.uint64(mt[i + 1, b]) ^ ((p ^ (p >> s30)) * c1)) + hi[b] + one
        if torch:
            ii = np.uint64(i)
            for b in range(nb):
                p = np.uint64(tt[i - 1, b])
                tt[i, b] = ct * (p ^ (p >> s30)) + ii
            for b in range(nb):
                p = np.uint64(tt[i, b])
                tt[i + 1, b] = ct * (p ^ (p >> s30)) + ii + one
    if torch:
        for b in range(nb):
            p = np.uint64(tt[N - 2, b])
            tt[N - 1, b] = ct * (p ^ (p >> s30)) + np.uint64(N - 1)
        w = tmpl.shape[0]
        for b in range(nb):  # the template's words around the state (the state is written below)
            for t in range(tstate):
                out[b, tcol + t] = tmpl[t]
            for t in range(tstate + N, w):
                out[b, tcol + t] = tmpl[t]
            out[b, tcol + tseed] = lo[b]
            out[b, tcol + tseed + 1] = hi[b] & np.uint64(0x7FFFFFFF)  # torch's seed: key & (2**63 - 1)
        for t in range(N):  # the transposition: contiguous loads, one store stream per key
            for b in range(nb):
                out[b, tcol + tstate + t] = tt[t, b]
    if not pynp:
        return
    for b in range(nb):
        p = np.uint64(mt[N - 2, b])
        mt[N - 1, b] = (np.uint64(mt[N - 1, b]) ^ ((p ^ (p >> s30)) * c1)) + lo[b]
        mt[0, b] = mt[N - 1, b]
        p = np.uint64(mt[0, b])
        mt[1, b] = (np.uint64(mt[1, b]) ^ ((p ^ (p >> s30)) * c1)) + hi[b] + one
    # second loop: i = 2..623, then mt[0] = mt[623] and the step at i = 1
    for i in range(2, N):
        ii = np.uint64(i)
        for b in range(nb):
            p = np.uint64(mt[i - 1, b])
            mt[i, b] = (np.uint64(mt[i, b]) ^ ((p ^ (p >> s30)) * c2)) - ii
    for b in range(nb):
        mt[0, b] = mt[N - 1, b]
        p = np.uint64(mt[0, b])
        mt[1, b] = (np.uint64(mt[1, b]) ^ ((p ^ (p >> s30)) * c2)) - one
        mt[0, b] = np.uint32(0x80000000)
    for b in range(nb):
        out[b, 0] = np.uint32(N)  # Python's index field, before the state
        out[b, N + 1] = np.uint32(N)  # numpy's pos field, after the state
    for t in range(N):
        for b in range(nb):
            out[b, 1 + t] = mt[t, b]


def seed_rows(keys: np.ndarray, pynp: bool = True, torch: tuple | None = None) -> np.ndarray:
    """``[len(keys), width]`` uint32 rows: with ``pynp`` columns ``[0, 626)`` hold
    ``[624, state[624], 624]`` (CPython's ``RandomObject`` is ``row[:625]``, numpy's
    ``mt19937_state`` ``row[1:]``); with ``torch = (template, seed_word, state_word)`` torch's
    region follows from column 626 (``template``: uint32 words, the region after a
    ``manual_seed``; the seed and init_genrand's state go at the two word offsets)."""
    keys = np.asarray(keys, dtype=np.uint64).reshape(-1)
    tmpl, tseed, tstate = (_NO_TEMPLATE, 0, 0) if torch is None else torch
    out = np.empty((keys.size, PYNP_WORDS + tmpl.size), dtype=np.uint32)
    _kernel(_BASE, keys, out, pynp, tmpl, PYNP_WORDS, tseed, tstate)
    return out


def mt_states(keys: np.ndarray) -> np.ndarray:
    """MT19937 states (``[len(keys), 624]`` uint32) after ``init_by_array`` of each 64-bit key
    as two words (numpy's ``seed([lo, hi])``; Python's ``random.seed(key)`` for ``key >= 2**32``)."""
    return seed_rows(keys)[:, 1:N + 1]
