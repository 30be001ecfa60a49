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

Global generators. Lightning's checkpoints hold no global RNG states, so dropout masks after a
resume would differ from an uninterrupted run's. The data module's ``state_dict()`` therefore also
holds the Python, NumPy and torch (and initialized CUDA) generator states as plain lists and ints
(Lightning loads checkpoints with ``weights_only=True``), taken when the checkpoint is saved, and
``load_state_dict`` sets them back (``save_rng=False`` leaves them out).

Pinning. A dataset without a pinned version (a plain torch dataset without ``dataset_version=``)
is refused when the data module is built, not at the first resume; ``allow_unpinned=True``
accepts it (and is passed to the loader's restore with the other resume options).

Validation. ``val_dataset=`` (with ``val_loader_kwargs=``) gives ``val_dataloader()`` an
``rd.DataLoader`` that starts every validation pass at its first batch (sharded over the ranks,
like the train loader).

Cost of a restore. A seek (a few integers); nothing is added per batch.

Lightning internals read: ``trainer.fit_loop._data_fetcher.batches`` (the prefetch buffer; its
absence means no prefetch). Tested with lightning 2.6.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import lightning.pytorch as pl

from resumable_data.checkpoint import rng as rng_mod
from resumable_data.errors import ConfigError, ResumableDataError, ResumeError, describe
from resumable_data.integrations._files import check_pinned
from resumable_data.loader import DataLoader
from resumable_data.plan import Sharding

__all__ = ["EvalLoader", "LightningLoader", "ResumableDataModule"]

#: key of the loader state inside this data module's ``state_dict()``
K_LOADER = "rd_loader"
#: key of the global generators' states (plain lists) inside this data module's ``state_dict()``
K_RNG = "rd_rng"


class EvalLoader:
    """What ``ResumableDataModule.val_dataloader()`` returns: every pass starts at the loader's
    first batch (a validation pass never continues a cut-short one)."""

    def __init__(self, loader: DataLoader) -> None:
        self.loader = loader

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        self.loader.reset()
        return iter(self.loader)


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
            raise ResumeError(
                describe(
                    "trainer.current_epoch",
                    trainer.current_epoch,
                    f"the loader's epoch {batch_epoch} (a batch of it "
                    "was just delivered): one loader pass is one Lightning epoch",
                    "leave limit_train_batches at 1.0 and resume with the checkpoint's loader settings",
                )
            )

    def state_dict(self) -> dict[str, Any]:
        """The loader's state; refused while Lightning's fetcher holds batches it pulled but has
        not handed to training (the state would count them as consumed)."""
        lag = self._buffered()
        if lag:
            raise ResumeError(
                describe(
                    "Lightning's prefetch buffer",
                    f"{lag} batch(es)",
                    "empty when a checkpoint is saved (Lightning "
                    "does not prefetch from a loader with a length, as rd.DataLoader is)",
                    "report this with your "
                    "lightning version; meanwhile save checkpoints at batch or epoch ends (ModelCheckpoint)",
                )
            )
        return self.loader.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Seek the loader to ``state`` (with the data module's resume options)."""
        self.loader.load_state_dict(state, **self._module._resume_options)
        if self.loader.epoch != self.loader.step_info().epoch:
            # saved right after an epoch's last batch (a sized loader is never asked for one more):
            # close that epoch's empty rest of pass now, so the next iter() is the next epoch
            for _ in self.loader:
                raise ResumeError(
                    describe(
                        "state",
                        "a batch in a finished pass",
                        "an empty pass",
                        "report this: the state's end_of_pass flag disagrees with its cursor",
                    )
                )


class ResumableDataModule(pl.LightningDataModule):
    """``ResumableDataModule(dataset, **loader_kwargs)``: the train loader is
    ``rd.DataLoader(dataset, **loader_kwargs)``, built in each launched process, resumed exactly by
    ``Trainer.fit(..., ckpt_path=...)``, with the global generators saved and restored (dropout
    continues exactly).

    ``allow_unpinned``, ``on_uncommitted``, ``on_batch_change`` and ``label`` are passed to the
    loader's restore; a dataset without a pinned version is refused here unless
    ``allow_unpinned=True`` (or ``dataset_version=`` in ``loader_kwargs``). ``save_rng=False``
    leaves the global generators out of the checkpoint. ``val_dataset`` (with
    ``val_loader_kwargs``, default: the train ``batch_size``, in order) adds a ``val_dataloader``.

    ``dataset`` and ``loader_kwargs`` must pickle for ``strategy="ddp_spawn"`` (an
    ``rd.ArrowShards`` does)."""

    def __init__(
        self,
        dataset: Any,
        *,
        allow_unpinned: bool = False,
        on_uncommitted: Any = None,
        on_batch_change: Any = None,
        label: Any = None,
        save_rng: bool = True,
        val_dataset: Any = None,
        val_loader_kwargs: dict[str, Any] | None = None,
        **loader_kwargs: Any,
    ) -> None:
        super().__init__()
        if "batch_size" not in loader_kwargs:
            raise ConfigError(describe("batch_size", None, "the per-process batch size", "pass batch_size=32"))
        if not isinstance(save_rng, bool):
            raise ConfigError(describe("save_rng", save_rng, "True or False", "pass save_rng=True (the default)"))
        probe = DataLoader(dataset, **{"sharding": Sharding(1, 0), **loader_kwargs})  # every argument checked now
        check_pinned(probe, allow_unpinned, "ResumableDataModule")
        self._resume_options = {
            "allow_unpinned": allow_unpinned,
            "on_uncommitted": on_uncommitted,
            "on_batch_change": on_batch_change,
            "label": label,
        }
        probe.validate_state_dict(probe.snapshot().to_dict(), **self._resume_options)  # the options, checked
        del probe
        self.dataset = dataset
        self.loader_kwargs = loader_kwargs
        self.save_rng = save_rng
        self.val_dataset = val_dataset
        self.val_loader_kwargs = dict(val_loader_kwargs or {"batch_size": loader_kwargs["batch_size"]})
        self._train: LightningLoader | None = None
        self._pending: dict[str, Any] | None = None

    def _trainer_or_none(self) -> Any:
        return getattr(self, "trainer", None)

    def train_dataloader(self) -> LightningLoader:
        """The train loader: ``rd.DataLoader(dataset, **loader_kwargs)`` built in this process
        (sharded over its process group), seeked to a pending checkpoint state if there is one."""
        trainer = self._trainer_or_none()
        if trainer is not None and trainer.limit_train_batches not in (1.0, None):
            raise ConfigError(
                describe(
                    "limit_train_batches",
                    trainer.limit_train_batches,
                    "1.0 (one loader pass is one epoch)",
                    "drop limit_train_batches, or shrink the dataset",
                )
            )
        self._train = LightningLoader(DataLoader(self.dataset, **self.loader_kwargs), self)
        if self._pending is not None:
            self._train.load_state_dict(self._pending)
            self._pending = None
        return self._train

    def val_dataloader(self) -> EvalLoader | list:
        """An ``rd.DataLoader`` over ``val_dataset`` that starts every pass at its first batch
        (``[]``, no validation, without a ``val_dataset``)."""
        if self.val_dataset is None:
            return []
        return EvalLoader(DataLoader(self.val_dataset, **self.val_loader_kwargs))

    @property
    def rd_loader(self) -> DataLoader | None:
        """The ``rd.DataLoader`` of the current fit (None before ``train_dataloader()``)."""
        return None if self._train is None else self._train.loader

    def state_dict(self) -> dict[str, Any]:
        """The train loader's state and (``save_rng``) the global generators' states, all plain
        JSON types (Lightning loads checkpoints with ``weights_only=True``)."""
        out: dict[str, Any] = {} if self._train is None else {K_LOADER: self._train.state_dict()}
        if self.save_rng and out:
            out[K_RNG] = rng_mod.to_json(rng_mod.capture())
        return out

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Seek the train loader (now, or when ``train_dataloader()`` builds it) and set the global
        generators back to the saved states."""
        if K_LOADER not in state_dict:
            raise ResumeError(
                describe(
                    "checkpoint",
                    sorted(state_dict),
                    f"the {K_LOADER!r} entry ResumableDataModule saves",
                    "resume from a checkpoint saved with ResumableDataModule",
                )
            )
        rng = None
        if self.save_rng and K_RNG in state_dict:
            try:
                rng = rng_mod.from_json(state_dict[K_RNG])
            except ResumableDataError:
                raise
            except Exception as e:
                raise ResumeError(
                    describe(
                        f"checkpoint[{K_RNG!r}]",
                        type(e).__name__,
                        "the generator states ResumableDataModule saved",
                        "resume from an unmodified checkpoint",
                    )
                ) from e
        if self._train is not None:
            self._train.load_state_dict(state_dict[K_LOADER])
        else:
            self._pending = state_dict[K_LOADER]
        if rng is not None:
            rng_mod.restore(rng)
