"""MT19937 seeding states of a batch of 64-bit keys, in one compiled call.

Layout. :func:`seed_rows` computes, for every key of a batch in one call, the bytes each generator
holds after seeding: ``[index, state[624]]`` of CPython's ``RandomObject`` (columns ``[0, 625)``),
``[state[624], pos]`` of numpy's ``mt19937_state`` (columns ``[625, 1250)``) and, given torch's
probed layout (a byte *template* of the generator's region right after ``manual_seed``, see
``raw_torch.py``), torch's whole region with the seed and the state filled in.

Version 3 (fresh runs; :mod:`.sample_seeding`): every generator's state is 312 SplitMix64
outputs (:func:`hash_state`). The words are independent, so the kernel goes key after key and
each generator's loop is vectorised (AVX-512: eight 64-bit lanes); about 2 us for 16 keys on the
development machine, against 19-21 us for version 2's chains (docs/dropin.md).

Versions 1-2 (runs restored from states that record them): Python's ``random.seed(key)`` (for
``key >= 2**32``) runs MT19937's ``init_by_array`` over the key's two 32-bit words ``lo, hi``;
numpy's legacy ``seed([a, b])`` runs it over the two words the version gives it (2: ``lo ^
0x7F4A7C15, hi ^ 0x9E3779B9``, 1: ``lo, hi``); torch's ``manual_seed(s)`` runs ``init_genrand``
over the low 32 bits of ``s``. Those are chains of dependent steps, so the keys advance in
lockstep (every key updates the same word index at each step): the loops run over *lanes* with
the word index outside (numpy's ``init_by_array`` as ``nb`` extra lanes beside Python's), the
inner loop is contiguous and free of dependency chains, so LLVM vectorises it (32-bit
arithmetic); every final word is stored straight into its key's row (strided stores).

Guarantee: version 3's rows equal :func:`hash_state` word for word; :func:`mt_states` equals
``RandomState.seed([lo, hi])``'s state, version 1-2 numpy columns ``seed`` of the version's two
words, and torch's rows its ``manual_seed`` (``tests/loader/test_global_rng.py``,
``test_seeding_v2.py``, ``test_seeding_v3.py``). Cost: see :mod:`.global_rng`'s docstring.
"""

from __future__ import annotations

import sys

import numpy as np
from numba import njit

from resumable_data.loader.seeding.sample_seeding import HASHED_VERSIONS, STREAMS, numpy_key_xor

__all__ = ["NP_COL", "PYNP_WORDS", "N", "fill_rows", "hash_state", "init_genrand", "mt_states", "seed_rows"]

