"""The logical stream: steps -> positions -> records, as pure functions of the plan.

Algorithm. Positions ``p = 0, 1, 2, ...`` index an infinite stream of samples;
``epoch, offset = divmod(p, epoch_len)``. Step ``s`` (a global batch of ``G`` samples) covers
``epoch = s // steps_per_epoch`` and offsets ``[k*G, (k+1)*G)`` with ``k = s % steps_per_epoch``;
batches never straddle epochs. The record at an offset is the epoch's order (:mod:`.order`) at
that offset. The epoch's tail, when ``n`` is not a multiple of ``G``, follows an explicit
:class:`Tail`: dropped, wrapped around to the epoch's first records (as torch's
``DistributedSampler`` pads), or delivered as a short last batch (torch's ``drop_last=False``).
``Tail.PAD`` is ``DistributedSampler(drop_last=False)`` under a ``drop_last=False`` loader: the
epoch is padded (wrapping to its first records) to a multiple of ``pad_to`` (the world size)
and its last global batch is short, split evenly over the ranks, so every rank delivers what
torch delivers (its ``ceil(n / world)`` samples, the last batch partial).

Guarantee. Everything here is a function of (num_records, version hash, seed, order, G, tail) and
the step, so a loader's state is a step counter and a restore is a seek. There is no
``set_epoch``: the epoch is derived from the position.

Cost. O(G) per step, independent of the step number and of ``n``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from resumable_data._schema import (
    check_int,
    coerce_enum,
    expect_enum,
    expect_int,
    expect_mapping,
    expect_str,
)
from resumable_data.errors import ConfigError, describe
from resumable_data.plan.order import OrderSpec, epoch_records
from resumable_data.plan.permutation import MAX_DOMAIN
from resumable_data.plan.sharding import Sharding

__all__ = ["Plan", "Tail"]

K_NUM_RECORDS = "num_records"
K_GLOBAL_BATCH = "global_batch"
K_VERSION = "dataset_version"
K_SEED = "seed"
K_ORDER = "order"
K_TAIL = "tail"
K_PAD_TO = "pad_to"  # only with tail "pad"
_KEYS = frozenset({K_NUM_RECORDS, K_GLOBAL_BATCH, K_VERSION, K_SEED, K_ORDER, K_TAIL})
MAX_SEED = (1 << 64) - 1


class Tail(str, enum.Enum):
    """What happens to the last, incomplete global batch of an epoch."""

    DROP = "drop"
    WRAP = "wrap"
    PARTIAL = "partial"
    PAD = "pad"


@dataclass(frozen=True)
class Plan:
    """The pure description of a data stream: which records every step delivers."""

    num_records: int
    global_batch: int
    version_hash: str
    seed: int = 0
    order: OrderSpec = field(default_factory=OrderSpec)
    tail: Tail = Tail.PARTIAL
    #: With ``Tail.PAD``: the epoch is padded to a multiple of this (the world size); else 1.
    pad_to: int = 1

    def __post_init__(self) -> None:
        n = check_int(self.num_records, "num_records", 1, MAX_DOMAIN)
        g = check_int(self.global_batch, "global batch size", 1, 1 << 40)
        check_int(self.seed, "seed", 0, MAX_SEED)
        if not isinstance(self.version_hash, str) or not self.version_hash:
            raise ConfigError(describe("version_hash", self.version_hash, "a non-empty string", "pass DatasetVersion.hash"))
        if not isinstance(self.order, OrderSpec):
            raise ConfigError(describe("order", self.order, "an OrderSpec", "build one with OrderSpec(kind, window)"))
        tail = coerce_enum(self.tail, Tail, "tail")
        object.__setattr__(self, "tail", tail)
        pad = check_int(self.pad_to, "pad_to", 1, 1 << 20)
        if pad != 1 and tail is not Tail.PAD:
            raise ConfigError(describe("pad_to", pad, "1 unless tail='pad'", "drop pad_to"))
        if tail is Tail.DROP and n < g:
            raise ConfigError(
                describe(
                    "drop_last",
                    True,
                    f"at least one full global batch of {g} samples, but the dataset has {n} records",
                    "use a smaller batch_size, drop_last=False, or more data",
                )
            )

    # -- shape of an epoch ------------------------------------------------------------------------
    @property
    def steps_per_epoch(self) -> int:
        n, g = self.num_records, self.global_batch
        if self.tail is Tail.PAD:
            return -(-self.epoch_len // g)
        return n // g if self.tail is Tail.DROP else -(-n // g)

    @property
    def epoch_len(self) -> int:
        """Positions per epoch."""
        if self.tail is Tail.PAD:
            return -(-self.num_records // self.pad_to) * self.pad_to
        return self.num_records if self.tail is Tail.PARTIAL else self.steps_per_epoch * self.global_batch

    def step_span(self, step: int) -> tuple[int, int]:
        """Global positions ``[start, stop)`` of step ``step``."""
        epoch, k = divmod(step, self.steps_per_epoch)
        start = epoch * self.epoch_len + k * self.global_batch
        stop = min(start + self.global_batch, (epoch + 1) * self.epoch_len)
        return start, stop

    def step_of_position(self, position: int) -> int:
        """The step whose global batch holds ``position``."""
        epoch, offset = divmod(position, self.epoch_len)
        return epoch * self.steps_per_epoch + offset // self.global_batch

    def local_positions(self, step: int, sharding: Sharding) -> np.ndarray:
        """The positions of step ``step`` that rank ``sharding.rank`` delivers."""
        start, stop = self.step_span(step)
        return sharding.local_positions(start, stop)

    # -- records ----------------------------------------------------------------------------------
    def records(self, positions) -> np.ndarray:
        """Record ids at ``positions`` (any int array; may span epochs)."""
        pos = np.asarray(positions, dtype=np.int64)
        flat = pos.reshape(-1)
        epochs, offsets = np.divmod(flat, self.epoch_len)
        if self.tail is Tail.WRAP or self.tail is Tail.PAD:
            offsets = offsets % self.num_records
        out = np.empty_like(flat)
        first = int(epochs[0]) if flat.size else 0
        if flat.size and (epochs == first).all():  # the common case: one epoch per batch
            groups = [(first, slice(None))]
        else:
            groups = [(int(e), epochs == e) for e in np.unique(epochs)]
        for epoch, sel in groups:
            out[sel] = epoch_records(
                self.num_records, self.order, offsets[sel], version_hash=self.version_hash, seed=self.seed, epoch=epoch
            )
        return out.reshape(pos.shape)

    # -- state ------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d = {
            K_NUM_RECORDS: self.num_records,
            K_GLOBAL_BATCH: self.global_batch,
            K_VERSION: self.version_hash,
            K_SEED: self.seed,
            K_ORDER: self.order.to_dict(),
            K_TAIL: self.tail.value,
        }
        if self.tail is Tail.PAD:
            d[K_PAD_TO] = self.pad_to
        return d

    @classmethod
    def from_dict(cls, d: Any, where: str = "plan") -> Plan:
        padded = isinstance(d, dict) and d.get(K_TAIL) == Tail.PAD.value
        expect_mapping(d, where, _KEYS | {K_PAD_TO} if padded else _KEYS)
        return cls(
            num_records=expect_int(d[K_NUM_RECORDS], f"{where}.num_records", 1, MAX_DOMAIN),
            global_batch=expect_int(d[K_GLOBAL_BATCH], f"{where}.global_batch", 1, 1 << 40),
            version_hash=expect_str(d[K_VERSION], f"{where}.dataset_version", max_len=256),
            seed=expect_int(d[K_SEED], f"{where}.seed", 0, MAX_SEED),
            order=OrderSpec.from_dict(d[K_ORDER], f"{where}.order"),
            tail=expect_enum(d[K_TAIL], Tail, f"{where}.tail"),
            pad_to=expect_int(d[K_PAD_TO], f"{where}.pad_to", 1, 1 << 20) if padded else 1,
        )
