"""``prepare_loader``: an ``rd.DataLoader`` under Hugging Face ``accelerate``, checkpointed as JSON.

What ``accelerator.prepare`` does with it. ``prepare`` wraps only ``torch.utils.data.DataLoader``
instances (in its ``DataLoaderShard``/``DataLoaderDispatcher``); an ``rd.DataLoader`` is not one,
so ``prepare(model, optimizer, loader)`` returns the loader unchanged and ``rd``'s own sharding
(over the process group accelerate set up) stays intact. Batches stay on the CPU: move them with
``.to(accelerator.device)`` (accelerate's own loaders do that for you).

Algorithm. :func:`prepare_loader` checks that the loader shards over the accelerator's processes
(``world_size == num_processes``, ``rank == process_index``; a loader built before the process
group existed would read every record on every rank) and registers two accelerate hooks: before
``save_state(dir)`` the main process writes ``dir/rd_loader_state.json``; before
``load_state(dir)`` every process reads it and seeks. The state is JSON read with ``json``; it is
never unpickled (``register_for_checkpointing(loader)`` works too, since the loader has
``state_dict``/``load_state_dict``, but accelerate reads those files back through ``torch.load`` with
unpickling allowed).

Guarantee. ``save_state``/``load_state`` at an optimizer step resume the stream exactly: the
same batches on every rank as a run that never stopped (accelerate restores the RNG states).

Cost. A few hundred bytes written per ``save_state``; a seek per ``load_state``.
"""

from __future__ import annotations

import json
import logging
import os
import warnings
from pathlib import Path
from typing import Any

from resumable_data._io import atomic_write
from resumable_data.errors import ConfigError, ResumeError, describe
from resumable_data.integrations._files import check_pinned, read_loader_state, write_loader_state
from resumable_data.loader import DataLoader

__all__ = ["COMPLETE_FILE", "latest_complete_state", "prepare_loader"]

log = logging.getLogger(__name__)

#: Written into a ``save_state`` folder after accelerate wrote everything else.
COMPLETE_FILE = "rd_complete.json"
_COMPLETE = {"format": "resumable_data.accelerate_complete", "schema_version": 1}


def _is_complete(folder: Path) -> bool:
    try:
        return json.loads((folder / COMPLETE_FILE).read_text()) == _COMPLETE
    except (OSError, ValueError):
        return False


def latest_complete_state(root: str | os.PathLike) -> Path | None:
    """The newest folder under ``root`` that a ``save_state`` finished (it holds
    ``rd_complete.json``, written after accelerate's own files), or ``None``. Newest: the
    largest number in the folder name (``ckpt-40``, ``step_40``, ``checkpoint_3``), else the latest
    modification time. Each folder left out because a save into it was interrupted is logged
    (``logging``, at WARNING) by name."""
    root = Path(root)
    if not root.is_dir():
        return None
    done = []
    for p in sorted(root.iterdir()):
        if not p.is_dir():
            continue
        if not _is_complete(p):
            log.warning("resumable_data: skipping %s: a save_state into it did not finish (no %s)", p, COMPLETE_FILE)
            continue
        digits = "".join(c if c.isdigit() else " " for c in p.name).split()
        done.append(((int(digits[-1]) if digits else -1), p.stat().st_mtime, p))
    return max(done)[2] if done else None


