"""The shared schema readers: construction-time coercion, the JSON purity walk, the field readers."""

import enum
import json

import numpy as np
import pytest

import resumable_data as rd
from resumable_data._schema import MAX_JSON_DEPTH, check_json, coerce_enum, expect_enum, field_enum, field_int, field_str


def test_coerce_enum_accepts_members_and_values_and_names_the_parameter():
    assert coerce_enum("strided", rd.ShardingPolicy, "policy") is rd.ShardingPolicy.STRIDED
    assert coerce_enum(rd.ShardingPolicy.CONTIGUOUS, rd.ShardingPolicy, "policy") is rd.ShardingPolicy.CONTIGUOUS
    with pytest.raises(rd.ConfigError, match=r"^policy='diagonal': expected one of \['contiguous', 'strided'\]"):
        coerce_enum("diagonal", rd.ShardingPolicy, "policy")
    with pytest.raises(rd.ConfigError, match=r"^tail=\[1\]: expected one of"):
        coerce_enum([1], rd.Tail, "tail")  # unhashable: still a ConfigError, not a TypeError


# -- check_json: the purity walk a loader state passes before any field is read ----------------------

def _nest(depth: int) -> list:
    out: list = []
    for _ in range(depth):
        out = [out]
    return out


def _refused(value) -> str:
    with pytest.raises(rd.ResumeError) as e:
        check_json(value, "state")
    return str(e.value)


@pytest.mark.parametrize("value", [
    None, True, 0, -(2**70), 2**70, 0.5, -0.0, 1e308, "", "é", [], {}, {"a": [1, {"b": [None, False, "x", 2.5]}]},
    _nest(MAX_JSON_DEPTH),
])
def test_check_json_accepts_what_json_loads_returns(value):
    check_json(value, "state")
    assert json.loads(json.dumps(value)) == value


class _Str(str):
    pass


class _E(str, enum.Enum):
    A = "a"


@pytest.mark.parametrize("value, where", [
    ({"a": float("nan")}, "state.a=nan"), ({"a": [1, float("inf")]}, "state.a[1]=inf"),
    ({"a": (1, 2)}, "state.a='tuple'"), ({"a": _Str("x")}, "state.a='_Str'"), ({"a": _E.A}, "state.a='_E'"),
    ({"a": np.float64(0.5)}, "state.a='float64'"), ({"a": {1: 2}}, "state.a=1"), ({"a": {None: 2}}, "state.a=None"),
    ({"a": {True: 2}}, "state.a=True"), ({"a": {1.5: 2}}, "state.a=1.5"), ({"x y": {"z": -float("inf")}}, "state['x y'].z=-inf"),
])
def test_check_json_refuses_what_json_dumps_lets_through(value, where):
    json.dumps(value)  # the serializer takes it (NaN, tuples, subclasses, keys it turns into strings)
    msg = _refused(value)
    assert msg.startswith(where + ": expected plain JSON data"), msg
    assert "fix: pass state_dict()'s output" in msg


def _cycle() -> dict:
    d: dict = {}
    d["self"] = d
    return d


@pytest.mark.parametrize("value, where", [
    ({"a": {1, 2}}, "state.a='set'"), ({"a": b"\x80"}, "state.a='bytes'"), ({"a": [0, object()]}, "state.a[1]='object'"),
    ({"a": {("t",): 1}}, "state.a='tuple'"), ({"a": _nest(10**5)}, "state.a[0]"), (_cycle(), "state.self.self"),
])
def test_check_json_refuses_all_json_dumps_refuses(value, where):
    with pytest.raises((TypeError, ValueError, RecursionError)):
        json.dumps(value)
    assert _refused(value).startswith(where)


def test_check_json_names_the_depth_limit_and_the_error_class():
    msg = _refused([_nest(MAX_JSON_DEPTH)])
    assert f"found nesting deeper than {MAX_JSON_DEPTH}" in msg
    with pytest.raises(rd.ConfigError):
        check_json({"a": b""}, "data", error=rd.ConfigError)


def test_the_field_readers_accept_and_refuse_what_the_expect_readers_do():
    d = {"n": 5, "s": "abc", "t": "partial", "b": True, "f": 5.0, "big": 2**64, "sub": _Str("partial")}
    assert field_int(d, "n", "x", 0, 10) == 5 and field_str(d, "s", "x", max_len=3) == "abc"
    assert field_enum(d, "t", rd.Tail, "x") is rd.Tail.PARTIAL and field_enum(d, "sub", rd.Tail, "x") is rd.Tail.PARTIAL
    for key, match in (("b", r"^x\.b=True: expected an integer"), ("f", r"^x\.f=5\.0: expected an integer"),
                       ("big", r"^x\.big=18446744073709551616: expected an integer in \[0, 9223372036854775807\]")):
        with pytest.raises(rd.ResumeError, match=match):
            field_int(d, key, "x")
    with pytest.raises(rd.ResumeError, match=r"^x\.s='abc': expected a string of at most 2 characters"):
        field_str(d, "s", "x", max_len=2)
    with pytest.raises(rd.ResumeError, match=r"^x\.s='abc': expected one of \['drop'"):
        field_enum(d, "s", rd.Tail, "x")


def test_expect_enum_finds_members_by_value_member_or_equal_str_as_the_enum_call_does():
    for value in ("strided", rd.ShardingPolicy.STRIDED, _Str("strided")):
        assert expect_enum(value, rd.ShardingPolicy, "p") is rd.ShardingPolicy(value)
    for bad in ([1], {"a": 1}, 1, None, "STRIDED"):
        with pytest.raises(rd.ResumeError, match=r"^p="):
            expect_enum(bad, rd.ShardingPolicy, "p")
