"""Reading a checkpoint's ``tensors.safetensors`` in one pass: hashed while it is read, each tensor
read straight into its own storage, the header validated by rd before any tensor is built.

Algorithm. The file is opened once (:func:`.files.open_checked`: a regular file, no link, no
FIFO) and must hold exactly the marker's size. Its bytes are read in file order through that one
descriptor and every byte read is fed to one streaming xxh3-128:

1. the 8-byte header length ``n``, then the ``n`` header bytes (at most :data:`MAX_HEADER`, and
   no more than the file holds);
2. the header is parsed and validated (:func:`parse_header`) with the checks
   ``safetensors.torch.load`` makes, and stricter: a JSON object (UTF-8, starting with ``{``)
   without repeated names; ``__metadata__`` (optional) a map of strings to strings; every other
   entry exactly ``{"dtype", "shape", "data_offsets"}`` with a dtype of :data:`DTYPES`, a shape of
   integers >= 0 and offsets ``[begin, end]`` with ``end - begin == numel * itemsize`` (``F4``
   packs two values a byte: its last dimension counts values, even, :data:`PACKED`); sorted by
   ``begin``, the entries tile the data section exactly: the first begins at 0, each begins where
   the previous ended (no overlap, no gap) and the last ends at the file's end (in bounds, no
   trailing bytes);
3. each tensor's bytes are read (in chunks of :data:`CHUNK`) into a fresh ``uint8`` tensor of its
   length, hashed chunk by chunk, then viewed as its dtype and shape (byte-swapped in place on a
   big-endian host: the format is little-endian); one more byte is asked for (a file that grew
   since ``fstat`` is not the marker's);
4. the digest is compared with the marker's. A header that fails (2) does not stop the read: the
   rest of the file is hashed in chunks, so a damaged file reports the marker mismatch as every
   other file does, and a header refusal is reported only for bytes that match the marker.

Guarantee: the tensors returned are built from exactly the bytes whose xxh3-128 equals the
marker's (a file swapped or rewritten in place during the read is refused, never parsed
unchecked); a header that is not a well-formed, exactly tiled safetensors header is a
:class:`CheckpointError` naming the file, the entry, the value and what was expected, and no
tensor is handed out. Nothing is unpickled, nothing is memory-mapped (a private map of a file
rewritten in place shows the new bytes on pages not yet copied).

Cost: one sequential read and one hash of the file (the cyclic GC paused meanwhile:
:func:`_gc_paused`); memory: the tensors themselves (each its own
storage, nothing shared with a file buffer) plus the header and one chunk: about 1x the file,
where reading the whole file into memory and handing it to ``safetensors.torch.load`` held about
2x at peak (the bytes and the tensors copied from them).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import struct
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import xxhash

from resumable_data.checkpoint.errors import CheckpointError
from resumable_data.checkpoint.files import open_checked
from resumable_data.errors import describe

__all__ = [
    "CHUNK",
    "DTYPES",
    "MAX_HEADER",
    "PACKED",
    "SAVED_DTYPES",
    "TensorFile",
    "parse_header",
    "read_tensor_file",
]

#: safetensors dtype names -> torch dtypes (what ``safetensors.torch`` writes for them).
DTYPES: dict[str, torch.dtype] = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U64": torch.uint64,
    "U32": torch.uint32,
    "U16": torch.uint16,
    "U8": torch.uint8,
    "BOOL": torch.bool,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E4M3FNUZ": torch.float8_e4m3fnuz,
    "F8_E5M2": torch.float8_e5m2,
    "F8_E5M2FNUZ": torch.float8_e5m2fnuz,
    "C64": torch.complex64,
}
# Newer torch dtypes safetensors (>= 0.6) writes: the MX block scale and packed 4-bit floats.
if hasattr(torch, "float8_e8m0fnu"):  # torch >= 2.7
    DTYPES["F8_E8M0"] = torch.float8_e8m0fnu
if hasattr(torch, "float4_e2m1fn_x2"):  # torch >= 2.8
    DTYPES["F4"] = torch.float4_e2m1fn_x2
#: Values a stored element of these dtypes packs: a header's shape counts values (safetensors
#: writes a ``float4_e2m1fn_x2`` tensor of shape ``[..., n]`` as ``F4`` ``[..., 2n]``, ``n`` bytes).
PACKED: dict[str, int] = {"F4": 2}
#: The torch dtypes a checkpoint's tensor file holds (what :func:`~.codec.encode` accepts).
SAVED_DTYPES: frozenset[torch.dtype] = frozenset(DTYPES.values())
#: The largest header read (safetensors' own bound, ``MAX_HEADER_SIZE``).
MAX_HEADER = 100_000_000
#: Bytes read (and hashed) per call.
CHUNK = 4 << 20
METADATA = "__metadata__"
_ENTRY_KEYS = {"dtype", "shape", "data_offsets"}
_FIX = "the file is not one this package wrote for this checkpoint: load another checkpoint"


@dataclass(frozen=True)
class Entry:
    """One tensor of a validated header."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    begin: int
    end: int