N = 624
NP_COL = N + 1  # numpy's [state[624], pos] starts after CPython's [index, state[624]]
PYNP_WORDS = 2 * (N + 1)  # [624, py state[624], np state[624], 624]: then torch's region


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
def _kernel(keys, out, pynp, xlo, xhi, tmpl, tcol, tseed, tstate):  # pragma: no cover - compiled
    """Rows of ``keys`` into ``out``: ``pynp``: columns ``[0, 1250)``, numpy's lanes seeded from the
    key words XOR ``(xlo, xhi)``; ``tmpl.size``: torch's region from column ``tcol`` (the template,
    the seed at word ``tseed`` and init_genrand's state at word ``tstate`` of the region). Lockstep
    over lanes (see the module): 32-bit arithmetic, the latest word of every lane in ``prev`` (its
    own array: the vectoriser needs no alias check)."""
    nb = keys.shape[0]
    nl = 2 * nb  # lanes: Python's [0, nb), numpy's [nb, 2 nb)
    m32 = np.uint64(0xFFFFFFFF)
    lo = np.empty(nl, np.uint32)
    hi1 = np.empty(nl, np.uint32)  # the high word + its index j = 1
    small = 0  # keys below 2**32 (one word for Python's random.seed: not these rows)
    for b in range(nb):
        k = keys[b]
        lo[b] = k & m32
        hi1[b] = (k >> np.uint64(32)) + np.uint64(1)
        lo[nb + b] = np.uint32(k & m32) ^ xlo
        hi1[nb + b] = np.uint32(np.uint32(k >> np.uint64(32)) ^ xhi) + np.uint32(1)
        small += hi1[b] == 1
    prev = np.empty(nl, np.uint32)
    if tmpl.shape[0] > 0:
        ct = np.uint32(1812433253)
        w = tmpl.shape[0]
        region = out[:, tcol:]  # views: their indices are provably >= 0 (no wraparound code)
        state = out[:, tcol + tstate :]
        for b in range(nb):  # the template's words around the state, the seed (key & (2**63 - 1))
            for t in range(tstate):
                region[b, t] = tmpl[t]
            for t in range(tstate + N, w):
                region[b, t] = tmpl[t]
            region[b, tseed] = lo[b]
            region[b, tseed + 1] = (hi1[b] - np.uint32(1)) & np.uint32(0x7FFFFFFF)
            prev[b] = lo[b]
            state[b, 0] = lo[b]
        for j in range(1, N):  # init_genrand(lo), written straight into the rows
            jj = np.uint32(j)
            for b in range(nb):
                p = prev[b]
                v = np.uint32(ct * np.uint32(p ^ (p >> 30)) + jj)
                prev[b] = v
                state[b, j] = v
    if not pynp:
        return small
    mt = np.empty((N, nl), np.uint32)  # word-major: the second loop reads the first's words
    c1 = np.uint32(1664525)
    c2 = np.uint32(1566083941)
    v0 = _BASE[0]
    for b in range(nl):
        prev[b] = v0
    # init_by_array, first loop: i = 1..623 with the key word j = (i - 1) % 2 added (+ j), then
    # mt[0] = mt[623] and one more step at i = 1 (j = 1); before its first update mt[i] is _BASE[i]
    for i in range(1, N - 1, 2):
        row = mt[i]
        bi = _BASE[i]
        for b in range(nl):
            p = prev[b]
            v = np.uint32((bi ^ np.uint32(np.uint32(p ^ (p >> 30)) * c1)) + lo[b])
            prev[b] = v
            row[b] = v
        row = mt[i + 1]
        bi = _BASE[i + 1]
        for b in range(nl):
            p = prev[b]
            v = np.uint32((bi ^ np.uint32(np.uint32(p ^ (p >> 30)) * c1)) + hi1[b])
            prev[b] = v
            row[b] = v
    bi = _BASE[N - 1]
    for b in range(nl):
        p = prev[b]
        v = np.uint32((bi ^ np.uint32(np.uint32(p ^ (p >> 30)) * c1)) + lo[b])
        mt[N - 1, b] = v  # and mt[0] = v: the step at i = 1 reads it
        v = np.uint32((mt[1, b] ^ np.uint32(np.uint32(v ^ (v >> 30)) * c1)) + hi1[b])
        mt[1, b] = v
        prev[b] = v
    # second loop: i = 2..623 (each word final here: written straight into the rows, Python's
    # lanes after the index word, numpy's after Python's state), then mt[0] = mt[623] and the
    # step at i = 1; mt[0] is then 0x80000000
    for i in range(2, N):
        row = mt[i]
        ii = np.uint32(i)
        for b in range(nb):
            p = prev[b]
            v = np.uint32((row[b] ^ np.uint32(np.uint32(p ^ (p >> 30)) * c2)) - ii)
            prev[b] = v
            out[b, 1 + i] = v
        for b in range(nb):
            p = prev[nb + b]
            v = np.uint32((row[nb + b] ^ np.uint32(np.uint32(p ^ (p >> 30)) * c2)) - ii)
            prev[nb + b] = v
            out[b, NP_COL + i] = v
    for b in range(nb):
        p = prev[b]
        out[b, 0] = np.uint32(N)  # Python's index field, before its state
        out[b, 1] = np.uint32(0x80000000)
        out[b, 2] = np.uint32((mt[1, b] ^ np.uint32(np.uint32(p ^ (p >> 30)) * c2)) - np.uint32(1))
        p = prev[nb + b]
        out[b, NP_COL] = np.uint32(0x80000000)
        out[b, NP_COL + 1] = np.uint32((mt[1, nb + b] ^ np.uint32(np.uint32(p ^ (p >> 30)) * c2)) - np.uint32(1))
        out[b, NP_COL + N] = np.uint32(N)  # numpy's pos field, after its state
    return small


def seed_rows(keys: np.ndarray, pynp: bool = True, torch: tuple | None = None, version: int = 2) -> np.ndarray:
    """``[len(keys), width]`` uint32 rows: with ``pynp`` columns ``[0, 1250)`` hold
    ``[624, py state[624], np state[624], 624]`` (CPython's ``RandomObject`` is ``row[:625]``,
    numpy's ``mt19937_state`` ``row[625:1250]``, seeded as seeding ``version`` does); with
    ``torch = (template, seed_word, state_word)`` torch's region follows from column 1250
    (``template``: uint32 words, the region after a ``manual_seed``; the seed and init_genrand's
    state go at the two word offsets)."""
    keys = np.asarray(keys, dtype=np.uint64).reshape(-1)
    out = np.empty((keys.shape[0], PYNP_WORDS + (0 if torch is None else torch[0].shape[0])), dtype=np.uint32)
    fill_rows(keys, out, pynp, torch, version)
    return out


