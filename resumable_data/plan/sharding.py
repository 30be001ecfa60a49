"""Sharding: how a global batch of positions is split across ``world_size`` ranks.

Algorithm. A global batch covers positions ``[a, a + G)``. With ``contiguous`` rank ``r`` takes
``[a + r*b, a + (r+1)*b)``, ``b = G / world_size``; with ``strided`` it takes ``a + r + i*world_size``.

Guarantee. Ranks are disjoint and their union is the global batch, for either policy, so the
global stream does not depend on the world size: with ``G`` held constant a state can move to any
world size that divides ``G`` (an elastic reshard). A rank-local cursor is meaningless without
this policy, which is why it is part of every state.

Launch environments. :meth:`Sharding.from_environment` turns a torchrun environment mapping and
a process group's ``(world_size, rank)`` into a ``Sharding``, refusing partial or inconsistent
launches; it is a pure function of its arguments. Reading ``os.environ`` and ``torch.distributed``
is the torch layer's job (:func:`resumable_data.loader.environment.sharding_from_environment`).

Cost. O(b) per batch; nothing to restore.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from resumable_data._schema import check_int, coerce_enum, expect_enum, expect_int, expect_mapping
from resumable_data.errors import ConfigError, UsageError, describe

__all__ = ["Sharding", "ShardingPolicy", "divisors", "world_sizes_text"]

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
    def from_environment(
        cls,
        policy: ShardingPolicy | str = ShardingPolicy.CONTIGUOUS,
        environ: Mapping[str, str] | None = None,
        process_group: tuple[int, int] | None = None,
    ) -> Sharding:
        """This process's sharding from a launcher's environment, as a pure function of its
        arguments: ``environ`` (the environment variables) and ``process_group`` (an initialized
        ``torch.distributed`` group's ``(world_size, rank)``, or None). Nothing is read here: to
        read this process's ``os.environ`` and process group, call
        :func:`rd.sharding_from_environment` (the torch layer's reader, which calls this).

        The group wins, else ``RANK`` / ``WORLD_SIZE`` (as torchrun sets them, with ``LOCAL_RANK`` /
        ``LOCAL_WORLD_SIZE`` checked against them), else a single process. A malformed or
        inconsistent value is an error, never a silent rank 0. A *partial* torchrun environment
        is an error too: ``RANK`` without ``WORLD_SIZE`` (or the reverse), or ``LOCAL_RANK`` /
        ``LOCAL_WORLD_SIZE`` without both, when there is no process group (with one, the group is
        authoritative: the environment must agree with it and the local variables are only
        range-checked)."""
        if environ is None:
            raise UsageError(
                describe(
                    "environ",
                    None,
                    "the environment mapping to read (Sharding.from_environment reads nothing itself)",
                    "pass environ=os.environ (and process_group=), or call rd.sharding_from_environment() to read "
                    "this process's environment and torch.distributed process group",
                )
            )
        if not isinstance(environ, Mapping):
            raise ConfigError(
                describe(
                    "environ",
                    environ,
                    "a mapping of environment variables (os.environ)",
                    "pass environ=os.environ, or call rd.sharding_from_environment(policy)",
                )
            )
        group = _check_group(process_group)
        seen = {k: environ[k] for k in _TORCHRUN_VARS if k in environ}
        ints = {k: _env_int(k, v) for k, v in seen.items()}
        if group is None and seen and not {"RANK", "WORLD_SIZE"} <= seen.keys():
            missing = [k for k in ("RANK", "WORLD_SIZE") if k not in seen]
            raise ConfigError(
                describe(
                    "environment",
                    seen,
                    f"RANK and WORLD_SIZE set together (a partial torchrun environment: {' and '.join(missing)} "
                    f"missing, and no torch.distributed process group is initialized)",
                    "launch with torchrun (it sets RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE), set "
                    "the missing variables, call torch.distributed.init_process_group() before building the "
                    f"loader, pass sharding=rd.Sharding(world_size, rank), or unset {', '.join(seen)} for a "
                    "single process",
                )
            )
        from_env = None
        if "RANK" in ints and "WORLD_SIZE" in ints:
            world, rank = ints["WORLD_SIZE"], ints["RANK"]
            if world < 1:
                raise ConfigError(describe("WORLD_SIZE", seen["WORLD_SIZE"], "an integer >= 1", "fix WORLD_SIZE"))
            if not 0 <= rank < world:
                raise ConfigError(describe("RANK", seen["RANK"], f"an integer in [0, WORLD_SIZE={world})", "fix RANK"))
            from_env = (world, rank)
        if group is not None:
            wrong = {
                k: seen[k] for k, g in (("RANK", group[1]), ("WORLD_SIZE", group[0])) if k in ints and ints[k] != g
            }
            if wrong:
                raise ConfigError(
                    describe(
                        "/".join(wrong),
                        "/".join(wrong.values()),
                        f"the process group's rank/world size {group[1]}/{group[0]}",
                        "make the environment agree with init_process_group, or unset RANK and WORLD_SIZE",
                    )
                )
        world, rank = group or from_env or (1, 0)
        _check_local(seen, ints, world)
        return cls(world, rank, coerce_enum(policy, ShardingPolicy, "sharding policy"))

    def check_global_batch(self, global_batch: int) -> None:
        """Raise unless ``world_size`` divides ``global_batch``."""
        if global_batch % self.world_size:
            raise ConfigError(
                describe(
                    "world_size",
                    self.world_size,
                    f"a divisor of the global batch {global_batch} (one of {world_sizes_text(global_batch)})",
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
        """The sharding as the state's JSON object ``{world_size, rank, policy}``."""
        return {K_WORLD_SIZE: self.world_size, K_RANK: self.rank, K_POLICY: self.policy.value}

    @classmethod
    def from_dict(cls, d: Any, where: str = "sharding") -> Sharding:
        """The sharding ``d`` (from :meth:`to_dict`) describes; ``where`` names it in errors.

        Raises :class:`rd.ResumeError` on other keys, a world size outside ``[1, 2**20]``, a rank
        outside ``[0, world_size)`` or an unknown policy."""
        expect_mapping(d, where, _KEYS)
        world = expect_int(d[K_WORLD_SIZE], f"{where}.world_size", 1, 1 << 20)
        rank = expect_int(d[K_RANK], f"{where}.rank", 0, world - 1)
        return cls(world, rank, expect_enum(d[K_POLICY], ShardingPolicy, f"{where}.policy"))


_TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


def _check_group(group: Any) -> tuple[int, int] | None:
    """``None`` or ``(world_size, rank)`` with ``0 <= rank < world_size``."""
    if group is None:
        return None
    ok = (
        isinstance(group, tuple)
        and len(group) == 2
        and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in group)
        and 0 <= group[1] < group[0]
    )
    if not ok:
        raise ConfigError(
            describe(
                "process_group",
                group,
                "None or (world_size, rank) with 0 <= rank < world_size",
                "pass (dist.get_world_size(), dist.get_rank()) of an initialized group, or None",
            )
        )
    return int(group[0]), int(group[1])


def _env_int(name: str, raw: str) -> int:
    """A torchrun variable's value: a decimal integer >= 0 (surrounding spaces allowed)."""
    text = str(raw).strip()
    if not text.isdigit() or not text.isascii():
        raise ConfigError(describe(name, raw, "a decimal integer >= 0", f"fix the {name} environment variable"))
    return int(text)


def _check_local(seen: Mapping[str, str], ints: Mapping[str, int], world: int) -> None:
    """LOCAL_RANK < LOCAL_WORLD_SIZE <= WORLD_SIZE, where set."""
    local_world = ints.get("LOCAL_WORLD_SIZE")
    if local_world is not None and not 1 <= local_world <= world:
        raise ConfigError(
            describe(
                "LOCAL_WORLD_SIZE",
                seen["LOCAL_WORLD_SIZE"],
                f"an integer in [1, WORLD_SIZE={world}]",
                "fix LOCAL_WORLD_SIZE",
            )
        )
    local_rank = ints.get("LOCAL_RANK")
    bound = local_world if local_world is not None else world
    if local_rank is not None and local_rank >= bound:
        name = f"LOCAL_WORLD_SIZE={local_world}" if local_world is not None else f"WORLD_SIZE={world}"
        raise ConfigError(describe("LOCAL_RANK", seen["LOCAL_RANK"], f"an integer in [0, {name})", "fix LOCAL_RANK"))


def divisors(n: int) -> list[int]:
    """Every positive divisor of ``n >= 1``, ascending (the world sizes that keep a global batch ``n``)."""
    small, large = [], []
    d = 1
    while d * d <= n:
        if n % d == 0:
            small.append(d)
            if d * d != n:
                large.append(n // d)
        d += 1
    return small + large[::-1]


def world_sizes_text(global_batch: int, limit: int = 24) -> str:
    """The world sizes that divide ``global_batch`` as ``[1, 2, ...]``, at most ``limit`` shown."""
    ws = divisors(global_batch)
    if len(ws) <= limit:
        return f"{ws}"
    head = ", ".join(map(str, ws[: limit - 1]))
    return f"[{head}, ... {len(ws) - limit} more ..., {ws[-1]}]"
