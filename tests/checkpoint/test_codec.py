"""checkpoint/codec.py: a state tree to JSON plus tensors and back, never pickling."""

from __future__ import annotations

import json

import pytest
import torch

import resumable_data as rd
from resumable_data.checkpoint import codec


def test_codec_round_trip_and_refusals():
    tree = {"a": torch.arange(4), "t": (1, 2.5, float("inf")), "ints": {3: "x"}, "l": [True, None, "s"]}
    j, tensors = codec.encode(tree)
    json.dumps(j)
    back = codec.decode(json.loads(json.dumps(j)), tensors)
    assert torch.equal(back["a"], tree["a"]) and back["t"] == tree["t"] and back["ints"] == {3: "x"}
    w = torch.zeros(3)
    _, shared = codec.encode({"x": w, "y": w})
    assert shared["x"].data_ptr() != shared["y"].data_ptr()
    with pytest.raises(rd.CheckpointError, match=r"obj.*never pickles"):
        codec.encode({"obj": object()})
    with pytest.raises(rd.CheckpointError, match="tensor file"):
        codec.decode({"a": 1}, {"stray": torch.zeros(1)})


def _round_trip(tree):
    j, tensors = codec.encode(tree)
    return codec.decode(json.loads(json.dumps(j)), tensors), tensors


def _bits(t: torch.Tensor) -> list[int]:
    return t.contiguous().reshape(-1).view(torch.uint8).tolist()


def test_conjugate_and_negative_views_are_saved_as_their_values():
    z = torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64)
    tree = {"conj": z.conj(), "neg": z.conj().imag, "negview": torch._neg_view(torch.tensor([1.0, -2.0]))}
    back, _ = _round_trip(tree)
    assert _bits(back["conj"]) == _bits(torch.tensor([1 - 2j, 3 + 1j], dtype=torch.complex64))
    assert _bits(back["neg"]) == _bits(torch.tensor([-2.0, 1.0]))
    assert _bits(back["negview"]) == _bits(torch.tensor([-1.0, 2.0]))
    assert not back["conj"].is_conj() and not back["neg"].is_neg()


def test_tensors_whose_paths_coincide_keep_their_own_values():
    tree = {"a.b": torch.tensor([1.0]), "a": {"b": torch.tensor([2.0])}, "l": [torch.tensor([3.0])],
            "l.0": torch.tensor([4.0])}
    back, tensors = _round_trip(tree)
    assert sorted(tensors) == ["a.b", "a.b#1", "l.0", "l.0#1"]
    assert back["a.b"].tolist() == [1.0] and back["a"]["b"].tolist() == [2.0]
    assert back["l"][0].tolist() == [3.0] and back["l.0"].tolist() == [4.0]


def test_dense_views_keep_their_memory_order_and_other_views_are_stored_contiguous():
    x = torch.arange(120, dtype=torch.float32).reshape(2, 3, 4, 5)
    tree = {"cl": x.to(memory_format=torch.channels_last), "t": x[0, 0].t(), "slice": x[0, :, 1:3, ::2],
            "expanded": torch.tensor([1.0, 2.0]).reshape(2, 1).expand(2, 3)}
    back, tensors = _round_trip(tree)
    assert back["cl"].stride() == (60, 1, 15, 3) and torch.equal(back["cl"], tree["cl"])
    assert back["t"].stride() == (1, 5) and torch.equal(back["t"], tree["t"])
    assert back["slice"].stride() == (6, 3, 1) and torch.equal(back["slice"], tree["slice"])
    assert back["expanded"].stride() == (3, 1) and torch.equal(back["expanded"], tree["expanded"])
    assert all(t.is_contiguous() for t in tensors.values())  # what safetensors writes
    with pytest.raises(rd.CheckpointError, match="tensor reference"):  # an order that is not a permutation
        codec.decode({"t": {"__tensor__": "t", "order": [0, 0]}}, {"t": torch.zeros(2, 2)})


