"""Translating torch samplers into plan settings (the positional-sampler protocol: :mod:`.positional`).

A sampler that draws from a generator as it goes (history-dependent) cannot be resumed by
seeking, so ``rd.DataLoader`` accepts only samplers it can express as a pure function of the
position: torch's ``SequentialSampler``, ``RandomSampler`` (without replacement),
``DistributedSampler`` and ``BatchSampler`` over those are translated into the equivalent order,
seed, sharding and tail. ``RandomSampler(replacement=True)`` or with ``num_samples``, and
``WeightedRandomSampler``, become the positional samplers of :mod:`resumable_data.loader.samplers`
(the same distribution as torch's, not the same draws). A fixed sequence of indices (a ``range``,
a list of ints) as ``sampler``, and a list of equally long index lists as ``batch_sampler``, are
positional by nature and accepted as they are. Anything else must implement
:class:`PositionalSampler`; a refusal is an :class:`rd.ConfigError`.

:func:`torch_views` builds the read-only ``sampler`` / ``batch_sampler`` / ``collate_fn``
attributes torch's ``DataLoader`` exposes (for code that reads them; rd never iterates them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from torch.utils.data import (
    BatchSampler,
    DistributedSampler,
    RandomSampler,
    SequentialSampler,
    WeightedRandomSampler,
)

from resumable_data.errors import ConfigError, describe
from resumable_data.loader.positional import PositionalSampler, Translated
from resumable_data.loader.torch_compat import default_collate, default_convert
from resumable_data.plan import Sharding, ShardingPolicy, Tail

# PositionalSampler and Translated: re-exported from .positional (torch-free)
__all__ = ["PositionalSampler", "Translated", "torch_views", "translate_sampler"]


def _reject(sampler: Any, param: str) -> ConfigError:
    expected = (
        "None, a torch SequentialSampler, RandomSampler, WeightedRandomSampler, DistributedSampler, a "
        "sequence of ints (a range, a list) or a sampler implementing rd.PositionalSampler (__len__, "
        "indices(epoch, offsets), fingerprint())"
    )
    if param == "batch_sampler":
        expected = "None, a torch BatchSampler over an accepted sampler, or a list of equally long index lists"
    return ConfigError(
        describe(
            param,
            type(sampler).__name__,
            f"{expected}; rd resumes by seeking, so it needs the index at each position as a pure function of "
            "(epoch, position), which a sampler of this type does not declare",
            "use shuffle=True with seed=, pass the indices as a list, or give the sampler the rd.PositionalSampler methods",
        )
    )


def _int_sequence(value: Any) -> np.ndarray | None:
    """``value`` as an int64 array if it is a fixed sequence of ints (not a sampler), else None."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, np.ndarray)):
        return None
    arr = np.asarray(value)
    if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        return None
    return arr.astype(np.int64)


def _check_indices(idx: np.ndarray, dataset_len: int, param: str) -> None:
    if idx.size == 0:
        raise ConfigError(describe(param, "[]", "at least one index", "pass a non-empty list of indices"))
    bad = idx[(idx < 0) | (idx >= dataset_len)]
    if bad.size:
        raise ConfigError(
            describe(param, f"index {int(bad[0])}", f"indices in [0, {dataset_len})", "pass valid dataset indices")
        )


def _batch_lists(batch_sampler: Any, dataset_len: int) -> Translated | None:
    """A list of index lists as ``batch_sampler``: every list as long as the first, the last may
    be shorter (torch's partial last batch)."""
    if not isinstance(batch_sampler, (list, tuple)) or not batch_sampler:
        return None
    maybe = [_int_sequence(b) for b in batch_sampler]
    rows = [r for r in maybe if r is not None]
    if len(rows) != len(maybe):  # not all index lists
        return None
    size = len(rows[0])
    if size == 0 or any(len(r) != size for r in rows[:-1]) or len(rows[-1]) > size:
        raise ConfigError(
            describe(
                "batch_sampler",
                f"index lists of lengths {[len(r) for r in rows][:8]}",
                "lists of one length (the last may be shorter)",
                "use batch_size= with sampler=<the flat list of indices>",
            )
        )
    flat = np.concatenate(rows)
    _check_indices(flat, dataset_len, "batch_sampler")
    tail = Tail.DROP if len(rows[-1]) == size else None
    return Translated(tail=tail, batch_size=size, positional=FixedSequence(flat))


