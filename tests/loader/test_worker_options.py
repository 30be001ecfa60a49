"""The worker arguments (loader/worker_options.py): torch's rules and the bounds torch does not check,
refused at construction with an rd.ConfigError (a wrong type, NaN, an out-of-range count or depth)."""

from __future__ import annotations

import pytest

import resumable_data as rd
from resumable_data.loader.worker_options import MAX_NUM_WORKERS, MAX_PREFETCH_FACTOR


def test_a_timeout_that_is_not_a_number_is_a_config_error_not_a_type_error():
    import resumable_data as rd

    with pytest.raises(rd.ConfigError, match=r"timeout='x': expected a number of seconds >= 0.*fix: pass timeout=0"):
        rd.DataLoader(list(range(4)), timeout="x")


@pytest.mark.parametrize("kw, param", [({"timeout": float("nan"), "num_workers": 1}, "timeout"),
                                       ({"prefetch_factor": "2", "num_workers": 1}, "prefetch_factor"),
                                       ({"prefetch_factor": 1.5, "num_workers": 1}, "prefetch_factor"),
                                       ({"prefetch_factor": True, "num_workers": 1}, "prefetch_factor")])
def test_worker_options_of_the_wrong_type_are_config_errors(kw, param):
    import resumable_data as rd

    with pytest.raises(rd.ConfigError, match=rf"^{param}=.*expected .*fix: "):
        rd.DataLoader(list(range(4)), batch_size=2, **kw)


def test_a_worker_init_fn_that_is_not_callable_is_refused_at_construction():
    """Found by the attack sweep: torch raised its TypeError inside the worker, at the first batch."""
    import resumable_data as rd

    with pytest.raises(rd.ConfigTypeError, match=r"^worker_init_fn=3: expected .*fix: "):
        rd.DataLoader(list(range(4)), batch_size=2, num_workers=1, worker_init_fn=3)


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


def test_num_workers_as_a_string_names_the_int_to_pass():
    with pytest.raises(rd.ConfigError, match=r"^num_workers='2': .*fix: pass an int, e\.g\. num_workers=2"):
        rd.DataLoader(list(range(8)), batch_size=2, num_workers="2")
