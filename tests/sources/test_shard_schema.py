"""resumable_data.sources.shard_schema: the canonical schema text and the checks opening runs on it."""

from __future__ import annotations

import pyarrow as pa
import pytest

import resumable_data as rd
from resumable_data.sources.shard_schema import canonical_schema, check_same_schema


def test_canonical_schema_ignores_metadata_but_not_types_or_nullability():
    base = pa.schema([pa.field("x", pa.int64()), pa.field("y", pa.list_(pa.string()))])
    tagged = base.with_metadata({"huggingface": "{}"}).set(0, base.field(0).with_metadata({"k": "v"}))
    assert canonical_schema(tagged) == canonical_schema(base)
    assert canonical_schema(base) != canonical_schema(base.set(0, pa.field("x", pa.int32())))
    assert canonical_schema(base) != canonical_schema(base.set(0, pa.field("x", pa.int64(), nullable=False)))


def test_check_same_schema_names_the_shard_and_both_schemas():
    check_same_schema("a.arrow", "x: int64", "b.arrow", "x: int64")
    with pytest.raises(rd.ConfigError) as exc:
        check_same_schema("a.arrow", "x: int64", "b.arrow", "x: int32")
    assert "b.arrow" in str(exc.value) and "x: int32" in str(exc.value) and "x: int64" in str(exc.value)

