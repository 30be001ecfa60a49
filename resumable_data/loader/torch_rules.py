"""torch's ``DataLoader`` rules on the sampling arguments, refused at construction with torch's texts.

Algorithm. :func:`check_sampling_rules` applies, in torch's order, the rules torch's ``DataLoader``
applies to ``shuffle``, ``sampler``, ``batch_sampler``, ``batch_size`` and ``drop_last`` (an
``IterableDataset`` takes none of them; a sampler excludes ``shuffle``; a batch sampler stands
alone; ``batch_size=None`` excludes ``drop_last``; ``drop_last`` is a bool). :func:`check_kinds`
refuses the arguments torch would only trip over at the first batch. Each refusal is rd's
``param=value: expected ...; fix: ...`` message with torch's sentence inside (:func:`torch_rule`), so
code that matches torch's messages keeps working.

Guarantee. A call that torch refuses is refused here before anything is built, with a
:class:`rd.ConfigError` (or :class:`rd.ConfigTypeError` where torch raises ``TypeError``). Nothing is
created or started; torch is imported only to check a ``generator`` that was passed.

Cost. O(1) per call (the dataset's class hierarchy is walked once).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from resumable_data.errors import ConfigError, ConfigTypeError, describe

__all__ = ["check_kinds", "check_sampling_rules", "is_iterable_dataset", "torch_rule"]


def torch_rule(rule: str, param: str, value: Any, expected: str, fix: str, kind: type = ConfigError) -> ConfigError:
    """A refusal of one of torch's own argument rules: rd's ``param=value: expected ...; fix: ...``
    with torch's sentence inside, so code that matches torch's messages keeps working."""
    return kind(describe(param, value, f"{expected} (torch's rule: {rule})", fix))


def is_iterable_dataset(dataset: Any) -> bool:
    """Whether ``dataset`` is a torch ``IterableDataset`` (by its class hierarchy: torch is not imported)."""
    return any(
        c.__name__ == "IterableDataset" and c.__module__.startswith("torch.utils.data") for c in type(dataset).__mro__
    )


def check_sampling_rules(
    dataset: Any, batch_size: Any, shuffle: Any, sampler: Any, batch_sampler: Any, drop_last: Any
) -> None:
    """torch's ``DataLoader`` rules on the sampling arguments, in torch's order, with its texts."""
    if is_iterable_dataset(dataset):
        pipe = any(c.__name__ == "IterDataPipe" for c in type(dataset).__mro__)  # torch lets a datapipe shuffle
        for name, value, ok in (
            ("shuffle", shuffle, pipe or shuffle in (False, None)),
            ("sampler", sampler, sampler is None),
            ("batch_sampler", batch_sampler, batch_sampler is None),
        ):
            if not ok:
                raise torch_rule(
                    f"DataLoader with IterableDataset: expected unspecified {name} option, but got {name}={value}",
                    name,
                    value,
                    "unset with an IterableDataset",
                    f"drop {name}= (and see below: rd needs a map-style dataset)",
                )
        return
    if sampler is not None and shuffle not in (False, None):
        raise torch_rule(
            "sampler option is mutually exclusive with shuffle",
            "shuffle",
            shuffle,
            "unset when sampler= is given (the sampler decides the order)",
            "drop shuffle=",
        )
    if batch_sampler is not None and (batch_size != 1 or shuffle or sampler is not None or drop_last):
        raise torch_rule(
            "batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and drop_last",
            "batch_sampler",
            type(batch_sampler).__name__,
            "alone: no batch_size, shuffle, sampler or drop_last beside it (the batch sampler decides them)",
            "pass batch_sampler= alone",
        )
    if batch_size is None and drop_last:
        raise torch_rule(
            "batch_size=None option disables auto-batching and is mutually exclusive with drop_last",
            "drop_last",
            drop_last,
            "False with batch_size=None (there are no batches to drop)",
            "drop drop_last=",
        )
    if batch_size is not None and batch_sampler is None and not isinstance(drop_last, bool):
        # torch's BatchSampler refuses it at construction; rd's own tail logic must not see a truthy 2 or "no"
        raise torch_rule(
            f"drop_last should be a boolean value, but got drop_last={drop_last}",
            "drop_last",
            drop_last,
            "True or False",
            "pass drop_last=True or drop_last=False",
        )


def check_kinds(collate_fn: Any, generator: Any, elastic: Any, shuffle: Any = None) -> None:
    """Arguments torch would only trip over at the first batch (or, for ``elastic`` and ``shuffle``, a
    truthy string silently read as True: torch shuffles on ``shuffle="False"``) are refused here, before
    anything is built (torch is imported only to check a generator that was passed: the resolver stays
    torch-free otherwise)."""
    if shuffle is not None and not isinstance(shuffle, (bool, np.bool_)):
        raise ConfigTypeError(
            describe("shuffle", shuffle, "True, False or None", "pass shuffle=True or shuffle=False (not a string)")
        )
    if collate_fn is not None and not callable(collate_fn):
        raise ConfigTypeError(
            describe("collate_fn", collate_fn, "a function of a list of samples, or None", "pass a callable or None")
        )
    if generator is not None:
        import torch

        if not isinstance(generator, torch.Generator):
            raise ConfigTypeError(
                describe("generator", generator, "a torch.Generator or None", "pass seed=1234 (or a torch.Generator)")
            )
    if not isinstance(elastic, (bool, np.bool_)):
        raise ConfigTypeError(describe("elastic", elastic, "True or False", "pass elastic=True or elastic=False"))
