"""The tensor file's one-pass reader (``checkpoint/tensor_file.py``): hashed while it is read, each
tensor read into its own storage, the safetensors header validated by rd.

Forged headers (overlap, out of bounds, dtype x shape != length, repeated names, gaps, trailing
bytes, a length past the file, unknown dtypes, extra keys, a non-string ``__metadata__``), each
written with a re-hashed marker so only the header checks can refuse it: every one is a
``CheckpointError`` naming the tensor and the problem, and the live objects and the checkpoint
folder are left exactly as they were. Every header safetensors' own ``load`` refuses is refused
here too (byte flips over a whole header), and what both accept loads the same tensors."""

from __future__ import annotations

import json
import re
import shutil
import struct
from pathlib import Path

import pytest
import torch
import xxhash

import resumable_data as rd
from resumable_data.checkpoint import tensor_file
from resumable_data.checkpoint.store import TENSORS_METADATA
from resumable_data.checkpoint.tensor_file import read_tensor_file
from tests.checkpoint.test_forgery import folder, rehash

DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
          torch.int8, torch.uint8, torch.bool, torch.float8_e4m3fn, torch.float8_e5m2, torch.complex64,
          torch.uint16, torch.uint32, torch.uint64]


class Holder:
    """A stateful object holding named tensors (rd.save_checkpoint / rd.load_checkpoint of any object)."""

    def __init__(self, tensors):
        self.sd = dict(tensors)

    def state_dict(self):
        return self.sd

    def load_state_dict(self, s):
        self.sd = {k: v.clone() for k, v in s.items()}


def _tensors(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = {}
    for i, dt in enumerate(DTYPES):
        raw = torch.randint(0, 256, (6 * 8 * (i % 3 + 1),), dtype=torch.uint8, generator=g)
        if dt == torch.bool:
            raw = raw % 2
        out[f"t{i}"] = raw.view(dt).reshape(2, -1) if dt.itemsize > 1 else raw.view(dt).reshape(3, -1)
    out["empty"] = torch.zeros(0, 4)
    out["scalar"] = torch.tensor(3.5)
    return out


def _bits(t: torch.Tensor) -> bytes:
    return t.contiguous().view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and _bits(a[k]) == _bits(b[k]) for k in a
    )


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tensorfile")
    return rd.save_checkpoint(tmp / "ckpt", Holder(_tensors()), step=1)


def _split(data: bytes) -> tuple[dict, bytes]:
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8 : 8 + n]), data[8 + n :]


def _join(header, body: bytes, *, raw_header: bytes | None = None) -> bytes:
    h = raw_header if raw_header is not None else json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + body


def _forged(saved: Path, dest: Path, data: bytes) -> Path:
    d = dest / saved.name
    shutil.copytree(saved, d)
    (d / "tensors.safetensors").write_bytes(data)
    rehash(d)
    return d


def _refused(step: Path, match: str, *, same_folder: bool = True) -> rd.CheckpointError:
    live = Holder({k: v.clone() for k, v in _tensors(seed=1).items()})
    before, files = {k: _bits(v) for k, v in live.sd.items()}, folder(step)
    with pytest.raises(rd.CheckpointError) as e:
        rd.load_checkpoint(step, live)
    assert {k: _bits(v) for k, v in live.sd.items()} == before and set(live.sd) == set(before)
    assert folder(step) == files or not same_folder
    assert match in str(e.value), str(e.value)
    assert "load another" in str(e.value)  # the fix
    return e.value


def test_the_reader_returns_what_safetensors_returns(saved):
    from safetensors.torch import load_file

    path = saved / "tensors.safetensors"
    data = path.read_bytes()
    got = read_tensor_file(path, len(data), xxhash.xxh3_128_hexdigest(data))
    assert got.problem is None and got.error is None and got.metadata == TENSORS_METADATA
    assert _equal(got.tensors, load_file(str(path)))
    assert _equal(got.tensors, _tensors())
    storages = {t.untyped_storage().data_ptr() for t in got.tensors.values() if t.numel()}
    assert len(storages) == sum(1 for t in got.tensors.values() if t.numel()), "each tensor has its own storage"
    holder = Holder({})
    rd.load_checkpoint(saved.parent, holder)
    assert _equal(holder.sd, _tensors())


