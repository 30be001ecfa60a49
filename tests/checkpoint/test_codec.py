"""checkpoint/codec.py: a state tree to JSON plus tensors and back, never pickling."""

from __future__ import annotations

import enum
import json
import types
from collections import Counter, OrderedDict, defaultdict, namedtuple

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import resumable_data as rd
from resumable_data.checkpoint import codec

MAX_DIGITS = codec.MAX_INT_DIGITS


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


# -- every kept type comes back as itself; every other one is refused at save ----------------------
def _same(a, b, where="x"):
    """``b`` is ``a``: the same type at every level (dict keys too), the same values (floats and
    complex by repr: nan, inf, -0.0), tensors by dtype, shape, strides, bytes, requires_grad."""
    assert type(a) is type(b), f"{where}: {type(a).__name__} came back as {type(b).__name__}"
    if isinstance(a, torch.Tensor):
        assert (a.dtype, a.shape, a.stride(), a.requires_grad) == (b.dtype, b.shape, b.stride(), b.requires_grad), where
        assert _bits(a.detach()) == _bits(b.detach()), where
    elif isinstance(a, dict):
        assert [(type(k), k) for k in a] == [(type(k), k) for k in b], where
        for k in a:
            _same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}.{i}")
    elif isinstance(a, (float, complex)):
        assert repr(a) == repr(b), where
    else:
        assert a == b, where


def _learnable():
    return torch.nn.Parameter(torch.arange(6.0).reshape(2, 3))


KEPT = {
    "torch.Size": torch.Size([2, 3]),
    "empty torch.Size": torch.Size([]),
    "OrderedDict": OrderedDict([("b", 1), ("a", torch.ones(2))]),
    "OrderedDict with int keys": OrderedDict([(10, "x"), (2, "y")]),
    "empty OrderedDict": OrderedDict(),
    "Counter": Counter({3: 1, 1: 2}),
    "Parameter": _learnable(),
    "frozen Parameter": torch.nn.Parameter(torch.ones(2), requires_grad=False),
    "integer Parameter": torch.nn.Parameter(torch.arange(3), requires_grad=False),
    "channels_last Parameter": torch.nn.Parameter(torch.ones(1, 2, 3, 3).to(memory_format=torch.channels_last)),
    "tensor requiring grad": torch.zeros(2, requires_grad=True),
    "tuple": (1, (2.5,), [3]),
    "list": [1, [2.5], (3,)],
    "bytes": b"\x00\xffab",
    "empty bytes": b"",
    "complex": complex(float("nan"), -0.0),
    "floats": [float("nan"), float("inf"), float("-inf"), -0.0, 5e-324],
    "ints past 64 bits": [2**64, -(2**200), 10**MAX_DIGITS - 1, -(10**MAX_DIGITS - 1)],
    "str": "é\x00",
}


@pytest.mark.parametrize("name", list(KEPT))
def test_kept_types_come_back_as_the_same_type_and_value(name):
    """Before: a torch.Size came back a tuple, an OrderedDict / Counter a dict, a Parameter a plain
    tensor that no longer required grad; bytes and complex were refused."""
    value = KEPT[name]
    tree = {"cb": {"x": value, "in": [{"deep": (value,)}]}, "int": {7: value}, "od": OrderedDict(v=value)}
    back, _ = _round_trip(tree)
    _same(tree, back)


def test_a_parameter_restored_by_assignment_keeps_getting_gradients():
    """A callback holding a learnable tensor and restoring it by assignment: it came back a plain
    tensor, so the next backward left its .grad None (training silently stopped updating it)."""
    back, _ = _round_trip({"w": _learnable()})
    w = back["w"]
    assert type(w) is torch.nn.Parameter and w.requires_grad and w.is_leaf
    (w * 2).sum().backward()
    assert w.grad is not None and torch.equal(w.grad, torch.full((2, 3), 2.0))


class _Str(str):
    pass


class _Int(int):
    pass


class _Float(float):
    pass


class _List(list):
    pass


class _Tuple(tuple):
    __slots__ = ()


class _Dict(dict):
    pass


class _ODict(OrderedDict):
    pass


class _Mode(enum.StrEnum):
    A = "a"


_Pair = namedtuple("_Pair", "a b")

