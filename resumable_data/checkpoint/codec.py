"""Split a nested state (dicts, lists, numbers, strings, tensors) into JSON and named tensors.

Algorithm: :func:`encode` walks the tree; every ``torch.Tensor`` is replaced by
``{"__tensor__": name}`` (its path) and collected for a safetensors file; tuples become
``{"__tuple__": [...]}``, dicts with integer keys ``{"__intkeys__": {...}}``; anything else
(functions, arbitrary objects) is refused with the path that held it, because the single-process
format never pickles. :func:`decode` is the exact inverse and checks that every reference names
a tensor and every tensor is referenced. A tensor the file cannot hold exactly (a dtype outside
:data:`~.tensor_file.SAVED_DTYPES`, such as ``complex128`` or a quantized dtype; a sparse or
``meta`` tensor; a packed 4-bit scalar) is refused with its path before anything is written: a
checkpoint that saves must load.

Guarantee: ``decode(*encode(x))`` equals ``x`` bit for bit (tensors by dtype, shape and bytes;
floats by ``repr`` round trip, including inf and nan). Cost: one pass over the tree; tensors
are not copied unless two names share storage (safetensors refuses shared storage).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from resumable_data.checkpoint.errors import CheckpointError
from resumable_data.checkpoint.tensor_file import SAVED_DTYPES
from resumable_data.errors import describe

__all__ = ["TENSOR", "decode", "encode"]

TENSOR = "__tensor__"
TUPLE = "__tuple__"
INTKEYS = "__intkeys__"
_RESERVED = frozenset({TENSOR, TUPLE, INTKEYS})
MAX_DEPTH = 64


def encode(tree: Any, prefix: str = "", *, keep_tensors: bool = False) -> tuple[Any, dict[str, torch.Tensor]]:
    """``(json_tree, tensors)``; raises :class:`CheckpointError` naming the unsupported path.

    ``keep_tensors=True`` hands back the tensors themselves (no detach, copy or device move: the
    ``torch.distributed.checkpoint`` layout, where DCP writes them and loads into them in place)."""
    tensors: dict[str, torch.Tensor] = {}
    seen: dict[tuple[int, int], str] = {}

    def walk(x: Any, path: str, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise CheckpointError(
                describe(path or "state", "nesting", f"at most {MAX_DEPTH} levels", "flatten the state")
            )
        if isinstance(x, torch.Tensor) and keep_tensors:
            tensors[path] = x
            return {TENSOR: path}
        if isinstance(x, torch.Tensor):
            _check_saveable(x, path)
            t = x.detach()
            if t.device.type != "cpu":
                t = t.cpu()
            t = t.contiguous()
            if t.numel():
                key = (t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
                if key in seen:  # shared storage (tied weights): safetensors needs its own copy
                    t = t.clone()
                else:
                    seen[key] = path
            tensors[path] = t
            return {TENSOR: path}
        if x is None or isinstance(x, (bool, str)):
            return x
        if isinstance(x, int):
            return int(x)
        if isinstance(x, float):
            return float(x)
        if isinstance(x, tuple):
            return {TUPLE: [walk(v, f"{path}.{i}", depth + 1) for i, v in enumerate(x)]}
        if isinstance(x, list):
            return [walk(v, f"{path}.{i}", depth + 1) for i, v in enumerate(x)]
        if isinstance(x, Mapping):
            if all(isinstance(k, str) for k in x):
                bad = _RESERVED.intersection(x)
                if bad:
                    raise CheckpointError(
                        describe(
                            path or "state", sorted(bad), "keys that are not reserved by the codec", "rename those keys"
                        )
                    )
                return {k: walk(v, f"{path}.{k}" if path else k, depth + 1) for k, v in x.items()}
            if all(isinstance(k, int) and not isinstance(k, bool) for k in x):
                return {INTKEYS: {str(k): walk(v, f"{path}.{k}", depth + 1) for k, v in x.items()}}
            raise CheckpointError(
                describe(
                    f"{path or 'state'} keys",
                    [type(k).__name__ for k in x][:5],
                    "all str or all int keys",
                    "use string keys",
                )
            )
        try:
            import numpy as np

            if isinstance(x, np.generic):
                return walk(x.item(), path, depth)
            if isinstance(x, np.ndarray):
                return walk(torch.from_numpy(np.ascontiguousarray(x)), path, depth)
        except ImportError:  # pragma: no cover
            pass
        raise CheckpointError(
            describe(
                path or "state",
                type(x).__name__,
                "tensors, numbers, strings, None, lists, tuples or dicts",
                "make that object's state_dict() return plain data (the checkpoint never pickles)",
            )
        )

    return walk(tree, prefix, 0), tensors


def _check_saveable(x: torch.Tensor, path: str) -> None:
    """Refuse a tensor the checkpoint's tensor file cannot hold and give back exactly."""
    where = path or "state"
    fix = (
        "keep it out of the saved state (register_buffer(..., persistent=False) for a buffer you can "
        "recompute) or store it in a supported dtype (e.g. x.view(torch.float64) for complex128, "
        "x.dequantize() for a quantized tensor) and convert it back after loading"
    )
    if x.layout != torch.strided or x.is_meta:
        what = "a meta tensor (no data)" if x.is_meta else f"a {x.layout} tensor"
        raise CheckpointError(describe(where, what, "a dense tensor with data", "save x.to_dense() or drop it"))
    if x.dtype not in SAVED_DTYPES:
        names = sorted(str(d).removeprefix("torch.") for d in SAVED_DTYPES)
        raise CheckpointError(describe(f"{where} dtype", str(x.dtype), f"one of {names}", fix))
    if x.dim() == 0 and x.dtype == getattr(torch, "float4_e2m1fn_x2", None):
        raise CheckpointError(
            describe(
                f"{where} shape", "[] (a packed float4_e2m1fn_x2 scalar)", "at least one dimension", "save x.reshape(1)"
            )
        )


