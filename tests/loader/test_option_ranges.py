"""Every integer option that ends up in a fixed-width integer (a token dtype, int64 positions, a
queue timeout, torch's prefetch loop) is range-checked at construction with an ``rd.ConfigError``:
none is wrapped, truncated or left to raise a foreign error at the first batch (issue 30, items 3, 7)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import resumable_data as rd
from resumable_data.loader.worker_options import MAX_NUM_WORKERS, MAX_PREFETCH_FACTOR


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


@pytest.mark.parametrize("epoch_len", [2 ** 63, 2 ** 62 + 1, 2 ** 64, 0, -1])
def test_mixture_epoch_len_out_of_range(shards, epoch_len):
    with pytest.raises(rd.ConfigError, match=f"epoch_len={epoch_len}.*2\\*\\*62"):
        rd.Mixture({"a": shards, "b": shards}, {"a": 1, "b": 1}, epoch_len=epoch_len)


def test_mixture_epoch_len_at_the_bound_runs(shards):
    loader = rd.DataLoader(rd.Mixture({"a": shards, "b": shards}, {"a": 1, "b": 1}, epoch_len=2 ** 62),
                           batch_size=2, seed=0)
    assert len(loader) == 2 ** 61
    assert next(iter(loader))["id"].shape == (2,)


@pytest.mark.parametrize("value", [0, MAX_PREFETCH_FACTOR + 1, 2 ** 40])
def test_prefetch_factor_out_of_range_with_workers(value):
    """torch accepts 0 and asserts in its worker iterator; 2**40 loops for ever filling the queue."""
    with pytest.raises(rd.ConfigError, match=f"prefetch_factor={value}"):
        rd.DataLoader(list(range(10)), batch_size=2, num_workers=1, prefetch_factor=value)


@pytest.mark.parametrize("value", [MAX_NUM_WORKERS + 1, 2 ** 63])
def test_num_workers_out_of_range(value):
    """Found by the attack sweep: torch forks num_workers processes in a loop at iter(), so 2**63 forked
    until the machine gave out and never reached a batch; now refused at construction."""
    with pytest.raises(rd.ConfigError, match=f"num_workers={value}"):
        rd.DataLoader(list(range(10)), batch_size=2, num_workers=value)


@pytest.mark.parametrize("value", [1e300, float("inf")])
def test_timeout_out_of_range(value):
    with pytest.raises(rd.ConfigError, match="timeout=.*0: wait forever"):
        rd.DataLoader(list(range(10)), batch_size=2, num_workers=1, timeout=value)


@pytest.mark.parametrize("kwargs,param", [
    ({"seed": 2 ** 64}, "seed"), ({"seed": -1}, "seed"), ({"batch_size": 2 ** 40}, "batch_size"),
    ({"batch_size": [(0, 2), (2 ** 70, 4)]}, "step"), ({"batch_size": [(0, 2), (4, 2 ** 40)]}, "batch"),
    ({"shuffle_window": 2 ** 70, "seed": 0}, "shuffle_window"), ({"accumulation_steps": 2 ** 70}, "accumulation_steps"),
])
def test_loader_integer_options_are_range_checked(kwargs, param):
    with pytest.raises(rd.ConfigError, match=param):
        rd.DataLoader(list(range(10)), **{"batch_size": 2, **kwargs})


@pytest.mark.parametrize("weights,param", [
    (lambda: rd.WeightSchedule([(0, {"a": 1, "b": 1}), (2 ** 70, {"a": 1, "b": 2})]), "step"),
])
def test_mixture_schedule_values_are_range_checked(shards, weights, param):
    with pytest.raises(rd.ConfigError, match=param):
        rd.Mixture({"a": shards, "b": shards}, weights())
    with pytest.raises(rd.ConfigError, match="block_size"):
        rd.Mixture({"a": shards, "b": shards}, {"a": 1, "b": 1}, block_size=2 ** 70)


@pytest.mark.parametrize("batch_size", [3, 7])
def test_mixture_epoch_len_rounded_past_the_bound_names_epoch_len(shards, batch_size):
    with pytest.raises(rd.ConfigError, match=r"epoch_len=4611686018427387904: expected at most .*multiple of the global batch"):
        rd.DataLoader(rd.Mixture({"a": shards, "b": shards}, {"a": 1, "b": 1}, epoch_len=2 ** 62),
                      batch_size=batch_size, seed=0)
    bound = (2 ** 62) // batch_size * batch_size  # the fix the message names works
    loader = rd.DataLoader(rd.Mixture({"a": shards, "b": shards}, {"a": 1, "b": 1}, epoch_len=bound),
                           batch_size=batch_size, seed=0)
    assert len(loader) == bound // batch_size
