"""Split a nested state (dicts, lists, numbers, strings, tensors) into JSON and named tensors.

Algorithm: :func:`encode` walks the tree; every ``torch.Tensor`` is replaced by
``{"__tensor__": name}`` (its path; a path already taken, e.g. ``{"a.b": x, "a": {"b": y}}``,
gets the first free ``path#1``, ``path#2``, ...) and collected for a safetensors file, with
``"parameter": true`` for a ``torch.nn.Parameter`` and ``"requires_grad": true`` for a tensor that
requires grad; tuples become ``{"__tuple__": [...]}``, a ``torch.Size`` ``{"__size__": [...]}``,
dicts with integer keys ``{"__intkeys__": {...}}`` (dict order is kept: the writer does not sort
the keys), an ``OrderedDict`` / ``Counter`` ``{"__odict__": dict}`` / ``{"__counter__": dict}``
(the dict as a plain one is written), ``bytes`` ``{"__bytes__": base64}``, a ``complex``
``{"__complex__": [re, im]}``; a NumPy array is stored as a tensor, ``{"__ndarray__": name}``, and
a NumPy scalar as ``{"__numpy__": [dtype, value]}`` (bool, integer, float16/32/64, complex64/128
as ``[re, im]``, ``str_``), so both come back as the same NumPy type. Types are matched exactly:
anything else is refused with the path that held it and the fix, because the single-process
format never pickles and never imports a class by name: a namedtuple or another subclass of a
kept type (it would come back as its base: ``_asdict()`` / ``dict(x)`` / ``list(x)`` ...), a
``defaultdict`` (its factory is code), sets, ``bytearray``, ``Enum`` members (an ``IntEnum`` would
come back an ``int``), dict keys other than exact ``str`` or exact ``int``, ints of more than
:data:`MAX_INT_DIGITS` digits (a Python may refuse to read them back from JSON), functions and
arbitrary objects, NumPy arrays of other dtypes or non-native byte order. A tensor's conjugate and
negative bits are resolved (the stored bytes are its values), and a non-contiguous tensor whose
elements are dense in memory (``channels_last``, a transpose: what ``torch.preserve_format``
keeps) is stored in its memory order with ``"order": [dims]``, so it comes back with the same
memory layout (a fused optimizer walks its moments in the parameter's memory order); any other
view is stored contiguous, as ``preserve_format`` would copy it. :func:`decode` is the exact
inverse and checks that every reference names a tensor, every tensor is referenced, and every tag
holds what :func:`encode` writes there (a :class:`CheckpointError` otherwise); a schema version 1
checkpoint may hold only the tags of version 1 (``__tensor__`` without other keys, ``__tuple__``,
``__intkeys__``). A tensor the file cannot hold exactly (a dtype outside
:data:`~.tensor_file.SAVED_DTYPES`, such as ``complex128`` or a quantized dtype; a sparse or
``meta`` tensor; a packed 4-bit scalar) is refused with its path before anything is written: a
checkpoint that saves must load.

Guarantee: ``decode(*encode(x))`` equals ``x`` bit for bit and type for type (tensors by dtype,
shape, bytes, memory order, ``Parameter`` and ``requires_grad``; NumPy values by type, dtype and
bytes; floats by ``repr`` round trip, including inf, nan and -0.0; dict key order; tuple, list,
``torch.Size``, ``dict``, ``OrderedDict`` and ``Counter`` each as itself). Not kept: a tensor's
autograd history (a non-leaf tensor comes back a leaf that requires grad), tensor subclasses other
than ``Parameter`` (stored as their tensor values, as a model's ``load_state_dict`` copies them),
an ``OrderedDict``'s attributes (a module ``state_dict()``'s ``_metadata``), and a tensor's storage
sharing or offset. Cost: one pass over the tree; tensors are not copied unless two names share
storage (safetensors refuses shared storage) or their elements are not dense in memory.
"""

from __future__ import annotations

