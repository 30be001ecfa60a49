"""The torch layer's view of the process environment: which rank this process is.

Placeholder until the plan layer's pure environment parser lands; reads through
``Sharding.from_environment``."""

from __future__ import annotations

from resumable_data.plan import Sharding, ShardingPolicy

__all__ = ["sharding_from_environment"]


def sharding_from_environment(policy: ShardingPolicy | str = ShardingPolicy.CONTIGUOUS) -> Sharding:
    return Sharding.from_environment(policy)