def prepare_loader(
    accelerator: Any,
    loader: DataLoader,
    *,
    allow_unpinned: bool = False,
    on_uncommitted: Any = None,
    on_batch_change: Any = None,
    label: Any = None,
) -> DataLoader:
    """Check ``loader``'s sharding against ``accelerator`` and save/load its state with
    ``accelerator.save_state``/``load_state`` (as ``rd_loader_state.json``); returns ``loader``.

    ``allow_unpinned``, ``on_uncommitted``, ``on_batch_change`` and ``label`` are passed to
    ``loader.load_state_dict`` at every ``load_state``. A loader over a dataset without a pinned
    version is refused here unless ``allow_unpinned=True`` (pass ``dataset_version=`` to the loader
    instead), so a run never trains first and learns at its first resume that it cannot resume.

    It also makes two accelerate habits safe: ``accelerator.skip_first_batches(loader, n)``
    returns ``loader`` unchanged (the loader already resumed by seeking; skipping again would drop
    ``n`` batches), with a log line, or a warning when ``n`` is not the loader's position in its
    epoch; and every ``save_state`` ends by writing ``rd_complete.json``, so a folder whose save
    was killed is refused by ``load_state`` (naming the folder and the newest complete one) and
    skipped by :func:`latest_complete_state`."""
    if not isinstance(loader, DataLoader):
        raise ConfigError(
            describe(
                "loader",
                type(loader).__name__,
                "an rd.DataLoader",
                "pass the rd.DataLoader itself (not one accelerator.prepare wrapped)",
            )
        )
    check_pinned(loader, allow_unpinned, "prepare_loader")
    s = loader.sharding
    if (s.world_size, s.rank) != (accelerator.num_processes, accelerator.process_index):
        raise ConfigError(
            describe(
                "loader.sharding",
                f"world_size={s.world_size}, rank={s.rank}",
                f"world_size={accelerator.num_processes}, "
                f"rank={accelerator.process_index} (the accelerator's processes)",
                "build the rd.DataLoader after "
                "Accelerator() (which sets up the process group), or pass sharding=rd.Sharding(...) to match",
            )
        )
    options = {
        "allow_unpinned": allow_unpinned,
        "on_uncommitted": on_uncommitted,
        "label": label,
        "on_batch_change": on_batch_change,
    }
    loader.validate_state_dict(loader.snapshot().to_dict(), **options)  # the options are checked now

    def save(models: Any, weights: Any, output_dir: str) -> None:
        state = loader.state_dict()  # every process (commits delivered batches); identical on all
        if accelerator.is_main_process:
            marker = Path(output_dir) / COMPLETE_FILE
            if marker.exists():  # a save into a folder that held one: incomplete until it ends again
                marker.unlink()
            write_loader_state(output_dir, state)

    def load(models: Any, input_dir: str) -> None:
        folder = Path(input_dir)
        if not _is_complete(folder):
            newest = latest_complete_state(folder.parent)
            raise ResumeError(
                describe(
                    "load_state",
                    str(folder),
                    f"a folder a save_state finished (it holds {COMPLETE_FILE}); a kill "
                    "inside save_state left this one incomplete",
                    f"load the newest complete one, {newest}"
                    if newest
                    else "start fresh: no complete save_state folder exists beside it",
                )
            )
        loader.load_state_dict(read_loader_state(folder), **options)

    original_save = accelerator.save_state

    def save_state(*args: Any, **kwargs: Any) -> Any:
        where = original_save(*args, **kwargs)
        accelerator.wait_for_everyone()
        if accelerator.is_main_process and where is not None:
            atomic_write(Path(where) / COMPLETE_FILE, json.dumps(_COMPLETE).encode(), durable=True)
        return where

    original_skip = accelerator.skip_first_batches

    def skip_first_batches(dataloader: Any, num_batches: int = 0) -> Any:
        if dataloader is not loader:
            return original_skip(dataloader, num_batches=num_batches)
        at = loader.step_info().step_in_epoch if num_batches else 0
        if num_batches and num_batches != at:
            warnings.warn(
                f"accelerator.skip_first_batches(loader, {num_batches}): the rd.DataLoader resumed by "
                f"seeking and is at batch {at} of its epoch; it is returned unchanged (nothing skipped "
                "twice); remove the call",
                RuntimeWarning,
                stacklevel=2,
            )
        elif num_batches:
            log.info(
                "resumable_data: skip_first_batches(loader, %d) returns the rd.DataLoader unchanged: it "
                "already resumed by seeking",
                num_batches,
            )
        return loader

    accelerator.save_state = save_state
    accelerator.skip_first_batches = skip_first_batches
    accelerator.register_save_state_pre_hook(save)
    accelerator.register_load_state_pre_hook(load)
    return loader