import base64
import binascii
import enum
import sys
import types
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Mapping, Set
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
SIZE = "__size__"
ODICT = "__odict__"
COUNTER = "__counter__"
BYTES = "__bytes__"
COMPLEX = "__complex__"
#: Keys beside ``__tensor__``: a ``torch.nn.Parameter`` (``true``) and a tensor that requires grad (``true``).
PARAMETER = "parameter"
REQUIRES_GRAD = "requires_grad"
_RESERVED = frozenset({TENSOR, NDARRAY, NUMPY, TUPLE, INTKEYS, SIZE, ODICT, COUNTER, BYTES, COMPLEX})
#: The dict subclasses kept (no state beside their items; a MultiStepLR's ``milestones`` is a Counter).
_DICTS = {ODICT: OrderedDict, COUNTER: Counter}
#: The keys a reference to a tensor (a NumPy array) holds.
_TENSOR_KEYS = frozenset({TENSOR, ORDER, PARAMETER, REQUIRES_GRAD})
_NDARRAY_KEYS = frozenset({NDARRAY, ORDER})
#: What a schema version 1 checkpoint holds (``{"__tensor__": name}``, tuples, int keys): the
#: other tags and tensor keys came with version 2, so a version 1 file holding one was edited.
_V2_TAGS = _RESERVED - {TENSOR, TUPLE, INTKEYS}
#: The largest integer saved: 640 decimal digits, what every Python reads back from JSON
#: (``sys.set_int_max_str_digits`` accepts no lower limit than 640; the default is 4300).
MAX_INT_DIGITS = 640
_INT_LIMIT = 10**MAX_INT_DIGITS
#: What the codec gives back as saved (the ``expected`` of a refusal).
KEPT = (
    "tensors (nn.Parameter and requires_grad kept), NumPy scalars and arrays, None, bool, int, float, complex, "
    "str, bytes, list, tuple, torch.Size, dict, collections.OrderedDict or collections.Counter with str or int keys"
)
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
    """The tensor name a JSON node refers to (``{"__tensor__": name}``, with its ``order``,
    ``parameter`` and ``requires_grad``, or ``{"__ndarray__": name}``, with its ``order``), else None."""
    if isinstance(x, dict):
        for marker, keys in ((TENSOR, _TENSOR_KEYS), (NDARRAY, _NDARRAY_KEYS)):
            if marker in x and x.keys() <= keys:
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
        if isinstance(x, torch.Tensor):
            tags = _tensor_tags(x)
            if keep_tensors:
                n = name(path)
                tensors[n] = x
                return {marker: n, **tags}
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
            return {marker: n, **({} if order is None else {ORDER: order}), **tags}
        if isinstance(x, enum.Enum):  # an IntEnum / str Enum would come back a plain int / str
            raise CheckpointError(
                describe(
                    path or "state",
                    f"{type(x).__name__}.{x.name} (an Enum member)",
                    KEPT,
                    "store x.value (or x.name) in state_dict() and rebuild the member in load_state_dict()",
                )
            )
        numpy = _numpy(x, path)
        if numpy is not None:
            kind, value = numpy
            return {NUMPY: value} if kind == NUMPY else walk(value, path, depth, NDARRAY)
        cls = type(x)  # exact types only: a subclass would come back as its base (refused below)
        if x is None or cls in (bool, str, float):
            return x
        if cls is int:
            return _check_int(x, path)
        if cls is complex:
            return {COMPLEX: [x.real, x.imag]}
        if cls is bytes:
            return {BYTES: base64.b64encode(x).decode("ascii")}
        if cls is torch.Size:
            return {SIZE: list(x)}
        if cls is tuple:
            return {TUPLE: [walk(v, f"{path}.{i}", depth + 1) for i, v in enumerate(x)]}
        if cls is list:
            return [walk(v, f"{path}.{i}", depth + 1) for i, v in enumerate(x)]
        if cls is dict:
            return mapping(x, path, depth)
        if cls is OrderedDict or cls is Counter:
            return {ODICT if cls is OrderedDict else COUNTER: mapping(x, path, depth)}
        raise CheckpointError(_refusal(x, path or "state"))

    def mapping(x: dict, path: str, depth: int) -> Any:
        if all(type(k) is str for k in x):
            bad = _RESERVED.intersection(x)
            if bad:
                raise CheckpointError(
                    describe(
                        path or "state", sorted(bad), "keys that are not reserved by the codec", "rename those keys"
                    )
                )
            return {k: walk(v, f"{path}.{k}" if path else k, depth + 1) for k, v in x.items()}
        if all(type(k) is int for k in x):
            return {
                INTKEYS: {
                    str(_check_int(k, f"{path or 'state'} key")): walk(v, f"{path}.{k}", depth + 1)
                    for k, v in x.items()
                }
            }
        raise CheckpointError(
            describe(
                f"{path or 'state'} keys",
                [type(k).__name__ for k in x][:5],
                "all str or all int keys (exactly: a subclass, such as an Enum member, would come back as its base)",
                "use str or int keys (str(k), k.value for an Enum member) and convert them back in load_state_dict()",
            )
        )

    return walk(tree, prefix, 0), tensors


