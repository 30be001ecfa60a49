"""Digests of batches and state trees, the unit the resume harness compares.

``batch_digests(batch)`` maps each key of a batch (a dict, a sequence or one value) to the xxh3-64
of its dtype, shape and bytes (tensors, arrays) or its ``repr`` (anything else), so two batches are
equal exactly when every key's digest is; ``tree_digest(tree)`` is one digest of a nested
dict/list/tuple, keys in sorted order. Pure, torch-free (tensors are read through ``.numpy()``).
Cost: one pass over the bytes.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np
import xxhash

__all__ = ["batch_digests", "tree_digest"]


def _digest_value(value: Any) -> str:
    h = xxhash.xxh3_64()
    torch = sys.modules.get("torch")  # a tensor exists only once torch is imported; never import it here
    if torch is not None and isinstance(value, torch.Tensor):
        arr = value.detach().cpu().contiguous().numpy()
        h.update(f"tensor:{arr.dtype}:{arr.shape}".encode())
        h.update(arr.tobytes())
    elif isinstance(value, np.ndarray):
        h.update(f"ndarray:{value.dtype}:{value.shape}".encode())
        h.update(np.ascontiguousarray(value).tobytes())
    else:
        h.update(repr(value).encode())
    return h.hexdigest()


def batch_digests(batch: Any) -> dict[str, str]:
    """Per-key digests of a batch (a dict, a sequence or a single value)."""
    if isinstance(batch, dict):
        return {
            str(k): _digest_value(v)
            if not isinstance(v, (dict, list, tuple))
            else xxhash.xxh3_64_hexdigest(json.dumps(batch_digests(v), sort_keys=True).encode())
            for k, v in batch.items()
        }
    if isinstance(batch, (list, tuple)):
        return {str(i): d for i, v in enumerate(batch) for d in [json.dumps(batch_digests(v), sort_keys=True)]}
    return {"batch": _digest_value(batch)}


def tree_digest(tree: Any) -> str:
    """One digest of a nested dict/list/tuple of tensors and plain values (dict keys in sorted order)."""
    h = xxhash.xxh3_64()

    def walk(x: Any, path: str) -> None:
        if isinstance(x, Mapping):
            h.update(f"{path}:dict:{len(x)}".encode())
            for k in sorted(x, key=str):
                walk(x[k], f"{path}.{k}")
        elif isinstance(x, (list, tuple)):
            h.update(f"{path}:{type(x).__name__}:{len(x)}".encode())
            for i, v in enumerate(x):
                walk(v, f"{path}.{i}")
        else:
            h.update(f"{path}=".encode() + _digest_value(x).encode())

    walk(tree, "")
    return h.hexdigest()
