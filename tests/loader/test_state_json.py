"""A state must be plain JSON data: every non-JSON value, at every depth of a real state, is refused
with an rd error naming its path, and the refused load changes nothing.

``load_state_dict`` checks purity with one exact type walk (``resumable_data._schema.check_json``)
in place of a ``json.dumps`` round: these tests are what shows the walk refuses everything the
serializer refused (sets, bytes, objects, cycles, deep nesting, non-string-able keys) and more
(NaN, infinities, tuples, subclasses and numpy scalars, non-str keys), and that the field readers
behind it still refuse a bool where an integer is expected (and the reverse).
"""

from __future__ import annotations

import copy
import enum
import json
from types import MappingProxyType

import numpy as np
import pytest

import resumable_data as rd
from resumable_data._schema import MAX_JSON_DEPTH, check_json
from tests.loader.conftest import json_paths
from tests.mixture_data import WEIGHTS, open_sources, write_sources


class _Str(str):
    pass


class _Int(int):
    pass


class _Color(enum.IntEnum):
    RED = 1


def _deep(depth: int) -> list:
    out: list = []
    for _ in range(depth):
        out = [out]
    return out


def _cycle() -> list:
    a: list = []
    a.append(a)
    return a


#: Values JSON does not hold, each given the value it replaces (None for the whole state).
NOT_JSON = {
    "nan": lambda v: float("nan"),
    "inf": lambda v: float("inf"),
    "-inf": lambda v: float("-inf"),
    "tuple": lambda v: tuple(v) if isinstance(v, list) else (v,),
    "set": lambda v: {1, 2},
    "frozenset": lambda v: frozenset(),
    "bytes": lambda v: b"\x80\x04K\x01.",
    "bytearray": lambda v: bytearray(b"x"),
    "object": lambda v: object(),
    "str subclass": lambda v: _Str(v if isinstance(v, str) else "x"),
    "str enum member": lambda v: rd.Tail.PARTIAL,
    "int subclass": lambda v: _Int(v if type(v) is int else 1),
    "int enum member": lambda v: _Color.RED,
    "numpy int64": lambda v: np.int64(v if type(v) is int else 1),
    "numpy float64": lambda v: np.float64(0.5),
    "int key": lambda v: {1: v},
    "None key": lambda v: {None: v},
    "tuple key": lambda v: {("a",): v},
    "mapping proxy": lambda v: MappingProxyType(v if isinstance(v, dict) else {}),
    "deep nesting": lambda v: _deep(MAX_JSON_DEPTH + 5),
    "a cycle": lambda v: _cycle(),
}


def rendered(path: tuple) -> str:
    """A path as the refusal names it: ``state.plan.seed``, ``state.skipped[0][2]``."""
    out = "state"
    for k in path:
        out += (f".{k}" if k.isidentifier() else f"[{k!r}]") if isinstance(k, str) else f"[{k}]"
    return out


def replaced(state: dict, path: tuple, value) -> object:
    if not path:
        return value
    bad = copy.deepcopy(state)
    target = bad
    for k in path[:-1]:
        target = target[k]
    target[path[-1]] = value
    return bad


def _plain(shards, tmp_path):
    ld = rd.DataLoader(shards, batch_size=8, shuffle=True, seed=5, commit="explicit", accumulation_steps=2)
    it = iter(ld)
    for _ in range(6):
        next(it)
        if ld.microstep_is_last:
            ld.commit()
    ld.skip_steps(100, 104, "bad region")
    return ld, ld.state_dict(), lambda: rd.DataLoader(shards, batch_size=8, shuffle=True, seed=5, commit="explicit",
                                                      accumulation_steps=2)


def _mixture(shards, tmp_path):
    mix = rd.Mixture(open_sources(write_sources(tmp_path)), weights=WEIGHTS, block_size=16)

    def make():
        return rd.DataLoader(mix, batch_size=4, seed=3, token_column="tokens")

    ld = make()
    it = iter(ld)
    for _ in range(7):
        next(it)
    return ld, ld.state_dict(), make


def _continuous(shards, tmp_path):
    def make():
        return rd.DataLoader(shards, batch_size=rd.BatchSteps([(0, 4), (3, 8)]), shuffle=True, seed=2)

    ld = make()
    it = iter(ld)
    for _ in range(5):
        next(it)
    return ld, ld.state_dict(), make


KINDS = {"plain": _plain, "mixture with tokens": _mixture, "batch schedule (schema 3)": _continuous}


