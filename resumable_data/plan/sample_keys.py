"""Sample keys: the seed of every per-sample random generator, a pure function of the position.

Algorithm. ``key = xxh3_64(version hash, seed, position, tag)`` (length-prefixed fields). The key
seeds a numpy ``Generator`` (PCG64), a ``random.Random`` and (in the torch layer) a
``torch.Generator`` with the key's low 63 bits (:func:`torch_seed`: torch's own code cannot handle an
``initial_seed()`` of 2**63 or more), so
augmentation depends on the sample's logical position only: not on the worker id, the worker
count, the rank or where a resume happened. Different ``tag`` values give independent streams
for different operations on the same sample.

Cost. One hash per sample; nothing to save or restore. :func:`sample_keys` hashes a batch in one
compiled call (an implementation of XXH3-64 for the 17-128 byte messages keys are made of: the
version hash may be up to 78 bytes), checked against ``xxhash`` on every message length once per
process before it is used (any difference, or a longer message: the ``xxhash`` route).
"""

from __future__ import annotations

import random
import struct
from functools import lru_cache

import numpy as np
import xxhash
from numba import njit

__all__ = ["numpy_generator", "python_random", "sample_key", "sample_keys", "sample_keys_reference", "torch_seed"]


def _prefix(version_hash: str, seed: int) -> bytes:
    ver = version_hash.encode()
    return b"rd.key/1" + struct.pack("<I", len(ver)) + ver + struct.pack("<Q", seed)


def sample_key(version_hash: str, seed: int, position: int, tag: str = "sample") -> int:
    """The 64-bit key of the sample at ``position`` for operation ``tag``."""
    tg = tag.encode()
    return xxhash.xxh3_64_intdigest(_prefix(version_hash, seed) + struct.pack("<QI", position, len(tg)) + tg)


def sample_keys(version_hash: str, seed: int, positions, tag: str = "sample") -> np.ndarray:
    """:func:`sample_key` for each position (uint64 array)."""
    pos = np.asarray(positions, dtype=np.int64).reshape(-1)
    template, at = _message(version_hash, seed, tag)
    if template is not None and _compiled_ok():
        out = np.empty(pos.size, dtype=np.uint64)
        _keys_kernel(template.copy(), at, pos, _SECRET, out)
        return out
    return sample_keys_reference(version_hash, seed, pos, tag)


def sample_keys_reference(version_hash: str, seed: int, positions, tag: str = "sample") -> np.ndarray:
    """:func:`sample_keys` through ``xxhash`` itself (what the compiled route must equal)."""
    pre = _prefix(version_hash, seed)
    tg = tag.encode()
    suffix = struct.pack("<I", len(tg)) + tg
    h = xxhash.xxh3_64_intdigest
    pos = np.asarray(positions, dtype=np.int64).reshape(-1)
    return np.fromiter((h(pre + struct.pack("<Q", p) + suffix) for p in pos.tolist()), dtype=np.uint64, count=pos.size)


@lru_cache(maxsize=64)
def _message(version_hash: str, seed: int, tag: str) -> tuple[np.ndarray | None, int]:
    """The key message with its position zeroed, and the position's offset; None when its length
    is outside the compiled hash's 17..128 bytes."""
    pre = _prefix(version_hash, seed)
    tg = tag.encode()
    msg = pre + bytes(8) + struct.pack("<I", len(tg)) + tg
    if not 17 <= len(msg) <= 128:
        return None, 0
    return np.frombuffer(msg, dtype=np.uint8).copy(), len(pre)


# XXH3's default secret, its first 128 bytes (all that messages of up to 128 bytes read)
_SECRET = np.frombuffer(
    bytes.fromhex(
        "b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671f"
        "cb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c"
        "3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8"
        "a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364"
    ),
    dtype=np.uint8,
)


@njit(cache=True, nogil=True)
def _read64(b, i):  # pragma: no cover - compiled
    v = np.uint64(0)
    for k in range(8):
        v |= np.uint64(b[i + k]) << np.uint64(8 * k)
    return v


@njit(cache=True, nogil=True)
def _mul128_fold64(a, b):  # pragma: no cover - compiled
    m = np.uint64(0xFFFFFFFF)
    s = np.uint64(32)
    alo, ahi, blo, bhi = a & m, a >> s, b & m, b >> s
    ll = alo * blo
    hl = ahi * blo
    cross = (ll >> s) + (hl & m) + alo * bhi
    upper = (hl >> s) + (cross >> s) + ahi * bhi
    return ((cross << s) | (ll & m)) ^ upper


@njit(cache=True, nogil=True)
def _mix16(b, i, sec, j):  # pragma: no cover - compiled
    return _mul128_fold64(_read64(b, i) ^ _read64(sec, j), _read64(b, i + 8) ^ _read64(sec, j + 8))


@njit(cache=True, nogil=True)
def _xxh3_17to128(b, n, sec):  # pragma: no cover - compiled
    """XXH3-64 (seed 0, default secret) of ``b[:n]``, ``17 <= n <= 128``."""
    acc = np.uint64(n) * np.uint64(0x9E3779B185EBCA87)
    if n > 32:
        if n > 64:
            if n > 96:
                acc += _mix16(b, 48, sec, 96)
                acc += _mix16(b, n - 64, sec, 112)
            acc += _mix16(b, 32, sec, 64)
            acc += _mix16(b, n - 48, sec, 80)
        acc += _mix16(b, 16, sec, 32)
        acc += _mix16(b, n - 32, sec, 48)
    acc += _mix16(b, 0, sec, 0)
    acc += _mix16(b, n - 16, sec, 16)
    acc ^= acc >> np.uint64(37)
    acc *= np.uint64(0x165667919E3779F9)
    return acc ^ (acc >> np.uint64(32))


@njit(cache=True, nogil=True)
def _keys_kernel(msg, at, positions, sec, out):  # pragma: no cover - compiled
    n = msg.shape[0]
    for j in range(positions.shape[0]):
        p = np.uint64(positions[j])
        for k in range(8):
            msg[at + k] = np.uint8((p >> np.uint64(8 * k)) & np.uint64(0xFF))
        out[j] = _xxh3_17to128(msg, n, sec)


@lru_cache(maxsize=1)
def _compiled_ok() -> bool:
    """Whether the compiled hash equals ``xxhash`` here, on every length it serves (checked once)."""
    state = np.random.RandomState(20261201)  # a private generator: the globals are left alone
    for n in range(17, 129):
        for _ in range(2):
            data = state.randint(0, 256, n).astype(np.uint8)
            if int(_xxh3_17to128(data, n, _SECRET)) != xxhash.xxh3_64_intdigest(data.tobytes()):
                return False
    return True


def numpy_generator(key: int) -> np.random.Generator:
    """A numpy ``Generator`` (PCG64) seeded by ``key``."""
    return np.random.Generator(np.random.PCG64(int(key)))


def torch_seed(key: int) -> int:
    """A seed for ``torch.Generator.manual_seed`` / ``torch.manual_seed``: the key's low 63 bits.

    torch accepts any uint64, but then ``torch.initial_seed()`` can be >= 2**63, which torch's own
    code (and code that passes it back to torch as a signed 64-bit integer) cannot handle."""
    return int(key) & ((1 << 63) - 1)


def python_random(key: int) -> random.Random:
    """A ``random.Random`` seeded by ``key``."""
    return random.Random(int(key))
