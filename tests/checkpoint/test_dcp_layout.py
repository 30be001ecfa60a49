"""The DCP layout's schema version (checkpoint/dcp_layout.py): version 2 states carry the codec's
tags (``torch.Size``, ``OrderedDict``, NumPy values, ...); version 1 states, written before those
tags existed, still load; a version 1 state holding a version 2 tag, a state whose two headers
disagree, and a newer version are refused with an ``rd.CheckpointError`` (DCP has no marker file:
the state's own version is what tells an older reader to refuse it)."""

from __future__ import annotations

import copy
import json
from collections import OrderedDict

import pytest
import torch

import resumable_data as rd
from resumable_data.checkpoint.keys import STATE_SCHEMA_VERSION


class _Holder:
    def __init__(self, s):
        self.s = s

    def state_dict(self):
        return self.s

    def load_state_dict(self, s):
        self.s = s


def _state(value):
    torch.manual_seed(0)
    return rd.TrainingState(model=torch.nn.Linear(2, 2), callbacks={"cb": _Holder(value)})


def _at_version(sd, outer, inner):
    sd = copy.copy(sd)
    tree = json.loads(sd["json"])
    tree["schema_version"] = inner
    sd["json"], sd["schema_version"] = json.dumps(tree), outer
    return sd


def test_a_version_2_state_round_trips_its_tags():
    held = OrderedDict([("shape", torch.Size([3, 4])), ("n", 5)])
    sd = _state(held).state_dict()
    assert sd["schema_version"] == STATE_SCHEMA_VERSION == 2 and "__size__" in sd["json"]
    target = _state({})
    target.load_state_dict(sd)
    got = target.callbacks["cb"].s
    assert type(got) is OrderedDict and type(got["shape"]) is torch.Size and got == held


def test_a_version_1_state_without_tags_still_loads():
    held = {"n": 5, "lr": [0.1, 0.2]}
    sd = _at_version(_state(held).state_dict(), 1, 1)
    target = _state({})
    target.load_state_dict(sd)
    assert target.callbacks["cb"].s == held and type(target.callbacks["cb"].s) is dict


@pytest.mark.parametrize(
    "value, tag",
    [(torch.Size([2]), "__size__"), (OrderedDict(a=1), "__odict__"), (b"\x00\x01", "__bytes__")],
    ids=["size", "odict", "bytes"],
)
def test_a_version_1_state_holding_a_version_2_tag_is_refused(value, tag):
    sd = _state({"v": value}).state_dict()
    assert tag in sd["json"]
    target = _state({"v": None})
    before = copy.deepcopy(target.callbacks["cb"].s)
    weight = target.model.weight.detach().clone()
    with pytest.raises(rd.CheckpointError, match="version"):
        target.load_state_dict(_at_version(sd, 1, 1))
    assert target.callbacks["cb"].s == before and torch.equal(target.model.weight, weight)  # nothing changed


@pytest.mark.parametrize("outer, inner", [(2, 1), (1, 2)])
def test_headers_that_disagree_are_refused(outer, inner):
    sd = _at_version(_state({"n": 1}).state_dict(), outer, inner)
    with pytest.raises(rd.CheckpointError, match=r"state.json\['schema_version'\]"):
        _state({}).load_state_dict(sd)


def test_a_newer_version_is_refused_by_its_version():
    sd = _at_version(_state({"n": 1}).state_dict(), 3, 3)
    with pytest.raises(rd.CheckpointError, match=r"schema_version'\]=3.*saved 3 vs current 2.*fix: load it with"):
        _state({}).load_state_dict(sd)