def fill_rows(keys: np.ndarray, out: np.ndarray, pynp: bool, torch: tuple | None, version: int) -> int:
    """:func:`seed_rows` of a 1-D uint64 ``keys`` into ``out`` (``[len(keys), 1250 + template
    words]`` uint32, C-contiguous); returns how many keys need their seeding function's route for
    Python's generator (versions 1-2: keys below 2**32, one word for ``random.seed``; version 3: none)."""
    tmpl, tseed, tstate = (_NO_TEMPLATE, 0, 0) if torch is None else torch
    if version in HASHED_VERSIONS:
        return _hash_kernel(keys, out, pynp, tmpl, PYNP_WORDS, tseed, tstate, *_STREAM_ARGS)
    x = numpy_key_xor(version)
    return _kernel(keys, out, pynp, np.uint32(x & 0xFFFFFFFF), np.uint32(x >> 32), tmpl, PYNP_WORDS, tseed, tstate)


def mt_states(keys: np.ndarray) -> np.ndarray:
    """MT19937 states (``[len(keys), 624]`` uint32) after ``init_by_array`` of each 64-bit key
    as two words (numpy's ``seed([lo, hi])``; Python's ``random.seed(key)`` for ``key >= 2**32``)."""
    return seed_rows(keys)[:, 1 : N + 1]


# -- version 3: SplitMix64 streams (see :mod:`.sample_seeding`) ----------------------------------
_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_LOW = np.uint64(0xFFFFFFFF)
_S30, _S27, _S31, _S32 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(32)
# the stream constants are arguments of the kernel, not globals frozen into it: numba's cache
# checks this file only, and they are stated in sample_seeding.py
_STREAM_ARGS = tuple(np.uint64(c) for c in STREAMS)


@njit(cache=True, nogil=True, inline="always")
def _mix(z):  # pragma: no cover - compiled
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@njit(cache=True, nogil=True, boundscheck=False)
def _hash_kernel(keys, out, pynp, tmpl, tcol, tseed, tstate, spy, snp, storch):  # pragma: no cover - compiled
    """Version 3 rows of ``keys`` into ``out`` (the layout of :func:`seed_rows`): key after key,
    each generator's 624 words one SplitMix64 output per two, independent across words (so the
    loop is vectorised: the stores go through a view whose indices are provably >= 0); ``spy``,
    ``snp``, ``storch``: the three stream constants."""
    w = tmpl.shape[0]
    for b in range(keys.shape[0]):
        k = keys[b]
        row = out[b]
        for g in range(3):
            if (g < 2 and not pynp) or (g == 2 and w == 0):
                continue
            at = 1 if g == 0 else NP_COL if g == 1 else tcol + tstate
            s = _mix(k ^ (spy if g == 0 else snp if g == 1 else storch))
            dst = row[at : at + N]
            for i in range(N // 2):
                z = _mix(s + np.uint64(i + 1) * _GAMMA)
                dst[2 * i] = np.uint32(z & _LOW)
                dst[2 * i + 1] = np.uint32(z >> _S32)
        if pynp:
            row[0] = np.uint32(N)  # Python's index: state used up, the first draw twists
            row[NP_COL + N] = np.uint32(N)  # numpy's pos, the same
        if w > 0:  # torch: the template around the state (left_ = 1, next_ = 0, no cached normals), the seed
            for t in range(tstate):
                row[tcol + t] = tmpl[t]
            for t in range(tstate + N, w):
                row[tcol + t] = tmpl[t]
            row[tcol + tseed] = np.uint32(k & _LOW)
            row[tcol + tseed + 1] = np.uint32(k >> _S32) & np.uint32(0x7FFFFFFF)
    return 0


def hash_state(key: int, stream: int) -> np.ndarray:
    """Version 3's 624 state words for ``key`` and one generator's ``stream`` constant (numpy's
    wrapping uint64 arithmetic; the reference the kernel is checked against)."""
    with np.errstate(over="ignore"):
        s = _mix_np(np.uint64(key) ^ np.uint64(stream))
        z = _mix_np(s + np.arange(1, N // 2 + 1, dtype=np.uint64) * _GAMMA)
    return (
        z.view(np.uint32).copy()
        if sys.byteorder == "little"
        else np.stack([z & _LOW, z >> _S32], 1).astype(np.uint32).reshape(-1)
    )


def _mix_np(z):
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)