def _entries(header, *, all_of_them=False):
    """The header's entries by offset (by default those with a dimension and bytes: the ones to forge)."""
    out = sorted(((k, v) for k, v in header.items() if k != "__metadata__"), key=lambda kv: kv[1]["data_offsets"])
    if all_of_them:
        return out
    return [(k, v) for k, v in out if v["shape"] and v["data_offsets"][1] > v["data_offsets"][0]]


def _overlap(h, body):
    (a, ea), (b, eb) = _entries(h)[:2]
    eb["data_offsets"] = [ea["data_offsets"][0], ea["data_offsets"][0] + eb["data_offsets"][1] - eb["data_offsets"][0]]
    return h, body


def _out_of_bounds(h, body):
    name, e = _entries(h)[-1]  # twice as long: it ends past the data section
    begin, end = e["data_offsets"]
    e["shape"] = [2 * e["shape"][0], *e["shape"][1:]] if e["shape"] else [2]
    e["data_offsets"] = [begin, begin + 2 * (end - begin)]
    return h, body


def _shape_mismatch(h, body):
    name, e = _entries(h)[0]
    e["shape"] = [e["shape"][0] + 1, *e["shape"][1:]]
    return h, body


def _dtype_mismatch(h, body):
    for name, e in _entries(h):
        if e["dtype"] == "F32":
            e["dtype"] = "F64"
            return h, body
    raise AssertionError("no F32 tensor")


def _gap(h, body):
    cut = _entries(h)[0][1]["data_offsets"][1]
    for name, e in _entries(h, all_of_them=True):
        if e["data_offsets"][0] >= cut:
            e["data_offsets"] = [e["data_offsets"][0] + 4, e["data_offsets"][1] + 4]
    return h, body[:cut] + b"\0" * 4 + body[cut:]  # 4 bytes no tensor names, after the first


def _trailing(h, body):
    return h, body + b"\0" * 8


def _unknown_dtype(h, body):
    _entries(h)[0][1]["dtype"] = "F6_E3M2"  # a name neither safetensors 0.8 nor rd knows
    return h, body


def _extra_key(h, body):
    _entries(h)[0][1]["note"] = 1
    return h, body


def _negative_dim(h, body):
    _entries(h)[0][1]["shape"] = [-1]
    return h, body


def _metadata_not_strings(h, body):
    h["__metadata__"] = {"format": 1}
    return h, body


FORGERIES = {
    "overlap": (_overlap, "overlaps the previous tensor"),
    "out_of_bounds": (_out_of_bounds, "tensors cover"),
    "shape_mismatch": (_shape_mismatch, "bytes (shape"),
    "dtype_mismatch": (_dtype_mismatch, "bytes (shape"),
    "gap": (_gap, "leaves a gap of 4 bytes"),
    "trailing_bytes": (_trailing, "tensors covering the data section exactly"),
    "unknown_dtype": (_unknown_dtype, "dtype"),
    "extra_key": (_extra_key, "exactly the keys"),
    "negative_dim": (_negative_dim, "a list of integers >= 0"),
    "metadata_not_strings": (_metadata_not_strings, "a map of strings to strings"),
}


@pytest.mark.parametrize("name", sorted(FORGERIES))
def test_a_forged_header_is_refused_and_changes_nothing(saved, tmp_path, name):
    forge, match = FORGERIES[name]
    header, body = _split((saved / "tensors.safetensors").read_bytes())
    header, body = forge(header, body)
    _refused(_forged(saved, tmp_path, _join(header, body)), match)


def test_a_repeated_name_is_refused(saved, tmp_path):
    """JSON keeps the last of two equal keys: the first tensor's bytes would have been read as a gap
    at best, or named by the second entry. Refused by name."""
    data = (saved / "tensors.safetensors").read_bytes()
    header, body = _split(data)
    (a, ea), (b, eb) = _entries(header)[:2]
    text = json.dumps(header).replace(json.dumps(b), json.dumps(a), 1)
    assert text.count(json.dumps(a)) == 2
    _refused(_forged(saved, tmp_path, _join(None, body, raw_header=text.encode())), "appears twice")


