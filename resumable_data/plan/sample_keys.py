"""Sample keys: the seed of every per-sample random generator, a pure function of the position.

Algorithm. ``key = xxh3_64(version hash, seed, position, tag)`` (length-prefixed fields). The key
seeds a numpy ``Generator`` (PCG64), a ``random.Random`` and (in the torch layer) a
``torch.Generator`` with the key's low 63 bits (:func:`torch_seed`: torch's own code cannot handle an
``initial_seed()`` of 2**63 or more), so
augmentation depends on the sample's logical position only: not on the worker id, the worker
count, the rank or where a resume happened. Different ``tag`` values give independent streams
for different operations on the same sample.

Cost. One hash per sample; nothing to save or restore.
"""

from __future__ import annotations

import random
import struct

import numpy as np
import xxhash

__all__ = ["numpy_generator", "python_random", "sample_key", "sample_keys", "torch_seed"]


def _prefix(version_hash: str, seed: int) -> bytes:
    ver = version_hash.encode()
    return b"rd.key/1" + struct.pack("<I", len(ver)) + ver + struct.pack("<Q", seed)


def sample_key(version_hash: str, seed: int, position: int, tag: str = "sample") -> int:
    """The 64-bit key of the sample at ``position`` for operation ``tag``."""
    tg = tag.encode()
    return xxhash.xxh3_64_intdigest(
        _prefix(version_hash, seed) + struct.pack("<QI", position, len(tg)) + tg
    )


def sample_keys(version_hash: str, seed: int, positions, tag: str = "sample") -> np.ndarray:
    """:func:`sample_key` for each position (uint64 array)."""
    pre = _prefix(version_hash, seed)
    tg = tag.encode()
    suffix = struct.pack("<I", len(tg)) + tg
    h = xxhash.xxh3_64_intdigest
    pos = np.asarray(positions, dtype=np.int64).reshape(-1)
    return np.fromiter((h(pre + struct.pack("<Q", p) + suffix) for p in pos.tolist()), dtype=np.uint64, count=pos.size)


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