# (value, what the message shows, what to store instead: the fix, how load_state_dict rebuilds it)
REFUSED = {
    "namedtuple": (_Pair(1, [2]), r"_Pair \(a namedtuple\)'.*fix: store x._asdict\(\)", lambda v: v._asdict(),
                   lambda d: _Pair(**d)),
    "defaultdict": (defaultdict(list, {"a": [1]}), r"defaultdict \(its default_factory, list, is code\)'.*"
                    r"fix: store dict\(x\) and rebuild collections.defaultdict\(list, d\)", dict,
                    lambda d: defaultdict(list, d)),
    "set": ({3, 1}, r"set \(a set\)'.*fix: store sorted\(x\)", sorted, set),
    "frozenset": (frozenset({"a", "b"}), r"frozenset \(a set\)'.*fix: store sorted\(x\)", sorted, frozenset),
    "bytearray": (bytearray(b"ab"), r"bytearray'.*fix: store bytes\(x\)", bytes, bytearray),
    "str subclass": (_Str("a"), r"_Str \(a subclass of str\)'.*fix: store str\(x\)", str, _Str),
    "int subclass": (_Int(3), r"_Int \(a subclass of int\)'.*fix: store int\(x\)", int, _Int),
    "float subclass": (_Float(0.5), r"_Float \(a subclass of float\)'.*fix: store float\(x\)", float, _Float),
    "list subclass": (_List([1]), r"_List \(a subclass of list\)'.*fix: store list\(x\)", list, _List),
    "tuple subclass": (_Tuple((1,)), r"_Tuple \(a subclass of tuple\)'.*fix: store tuple\(x\)", tuple, _Tuple),
    "dict subclass": (_Dict(a=1), r"_Dict \(a Mapping.*fix: store dict\(x\)", dict, _Dict),
    "OrderedDict subclass": (_ODict(a=1), r"_ODict \(a Mapping.*fix: store dict\(x\)", dict, _ODict),
    "mappingproxy": (types.MappingProxyType({"a": 1}), r"types.MappingProxyType \(a Mapping.*fix: store dict\(x\).*rebuild types.MappingProxyType\(d\)", dict,
                     types.MappingProxyType),
    "str Enum keys": ({_Mode.A: 1}, r"cb\.x keys=\['_Mode'\].*k.value", lambda d: {k.value: v for k, v in d.items()},
                      lambda d: {_Mode(k): v for k, v in d.items()}),
    "int past 640 digits": (10**MAX_DIGITS, r"an int of 2127 bits \(about 641 decimal digits\)'.*640 decimal digits.*fix: store it as a hex "
                            r"string \(hex\(x\)\)", hex, lambda s: int(s, 16)),
    "int key past 640 digits": ({-(10**700): 1}, r"cb\.x key='an int of 2326 bits \(about 701 decimal digits\)'.*hex\(x\)",
                                lambda d: {hex(k): v for k, v in d.items()}, lambda d: {int(k, 16): v for k, v in d.items()}),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_types_that_would_come_back_changed_are_refused_with_path_type_and_a_fix_that_works(name):
    """Before: a namedtuple came back a tuple, a defaultdict / dict subclass / mappingproxy a dict,
    a str / int / float / list subclass its base, a str Enum key a str; an int past 4300 digits was
    a ValueError from json while the files were written. Each is refused naming its path, its type
    and the fix, and the value stored as the fix says rebuilds into what was saved."""
    value, shown, fix, rebuild = REFUSED[name]
    with pytest.raises(rd.CheckpointError, match=shown if shown.startswith("cb") else r"cb\.x='" + shown):
        codec.encode({"cb": {"x": value}})
    back, _ = _round_trip({"cb": {"x": fix(value)}})
    rebuilt = rebuild(back["cb"]["x"])
    assert type(rebuilt) is type(value) and rebuilt == value


# -- forged tags ---------------------------------------------------------------------------------
FORGED = [
    {"__size__": "2"}, {"__size__": [1.5]}, {"__size__": [True]}, {"__size__": [2**64]}, {"__size__": [1], "x": 1},
    {"__odict__": [["a", 1]]}, {"__odict__": {"__tensor__": "t"}}, {"__odict__": {"__odict__": {}}},
    {"__odict__": {}, "__counter__": {}}, {"__counter__": 5}, {"__counter__": {"__tuple__": []}},
    {"__bytes__": "!!"}, {"__bytes__": 5}, {"__bytes__": "YQ"}, {"__bytes__": "YR=="}, {"__bytes__": "é"},
    {"__bytes__": "", "x": 1},
    {"__complex__": [1, 2]}, {"__complex__": [1.0]}, {"__complex__": "1+2j"}, {"__complex__": [1.0, "2"]},
    {"__tensor__": "t", "parameter": False}, {"__tensor__": "t", "requires_grad": 1},
    {"__tensor__": "t", "parameter": True, "x": 1}, {"__ndarray__": "t", "parameter": True},
    {"__ndarray__": "t", "requires_grad": True},
]


@pytest.mark.parametrize("node", FORGED, ids=repr)
def test_a_forged_tag_is_a_checkpoint_error(node):
    """A re-hashed state.json holding a tag no save writes: an rd.CheckpointError, never a raw
    TypeError / KeyError / ValueError / binascii.Error, and never a plain dict with a tag key."""
    ref = "__tensor__" in node or "__ndarray__" in node
    with pytest.raises(rd.CheckpointError, match=r"tensor reference=" if ref else r"cb\.x="):
        codec.decode({"cb": {"x": node}}, {"t": torch.zeros(2)} if "'t'" in str(node) else {})


def test_requires_grad_on_an_integer_tensor_is_a_checkpoint_error():
    for node in ({"__tensor__": "t", "requires_grad": True}, {"__tensor__": "t", "parameter": True,
                                                                "requires_grad": True}):
        with pytest.raises(rd.CheckpointError, match="requires_grad only on a floating-point"):
            codec.decode({"x": node}, {"t": torch.arange(2)})


V2_ONLY = [
    {"__size__": [2]}, {"__odict__": {}}, {"__counter__": {}}, {"__bytes__": ""}, {"__complex__": [1.0, 2.0]},
    {"__numpy__": ["int8", 1]}, {"__ndarray__": "t"}, {"__tensor__": "t", "order": [1, 0]},
    {"__tensor__": "t", "requires_grad": True}, {"__tensor__": "t", "parameter": True},
]


@pytest.mark.parametrize("node", V2_ONLY, ids=repr)
def test_a_version_1_checkpoint_holds_only_version_1_tags(node):
    """Version 2 added these tags; a version 1 file holding one was edited (an old-version marker
    over a new-version state): refused, where it decoded as if the version were 2."""
    tensors = {"t": torch.zeros(2, 2)} if "__tensor__" in node or "__ndarray__" in node else {}
    assert codec.decode({"x": node}, tensors, version=2) is not None
    with pytest.raises(rd.CheckpointError, match=r"x=.*schema version 1 checkpoint"):
        codec.decode({"x": node}, tensors, version=1)
    old = {"t": {"__tensor__": "t"}, "p": {"__tuple__": [1, {"__intkeys__": {"3": "x"}}]}, "d": {"a": None}}
    assert codec.decode(old, {"t": torch.zeros(2)}, version=1)["p"] == (1, {3: "x"})


# -- property: any tree of kept types round-trips exactly -----------------------------------------
def _tensor(values, kind):
    t = torch.tensor(values, dtype=torch.float32)
    if kind == "param":
        return torch.nn.Parameter(t)
    if kind == "frozen":
        return torch.nn.Parameter(t, requires_grad=False)
    return t.requires_grad_() if kind == "grad" else t


_keys = st.text(max_size=4).filter(lambda k: k not in codec._RESERVED)
_leaves = (
    st.none() | st.booleans() | st.integers(-(2**130), 2**130) | st.floats(allow_nan=True, allow_infinity=True)
    | st.complex_numbers(allow_nan=True, allow_infinity=True) | st.text(max_size=6) | st.binary(max_size=6)
    | st.builds(torch.Size, st.lists(st.integers(0, 9), max_size=3))
    | st.builds(_tensor, st.lists(st.floats(width=32), max_size=3), st.sampled_from(["plain", "grad", "param", "frozen"]))
)
_trees = st.recursive(
    _leaves,
    lambda kids: st.lists(kids, max_size=3) | st.lists(kids, max_size=3).map(tuple)
    | st.dictionaries(_keys, kids, max_size=3) | st.dictionaries(st.integers(-50, 50), kids, max_size=3)
    | st.dictionaries(_keys, kids, max_size=3).map(OrderedDict)
    | st.dictionaries(st.integers(-50, 50), kids, max_size=3).map(OrderedDict)
    | st.dictionaries(_keys, kids, max_size=3).map(Counter),
    max_leaves=12,
)


@settings(derandomize=True, max_examples=200, deadline=None)
@given(_trees)
def test_any_tree_of_kept_types_round_trips_type_for_type(tree):
    back, _ = _round_trip({"cb": tree})
    _same({"cb": tree}, back)