@pytest.mark.parametrize("length", [0, 1, 2**40, 2**63, 2**64 - 1])
def test_a_header_length_past_the_file_is_refused(saved, tmp_path, length):
    data = (saved / "tensors.safetensors").read_bytes()
    forged = struct.pack("<Q", length) + data[8:]
    _refused(_forged(saved, tmp_path, forged), "header")


def test_a_damaged_file_reports_the_marker_not_the_header(saved, tmp_path):
    """Bytes that differ from the marker are a marker mismatch, however the header reads."""
    d = tmp_path / saved.name
    shutil.copytree(saved, d)
    data = bytearray((d / "tensors.safetensors").read_bytes())
    data[9] ^= 0xFF  # the header's first bytes: unparsable, and not what the marker hashed
    (d / "tensors.safetensors").write_bytes(bytes(data))
    err = _refused(d, "content hash differs from the marker's")
    assert "header" not in str(err)


def test_a_file_rewritten_in_place_while_it_is_read_is_refused(saved, tmp_path, monkeypatch):
    """The reader hashes the bytes it puts in the tensors: a writer changing the file (same inode)
    after the header was read leaves tensors whose bytes are not the marker's: refused."""
    d = tmp_path / saved.name
    shutil.copytree(saved, d)
    path = d / "tensors.safetensors"
    real, done = tensor_file._tensor, []

    def rewrite_then_read(r, x):
        if not done:
            with open(path, "r+b") as f:
                f.seek(-1, 2)
                last = f.read(1)
                f.seek(-1, 2)
                f.write(bytes([last[0] ^ 0xFF]))
            done.append(x.name)
        return real(r, x)

    monkeypatch.setattr(tensor_file, "_tensor", rewrite_then_read)
    _refused(d, "content hash differs from the marker's", same_folder=False)  # the test's writer changed it
    assert done