@pytest.fixture(params=sorted(KINDS))
def written(request, shards, tmp_path):
    ld, state, make = KINDS[request.param](shards, tmp_path)
    target = make()  # a fresh loader the refusals are tried on, moved to a known place first
    target.load_state_dict(copy.deepcopy(state), on_uncommitted="repeat")
    return request.param, state, target


def test_every_state_the_loaders_write_is_plain_json_and_loads_as_written(written):
    """The walk is stricter than json.dumps: what the package writes (the dict itself, no JSON
    round trip) passes it and loads; its JSON text reads back to the same state."""
    _, state, target = written
    check_json(state, "state")
    before = target.snapshot().to_dict()
    target.load_state_dict(state, on_uncommitted="repeat")
    assert target.snapshot().to_dict() == before
    assert json.loads(json.dumps(state)) == state


@pytest.mark.parametrize("kind", sorted(NOT_JSON))
def test_a_non_json_value_at_every_path_is_refused_by_name_and_changes_nothing(written, kind):
    name, state, target = written
    before, cursor = target.snapshot().to_dict(), target.cursor
    paths = list(json_paths(state))
    assert len(paths) > 40  # every depth of a real state: root, sections, lists, leaves
    for path in paths:
        bad = replaced(state, path, NOT_JSON[kind](_at(state, path)))
        with pytest.raises(rd.ResumeError) as e:
            target.load_state_dict(bad, on_uncommitted="repeat")
        assert rendered(path) in str(e.value), (name, kind, path, str(e.value))
        assert "expected plain JSON data" in str(e.value) and "fix:" in str(e.value)
    assert target.snapshot().to_dict() == before and target.cursor == cursor


def _at(state, path):
    for k in path:
        state = state[k]
    return state


def test_an_integer_past_the_digit_limit_of_str_at_every_int_path_is_an_rd_error(written):
    """10**5000 (over Python's 4,300-digit limit of str(), so repr() raises ValueError): a plain int,
    so the walk passes it; every int field must still refuse it with an rd error that names it."""
    name, state, target = written
    before = target.snapshot().to_dict()
    tried = 0
    for path in json_paths(state):
        if type(_at(state, path)) is not int:
            continue
        tried += 1
        with pytest.raises(rd.ResumeError) as e:
            target.load_state_dict(replaced(state, path, 10**5000), on_uncommitted="repeat")
        if path[-1] != "schema_version":  # an unknown section schema is refused by its keys first
            assert "an integer of 16610 bits" in str(e.value), (name, path, str(e.value))
    assert tried >= 10
    assert target.snapshot().to_dict() == before


@pytest.mark.parametrize("swap", ["bool for int", "int for bool", "float for int"])
def test_a_json_value_of_the_wrong_type_is_refused_by_the_field_readers(written, swap):
    """Plain JSON, so the walk passes it: the readers must refuse a bool where an integer is
    expected (True == 1 in Python), an integer where a bool is, and 1.0 where an integer is."""
    name, state, target = written
    before = target.snapshot().to_dict()
    tried = 0
    for path in json_paths(state):
        v = _at(state, path)
        if swap == "bool for int" and type(v) is int:
            new = True
        elif swap == "int for bool" and type(v) is bool:
            new = int(v)
        elif swap == "float for int" and type(v) is int:
            new = float(v)
        else:
            continue
        tried += 1
        with pytest.raises(rd.ResumeError) as e:
            target.load_state_dict(replaced(state, path, new), on_uncommitted="repeat")
        leaf = path[-1]
        assert (str(leaf) if isinstance(leaf, str) else f"[{leaf}]") in str(e.value), (name, swap, path, str(e.value))
    assert tried >= 3
    assert target.snapshot().to_dict() == before


def test_weights_of_a_saved_mixture_section_are_checked_even_when_they_equal_the_current_ones(shards, tmp_path):
    """``True == 1``: a bool weight equal to the current weight used to pass the section check."""
    mix = rd.Mixture(open_sources(write_sources(tmp_path)), weights={"web": 1, "code": 1, "math": 1}, block_size=16)
    ld = rd.DataLoader(mix, batch_size=4, seed=3)
    next(iter(ld))
    state = ld.state_dict()
    assert state["mixture"]["schedule"] == [[0, [1, 1, 1]]]
    bad = replaced(state, ("mixture", "schedule", 0, 1, 2), True)
    with pytest.raises(rd.ResumeError, match=r"state\.mixture\.schedule\[0\]\[1\]\[2\]=True: expected a finite number"):
        rd.DataLoader(mix, batch_size=4, seed=3).load_state_dict(bad)