def test_numpy_values_come_back_as_the_same_numpy_type():
    np = pytest.importorskip("numpy")
    scalars = [np.float16(0.1), np.float32(0.1), np.float64(-0.0), np.int8(-5), np.int64(2**62), np.uint64(2**64 - 1),
               np.bool_(True), np.complex64(1 + 2j), np.complex128(0.1 - 3j), np.str_("tok")]
    arrays = [np.array(3.5, dtype=np.float32), np.arange(6, dtype=np.int16).reshape(2, 3),
              np.asfortranarray(np.arange(6.0).reshape(2, 3)), np.array([True, False])]
    back, _ = _round_trip({"s": scalars, "a": arrays})
    for x, y in zip(scalars, back["s"], strict=True):
        assert type(y) is type(x) and y.dtype == x.dtype and y.tobytes() == x.tobytes()
    for x, y in zip(arrays, back["a"], strict=True):
        assert type(y) is np.ndarray and (y.dtype, y.shape, y.strides) == (x.dtype, x.shape, x.strides)
        assert y.tobytes() == x.tobytes()


@pytest.mark.parametrize(
    "value",
    ["longdouble", ">f4", "object", "structured", "datetime64", "complex128 array"],
)
def test_numpy_values_that_cannot_come_back_exactly_are_refused_with_their_path(value):
    np = pytest.importorskip("numpy")
    x = {
        "longdouble": np.longdouble(1),
        ">f4": np.arange(3, dtype=">f4"),
        "object": np.array([1, "a"], dtype=object),
        "structured": np.zeros(2, dtype=[("a", "i4")]),
        "datetime64": np.datetime64("2020-01-01"),
        "complex128 array": np.zeros(2, dtype=np.complex128),
    }[value]
    with pytest.raises(rd.CheckpointError, match=r"cb\.x dtype=.*fix: convert it"):
        codec.encode({"cb": {"x": x}})


def test_enum_members_are_refused_not_turned_into_plain_values():
    import enum

    class Mode(enum.IntEnum):
        A = 1

    with pytest.raises(rd.CheckpointError, match=r"m='Mode.A \(an Enum member\)'.*x.value"):
        codec.encode({"m": Mode.A})


def test_forged_numpy_scalars_are_refused():
    for bad in (["int8", 300], ["float32", "x"], ["nope", 1], ["complex64", [1.0]], ["bool", 1]):
        with pytest.raises(rd.CheckpointError, match="NumPy scalar"):
            codec.decode({"x": {"__numpy__": bad}}, {})


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float8_e4m3fn, torch.float8_e8m0fnu, torch.complex64],
                         ids=str)
def test_a_forged_ndarray_reference_to_a_tensor_numpy_cannot_hold_is_refused(dtype):
    """A re-hashed state.json naming a bfloat16 (or float8) tensor as a NumPy array raised torch's
    TypeError ("unsupported ScalarType") out of the load; a complex64 one is what encode writes."""
    t = torch.zeros(2, dtype=torch.uint8).view(dtype) if dtype.itemsize == 1 else torch.zeros(2, dtype=dtype)
    if dtype == torch.complex64:
        assert codec.decode({"a": {"__ndarray__": "x"}}, {"x": t})["a"].dtype.name == "complex64"
        return
    with pytest.raises(rd.CheckpointError, match="NumPy array"):
        codec.decode({"a": {"__ndarray__": "x"}}, {"x": t})


@pytest.mark.parametrize("order", [["a", 0], [[1], 0], [1], [0, 0], [1.0, 0], [True, 0], "10"], ids=repr)
def test_a_forged_memory_order_is_refused(order):
    """``sorted`` of a forged order mixing strings or lists with ints raised TypeError out of the load."""
    with pytest.raises(rd.CheckpointError, match="tensor reference"):
        codec.decode({"a": {"__tensor__": "x", "order": order}}, {"x": torch.zeros(2, 3)})