def test_every_header_safetensors_refuses_is_refused(saved):
    """Byte flips over the whole header (each byte, two patterns): where safetensors' own load
    refuses, the reader refuses; where the reader accepts, the tensors are safetensors'."""
    from safetensors import SafetensorError
    from safetensors.torch import load

    data = (saved / "tensors.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    tmp = saved.parent.parent / "flips"
    tmp.mkdir(exist_ok=True)
    path = tmp / "tensors.safetensors"
    stats = {"both_refuse": 0, "rd_stricter": 0, "both_accept": 0}
    for i in range(8 + n):
        for x in (0x01, 0x20):
            v = data[:i] + bytes([data[i] ^ x]) + data[i + 1 :]
            path.write_bytes(v)
            got = read_tensor_file(path, len(v), xxhash.xxh3_128_hexdigest(v))
            assert got.problem is None, got.problem
            try:
                theirs = load(v)
            except (SafetensorError, ValueError, KeyError, RuntimeError):
                theirs = None
            if got.error is not None:
                stats["rd_stricter" if theirs is not None else "both_refuse"] += 1
            else:
                assert theirs is not None, f"byte {i} ^ {x:#x}: accepted by rd, refused by safetensors"
                assert _equal(got.tensors, theirs), f"byte {i} ^ {x:#x}"
                stats["both_accept"] += 1
    assert stats["both_refuse"] > 0 and stats["both_accept"] > 0, stats


def test_the_garbage_collector_is_left_as_it_was(saved, tmp_path):
    """The reader pauses the cyclic GC while it parses (module docs) and leaves it as it found it,
    after a refusal too."""
    import gc

    path = saved / "tensors.safetensors"
    data = path.read_bytes()
    bad = _forged(saved, tmp_path, _join(*_trailing(*_split(data)))) / "tensors.safetensors"
    was = gc.isenabled()
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            for p in (path, bad):
                b = p.read_bytes()
                read_tensor_file(p, len(b), xxhash.xxh3_128_hexdigest(b))
                assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


MX = {  # dtypes safetensors >= 0.6 writes that its torch loader (0.8) does not read back: rd does
    "e8m0": lambda raw: raw.view(torch.float8_e8m0fnu).reshape(4, -1),
    "f4": lambda raw: raw.view(torch.float4_e2m1fn_x2).reshape(4, -1),  # two 4-bit values a byte
    "f4_3d": lambda raw: raw.view(torch.float4_e2m1fn_x2).reshape(2, 2, -1),
    "f4_empty": lambda raw: torch.empty(0, 3, dtype=torch.float4_e2m1fn_x2),
    "e8m0_empty": lambda raw: torch.empty(0, dtype=torch.float8_e8m0fnu),
}


def test_mx_dtypes_save_and_load_bit_exactly(tmp_path):
    """A model with MX block scales (float8_e8m0fnu) or packed float4 weights saved, but its
    checkpoint was refused at load ('dtype F8_E8M0: expected one of ...'): a checkpoint that could
    never be resumed. safetensors writes F4 with its last dimension in 4-bit values (twice torch's)."""
    raw = torch.randint(0, 256, (48,), dtype=torch.uint8, generator=torch.Generator().manual_seed(5))
    saved = {k: make(raw.clone()) for k, make in MX.items()}
    step = rd.save_checkpoint(tmp_path / "ckpt", Holder(saved), step=1)
    header, _ = _split((step / "tensors.safetensors").read_bytes())
    assert header["f4"]["dtype"] == "F4" and header["f4"]["shape"] == [4, 24]  # safetensors' own layout
    assert header["e8m0"]["dtype"] == "F8_E8M0"
    live = Holder({k: torch.empty_like(v) for k, v in saved.items()})
    rd.load_checkpoint(step, live)
    assert _equal(live.sd, saved)


@pytest.mark.parametrize(
    "shape, match",
    [([4, 23], "a multiple of 2"), ([], "a multiple of 2"), ([4, 12], "bytes (shape"), ([4, 48], "bytes (shape")],
    ids=["odd last dimension", "scalar", "half the bytes", "twice the bytes"],
)
def test_a_forged_packed_shape_is_refused(tmp_path, shape, match):
    raw = torch.arange(48, dtype=torch.uint8)
    step = rd.save_checkpoint(tmp_path / "ckpt", Holder({"f4": MX["f4"](raw)}), step=1)
    header, body = _split((step / "tensors.safetensors").read_bytes())
    header["f4"]["shape"] = shape
    forged = tmp_path / "forged"
    forged.mkdir()
    d = _forged(step, forged, _join(header, body))
    live = Holder({"f4": MX["f4"](torch.zeros(48, dtype=torch.uint8))})
    with pytest.raises(rd.CheckpointError, match=re.escape(match)):
        rd.load_checkpoint(d, live)
    assert _bits(live.sd["f4"]) == bytes(48)  # nothing was loaded


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every entry under ``root`` by relative path: a file's bytes, None for a directory."""
    return {str(p.relative_to(root)): (None if p.is_dir() else p.read_bytes()) for p in sorted(root.rglob("*"))}


UNSAVEABLE = {
    "complex128": lambda: torch.ones(3, dtype=torch.complex128),
    "complex32": lambda: torch.ones(3, dtype=torch.complex64).to(torch.complex32),
    "qint8": lambda: torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.qint8),
    "bits8": lambda: torch.zeros(3, dtype=torch.uint8).view(torch.bits8),
    "sparse": lambda: torch.eye(3).to_sparse(),
    "meta": lambda: torch.empty(3, device="meta"),
    "float4 scalar": lambda: torch.zeros((), dtype=torch.uint8).view(torch.float4_e2m1fn_x2),
}


@pytest.mark.parametrize("name", sorted(UNSAVEABLE))
def test_a_tensor_the_file_cannot_hold_is_refused_before_anything_is_written(tmp_path, name):
    """complex128, quantized and bits dtypes raised safetensors' KeyError (not an rd error) out of the
    save and left its private temporary directory behind; a packed float4 scalar was reported as
    'expected room to write'. Now each is a CheckpointError naming the tensor, before anything is
    written: the folder, with its earlier checkpoint, is byte for byte what it was."""
    root = tmp_path / "ckpt"
    rd.save_checkpoint(root, Holder({"w": torch.arange(4.0)}), step=1)
    before = _tree(root)
    with pytest.raises(rd.CheckpointError, match=r"bad\.x") as e:
        rd.save_checkpoint(root, Holder({"w": torch.arange(4.0), "bad": {"x": UNSAVEABLE[name]()}}), step=2)
    assert "fix:" in str(e.value)
    assert _tree(root) == before
    live = Holder({"w": torch.zeros(4)})
    rd.load_checkpoint(root, live)
    assert torch.equal(live.sd["w"], torch.arange(4.0))