@dataclass(frozen=True)
class TensorFile:
    """What :func:`read_tensor_file` read: ``problem`` when the bytes do not match the marker (as
    ``read_checkpoint`` reports for every file), else ``error`` when the header is refused, else
    the tensors and the header's ``__metadata__``."""

    problem: str | None = None
    error: CheckpointError | None = None
    tensors: dict[str, torch.Tensor] | None = None
    metadata: Any = None


def _refuse(path: Path, where: str, value: Any, expected: str) -> CheckpointError:
    return CheckpointError(describe(f"{path} header: {where}", value, expected, _FIX))


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"the name {k[:200]!r} appears twice")
        out[k] = v
    return out


def _int(v: Any) -> bool:
    return type(v) is int and v >= 0


def parse_header(path: Path, header: bytes, data_size: int) -> tuple[list[Entry], Any]:
    """``(entries sorted by offset, __metadata__)`` of a safetensors header whose data section holds
    ``data_size`` bytes; a :class:`CheckpointError` for anything the module docs refuse."""
    if not header.startswith(b"{"):
        raise _refuse(path, "start", header[:16], "a JSON object (the header starts with '{')")
    try:
        tree = json.loads(header.decode("utf-8"), object_pairs_hook=_pairs)
    except (ValueError, RecursionError) as e:
        raise _refuse(path, "JSON", f"unreadable ({str(e)[:200]})", "one JSON object without repeated names") from None
    if not isinstance(tree, dict):
        raise _refuse(path, "JSON", type(tree).__name__, "a JSON object")
    metadata = tree.pop(METADATA, None)
    if metadata is not None and not (isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())):
        raise _refuse(path, METADATA, metadata, "a map of strings to strings")
    entries = []
    for name, item in tree.items():
        if not isinstance(item, dict) or set(item) != _ENTRY_KEYS:
            shown = sorted(item) if isinstance(item, dict) else type(item).__name__
            raise _refuse(path, f"tensor {name!r}", shown, f"an object with exactly the keys {sorted(_ENTRY_KEYS)}")
        dtype, shape, offsets = item["dtype"], item["shape"], item["data_offsets"]
        if not isinstance(dtype, str) or dtype not in DTYPES:
            raise _refuse(path, f"tensor {name!r} dtype", dtype, f"one of {sorted(DTYPES)}")
        if not isinstance(shape, list) or not all(_int(d) for d in shape):
            raise _refuse(path, f"tensor {name!r} shape", shape, "a list of integers >= 0")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(_int(o) for o in offsets)):
            raise _refuse(path, f"tensor {name!r} data_offsets", offsets, "[begin, end]: two integers >= 0")
        begin, end = offsets
        per = PACKED.get(dtype, 1)
        if per > 1 and not (shape and shape[-1] % per == 0):
            raise _refuse(
                path,
                f"tensor {name!r} shape",
                shape,
                f"a last dimension that is a multiple of {per} ({dtype} packs {per})",
            )
        stored = (*shape[:-1], shape[-1] // per) if per > 1 else tuple(shape)
        numel = 1
        for d in stored:
            numel *= d
        length = numel * DTYPES[dtype].itemsize
        if end - begin != length:
            raise _refuse(
                path,
                f"tensor {name!r} data_offsets",
                offsets,
                f"{length} bytes (shape {shape} x {dtype}'s {DTYPES[dtype].itemsize} bytes per {per} element(s))",
            )
        entries.append(Entry(name, DTYPES[dtype], stored, begin, end))
    entries.sort(key=lambda x: (x.begin, x.end))
    at = 0
    for x in entries:
        if x.begin != at:
            what = "overlaps the previous tensor" if x.begin < at else f"leaves a gap of {x.begin - at} bytes"
            raise _refuse(
                path,
                f"tensor {x.name!r} data_offsets",
                f"[{x.begin}, {x.end}] ({what})",
                f"tensors tiling the data section: this one begins at byte {at}",
            )
        at = x.end
    if at != data_size:
        raise _refuse(
            path,
            "data section",
            f"{data_size} bytes, tensors cover {at}",
            "tensors covering the data section exactly (in bounds, nothing after the last)",
        )
    return entries, metadata


class _Reader:
    """Reads ``size`` bytes of a descriptor in order, hashing each byte once."""

    def __init__(self, fd: int, size: int) -> None:
        self.f = os.fdopen(fd, "rb", buffering=0)
        self.h = xxhash.xxh3_128()
        self.left = size

    def into(self, view: memoryview) -> bool:
        """Fill ``view`` (at most the bytes left); False if the file ended early."""
        pos = 0
        while pos < len(view):
            n = self.f.readinto(view[pos : pos + CHUNK])
            if not n:
                return False
            self.h.update(view[pos : pos + n])
            pos += n
        self.left -= len(view)
        return True

    def take(self, n: int) -> bytes | None:
        buf = bytearray(n)
        return bytes(buf) if self.into(memoryview(buf)) else None

    def drain(self) -> bool:
        """Hash the rest (one chunk of memory at a time); False if the file ended early."""
        buf = memoryview(bytearray(min(CHUNK, max(self.left, 0))))
        while self.left > 0:
            if not self.into(buf[: min(CHUNK, self.left)]):
                return False
        return True

    def at_end(self) -> bool:
        return self.left == 0 and self.f.read(1) == b""


def _tensor(r: _Reader, x: Entry) -> torch.Tensor | None:
    n = x.end - x.begin
    if n == 0:
        return torch.empty(x.shape, dtype=x.dtype)
    raw = torch.empty(n, dtype=torch.uint8)
    if not r.into(memoryview(raw.numpy().data)):
        return None
    if sys.byteorder == "big" and x.dtype.itemsize > 1:  # pragma: no cover - little-endian CI
        unit = 4 if x.dtype == torch.complex64 else x.dtype.itemsize
        raw.numpy().view(f"u{unit}").byteswap(inplace=True)
    return raw.view(x.dtype).reshape(x.shape)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off for the body (as it was before, after): a header of many
    tensors allocates tens of thousands of small objects, each allocation burst triggering a full
    collection over the process's (torch's) objects: 20,000 tensors took 1.5 s with it, 0.55 s
    without. Nothing allocated here forms a cycle; reference counting frees it."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def read_tensor_file(path: str | os.PathLike, size: int, xxh3_128: str) -> TensorFile:
    """Read, hash and parse ``path`` (module docs) against the marker's ``size`` and ``xxh3_128``.
    Raises :class:`CheckpointError` only for a file that is not a readable regular file."""
    p = Path(path)
    fd, got = open_checked(p)
    r = _Reader(fd, size)
    with r.f, _gc_paused():
        if got != size or size < 8:
            return TensorFile(problem="missing or wrong size")
        head = r.take(8)
        if head is None:
            return TensorFile(problem="missing or wrong size")
        (n,) = struct.unpack("<Q", head)
        error: CheckpointError | None = None
        tensors: dict[str, torch.Tensor] = {}
        metadata = None
        if n > min(MAX_HEADER, size - 8):
            error = _refuse(p, "length", n, f"at most {min(MAX_HEADER, size - 8)} bytes (the file holds {size})")
        else:
            header = r.take(n)
            if header is None:
                return TensorFile(problem="missing or wrong size")
            try:
                entries, metadata = parse_header(p, header, size - 8 - n)
            except CheckpointError as e:
                error = e
            else:
                for x in entries:
                    t = _tensor(r, x)
                    if t is None:
                        return TensorFile(problem="missing or wrong size")
                    tensors[x.name] = t
        if (error is not None and not r.drain()) or not r.at_end():
            return TensorFile(problem="missing or wrong size")
        if r.h.hexdigest() != xxh3_128:
            return TensorFile(problem="content hash differs from the marker's")
    if error is not None:
        return TensorFile(error=error)
    return TensorFile(tensors=tensors, metadata=metadata)
