"""A packing spec checked against its token column (loader/packing_check.py): eos_id and pad_id must fit the
token column's dtype, and overlong='error' refuses long documents in both modes, at construction (issue 30, item 3)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import resumable_data as rd


@pytest.fixture(scope="module")
def narrow(tmp_path_factory):
    """Two token dtypes narrower than int64: int16 and uint16 (a small vocabulary's ids)."""
    out = {}
    for name, typ in (("int16", pa.int16()), ("uint16", pa.uint16())):
        d = tmp_path_factory.mktemp(name)
        tokens = [[1, 2, 3], [4, 5, 6, 7, 8], [9], [10, 11]] * 5
        rd.write_arrow_shards(pa.table({"tokens": pa.array(tokens, type=pa.list_(typ))}), d, num_shards=2)
        rd.pin(d)
        out[name] = rd.ArrowShards(d)
    return out


@pytest.mark.parametrize("field", ["eos_id", "pad_id"])
@pytest.mark.parametrize("mode", ["concat", "best_fit"])
@pytest.mark.parametrize("dtype,value", [("int16", 2 ** 15), ("int16", -(2 ** 15) - 1), ("int16", 2 ** 40),
                                         ("uint16", -1), ("uint16", 2 ** 16)])
def test_packing_ids_must_fit_the_token_dtype(narrow, field, mode, dtype, value):
    spec = rd.Packing(8, mode=mode, **{field: value})
    with pytest.raises(rd.ConfigError, match=f"Packing.{field}={value}.*{dtype}"):
        rd.DataLoader(narrow[dtype], packing=spec, batch_size=2)


@pytest.mark.parametrize("field", ["eos_id", "pad_id"])
def test_packing_ids_over_int32_tokens(shards, field):
    """The issue's case: eos_id=2**40 over int32 tokens was delivered as 0."""
    with pytest.raises(rd.ConfigError, match=f"Packing.{field}=1099511627776.*int32"):
        rd.DataLoader(shards, packing=rd.Packing(8, **{field: 2 ** 40}), batch_size=2)


@pytest.mark.parametrize("dtype,eos,pad", [("int16", 2 ** 15 - 1, -(2 ** 15)), ("uint16", 2 ** 16 - 1, 0)])
def test_packing_ids_at_the_dtype_bounds_are_delivered_exactly(narrow, dtype, eos, pad):
    loader = rd.DataLoader(narrow[dtype], packing=rd.Packing(8, eos_id=eos, pad_id=pad), batch_size=1)
    ids = np.concatenate([b["input_ids"].numpy().ravel() for b in loader])
    assert (ids == eos).sum() == len(narrow[dtype])  # one EOS per document, none wrapped
    assert (ids == pad).sum() > 0  # the last window's sequence is padded with pad_id itself


def test_overlong_error_in_concat_mode_refuses_long_documents(shards):
    """docs/packing.md: documents longer than seq_len with overlong='error' are refused (concat too)."""
    longest = int(shards.column_lengths("tokens").max())
    with pytest.raises(rd.ConfigError, match="overlong='error'.*no document longer than seq_len"):
        rd.DataLoader(shards, packing=rd.Packing(longest - 1, mode="concat", overlong="error"), batch_size=2)
    rd.DataLoader(shards, packing=rd.Packing(longest, mode="concat", overlong="error"), batch_size=2)
    rd.DataLoader(shards, packing=rd.Packing(longest - 1, mode="concat"), batch_size=2)  # split: accepted
