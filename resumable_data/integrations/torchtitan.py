"""``TitanDataLoader``: an ``rd.DataLoader`` with torchtitan's data-loader interface.

torchtitan's trainer takes any ``BaseDataLoader``: a ``torch.distributed.checkpoint`` ``Stateful``
(``state_dict``/``load_state_dict``) whose ``__iter__`` yields ``(input_dict, labels)`` with the
tokens under ``input_dict["input"]``; its checkpointer saves the loader's ``state_dict()`` per
data-parallel rank through DCP. This module does not import torchtitan (it does not install beside
this project's pinned ``datasets``, see ``examples/torchtitan/README.md``); it meets that interface
by shape, and a subclass of torchtitan's ``BaseDataLoader`` can mix it in.

Algorithm. Over a packed ``rd.DataLoader`` (``packing=rd.Packing(...)``), each batch's
``input_ids`` becomes ``input_dict["input"]``, its ``labels`` the labels, and the other packed
fields (``position_ids``, ``cu_seqlens``, ...) ride along in ``input_dict``. ``state_dict()`` is
the loader's state (plain JSON types, a few hundred bytes, identical on every rank; torchtitan's
own loader stores a pickled blob of torchdata's state per rank) plus the data-parallel world size.

Guarantee. ``load_state_dict(state_dict())`` in a fresh process continues with the same batches
on every rank; on another data-parallel degree the stream continues as ``rd`` allows
(``elastic_reshard``), where torchtitan's own loader refuses.

Cost of a restore. A seek; the packing window of the resumed step is rebuilt as a pure function.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from resumable_data.errors import ConfigError, ResumeError, describe
from resumable_data.loader import DataLoader

__all__ = ["TitanDataLoader"]

#: keys of :meth:`TitanDataLoader.state_dict`
K_LOADER = "rd_loader"
K_WORLD = "world_size"


class TitanDataLoader:
    """``TitanDataLoader(loader)``: iterate ``(input_dict, labels)`` from ``loader`` (an
    ``rd.DataLoader``, packed or yielding dicts with ``input_key`` and ``label_key``)."""

    def __init__(self, loader: DataLoader, *, input_key: str = "input_ids", label_key: str = "labels") -> None:
        if not isinstance(loader, DataLoader):
            raise ConfigError(
                describe(
                    "loader",
                    type(loader).__name__,
                    "an rd.DataLoader",
                    "pass rd.DataLoader(..., packing=rd.Packing(seq_len=...))",
                )
            )
        self.loader, self.input_key, self.label_key = loader, input_key, label_key

    def __iter__(self) -> Iterator[tuple[dict[str, torch.Tensor], torch.Tensor]]:
        for batch in self.loader:
            if not isinstance(batch, dict) or self.input_key not in batch or self.label_key not in batch:
                raise ConfigError(
                    describe(
                        "batch",
                        sorted(batch) if isinstance(batch, dict) else type(batch).__name__,
                        f"a dict with {self.input_key!r} and {self.label_key!r}",
                        "use packing=rd.Packing(...) or pass input_key=/label_key= naming your columns",
                    )
                )
            inputs = {k: v for k, v in batch.items() if k not in (self.input_key, self.label_key)}
            inputs["input"] = batch[self.input_key]
            yield inputs, batch[self.label_key]

    def __len__(self) -> int:
        return len(self.loader)

    def state_dict(self) -> dict[str, Any]:
        """The loader's state and the world size it was taken on (JSON types, the same on every rank)."""
        return {K_LOADER: self.loader.state_dict(), K_WORLD: self.loader.sharding.world_size}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Seek the loader to ``state_dict`` (an empty one, torchtitan's fresh start, changes nothing)."""
        if not state_dict:  # torchtitan's convention: an empty state is a fresh start
            return
        if K_LOADER not in state_dict:
            raise ResumeError(
                describe(
                    "state_dict",
                    sorted(state_dict),
                    f"a dict with {K_LOADER!r} (from TitanDataLoader.state_dict)",
                    "resume from a checkpoint this loader wrote",
                )
            )
        self.loader.load_state_dict(state_dict[K_LOADER])