def _tensor_tags(x: torch.Tensor) -> dict[str, bool]:
    """The reference keys that give a tensor back as saved: ``parameter`` for a ``torch.nn.Parameter``
    (exactly that class), ``requires_grad`` for one that requires grad (its autograd history is not state)."""
    tags = {}
    if type(x) is torch.nn.Parameter:
        tags[PARAMETER] = True
    if x.requires_grad:
        tags[REQUIRES_GRAD] = True
    return tags


def _check_int(x: int, path: str) -> int:
    if x.bit_length() > 2126 and abs(x) >= _INT_LIMIT:  # 2**2126 < 10**640: the comparison only for the rare big one
        raise CheckpointError(
            describe(
                path or "state",
                f"an int of {x.bit_length()} bits (about {int(x.bit_length() * 0.30103) + 1} decimal digits)",
                f"an integer of at most {MAX_INT_DIGITS} decimal digits (what every Python reads back from JSON)",
                "store it as a hex string (hex(x)) and convert it back with int(s, 16) in load_state_dict()",
            )
        )
    return x


#: Types whose ``__qualname__`` is not a name a user can call to rebuild them.
_IMPORTABLE: dict[type, str] = {type(types.MappingProxyType({})): "types.MappingProxyType"}


def _refusal(x: Any, where: str) -> str:
    """Why ``x`` (no type the codec keeps) is refused, with the fix that saves it (module docs)."""
    kind = type(x)
    name = _IMPORTABLE.get(kind, kind.__qualname__)
    restore = "in load_state_dict()"
    if isinstance(x, tuple) and hasattr(kind, "_fields"):
        what = f"{name} (a namedtuple)"
        fix = f"store x._asdict() (or tuple(x)) and rebuild {name}(**d) (or {name}(*t)) {restore}"
    elif isinstance(x, defaultdict):
        factory = getattr(x.default_factory, "__qualname__", repr(x.default_factory))
        factory = "your_factory" if "<" in factory else factory  # a lambda or a local function
        what = f"{name} (its default_factory, {factory}, is code)"
        fix = f"store dict(x) and rebuild collections.defaultdict({factory}, d) {restore}"
    elif isinstance(x, Mapping):
        what = f"{name} (a Mapping other than dict, OrderedDict and Counter)"
        fix = f"store dict(x) (collections.OrderedDict(x) keeps the type OrderedDict) and rebuild {name}(d) {restore}"
    elif isinstance(x, Set):
        what = f"{name} (a set)"
        fix = f"store sorted(x) (or list(x)) and rebuild {name}(items) {restore}"
    else:
        base = next((b for b in (bool, int, float, complex, str, bytes, tuple, list) if isinstance(x, b)), None)
        if base is not None:
            what = f"{name} (a subclass of {base.__name__})"
            fix = f"store {base.__name__}(x) and rebuild {name}(v) {restore}"
        elif isinstance(x, (bytearray, memoryview)):
            what = name
            fix = f"store bytes(x) and rebuild {name}(b) {restore}"
        else:
            return describe(
                where,
                name,
                KEPT,
                "make that object's state_dict() return plain data (the checkpoint never pickles)",
            )
    return describe(where, what, f"{KEPT}, each exactly that type (the checkpoint never imports a class)", fix)


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


def _version_1(where: str, x: dict) -> CheckpointError:
    return CheckpointError(
        describe(
            where or "state",
            x,
            "only {'__tensor__': name}, {'__tuple__': [...]} and {'__intkeys__': {...}} in a schema version 1 "
            "checkpoint (the other tags came with version 2)",
            "the checkpoint was edited after it was saved: load another one",
        )
    )


def _forged(where: str, x: Any, expected: str) -> CheckpointError:
    return CheckpointError(describe(where or "state", x, expected, "pass an unmodified checkpoint"))


def _size(x: dict, where: str) -> torch.Size:
    v = x[SIZE]
    if len(x) == 1 and isinstance(v, list) and all(type(d) is int and -(2**63) <= d < 2**63 for d in v):
        return torch.Size(v)
    raise _forged(where, x, "{'__size__': [int64, ...]} (a torch.Size)")


def _bytes(x: dict, where: str) -> bytes:
    v = x[BYTES]
    if len(x) == 1 and isinstance(v, str):
        try:
            b = base64.b64decode(v, validate=True)
        except (binascii.Error, ValueError):  # a non-ASCII character is a ValueError
            pass
        else:
            if base64.b64encode(b).decode("ascii") == v:  # the one spelling a save writes
                return b
    raise _forged(where, x, "{'__bytes__': base64 text} (bytes)")


def _complex(x: dict, where: str) -> complex:
    v = x[COMPLEX]
    if len(x) == 1 and isinstance(v, list) and len(v) == 2 and all(type(p) is float for p in v):
        return complex(v[0], v[1])
    raise _forged(where, x, "{'__complex__': [real, imag]} (two floats: a complex)")


