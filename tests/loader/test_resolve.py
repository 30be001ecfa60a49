"""The config resolver (loader/resolve.py): pure, torch-free, and the one place that validates the loader's arguments."""

from __future__ import annotations

import subprocess
import sys

import pytest

import resumable_data as rd
from resumable_data.errors import ConfigError
from resumable_data.loader.config import UNPINNED, FetchMode
from resumable_data.loader.resolve import resolve_config
from resumable_data.loader.state import CommitMode
from resumable_data.plan import Order, Sharding, Tail


class Items:
    """A plain map-style dataset (no torch)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i


class Batched(Items):
    def __getitems__(self, ids):
        return list(ids)


def test_resolver_and_ledger_import_without_torch():
    code = ("import sys\n"
            "from resumable_data.loader.resolve import resolve_config\n"
            "from resumable_data.loader.ledger import ProgressLedger\n"
            "from resumable_data.loader.stream import RecordStream\n"
            "class D:\n  __len__ = lambda s: 10\n  __getitem__ = lambda s, i: i\n"
            "cfg = resolve_config(D(), batch_size=3, shuffle=True, seed=1, sharding=None)\n"
            "led = ProgressLedger(RecordStream(cfg.plan), cfg.commit, 1)\n"
            "led.start_pass(); led.deliver(0, 0, 3); led.commit(True)\n"
            "assert led.cursor.committed == 1\n"
            "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))[:5]\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_same_arguments_give_an_equal_config():
    a = resolve_config(Items(50), batch_size=4, shuffle=True, seed=3, sharding=Sharding(2, 1))
    b = resolve_config(Items(50), batch_size=4, shuffle=True, seed=3, sharding=Sharding(2, 1))
    assert a == b and a.fingerprint() == b.fingerprint()
    assert a.plan.global_batch == 8 and a.per_rank == 4 and a.plan.order.kind is Order.GLOBAL


def test_torch_defaults_are_resolved():
    cfg = resolve_config(Items(10), sharding=Sharding())
    assert (cfg.plan.seed, cfg.plan.tail, cfg.mode, cfg.commit) == (0, Tail.PARTIAL, FetchMode.GETITEM, CommitMode.AUTO)
    assert (cfg.pinned, cfg.plan.version_hash) == (False, UNPINNED)
    assert resolve_config(Items(10), drop_last=True, sharding=Sharding()).plan.tail is Tail.DROP
    assert resolve_config(Items(10), sharding=Sharding(2, 0)).plan.tail is Tail.WRAP  # DistributedSampler's padding
    assert resolve_config(Batched(10), sharding=Sharding()).mode is FetchMode.GETITEMS
    assert resolve_config(Items(10), batch_size=None, sharding=Sharding()).unbatched


@pytest.mark.parametrize("kwargs, param", [
    (dict(shuffle=True), "seed"),
    (dict(in_order=False), "in_order"),
    (dict(batch_size=0), "batch_size"),
    (dict(batch_size=None, drop_last=True), "drop_last"),
    (dict(tail="partial", sharding=Sharding(2, 0)), "tail"),
    (dict(tail="sideways"), "tail"),
    (dict(commit="sometimes"), "commit"),
    (dict(accumulation_steps=0), "accumulation_steps"),
    (dict(shuffle=False, shuffle_window=8, seed=1), "shuffle_window"),
    (dict(dataset_version=""), "dataset_version"),
    (dict(arrow_collate=lambda t: t), "arrow_collate"),
    (dict(token_column="ids"), "token_column"),
    (dict(sharding="rank0"), "sharding"),
    # found by the attack sweep: torch trips over these only at the first batch (or reads "no" as True)
    (dict(collate_fn=3), "collate_fn"),
    (dict(generator=3, shuffle=True), "generator"),
    (dict(elastic="no"), "elastic"),
    (dict(elastic=None), "elastic"),
])
def test_bad_arguments_are_config_errors_naming_the_parameter(kwargs, param):
    kwargs.setdefault("sharding", Sharding())
    with pytest.raises(ConfigError, match=rf"^{param}=.*expected .*fix: "):
        resolve_config(Items(10), **kwargs)


def test_a_dataset_without_len_or_records_is_refused():
    with pytest.raises(ConfigError, match="^dataset="):
        resolve_config(iter(range(3)), sharding=Sharding())
    with pytest.raises(ConfigError, match="at least one record"):
        resolve_config(Items(0), sharding=Sharding())


def test_a_global_batch_the_world_cannot_split_evenly_is_fine_but_the_rank_count_must_divide_it():
    cfg = resolve_config(Items(100), batch_size=5, sharding=Sharding(4, 3))
    assert cfg.plan.global_batch == 20 and cfg.sharding.rank == 3


@pytest.mark.parametrize("kwargs,param", [
    ({"seed": 2 ** 64}, "seed"), ({"seed": -1}, "seed"), ({"batch_size": 2 ** 40}, "batch_size"),
    ({"batch_size": [(0, 2), (2 ** 70, 4)]}, "step"), ({"batch_size": [(0, 2), (4, 2 ** 40)]}, "batch"),
    ({"shuffle_window": 2 ** 70, "seed": 0}, "shuffle_window"), ({"accumulation_steps": 2 ** 70}, "accumulation_steps"),
])
def test_loader_integer_options_are_range_checked(kwargs, param):
    with pytest.raises(rd.ConfigError, match=param):
        rd.DataLoader(list(range(10)), **{"batch_size": 2, **kwargs})
