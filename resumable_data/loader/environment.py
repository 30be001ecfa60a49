"""Where this process sits in a data-parallel launch: the one reader of the launch environment.

Algorithm. :func:`sharding_from_environment` reads ``os.environ`` and, when ``torch.distributed``
is available and its default process group is initialized, the group's ``(world_size, rank)``,
and hands both to the pure :meth:`rd.Sharding.from_environment` (plan layer), which validates
them: the group wins, else torchrun's ``RANK`` / ``WORLD_SIZE``, else a single process; partial or
inconsistent launches are errors, never a silent rank 0.

Guarantee. The only impure part of choosing a sharding lives here, in the torch layer; the plan
layer stays a pure function of its arguments. Cost: a few dictionary reads; no collective call.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from resumable_data.plan.sharding import Sharding, ShardingPolicy

__all__ = ["process_group", "sharding_from_environment"]


def process_group() -> tuple[int, int] | None:
    """``(world_size, rank)`` of the initialized default ``torch.distributed`` group, else None."""
    dist = sys.modules.get("torch.distributed")  # a group exists only if torch.distributed was imported
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return None


def sharding_from_environment(
    policy: ShardingPolicy | str = ShardingPolicy.CONTIGUOUS, environ: Mapping[str, str] | None = None
) -> Sharding:
    """This process's :class:`rd.Sharding`: the ``torch.distributed`` process group if one is
    initialized, else torchrun's ``RANK`` / ``WORLD_SIZE`` from ``environ`` (default
    ``os.environ``), else a single process (see :meth:`rd.Sharding.from_environment`)."""
    return Sharding.from_environment(
        policy, environ=os.environ if environ is None else environ, process_group=process_group()
    )