def decode(tree: Any, tensors: Mapping[str, torch.Tensor], *, version: int = 2) -> Any:
    """Inverse of :func:`encode`; every tensor must be referenced exactly once. ``version``: the
    checkpoint's schema version (a version 1 file holds none of the tags version 2 added)."""
    used: set[str] = set()

    def tensor(x: dict, where: str) -> Any:
        name = tensor_ref(x)
        order = x.get(ORDER)
        if (
            not isinstance(name, str)
            or name not in tensors
            or not (order is None or _is_order(order, tensors[name].dim()))
            or (NDARRAY in x and tensors[name].dtype not in _NDARRAY_DTYPES)
            or any(x[k] is not True for k in (PARAMETER, REQUIRES_GRAD) if k in x)
        ):
            raise CheckpointError(
                describe(
                    "tensor reference",
                    x,
                    "the name of a tensor in the tensor file (and its dims' memory order; a NumPy array's "
                    "of a dtype NumPy has; 'parameter' and 'requires_grad' true when present)",
                    "the checkpoint is damaged: load another one",
                )
            )
        if version < 2 and x.keys() != {TENSOR}:
            raise _version_1(where, x)
        used.add(name)
        t = tensors[name]
        if order is not None:
            t = t.permute([order.index(d) for d in range(len(order))])
        if NDARRAY in x:
            return t.numpy()
        if PARAMETER in x or REQUIRES_GRAD in x:
            grad = REQUIRES_GRAD in x
            try:  # a fresh leaf on the same storage (the file's tensor; DCP's, loaded in place)
                return (
                    torch.nn.Parameter(t.detach(), requires_grad=grad)
                    if PARAMETER in x
                    else t.detach().requires_grad_()
                )
            except RuntimeError:  # an integer tensor cannot require grad: no save writes that
                raise CheckpointError(
                    describe(
                        "tensor reference",
                        x,
                        f"requires_grad only on a floating-point or complex tensor (this one is {t.dtype})",
                        "the checkpoint is damaged: load another one",
                    )
                ) from None
        return t

    def walk(x: Any, depth: int, where: str) -> Any:
        if depth > MAX_DEPTH:
            raise CheckpointError(
                describe("state", "nesting", f"at most {MAX_DEPTH} levels", "pass an unmodified checkpoint")
            )
        if isinstance(x, list):
            return [walk(v, depth + 1, f"{where}.{i}") for i, v in enumerate(x)]
        if isinstance(x, dict):
            if TENSOR in x or NDARRAY in x:
                return tensor(x, where)
            if version < 2 and not _V2_TAGS.isdisjoint(x):
                raise _version_1(where, x)
            if NUMPY in x:
                return numpy_scalar(x)
            if SIZE in x:
                return _size(x, where)
            if BYTES in x:
                return _bytes(x, where)
            if COMPLEX in x:
                return _complex(x, where)
            for tag, cls in _DICTS.items():
                if tag in x:
                    inner = walk(x[tag], depth, where) if len(x) == 1 and isinstance(x[tag], dict) else None
                    if type(inner) is not dict:  # what encode writes inside: a plain or an int-keyed dict
                        raise _forged(where, x, f"{{{tag!r}: {{...}}}} (a collections.{cls.__name__})")
                    return cls(inner)
            if TUPLE in x:
                if len(x) != 1 or not isinstance(x[TUPLE], list):
                    raise CheckpointError(describe("tuple", x, "{'__tuple__': [...]}", "pass an unmodified checkpoint"))
                return tuple(walk(v, depth + 1, f"{where}.{i}") for i, v in enumerate(x[TUPLE]))
            if INTKEYS in x:
                inner = x[INTKEYS]
                if len(x) != 1 or not isinstance(inner, dict):
                    raise CheckpointError(
                        describe("int-keyed dict", x, "{'__intkeys__': {...}}", "pass an unmodified checkpoint")
                    )
                try:
                    return {int(k): walk(v, depth + 1, f"{where}.{k}") for k, v in inner.items()}
                except ValueError:
                    raise CheckpointError(
                        describe("int-keyed dict", list(inner)[:5], "integer keys", "pass an unmodified checkpoint")
                    ) from None
            return {k: walk(v, depth + 1, f"{where}.{k}" if where else k) for k, v in x.items()}
        if x is None or isinstance(x, (bool, int, float, str)):
            return x
        raise CheckpointError(describe("state", type(x).__name__, "JSON data", "pass an unmodified checkpoint"))

    out = walk(tree, 0, "")
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