class FixedSequence:
    """A fixed list of indices as an rd.PositionalSampler: the same order every epoch."""

    def __init__(self, indices: np.ndarray) -> None:
        self._idx = np.asarray(indices, dtype=np.int64)

    def __len__(self) -> int:
        return int(self._idx.size)

    def indices(self, epoch: int, offsets: np.ndarray) -> np.ndarray:
        return self._idx[np.asarray(offsets, dtype=np.int64)]

    def fingerprint(self) -> str:
        import xxhash

        return f"rd.FixedSequence(n={self._idx.size}, xxh3={xxhash.xxh3_64_hexdigest(self._idx.tobytes())})"


def translate_sampler(sampler: Any, batch_sampler: Any, dataset_len: int) -> Translated:
    """The plan settings equivalent to ``sampler`` / ``batch_sampler`` (raises ``ConfigError``)."""
    if batch_sampler is not None:
        lists = _batch_lists(batch_sampler, dataset_len)
        if lists is not None:
            return lists
        if not isinstance(batch_sampler, BatchSampler):
            raise _reject(batch_sampler, "batch_sampler")
        inner = translate_sampler(batch_sampler.sampler, None, dataset_len)
        tail = Tail.DROP if batch_sampler.drop_last else inner.tail
        return Translated(inner.shuffle, inner.seed, inner.sharding, tail, batch_sampler.batch_size, inner.positional)
    if sampler is None:
        return Translated()
    if isinstance(sampler, DistributedSampler):
        return Translated(
            shuffle=bool(sampler.shuffle),
            seed=int(sampler.seed),
            sharding=Sharding(int(sampler.num_replicas), int(sampler.rank), ShardingPolicy.STRIDED),
            tail=Tail.DROP if sampler.drop_last else Tail.PAD,
        )
    if isinstance(sampler, SequentialSampler):
        return Translated(shuffle=False)
    if isinstance(sampler, RandomSampler):
        gen = sampler.generator
        seed = None if gen is None else int(gen.initial_seed())
        if not sampler.replacement and sampler.num_samples == dataset_len:
            return Translated(shuffle=True, seed=seed)
        from resumable_data.loader.samplers import PositionalRandomSampler

        return Translated(
            seed=seed,
            positional=PositionalRandomSampler(
                len(sampler.data_source), sampler.num_samples, replacement=bool(sampler.replacement)
            ),
        )
    if isinstance(sampler, WeightedRandomSampler):
        from resumable_data.loader.samplers import PositionalWeightedSampler

        gen = sampler.generator
        return Translated(
            seed=None if gen is None else int(gen.initial_seed()),
            positional=PositionalWeightedSampler(
                sampler.weights.numpy(), sampler.num_samples, replacement=bool(sampler.replacement)
            ),
        )
    if isinstance(sampler, PositionalSampler):
        return Translated(positional=sampler)
    seq = _int_sequence(sampler)
    if seq is not None:
        _check_indices(seq, dataset_len, "sampler")
        return Translated(positional=FixedSequence(seq))
    raise _reject(sampler, "sampler")


def torch_views(
    dataset: Any,
    *,
    sampler: Any,
    batch_sampler: Any,
    shuffle: bool | None,
    batch_size: int | None,
    drop_last: bool,
    generator: Any,
    collate_fn: Any,
) -> tuple[Any, Any, Any]:
    """(sampler, batch_sampler, collate_fn) as torch's ``DataLoader`` would expose them."""
    if batch_sampler is not None and sampler is None:
        sampler = getattr(batch_sampler, "sampler", None)
    if sampler is None:
        sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
    if batch_size is not None and batch_sampler is None:
        batch_sampler = BatchSampler(sampler, batch_size, drop_last)
    if collate_fn is None:
        collate_fn = default_collate if batch_size is not None or batch_sampler is not None else default_convert
    return sampler, batch_sampler, collate_fn
