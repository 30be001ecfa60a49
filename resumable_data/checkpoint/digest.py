"""Digests for the checkpoint oracles: xxh3-64 of named tensors (dtype, shape and bytes) and of
canonical JSON, and the flattening of nested state into ``(dotted.path, leaf)`` pairs."""

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
            t = t.detach().cpu().contiguous()
            h.update(str(t.dtype).encode() + repr(tuple(t.shape)).encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        else:
            h.update(repr(t).encode())
    return h.hexdigest()


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
