"""``ResumableTrainer``: a Hugging Face ``Trainer`` that resumes its data by seek, not by skipping.

Algorithm. ``get_train_dataloader`` builds an ``rd.DataLoader`` from the Trainer's own arguments
(``per_device_train_batch_size``, ``data_seed`` else ``seed``, ``dataloader_drop_last``,
``dataloader_num_workers``, ``dataloader_pin_memory``, ``dataloader_persistent_workers``,
``dataloader_prefetch_factor``, ``gradient_accumulation_steps``; the world size from the process
group) and does not hand it to ``accelerator.prepare`` (``rd`` shards itself; the Trainer moves
every batch to the device in ``training_step``). Every ``_save_checkpoint`` first writes the
loader's state (``rd_loader_state.json``, a few hundred bytes of JSON) into the checkpoint folder.
``train(resume_from_checkpoint=...)`` loads that state into the loader before the resumed epoch's
first batch and lets the Trainer run its resume bookkeeping (step counters, RNG restore) while its
``skip_first_batches`` passes this loader through unchanged: nothing is re-read or re-sampled.

Guarantee. The resumed run trains on the same batches, in the same order, as a run that never
stopped; before the first batch the loader's position is checked against the Trainer's
(epoch and batch in epoch derived from ``global_step``), and a mismatch (another
``gradient_accumulation_steps``, batch size or dataset) raises :class:`rd.ResumeError`.

Cost of a restore. Reading one small JSON file and a seek: the first step after a resume costs
what a fresh start's first step costs, at any step (``benchmarks/bench_integrations.py``).

Extension points used (transformers 5.x): ``get_train_dataloader``, ``_save_checkpoint``,
``_run_epoch`` (keyword arguments ``epoch``, ``train_dataloader``, ``resume_from_checkpoint``,
``epochs_trained``, ``steps_trained_in_current_epoch``) and the module attribute
``transformers.trainer.skip_first_batches``; a transformers without them is refused at
construction.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import re
from collections.abc import Iterable, Iterator, Sized
from typing import Any

import transformers
import transformers.trainer as hf_trainer
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from resumable_data.errors import ConfigError, ResumeError, describe
from resumable_data.integrations._files import read_loader_state, write_loader_state
from resumable_data.loader import DataLoader

__all__ = ["ResumableTrainer", "latest_complete_checkpoint"]

log = logging.getLogger(__name__)
#: Written last by the Trainer's own save: a folder without it was interrupted.
TRAINER_STATE_FILE = "trainer_state.json"

_SHUFFLE = {"random": True, "sequential": False}
_RESUME_OPTIONS = frozenset({"allow_unpinned", "on_uncommitted", "on_batch_change", "label"})
_HOOKS = ("get_train_dataloader", "_save_checkpoint", "_run_epoch", "_get_output_dir")


class ResumableTrainer(transformers.Trainer):
    """A ``transformers.Trainer`` whose train loader is an ``rd.DataLoader`` (same arguments as
    ``Trainer``, plus ``rd_loader_kwargs``: extra keyword arguments for ``rd.DataLoader``, such as
    ``shuffle_window=`` or ``transform=``).

    ``train_dataset`` may be an ``rd.ArrowShards`` (pinned: a changed dataset is refused on
    resume), a ``datasets.Dataset`` (read zero-copy from its Arrow files via
    ``rd.ArrowShards.from_hf``, after the Trainer's own ``remove_unused_columns``) or any map-style
    torch dataset (pass ``rd_loader_kwargs={"dataset_version": ...}`` to pin it; without a pinned
    version it is refused here, unless ``rd_resume_options={"allow_unpinned": True}``).
    ``rd_resume_options`` (``allow_unpinned``, ``on_uncommitted``, ``on_batch_change``, ``label``)
    are passed to the loader's ``load_state_dict`` on resume. ``data_collator`` gets a list of
    per-record dicts, as with torch's ``DataLoader``.
    """

    def __init__(
        self,
        *args: Any,
        rd_loader_kwargs: dict[str, Any] | None = None,
        rd_resume_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        # transformers' Trainer hooks differ by version: the ones this subclass overrides must exist
        missing = [h for h in _HOOKS if not hasattr(transformers.Trainer, h)]
        if missing or not hasattr(hf_trainer, "skip_first_batches"):
            raise ConfigError(
                describe(
                    "transformers",
                    transformers.__version__,
                    "a Trainer with "
                    f"{', '.join(_HOOKS)} and transformers.trainer.skip_first_batches (transformers 5.x); missing "
                    f"{missing or ['skip_first_batches']}",
                    "pip install -c constraints.txt -e '.[integrations]'",
                )
            )
        super().__init__(*args, **kwargs)
        a = self.args
        if a.ignore_data_skip:
            raise ConfigError(
                describe(
                    "ignore_data_skip",
                    True,
                    "False: ResumableTrainer resumes by seek, which costs nothing, and "
                    "ignore_data_skip=True would train on the resumed epoch's first batches again",
                    "drop ignore_data_skip=True",
                )
            )
        strategy = getattr(a, "train_sampling_strategy", "random")
        if strategy not in _SHUFFLE:
            raise ConfigError(
                describe(
                    "train_sampling_strategy",
                    strategy,
                    f"one of {sorted(_SHUFFLE)} (rd orders records itself)",
                    "use 'random' (rd_loader_kwargs={'shuffle_window': n} for a windowed shuffle) or 'sequential'",
                )
            )
        self.rd_loader_kwargs = dict(rd_loader_kwargs or {})
        self.rd_resume_options = dict(rd_resume_options or {})
        unknown = sorted(set(self.rd_resume_options) - _RESUME_OPTIONS)
        if unknown:
            raise ConfigError(
                describe(
                    "rd_resume_options",
                    unknown,
                    f"keys among {sorted(_RESUME_OPTIONS)} (passed to the loader's load_state_dict on resume)",
                    "drop the other keys",
                )
            )
        self._check_pinned()
        self._rd_loader: DataLoader | None = None

    def _check_pinned(self) -> None:
        """Refuse, now, a train dataset whose resume would be refused for want of a pinned version."""
        import datasets

        from resumable_data.sources import ArrowShards
        from resumable_data.sources.mixture import Mixture

        ds, allow = self.train_dataset, self.rd_resume_options.get("allow_unpinned", False)
        if not isinstance(allow, bool):
            raise ConfigError(
                describe(
                    "rd_resume_options['allow_unpinned']",
                    allow,
                    "True or False",
                    "pass True to resume over an unpinned dataset",
                )
            )
        if ds is None or allow or isinstance(ds, datasets.Dataset) or self.rd_loader_kwargs.get("dataset_version"):
            return
        if isinstance(ds, (ArrowShards, Mixture)) and ds.pinned:
            return
        if isinstance(ds, datasets.IterableDataset):
            return  # refused with its own reason when the loader is built
        raise ConfigError(
            describe(
                "train_dataset",
                type(ds).__name__,
                "a dataset with a pinned version (rd.ArrowShards, a datasets.Dataset, "
                "or a torch dataset with a declared version): a resume checks that the data did not change",
                "pass rd_loader_kwargs={'dataset_version': '<a name for this data>'}, or "
                "rd_resume_options={'allow_unpinned': True} to resume without that check",
            )
        )

    # -- the loader ---------------------------------------------------------------------------------
    @property
    def rd_loader(self) -> DataLoader | None:
        """The ``rd.DataLoader`` of the current ``train()`` (None before the first)."""
        return self._rd_loader

    def _rd_dataset(self) -> tuple[Any, Any]:
        """(dataset for rd.DataLoader, collate_fn): the Trainer's own column removal first."""
        import datasets

        from resumable_data.sources import ArrowShards

        dataset = self.train_dataset
        if isinstance(dataset, datasets.Dataset):
            # read the dataset's own files; the columns the model does not take are dropped per
            # record before the collator (the Trainer's remove_unused_columns, without editing the
            # table: the version follows the files)
            return ArrowShards.from_hf(dataset, version_of="rows"), self._get_collator_with_removed_columns(
                self.data_collator, description="training"
            )
        if isinstance(dataset, datasets.IterableDataset) or (
            isinstance(dataset, Iterable) and not isinstance(dataset, Sized)
        ):
            raise ConfigError(
                describe(
                    "train_dataset",
                    type(dataset).__name__,
                    "a map-style dataset (rd.ArrowShards, datasets.Dataset, "
                    "a torch Dataset with __len__): a position must name a record",
                    "materialise the stream as Arrow shards (rd.write_arrow_shards) or use transformers.Trainer",
                )
            )
        return dataset, self._get_collator_with_removed_columns(self.data_collator, description="training")

    def get_train_dataloader(self) -> DataLoader:
        """An ``rd.DataLoader`` built from the Trainer's arguments (see the module docs)."""
        if self.train_dataset is None:
            raise ConfigError(describe("train_dataset", None, "a dataset", "pass train_dataset= to the Trainer"))
        a = self.args
        dataset, collate = self._rd_dataset()
        kwargs: dict[str, Any] = dict(
            batch_size=self._train_batch_size,
            shuffle=_SHUFFLE[getattr(a, "train_sampling_strategy", "random")],
            seed=a.data_seed if a.data_seed is not None else a.seed,
            drop_last=a.dataloader_drop_last,
            num_workers=a.dataloader_num_workers,
            collate_fn=collate,
            pin_memory=a.dataloader_pin_memory,
            persistent_workers=a.dataloader_persistent_workers and a.dataloader_num_workers > 0,
            prefetch_factor=a.dataloader_prefetch_factor if a.dataloader_num_workers > 0 else None,
            in_order=getattr(a, "dataloader_in_order", True),
            accumulation_steps=a.gradient_accumulation_steps,
        )
        kwargs.update(self.rd_loader_kwargs)
        self._rd_loader = DataLoader(dataset, **kwargs)
        return self._rd_loader

    # -- checkpoints ----------------------------------------------------------------------------------
    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any) -> Any:
        """``Trainer.train``. ``resume_from_checkpoint=True`` resumes from the newest *complete*
        checkpoint of ``output_dir`` (it holds ``trainer_state.json``, written last: a save killed
        half way leaves a folder without it, which is skipped with a ``logging`` warning naming it) and starts fresh when there is none (the first run of a script that
        always passes ``True``). A folder given by path that is incomplete is refused, naming the
        newest complete one."""
        if resume_from_checkpoint is True:
            output_dir = self.args.output_dir  # typed Optional; TrainingArguments fills in a default
            resume_from_checkpoint = None if output_dir is None else latest_complete_checkpoint(output_dir)
            if resume_from_checkpoint is None:
                log.info("resumable_data: no complete checkpoint in %s: training starts fresh", self.args.output_dir)
        elif (
            isinstance(resume_from_checkpoint, (str, os.PathLike))
            and os.path.isdir(resume_from_checkpoint)
            and _why_incomplete(resume_from_checkpoint) is not None
        ):
            folder = os.fspath(resume_from_checkpoint)
            newest = latest_complete_checkpoint(os.path.dirname(os.path.abspath(folder)))
            raise ResumeError(
                describe(
                    "resume_from_checkpoint",
                    folder,
                    f"a complete checkpoint ({_why_incomplete(folder)}: a save was interrupted there)",
                    f"resume_from_checkpoint={newest!r}, the newest complete one"
                    if newest
                    else "resume_from_checkpoint=None: no complete checkpoint exists beside it",
                )
            )
        return super().train(resume_from_checkpoint, *args, **kwargs)

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        # the loader's state goes in first: whenever the Trainer's own files exist, it does too
        if self._rd_loader is not None:
            state = self._rd_loader.state_dict()  # every rank (commits in auto mode); identical on all
            if self.args.should_save:
                folder = os.path.join(
                    self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
                )
                write_loader_state(folder, state)
        super()._save_checkpoint(model, trial)

    def _run_epoch(self, *args: Any, **kwargs: Any) -> Any:
        a = inspect.signature(super()._run_epoch).bind(*args, **kwargs).arguments
        loader, resume = a.get("train_dataloader"), a.get("resume_from_checkpoint")
        if (
            loader is None
            or loader is not self._rd_loader
            or resume is None
            or a.get("epoch") != a.get("epochs_trained")
        ):
            return super()._run_epoch(*args, **kwargs)
        self._rd_restore(loader, resume, a["epochs_trained"], a["steps_trained_in_current_epoch"])
        with _pass_through(loader):
            return super()._run_epoch(*args, **kwargs)

    def _rd_restore(self, loader: DataLoader, folder: str, epoch: int, step_in_epoch: int) -> None:
        """Seek ``loader`` to the checkpoint's position and check it is where the Trainer resumes."""
        loader.load_state_dict(read_loader_state(folder), **self.rd_resume_options)
        if loader.epoch != loader.step_info().epoch:
            # saved right after an epoch's last batch: its (empty) rest of pass comes first; the
            # Trainer already counts the next epoch, so close that pass here
            for _ in loader:
                raise ResumeError(
                    describe(
                        "rd_loader_state",
                        "a batch in a finished pass",
                        "an empty pass",
                        "report this: the state's end_of_pass flag disagrees with its cursor",
                    )
                )
        info = loader.step_info()
        if (info.epoch, info.step_in_epoch) != (epoch, step_in_epoch):
            raise ResumeError(
                describe(
                    "resume_from_checkpoint",
                    folder,
                    f"a loader state at epoch {epoch}, batch {step_in_epoch} (where the "
                    f"Trainer resumes: global_step {self.state.global_step}, gradient_accumulation_steps "
                    f"{self.args.gradient_accumulation_steps}); the state is at epoch {info.epoch}, batch "
                    f"{info.step_in_epoch} of {info.steps_in_epoch}",
                    "resume with the batch size, accumulation steps and dataset the checkpoint was trained with",
                )
            )


