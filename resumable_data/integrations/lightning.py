"""``ResumableDataModule``: a ``LightningDataModule`` whose train loader resumes mid-epoch by seek.

Algorithm. ``train_dataloader()`` builds ``rd.DataLoader(dataset, **loader_kwargs)`` inside the
launched process (after the process group exists, so ``rd`` shards over it) and hands Lightning
a thin :class:`LightningLoader` around it. That object is not a ``torch.utils.data.DataLoader``,
so Lightning leaves it alone (no ``DistributedSampler`` is injected whatever
``use_distributed_sampler`` says: ``rd`` shards itself). Lightning's data fetcher pulls one batch
ahead only from loaders without a length; ``rd.DataLoader`` has one, so at every checkpoint the
loader has delivered exactly the batches Lightning trained on (``state_dict()`` checks that the
fetcher's buffer is empty and refuses otherwise: a prefetched batch would be lost). For the same
reason an epoch-end state is taken before the pass ended (``end_of_pass``); loading one closes
that empty rest of pass at once, so the next ``iter()`` is the next epoch, as Lightning counts.
The state goes into the checkpoint twice, both plain JSON types: Lightning's own ``combined_loader`` entry (restored when it restarts mid-epoch) and this
data module's ``state_dict()`` (restored on every ``fit(ckpt_path=...)``, also after an
epoch-end checkpoint, when Lightning does not restore loader states).

Guarantee. ``Trainer.fit(model, datamodule=dm, ckpt_path=...)`` trains on the same batches, in
the same order, as a run that never stopped, on one process or several (``ddp``/``ddp_spawn``).
Each pass of the loader is one Lightning epoch; at each pass's first batch its epoch is checked
against ``trainer.current_epoch`` (a mismatch, e.g. under ``limit_train_batches``, is refused).

Not covered: Lightning's checkpoints hold no global RNG states, so dropout masks after a resume
differ from an uninterrupted run's unless the model saves them; the loader's own randomness
(shuffle, per-sample keys) needs none.

Cost of a restore. A seek (a few integers); nothing is added per batch.

Lightning internals read: ``trainer.fit_loop._data_fetcher.batches`` (the prefetch buffer; its
absence means no prefetch). Tested with lightning 2.6.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import lightning.pytorch as pl

from resumable_data.errors import ConfigError, ResumeError, describe
from resumable_data.loader import DataLoader

__all__ = ["LightningLoader", "ResumableDataModule"]

#: key of the loader state inside this data module's ``state_dict()``
K_LOADER = "rd_loader"


class LightningLoader:
    """What ``ResumableDataModule.train_dataloader()`` returns: ``loader``'s batches, its length,
    and its state, checked against Lightning's epoch count and prefetch buffer (see the module docs)."""

    def __init__(self, loader: DataLoader, module: ResumableDataModule) -> None:
        self.loader = loader
        self._module = module

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        # checked at the first pull, not at iter(): a restart at an epoch's end makes an iterator
        # while Lightning still counts the ending epoch, and never pulls from it
        it = iter(self.loader)
        for i, batch in enumerate(it):
            if i == 0:
                self._check_epoch(batch_epoch=self.loader.epoch)
            yield batch

    def _buffered(self) -> int:
        trainer = self._module._trainer_or_none()
        fetcher = getattr(getattr(trainer, "fit_loop", None), "_data_fetcher", None)
        return len(getattr(fetcher, "batches", ()) or ())

    def _check_epoch(self, batch_epoch: int) -> None:
        trainer = self._module._trainer_or_none()
        if trainer is not None and batch_epoch != trainer.current_epoch:
            raise ResumeError(describe(
                "trainer.current_epoch", trainer.current_epoch, f"the loader's epoch {batch_epoch} (a batch of it "
                "was just delivered): one loader pass is one Lightning epoch",
                "leave limit_train_batches at 1.0 and resume with the checkpoint's loader settings"))

    def state_dict(self) -> dict[str, Any]:
        """The loader's state; refused while Lightning's fetcher holds batches it pulled but has
        not handed to training (the state would count them as consumed)."""
        lag = self._buffered()
        if lag:
            raise ResumeError(describe(
                "Lightning's prefetch buffer", f"{lag} batch(es)", "empty when a checkpoint is saved (Lightning "
                "does not prefetch from a loader with a length, as rd.DataLoader is)", "report this with your "
                "lightning version; meanwhile save checkpoints at batch or epoch ends (ModelCheckpoint)"))
        return self.loader.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loader.load_state_dict(state)
        if self.loader.epoch != self.loader.step_info().epoch:
            # saved right after an epoch's last batch (a sized loader is never asked for one more):
            # close that epoch's empty rest of pass now, so the next iter() is the next epoch
            for _ in self.loader:
                raise ResumeError(describe("state", "a batch in a finished pass", "an empty pass",
                                           "report this: the state's end_of_pass flag disagrees with its cursor"))


class ResumableDataModule(pl.LightningDataModule):
    """``ResumableDataModule(dataset, **loader_kwargs)``: the train loader is
    ``rd.DataLoader(dataset, **loader_kwargs)``, built in each launched process, resumed exactly by
    ``Trainer.fit(..., ckpt_path=...)``. ``val_dataloader`` etc. are yours to add in a subclass.

    ``dataset`` and ``loader_kwargs`` must pickle for ``strategy="ddp_spawn"`` (an
    ``rd.ArrowShards`` does)."""

    def __init__(self, dataset: Any, **loader_kwargs: Any) -> None:
        super().__init__()
        if "batch_size" not in loader_kwargs:
            raise ConfigError(describe("batch_size", None, "the per-process batch size", "pass batch_size=32"))
        self.dataset = dataset
        self.loader_kwargs = loader_kwargs
        self._train: LightningLoader | None = None
        self._pending: dict[str, Any] | None = None

    def _trainer_or_none(self) -> Any:
        return getattr(self, "trainer", None)

    def train_dataloader(self) -> LightningLoader:
        trainer = self._trainer_or_none()
        if trainer is not None and trainer.limit_train_batches not in (1.0, None):
            raise ConfigError(describe(
                "limit_train_batches", trainer.limit_train_batches, "1.0 (one loader pass is one epoch)",
                "drop limit_train_batches, or shrink the dataset"))
        self._train = LightningLoader(DataLoader(self.dataset, **self.loader_kwargs), self)
        if self._pending is not None:
            self._train.load_state_dict(self._pending)
            self._pending = None
        return self._train

    @property
    def rd_loader(self) -> DataLoader | None:
        """The ``rd.DataLoader`` of the current fit (None before ``train_dataloader()``)."""
        return None if self._train is None else self._train.loader

    def state_dict(self) -> dict[str, Any]:
        return {} if self._train is None else {K_LOADER: self._train.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if K_LOADER not in state_dict:
            raise ResumeError(describe(
                "checkpoint", sorted(state_dict), f"the {K_LOADER!r} entry ResumableDataModule saves",
                "resume from a checkpoint saved with ResumableDataModule"))
        if self._train is not None:
            self._train.load_state_dict(state_dict[K_LOADER])
        else:
            self._pending = state_dict[K_LOADER]