def decode(tree: Any, tensors: Mapping[str, torch.Tensor]) -> Any:
    """Inverse of :func:`encode`; every tensor must be referenced exactly once."""
    used: set[str] = set()

    def walk(x: Any, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise CheckpointError(
                describe("state", "nesting", f"at most {MAX_DEPTH} levels", "pass an unmodified checkpoint")
            )
        if isinstance(x, list):
            return [walk(v, depth + 1) for v in x]
        if isinstance(x, dict):
            if TENSOR in x:
                name = x[TENSOR]
                if len(x) != 1 or not isinstance(name, str) or name not in tensors:
                    raise CheckpointError(
                        describe(
                            "tensor reference",
                            x,
                            "the name of a tensor in the tensor file",
                            "the checkpoint is damaged: load another one",
                        )
                    )
                used.add(name)
                return tensors[name]
            if TUPLE in x:
                if len(x) != 1 or not isinstance(x[TUPLE], list):
                    raise CheckpointError(describe("tuple", x, "{'__tuple__': [...]}", "pass an unmodified checkpoint"))
                return tuple(walk(v, depth + 1) for v in x[TUPLE])
            if INTKEYS in x:
                inner = x[INTKEYS]
                if len(x) != 1 or not isinstance(inner, dict):
                    raise CheckpointError(
                        describe("int-keyed dict", x, "{'__intkeys__': {...}}", "pass an unmodified checkpoint")
                    )
                try:
                    return {int(k): walk(v, depth + 1) for k, v in inner.items()}
                except ValueError:
                    raise CheckpointError(
                        describe("int-keyed dict", list(inner)[:5], "integer keys", "pass an unmodified checkpoint")
                    ) from None
            return {k: walk(v, depth + 1) for k, v in x.items()}
        if x is None or isinstance(x, (bool, int, float, str)):
            return x
        raise CheckpointError(describe("state", type(x).__name__, "JSON data", "pass an unmodified checkpoint"))

    out = walk(tree, 0)
    unused = sorted(set(tensors) - used)
    if unused:
        raise CheckpointError(
            describe(
                "tensor file",
                unused[:5],
                "only tensors the JSON state refers to",
                "the checkpoint is damaged or mixed from two saves: load another one",
            )
        )
    return out