def _why_incomplete(folder: str | os.PathLike) -> str | None:
    """What a checkpoint folder lacks to be resumed from, or None when it is complete."""
    # rd's file is written before the Trainer's own: a folder with trainer_state.json and without
    # rd_loader_state.json was written by another Trainer, and is refused when read, never skipped
    return None if os.path.isfile(os.path.join(folder, TRAINER_STATE_FILE)) else f"no {TRAINER_STATE_FILE}"


def latest_complete_checkpoint(output_dir: str | os.PathLike) -> str | None:
    """The newest ``checkpoint-N`` folder of ``output_dir`` that a save finished (it holds
    ``trainer_state.json``, which the Trainer writes after its other files and after
    ``rd_loader_state.json``), or None.
    Each newer folder left out is logged (``logging``, WARNING) by name, with what it lacks."""
    if not os.path.isdir(output_dir):
        return None
    found = sorted(
        (
            (int(m.group(1)), name)
            for name in os.listdir(output_dir)
            if (m := re.fullmatch(rf"{PREFIX_CHECKPOINT_DIR}-(\d+)", name))
            and os.path.isdir(os.path.join(output_dir, name))
        ),
        reverse=True,
    )
    for _, name in found:
        folder = os.path.join(output_dir, name)
        why = _why_incomplete(folder)
        if why is None:
            return folder
        log.warning("resumable_data: skipping %s: %s (a save was interrupted there)", folder, why)
    return None


@contextlib.contextmanager
def _pass_through(loader: DataLoader) -> Iterator[None]:
    """While the resumed epoch starts, the Trainer's ``skip_first_batches`` returns ``loader``
    unchanged (it is already at the resumed position) and wraps any other loader as before."""
    original = hf_trainer.skip_first_batches

    def skip_first_batches(dataloader: Any, num_batches: int = 0) -> Any:
        return dataloader if dataloader is loader else original(dataloader, num_batches)

    hf_trainer.skip_first_batches = skip_first_batches
    try:
        yield
    finally:
        hf_trainer.skip_first_batches = original
