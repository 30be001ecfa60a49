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


def _one_row(tmp_path, tokens, typ):
    rd.write_arrow_shards(pa.table({"tokens": pa.array(tokens, type=pa.list_(typ))}), tmp_path, num_shards=1)
    rd.pin(tmp_path)
    return rd.ArrowShards(tmp_path)


@pytest.mark.parametrize("mode", ["concat", "best_fit"])
def test_null_token_ids_are_refused_not_delivered_as_garbage(tmp_path, mode):
    """A null inside a token list became -2**63 in input_ids (a NaN cast), silently."""
    src = _one_row(tmp_path, [[3, 4, 5], [1, None, 2]], pa.int32())
    with pytest.raises(rd.ConfigError, match=r"Packing.tokens='tokens'.*no null.*1 null token id.*record id 1"):
        list(rd.DataLoader(src, packing=rd.Packing(4, mode=mode), batch_size=2))


def test_uint64_token_ids_over_int64_are_refused_not_wrapped(tmp_path):
    """input_ids are int64: a uint64 id of 2**63 or more wrapped to a negative id, silently."""
    src = _one_row(tmp_path, [[2 ** 63 + 5, 3], [4]], pa.uint64())
    with pytest.raises(rd.ConfigError, match=r"Packing.tokens='tokens'.*at most 2\*\*63-1.*9223372036854775813.*record id 0"):
        list(rd.DataLoader(src, packing=rd.Packing(4), batch_size=1))
    ok = _one_row(tmp_path / "ok", [[2 ** 63 - 1, 3], [4]], pa.uint64())
    batches = list(rd.DataLoader(ok, packing=rd.Packing(4), batch_size=1))
    assert batches[0]["input_ids"].tolist() == [[2 ** 63 - 1, 3, 4, 0]]


@pytest.mark.parametrize("typ", [pa.int16(), pa.int32(), pa.int64()])
@pytest.mark.parametrize("workers", [0, 2])
def test_negative_token_ids_are_refused_not_read_as_the_ignore_marker(tmp_path, typ, workers):
    """A token id of -100 was delivered in input_ids and, in labels, read as the ignore marker:
    the loss silently skipped a real token. Every negative id is refused at the batch reading it."""
    src = _one_row(tmp_path, [[3, 4, 5], [6], [7, -100, 2]], typ)
    with pytest.raises(rd.ConfigError, match=r"Packing.tokens='tokens'.*at least 0.*token id -100.*record id 2"):
        list(rd.DataLoader(src, packing=rd.Packing(4), batch_size=1, num_workers=workers))
    ok = _one_row(tmp_path / "ok", [[3, 4, 5], [6], [7, 0, 2]], typ)
    ids = [b["input_ids"].tolist() for b in rd.DataLoader(ok, packing=rd.Packing(4, eos_id=1), batch_size=1)]
    assert ids == [[[3, 4, 5, 1]], [[6, 1, 7, 0]], [[2, 1, 0, 0]]]


def test_a_repeated_document_in_a_packed_mixture_is_its_own_attention_segment(tmp_path):
    """An oversampled one-record source: its copies sit back to back with one record id. Each copy is
    a document: labels masked at the seam and cu_seqlens cut there (attention must not span copies)."""
    one = _one_row(tmp_path / "one", [[11, 12, 13]], pa.int32())
    mix = rd.Mixture({"one": one}, weights={"one": 1.0}, block_size=4, epoch_len=4)
    batch = next(iter(rd.DataLoader(mix, packing=rd.Packing(8), batch_size=1, seed=1)))
    assert batch["input_ids"].tolist() == [[11, 12, 13, 11, 12, 13, 11, 12]]
    assert batch["labels"].tolist() == [[12, 13, -100, 12, 13, -100, 12, 13]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 1, 2, 0, 1]]
    assert batch["cu_seqlens"].tolist() == [0, 3, 6, 8]
    assert batch["max_seqlen"] == 3
