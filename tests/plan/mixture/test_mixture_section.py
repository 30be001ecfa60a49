"""``MixtureSection``: the typed mixture section of a loader state (plan/mixture/section.py)."""

from __future__ import annotations

import json

import pytest

import resumable_data as rd
from resumable_data.plan.mixture.section import EarlierRun, MixtureSection, PackedRebase, Rebase

BASE = {"schema_version": 1, "sources": ["a", "b"], "sizes": [3, 5], "schedule": [[0, [1, 2.0]], [7, [0.5, 0]]],
        "block": 8, "shuffle": False, "rebase": None}


def test_weights_keep_their_json_type_and_the_keys_their_order():
    section = MixtureSection.from_dict(BASE)
    assert section.schedule == ((0, (1, 2.0)), (7, (0.5, 0)))
    assert json.dumps(section.to_dict()) == json.dumps(BASE)  # 1 stays 1, 2.0 stays 2.0
    assert section.segments == ((0, {"a": 1, "b": 2.0}), (7, {"a": 0.5, "b": 0}))


def test_the_schema_version_follows_from_the_keys():
    tokens = {**BASE, "schema_version": 2, "tokens": [4, 0], "tokens_base": 0}
    section = MixtureSection.from_dict(tokens)
    assert section.schema_version == 2 and section.tokens_base == 0  # present, even at 0: written back
    assert section.to_dict() == tokens
    assert section.without_tokens().to_dict() == BASE
    rebased = {**BASE, "schedule": [[0, [1, 1]]], "rebase": [4, [1, 3]]}
    earlier = {**rebased, "schema_version": 3, "earlier": [[0, [0, 0], [1, 2]]]}
    section = MixtureSection.from_dict(earlier)
    assert section.schema_version == 3 and section.earlier == (EarlierRun(0, (0, 0), (1, 2)),)
    assert section.to_dict() == earlier
    assert section.without_tokens() == section


def test_a_packed_rebase_without_earlier_runs_is_a_plain_rebase():
    section = MixtureSection(("a",), (3,), ((0, (1,)),), 8, True, PackedRebase(2, (2,), ()))
    assert type(section.rebase) is Rebase and section.schema_version == 1
    assert section == MixtureSection.from_dict(section.to_dict())


@pytest.mark.parametrize(
    "key, value, match",
    [
        ("schema_version", 2, r"state\.mixture=.*keys missing \['tokens'\]"),
        ("sizes", [3], r"state\.mixture\.sizes=\[3\]: expected one size per distinct source name"),
        ("shuffle", 1, r"state\.mixture\.shuffle=1: expected true or false"),
        ("rebase", [1, [0, 0]], r"state\.mixture\.rebase=.*counts summing to the position"),
    ],
)
def test_a_malformed_section_names_the_field(key, value, match):
    with pytest.raises(rd.ResumeError, match=match):
        MixtureSection.from_dict({**BASE, key: value})
