"""Split a nested state (dicts, lists, numbers, strings, tensors) into JSON and named tensors.

Algorithm: :func:`encode` walks the tree; every ``torch.Tensor`` is replaced by
``{"__tensor__": name}`` (its path; a path already taken, e.g. ``{"a.b": x, "a": {"b": y}}``,
gets the first free ``path#1``, ``path#2``, ...) and collected for a safetensors file; tuples
become ``{"__tuple__": [...]}``, dicts with integer keys ``{"__intkeys__": {...}}`` (dict order is
kept: the writer does not sort the keys); a NumPy array is stored as a tensor,
``{"__ndarray__": name}``, and a NumPy scalar as ``{"__numpy__": [dtype, value]}`` (bool, integer,
float16/32/64, complex64/128 as ``[re, im]``, ``str_``), so both come back as the same NumPy type;
anything else (functions, arbitrary objects, ``Enum`` members, NumPy arrays of other dtypes or
non-native byte order) is refused with the path that held it, because the single-process format
never pickles. A tensor's conjugate and negative bits are resolved (the stored bytes are its
values), and a non-contiguous tensor whose elements are dense in memory (``channels_last``, a
transpose: what ``torch.preserve_format`` keeps) is stored in its memory order with
``"order": [dims]``, so it comes back with the same memory layout (a fused optimizer walks its
moments in the parameter's memory order); any other view is stored contiguous, as
``preserve_format`` would copy it. :func:`decode` is the exact inverse and checks that every
reference names a tensor and every tensor is referenced. A tensor the file cannot hold exactly (a
dtype outside :data:`~.tensor_file.SAVED_DTYPES`, such as ``complex128`` or a quantized dtype; a
sparse or ``meta`` tensor; a packed 4-bit scalar) is refused with its path before anything is
written: a checkpoint that saves must load.

Guarantee: ``decode(*encode(x))`` equals ``x`` bit for bit (tensors by dtype, shape, bytes and
memory order; NumPy values by type, dtype and bytes; floats by ``repr`` round trip, including
inf, nan and -0.0; dict key order). Not kept: subclasses of the plain types (a ``torch.Size`` or
namedtuple comes back a tuple, an ``OrderedDict`` or ``defaultdict`` a dict, a ``Parameter`` a
tensor), ``requires_grad``, and a tensor's storage sharing or offset. Cost: one pass over the
tree; tensors are not copied unless two names share storage (safetensors refuses shared storage)
or their elements are not dense in memory.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Mapping
from typing import Any

import torch

from resumable_data.checkpoint.errors import CheckpointError
from resumable_data.checkpoint.tensor_file import SAVED_DTYPES
from resumable_data.errors import describe

__all__ = ["NDARRAY", "TENSOR", "decode", "encode", "tensor_ref"]

TENSOR = "__tensor__"
NDARRAY = "__ndarray__"
NUMPY = "__numpy__"
TUPLE = "__tuple__"
INTKEYS = "__intkeys__"
ORDER = "order"
_RESERVED = frozenset({TENSOR, NDARRAY, NUMPY, TUPLE, INTKEYS})
#: NumPy scalar dtypes kept exactly (their ``item()`` is a JSON value; complex as ``[re, im]``).
NUMPY_SCALARS = frozenset(
    [
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
        "complex64",
        "complex128",
        "str",
    ]
)


def tensor_ref(x: Any) -> str | None:
    """The tensor name a JSON node refers to (``{"__tensor__": name}``, with its ``order``, or
    ``{"__ndarray__": name}``), else None."""
    if isinstance(x, dict):
        for marker in (TENSOR, NDARRAY):
            if marker in x and set(x) <= {marker, ORDER}:
                return x[marker]
    return None


#: The tensor dtypes a NumPy array is stored as (:func:`_numpy`): what ``{"__ndarray__": name}`` may name.
_NDARRAY_DTYPES = frozenset(
    [torch.bool, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.uint16, torch.uint32]
    + [torch.uint64, torch.float16, torch.float32, torch.float64, torch.complex64]
)


def _memory_order(t: torch.Tensor) -> list[int] | None:
    """The dims of a non-contiguous tensor whose elements are dense in memory, outermost first
    (``t.permute(order)`` is contiguous, no copy); None for a contiguous tensor or any other view."""
    if t.numel() < 2 or t.is_contiguous():
        return None
    order = sorted(range(t.dim()), key=lambda d: (-t.stride()[d], d))
    return order if t.permute(order).is_contiguous() else None


MAX_DEPTH = 64


def encode(tree: Any, prefix: str = "", *, keep_tensors: bool = False) -> tuple[Any, dict[str, torch.Tensor]]:
    """``(json_tree, tensors)``; raises :class:`CheckpointError` naming the unsupported path.

    ``keep_tensors=True`` hands back the tensors themselves (no detach, copy or device move: the
    ``torch.distributed.checkpoint`` layout, where DCP writes them and loads into them in place)."""
    tensors: dict[str, torch.Tensor] = {}
    seen: dict[tuple[int, int], str] = {}

    def name(path: str) -> str:  # paths can coincide ({"a.b": x, "a": {"b": y}}): each tensor its own name
        if path not in tensors:
            return path
        i = 1
        while f"{path}#{i}" in tensors:
            i += 1
        return f"{path}#{i}"

    def walk(x: Any, path: str, depth: int, marker: str = TENSOR) -> Any:
        if depth > MAX_DEPTH:
            raise CheckpointError(
                describe(path or "state", "nesting", f"at most {MAX_DEPTH} levels", "flatten the state")
            )
        if isinstance(x, torch.Tensor) and keep_tensors:
            n = name(path)
            tensors[n] = x
            return {marker: n}
        if isinstance(x, torch.Tensor):
            _check_saveable(x, path)
            t = x.detach()
            if t.device.type != "cpu":
                t = t.cpu()
            t = t.resolve_conj().resolve_neg()  # the values, not the bytes under a conjugate/negative view
            order = _memory_order(t)
            t = t.permute(order) if order is not None else t.contiguous()
            if t.numel():
                key = (t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
                if key in seen:  # shared storage (tied weights): safetensors needs its own copy
                    t = t.clone()
                else:
                    seen[key] = path
            n = name(path)
            tensors[n] = t
            return {marker: n} if order is None else {marker: n, ORDER: order}
        if isinstance(x, enum.Enum):  # an IntEnum / str Enum would come back a plain int / str
            raise CheckpointError(
                describe(
                    path or "state",
                    f"{type(x).__name__}.{x.name} (an Enum member)",
                    "tensors, numbers, strings, None, lists, tuples or dicts",
                    "store x.value (or x.name) in state_dict() and rebuild the member in load_state_dict()",
                )
            )
        numpy = _numpy(x, path)
        if numpy is not None:
            kind, value = numpy
            return {NUMPY: value} if kind == NUMPY else walk(value, path, depth, NDARRAY)
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
        raise CheckpointError(
            describe(
                path or "state",
                type(x).__name__,
                "tensors, numbers, strings, None, lists, tuples or dicts",
                "make that object's state_dict() return plain data (the checkpoint never pickles)",
            )
        )

    return walk(tree, prefix, 0), tensors


def _numpy(x: Any, path: str) -> tuple[str, Any] | None:
    """``(NUMPY, [dtype, value])`` for a NumPy scalar, ``(NDARRAY, tensor)`` for an array (its
    memory, no copy), None for anything else; a :class:`CheckpointError` for a NumPy value the
    checkpoint cannot give back exactly."""
    np = sys.modules.get("numpy")  # a NumPy value implies NumPy is imported
    if np is None or not isinstance(x, (np.generic, np.ndarray)):
        return None
    dtype = x.dtype
    if isinstance(x, np.generic):
        if dtype.kind == "U":
            return NUMPY, ["str", str(x)]
        if dtype.isnative and dtype.name in NUMPY_SCALARS:
            v = x.item()
            return NUMPY, [dtype.name, [v.real, v.imag] if dtype.kind == "c" else v]
    elif dtype.isnative and dtype.kind in "biufc" and dtype.name != "complex128":
        try:
            return NDARRAY, torch.from_numpy(x)
        except (TypeError, ValueError):  # e.g. longdouble
            pass
    what = "NumPy scalar" if isinstance(x, np.generic) else "NumPy array"
    raise CheckpointError(
        describe(
            f"{path or 'state'} dtype",
            f"{dtype.str} ({what})",
            "a native-byte-order bool, integer, float16/32/64 or complex64 dtype"
            + (", complex128 or str_" if isinstance(x, np.generic) else ""),
            "convert it (x.astype(x.dtype.newbyteorder('=')) for a big-endian array, .tolist() for an object or "
            "structured one, x.view(np.float64) for complex128) and convert it back in load_state_dict()",
        )
    )


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


def _is_order(order: Any, dim: int) -> bool:
    return isinstance(order, list) and all(type(d) is int for d in order) and sorted(order) == list(range(dim))


def numpy_scalar(x: dict) -> Any:
    """The NumPy scalar of ``{"__numpy__": [dtype, value]}``."""
    import numpy as np

    spec = x[NUMPY]
    try:
        if len(x) != 1 or not isinstance(spec, list) or len(spec) != 2 or spec[0] not in NUMPY_SCALARS:
            raise ValueError(spec)
        dtype, v = spec
        if dtype.startswith("complex"):
            if not (isinstance(v, list) and len(v) == 2 and all(type(p) is float for p in v)):
                raise ValueError(v)
            v = complex(v[0], v[1])
        ok = {"b": bool, "i": int, "u": int, "f": float, "c": complex, "U": str}[np.dtype(dtype).kind]
        if type(v) is not ok:
            raise ValueError(v)
        return np.array(v, dtype=dtype)[()]  # OverflowError for an integer out of its dtype's range
    except (ValueError, OverflowError, TypeError):
        raise CheckpointError(
            describe("NumPy scalar", x, "{'__numpy__': [dtype, value]}", "pass an unmodified checkpoint")
        ) from None


def decode(tree: Any, tensors: Mapping[str, torch.Tensor]) -> Any:
    """Inverse of :func:`encode`; every tensor must be referenced exactly once."""
    used: set[str] = set()

    def tensor(x: dict) -> Any:
        name = tensor_ref(x)
        order = x.get(ORDER)
        if (
            len(x) != 1 + (ORDER in x)
            or not isinstance(name, str)
            or name not in tensors
            or not (order is None or _is_order(order, tensors[name].dim()))
            or (NDARRAY in x and tensors[name].dtype not in _NDARRAY_DTYPES)
        ):
            raise CheckpointError(
                describe(
                    "tensor reference",
                    x,
                    "the name of a tensor in the tensor file (and its dims' memory order; a NumPy array's "
                    "of a dtype NumPy has)",
                    "the checkpoint is damaged: load another one",
                )
            )
        used.add(name)
        t = tensors[name]
        if order is not None:
            t = t.permute([order.index(d) for d in range(len(order))])
        return t.numpy() if NDARRAY in x else t

    def walk(x: Any, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise CheckpointError(
                describe("state", "nesting", f"at most {MAX_DEPTH} levels", "pass an unmodified checkpoint")
            )
        if isinstance(x, list):
            return [walk(v, depth + 1) for v in x]
        if isinstance(x, dict):
            if TENSOR in x or NDARRAY in x:
                return tensor(x)
            if NUMPY in x:
                return numpy_scalar(x)
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
