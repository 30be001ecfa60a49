"""Sharding: how a global batch of positions is split across ``world_size`` ranks.

Algorithm. A global batch covers positions ``[a, a + G)``. With ``contiguous`` rank ``r`` takes
``[a + r*b, a + (r+1)*b)``, ``b = G / world_size``; with ``strided`` it takes ``a + r + i*world_size``.

Guarantee. Ranks are disjoint and their union is the global batch, for either policy, so the
global stream does not depend on the world size: with ``G`` held constant a state can move to any
world size that divides ``G`` (an elastic reshard). A rank-local cursor is meaningless without
this policy, which is why it is part of every state.

Cost. O(b) per batch; nothing to restore.
"""

from __future__ import annotations

import enum
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from resumable_data._schema import check_int, coerce_enum, expect_enum, expect_int, expect_mapping
from resumable_data.errors import ConfigError, describe

__all__ = ["Sharding", "ShardingPolicy"]

K_WORLD_SIZE = "world_size"
K_RANK = "rank"
K_POLICY = "policy"
_KEYS = frozenset({K_WORLD_SIZE, K_RANK, K_POLICY})


class ShardingPolicy(str, enum.Enum):
    """How a global batch is split across ranks."""

    CONTIGUOUS = "contiguous"
    STRIDED = "strided"


@dataclass(frozen=True)
class Sharding:
    """This process's place in the data-parallel layout."""

    world_size: int = 1
    rank: int = 0
    policy: ShardingPolicy = ShardingPolicy.CONTIGUOUS

    def __post_init__(self) -> None:
        world = check_int(self.world_size, "world_size", 1, 1 << 20)
        if isinstance(self.rank, bool) or not isinstance(self.rank, (int, np.integer)) or not 0 <= self.rank < world:
            raise ConfigError(
                describe("rank", self.rank, f"an integer in [0, world_size={world})", "pass this process's rank")
            )
        object.__setattr__(self, "world_size", world)
        object.__setattr__(self, "rank", int(self.rank))
        object.__setattr__(self, "policy", coerce_enum(self.policy, ShardingPolicy, "sharding policy"))

    @classmethod
    def from_environment(cls, policy: ShardingPolicy | str = ShardingPolicy.CONTIGUOUS,
                         environ: Mapping[str, str] | None = None) -> Sharding:
        """Rank and world size from an initialized ``torch.distributed`` process group, else from
        ``RANK`` / ``WORLD_SIZE`` (as torchrun sets them), else a single process.

        A malformed or inconsistent value is an error, never a silent rank 0. (``torch`` is not
        imported here: a process group exists only if the caller already imported it.)"""
        env = os.environ if environ is None else environ
        from_env = None
        if "RANK" in env or "WORLD_SIZE" in env:
            missing = [k for k in ("RANK", "WORLD_SIZE") if k not in env]
            if missing:
                raise ConfigError(
                    describe(missing[0], None, "RANK and WORLD_SIZE set together", "launch with torchrun or set both")
                )
            values = []
            for name in ("WORLD_SIZE", "RANK"):
                raw = env[name]
                try:
                    values.append(int(raw.strip()))
                except ValueError:
                    raise ConfigError(describe(name, raw, "a decimal integer", f"fix the {name} environment variable")) from None
            world, rank = values
            if world < 1:
                raise ConfigError(describe("WORLD_SIZE", env["WORLD_SIZE"], "an integer >= 1", "fix WORLD_SIZE"))
            if not 0 <= rank < world:
                raise ConfigError(describe("RANK", env["RANK"], f"an integer in [0, WORLD_SIZE={world})", "fix RANK"))
            if "LOCAL_RANK" in env:
                raw = env["LOCAL_RANK"]
                if not raw.strip().isdigit() or int(raw) >= world:
                    raise ConfigError(describe("LOCAL_RANK", raw, f"an integer in [0, {world})", "fix LOCAL_RANK"))
            from_env = (world, rank)
        dist = sys.modules.get("torch.distributed")
        if dist is not None and dist.is_available() and dist.is_initialized():
            group = (dist.get_world_size(), dist.get_rank())
            if from_env is not None and from_env != group:
                raise ConfigError(
                    describe("RANK/WORLD_SIZE", f"{from_env[1]}/{from_env[0]}",
                             f"the process group's rank/world size {group[1]}/{group[0]}",
                             "make the environment agree with init_process_group, or unset RANK and WORLD_SIZE")
                )
            return cls(group[0], group[1], policy)
        if from_env is not None:
            return cls(from_env[0], from_env[1], policy)
        return cls(1, 0, policy)

    def check_global_batch(self, global_batch: int) -> None:
        """Raise unless ``world_size`` divides ``global_batch``."""
        if global_batch % self.world_size:
            divisors = [w for w in range(1, global_batch + 1) if global_batch % w == 0]
            raise ConfigError(
                describe(
                    "world_size",
                    self.world_size,
                    f"a divisor of the global batch {global_batch} (one of {divisors[:24]})",
                    "pick a world size that divides the global batch, or change batch_size",
                )
            )

    def local_positions(self, start: int, stop: int) -> np.ndarray:
        """This rank's positions of the global batch ``[start, stop)`` (int64)."""
        size = stop - start
        if size % self.world_size:
            raise ConfigError(
                describe(
                    "world_size", self.world_size, f"a divisor of the batch size {size}", "use tail='drop' or 'wrap'"
                )
            )
        per = size // self.world_size
        if self.policy is ShardingPolicy.CONTIGUOUS:
            return np.arange(start + self.rank * per, start + (self.rank + 1) * per, dtype=np.int64)
        return np.arange(start + self.rank, stop, self.world_size, dtype=np.int64)

    def to_dict(self) -> dict[str, Any]:
        return {K_WORLD_SIZE: self.world_size, K_RANK: self.rank, K_POLICY: self.policy.value}

    @classmethod
    def from_dict(cls, d: Any, where: str = "sharding") -> Sharding:
        expect_mapping(d, where, _KEYS)
        world = expect_int(d[K_WORLD_SIZE], f"{where}.world_size", 1, 1 << 20)
        rank = expect_int(d[K_RANK], f"{where}.rank", 0, world - 1)
        return cls(world, rank, expect_enum(d[K_POLICY], ShardingPolicy, f"{where}.policy"))
