"""The shared construction-time coercion helper."""

import pytest

import resumable_data as rd
from resumable_data._schema import coerce_enum


def test_coerce_enum_accepts_members_and_values_and_names_the_parameter():
    assert coerce_enum("strided", rd.ShardingPolicy, "policy") is rd.ShardingPolicy.STRIDED
    assert coerce_enum(rd.ShardingPolicy.CONTIGUOUS, rd.ShardingPolicy, "policy") is rd.ShardingPolicy.CONTIGUOUS
    with pytest.raises(rd.ConfigError, match=r"^policy='diagonal': expected one of \['contiguous', 'strided'\]"):
        coerce_enum("diagonal", rd.ShardingPolicy, "policy")
    with pytest.raises(rd.ConfigError, match=r"^tail=\[1\]: expected one of"):
        coerce_enum([1], rd.Tail, "tail")  # unhashable: still a ConfigError, not a TypeError
