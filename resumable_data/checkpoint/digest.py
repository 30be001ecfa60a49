"""Digests for the checkpoint oracles: xxh3-64 of named tensors (dtype, shape and bytes) and of
canonical JSON, and the flattening of nested state into ``(dotted.path, leaf)`` pairs.

A tensor the checkpoint cannot hold (sparse, ``meta``) still gets a digest (a sparse one of its
dense values, a ``meta`` one of its dtype and shape alone), so the oracles never fail before the
codec refuses such a tensor with its path (:mod:`.codec`); likewise a leaf whose ``repr`` raises
(an int past Python's digit limit) is digested by its type."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import torch
import xxhash

__all__ = ["digest_json", "digest_tensors", "flatten"]


def digest_tensors(items: Any) -> str:
    h = xxhash.xxh3_64()
    for name, t in items:
        h.update(name.encode())
        if isinstance(t, torch.Tensor):
            if t.is_meta:
                h.update(b"meta" + str(t.dtype).encode() + repr(tuple(t.shape)).encode())
                continue
            t = t.detach().cpu()
            t = (t.to_dense() if t.layout != torch.strided else t).resolve_conj().resolve_neg().contiguous()
            h.update(str(t.dtype).encode() + repr(tuple(t.shape)).encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        else:
            h.update(_leaf_repr(t).encode())
    return h.hexdigest()


def _leaf_repr(x: Any) -> str:
    """``repr(x)``; for a value whose repr raises (an int past the interpreter's 4300-digit limit:
    ``ValueError``), its type, so that the codec refuses it with its path (:mod:`.codec`)."""
    try:
        return repr(x)
    except Exception:  # no value whose repr raises is saved (the codec refuses it)
        return f"<{type(x).__module__}.{type(x).__qualname__}>"


def digest_json(obj: Any) -> str:
    return xxhash.xxh3_64_hexdigest(json.dumps(obj, sort_keys=True, default=repr).encode())


def flatten(prefix: str, obj: Any, out: list) -> list:
    if isinstance(obj, Mapping):
        for k in sorted(obj, key=str):
            flatten(f"{prefix}.{k}", obj[k], out)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            flatten(f"{prefix}.{i}", v, out)
    else:
        out.append((prefix, obj))
    return out
